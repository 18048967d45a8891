"""Kernel IR: the loop program isl's AST generator builds, as plain immutable Python values.

The printers (C for CPU kernels, CUDA later) never touch isl: :func:`from_isl_ast` walks an
``isl.AstNode`` once and returns these values. Loop iterators and statement arguments are integer
expressions over the iterators; statement instances are :class:`Run` nodes naming the Scop statement
(``S0``, ``S0_init``) and giving an expression for each of its dimensions.

Expressions (all int64):

* :class:`Int`, :class:`Var`;
* :class:`Op` with ``op`` one of ``+ - * neg min max floordiv div mod < <= > >= == && || select``:
  ``floordiv`` rounds down (isl's ``fdiv_q``), ``div`` is a division known to be exact or to have a
  non-negative dividend and divisor (``pdiv_q``/``div``), ``mod`` a remainder with a non-negative
  dividend (``pdiv_r``/``zdiv_r``), ``select`` is ``a ? b : c``.

Statements: :class:`For` (``kind``: ``"serial"``, or ``"parallel"``, ``"simd"``,
``"simd_reduction"``, ``"reduction"``, ``"unroll"`` (a register tile's point loop),
``"accumulate"`` (the reduction loop a register tile keeps its sums in registers across) joined
by ``+``, from marks ``kind@depth`` the CPU mapping
puts above one-member bands: a mark applies to the loop ``c{depth}`` right below it and to no other),
:class:`If`, :class:`Block`, :class:`Run` and :class:`Mark` (a mark that no loop absorbed: its band
had a single iteration).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

import islpy as isl

from ..polyhedral.errors import TCInternalError
from ..polyhedral.names import isl_name

__all__ = [
    "SYNC_MARK",
    "Block",
    "Blocks",
    "Buffer",
    "Expr",
    "For",
    "If",
    "Int",
    "Mark",
    "Node",
    "Op",
    "Run",
    "Threads",
    "Var",
    "free_vars",
    "from_isl_ast",
    "loops",
    "nodes",
    "opens_parallel",
    "render",
    "runs",
    "substitute",
]


# ---------------------------------------------------------------------------------------- expressions
@dataclass(frozen=True)
class Int:
    value: int


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Op:
    op: str
    args: tuple[Expr, ...]


Expr = Union[Int, Var, Op]  # noqa: UP007 (a runtime alias: `|` needs the classes' __or__)


# ----------------------------------------------------------------------------------------- statements
@dataclass(frozen=True)
class For:
    """``for (var = init; cond; var += step) body``; ``kind`` says how the target runs it."""

    var: str
    init: Expr
    cond: Expr
    step: int
    body: Node
    kind: str = "serial"
    degenerate: bool = False  # exactly one iteration: ``var = init`` then body


@dataclass(frozen=True)
class If:
    cond: Expr
    then: Node
    other: Node | None


@dataclass(frozen=True)
class Block:
    children: tuple[Node, ...]


@dataclass(frozen=True)
class Run:
    """One instance of Scop statement ``statement``; ``args[i]`` is the value of its dimension ``i``."""

    statement: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Mark:
    """``body`` marked ``name``: :data:`SYNC_MARK`, or a mark of the mapper's own."""

    name: str
    body: Node


#: The mark of a barrier: the printers turn it into ``__syncthreads()`` after the marked subtree
#: (the emulation into a change of barrier phase).
SYNC_MARK = "sync"


@dataclass(frozen=True)
class Buffer:
    """A promoted part of a tensor (GPU mapping): ``shape`` elements (declared sizes, padding
    included) of ``tensor``'s type in ``space``: ``"shared"`` (one per block, CUDA's shared
    memory) or ``"private"`` (one per thread: registers or local memory)."""

    name: str
    tensor: str
    space: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Blocks:
    """The emulated target only (:mod:`.emulation`): one CUDA kernel's launch, ``body`` run once
    per block of ``grid`` (x, y, z) in the call's order, with ``b0, b1, b2`` bound and
    ``buffers`` declared (each block has its own)."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    body: Node
    buffers: tuple[Buffer, ...] = ()


@dataclass(frozen=True)
class Threads:
    """The emulated target only: ``body`` (free of barriers) run once per thread of ``block``
    in the call's order, with ``t0, t1, t2`` bound; its end is a barrier."""

    block: tuple[int, int, int]
    body: Node


Node = Union[For, If, Block, Run, Mark, Blocks, Threads]  # noqa: UP007


# ------------------------------------------------------------------------------------ from the isl AST
_OPS = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "minus": "neg",
    "min": "min",
    "max": "max",
    "fdiv_q": "floordiv",
    "pdiv_q": "div",
    "div": "div",
    "pdiv_r": "mod",
    "zdiv_r": "mod",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "and_": "&&",
    "and_then": "&&",
    "or_": "||",
    "or_else": "||",
    "select": "select",
    "cond": "select",
}
_LOOP_MARKS = (
    "parallel",
    "parallel_reduction",
    "simd",
    "simd_reduction",
    "reduction",
    "unroll",
    "accumulate",
)
_OP_NAMES = {getattr(isl.ast_expr_op_type, name): op for name, op in _OPS.items()}


def _expr(e: isl.AstExpr, params: dict[str, int]) -> Expr:
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return Int(int(e.get_val().to_python()))
    if t == isl.ast_expr_type.id:
        name = e.get_id().get_name()
        return Int(params[name]) if name in params else Var(name)
    op = _OP_NAMES.get(e.get_op_type())
    if op is None:
        raise TCInternalError(f"unexpected isl AST operation {e.get_op_type()} in {e.to_C_str()}")
    args = tuple(_expr(e.get_op_arg(i), params) for i in range(e.get_op_n_arg()))
    if op in ("min", "max") and len(args) > 2:  # n-ary in isl: fold
        folded = args[0]
        for a in args[1:]:
            folded = Op(op, (folded, a))
        return folded
    return Op(op, args)


def from_isl_ast(node: isl.AstNode, params: dict[str, int] | None = None) -> Node:
    """The IR of isl AST ``node``; the sizes named in ``params`` (TC names) become their values."""
    return _from_ast(node, {isl_name(k): v for k, v in (params or {}).items()})


def _from_ast(node: isl.AstNode, params: dict[str, int]) -> Node:
    t = node.get_type()
    if t == isl.ast_node_type.block:
        lst = node.block_get_children()
        return Block(tuple(_from_ast(lst.get_at(i), params) for i in range(lst.n_ast_node())))
    if t == isl.ast_node_type.for_:
        var = node.for_get_iterator().get_id().get_name()
        inc = _expr(node.for_get_inc(), params)
        if not isinstance(inc, Int) or inc.value <= 0:
            raise TCInternalError(f"loop {var} has a non-constant or non-positive step")
        body = _from_ast(node.for_get_body(), params)
        init = _expr(node.for_get_init(), params)
        if node.for_is_degenerate():
            return For(var, init, Op("==", (Var(var), init)), inc.value, body, degenerate=True)
        return For(var, init, _expr(node.for_get_cond(), params), inc.value, body)
    if t == isl.ast_node_type.if_:
        other = _from_ast(node.if_get_else_node(), params) if node.if_has_else_node() else None
        return If(_expr(node.if_get_cond(), params), _from_ast(node.if_get_then_node(), params), other)
    if t == isl.ast_node_type.mark:
        name = node.mark_get_id().get_name()
        body = _from_ast(node.mark_get_node(), params)
        name, _, depth = name.partition("@")
        if name in _LOOP_MARKS:
            body = _apply_mark(body, name, f"c{depth}")
        return Mark(name, body)
    if t == isl.ast_node_type.user:
        call = node.user_get_expr()
        if call.get_op_type() != isl.ast_expr_op_type.call:
            raise TCInternalError(f"unexpected user node {call.to_C_str()}")
        stmt = call.get_op_arg(0).get_id().get_name()
        args = tuple(_expr(call.get_op_arg(i), params) for i in range(1, call.get_op_n_arg()))
        return Run(stmt, args)
    raise TCInternalError(f"unexpected isl AST node type {t}")


def _apply_mark(body: Node, kind: str, var: str) -> Node:
    """Give loop ``var`` (the marked band's) the mark's kind: the body itself, or the loops over
    ``var`` directly in a block (isl splits a band over several statements into several loops
    when some statements sit at a constant position of it)."""
    if isinstance(body, For) and body.var == var and not body.degenerate:
        new = kind if body.kind == "serial" else "+".join(sorted({*body.kind.split("+"), kind}))
        return For(body.var, body.init, body.cond, body.step, body.body, kind=new)
    if isinstance(body, Block):
        return Block(
            tuple(_apply_mark(c, kind, var) if isinstance(c, (For, Mark)) else c for c in body.children)
        )
    if isinstance(body, Mark):  # two marks on one band: both apply to its loop
        return Mark(body.name, _apply_mark(body.body, kind, var))
    return body


# ------------------------------------------------------------------------------------------ queries
def free_vars(e: Expr) -> frozenset[str]:
    """The variables ``e`` mentions."""
    if isinstance(e, Var):
        return frozenset((e.name,))
    if isinstance(e, Op):
        out: frozenset[str] = frozenset()
        for a in e.args:
            out |= free_vars(a)
        return out
    return frozenset()


def substitute(e: Expr, values: dict[str, Expr]) -> Expr:
    """``e`` with the variables in ``values`` replaced."""
    if isinstance(e, Var):
        return values.get(e.name, e)
    if isinstance(e, Op):
        return Op(e.op, tuple(substitute(a, values) for a in e.args))
    return e


def map_runs(node: Node, fn: Callable[[Run], Node]) -> Node:
    """``node`` with each statement instance ``r`` replaced by ``fn(r)`` (loops, conditions,
    blocks and marks rebuilt around them)."""
    if isinstance(node, Run):
        return fn(node)
    if isinstance(node, Block):
        return Block(tuple(map_runs(c, fn) for c in node.children))
    if isinstance(node, For):
        return For(
            node.var, node.init, node.cond, node.step, map_runs(node.body, fn), node.kind, node.degenerate
        )
    if isinstance(node, If):
        return If(
            node.cond, map_runs(node.then, fn), None if node.other is None else map_runs(node.other, fn)
        )
    if isinstance(node, Mark):
        return Mark(node.name, map_runs(node.body, fn))
    return node


def nodes(node: Node | None):
    """Every statement node of ``node`` (``node`` first), in pre-order."""
    if node is None:
        return
    yield node
    if isinstance(node, If):
        yield from nodes(node.then)
        yield from nodes(node.other)
    elif isinstance(node, Block):
        for c in node.children:
            yield from nodes(c)
    elif isinstance(node, (For, Mark, Blocks, Threads)):
        yield from nodes(node.body)


def loops(node: Node) -> list[For]:
    """Every loop of ``node``, in pre-order."""
    return [n for n in nodes(node) if isinstance(n, For)]


def runs(node: Node | None) -> list[Run]:
    """Every statement instance in ``node``, in order: loops, guards and launches included."""
    return [n for n in nodes(node) if isinstance(n, Run)]


def opens_parallel(node: Node | None) -> bool:
    """Whether ``node`` holds a loop run by threads (a ``parallel`` or ``parallel_reduction``
    kind); a GPU launch counts as one."""
    if node is None or isinstance(node, Run):
        return False
    if isinstance(node, For):
        return bool({"parallel", "parallel_reduction"} & set(node.kind.split("+"))) or opens_parallel(
            node.body
        )
    if isinstance(node, Block):
        return any(opens_parallel(c) for c in node.children)
    if isinstance(node, Mark):
        return opens_parallel(node.body)
    if isinstance(node, If):
        return opens_parallel(node.then) or opens_parallel(node.other)
    return True


# ------------------------------------------------------------------------------------------ reading
_INFIX = {"+", "-", "*", "<", "<=", ">", ">=", "==", "&&", "||"}


def render_expr(e: Expr) -> str:
    """``e`` as text: infix operators parenthesised, the others as calls (``floordiv(i, 4)``)."""
    if isinstance(e, Int):
        return str(e.value)
    if isinstance(e, Var):
        return e.name
    args = [render_expr(a) for a in e.args]
    if e.op in _INFIX and len(args) == 2:
        return f"({args[0]} {e.op} {args[1]})"
    if e.op == "neg":
        return f"-{args[0]}"
    if e.op == "select":
        return f"({args[0]} ? {args[1]} : {args[2]})"
    return f"{e.op}({', '.join(args)})"


def render(node: Node | None, indent: str = "") -> str:
    """Kernel IR ``node`` as indented text, one statement per line (``tcjit show --stage ir``):
    loops with their kind, conditions, marks, statement instances with their arguments, and the
    emulated target's launches, blocks and threads with their buffers."""
    lines: list[str] = []

    def visit(n: Node | None, pad: str) -> None:
        if n is None:
            return
        if isinstance(n, Block):
            for c in n.children:
                visit(c, pad)
        elif isinstance(n, For):
            if n.degenerate:
                lines.append(f"{pad}let {n.var} = {render_expr(n.init)}  # {n.kind}, one iteration")
            else:
                step = f"{n.var} += {n.step}"
                lines.append(
                    f"{pad}for {n.var} = {render_expr(n.init)}; {render_expr(n.cond)}; {step}  # {n.kind}"
                )
            visit(n.body, pad + "  ")
        elif isinstance(n, If):
            lines.append(f"{pad}if {render_expr(n.cond)}:")
            visit(n.then, pad + "  ")
            if n.other is not None:
                lines.append(f"{pad}else:")
                visit(n.other, pad + "  ")
        elif isinstance(n, Run):
            lines.append(f"{pad}{n.statement}({', '.join(render_expr(a) for a in n.args)})")
        elif isinstance(n, Mark):
            lines.append(f"{pad}mark {n.name!r}:")
            visit(n.body, pad + "  ")
        elif isinstance(n, Blocks):
            lines.append(f"{pad}blocks of grid {n.grid}, {n.block} threads each:")
            for b in n.buffers:
                lines.append(
                    f"{pad}  {b.space} {b.name}{''.join(f'[{d}]' for d in b.shape)}  # of {b.tensor}"
                )
            visit(n.body, pad + "  ")
        elif isinstance(n, Threads):
            lines.append(f"{pad}threads {n.block}:")
            visit(n.body, pad + "  ")
        else:
            raise TCInternalError(f"no text for kernel IR node {type(n).__name__}")

    visit(node, indent)
    return "\n".join(lines)
