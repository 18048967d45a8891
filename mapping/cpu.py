"""CPU mapping: which loops of a tiled schedule run on OpenMP threads, which on SIMD lanes, which unroll.

:func:`map_cpu` is a pure function from a specialised, tiled schedule tree to a new tree carrying
marks the C printer turns into pragmas:

* **Vector loop.** In the innermost band of every branch the member whose accesses walk memory
  best (unit-stride steps score 2, invariant accesses 1, anything else 0, over every access of every
  statement in the band, with the actual tensor strides) is moved innermost; permuting the members
  of a permutable band is always legal. If that loop carries no dependence it is marked ``simd``
  (``#pragma omp simd``). If it is the reduction loop of the band's only statement, an update whose
  element does not move along it, it is marked ``simd_reduction``: the printer accumulates in a
  register and lets OpenMP reassociate the sum (TC's reductions are unordered).
  With ``vectorize`` off there is no ``simd`` mark, and a reduction loop is marked ``reduction``
  (accumulated in a register, in order).
* **Short reductions.** Reduction members with few iterations (a 2x2 pooling window, a 3x3
  filter: :data:`SHORT_REDUCTION` together) go inside the vector loop and are fully unrolled, so
  that the vector loop runs over the outputs.
* **Parallel loop.** In the outermost band of every branch, the outermost member that carries no
  dependence becomes an ``omp parallel for`` loop (``parallel``). Kernels with fewer than
  :data:`MIN_PARALLEL_WORK` statement instances stay on one thread: starting a parallel region costs
  more than they do.
* **Unrolling.** TC's rule: innermost members whose total number of instances (that member times
  everything inside it) is at most ``unroll`` are fully unrolled by isl.
* **Register tiles.** ``register_tile`` tiles the innermost band once more when it carries a
  reduction: the reduction loops go inside the tile loops and outside the point loops, and the
  printer keeps the tile's outputs in a local array across them (unroll-and-jam with scalar
  replacement). In the *outer-product form* (the vector loop is parallel: a matrix product's ``j``)
  the innermost point loop is the vector loop; in the *dot-product form* (the vector loop is the
  reduction: ``A(m, k) * B(n, k)``) every output of the tile holds a vector of partial sums, added
  up after the loop. See :mod:`.cpu_register_tiles`. The dot-product form also applies over
  a *chain of reductions* in bands of their own (a weight gradient's ``n``, ``h``, ``w``): see
  :meth:`~.cpu_register_tiles.RegisterTiles.register_tile_chain`.

Every "carries no dependence" is proved with isl on the concrete sizes (:func:`carries_dependence`),
not read off the scheduler's coincidence flags, so a mark can never introduce a race.

Where each part lives: the innermost band's pass (vector loop, short reductions, unrolling) and
:func:`map_cpu` here; the scores and vector kinds in :mod:`.cpu_analysis`; the register tiles in
:mod:`.cpu_register_tiles`; the parallel loop in :mod:`.cpu_parallel`; the queries shared with the
GPU mapper in :mod:`.tree_queries`; the placement of initialisations (before tiling, every target)
in :mod:`.initialisations`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import islpy as isl

from ..polyhedral.schedule import bands
from ..polyhedral.scop import Dependences, Scop
from .cpu_analysis import loop_mark
from .cpu_parallel import MIN_PARALLEL_WORK, ParallelLoops
from .cpu_register_tiles import RegisterTiles
from .initialisations import beside_leaves, hoist_initialisations, initialised_in_place
from .tree_queries import carries_dependence, forget_member_maps, has_band_below, member_spread, statements_of

__all__ = [
    "MIN_PARALLEL_WORK",
    "CpuPlan",
    "carries_dependence",
    "hoist_initialisations",
    "initialised_in_place",
    "loop_mark",
    "map_cpu",
]

#: Reduction loops of at most this many iterations (together) are unrolled inside the vector loop.
SHORT_REDUCTION = 16


@dataclass(frozen=True)
class CpuPlan:
    """The mapped schedule and what was decided, for ``tcjit show`` and tests."""

    schedule: isl.Schedule
    decisions: tuple[str, ...]


class _Mapper(RegisterTiles, ParallelLoops):
    """The CPU mapper: the innermost band's pass (below), the register tiles and the parallel loop
    (its bases), over one shared state (:class:`~.cpu_analysis.CpuAnalysis`)."""

    def _innermost(self, sched: isl.Schedule, options) -> isl.Schedule:
        """Permute, register-tile, unroll and mark the innermost band of every branch."""
        done = 0
        while True:
            todo = [b for b in bands(sched) if not has_band_below(b)]
            if done >= len(todo):
                return sched
            node = self._sink_short(todo[done])
            done += 1
            n = node.band_n_member()
            small: list[int] = []
            if n > 1 and node.band_get_permutable():
                scores = [self.vector_score(node, j) for j in range(n)]
                if options.register_tile:  # a register tile keeps short reductions as loops
                    best = max(range(n), key=lambda j: (scores[j], j == n - 1, j))
                    order = [j for j in range(n) if j != best] + [best]
                    permuted = self.permute(node, order) if order != list(range(n)) else node
                    tiled = self.register_tile(permuted, options)
                    if tiled is not None:
                        if order != list(range(n)):
                            self.decisions.insert(
                                -1, f"innermost band: order {order} (vector loop {best}, scores {scores})"
                            )
                        sched = tiled
                        continue
                small = self._small_reductions(node)
                rest = [j for j in range(n) if j not in small]
                best = max(rest, key=lambda j: (scores[j], j == n - 1, j))
                order = [j for j in rest if j != best] + [best] + small
                if order != list(range(n)):
                    node = self.permute(node, order)
                    self.decisions.append(
                        f"innermost band: order {order} (vector loop {best}, scores {scores}"
                        + (f"; short reductions {small} unrolled inside it)" if small else ")")
                    )
                if small:
                    node = node.band_split(n - len(small)).child(0)
                    for j in range(len(small)):
                        node = node.band_member_set_ast_loop_type(j, isl.ast_loop_type.unroll)
                    node = node.parent()
                    n -= len(small)
            if options.register_tile and node.band_get_permutable() and not small:
                tiled = self.register_tile_over_window(node, options)
                if tiled is None:
                    tiled = self.register_tile_chain(node, options)
                if tiled is not None:
                    sched = tiled
                    continue
            node = self._unroll(node, options.unroll)
            last = n - 1
            if n > 1:
                node = node.band_split(n - 1).child(0)
            kind = self.vector_kind(node, 0)
            if kind and not options.vectorize:
                kind = "reduction" if kind == "simd_reduction" else None
            if kind:
                node = node.insert_mark(loop_mark(kind, node))
                self.decisions.append(f"{kind}: innermost member {last} of a band over {statements_of(node)}")
            sched = node.get_schedule()

    def _sink_short(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        """Unroll innermost bands of few iterations (a window the scheduler put in bands of its
        own, perhaps after its initialisations in a sequence) and return the band above them,
        which then holds the vector loop."""
        unrolled = 1  # iterations already unrolled below: the unrolled code grows with the product
        while True:
            total = 1
            for j in range(node.band_n_member()):
                spread = member_spread(node, j)
                if spread is None:
                    return node
                total *= spread
            if total * unrolled > SHORT_REDUCTION:
                return node
            unrolled *= total
            up = node.parent()
            while up.get_type() != isl.schedule_node_type.band:
                if up.get_type() == isl.schedule_node_type.sequence and beside_leaves(up):
                    up = up.parent()  # initialisations before the window: unrolled with it
                    continue
                if up.n_children() != 1 or up.get_type() in (
                    isl.schedule_node_type.domain,
                    isl.schedule_node_type.sequence,
                    isl.schedule_node_type.set,
                ):
                    return node
                up = up.parent()
            for j in range(node.band_n_member()):
                node = node.band_member_set_ast_loop_type(j, isl.ast_loop_type.unroll)
            self.decisions.append(f"unroll: a band of {total} iterations under the vector loop")
            # back up to the band above, in the edited tree
            depth = up.get_tree_depth()
            while node.get_tree_depth() > depth:
                node = node.parent()

    def _small_reductions(self, node: isl.ScheduleNode) -> list[int]:
        """Non-parallel members of few iterations (a pooling window, a 3x3 filter), to be unrolled
        inside the vector loop: at most :data:`SHORT_REDUCTION` iterations together."""
        n = node.band_n_member()
        found, total = [], 1
        for j in reversed(range(n)):
            if node.band_member_get_coincident(j):
                continue
            spread = member_spread(node, j)
            if spread is None or spread > SHORT_REDUCTION or total * spread > SHORT_REDUCTION:
                continue
            found.append(j)
            total *= spread
        if len(found) == n:
            return []
        return sorted(found)

    def _unroll(self, node: isl.ScheduleNode, factor: int) -> isl.ScheduleNode:
        if factor <= 1:
            return node
        total = 1
        for j in reversed(range(node.band_n_member())):
            spread = member_spread(node, j)
            if spread is None:
                break
            total *= spread
            if total > factor:
                break
            node = node.band_member_set_ast_loop_type(j, isl.ast_loop_type.unroll)
            self.decisions.append(f"unroll: member {j} ({spread} values)")
        return node


def map_cpu(
    scop: Scop,
    deps: Dependences,
    sched: isl.Schedule,
    options,
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    work: int,
    symbolic: frozenset[str] = frozenset(),
) -> CpuPlan:
    """Mark the loops of ``sched`` (specialised and tiled) for the CPU.

    :arg options: the :class:`~tcjit.mapping.options.OptionValues` of the call.
    :arg strides: element strides of every tensor (inputs as passed, outputs as allocated).
    :arg work: the number of statement instances (decides whether threads pay off).
    :arg symbolic: sizes the kernel serves at every value (:mod:`.symbolic`): choices are made at
        ``sizes``, proofs for every value.
    """
    m = _Mapper(scop, deps, sizes, strides, symbolic)
    try:
        sched = m._innermost(sched, options)
        if options.parallelize:
            sched = m.parallel(sched, work)
    finally:
        forget_member_maps()  # let this kernel's schedule trees go
    return CpuPlan(sched, tuple(m.decisions))
