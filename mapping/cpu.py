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
  up after the loop. See :meth:`_Mapper._register_tile`. The dot-product form also applies over
  a *chain of reductions* in bands of their own (a weight gradient's ``n``, ``h``, ``w``): see
  :meth:`_Mapper._register_tile_chain`.

Every "carries no dependence" is proved with isl on the concrete sizes (:func:`carries_dependence`),
not read off the scheduler's coincidence flags, so a mark can never introduce a race.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import islpy as isl

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang import ast as A
from ..polyhedral.lang.ranges import affine_form
from ..polyhedral.names import isl_name
from ..polyhedral.schedule import bands, check_legality
from ..polyhedral.scop import Dependences, Scop
from .defaults import outer_product_shaped

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

#: The dot-product form's register tile holds at most ``DOT_TILE ** 2`` outputs, at most
#: ``DOT_TILE + 1`` along a member (each output there holds a whole vector of partial sums: 3 x 3
#: of them leave room for the operands in 16 vector registers, and were the fastest of the shapes
#: timed on tmm: bench/results/HISTORY.md). :func:`_fit_tile` picks the sizes.
DOT_TILE = 3

#: The chain form (:meth:`_Mapper._register_tile_chain`) moves the reductions of the free
#: members' band above the tile loops when the chain below them sums at least this many terms per
#: output (a weight gradient's h x w plane): measured on gconv's d_W1 at the suite size, the batch
#: loop n inside the tile streamed 2.5 MB per tile (more than L2); outside, one image's 0.4 MB.
HOIST_CHAIN_TERMS = 1024

#: Below this many statement instances a kernel runs on one thread.
MIN_PARALLEL_WORK = 1 << 15


@dataclass(frozen=True)
class CpuPlan:
    """The mapped schedule and what was decided, for ``tcjit show`` and tests."""

    schedule: isl.Schedule
    decisions: tuple[str, ...]


# ------------------------------------------------------------------------------------------ queries
def _member_map(node: isl.ScheduleNode, members: Sequence[int]) -> isl.UnionMap:
    """Statement instances -> (prefix schedule, the given members of band ``node``)."""
    return _member_map_of(node, tuple(members))


@functools.lru_cache(maxsize=128)
def _member_map_of(node: isl.ScheduleNode, members: tuple[int, ...]) -> isl.UnionMap:
    # Memoised: the mapper asks for the same node's maps many times (kronecker3: 72 calls, 50
    # distinct, 0.15 s). Nodes hash by identity, so only the same node object hits, and the cache
    # holds it: its id cannot be reused. map_cpu empties the cache when it returns.
    if not members:
        return node.get_prefix_schedule_union_map()
    upa = node.band_get_partial_schedule().get_union_pw_aff(members[-1])
    return _member_map_of(node, members[:-1]).flat_range_product(
        isl.UnionMap.from_union_pw_aff(upa).intersect_domain(node.get_domain())
    )


def _zero_then_nonzero(ctx: isl.Context, n: int) -> isl.Set:
    names = [f"x{k}" for k in range(n)]
    cons = [f"{v} = 0" for v in names[:-1]] + [f"{names[-1]} != 0"]
    return isl.Set.read_from_str(ctx, f"{{ [{', '.join(names)}] : {' and '.join(cons)} }}")


def carries_dependence(node: isl.ScheduleNode, member: int, deps: isl.UnionMap) -> bool:
    """Whether member ``member`` of band ``node`` carries a dependence among the instances below it.

    ``deps`` must be specialised to the concrete sizes. A member that carries none can run its
    iterations in any order, or at once: a parallel or vector loop.
    """
    domain = node.get_domain()
    live = deps.intersect_domain(domain).intersect_range(domain)
    if live.is_empty():
        return False
    sched = _member_map(node, range(member + 1))
    deltas = live.apply_domain(sched).apply_range(sched).deltas()
    lst = deltas.get_set_list()
    for i in range(lst.n_set()):
        d = lst.get_at(i)
        n = d.dim(isl.dim_type.set)
        if not d.intersect(_zero_then_nonzero(node.get_ctx(), n)).is_empty():
            return True
    return False


def member_spread(node: isl.ScheduleNode, member: int) -> int | None:
    """Most values member ``member`` takes for fixed outer loops (None if unbounded)."""
    outer = _member_map(node, range(member))
    mupa = node.band_get_partial_schedule()
    this = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(member)).intersect_domain(node.get_domain())
    rel = outer.reverse().apply_range(this)  # outer values -> member values
    pairs = rel.reverse().apply_range(rel)  # member values sharing outer values
    if pairs.is_empty():
        return 1
    d = isl.Set.from_union_set(pairs.deltas())
    top = d.dim_max_val(0)
    return int(top.to_python()) + 1 if top.is_int() else None


def statements_of(node: isl.ScheduleNode) -> list[str]:
    """The names of the statements in ``node``'s domain, sorted."""
    lst = node.get_domain().get_set_list()
    return sorted({lst.get_at(i).get_tuple_name() for i in range(lst.n_set())})


def _member_dim(node: isl.ScheduleNode, member: int, stmt: str, ndims: int) -> int | None:
    """The statement dimension band member ``member`` walks for ``stmt`` (None if not exactly one)."""
    upa = node.band_get_partial_schedule().get_union_pw_aff(member)
    lst = upa.get_pw_aff_list()
    for i in range(lst.n_pw_aff()):
        pa = lst.get_at(i)
        if pa.get_domain_space().get_tuple_name(isl.dim_type.set) != stmt:
            continue
        used = [k for k in range(ndims) if pa.involves_dims(isl.dim_type.in_, k, 1)]
        return used[0] if len(used) == 1 else None
    return None


# -------------------------------------------------------------------------------------------- mapping
class _Mapper:
    def __init__(
        self,
        scop: Scop,
        deps: Dependences,
        sizes: Mapping[str, int],
        strides: Mapping[str, tuple[int, ...]],
    ):
        self.scop = scop
        self.sizes = sizes
        self.strides = strides
        self.decisions: list[str] = []
        self.instances = {st.name: _count(scop, st.name, sizes) for st in scop.statements}
        self.legality_deps = deps
        self.legality_sizes = {p: sizes[p] for p in scop.params} or None
        ctx = scop.ctx
        if scop.params:
            fixed = isl.Set.read_from_str(
                ctx,
                f"[{', '.join(map(isl_name, scop.params))}] -> {{ : "
                + " and ".join(f"{isl_name(p)} = {sizes[p]}" for p in scop.params)
                + " }",
            )
            self.deps = deps.all.intersect_params(fixed)
        else:
            self.deps = deps.all

    # --------------------------------------------------------------------------------- scoring
    def _access_steps(self, stmt: str, var: str) -> list[int | None]:
        """Address step of every access of ``stmt`` (write counted once) when ``var`` grows by 1."""
        st = self.scop.statement(stmt)
        cdef = self.scop.cdef
        dims = set(st.dims)
        steps: list[int | None] = []
        accesses: list[tuple[str, tuple[A.Expr, ...]]] = []
        if st.kind == "init" and not st.source.plain_lhs:
            accesses.append((st.source.tensor, tuple(A.Ident(d, kind="index") for d in st.dims)))
        else:
            accesses.append((st.source.tensor, st.source.lhs))
        if st.kind != "init":
            accesses += [(n.tensor, n.args) for n in A.walk(st.source.rhs) if isinstance(n, A.Access)]
        for tensor, args in accesses:
            strides = self.strides.get(tensor, ())
            step = 0
            for k, arg in enumerate(args):
                aff = affine_form(arg, dims, lambda n: n in cdef.sizes, lambda t, j: cdef.tensor(t).shape[j])
                if aff is None:
                    step = None
                    break
                step += aff.coeff(var) * (strides[k] if k < len(strides) else 0)
            steps.append(step)
        return steps

    def _score(self, node: isl.ScheduleNode, member: int) -> float:
        """How well the accesses walk memory if ``member`` is the vector loop, each statement
        weighted by its share of the band's instances (a bias add fused behind a contraction
        must not decide the contraction's vector loop)."""
        stmts = statements_of(node)
        weights = {s: self.instances.get(s, 1) for s in stmts}
        total = sum(weights.values()) or 1
        score = 0.0
        for stmt in stmts:
            st = self.scop.statement(stmt)
            k = _member_dim(node, member, stmt, len(st.dims))
            if k is None:
                continue
            part = 0
            for step in self._access_steps(stmt, st.dims[k]):
                part += 0 if step is None else 1 if step == 0 else 2 if abs(step) == 1 else 0
            score += part * weights[stmt] / total
        return round(score, 3)

    # --------------------------------------------------------------------------------- editing
    @staticmethod
    def _permute(node: isl.ScheduleNode, order: Sequence[int]) -> isl.ScheduleNode:
        mupa = node.band_get_partial_schedule()
        coincident = [node.band_member_get_coincident(j) for j in range(node.band_n_member())]
        um = None
        for j in order:
            part = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(j))
            um = part if um is None else um.flat_range_product(part)
        new = isl.MultiUnionPwAff.from_union_map(um)
        node = node.delete().insert_partial_schedule(new).band_set_permutable(1)
        for pos, j in enumerate(order):
            node = node.band_member_set_coincident(pos, coincident[j])
        return node

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
                scores = [self._score(node, j) for j in range(n)]
                if options.register_tile:  # a register tile keeps short reductions as loops
                    best = max(range(n), key=lambda j: (scores[j], j == n - 1, j))
                    order = [j for j in range(n) if j != best] + [best]
                    permuted = self._permute(node, order) if order != list(range(n)) else node
                    tiled = self._register_tile(permuted, options)
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
                    node = self._permute(node, order)
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
                tiled = self._register_tile_over_window(node, options)
                if tiled is None:
                    tiled = self._register_tile_chain(node, options)
                if tiled is not None:
                    sched = tiled
                    continue
            node = self._unroll(node, options.unroll)
            last = n - 1
            if n > 1:
                node = node.band_split(n - 1).child(0)
            kind = self._vector_kind(node, 0)
            if kind and not options.vectorize:
                kind = "reduction" if kind == "simd_reduction" else None
            if kind:
                node = node.insert_mark(loop_mark(kind, node))
                self.decisions.append(f"{kind}: innermost member {last} of a band over {statements_of(node)}")
            sched = node.get_schedule()

    def _register_tile(self, node: isl.ScheduleNode, options) -> isl.Schedule | None:
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
            kind = self._vector_kind(node, n - 1)
            if kind != "simd_reduction" or not options.vectorize or len(free) != n - 1:
                return None
            dot = True
        given = list(options.register_tile)[-len(free) :]
        wanted = dict(zip(free[len(free) - len(given) :], given))
        sizes = _fit_tile(node, wanted, dot=dot)
        if not any(v > 1 and self._reused_along(node, j) for j, v in enumerate(sizes)):
            return None  # no operand is shared by the tile's outputs (a row sum): nothing to gain
        node = _tile_band(node, sizes)
        order = [j for j in range(n) if j in free] + [j for j in range(n) if j not in free]
        if order != list(range(n)):
            node = self._permute(node, order)
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

    def _register_tile_over_window(self, node: isl.ScheduleNode, options) -> isl.Schedule | None:
        """The outer-product register tile of a parallel band above a sunk reduction window.

        When the scheduler puts a short reduction (a grouped convolution's ``r_c, r_kh, r_kw``) in
        bands of their own below a fully parallel band, :meth:`_sink_short` unrolls them under the
        vector loop. Here the parallel band is tiled by ``register_tile`` instead; the point loops
        move below the window's first band, which stays a loop (marked ``accumulate``), and above
        the rest, which stay unrolled. Kept only if the legality check agrees.
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
        sizes = _fit_tile(node, dict(zip(range(n - len(given), n), given)), dot=False)
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

    def _register_tile_chain(self, node: isl.ScheduleNode, options) -> isl.Schedule | None:
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
        if self._vector_kind(node, nv - 1) != "simd_reduction":
            return None
        k = _member_dim(node, nv - 1, stmt, len(st.dims))
        if k is None:
            return None
        steps = self._access_steps(stmt, st.dims[k])[1:]
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
        below = math.prod(member_spread(b, j) or 2 for b in path[:-1] for j in range(b.band_n_member()))
        hoist = bool(reductions) and top is not node and len(free) > 2 and below >= HOIST_CHAIN_TERMS
        if hoist:
            order = free[:1] + reductions + free[1:]
        else:
            order = free + reductions + ([nv - 1] if top is node else [])
        if order != list(range(n)):
            if not top.band_get_permutable():
                return None
            top = self._permute(top, order)
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
            check_legality(sched, self.legality_deps, sizes=self.legality_sizes)
        except TCInternalError:
            return None
        self.decisions.append(decision)
        return sched

    def _fit_chain_tile(self, node: isl.ScheduleNode, stmt: str, nfree: int) -> list[int] | None:
        """Tile sizes for the free members ``0 .. nfree - 1`` of band ``node`` (1 for the others)
        of the chain form (:meth:`_register_tile_chain`), or None if no tile shares an operand.

        Every output of the tile holds a vector of partial sums and each step loads, per operand,
        one vector for each tile position it moves along: ``f`` x ``c`` tiles load 4 + 2 vectors
        for 8 outputs. Sizes go up to :data:`DOT_TILE` + 1 with at most ``DOT_TILE ** 2`` outputs,
        as in the dot-product form; among the tiles of at least half the largest size those that
        tile evenly (:func:`_tiles_evenly`) come first, then the fewest loads per output.
        """
        st = self.scop.statement(stmt)
        moves: list[list[bool]] = []  # per free member: does each operand move along it?
        nops = len(self._access_steps(stmt, st.dims[0])) - 1
        extents = []
        for j in range(nfree):
            k = _member_dim(node, j, stmt, len(st.dims))
            if k is None:  # not one statement dimension (a member constant at these sizes): untiled
                moves.append([False] * nops)
                extents.append(1)
                continue
            moves.append([s != 0 for s in self._access_steps(stmt, st.dims[k])[1:]])
            extents.append(member_spread(node, j) or 1)
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
                    even[j, v] = _tiles_evenly(node, j, v)
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
            k = _member_dim(node, member, stmt, len(st.dims))
            if k is None or st.kind == "init":
                continue
            if 0 in self._access_steps(stmt, st.dims[k])[1:]:
                return True
        return False

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
                if up.get_type() == isl.schedule_node_type.sequence and _beside_leaves(up):
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

    def _vector_kind(self, node: isl.ScheduleNode, member: int) -> str | None:
        """``simd`` if the loop carries no dependence; ``simd_reduction`` if it walks a reduction
        dimension of the band's update statements (the printer keeps the sum in a register only
        where the loop holds nothing but one such update whose element does not move, and whose
        right-hand side does not read the tensor it accumulates into: a plain loop otherwise)."""
        if not carries_dependence(node, member, self.deps):
            return "simd"
        found = False
        for name in statements_of(node):
            st = self.scop.statement(name)
            k = _member_dim(node, member, name, len(st.dims))
            if k is None:
                continue  # constant along this member: not in the loop with the others
            if st.kind != "update" or not st.source.plain_lhs or st.dims[k] not in st.source.reduction_vars:
                return None
            found = True
        return "simd_reduction" if found else None

    def _parallel_member(self, node: isl.ScheduleNode) -> tuple[int, str] | None:
        """The outermost member of band ``node`` with several iterations, and how it runs in
        threads: ``parallel`` if it carries no dependence, ``parallel_reduction`` if it walks a
        reduction dimension of the band's only statement (see :meth:`_reduction_only`)."""
        for j in range(node.band_n_member()):
            if (member_spread(node, j) or 2) > 1:
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
        k = _member_dim(node, member, names[0], len(st.dims))
        return k is not None and st.dims[k] in src.reduction_vars

    def _parallel(self, sched: isl.Schedule, work: int) -> isl.Schedule:
        if work < MIN_PARALLEL_WORK:
            self.decisions.append(f"parallel: none ({work} instances < {MIN_PARALLEL_WORK})")
            return sched
        done = 0
        while True:
            todo = bands(sched, outermost=True)
            if done >= len(todo):
                return sched
            node = todo[done]
            done += 1
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
                continue
            p, kind = p
            if p > 0:
                node = node.band_split(p).child(0)
            if node.band_n_member() > 1:
                node = node.band_split(1)
            node = node.insert_mark(loop_mark(kind, node))
            what = "parallel" if kind == "parallel" else "parallel reduction (partial results in threads)"
            self.decisions.append(f"{what}: member {p} of the outermost band over {statements_of(node)}")
            sched = node.get_schedule()


def _count(scop: Scop, name: str, sizes: Mapping[str, int]) -> int:
    """Instances of a statement, from its ranges (conditions ignored: a weight, not a count)."""
    st = scop.statement(name)
    ranges = st.source.ranges if st.kind != "init" else st.source.ranges[: len(st.source.lhs_vars)]
    n = 1
    for r in ranges:
        n *= max(0, r.hi.evaluate(sizes) - r.lo.evaluate(sizes))
    return n


def _fit_tile(node: isl.ScheduleNode, wanted: Mapping[int, int], *, dot: bool) -> list[int]:
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
                even[j, v] = _tiles_evenly(node, j, v)
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


def _tiles_evenly(node: isl.ScheduleNode, member: int, size: int) -> bool:
    """Whether tiling member ``member`` of band ``node`` by ``size`` leaves no partial tile, for
    every value of the loops around it (each value's tile-mates are values too)."""
    if size <= 1:
        return True
    outer = _member_map(node, range(member))
    mupa = node.band_get_partial_schedule()
    this = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(member)).intersect_domain(node.get_domain())
    values = outer.reverse().apply_range(this)  # outer loop values -> this member's values
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


def loop_mark(kind: str, band: isl.ScheduleNode) -> isl.Id:
    """The mark for the loop of a one-member ``band``: ``kind@depth``.

    isl names the loop of schedule dimension ``d`` ``c{d}``; the depth lets the IR builder apply the
    mark to that loop only. A band with one iteration produces no loop, and its mark then marks
    nothing (never the next loop down, which may carry dependences).
    """
    return isl.Id(f"{kind}@{band.get_schedule_depth()}", context=band.get_ctx())


def has_band_below(node: isl.ScheduleNode) -> bool:
    """Whether some descendant of schedule node ``node`` is a band."""

    def visit(n: isl.ScheduleNode) -> bool:
        for i in range(n.n_children()):
            c = n.child(i)
            if c.get_type() == isl.schedule_node_type.band or visit(c):
                return True
        return False

    return visit(node)


def hoist_initialisations(
    sched: isl.Schedule,
    deps: Dependences,
    sizes: Mapping[str, int] | None,
    *,
    window: int = 0,
    windows: Collection[str] = (),
) -> isl.Schedule:
    """Run the ``!`` initialisations that share a band with other statements before that band.

    Fused into the band of their update, initialisations execute under a guard (``if (k == 0)``)
    in the innermost loops, which stops the compiler from vectorising or keeping sums in registers.
    Moving them before the band is legal when nothing else in the band must precede them; the
    legality check decides, and the schedule is kept unchanged otherwise.

    With ``window`` > 0, where each reduction is one of ``windows`` (update statements whose
    operands all move with every output index: see :func:`initialised_in_place`) and sums at most
    ``window`` points per output, the initialisations stay inside the band: below a band over
    the outputs alone (the scheduler's sequence there already runs each element's
    initialisation before its reduction), else before the band's reduction members, for each
    output element. The element is
    then initialised and reduced in one pass over the outputs, not two (max pooling reads its
    output once instead of twice). Contractions' long reductions stay as they were, in the band
    that register tiles need.
    """
    done = 0
    while True:
        todo = bands(sched, outermost=True)
        if done >= len(todo):
            return sched
        node = todo[done]
        done += 1
        names = statements_of(node)
        inits = [n for n in names if n.endswith("_init")]
        if not inits or len(inits) == len(names):
            continue
        domain = node.get_domain()
        filt = isl.UnionSet.empty(domain.get_space())
        for n in inits:
            filt = filt.union(domain.extract_set(_space_named(domain, n)))
        candidates = []
        pooling = all(n[: -len("_init")] in windows for n in inits)
        if window and pooling and _reduction_points(domain, inits) <= window:
            lead = leading_coincident(node)
            if lead == node.band_n_member():
                continue  # a band over the outputs alone: each element is initialised below it
            if lead > 0:
                candidates.append(node.band_split(lead).child(0).order_before(filt).get_schedule())
        candidates.append(node.order_before(filt).get_schedule())
        for candidate in candidates:
            try:
                check_legality(candidate, deps, sizes=sizes)
            except TCInternalError:
                continue
            sched = candidate
            break


def initialised_in_place(scop: Scop, packed: Collection[str] = frozenset()) -> frozenset[str]:
    """The update statements whose short reductions keep their ``!`` initialisation in their
    loop nest (:func:`hoist_initialisations`' ``windows``): pooling windows, where every operand
    moves with every output index (max pooling's ``I(n, c, 2 * h + r_kh, 2 * w + r_kw)``: no
    operand is shared between outputs, no register tile applies), and contractions without the
    outer-product form (:func:`~tcjit.mapping.defaults.outer_product_shaped`), whose
    dot-product register tile holds few partial sums over so short a reduction (kronecker3's
    first product, 16 terms, ran faster so than with its tile when the two were timed).
    Short contractions with the outer-product form (a matrix product with K = 16) are faster
    with their register tile. ``packed``: inputs read from transposed panels (the form is judged
    on the panels' layout)."""
    out = set()
    for st in scop.statements:
        src = st.source
        if st.kind != "update":
            continue
        reads = [a for a in A.walk(src.rhs) if isinstance(a, A.Access)]
        window = bool(reads) and all(set(src.lhs_vars) <= A.index_vars(a) for a in reads)
        if window or not outer_product_shaped(src, packed):
            out.add(st.name)
    return frozenset(out)


def _beside_leaves(sequence: isl.ScheduleNode) -> bool:
    """Whether all children of ``sequence`` but one run one instance per outer iteration (no
    band below, or bands of one point: the initialisations :func:`hoist_initialisations` keeps
    in front of a pooling window)."""

    def loops(n: isl.ScheduleNode) -> bool:
        if n.get_type() == isl.schedule_node_type.band and any(
            (member_spread(n, j) or 2) > 1 for j in range(n.band_n_member())
        ):
            return True
        return any(loops(n.child(i)) for i in range(n.n_children()))

    return sum(loops(sequence.child(i)) for i in range(sequence.n_children())) == 1


def _reduction_points(domain: isl.UnionSet, inits: Sequence[str]) -> int:
    """The most points the reductions initialised by ``inits`` (``X_init``) sum over per output:
    the box of the update ``X``'s dimensions after the initialisation's (the reduction ones)."""
    most = 1
    for name in inits:
        if not _has_statement(domain, name[: -len("_init")]):
            continue  # the update has no instance (a size is 0): its reduction sums nothing
        init = domain.extract_set(_space_named(domain, name))
        update = domain.extract_set(_space_named(domain, name[: -len("_init")]))
        points = 1
        for i in range(init.dim(isl.dim_type.set), update.dim(isl.dim_type.set)):
            lo, hi = update.dim_min_val(i), update.dim_max_val(i)
            if not (lo.is_int() and hi.is_int()):
                return math.inf
            points *= max(0, int(hi.to_python()) - int(lo.to_python()) + 1)
        most = max(most, points)
    return most


def leading_coincident(band: isl.ScheduleNode) -> int:
    """How many of ``band``'s outermost members are coincident (parallel), in a row."""
    n = 0
    while n < band.band_n_member() and band.band_member_get_coincident(n):
        n += 1
    return n


def _has_statement(domain: isl.UnionSet, name: str) -> bool:
    lst = domain.get_set_list()
    return any(lst.get_at(i).get_tuple_name() == name for i in range(lst.n_set()))


def _space_named(domain: isl.UnionSet, name: str) -> isl.Space:
    lst = domain.get_set_list()
    for i in range(lst.n_set()):
        if lst.get_at(i).get_tuple_name() == name:
            return lst.get_at(i).get_space()
    raise TCInternalError(f"no statement {name}")


def map_cpu(
    scop: Scop,
    deps: Dependences,
    sched: isl.Schedule,
    options,
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    work: int,
) -> CpuPlan:
    """Mark the loops of ``sched`` (specialised and tiled) for the CPU.

    :arg options: the :class:`~tcjit.mapping.options.OptionValues` of the call.
    :arg strides: element strides of every tensor (inputs as passed, outputs as allocated).
    :arg work: the number of statement instances (decides whether threads pay off).
    """
    m = _Mapper(scop, deps, sizes, strides)
    try:
        sched = m._innermost(sched, options)
        if options.parallelize:
            sched = m._parallel(sched, work)
    finally:
        _member_map_of.cache_clear()  # let this kernel's schedule trees go
    return CpuPlan(sched, tuple(m.decisions))
