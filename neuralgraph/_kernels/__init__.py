"""Optional compiled kernels, built with the system's C++ compiler on first use (never at import).

``siren_library()`` compiles ``siren_step.cpp`` (``$CXX``, else ``g++``/``c++``, with
``-O3 -march=native -fopenmp``) into a cache folder and loads it with ctypes. The library has
a plain C ABI and includes no torch header, which keeps the build short enough to happen
inside a test run (docs/inr.md). The file name carries a hash of the source, the flags, the
compiler's version and this CPU's instruction sets, so a changed source or another machine
sharing the cache gets its own build. The kernel's register blocking follows the instruction
set the compiler targets (AVX-512, AVX2, else 4-lane vectors; see the source).

Environment: ``NEURALGRAPH_KERNEL_CACHE`` (the folder; default
``$XDG_CACHE_HOME/neuralgraph/kernels`` or ``~/.cache/neuralgraph/kernels``), ``CXX``, and
``NEURALGRAPH_KERNEL_FLAGS``: extra compiler flags appended after ``FLAGS``, e.g.
``-mno-avx512f`` to build and measure the AVX2 path on an AVX-512 CPU.
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


def extra_flags() -> tuple[str, ...]:
    """The compiler flags of ``$NEURALGRAPH_KERNEL_FLAGS`` (appended after :data:`FLAGS`)."""
    return tuple(os.environ.get("NEURALGRAPH_KERNEL_FLAGS", "").split())


def build(source: Path, name: str, extra: tuple[str, ...] = ()) -> Path:
    """The shared library of ``source`` in the cache, compiled now if it is not there yet."""
    if not source.is_file():
        raise KernelBuildError(f"{source}: kernel source missing from the installed package")
    compiler = _compiler()
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise KernelBuildError(f"{source.name}: compiler {compiler!r} does not run ({err})") from err
    flags = (*FLAGS, *extra)
    key = hashlib.sha256("\0".join([source.read_text(), *flags, version, platform.machine(), _cpu_features()])
                         .encode()).hexdigest()[:16]
    path = cache_dir() / f"{name}-{key}.so"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # concurrent builds never share a file
    result = subprocess.run([compiler, *flags, str(source), "-o", str(partial)], capture_output=True, text=True)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        message = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise KernelBuildError(f"{source.name}: {compiler} failed ({message})")
    os.replace(partial, path)
    return path


_libraries: dict[tuple[str, ...], tuple[Path, ctypes.CDLL]] = {}


def _siren_build(extra: tuple[str, ...] | None) -> tuple[Path, ctypes.CDLL]:
    extra = extra_flags() if extra is None else tuple(extra)
    if extra not in _libraries:
        path = build(SIREN_SOURCE, "siren_step", extra)
        try:
            library = ctypes.CDLL(str(path))
        except OSError as err:
            raise KernelBuildError(f"{path}: cannot be loaded ({err})") from err
        step = library.siren_loss_and_gradient
        step.restype = None
        step.argtypes = ([ctypes.c_int] * 5 + [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_float, ctypes.c_float]
                         + [ctypes.c_void_p] * 2 + [ctypes.c_int])
        library.siren_sincos.restype = None
        library.siren_sincos.argtypes = [ctypes.c_long] + [ctypes.c_void_p] * 3
        _libraries[extra] = path, library
    return _libraries[extra]


def siren_library(extra: tuple[str, ...] | None = None) -> ctypes.CDLL:
    """``siren_step.cpp`` loaded (built on the first call of the process that needs it), compiled
    with ``extra`` flags (default: :func:`extra_flags`)."""
    return _siren_build(extra)[1]


def siren_library_path(extra: tuple[str, ...] | None = None) -> Path:
    """The cached shared library :func:`siren_library` loads; its name carries the build's hash."""
    return _siren_build(extra)[0]
