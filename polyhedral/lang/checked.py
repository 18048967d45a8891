"""The values the checker produces: a checked program with typed statements, shapes and ranges."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import Span, TCNameError
from . import ast as A
from .ranges import IndexRange
from .sizes import SizeExpr
from .types import ScalarType

__all__ = ["CheckedDef", "CheckedProgram", "CheckedStatement", "ScalarArg", "TensorInfo"]


@dataclass(frozen=True)
class TensorInfo:
    """A tensor of a definition.

    :ivar role: ``"input"``, ``"output"`` or ``"temporary"`` (written, not returned).
    :ivar shape: one size expression per dimension (over the definition's size symbols).
    :ivar declared: whether the shape was written in the signature (inputs, typed outputs).
    """

    name: str
    role: str
    dtype: ScalarType
    shape: tuple[SizeExpr, ...]
    declared: bool
    span: Span

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class ScalarArg:
    """A rank-0 argument such as ``float alpha``: a value, usable in right-hand sides only."""

    name: str
    dtype: ScalarType
    span: Span


@dataclass(frozen=True)
class CheckedStatement:
    """A statement after checking.

    :ivar source: the statement as parsed.
    :ivar lhs: typed left-hand side subscripts.
    :ivar rhs: the typed right-hand side, let-bindings substituted.
    :ivar lhs_vars: index variables of the left-hand side, in order of appearance.
    :ivar reduction_vars: the other index variables (reduced over), in order of appearance.
    :ivar ranges: the range of every index variable, ``lhs_vars`` first.
    :ivar conditions: typed domain conditions from ``where`` [ext].
    :ivar float_type: the statement's float type (for untyped float literals).
    :ivar value_type: the type of ``rhs``, before conversion to the tensor's type.
    """

    source: A.Statement
    tensor: str
    lhs: tuple[A.Expr, ...]
    op: str
    init: bool
    rhs: A.Expr
    lhs_vars: tuple[str, ...]
    reduction_vars: tuple[str, ...]
    ranges: tuple[IndexRange, ...]
    conditions: tuple[A.Expr, ...]
    float_type: ScalarType
    value_type: ScalarType

    @property
    def vars(self) -> tuple[str, ...]:
        return self.lhs_vars + self.reduction_vars

    @property
    def is_reduction(self) -> bool:
        return self.op != "="

    @property
    def plain_lhs(self) -> bool:
        """Whether the left-hand side is distinct plain variables (no scatter needed)."""
        names = [e.name for e in self.lhs if isinstance(e, A.Ident)]
        return len(names) == len(self.lhs) and len(set(names)) == len(names)

    @property
    def lhs_conditions(self) -> tuple[A.Expr, ...]:
        """The domain conditions on left-hand side variables alone (they bound a ``!`` initialisation)."""
        lhs = set(self.lhs_vars)
        return tuple(c for c in self.conditions if A.index_vars(c) <= lhs)

    def range_of(self, var: str) -> IndexRange:
        return next(r for r in self.ranges if r.var == var)

    @property
    def line(self) -> int:
        return self.source.span.line


@dataclass(frozen=True)
class CheckedDef:
    """A definition after checking: signature, tensors with shapes, typed statements.

    :ivar sizes: the size symbols, in order of first appearance in the parameters.
    :ivar params: the parameter names in order (tensors and rank-0 scalar arguments).
    :ivar outputs: the returned tensors, in order.
    :ivar temporaries: tensors written but not returned, in order of first definition.
    """

    ast: A.Def
    source: str
    sizes: tuple[str, ...]
    params: tuple[str, ...]
    outputs: tuple[str, ...]
    temporaries: tuple[str, ...]
    tensor_infos: tuple[TensorInfo, ...]
    scalar_args: tuple[ScalarArg, ...]
    statements: tuple[CheckedStatement, ...]

    @property
    def name(self) -> str:
        return self.ast.name

    @property
    def tensors(self) -> Mapping[str, TensorInfo]:
        return {t.name: t for t in self.tensor_infos}

    def tensor(self, name: str) -> TensorInfo:
        return self.tensors[name]

    @property
    def scalars(self) -> Mapping[str, ScalarArg]:
        return {s.name: s for s in self.scalar_args}

    def param(self, name: str) -> A.Param:
        return next(p for p in self.ast.params if p.name == name)

    def param_type(self, name: str) -> ScalarType:
        """The element type of parameter ``name``: a tensor's dtype or a rank-0 argument's type."""
        return self.scalars[name].dtype if name in self.scalars else self.tensor(name).dtype

    def signature(self) -> str:
        """A one-line summary: ``matmul(float32(M, K) A, float32(K, N) B) -> float32(M, N) C``."""

        def one(name: str) -> str:
            if name in self.scalars:
                return f"{self.scalars[name].dtype} {name}"
            t = self.tensor(name)
            dims = f"({', '.join(map(str, t.shape))})" if t.rank else ""
            return f"{t.dtype}{dims} {name}"

        ins = ", ".join(one(p) for p in self.params)
        outs = ", ".join(one(o) for o in self.outputs)
        return f"{self.name}({ins}) -> ({outs})"


@dataclass(frozen=True)
class CheckedProgram:
    """Every definition of a source, checked."""

    program: A.Program
    defs: tuple[CheckedDef, ...]

    @property
    def source(self) -> str:
        return self.program.source

    def get(self, name: str) -> CheckedDef | None:
        return next((d for d in self.defs if d.name == name), None)

    def entry(self, name: str | None = None) -> CheckedDef:
        """The definition called ``name``; with ``None``, the only one.

        :raises TCNameError: no such entry, or several and no name.
        """
        if name is None:
            if len(self.defs) != 1:
                found = ", ".join(self.names) or "nothing"
                raise TCNameError(f"the source defines {found}: name the entry point")
            return self.defs[0]
        d = self.get(name)
        if d is None:
            raise TCNameError(
                f"unknown entry point '{name}'; the source defines {', '.join(self.names) or 'nothing'}"
            )
        return d

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.defs)
