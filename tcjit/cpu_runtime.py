"""The CPU runtime: compile generated C with the system C compiler, load it, call it on torch tensors.

* :func:`compile_c` runs ``$CC`` (default ``cc``) with :func:`compile_flags` and returns the shared
  object's bytes. The compiler is found on ``PATH``; its identity (resolved path, size, mtime) and
  the host's instruction-set features are part of every cache key (:func:`toolchain_identity`),
  computed without running anything, so a process that loads kernels from disk never starts the
  compiler.
  A large kernel is compiled in parts, in parallel: each of its functions (the entry point and
  one per parallel region) is guarded by ``#if TC_PART_OF(number)``, and the runtime compiles the
  source once per part, with a definition of ``TC_PART_OF`` that selects that part's functions,
  then links the objects (on 2 cores this halves the C compiler's time for mlp3).
* :func:`load` loads shared-object bytes with ``dlopen`` from a private file it removes at once,
  so the bytes that were checked are the bytes that run; where ``TMPDIR`` is full or read-only,
  from an anonymous file in memory (``memfd_create``) instead.
* Running out of space (in ``TMPDIR``, where the compiler writes too) raises
  :class:`~tcjit.TCResourceError` with what to free, never a raw ``OSError``.
* :class:`CpuKernel` calls the kernel function through ctypes, passing tensor data pointers
  directly: inputs are never copied, whatever their strides (the kernel is specialised to them).
  It frees the library's kept workspaces on request (:meth:`CpuKernel.release`), and unloads the
  library (``dlclose``) once nothing can call it any more: when the ``ctypes.CDLL``, which every
  function pointer taken from it references, is collected.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence

from .polyhedral.errors import TCInternalError, TCOptionsError, TCResourceError

__all__ = [
    "CFLAGS",
    "SCALAR_CTYPES",
    "CpuKernel",
    "compile_c",
    "compile_flags",
    "host_isa",
    "host_vector_bytes",
    "load",
    "sanitizers",
    "toolchain_identity",
    "vector_bytes",
]

#: Flags every CPU kernel is compiled with. ``-fno-math-errno`` lets libm calls vectorise; no
#: ``-ffast-math`` (NaN and signed zeros keep their meaning), no ``-fwrapv`` (the printer makes
#: integer arithmetic wrap itself; ``-fwrapv`` would block vectorisation of index arithmetic). GCC's
#: own unroll-and-jam is off: tcjit places register tiles itself, and on tiled nests GCC's pass took
#: 36 s to compile fcrelu and produced code a thousand times slower. ``-fno-trapping-math`` changes
#: no value (kernels never read the floating-point exception flags) but lets gcc if-convert the
#: comparisons of clamps and selects, without which the prelude's ``tc_exp_f32`` does not vectorise.
#: ``-fno-tree-loop-distribute-patterns`` keeps copy and fill loops as loops: gcc 12 turned a register
#: tile's row copy into an inline ``memcpy`` whose AVX-512 expansion raised the stack array's
#: alignment, then dropped the stack realignment that needed (the array was reached only through a
#: pointer register), and an aligned store to the misaligned array killed the process. The C
#: prelude's ``TC_STACK_ALIGNED`` closes that defect for every stack array; this flag takes away
#: the way in that was seen (docs/cpu-backend.md, tests/backends/test_crash_regressions.py).
CFLAGS = (
    "-O3",
    "-march=native",
    "-mprefer-vector-width=512",
    "-fopenmp",
    "-fno-loop-unroll-and-jam",
    "-ffp-contract=fast",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fno-tree-loop-distribute-patterns",
    "-fPIC",
    "-shared",
    "-std=gnu11",
)

#: Seconds a compilation may take before it is treated as a compiler failure.
COMPILE_TIMEOUT = 300


def _compiler() -> str:
    cc = os.environ.get("CC", "cc")
    path = shutil.which(cc)
    if path is None:
        raise TCInternalError(
            f"no C compiler: '{cc}' is not on PATH",
            hint="install gcc (or set CC to a C compiler with OpenMP support)",
        )
    return path


@functools.lru_cache(maxsize=1)
def _cpu_features() -> str:
    """The host's CPU model and instruction-set flags (what -march=native targets), hashed."""
    text = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "model name", "Features", "CPU part")):
                    text += line
                if line.strip() == "":
                    break
    except OSError:
        text = platform.processor()
    return f"{platform.machine()}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def host_isa() -> str:
    """The host's instruction-set identity in every cache key, e.g. ``"x86_64-3f9c0e1a2b4d5e6f"``:
    the machine and a digest of the CPU model and flags that ``-march=native`` code depends on."""
    return _cpu_features()


@functools.lru_cache(maxsize=1)
def host_vector_bytes() -> int:
    """Width of the host's widest vector registers in bytes (64 with AVX-512F, 32 with AVX, else 16).

    Part of the cache key through :func:`_cpu_features` (same flags, same width).
    """
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[-1].split())
                    break
    except OSError:
        pass
    if "avx512f" in flags:
        return 64
    if "avx" in flags or "avx2" in flags:
        return 32
    return 16


#: The vector widths ``TCJIT_VECTOR_BYTES`` may name.
VECTOR_WIDTHS = (16, 32, 64)


def vector_bytes() -> int:
    """The vector width, in bytes, that generated C is planned for: the host's
    (:func:`host_vector_bytes`), or ``TCJIT_VECTOR_BYTES`` (16, 32 or 64) where set, so that code
    planned for a narrower (or wider) machine can be compiled and checked here; the compiler still
    targets the host. Part of every cache key (:func:`toolchain_identity`).

    :raises TCOptionsError: ``TCJIT_VECTOR_BYTES`` is not one of :data:`VECTOR_WIDTHS`.
    """
    forced = os.environ.get("TCJIT_VECTOR_BYTES", "")
    if not forced:
        return host_vector_bytes()
    if forced.strip() not in {str(w) for w in VECTOR_WIDTHS}:
        raise TCOptionsError(
            f"TCJIT_VECTOR_BYTES={forced!r}: expected one of {', '.join(map(str, VECTOR_WIDTHS))}",
            hint="unset it to plan for the host's vector registers",
        )
    return int(forced)


#: The sanitizers ``TCJIT_SANITIZE`` may name, and the flags each adds to :data:`CFLAGS`.
SANITIZERS = {"address": "address", "undefined": "undefined"}
_SANITIZER_FLAGS = ("-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g")


def sanitizers() -> tuple[str, ...]:
    """The sanitizers generated C is built with: ``TCJIT_SANITIZE`` as a comma-separated list of
    ``address`` and ``undefined`` (``all`` for both; unset or empty for none). Part of every cache
    key. A kernel built with ``address`` loads only into a process that started with the
    AddressSanitizer runtime preloaded (docs/cpu-backend.md, "Sanitizer builds").

    :raises TCOptionsError: an unknown sanitizer is named.
    """
    text = os.environ.get("TCJIT_SANITIZE", "").strip()
    if not text:
        return ()
    names = tuple(SANITIZERS) if text == "all" else tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in SANITIZERS]
    if unknown:
        raise TCOptionsError(
            f"TCJIT_SANITIZE={text!r}: unknown sanitizer {unknown[0]!r}",
            hint=f"name some of {', '.join(SANITIZERS)} (or 'all'), comma-separated",
        )
    return tuple(sorted(set(names)))


def compile_flags() -> tuple[str, ...]:
    """:data:`CFLAGS`, and the sanitizers' flags where :func:`sanitizers` names any."""
    names = sanitizers()
    if not names:
        return CFLAGS
    _check_sanitizer_runtime()
    return (*CFLAGS, f"-fsanitize={','.join(SANITIZERS[n] for n in names)}", *_SANITIZER_FLAGS)


def _check_sanitizer_runtime() -> None:
    """Refuse to load an AddressSanitizer build into a process without its runtime: the runtime
    would end the process ("ASan runtime does not come first in initial library list")."""
    if "address" in sanitizers() and not hasattr(ctypes.CDLL(None), "__asan_init"):
        raise TCOptionsError(
            "TCJIT_SANITIZE=address: this process was not started with the AddressSanitizer runtime",
            hint='start Python with LD_PRELOAD="$(cc -print-file-name=libasan.so) '
            '$(cc -print-file-name=libstdc++.so.6)" ASAN_OPTIONS=detect_leaks=0 (scripts/sanitize.sh '
            "does; docs/cpu-backend.md), or unset TCJIT_SANITIZE",
        )


def toolchain_identity() -> str:
    """Compiler identity, flags and host features, for cache keys; runs nothing."""
    path = _compiler()
    real = os.path.realpath(path)
    st = os.stat(real)
    return (
        f"cc={real}:{st.st_size}:{st.st_mtime_ns} flags={' '.join(compile_flags())} cpu={_cpu_features()}"
        f" vector={vector_bytes()}"
    )


#: A rough model of the C compiler's time on one guarded function (seconds), measured with gcc 12
#: at -O3 on the suite's kernels: a fixed part, a part per character, and a part per loop that
#: ``#pragma GCC unroll`` asks to unroll (a register tile's). Each extra compiler process costs
#: :data:`_SPLIT_OVERHEAD_S` (its headers, and the link); a kernel is split only where the model
#: says the wall time drops by :data:`_SPLIT_GAIN_S` at least (tmm, one tile and two small loops,
#: got slower split).
_COST_FIXED_S, _COST_PER_CHAR_S, _COST_PER_UNROLL_S = 0.03, 1e-5, 0.02
_SPLIT_OVERHEAD_S = 0.035
_SPLIT_GAIN_S = 0.05

_PART = re.compile(r"^#if TC_PART_OF\((\d+)\)$", re.MULTILINE)


def compile_c(source: str, *, name: str = "kernel", jobs: int | None = None) -> bytes:
    """Compile C ``source`` to a shared object; its bytes.

    :arg jobs: compiler processes to run at once (default: the CPUs this process may use). A
        source with functions guarded by ``#if TC_PART_OF(number)`` (see the module's docstring)
        is compiled in up to ``jobs`` parts where that pays (:func:`split_parts`).
    :raises TCInternalError: the compiler rejected the code (a tcjit bug: the message has its log).
    :raises TCResourceError: no space (or no write access) in ``TMPDIR`` for the source, the
        compiler's temporaries or the shared object.
    """
    cc = _compiler()
    flags = compile_flags()
    if jobs is None:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    parts = split_parts(source, jobs)
    try:
        return _compile_in_tmpdir(cc, flags, source, name, parts)
    except OSError as err:
        raise _no_room(f"cannot compile {name}: {err.strerror or err}") from err


def _compile_in_tmpdir(
    cc: str, flags: Sequence[str], source: str, name: str, parts: list[list[int]]
) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tcjit-cc-") as tmp:
        src = os.path.join(tmp, f"{name}.c")
        out = os.path.join(tmp, f"{name}.so")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        if len(parts) < 2:
            _run_compilers([[cc, *flags, "-o", out, src, "-lm"]], name)
        else:
            objects = [os.path.join(tmp, f"{name}.{k}.o") for k in range(len(parts))]
            _run_compilers(
                [
                    [cc, *flags, "-c", f"-DTC_PART_OF(number)=({_selects(part)})", "-o", obj, src]
                    for part, obj in zip(parts, objects)
                ],
                name,
            )
            _run_compilers([[cc, *flags, "-o", out, *objects, "-lm"]], name)
        with open(out, "rb") as f:
            return f.read()


def split_parts(source: str, jobs: int) -> list[list[int]]:
    """The numbers of ``source``'s guarded functions, grouped into the parts (at most ``jobs``) it
    is compiled in: largest estimated cost first, each to the cheapest part, with as many parts
    as minimise the estimated wall time; one part unless that saves :data:`_SPLIT_GAIN_S` (none
    if nothing is guarded)."""
    marks = list(_PART.finditer(source))
    cost = {}
    for k, m in enumerate(marks):
        body = source[m.start() : marks[k + 1].start() if k + 1 < len(marks) else len(source)]
        cost[int(m.group(1))] = (
            _COST_FIXED_S
            + _COST_PER_CHAR_S * len(body)
            + _COST_PER_UNROLL_S * body.count("#pragma GCC unroll")
        )
    best, best_s = [sorted(cost)] if cost else [], sum(cost.values()) - _SPLIT_GAIN_S
    for n in range(2, min(jobs, len(cost)) + 1):
        parts: list[list[int]] = [[] for _ in range(n)]
        load = [0.0] * n
        for number in sorted(cost, key=lambda c: (-cost[c], c)):
            k = load.index(min(load))
            parts[k].append(number)
            load[k] += cost[number]
        if max(load) + _SPLIT_OVERHEAD_S < best_s:
            best, best_s = [sorted(p) for p in parts], max(load) + _SPLIT_OVERHEAD_S
    return best


def _selects(part: Sequence[int]) -> str:
    return " || ".join(f"(number) == {n}" for n in part)


def _run_compilers(commands: Sequence[Sequence[str]], name: str) -> None:
    """Run compiler ``commands`` at once; raise with the first failure's log."""
    # The compiler is not built with the sanitizers: it runs without a runtime preloaded for kernels.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"} if "LD_PRELOAD" in os.environ else None
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for cmd in commands
    ]
    deadline = time.monotonic() + COMPILE_TIMEOUT
    failure = None
    try:
        for proc in procs:
            try:
                _, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise TCInternalError(
                    f"the C compiler took more than {COMPILE_TIMEOUT} s on {name}"
                ) from None
            if proc.returncode != 0 and failure is None:
                failure = err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if failure is not None:
        if any(os.strerror(code) in failure for code in _NO_ROOM):
            raise _no_room(f"the C compiler ran out of room compiling {name}:\n{failure[-2000:]}")
        raise TCInternalError(
            f"the C compiler rejected the generated kernel {name} (a tcjit bug):\n{failure[-4000:]}"
        )


#: What a write that found no room fails with: a full disk or quota, a file-size limit, a
#: read-only file system.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


def _no_room(message: str) -> TCResourceError:
    where = tempfile.gettempdir()
    return TCResourceError(
        f"{message} (temporary files go to {where})",
        hint=f"free space in {where}, or point TMPDIR at a folder with room: the C compiler "
        "writes its temporary files there too",
    )


def load(blob: bytes, *, name: str = "kernel") -> ctypes.CDLL:
    """``dlopen`` shared-object bytes.

    The bytes go to a fresh file in a private (0700) directory of this process, under a name never
    used before (the dynamic loader returns an already loaded library for a known name), and the
    file is removed once loaded: the bytes that were checked are the bytes that run.
    """
    global _LOADED
    _check_sanitizer_runtime()
    with _LOAD_LOCK:
        _LOADED += 1
        number = _LOADED
    path = None
    try:
        directory = _private_dir()
        path = os.path.join(
            directory, f"{name}-{os.getpid()}-{number}-{hashlib.sha256(blob).hexdigest()[:12]}.so"
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
    except OSError as err:  # TMPDIR is full or read-only: the kernel may still come from the cache
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return _load_from_memory(blob, name, err)
    try:
        return ctypes.CDLL(path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _load_from_memory(blob: bytes, name: str, why: OSError) -> ctypes.CDLL:
    """``dlopen`` ``blob`` from an anonymous in-memory file, ``/proc/self/fd/N``.

    The descriptor stays open as long as the process: the dynamic loader knows a library by its
    path, and a closed descriptor's number, reused for the next kernel, would name the same path,
    so that ``dlopen`` would return the first kernel again.
    """
    if not hasattr(os, "memfd_create"):
        raise _no_room(f"cannot load {name}: {why.strerror or why}") from why
    try:
        fd = os.memfd_create(f"tcjit-{name}", os.MFD_CLOEXEC)
    except OSError as err:
        raise _no_room(f"cannot load {name}: {why.strerror or why}; in memory: {err.strerror}") from err
    try:
        view = memoryview(blob)
        while view:
            view = view[os.write(fd, view) :]
        lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
    except BaseException:
        os.close(fd)
        raise
    _MEMORY_FILES.append(fd)
    return lib


_LOADED = 0
_LOAD_LOCK = threading.Lock()
_MEMORY_FILES: list[int] = []  # descriptors of the libraries loaded from memory (never closed)


@functools.lru_cache(maxsize=1)
def _private_dir() -> str:
    directory = tempfile.mkdtemp(prefix="tcjit-so-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


#: The ctypes type of each C type a scalar kernel parameter has (the CUDA runtime's too).
SCALAR_CTYPES = {
    "bool": ctypes.c_bool,
    "uint8_t": ctypes.c_uint8,
    "uint16_t": ctypes.c_uint16,
    "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64,
    "int8_t": ctypes.c_int8,
    "int16_t": ctypes.c_int16,
    "int32_t": ctypes.c_int32,
    "int64_t": ctypes.c_int64,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
}


class CpuKernel:
    """A loaded kernel function: ``fn(nthreads, errors, *params)``.

    The library is unloaded when ``lib`` is collected: every reference to it (this object, ``fn``
    and any other function pointer taken from it, an autograd graph or closure holding one of
    them) keeps it loaded, so code that something may still call is never unloaded. Its kept
    workspaces are freed first.

    :arg lib: the library :func:`load` returned; from then on owned by this object.
    :arg params: ``(name, kind, ctype)`` per parameter after ``nthreads`` and ``errors``.
    """

    def __init__(self, lib: ctypes.CDLL, symbol: str, params: Sequence[tuple[str, str, str]]):
        self.lib = lib  # keeps the library loaded
        fn = getattr(lib, symbol)
        argtypes = [ctypes.c_int, ctypes.c_void_p]
        for _, kind, ctype in params:
            argtypes.append(ctypes.c_void_p if kind == "tensor" else SCALAR_CTYPES[ctype])
        fn.argtypes = argtypes
        fn.restype = None
        self.fn = fn
        # A library with a workspace exports these two (mapping/c_kernel.py, _workspace_release).
        self._release = getattr(lib, "tc_release", None)
        self._kept_bytes = getattr(lib, "tc_kept_bytes", None)
        if self._kept_bytes is not None:
            self._kept_bytes.argtypes, self._kept_bytes.restype = [ctypes.c_int], ctypes.c_size_t
        release = ctypes.cast(self._release, ctypes.c_void_p).value if self._release is not None else None
        # At exit the libraries stay: a daemon thread may still run one.
        weakref.finalize(lib, _unload, lib._handle, release).atexit = False

    def release(self) -> None:
        """Free the workspaces the library keeps between calls (none: nothing to do). Safe while
        other threads call the kernel: a call in flight holds its workspace outside the slots
        this empties (and puts it back when it returns)."""
        if self._release is not None:
            self._release()

    def kept_bytes(self, nthreads: int) -> int:
        """The bytes the library's workspaces keep between calls on ``nthreads`` threads."""
        return int(self._kept_bytes(nthreads)) if self._kept_bytes is not None else 0


_RELEASE = ctypes.CFUNCTYPE(None)


def _unload(handle: int, release: int | None) -> None:
    """Free a collected library's workspaces and ``dlclose`` it. No thread runs its code any more:
    a call holds the library through its function pointer until it returns, and OpenMP's worker
    threads leave a parallel region's code before the call that started it returns."""
    if release is not None:
        _RELEASE(release)()
    _dlclose(handle)


def _dlclose(handle: int) -> None:
    import _ctypes

    _ctypes.dlclose(handle)
