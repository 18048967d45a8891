"""Barriers of the GPU mapping: where the threads of a block wait for each other.

:meth:`SyncPlacement.place_syncs` adds a barrier statement (``__syncthreads()``) after every child
but the last of a sequence below the block mapping whose later children depend on it through
another thread, and after each iteration of a loop above thread-mapped code that carries a
dependence between threads; :func:`barriers` turns those statements into ``sync`` marks of the
kernel IR. A barrier adds no computation: it only orders what two threads of a block do, so that
every dependence between threads is kept.
"""

from __future__ import annotations

import islpy as isl

from ..polyhedral.schedule import node_at, node_path
from . import ir
from .gpu_ids import mentions_threads
from .gpu_ir import THREAD0_MARK
from .grafts import Graft
from .tree_queries import statements_of as _names

__all__ = ["SYNC_PREFIX", "SyncPlacement", "barriers"]

#: Statements named with this prefix and a number are barriers (``__syncthreads()``); the
#: mapper adds them as extension nodes. :func:`barriers` turns them into ``sync`` marks.
SYNC_PREFIX = "tc_sync_"


def _is(node: isl.ScheduleNode, kind) -> bool:
    return node.get_type() == kind


class SyncPlacement:
    """The barriers of the GPU mapper (see the module's docstring); it works on the mapper's
    dependences and the thread ids of each instance of the kernel."""

    deps: isl.UnionMap  # at the parameters' values
    threads: list[isl.UnionMap]  # statement instance -> its thread ids (x, y, z)
    syncs: int
    private_loops: set[tuple[int, ...]]
    decisions: list[str]

    def place_syncs(self, sched: isl.Schedule, start: list[int]) -> list[Graft]:
        """The barriers threads of a block need (see the module's docstring), looking at the nodes
        from ``start`` down to the thread filters: one graft per barrier, not applied yet (the
        caller orders them with promotion's, which edit the same tree)."""
        if not self.threads:
            return []
        ids = self.threads[0]
        for fn in self.threads[1:]:
            ids = ids.union(fn)
        marks: list[tuple[list[int], str]] = []

        def visit(node: isl.ScheduleNode) -> None:
            if _is(node, isl.schedule_node_type.filter) and mentions_threads(node.filter_get_filter()):
                return  # thread-mapped code: each thread's instances in order
            if _is(node, isl.schedule_node_type.mark) and node.mark_get_id().get_name() == THREAD0_MARK:
                return
            if _is(node, isl.schedule_node_type.sequence):
                n = node.n_children()
                for i in range(n - 1):
                    src = node.child(i).child(0).get_domain()
                    dst = node.child(i + 1).get_domain()
                    for j in range(i + 2, n):
                        dst = dst.union(node.child(j).get_domain())
                    if self._crosses(src, dst, ids):
                        why = f"after child {i} of a sequence over {_names(node)}"
                        marks.append(([*node_path(node), i, 0], why))
            elif (
                _is(node, isl.schedule_node_type.band)
                and node.n_children() == 1
                and tuple(node_path(node)) not in self.private_loops
            ):
                # a band a block reduction's private accumulators span carries only the update's
                # dependences, through each thread's own register
                carried = not all(node.band_member_get_coincident(j) for j in range(node.band_n_member()))
                dom = node.get_domain()
                if carried and self._crosses(dom, dom, ids):
                    marks.append(
                        ([*node_path(node), 0], f"after each iteration of the band over {_names(node)}")
                    )
            for i in range(node.n_children()):
                visit(node.child(i))

        visit(node_at(sched, start))
        grafts = []
        for path, why in sorted(marks, key=lambda m: m[0], reverse=True):
            # A statement of its own, run by every thread once per iteration of the loops around
            # it (an extension node, as in TC): a mark around the subtree would end up under the
            # conditions isl derives from the thread filters below it.
            name = f"{SYNC_PREFIX}{self.syncs}"
            self.syncs += 1
            outer = node_at(sched, path).get_prefix_schedule_union_map().range()
            stmt = isl.UnionSet.from_set(isl.Set.read_from_str(sched.get_ctx(), f"{{ {name}[] }}"))
            tree = isl.ScheduleNode.from_extension(isl.UnionMap.from_domain_and_range(outer, stmt))
            grafts.append(Graft(tuple(path), (), (tree,), rank=1))
            self.decisions.append(f"sync: {why}")
        return grafts

    def _crosses(self, src: isl.UnionSet, dst: isl.UnionSet, ids: isl.UnionMap) -> bool:
        """Whether a dependence from ``src`` to ``dst`` joins instances of different threads."""
        deps = self.deps.intersect_domain(src).intersect_range(dst)
        if deps.is_empty():
            return False
        pairs = deps.apply_domain(ids).apply_range(ids)
        same = isl.Set.read_from_str(src.get_ctx(), "{ [0, 0, 0] }")
        return not pairs.deltas().is_subset(isl.UnionSet.from_set(same))


def barriers(node):
    """Kernel IR ``node`` with the mapper's barrier statements as ``sync`` marks around nothing."""
    return ir.map_runs(
        node, lambda r: ir.Mark(ir.SYNC_MARK, ir.Block(())) if r.statement.startswith(SYNC_PREFIX) else r
    )
