"""Where packed panels are filled a part at a time (option ``pack_operands``, :mod:`.packing`).

A panel is filled by the loops that read it, a part at a time, into one small buffer per thread,
rather than whole before the loops: what BLAS libraries do with their packed blocks, so that the
copy stays in the core's cache. :func:`place_parts` picks the loops from the loop tree isl built
(:mod:`.ir`) and marks them; the C printer fills the part at each mark
(:meth:`tcjit.mapping.c_printer.CPrinter.part`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace

from ..polyhedral.lang import ast as A
from . import ir
from .layout import Pack, Part, contiguous_strides
from .packing import PART_REFILLS

__all__ = [
    "PART_BYTES",
    "PART_REFILLS",
    "accesses",
    "affine",
    "constant_interval",
    "constant_range",
    "place_parts",
    "run_dims",
    "walk_runs",
]


#: A panel is filled inside the loops that read it, a part at a time, when a part (the elements
#: that one iteration of a loop reads) takes at most this many bytes. One buffer per thread is
#: reused for each part, so it stays in the core's cache, where a whole panel per thread (mlp3's
#: first layer: 512 KB a thread for its 128 KB of output) pushes out everything else, and the
#: Python and autograd code that runs between the kernels of a training step runs slower for it
#: (bench/results/HISTORY.md has the timing).
PART_BYTES = 256 << 10


# An affine form over loop variables: (((var, coefficient), ...) sorted, constant).
_Aff = tuple[tuple[tuple[str, int], ...], int]


def _aff(coefs: Mapping[str, int], const: int) -> _Aff:
    return tuple(sorted((v, c) for v, c in coefs.items() if c)), const


def _add(a: _Aff, b: _Aff, sign: int = 1) -> _Aff:
    coefs = dict(a[0])
    for v, c in b[0]:
        coefs[v] = coefs.get(v, 0) + sign * c
    return _aff(coefs, a[1] + sign * b[1])


def _scale(a: _Aff, k: int) -> _Aff:
    return _aff({v: c * k for v, c in a[0]}, a[1] * k)


Interval = tuple[_Aff | None, _Aff | None]  # lowest and highest value (None: not affine)


def _sum(a: _Aff | None, b: _Aff | None, sign: int = 1) -> _Aff | None:
    return None if a is None or b is None else _add(a, b, sign)


def _times(a: _Aff | None, k: int) -> _Aff | None:
    return None if a is None else _scale(a, k)


def _interval(e: ir.Expr, env: Mapping[str, Interval]) -> Interval:
    """Bounds of ``e`` as affine forms over the fixed variables (``env`` maps each variable to its
    bounds, a fixed one to itself); a bound that is not affine is None."""
    if isinstance(e, ir.Int):
        c = _aff({}, e.value)
        return c, c
    if isinstance(e, ir.Var):
        return env.get(e.name, (None, None))
    args = [_interval(a, env) for a in e.args]
    if e.op in ("+", "-") and len(args) == 2:
        (alo, ahi), (blo, bhi) = args
        if e.op == "+":
            return _sum(alo, blo), _sum(ahi, bhi)
        return _sum(alo, bhi, -1), _sum(ahi, blo, -1)
    if e.op == "neg":
        lo, hi = args[0]
        return _times(hi, -1), _times(lo, -1)
    if e.op == "*":
        (alo, ahi), (blo, bhi) = args
        if alo is not None and alo == ahi and not alo[0]:
            k, (lo, hi) = alo[1], (blo, bhi)
        elif blo is not None and blo == bhi and not blo[0]:
            k, (lo, hi) = blo[1], (alo, ahi)
        else:
            return None, None
        return (_times(lo, k), _times(hi, k)) if k >= 0 else (_times(hi, k), _times(lo, k))
    if e.op in ("floordiv", "div") and len(args) == 2:  # of constants only
        (alo, ahi), (blo, bhi) = args
        if alo is not None and alo == ahi and not alo[0] and blo is not None and blo == bhi and not blo[0]:
            if blo[1] > 0 and (e.op == "floordiv" or alo[1] >= 0):
                c = _aff({}, alo[1] // blo[1])
                return c, c
        return None, None
    if e.op in ("min", "max"):
        # each operand bounds the result on one side: prefer the one moving as its other bound
        (alo, ahi), (blo, bhi) = args
        if e.op == "min":
            hi = ahi if ahi is not None and (ahi[0] == (alo or ((), 0))[0] or bhi is None) else bhi
            return _extreme(alo, blo, min), hi
        lo = alo if alo is not None and (alo[0] == (ahi or ((), 0))[0] or blo is None) else blo
        return lo, _extreme(ahi, bhi, max)
    return None, None


def _extreme(a: _Aff | None, b: _Aff | None, pick) -> _Aff | None:
    """The smaller (``pick=min``) or larger of two affine forms that differ by a constant."""
    if a is None or b is None or a[0] != b[0]:
        return None
    return a if pick(a[1], b[1]) == a[1] else b


def _loop_interval(loop: ir.For, env: Mapping[str, Interval]) -> Interval | None:
    """The bounds of ``loop``'s variable (``var <= e`` or ``var < e`` conditions)."""
    init = _interval(loop.init, env)
    if loop.degenerate:
        return init if None not in init else None
    cond = loop.cond
    if not (isinstance(cond, ir.Op) and cond.op in ("<", "<=") and cond.args[0] == ir.Var(loop.var)):
        return None
    lo, hi = init[0], _interval(cond.args[1], env)[1]
    if lo is None or hi is None:
        return None
    return lo, (_add(hi, _aff({}, 1), -1) if cond.op == "<" else hi)


def subscript_bounds(e: A.Expr, dims: Mapping[str, Interval], sizes: Mapping[str, int]) -> Interval | None:
    """Bounds of a subscript of the source, its index variables bounded by ``dims``."""
    if isinstance(e, A.IntLit):
        c = _aff({}, int(e.value))
        return c, c
    if isinstance(e, A.Ident):
        if e.kind == "index":
            return dims.get(e.name)
        if e.kind == "size" and e.name in sizes:
            c = _aff({}, int(sizes[e.name]))
            return c, c
        return None
    if isinstance(e, A.Unary) and e.op == "-":
        inner = subscript_bounds(e.arg, dims, sizes)
        return None if inner is None else (_scale(inner[1], -1), _scale(inner[0], -1))
    if isinstance(e, A.Binary) and e.op in ("+", "-", "*"):
        a, b = subscript_bounds(e.lhs, dims, sizes), subscript_bounds(e.rhs, dims, sizes)
        if a is None or b is None:
            return None
        return _interval(ir.Op(e.op, (ir.Var("a"), ir.Var("b"))), {"a": a, "b": b})
    return None


def accesses(statement) -> tuple[list[tuple[str, tuple[A.Expr, ...]]], list[tuple[str, tuple[A.Expr, ...]]]]:
    """``(reads, writes)`` of a Scop statement: ``(tensor, subscripts)`` each (an initialisation
    reads nothing)."""
    st = statement.source
    if statement.kind == "init" and not st.plain_lhs:
        lhs = tuple(A.Ident(d, kind="index") for d in statement.dims)
    else:
        lhs = tuple(st.lhs)
    writes = [(st.tensor, lhs)]
    if statement.kind == "init":
        return [], writes
    exprs = [st.rhs, *getattr(st, "conditions", ())]
    reads = [(a.tensor, tuple(a.args)) for e in exprs for a in A.walk(e) if isinstance(a, A.Access)]
    return reads, writes


def _reads(statement, tensor: str) -> list[tuple[A.Expr, ...]]:
    """The subscripts of each read of ``tensor`` by a Scop statement."""
    return [args for t, args in accesses(statement)[0] if t == tensor]


def constant_interval(iv: Interval | None) -> tuple[int, int] | None:
    """``(lowest, highest)`` of bounds that are constants; None otherwise."""
    if iv is None or None in iv or iv[0][0] or iv[1][0]:  # type: ignore[index]
        return None
    return iv[0][1], iv[1][1]  # type: ignore[index]


def _exact(e: ir.Expr) -> int | None:
    """The value of an expression of constants; None where it has variables or its bounds differ
    (the ``min`` and ``max`` of :func:`_interval` are bounds, not always values)."""
    lo, hi = _interval(e, {})
    return lo[1] if lo is not None and lo == hi and not lo[0] else None


def constant_range(loop: ir.For) -> range | None:
    """The values of a loop's variable, where its bounds are constants (and its step positive):
    exact, as callers count iterations with it (None where a bound is only bounded)."""
    first = _exact(loop.init)
    if first is None or loop.degenerate:
        return None if first is None else range(first, first + 1)
    cond = loop.cond
    if not (isinstance(cond, ir.Op) and cond.op in ("<", "<=") and cond.args[0] == ir.Var(loop.var)):
        return None
    last = _exact(cond.args[1])
    if last is None or loop.step < 1:
        return None
    return range(first, last + (0 if cond.op == "<" else 1), loop.step)


def affine(e: ir.Expr) -> _Aff | None:
    """``e`` as an affine form over its variables (``((variable, coefficient), ...), constant``);
    None where it is not one (a division, a ``min`` of different forms, a product of variables)."""
    itself = {v: (_aff({v: 1}, 0),) * 2 for v in ir.free_vars(e)}
    lo, hi = _interval(e, itself)
    return lo if lo is not None and lo == hi else None


def walk_runs(
    node: ir.Node | None, env: dict[str, Interval], visit: Callable[[ir.Run, dict[str, Interval]], bool]
) -> bool:
    """Call ``visit(run, env)`` for every statement instance below ``node``, the loops between
    bounded in ``env`` (both branches of a condition); False where a loop's bounds are not affine,
    a node is of another target, or ``visit`` returns False."""
    if node is None:
        return True
    if isinstance(node, ir.Run):
        return visit(node, env)
    if isinstance(node, ir.For):
        iv = _loop_interval(node, env)
        if iv is None:
            return False
        env[node.var] = iv
        try:
            return walk_runs(node.body, env, visit)
        finally:
            del env[node.var]
    if isinstance(node, ir.Mark):
        return walk_runs(node.body, env, visit)
    if isinstance(node, ir.Block):
        return all(walk_runs(c, env, visit) for c in node.children)
    if isinstance(node, ir.If):
        return walk_runs(node.then, env, visit) and walk_runs(node.other, env, visit)
    return False  # a node of another target


def run_dims(statement, run: ir.Run, env: Mapping[str, Interval]) -> dict[str, Interval] | None:
    """The bounds of an instance's dimensions over the loops bounded in ``env``; None where one is
    not affine."""
    dims = {}
    for name, arg in zip(statement.dims, run.args):
        iv = _interval(arg, env)
        if None in iv:
            return None
        dims[name] = iv
    return dims


def _box(
    node: ir.Node | None,
    tensor: str,
    statements: Mapping[str, object],
    env: dict[str, Interval],
    sizes: Mapping[str, int],
    boxes: list[tuple[Interval, ...]],
) -> bool:
    """Add to ``boxes`` the bounds of every read of ``tensor`` below ``node``, per dimension, with
    the loops between bounded in ``env``; False where some bound is not affine."""

    def visit(run: ir.Run, env: dict[str, Interval]) -> bool:
        st = statements[run.statement]
        reads = _reads(st, tensor)
        if not reads:
            return True
        dims = run_dims(st, run, env)
        if dims is None:
            return False
        for args in reads:
            box = tuple(subscript_bounds(e, dims, sizes) for e in args)
            if any(b is None or None in b for b in box):
                return False
            boxes.append(box)  # type: ignore[arg-type]
        return True

    return walk_runs(node, env, visit)


def _reads_tensor(node: ir.Node | None, tensor: str, statements: Mapping[str, object]) -> bool:
    return any(_reads(statements[r.statement], tensor) for r in ir.runs(node))


def _expr(a: _Aff) -> ir.Expr:
    out: ir.Expr = ir.Int(a[1])
    for v, c in a[0]:
        term = ir.Var(v) if c == 1 else ir.Op("*", (ir.Int(c), ir.Var(v)))
        out = term if out == ir.Int(0) else ir.Op("+", (out, term))
    return out


def _trips(iv: Interval, step: int) -> int | None:
    lo, hi = iv
    if lo[0] != hi[0]:
        return None
    return max(0, (hi[1] - lo[1]) // max(step, 1) + 1)


def place_parts(
    body: ir.Node,
    statements: Mapping[str, object],
    packs: Mapping[str, Pack],
    sizes: Mapping[str, int],
    item_bytes: Mapping[str, int],
    representative: Mapping[str, int] | None = None,
) -> tuple[ir.Node, dict[str, Part]]:
    """Where to fill each packed input a part at a time (:data:`PART_BYTES`), instead of whole
    before the kernel: ``body`` with a :class:`~tcjit.mapping.ir.PartFill` mark (``part<k>``)
    around the body of each loop that fills one, and the inputs so filled.

    A site is a loop, serial or parallel, that opens no parallel region below it (its part is
    the filling thread's own), whose one iteration reads at most :data:`PART_BYTES` of the input,
    and where the parts filled in a run add up to at most :data:`PART_REFILLS` times the input:
    the loops above multiply them, and the iterations of a loop whose parts move by at least their
    extent (they do not overlap) fill at most the input between them. Of a loop and the loops
    inside it, the inner ones are taken where they copy no more in all (smaller parts for the
    same copying: mlp3's second layer fills 64 KB per chunk of its reduction rather than 128 KB
    per thread). The part is the box of the elements the iteration reads: bounds affine in the
    enclosing loops' variables, of the same extent in every iteration (that of the largest; the
    fill clamps it to the tensor). An input read anywhere without such a site above it is filled
    whole, before the kernel's loops.

    A kernel with symbolic sizes passes only its fixed ``sizes`` (a bound that depends on a
    symbolic one is unknown: no box rests on it) and ``representative``: the variables of its
    symbolic sizes in the IR with their representative values, which count the iterations of a
    loop whose bounds depend on them (a cost, never a box).
    """
    parts: dict[str, Part] = {}
    sites: dict[str, ir.Site] = {}
    for name, pack in packs.items():
        marks = _sites(
            body, name, statements, sizes, pack, PART_BYTES // max(1, item_bytes[name]), representative
        )
        if not marks:
            continue
        extent = tuple(max(e[d] for _, e in marks.values()) for d in range(len(pack.shape)))
        dense = contiguous_strides(tuple(extent[d] for d in pack.order))
        strides = [0] * len(pack.shape)
        for d, s in zip(pack.order, dense):
            strides[d] = s
        parts[name] = Part(name, extent, tuple(strides))
        ahead = 1 in pack.source  # lines of the next part can be fetched a row at a time
        origins = {k: origin for k, (origin, _) in marks.items()}
        body = _mark(body, origins, ir.Site(name, (), sizes=pack.sizes), sites, ahead)
    return body, parts


def _sites(
    body: ir.Node,
    tensor: str,
    statements: Mapping[str, object],
    sizes: Mapping[str, int],
    pack: Pack,
    limit: int,
    representative: Mapping[str, int] | None = None,
) -> dict[int, tuple[tuple[_Aff, ...], tuple[int, ...]]]:
    """The loops (by ``id``) that fill parts of ``tensor`` (:func:`place_parts`), each with its
    part's origin and extent; empty if some read would be left without one. A part is clamped to
    the tensor's extents every call shares (:attr:`~.layout.Pack.bounds`); its cost counts the
    tensor at the representative sizes (:attr:`~.layout.Pack.shape`)."""
    total = math.prod(pack.shape)
    counted = {v: (_aff({}, n), _aff({}, n)) for v, n in (representative or {}).items()}
    Marks = dict[int, tuple[tuple[_Aff, ...], tuple[int, ...]]]

    def visit(node: ir.Node | None, env: dict[str, Interval], trips: int, marks: Marks) -> int | None:
        """Place sites below ``node`` (``trips``: how many times it runs) into ``marks``; the
        elements they fill in all, or None if some read would be left without one."""
        if node is None or not _reads_tensor(node, tensor, statements):
            return 0
        if isinstance(node, ir.Block | ir.If):
            counts = [visit(c, env, trips, marks) for c in _children(node)]
            return None if None in counts else sum(counts)  # type: ignore[arg-type]
        if isinstance(node, ir.Mark):
            return visit(node.body, env, trips, marks)
        if not isinstance(node, ir.For) or ir.opens_parallel(node.body):
            return None
        if not node.kinds <= {ir.LoopKind.PARALLEL}:
            return None  # a reduction, vector or register-tile loop: no fill inside it
        iv = _loop_interval(node, env)
        count = _trips(iv, node.step) if iv is not None else None
        if count is None and counted:  # bounds of symbolic sizes: counted at their representative
            iv = _loop_interval(node, {**env, **counted})
            count = _trips(iv, node.step) if iv is not None else None
        if iv is None or count is None:
            return None
        fixed = {**env, node.var: (_aff({node.var: 1}, 0),) * 2}
        here, part = None, None
        boxes: list[tuple[Interval, ...]] = []
        if _box(node.body, tensor, statements, fixed, sizes, boxes) and boxes:
            part = _union(boxes, pack.bounds)
            if part is not None:
                elements = math.prod(part[1])
                # parts that move by at least their extent along some dimension do not overlap:
                # the loop's together are at most the tensor
                apart = any(
                    abs(dict(o[0]).get(node.var, 0)) * node.step >= e for o, e in zip(part[0], part[1])
                )
                copied = trips * (min(count * elements, total) if apart else count * elements)
                if elements <= limit and copied <= PART_REFILLS * total:
                    here = copied
        # smaller parts further in, where they cost no more copying in all
        inner: Marks = {}
        deeper = visit(node.body, fixed, trips * count, inner)
        if deeper is not None and (here is None or deeper <= here):
            marks.update(inner)
            return deeper
        if here is not None and part is not None:
            marks[id(node)] = part
        return here

    marks: Marks = {}
    return marks if visit(body, {}, 1, marks) is not None else {}


def _children(node: ir.Block | ir.If) -> tuple[ir.Node | None, ...]:
    return node.children if isinstance(node, ir.Block) else (node.then, node.other)


def _union(boxes, bounds) -> tuple[tuple[_Aff, ...], tuple[int, ...]] | None:
    """The origin and extent of the box holding ``boxes`` (per dimension, affine bounds moving
    together), the extent clamped to the tensor's where ``bounds`` gives it (None: a symbolic
    extent, never clamped); None if some bounds move differently."""
    origin, extent = [], []
    for d, n in enumerate(bounds):
        los = [b[d][0] for b in boxes]
        his = [b[d][1] for b in boxes]
        moving = los[0][0]
        if any(x[0] != moving for x in (*los, *his)):
            return None
        lo = min(x[1] for x in los)
        hi = max(x[1] for x in his)
        if not moving:  # a fixed range: the part of it inside the tensor
            lo, hi = max(lo, 0), hi if n is None else min(hi, n - 1)
        if hi < lo:
            return None
        origin.append((moving, lo))
        extent.append(hi - lo + 1 if n is None else min(hi - lo + 1, n))
    return tuple(origin), tuple(extent)


def _mark(
    node: ir.Node | None,
    marks: Mapping[int, tuple[_Aff, ...]],
    tensor: ir.Site,
    sites: dict[str, ir.Site],
    ahead: bool = False,
):
    """``node`` with the body of each loop in ``marks`` wrapped in a mark naming its site (with
    the next iteration's part when ``ahead`` and the part moves with the loop); ``tensor``: a
    site of the input without its origin, the others' template."""
    if node is None:
        return None
    if isinstance(node, ir.For):
        body = _mark(node.body, marks, tensor, sites, ahead)
        if id(node) in marks:
            label = f"part{len(sites)}"
            origin = marks[id(node)]
            site = replace(tensor, origin=tuple(_expr(a) for a in origin))
            if ahead and not node.degenerate and any(dict(a[0]).get(node.var) for a in origin):
                following = tuple(
                    _aff(dict(a[0]), a[1] + dict(a[0]).get(node.var, 0) * node.step) for a in origin
                )
                step = ir.Op("+", (ir.Var(node.var), ir.Int(node.step)))
                more = ir.substitute(node.cond, {node.var: step})
                site = replace(site, ahead=tuple(_expr(a) for a in following), more=more)
            sites[label] = site
            body = ir.PartFill(label, body, site)
        return replace(node, body=body)
    if isinstance(node, ir.Mark):
        return replace(node, body=_mark(node.body, marks, tensor, sites, ahead))
    if isinstance(node, ir.Block):
        return ir.Block(tuple(_mark(c, marks, tensor, sites, ahead) for c in node.children))
    if isinstance(node, ir.If):
        then = _mark(node.then, marks, tensor, sites, ahead)
        other = _mark(node.other, marks, tensor, sites, ahead)
        return ir.If(node.cond, then, other)
    return node
