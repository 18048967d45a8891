"""Automatic backward: reverse-mode symbolic differentiation of a checked TC definition.

:func:`derive` turns a forward definition into two TC definitions, as text that the ordinary
front-end checks and the ordinary pipeline compiles and caches:

* the **augmented forward** ``<name>__fwd`` computes what the forward does, in single-assignment
  form (a tensor written by several statements, such as ``O`` in ``O +=! ...; O = fmax(O + b, 0)``,
  gets one tensor per *version*: ``O_0`` then ``O``), and returns the forward's outputs followed by
  the intermediate versions and temporaries the backward reads (**saved**, not recomputed);
* the **backward** ``<name>__bwd`` takes the forward's inputs, its outputs, the saved
  intermediates and one gradient per output (``d_O``), and returns the gradients of the wanted
  inputs, typed with the inputs' shapes. Outputs whose gradient is known to be zero (``absent``:
  a loss that reads only the last output of several) get no ``d_O`` parameter: the adjoint of
  such an output starts from the contributions of the statements that read it, as a
  temporary's does, and what would only have flowed from its gradient is not computed.

Each statement is differentiated by the chain rule over its right-hand side, in reverse program
order. The adjoint of a read ``X(a1, ..., an)`` becomes an accumulation ``d_X(a1, ..., an) += ...``
over the statement's index variables, whose ranges and domain conditions are pinned with ``where``:

* a contraction's adjoint is another contraction: ``C(m, n) +=! A(m, r_k) * B(r_k, n)`` gives
  ``d_A(m, r_k) += d_C(m, n) * B(r_k, n)``;
* a shifted read ``I(n, c, h + r_kh, w + r_kw)`` (a convolution) is turned into a gather with domain
  conditions: a fresh index ``y`` ranges over the input, ``h = y - r_kh`` is a let-binding and
  ``0 <= h < HO`` a condition, so no iteration scatters; an affine subscript with no variable of
  coefficient +-1 to solve for stays an affine scatter (``d_X(2 * i) += ...``);
* a data-dependent read (a gather, ``LUT(I(b), d)``) becomes a scatter-add (``d_LUT(I(b), d) += ...``);
* ``max=`` / ``min=`` reductions send the gradient to the arg-extremum; ties share it evenly (as
  ``torch.amax`` does): a count of the elements equal to the result is computed first. ``fmax``,
  ``fmin``, ``max`` and ``min`` of two values split ties in halves (as ``torch.maximum``);
* ``*=`` reductions use the product of the other factors, exact with zeros (a count of zero factors
  and the product of the non-zero ones are computed first);
* ``?:`` routes the gradient to the branch taken; comparisons, integer values and casts to integers
  carry none; ``floor``, ``ceil``, ``round``, ``trunc`` and ``logb`` have derivative zero (as in
  torch); ``lgamma``, ``tgamma`` and ``nextafter`` have none that tcjit can express: a gradient that
  would flow through them raises :class:`~tcjit.polyhedral.errors.TCDerivativeError` naming the
  statement, and only if that gradient is wanted.

Gradients accumulate in the type of the tensor differentiated (a ``float16`` input's gradient is a
``float16`` tensor, rounded at each statement that adds to it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from .errors import TCDerivativeError, TCInternalError
from .lang import ast as A
from .lang.builtins import BUILTINS
from .lang.check import KEYWORDS
from .lang.checked import CheckedDef, CheckedStatement
from .lang.printer import expr_to_tc
from .lang.ranges import Affine, affine_form
from .lang.sizes import SizeExpr
from .lang.types import lookup_type

__all__ = ["Derivation", "derive"]


@dataclass(frozen=True)
class Derivation:
    """The derived programs of one forward definition (see the module docstring).

    :ivar forward: TC text of the augmented forward definition.
    :ivar forward_name: its entry name.
    :ivar saved: the intermediates it returns after the forward's outputs, in order.
    :ivar backward: TC text of the backward definition.
    :ivar backward_name: its entry name.
    :ivar wanted: the forward inputs whose gradients the backward returns, in order.
    :ivar poisoned: inputs left out of ``wanted`` (when deriving for every input) because their
        gradient would flow through a statement without a derivative, with the error naming it.
    :ivar absent: the outputs whose gradient the backward does not take (known to be zero).
    """

    forward: str
    forward_name: str
    saved: tuple[str, ...]
    backward: str
    backward_name: str
    wanted: tuple[str, ...]
    poisoned: dict = field(default_factory=dict, compare=False)
    absent: frozenset[str] = frozenset()


# ----------------------------------------------------------------------------------- text helpers
def _p(text: str) -> str:
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


def _mul(a: str, b: str) -> str:
    if a == "1.0":
        return b
    if b == "1.0":
        return a
    return f"{_p(a)} * {_p(b)}"


def _neg(a: str) -> str:
    return a[2:-1] if a.startswith("-(") and _atomic(a[1:]) else f"-{_p(a)}"


def _sel(cond: str, then: str, other: str) -> str:
    return f"({cond}) ? {_p(then)} : {_p(other)}"


#: Derivatives of builtins: one template per argument, in terms of the arguments ``{0}``, ``{1}``,
#: ... and the call's value ``{f}``. ``"0"``: derivative zero (piecewise constant); a missing
#: entry: no derivative tcjit can express.
_LN2, _LN10, _PI = "0.6931471805599453", "2.302585092994046", "3.141592653589793"
_2_SQRTPI, _SQRTPI_2 = "1.1283791670955126", "0.886226925452758"
_FMAX = "({0} > {1} || {1} != {1}) ? 1.0 : (({0} == {1}) ? 0.5 : 0.0)"
_FMIN = "({0} < {1} || {1} != {1}) ? 1.0 : (({0} == {1}) ? 0.5 : 0.0)"
_DERIVATIVES: dict[str, tuple[str, ...]] = {
    "exp": ("{f}",),
    "exp2": (f"{_LN2} * {{f}}",),
    "exp10": (f"{_LN10} * {{f}}",),
    "expm1": ("{f} + 1.0",),
    "log": ("1.0 / {0}",),
    "log2": (f"1.0 / ({{0}} * {_LN2})",),
    "log10": (f"1.0 / ({{0}} * {_LN10})",),
    "log1p": ("1.0 / (1.0 + {0})",),
    "sqrt": ("0.5 / {f}",),
    "rsqrt": ("-0.5 * {f} / {0}",),
    "cbrt": ("1.0 / (3.0 * {f} * {f})",),
    "rcbrt": ("-{f} / (3.0 * {0})",),
    "sin": ("cos({0})",),
    "cos": ("-sin({0})",),
    "tan": ("1.0 + {f} * {f}",),
    "sinpi": (f"{_PI} * cospi({{0}})",),
    "cospi": (f"-{_PI} * sinpi({{0}})",),
    "asin": ("rsqrt(1.0 - {0} * {0})",),
    "acos": ("-rsqrt(1.0 - {0} * {0})",),
    "atan": ("1.0 / (1.0 + {0} * {0})",),
    "sinh": ("cosh({0})",),
    "cosh": ("sinh({0})",),
    "tanh": ("1.0 - {f} * {f}",),
    "asinh": ("rsqrt({0} * {0} + 1.0)",),
    "acosh": ("rsqrt({0} * {0} - 1.0)",),
    "atanh": ("1.0 / (1.0 - {0} * {0})",),
    "erf": (f"{_2_SQRTPI} * exp(-({{0}} * {{0}}))",),
    "erfc": (f"-{_2_SQRTPI} * exp(-({{0}} * {{0}}))",),
    "erfinv": (f"{_SQRTPI_2} * exp({{f}} * {{f}})",),
    "erfcinv": (f"-{_SQRTPI_2} * exp({{f}} * {{f}})",),
    "erfcx": (f"2.0 * {{0}} * {{f}} - {_2_SQRTPI}",),
    "normcdf": ("0.3989422804014327 * exp(-0.5 * {0} * {0})",),
    "normcdfinv": ("2.5066282746310002 * exp(0.5 * {f} * {f})",),
    "sigmoid": ("{f} * (1.0 - {f})",),
    "fabs": ("({0} > 0.0) ? 1.0 : (({0} < 0.0) ? -1.0 : 0.0)",),
    "floor": ("0",),
    "ceil": ("0",),
    "round": ("0",),
    "trunc": ("0",),
    "logb": ("0",),
    "j0": ("-j1({0})",),
    "j1": ("j0({0}) - (({0} == 0.0) ? 0.5 : j1({0}) / {0})",),
    "y0": ("-y1({0})",),
    "y1": ("y0({0}) - y1({0}) / {0}",),
    "cyl_bessel_i0": ("cyl_bessel_i1({0})",),
    "cyl_bessel_i1": ("cyl_bessel_i0({0}) - (({0} == 0.0) ? 0.5 : cyl_bessel_i1({0}) / {0})",),
    "pow": (
        "({1} == 0.0) ? 0.0 : {1} * pow({0}, {1} - 1.0)",
        "({f} == 0.0) ? 0.0 : {f} * log({0})",
    ),
    "atan2": ("{1} / ({0} * {0} + {1} * {1})", "-{0} / ({0} * {0} + {1} * {1})"),
    "copysign": ("({0} == 0.0) ? 0.0 : copysign(1.0, {0}) * copysign(1.0, {1})", "0"),
    "fdim": ("({0} > {1}) ? 1.0 : 0.0", "({0} > {1}) ? -1.0 : 0.0"),
    "fdivide": ("1.0 / {1}", "-{f} / {1}"),
    "fmax": (_FMAX, _FMAX.format("{1}", "{0}")),
    "fmin": (_FMIN, _FMIN.format("{1}", "{0}")),
    "max": (_FMAX, _FMAX.format("{1}", "{0}")),
    "min": (_FMIN, _FMIN.format("{1}", "{0}")),
    "fmod": ("1.0", "-(({0} - {f}) / {1})"),
    "remainder": ("1.0", "-(({0} - {f}) / {1})"),
    "hypot": ("{0} / {f}", "{1} / {f}"),
    "rhypot": ("-{0} * {f} * {f} * {f}", "-{1} * {f} * {f} * {f}"),
    "norm3d": ("{0} / {f}", "{1} / {f}", "{2} / {f}"),
    "norm4d": ("{0} / {f}", "{1} / {f}", "{2} / {f}", "{3} / {f}"),
    "rnorm3d": tuple(f"-{{{k}}} * {{f}} * {{f}} * {{f}}" for k in range(3)),
    "rnorm4d": tuple(f"-{{{k}}} * {{f}} * {{f}} * {{f}}" for k in range(4)),
    "fma": ("{1}", "{0}", "1.0"),
}


def _fill(template: str, args: list[str], value: str) -> str:
    text = template.format(*(_p(a) for a in args), f=_p(value))
    # fmax/fmin's NaN test of a literal operand is always false: `x > 0 || 0 != 0` is `x > 0`.
    for a in args:
        if _is_number(a):
            text = text.replace(f" || {a} != {a})", ")")
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------------------------- versions
@dataclass
class _Step:
    """One statement of the single-assignment forward.

    :ivar stmt: the checked statement, or ``None`` for a copy of ``prev`` into ``version``.
    :ivar version: the tensor written (a version's name).
    :ivar reads: forward tensor name -> version name, for the tensors the statement reads.
    :ivar prev: for a copy, the version copied.
    """

    stmt: CheckedStatement | None
    tensor: str
    version: str
    reads: dict[str, str]
    prev: str | None = None


@dataclass
class _Version:
    name: str
    tensor: str
    op: str  # "=" or the accumulation operator of its statements
    steps: list[int] = field(default_factory=list)
    read: bool = False  # read by a statement since it was last written


class _Names:
    """Fresh names that clash with nothing in the definition."""

    def __init__(self, cdef: CheckedDef):
        self.used = set(cdef.params) | set(cdef.tensors) | set(cdef.sizes)
        for st in cdef.statements:
            self.used |= set(st.vars)

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used or name in BUILTINS or name in KEYWORDS or lookup_type(name) is not None:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


def _error(cdef: CheckedDef, st: CheckedStatement | None, message: str, hint: str | None = None):
    return TCDerivativeError(
        f"automatic backward: {message}",
        source=cdef.source,
        span=st.source.span if st is not None else cdef.ast.name_span,
        where=cdef.name,
        hint=hint,
    )


def _covers(cdef: CheckedDef, st: CheckedStatement) -> bool:
    """Whether ``st`` writes every element of its tensor (plain subscripts over the whole shape)."""
    if not st.plain_lhs or st.lhs_conditions:
        return False
    shape = cdef.tensor(st.tensor).shape
    for e, dim in zip(st.lhs, shape):
        r = st.range_of(e.name)
        if not (r.lo.is_const and r.lo.const == 0 and r.hi.minus_const(dim) == 0):
            return False
    return True


def _single_assignment(cdef: CheckedDef, names: _Names) -> tuple[list[_Step], dict[str, _Version]]:
    """The forward's statements with one tensor per version (see :class:`_Step`)."""
    writes: dict[str, int] = {}
    for st in cdef.statements:
        writes[st.tensor] = writes.get(st.tensor, 0) + 1
    current: dict[str, _Version] = {}
    versions: dict[str, _Version] = {}
    steps: list[_Step] = []
    count: dict[str, int] = {}

    def new_version(tensor: str, op: str, last: bool) -> _Version:
        k = count.get(tensor, 0)
        count[tensor] = k + 1
        v = _Version(tensor if last else names.fresh(f"{tensor}_{k}"), tensor, op)
        versions[v.name] = v
        current[tensor] = v
        return v

    for st in cdef.statements:
        reads = {}
        for node in A.walk(st.rhs):
            if isinstance(node, A.Access) and node.tensor in current:
                reads[node.tensor] = current[node.tensor].name
        for t in reads:
            current[t].read = True
        for e in st.lhs:
            for node in A.walk(e):
                if isinstance(node, A.Access) and node.tensor in current:
                    reads[node.tensor] = current[node.tensor].name
                    current[node.tensor].read = True
        writes[st.tensor] -= 1
        last = writes[st.tensor] == 0
        cur = current.get(st.tensor)
        if st.op == "=" or st.init or cur is None:
            if cur is not None and not _covers(cdef, st):
                raise _error(
                    cdef,
                    st,
                    f"the statement overwrites part of '{st.tensor}', which an earlier statement defined",
                    "write the parts into separate tensors",
                )
            if cur is None and not st.init and st.op not in ("=", "+="):
                raise _error(
                    cdef,
                    st,
                    f"'{st.op}' without '!' starts from the zeros tcjit allocates; write '{st.op}!'",
                )
            v = new_version(st.tensor, "=" if st.op == "=" else st.op, last)
        elif cur.op == st.op and not cur.read:
            v = cur  # one more accumulation into the same version
            if last:  # the final version keeps the tensor's name
                versions.pop(v.name)
                old = v.name
                v.name = st.tensor
                versions[v.name] = v
                for s in steps:
                    if s.version == old:
                        s.version = v.name
        elif st.op == "+=":  # a sum onto a value that was read: copy it into a new version first
            prev = cur
            v = new_version(st.tensor, "+=", last)
            steps.append(_Step(None, st.tensor, v.name, {st.tensor: prev.name}, prev=prev.name))
            v.steps.append(len(steps) - 1)
        else:
            raise _error(
                cdef,
                st,
                f"'{st.op}' onto a value of '{st.tensor}' that was read or made by another operator",
                "accumulate into a new tensor and combine the two",
            )
        v.read = False
        steps.append(_Step(st, st.tensor, v.name, reads))
        v.steps.append(len(steps) - 1)
    return steps, versions


# ------------------------------------------------------------------------------------ rendering
def _rename(e: A.Expr, reads: dict[str, str], cdef: CheckedDef) -> str:
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


def _decl(cdef: CheckedDef, tensor: str, name: str) -> str:
    info = cdef.tensor(tensor)
    return f"{info.dtype}{_dims(info.shape)} {name}"


def _param_text(cdef: CheckedDef, p: A.Param) -> str:
    if p.dims is None:
        return f"{p.type_name} {p.name}"
    return _decl(cdef, p.name, p.name)


def _where(ranges: list[tuple[str, str, str]], extra: list[str]) -> str:
    clauses = [f"{v} in {_p(lo)}:{_p(hi)}" for v, lo, hi in ranges] + extra
    return (" where " + ", ".join(clauses)) if clauses else ""


def _range_parts(r) -> tuple[tuple[str, str, str], list[str]]:
    """A ``where v in lo:hi`` clause for the range ``r`` and the conditions a bound that is a
    ``max`` (``lo``) or ``min`` (``hi``) of several needs besides (range clauses take plain size
    expressions)."""
    los, his = r.lo.alternatives("max"), r.hi.alternatives("min")
    extra = [f"{r.var} >= {_p(a.to_tc())}" for a in los[1:]] + [f"{r.var} < {_p(a.to_tc())}" for a in his[1:]]
    return (r.var, los[0].to_tc(), his[0].to_tc()), extra


def _bound_conditions(var: str, r) -> list[str]:
    """``lo <= var < hi`` as conditions (``var`` solved away: a let-binding)."""
    return [f"{var} >= {_p(a.to_tc())}" for a in r.lo.alternatives("max")] + [
        f"{var} < {_p(a.to_tc())}" for a in r.hi.alternatives("min")
    ]


def _statement_ranges(st: CheckedStatement) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The range clauses pinning ``st``'s variables, and conditions for min/max bounds."""
    ranges, extra = [], []
    for r in st.ranges:
        clause, more = _range_parts(r)
        ranges.append(clause)
        extra += more
    return ranges, extra


# ------------------------------------------------------------------------------------- the pass
class _Seed(NamedTuple):
    """A statement's seed when it is a plain access of the adjoint of its value: ``d_O(n, h)``, the
    adjoint's name, the access's subscripts (text) and the value."""

    access: str
    adjoint: str
    subscripts: tuple[str, ...]
    value: str


class _Poison:
    """A gradient that cannot be computed, with the reason."""

    def __init__(self, error: TCDerivativeError):
        self.error = error


class _Deriver:
    def __init__(self, cdef: CheckedDef, wanted: tuple[str, ...]):
        self.cdef = cdef
        self.names = _Names(cdef)
        self.steps, self.versions = _single_assignment(cdef, self.names)
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
        self.lines.append(f"{lhs} = {rhs}{_where(ranges, [])}")

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
        self.lines.append(f"{lhs} {op} {rhs}{_where(ranges, extra)}")
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

    def chain(self, e: A.Expr, seed: str, reads, st) -> list[tuple[A.Expr, str | _Poison]]:
        """(read, its adjoint contribution) for every active read in ``e``, given ``e``'s adjoint."""
        if not self.is_active(e, reads):
            return []
        text = lambda n: _rename(n, reads, self.cdef)  # noqa: E731
        if isinstance(e, (A.Access, A.Ident)):
            return [(e, seed)]
        if isinstance(e, A.Cast):
            return self.chain(e.arg, seed, reads, st)
        if isinstance(e, A.Unary):  # "-"
            return self.chain(e.arg, _neg(seed), reads, st)
        if isinstance(e, A.Select):
            c = text(e.cond)
            return self.chain(e.then, _sel(c, seed, "0.0"), reads, st) + self.chain(
                e.other, _sel(c, "0.0", seed), reads, st
            )
        if isinstance(e, A.Binary):
            lt, rt = text(e.lhs), text(e.rhs)
            if e.op == "+":
                left, right = seed, seed
            elif e.op == "-":
                left, right = seed, _neg(seed)
            elif e.op == "*":
                left, right = _mul(seed, rt), _mul(seed, lt)
            elif e.op == "/":
                left = f"{_p(seed)} / {_p(rt)}"
                right = _neg(f"{_p(seed)} * ({_p(lt)} / {_p(rt)}) / {_p(rt)}")
            elif e.op == "%":  # fmod on floats
                left = seed
                right = _neg(_mul(seed, f"(({_p(lt)} - {_p(text(e))}) / {_p(rt)})"))
            else:  # pragma: no cover - comparisons are inactive
                return []
            return self.chain(e.lhs, left, reads, st) + self.chain(e.rhs, right, reads, st)
        if isinstance(e, A.Call):
            templates = _DERIVATIVES.get(e.func)
            args = [text(a) for a in e.args]
            value = text(e)
            out: list[tuple[A.Expr, str | _Poison]] = []
            for k, a in enumerate(e.args):
                if not self.is_active(a, reads):
                    continue
                if templates is None:
                    err = _error(
                        self.cdef,
                        st,
                        f"'{e.func}' has no derivative tcjit can express, and a gradient flows "
                        f"through it in the statement writing '{st.tensor}'",
                        "compute that part outside the kernel, or give the kernel a backward of "
                        "your own (backward='<entry>' or tcjit.make_autograd)",
                    )
                    out += [(r, _Poison(err)) for r, _ in self.chain(a, "1.0", reads, st)]
                    continue
                if templates[k] == "0":
                    continue
                out += self.chain(a, _mul(seed, _fill(templates[k], args, value)), reads, st)
            return out
        return []

    # ------------------------------------------------------------------------ statements
    def differentiate(self, index: int) -> None:
        step = self.steps[index]
        v = step.version
        if v not in self.active or (v not in self.adjoint and v not in self.output_grads):
            return
        if v in self.poison:
            for r in self.sources(step):
                if r in self.active:
                    self.poison.setdefault(r, self.poison[v])
            return
        g_name = self.adjoint_name(v) if v in self.adjoint else self.output_grads[v]
        if step.stmt is None:  # a copy: the whole adjoint flows to the copied version
            vs, ranges = self.full_ranges(v)
            if step.prev in self.active:
                self.emit(step.prev, vs, f"{g_name}({', '.join(vs)})", ranges, [], True, False)
            return
        st = step.stmt
        reads = step.reads
        lhs = [_rename(e, reads, self.cdef) for e in st.lhs]
        g = f"{g_name}({', '.join(lhs)})"
        ranges, bounds = _statement_ranges(st)
        conditions = bounds + [_rename(c, reads, self.cdef) for c in st.conditions]
        f = _rename(st.rhs, reads, self.cdef)
        here = f"{v}({', '.join(lhs)})"
        if st.op in ("max=", "min="):
            seed = self.extremum_seed(v, f, g, here, lhs)
        elif st.op == "*=":
            seed = self.product_seed(v, f, g, lhs)
        else:
            seed = g
        # A contribution written in full over the statement's variables (d_O_0(b, n) = d_O(b, n) *
        # relu'(...)) is read back by the statement's later contributions with the same value
        # (d_bias(n) +=! d_O_0(b, n)) instead of computing it again.
        materialized: dict[str, tuple[str, str]] = {}  # contribution text -> (adjoint, its access)
        # The seed as a plain access of the adjoint of the statement's value: what a gather's
        # contribution may read from a zero-padded copy instead (see :meth:`padded_gather`).
        seed_access = _Seed(g, g_name, tuple(lhs), v) if seed == g else None
        pads: dict[tuple, str] = {}  # the zero-padded copies of the seed made for this statement
        for read, contrib in self.chain(st.rhs, seed, reads, st):
            target = reads.get(read.tensor, read.tensor) if isinstance(read, A.Access) else read.name
            if target not in self.active:
                continue
            if isinstance(contrib, _Poison):
                self.poison.setdefault(target, contrib.error)
                continue
            name = self.adjoint_name(target)
            materialized = {k: m for k, m in materialized.items() if m[0] != name}  # it changes now
            text = contrib
            if contrib in materialized:
                text = materialized[contrib][1]
            op, args = self.contribute(st, target, read, text, reads, ranges, conditions, seed_access, pads)
            if op == "=" and args == list(st.vars) and text == contrib:
                materialized[contrib] = (name, f"{name}({', '.join(args)})")

    def sources(self, step: _Step) -> set[str]:
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

    def extremum_seed(self, v: str, f: str, g: str, here: str, lhs: list[str]) -> str:
        """``max=`` / ``min=``: the count of arg-extrema (shared evenly), computed once per version."""
        cnt = self.counts.get(v)
        if cnt is None:
            cnt = self.counts[v] = self.names.fresh(f"n_{v}")
            first = True
            for k in self.versions[v].steps:
                s = self.steps[k]
                sl = [_rename(e, s.reads, self.cdef) for e in s.stmt.lhs]
                sf = _rename(s.stmt.rhs, s.reads, self.cdef)
                sh = f"{v}({', '.join(sl)})"
                op = "+=!" if first and _covers(self.cdef, s.stmt) else "+="
                if first and op == "+=":
                    vs, full = self.full_ranges(v)
                    self.lines.append(f"{cnt}({', '.join(vs)}) = 0.0{_where(full, [])}")
                first = False
                sr, bounds = _statement_ranges(s.stmt)
                conds = bounds + [_rename(c, s.reads, self.cdef) for c in s.stmt.conditions]
                self.lines.append(
                    f"{cnt}({', '.join(sl)}) {op} ({_p(sf)} == {sh}) ? 1.0 : 0.0{_where(sr, conds)}"
                )
        return _sel(f"{_p(f)} == {here}", f"{_p(g)} / {cnt}({', '.join(lhs)})", "0.0")

    def product_seed(self, v: str, f: str, g: str, lhs: list[str]) -> str:
        """``*=``: the product of the other factors, exact with zeros."""
        names = self.products.get(v)
        if names is None:
            nz, pz = self.names.fresh(f"z_{v}"), self.names.fresh(f"p_{v}")
            names = self.products[v] = (nz, pz)
            first = True
            for k in self.versions[v].steps:
                s = self.steps[k]
                sl = ", ".join(_rename(e, s.reads, self.cdef) for e in s.stmt.lhs)
                sf = _p(_rename(s.stmt.rhs, s.reads, self.cdef))
                sr, bounds = _statement_ranges(s.stmt)
                conds = bounds + [_rename(c, s.reads, self.cdef) for c in s.stmt.conditions]
                where = _where(sr, conds)
                covers = first and _covers(self.cdef, s.stmt)
                if first and not covers:
                    vs, full = self.full_ranges(v)
                    self.lines.append(f"{nz}({', '.join(vs)}) = 0.0{_where(full, [])}")
                    self.lines.append(f"{pz}({', '.join(vs)}) = 1.0{_where(full, [])}")
                bang = "!" if covers else ""
                self.lines.append(f"{nz}({sl}) +={bang} ({sf} == 0.0) ? 1.0 : 0.0{where}")
                self.lines.append(f"{pz}({sl}) *={bang} ({sf} == 0.0) ? 1.0 : {sf}{where}")
                first = False
        nz, pz = names
        at = ", ".join(lhs)
        fp = _p(f)
        return (
            f"({nz}({at}) == 0.0) ? {_p(g)} * {pz}({at}) / {fp} : "
            f"((({nz}({at}) == 1.0) && ({fp} == 0.0)) ? {_p(g)} * {pz}({at}) : 0.0)"
        )

    def contribute(
        self, st, target, read, contrib, reads, ranges, conditions, seed: _Seed | None, pads: dict
    ) -> tuple[str, list[str]]:
        """``d_target(read's subscripts) += contrib`` over ``st``'s iterations, as a gather where a
        shifted subscript can be solved for one of its variables; the operator written and the
        left-hand side's subscripts (empty for a gather)."""
        if isinstance(read, A.Ident):  # a rank-0 argument: a full reduction
            return self.emit(target, [], contrib, ranges, conditions, covers=True, reduces=bool(st.vars)), []
        shape = self.shape_of(target)
        index_set = set(st.vars)
        args: list[str] = []
        lets: list[str] = []
        extra = list(conditions)
        ranges = list(ranges)
        affines: list[Affine | None] = [self.affine(a, index_set) for a in read.args]
        # (eliminated variable, the new one, the rest of the subscript, the coefficient, the new one's extent)
        solutions: list[tuple[str, str, Affine, int, SizeExpr]] = []
        eliminated: set[str] = set()
        solved_vars: list[tuple[str, set[str]]] = []  # eliminated variable -> the variables it is made of
        plain: list[str] = []
        for k, (a, aff) in enumerate(zip(read.args, affines)):
            fresh = a.name not in plain and a.name not in eliminated if isinstance(a, A.Ident) else False
            if isinstance(a, A.Ident) and a.name in index_set and fresh:
                plain.append(a.name)
                args.append(a.name)
                continue
            var = None if aff is None else self.solvable(aff, k, affines, st, plain, eliminated)
            if var is None:
                args.append(_rename(a, reads, self.cdef))
                continue
            c = aff.coeff(var)
            rest = Affine.of({u: cu for u, cu in aff.coeffs if u != var}, aff.rest)
            y = self.names.fresh(f"y{k}")
            solved = f"{y} - {_p(_affine_text(rest))}" if c == 1 else f"{_p(_affine_text(rest))} - {y}"
            lets.append(f"{var} = {solved}")
            extra += _bound_conditions(var, st.range_of(var))
            ranges = [t for t in ranges if t[0] != var]
            ranges.append((y, "0", shape[k].to_tc()))
            eliminated.add(var)
            solved_vars.append((var, {y} | set(rest.vars)))
            solutions.append((var, y, rest, c, shape[k]))
            args.append(y)
        if solutions and seed is not None:
            padded = self.padded_gather(st, contrib, solutions, conditions, seed, pads)
            if padded is not None:  # no let-bindings, no bound conditions: a plain convolution
                contrib, lets, extra = padded, [], list(conditions)
                solved_vars = []
        # Does the accumulation write every element of the adjoint? Its subscripts must be
        # distinct variables ranging over whole dimensions, and no condition may restrict them
        # alone (conditions that also involve a reduced variable do not hide an element).
        covers = len(plain) + len(eliminated) == len(args)
        if covers:
            lo_hi = {t[0]: (t[1], t[2]) for t in ranges}
            whole = all(lo_hi[a] == ("0", dim.to_tc()) for a, dim in zip(args, shape))
            bounded = any(
                len(st.range_of(a).lo.alternatives("max")) > 1
                or len(st.range_of(a).hi.alternatives("min")) > 1
                for a in plain
            )
            covers = whole and not bounded
        if covers:
            deps = dict(solved_vars)
            lhs_vars = set(args)
            for c in st.conditions:
                used = set()
                for u in A.index_vars(c):
                    used |= deps.get(u, {u})
                if used <= lhs_vars:
                    covers = False
        reduces = any(t[0] not in args for t in ranges)
        op = self.emit(target, args, contrib, ranges, lets + extra, covers, reduces)
        return op, (args if not lets else [])

    def padded_gather(self, st, contrib: str, solutions, conditions, seed: _Seed, pads: dict) -> str | None:
        """``contrib`` of a gather, reading the statement's seed from a zero-padded copy instead of
        behind let-bindings and bound conditions; ``None`` where that does not apply.

        A convolution's input gradient ``d_I(y) += d_O(h) * W(r)`` with ``h = y - r`` needs
        ``0 <= h < OH``: as conditions, they split every loop of the kernel into pieces. Written
        ``d_I(y) += d_O_pad(y - r + KH - 1) * W(r)`` over a copy of ``d_O`` with ``KH - 1`` zeros
        on each side (``d_O_pad(p) = (KH - 1 <= p < OH + KH - 1) ? d_O(p - KH + 1) : 0.0``), it is
        a plain convolution, mapped as the forward is. It applies where the seed (the adjoint of
        the statement's value) is a plain access in which each eliminated variable is a whole
        subscript, every eliminated variable was solved with coefficient 1 (``h = y - rest``) and
        appears nowhere else in the contribution or in a condition, and no range has ``min``/``max``
        bounds. The out-of-range terms then read zeros and add nothing (their other factor is
        finite where the weights are).
        """
        seed, g_name, lhs, value = seed
        if seed not in contrib or any(s[3] != 1 for s in solutions):
            return None
        gone = {s[0] for s in solutions}
        token = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, gone)) + r")(?![\w(])")
        if token.search(contrib.replace(seed, "")) or any(token.search(c) for c in conditions):
            return None
        positions = {}
        for j, a in enumerate(lhs):
            if a in gone:
                positions[a] = j
            elif token.search(a):
                return None
        if set(positions) != gone:
            return None

        def bounds_of(u: str):
            r = st.range_of(u)
            if len(r.lo.alternatives("max")) > 1 or len(r.hi.alternatives("min")) > 1:
                return None
            return r.lo, r.hi - 1

        shape = self.shape_of(value)
        offsets: dict[int, tuple] = {}  # position -> (offset, extent, lo, hi of the variable)
        access = list(lhs)
        for v, y, rest, _, target_extent in solutions:
            most, least = rest.rest, rest.rest  # max and min of rest over its variables' box
            for u, c in rest.coeffs:
                b = bounds_of(u)
                if b is None:
                    return None
                lo, hi = b
                most, least = (most + hi * c, least + lo * c) if c > 0 else (most + lo * c, least + hi * c)
            vb = bounds_of(v)
            if vb is None:
                return None
            k = positions[v]
            offset = most  # y - rest + offset >= 0
            extent = target_extent + most - least
            offsets[k] = (offset, extent, vb[0], vb[1] + 1)
            access[k] = _affine_text(Affine.of({y: 1, **{u: -c for u, c in rest.coeffs}}, offset - rest.rest))
        key = (g_name, tuple(sorted((k, o[0].to_tc(), o[1].to_tc()) for k, o in offsets.items())))
        pad = pads.get(key)
        if pad is None:
            pad = pads[key] = self.names.fresh(f"{g_name}_pad")
            idx = [self.names.fresh(f"p{j}") for j in range(len(lhs))]
            inner, conds, ranges = [], [], []
            for j, i in enumerate(idx):
                if j in offsets:
                    offset, extent, lo, hi = offsets[j]
                    inner.append(_affine_text(Affine.of({i: 1}, -offset)))
                    conds += [f"{i} >= {_p((lo + offset).to_tc())}", f"{i} < {_p((hi + offset).to_tc())}"]
                    ranges.append((i, "0", extent.to_tc()))
                else:
                    inner.append(i)
                    ranges.append((i, "0", shape[j].to_tc()))
            read = f"{g_name}({', '.join(inner)})"
            self.lines.append(
                f"{pad}({', '.join(idx)}) = ({' && '.join(conds)}) ? {read} : 0.0{_where(ranges, [])}"
            )
        return contrib.replace(seed, f"{pad}({', '.join(access)})")

    def affine(self, e: A.Expr, index_set) -> Affine | None:
        if any(isinstance(n, A.Access) for n in A.walk(e)):
            return None
        return affine_form(
            e, index_set, lambda n: n in self.cdef.sizes, lambda t, k: self.cdef.tensor(t).shape[k]
        )

    def solvable(self, aff: Affine, k: int, affines, st, plain, eliminated) -> str | None:
        """A variable of coefficient +-1 in ``aff`` alone among the subscripts, to solve for:
        preferably one of the forward statement's left-hand side variables."""
        others = set()
        for j, b in enumerate(affines):
            if j != k and b is not None:
                others |= b.vars
        candidates = [
            v
            for v, c in aff.coeffs
            if abs(c) == 1 and v not in others and v not in plain and v not in eliminated
        ]
        if not candidates:
            return None
        candidates.sort(key=lambda v: (v not in st.lhs_vars, st.vars.index(v)))
        return candidates[0]

    # ------------------------------------------------------------------------------ driver
    def run(self, keep: tuple[str, ...] | None, strict: bool, absent: frozenset[str]) -> Derivation:
        cdef = self.cdef
        self.counts: dict[str, str] = {}
        self.products: dict[str, tuple[str, str]] = {}
        # The outputs' gradients: parameters, seeds of their final versions. An absent output's
        # final version has no seed: its adjoint is a temporary's (started by its first
        # contribution, never written when no later statement reads the output).
        self.output_grads = {}
        grad_params = []
        for o in cdef.outputs:
            if o in absent:
                continue
            gname = self.names.fresh(f"d_{o}")
            grad_params.append(_decl(cdef, o, gname))
            if cdef.tensor(o).dtype.is_float:
                self.output_grads[self.final[o]] = gname
        for index in reversed(range(len(self.steps))):
            self.differentiate(index)
        # the gradients returned
        returns = []
        poisoned = {}
        for x in self.wanted:
            if x in self.poison:
                if strict:
                    raise self.poison[x]
                poisoned[x] = self.poison[x]
                continue
            name = self.adjoint_name(x)
            if x in cdef.scalars:
                returns.append(f"{cdef.scalars[x].dtype}() {name}")
            else:
                returns.append(_decl(cdef, x, name))
            if x not in self.started:
                self.start(x)
        # forward values the backward reads: inputs, outputs, saved intermediates
        text = "\n".join(self.lines)
        saved = []
        for value in self.versions:
            if value in cdef.outputs or value in self.inputs:
                continue
            if _mentions(text, value):
                saved.append(value)
        if keep is not None:
            missing = set(saved) - set(keep)
            if missing:
                raise TCInternalError(
                    f"{cdef.name}: a backward reads {', '.join(sorted(missing))}, which the forward "
                    "does not save"
                )
            saved = list(keep)
        fwd_name = self.names.fresh(f"{cdef.name}__fwd")
        bwd_name = self.names.fresh(f"{cdef.name}__bwd")
        params = [_param_text(cdef, p) for p in cdef.ast.params]
        outs = [_decl(cdef, o, o) for o in cdef.outputs]
        saved_decls = [_decl(cdef, self.tensor_of(s), s) for s in saved]
        forward = self.forward_text(fwd_name, params, outs + saved_decls)
        backward = (
            f"def {bwd_name}({', '.join(params + outs + saved_decls + grad_params)}) -> "
            f"({', '.join(returns)}) {{\n" + "".join(f"    {line}\n" for line in self.lines) + "}\n"
        )
        wanted = tuple(x for x in self.wanted if x not in poisoned)
        return Derivation(forward, fwd_name, tuple(saved), backward, bwd_name, wanted, poisoned, absent)

    def forward_text(self, name: str, params: list[str], returns: list[str]) -> str:
        lines = []
        for step in self.steps:
            if step.stmt is None:
                vs, ranges = self.full_ranges(step.version)
                idx = ", ".join(vs)
                lines.append(f"{step.version}({idx}) = {step.prev}({idx}){_where(ranges, [])}")
                continue
            st = step.stmt
            lhs = ", ".join(_rename(e, step.reads, self.cdef) for e in st.lhs)
            rhs = _rename(st.rhs, step.reads, self.cdef)
            sr, bounds = _statement_ranges(st)
            conds = bounds + [_rename(c, step.reads, self.cdef) for c in st.conditions]
            op = st.op + ("!" if st.init else "")
            lines.append(f"{step.version}({lhs}) {op} {rhs}{_where(sr, conds)}")
        body = "".join(f"    {line}\n" for line in lines)
        return f"def {name}({', '.join(params)}) -> ({', '.join(returns)}) {{\n{body}}}\n"


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\(", text) is not None


def _affine_text(a: Affine) -> str:
    parts = [v if c == 1 else f"-{v}" if c == -1 else f"{c} * {v}" for v, c in a.coeffs]
    rest = a.rest.to_tc()
    if rest != "0" or not parts:
        parts.append(rest)
    return " + ".join(parts).replace("+ -", "- ")


def derive(
    cdef: CheckedDef,
    wanted: tuple[str, ...] | None = None,
    saved: tuple[str, ...] | None = None,
    absent: frozenset[str] = frozenset(),
) -> Derivation:
    """The augmented forward and the backward of ``cdef`` (see the module docstring).

    :arg wanted: the inputs (tensors or rank-0 arguments of a float type) whose gradients the
        backward returns; ``None``: every such input whose gradient can be derived (the others are
        listed in :attr:`Derivation.poisoned`).
    :arg saved: the intermediates the backward takes as parameters (those the forward derived for
        every input saves, when deriving for fewer); ``None``: exactly those it reads.
    :arg absent: outputs whose gradient is known to be zero: the backward takes no ``d_<O>`` for
        them (its parameters are the others' gradients, in output order), their adjoints start
        from their first contribution, and contributions that would only flow from their
        gradients are left out. A wanted input that no contribution then reaches gets zeros.
    :raises TCDerivativeError: a statement cannot be differentiated (the error names it): a
        builtin without a derivative on the way to a wanted gradient, a partial overwrite, an
        accumulation onto a value of another operator.
    """
    absent = frozenset(absent)
    unknown = absent - set(cdef.outputs)
    if unknown:
        raise TCInternalError(f"{cdef.name}: {', '.join(sorted(unknown))}: absent gradients of non-outputs")
    strict = wanted is not None
    if wanted is None:
        wanted = tuple(
            p
            for p in cdef.params
            if (cdef.scalars[p].dtype if p in cdef.scalars else cdef.tensor(p).dtype).is_float
        )
    return _Deriver(cdef, tuple(wanted)).run(saved, strict, absent)
