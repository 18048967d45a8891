"""CUDA C++ to PTX without a GPU: NVRTC through ctypes, or ``nvcc -ptx``.

Compiling to PTX needs neither a GPU nor the CUDA driver, so CI checks on any machine that every
generated CUDA kernel compiles. Two compilers are used, in this order:

1. **NVRTC** from the ``nvidia-cuda-nvrtc`` wheel (the ``test`` extra installs it): its shared
   library is found in the installed ``nvidia`` package (``nvidia/cu13/lib`` for CUDA 13's wheel,
   ``nvidia/cuda_nvrtc/lib`` for CUDA 12's; the newest major version wins), and else wherever the
   dynamic loader finds ``libnvrtc``. Its builtins library is loaded first, with ``RTLD_GLOBAL``:
   NVRTC loads it by name at compile time, and the wheel's directory is not on the loader's path.
2. **nvcc** on ``PATH`` (``nvcc -ptx``), when no NVRTC library loads.

:func:`compile_ptx` takes a whole translation unit (the generated sources include nothing) and
returns the PTX text; a failure raises :class:`~tcjit.polyhedral.errors.TCInternalError` with the
compiler's log (generated code that does not compile is a bug in tcjit). Options: ``--std=c++17``
and the virtual architecture (``compute_90`` by default), never ``-use_fast_math``: the kernels
rely on IEEE semantics (NaN, infinities, signed zeros, correctly rounded division and sqrt).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from .polyhedral.errors import TCInternalError
from .polyhedral.names import bounded

__all__ = ["available", "backend", "compile_ptx", "nvrtc_version"]

#: Options every compilation gets (NVRTC spelling; nvcc's is derived from it).
BASE_OPTIONS = ("--std=c++17",)

_ARCH = re.compile(r"compute_\d+[a-z]?")
_LOCK = threading.Lock()


def _major(path: Path) -> int:
    m = re.search(r"\.so\.(\d+)", path.name)
    return int(m.group(1)) if m else 0


def _wheel_libraries() -> list[Path]:
    """``libnvrtc.so.N`` in the installed ``nvidia`` package's ``*/lib`` folders, newest first."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    found = []
    for root in spec.submodule_search_locations:
        for lib in Path(root).glob("*/lib/libnvrtc.so.*"):
            if lib.is_file():
                found.append(lib)
    return sorted(found, key=lambda p: (_major(p), str(p)), reverse=True)


class _Nvrtc:
    """The loaded NVRTC library with the prototypes of the functions used here."""

    def __init__(self, lib: ctypes.CDLL, where: str):
        self.lib = lib
        self.where = where
        P = ctypes.c_void_p
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        lib.nvrtcVersion.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
        lib.nvrtcCreateProgram.argtypes = [
            ctypes.POINTER(P),
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.POINTER(ctypes.c_char_p),
        ]
        lib.nvrtcCompileProgram.argtypes = [P, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(P)]
        for fn in ("nvrtcGetProgramLogSize", "nvrtcGetPTXSize"):
            getattr(lib, fn).argtypes = [P, ctypes.POINTER(ctypes.c_size_t)]
        for fn in ("nvrtcGetProgramLog", "nvrtcGetPTX"):
            getattr(lib, fn).argtypes = [P, ctypes.c_char_p]
        for fn in (
            "nvrtcVersion",
            "nvrtcCreateProgram",
            "nvrtcCompileProgram",
            "nvrtcDestroyProgram",
            "nvrtcGetProgramLogSize",
            "nvrtcGetPTXSize",
            "nvrtcGetProgramLog",
            "nvrtcGetPTX",
        ):
            getattr(lib, fn).restype = ctypes.c_int

    def error(self, code: int) -> str:
        text = self.lib.nvrtcGetErrorString(code)
        return text.decode() if text else f"NVRTC error {code}"

    def check(self, code: int, what: str) -> None:
        if code != 0:
            raise TCInternalError(f"NVRTC: {what} failed: {self.error(code)}")

    def version(self) -> tuple[int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        return major.value, minor.value

    def compile(self, source: str, name: str, options: Sequence[str]) -> str:
        prog = ctypes.c_void_p()
        self.check(
            self.lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
            "nvrtcCreateProgram",
        )
        try:
            opts = (ctypes.c_char_p * max(1, len(options)))(*(o.encode() for o in options))
            code = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            size = ctypes.c_size_t()
            self.check(self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
            log = ctypes.create_string_buffer(size.value)
            self.check(self.lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            if code != 0:
                raise TCInternalError(
                    f"NVRTC could not compile {name} ({self.error(code)}; options: {' '.join(options)}):\n"
                    + log.value.decode(errors="replace")
                )
            self.check(self.lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
            ptx = ctypes.create_string_buffer(size.value)
            self.check(self.lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
            return ptx.value.decode()
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _load(path: Path) -> _Nvrtc | None:
    try:
        for builtins in sorted(path.parent.glob("libnvrtc-builtins.so.*")):
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
            break
        return _Nvrtc(ctypes.CDLL(str(path)), str(path))
    except (OSError, AttributeError):
        return None


@functools.cache
def _nvrtc() -> _Nvrtc | None:
    """The NVRTC library (loaded once per process), or None where none loads."""
    for path in _wheel_libraries():
        lib = _load(path)
        if lib is not None:
            return lib
    name = ctypes.util.find_library("nvrtc")
    if name:
        try:
            return _Nvrtc(ctypes.CDLL(name), name)
        except (OSError, AttributeError):
            pass
    return None


def _nvcc() -> str | None:
    return shutil.which("nvcc")


def backend() -> str | None:
    """The compiler :func:`compile_ptx` uses: ``"nvrtc"``, ``"nvcc"``, or None if there is none."""
    if _nvrtc() is not None:
        return "nvrtc"
    return "nvcc" if _nvcc() else None


def available() -> bool:
    """Whether CUDA sources can be compiled to PTX here (NVRTC loads, or ``nvcc`` is on PATH)."""
    return backend() is not None


def nvrtc_version() -> tuple[int, int] | None:
    """NVRTC's (major, minor) version, or None if no NVRTC library loads."""
    lib = _nvrtc()
    return None if lib is None else lib.version()


def compile_ptx(
    source: str,
    *,
    name: str,
    arch: str = "compute_90",
    options: Sequence[str] = (),
    using: str | None = None,
) -> str:
    """The PTX of CUDA C++ translation unit ``source``.

    :arg name: the source's file name in the compiler's messages (``tc_matmul.cu``).
    :arg arch: the virtual architecture (``compute_80``, ``compute_90``, ``compute_90a``...).
    :arg options: more compiler options, NVRTC spelling (``--std=c++17`` is always given). They are
        passed to nvcc unchanged: use ones both understand (``-D...``, ``-lineinfo``...).
    :arg using: ``"nvrtc"`` or ``"nvcc"`` to force a compiler; default: :func:`backend`'s.
    :raises TCInternalError: the source does not compile (the message holds the compiler's log), or
        no compiler is available.
    """
    if not _ARCH.fullmatch(arch):
        raise ValueError(f"arch must be a virtual architecture such as 'compute_90', not {arch!r}")
    using = using or backend()
    if using == "nvrtc":
        lib = _nvrtc()
        if lib is None:
            raise TCInternalError("NVRTC is not available (pip install nvidia-cuda-nvrtc)")
        opts = [*BASE_OPTIONS, f"--gpu-architecture={arch}", *options]
        with _LOCK:  # NVRTC is thread-safe per program; one at a time keeps the CPU use flat
            return lib.compile(source, name, opts)
    if using == "nvcc":
        return _compile_nvcc(source, name, arch, options)
    if using is None:
        raise TCInternalError("no CUDA compiler: install nvidia-cuda-nvrtc or put nvcc on PATH")
    raise ValueError(f"using must be 'nvrtc' or 'nvcc', not {using!r}")


def _compile_nvcc(source: str, name: str, arch: str, options: Sequence[str]) -> str:
    nvcc = _nvcc()
    if nvcc is None:
        raise TCInternalError("nvcc is not on PATH")
    stem = bounded(re.sub(r"[^\w.-]", "_", Path(name).stem)) or "kernel"
    with tempfile.TemporaryDirectory(prefix="tcjit-nvcc-") as tmp:
        src = Path(tmp) / f"{stem}.cu"
        out = Path(tmp) / f"{stem}.ptx"
        src.write_text(source, encoding="utf-8")
        cmd = [nvcc, "-ptx", f"-arch={arch}", "-std=c++17", *options, "-o", str(out), str(src)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise TCInternalError(f"nvcc could not compile {name}: {e}") from None
        if done.returncode != 0 or not out.exists():
            log = (done.stdout + done.stderr).replace(str(src), name)
            raise TCInternalError(f"nvcc could not compile {name} (exit {done.returncode}):\n{log}")
        return out.read_text(encoding="utf-8")
