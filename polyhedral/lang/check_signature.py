"""The names a TC definition binds, for the checker (:mod:`.check`): its signature (sizes,
arguments, outputs); the rules every name follows (no builtin, reserved word or type name; index
variables distinct from sizes, tensors and arguments); size expressions (``where i in lo:hi``
bounds, ``T.dim``) and affine forms over the names bound.
"""

from __future__ import annotations

from ..errors import Span, TCError, TCNameError, TCTypeError
from . import ast as A
from .builtins import BUILTINS
from .checked import ScalarArg, TensorInfo
from .ranges import Affine, affine_form
from .sizes import SizeExpr, SizeExprTooComplex, const, sym
from .types import SCALAR_TYPES, ScalarType, lookup_type

#: The words of the language that cannot name a tensor, size or index.
KEYWORDS = {"def", "where", "in", "exists"}


class SignatureChecker:
    """What checking a definition knows of its names: :meth:`signature` binds the sizes,
    arguments and outputs, the other methods check names and size expressions against them
    (and answer what :class:`~.typer.DefScope` asks of the checker)."""

    def __init__(self, d: A.Def, source: str):
        self.d = d
        self.source = source
        self.sizes: list[str] = []
        self.size_spans: dict[str, Span] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self.scalars: dict[str, ScalarArg] = {}
        self.declared_outputs: dict[str, A.Return] = {}
        self.defined: set[str] = set()  # tensors defined so far, in program order
        self.temporaries: list[str] = []

    def err(self, cls: type[TCError], message: str, span: Span | None, hint: str | None = None) -> TCError:
        return cls(message, source=self.source, span=span, where=self.d.name, hint=hint)

    # ---------------------------------------------------------------------------------- signature
    def fresh_name(self, name: str, span: Span, what: str) -> None:
        """Refuse ``name`` for a new ``what`` (a size, argument, tensor, index, ...) that would
        redefine a builtin or use a reserved word (a keyword or a type name)."""
        if name in BUILTINS:
            raise self.err(TCNameError, f"{what} '{name}' redefines a builtin function", span)
        if name in KEYWORDS or lookup_type(name) is not None:
            raise self.err(TCNameError, f"{what} '{name}' uses a reserved word", span)

    def _size_expr_of_dim(self, dim: A.Dim, bind: bool, owner: str) -> SizeExpr:
        if not isinstance(dim.value, (int, str)):  # [ext] a size expression; its symbols are bound
            return self.size_expr(dim.value, f"a dimension of {owner}")
        if isinstance(dim.value, int):
            if dim.value < 0:
                raise self.err(TCTypeError, f"size of {owner} must be non-negative", dim.span)
            return const(dim.value)
        name = dim.value
        if name in self.tensors or name in self.scalars:
            raise self.err(TCNameError, f"'{name}' is used both as a size and as an argument", dim.span)
        if name not in self.size_spans:
            if not bind:
                raise self.err(
                    TCNameError,
                    f"size '{name}' of output {owner} is not the size of any input",
                    dim.span,
                    hint="sizes of outputs must be sizes of inputs (or literal numbers)",
                )
            self.fresh_name(name, dim.span, "size")
            self.sizes.append(name)
            self.size_spans[name] = dim.span
        return sym(name)

    def signature(self) -> None:
        # Plain symbols first, wherever they appear: a dimension written as a size expression
        # (float(N, H - KH + 1) dO) may use sizes that later parameters bind.
        for p in self.d.params:
            for dim in p.dims or ():
                if isinstance(dim.value, str) and dim.value not in self.size_spans:
                    if dim.value in {q.name for q in self.d.params}:
                        continue  # reported below, with the argument
                    self.fresh_name(dim.value, dim.span, "size")
                    self.sizes.append(dim.value)
                    self.size_spans[dim.value] = dim.span
        for p in self.d.params:
            self.fresh_name(p.name, p.span, "argument")
            if p.name in self.tensors or p.name in self.scalars:
                raise self.err(TCNameError, f"duplicate definition of argument '{p.name}'", p.span)
            if p.name in self.size_spans:
                raise self.err(TCNameError, f"'{p.name}' is used both as a size and as an argument", p.span)
            dtype = SCALAR_TYPES[p.type_name]
            if p.dims is None:
                self.scalars[p.name] = ScalarArg(p.name, dtype, p.span)
                continue
            shape = tuple(self._size_expr_of_dim(dim, True, p.name) for dim in p.dims)
            self.tensors[p.name] = TensorInfo(p.name, "input", dtype, shape, True, p.span)
            self.defined.add(p.name)
        for r in self.d.returns:
            self.fresh_name(r.name, r.span, "output")
            if r.name in self.tensors or r.name in self.scalars or r.name in self.declared_outputs:
                raise self.err(TCNameError, f"duplicate definition of '{r.name}' in the outputs", r.span)
            if r.name in self.size_spans:
                raise self.err(TCNameError, f"'{r.name}' is used both as a size and as an output", r.span)
            self.declared_outputs[r.name] = r
            if r.dims is not None:
                shape = tuple(self._size_expr_of_dim(dim, False, r.name) for dim in r.dims)
                self.tensors[r.name] = TensorInfo(
                    r.name, "output", SCALAR_TYPES[r.type_name], shape, True, r.span
                )

    # -------------------------------------------------------------------------------- name helpers
    def declared_type(self, name: str) -> ScalarType | None:
        """The type the signature declares for the output ``name``, if any."""
        r = self.declared_outputs.get(name)
        return SCALAR_TYPES[r.type_name] if r is not None and r.type_name else None

    def is_bound(self, name: str) -> bool:
        """Whether ``name`` is a tensor, a rank-0 argument, a size or a declared output."""
        return (
            name in self.tensors
            or name in self.scalars
            or name in self.size_spans
            or name in self.declared_outputs
        )

    def is_free(self, name: str, lets: dict[str, A.Expr]) -> bool:
        """Whether ``name`` is bound neither by the definition nor by one of ``lets`` (so an index
        variable)."""
        return not (self.is_bound(name) or name in lets)

    def check_index_name(self, name: str, span: Span | None) -> None:
        """Refuse ``name`` as an index variable where it names a size, tensor or argument, a
        builtin or a reserved word."""
        if name in self.size_spans:
            raise self.err(TCNameError, f"size '{name}' cannot be used as an index variable", span)
        if name in self.tensors or name in self.declared_outputs:
            raise self.err(TCNameError, f"tensor '{name}' cannot be used as an index variable", span)
        if name in self.scalars:
            raise self.err(TCNameError, f"argument '{name}' cannot be used as an index variable", span)
        if span is not None:
            self.fresh_name(name, span, "index")
        elif name in BUILTINS or name in KEYWORDS:
            raise self.err(TCNameError, f"index '{name}' redefines a builtin function", span)

    # ------------------------------------------------------------------------------ affine helpers
    def affine(self, e: A.Expr, index_set: set[str]) -> Affine | None:
        """``e`` as an affine function of index variables, or ``None`` if it is not one."""
        return affine_form(
            e, index_set, lambda n: n in self.size_spans, lambda t, k: self.tensors[t].shape[k]
        )

    def size_expr(self, e: A.Expr, what: str) -> SizeExpr:
        """``e`` as a size expression (for `where i in lo:hi` bounds)."""
        for node in A.walk(e):
            if isinstance(node, A.Access):
                raise self.err(TCTypeError, f"tensor access where none is allowed ({what})", node.span)
            if isinstance(node, A.FloatLit):
                raise self.err(TCTypeError, f"{what} must be an integer, got a float", node.span)
            if isinstance(node, A.DimSize):
                self.dim_size_check(node)
            if isinstance(node, A.Ident) and node.name not in self.size_spans:
                if node.name in self.scalars:
                    raise self.err(
                        TCTypeError,
                        f"argument '{node.name}' cannot be used in {what}: values are not sizes",
                        node.span,
                        hint="write the number into the TC text, or pass it as the size of a tensor",
                    )
                raise self.err(TCNameError, f"undefined size '{node.name}' in {what}", node.span)
        try:
            a = self.affine(e, set())
        except SizeExprTooComplex:
            raise self.err(TCTypeError, f"{what} is too complex a size expression", e.span) from None
        if a is None:
            raise self.err(
                TCTypeError, f"{what} must be a size expression (sizes, integers, + - * /)", e.span
            )
        return a.rest

    def dim_size_check(self, node: A.DimSize) -> TensorInfo:
        """The tensor ``T.dim`` names, checked: a tensor defined before, and one of its dimensions."""
        t = self.tensors.get(node.tensor)
        if t is None or node.tensor not in self.defined:
            raise self.err(TCNameError, f"'{node.tensor}.{node.dim}' refers to no defined tensor", node.span)
        if not 0 <= node.dim < t.rank:
            raise self.err(
                TCTypeError,
                f"'{node.tensor}' has {t.rank} dimensions; '{node.tensor}.{node.dim}' does not exist",
                node.span,
            )
        return t
