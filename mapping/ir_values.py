"""Statement bodies in the kernel IR: what one instance of a statement computes and which element it
writes, as typed values (immutable).

The loop IR (:mod:`.ir`) says when a statement runs (``ir.Run``); its body says what it does, lowered
once per statement from the checked TC statement by :func:`~tcjit.mapping.bodies.lower_bodies`:

- **values** (:data:`Value`): literals, index variables, scalar parameters, loads of tensor
  elements, conversions (``Convert``: every change of type is explicit, with the language's
  conversion rules), and the typed operations of docs/language.md (integer arithmetic wraps,
  division by zero gives 0);
- **subscripts** (:data:`Subscript`): int64 arithmetic with floor division, the index semantics;
- **references** to elements: of a tensor (:class:`Ref`, with its run-time bounds checks), of a
  promoted buffer (:class:`BufferRef`, GPU), or of a thread's partial result in a block
  reduction (:class:`PartialRef`);
- the **body** (:class:`Body`): an initialisation, an assignment or an update of its target.

References keep the number of the TC access they lower (``access``: 0 for the element a statement
writes, 1, 2, ... for its reads in pre-order, :func:`~tcjit.mapping.bodies.read_accesses`), by
which the mapping's decisions about accesses (promotion, vector loads) name them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..polyhedral.lang.types import ScalarType
from . import ir

__all__ = [
    "Arith",
    "Body",
    "BufferRef",
    "Call",
    "Compare",
    "Convert",
    "IndexVar",
    "Literal",
    "Load",
    "Logic",
    "Negate",
    "Not",
    "PartialRef",
    "Ref",
    "ScalarParam",
    "Select",
    "SizeValue",
    "SubArith",
    "SubConst",
    "SubNeg",
    "SubValue",
    "SubVar",
    "Subscript",
    "Target",
    "Value",
    "operands",
]


# ------------------------------------------------------------------------------------- subscripts
@dataclass(frozen=True)
class SubConst:
    """An integer constant (a literal, a size, a tensor's extent)."""

    value: int


@dataclass(frozen=True)
class SubVar:
    """The index variable ``name``."""

    name: str


@dataclass(frozen=True)
class SubNeg:
    arg: Subscript


@dataclass(frozen=True)
class SubArith:
    """``lhs op rhs`` for ``op`` in ``+ - * / %``; ``/`` and ``%`` floor."""

    op: str
    lhs: Subscript
    rhs: Subscript


@dataclass(frozen=True)
class SubValue:
    """Any other integer value (a gather's loaded index, a call), converted to int64."""

    value: Value


Subscript = SubConst | SubVar | SubNeg | SubArith | SubValue


# ------------------------------------------------------------------------------------- references
@dataclass(frozen=True)
class Ref:
    """Element ``subscripts`` of ``tensor``'s array as the kernel holds it.

    :ivar checked: per subscript, whether it is checked against the extent at run time (gathers,
        subscripts the bounds proofs did not cover).
    :ivar span: ``(start, end, line, column)`` of the TC text, for the messages of those checks.
    :ivar writes: the element a statement writes (else one it reads).
    :ivar access: the TC access it lowers (see the module docstring).
    """

    tensor: str
    subscripts: tuple[Subscript, ...]
    checked: tuple[bool, ...]
    span: tuple[int, int, int, int]
    writes: bool
    access: int


@dataclass(frozen=True)
class BufferRef:
    """A reference redirected to a promoted buffer (GPU): element ``k`` of ``buffer`` is
    ``(subscripts[k] - offsets[k]) / strides[k]``, ``offsets`` over the statement's dimensions
    (``Var("i_<dim>")``). ``tensor``: whose elements the buffer holds."""

    buffer: str
    tensor: str
    subscripts: tuple[Subscript, ...]
    offsets: tuple[ir.Expr, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class PartialRef:
    """The one-element private buffer ``buffer`` holding a thread's partial result of a block
    reduction into ``tensor`` (the update's target, redirected)."""

    buffer: str
    tensor: str


Target = Ref | BufferRef | PartialRef


# ----------------------------------------------------------------------------------------- values
@dataclass(frozen=True)
class Literal:
    """``value`` as a constant of ``dtype`` (an int of an integer type prints as an integer
    literal, anything else as a float literal)."""

    value: int | float
    dtype: ScalarType


@dataclass(frozen=True)
class IndexVar:
    """The index variable ``name`` (int64)."""

    name: str


@dataclass(frozen=True)
class SizeValue:
    """A symbolic size's value (int64) at run time: ``text`` is C arithmetic of the kernel's size
    arguments (:func:`~tcjit.mapping.symbolic.size_text`)."""

    text: str


@dataclass(frozen=True)
class ScalarParam:
    """The scalar argument ``name``, of its declared type."""

    name: str


@dataclass(frozen=True)
class Load:
    """The element ``ref`` names, read as ``dtype``."""

    ref: Target
    dtype: ScalarType


@dataclass(frozen=True)
class Convert:
    """``arg`` (of type ``src``) converted to ``dst`` by the language's rules."""

    arg: Value
    src: ScalarType
    dst: ScalarType


@dataclass(frozen=True)
class Not:
    arg: Value


@dataclass(frozen=True)
class Negate:
    """``-arg`` in ``dtype`` (wrapping for integers; ``arg != 0`` for booleans)."""

    arg: Value
    dtype: ScalarType


@dataclass(frozen=True)
class Arith:
    """``lhs op rhs`` in ``dtype`` (``+ - * / %``), both operands already of ``dtype``."""

    op: str
    lhs: Value
    rhs: Value
    dtype: ScalarType


@dataclass(frozen=True)
class Compare:
    """``lhs op rhs`` (``== != < <= > >=``), both operands of one type; a bool."""

    op: str
    lhs: Value
    rhs: Value


@dataclass(frozen=True)
class Logic:
    """``lhs && rhs`` or ``lhs || rhs`` on bools."""

    op: str
    lhs: Value
    rhs: Value


@dataclass(frozen=True)
class Select:
    cond: Value
    then: Value
    other: Value


@dataclass(frozen=True)
class Call:
    """Built-in function ``func`` (``exp``, ``fmax``, ``min``, ...) in ``dtype``, its arguments
    already of ``dtype``."""

    func: str
    args: tuple[Value, ...]
    dtype: ScalarType


Value = (
    Literal
    | IndexVar
    | SizeValue
    | ScalarParam
    | Load
    | Convert
    | Not
    | Negate
    | Arith
    | Compare
    | Logic
    | Select
    | Call
)


def operands(v: Value) -> tuple[Value, ...]:
    """The values ``v`` is computed from, in order (a load's subscripts are not among them)."""
    if isinstance(v, (Convert, Not, Negate)):
        return (v.arg,)
    if isinstance(v, (Arith, Compare, Logic)):
        return (v.lhs, v.rhs)
    if isinstance(v, Select):
        return (v.cond, v.then, v.other)
    if isinstance(v, Call):
        return v.args
    return ()


def loads(v: Value | None):
    """Every load of value ``v``, those in its loads' subscripts (gathers) included, in
    pre-order."""
    if v is None:
        return
    if isinstance(v, Load):
        yield v
        if isinstance(v.ref, (Ref, BufferRef)):
            for s in v.ref.subscripts:
                yield from _subscript_loads(s)
        return
    for x in operands(v):
        yield from loads(x)


def _subscript_loads(s: Subscript):
    if isinstance(s, SubValue):
        yield from loads(s.value)
    elif isinstance(s, SubNeg):
        yield from _subscript_loads(s.arg)
    elif isinstance(s, SubArith):
        yield from _subscript_loads(s.lhs)
        yield from _subscript_loads(s.rhs)


# ------------------------------------------------------------------------------------------- body
@dataclass(frozen=True)
class Body:
    """One instance of Scop statement ``statement``.

    :ivar kind: ``"init"`` (``target`` set to ``op``'s identity), ``"assign"`` (set to ``value``)
        or ``"update"`` (combined with ``value`` by ``op``).
    :ivar op: ``=``, ``+=``, ``*=``, ``max=``, ``min=``, ...
    :ivar tensor: the tensor written (``target`` may be redirected to a buffer).
    :ivar rhs: the right-hand side, of type ``value_type`` (None for an initialisation).
    :ivar value: ``rhs`` converted to the tensor's type and then to the type its elements are held
        in (a wide accumulator's for long sums).
    :ivar dims: the statement's dimensions (the index variables an ``ir.Run``'s arguments bind).
    :ivar lhs_vars: those that name the written element.
    :ivar line: the TC line it comes from.
    """

    statement: str
    kind: str
    op: str
    tensor: str
    target: Target
    rhs: Value | None
    value_type: ScalarType
    value: Value | None
    dims: tuple[str, ...]
    lhs_vars: tuple[str, ...]
    line: int
