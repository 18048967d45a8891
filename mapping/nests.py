"""Loop nests of the kernel IR: pure helpers that read a nest's bounds and rebuild nests.

Used by the passes that reshape a nest (:mod:`.tile_forms`, :mod:`.reduction_forms`); none
of them decides anything: each says what a nest is, or builds the nest it is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from . import ir
from .parts import constant_range

#: The kinds that make a loop a register tile's point loop.
POINT_KINDS = frozenset({ir.LoopKind.UNROLL, ir.LoopKind.SIMD})

__all__ = [
    "POINT_KINDS",
    "constant_span",
    "constant_upper_bound",
    "extent",
    "flat_runs",
    "full_tiles",
    "lane_strips",
    "moves_by_one",
    "rebuild",
    "rebuild_chain",
    "substitute_runs",
    "variable_bounds",
    "without_kind",
]


def lane_strips(vloop: ir.For, points: Sequence[ir.For], node: ir.Node, lanes: int) -> ir.Block:
    """The dot-product forms' reduction loop ``vloop``, strip-mined (between the bounds
    ``tc_lo``, ``tc_main``, ``tc_hi`` the printer declares): whole strips of ``lanes``
    iterations, the points of each step in a ``simd`` lane loop ``tc_l``, then the remaining
    iterations."""
    lane_loop = ir.For(
        "tc_l",
        ir.Int(0),
        ir.Op("<", (ir.Var("tc_l"), ir.Int(lanes))),
        1,
        substitute_runs(node, {vloop.var: ir.Op("+", (ir.Var("tc_k"), ir.Var("tc_l")))}),
        kinds=frozenset({ir.LoopKind.SIMD}),
    )
    main = ir.For(
        "tc_k",
        ir.Var("tc_lo"),
        ir.Op("<", (ir.Var("tc_k"), ir.Var("tc_main"))),
        lanes,
        rebuild(points, lane_loop),
    )
    tail = ir.For(
        vloop.var,
        ir.Var("tc_main"),
        ir.Op("<=", (ir.Var(vloop.var), ir.Var("tc_hi"))),
        1,
        rebuild(points, node),
    )
    return ir.Block((main, tail))


def flat_runs(node: ir.Node) -> list[ir.Run] | None:
    """The statement instances of a loop-free ``node`` in order; None if it has loops or guards."""
    if isinstance(node, ir.Run):
        return [node]
    if isinstance(node, ir.Mark):
        return flat_runs(node.body)
    if isinstance(node, ir.Block):
        out: list[ir.Run] = []
        for c in node.children:
            part = flat_runs(c)
            if part is None:
                return None
            out += part
        return out
    return None


def substitute_runs(node: ir.Node, values: dict[str, ir.Expr]) -> ir.Node:
    """Loop-free ``node`` with ``values`` substituted into its statement arguments."""
    if isinstance(node, ir.Run):
        return ir.Run(node.statement, tuple(ir.substitute(a, values) for a in node.args))
    if isinstance(node, ir.Mark):
        return replace(node, body=substitute_runs(node.body, values))
    return ir.Block(tuple(substitute_runs(c, values) for c in node.children))


def extent(loop: ir.For) -> int | None:
    """How many iterations ``loop`` runs, if its bounds are constants."""
    if loop.degenerate:
        return 1
    hi = constant_upper_bound(loop.cond, loop.var)
    if hi is None or variable_bounds(loop.cond) or not isinstance(loop.init, ir.Int) or loop.step < 1:
        return None
    return max(0, (hi - loop.init.value) // loop.step + 1)


def rebuild(points: Sequence[ir.For], body: ir.Node) -> ir.Node:
    """The nest of ``points`` (copies of the loops) around ``body``."""
    for p in reversed(points):
        body = ir.For(p.var, p.init, p.cond, p.step, body, kinds=p.kinds, degenerate=p.degenerate)
    return body


def without_kind(loop: ir.For, kind: ir.LoopKind) -> ir.For:
    """``loop`` without the kind ``kind``."""
    return replace(loop, kinds=loop.kinds - {kind})


def full_tiles(points: Sequence[ir.For]) -> tuple[list[ir.For], list[ir.Expr]]:
    """A register tile's point loops with constant bounds, and the conditions under which a
    tile is full. Partial tiles (extents that the tile size does not divide) have bounds such as
    ``min(2, 63 - 3 * c3)``, which the compiler cannot unroll; full tiles get a copy with constant
    bounds, which it unrolls and keeps in registers."""
    full, conds = [], []
    for p in points:
        if p.degenerate:
            full.append(p)
            continue
        hi = constant_upper_bound(p.cond, p.var)
        conds += [ir.Op(">=", (e, ir.Int(hi))) for e in variable_bounds(p.cond)]
        full.append(ir.For(p.var, p.init, ir.Op("<=", (ir.Var(p.var), ir.Int(hi))), 1, p.body, kinds=p.kinds))
    return full, conds


def variable_bounds(cond: ir.Expr) -> list[ir.Expr]:
    """The non-constant operands of the ``min`` bounding a point loop (a partial tile's bounds)."""
    found: list[ir.Expr] = []

    def visit(e: ir.Expr) -> None:
        if isinstance(e, ir.Op) and e.op == "min":
            for a in e.args:
                visit(a)
        elif not isinstance(e, ir.Int):
            found.append(e)

    visit(cond.args[1])
    if cond.op == "<":
        return [ir.Op("-", (e, ir.Int(1))) for e in found]
    return found


def rebuild_chain(node: ir.Node, points: Sequence[ir.For]) -> ir.Node:
    """``node`` (a register tile's loop body) with its point loops replaced by ``points``."""
    if isinstance(node, ir.Mark):
        return rebuild_chain(node.body, points)
    if isinstance(node, ir.For) and not (node.degenerate or node.kinds & POINT_KINDS):
        return ir.For(
            node.var, node.init, node.cond, node.step, rebuild_chain(node.body, points), kinds=node.kinds
        )
    inner = node
    for _ in points:
        while isinstance(inner, ir.Mark):
            inner = inner.body
        inner = inner.body
    return rebuild(points, inner)


def constant_span(loop: ir.For) -> tuple[int, int] | None:
    """``[first, last + 1)`` of a loop with exact constant bounds and step 1
    (:func:`~tcjit.mapping.parts.constant_range`); None otherwise."""
    span = None if loop.degenerate else constant_range(loop)
    return None if span is None or span.step != 1 else (span.start, span.stop)


def constant_upper_bound(cond: ir.Expr, var: str) -> int | None:
    """The largest value of ``var`` that ``cond`` (``var <= e`` / ``var < e``) allows: the
    smallest integer operand of ``e``'s ``min`` (None if there is none, or ``cond`` is of
    another form)."""
    if not (isinstance(cond, ir.Op) and cond.op in ("<", "<=") and cond.args[0] == ir.Var(var)):
        return None
    bound, shift = cond.args[1], (1 if cond.op == "<" else 0)
    found: list[int] = []

    def visit(e: ir.Expr) -> None:
        if isinstance(e, ir.Int):
            found.append(e.value)
        elif isinstance(e, ir.Op) and e.op == "min":
            for a in e.args:
                visit(a)

    visit(bound)
    return min(found) - shift if found else None


def moves_by_one(e: ir.Expr, var: str) -> bool:
    """Whether ``e`` is ``var`` or ``x + var`` with ``x`` free of ``var``."""
    if e == ir.Var(var):
        return True
    return (
        isinstance(e, ir.Op)
        and e.op == "+"
        and e.args[1] == ir.Var(var)
        and var not in ir.free_vars(e.args[0])
    )
