"""Reductions on the GPU mapping: which bands become block reductions, and how they are mapped.

With ``match_library_calls``, :class:`ReductionMapping` recognises a band that holds one
associative update (:meth:`~ReductionMapping.reduction_update`), maps it as a block reduction (its
reduction loop on ``threadIdx.x``, the outputs on rows of threads:
:meth:`~ReductionMapping.map_reduction`), spreads a reduction whose outputs give too few blocks
over blocks as well (:meth:`~ReductionMapping.spread_reduction`, summed atomically) and grafts the
reduction's statements around its mark (:meth:`~ReductionMapping.reduction_grafts`). The
statements themselves and their expansion in the kernel IR are :mod:`.reduction`'s. A band is
mapped so only where isl shows that each thread row owns one output element and no two rows own
the same one: every output receives the terms it received before, combined in another order (a
tree).

The methods work on the GPU mapper's state (:mod:`.gpu`): the Scop, the parameters' values, the
thread ids of each instance, the reductions pending in the current kernel, the decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl

from ..polyhedral.lang import ast as A
from ..polyhedral.schedule import node_path
from ..polyhedral.scop import Reduction, Scop
from .gpu_ids import constant_ids, id_filter, id_function, set_names, unused_threads_zero
from .gpu_ir import THREAD_IDS, BlockReduction
from .grafts import Graft
from .reduction import REDUCE_MARK, combine_extension, extension, single_owner
from .tree_queries import instances_of, leading_coincident, member_spread
from .tree_queries import statements_of as _names

__all__ = ["ATOMIC_SUMS", "REDUCTION_BLOCKS", "PendingReduction", "ReductionMapping"]

#: A block reduction whose outputs give fewer blocks than this spreads its reduction loop over
#: blocks too (:meth:`ReductionMapping.spread_reduction`): two blocks for each of an H100's 132
#: multiprocessors (TorchInductor splits a reduction with fewer outputs than twice the SMs).
REDUCTION_BLOCKS = 2 * 132

#: The tensor types whose sums CUDA adds atomically (half types sum in float32).
ATOMIC_SUMS = frozenset({"float16", "bfloat16", "float32", "float64", "int32", "int64", "uint32", "uint64"})


def _is(node: isl.ScheduleNode, kind) -> bool:
    return node.get_type() == kind


@dataclass(frozen=True)
class PendingReduction:
    """A reduction mapped to threads whose statements are not grafted yet: its mark's name, its
    update statement, and the thread row ``[t1, t2]`` of each instance."""

    mark: str
    number: int
    update: str
    tensor: str
    op: str
    rows: isl.UnionMap
    atomic: bool


class ReductionMapping:
    """The block reductions of the GPU mapper (see the module's docstring)."""

    scop: Scop | None
    fixed: isl.Set
    reduce: bool  # match_library_calls, and a Scop to read the reductions from
    decisions: list[str]
    threads: list[isl.UnionMap]  # statement instance -> its thread ids (x, y, z)
    mapped: list[isl.UnionSet]  # instances under thread filters (this kernel)
    pending: list[PendingReduction]  # block reductions mapped in this kernel
    n_reductions: int
    deps: isl.UnionMap  # at the parameters' values
    absorbed: dict[int, str]  # reduction number -> the initialisation its combine takes over
    private_loops: set[tuple[int, ...]]  # bands a private accumulator spans (accumulation_top)
    spread: bool  # this kernel's block band holds a reduction member (map_blocks)

    def reduction_update(self, node: isl.ScheduleNode) -> Reduction | None:
        """The reduction a block reduction may take over at band ``node``: the only statement
        below it, an associative update of one element whose right-hand side does not read the
        tensor it updates (module :mod:`.reduction`)."""
        names = set_names(node.get_domain())
        if len(names) != 1:
            return None
        red = next((r for r in self.scop.reductions if r.statement == names[0]), None)
        st = self.scop.statement(names[0])
        if (
            red is None
            or st.kind != "update"
            or red.op not in ("+=", "*=", "max=", "min=")
            or not st.source.plain_lhs
        ):
            return None
        if any(isinstance(a, A.Access) and a.tensor == st.source.tensor for a in A.walk(st.source.rhs)):
            return None
        return red

    def spread_reduction(self, band: isl.ScheduleNode, n: int, grid_opt) -> bool:
        """Whether the block band ``band`` (``n`` coincident members on blocks) maps its next
        member, a reduction loop, to blocks too: a block reduction (:meth:`map_reduction`) of a
        sum whose type CUDA adds atomically, with fewer than :data:`REDUCTION_BLOCKS` blocks over
        its outputs (too few to fill the device; TC's 'reductions too large for one block'), and
        more than one tile of the reduction loop to spread."""
        if not self.reduce or n >= min(len(grid_opt), 3) or n >= band.band_n_member():
            return False
        red = self.reduction_update(band)
        if red is None or leading_coincident(band) > n:
            return False
        tensor = self.scop.statement(red.statement).source.tensor
        if red.op != "+=" or self.scop.cdef.tensor(tensor).dtype.name not in ATOMIC_SUMS:
            return False
        blocks = 1
        for i in range(n):
            blocks *= min(grid_opt[i], member_spread(band, i) or grid_opt[i])
        return blocks < REDUCTION_BLOCKS and (member_spread(band, n) or 2) > 1

    def map_reduction(self, node: isl.ScheduleNode, block_opt) -> tuple[isl.Schedule, int] | None:
        """Map band ``node`` as a block reduction (module :mod:`.reduction`): its innermost
        member to x, the innermost coincident ones to y and z, a band of the coincident members
        above it (those on y and z divided by the block size). None (nothing changed) where the
        band is no such reduction or a thread row would own two elements."""
        if not self.reduce or block_opt[0] <= 1:
            return None
        red = self.reduction_update(node)
        first = leading_coincident(node)
        if red is None or first >= node.band_n_member():
            return None
        x = node.band_n_member() - 1  # the innermost member: consecutive threads, consecutive elements
        ctx = node.get_ctx()
        n_c = min(first, len(block_opt) - 1, 2)
        above = ""
        if first:
            part = node.band_get_partial_schedule()
            outer = part.drop_dims(isl.dim_type.set, first, node.band_n_member() - first)
            for j in range(1, n_c + 1):  # member first - j goes to thread dimension j (y, z)
                k = first - j
                size = isl.Val.int_from_si(ctx, block_opt[j])
                outer = outer.set_union_pw_aff(k, part.get_union_pw_aff(k).scale_down_val(size).floor())
            node = node.insert_partial_schedule(outer)
            for k in range(first):
                node = node.band_member_set_coincident(k, True)
            node = node.child(0)
            above = f"; a band of members {list(range(first))} above it (one output per row)"
        domain = node.get_domain()
        rows = None
        for j in (1, 2):
            part_j = id_function(node, first - j, block_opt[j]) if j <= n_c else constant_ids(domain, 1)
            rows = part_j if rows is None else rows.flat_range_product(part_j)
        out = self.scop.untagged_writes.intersect_params(self.fixed).intersect_domain(domain)
        if not single_owner(node.get_prefix_schedule_union_map(), rows, out):
            self.decisions.append(
                f"reduction: not mapped for {_names(node)} (a thread row would own two elements)"
            )
            return None
        filt = domain.intersect(id_filter(node, x, block_opt[0], THREAD_IDS[0]))
        for j in range(1, n_c + 1):
            filt = filt.intersect(id_filter(node, first - j, block_opt[j], THREAD_IDS[j]))
        filt = unused_threads_zero(filt, 1 + n_c)
        anywhere = isl.UnionSet.from_set(isl.Set.read_from_str(ctx, f"{{ [v] : 0 <= v < {block_opt[0]} }}"))
        # the update's element is written by thread x 0 of its row: barriers must treat the
        # instance as any thread of the row
        self.threads.append(isl.UnionMap.from_domain_and_range(domain, anywhere).flat_range_product(rows))
        self.mapped.append(domain)
        number = self.n_reductions
        self.n_reductions += 1
        mark = f"{REDUCE_MARK}{number}"
        tensor = self.scop.statement(red.statement).source.tensor
        self.pending.append(PendingReduction(mark, number, red.statement, tensor, red.op, rows, self.spread))
        node = node.insert_filter(filt).insert_mark(isl.Id(mark, context=ctx))
        self.decisions.append(
            f"reduction: member {x} of the band over {_names(node)} -> x ({block_opt[0]}), "
            + "".join(f"member {first - j} -> {'xyz'[j]} ({block_opt[j]}), " for j in range(1, n_c + 1))
            + f"combined by a block tree reduction into {tensor} ({red.op}){above}"
        )
        return node.get_schedule(), 1 + n_c

    def accumulation_top(
        self, mark: isl.ScheduleNode, r: PendingReduction, others: Sequence[tuple[int, ...]] = ()
    ) -> isl.ScheduleNode:
        """The node the reduction at ``mark`` keeps its private accumulator across: the highest
        band above the mark, along single-child bands over the update's instances alone, whose
        prefix schedule still gives each thread row one output element (the band loops of a
        long reduction that a thread runs one after the other: bn_reduce's ``r_h`` over each
        ``r_w`` share, abs_sum's rows of a tile). The tree and the combine then run once per
        point of that prefix instead of once per iteration of those loops. The mark itself
        where no such band exists, or where ``others`` (other grafts' paths) lie in between."""
        out = self.scop.untagged_writes.intersect_params(self.fixed)
        domain = mark.get_domain()
        mark_path = tuple(node_path(mark))
        top, node = mark, mark.parent()
        while _is(node, isl.schedule_node_type.band) and node.n_children() == 1:
            if not node.get_domain().is_equal(domain):
                break
            path = tuple(node_path(node))
            if any(g[: len(path)] == path and g[: len(mark_path)] != mark_path for g in others):
                break
            prefix = node.get_prefix_schedule_union_map().intersect_domain(domain)
            if not single_owner(prefix, r.rows, out.intersect_domain(domain)):
                break
            top, node = node, node.parent()
        return top

    def absorbed_initialisation(self, top: isl.ScheduleNode, r: PendingReduction) -> str | None:
        """The ``!`` initialisation of reduction ``r`` that its combine can take over, where the
        accumulators span ``top`` (:meth:`accumulation_top`): its blocks do not share outputs,
        each output element is combined at one point of ``top``'s prefix only, the
        initialisation writes no element the update leaves alone (an empty reduction keeps its
        identity from the initialisation), and every instance that depends on it also depends
        on the update (it reads the element after the combine). None where one of these fails."""
        if r.atomic:
            return None
        init = f"{r.update}_init"
        stmt_names = {s.name for s in self.scop.statements}
        if init not in stmt_names:
            return None
        writes = self.scop.untagged_writes.intersect_params(self.fixed)
        domain = top.get_domain()
        out = writes.intersect_domain(domain)
        combined = top.get_prefix_schedule_union_map().intersect_domain(domain).reverse().apply_range(out)
        if not combined.reverse().is_single_valued():
            return None
        init_writes = _of(writes, init)
        if not init_writes.range().is_subset(_of(writes, r.update).range()):
            return None
        # whatever depends on the initialisation depends on the update too: it runs after the
        # combine, and reads what the combine stores
        after_init = _of(self.deps, init).range()
        after_update = _of(self.deps, r.update).range()
        rest = after_init.subtract(instances_of(after_init, r.update))
        return init if rest.is_subset(after_update) else None

    def reduction_grafts(
        self,
        sched: isl.Schedule,
        reductions: Sequence[tuple[PendingReduction, BlockReduction]],
        others: Sequence[tuple[int, ...]] = (),
    ) -> list[Graft]:
        """The statements of the block ``reductions`` around their marks in ``sched`` (before any
        graft: isl gives no node's domain below an extension node), or around the band their
        private accumulators span (:meth:`accumulation_top`; its bands' paths go to
        ``self.private_loops``: no barrier after their iterations). ``others``: the paths of
        the kernel's other grafts (promotion's copies), which a hoisted reduction never spans."""
        marks = {}

        def visit(n: isl.ScheduleNode) -> None:
            if _is(n, isl.schedule_node_type.mark) and n.mark_get_id().get_name().startswith(REDUCE_MARK):
                marks[n.mark_get_id().get_name()] = n
            for i in range(n.n_children()):
                visit(n.child(i))

        visit(sched.get_root())
        grafts = []
        for r, red in reductions:
            node = self.accumulation_top(marks[r.mark], r, others)
            init = self.absorbed_initialisation(node, r)
            if init is not None:
                self.absorbed[r.number] = init
                self.decisions.append(
                    f"reduction {r.number}: its combine is the only one each element of {r.tensor}"
                    f" receives: it initialises the element ({init} does not run)"
                )
            path = node_path(marks[r.mark])
            for k in range(len(node_path(node)), len(path)):
                self.private_loops.add(tuple(path[:k]))
            if node_path(node) != path:
                self.decisions.append(
                    f"reduction {r.number}: private accumulators across the loops from path"
                    f" {node_path(node)} to its threads: one tree per point of that prefix"
                )
            ctx = node.get_ctx()
            prefix = node.get_prefix_schedule_union_map()
            outer = prefix.range()
            out = self.scop.untagged_writes.intersect_params(self.fixed).intersect_domain(node.get_domain())
            before = (extension(outer, red.init, ctx),)
            after = (
                extension(outer, red.store, ctx),
                extension(outer, red.tree, ctx),
                combine_extension(prefix, r.rows, out, red.combine, ctx),
            )
            # nearest its subtree (rank 2): a barrier after the subtree (rank 1) comes after the
            # combine, whose writes a later statement of the block may read
            grafts.append(Graft(tuple(node_path(node)), before, after, rank=2))
        return grafts


def _of(m: isl.UnionMap, name: str) -> isl.UnionMap:
    """``m`` on the instances of statement ``name``."""
    return m.intersect_domain(instances_of(m.domain(), name))
