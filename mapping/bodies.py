"""Statement bodies lowered into the kernel IR (:mod:`.ir_values`), once per statement, and the GPU
mapping's redirection of references to buffers.

:func:`lower_bodies` reads each checked TC statement and writes its body as IR values: every
conversion explicit, sizes and extents as constants (or read from a symbolic kernel's size
arguments), each subscript marked where it is checked at
run time. :func:`redirect` is an IR-to-IR pass: references the GPU mapping promoted read and write
their buffers, and a block reduction's update writes the thread's partial result. The printers
print bodies; none reads the TC statements.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang import ast as A
from ..polyhedral.lang.checked import CheckedDef, CheckedStatement
from ..polyhedral.lang.sizes import SizeExpr, sym
from ..polyhedral.lang.types import SCALAR_TYPES, ScalarType, common_type
from ..polyhedral.scop import ScopStatement
from . import ir_values as V
from .gpu_ir import BlockReduction, Promoted
from .layout import size_text

__all__ = ["access_numbers", "lower_bodies", "read_accesses", "redirect", "rhs_accesses"]

INT64 = SCALAR_TYPES["int64"]


def read_accesses(st: CheckedStatement) -> tuple[A.Access, ...]:
    """The tensor accesses ``st`` reads: its right-hand side's in pre-order (a gather's index
    access after the access it indexes), then those in the subscripts of the element it writes (a
    scatter's indices); access ``k + 1`` of the statement's body is the ``k``-th."""
    found = list(rhs_accesses(st))
    for sub in st.lhs:
        found += [e for e in A.walk(sub) if isinstance(e, A.Access)]
    return tuple(found)


def rhs_accesses(st: CheckedStatement) -> tuple[A.Access, ...]:
    """The first of :func:`read_accesses`: those of ``st``'s right-hand side (numbered from 1)."""
    return tuple(e for e in A.walk(st.rhs) if isinstance(e, A.Access))


def access_numbers(st: CheckedStatement) -> dict[int, int]:
    """``id()`` of each TC node of ``st`` that accesses a tensor -> its number in the body:
    0 for the statement (the element it writes), then its reads (:func:`read_accesses`)."""
    numbers = {id(st.source): 0}
    numbers.update((id(a), k + 1) for k, a in enumerate(read_accesses(st)))
    return numbers


def lower_bodies(
    cdef: CheckedDef,
    statements: Mapping[str, ScopStatement],
    sizes: Mapping[str, int],
    wide: Mapping[str, ScalarType],
    checked: frozenset[int],
    symbolic: frozenset[str] = frozenset(),
) -> dict[str, V.Body]:
    """The body of every statement of ``statements``. ``wide``: tensors held wider than their type
    (long sums); ``checked``: ``id()`` of the TC subscripts checked at run time; ``symbolic``: the
    sizes read from the kernel's size arguments (:mod:`.symbolic`), the others constants."""
    return {name: _Lowering(cdef, sizes, checked, s, symbolic).body(wide) for name, s in statements.items()}


class _Lowering:
    """Lowers one statement's TC expressions."""

    def __init__(
        self,
        cdef: CheckedDef,
        sizes: Mapping[str, int],
        checked: frozenset[int],
        s: ScopStatement,
        symbolic: frozenset[str] = frozenset(),
    ):
        self.cdef, self.sizes, self.checked, self.s, self.symbolic = cdef, sizes, checked, s, symbolic
        self.numbers = access_numbers(s.source)

    def body(self, wide: Mapping[str, ScalarType]) -> V.Body:
        s, st = self.s, self.s.source
        t = self.cdef.tensor(st.tensor).dtype
        et = (wide.get(st.tensor) or t).compute
        if s.kind == "init" and not st.plain_lhs:
            lhs: tuple[A.Expr, ...] = tuple(A.Ident(d, kind="index", dtype=INT64) for d in s.dims)
        else:
            lhs = tuple(st.lhs)
        node = st.source
        span = node.lhs_span
        target = self.ref(st.tensor, lhs, (span.start, span.end, span.line, span.col), True, 0)
        rhs = value = None
        if s.kind != "init":
            rhs = self.value(st.rhs)
            value = V.Convert(V.Convert(rhs, st.value_type, t), t, et)
        return V.Body(
            s.name,
            s.kind,
            st.op,
            st.tensor,
            target,
            rhs,
            st.value_type,
            value,
            s.dims,
            st.lhs_vars,
            node.span.line,
        )

    def ref(self, tensor: str, args, span, writes: bool, access: int) -> V.Ref:
        return V.Ref(
            tensor,
            tuple(self.index(a) for a in args),
            tuple(id(a) in self.checked for a in args),
            span,
            writes,
            access,
        )

    def literal(self, value: int | float, t: ScalarType) -> V.Literal:
        return V.Literal(value if t.is_integral else float(value), t)

    def value(self, e: A.Expr) -> V.Value:
        t = e.dtype
        if isinstance(e, A.IntLit):
            return self.literal(e.value, t)
        if isinstance(e, A.FloatLit):
            return V.Literal(float(e.value), t)
        if isinstance(e, A.Ident):
            if e.kind == "index":
                return V.Convert(V.IndexVar(e.name), INT64, t)
            if e.kind == "size":
                return self.size(sym(e.name), t)
            return V.Convert(V.ScalarParam(e.name), self.cdef.scalars[e.name].dtype, t)
        if isinstance(e, A.DimSize):
            return self.size(self.cdef.tensor(e.tensor).shape[e.dim], t)
        if isinstance(e, A.Access):
            s = e.span
            span = (s.start, s.end, s.line, s.col)
            return V.Load(self.ref(e.tensor, e.args, span, False, self.numbers[id(e)]), t)
        if isinstance(e, A.Cast):
            return V.Convert(self.value(e.arg), e.arg.dtype, t)
        if isinstance(e, A.Unary):
            if e.op == "!":
                return V.Not(self.value(e.arg))
            return V.Negate(V.Convert(self.value(e.arg), e.arg.dtype, t), t)
        if isinstance(e, A.Binary):
            return self.binary(e)
        if isinstance(e, A.Select):
            return V.Select(
                self.value(e.cond),
                V.Convert(self.value(e.then), e.then.dtype, t),
                V.Convert(self.value(e.other), e.other.dtype, t),
            )
        if isinstance(e, A.Call):
            return V.Call(e.func, tuple(V.Convert(self.value(a), a.dtype, t) for a in e.args), t)
        raise TCInternalError(f"cannot lower {e!r}")

    def binary(self, e: A.Binary) -> V.Value:
        op = e.op
        if op in ("&&", "||"):
            return V.Logic(op, self.value(e.lhs), self.value(e.rhs))
        if op in ("==", "!=", "<", "<=", ">", ">="):
            lt, rt = e.lhs.dtype, e.rhs.dtype
            t = lt if lt == rt else common_type(lt, rt)
            return V.Compare(op, V.Convert(self.value(e.lhs), lt, t), V.Convert(self.value(e.rhs), rt, t))
        t = e.dtype
        lhs = V.Convert(self.value(e.lhs), e.lhs.dtype, t)
        return V.Arith(op, lhs, V.Convert(self.value(e.rhs), e.rhs.dtype, t), t)

    def index(self, e: A.Expr) -> V.Subscript:
        """A subscript, with index semantics (int64; ``/`` and ``%`` floor)."""
        if isinstance(e, A.IntLit):
            return V.SubConst(e.value)
        if isinstance(e, A.Ident) and e.kind == "index":
            return V.SubVar(e.name)
        if isinstance(e, A.Unary) and e.op == "-":
            return V.SubNeg(self.index(e.arg))
        if isinstance(e, A.Binary) and e.op in ("+", "-", "*", "/", "%") and e.dtype.is_integral:
            return V.SubArith(e.op, self.index(e.lhs), self.index(e.rhs))
        if isinstance(e, A.Ident) and e.kind == "size":
            return self.size_subscript(sym(e.name))
        if isinstance(e, A.DimSize):
            return self.size_subscript(self.cdef.tensor(e.tensor).shape[e.dim])
        return V.SubValue(self.value(e))

    def size(self, expr: SizeExpr, t: ScalarType) -> V.Value:
        """A size expression's value as type ``t``: a literal, or read from the kernel's size
        arguments where it depends on a symbolic size."""
        value = size_text(expr, self.sizes, self.symbolic)
        if isinstance(value, int):
            return self.literal(value, t)
        return V.Convert(V.SizeValue(value), INT64, t)

    def size_subscript(self, expr: SizeExpr) -> V.Subscript:
        value = size_text(expr, self.sizes, self.symbolic)
        return V.SubConst(value) if isinstance(value, int) else V.SubValue(V.SizeValue(value))


# ------------------------------------------------------------------------------------- redirection
def redirect(
    bodies: Mapping[str, V.Body],
    promoted: Mapping[tuple[str, int], Promoted],
    reductions: Mapping[str, BlockReduction],
) -> dict[str, V.Body]:
    """``bodies`` with the GPU mapping's decisions about references applied: access ``k`` of
    statement ``s`` promoted (``promoted[(s, k)]``) reads or writes its buffer (:class:`BufferRef`),
    and a block reduction's update adds into the thread's partial result (:class:`PartialRef`).
    Everything else is unchanged."""
    out = {}
    for name, b in bodies.items():
        red = reductions.get(name)
        moved = _Redirect(name, promoted)
        if red is not None and name == red.update:
            target: V.Target = V.PartialRef(red.acc.name, b.tensor)
        else:
            target = moved.ref(b.target)
        rhs = None if b.rhs is None else moved.value(b.rhs)
        value = None if b.value is None else moved.value(b.value)
        out[name] = replace(b, target=target, rhs=rhs, value=value)
    return out


class _Redirect:
    """The redirection of one statement's references (its loads, their subscripts, its target)."""

    def __init__(self, statement: str, promoted: Mapping[tuple[str, int], Promoted]):
        self.statement, self.promoted = statement, promoted

    def ref(self, ref: V.Target) -> V.Target:
        if not isinstance(ref, V.Ref):
            return ref
        subscripts = tuple(self.subscript(s) for s in ref.subscripts)
        p = self.promoted.get((self.statement, ref.access))
        if p is None:
            return replace(ref, subscripts=subscripts)
        return V.BufferRef(p.buffer, ref.tensor, subscripts, p.offsets, p.strides)

    def subscript(self, s: V.Subscript) -> V.Subscript:
        if isinstance(s, V.SubValue):
            return V.SubValue(self.value(s.value))
        if isinstance(s, V.SubNeg):
            return V.SubNeg(self.subscript(s.arg))
        if isinstance(s, V.SubArith):
            return V.SubArith(s.op, self.subscript(s.lhs), self.subscript(s.rhs))
        return s

    def value(self, v: V.Value) -> V.Value:
        again = self.value
        if isinstance(v, V.Load):
            return V.Load(self.ref(v.ref), v.dtype)
        if isinstance(v, (V.Literal, V.IndexVar, V.SizeValue, V.ScalarParam)):
            return v
        if isinstance(v, V.Convert):
            return V.Convert(again(v.arg), v.src, v.dst)
        if isinstance(v, V.Not):
            return V.Not(again(v.arg))
        if isinstance(v, V.Negate):
            return V.Negate(again(v.arg), v.dtype)
        if isinstance(v, V.Arith):
            return V.Arith(v.op, again(v.lhs), again(v.rhs), v.dtype)
        if isinstance(v, (V.Compare, V.Logic)):
            return type(v)(v.op, again(v.lhs), again(v.rhs))
        if isinstance(v, V.Select):
            return V.Select(again(v.cond), again(v.then), again(v.other))
        if isinstance(v, V.Call):
            return V.Call(v.func, tuple(again(a) for a in v.args), v.dtype)
        raise TCInternalError(f"cannot redirect {v!r}")
