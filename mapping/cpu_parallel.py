"""The OpenMP-parallel loop of the CPU mapping.

In the outermost band of every branch (or the first band below it whose members run more than
once), the outermost member with several iterations becomes a thread-parallel loop: ``parallel``
if it carries no dependence, ``parallel_reduction`` if it walks a reduction dimension of the band's
only statement, an associative and commutative update (partial results in threads, combined after
them). Kernels with fewer than :data:`MIN_PARALLEL_WORK` statement instances stay on one thread.

The pass only splits bands and adds marks: the instances and their order in the tree stay as they
were, and a loop runs on threads only where isl proves it carries no dependence, or where it is
such a reduction.
"""

from __future__ import annotations

import islpy as isl

from ..polyhedral.schedule import rewrite_outermost_bands
from .cpu_analysis import CpuAnalysis, loop_mark
from .tree_queries import carries_dependence, member_dim, statements_of

__all__ = ["MIN_PARALLEL_WORK", "ParallelLoops"]

#: Below this many statement instances a kernel runs on one thread.
MIN_PARALLEL_WORK = 1 << 15


class ParallelLoops(CpuAnalysis):
    """The parallel loop of the CPU mapping (see the module's docstring)."""

    def _parallel_member(self, node: isl.ScheduleNode) -> tuple[int, str] | None:
        """The outermost member of band ``node`` with several iterations, and how it runs in
        threads: ``parallel`` if it carries no dependence, ``parallel_reduction`` if it walks a
        reduction dimension of the band's only statement (see :meth:`_reduction_only`)."""
        for j in range(node.band_n_member()):
            if (self.spread(node, j) or 2) > 1:
                if not carries_dependence(node, j, self.deps):
                    return j, "parallel"
                return (j, "parallel_reduction") if self._reduction_only(node, j) else None
        return None

    def _reduction_only(self, node: isl.ScheduleNode, member: int) -> bool:
        """Whether band ``node`` holds one statement, an update by ``+=``, ``*=``, ``max=`` or
        ``min=`` (associative and commutative) of an element that stays put along ``member``,
        which walks one of its reduction dimensions: a sum over all of ``A`` (abs_sum), a norm.
        Its iterations can then run in threads, each computing a partial result, combined after
        them in iteration order (the printer checks the loop nest below and falls back to a
        serial loop)."""
        names = statements_of(node)
        if len(names) != 1:
            return False
        st = self.scop.statement(names[0])
        src = st.source
        if st.kind != "update" or not src.plain_lhs or src.op not in ("+=", "*=", "max=", "min="):
            return False
        k = member_dim(node, member, names[0], len(st.dims))
        return k is not None and st.dims[k] in src.reduction_vars

    def parallel(self, sched: isl.Schedule, work: int) -> isl.Schedule:
        if work < MIN_PARALLEL_WORK:
            self.decisions.append(f"parallel: none ({work} instances < {MIN_PARALLEL_WORK})")
            return sched

        def rewrite(node: isl.ScheduleNode) -> isl.Schedule | None:
            p = self._parallel_member(node)
            while p is None:  # every member runs once (tiles larger than the sizes): look below
                below = node.child(0)
                while below.get_type() == isl.schedule_node_type.mark and below.n_children() == 1:
                    below = below.child(0)
                if below.get_type() != isl.schedule_node_type.band:
                    break
                node = below
                p = self._parallel_member(node)
            if p is None:
                self.decisions.append(f"parallel: no parallel member in the band over {statements_of(node)}")
                return None
            p, kind = p
            if p > 0:
                node = node.band_split(p).child(0)
            if node.band_n_member() > 1:
                node = node.band_split(1)
            node = node.insert_mark(loop_mark(kind, node))
            what = "parallel" if kind == "parallel" else "parallel reduction (partial results in threads)"
            self.decisions.append(f"{what}: member {p} of the outermost band over {statements_of(node)}")
            return node.get_schedule()

        return rewrite_outermost_bands(sched, rewrite)
