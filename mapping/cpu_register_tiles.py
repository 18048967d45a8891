"""Register tiles on the CPU's schedule tree: the innermost band tiled once more so that the
kernel keeps a tile's outputs in registers across the reduction loops (unroll-and-jam with scalar
replacement).

Three forms, each a method of :class:`RegisterTiles` that the CPU mapper (:mod:`.cpu`) tries on the
innermost band of a branch and that returns the edited schedule, or None where it does not apply:
:meth:`RegisterTiles.register_tile` (a band carrying a reduction: the outer-product or the
dot-product form), :meth:`RegisterTiles.register_tile_over_window` (a parallel band above a sunk
reduction window) and :meth:`RegisterTiles.register_tile_chain` (the dot-product form over a chain
of reductions in bands of their own). The sizes come from :func:`_fit_tile` and
:meth:`RegisterTiles._fit_chain_tile`, which prefer tiles that divide every loop evenly. The
form each marked nest then takes in the kernel IR is :mod:`.tile_forms`' decision.

Every form keeps the band's statement instances and reorders them only as the dependences allow:
the members moved inside the reduction loops carry no dependence (proved with isl on the concrete
sizes), and the window and chain forms are kept only where the legality check agrees.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import islpy as isl

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang import ast as A
from ..polyhedral.schedule import PROOF_OPERATIONS, ProofTooCostly, check_legality
from .cpu_analysis import CpuAnalysis, loop_mark
from .tree_queries import (
    carries_dependence,
    has_band_below,
    member_dim,
    member_map,
    member_spread,
    statements_of,
)

__all__ = ["DOT_TILE", "HOIST_CHAIN_TERMS", "RegisterTiles"]

#: The dot-product form's register tile holds at most ``DOT_TILE ** 2`` outputs, at most
#: ``DOT_TILE + 1`` along a member (each output there holds a whole vector of partial sums: 3 x 3
#: of them leave room for the operands in 16 vector registers, and were the fastest of the shapes
#: timed on tmm: bench/results/HISTORY.md). :func:`_fit_tile` picks the sizes.
DOT_TILE = 3

#: The chain form (:meth:`RegisterTiles.register_tile_chain`) moves the reductions of the free
#: members' band above the tile loops when the chain below them sums at least this many terms per
#: output (a weight gradient's h x w plane): measured on gconv's d_W1 at the suite size, the batch
#: loop n inside the tile streamed 2.5 MB per tile (more than L2); outside, one image's 0.4 MB.
HOIST_CHAIN_TERMS = 1024


class RegisterTiles(CpuAnalysis):
    """The register-tile forms of the CPU mapping (see the module's docstring)."""

    def register_tile(self, node: isl.ScheduleNode, options) -> isl.Schedule | None:
        """Tile innermost band ``node`` for registers, or None where it does not apply.

        The band must carry a reduction, some operand must be shared by the tile's outputs (stay
        put along a tiled member: ``A(m, k)`` along ``n``), and its vector loop (member ``n - 1``,
        placed there by the scoring) must either be parallel (*outer-product form*: a matrix
        product's ``j``) or be the band's only reduction member, walked with unit stride
        (*dot-product form*: ``C(m, n) += A(m, k) * B(n, k)``).

        The free (parallel) members are tiled by ``register_tile`` (innermost ones first; at most
        :data:`DOT_TILE` each in the dot-product form, whose every output already holds a vector
        of partial sums), the reduction members by 1. The tile loops are ordered free ones first;
        a mark ``accumulate`` on the first reduction loop tells the printer to keep the tile's
        outputs in a local array across it; the point loops below get ``unroll`` marks (the vector
        one, in the outer-product form, ``simd``).
        """
        n = node.band_n_member()
        free = [j for j in range(n) if not carries_dependence(node, j, self.deps)]
        if not free or len(free) == n:
            return None
        dot = False
        if n - 1 not in free:
            kind = self.vector_kind(node, n - 1)
            if kind != "simd_reduction" or not options.vectorize or len(free) != n - 1:
                return None
            dot = True
        given = list(options.register_tile)[-len(free) :]
        wanted = dict(zip(free[len(free) - len(given) :], given))
        sizes = _fit_tile(node, wanted, dot=dot, at=self.representative)
        if not any(v > 1 and self._reused_along(node, j) for j, v in enumerate(sizes)):
            return None  # no operand is shared by the tile's outputs (a row sum): nothing to gain
        node = _tile_band(node, sizes)
        order = [j for j in range(n) if j in free] + [j for j in range(n) if j not in free]
        if order != list(range(n)):
            node = self.permute(node, order)
        # tile loops: the free ones | the reduction ones (marked: sums stay in registers across them)
        node = node.band_split(len(free)).child(0)
        node = node.insert_mark(loop_mark("accumulate", node)).child(0)
        if dot:
            node = node.insert_mark(loop_mark("simd_reduction", node)).child(0)
        # point loops, one band each: unrolled, the vector one (outer-product form) a simd loop
        while node.get_type() != isl.schedule_node_type.band:
            node = node.child(0)
        node = node.child(0)
        while node.get_type() != isl.schedule_node_type.band:
            node = node.child(0)
        node = _mark_point_loops(node, vector=not dot and options.vectorize)
        form = "dot-product" if dot else "outer-product"
        self.decisions.append(f"register tile {tuple(sizes)} ({form} form): sums kept in registers")
        return node.get_schedule()

    def register_tile_over_window(self, node: isl.ScheduleNode, options) -> isl.Schedule | None:
        """The outer-product register tile of a parallel band above a sunk reduction window.

        When the scheduler puts a short reduction (a grouped convolution's ``r_c, r_kh, r_kw``) in
        bands of their own below a fully parallel band, the innermost pass (:mod:`.cpu`'s
        ``_sink_short``) unrolls them under the vector loop. Here the parallel band is tiled by
        ``register_tile`` instead; the point loops move below the window's first band, which stays
        a loop (marked ``accumulate``), and above the rest, which stay unrolled. Kept only if the
        legality check agrees.
        """
        n = node.band_n_member()
        if any(carries_dependence(node, j, self.deps) for j in range(n)):
            return None
        window = node.child(0)
        if window.get_type() != isl.schedule_node_type.band or window.n_children() != 1:
            return None
        if not any(carries_dependence(window, j, self.deps) for j in range(window.band_n_member())):
            return None
        given = list(options.register_tile)[-n:]
        wanted = dict(zip(range(n - len(given), n), given))
        sizes = _fit_tile(node, wanted, dot=False, at=self.representative)
        if not any(v > 1 and self._reused_along(node, j) for j, v in enumerate(sizes)):
            return None  # no operand is shared by the tile's outputs (max pooling): nothing to gain
        node = _tile_band(node, sizes).child(0)
        points = node.band_get_partial_schedule()
        node = node.delete()  # now the window's first band
        for j in range(node.band_n_member()):
            node = node.band_member_set_ast_loop_type(j, isl.ast_loop_type.default)
        if node.band_n_member() > 1:
            node = node.band_split(1)
        node = node.insert_mark(loop_mark("accumulate", node)).child(0).child(0)
        node = node.insert_partial_schedule(points).band_set_permutable(1)
        node = _mark_point_loops(node, vector=options.vectorize)
        return self._if_legal(
            node.get_schedule(),
            f"register tile {tuple(sizes)} over the reduction window below (outer-product form)",
        )

    def register_tile_chain(self, node: isl.ScheduleNode, options) -> isl.Schedule | None:
        """The dot-product register tile over a chain of reductions (a weight gradient's sum).

        Applies when innermost band ``node``'s last member is a ``simd_reduction`` loop over which
        every operand moves by one element or not at all, the band holds one ``+=`` update (a
        reassociable sum; no other statement kind), and the members between it and the nearest
        band above with free (parallel) members, in a chain of bands with one child each, are all
        reductions: ``d_W1(g, f, c, kh, kw) += d_O(n, g, f, h, w) * I(n, g, c, h + kh, w + kw)``
        scheduled as a band ``(g, f, c, kh, kw, n)`` above bands ``h`` and ``w``.

        The free members are tiled for reuse (:meth:`_fit_chain_tile`: ``f`` x ``c``, the ``d_O``
        vector shared by the tile's ``c``, the ``I`` vector by its ``f``), their point loops moved
        below the vector loop and unrolled; the first reduction loop with several iterations gets
        the ``accumulate`` mark, the vector loop ``simd_reduction``: the printer keeps one vector
        of partial sums per output of the tile across the whole chain (``n``, ``h`` and the
        strip-mined ``w``) and adds the lanes up once at the end. Kept only if the legality check
        agrees (moving parallel loops inside reductions is legal when nothing else depends on the
        sums' order, which the check proves).
        """
        if not options.vectorize:
            return None
        names = statements_of(node)
        if len(names) != 1:
            return None
        stmt = names[0]
        st = self.scop.statement(stmt)
        src = st.source
        if st.kind != "update" or src.op != "+=" or not src.plain_lhs:
            return None
        if any(isinstance(a, A.Access) and a.tensor == src.tensor for a in A.walk(src.rhs)):
            return None  # the sum reads its own target: its updates must stay in order
        nv = node.band_n_member()
        if self.vector_kind(node, nv - 1) != "simd_reduction":
            return None
        k = member_dim(node, nv - 1, stmt, len(st.dims))
        if k is None:
            return None
        steps = self.access_steps(stmt, st.dims[k])[1:]
        if any(s not in (0, 1) for s in steps) or 1 not in steps:
            return None  # the printer loads operands as whole vectors: unit stride or invariant
        # the chain: bands from ``node`` up to the nearest one with a free member
        path = [node]
        while True:
            free = [
                j for j in range(path[-1].band_n_member()) if not carries_dependence(path[-1], j, self.deps)
            ]
            if free:
                break
            up = path[-1].parent()
            if up.get_type() != isl.schedule_node_type.band:
                return None
            path.append(up)
        top = path[-1]
        n = top.band_n_member()
        if top is node and nv - 1 in free:
            return None  # the vector loop is parallel: the outer-product forms' business
        reductions = [j for j in range(n) if j not in free and not (top is node and j == nv - 1)]
        # Reductions of the free members' band go above the tile loops (below the band's first free
        # member) where the chain below sums enough terms on its own (:data:`HOIST_CHAIN_TERMS`):
        # a weight gradient's batch loop n then walks d_O and I one image at a time, which stays
        # in cache for every tile, and the tiles' sums are added into the outputs once per image.
        # The band's first free member stays outermost (the parallel loop; a group's g).
        below = math.prod(self.spread(b, j) or 2 for b in path[:-1] for j in range(b.band_n_member()))
        hoist = bool(reductions) and top is not node and len(free) > 2 and below >= HOIST_CHAIN_TERMS
        if hoist:
            order = free[:1] + reductions + free[1:]
        else:
            order = free + reductions + ([nv - 1] if top is node else [])
        if order != list(range(n)):
            if not top.band_get_permutable():
                return None
            top = self.permute(top, order)
        if hoist:
            top = top.band_split(1 + len(reductions)).child(0)
            n, free = len(free) - 1, list(range(len(free) - 1))
        sizes = self._fit_chain_tile(top, stmt, len(free))
        if sizes is None:
            return None  # no operand is shared by the tile's outputs (a row sum): nothing to gain
        if len(free) < n:
            top = top.band_split(len(free))
        top = _tile_band(top, sizes[: len(free)]).child(0)
        points = top.band_get_partial_schedule()
        node = top.delete()  # the first reduction band, below the free members' tile loops
        # the accumulate mark goes on the first reduction loop of several iterations
        marked = False
        while True:
            for j in range(node.band_n_member()):
                if (member_spread(node, j) or 2) > 1:
                    if j > 0:
                        node = node.band_split(j).child(0)
                    if node.band_n_member() > 1:
                        node = node.band_split(1)
                    node = node.insert_mark(loop_mark("accumulate", node)).child(0)
                    marked = True
                    break
            if marked or not has_band_below(node):
                break
            node = node.child(0)
        if not marked:
            return None
        while has_band_below(node):
            node = node.child(0)
            while node.get_type() != isl.schedule_node_type.band:
                node = node.child(0)
        if node.band_n_member() > 1:
            node = node.band_split(node.band_n_member() - 1).child(0)
        node = node.insert_mark(loop_mark("simd_reduction", node)).child(0)
        node = node.child(0).insert_partial_schedule(points).band_set_permutable(1)
        node = _mark_point_loops(node, vector=False)
        return self._if_legal(
            node.get_schedule(),
            f"register tile {tuple(sizes[: len(free)])} over a chain of reductions (dot-product form):"
            " sums kept in vector registers across the chain"
            + (f"; {len(reductions)} reduction member(s) above the tile loops" if hoist else ""),
        )

    def _if_legal(self, sched: isl.Schedule, decision: str) -> isl.Schedule | None:
        """``sched`` with ``decision`` recorded if the legality check agrees with it, else None."""
        try:
            check_legality(
                sched, self.legality_deps, sizes=self.legality_sizes, max_operations=PROOF_OPERATIONS
            )
        except ProofTooCostly:
            self.decisions.append(f"not made, its legality proof over budget: {decision}")
            return None
        except TCInternalError:
            return None
        self.decisions.append(decision)
        return sched

    def _fit_chain_tile(self, node: isl.ScheduleNode, stmt: str, nfree: int) -> list[int] | None:
        """Tile sizes for the free members ``0 .. nfree - 1`` of band ``node`` (1 for the others)
        of the chain form (:meth:`register_tile_chain`), or None if no tile shares an operand.

        Every output of the tile holds a vector of partial sums and each step loads, per operand,
        one vector for each tile position it moves along: ``f`` x ``c`` tiles load 4 + 2 vectors
        for 8 outputs. Sizes go up to :data:`DOT_TILE` + 1 with at most ``DOT_TILE ** 2`` outputs,
        as in the dot-product form; among the tiles of at least half the largest size those that
        tile evenly (:func:`_tiles_evenly`) come first, then the fewest loads per output.
        """
        st = self.scop.statement(stmt)
        moves: list[list[bool]] = []  # per free member: does each operand move along it?
        nops = len(self.access_steps(stmt, st.dims[0])) - 1
        extents = []
        for j in range(nfree):
            k = member_dim(node, j, stmt, len(st.dims))
            if k is None:  # not one statement dimension (a member constant at these sizes): untiled
                moves.append([False] * nops)
                extents.append(1)
                continue
            moves.append([s != 0 for s in self.access_steps(stmt, st.dims[k])[1:]])
            extents.append(self.spread(node, j) or 1)
        if not nops:
            return None
        choices = [range(1, min(DOT_TILE + 1, e) + 1) for e in extents]

        def loads(combo: tuple[int, ...]) -> float:
            total = 0
            for op in range(nops):
                total += math.prod(v for j, v in enumerate(combo) if moves[j][op])
            return total / math.prod(combo)

        combos = [c for c in itertools.product(*choices) if math.prod(c) <= DOT_TILE**2]
        combos = [c for c in combos if sum(v > 1 for v in c) <= 2 and loads(c) < nops]
        even: dict[tuple[int, int], bool] = {}

        def key(combo: tuple[int, ...]) -> tuple:
            for j, v in enumerate(combo):
                if (j, v) not in even:
                    even[j, v] = _tiles_evenly(node, j, v, self.representative)
            return (
                all(even[j, v] for j, v in enumerate(combo)),
                -round(loads(combo), 6),
                math.prod(combo),
                -(max(combo) - min(combo)),
                combo,
            )

        most = max((math.prod(c) for c in combos), default=1)
        best = max((c for c in combos if 2 * math.prod(c) >= most), key=key, default=None)
        if best is None:
            return None
        return list(best) + [1] * (node.band_n_member() - nfree)

    def _reused_along(self, node: isl.ScheduleNode, member: int) -> bool:
        """Whether some operand read by the band's statements stays put along ``member``."""
        for stmt in statements_of(node):
            st = self.scop.statement(stmt)
            k = member_dim(node, member, stmt, len(st.dims))
            if k is None or st.kind == "init":
                continue
            if 0 in self.access_steps(stmt, st.dims[k])[1:]:
                return True
        return False


def _fit_tile(
    node: isl.ScheduleNode, wanted: Mapping[int, int], *, dot: bool, at: isl.Set | None = None
) -> list[int]:
    """Register-tile sizes for the members of band ``node``: ``wanted`` gives the largest size of
    each member to tile (others get 1).

    A tile size that does not divide a loop's extent leaves partial tiles, which the printer gives
    a second copy of the tile's code (with variable bounds): on mlp3 those copies cost 0.45 s of
    the C compiler's 1.1 s. So among the tiles of at least half the largest size, those that tile
    every member evenly (:func:`_tiles_evenly`) come first, then the largest. In the
    outer-product form a size may be halved or doubled, the tile holding at most as many outputs
    as ``wanted`` asks (a convolution's 56 columns take 8-wide vector tiles, its rows then 8
    instead of 4); in the dot-product form, where every output holds
    a vector of partial sums, sizes go up to :data:`DOT_TILE` + 1 with at most ``DOT_TILE ** 2``
    outputs (3x3, 4x2, ...).
    """
    members = sorted(wanted)
    if dot:
        choices = [range(1, min(wanted[j], DOT_TILE + 1) + 1) for j in members]
    else:
        choices = [sorted({wanted[j], max(1, wanted[j] // 2), 2 * wanted[j]}) for j in members]
    budget = DOT_TILE**2 if dot else math.prod(wanted.values())
    even: dict[tuple[int, int], bool] = {}

    def key(combo: tuple[int, ...]) -> tuple:
        for j, v in zip(members, combo):
            if (j, v) not in even:
                even[j, v] = _tiles_evenly(node, j, v, at)
        return (
            all(even[j, v] for j, v in zip(members, combo)),
            math.prod(combo),
            -sum(v != wanted[j] for j, v in zip(members, combo)),
            -(max(combo) - min(combo)),
            combo,
        )

    combos = [c for c in itertools.product(*choices) if math.prod(c) <= budget]
    most = max((math.prod(c) for c in combos), default=1)
    best = max((c for c in combos if 2 * math.prod(c) >= most), key=key, default=())
    sizes = [1] * node.band_n_member()
    for j, v in zip(members, best):
        sizes[j] = v
    return sizes


def _tiles_evenly(node: isl.ScheduleNode, member: int, size: int, at: isl.Set | None = None) -> bool:
    """Whether tiling member ``member`` of band ``node`` by ``size`` leaves no partial tile, for
    every value of the loops around it (each value's tile-mates are values too); ``at``: the
    params the sizes are fixed to first (a symbolic kernel's representative sizes, where its
    choices are made: no size tiles every value of a symbolic size evenly)."""
    if size <= 1:
        return True
    outer = member_map(node, range(member))
    mupa = node.band_get_partial_schedule()
    this = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(member)).intersect_domain(node.get_domain())
    values = outer.reverse().apply_range(this)  # outer loop values -> this member's values
    if at is not None:
        values = values.intersect_params(at)
    mates = isl.Map.read_from_str(node.get_ctx(), f"{{ [v] -> [w] : floor(v / {size}) = floor(w / {size}) }}")
    return values.apply_range(isl.UnionMap.from_map(mates)).is_subset(values)


def _tile_band(node: isl.ScheduleNode, sizes: Sequence[int]) -> isl.ScheduleNode:
    """Band ``node`` tiled by ``sizes`` (one per member): the tile band, the point band below."""
    mv = isl.MultiVal.zero(node.band_get_space())
    for j, v in enumerate(sizes):
        mv = mv.set_val(j, isl.Val.int_from_si(node.get_ctx(), v))
    return node.band_tile(mv)


def _mark_point_loops(node: isl.ScheduleNode, *, vector: bool) -> isl.ScheduleNode:
    """Split a register tile's point band ``node`` into one-member bands marked ``unroll`` (the
    last one ``simd`` with ``vector``); returns the last band."""
    n = node.band_n_member()
    for j in range(n):
        if node.band_n_member() > 1:
            node = node.band_split(1)
        kind = "simd" if (vector and j == n - 1) else "unroll"
        node = node.insert_mark(loop_mark(kind, node)).child(0)
        if j < n - 1:
            node = node.child(0)
    return node
