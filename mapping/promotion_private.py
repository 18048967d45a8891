"""Private promotion: per-thread footprints in registers, below the thread mapping.

:class:`PrivatePromoter` promotes a group when its references are affine, its subscripts depend
only on the scope's schedule and on loops isl unrolls, no two threads touch one of its elements in
one iteration of the block's schedule, one thread reuses an element, and its box has at most
:data:`MAX_PRIVATE_ELEMENTS` elements (notes/polyhedral.md 2(f); the pass is
:func:`~tcjit.mapping.promotion.promote_private`). The owning thread alone copies in what the group
reads before writing it and writes back what it writes, around the scope, so no barrier is needed
and every thread computes what it computed before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import islpy as isl

from ..polyhedral.schedule import node_path
from . import ir
from .grafts import Graft
from .promotion_footprints import clipped, footprint_box, tensor_bounds
from .promotion_groups import Decision, Group, Promoter, Scope, live_in
from .promotion_scopes import mentions, scope_schedule
from .promotion_types import COPY_IN, COPY_OUT, copy_name

__all__ = ["MAX_PRIVATE_ELEMENTS", "PrivatePromoter", "thread_filters"]


def _is(node: isl.ScheduleNode, kind) -> bool:
    return node.get_type() == kind


#: The most elements a private buffer may have (registers are few; a larger one would spill).
MAX_PRIVATE_ELEMENTS = 64


def thread_filters(node: isl.ScheduleNode, thread_ids: Sequence[str]) -> list[list[int]]:
    """The paths of the thread-mapping filters at or below ``node``."""
    out: list[list[int]] = []

    def visit(n: isl.ScheduleNode) -> None:
        if _is(n, isl.schedule_node_type.filter) and mentions(n.filter_get_filter(), thread_ids):
            out.append(node_path(n))
            return
        for i in range(n.n_children()):
            visit(n.child(i))

    visit(node)
    return out


def _unrolled_members(node: isl.ScheduleNode) -> list[isl.UnionPwAff]:
    """The partial schedules of the band members at or below ``node`` that isl's AST unrolls."""
    out = []

    def visit(n: isl.ScheduleNode) -> None:
        if _is(n, isl.schedule_node_type.band):
            sched = n.band_get_partial_schedule()
            for j in range(n.band_n_member()):
                if n.band_member_get_ast_loop_type(j) == isl.ast_loop_type.unroll:
                    out.append(sched.get_union_pw_aff(j).intersect_domain(n.get_domain()))
        for i in range(n.n_children()):
            visit(n.child(i))

    visit(node)
    return out


class PrivatePromoter(Promoter):
    """Private promotion (notes/polyhedral.md 2(f)): per thread, below the thread mapping."""

    def analyse_private(self, node: isl.ScheduleNode, kernel: int, depth: int, threads, shared):
        """The private decisions of the scope at ``node``; ``threads`` maps an instance to (the
        block's schedule above the thread-mapped band, the band's point: its thread)."""
        outer, scoped, order = self.scope_groups(node)  # scoped: instance -> one thread's iteration
        schedule = scope_schedule(node, scoped)
        unrolled = _unrolled_members(node)
        promoted = []
        for g in order:
            d = self._decide_private(g, scoped, schedule, outer, threads, unrolled, depth, shared)
            if d is not None:
                promoted.append(d)
        return Scope(tuple(node_path(node)), kernel, outer, False, False, tuple(promoted))

    def _decide_private(
        self, g: Group, scoped, schedule, outer, threads, unrolled, depth, shared
    ) -> Decision | None:
        stmts = sorted({r.access.statement for r in g.refs})
        where = f"{g.tensor} at depth {depth} over {stmts}"

        def refuse(why: str) -> None:
            self.decisions.append(f"private: {where} not promoted ({why})")

        if g.tensor in self.unpromoted:
            return refuse("its shape depends on a symbolic size")
        if g.tensor in shared:
            return refuse("in shared memory already")
        if not all(r.access.exact for r in g.refs):
            return refuse("a gather: its subscripts depend on data")
        if not self.tensors[g.tensor].shape:
            return refuse("a scalar")
        for r in g.refs:  # subscripts: functions of the scope point and the unrolled loops only
            access = r.tagged.domain_factor_domain()
            key = scoped.intersect_domain(access.domain())
            for upa in unrolled:
                part = (
                    isl.UnionMap.from_union_pw_aff(upa)
                    .project_out_all_params()
                    .intersect_domain(access.domain())
                )
                if not part.domain().is_empty():
                    if not access.domain().is_subset(part.domain()):
                        return refuse(f"{r.access.ref} is only partly below an unrolled loop")
                    key = key.flat_range_product(part)
            if not key.reverse().apply_range(access).is_single_valued():
                return refuse(f"{r.access.ref} depends on a loop that is not unrolled")
        tagged = g.refs[0].tagged.domain_factor_domain()
        for r in g.refs[1:]:
            tagged = tagged.union(r.tagged.domain_factor_domain())
        # one thread per element in each iteration of the block's schedule above the threads
        above, point = threads
        here = above.intersect_domain(tagged.domain())
        owner = here.range_product(tagged).reverse().apply_range(point.intersect_domain(tagged.domain()))
        if not owner.is_single_valued():
            return refuse("an element is touched by two threads")
        if not self.reuse(g, scoped):
            return refuse("no reuse within a thread")
        footprint = isl.Map.from_union_map(g.footprint())
        box = footprint_box(footprint)
        if isinstance(box, str):
            return refuse(box)
        if math.prod(box.sizes) > MAX_PRIVATE_ELEMENTS:
            return refuse(f"{math.prod(box.sizes)} elements, more than {MAX_PRIVATE_ELEMENTS}")
        named = self.buffer(g, box, footprint, scoped, "private")
        if isinstance(named, str):
            return refuse(named)
        name, offsets, accesses = named
        reads = [r for r in g.refs if not r.access.write]
        writes = [r for r in g.refs if r.access.write]
        # exactly the elements read before being written (in) and written (out)
        copy_in = None
        if reads:
            copy_in = live_in(g, scoped, schedule) if writes else isl.Map.from_union_map(g.footprint(reads))
        copy_out = isl.Map.from_union_map(g.footprint(writes)) if writes else None
        bounds = tensor_bounds(g.tensor, self.tensors[g.tensor].shape, self.ctx)
        copy_in, copy_out = clipped((copy_in, copy_out), outer, bounds)
        copies = [w for w, c in (("copy in", copy_in), ("write back", copy_out)) if c is not None]
        dims = "".join(f"[{n}]" for n in box.sizes)
        self.decisions.append(
            f"private: {g.tensor}{dims} at depth {depth} over {stmts} as {name} ({', '.join(copies)}; reuse)"
        )
        buf = ir.Buffer(name, g.tensor, "private", tuple(box.sizes))
        return Decision(buf, accesses, copy_in, copy_out, offsets, box.strides, box.sizes)

    def private_copy(self, what: isl.Map, name: str) -> isl.ScheduleNode:
        """The extension tree of private copy ``name`` over ``what`` (scope point -> elements): run
        by the owning thread alone, a loop per tensor dimension, every one unrolled (register
        indices are then constants)."""
        tree, rank, _ = self.copy_band(what, name)
        for k in range(rank):
            tree = tree.band_member_set_ast_loop_type(k, isl.ast_loop_type.unroll)
        return tree.root()

    def private_graft(self, scope: Scope) -> Graft:
        """The copies around ``scope``: no barriers, only the owning thread touches its elements."""
        before = tuple(
            self.private_copy(d.copy_in, copy_name(COPY_IN, d.buffer.name))
            for d in scope.promoted
            if d.copy_in is not None
        )
        after = tuple(
            self.private_copy(d.copy_out, copy_name(COPY_OUT, d.buffer.name))
            for d in scope.promoted
            if d.copy_out is not None
        )
        return Graft(scope.path, before, after)
