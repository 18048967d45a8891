"""The kernel IR (:mod:`.ir`) of an isl AST: :func:`from_isl_ast` walks an ``isl.AstNode`` once
and returns plain values, so that nothing after it (the IR passes, the printers) touches isl;
:func:`expr_from_isl` converts one AST expression (a launch's grid size)."""

from __future__ import annotations

import islpy as isl

from ..polyhedral.errors import TCInternalError
from ..polyhedral.names import isl_name
from .ir import Block, Expr, For, If, Int, LoopKind, Mark, Node, Op, Run, Var

__all__ = ["expr_from_isl", "from_isl_ast"]


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
_LOOP_MARKS = frozenset(LoopKind)  # the marks that give the loop below them a kind
_OP_NAMES = {getattr(isl.ast_expr_op_type, name): op for name, op in _OPS.items()}


def _expr(e: isl.AstExpr, params: dict[str, int | str]) -> Expr:
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return Int(int(e.get_val().to_python()))
    if t == isl.ast_expr_type.id:
        name = e.get_id().get_name()
        if name not in params:
            return Var(name)
        value = params[name]
        return Var(value) if isinstance(value, str) else Int(value)
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


def expr_from_isl(e: isl.AstExpr, params: dict[str, int | str] | None = None) -> Expr:
    """The IR of isl AST expression ``e``, the sizes in ``params`` as :func:`from_isl_ast` takes them."""
    return _expr(e, {isl_name(k): v for k, v in (params or {}).items()})


def from_isl_ast(node: isl.AstNode, params: dict[str, int | str] | None = None) -> Node:
    """The IR of isl AST ``node``; the sizes named in ``params`` (TC names) become their values,
    an ``int``, or the variable a ``str`` names (a symbolic size's C name)."""
    return _from_ast(node, {isl_name(k): v for k, v in (params or {}).items()})


def _from_ast(node: isl.AstNode, params: dict[str, int | str]) -> Node:
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
        return For(body.var, body.init, body.cond, body.step, body.body, kinds=body.kinds | {LoopKind(kind)})
    if isinstance(body, Block):
        return Block(
            tuple(_apply_mark(c, kind, var) if isinstance(c, (For, Mark)) else c for c in body.children)
        )
    if isinstance(body, Mark):  # two marks on one band: both apply to its loop
        return Mark(body.name, _apply_mark(body.body, kind, var))
    return body
