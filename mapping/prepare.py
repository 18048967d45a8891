"""What every target's lowering shares: steps 1 to 3 of DESIGN.md's pipeline, and the kernel's
parameters, header and readable stages.

:func:`prepare` gives

1. the Scop (parametric, or specialised when the options fix parameters before scheduling or when
   the ranges are not affine in the sizes) and its dependences;
2. the isl schedule with the options' outer fusion strategy, then specialised to the sizes and
   tiled by the options' tile sizes (:func:`tiled_schedule`);
3. proofs: the tiled schedule respects every dependence (:func:`check_legality`), and every affine
   access stays inside its tensor (a violation is the program's fault: :class:`TCBoundsError`
   pointing at the access, raised before anything runs); subscripts that are not affine are checked
   when the kernel runs.

The targets' lowerings go on from there: :mod:`.lower_cpu`, :mod:`.lower_gpu`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import islpy as isl

from ..polyhedral.errors import TCBoundsError
from ..polyhedral.lang import ast as A
from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.lang.ranges import affine_form
from ..polyhedral.names import isl_name, tc_names_in
from ..polyhedral.schedule import (
    PROOF_OPERATIONS,
    bands,
    check_legality,
    member_extent,
    schedule,
    schedule_text,
    tile,
)
from ..polyhedral.scop import Dependences, Scop, build_scop, compute_dependences, instance_text
from . import ir
from .c_exprs import CParam, c_storage_type
from .cpu import hoist_initialisations, initialised_in_place
from .distribution import distribute_bands, fuse_rows
from .initialisations import fold_initialisations
from .ir_text import render
from .layout import symbolic_in
from .symbolic import affine_in_sizes, params_context

__all__ = [
    "Prepared",
    "covered_initialisations",
    "kernel_header",
    "kernel_params",
    "kernel_stages",
    "outer_band_extents",
    "prepare",
    "tiled_schedule",
]


def _fixed(scop: Scop, sizes: Mapping[str, int], symbolic: frozenset[str] = frozenset()) -> isl.Set:
    return params_context(scop.ctx, scop.params, sizes, symbolic)


def _build_scop(cdef: CheckedDef, sizes: Mapping[str, int], fix: bool) -> Scop:
    if fix or not affine_in_sizes(cdef):  # not affine in the sizes: isl needs numbers
        return build_scop(cdef, sizes)
    return build_scop(cdef)


def _box(ctx: isl.Context, tensor: str, shape: tuple[int | str, ...], params: tuple[str, ...]) -> isl.Set:
    names = [f"a{k}" for k in range(len(shape))]
    cons = " and ".join(f"0 <= {a} < {n}" for a, n in zip(names, shape)) or "0 = 0"
    head = f"[{', '.join(map(isl_name, params))}] -> " if params else ""
    return isl.Set.read_from_str(ctx, f"{head}{{ {isl_name(tensor)}[{', '.join(names)}] : {cons} }}")


def _shapes(cdef: CheckedDef, sizes: Mapping[str, int], symbolic: frozenset[str]) -> dict:
    """Every tensor's shape: values, or isl text of the symbolic sizes where one depends on them."""
    fixed = {s: v for s, v in sizes.items() if s not in symbolic}
    return {
        t.name: tuple(
            d.substitute(fixed).to_isl() if symbolic_in(d, symbolic) else d.evaluate(sizes) for d in t.shape
        )
        for t in cdef.tensor_infos
    }


def _prove_bounds(
    scop: Scop,
    fixed: isl.Set,
    shapes: Mapping[str, tuple[int | str, ...]],
    sizes: Mapping[str, int],
    symbolic: frozenset[str] = frozenset(),
) -> frozenset[int]:
    """Raise TCBoundsError for an affine access that leaves its tensor; return the subscripts to
    check at run time: gathers, guarded accesses that may leave it, and (with ``symbolic`` sizes)
    accesses that stay inside at ``sizes`` but not at every admissible value."""
    cdef = scop.cdef
    concrete = _fixed(scop, sizes)
    checked: set[int] = set()
    guarded = _guarded_accesses(cdef)
    for acc in scop.accesses:
        shape = shapes[acc.tensor]
        args = _subscripts(scop, acc)
        if not acc.exact:
            dims = set(scop.statement(acc.statement).dims)
            for arg in args:
                if (
                    affine_form(arg, dims, lambda n: n in cdef.sizes, lambda t, k: cdef.tensor(t).shape[k])
                    is None
                ):
                    checked.add(id(arg))
        rel = (scop.writes if acc.write else scop.reads).intersect_params(fixed)
        tag = isl.UnionSet.read_from_str(
            scop.ctx, f"{{ [{instance_text(scop.statement(acc.statement))} -> {acc.ref}[]] }}"
        )
        reached = rel.intersect_domain(tag).range()
        if reached.is_empty():
            continue
        box = isl.UnionSet.from_set(_box(scop.ctx, acc.tensor, shape, scop.params).intersect_params(fixed))
        outside = reached.subtract(box)
        if outside.is_empty():
            continue
        if id(acc.node) in guarded:  # maybe never evaluated out there: check as it runs
            checked.update(id(arg) for arg in args)
            continue
        if symbolic:
            outside = outside.intersect_params(concrete)
            if outside.is_empty():  # only at other values of the symbolic sizes: check as it runs
                checked.update(id(arg) for arg in args)
                continue
            shape = tuple(t.evaluate(sizes) for t in cdef.tensor(acc.tensor).shape)
        point = outside.sample_point()
        coords = [int(point.get_coordinate_val(isl.dim_type.set, k).to_python()) for k in range(len(shape))]
        k = next(k for k, (c, n) in enumerate(zip(coords, shape)) if not 0 <= c < n)
        node = acc.node
        verb = "writes" if acc.write else "reads"
        span = node.span if not isinstance(node, A.Statement) else node.lhs_span
        raise TCBoundsError(
            f"subscript {k} of '{acc.tensor}' {verb} element {coords[k]}, outside [0, {shape[k]}) "
            f"(dimension {k} has size {shape[k]}; sizes {', '.join(f'{a}={b}' for a, b in sizes.items())})",
            source=cdef.source,
            span=span,
            where=cdef.name,
        )
    return frozenset(checked)


def _subscripts(scop: Scop, acc) -> tuple[A.Expr, ...]:
    """The typed subscripts of ``acc`` as the printers see them: a read's own, or the left-hand
    side of the checked statement for the element a statement writes (or an update reads back)."""
    if isinstance(acc.node, A.Statement):
        st = scop.statement(acc.statement)
        if st.kind == "init" and not st.source.plain_lhs:
            return ()  # the elements its update reaches, named by plain variables
        return tuple(st.source.lhs)
    return tuple(acc.node.args)


def _guarded_accesses(cdef: CheckedDef) -> set[int]:
    """Accesses evaluated only under a condition: in a branch of ``?:`` or right of ``&&``/``||``."""
    found: set[int] = set()

    def visit(e: A.Expr, guarded: bool) -> None:
        if isinstance(e, A.Access) and guarded:
            found.add(id(e))
        if isinstance(e, A.Select):
            visit(e.cond, guarded)
            visit(e.then, True)
            visit(e.other, True)
            return
        if isinstance(e, A.Binary) and e.op in ("&&", "||"):
            visit(e.lhs, guarded)
            visit(e.rhs, True)
            return
        for c in A.children(e):
            visit(c, guarded)

    for st in cdef.statements:
        visit(st.rhs, False)
    return found


def _zero_init(scop: Scop, fixed: isl.Set, shapes: Mapping[str, tuple[int, ...]]) -> tuple[str, ...]:
    """Outputs and temporaries with an element read before any write, or never written."""
    cdef = scop.cdef
    reads = scop.untagged_reads.intersect_params(fixed)
    writes = scop.untagged_writes.intersect_params(fixed)
    order = scop.program_order.intersect_params(fixed)
    unsourced = (
        isl.UnionAccessInfo.from_sink(reads)
        .set_must_source(writes)
        .set_schedule_map(order)
        .compute_flow()
        .get_may_no_source()
        .range()
    )
    out = []
    for name in (*cdef.outputs, *cdef.temporaries):
        box = isl.UnionSet.from_set(_box(scop.ctx, name, shapes[name], scop.params).intersect_params(fixed))
        written = writes.range().intersect(box)
        if not box.is_subset(written) or not unsourced.intersect(box).is_empty():
            out.append(name)
    return tuple(out)


def covered_initialisations(scop: Scop, fixed: isl.Set) -> frozenset[str]:
    """The ``!`` initialisations (``S0_init``) whose update (``S0``) writes every element they
    write: the printer may leave one out where register tiles start its sums from zero
    (:func:`~tcjit.mapping.c_kernel.print_kernel`). An output element whose reduction is empty
    (a ``where`` excluding all its points, an empty range) keeps its initialisation."""
    written: dict[str, isl.Set] = {}

    def add(m: isl.Map) -> None:
        name = m.get_tuple_name(isl.dim_type.in_)
        written[name] = m.range() if name not in written else written[name].union(m.range())

    scop.untagged_writes.intersect_params(fixed).foreach_map(add)
    names = {s.name for s in scop.statements}
    return frozenset(
        s.name
        for s in scop.statements
        if s.kind == "init"
        and (update := s.name.removesuffix("_init")) in names
        and s.name in written
        and update in written
        and written[s.name].is_subset(written[update])
    )


def tiled_schedule(
    cdef: CheckedDef,
    sizes: Mapping[str, int],
    options,
    *,
    window: int = 0,
    packed: frozenset[str] = frozenset(),
    fold: bool = False,
    distribute: bool = False,
    symbolic: frozenset[str] = frozenset(),
) -> tuple[Scop, Dependences, isl.Set, isl.Schedule]:
    """Steps 1 and 2 of the pipeline, common to every target: the Scop, its dependences, the
    parameters' values (a params set) and the schedule, specialised to ``sizes``, with the
    initialisations hoisted (``window``: see :func:`~tcjit.mapping.cpu.hoist_initialisations`;
    ``packed``: the inputs the CPU kernel reads from transposed panels, :mod:`.packing`) and the
    outermost bands tiled, checked for legality. With ``fold``, the initialisations are not
    hoisted but folded into their update's loop nest after tiling
    (:func:`~tcjit.mapping.initialisations.fold_initialisations`: the GPU's form). With
    ``distribute``, bands whose statements follow one another along their inner members become
    a band over the rows above one band per statement, before tiling
    (:func:`~tcjit.mapping.distribution.distribute_bands`: the GPU's form with block reductions),
    and with fusion ``Max`` kernels of the same rows become one
    (:func:`~tcjit.mapping.distribution.fuse_rows`). With ``symbolic`` sizes (:mod:`.symbolic`),
    the parameters' values leave those free (``>= 1``) and every proof holds for all of them."""
    # The parametric Scop assumes every size >= 1 (its context): at a size of 0 it would be empty,
    # and a '!' reduction over an empty range would lose its initialisation to the identity.
    # With symbolic sizes the Scop stays parametric (fix_parameters_before_scheduling is ignored).
    fix = not symbolic and (
        options.fix_parameters_before_scheduling or any(sizes[s] == 0 for s in cdef.sizes)
    )
    scop = _build_scop(cdef, sizes, fix)
    deps = compute_dependences(scop)
    sched = schedule(scop, deps, fusion=options.outer_schedule_fusion_strategy)
    fixed = _fixed(scop, sizes, symbolic)
    sched = sched.intersect_domain(sched.get_domain().intersect_params(fixed))
    legal_sizes = {p: sizes[p] for p in scop.params if p not in symbolic} or None
    windows = initialised_in_place(scop, packed) if window else frozenset()
    if not fold:
        sched = hoist_initialisations(sched, deps, legal_sizes, window=window, windows=windows)
    if distribute:
        sched = distribute_bands(sched, deps, legal_sizes, fixed)
        if options.outer_schedule_fusion_strategy == "Max":
            sched = fuse_rows(sched, deps, legal_sizes, fixed)
    sched = tile(sched, options.tile)
    if fold:
        sched = fold_initialisations(sched, deps, legal_sizes)
    # with symbolic sizes a proof can run for hours (a backward kernel with every size symbolic):
    # cut short, it raises ProofTooCostly, and the runtime specialises the call's sizes instead
    check_legality(sched, deps, sizes=legal_sizes, max_operations=PROOF_OPERATIONS)
    return scop, deps, fixed, sched


def outer_band_extents(cdef: CheckedDef, sizes: Mapping[str, int], options) -> tuple[int, ...]:
    """How many iterations each member of the outermost bands has, before tiling: member ``i``'s
    extent is the largest over the bands (the ``tile`` option's ``i``-th size applies to every
    outermost band's ``i``-th member). What the tuner's tile choices are specialised to: for
    ``C(m, n) +=! A(m, r_k) * B(r_k, n)`` at M=64, N=32, K=16 the extents are ``(64, 32, 16)``.

    :arg options: :class:`~tcjit.mapping.options.MappingOptions` (their fusion strategy and
        parameter fixing shape the bands; their tile sizes are ignored).
    """
    _, _, _, sched = tiled_schedule(cdef, sizes, options.tile().values)
    extents: list[int] = []
    for band in bands(sched, outermost=True):
        for i in range(band.band_n_member()):
            extent = member_extent(band, i)
            if not extent:
                continue  # no instances, or unbounded (cannot happen with fixed sizes)
            if i < len(extents):
                extents[i] = max(extents[i], extent)
            else:
                extents.append(extent)
    return tuple(extents)


@dataclass(frozen=True)
class Prepared:
    """Steps 1 to 3 of the pipeline, common to every target (:func:`prepare`).

    :ivar fixed: the parameters' values (a params set). :ivar sched: the tiled schedule.
    :ivar checked: the subscripts to check at run time. :ivar zero: what the runtime must zero.
    """

    scop: Scop
    deps: Dependences
    fixed: isl.Set
    sched: isl.Schedule
    checked: frozenset[int]
    zero: tuple[str, ...]

    def __iter__(self):
        return iter((self.scop, self.deps, self.fixed, self.sched, self.checked, self.zero))


def prepare(
    cdef: CheckedDef,
    sizes: Mapping[str, int],
    options,
    *,
    window: int = 0,
    packed: frozenset[str] = frozenset(),
    fold: bool = False,
    distribute: bool = False,
    symbolic: frozenset[str] = frozenset(),
) -> Prepared:
    """:func:`tiled_schedule`, then the proofs on it: the affine accesses stay inside their
    tensors (:class:`TCBoundsError` otherwise), and which outputs must start zeroed (``window``,
    ``packed``, ``fold``, ``distribute``, ``symbolic``: as :func:`tiled_schedule`'s)."""
    shapes = _shapes(cdef, sizes, symbolic)
    scop, deps, fixed, sched = tiled_schedule(
        cdef,
        sizes,
        options,
        window=window,
        packed=packed,
        fold=fold,
        distribute=distribute,
        symbolic=symbolic,
    )
    checked = _prove_bounds(scop, fixed, shapes, sizes, symbolic)
    return Prepared(scop, deps, fixed, sched, checked, _zero_init(scop, fixed, shapes))


def kernel_params(cdef: CheckedDef) -> list[CParam]:
    """The parameters of a kernel of ``cdef`` after the runtime's own: inputs (``const``) and
    scalars in order, then outputs and temporaries."""
    params: list[CParam] = []
    for name in cdef.params:
        if name in cdef.scalars:
            t = cdef.scalars[name].dtype
            params.append(CParam(name, "scalar", "float" if t.is_half else c_storage_type(t)))
        else:
            params.append(
                CParam(name, "tensor", f"const {c_storage_type(cdef.tensor(name).dtype)} *restrict")
            )
    for name in (*cdef.outputs, *cdef.temporaries):
        params.append(CParam(name, "tensor", f"{c_storage_type(cdef.tensor(name).dtype)} *restrict"))
    return params


def kernel_header(cdef: CheckedDef, what: str) -> str:
    """The comment a generated kernel starts with: the definition's signature and ``what``."""
    return "/*\n" + _comment_safe(cdef.signature()) + "\n" + _comment_safe(what) + "\n */"


def kernel_stages(sched: isl.Schedule, mapped: isl.Schedule, decisions, body: ir.Node) -> dict[str, str]:
    """The readable intermediate forms ``tcjit show`` prints: the tiled schedule, the mapped tree,
    the mapper's decisions and the kernel IR ``body`` that is printed; sizes, indices and tensors
    by their TC names."""
    return {
        "schedule": schedule_text(sched),
        "tree": schedule_text(mapped),
        "decisions": "\n".join(decisions),
        "ir": tc_names_in(render(body)),
    }


def _comment_safe(text: str) -> str:
    return " * " + text.replace("*/", "* /").replace("\n", "\n * ")
