"""Adjoints: the state of one derivation (the single-assignment steps, the values that depend on
a wanted input), the adjoint tensor of each value and its first write, and the chain rule through a
statement's right-hand side."""

from __future__ import annotations

from ..errors import TCDerivativeError
from ..lang import ast as A
from ..lang.checked import CheckedDef
from ..lang.sizes import SizeExpr
from .rules import DERIVATIVES, fill
from .text import mul, neg, paren, rename, sel, where_clause
from .versions import Names, Step, derivative_error, single_assignment


class Poison:
    """A gradient that cannot be computed, with the reason."""

    def __init__(self, error: TCDerivativeError):
        self.error = error


class Adjoints:
    """The state of the derivation of ``cdef`` for the ``wanted`` inputs, and its adjoints.

    :ivar steps: the single-assignment forward (:func:`~.versions.single_assignment`).
    :ivar versions: its versions by name.
    :ivar final: forward tensor -> its final version (the one that keeps the tensor's name).
    :ivar active: the values (inputs, versions) that depend on a wanted input.
    :ivar adjoint: value -> the name of its adjoint tensor in the backward.
    :ivar started: the adjoints written at least once.
    :ivar poison: value -> the error of a gradient that cannot be computed.
    :ivar lines: the backward's statements so far, as TC text.
    :ivar output_grads: final version of an output -> its gradient parameter; the driver sets it
        before differentiating (:meth:`start` and :meth:`emit` read it).
    """

    def __init__(self, cdef: CheckedDef, wanted: tuple[str, ...]):
        self.cdef = cdef
        self.names = Names(cdef)
        self.steps, self.versions = single_assignment(cdef, self.names)
        self.wanted = wanted
        self.inputs = set(cdef.params)
        self.final = {v.tensor: v.name for v in self.versions.values() if v.name == v.tensor}
        # active: values that depend on a wanted input
        self.active: set[str] = set(wanted)
        for s in self.steps:
            if any(r in self.active for r in self.sources(s)):
                if cdef.tensor(s.tensor).dtype.is_float:
                    self.active.add(s.version)
        self.adjoint: dict[str, str] = {}  # value -> its adjoint tensor in the backward
        self.started: set[str] = set()  # adjoints written at least once
        self.poison: dict[str, TCDerivativeError] = {}
        self.lines: list[str] = []

    def sources(self, step: Step) -> set[str]:
        """The values (inputs, rank-0 arguments, versions) a step reads."""
        if step.stmt is None:
            return {step.prev}
        out = set()
        for node in A.walk(step.stmt.rhs):
            if isinstance(node, A.Access):
                out.add(step.reads.get(node.tensor, node.tensor))
            elif isinstance(node, A.Ident) and node.kind == "scalar":
                out.add(node.name)
        return out

    # ------------------------------------------------------------------------------ adjoints
    def adjoint_name(self, value: str) -> str:
        if value not in self.adjoint:
            self.adjoint[value] = self.names.fresh(f"d_{value}")
        return self.adjoint[value]

    def shape_of(self, value: str) -> tuple[SizeExpr, ...]:
        if value in self.cdef.scalars:
            return ()
        return self.cdef.tensor(self.tensor_of(value)).shape

    def dtype_of(self, value: str) -> str:
        """The TC spelling of the type of ``value`` (a version, an input or a rank-0 argument)."""
        if value in self.cdef.scalars:
            return str(self.cdef.scalars[value].dtype)
        return str(self.cdef.tensor(self.tensor_of(value)).dtype)

    def tensor_of(self, value: str) -> str:
        return self.versions[value].tensor if value in self.versions else value

    def full_ranges(self, value: str) -> tuple[list[str], list[tuple[str, str, str]]]:
        vs = [self.names.fresh(f"i{k}") for k in range(len(self.shape_of(value)))]
        return vs, [(v, "0", s.to_tc()) for v, s in zip(vs, self.shape_of(value))]

    def start(self, value: str) -> None:
        """Zero the adjoint of ``value`` (or copy the output gradient in) before a first ``+=``."""
        if value in self.started:
            return
        self.started.add(value)
        vs, ranges = self.full_ranges(value)
        lhs = f"{self.adjoint_name(value)}({', '.join(vs)})"
        if value in self.output_grads:
            rhs = f"{self.output_grads[value]}({', '.join(vs)})"
        elif value in self.wanted or self.dtype_of(value) == "float32":
            rhs = "0.0"  # a returned gradient, declared with its type; else float32 by default
        else:  # the adjoint's type is inferred from this first write: the value's, not float32's
            rhs = f"{self.dtype_of(value)}(0.0)"
        self.lines.append(f"{lhs} = {rhs}{where_clause(ranges, [])}")

    def emit(self, value: str, lhs_args: list[str], rhs: str, ranges, extra, covers: bool, reduces: bool):
        """``d_value(lhs_args) += rhs``: ``=`` or ``+=!`` when it is the first write and covers
        the whole adjoint; after a zeroing statement otherwise."""
        name = self.adjoint_name(value)
        lhs = f"{name}({', '.join(lhs_args)})"
        if value not in self.started and covers and value not in self.output_grads:
            self.started.add(value)
            op = "+=!" if reduces else "="
        else:
            self.start(value)
            op = "+="
        self.lines.append(f"{lhs} {op} {rhs}{where_clause(ranges, extra)}")
        return op

    # ------------------------------------------------------------------------ chain rule
    def is_active(self, e: A.Expr, reads: dict[str, str]) -> bool:
        if e.dtype is not None and not e.dtype.is_float:
            return False
        if isinstance(e, A.Access):
            return reads.get(e.tensor, e.tensor) in self.active
        if isinstance(e, A.Ident):
            return e.kind == "scalar" and e.name in self.active
        if isinstance(e, A.Select):
            return self.is_active(e.then, reads) or self.is_active(e.other, reads)
        if isinstance(e, A.Cast):
            return self.is_active(e.arg, reads)
        if isinstance(e, A.Binary) and e.op in ("==", "!=", "<", "<=", ">", ">=", "&&", "||"):
            return False
        if isinstance(e, A.Unary) and e.op == "!":
            return False
        return any(self.is_active(c, reads) for c in A.children(e))

    def chain(self, e: A.Expr, seed: str, reads, st) -> list[tuple[A.Expr, str | Poison]]:
        """(read, its adjoint contribution) for every active read in ``e``, given ``e``'s adjoint."""
        if not self.is_active(e, reads):
            return []
        text = lambda n: rename(n, reads, self.cdef)  # noqa: E731
        if isinstance(e, (A.Access, A.Ident)):
            return [(e, seed)]
        if isinstance(e, A.Cast):
            return self.chain(e.arg, seed, reads, st)
        if isinstance(e, A.Unary):  # "-"
            return self.chain(e.arg, neg(seed), reads, st)
        if isinstance(e, A.Select):
            c = text(e.cond)
            return self.chain(e.then, sel(c, seed, "0.0"), reads, st) + self.chain(
                e.other, sel(c, "0.0", seed), reads, st
            )
        if isinstance(e, A.Binary):
            lt, rt = text(e.lhs), text(e.rhs)
            if e.op == "+":
                left, right = seed, seed
            elif e.op == "-":
                left, right = seed, neg(seed)
            elif e.op == "*":
                left, right = mul(seed, rt), mul(seed, lt)
            elif e.op == "/":
                left = f"{paren(seed)} / {paren(rt)}"
                right = neg(f"{paren(seed)} * ({paren(lt)} / {paren(rt)}) / {paren(rt)}")
            elif e.op == "%":  # fmod on floats
                left = seed
                right = neg(mul(seed, f"(({paren(lt)} - {paren(text(e))}) / {paren(rt)})"))
            else:  # pragma: no cover - comparisons are inactive
                return []
            return self.chain(e.lhs, left, reads, st) + self.chain(e.rhs, right, reads, st)
        if isinstance(e, A.Call):
            templates = DERIVATIVES.get(e.func)
            args = [text(a) for a in e.args]
            value = text(e)
            out: list[tuple[A.Expr, str | Poison]] = []
            for k, a in enumerate(e.args):
                if not self.is_active(a, reads):
                    continue
                if templates is None:
                    err = derivative_error(
                        self.cdef,
                        st,
                        f"'{e.func}' has no derivative tcjit can express, and a gradient flows "
                        f"through it in the statement writing '{st.tensor}'",
                        "compute that part outside the kernel, or give the kernel a backward of "
                        "your own (backward='<entry>' or tcjit.make_autograd)",
                    )
                    out += [(r, Poison(err)) for r, _ in self.chain(a, "1.0", reads, st)]
                    continue
                if templates[k] == "0":
                    continue
                out += self.chain(a, mul(seed, fill(templates[k], args, value)), reads, st)
            return out
        return []
