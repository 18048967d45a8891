"""The compiler's pipeline, top to bottom: from a checked definition and one call to a loaded,
runnable specialisation.

1. **check** (:func:`tcjit.define`): the TC text parsed, typed and range-inferred
   (``polyhedral/lang``), once per definition;
2. **bind** (:func:`tcjit.binding.bind`): the call's tensors give the sizes, dtypes and strides;
   the options are the call's, a tuned record's or the defaults (:mod:`tcjit.kernel`);
3. **find**: the kernel store (:mod:`tcjit.kernel_cache`) under the key of DESIGN.md; a hit skips
   to 6 without importing isl or running a compiler (and counts as ``"loaded"`` in
   :func:`tcjit.compile_counts`; stages 4 and 5 count as ``"compiled"``);
4. **lower** (:meth:`Target.lower <tcjit.targets.Target.lower>`, ``mapping/``): Scop, schedule,
   tiling and legality proofs, the target's mapping, kernel IR, and its printing as source;
   :func:`lowered` returns this stage alone, with its readable intermediate forms (``stages``);
5. **build** (:meth:`Target.build <tcjit.targets.Target.build>`): the C compiler (CPU targets);
   CUDA source is kept as is and compiled by NVRTC when loaded;
6. **load** (:meth:`Target.load <tcjit.targets.Target.load>`): a callable specialisation
   (:class:`~tcjit.runtime.Compiled`), then stored, so that the next process finds it;
7. **wrap** (:mod:`tcjit.kernel`, :mod:`tcjit.autograd`, :mod:`tcjit.ops`): the Kernel's call, its
   gradients and its operator for ``torch.compile``.

The target is one backend object of :data:`tcjit.targets.TARGETS`. The readable forms before
stage 4 (the parsed, checked and canonical definition, its derived backward, and the Scop and
schedule that lowering starts from) are :func:`front_stage`'s: ``tcjit show`` prints them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from .binding import Binding
from .counters import count
from .dynamic import SYMBOLIC_TARGETS, Family, key_part, mentions
from .kernel_cache import BUILD_LOCK, cache_key, kernel_store, load_stored, save_stored
from .mapping.layout import contiguous_layout, contiguous_strides
from .mapping.options import MappingOptions
from .polyhedral.errors import TCInternalError
from .polyhedral.lang.checked import CheckedDef
from .runtime import Compiled, call_layout, out_layouts
from .stages import DEFAULT_FUSION, FRONT_STAGES, checked_text
from .targets import TARGETS

__all__ = [
    "FRONT_STAGES",
    "call_strides",
    "default_options",
    "front_stage",
    "lowered",
    "representative_strides",
    "specialize",
]


def default_options(cdef: CheckedDef, sizes: Mapping[str, int], target: str):
    """The options a call without ``options=`` uses when none were tuned for it: chosen from the
    kernel's structure by :func:`tcjit.mapping.defaults.default_options` (its rules are documented
    there and in docs/performance.md), for the CPU at the host's vector width."""
    return default_choice(cdef, sizes, target)[0]


def default_choice(cdef: CheckedDef, sizes: Mapping[str, int], target: str):
    """:func:`default_options` and the rule that chose them, in words
    (:func:`tcjit.mapping.defaults.default_choice`)."""
    from .mapping.defaults import default_choice as choose

    if target == "cpu":
        from .cpu_runtime import vector_bytes

        return choose(cdef, sizes, target, vector_bytes=vector_bytes())
    return choose(cdef, sizes, target)


def specialize(
    kernel,
    binding: Binding,
    inputs,
    outputs,
    options,
    target: str,
    *,
    family: Family | None = None,
    representative: Mapping[str, int] | None = None,
) -> Compiled:
    """Find or build the specialisation of ``kernel`` for this call (``binding``: checked by
    ``bind``), with ``options`` (validated) on ``target``.

    With a ``family`` (:mod:`tcjit.dynamic`), the specialisation leaves ``family.symbolic``
    symbolic and serves every call of the family; it is keyed without their values and mapped at
    the ``representative`` sizes (a call of the family seen: every size, the others' values
    ``binding``'s).
    """
    backend = TARGETS[target]
    cdef = kernel.definition
    symbolic = frozenset() if family is None else family.symbolic
    if symbolic and target not in SYMBOLIC_TARGETS:
        raise TCInternalError(f"{cdef.name}: symbolic sizes on the {target} target are not supported yet")
    backend.check_device(binding)
    key = cache_key(
        kernel.canonical_source,
        cdef.name,
        inputs,
        outputs,
        backend.identity(binding),
        options.to_json(),
        symbolic=None if family is None else key_part(cdef, family),
    )
    layouts = family if family is not None else (tuple(call_layout(x) for x in inputs), out_layouts(outputs))
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
        count("loaded")
        return _checked_sizes(found, symbolic)
    with BUILD_LOCK:
        count("compiled")  # before lowering: a build that fails counts too
        if symbolic:
            sizes = dict(representative or binding.sizes)
            strides = representative_strides(cdef, binding, outputs, sizes, symbolic)
            lowering = backend.lower(cdef, sizes, strides, options.values, symbolic=symbolic)
        else:
            lowering = backend.lower(
                cdef, binding.sizes, call_strides(cdef, binding, outputs), options.values
            )
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
    _checked_sizes(spec, symbolic)
    save_stored(store, key, files, metadata)  # once it has loaded
    return spec


def _checked_sizes(spec: Compiled, symbolic: frozenset[str]) -> Compiled:
    """``spec``, once its symbolic sizes are those asked for (a kernel that takes other sizes
    would be passed the wrong arguments)."""
    if frozenset(spec.sizes) != symbolic:
        raise TCInternalError(
            f"{spec.cdef.name}: the kernel takes the symbolic sizes {sorted(spec.sizes)}, "
            f"{sorted(symbolic)} were asked for"
        )
    return spec


def lowered(cdef: CheckedDef, sizes: Mapping[str, int], options=None, target: str = "cpu"):
    """Stage 4 alone, for contiguous tensors: the source ``target`` runs for ``cdef`` at ``sizes``
    with ``options`` (:class:`~tcjit.MappingOptions`, validated here; None: a call's defaults),
    and its ``stages`` (what ``tcjit show`` prints)."""
    if options is None:
        options = default_options(cdef, sizes, target)
    values = options.validate(target).values
    strides = contiguous_layout(cdef, sizes)
    return TARGETS[target].lower(cdef, sizes, strides, values)


def front_stage(
    cdef: CheckedDef,
    stage: str,
    sizes: Mapping[str, int] | None = None,
    *,
    fix_sizes: bool = False,
    options: MappingOptions | None = None,
    fusion: str | None = None,
    tiles: Sequence[int] | None = None,
    wrt: Sequence[str] | None = None,
    absent: Collection[str] = (),
) -> str:
    """The text of front stage ``stage`` (one of :data:`FRONT_STAGES`) of ``cdef``, as ``tcjit
    show --stage STAGE`` prints it (lines ended by newlines), made as the pipeline makes it:

    * ``ast``: the definition as parsed (stage 1), as an indented tree;
    * ``checked``: its signature, temporaries and statements as checked (stage 1): value types,
      index and reduction ranges, with their values where ``sizes`` fixes them;
    * ``canonical``: the definition printed back as canonical TC, the text of the cache key;
    * ``backward``: the augmented forward and the backward automatic differentiation derives
      (``polyhedral/autodiff``), printed canonically: the gradients of the inputs ``wrt`` (None:
      every input of a float type), with no ``d_<O>`` taken for the ``absent`` outputs;
    * ``scop``: the polyhedral model lowering starts from (statements, domains, accesses),
      parametric in the sizes, or specialised to ``sizes`` with ``fix_sizes``;
    * ``schedule``: that Scop's schedule tree, computed from its dependences with the outer fusion
      strategy ``fusion``, its outermost band tiled by ``tiles``; left out, they are ``options``'
      ``outer_schedule_fusion_strategy`` and ``tile``, or without options
      :data:`~tcjit.stages.DEFAULT_FUSION` and no tiling.
    """
    from .polyhedral.lang.printer import def_to_tc

    if stage not in FRONT_STAGES:
        raise ValueError(f"no front stage {stage!r}; they are {', '.join(FRONT_STAGES)}")
    sizes = dict(sizes or {})
    if stage == "ast":
        from .polyhedral.lang.ast_text import ast_text

        return ast_text(cdef.ast) + "\n"
    if stage == "checked":
        return checked_text(cdef, sizes)
    if stage == "canonical":
        return def_to_tc(cdef.ast)
    if stage == "backward":
        from .polyhedral.autodiff import derive
        from .polyhedral.lang.check import check_source

        d = derive(cdef, None if wrt is None else tuple(wrt), absent=frozenset(absent))
        return "".join(def_to_tc(check_source(text).defs[0].ast) + "\n" for text in (d.forward, d.backward))
    from .polyhedral.schedule import schedule, schedule_text, tile
    from .polyhedral.scop import build_scop, compute_dependences

    scop = build_scop(cdef, sizes if fix_sizes else None)
    if stage == "scop":
        return scop.describe() + "\n"
    if fusion is None:
        fusion = DEFAULT_FUSION if options is None else options.get("outer_schedule_fusion_strategy")
    if tiles is None:
        tiles = () if options is None else options.get("tile")
    return schedule_text(tile(schedule(scop, compute_dependences(scop), fusion=fusion), tiles)) + "\n"


def representative_strides(
    cdef: CheckedDef, binding: Binding, outputs, sizes: Mapping[str, int], symbolic: Collection[str]
) -> dict[str, tuple[int, ...]]:
    """Element strides of every tensor of a call of a family (:mod:`tcjit.dynamic`) at the
    representative ``sizes``: contiguous for the tensors whose shape mentions a ``symbolic`` size
    and for those tcjit allocates, as passed (the family's own) for the others."""
    given = dict(zip(cdef.outputs, outputs)) if outputs is not None else {}
    strides = {}
    for t in cdef.tensor_infos:
        passed = binding.tensors.get(t.name, given.get(t.name))
        if passed is not None and not mentions(cdef, t.name, symbolic):
            strides[t.name] = tuple(passed.stride())
        else:
            strides[t.name] = contiguous_strides(tuple(e.evaluate(sizes) for e in t.shape))
    return strides


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
