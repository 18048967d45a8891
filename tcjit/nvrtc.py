"""CUDA C++ to PTX or to cubins without a GPU: NVRTC through ctypes, or ``nvcc -ptx`` / ``-cubin``.

Compiling to PTX needs neither a GPU nor the CUDA driver, so CI checks on any machine that every
generated CUDA kernel compiles. Two compilers are used, in this order:

1. **NVRTC** from the ``nvidia-cuda-nvrtc`` wheel (the ``test`` extra installs it): its shared
   library is found in the installed ``nvidia`` package (``nvidia/cu13/lib`` for CUDA 13's wheel,
   ``nvidia/cuda_nvrtc/lib`` for CUDA 12's; the newest major version wins), and else wherever the
   dynamic loader finds ``libnvrtc``. Its builtins library is loaded first, with ``RTLD_GLOBAL``:
   NVRTC loads it by name at compile time, and the wheel's directory is not on the loader's path.
2. **nvcc** on ``PATH`` (``nvcc -ptx``, ``nvcc -cubin``), when no NVRTC library loads.

:func:`compile_ptx` takes a whole translation unit (the generated sources include nothing) and
returns the PTX text; a failure raises :class:`~tcjit.polyhedral.errors.TCInternalError` with the
compiler's log (generated code that does not compile is a bug in tcjit). Options: ``--std=c++17``
and the virtual architecture (``compute_90`` by default), never ``-use_fast_math``: the kernels
rely on IEEE semantics (NaN, infinities, signed zeros, correctly rounded division and sqrt).

:func:`compile_cubin` compiles the same kind of source to a **cubin for a real architecture**
(``sm_90`` by default: the H100 and H200), still without a GPU: NVRTC's ``nvrtcGetCUBIN`` (NVRTC
11.1 and later) with ``--gpu-architecture=sm_90``, or ``nvcc -cubin -arch=sm_90``. It asks ptxas for
its report (NVRTC's ``--ptxas-options=-v``, nvcc's ``-Xptxas -v``) and parses it
(:func:`parse_ptxas_report`) into a :class:`Cubin`: the cubin's bytes, the compiler's log and, per
``__global__`` function, its :class:`KernelResources` (registers per thread, stack frame, spill
stores and loads, static shared memory, barriers, constant banks where reported), the resource
usage of the compiled code rather than of PTX's virtual registers. The report's lines, as NVRTC 13.x
and nvcc 13.0 print them (NVRTC prefixes the properties line with ``ptxas         .``)::

    ptxas info    : Compiling entry function 'NAME' for 'sm_90'
    ptxas info    : Function properties for NAME
        S bytes stack frame, T bytes spill stores, L bytes spill loads
    ptxas info    : Used R registers, used B barriers, M bytes smem, C bytes cumulative stack size
    ptxas info    : Compile time = 1.012 ms

with ``M bytes smem`` only where M > 0 and the cumulative stack only where there is a stack. Older
ptxas versions also print ``N bytes cmem[K]`` items on the ``Used`` line (and no barriers).
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
from dataclasses import dataclass, field
from pathlib import Path

from .polyhedral.errors import TCInternalError
from .polyhedral.names import bounded

__all__ = [
    "Cubin",
    "KernelResources",
    "available",
    "backend",
    "compile_cubin",
    "compile_ptx",
    "nvcc_version",
    "nvrtc_version",
    "parse_ptxas_report",
]

#: Options every compilation gets (NVRTC spelling; nvcc's is derived from it).
BASE_OPTIONS = ("--std=c++17",)

_ARCH = re.compile(r"compute_\d+[a-z]?")
_REAL_ARCH = re.compile(r"sm_\d+[a-z]?")
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
        self.has_cubin = hasattr(lib, "nvrtcGetCUBIN") and hasattr(lib, "nvrtcGetCUBINSize")  # NVRTC >= 11.1
        if self.has_cubin:
            lib.nvrtcGetCUBINSize.argtypes = [P, ctypes.POINTER(ctypes.c_size_t)]
            lib.nvrtcGetCUBIN.argtypes = [P, ctypes.c_char_p]
            lib.nvrtcGetCUBINSize.restype = lib.nvrtcGetCUBIN.restype = ctypes.c_int
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

    def compile(
        self, source: str, name: str, options: Sequence[str], *, cubin: bool = False
    ) -> tuple[bytes, str]:
        """(the PTX text's bytes, or with ``cubin`` the cubin's, and the program log)."""
        if cubin and not self.has_cubin:
            raise TCInternalError(f"NVRTC {self.version()} cannot make cubins (11.1 or later can)")
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
            buf = ctypes.create_string_buffer(size.value)
            self.check(self.lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
            log = buf.value.decode(errors="replace")
            if code != 0:
                raise TCInternalError(
                    f"NVRTC could not compile {name} ({self.error(code)}; options: {' '.join(options)}):\n"
                    + log
                )
            get_size, get = (
                ("nvrtcGetCUBINSize", "nvrtcGetCUBIN") if cubin else ("nvrtcGetPTXSize", "nvrtcGetPTX")
            )
            self.check(getattr(self.lib, get_size)(prog, ctypes.byref(size)), get_size)
            out = ctypes.create_string_buffer(size.value)
            self.check(getattr(self.lib, get)(prog, out), get)
            return (out.raw[: size.value] if cubin else out.value), log
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


@functools.cache
def nvcc_version() -> tuple[int, int] | None:
    """The (major, minor) release of ``nvcc`` on PATH (``nvcc --version``), or None without one."""
    nvcc = _nvcc()
    if nvcc is None:
        return None
    try:
        text = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


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
            return lib.compile(source, name, opts)[0].decode()
    if using == "nvcc":
        return _run_nvcc(source, name, ["-ptx", f"-arch={arch}"], options, ".ptx")[0].decode()
    if using is None:
        raise TCInternalError("no CUDA compiler: install nvidia-cuda-nvrtc or put nvcc on PATH")
    raise ValueError(f"using must be 'nvrtc' or 'nvcc', not {using!r}")


def _run_nvcc(
    source: str, name: str, mode: Sequence[str], options: Sequence[str], suffix: str
) -> tuple[bytes, str]:
    """(the output file's bytes, nvcc's stdout and stderr) of ``nvcc MODE -std=c++17 OPTIONS``."""
    nvcc = _nvcc()
    if nvcc is None:
        raise TCInternalError("nvcc is not on PATH")
    stem = bounded(re.sub(r"[^\w.-]", "_", Path(name).stem)) or "kernel"
    with tempfile.TemporaryDirectory(prefix="tcjit-nvcc-") as tmp:
        src = Path(tmp) / f"{stem}.cu"
        out = Path(tmp) / f"{stem}{suffix}"
        src.write_text(source, encoding="utf-8")
        cmd = [nvcc, *mode, "-std=c++17", *options, "-o", str(out), str(src)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise TCInternalError(f"nvcc could not compile {name}: {e}") from None
        log = (done.stdout + done.stderr).replace(str(src), name)
        if done.returncode != 0 or not out.exists():
            raise TCInternalError(f"nvcc could not compile {name} (exit {done.returncode}):\n{log}")
        return out.read_bytes(), log


# ------------------------------------------------------------------------------------------- cubins
@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one ``__global__`` function of a cubin.

    A field is None where the report does not say: no ``Used`` line (registers, barriers and
    shared memory unknown), no properties line (stack frame and spills unknown), or an item this
    ptxas does not print (barriers before CUDA 12, cumulative stack size where there is no stack).
    ptxas leaves out zero shared memory, so a ``Used`` line without it means 0 bytes.

    :ivar name: the function's symbol: its name for ``extern "C"`` (tcjit's kernels), else mangled.
    :ivar registers: registers per thread.
    :ivar stack_frame_bytes: the function's stack frame (local memory) per thread, in bytes.
    :ivar spill_store_bytes: bytes of register spills stored to local memory per thread.
    :ivar spill_load_bytes: bytes of register spills loaded back.
    :ivar shared_bytes: static shared memory per block, in bytes (``__shared__`` arrays).
    :ivar barriers: named barriers used (``__syncthreads`` uses barrier 0: 1).
    :ivar constant_banks: ``(bank, bytes)`` of each ``cmem[bank]`` item, where reported (older
        ptxas; 13.x prints none).
    :ivar cumulative_stack_bytes: the stack size including the functions it calls.
    """

    name: str
    registers: int | None = None
    stack_frame_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    shared_bytes: int | None = None
    barriers: int | None = None
    constant_banks: tuple[tuple[int, int], ...] = ()
    cumulative_stack_bytes: int | None = None

    @property
    def constant_bytes(self) -> int | None:
        """The bytes of every reported constant bank together; None where none is reported."""
        return sum(b for _, b in self.constant_banks) if self.constant_banks else None

    @property
    def spills(self) -> bool:
        """Whether the function spills registers (stores or loads) according to the report."""
        return bool(self.spill_store_bytes or self.spill_load_bytes)


@dataclass(frozen=True)
class Cubin:
    """A translation unit compiled for a real architecture, with ptxas's resource report.

    :ivar arch: the architecture (``sm_90``).
    :ivar data: the cubin (an ELF file), as ``cuModuleLoadData`` takes it.
    :ivar log: the compiler's whole log (warnings and ptxas's report).
    :ivar kernels: the ``__global__`` functions ptxas compiled, in the order it reported them.
    :ivar compiler: ``"nvrtc"`` or ``"nvcc"``.
    :ivar version: the compiler's (major, minor) version; ptxas's register allocation changes from
        one release to the next (NVRTC 13.5 and nvcc 13.0 differ on kernels that promote to shared
        or private memory), so a report is only comparable with one from the same release.
    """

    arch: str
    data: bytes = field(repr=False)
    log: str = field(repr=False)
    kernels: tuple[KernelResources, ...]
    compiler: str
    version: tuple[int, int] | None

    @property
    def names(self) -> tuple[str, ...]:
        """The kernels' symbols, in order."""
        return tuple(k.name for k in self.kernels)

    def resources(self, name: str) -> KernelResources:
        """The report of kernel ``name``; KeyError if ptxas reported no such entry function."""
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r} in the cubin (it has {', '.join(self.names) or 'none'})")


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"\bUsed (\d+) registers\b(.*)")
_USED_ITEMS = {
    "barriers": re.compile(r"used (\d+) barriers"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
    "cumulative_stack_bytes": re.compile(r"(\d+) bytes cumulative stack size"),
}
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")


def parse_ptxas_report(log: str, arch: str | None = None) -> tuple[KernelResources, ...]:
    """The entry functions in ptxas's ``-v`` report ``log`` (NVRTC's program log or nvcc's output,
    other lines ignored), in the order reported, with what the report says of each.

    An entry function's lines follow its ``Compiling entry function`` line: a ``Used`` line, and a
    stack frame line after the ``Function properties`` line that names it (non-entry device
    functions get properties lines too: they are neither listed nor attached to the entry). With
    ``arch`` (``sm_90``), entries compiled for other architectures are left out.
    """
    found: dict[str, dict] = {}
    entry: str | None = None
    properties: str | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            entry = m.group(1) if arch is None or m.group(2) == arch else None
            if entry is not None:
                found.setdefault(entry, {})
            properties = None
        elif m := _PROPERTIES.search(line):
            properties = m.group(1)
        elif m := _FRAME.search(line):
            if entry is not None and properties == entry and "stack_frame_bytes" not in found[entry]:
                found[entry].update(
                    stack_frame_bytes=int(m.group(1)),
                    spill_store_bytes=int(m.group(2)),
                    spill_load_bytes=int(m.group(3)),
                )
            properties = None
        elif (m := _USED.search(line)) and entry is not None and "registers" not in found[entry]:
            rest = m.group(2)
            used: dict = {"registers": int(m.group(1)), "shared_bytes": 0}
            for key, pattern in _USED_ITEMS.items():
                if item := pattern.search(rest):
                    used[key] = int(item.group(1))
            used["constant_banks"] = tuple((int(b), int(n)) for n, b in _CMEM.findall(rest))
            found[entry].update(used)
    return tuple(KernelResources(name=name, **fields) for name, fields in found.items())


def compile_cubin(
    source: str,
    *,
    name: str,
    arch: str = "sm_90",
    options: Sequence[str] = (),
    using: str | None = None,
) -> Cubin:
    """The cubin of CUDA C++ translation unit ``source`` for real architecture ``arch``, with the
    resource usage ptxas reports for each of its ``__global__`` functions. No GPU is needed.

    The options are those of :func:`compile_ptx` (``--std=c++17``, never fast math) with the real
    architecture and ptxas's verbose report: NVRTC gets ``--gpu-architecture=ARCH
    --ptxas-options=-v``, nvcc ``-cubin -arch=ARCH -Xptxas -v``.

    :arg name: the source's file name in the compiler's messages (``tc_matmul.cu``).
    :arg arch: the real architecture (``sm_80``, ``sm_90``, ``sm_90a``...).
    :arg options: more compiler options, as for :func:`compile_ptx`.
    :arg using: ``"nvrtc"`` or ``"nvcc"`` to force a compiler; default: :func:`backend`'s.
    :raises TCInternalError: the source does not compile (the message holds the compiler's log), no
        compiler is available, or the compiler made no ELF file.
    """
    if not _REAL_ARCH.fullmatch(arch):
        raise ValueError(f"arch must be a real architecture such as 'sm_90', not {arch!r}")
    using = using or backend()
    if using == "nvrtc":
        lib = _nvrtc()
        if lib is None:
            raise TCInternalError("NVRTC is not available (pip install nvidia-cuda-nvrtc)")
        opts = [*BASE_OPTIONS, f"--gpu-architecture={arch}", "--ptxas-options=-v", *options]
        with _LOCK:
            data, log = lib.compile(source, name, opts, cubin=True)
    elif using == "nvcc":
        data, log = _run_nvcc(source, name, ["-cubin", f"-arch={arch}", "-Xptxas", "-v"], options, ".cubin")
    elif using is None:
        raise TCInternalError("no CUDA compiler: install nvidia-cuda-nvrtc or put nvcc on PATH")
    else:
        raise ValueError(f"using must be 'nvrtc' or 'nvcc', not {using!r}")
    if not data.startswith(b"\x7fELF"):
        raise TCInternalError(f"{using} made no cubin (ELF file) of {name} for {arch}:\n{log}")
    version = nvrtc_version() if using == "nvrtc" else nvcc_version()
    kernels = parse_ptxas_report(log, arch)
    return Cubin(arch=arch, data=data, log=log, kernels=kernels, compiler=using, version=version)
