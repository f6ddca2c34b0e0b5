"""Optional compiled kernels, built with the system's C++ compiler on first use (never at import).

``siren_library()`` compiles ``siren_step.cpp`` (``$CXX``, else ``g++``/``c++``, with
``-O3 -march=native -fopenmp``; about 3 s) into a cache folder and loads it with ctypes. The
library has a plain C ABI and includes no torch header, which keeps the build short enough
to happen inside a test run. The file name carries a hash of the source, the flags, the
compiler's version and this CPU's instruction sets, so a changed source or another machine
sharing the cache gets its own build.

Environment: ``NEURALGRAPH_KERNEL_CACHE`` (the folder; default
``$XDG_CACHE_HOME/neuralgraph/kernels`` or ``~/.cache/neuralgraph/kernels``) and ``CXX``.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
from pathlib import Path

SIREN_SOURCE = Path(__file__).with_name("siren_step.cpp")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17")


class KernelBuildError(RuntimeError):
    """The compiled kernel cannot be built or loaded; the message says why."""


def cache_dir() -> Path:
    if os.environ.get("NEURALGRAPH_KERNEL_CACHE"):
        return Path(os.environ["NEURALGRAPH_KERNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "neuralgraph" / "kernels"


def _cpu_features() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _compiler() -> str:
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not compiler:
        raise KernelBuildError(f"{SIREN_SOURCE.name}: no C++ compiler found (install g++ or set CXX)")
    return compiler


def build(source: Path, name: str) -> Path:
    """The shared library of ``source`` in the cache, compiled now if it is not there yet."""
    if not source.is_file():
        raise KernelBuildError(f"{source}: kernel source missing from the installed package")
    compiler = _compiler()
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise KernelBuildError(f"{source.name}: compiler {compiler!r} does not run ({err})") from err
    key = hashlib.sha256("\0".join([source.read_text(), *FLAGS, version, platform.machine(), _cpu_features()])
                         .encode()).hexdigest()[:16]
    path = cache_dir() / f"{name}-{key}.so"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # concurrent builds never share a file
    result = subprocess.run([compiler, *FLAGS, str(source), "-o", str(partial)], capture_output=True, text=True)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        message = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise KernelBuildError(f"{source.name}: {compiler} failed ({message})")
    os.replace(partial, path)
    return path


_siren = None


def siren_library() -> ctypes.CDLL:
    """``siren_step.cpp`` loaded (built on the first call of the process that needs it)."""
    global _siren
    if _siren is None:
        path = build(SIREN_SOURCE, "siren_step")
        try:
            library = ctypes.CDLL(str(path))
        except OSError as err:
            raise KernelBuildError(f"{path}: cannot be loaded ({err})") from err
        function = library.siren_loss_and_gradient
        function.restype = None
        function.argtypes = ([ctypes.c_int] * 5 + [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_float, ctypes.c_float]
                             + [ctypes.c_void_p] * 2 + [ctypes.c_int])
        _siren = library
    return _siren
