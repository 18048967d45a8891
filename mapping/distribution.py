"""Band distribution (GPU, with block reductions): a band whose statements follow one another
along its inner members becomes a band of its coincident members over a sequence of one band
per statement.

The scheduler fuses a row reduction with the statements that use its result by giving the
statements consecutive ranges of the band's inner members: layernorm's ``mean`` over
``r_d`` in ``[0, D)``, ``var`` in ``[D, 2D)``, ``O`` in ``[2D, 3D)`` (fusion ``Max``); cosine's
``dot`` over ``r_n`` and then ``O`` at ``N``. For each value of the coincident (row) members,
every instance of one statement comes before every instance of the next. Written as a band over
the rows above a sequence of per-statement bands, the tree says the same order, and each
statement's band is its own: a reduction's update alone in its band is what a block reduction
maps (:mod:`.gpu_reductions`), and the statements that follow it run in the same kernel, on the
same rows, after a barrier, reading the row while it is in the cache.

:func:`distribute_bands` does this to each outermost band where the statements' inner ranges
are ordered (isl decides, per row); the schedule executes exactly what it did, in the same
order, so the legality check only confirms it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import islpy as isl

from ..polyhedral.errors import TCInternalError
from ..polyhedral.schedule import (
    PROOF_OPERATIONS,
    check_legality,
    node_at,
    node_path,
    rewrite_outermost_bands,
)
from ..polyhedral.scop import Dependences
from .tree_queries import carries_dependence, instances_of, leading_coincident, statements_of

__all__ = ["distribute_bands", "fuse_rows", "statement_order"]


def _points(node: isl.ScheduleNode, domain: isl.UnionSet, name: str) -> isl.Set | None:
    """The band's schedule points of statement ``name`` (None where it has no instance)."""
    part = isl.UnionMap.from_multi_union_pw_aff(node.band_get_partial_schedule())
    points = part.intersect_domain(instances_of(domain, name)).range()
    return None if points.is_empty() else isl.Set.from_union_set(points)


def _before(x: isl.Set, y: isl.Set, lead: int) -> bool:
    """Whether, for equal values of the first ``lead`` members, every point of ``x`` comes
    lexicographically before every point of ``y``."""
    pairs = x.lex_ge_set(y)
    for k in range(lead):
        pairs = pairs.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    return pairs.is_empty()


def statement_order(node: isl.ScheduleNode, lead: int) -> list[str] | None:
    """The statements of band ``node`` in the order they run for each value of its first
    ``lead`` members, where every instance of each comes before every instance of the next
    (None where two interleave or share a point, or fewer than two have instances)."""
    domain = node.get_domain()
    points = {n: p for n in statements_of(node) if (p := _points(node, domain, n)) is not None}
    if len(points) < 2:
        return None
    order: list[str] = []
    for name in points:  # insertion: the first position it comes before
        at = next(
            (i for i, other in enumerate(order) if _before(points[name], points[other], lead)), len(order)
        )
        order.insert(at, name)
    for i, a in enumerate(order):
        for b in order[i + 1 :]:
            if not _before(points[a], points[b], lead):
                return None
    return order


def distribute_bands(
    sched: isl.Schedule, deps: Dependences, sizes: Mapping[str, int] | None, fixed: isl.Set
) -> isl.Schedule:
    """Each outermost band with leading coincident members, inner members, and statements that
    follow one another along them (:func:`statement_order`): split after its coincident
    members, the inner band copied under a sequence with one filter per statement, in their
    order, each copy's members coincident where they carry no dependence among its own
    statement's instances (layernorm's ``O`` over ``d``, no longer a reduction's loop).
    Statements without instances stay in the band of the first (the filters cover the band's
    domain). ``fixed``: the parameters' values."""
    live = deps.all.intersect_params(fixed)

    def rewrite(node: isl.ScheduleNode) -> isl.Schedule | None:
        lead = leading_coincident(node)
        if lead == 0 or lead >= node.band_n_member():
            return None
        order = statement_order(node, lead)
        if order is None:
            return None
        inner = node.band_split(lead).child(0)
        seq = inner.insert_sequence(_filters(inner.get_domain(), order))
        for i in range(seq.n_children()):
            seq = _own_coincidence(seq.child(i).child(0), live).parent().parent()
        candidate = seq.get_schedule()
        try:
            check_legality(candidate, deps, sizes=sizes, max_operations=PROOF_OPERATIONS)
        except TCInternalError:  # cannot happen (the order is the same): keep the band as it was
            return None
        return candidate

    return rewrite_outermost_bands(sched, rewrite)


def fuse_rows(
    sched: isl.Schedule, deps: Dependences, sizes: Mapping[str, int] | None, fixed: isl.Set
) -> isl.Schedule:
    """The kernels of a root sequence (or set) whose first bands all lead with a coincident
    member, along which every dependence between them has distance 0 (each row's statements
    depend on the same row's only: cosine's ``nA``, ``nB`` and ``dot`` over ``m``, then ``O``):
    one band over that member above them all, which each first band loses. One kernel then
    computes a row's reductions and what uses them, each under the barriers the mapping places,
    reading the row while it is in the cache. ``sched`` unchanged where that does not hold."""
    root = sched.get_root().child(0)
    if root.get_type() not in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
        return sched
    firsts = _first_bands(root)
    if not firsts:
        return sched
    row = None
    for band in firsts:
        upa = band.band_get_partial_schedule().get_union_pw_aff(0).intersect_domain(band.get_domain())
        row = upa if row is None else row.union_add(upa)
    if not row.domain().is_equal(root.get_domain()):
        return sched
    live = deps.all.intersect_params(fixed)
    along = isl.UnionMap.from_union_pw_aff(row)
    deltas = live.apply_domain(along).apply_range(along).deltas()
    if not deltas.is_subset(isl.UnionSet.from_set(isl.Set.read_from_str(sched.get_ctx(), "{ [0] }"))):
        return sched
    paths = [node_path(b) for b in firsts]
    depth = len(node_path(root))
    node = root.insert_partial_schedule(isl.MultiUnionPwAff.from_union_pw_aff(row))
    node = node.band_member_set_coincident(0, True)
    candidate = node.get_schedule()
    for path in sorted(paths, reverse=True):  # deeper and later first: the others' paths hold
        band = node_at(candidate, [*path[:depth], 0, *path[depth:]])
        if band.band_n_member() > 1:
            band = band.band_split(1)
        candidate = band.delete().get_schedule()
    try:
        check_legality(candidate, deps, sizes=sizes, max_operations=PROOF_OPERATIONS)
    except TCInternalError:
        return sched
    return candidate


def _first_bands(node: isl.ScheduleNode) -> list[isl.ScheduleNode]:
    """The first band on each branch below the sequence or set ``node``, each leading with a
    coincident member (empty where some branch has none)."""
    out = []
    for i in range(node.n_children()):
        n = node.child(i)
        while n.get_type() in (isl.schedule_node_type.filter, isl.schedule_node_type.mark):
            n = n.child(0)
        if n.get_type() in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
            below = _first_bands(n)
            if not below:
                return []
            out += below
        elif n.get_type() == isl.schedule_node_type.band and n.band_member_get_coincident(0):
            out.append(n)
        else:
            return []
    return out


def _own_coincidence(band: isl.ScheduleNode, deps: isl.UnionMap) -> isl.ScheduleNode:
    """``band`` with each member marked coincident exactly where it carries no dependence among
    the band's instances (all members are, below the split-off coincident ones)."""
    for j in range(band.band_n_member()):
        band = band.band_member_set_coincident(j, not carries_dependence(band, j, deps))
    return band


def _filters(domain: isl.UnionSet, order: Sequence[str]) -> isl.UnionSetList:
    """One filter per statement of ``order``; the first also takes the statements not named
    (those without instances), so that the filters cover ``domain``."""
    named = [instances_of(domain, name) for name in order]
    rest = domain
    for f in named:
        rest = rest.subtract(f)
    out = isl.UnionSetList.alloc(domain.get_ctx(), len(order))
    for i, f in enumerate(named):
        out = out.add(f.union(rest) if i == 0 else f)
    return out
