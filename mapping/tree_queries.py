"""Queries on the bands of a schedule tree, shared by the CPU and the GPU mapper.

Whether a band member carries a dependence (proved with isl on the concrete sizes), how many values
a member takes for fixed outer loops, the statements below a node and the statement dimension a
member walks, whether a band has another below it, how many of its leading members are
coincident. Nothing here edits a tree.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import islpy as isl

__all__ = [
    "carries_dependence",
    "forget_member_maps",
    "has_band_below",
    "instances_of",
    "leading_coincident",
    "member_dim",
    "member_map",
    "member_spread",
    "statements_of",
]


def member_map(node: isl.ScheduleNode, members: Sequence[int]) -> isl.UnionMap:
    """Statement instances -> (prefix schedule, the given members of band ``node``)."""
    return _member_map_of(node, tuple(members))


@functools.lru_cache(maxsize=128)
def _member_map_of(node: isl.ScheduleNode, members: tuple[int, ...]) -> isl.UnionMap:
    # Memoised: the mapper asks for the same node's maps many times (kronecker3: 72 calls, 50
    # distinct, 0.15 s). Nodes hash by identity, so only the same node object hits, and the cache
    # holds it: its id cannot be reused. map_cpu empties the cache when it returns.
    if not members:
        return node.get_prefix_schedule_union_map()
    upa = node.band_get_partial_schedule().get_union_pw_aff(members[-1])
    return _member_map_of(node, members[:-1]).flat_range_product(
        isl.UnionMap.from_union_pw_aff(upa).intersect_domain(node.get_domain())
    )


def _zero_then_nonzero(ctx: isl.Context, n: int) -> isl.Set:
    names = [f"x{k}" for k in range(n)]
    cons = [f"{v} = 0" for v in names[:-1]] + [f"{names[-1]} != 0"]
    return isl.Set.read_from_str(ctx, f"{{ [{', '.join(names)}] : {' and '.join(cons)} }}")


def carries_dependence(node: isl.ScheduleNode, member: int, deps: isl.UnionMap) -> bool:
    """Whether member ``member`` of band ``node`` carries a dependence among the instances below it.

    ``deps`` must be specialised to the concrete sizes. A member that carries none can run its
    iterations in any order, or at once: a parallel or vector loop.
    """
    domain = node.get_domain()
    live = deps.intersect_domain(domain).intersect_range(domain)
    if live.is_empty():
        return False
    sched = member_map(node, range(member + 1))
    deltas = live.apply_domain(sched).apply_range(sched).deltas()
    lst = deltas.get_set_list()
    for i in range(lst.n_set()):
        d = lst.get_at(i)
        n = d.dim(isl.dim_type.set)
        if not d.intersect(_zero_then_nonzero(node.get_ctx(), n)).is_empty():
            return True
    return False


def member_spread(node: isl.ScheduleNode, member: int, at: isl.Set | None = None) -> int | None:
    """Most values member ``member`` takes for fixed outer loops (None if unbounded); ``at``: a
    params set the parameters are restricted to first (a kernel with symbolic sizes makes its
    choices at the representative sizes, :mod:`.symbolic`)."""
    outer = member_map(node, range(member))
    mupa = node.band_get_partial_schedule()
    this = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(member)).intersect_domain(node.get_domain())
    rel = outer.reverse().apply_range(this)  # outer values -> member values
    if at is not None:
        rel = rel.intersect_params(at)
    pairs = rel.reverse().apply_range(rel)  # member values sharing outer values
    if pairs.is_empty():
        return 1
    d = isl.Set.from_union_set(pairs.deltas())
    top = d.dim_max_val(0)
    return int(top.to_python()) + 1 if top.is_int() else None


def statements_of(node: isl.ScheduleNode) -> list[str]:
    """The names of the statements in ``node``'s domain, sorted."""
    lst = node.get_domain().get_set_list()
    return sorted({lst.get_at(i).get_tuple_name() for i in range(lst.n_set())})


def member_dim(node: isl.ScheduleNode, member: int, stmt: str, ndims: int) -> int | None:
    """The statement dimension band member ``member`` walks for ``stmt`` (None if not exactly one)."""
    upa = node.band_get_partial_schedule().get_union_pw_aff(member)
    lst = upa.get_pw_aff_list()
    for i in range(lst.n_pw_aff()):
        pa = lst.get_at(i)
        if pa.get_domain_space().get_tuple_name(isl.dim_type.set) != stmt:
            continue
        used = [k for k in range(ndims) if pa.involves_dims(isl.dim_type.in_, k, 1)]
        return used[0] if len(used) == 1 else None
    return None


def has_band_below(node: isl.ScheduleNode) -> bool:
    """Whether some descendant of schedule node ``node`` is a band."""

    def visit(n: isl.ScheduleNode) -> bool:
        for i in range(n.n_children()):
            c = n.child(i)
            if c.get_type() == isl.schedule_node_type.band or visit(c):
                return True
        return False

    return visit(node)


def leading_coincident(band: isl.ScheduleNode) -> int:
    """How many of ``band``'s outermost members are coincident (parallel), in a row."""
    n = 0
    while n < band.band_n_member() and band.band_member_get_coincident(n):
        n += 1
    return n


def forget_member_maps() -> None:
    """Empty the cache of :func:`member_map`, letting the schedule trees it holds go (the CPU
    mapper calls it when it returns)."""
    _member_map_of.cache_clear()


def instances_of(domain: isl.UnionSet, name: str) -> isl.UnionSet:
    """The instances of statement ``name`` in ``domain`` (empty where it has none)."""
    lst = domain.get_set_list()
    out = isl.UnionSet.empty(domain.get_space())
    for i in range(lst.n_set()):
        if lst.get_at(i).get_tuple_name() == name:
            out = out.union(isl.UnionSet.from_set(lst.get_at(i)))
    return out
