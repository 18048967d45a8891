"""Threads of the GPU mapping: which band of every path goes to ``threadIdx``.

On every path below the block mapping, the innermost band with a coincident member has its
innermost coincident members (at most 3, at most as many as ``map_to_threads`` gives) mapped to
``threadIdx.x, .y, .z``, innermost to x, as filters ``member mod block_i = t_i`` (a band with
parallel loops above a sequential one takes them itself, unless a block reduction below does: see
:meth:`ThreadMapping.map_threads`); paths without such a band run on thread 0 under a
:data:`~.gpu_ir.THREAD0_MARK` mark. The filters partition each band's instances over the threads,
each thread running its instances in their order; isl's AST turns an extent above the block size
into a strided loop per thread.
"""

from __future__ import annotations

import islpy as isl

from ..polyhedral.schedule import member_extent, node_at, node_path
from .gpu_ids import constant_ids, id_filter, ids_function, unused_threads_zero
from .gpu_ir import THREAD0_MARK, THREAD_IDS
from .gpu_reductions import ReductionMapping
from .tree_queries import leading_coincident
from .tree_queries import statements_of as _names

__all__ = ["ThreadMapping"]


def _is(node: isl.ScheduleNode, kind) -> bool:
    return node.get_type() == kind


def _coincident_iterations(band: isl.ScheduleNode) -> int:
    """How many values the leading coincident members of ``band`` take together at most (the
    product of their extents over the band's instances, whatever the parameters' values)."""
    total = 1
    for i in range(leading_coincident(band)):
        extent = member_extent(band, i)
        if extent is None:
            return 2  # unbounded: many
        total *= extent
    return total


def _strip_mine(band: isl.ScheduleNode, member: int, width: int) -> isl.ScheduleNode:
    """``band`` with ``member`` ``m`` replaced by ``floor(m / width)`` and a band below it of
    ``m mod width`` (coincident): the groups of ``width`` consecutive iterations above, their
    iterations below. Coincidence and permutability are kept."""
    mupa = band.band_get_partial_schedule()
    coincident = [band.band_member_get_coincident(i) for i in range(band.band_n_member())]
    permutable = band.band_get_permutable()
    upa = mupa.get_union_pw_aff(member)
    w = isl.Val.int_from_si(band.get_ctx(), width)
    outer = mupa.set_union_pw_aff(member, upa.scale_down_val(w).floor())
    inner = isl.MultiUnionPwAff.from_union_pw_aff(upa.mod_val(w))
    node = band.delete().insert_partial_schedule(outer)
    for i, c in enumerate(coincident):
        node = node.band_member_set_coincident(i, c)
    node = node.band_set_permutable(permutable)
    point = node.child(0).insert_partial_schedule(inner).band_member_set_coincident(0, True)
    # innermost, below any sequential loop (maxpool's window) and into each statement's branch:
    # a group's accesses are then consecutive ones of one iteration; legal, as no dependence
    # runs between the group's iterations
    return point.band_sink().parent()


class ThreadMapping(ReductionMapping):
    """The thread mapping of the GPU mapper (see the module's docstring)."""

    def map_threads(
        self, sched, block_path, kernel_path, block_opt, blocks_mapped: bool = True, vector: int = 1
    ) -> tuple[isl.Schedule, int]:
        """Map the innermost band with a coincident member on every path below the block band to
        threads; paths without one run on thread 0. With ``vector`` > 1 each thread runs that many
        consecutive iterations of the member on x (:func:`_strip_mine`; not a block reduction's).
        Returns the tree and the thread dims used."""
        start = node_at(sched, block_path) if block_path is not None else node_at(sched, kernel_path)
        leaves: list[list[int]] = []  # paths of the bands to map, innermost first per branch
        unmapped: list[list[int]] = []  # paths of the subtrees that run on thread 0

        def visit(node: isl.ScheduleNode, under_block_band: bool) -> bool:
            """Collect; True if some band with a coincident member was chosen in this subtree."""
            if _is(node, isl.schedule_node_type.band):
                if (
                    not under_block_band
                    and leading_coincident(node) > 0
                    and self._sequential_within(node)
                    and not self._block_reduction_below(node)
                    and _coincident_iterations(node) > 1
                ):
                    # Threads above a sequential loop, not below it: mapped below, each iteration
                    # would end in a barrier and this band's parallel loops would run in every
                    # thread one after the other (maxpool2x2: 2 threads per block for its 2 x 2
                    # window, the 8 x 32 outputs of a tile in a loop). Unless the parallel loops
                    # here have one iteration (a single output: its window on threads, then).
                    leaves.append(node_path(node))
                    return True
                below = node.child(0) if node.n_children() else None
                found = below is not None and visit(below, False)
                if found:
                    return True
                if under_block_band:
                    return False  # never the block band itself: nested bands are not both mapped
                if leading_coincident(node) == 0 and not (self.reduce and self.reduction_update(node)):
                    return False
                leaves.append(node_path(node))
                return True
            if node.n_children() == 0:
                return False
            if _is(node, isl.schedule_node_type.sequence) or _is(node, isl.schedule_node_type.set):
                results = [visit(node.child(i), False) for i in range(node.n_children())]
                if any(results):
                    for i, r in enumerate(results):
                        if not r:
                            unmapped.append(node_path(node.child(i)))
                    return True
                return False
            return visit(node.child(0), False)

        found = visit(start, block_path is not None and blocks_mapped)
        if not found:
            unmapped.append(
                node_path(start.child(0) if block_path is not None and start.n_children() else start)
            )
        # a sequence's children are filters: the thread-0 mark goes below them (and below the sync
        # marks that may come later). A mark, not a filter 't = 0': isl would hoist the filter's
        # condition above the sync marks, and a barrier under a thread condition deadlocks.
        unmapped = [[*p, 0] if _is(node_at(sched, p), isl.schedule_node_type.filter) else p for p in unmapped]
        used = 0
        # edit bottom-up so that earlier paths stay valid: deeper and later paths first
        edits = [(p, "map") for p in leaves] + [(p, "zero") for p in unmapped]
        for p, what in sorted(edits, key=lambda e: e[0], reverse=True):
            node = node_at(sched, p)
            if what == "zero":
                self.threads.append(constant_ids(node.get_domain()))
                node = node.insert_mark(isl.Id(THREAD0_MARK, context=node.get_ctx()))
                sched = node.get_schedule()
                self.decisions.append(f"threads: none for {_names(node)} (thread 0 runs it)")
                continue
            reduced = self.map_reduction(node, block_opt)
            if reduced is not None:
                sched, n = reduced
                used = max(used, n)
                continue
            first = leading_coincident(node)
            n = min(first, len(block_opt), 3)
            members = list(range(first - n, first))  # innermost coincident ones
            if first < node.band_n_member():
                node = node.band_split(first)  # the coincident prefix is a band of its own
            if first - n > 0:
                node = node.band_split(first - n).child(0)
            if vector > 1 and n > 0 and (member_extent(node, n - 1) or vector) > 1:
                node = _strip_mine(node, n - 1, vector)
                self.decisions.append(
                    f"vector: {vector} consecutive iterations of member {members[-1]} of the band over"
                    f" {_names(node)} per thread (x takes the groups)"
                )
            filt = node.get_domain()
            self.threads.append(ids_function(node, range(n - 1, -1, -1), block_opt))
            for k, m in enumerate(reversed(range(n))):
                filt = filt.intersect(id_filter(node, m, block_opt[k], THREAD_IDS[k]))
            filt = unused_threads_zero(filt, n)
            self.mapped.append(node.get_domain())
            node = node.insert_filter(filt)
            used = max(used, n)
            self.decisions.append(
                f"threads: members {members} of the band over {_names(node)} -> "
                + ", ".join(f"{'xyz'[k]} ({block_opt[k]})" for k in range(n))
                + " (innermost to x)"
            )
            sched = node.get_schedule()
        # threads beyond the mapped dims: fixed to 0 by the context
        return sched, used

    @staticmethod
    def _sequential_within(band: isl.ScheduleNode) -> bool:
        """Whether ``band`` or a band below it has a member that is not coincident (a loop that
        carries a dependence, a reduction's loop among them)."""
        found = False

        def look(node: isl.ScheduleNode) -> bool:
            nonlocal found
            if _is(node, isl.schedule_node_type.band) and node.band_n_member() > 0:
                if any(not node.band_member_get_coincident(i) for i in range(node.band_n_member())):
                    found = True
                    return False
            return True

        band.foreach_descendant_top_down(look)
        return found

    def _block_reduction_below(self, band: isl.ScheduleNode) -> bool:
        """Whether a band strictly below ``band`` is one a block reduction would take over (then
        the threads go to it, as ``match_library_calls`` asks)."""
        if not self.reduce:
            return False
        found = False

        def look(node: isl.ScheduleNode) -> bool:
            nonlocal found
            if found:
                return False
            if (
                _is(node, isl.schedule_node_type.band)
                and not node.is_equal(band)
                and self.reduction_update(node) is not None
            ):
                found = True
                return False
            return True

        band.foreach_descendant_top_down(look)
        return found
