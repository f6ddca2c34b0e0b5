"""The machine a benchmark ran on, for the line printed beside every timing."""
from __future__ import annotations

import os
import platform
from pathlib import Path

import torch
from torch_geometric.typing import WITH_TORCH_SCATTER


def _cpuinfo_field(prefix: str) -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_model() -> str:
    return _cpuinfo_field("model name") or platform.processor() or "unknown CPU"


def cpu_isa() -> str:
    """The widest vector instruction sets of this CPU that the kernels and torch use."""
    flags = set(_cpuinfo_field("flags").split())
    if not flags:
        return platform.machine()
    names = [name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("fma", "FMA"),
                                     ("amx_tile", "AMX"), ("avx512_bf16", "AVX512-BF16")) if flag in flags]
    return "+".join(names) or "SSE only"


def cpu_short() -> str:
    """Model and widest vector instruction set, e.g. ``AMD EPYC, AVX-512`` (a table cell)."""
    isa = cpu_isa()
    return f"{cpu_model()}, {isa.split('+')[0]}"


def cpu_description() -> str:
    """E.g. ``AMD EPYC (AVX-512+AVX2+FMA+AVX512-BF16), 2 cores``."""
    return f"{cpu_model()} ({cpu_isa()}), {os.cpu_count()} cores"


def machine_description() -> str:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (f"CPU {cpu_description()}; GPU {gpu}; torch {torch.__version__}; "
            f"torch-scatter {'present' if WITH_TORCH_SCATTER else 'absent'}; "
            f"Python {platform.python_version()}")
