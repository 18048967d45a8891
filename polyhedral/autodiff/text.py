"""TC text for the derived definitions: parentheses and the algebra of text (products,
negations, selections), expressions with tensors renamed to the versions read, declarations, and
``where`` clauses pinning a statement's ranges."""

from __future__ import annotations

from ..lang import ast as A
from ..lang.checked import CheckedDef, CheckedStatement
from ..lang.printer import expr_to_tc
from ..lang.sizes import SizeExpr


def paren(text: str) -> str:
    """``text`` in parentheses, unless it is atomic (a name, a number, a call or access, or
    parenthesised already)."""
    return text if _atomic(text) else f"({text})"


def _atomic(text: str) -> bool:
    if text.replace("_", "").replace(".", "").isalnum():
        return True
    if text.endswith(")") and text[0].isalpha():  # a call or access: f(...)
        depth = 0
        for k, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and ch == ")" and k != len(text) - 1:
                return False
        return True
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for k, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and k != len(text) - 1:
                return False
        return True
    return False


def mul(a: str, b: str) -> str:
    """The text of ``a * b``, a factor ``1.0`` left out."""
    if a == "1.0":
        return b
    if b == "1.0":
        return a
    return f"{paren(a)} * {paren(b)}"


def neg(a: str) -> str:
    """The text of ``-a`` (``-(x)`` negated gives ``x``)."""
    return a[2:-1] if a.startswith("-(") and _atomic(a[1:]) else f"-{paren(a)}"


def sel(cond: str, then: str, other: str) -> str:
    """The text of ``(cond) ? then : other``."""
    return f"({cond}) ? {paren(then)} : {paren(other)}"


def rename(e: A.Expr, reads: dict[str, str], cdef: CheckedDef) -> str:
    """Text of ``e`` with tensors renamed to the versions read and ``T.k`` spelled as sizes."""

    def go(n: A.Expr) -> A.Expr:
        if isinstance(n, A.Access):
            return A.Access(reads.get(n.tensor, n.tensor), tuple(go(a) for a in n.args))
        if isinstance(n, A.DimSize):
            return A.Ident(f"({cdef.tensor(n.tensor).shape[n.dim].to_tc()})")
        return A.with_children(n, tuple(go(k) for k in A.children(n)))

    return expr_to_tc(go(e))


def _dims(shape: tuple[SizeExpr, ...]) -> str:
    return "(" + ", ".join(s.to_tc() for s in shape) + ")"


def decl(cdef: CheckedDef, tensor: str, name: str) -> str:
    """The declaration ``dtype(sizes) name``, with the type and shape of ``tensor``."""
    info = cdef.tensor(tensor)
    return f"{info.dtype}{_dims(info.shape)} {name}"


def param_text(cdef: CheckedDef, p: A.Param) -> str:
    """The declaration of the forward's parameter ``p`` (a tensor or a rank-0 argument)."""
    if p.dims is None:
        return f"{p.type_name} {p.name}"
    return decl(cdef, p.name, p.name)


def where_clause(ranges: list[tuple[str, str, str]], extra: list[str]) -> str:
    """`` where v in lo:hi, ...`` for ``ranges`` (variable, lower, upper bound), followed by the
    conditions ``extra``; empty when there are neither."""
    clauses = [f"{v} in {paren(lo)}:{paren(hi)}" for v, lo, hi in ranges] + extra
    return (" where " + ", ".join(clauses)) if clauses else ""


def _range_parts(r) -> tuple[tuple[str, str, str], list[str]]:
    """A ``where v in lo:hi`` clause for the range ``r`` and the conditions a bound that is a
    ``max`` (``lo``) or ``min`` (``hi``) of several needs besides (range clauses take plain size
    expressions)."""
    los, his = r.lo.alternatives("max"), r.hi.alternatives("min")
    extra = [f"{r.var} >= {paren(a.to_tc())}" for a in los[1:]] + [
        f"{r.var} < {paren(a.to_tc())}" for a in his[1:]
    ]
    return (r.var, los[0].to_tc(), his[0].to_tc()), extra


def bound_conditions(var: str, r) -> list[str]:
    """``lo <= var < hi`` as conditions (``var`` solved away: a let-binding)."""
    return [f"{var} >= {paren(a.to_tc())}" for a in r.lo.alternatives("max")] + [
        f"{var} < {paren(a.to_tc())}" for a in r.hi.alternatives("min")
    ]


def statement_ranges(st: CheckedStatement) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The range clauses pinning ``st``'s variables, and conditions for min/max bounds."""
    ranges, extra = [], []
    for r in st.ranges:
        clause, more = _range_parts(r)
        ranges.append(clause)
        extra += more
    return ranges, extra
