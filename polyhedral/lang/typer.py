"""Typing of TC expressions: C's conversions without small-integer promotion, weak literals.

The :class:`Typer` of one statement returns new, typed trees (every node's ``dtype`` set, every
identifier's ``kind``) and the statement's value type; see :mod:`.types` for the rules. It asks
its definition checker for names and for errors, so that messages point into the source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from ..errors import Span, TCError, TCNameError, TCSemanticError, TCTypeError
from . import ast as A
from .builtins import BUILTINS, LANGUAGE_FUNCTIONS
from .checked import ScalarArg, TensorInfo
from .types import BOOL, INT32, INT64, SCALAR_TYPES, ScalarType, common_type

__all__ = ["DefScope", "Ty", "Typer"]


class DefScope(Protocol):
    """What typing reads of the definition being checked (the checker's state): its sizes,
    scalars and tensors, the outputs it declares, the tensors defined so far, and its errors."""

    d: A.Def
    size_spans: Mapping[str, Span]
    scalars: Mapping[str, ScalarArg]
    tensors: Mapping[str, TensorInfo]
    declared_outputs: Mapping[str, A.Return]
    defined: set[str]

    def err(self, cls: type[TCError], message: str, span: Span | None, hint: str | None = None) -> TCError:
        """The error ``cls`` pointing at ``span`` of the source."""

    def dim_size_check(self, node: A.DimSize) -> TensorInfo:
        """The tensor ``T.dim`` names, checked."""


@dataclass(frozen=True)
class Ty:
    """A type during inference. Weak types (literals, sizes, indices) adopt their partner's type."""

    t: ScalarType
    weak: str | None = None  # None, "int" (literal), "idx" (size or index value), "float"


class Typer:
    """Types expressions of one statement; weak literals adopt the type of their partners."""

    def __init__(self, dc: DefScope, index_set: set[str], float_type: ScalarType):
        self.dc = dc
        self.index_set = index_set
        self.float_type = float_type

    def err(self, cls, message, span, hint=None):
        return self.dc.err(cls, message, span, hint)

    def default(self, ty: Ty) -> ScalarType:
        return {"int": INT32, "idx": INT64, "float": self.float_type}.get(ty.weak, ty.t) if ty.weak else ty.t

    def combine(self, a: Ty, b: Ty) -> Ty:
        if a.weak and b.weak:
            if "float" in (a.weak, b.weak):
                return Ty(self.float_type, "float")
            if "idx" in (a.weak, b.weak):
                return Ty(INT64, "idx")
            return Ty(INT32, "int")
        if a.weak or b.weak:
            weak, strong = (a, b) if a.weak else (b, a)
            if weak.weak == "float" and not strong.t.is_float:
                return Ty(self.float_type)
            return Ty(INT32 if strong.t == BOOL else strong.t)
        return Ty(common_type(a.t, b.t))

    def coerce(self, e: A.Expr, ty: Ty, to: ScalarType) -> A.Expr:
        """Give the weak parts of ``e`` (typed ``ty``) the concrete type ``to``."""
        if not ty.weak:
            return e
        return self._set_weak(e, to)

    def _set_weak(self, e: A.Expr, to: ScalarType) -> A.Expr:
        if isinstance(e, A.IntLit):
            if to.is_integral and to != BOOL and not (to.min_value <= e.value <= to.max_value):
                raise self.err(TCTypeError, f"integer literal {e.value} does not fit {to}", e.span)
            return replace(e, dtype=to)
        if isinstance(e, (A.FloatLit, A.Ident, A.DimSize)):
            if isinstance(e, A.FloatLit) and not to.is_float:
                raise self.err(TCTypeError, f"float literal {e.value} used where {to} is required", e.span)
            return replace(e, dtype=to)
        if isinstance(e, A.Unary) and e.op == "-":
            if isinstance(e.arg, A.IntLit):  # a negative literal must fit as a negative number
                if to.is_integral and to != BOOL and not (to.min_value <= -e.arg.value <= to.max_value):
                    raise self.err(TCTypeError, f"integer literal -{e.arg.value} does not fit {to}", e.span)
                return replace(e, arg=replace(e.arg, dtype=to), dtype=to)
            return replace(e, arg=self._set_weak(e.arg, to), dtype=to)
        if isinstance(e, A.Binary) and e.op in ("+", "-", "*", "/", "%"):
            return replace(e, lhs=self._set_weak(e.lhs, to), rhs=self._set_weak(e.rhs, to), dtype=to)
        if isinstance(e, A.Select):
            return replace(e, then=self._set_weak(e.then, to), other=self._set_weak(e.other, to), dtype=to)
        if isinstance(e, A.Call) and e.func in LANGUAGE_FUNCTIONS:
            return replace(e, args=tuple(self._set_weak(a, to) for a in e.args), dtype=to)
        if isinstance(e, A.Call):  # a float builtin of weak arguments
            return replace(e, args=tuple(self._set_weak(a, to) for a in e.args), dtype=to)
        return replace(e, dtype=to)

    def subscript(self, e: A.Expr, tensor: str) -> A.Expr:
        te, ty = self.expr(e)
        if not ty.t.is_integral or ty.t == BOOL:
            raise self.err(TCTypeError, f"subscript of '{tensor}' must be an integer, got {ty.t}", e.span)
        return self.coerce(te, ty, INT64)

    def expr(self, e: A.Expr) -> tuple[A.Expr, Ty]:
        if isinstance(e, A.IntLit):
            if not -(1 << 63) <= e.value < (1 << 63):
                raise self.err(TCTypeError, f"integer literal {e.value} does not fit int64", e.span)
            if -(1 << 31) <= e.value < (1 << 31):
                return replace(e, dtype=INT32), Ty(INT32, "int")
            return replace(e, dtype=INT64), Ty(INT64)
        if isinstance(e, A.FloatLit):
            return replace(e, dtype=self.float_type), Ty(self.float_type, "float")
        if isinstance(e, A.DimSize):
            self.dc.dim_size_check(e)
            return replace(e, dtype=INT64), Ty(INT64, "idx")
        if isinstance(e, A.Ident):
            return self.ident(e)
        if isinstance(e, A.Access):
            return self.access(e)
        if isinstance(e, A.Cast):
            arg, ty = self.expr(e.arg)
            to = SCALAR_TYPES[e.to]
            arg = self.coerce(arg, ty, self.default(ty))
            return replace(e, arg=arg, dtype=to), Ty(to)
        if isinstance(e, A.Unary):
            arg, ty = self.expr(e.arg)
            if e.op == "!":
                if ty.t != BOOL:
                    raise self.err(TCTypeError, f"operand of '!' must be boolean, got {ty.t}", e.arg.span)
                return replace(e, arg=arg, dtype=BOOL), Ty(BOOL)
            if ty.t == BOOL:
                arg, ty = self.coerce(arg, ty, INT32), Ty(INT32)
            return replace(e, arg=arg, dtype=ty.t), ty
        if isinstance(e, A.Binary):
            return self.binary(e)
        if isinstance(e, A.Select):
            cond, cty = self.expr(e.cond)
            if cty.t != BOOL:
                raise self.err(TCTypeError, f"condition of '?:' must be boolean, got {cty.t}", e.cond.span)
            a, aty = self.expr(e.then)
            b, bty = self.expr(e.other)
            rty = self.combine(aty, bty) if (aty.t != BOOL or bty.t != BOOL) else Ty(BOOL)
            if not rty.weak:
                a, b = self.coerce(a, aty, rty.t), self.coerce(b, bty, rty.t)
            return replace(e, cond=cond, then=a, other=b, dtype=rty.t), rty
        if isinstance(e, A.Call):
            return self.call(e)
        raise AssertionError(f"unknown expression {e!r}")

    def ident(self, e: A.Ident) -> tuple[A.Expr, Ty]:
        dc = self.dc
        if e.name in self.index_set:
            return replace(e, kind="index", dtype=INT64), Ty(INT64, "idx")
        if e.name in dc.size_spans:
            return replace(e, kind="size", dtype=INT64), Ty(INT64, "idx")
        if e.name in dc.scalars:
            t = dc.scalars[e.name].dtype
            return replace(e, kind="scalar", dtype=t), Ty(t)
        if e.name in dc.tensors or e.name in dc.declared_outputs:
            return self.access(A.Access(e.name, (), e.span))
        raise self.err(TCNameError, f"undefined variable '{e.name}'", e.span)

    def access(self, e: A.Access) -> tuple[A.Expr, Ty]:
        dc = self.dc
        name = e.tensor
        if name in dc.scalars:
            if e.args:
                raise self.err(TCTypeError, f"'{name}' is a scalar argument, not a tensor", e.span)
            return self.ident(A.Ident(name, e.span))
        if name in dc.size_spans:
            raise self.err(TCTypeError, f"'{name}' is a size, not a tensor", e.span)
        t = dc.tensors.get(name)
        if t is None or name not in dc.defined:
            if name in dc.declared_outputs or any(s.tensor == name for s in dc.d.body):
                raise self.err(TCSemanticError, f"'{name}' is read before any statement defines it", e.span)
            raise self.err(TCNameError, f"undefined tensor or function '{name}'", e.span)
        if len(e.args) != t.rank:
            if t.rank and not e.args:
                raise self.err(TCTypeError, f"tensor '{name}' of rank {t.rank} used as a scalar", e.span)
            raise self.err(
                TCTypeError,
                f"wrong number of dimensions: '{name}' has {t.rank}, accessed with {len(e.args)}",
                e.span,
            )
        args = tuple(self.subscript(a, name) for a in e.args)
        return A.Access(name, args, e.span, t.dtype), Ty(t.dtype)

    def binary(self, e: A.Binary) -> tuple[A.Expr, Ty]:
        l, lty = self.expr(e.lhs)
        r, rty = self.expr(e.rhs)
        if e.op in ("&&", "||"):
            for side, ty in ((e.lhs, lty), (e.rhs, rty)):
                if ty.t != BOOL:
                    raise self.err(TCTypeError, f"operand of '{e.op}' must be boolean, got {ty.t}", side.span)
            return replace(e, lhs=l, rhs=r, dtype=BOOL), Ty(BOOL)
        if lty.t == BOOL and rty.t == BOOL and e.op in ("==", "!="):
            return replace(e, lhs=l, rhs=r, dtype=BOOL), Ty(BOOL)
        ty = self.combine(lty, rty)
        if e.op == "%" and ty.t.is_float:
            raise self.err(
                TCTypeError, f"'%' needs integer operands, got {ty.t}", e.span, hint="use fmod(a, b)"
            )
        operand = self.default(ty)
        if e.op in ("==", "!=", "<", "<=", ">", ">="):
            l, r = self.coerce(l, lty, operand), self.coerce(r, rty, operand)
            return replace(e, lhs=l, rhs=r, dtype=BOOL), Ty(BOOL)
        if ty.weak:
            return replace(e, lhs=l, rhs=r, dtype=ty.t), ty
        l, r = self.coerce(l, lty, ty.t), self.coerce(r, rty, ty.t)
        return replace(e, lhs=l, rhs=r, dtype=ty.t), ty

    def call(self, e: A.Call) -> tuple[A.Expr, Ty]:
        n = BUILTINS[e.func]
        if len(e.args) != n:
            raise self.err(
                TCTypeError,
                f"builtin '{e.func}' takes {n} argument{'s' if n != 1 else ''}, got {len(e.args)}",
                e.span,
            )
        typed = [self.expr(a) for a in e.args]
        ty = typed[0][1]
        for _, t in typed[1:]:
            ty = self.combine(ty, t)
        if e.func in LANGUAGE_FUNCTIONS:
            if ty.t == BOOL:
                ty = Ty(INT32)
        elif not ty.t.is_float:
            ty = Ty(self.float_type, "float" if ty.weak else None)
        if ty.weak:
            return replace(e, args=tuple(a for a, _ in typed), dtype=ty.t), ty
        args = tuple(self.coerce(a, t, ty.t) for a, t in typed)
        return replace(e, args=args, dtype=ty.t), ty
