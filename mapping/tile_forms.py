"""Tile forms: which marked reduction loops keep their outputs in registers, and in what form.

The CPU mapping (:mod:`.cpu_register_tiles`: which bands, what sizes) marks a register tile's
loops: the reduction loop it keeps its sums across (``accumulate``), the point loops below it
(``unroll``, ``simd``), and in the dot-product forms the reduction loop that runs in vector
lanes (``simd_reduction``). Whether a marked nest is a register tile, and of which form, depends
on what the nest holds (one update of one element per point), its bounds, its types and the
target's vector width; :func:`plan_tile` decides, and returns the decision as a
:class:`~tcjit.mapping.ir.RegisterTile` (or a :class:`~tcjit.mapping.ir.FullTiles` split into a
copy with constant bounds and one without).
The forms (:data:`~tcjit.mapping.ir.TILE_FORMS`):

* ``outer``: the outer-product form, an array of sums per output, loaded before the reduction
  loop and stored after it;
* ``vector``: the outer-product form in vector registers (a micro-kernel), where the innermost
  point loop is a ``simd`` loop over float32 or float64 ``+=``;
* ``dot``: the dot-product form, the reduction loop strip-mined into lanes of partial sums per
  output, added up after it;
* ``chain_vector`` and ``chain_array``: the dot-product form over a chain of reductions (a
  convolution's ``c, kh, kw``), in GCC vector types where the update fits them, else in arrays.

The plan preserves the statement instances and their order for each output; only where the
partial sums live changes (and, in the dot-product forms, the order in which one output's terms
are added, which the language allows for ``+= *= max= min=``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ..polyhedral.lang import ast as A
from ..polyhedral.lang.checked import CheckedDef, CheckedStatement
from ..polyhedral.lang.types import ScalarType
from ..polyhedral.scop import ScopStatement
from . import ir
from .accumulation import LONG_SUM
from .bodies import rhs_accesses
from .nests import (
    POINT_KINDS,
    constant_span,
    constant_upper_bound,
    extent,
    flat_runs,
    full_tiles,
    lane_strips,
    moves_by_one,
    rebuild_chain,
    variable_bounds,
    without_kind,
)
from .parts import affine

__all__ = [
    "ASSOCIATIVE",
    "MAX_REGISTER_TILE",
    "MAX_VECTOR_ACCUMULATORS",
    "TilingFacts",
    "plan_tile",
    "tile_start",
]

#: The largest register tile (local array elements) the printer emits; larger ones spill anyway.
MAX_REGISTER_TILE = 512

#: The most vector partial sums a vector register tile keeps (x86-64 has 16 vector registers with
#: AVX2: 6 x 2 sums, 2 loaded operand vectors and a broadcast fit).
MAX_VECTOR_ACCUMULATORS = 16

#: The kinds of the loops a tile's chunk loop and its unrolled point loops get.
UNROLLED = frozenset({ir.LoopKind.UNROLL})

#: The reductions whose terms may be added in another order (lanes of partial sums).
ASSOCIATIVE = ("+=", "*=", "max=", "min=")


@dataclass(frozen=True)
class TilingFacts:
    """What the planning of a kernel's reduction loops reads of the kernel and of its target.

    :ivar statements: the Scop's statements by name. :ivar sizes: the sizes the kernel is
        specialised to. :ivar strides: every tensor's element strides as the kernel reads them.
    :ivar checked: ``id()`` of the subscripts checked at run time (gathers).
    :ivar wide: tensors accumulated in a wider type (long sums), and that type.
    :ivar vector_bytes: the width of the target's vector registers.
    :ivar foldable: updates (``S0``) whose ``!`` initialisation may be left out where every register
        tile of the update starts its sums from zero (:func:`~tcjit.mapping.lower_cpu.lower_cpu`).
    :ivar emulated: the emulated CUDA target, which checks races per element (no vector forms).
    :ivar size_vars: the variables of the kernel's symbolic sizes (:func:`~.layout.size_var`),
        which loop bounds may mention (:mod:`.symbolic`).
    """

    cdef: CheckedDef
    statements: Mapping[str, ScopStatement]
    sizes: Mapping[str, int]
    strides: Mapping[str, tuple[int, ...]]
    checked: frozenset[int]
    wide: Mapping[str, ScalarType]
    vector_bytes: int
    foldable: frozenset[str] = frozenset()
    emulated: bool = False
    size_vars: frozenset[str] = frozenset()

    def element_type(self, tensor: str) -> ScalarType:
        """The type a tensor's elements have inside the kernel (wider for long sums)."""
        return self.wide.get(tensor) or self.cdef.tensor(tensor).dtype

    def lanes(self, t: ScalarType) -> int:
        """Partial sums per output in the dot-product form: one vector register of ``t``."""
        return max(1, self.vector_bytes // max(1, ctype_size(t)))

    def one_element_update(self, runs: Sequence[ir.Run], inner: set[str]) -> CheckedStatement | None:
        """The update statement every one of ``runs`` instantiates, if they all update one element
        that none of the loop variables ``inner`` moves, and its right-hand side does not read the
        tensor it updates (a register or a partial result can then hold the element); else None."""
        if not runs or len({r.statement for r in runs}) != 1:
            return None
        scop_st = self.statements[runs[0].statement]
        st = scop_st.source
        if scop_st.kind != "update" or not st.plain_lhs:
            return None
        if any(isinstance(a, A.Access) and a.tensor == st.tensor for a in A.walk(st.rhs)):
            return None
        elements = set()
        for r in runs:
            bound = dict(zip(scop_st.dims, r.args))
            element = tuple(bound[v] for v in st.lhs_vars)
            if any(ir.free_vars(e) & inner for e in element):
                return None
            elements.add(element)
        return st if len(elements) == 1 else None

    def vector_access(self, tensor: str, args: Sequence[A.Expr], vdim: str) -> str | None:
        """How an access moves along the vector dimension ``vdim``: ``"scalar"`` (not at all: no
        subscript mentions ``vdim``, or those that do are of stride 0, as in an expanded tensor
        such as the gradient ``sum().backward()`` passes), ``"vector"`` (by one element: a
        subscript ``vdim`` or ``vdim + c`` of stride 1), or None."""
        if tensor in self.wide or any(id(a) in self.checked for a in args):
            return None
        strides = self.strides[tensor]
        moving = [k for k, a in enumerate(args) if vdim in A.index_vars(a)]
        if all(strides[k] == 0 for k in moving):
            return "scalar"
        if len(moving) != 1 or strides[moving[0]] != 1:
            return None
        a = args[moving[0]]
        if isinstance(a, A.Ident):
            return "vector"
        if isinstance(a, A.Binary) and a.op in ("+", "-"):  # vdim + e, vdim - e, e + vdim
            pairs = [(a.lhs, a.rhs)] + ([(a.rhs, a.lhs)] if a.op == "+" else [])
            for this, other in pairs:
                if isinstance(this, A.Ident) and this.name == vdim and vdim not in A.index_vars(other):
                    return "vector"
        return None

    def vector_value(self, e: A.Expr, t: ScalarType, vdim: str) -> bool:
        """Whether a vector tile can compute ``e``: ``+ - *`` of type ``t`` over accesses that
        :meth:`vector_access` accepts, literals and scalar arguments."""
        if e.dtype != t:
            return False
        if isinstance(e, (A.IntLit, A.FloatLit)):
            return True
        if isinstance(e, A.Ident):
            return e.kind == "scalar"
        if isinstance(e, A.Access):
            return (
                self.cdef.tensor(e.tensor).dtype == t
                and self.vector_access(e.tensor, e.args, vdim) is not None
            )
        if isinstance(e, A.Unary):
            return e.op == "-" and self.vector_value(e.arg, t, vdim)
        if isinstance(e, A.Binary):
            return (
                e.op in ("+", "-", "*")
                and self.vector_value(e.lhs, t, vdim)
                and self.vector_value(e.rhs, t, vdim)
            )
        return False

    def vector_loads(self, st: CheckedStatement, vdim: str) -> frozenset[int]:
        """The accesses of ``st``'s right-hand side that a vector tile along ``vdim`` loads as
        vectors (the others are scalars, broadcast), by their numbers in the statement's body
        (:func:`~tcjit.mapping.bodies.rhs_accesses`)."""
        return frozenset(
            k + 1
            for k, a in enumerate(rhs_accesses(st))
            if self.vector_access(a.tensor, a.args, vdim) == "vector"
        )


def ctype_size(t: ScalarType) -> int:
    """The bytes of one element of ``t`` as kernels compute with it (half types in float)."""
    if t.is_float:
        return 8 if t.bits == 64 else 4
    return max(1, t.bits // 8)


def plan_tile(
    loop: ir.For,
    kinds: set[str],
    facts: TilingFacts,
    name: str,
    serial: Mapping[str, ir.For],
    inside: Callable[[ir.Node], ir.Node],
) -> ir.Node | None:
    """The register tile of ``loop`` (an ``accumulate`` loop of kinds ``kinds``) named ``name``,
    or None if the nest does not fit one (it is then run as written).

    ``serial``: the enclosing loops whose iterations run in order in one thread (a first chunk of
    a reduction, :func:`tile_start`); ``inside``: the planning of the loops the tile runs with
    its sums in registers (register accumulators may still apply there).

    Expected shape: ``loop`` (a reduction loop), more reduction loops, then the point loops
    (``unroll``/``simd`` kinds, or single-iteration ones) around instances of one update
    statement only, whose output element depends on neither ``loop`` nor the loops between.
    With ``simd_reduction`` on ``loop`` itself (the dot-product form) ``loop`` is strip-mined
    into :meth:`~TilingFacts.lanes` partial sums per output, added up after it.
    """
    if ir.LoopKind.SIMD_REDUCTION not in kinds:
        shape = _reduction_chain(loop)
        if shape is not None:
            return _chain_tile(loop, *shape, facts, name, inside)
    chain, node = [], loop.body
    while isinstance(node, (ir.For, ir.Mark)):
        if isinstance(node, ir.Mark):
            node = node.body
        elif node.degenerate or node.kinds & POINT_KINDS:
            break
        else:
            chain.append(node)
            node = node.body
    inner = {loop.var, *(c.var for c in chain)}
    found = _tile_points(node, inner, facts)
    if found is None:
        return None
    points, node, runs, st, extents = found
    dot = ir.LoopKind.SIMD_REDUCTION in kinds
    if dot and (chain or any(ir.LoopKind.SIMD in p.kinds for p in points) or st.op not in ASSOCIATIVE):
        dot = False
    lanes = facts.lanes(facts.element_type(st.tensor)) if dot else 1
    if math.prod(extents) * lanes > MAX_REGISTER_TILE:
        return None

    def tile(pts: Sequence[ir.For]) -> ir.RegisterTile:
        if not dot:
            vector = _vector_tile(loop, pts, node, facts, name, serial)
            if vector is not None:
                return vector
            compute = ir.For(loop.var, loop.init, loop.cond, loop.step, rebuild_chain(loop.body, pts))
            return ir.RegisterTile(
                "outer", name, runs[0].statement, tuple(runs), (loop,), tuple(pts), tuple(extents), 1, node,
                compute=inside(compute), start=tile_start([loop, *chain], runs, facts, serial),
            )  # fmt: skip
        strips = inside(lane_strips(loop, pts, node, lanes))
        return ir.RegisterTile(
            "dot", name, runs[0].statement, tuple(runs), (loop,), tuple(pts), tuple(extents), lanes, node,
            vloop=loop, compute=strips,
        )  # fmt: skip

    return _copies(points, tile)


def _copies(points: Sequence[ir.For], tile: Callable[[Sequence[ir.For]], ir.RegisterTile]) -> ir.Node:
    """The tile over ``points``, or, where their bounds are not constants (partial tiles), a
    :class:`~tcjit.mapping.ir.FullTiles` split: a copy with constant bounds for full tiles, which
    the compiler unrolls and keeps in registers, and one for the others, which it need not unroll
    (unrolling loops with variable bounds costs the compiler time and buys nothing)."""
    full, conds = full_tiles(points)
    if not conds:
        return tile(points)
    return ir.FullTiles(tuple(conds), tile(full), tile([without_kind(p, ir.LoopKind.UNROLL) for p in points]))


def _tile_points(node: ir.Node, inner: set[str], facts: TilingFacts):
    """``(points, body, runs, statement, extents)`` of a register tile whose point loops start
    at ``node``: the ``unroll``/``simd`` (or single-iteration) loops, of constant extents and
    bounds free of the reduction loops ``inner`` and of each other, around instances of one
    update of one element that ``inner`` does not move (:meth:`TilingFacts.one_element_update`);
    None if the nest is not of that shape."""
    points: list[ir.For] = []
    while isinstance(node, (ir.For, ir.Mark)):
        if isinstance(node, ir.Mark):
            node = node.body
            continue
        if not (node.degenerate or node.kinds & POINT_KINDS):
            return None
        points.append(node)
        node = node.body
    runs = flat_runs(node)
    st = facts.one_element_update(runs or [], inner) if points else None
    if st is None:
        return None
    pvars = {p.var for p in points}
    extents = []
    for p in points:
        if (ir.free_vars(p.init) | ir.free_vars(p.cond)) & (inner | (pvars - {p.var})):
            return None
        if p.degenerate:
            continue
        hi = constant_upper_bound(p.cond, p.var)
        if not isinstance(p.init, ir.Int) or p.init.value < 0 or p.step != 1 or hi is None:
            return None
        extents.append(hi + 1)
    return points, node, runs, st, extents


def _chain_tile(
    loop: ir.For,
    chain: list[ir.For],
    vloop: ir.For,
    facts: TilingFacts,
    name: str,
    inside: Callable[[ir.Node], ir.Node],
) -> ir.Node | None:
    """The dot-product register tile over a chain of reductions
    (:meth:`~tcjit.mapping.cpu_register_tiles.RegisterTiles.register_tile_chain`): ``loop``
    (marked ``accumulate``), the loops ``chain`` below it, the ``simd_reduction`` loop ``vloop``,
    then the point loops around one ``+=`` update.
    Every output of the tile keeps a vector of partial sums across all of them; the lanes
    are added up once, after ``loop``. None (run the nest as written) if it does not fit."""
    if not ir.canonical(vloop) or vloop.step != 1:
        return None
    inner = {loop.var, *(c.var for c in chain), vloop.var}
    found = _tile_points(vloop.body, inner, facts)
    if found is None:
        return None
    points, node, runs, st, extents = found
    if st.op != "+=":
        return None
    plan = _chain_plan(runs, vloop, facts)
    lanes = facts.lanes(facts.element_type(st.tensor))
    if plan is not None:
        if math.prod(extents) > MAX_VECTOR_ACCUMULATORS:
            return None
    elif math.prod(extents) * lanes > MAX_REGISTER_TILE:
        return None
    loops = (loop, *chain)

    def tile(pts: Sequence[ir.For]) -> ir.RegisterTile:
        common = (name, runs[0].statement, tuple(runs), loops, tuple(pts), tuple(extents))
        if plan is not None:
            t, vdim = plan
            wide = facts.element_type(st.tensor) != t
            block = _float32_block(loops, vloop) if wide else 0
            return ir.RegisterTile(
                "chain_vector", *common, facts.lanes(t), node, vloop=vloop, vector=t, vdim=vdim, block=block,
                vector_loads=facts.vector_loads(st, vdim),
            )  # fmt: skip
        strips = inside(lane_strips(vloop, pts, node, lanes))
        return ir.RegisterTile("chain_array", *common, lanes, node, vloop=vloop, compute=strips)

    return _copies(points, tile)


def _chain_plan(runs: Sequence[ir.Run], vloop: ir.For, facts: TilingFacts):
    """``(type, dimension)`` if the chain tile's update can run in vector registers along loop
    ``vloop``: a ``+=`` of float32 or float64 values into a tensor of that type (or of float32
    ones accumulated in float64, a long sum, where ``vloop`` runs a known number of times
    below :data:`.accumulation.LONG_SUM`: one run is the shortest float32 block the printer
    may use), one dimension moving by one along ``vloop`` and a right-hand side
    :meth:`TilingFacts.vector_value` accepts; None otherwise (and in the emulated target, which
    checks races per element)."""
    if facts.emulated:
        return None
    scop_st = facts.statements[runs[0].statement]
    st = scop_st.source
    t = facts.cdef.tensor(st.tensor).dtype
    et = facts.element_type(st.tensor)
    if t.name not in ("float32", "float64") or st.value_type != t:
        return None
    if et != t:
        runs_of = extent(vloop)
        if not (t.name == "float32" and et.name == "float64") or runs_of is None or runs_of >= LONG_SUM:
            return None  # float32 blocks need runs of a known length below LONG_SUM
    vdim = _vector_dim(runs, vloop.var, facts)
    if vdim is None or vdim in st.lhs_vars or not facts.vector_value(st.rhs, t, vdim):
        return None
    return t, vdim


def _vector_dim(runs: Sequence[ir.Run], var: str, facts: TilingFacts) -> str | None:
    """The one dimension of the statement ``runs`` instantiate that moves by one along loop
    ``var`` in every one of them (and no other dimension moves); None if there is none."""
    scop_st = facts.statements[runs[0].statement]
    vdims = set()
    for run in runs:
        bound = dict(zip(scop_st.dims, run.args))
        moving = [d for d in scop_st.dims if var in ir.free_vars(bound[d])]
        if len(moving) != 1 or not moves_by_one(bound[moving[0]], var):
            return None
        vdims.add(moving[0])
    return next(iter(vdims)) if len(vdims) == 1 else None


def _vector_tile(
    loop: ir.For,
    points: Sequence[ir.For],
    node: ir.Node,
    facts: TilingFacts,
    name: str,
    serial: Mapping[str, ir.For],
) -> ir.RegisterTile | None:
    """The outer-product form in vector registers (a micro-kernel); None if it does not apply.

    A register tile whose innermost point loop is the ``simd`` loop, of a constant extent that
    is a multiple of :meth:`~TilingFacts.lanes`, the others unrolled, around one instance of a
    ``+=`` whose output and operands are float32 or float64 (no conversions, no wide
    accumulator) and whose right-hand side is ``+ - *`` of accesses, literals and scalars.
    Every access moves by one element along the vector loop (a vector load) or not at all (a
    scalar, broadcast). The sums live in ``<lanes>``-wide vector variables (GCC's vector
    extension) across the reduction loops, each row's operands loaded once per step: the code
    gcc makes of it is a BLAS micro-kernel (``float[..][..]`` arrays with an ``omp simd`` loop
    leave it spilling partial sums to the stack).
    """
    runs = flat_runs(node)
    live = [p for p in points if not p.degenerate]
    if not runs or not live or ir.LoopKind.SIMD not in live[-1].kinds:
        return None
    extents = []
    for p in live:
        hi = constant_upper_bound(p.cond, p.var)
        if hi is None or variable_bounds(p.cond) or p.init != ir.Int(0) or p.step != 1:
            return None
        if p is not live[-1] and ir.LoopKind.UNROLL not in p.kinds:
            return None
        extents.append(hi + 1)
    simd = live[-1].var
    plan = _vector_plan(runs, simd, facts)
    if plan is None:
        return None
    st, et, vdim = plan
    lanes = facts.lanes(et)
    if extents[-1] % lanes or math.prod(extents) // lanes > MAX_VECTOR_ACCUMULATORS:
        return None
    if points[-1] is not live[-1]:  # a degenerate point loop inside the vector loop: keep the plain form
        return None
    chunks = extents[-1] // lanes
    chunk = ir.For(
        "tc_v", ir.Int(0), ir.Op("<=", (ir.Var("tc_v"), ir.Int(chunks - 1))), 1, node, kinds=UNROLLED
    )
    nest = [replace(p, kinds=UNROLLED) if p.degenerate is False else p for p in points[:-1]]
    nest.append(chunk)
    across = [loop]  # the reduction loops between the tile's loop and its point loops
    while True:
        nxt = across[-1].body
        while isinstance(nxt, ir.Mark):
            nxt = nxt.body
        if not isinstance(nxt, ir.For) or nxt.var in {p.var for p in points}:
            break
        across.append(nxt)
    return ir.RegisterTile(
        "vector", name, runs[0].statement, tuple(runs), tuple(across), tuple(nest), (*extents[:-1], chunks),
        lanes, node, vector=et, vdim=vdim, var=simd, start=tile_start(across, runs, facts, serial),
        vector_loads=facts.vector_loads(st, vdim),
    )  # fmt: skip


def _vector_plan(runs: Sequence[ir.Run], var: str, facts: TilingFacts):
    """``(statement, type, dimension)`` if ``runs`` (instances of one statement) can run in
    vector registers along loop ``var``: a float32 or float64 ``+=`` without conversions or a
    wide accumulator, one dimension moving by one along ``var``, its output moving by one element
    too (:meth:`TilingFacts.vector_access`) and a right-hand side
    :meth:`TilingFacts.vector_value` accepts; None otherwise (and in the emulated target, which
    checks races per element)."""
    if facts.emulated:
        return None
    st = facts.statements[runs[0].statement].source
    et = facts.element_type(st.tensor)
    if st.op != "+=" or et.name not in ("float32", "float64") or st.tensor in facts.wide:
        return None
    if st.value_type != et or facts.cdef.tensor(st.tensor).dtype != et:
        return None
    vdim = _vector_dim(runs, var, facts)
    if vdim is None:
        return None
    if facts.vector_access(st.tensor, st.lhs, vdim) != "vector" or not facts.vector_value(st.rhs, et, vdim):
        return None
    return st, et, vdim


def tile_start(
    loops: Sequence[ir.For], runs: Sequence[ir.Run], facts: TilingFacts, serial: Mapping[str, ir.For]
) -> tuple[tuple[str, int], ...] | None:
    """How a register tile across ``loops`` (its reduction loop and those below it, above the
    point loops) around ``runs`` starts its sums: ``()`` from zero, as each execution holds
    the whole reduction of every output it updates; pairs ``(o, v)``, true together in the
    execution that updates its outputs first (the first chunk of a reduction that the enclosing
    loops ``o`` split, at their first values ``v``), which starts from zero while the others load
    what the earlier ones stored; None: it loads.

    The update must be in :attr:`TilingFacts.foldable` (a ``+=!``). Each reduction variable is
    bound to ``i + c`` or ``k*o + i + c``: ``i`` one of ``loops``, a different one for each
    variable, over a constant range ``[a, b)``; ``o`` an enclosing loop of ``serial`` over a
    constant range, ``k = b - a``, none of the outputs' subscripts depending on it. Together
    they span the variable's whole range ``[lo, hi)``: ``a + c = lo`` and ``b + c = hi``
    without ``o``; ``k*o_lo + a + c = lo`` and ``k*o_hi + b + c = hi`` with it.

    Why that suffices: an instance runs once, and the schedule orders an output's instances
    by ``o`` before ``i`` (``o`` encloses the tile, and the point of the output fixes every
    other loop). The execution at ``o = o_lo`` runs the output's first points, ``[lo, lo + k)``
    (the domain is a box over the variable's range, as the constant bounds show), so no
    instance updated the output before it: it holds the initialisation's zero there, which
    the tile need not load; the later chunks load what it stored. With no ``o``, an execution
    runs every point, and each output holds zero at its start.
    """
    sname = runs[0].statement
    if sname not in facts.foldable:
        return None
    scop_st = facts.statements[sname]
    st = scop_st.source
    spans = {}
    for loop in loops:
        span = constant_span(loop)
        if span is None:
            return None
        spans[loop.var] = span
    try:
        ranges = {
            v: (st.range_of(v).lo.evaluate(facts.sizes), st.range_of(v).hi.evaluate(facts.sizes))
            for v in st.reduction_vars
        }
    except (KeyError, ValueError, TypeError):  # a range over sizes this kernel was not given
        return None
    first: dict[str, int] = {}  # chunk loop -> its first value
    for run in runs:
        bound = dict(zip(scop_st.dims, run.args))
        inner, outer = [], []
        for v in st.reduction_vars:
            form = affine(bound[v])
            if form is None:
                return None
            coefs, c = dict(form[0]), form[1]
            mine = [(u, k) for u, k in coefs.items() if u in spans]
            rest = [(u, k) for u, k in coefs.items() if u not in spans]
            if len(mine) != 1 or mine[0][1] != 1 or len(rest) > 1:
                return None
            a, b = spans[mine[0][0]]
            lo, hi = ranges[v]
            inner.append(mine[0][0])
            if not rest:
                if (a + c, b + c) != (lo, hi):
                    return None
                continue
            o, k = rest[0]
            chunk = serial.get(o)
            span = None if chunk is None else constant_span(chunk)
            if span is None or k != b - a or (k * span[0] + a + c, k * (span[1] - 1) + b + c) != (lo, hi):
                return None
            outer.append(o)
            first[o] = span[0]
        if len(set(inner)) != len(inner) or len(set(outer)) != len(outer):
            return None
        lhs = {d: a for d, a in zip(scop_st.dims, run.args) if d not in st.reduction_vars}
        if any(set(outer) & ir.free_vars(a) for a in lhs.values()):
            return None
    return tuple(sorted(first.items()))


def _reduction_chain(loop: ir.For) -> tuple[list[ir.For], ir.For] | None:
    """``(chain, vector loop)`` if the loops below ``loop`` lead, through loops that are not a
    register tile's point loops, to a ``simd_reduction`` loop (the chain form of a register
    tile); None otherwise."""
    chain, node = [], loop.body
    while isinstance(node, (ir.For, ir.Mark)):
        if isinstance(node, ir.Mark):
            node = node.body
            continue
        kinds = node.kinds
        if ir.LoopKind.SIMD_REDUCTION in kinds and not node.degenerate:
            return chain, node
        if kinds & POINT_KINDS:
            return None
        chain.append(node)
        node = node.body
    return None


def _float32_block(loops: Sequence[ir.For], vloop: ir.For) -> int:
    """Where a chain tile of a float32 sum held in float64 starts its float32 partial sums: the
    number of ``loops`` (outermost first) outside them. The partials sum the loops inside, as
    many of them as keep an output's terms per block below :data:`.accumulation.LONG_SUM` (a
    float32 sum that long is accurate enough everywhere in tcjit): a convolution's whole ``h`` x
    ``w`` plane, or, where the bounds are not constants, one run of ``vloop``."""
    terms = extent(vloop)
    if terms is None:
        return len(loops)
    block = len(loops)
    for k in reversed(range(len(loops))):
        n = extent(loops[k])
        if n is None or terms * n >= LONG_SUM:
            break
        terms *= n
        block = k
    return block
