"""The abstract syntax tree of TC programs: immutable values.

Spans are carried for diagnostics but take no part in equality, so two parses of texts that differ
only in layout and comments compare equal. The checker (:mod:`.check`) returns new trees whose
expressions carry their type (``dtype``) and identifiers their resolved ``kind``; it never mutates
these.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import Span
from .types import ScalarType

__all__ = [
    "Access",
    "Binary",
    "Call",
    "Cast",
    "Clause",
    "ConditionClause",
    "Def",
    "Dim",
    "DimSize",
    "Equivalent",
    "ExistsClause",
    "Expr",
    "FloatLit",
    "Ident",
    "IntLit",
    "LetClause",
    "Param",
    "Program",
    "RangeClause",
    "Return",
    "Select",
    "Statement",
    "Unary",
    "index_vars",
    "walk",
]

_NOSPAN = Span(0, 0, 1, 1)


def _span() -> Span:
    return field(default=_NOSPAN, compare=False, repr=False)


def _type():
    return field(default=None, compare=False, repr=False)


# --------------------------------------------------------------------------------------------- exprs
@dataclass(frozen=True)
class IntLit:
    """An integer literal (``int32`` unless context makes it another integer or float type)."""

    value: int
    span: Span = _span()
    dtype: ScalarType | None = _type()


@dataclass(frozen=True)
class FloatLit:
    """A float literal (``1.5``, ``1e-5``); takes the statement's float type."""

    value: float
    span: Span = _span()
    dtype: ScalarType | None = _type()


@dataclass(frozen=True)
class Ident:
    """A name used as a value.

    After checking, ``kind`` is ``"index"`` (an index variable), ``"size"`` (a size symbol),
    ``"scalar"`` (a rank-0 argument) or ``"let"`` (a let-binding, substituted away by the checker).
    """

    name: str
    span: Span = _span()
    dtype: ScalarType | None = _type()
    kind: str | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Access:
    """A tensor element ``T(e1, ..., en)``; rank-0 tensors are ``T()`` or plain ``T``."""

    tensor: str
    args: tuple[Expr, ...]
    span: Span = _span()
    dtype: ScalarType | None = _type()


@dataclass(frozen=True)
class Call:
    """A builtin function call such as ``exp(x)`` or ``fmax(a, b)``, or ``min``/``max``."""

    func: str
    args: tuple[Expr, ...]
    span: Span = _span()
    dtype: ScalarType | None = _type()


@dataclass(frozen=True)
class Cast:
    """A conversion written as a call of a type name: ``float(x)``, ``int32(x)``."""

    to: str
    arg: Expr
    span: Span = _span()
    dtype: ScalarType | None = _type()


@dataclass(frozen=True)
class Unary:
    """``-x`` or ``!x``."""

    op: str
    arg: Expr
    span: Span = _span()
    dtype: ScalarType | None = _type()


@dataclass(frozen=True)
class Binary:
    """``a op b`` for ``op`` in ``|| && == != < <= > >= + - * / %``."""

    op: str
    lhs: Expr
    rhs: Expr
    span: Span = _span()
    dtype: ScalarType | None = _type()


@dataclass(frozen=True)
class Select:
    """``cond ? a : b``."""

    cond: Expr
    then: Expr
    other: Expr
    span: Span = _span()
    dtype: ScalarType | None = _type()


@dataclass(frozen=True)
class DimSize:
    """``T.k``: the size of dimension ``k`` of tensor ``T`` (an integer value)."""

    tensor: str
    dim: int
    span: Span = _span()
    dtype: ScalarType | None = _type()


Expr = IntLit | FloatLit | Ident | Access | Call | Cast | Unary | Binary | Select | DimSize


# ------------------------------------------------------------------------------------------- clauses
@dataclass(frozen=True)
class RangeClause:
    """``where i in lo:hi`` (half-open)."""

    var: str
    lo: Expr
    hi: Expr
    span: Span = _span()


@dataclass(frozen=True)
class ExistsClause:
    """``where exists T(i, ...)``: an access that only feeds range inference."""

    access: Access
    span: Span = _span()


@dataclass(frozen=True)
class LetClause:
    """``where x = expr``: a let-binding usable in the statement."""

    name: str
    value: Expr
    span: Span = _span()


@dataclass(frozen=True)
class ConditionClause:
    """``where h - r_kh >= 0`` [ext]: an affine condition restricting the iteration domain."""

    cond: Expr
    span: Span = _span()


Clause = RangeClause | ExistsClause | LetClause | ConditionClause


# ---------------------------------------------------------------------------------------- statements
@dataclass(frozen=True)
class Equivalent:
    """``<=> name(args)`` after a right-hand side: TC's annotation naming an equivalent
    computation (``Z(i) = 1 / (1 + exp(-X(i))) <=> sigmoid(X(i))``). Its arguments are checked
    like the right-hand side's expressions; it has no effect on what the statement computes."""

    name: str
    args: tuple[Expr, ...]
    span: Span = _span()


@dataclass(frozen=True)
class Statement:
    """``T(i, j, ...) op rhs where ...``.

    :ivar tensor: the tensor written.
    :ivar indices: the left-hand side subscripts (plain identifiers, or affine for accumulations).
    :ivar op: ``"="``, ``"+="``, ``"*="``, ``"min="`` or ``"max="``.
    :ivar init: whether the operator carries ``!`` (initialise with the operator's identity first).
    :ivar equivalent: TC's ``<=>`` annotation, if any (checked, then ignored).
    """

    tensor: str
    indices: tuple[Expr, ...]
    op: str
    init: bool
    rhs: Expr
    where: tuple[Clause, ...] = ()
    span: Span = _span()
    lhs_span: Span = _span()
    equivalent: Equivalent | None = None

    @property
    def is_reduction(self) -> bool:
        return self.op != "="

    @property
    def op_text(self) -> str:
        return self.op + ("!" if self.init else "")


# ---------------------------------------------------------------------------------------- signatures
@dataclass(frozen=True)
class Dim:
    """One dimension of a declared tensor: a size symbol (``str``), a literal size (``int``), or
    [ext] a size expression (``H - KH + 1``) over symbols that other dimensions bind."""

    value: str | int | Expr
    span: Span = _span()


@dataclass(frozen=True)
class Param:
    """An input ``float(M, K) A``; ``dims`` is ``None`` for a rank-0 scalar argument ``float alpha``."""

    name: str
    type_name: str
    dims: tuple[Dim, ...] | None
    span: Span = _span()

    @property
    def rank(self) -> int:
        return len(self.dims) if self.dims else 0


@dataclass(frozen=True)
class Return:
    """An output: a bare name (``O``) or typed (``float(M, N) O``; sizes optional: ``int32 O``)."""

    name: str
    type_name: str | None = None
    dims: tuple[Dim, ...] | None = None
    span: Span = _span()


@dataclass(frozen=True)
class Def:
    """``def name(params) -> (returns) { statements }``."""

    name: str
    params: tuple[Param, ...]
    returns: tuple[Return, ...]
    body: tuple[Statement, ...]
    span: Span = _span()
    name_span: Span = _span()


@dataclass(frozen=True)
class Program:
    """A parsed TC source: its definitions in order, and the text they came from."""

    defs: tuple[Def, ...]
    source: str = field(default="", compare=False, repr=False)

    def get(self, name: str) -> Def | None:
        """The definition called ``name``, or ``None``."""
        return next((d for d in self.defs if d.name == name), None)


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``e``."""
    if isinstance(e, (Access, Call)):
        return e.args
    if isinstance(e, (Cast, Unary)):
        return (e.arg,)
    if isinstance(e, Binary):
        return (e.lhs, e.rhs)
    if isinstance(e, Select):
        return (e.cond, e.then, e.other)
    return ()


def with_children(e: Expr, kids: tuple[Expr, ...]) -> Expr:
    """``e`` with its direct sub-expressions (in :func:`children`'s order) replaced by ``kids``."""
    if isinstance(e, (Access, Call)):
        return replace(e, args=kids)
    if isinstance(e, (Cast, Unary)):
        return replace(e, arg=kids[0])
    if isinstance(e, Binary):
        return replace(e, lhs=kids[0], rhs=kids[1])
    if isinstance(e, Select):
        return replace(e, cond=kids[0], then=kids[1], other=kids[2])
    return e


def index_vars(e: Expr) -> set[str]:
    """The index variables a checked expression mentions."""
    return {n.name for n in walk(e) if isinstance(n, Ident) and n.kind == "index"}


def walk(e: Expr):
    """Yield ``e`` and all its sub-expressions, pre-order."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))
