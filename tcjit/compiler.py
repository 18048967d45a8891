"""From a kernel and one call's arguments to a loaded, runnable specialisation, through two caches.

A :class:`Specialization` is one definition compiled for one set of input shapes, dtypes and strides,
one target and one set of options. :func:`specialize` finds or builds it:

1. the in-process cache lives on the :class:`~tcjit.Kernel` (a dict lookup per call);
2. the on-disk :class:`~tcjit.cache.KernelStore` under ``TCJIT_CACHE_DIR`` (default: the user's cache
   directory; the empty string disables it), keyed by :func:`cache_key` as DESIGN.md says. A hit
   loads the stored shared object without importing isl or running the compiler;
3. otherwise the compiler runs (:func:`tcjit.mapping.lower.lower_cpu`, then the C compiler) and
   the result is stored. A store that cannot be written costs a warning, never the call.
"""

from __future__ import annotations

import contextvars
import ctypes
import functools
import hashlib
import json
import os
import threading
import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import torch

from .binding import Binding, _scalar_value, torch_dtype
from .mapping.packing import contiguous_strides
from .memory import BUDGET, LIBRARY_OVERHEAD
from .polyhedral.errors import TCBoundsError, TCCallError, TCError, TCInternalError, TCWarning
from .polyhedral.lang.checked import CheckedDef
from .polyhedral.names import bounded

__all__ = ["Specialization", "cache_key", "kernel_store", "specialize"]

#: The order the emulated CUDA target runs blocks and threads in (0 forward, 1 reversed, 2
#: shuffled); set with :func:`tcjit.testing.emulation_order`.
EMULATION_ORDER: contextvars.ContextVar[int] = contextvars.ContextVar("tcjit_emulation_order", default=0)

_STORE_LOCK = threading.Lock()
_STORES: dict[str, object] = {}
_BUILD_LOCK = threading.Lock()


def kernel_store():
    """The process's :class:`~tcjit.cache.KernelStore` (``None`` when disabled by TCJIT_CACHE_DIR="")."""
    root = os.environ.get("TCJIT_CACHE_DIR")
    if root is None:
        import platformdirs

        root = os.path.join(platformdirs.user_cache_dir("tcjit"), "kernels")
    if root == "":
        return None
    with _STORE_LOCK:
        store = _STORES.get(root)
        if store is None:
            from .cache import KernelStore

            try:
                max_bytes = int(os.environ.get("TCJIT_CACHE_MAX_BYTES", 2 << 30))
                store = KernelStore(root, max_bytes=max_bytes)
            except (TCError, ValueError) as e:
                warnings.warn(f"tcjit: kernel cache disabled: {e}", TCWarning, stacklevel=3)
                store = False
            _STORES[root] = store
        return store or None


def _layout(t: torch.Tensor) -> list:
    return [str(t.dtype).removeprefix("torch."), list(t.shape), list(t.stride())]


def cache_key(
    canonical_source: str,
    entry: str,
    inputs: Sequence[object],
    outputs: Sequence[torch.Tensor] | None,
    target: str,
    options_json: str,
) -> str:
    """The text every cache of compiled kernels is keyed by (see DESIGN.md, "Cache key")."""
    from . import __version__
    from .cache import FORMAT_VERSION
    from .cpu_runtime import toolchain_identity

    key = {
        "source": canonical_source,
        "entry": entry,
        "inputs": [_layout(x) if isinstance(x, torch.Tensor) else "scalar" for x in inputs],
        "outputs": None if outputs is None else [_layout(t) for t in outputs],
        "target": target,
        "toolchain": toolchain_identity(),
        "options": json.loads(options_json),
        "tcjit": __version__,
        "code": code_identity(),
        "format": FORMAT_VERSION,
    }
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=1)
def code_identity() -> str:
    """A digest of the compiler's own source files (``tcjit``, ``tcjit.mapping`` with its C
    prelude's files, ``tcjit.polyhedral``): a kernel compiled by other code, an edited checkout or
    an upgrade without a new version number, is never taken from the disk cache. Reads files;
    imports nothing (about 2 ms, once per process)."""
    import importlib.util

    digest = hashlib.sha256()
    for package in ("tcjit", "tcjit.mapping", "tcjit.polyhedral", "tcjit.polyhedral.lang"):
        spec = importlib.util.find_spec(package)
        for directory in (spec.submodule_search_locations or []) if spec else []:
            for folder, names in ((directory, ".py"), (os.path.join(directory, "prelude"), (".h", ".cuh"))):
                for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
                    if name.endswith(names):
                        digest.update(name.encode())
                        with open(os.path.join(folder, name), "rb") as f:
                            digest.update(f.read())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class _Meta:
    """What a loaded kernel needs besides the code: JSON-round-trippable."""

    symbol: str
    params: tuple[tuple[str, str, str], ...]
    zero_init: tuple[str, ...]
    checks: tuple[tuple, ...]
    wide: tuple[str, ...] = ()
    buffers: tuple[str, ...] = ()  # the emulated target's race-checked shared buffers

    @staticmethod
    def from_json(d: Mapping) -> _Meta:
        return _Meta(
            d["symbol"],
            tuple(tuple(p) for p in d["params"]),
            tuple(d["zero_init"]),
            tuple(tuple(c) for c in d["checks"]),
            tuple(d.get("wide", ())),
            tuple(d.get("buffers", ())),
        )


class _Compiled:
    """What every compiled specialisation shares: the call with a check of the arguments' layout."""

    cdef: CheckedDef
    layouts: tuple

    def __call__(self, *inputs, outputs: Sequence[torch.Tensor] | None = None):
        layouts = tuple(_call_layout(x) for x in inputs)
        if layouts != self.layouts[0] or _out_layouts(outputs) != self.layouts[1]:
            raise TCCallError(
                f"{self.cdef.name}: these arguments do not have the shapes, dtypes and strides this "
                "specialisation was compiled for",
                hint="call the Kernel itself: it compiles one specialisation per layout",
            )
        outs = self.run(inputs, outputs)
        return outs[0] if len(outs) == 1 else outs

    def run(
        self, inputs: Sequence[object], outputs: Sequence[torch.Tensor] | None
    ) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def __copy__(self):
        """The specialisation itself: loaded code is immutable, so copies share it."""
        return self

    def __deepcopy__(self, memo):
        """The specialisation itself (a deep copy of a model holding one shares it)."""
        return self

    def __reduce__(self):
        """Refused plainly: a specialisation is code loaded into this process."""
        raise TCCallError(
            f"{self.cdef.name}: a compiled specialisation (tcjit.compile) cannot be pickled: it is "
            "code loaded into this process",
            hint="pickle the Kernel that tcjit.define returned; it compiles (or loads from the "
            "kernel cache) again where it is unpickled",
        )


def buffer_specs(
    cdef: CheckedDef, binding: Binding, names: Sequence[str], zero_init: Collection[str]
) -> tuple[tuple[tuple[int, ...], tuple[int, ...], torch.dtype, bool], ...]:
    """What :func:`allocate` takes for the outputs or temporaries ``names`` of a call: each one's
    shape, contiguous strides, dtype and whether the kernel needs it zeroed."""
    return tuple(
        (
            tuple(binding.output_shapes[n]),
            contiguous_strides(binding.output_shapes[n]),
            torch_dtype(cdef.tensor(n).dtype),
            n in zero_init,
        )
        for n in names
    )


def allocate(specs: Sequence[tuple], device: torch.device | None = None) -> list[torch.Tensor]:
    """Contiguous tensors for :func:`buffer_specs` (outputs, temporaries) on ``device`` (``None``:
    the CPU). ``torch.empty_strided`` with the strides worked out once: a third cheaper per tensor
    than ``torch.empty`` of a shape, which counts in calls of small kernels."""
    return [
        torch.empty_strided(shape, strides, dtype=dt, device=device).zero_()
        if zero
        else torch.empty_strided(shape, strides, dtype=dt, device=device)
        for shape, strides, dt, zero in specs
    ]


class Specialization(_Compiled):
    """One definition compiled for fixed shapes, dtypes, strides, target and options.

    Calling it runs the kernel: ``spec(*inputs, outputs=None)``; the inputs must have the layout it
    was compiled for (a mismatch raises :class:`TCCallError`).

    :ivar source: the generated C. :ivar stages: readable intermediate forms when this process
        compiled it (empty after a disk hit). :ivar from_disk: whether it came from the kernel store.
    :ivar memory_bytes: what it counts in the process's memory budget (:mod:`tcjit.memory`): its
        library, :data:`~tcjit.memory.LIBRARY_OVERHEAD` and the workspaces it keeps between calls
        on ``torch.get_num_threads()`` threads. It is admitted to the budget when loaded, and
        again when it runs after an eviction.
    """

    def __init__(
        self,
        cdef: CheckedDef,
        binding: Binding,
        meta: _Meta,
        blob: bytes,
        source: str,
        *,
        layouts: tuple,
        stages: Mapping[str, str] | None = None,
        from_disk: bool = False,
    ):
        from .cpu_runtime import CpuKernel, load

        self.cdef = cdef
        self.meta = meta
        self.source = source
        self.stages = dict(stages or {})
        self.from_disk = from_disk
        self.layouts = layouts
        self._kernel = CpuKernel(load(blob, name=bounded(cdef.name)), meta.symbol, meta.params)
        self._fn = self._kernel.fn
        self._outputs = buffer_specs(cdef, binding, cdef.outputs, meta.zero_init)
        # the temporaries the kernel takes as parameters (a CPU kernel holds them itself)
        passed = {name for name, _, _ in meta.params}
        temporaries = [name for name in cdef.temporaries if name in passed]
        self._temporaries = buffer_specs(cdef, binding, temporaries, meta.zero_init)
        index = {name: i for i, name in enumerate(cdef.params)}
        n_out = len(cdef.outputs)
        plan = []
        for name, kind, _ in meta.params:
            if name == "tc_order":  # the emulated CUDA target's block and thread order
                plan.append(("r", 0))
            elif name in index:
                plan.append(("s" if kind == "scalar" else "i", index[name]))
            elif name in cdef.outputs:
                plan.append(("o", cdef.outputs.index(name)))
            else:
                plan.append(("t", n_out + temporaries.index(name)))
        self._plan = tuple(plan)
        # Where each parameter's pointer comes from when all are tensors: (0 inputs, 1 outputs,
        # 2 temporaries; index), else None (scalars, the emulation's order: the general loop)
        pools = {"i": 0, "o": 1, "t": 2}
        self._pointers = (
            tuple((pools[kind], i - n_out if kind == "t" else i) for kind, i in plan)
            if all(kind in pools for kind, _ in plan)
            else None
        )
        self._scalar_types = {
            i: cdef.scalars[name].dtype for name, i in index.items() if name in cdef.scalars
        }
        self.memory_bytes = len(blob) + LIBRARY_OVERHEAD + self._kernel.kept_bytes(torch.get_num_threads())
        self._token = id(self)
        BUDGET.admit(self)

    def release(self) -> None:
        """Free the workspaces the kernel keeps between calls (the budget evicted it); a later
        call allocates them again."""
        self._kernel.release()

    def run(
        self, inputs: Sequence[object], outputs: Sequence[torch.Tensor] | None
    ) -> tuple[torch.Tensor, ...]:
        """Run on ``inputs`` whose layout matched; ``outputs`` already checked. Always a tuple."""
        try:
            _touch(self._token)  # the most recently used in the memory budget
        except KeyError:  # evicted, yet still called (a graph or a handle holds it): counted again
            BUDGET.admit(self)
        if outputs is None:
            outs = allocate(self._outputs)
        else:
            outs = list(outputs)
            _check_aliasing(self.cdef, inputs, outs)
        temps = allocate(self._temporaries)
        if self._pointers is not None:
            pools = (inputs, outs, temps)
            args = [pools[p][i].data_ptr() for p, i in self._pointers]
        else:
            args = self._arguments(inputs, outs, temps)
        # error slots: bounds checks, a failed allocation of the workspace, the emulation's races
        # (slot 2: the emulated access was outside the tensor)
        errors = (ctypes.c_int64 * 3)()
        self._fn(torch.get_num_threads(), errors, *args)
        if errors[0]:
            self._raise_errors(int(errors[0]), int(errors[1]), int(errors[2]))
        return tuple(outs)

    def _arguments(self, inputs, outs, temps) -> list:
        """The kernel's arguments after ``nthreads`` and ``errors``: pointers and scalar values."""
        args = []
        for kind, i in self._plan:
            if kind == "i":
                args.append(inputs[i].data_ptr())
            elif kind == "o":
                args.append(outs[i].data_ptr())
            elif kind == "t":
                args.append(temps[i - len(outs)].data_ptr())
            elif kind == "r":
                args.append(EMULATION_ORDER.get())
            else:
                name = self.cdef.params[i]
                args.append(_scalar_value(self.cdef, name, inputs[i], self._scalar_types[i]))
        return args

    def _raise_errors(self, code: int, value: int, outside: int = 0) -> None:
        """The error the kernel reported in its error slots (``code`` non-zero; ``outside``: the
        emulated target's access at element offset ``value`` left tensor number ``outside - 1``,
        counting the written tensors, then the inputs)."""
        if code == -1:
            raise MemoryError(
                f"{self.cdef.name}: the kernel could not allocate its work buffers (wide accumulators, "
                "packed panels, temporaries)"
            )
        written = (*self.cdef.outputs, *self.cdef.temporaries)
        if outside:
            inputs = [n for n in self.cdef.params if n not in self.cdef.scalars]
            raise TCInternalError(
                f"{self.cdef.name}: the CUDA mapping touches element offset {value} of "
                f"'{(*written, *inputs)[outside - 1]}', outside the tensor (emulated target)"
            )
        if code < 0:  # the emulated target's race check
            index = -2 - code
            what = (
                f"'{written[index]}'"
                if index < len(written)
                else f"the shared-memory buffer '{self.meta.buffers[index - len(written)]}'"
            )
            raise TCInternalError(
                f"{self.cdef.name}: the CUDA mapping lets two threads or blocks touch element offset "
                f"{value} of {what} without a barrier between them (a race; emulated target)"
            )
        self._raise_bounds(code, value)

    def _raise_bounds(self, number: int, value: int) -> None:
        raise bounds_error(self.cdef, self.meta.checks[number - 1], value)


_touch = BUDGET.touch


def bounds_error(cdef, check, value: int) -> TCBoundsError:
    """The error of a failed run-time bounds check: ``check`` is ``(tensor, dim, size, span, verb)``
    (a stored check, or the printer's ``BoundsCheck`` as a tuple); ``value`` is the subscript's value."""
    from .polyhedral.errors import Span

    tensor, dim, size, span, verb = check
    return TCBoundsError(
        f"subscript {dim} of '{tensor}' {verb} element {value}, outside [0, {size}) "
        f"(dimension {dim} has size {size})",
        source=cdef.source,
        span=Span(*span),
        where=cdef.name,
    )


def _discard(store, key: str) -> None:
    try:
        store.discard(key)
    except TCError as e:
        warnings.warn(f"tcjit: could not remove an unusable cache entry: {e}", TCWarning, stacklevel=4)


def _call_layout(x) -> tuple:
    if isinstance(x, torch.Tensor):  # meta tensors stand for CPU ones (tcjit.compile)
        return (x.dtype, tuple(x.shape), x.stride(), "cpu" if x.device.type == "meta" else x.device.type)
    return (type(x),)


def _out_layouts(outputs) -> tuple | None:
    if outputs is None:
        return None
    return tuple(_call_layout(t) for t in outputs)


def _span(t: torch.Tensor) -> tuple[int, int]:
    if t.numel() == 0:
        return (0, 0)
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    start = t.data_ptr()
    return (start, start + (last + 1) * t.element_size())


def _self_overlapping(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` share memory (an expanded or overlapping view)."""
    dims = sorted((s, n) for n, s in zip(t.shape, t.stride()) if n > 1)
    reach = 0  # offset of the farthest element spanned by the smaller-stride dimensions
    for s, n in dims:
        if s <= reach:
            return True
        reach += (n - 1) * s
    return False


def _check_aliasing(cdef: CheckedDef, inputs: Sequence[object], outputs: Sequence[torch.Tensor]) -> None:
    """outputs= tensors must not overlap each other or any input, nor themselves."""
    for name, t in zip(cdef.outputs, outputs):
        if t.numel() > 1 and _self_overlapping(t):
            raise TCCallError(
                f"output '{name}' has elements that share memory (an expanded or overlapping view)",
                hint="pass a tensor with distinct elements, e.g. a fresh torch.empty(...)",
            )
    spans = [(n, _span(t)) for n, t in zip(cdef.outputs, outputs)]
    others = spans + [(p, _span(x)) for p, x in zip(cdef.params, inputs) if isinstance(x, torch.Tensor)]
    for i, (name, (a0, a1)) in enumerate(spans):
        for other, (b0, b1) in others[i + 1 :]:
            if a0 < b1 and b0 < a1:
                raise TCCallError(
                    f"output '{name}' shares memory with '{other}': kernels need outputs that alias nothing",
                    hint="pass a separate output tensor, or copy the input first",
                )


def specialize(kernel, binding: Binding, inputs, outputs, options, target: str) -> Specialization:
    """Find or build the specialisation of ``kernel`` for this call (checked by ``bind``)."""
    cdef = kernel.definition
    if target == "cuda":
        from .cuda_runtime import specialize_cuda

        return specialize_cuda(kernel, binding, inputs, outputs, options)
    if binding.device.type != "cpu":
        raise TCCallError(
            f"target {target!r} runs CPU tensors; these are on {binding.device}",
            hint="target='cuda' (or None) for CUDA tensors",
        )
    key = cache_key(kernel.canonical_source, cdef.name, inputs, outputs, target, options.to_json())
    layouts = (tuple(_call_layout(x) for x in inputs), _out_layouts(outputs))
    store = kernel_store()
    found = load_stored(
        store,
        key,
        ("kernel.so", "so_sha256"),
        lambda entry, blob: Specialization(
            cdef,
            binding,
            _Meta.from_json(entry.metadata["kernel"]),
            blob,
            entry.read("kernel.c").decode("utf-8"),
            layouts=layouts,
            from_disk=True,
        ),
    )
    if found is not None:
        return found
    with _BUILD_LOCK:  # isl contexts are per compilation, but one compiler at a time keeps memory flat
        from .cpu_runtime import compile_c, vector_bytes
        from .mapping.emulation import lower_emulated
        from .mapping.lower import lower_cpu

        strides = call_strides(cdef, binding, outputs)
        if target == "cuda-emulated":
            lowered = lower_emulated(cdef, binding.sizes, strides, options.values)
        else:
            lowered = lower_cpu(cdef, binding.sizes, strides, options.values, vector_bytes=vector_bytes())
        blob = compile_c(lowered.source, name=bounded(cdef.name))
    meta = _Meta.from_json(lowered.to_json())
    spec = Specialization(cdef, binding, meta, blob, lowered.source, layouts=layouts, stages=lowered.stages)
    save_stored(  # once it has loaded, as the CUDA path does
        store,
        key,
        {"kernel.so": blob, "kernel.c": lowered.source.encode("utf-8")},
        {"kernel": lowered.to_json(), "so_sha256": hashlib.sha256(blob).hexdigest()},
    )
    return spec


def call_strides(cdef: CheckedDef, binding: Binding, outputs) -> dict[str, tuple[int, ...]]:
    """Element strides of every tensor of a call: inputs as passed, ``outputs=`` as given, the
    others as tcjit allocates them (contiguous)."""
    strides = {name: tuple(t.stride()) for name, t in binding.tensors.items()}
    given = dict(zip(cdef.outputs, outputs)) if outputs is not None else {}
    for name in (*cdef.outputs, *cdef.temporaries):
        strides[name] = (
            tuple(given[name].stride()) if name in given else contiguous_strides(binding.output_shapes[name])
        )
    return strides


def load_stored(store, key: str, checked: tuple[str, str], build):
    """``build(entry, data)`` for the store's entry under ``key``, where ``data`` is the file
    ``checked[0]`` whose sha256 the entry's metadata records under ``checked[1]``; None if there is
    no store or entry, or the entry is unusable (one whose file is not what was stored is
    discarded). ``data`` is the content the store checked (:meth:`~tcjit.cache.Entry.read`), never
    the file read again: what runs is what was checked."""
    entry = store.get(key) if store is not None else None
    if entry is None:
        return None
    filename, field = checked
    try:
        data = entry.read(filename)
        if hashlib.sha256(data).hexdigest() == entry.metadata.get(field):
            return build(entry, data)
        _discard(store, key)  # consistent with its manifest, yet not what we stored
    except (OSError, KeyError, ValueError, TypeError, AttributeError):
        pass  # evicted or unusable under us: rebuild
    return None


def save_stored(store, key: str, files: Mapping[str, bytes], metadata: Mapping) -> None:
    """Put a compiled kernel in the store (if any); a failure to store is a warning, not an error."""
    if store is None:
        return
    try:
        store.put(key, files, metadata)
    except TCError as e:
        warnings.warn(f"tcjit: could not store the compiled kernel: {e}", TCWarning, stacklevel=4)
