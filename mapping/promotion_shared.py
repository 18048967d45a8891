"""Shared-memory promotion: which groups go to ``__shared__`` buffers, and the copies around them.

:class:`SharedPromoter` decides per group of a scope (affine references, a buffer that fits what
is left of the budget, reuse inside the scope or uncoalesced accesses), builds the copy statements
spread over the block's threads (the innermost tensor dimension on ``threadIdx.x``, unrolled with
``unroll_copy_shared``) and the barriers around the scope, as grafts (:mod:`.promotion`'s
docstring gives the rules). What the kernel computes is unchanged: the copies in bring every element
the scope reads before it writes it, the write-backs store every element it writes, and the
barriers keep a tile from being overwritten while another thread still reads it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import islpy as isl

from ..polyhedral.schedule import node_path
from . import ir
from .grafts import Graft
from .promotion_footprints import clipped, footprint_box, in_box, isl_text, tensor_bounds
from .promotion_groups import Decision, Group, Promoter, Ref, Scope, live_in
from .promotion_scopes import earlier, mentions, once_per_block, scope_schedule
from .promotion_types import COPY_IN, COPY_OUT, copy_name

__all__ = ["SharedPromoter"]

#: The barriers promotion adds (turned into ``sync`` marks like the mapper's, whose prefix it has).
_SYNC = "tc_sync_p"


def _is(node: isl.ScheduleNode, kind) -> bool:
    return node.get_type() == kind


def _maps(um: isl.UnionMap) -> list[isl.Map]:
    lst = um.get_map_list()
    return [lst.get_at(i) for i in range(lst.n_map())]


def _next_along(space: isl.Space, dim: int) -> isl.Map:
    """``{ [..., v_dim, ...] -> [..., v_dim + 1, ...] }`` on the set space ``space``."""
    ident = isl.MultiAff.identity(space.map_from_set())
    one = isl.Val.int_from_si(space.get_ctx(), 1)
    return isl.Map.from_multi_aff(ident.set_aff(dim, ident.get_aff(dim).add_constant_val(one)))


class SharedPromoter(Promoter):
    """Shared-memory promotion of the kernels of one mapped tree (see :mod:`.promotion`'s docstring)."""

    # ------------------------------------------------------------------------------- analysis
    def analyse(
        self, node: isl.ScheduleNode, kernel: int, depth: int, block, budget: list[int], keep=frozenset()
    ) -> Scope:
        outer, scoped, order = self.scope_groups(node)  # scoped: instance -> scope point, every block
        schedule = scope_schedule(node, scoped)
        before, after = earlier(node, 2)
        again = after or not once_per_block(outer, self.block_ids)
        bands = self._thread_bands(node)
        promoted = []
        for g in order:
            if g.tensor in self.unpromoted:
                self.decisions.append(f"shared: {g.tensor} left alone (its shape depends on a symbolic size)")
                continue
            if g.tensor in keep:
                self.decisions.append(f"shared: {g.tensor} left alone (a block reduction's output)")
                continue
            d = self._decide(g, scoped, schedule, outer, bands, depth, block, budget)
            if d is not None:
                promoted.append(d)
        return Scope(tuple(node_path(node)), kernel, outer, before, again, tuple(promoted))

    def _decide(self, g: Group, scoped, schedule, outer, bands, depth, block, budget) -> Decision | None:
        stmts = sorted({r.access.statement for r in g.refs})
        where = f"{g.tensor} at depth {depth} over {stmts}"

        def refuse(why: str) -> None:
            self.decisions.append(f"shared: {where} not promoted ({why})")

        if not all(r.access.exact for r in g.refs):
            return refuse("a gather: its subscripts depend on data")
        shape = self.tensors[g.tensor].shape
        if not shape:
            return refuse("a scalar")
        footprint = isl.Map.from_union_map(g.footprint())
        box = footprint_box(footprint)
        if isinstance(box, str):
            return refuse(box)
        declared = list(box.sizes)
        if len(declared) >= 2 and declared[-1] % 2 == 0:
            declared[-1] += 1  # an odd row length: a column of the tile spans every bank
        size = math.prod(declared) * self.tensors[g.tensor].bytes
        if size > budget[0]:
            return refuse(f"{size} bytes, {budget[0]} left of the shared memory budget")
        reuse = self.reuse(g, scoped)
        uncoalesced = [r.access.ref for r in g.refs if not self._coalesced(r, bands)]
        if not reuse and not uncoalesced:
            return refuse("no reuse, coalesced")
        named = self.buffer(g, box, footprint, scoped, "shared")
        if isinstance(named, str):
            return refuse(named)
        name, offsets, accesses = named
        budget[0] -= size
        reads = [r for r in g.refs if not r.access.write]
        writes = [r for r in g.refs if r.access.write]
        bounds = tensor_bounds(g.tensor, shape, self.ctx)
        copy_in = None
        if reads and not writes:  # the whole box, clipped to the tensor: regular copy loops
            copy_in = in_box(footprint.get_space(), box).intersect_range(bounds)
        elif reads:  # only what it reads before writing: another block may write the rest
            copy_in = live_in(g, scoped, schedule)
        copy_out = isl.Map.from_union_map(g.footprint(writes)) if writes else None
        copy_in, copy_out = clipped((copy_in, copy_out), outer, bounds)
        why = ["reuse"] if reuse else []
        if uncoalesced:
            why.append(f"uncoalesced {', '.join(uncoalesced)}")
        copies = [w for w, c in (("copy in", copy_in), ("write back", copy_out)) if c is not None]
        dims = "".join(f"[{n}]" for n in declared)
        self.decisions.append(
            f"shared: {g.tensor}{dims} at depth {depth} over {stmts} as {name}, "
            f"{size} bytes ({', '.join(copies)}; {', '.join(why)})"
        )
        buf = ir.Buffer(name, g.tensor, "shared", tuple(declared))
        return Decision(buf, accesses, copy_in, copy_out, offsets, box.strides, box.sizes)

    def _thread_bands(self, node: isl.ScheduleNode) -> list[tuple[isl.UnionMap, isl.UnionMap]]:
        """Per thread-mapped band below ``node``: (instance -> schedule down to its leaves, the map
        from a schedule point to the one whose thread-x member is one more)."""
        out = []

        def visit(n: isl.ScheduleNode) -> None:
            if _is(n, isl.schedule_node_type.filter) and mentions(n.filter_get_filter(), self.thread_ids):
                below = n.child(0).child(0)  # the thread-mapped band's child
                prefix = below.get_prefix_schedule_union_map().project_out_all_params()
                full = prefix.flat_range_product(
                    below.get_subtree_schedule_union_map().project_out_all_params()
                )
                maps = _maps(prefix)
                x = maps[0].dim(isl.dim_type.out) - 1 if maps else -1  # innermost member: threadIdx.x
                if x < 0:  # no loop above (a distributed statement of one point): nothing to step
                    return
                nxt = None
                for m in _maps(full):
                    step = _next_along(m.get_space().range(), x)
                    nxt = (
                        isl.UnionMap.from_map(step) if nxt is None else nxt.union(isl.UnionMap.from_map(step))
                    )
                out.append((full, nxt))
                return
            for i in range(n.n_children()):
                visit(n.child(i))

        visit(node)
        return out

    def _coalesced(self, r: Ref, bands) -> bool:
        """Whether threads next to each other along x touch the same element or the next one of
        the last dimension (references outside thread-mapped code count as coalesced)."""
        access = r.tagged.domain_factor_domain()
        for full, nxt in bands:
            at = access.apply_domain(full)  # schedule point -> element
            if at.is_empty():
                continue
            pairs = at.reverse().apply_range(nxt).apply_range(at)
            space = isl.Map.from_union_map(access).get_space().range()
            fine = isl.UnionMap.from_map(
                _next_along(space, space.dim(isl.dim_type.set) - 1).union(
                    isl.Map.identity(space.map_from_set())
                )
            )
            if not pairs.is_subset(fine):
                return False
        return True

    # ----------------------------------------------------------------------------------- edits
    def sync(self, outer: isl.UnionSet) -> isl.ScheduleNode:
        """A barrier statement run once per point of ``outer`` (an extension tree)."""
        name = f"{_SYNC}{self.syncs}"
        self.syncs += 1
        stmt = isl.UnionSet.from_set(isl.Set.read_from_str(self.ctx, f"{{ {name}[] }}"))
        return isl.ScheduleNode.from_extension(isl.UnionMap.from_domain_and_range(outer, stmt))

    def copy(self, what: isl.Map, name: str, d: Decision, block: Sequence[int]) -> isl.ScheduleNode:
        """The extension tree of copy statement ``name`` over ``what`` (scope point -> elements):
        instances ``name[s, a]``, a loop per tensor dimension, the innermost on threadIdx.x
        (element ``offset + k`` of the box on thread ``k`` modulo the block)."""
        tree, rank, tup = self.copy_band(what, name)
        cons = []
        for j, (t, n) in enumerate(zip(self.thread_ids, block)):
            k = rank - 1 - j  # innermost dimension on x
            if k >= 0:
                local = f"(a{k} - ({isl_text(d.offsets[k])}))"
                if d.strides[k] > 1:
                    local = f"floor({local} / {d.strides[k]})"
                cons.append(f"{local} mod {n} = {t}" if n > 1 else f"{t} = 0")
            elif n > 1:
                cons.append(f"{t} = 0")  # one copy of each element: the other threads wait
        filt = isl.UnionSet.read_from_str(
            self.ctx, f"[{', '.join(self.thread_ids)}] -> {{ {tup} : {' and '.join(cons) or '0 = 0'} }}"
        )
        if self.options.unroll_copy_shared and self.options.unroll > 1:
            tree = self._unroll(tree, d.sizes, block)
        return tree.insert_filter(filt).root()

    def _unroll(self, band: isl.ScheduleNode, sizes: Sequence[int], block: Sequence[int]) -> isl.ScheduleNode:
        """Unroll the innermost copy loops while each thread runs at most ``unroll`` iterations of
        them together (TC's ``unroll_copy_shared``)."""
        rank = len(sizes)
        total = 1
        for k in reversed(range(rank)):
            j = rank - 1 - k  # the thread dimension of tensor dimension k
            count = -(-sizes[k] // block[j]) if j < len(block) else sizes[k]
            if total * count > self.options.unroll:
                break
            total *= count
            band = band.band_member_set_ast_loop_type(k, isl.ast_loop_type.unroll)
        return band

    def graft(self, scope: Scope, block: Sequence[int]) -> Graft:
        """The copies and barriers around ``scope``."""
        ins = [d for d in scope.promoted if d.copy_in is not None]
        outs = [d for d in scope.promoted if d.copy_out is not None]
        before = []
        if ins and scope.before:  # what ran earlier may have written what is copied in
            before.append(self.sync(scope.outer))
        before += [self.copy(d.copy_in, copy_name(COPY_IN, d.buffer.name), d, block) for d in ins]
        if ins:
            before.append(self.sync(scope.outer))
        after = []
        if outs:
            after.append(self.sync(scope.outer))
        after += [self.copy(d.copy_out, copy_name(COPY_OUT, d.buffer.name), d, block) for d in outs]
        if scope.again:
            after.append(self.sync(scope.outer))
        return Graft(scope.path, tuple(before), tuple(after))
