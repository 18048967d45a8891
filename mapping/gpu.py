"""The GPU mapping: a tiled, specialised schedule tree onto CUDA blocks and threads.

TC's ``mapToBlocksAndScaleBand`` and ``mapInnermostBandsToThreads`` (and PPCG's
``set_schedule_modulo``), as filters on the schedule tree (notes/polyhedral.md 1.5 and 2(c)):

* **Kernels.** Each child of the root's sequence (or set) is a kernel of its own, launched after the
  previous one on the same stream: statements the scheduler did not fuse may depend on each other
  across blocks, which only a new launch orders. A root band is one kernel.
* **Blocks.** The leading coincident members of a kernel's outermost band (at most 3, at most as
  many as ``map_to_blocks`` gives) go to ``blockIdx.x, .y, .z``, outermost to x, as a filter
  ``member mod grid_i = b_i`` with parameters ``b0, b1, b2``: with more tiles than blocks, isl's AST
  walks them in a grid-stride loop.
* **Threads.** On every path below, the innermost band with a coincident member: its innermost
  coincident members (at most 3, at most as many as ``map_to_threads`` gives) go to
  ``threadIdx.x, .y, .z``, *innermost* to x (consecutive threads touch consecutive elements), as a
  filter ``member mod block_i = t_i``: an extent above the block size becomes a strided loop per
  thread, extra threads are guarded by isl's conditions. Statements on paths without such a band run
  on thread 0 only (a filter ``t_i = 0``).
* **Synchronisation.** A mark ``sync`` below a sequence child tells the printers to emit
  ``__syncthreads()`` after it; it is placed after every child but the last of a sequence below the
  block mapping whose later children depend on it through another thread (the dependence does not
  keep thread ids), and after the body of a loop above thread-mapped code that carries a dependence
  (the next iteration may read what another thread wrote).
* **Launch bounds.** The grid and block sizes are tightened to the largest ids that run a statement
  instance, plus one: a 100 x 70 problem in 32 x 16 tiles launches 4 x 5 blocks whatever
  ``map_to_blocks`` allowed.

Each kernel's plan holds the whole tree (the other kernels' statements filtered out at code
generation) and the context its AST is built in: the sizes and the ids' bounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import islpy as isl

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang import ast as A
from ..polyhedral.schedule import bands, member_extent, node_at, node_path
from ..polyhedral.scop import Dependences, Reduction, Scop
from . import ir
from .promotion import Copy, Graft, Promoted, TensorInfo, apply_grafts, promote_private, promote_shared
from .reduction import (
    REDUCE_MARK,
    BlockReduction,
    combine_extension,
    expand_trees,
    extension,
    single_owner,
)
from .tree_queries import has_band_below, leading_coincident, member_spread
from .tree_queries import statements_of as _names

__all__ = [
    "BLOCK_IDS",
    "SYNC_PREFIX",
    "THREAD0_MARK",
    "THREAD_IDS",
    "GpuKernelPlan",
    "GpuPlan",
    "barriers",
    "launch_bodies",
    "map_gpu",
]

BLOCK_IDS = ("b0", "b1", "b2")
THREAD_IDS = ("t0", "t1", "t2")

#: Statements named with this prefix and a number are barriers (``__syncthreads()``); the
#: mapper adds them as extension nodes. :func:`barriers` turns them into ``sync`` marks.
SYNC_PREFIX = "tc_sync_"

#: The mark above code that thread 0 of each block runs alone (printed as a condition on the
#: thread ids below any barrier).
THREAD0_MARK = "thread0"


@dataclass(frozen=True)
class GpuKernelPlan:
    """One launch.

    :ivar domain: the statement instances this kernel runs (a filter of the plan's tree).
    :ivar grid: blocks along x, y, z (tightened; 1 where unmapped).
    :ivar block: threads along x, y, z (tightened; 1 where unmapped).
    :ivar context: parameters' values for AST generation: the sizes and ``0 <= b_i < grid_i``,
        ``0 <= t_i < block_i``.
    :ivar buffers: the promoted buffers the kernel declares (:mod:`.promotion`).
    """

    domain: isl.UnionSet
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    context: isl.Set
    buffers: tuple[ir.Buffer, ...] = ()


@dataclass(frozen=True)
class GpuPlan:
    """The mapped tree, its kernels in launch order, and what the mapper decided (readable).

    :ivar accesses: the references promoted to a buffer, by ``(statement, reference id)``.
    :ivar copies: the copy statements promotion added, by name.
    :ivar reductions: the block reductions (:mod:`.reduction`), by the name of each statement
        and mark they involve (their update statement's included).
    """

    schedule: isl.Schedule
    kernels: tuple[GpuKernelPlan, ...]
    decisions: tuple[str, ...]
    accesses: Mapping[tuple[str, str], Promoted] = field(default_factory=dict)
    copies: Mapping[str, Copy] = field(default_factory=dict)
    reductions: Mapping[str, BlockReduction] = field(default_factory=dict)


def _is(node: isl.ScheduleNode, kind) -> bool:
    return node.get_type() == kind


def _kernel_roots(sched: isl.Schedule) -> list[isl.ScheduleNode]:
    """The roots of the kernels: the children (filters) of the root's sequence or set, or the root's
    only child; a child with no band above its own sequence or set is split the same way, again
    (one launch per statement group: as one kernel it would have no band to map to blocks and
    run in a single block, as mlp3's and cosine's first kernels did)."""

    def split(node: isl.ScheduleNode) -> list[isl.ScheduleNode]:
        below = node
        while below.n_children() == 1 and not _is(below, isl.schedule_node_type.band):
            below = below.child(0)
        if _is(below, isl.schedule_node_type.sequence) or _is(below, isl.schedule_node_type.set):
            return [k for i in range(below.n_children()) for k in split(below.child(i))]
        return [node]

    top = sched.get_root().child(0)
    if _is(top, isl.schedule_node_type.sequence) or _is(top, isl.schedule_node_type.set):
        return [k for i in range(top.n_children()) for k in split(top.child(i))]
    return split(top)


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


def _first_band(node: isl.ScheduleNode) -> isl.ScheduleNode | None:
    """The first band at or below ``node`` along single-child nodes (None at a branch or leaf)."""
    while not _is(node, isl.schedule_node_type.band):
        if node.n_children() != 1:
            return None
        node = node.child(0)
    return node


def _id_filter(band: isl.ScheduleNode, member: int, size: int, name: str) -> isl.UnionSet:
    """The instances below ``band`` whose ``member`` is ``name`` modulo ``size``."""
    eq = isl.Set.read_from_str(band.get_ctx(), f"[{name}] -> {{ [v] : v = {name} }}")
    rel = _id_function(band, member, size).intersect_range(isl.UnionSet.from_set(eq))
    return rel.domain().intersect(band.get_domain())


def _id_function(band: isl.ScheduleNode, member: int, size: int) -> isl.UnionMap:
    """Instance -> ``member`` modulo ``size`` (the id it is mapped to)."""
    upa = band.band_get_partial_schedule().get_union_pw_aff(member)
    upa = upa.mod_val(isl.Val.int_from_si(band.get_ctx(), size))
    return isl.UnionMap.from_union_pw_aff(upa).intersect_domain(band.get_domain())


def _unused_threads_zero(filt: isl.UnionSet, n: int) -> isl.UnionSet:
    """``filt`` (a thread filter over the first ``n`` thread ids) with the other ids 0: in a kernel
    whose block has more dimensions than this band uses, one thread of each such line runs it."""
    if n >= 3:
        return filt
    cons = " and ".join(f"{t} = 0" for t in THREAD_IDS[n:])
    zero = isl.Set.read_from_str(filt.get_ctx(), f"[{', '.join(THREAD_IDS[n:])}] -> {{ : {cons} }}")
    return filt.intersect_params(zero)


def _constant_ids(domain: isl.UnionSet, n: int = 3) -> isl.UnionMap:
    """Instance -> ``n`` zeros (thread 0)."""
    zeros = isl.Set.read_from_str(domain.get_ctx(), f"{{ [{', '.join(['0'] * n)}] }}")
    return isl.UnionMap.from_domain_and_range(domain, isl.UnionSet.from_set(zeros))


@dataclass(frozen=True)
class _Reduction:
    """A reduction mapped to threads whose statements are not grafted yet: its mark's name, its
    update statement, and the thread row ``[t1, t2]`` of each instance."""

    mark: str
    number: int
    update: str
    tensor: str
    op: str
    rows: isl.UnionMap
    atomic: bool


#: A block reduction whose outputs give fewer blocks than this spreads its reduction loop over
#: blocks too (``_Mapper._spread_reduction``): an H100 has 132 multiprocessors.
REDUCTION_BLOCKS = 128

#: The tensor types whose sums CUDA adds atomically (half types sum in float32).
ATOMIC_SUMS = frozenset({"float16", "bfloat16", "float32", "float64", "int32", "int64", "uint32", "uint64"})


class _Mapper:
    def __init__(self, deps: Dependences, fixed: isl.Set, scop: Scop | None = None, reduce: bool = False):
        self.deps = deps.all.intersect_params(fixed)
        self.fixed = fixed
        self.scop = scop
        self.reduce = reduce and scop is not None
        self.decisions: list[str] = []
        self.threads: list[isl.UnionMap] = []  # statement instance -> its thread ids (x, y, z)
        self.mapped: list[isl.UnionSet] = []  # instances under thread filters (this kernel)
        self.pending: list[_Reduction] = []  # block reductions mapped in this kernel
        self.n_reductions = 0
        self.spread = False  # this kernel's block band holds a reduction member (map_blocks)
        self.syncs = 0

    # -------------------------------------------------------------------------------- blocks
    def map_blocks(self, sched, path, grid_opt) -> tuple[isl.Schedule, list[int], list[int] | None]:
        """Map the kernel at ``path``'s outermost band to blocks; the new tree, the per-id option
        sizes used, and the path of the band (None if the kernel has no band)."""
        band = _first_band(node_at(sched, path))
        self.spread = False
        if band is None:
            self.decisions.append(f"blocks: none (no band) for {_names(node_at(sched, path))}")
            return sched, [], None
        n = min(leading_coincident(band), len(grid_opt), 3)
        self.spread = self._spread_reduction(band, n, grid_opt)
        if self.spread:
            n += 1
        if n == 0:
            self.decisions.append(f"blocks: none (no coincident outer member) for {_names(band)}")
            return sched, [], node_path(band)
        filt = band.get_domain()
        for i in range(n):
            filt = filt.intersect(_id_filter(band, i, grid_opt[i], BLOCK_IDS[i]))
        self.decisions.append(
            f"blocks: members 0..{n - 1} of the band over {_names(band)} -> "
            + ", ".join(f"{'xyz'[i]} ({grid_opt[i]})" for i in range(n))
            + (f" (member {n - 1}: a reduction, its blocks' results added atomically)" if self.spread else "")
        )
        band_path = node_path(band)
        node = band.insert_filter(filt)  # the band is now this filter's child
        return node.get_schedule(), list(grid_opt[:n]), [*band_path, 0]

    # ------------------------------------------------------------------------------- threads
    def map_threads(
        self, sched, block_path, kernel_path, block_opt, blocks_mapped: bool = True
    ) -> tuple[isl.Schedule, int]:
        """Map the innermost band with a coincident member on every path below the block band to
        threads; paths without one run on thread 0. Returns the tree and the thread dims used."""
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
                if leading_coincident(node) == 0 and not (self.reduce and self._reduction_update(node)):
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
                self.threads.append(_constant_ids(node.get_domain()))
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
            filt = node.get_domain()
            fn = None
            for k in range(3):
                part = (
                    _id_function(node, n - 1 - k, block_opt[k])
                    if k < n
                    else _constant_ids(node.get_domain(), 1)
                )
                fn = part if fn is None else fn.flat_range_product(part)
            self.threads.append(fn)
            for k, m in enumerate(reversed(range(n))):
                filt = filt.intersect(_id_filter(node, m, block_opt[k], THREAD_IDS[k]))
            filt = _unused_threads_zero(filt, n)
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
                and self._reduction_update(node) is not None
            ):
                found = True
                return False
            return True

        band.foreach_descendant_top_down(look)
        return found

    # ----------------------------------------------------------------------------- reductions
    def _reduction_update(self, node: isl.ScheduleNode) -> Reduction | None:
        """The reduction a block reduction may take over at band ``node``: the only statement
        below it, an associative update of one element whose right-hand side does not read the
        tensor it updates (module :mod:`.reduction`)."""
        names = _set_names(node.get_domain())
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

    def _spread_reduction(self, band: isl.ScheduleNode, n: int, grid_opt) -> bool:
        """Whether the block band ``band`` (``n`` coincident members on blocks) maps its next
        member, a reduction loop, to blocks too: a block reduction (:meth:`map_reduction`) of a
        sum whose type CUDA adds atomically, with fewer than :data:`REDUCTION_BLOCKS` blocks over
        its outputs (too few to fill the device; TC's 'reductions too large for one block')."""
        if not self.reduce or n >= min(len(grid_opt), 3) or n >= band.band_n_member():
            return False
        red = self._reduction_update(band)
        if red is None or leading_coincident(band) > n:
            return False
        tensor = self.scop.statement(red.statement).source.tensor
        if red.op != "+=" or self.scop.cdef.tensor(tensor).dtype.name not in ATOMIC_SUMS:
            return False
        blocks = 1
        for i in range(n):
            blocks *= min(grid_opt[i], member_spread(band, i) or grid_opt[i])
        return blocks < REDUCTION_BLOCKS

    def map_reduction(self, node: isl.ScheduleNode, block_opt) -> tuple[isl.Schedule, int] | None:
        """Map band ``node`` as a block reduction (module :mod:`.reduction`): its innermost
        member to x, the innermost coincident ones to y and z, a band of the coincident members
        above it (those on y and z divided by the block size). None (nothing changed) where the
        band is no such reduction or a thread row would own two elements."""
        if not self.reduce or block_opt[0] <= 1:
            return None
        red = self._reduction_update(node)
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
            part_j = _id_function(node, first - j, block_opt[j]) if j <= n_c else _constant_ids(domain, 1)
            rows = part_j if rows is None else rows.flat_range_product(part_j)
        out = self.scop.untagged_writes.intersect_params(self.fixed).intersect_domain(domain)
        if not single_owner(node.get_prefix_schedule_union_map(), rows, out):
            self.decisions.append(
                f"reduction: not mapped for {_names(node)} (a thread row would own two elements)"
            )
            return None
        filt = domain.intersect(_id_filter(node, x, block_opt[0], THREAD_IDS[0]))
        for j in range(1, n_c + 1):
            filt = filt.intersect(_id_filter(node, first - j, block_opt[j], THREAD_IDS[j]))
        filt = _unused_threads_zero(filt, 1 + n_c)
        anywhere = isl.UnionSet.from_set(isl.Set.read_from_str(ctx, f"{{ [v] : 0 <= v < {block_opt[0]} }}"))
        # the update's element is written by thread x 0 of its row: barriers must treat the
        # instance as any thread of the row
        self.threads.append(isl.UnionMap.from_domain_and_range(domain, anywhere).flat_range_product(rows))
        self.mapped.append(domain)
        number = self.n_reductions
        self.n_reductions += 1
        mark = f"{REDUCE_MARK}{number}"
        tensor = self.scop.statement(red.statement).source.tensor
        self.pending.append(_Reduction(mark, number, red.statement, tensor, red.op, rows, self.spread))
        node = node.insert_filter(filt).insert_mark(isl.Id(mark, context=ctx))
        self.decisions.append(
            f"reduction: member {x} of the band over {_names(node)} -> x ({block_opt[0]}), "
            + "".join(f"member {first - j} -> {'xyz'[j]} ({block_opt[j]}), " for j in range(1, n_c + 1))
            + f"combined by a block tree reduction into {tensor} ({red.op}){above}"
        )
        return node.get_schedule(), 1 + n_c

    def reduction_grafts(
        self, sched: isl.Schedule, reductions: Sequence[tuple[_Reduction, BlockReduction]]
    ) -> list[Graft]:
        """The statements of the block ``reductions`` around their marks in ``sched`` (before any
        graft: isl gives no node's domain below an extension node)."""
        marks = {}

        def visit(n: isl.ScheduleNode) -> None:
            if _is(n, isl.schedule_node_type.mark) and n.mark_get_id().get_name().startswith(REDUCE_MARK):
                marks[n.mark_get_id().get_name()] = n
            for i in range(n.n_children()):
                visit(n.child(i))

        visit(sched.get_root())
        grafts = []
        for r, red in reductions:
            node = marks[r.mark]
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
            grafts.append(Graft(tuple(node_path(node)), before, after))
        return grafts

    # --------------------------------------------------------------------------------- unroll
    def unroll(self, sched: isl.Schedule, factor: int) -> isl.Schedule:
        """TC's ``unroll``: the innermost members of every innermost band whose iterations
        together (per thread, for fixed outer loops) are at most ``factor`` are unrolled by isl's
        AST generator. Loop types change no position in the tree."""
        for band in bands(sched):
            if has_band_below(band):
                continue
            node = node_at(sched, node_path(band))
            total, done = 1, []
            for j in reversed(range(node.band_n_member())):
                spread = member_spread(node, j)
                if spread is None or total * spread > factor:
                    break
                total *= spread
                node = node.band_member_set_ast_loop_type(j, isl.ast_loop_type.unroll)
                done.append(j)
            if done:
                sched = node.get_schedule()
                self.decisions.append(
                    f"unroll: members {sorted(done)} of the band over {_names(node)} ({total})"
                )
        return sched

    # ---------------------------------------------------------------------------------- syncs
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
            if _is(node, isl.schedule_node_type.filter) and _mentions_threads(node.filter_get_filter()):
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
            elif _is(node, isl.schedule_node_type.band) and node.n_children() == 1:
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


def launch_bodies(plan: GpuPlan, params: Mapping[str, int]) -> list:
    """The kernel IR of each launch of ``plan`` (isl's AST over the launch's instances, in its
    context; barriers as ``sync`` marks, block reductions' trees as their steps:
    :func:`~tcjit.mapping.reduction.expand_trees`), with the size ``params`` as numbers:
    ``[(launch, body)]``."""
    out = []
    for k in plan.kernels:
        ast = isl.AstBuild.from_context(k.context).node_from_schedule(
            plan.schedule.intersect_domain(k.domain)
        )
        body = barriers(ir.from_isl_ast(ast, params=dict(params)))
        out.append((k, expand_trees(body, plan.reductions) if plan.reductions else body))
    return out


def barriers(node):
    """Kernel IR ``node`` with the mapper's barrier statements as ``sync`` marks around nothing."""
    return ir.map_runs(
        node, lambda r: ir.Mark(ir.SYNC_MARK, ir.Block(())) if r.statement.startswith(SYNC_PREFIX) else r
    )


def _mentions_threads(s: isl.UnionSet) -> bool:
    space = s.get_space()
    return any(space.find_dim_by_name(isl.dim_type.param, t) >= 0 for t in THREAD_IDS)


def _set_names(domain: isl.UnionSet) -> list[str]:
    lst = domain.get_set_list()
    return sorted({lst.get_at(i).get_tuple_name() for i in range(lst.n_set())})


def map_gpu(
    deps: Dependences,
    sched: isl.Schedule,
    options,
    fixed: isl.Set,
    *,
    scop: Scop | None = None,
    tensors: Mapping[str, TensorInfo] | None = None,
) -> GpuPlan:
    """Map ``sched`` (specialised and tiled) onto CUDA kernels, blocks and threads, and promote
    to shared memory where the options ask (:func:`~tcjit.mapping.promotion.promote_shared`).

    :arg options: the :class:`~tcjit.mapping.option_values.OptionValues` of the call
        (``map_to_blocks``, ``map_to_threads``, ``unroll``, ``use_shared_memory``, ...).
    :arg fixed: the parameters' values (a params set).
    :arg scop: the Scop (its tagged accesses), and ``tensors``, each tensor's shape and element
        size: needed by promotion.
    """
    m = _Mapper(deps, fixed, scop, reduce=options.match_library_calls)
    grid_opt = list(options.map_to_blocks)
    block_opt = list(options.map_to_threads)
    roots = [node_path(r) for r in _kernel_roots(sched)]
    per_kernel = []
    # later kernels first: editing one kernel's subtree leaves the earlier ones' paths intact
    for path in reversed(roots):
        sched, grid_used, band_path = m.map_blocks(sched, path, grid_opt)
        sched, threads_used = m.map_threads(sched, band_path, path, block_opt, bool(grid_used))
        mapped = m.mapped[0] if m.mapped else None
        for d in m.mapped[1:]:
            mapped = mapped.union(d)
        start = band_path if band_path is not None else path
        per_kernel.append((path, start, grid_used, threads_used, mapped, list(m.threads), list(m.pending)))
        m.threads.clear()
        m.mapped.clear()
        m.pending.clear()
    per_kernel.reverse()
    if options.unroll > 1:
        sched = m.unroll(sched, options.unroll)
    kernels = []
    for path, _, grid_used, threads_used, mapped, _, _ in per_kernel:
        node = node_at(sched, path)
        domain = node.child(0).get_domain() if _is(node, isl.schedule_node_type.filter) else node.get_domain()
        # thread ids free within the block: a block whose instances all have thread ids above 0
        # (O(i, j) where i <= j: block i = 1 runs only j = 1) still counts
        grid, _ = _tighten(sched, domain, fixed, grid_used, block_opt[:threads_used])
        block = (1, 1, 1)
        if mapped is not None:  # threads as far as the thread-mapped instances reach
            _, block = _tighten(sched, mapped, fixed, grid_used, block_opt[:threads_used])
        kernels.append(GpuKernelPlan(domain, grid, block, _context(fixed, grid, block)))
        m.decisions.append(f"kernel over {_set_names(domain)}: grid {grid}, block {block}")
    # the block reductions' buffers, now that the blocks are known: a register per thread and
    # the tree's shared array (its bytes are not promotion's to spend; its tensor is not promoted)
    reductions: list[tuple[_Reduction, BlockReduction]] = []
    kept: list[tuple[ir.Buffer, ...]] = [() for _ in kernels]
    reserved = [0 for _ in kernels]
    for i, (*_, pending) in enumerate(per_kernel):
        for r in pending:
            bx, by, bz = kernels[i].block
            acc = ir.Buffer(f"tc_private_red{r.number}", r.tensor, "private", (1,))
            part = ir.Buffer(f"tc_shared_red{r.number}", r.tensor, "shared", (bz, by, bx))
            reductions.append((r, BlockReduction(r.number, r.update, r.tensor, r.op, acc, part, r.atomic)))
            kept[i] += (acc, part)
            if tensors is not None:
                reserved[i] += bx * by * bz * tensors[r.tensor].bytes
    accesses: Mapping[tuple[str, str], Promoted] = {}
    copies: Mapping[str, Copy] = {}
    grafts: list[Graft] = []
    if options.use_shared_memory or options.use_private_memory:
        if scop is None or tensors is None:
            raise TCInternalError("memory promotion needs the Scop and the tensors' shapes")
        ids = (BLOCK_IDS, THREAD_IDS, THREAD0_MARK)
        # per kernel: where it starts, its block-mapped members and its (tightened) block
        where = [(start, len(used), k.block) for (_, start, used, *_), k in zip(per_kernel, kernels)]
    if options.use_shared_memory:
        # after the launch bounds: copies are spread over the threads the kernel really has
        keep = [frozenset(b.tensor for b in bs) for bs in kept]
        sched, promo = promote_shared(
            sched, where, scop, fixed, options, tensors, ids, keep=keep, reserved=reserved
        )
        kernels = [replace(k, buffers=b) for k, b in zip(kernels, promo.buffers)]
        accesses, copies, grafts = promo.accesses, promo.copies, list(promo.grafts)
        m.decisions += promo.decisions
    if options.use_private_memory:
        # after shared promotion (whose tensors it leaves alone); below the thread mapping only
        shared = [k.buffers + extra for k, extra in zip(kernels, kept)]
        sched, priv = promote_private(sched, where, scop, fixed, options, tensors, ids, shared)
        kernels = [replace(k, buffers=k.buffers + b) for k, b in zip(kernels, priv.buffers)]
        accesses = {**accesses, **priv.accesses}
        copies = {**copies, **priv.copies}
        grafts += list(priv.grafts)
        m.decisions += priv.decisions
    kernels = [replace(k, buffers=k.buffers + extra) for k, extra in zip(kernels, kept)]
    grafts += m.reduction_grafts(sched, reductions)
    # barriers last: isl cannot give the schedule's map (above), nor a node's domain below a
    # graft, once the tree has extension nodes; so every graft is decided first, then applied
    for _, start, _, _, _, threads, _ in reversed(per_kernel):
        m.threads = threads
        grafts += m.place_syncs(sched, start)
    sched = apply_grafts(sched, grafts)
    by_name = {}
    for _, red in reductions:
        for name in (red.update, red.warp, *red.statements()):
            by_name[name] = red
    return GpuPlan(sched, tuple(kernels), tuple(m.decisions), accesses, copies, by_name)


def _context(fixed: isl.Set, grid: Sequence[int], block: Sequence[int]) -> isl.Set:
    names = [*BLOCK_IDS, *THREAD_IDS]
    bounds = [*grid, *block]
    cons = " and ".join(f"0 <= {n} < {b}" for n, b in zip(names, bounds))
    ids = isl.Set.read_from_str(fixed.get_ctx(), f"[{', '.join(names)}] -> {{ : {cons} }}")
    return fixed.align_params(ids.get_space()).intersect(ids.align_params(fixed.get_space()))


def _padded(sizes: Sequence[int]) -> list[int]:
    return [*sizes, *[1] * (3 - len(sizes))]


def _tighten(sched, domain, fixed, grid_used, block_used) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The largest block and thread ids that run an instance of ``domain``, plus one, per dim."""
    ids = _context(fixed, _padded(grid_used), _padded(block_used))
    smap = sched.get_map().intersect_domain(domain).intersect_params(ids)
    params = smap.domain().params()
    if params.is_empty():
        return (1, 1, 1), (1, 1, 1)
    out = []
    for names, used in ((BLOCK_IDS, grid_used), (THREAD_IDS, block_used)):
        dims = []
        for i, name in enumerate(names):
            if i >= len(used):
                dims.append(1)
                continue
            pos = params.find_dim_by_name(isl.dim_type.param, name)
            if pos < 0:
                dims.append(1)
                continue
            s = params.move_dims(isl.dim_type.set, 0, isl.dim_type.param, pos, 1)
            top = s.dim_max_val(0)
            if not top.is_int():
                raise TCInternalError(f"unbounded {name} in a GPU mapping")
            dims.append(int(top.to_python()) + 1)
        out.append(tuple(dims))
    return out[0], out[1]
