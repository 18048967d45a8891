"""Symbolic size expressions: the ranges and shapes that range inference derives.

A :class:`SizeExpr` is an integer expression over size symbols built from ``+ - *``, floor
division by a positive constant, ``min`` and ``max``. It is kept in a canonical form (a linear
combination of atoms plus a constant) so that equal expressions compare equal and simple
identities hold: ``(I - 1) / 2 + 1`` is ``(I + 1) / 2``, ``min(N, N + 1)`` is ``N``.
Division floors (toward minus infinity), as range inference assumes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..names import isl_name

__all__ = ["MAX_TERMS", "SizeExpr", "SizeExprTooComplex", "const", "smax", "smin", "sym"]

#: Products of sums are expanded; one with more terms than this is refused rather than computed
#: (a size expression of the language never needs so many).
MAX_TERMS = 256


class SizeExprTooComplex(ValueError):
    """A size expression would expand to more than :data:`MAX_TERMS` terms."""


@dataclass(frozen=True, order=True)
class _Sym:
    name: str

    def key(self) -> tuple:
        return (0, self.name)


@dataclass(frozen=True)
class _FloorDiv:
    num: SizeExpr
    den: int

    def key(self) -> tuple:
        return (1, self.num.key(), self.den)


@dataclass(frozen=True)
class _MinMax:
    op: str  # "min" | "max"
    args: tuple[SizeExpr, ...]

    def key(self) -> tuple:
        return (2, self.op, tuple(a.key() for a in self.args))


@dataclass(frozen=True)
class _Prod:
    factors: tuple[_Atom, ...]  # sorted, at least two

    def key(self) -> tuple:
        return (3, tuple(f.key() for f in self.factors))


_Atom = _Sym | _FloorDiv | _MinMax | _Prod


def _atom_factors(a: _Atom) -> tuple[_Atom, ...]:
    return a.factors if isinstance(a, _Prod) else (a,)


def _mul_atoms(a: _Atom, b: _Atom) -> _Atom:
    return _Prod(tuple(sorted(_atom_factors(a) + _atom_factors(b), key=lambda f: f.key())))


@dataclass(frozen=True)
class SizeExpr:
    """An integer expression of size symbols in canonical form: ``sum(coeff * atom) + const``.

    Build with :func:`sym`, :func:`const`, the operators ``+ - *`` and ``//`` (by a positive
    ``int``), :func:`smin` and :func:`smax`; evaluate with :meth:`evaluate`.
    """

    terms: tuple[tuple[_Atom, int], ...] = ()
    const: int = 0

    # ------------------------------------------------------------------------------ construction
    @staticmethod
    def _make(terms: Mapping[_Atom, int], c: int) -> SizeExpr:
        items = sorted(((a, k) for a, k in terms.items() if k != 0), key=lambda ak: ak[0].key())
        return SizeExpr(tuple(items), c)

    def key(self) -> tuple:
        return (tuple((a.key(), k) for a, k in self.terms), self.const)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def _dict(self) -> dict[_Atom, int]:
        return dict(self.terms)

    def __add__(self, other: SizeExpr | int) -> SizeExpr:
        other = _lift(other)
        d = self._dict()
        for a, k in other.terms:
            d[a] = d.get(a, 0) + k
        return SizeExpr._make(d, self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> SizeExpr:
        return SizeExpr._make({a: -k for a, k in self.terms}, -self.const)

    def __sub__(self, other: SizeExpr | int) -> SizeExpr:
        return self + (-_lift(other))

    def __rsub__(self, other: SizeExpr | int) -> SizeExpr:
        return _lift(other) - self

    def __mul__(self, other: SizeExpr | int) -> SizeExpr:
        other = _lift(other)
        if other.is_const:
            return SizeExpr._make({a: k * other.const for a, k in self.terms}, self.const * other.const)
        if self.is_const:
            return other * self
        if (len(self.terms) + 1) * (len(other.terms) + 1) > MAX_TERMS:
            raise SizeExprTooComplex(f"the product of {self} and {other} has too many terms")
        d: dict[_Atom, int] = {}
        for a, k in self.terms:
            for b, l in other.terms:
                m = _mul_atoms(a, b)
                d[m] = d.get(m, 0) + k * l
        for a, k in self.terms:
            d[a] = d.get(a, 0) + k * other.const
        for b, l in other.terms:
            d[b] = d.get(b, 0) + l * self.const
        return SizeExpr._make(d, self.const * other.const)

    __rmul__ = __mul__

    def floordiv(self, den: int) -> SizeExpr:
        """``floor(self / den)`` for a positive integer ``den``."""
        if den <= 0:
            raise ValueError("size expressions divide by positive constants only")
        if den == 1:
            return self
        if self.is_const:
            return const(self.const // den)
        if all(k % den == 0 for _, k in self.terms) and self.const % den == 0:
            return SizeExpr._make({a: k // den for a, k in self.terms}, self.const // den)
        # Canonical form: floor((den*q + r) / den) = q + floor(r / den). Coefficients keep their
        # sign in r (|coeff| < den) and the constant lies in [0, den), so (I - 1) / 2 + 1 and
        # (I + 1) / 2 are one value, and (H - KH) / 2 stays as written.
        q_terms = {a: int(k / den) for a, k in self.terms}
        r_terms = {a: k - den * int(k / den) for a, k in self.terms}
        q = SizeExpr._make(q_terms, self.const // den)
        r = SizeExpr._make(r_terms, self.const % den)
        if r.is_const:
            return q + r.const // den
        return q + SizeExpr._make({_FloorDiv(r, den): 1}, 0)

    def __floordiv__(self, den: int) -> SizeExpr:
        return self.floordiv(den)

    # ------------------------------------------------------------------------------- inspection
    def symbols(self) -> frozenset[str]:
        """The size symbols this expression depends on."""
        out: set[str] = set()
        for a, _ in self.terms:
            out |= _atom_symbols(a)
        return frozenset(out)

    def evaluate(self, sizes: Mapping[str, int]) -> int:
        """The value for concrete ``sizes``; raises ``KeyError`` naming a missing symbol."""
        return self._value(sizes, min, max, int)

    def evaluate_with(self, sizes: Mapping[str, object], minimum, maximum):
        """The value for ``sizes`` that may be symbolic integers (torch's ``SymInt``, as a traced
        shape holds): no conversion to ``int`` (which would fix a traced size), ``+ - * //`` as
        the values define them, and ``min``/``max`` by ``minimum``/``maximum``
        (``torch.sym_min``, ``torch.sym_max``)."""
        return self._value(sizes, minimum, maximum, _itself)

    def _value(self, sizes, minimum, maximum, read):
        """The value, each symbol's ``read(sizes[name])``, min and max by ``minimum``/``maximum``."""
        out = self.const
        for a, k in self.terms:
            out = out + k * _atom_value(a, sizes, minimum, maximum, read)
        return out

    def bounds(self) -> tuple[float, float]:
        """The infimum and supremum over every assignment of sizes >= 1 (``-inf``/``inf`` if none).

        Exact when the expression is affine in the sizes; a sound enclosure otherwise. Used to prove
        at definition time that a subscript leaves its tensor whatever the sizes.
        """
        lo = hi = float(self.const)
        for a, k in self.terms:
            alo, ahi = _atom_bounds(a)
            tlo, thi = (k * alo, k * ahi) if k > 0 else (k * ahi, k * alo)
            lo, hi = lo + tlo, hi + thi
        return lo, hi

    def alternatives(self, op: str) -> tuple[SizeExpr, ...]:
        """``self`` as the ``op`` (``"min"`` or ``"max"``) of min/max-free expressions where it is
        one (``min(a, b) + 1`` -> ``(a + 1, b + 1)``), else ``(self,)``."""
        for k, (atom, coeff) in enumerate(self.terms):
            if isinstance(atom, _MinMax) and atom.op == op and coeff == 1:
                rest = SizeExpr(self.terms[:k] + self.terms[k + 1 :], self.const)
                return tuple(a + rest for a in atom.args)
        return (self,)

    def minus_const(self, other: SizeExpr) -> int | None:
        """``self - other`` if that difference is a constant, else ``None``."""
        d = self - other
        return d.const if d.is_const else None

    def __str__(self) -> str:
        return self.to_tc()

    def __repr__(self) -> str:
        return f"SizeExpr({self.to_tc()!r})"

    def to_tc(self) -> str:
        """TC syntax (division floors)."""
        return _render(self, _atom_tc)

    def to_isl(self) -> str:
        """isl syntax: ``floor(e/d)``, ``min(a, b)``, products written out; symbols by their isl
        names (:func:`~tcjit.polyhedral.names.isl_name`)."""
        return _render(self, _atom_isl)

    def substitute(self, values: Mapping[str, int]) -> SizeExpr:
        """This expression with the symbols ``values`` names replaced by their values (a partial
        evaluation: ``(H - KH + 1).substitute({"KH": 3})`` is ``H - 2``)."""
        out = const(self.const)
        for a, k in self.terms:
            out = out + _atom_substitute(a, values) * k
        return out

    def to_c(self, name) -> str:
        """C ``int64_t`` arithmetic for this expression, each symbol printed as ``name(symbol)``
        (an ``int64_t`` C expression); floor division and min/max through the C prelude's
        ``tc_floordiv_i64``, ``tc_min_i64`` and ``tc_max_i64``."""
        if self.is_const:
            return str(self.const) if -(1 << 31) < self.const < (1 << 31) else f"INT64_C({self.const})"
        terms = []
        for a, k in self.terms:
            text = _atom_c(a, name)
            terms.append(text if k == 1 else f"{k} * {text}")
        if self.const:
            terms.append(str(self.const))
        return "(" + " + ".join(terms) + ")"


def _lift(x: SizeExpr | int) -> SizeExpr:
    if isinstance(x, SizeExpr):
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"cannot use {x!r} as a size expression")
    return SizeExpr((), x)


def sym(name: str) -> SizeExpr:
    """The size symbol ``name``."""
    return SizeExpr(((_Sym(name), 1),), 0)


def const(value: int) -> SizeExpr:
    """The constant ``value``."""
    return SizeExpr((), int(value))


def _dominant(op: str, args: list[SizeExpr]) -> list[SizeExpr]:
    """Drop arguments that differ from another by a constant and cannot be the min (max)."""
    pick_first = (lambda d: d <= 0) if op == "min" else (lambda d: d >= 0)
    kept: list[SizeExpr] = []
    for a in args:
        for idx, b in enumerate(kept):
            d = a.minus_const(b)
            if d is not None:
                if pick_first(d):
                    kept[idx] = a
                break
        else:
            kept.append(a)
    return kept


def _minmax(op: str, args: list[SizeExpr]) -> SizeExpr:
    # Compare as given first (min(x, x + 1) is x even when x is itself a min), then flattened.
    args = _dominant(op, [_lift(a) for a in args])
    flat: list[SizeExpr] = []
    for a in args:
        a = _lift(a)
        if len(a.terms) == 1 and a.const == 0 and a.terms[0][1] == 1 and isinstance(a.terms[0][0], _MinMax):
            inner = a.terms[0][0]
            if inner.op == op:
                flat.extend(inner.args)
                continue
        flat.append(a)
    kept = _dominant(op, flat)
    if len(kept) == 1:
        return kept[0]
    kept.sort(key=lambda e: e.key())
    return SizeExpr(((_MinMax(op, tuple(kept)), 1),), 0)


def smin(*args: SizeExpr | int) -> SizeExpr:
    """``min(args...)``, simplified when arguments differ by constants."""
    return _minmax("min", list(args))


def smax(*args: SizeExpr | int) -> SizeExpr:
    """``max(args...)``, simplified when arguments differ by constants."""
    return _minmax("max", list(args))


def _atom_symbols(a: _Atom) -> set[str]:
    if isinstance(a, _Sym):
        return {a.name}
    if isinstance(a, _FloorDiv):
        return set(a.num.symbols())
    if isinstance(a, _MinMax):
        return set().union(*(x.symbols() for x in a.args))
    return set().union(*(_atom_symbols(f) for f in a.factors))


def _atom_bounds(a: _Atom) -> tuple[float, float]:
    inf = float("inf")
    if isinstance(a, _Sym):
        return 1.0, inf
    if isinstance(a, _FloorDiv):
        lo, hi = a.num.bounds()
        return lo // a.den if lo != -inf else lo, hi // a.den if hi != inf else hi
    if isinstance(a, _MinMax):
        bs = [x.bounds() for x in a.args]
        pick = min if a.op == "min" else max
        return pick(b[0] for b in bs), pick(b[1] for b in bs)
    lo, hi = 1.0, 1.0  # a product: an enclosure only when every factor is positive
    for f in a.factors:
        flo, fhi = _atom_bounds(f)
        if flo < 1:
            return -inf, inf
        lo, hi = lo * flo, hi * fhi
    return lo, hi


def _atom_substitute(a: _Atom, values: Mapping[str, int]) -> SizeExpr:
    if isinstance(a, _Sym):
        return const(values[a.name]) if a.name in values else SizeExpr(((a, 1),), 0)
    if isinstance(a, _FloorDiv):
        return a.num.substitute(values).floordiv(a.den)
    if isinstance(a, _MinMax):
        return _minmax(a.op, [x.substitute(values) for x in a.args])
    out = const(1)
    for f in a.factors:
        out = out * _atom_substitute(f, values)
    return out


def _atom_c(a: _Atom, name) -> str:
    if isinstance(a, _Sym):
        return name(a.name)
    if isinstance(a, _FloorDiv):
        return f"tc_floordiv_i64({a.num.to_c(name)}, {a.den})"
    if isinstance(a, _MinMax):
        text = a.args[0].to_c(name)
        for x in a.args[1:]:
            text = f"tc_{a.op}_i64({text}, {x.to_c(name)})"
        return text
    return "(" + " * ".join(_atom_c(f, name) for f in a.factors) + ")"


def _itself(x):
    return x


def _atom_value(a: _Atom, sizes: Mapping[str, object], minimum, maximum, read):
    """An atom's value (:meth:`SizeExpr._value`)."""
    if isinstance(a, _Sym):
        return read(sizes[a.name])
    if isinstance(a, _FloorDiv):
        return a.num._value(sizes, minimum, maximum, read) // a.den
    if isinstance(a, _MinMax):
        pick = minimum if a.op == "min" else maximum
        out = a.args[0]._value(sizes, minimum, maximum, read)
        for x in a.args[1:]:
            out = pick(out, x._value(sizes, minimum, maximum, read))
        return out
    out = 1
    for f in a.factors:
        out = out * _atom_value(f, sizes, minimum, maximum, read)
    return out


def _atom_tc(a: _Atom) -> tuple[str, bool]:
    """(text, is_simple): simple texts need no parentheses as a factor."""
    if isinstance(a, _Sym):
        return a.name, True
    if isinstance(a, _FloorDiv):
        num = a.num.to_tc()
        return (f"({num}) / {a.den}" if not a.num.is_const and len(a.num.terms) + (a.num.const != 0) > 1
                else f"{num} / {a.den}"), False  # fmt: skip
    if isinstance(a, _MinMax):
        return f"{a.op}({', '.join(x.to_tc() for x in a.args)})", True
    parts = []
    for f in a.factors:
        t, simple = _atom_tc(f)
        parts.append(t if simple else f"({t})")
    return " * ".join(parts), False


def _atom_isl(a: _Atom) -> tuple[str, bool]:
    if isinstance(a, _Sym):
        return isl_name(a.name), True
    if isinstance(a, _FloorDiv):
        return f"floor(({a.num.to_isl()})/{a.den})", True
    if isinstance(a, _MinMax):
        return f"{a.op}({', '.join(x.to_isl() for x in a.args)})", True
    return "*".join(_atom_isl(f)[0] for f in a.factors), False


def _render(e: SizeExpr, atom) -> str:
    if e.is_const:
        return str(e.const)
    out = ""
    # Positive terms first reads naturally (H - KH + 1); the canonical order is kept otherwise.
    ordered = sorted(e.terms, key=lambda ak: ak[1] < 0)
    for idx, (a, k) in enumerate(ordered):
        text, simple = atom(a)
        if abs(k) != 1 and not simple:
            text = f"({text})"
        body = text if abs(k) == 1 else f"{abs(k)} * {text}"
        if idx == 0:
            out = body if k > 0 else f"-{body}" if simple or abs(k) != 1 else f"-({body})"
        else:
            out += f" + {body}" if k > 0 else f" - {body}" if simple or abs(k) != 1 else f" - ({body})"
    if e.const:
        out += f" + {e.const}" if e.const > 0 else f" - {-e.const}"
    return out
