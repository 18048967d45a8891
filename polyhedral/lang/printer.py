"""Canonical TC text: one spelling per program, used as a cache key and in ``tcjit show``.

Layout, comments and redundant parentheses are dropped, type aliases are spelled canonically
(``float`` -> ``float32``), and parentheses appear only where precedence needs them. Printing is a
fixpoint: ``parse(to_tc(p)) == p`` and ``to_tc(parse(to_tc(p))) == to_tc(p)``.
"""

from __future__ import annotations

from . import ast as A

__all__ = ["def_to_tc", "expr_to_tc", "to_tc"]

# Binding strength of binary operators (higher binds tighter), mirroring the parser.
_PREC = {
    "||": 1,
    "&&": 2,
    "==": 3,
    "!=": 3,
    "<": 3,
    "<=": 3,
    ">": 3,
    ">=": 3,
    "+": 4,
    "-": 4,
    "*": 5,
    "/": 5,
    "%": 5,
}
_UNARY = 6
_ATOM = 7


def _float_text(v: float) -> str:
    text = repr(float(v))
    if text in ("inf", "nan"):  # not produced by the parser; kept printable
        return text
    return text if ("." in text or "e" in text) else text + ".0"


def _prec(e: A.Expr) -> int:
    if isinstance(e, A.Select):
        return 0
    if isinstance(e, A.Binary):
        return _PREC[e.op]
    if isinstance(e, A.Unary):
        return _UNARY
    return _ATOM


def expr_to_tc(e: A.Expr) -> str:
    """Canonical text of one expression."""
    if isinstance(e, A.IntLit):
        return str(e.value)
    if isinstance(e, A.FloatLit):
        return _float_text(e.value)
    if isinstance(e, A.Ident):
        return e.name
    if isinstance(e, A.DimSize):
        return f"{e.tensor}.{e.dim}"
    if isinstance(e, A.Access):
        return f"{e.tensor}({', '.join(expr_to_tc(a) for a in e.args)})"
    if isinstance(e, A.Call):
        return f"{e.func}({', '.join(expr_to_tc(a) for a in e.args)})"
    if isinstance(e, A.Cast):
        return f"{e.to}({expr_to_tc(e.arg)})"
    if isinstance(e, A.Unary):
        inner = expr_to_tc(e.arg)
        if _prec(e.arg) < _UNARY or (isinstance(e.arg, A.Unary)) or inner.startswith("-"):
            inner = f"({inner})"
        return f"{e.op}{inner}"
    if isinstance(e, A.Binary):
        p = _PREC[e.op]
        lhs, rhs = expr_to_tc(e.lhs), expr_to_tc(e.rhs)
        if _prec(e.lhs) < p:  # left associative: equal precedence on the left needs none
            lhs = f"({lhs})"
        if _prec(e.rhs) <= p:
            rhs = f"({rhs})"
        return f"{lhs} {e.op} {rhs}"
    if isinstance(e, A.Select):
        cond = expr_to_tc(e.cond)
        if _prec(e.cond) == 0:
            cond = f"({cond})"
        then = expr_to_tc(e.then)  # between ? and : anything goes, but keep nesting readable
        if _prec(e.then) == 0:
            then = f"({then})"
        return f"{cond} ? {then} : {expr_to_tc(e.other)}"
    raise AssertionError(f"unknown expression {e!r}")


def _dims(dims: tuple[A.Dim, ...] | None) -> str:
    def one(v) -> str:
        return str(v) if isinstance(v, (str, int)) else expr_to_tc(v)

    return "" if dims is None else f"({', '.join(one(d.value) for d in dims)})"


def _clause(c: A.Clause) -> str:
    if isinstance(c, A.RangeClause):
        lo, hi = expr_to_tc(c.lo), expr_to_tc(c.hi)
        lo = f"({lo})" if _prec(c.lo) == 0 else lo
        hi = f"({hi})" if _prec(c.hi) == 0 else hi
        return f"{c.var} in {lo}:{hi}"
    if isinstance(c, A.ExistsClause):
        return f"exists {expr_to_tc(c.access)}"
    if isinstance(c, A.LetClause):
        return f"{c.name} = {expr_to_tc(c.value)}"
    return expr_to_tc(c.cond)


def statement_to_tc(s: A.Statement) -> str:
    """Canonical text of one statement (rank-0 tensors are written ``S()``)."""
    lhs = f"{s.tensor}({', '.join(expr_to_tc(i) for i in s.indices)})"
    text = f"{lhs} {s.op_text} {expr_to_tc(s.rhs)}"
    if s.where:
        text += " where " + ", ".join(_clause(c) for c in s.where)
    return text


def def_to_tc(d: A.Def) -> str:
    """Canonical text of one definition."""
    params = ", ".join(f"{p.type_name}{_dims(p.dims)} {p.name}" for p in d.params)
    rets = ", ".join(f"{r.type_name}{_dims(r.dims)} {r.name}" if r.type_name else r.name for r in d.returns)
    body = "".join(f"    {statement_to_tc(s)}\n" for s in d.body)
    return f"def {d.name}({params}) -> ({rets}) {{\n{body}}}\n"


def to_tc(program: A.Program) -> str:
    """Canonical text of a whole program."""
    return "\n".join(def_to_tc(d) for d in program.defs)
