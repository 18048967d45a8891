"""The GPU mapping: a tiled, specialised schedule tree onto CUDA blocks and threads.

TC's ``mapToBlocksAndScaleBand`` and ``mapInnermostBandsToThreads`` (and PPCG's
``set_schedule_modulo``), as filters on the schedule tree (notes/polyhedral.md 1.5 and 2(c)):

* **Kernels.** Each child of the root's sequence (or set) is a kernel of its own, launched after the
  previous one on the same stream: statements the scheduler did not fuse may depend on each other
  across blocks, which only a new launch orders. A root band is one kernel. A ``!``
  initialisation runs in the kernel of its update, in the thread that then updates its element
  (:func:`folds_initialisations`), except where block reductions may be mapped.
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

Where each part lives: the kernels, :func:`map_gpu` and the plans here; the ids and their filters
in :mod:`.gpu_ids`; the block mapping and launch bounds in :mod:`.gpu_blocks`; the thread mapping
in :mod:`.gpu_threads`; block reductions in :mod:`.gpu_reductions` (their statements in
:mod:`.reduction`); barriers in :mod:`.gpu_syncs`; shared and private memory in :mod:`.promotion`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import islpy as isl

from ..polyhedral.errors import TCInternalError
from ..polyhedral.schedule import bands, node_at, node_path
from ..polyhedral.scop import Dependences, Scop
from . import ir
from .gpu_blocks import BlockMapping, launch_context, launch_grid, tighten
from .gpu_ids import set_names
from .gpu_ir import BLOCK_IDS, THREAD0_MARK, THREAD_IDS, BlockReduction, Copy, Promoted, evaluate
from .gpu_reductions import PendingReduction
from .gpu_syncs import SYNC_PREFIX, SyncPlacement, barriers
from .gpu_threads import ThreadMapping
from .grafts import Graft, apply_grafts
from .ir_isl import from_isl_ast
from .layout import size_var
from .promotion import promote_private, promote_shared
from .promotion_types import TensorInfo
from .reduction import expand_trees
from .tree_queries import has_band_below, instances_of, member_spread
from .tree_queries import statements_of as _names

__all__ = [
    "BLOCK_IDS",
    "SYNC_PREFIX",
    "THREAD0_MARK",
    "THREAD_IDS",
    "GpuKernelPlan",
    "GpuPlan",
    "barriers",
    "folds_initialisations",
    "launch_bodies",
    "map_gpu",
]


@dataclass(frozen=True)
class GpuKernelPlan:
    """One launch.

    :ivar domain: the statement instances this kernel runs (a filter of the plan's tree).
    :ivar grid: blocks along x, y, z (tightened; 1 where unmapped).
    :ivar block: threads along x, y, z (tightened; 1 where unmapped).
    :ivar context: parameters' values for AST generation: the sizes and ``0 <= b_i < grid_i``,
        ``0 <= t_i < block_i``.
    :ivar buffers: the promoted buffers the kernel declares (:mod:`.promotion`).
    :ivar grid_exprs: with symbolic sizes, per grid dimension whose block count depends on one,
        that count as an IR expression of the sizes' C names (:func:`~.gpu_blocks.launch_grid`;
        None for the others), evaluated per launch; ``grid`` then holds its value at the
        representative sizes, and ``context`` bounds the block ids by the most blocks any value
        needs (the kernel runs right on any grid up to them). Empty for a concrete kernel.
    """

    domain: isl.UnionSet
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    context: isl.Set
    buffers: tuple[ir.Buffer, ...] = ()
    grid_exprs: tuple[ir.Expr | None, ...] = ()


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


def folds_initialisations(options) -> bool:
    """Whether the GPU's schedule runs the ``!`` initialisations in their update's loop nest
    (:func:`~tcjit.mapping.initialisations.fold_initialisations`, through
    :func:`~tcjit.mapping.prepare.prepare`'s ``fold``) rather than before it, so that each is part
    of its update's kernel, not a launch of its own.

    Folded, an initialisation shares its update's leading coincident members, which alone go to
    blocks and threads: each element is initialised by the thread that updates it, before. Not
    with ``match_library_calls``: a block reduction takes over a band that holds its update alone
    (:meth:`~.gpu_reductions.ReductionMapping.reduction_update`), and may spread the reduction
    over blocks whose atomic additions must all follow the initialisation; there the
    initialisation keeps its launch.

    :arg options: the call's :class:`~tcjit.mapping.option_values.OptionValues`.
    """
    return not options.match_library_calls


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


class _Mapper(BlockMapping, ThreadMapping, SyncPlacement):
    """The GPU mapper: blocks, threads, block reductions and barriers (its bases), unrolling, over
    one state."""

    def __init__(self, deps: Dependences, fixed: isl.Set, scop: Scop | None = None, reduce: bool = False):
        self.deps = deps.all.intersect_params(fixed)
        self.fixed = fixed
        self.scop = scop
        self.reduce = reduce and scop is not None
        self.decisions: list[str] = []
        self.threads: list[isl.UnionMap] = []  # statement instance -> its thread ids (x, y, z)
        self.mapped: list[isl.UnionSet] = []  # instances under thread filters (this kernel)
        self.pending: list[PendingReduction] = []  # block reductions mapped in this kernel
        self.n_reductions = 0
        self.private_loops: set[tuple[int, ...]] = set()
        self.absorbed: dict[int, str] = {}
        self.spread = False  # this kernel's block band holds a reduction member (map_blocks)
        self.blocks: isl.UnionMap | None = None  # this kernel's instance -> its block ids (map_blocks)
        self.syncs = 0

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
        body = barriers(from_isl_ast(ast, params=dict(params)))
        out.append((k, expand_trees(body, plan.reductions) if plan.reductions else body))
    return out


def map_gpu(
    deps: Dependences,
    sched: isl.Schedule,
    options,
    fixed: isl.Set,
    *,
    scop: Scop | None = None,
    tensors: Mapping[str, TensorInfo] | None = None,
    sizes: Mapping[str, int] | None = None,
    symbolic: frozenset[str] = frozenset(),
    unpromoted: frozenset[str] = frozenset(),
) -> GpuPlan:
    """Map ``sched`` (specialised and tiled) onto CUDA kernels, blocks and threads, and promote
    to shared memory where the options ask (:func:`~tcjit.mapping.promotion.promote_shared`).

    :arg options: the :class:`~tcjit.mapping.option_values.OptionValues` of the call
        (``map_to_blocks``, ``map_to_threads``, ``unroll``, ``use_shared_memory``, ...).
    :arg fixed: the parameters' values (a params set).
    :arg scop: the Scop (its tagged accesses), and ``tensors``, each tensor's shape and element
        size: needed by promotion.
    :arg symbolic: sizes left free in ``fixed`` (:mod:`.symbolic`); ``sizes`` holds every size's
        value, the representative one for those. The launches' thread blocks serve every value,
        their grids are computed per launch (:attr:`GpuKernelPlan.grid_exprs`).
    :arg unpromoted: tensors promotion leaves alone (with symbolic sizes: those whose shape
        depends on one).
    """
    m = _Mapper(deps, fixed, scop, reduce=options.match_library_calls)
    params = {p: size_var(p) if p in symbolic else v for p, v in (sizes or {}).items()}
    representative = {size_var(p): (sizes or {})[p] for p in symbolic}
    grid_opt = list(options.map_to_blocks)
    block_opt = list(options.map_to_threads)
    roots = [node_path(r) for r in _kernel_roots(sched)]
    per_kernel = []
    # later kernels first: editing one kernel's subtree leaves the earlier ones' paths intact
    for path in reversed(roots):
        sched, grid_used, band_path = m.map_blocks(sched, path, grid_opt)
        sched, threads_used = m.map_threads(
            sched, band_path, path, block_opt, bool(grid_used), options.vector_width
        )
        mapped = m.mapped[0] if m.mapped else None
        for d in m.mapped[1:]:
            mapped = mapped.union(d)
        start = band_path if band_path is not None else path
        ids = _ids(m.blocks, m.threads)
        per_kernel.append(
            (path, start, grid_used, threads_used, mapped, list(m.threads), list(m.pending), ids)
        )
        m.threads.clear()
        m.mapped.clear()
        m.pending.clear()
    per_kernel.reverse()
    if options.unroll > 1:
        sched = m.unroll(sched, options.unroll)
    kernels = []
    for path, _, grid_used, threads_used, mapped, *_ in per_kernel:
        node = node_at(sched, path)
        domain = node.child(0).get_domain() if _is(node, isl.schedule_node_type.filter) else node.get_domain()
        # thread ids free within the block: a block whose instances all have thread ids above 0
        # (O(i, j) where i <= j: block i = 1 runs only j = 1) still counts
        grid, _ = tighten(sched, domain, fixed, grid_used, block_opt[:threads_used])
        block = (1, 1, 1)
        if mapped is not None:  # threads as far as the thread-mapped instances reach
            _, block = tighten(sched, mapped, fixed, grid_used, block_opt[:threads_used])
        context, bound = launch_context(fixed, grid, block), grid
        exprs: tuple[ir.Expr | None, ...] = ()
        if symbolic:  # (tighten gave the most blocks and threads any value needs)
            exprs = launch_grid(sched, domain, fixed, grid_used, block_opt[:threads_used], params)
            grid = tuple(g if e is None else evaluate(e, representative) for g, e in zip(grid, exprs))
            exprs = exprs if any(e is not None for e in exprs) else ()
        kernels.append(GpuKernelPlan(domain, grid, block, context, grid_exprs=exprs))
        per_call = f" (computed per call: at most {bound})" if exprs else ""
        m.decisions.append(f"kernel over {set_names(domain)}: grid {grid}{per_call}, block {block}")
    # the block reductions' buffers, now that the blocks are known: a register per thread and
    # the tree's shared array (its bytes are not promotion's to spend; its tensor is not promoted)
    reductions: list[tuple[PendingReduction, BlockReduction]] = []
    kept: list[tuple[ir.Buffer, ...]] = [() for _ in kernels]
    reserved = [0 for _ in kernels]
    for i, (*_, pending, _) in enumerate(per_kernel):
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
            sched,
            where,
            scop,
            fixed,
            options,
            tensors,
            ids,
            keep=keep,
            reserved=reserved,
            unpromoted=unpromoted,
        )
        kernels = [replace(k, buffers=b) for k, b in zip(kernels, promo.buffers)]
        accesses, copies, grafts = promo.accesses, promo.copies, list(promo.grafts)
        m.decisions += promo.decisions
    if options.use_private_memory:
        # after shared promotion (whose tensors it leaves alone); below the thread mapping only
        shared = [k.buffers + extra for k, extra in zip(kernels, kept)]
        sched, priv = promote_private(sched, where, scop, fixed, options, tensors, ids, shared, unpromoted)
        kernels = [replace(k, buffers=k.buffers + b) for k, b in zip(kernels, priv.buffers)]
        accesses = {**accesses, **priv.accesses}
        copies = {**copies, **priv.copies}
        grafts += list(priv.grafts)
        m.decisions += priv.decisions
    kernels = [replace(k, buffers=k.buffers + extra) for k, extra in zip(kernels, kept)]
    grafts += m.reduction_grafts(sched, reductions, [g.path for g in grafts])
    if m.absorbed:
        # the initialisations the combines take over no longer run; a kernel of them alone goes
        reductions = [(r, replace(red, initialises=red.number in m.absorbed)) for r, red in reductions]
        gone = isl.UnionSet.empty(sched.get_domain().get_space())
        for name in m.absorbed.values():
            gone = gone.union(instances_of(sched.get_domain(), name))
        # (the tree keeps them: each launch's code is built from its kernel's domain alone)
        keep = [i for i, k in enumerate(kernels) if not k.domain.is_subset(gone)]
        for k in kernels:
            if k.domain.is_subset(gone):
                m.decisions.append(
                    f"kernel over {set_names(k.domain)}: not launched (its combines initialise)"
                )
        kernels = [replace(kernels[i], domain=kernels[i].domain.subtract(gone)) for i in keep]
        per_kernel = [per_kernel[i] for i in keep]
    kernels = _join_launches(kernels, [pk[7] for pk in per_kernel], m.deps, m.decisions)
    # barriers last: isl cannot give the schedule's map (above), nor a node's domain below a
    # graft, once the tree has extension nodes; so every graft is decided first, then applied
    for _, start, _, _, _, threads, *_ in reversed(per_kernel):
        m.threads = threads
        grafts += m.place_syncs(sched, start)
    sched = apply_grafts(sched, grafts)
    by_name = {}
    for _, red in reductions:
        for name in (red.update, red.warp, *red.statements()):
            by_name[name] = red
    return GpuPlan(sched, tuple(kernels), tuple(m.decisions), accesses, copies, by_name)


def _ids(blocks: isl.UnionMap, threads: list[isl.UnionMap]) -> isl.UnionMap | None:
    """Each instance of a kernel to ``[b0, b1, b2, t0, t1, t2]``, from its block map and its
    thread maps (None without thread maps)."""
    if not threads:
        return None
    thread = threads[0]
    for t in threads[1:]:
        thread = thread.union(t)
    ids = blocks.intersect_domain(thread.domain()).flat_range_product(
        thread.intersect_domain(blocks.domain())
    )
    # the filters above the thread bands bound instances by the block (and thread) ids as
    # parameters: as outputs they are the ids, as parameters they would pair only instances
    # of equal ids, whatever the outputs say
    for name in (*BLOCK_IDS, *THREAD_IDS):
        space = ids.get_space()
        pos = space.find_dim_by_name(isl.dim_type.param, name)
        if pos >= 0:  # (by the space's own id: islpy's ids of the same name are not isl's same id)
            ids = ids.project_out_param_id(space.get_dim_id(isl.dim_type.param, pos))
    return ids


def _join_launches(
    kernels: list[GpuKernelPlan], ids: list[isl.UnionMap | None], deps: isl.UnionMap, decisions: list[str]
) -> list[GpuKernelPlan]:
    """Each launch joined to the next where both have the same grid and block, at most one of
    them has shared buffers, and every dependence from the first to the second stays in one
    thread of one block: mlp3's ``O1(b, n)`` set to 0 by the thread that then sums into it, and
    its ``fmax(O2(b, p) + B2(p), 0)`` computed by the thread that summed ``O2(b, p)``. The joined
    launch runs the first's loop nest, then the second's: the thread that writes an element is
    the one that reads it next, so no barrier is needed between. Launches join in a chain.
    ``ids``: each launch's instances to their block and thread ids (:func:`_ids`)."""
    out: list[tuple[GpuKernelPlan, isl.UnionMap | None]] = []
    same = isl.UnionSet.from_set(isl.Set.read_from_str(deps.get_ctx(), "{ [0, 0, 0, 0, 0, 0] }"))
    for k, second in zip(kernels, ids):
        if out:
            prev, first = out[-1]
            shared = [any(b.space == "shared" for b in x.buffers) for x in (prev, k)]
            if (
                first is not None
                and second is not None
                and (prev.grid, prev.block, prev.grid_exprs) == (k.grid, k.block, k.grid_exprs)
                and not all(shared)
            ):
                live = deps.intersect_domain(first.domain()).intersect_range(second.domain())
                if (
                    first.is_single_valued()
                    and second.intersect_domain(live.range()).is_single_valued()
                    and live.apply_domain(first).apply_range(second).deltas().is_subset(same)
                ):
                    decisions.append(
                        f"kernel over {set_names(k.domain)}: in the launch of {set_names(prev.domain)}"
                        " (every element it reads from there written by the same thread)"
                    )
                    joined = replace(
                        prev, domain=prev.domain.union(k.domain), buffers=prev.buffers + k.buffers
                    )
                    out[-1] = (joined, first.union(second))
                    continue
        out.append((k, second))
    return [k for k, _ in out]
