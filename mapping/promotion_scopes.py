"""Where memory promotion happens: the scopes of a mapped tree and what runs around them.

:func:`find_scopes` splits bands so that the promotion depth ends one and returns the subtrees
promoted on their own, never below the thread mapping; :func:`earlier` and :func:`once_per_block`
say whether a scope's copies need barriers before and after; :func:`scope_schedule` orders a scope's
instances. Splitting a band keeps its instances and their order; the other functions only read.
"""

from __future__ import annotations

from collections.abc import Sequence

import islpy as isl

from ..polyhedral.schedule import node_at, node_path

__all__ = ["earlier", "find_scopes", "mentions", "once_per_block", "scope_schedule"]


def _is(node: isl.ScheduleNode, kind) -> bool:
    return node.get_type() == kind


def mentions(s: isl.UnionSet, names: Sequence[str]) -> bool:
    """Whether ``s`` has one of the parameters ``names`` (block or thread ids: a mapping filter)."""
    space = s.get_space()
    return any(space.find_dim_by_name(isl.dim_type.param, n) >= 0 for n in names)


def find_scopes(
    sched: isl.Schedule, start: Sequence[int], depth: int, thread_ids: Sequence[str], thread0: str
):
    """The promotion scopes at or below ``start`` (paths), splitting bands so that ``depth`` ends
    one; the new tree and the paths, in depth-first order."""
    found: list[list[int]] = []
    stack = [list(start)]
    while stack:
        path = stack.pop()
        node = node_at(sched, path)
        d = node.get_schedule_depth()
        if _is(node, isl.schedule_node_type.band):
            n = node.band_n_member()
            if d >= depth:
                found.append(path)
            elif d + n >= depth:
                if d + n > depth:
                    sched = node.band_split(depth - d).get_schedule()
                found.append([*path, 0])
            else:
                stack.append([*path, 0])
        elif (
            _is(node, isl.schedule_node_type.filter) and mentions(node.filter_get_filter(), thread_ids)
        ) or (_is(node, isl.schedule_node_type.mark) and node.mark_get_id().get_name() == thread0):
            found.append(path)  # never below the thread mapping
        elif _is(node, isl.schedule_node_type.sequence) or _is(node, isl.schedule_node_type.set):
            if d >= depth:
                found.append(path)
            else:  # each child on its own: below its filter, never the filter itself
                stack.extend([*path, i, 0] for i in reversed(range(node.n_children())))
        elif node.n_children() == 0:
            found.append(path)
        else:
            stack.append([*path, 0])
    return sched, found


def earlier(node: isl.ScheduleNode, stop: int) -> tuple[bool, bool]:
    """Whether something runs before and after ``node`` in its kernel (whose root is ``stop``
    nodes deep): a sequence or set above it, below the root, where it is not the first or last."""
    before = after = False
    while node.has_parent() and len(node_path(node)) > stop:
        parent = node.parent()
        if _is(parent, isl.schedule_node_type.sequence) or _is(parent, isl.schedule_node_type.set):
            pos = node.get_child_position()
            before |= pos > 0
            after |= pos < parent.n_children() - 1
        node = parent
    return before, after


def once_per_block(outer: isl.UnionSet, block_ids: Sequence[str]) -> bool:
    """Whether each block runs at most one point of ``outer`` (the scope's outer schedule, with
    the block ids as parameters)."""
    s = isl.Set.from_union_set(outer)
    moved = 0
    for name in block_ids:
        pos = s.find_dim_by_name(isl.dim_type.param, name)
        if pos >= 0:
            s = s.move_dims(isl.dim_type.set, 0, isl.dim_type.param, pos, 1)
            moved += 1
    m = isl.Map.from_range(s).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, moved)
    return (
        m.project_out_all_params().is_single_valued() if moved else s.project_out_all_params().is_singleton()
    )


def scope_schedule(node: isl.ScheduleNode, scoped: isl.UnionMap) -> isl.UnionMap:
    """The order of the instances in the scope at ``node``: its point, then its subtree."""
    return scoped.flat_range_product(node.get_subtree_schedule_union_map().project_out_all_params())
