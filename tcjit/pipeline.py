"""The compiler's pipeline, top to bottom: from a checked definition and one call to a loaded,
runnable specialisation.

1. **check** (:func:`tcjit.define`): the TC text parsed, typed and range-inferred
   (``polyhedral/lang``), once per definition;
2. **bind** (:func:`tcjit.binding.bind`): the call's tensors give the sizes, dtypes and strides;
   the options are the call's, a tuned record's or the defaults (:mod:`tcjit.kernel`);
3. **find**: the kernel store (:mod:`tcjit.kernel_cache`) under the key of DESIGN.md; a hit skips
   to 6 without importing isl or running a compiler;
4. **lower** (:meth:`Target.lower <tcjit.targets.Target.lower>`, ``mapping/``): Scop, schedule,
   tiling and legality proofs, the target's mapping, kernel IR, and its printing as source;
   :func:`lowered` returns this stage alone, with its readable intermediate forms (``stages``);
5. **build** (:meth:`Target.build <tcjit.targets.Target.build>`): the C compiler (CPU targets);
   CUDA source is kept as is and compiled by NVRTC when loaded;
6. **load** (:meth:`Target.load <tcjit.targets.Target.load>`): a callable specialisation
   (:class:`~tcjit.runtime.Compiled`), then stored, so that the next process finds it;
7. **wrap** (:mod:`tcjit.kernel`, :mod:`tcjit.autograd`, :mod:`tcjit.ops`): the Kernel's call, its
   gradients and its operator for ``torch.compile``.

The target is one backend object of :data:`tcjit.targets.TARGETS`.
"""

from __future__ import annotations

from collections.abc import Mapping

from .binding import Binding
from .kernel_cache import BUILD_LOCK, cache_key, kernel_store, load_stored, save_stored
from .mapping.layout import contiguous_strides
from .polyhedral.lang.checked import CheckedDef
from .runtime import Compiled, call_layout, out_layouts
from .targets import TARGETS

__all__ = ["call_strides", "default_options", "lowered", "specialize"]


def default_options(cdef: CheckedDef, sizes: Mapping[str, int], target: str):
    """The options a call without ``options=`` uses when none were tuned for it: chosen from the
    kernel's structure by :func:`tcjit.mapping.defaults.default_options` (its rules are documented
    there and in docs/performance.md), for the CPU at the host's vector width."""
    from .mapping.defaults import default_options as choose

    if target == "cpu":
        from .cpu_runtime import vector_bytes

        return choose(cdef, sizes, target, vector_bytes=vector_bytes())
    return choose(cdef, sizes, target)


def specialize(kernel, binding: Binding, inputs, outputs, options, target: str) -> Compiled:
    """Find or build the specialisation of ``kernel`` for this call (``binding``: checked by
    ``bind``), with ``options`` (validated) on ``target``."""
    backend = TARGETS[target]
    cdef = kernel.definition
    backend.check_device(binding)
    key = cache_key(
        kernel.canonical_source, cdef.name, inputs, outputs, backend.identity(binding), options.to_json()
    )
    layouts = (tuple(call_layout(x) for x in inputs), out_layouts(outputs))
    store = kernel_store()
    found = load_stored(
        store,
        key,
        backend.checked,
        lambda entry, data: backend.load(
            cdef, binding, data, entry.metadata, entry.read, layouts=layouts, from_disk=True
        ),
    )
    if found is not None:
        return found
    with BUILD_LOCK:
        lowering = backend.lower(cdef, binding.sizes, call_strides(cdef, binding, outputs), options.values)
        files, metadata = backend.build(cdef, lowering)
    spec = backend.load(
        cdef,
        binding,
        files[backend.checked[0]],
        metadata,
        files.__getitem__,
        layouts=layouts,
        stages=lowering.stages,
    )
    save_stored(store, key, files, metadata)  # once it has loaded
    return spec


def lowered(cdef: CheckedDef, sizes: Mapping[str, int], options=None, target: str = "cpu"):
    """Stage 4 alone, for contiguous tensors: the source ``target`` runs for ``cdef`` at ``sizes``
    with ``options`` (:class:`~tcjit.MappingOptions`, validated here; None: a call's defaults),
    and its ``stages`` (what ``tcjit show`` prints)."""
    if options is None:
        options = default_options(cdef, sizes, target)
    values = options.validate(target).values
    strides = {
        t.name: contiguous_strides(tuple(int(s.evaluate(sizes)) for s in t.shape)) for t in cdef.tensor_infos
    }
    return TARGETS[target].lower(cdef, sizes, strides, values)


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
