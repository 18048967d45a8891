"""Extension trees grafted around nodes of a schedule tree: copies, barriers, reduction steps.

The GPU mapper and memory promotion decide every graft on the tree without extension nodes (isl
gives no node's domain below one) and apply them together with :func:`apply_grafts`. A graft only
inserts nodes above the node at its path, which itself keeps its subtree and its instances.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl

from ..polyhedral.schedule import node_at

__all__ = ["Graft", "apply_grafts"]


@dataclass(frozen=True)
class Graft:
    """Extension trees to graft before and after the node at ``path`` of a schedule tree (copies
    and barriers). Grafts are decided on the tree without them and applied together by
    :func:`apply_grafts`: isl gives no node's domain below an extension node. ``rank`` orders
    grafts at one node: the higher is grafted first, so the lower ends up nearer the node."""

    path: tuple[int, ...]
    before: tuple[isl.ScheduleNode, ...]
    after: tuple[isl.ScheduleNode, ...]
    rank: int = 0


def apply_grafts(sched: isl.Schedule, grafts: Sequence[Graft]) -> isl.Schedule:
    """``sched`` with ``grafts`` applied, deepest and latest paths first so that the paths of the
    others stay valid (a graft only inserts nodes above the node at its path)."""
    for g in sorted(grafts, key=lambda g: (g.path, g.rank), reverse=True):
        node = node_at(sched, g.path)
        for tree in g.before:
            node = node.graft_before(tree)
        for tree in reversed(g.after):
            node = node.graft_after(tree)
        sched = node.get_schedule()
    return sched
