"""Scheduling: fused, tiled isl schedule trees, and the legality check every schedule passes.

* :func:`schedule` runs the isl scheduler on a Scop with one of TC's fusion strategies. TC steered
  fusion with a merge callback of a patched isl; islpy has no such callback, so the strategies are
  the closest scheduler settings (notes/polyhedral.md 2(a)):

  ``Max``
      ``schedule_whole_component``: fuse everything that can legally share loops.
  ``Preserve3Coincident``
      isl's incremental clustering with ``maximize_coincidence``: a fusion that would lose
      coincident (parallel) members is refused.
  ``Min``
      ``schedule_serialize_sccs``: each strongly connected component scheduled alone.

  Validity, proximity and coincidence are all the dependences, as in TC; reduction loops therefore
  come out non-coincident, and a mapping that emits a real parallel reduction relaxes that later.
  Scheduling a parametric Scop (sizes as isl parameters) is what TC does by default
  (``fix_parameters_before_scheduling`` off): isl's scheduler solves much harder problems when the
  sizes are fixed constants (kronecker3 fused with ``Max``: 0.1 s parametric, 14 s specialised), so
  specialise after scheduling unless the options ask otherwise.
* :func:`tile` tiles the outermost band of every branch with the given sizes, TC style (tile loop
  ``floor(i / T)``, point loop ``i mod T``); a size of 0 leaves that member untiled.
* :func:`check_legality` proves that every dependence goes forward in a schedule. A failure is a
  compiler bug and raises :class:`TCInternalError`: wrong code is never emitted silently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import islpy as isl

from .errors import ProofTooCostly, TCInternalError
from .names import isl_name, tc_names_in
from .scop import Dependences, Scop

__all__ = [
    "FUSION_STRATEGIES",
    "bands",
    "check_legality",
    "node_at",
    "node_path",
    "rewrite_outermost_bands",
    "schedule",
    "schedule_text",
    "tile",
]

FUSION_STRATEGIES = ("Max", "Preserve3Coincident", "Min")

# Untiled members get a tile this large: one tile, the whole range in the point loop.
_UNTILED = 1 << 30


def _configure(ctx: isl.Context, fusion: str) -> None:
    if fusion not in FUSION_STRATEGIES:
        raise TCInternalError(f"unknown fusion strategy {fusion!r}")
    ctx.set_schedule_whole_component(1 if fusion == "Max" else 0)
    ctx.set_schedule_serialize_sccs(1 if fusion == "Min" else 0)
    ctx.set_schedule_maximize_coincidence(1 if fusion == "Preserve3Coincident" else 0)
    ctx.set_schedule_outer_coincidence(0)
    ctx.set_schedule_maximize_band_depth(1)
    # Tiles as TC builds them: tile loops count tiles, point loops run from 0 to T - 1.
    ctx.set_tile_scale_tile_loops(0)
    ctx.set_tile_shift_point_loops(1)


def schedule(scop: Scop, deps: Dependences, *, fusion: str = "Preserve3Coincident") -> isl.Schedule:
    """Compute a schedule tree for ``scop`` that respects ``deps``, fusing as ``fusion`` says.

    :arg fusion: one of :data:`FUSION_STRATEGIES`.
    :returns: the schedule, already checked by :func:`check_legality`.
    """
    _configure(scop.ctx, fusion)
    constraints = (
        isl.ScheduleConstraints.on_domain(scop.domain)
        .set_context(scop.context)
        .set_validity(deps.all)
        .set_proximity(deps.all)
        .set_coincidence(deps.all)
    )
    result = constraints.compute_schedule()
    if result is None:  # isl found none; the program order always works
        result = isl.Schedule.from_domain(scop.domain).insert_partial_schedule(
            isl.MultiUnionPwAff.from_union_map(scop.program_order)
        )
    check_legality(result, deps)
    return result


PROOF_OPERATIONS = 2_000_000
"""isl's operations a legality proof may take where sizes are left symbolic (:func:`check_legality`'s
``max_operations``; the mapper's optional changes and the tiled schedule's own proof pass it): far
above what the suite's forward kernels need, far below the hours a backward kernel with every size
symbolic can take."""


def check_legality(
    sched: isl.Schedule,
    deps: Dependences,
    *,
    sizes: Mapping[str, int] | None = None,
    max_operations: int | None = None,
) -> None:
    """Raise :class:`TCInternalError` unless every dependence is lexicographically positive.

    Each dependence is mapped into schedule space and its distance vectors (sink minus source) must
    all be lexicographically positive: a union of ``n`` simple pieces, far cheaper for isl than the
    lexicographic order between the schedule's instances when tiles add floor divisions.

    :arg sizes: concrete values for size parameters. With floor divisions from tiling, a proof
        parametric in the sizes can take isl minutes (hours, for a backward kernel with every
        size symbolic): the sizes left free (a kernel with symbolic sizes) are projected out of
        the dependences and of the schedule instead. The distances then range over every value of
        them at once, a superset of each value's (the schedule's functions do not depend on the
        sizes, only its domain does): a proof for all values, as cheap as one for concrete sizes.
        Where the superset is not positive (a schedule that depends on a size), the parametric
        proof decides.
    :arg max_operations: with sizes left free, stop the proof after this many of isl's operations
        and raise :class:`ProofTooCostly` (a :class:`TCInternalError`: unproven): even projected,
        a backward kernel's proof with every size symbolic can run for hours (kronecker3's). For
        an optional change a mapper tries (a register tile, a distribution) "not proven" means
        "not made"; for the tiled schedule's own proof the runtime specialises the call's sizes
        instead (tcjit/dynamic.py, "Proofs"). Concrete sizes are never cut short.
    """
    smap = sched.get_map()
    dep = deps.all
    if sizes:
        cons = " and ".join(f"{isl_name(k)} = {v}" for k, v in sizes.items())
        names = ", ".join(map(isl_name, sizes))
        fixed = isl.Set.read_from_str(sched.get_ctx(), f"[{names}] -> {{ : {cons} }}")
        dep = dep.intersect_params(fixed)
        smap = smap.intersect_params(fixed)
    if dep.is_empty():
        return
    fixed_names = {isl_name(k) for k in sizes or ()}
    free = [
        m.get_space().get_dim_name(isl.dim_type.param, i)
        for m in (dep, smap)
        for i in range(m.dim(isl.dim_type.param))
    ]
    if not any(name not in fixed_names for name in free):
        _check_distances(dep, smap, sched.get_ctx())
        return
    ctx = sched.get_ctx()
    limit = ctx.get_max_operations()
    if max_operations is not None:
        ctx.reset_operations()
        ctx.set_max_operations(max_operations)
    try:
        try:
            _check_distances(dep.project_out_all_params(), smap.project_out_all_params(), ctx)
            return
        except TCInternalError:
            pass  # maybe spurious: the parametric proof decides
        _check_distances(dep, smap, ctx)
    except isl.Error as e:
        if max_operations is None:
            raise
        raise ProofTooCostly(f"legality proof stopped after {max_operations} isl operations") from e
    finally:
        if max_operations is not None:
            ctx.set_max_operations(limit)
            ctx.reset_operations()


def _check_distances(dep: isl.UnionMap, smap: isl.UnionMap, ctx: isl.Context) -> None:
    """Raise :class:`TCInternalError` unless ``dep`` mapped by ``smap`` has only lexicographically
    positive distance vectors (:func:`check_legality`)."""
    distances = dep.apply_domain(smap).apply_range(smap).deltas()
    lst = distances.get_set_list()
    for i in range(lst.n_set()):
        d = lst.get_at(i)
        n = d.dim(isl.dim_type.set)
        names = [f"x{k}" for k in range(n)]
        pieces = [" and ".join([*(f"{names[j]} = 0" for j in range(k)), f"{names[k]} > 0"]) for k in range(n)]
        positive = isl.Set.read_from_str(
            ctx, f"{{ [{', '.join(names)}] : {' or '.join(pieces) or 'false'} }}"
        )
        positive = positive.align_params(d.get_space()) if d.dim(isl.dim_type.param) else positive
        bad = d.subtract(positive)
        if not bad.is_empty():
            shown = tc_names_in(str(bad))
            raise TCInternalError(f"schedule violates dependences: distance vectors {shown} are not positive")


def node_path(node: isl.ScheduleNode) -> list[int]:
    """Child positions from the root down to ``node`` (to find it again in an edited tree)."""
    out = []
    while node.has_parent():
        out.append(node.get_child_position())
        node = node.parent()
    return list(reversed(out))


def node_at(sched: isl.Schedule, path: Sequence[int]) -> isl.ScheduleNode:
    """The node of ``sched`` at ``path`` (:func:`node_path`)."""
    node = sched.get_root()
    for i in path:
        node = node.child(i)
    return node


def bands(sched: isl.Schedule, *, outermost: bool = False) -> list[isl.ScheduleNode]:
    """The band nodes of ``sched`` in pre-order; only those under no other band with ``outermost``."""
    found: list[isl.ScheduleNode] = []

    # isl's foreach hands out nodes that die with the callback: walk with child(), which owns them.
    def visit(node: isl.ScheduleNode) -> None:
        if node.get_type() == isl.schedule_node_type.band:
            found.append(node)
            if outermost:
                return
        for i in range(node.n_children()):
            visit(node.child(i))

    visit(sched.get_root())
    return found


def rewrite_outermost_bands(
    sched: isl.Schedule, rewrite: Callable[[isl.ScheduleNode], isl.Schedule | None]
) -> isl.Schedule:
    """``sched`` with ``rewrite`` applied to each outermost band in turn, each on the tree the
    previous rewrites left (``rewrite`` returns the new tree, or None to leave the band as it is).
    A rewrite may add nodes below or above its band (a split, a mark, a sequence) but must keep
    the outermost bands before it where they were."""
    done = 0
    while True:
        todo = bands(sched, outermost=True)
        if done >= len(todo):
            return sched
        node = todo[done]
        done += 1
        new = rewrite(node)
        if new is not None:
            sched = new


def member_extent(band: isl.ScheduleNode, member: int) -> int | None:
    """How many values member ``member`` of ``band`` takes over the band's instances, whatever the
    parameters' values (they are projected out); 0 for no instances, ``None`` if unbounded."""
    partial = band.band_get_partial_schedule().get_union_pw_aff(member)
    values = band.get_domain().apply(isl.UnionMap.from_union_pw_aff(partial))
    if values.is_empty():
        return 0
    line = isl.Set.from_union_set(values)
    line = line.project_out(isl.dim_type.param, 0, line.dim(isl.dim_type.param))
    lo, hi = line.dim_min_val(0), line.dim_max_val(0)
    if not (lo.is_int() and hi.is_int()):
        return None
    return hi.to_python() - lo.to_python() + 1


def tile(sched: isl.Schedule, sizes: Sequence[int]) -> isl.Schedule:
    """Tile the outermost band of every branch of ``sched`` by ``sizes`` (0: that member untiled).

    ``sizes`` is truncated to each band's width; members beyond it stay untiled. Only permutable
    bands are tiled (tiling a non-permutable band could break a dependence).
    """
    if not sizes or not any(sizes):
        return sched
    result = sched
    # Tiling one band rebuilds the tree: find the next outermost untiled band again each time.
    done = 0
    while True:
        todo = [b for b in bands(result, outermost=True)]
        if done >= len(todo):
            return result
        node = todo[done]
        done += 1
        n = node.band_n_member()
        if not node.band_get_permutable() and n > 1:
            continue
        vals = [sizes[i] if i < len(sizes) and sizes[i] > 0 else _UNTILED for i in range(n)]
        if all(v == _UNTILED for v in vals):
            continue
        mv = isl.MultiVal.zero(node.band_get_space())
        for i, v in enumerate(vals):
            mv = mv.set_val(i, isl.Val.int_from_si(node.get_ctx(), v))
        result = node.band_tile(mv).get_schedule()


def schedule_text(sched: isl.Schedule) -> str:
    """``sched`` as indented text (isl's block YAML: one node per line, children indented), with
    sizes, indices and tensors by their TC names: what ``tcjit show`` prints."""
    printer = isl.Printer.to_str(sched.get_ctx()).set_yaml_style(isl.yaml_style.BLOCK)
    return tc_names_in(printer.print_schedule(sched).get_str().rstrip())
