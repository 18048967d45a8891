"""Range inference: a rectangular range ``[lo, hi)`` for every index variable of a statement.

The algorithm is TC's. Variables fixed by ``where i in lo:hi`` come first. Then, in rounds, a
variable that appears *alone* in a subscript -- every other variable of that subscript being solved
already -- gets the largest interval that keeps every such subscript inside its tensor, the
intersection over its uses. In ``A(i) +=! B(i + k) * K(k)`` round 1 solves ``k`` from ``K(k)`` and
round 2 solves ``i`` from ``B(i + k)``: ``0 <= i < I - K + 1``, a "valid" convolution. Division
floors: ``A(i) = B(2 * i)`` gives ``0 <= i < (I + 1) / 2``.

Subscripts that are not affine in the index variables (gathers such as ``LUT(I(b, l), d)``, products
of variables) do not feed inference; their bounds are checked when the program runs.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass

from . import ast as A
from .sizes import SizeExpr, SizeExprTooComplex, const, smax, smin, sym

__all__ = ["Affine", "Constraint", "IndexRange", "affine_form", "extreme", "solve_ranges"]


@dataclass(frozen=True)
class Affine:
    """``sum(coeffs[v] * v) + rest``: an affine function of index variables over size symbols."""

    coeffs: tuple[tuple[str, int], ...]
    rest: SizeExpr

    @staticmethod
    def of(coeffs: Mapping[str, int], rest: SizeExpr) -> Affine:
        return Affine(tuple(sorted((v, c) for v, c in coeffs.items() if c != 0)), rest)

    @property
    def vars(self) -> frozenset[str]:
        return frozenset(v for v, _ in self.coeffs)

    def coeff(self, var: str) -> int:
        return dict(self.coeffs).get(var, 0)

    def __add__(self, other: Affine) -> Affine:
        d = dict(self.coeffs)
        for v, c in other.coeffs:
            d[v] = d.get(v, 0) + c
        return Affine.of(d, self.rest + other.rest)

    def scale(self, k: int) -> Affine:
        return Affine.of({v: c * k for v, c in self.coeffs}, self.rest * k)


def affine_form(
    e: A.Expr,
    index_vars: Container[str],
    is_size: Callable[[str], bool],
    dim_size: Callable[[str, int], SizeExpr],
) -> Affine | None:
    """``e`` as an affine function of the index variables over size symbols, or ``None``.

    Accepts literals, index variables, sizes, ``T.k``, ``+``, ``-``, multiplication by a constant
    (or of sizes by sizes) and floor division of a size expression by a positive constant;
    anything else (a product of variables, a tensor value) is not affine.
    """
    if isinstance(e, A.IntLit):
        return Affine.of({}, const(e.value))
    if isinstance(e, A.Ident):
        if e.name in index_vars:
            return Affine.of({e.name: 1}, const(0))
        return Affine.of({}, sym(e.name)) if is_size(e.name) else None
    if isinstance(e, A.DimSize):
        return Affine.of({}, dim_size(e.tensor, e.dim))
    if isinstance(e, A.Cast) and e.to in ("int32", "int64"):
        return affine_form(e.arg, index_vars, is_size, dim_size)
    if isinstance(e, A.Unary) and e.op == "-":
        a = affine_form(e.arg, index_vars, is_size, dim_size)
        return a.scale(-1) if a else None
    if not (isinstance(e, A.Binary) and e.op in ("+", "-", "*", "/")):
        return None
    l = affine_form(e.lhs, index_vars, is_size, dim_size)
    r = affine_form(e.rhs, index_vars, is_size, dim_size)
    if l is None or r is None:
        return None
    if e.op == "+":
        return l + r
    if e.op == "-":
        return l + r.scale(-1)
    if e.op == "*":
        if not l.coeffs and l.rest.is_const:
            return r.scale(l.rest.const)
        if not r.coeffs and r.rest.is_const:
            return l.scale(r.rest.const)
        if not l.coeffs and not r.coeffs:
            try:
                return Affine.of({}, l.rest * r.rest)
            except SizeExprTooComplex:
                return None
        return None
    if not l.coeffs and not r.coeffs and r.rest.is_const and r.rest.const > 0:
        return Affine.of({}, l.rest.floordiv(r.rest.const))
    return None


@dataclass(frozen=True)
class IndexRange:
    """The half-open range ``lo <= var < hi`` of one index variable."""

    var: str
    lo: SizeExpr
    hi: SizeExpr

    @property
    def extent(self) -> SizeExpr:
        return self.hi - self.lo

    def __str__(self) -> str:
        return f"{self.lo} <= {self.var} < {self.hi}"


@dataclass(frozen=True)
class Constraint:
    """``0 <= subscript < bound``: one subscript of one access, with where it came from."""

    subscript: Affine
    bound: SizeExpr
    origin: object = None  # the AST node, for messages


def extreme(a: Affine, ranges: Mapping[str, IndexRange], upper: bool) -> SizeExpr:
    """The largest (``upper``) or smallest value of ``a`` over the box given by ``ranges``.

    Exact for a box: each variable independently takes the end of its range that maximises (or
    minimises) its term.
    """
    out = a.rest
    for v, c in a.coeffs:
        r = ranges[v]
        take_hi = (c > 0) == upper
        out = out + (r.hi - 1 if take_hi else r.lo) * c
    return out


def _solve_one(var: str, c: Constraint, ranges: Mapping[str, IndexRange]) -> tuple[SizeExpr, SizeExpr]:
    """The interval of ``var`` that keeps ``0 <= subscript <= bound - 1`` for every other variable."""
    a = c.subscript.coeff(var)
    others = Affine.of({v: k for v, k in c.subscript.coeffs if v != var}, c.subscript.rest)
    rmin, rmax = extreme(others, ranges, False), extreme(others, ranges, True)
    top = c.bound - 1
    if a > 0:  # 0 <= a*v + r and a*v + r <= top
        lo = (-rmin + (a - 1)).floordiv(a)
        hi = (top - rmax).floordiv(a) + 1
    else:
        b = -a  # 0 <= -b*v + r  =>  v <= rmin / b;  -b*v + r <= top  =>  v >= (rmax - top) / b
        hi = rmin.floordiv(b) + 1
        lo = (rmax - top + (b - 1)).floordiv(b)
    return lo, hi


def solve_ranges(
    variables: Iterable[str],
    fixed: Mapping[str, IndexRange],
    constraints: Iterable[Constraint],
    on_unsolved: Callable[[str], Exception],
) -> dict[str, IndexRange]:
    """Infer the range of every variable in ``variables`` (those in ``fixed`` are given).

    :arg variables: the statement's index variables, in order.
    :arg fixed: ranges from ``where`` clauses.
    :arg constraints: one per affine subscript of every access that feeds inference.
    :arg on_unsolved: builds the exception raised for a variable no round can solve.
    :returns: variable -> range, for every variable.
    """
    variables = list(variables)
    constraints = list(constraints)
    ranges: dict[str, IndexRange] = dict(fixed)
    while True:
        pending = [v for v in variables if v not in ranges]
        if not pending:
            return ranges
        solved: dict[str, IndexRange] = {}
        for v in pending:
            los, his = [], []
            for c in constraints:
                vs = c.subscript.vars
                if v in vs and all(u == v or u in ranges for u in vs):
                    lo, hi = _solve_one(v, c, ranges)
                    los.append(lo)
                    his.append(hi)
            if los:
                solved[v] = IndexRange(v, smax(*los), smin(*his))
        if not solved:
            raise on_unsolved(pending[0])
        ranges.update(solved)


def zero_range(var: str, hi: SizeExpr) -> IndexRange:
    """``0 <= var < hi``."""
    return IndexRange(var, const(0), hi)
