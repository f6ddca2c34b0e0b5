"""The machine a benchmark ran on: its name in results files, and the CPU beside every timing."""
from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Optional


def _cpuinfo_field(prefix: str) -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_model() -> str:
    """The CPU's model name, as ``/proc/cpuinfo`` (else the platform) gives it.

    Returns:
        The model name, or ``"unknown CPU"``.
    """
    return _cpuinfo_field("model name") or platform.processor() or "unknown CPU"


def cpu_isa() -> str:
    """The widest vector instruction sets of this CPU that the kernels and torch use.

    Returns:
        The sets joined by ``+``, widest first (``AVX-512+AVX2+FMA``), ``SSE only``, or the machine
        type where the CPU's flags are not known.
    """
    flags = set(_cpuinfo_field("flags").split())
    if not flags:
        return platform.machine()
    names = [name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("fma", "FMA"),
                                     ("amx_tile", "AMX"), ("avx512_bf16", "AVX512-BF16")) if flag in flags]
    return "+".join(names) or "SSE only"


def cpu_short() -> str:
    """Model and widest vector instruction set, e.g. ``AMD EPYC, AVX-512`` (a table cell).

    Returns:
        The model and the first set of :func:`cpu_isa`.
    """
    isa = cpu_isa()
    return f"{cpu_model()}, {isa.split('+')[0]}"


def cpu_description() -> str:
    """The CPU in full, e.g. ``AMD EPYC (AVX-512+AVX2+FMA+AVX512-BF16), 2 cores``.

    Returns:
        The model, every set of :func:`cpu_isa` and the number of cores.
    """
    return f"{cpu_model()} ({cpu_isa()}), {os.cpu_count()} cores"


def machine_name(device: Optional[str] = None) -> str:
    """The machine's name in results files (``<benchmark>_<protocol>_<machine>.json``).

    For a GPU, its model (``nvidia-h200``); for the CPU, its torch thread count (``cpu2``), since
    the CPU timings of one host differ by their threads.

    Args:
        device: the device the benchmark measures (``"cpu"`` for a benchmark that runs on the CPU
            whatever is present); None for the first GPU where there is one, else the CPU.

    Returns:
        The name, lower case without spaces.
    """
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device)).replace(" ", "-").lower()
    return f"cpu{torch.get_num_threads()}"


def machine_description() -> str:
    """CPU, GPU, torch, torch-scatter and Python: the line that heads a table of timings.

    Returns:
        The line, its parts separated by semicolons.
    """
    import torch
    from torch_geometric.typing import WITH_TORCH_SCATTER

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (f"CPU {cpu_description()}; GPU {gpu}; torch {torch.__version__}; "
            f"torch-scatter {'present' if WITH_TORCH_SCATTER else 'absent'}; "
            f"Python {platform.python_version()}")
