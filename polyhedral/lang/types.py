"""Scalar types of the TC language and the promotion rules that type expressions.

Rules (they mirror C's usual arithmetic conversions, without C's promotion of small integers to
``int``, so that ``uint8 + uint8`` stays ``uint8`` as in TC):

* float beats integer; between floats the wider wins; ``float16`` with ``bfloat16`` gives ``float32``.
* between integers of one signedness the wider wins; mixed signedness follows C: the unsigned type
  if it is at least as wide, else the signed one.
* ``bool`` takes the other operand's type (``bool`` with ``bool`` gives ``int32``, as C's promotion).
* literals, size symbols and index variables are *weak*: they adopt the type of a typed operand.
  An integer literal defaults to ``int32``, a size or index value to ``int64``; a float literal
  defaults to the statement's float type (the type of the tensor written if it is a float, else
  ``float32``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "SCALAR_TYPES",
    "TYPE_ALIASES",
    "ScalarType",
    "canonical_type",
    "common_type",
    "is_narrowing",
    "lookup_type",
]


@dataclass(frozen=True)
class ScalarType:
    """A TC scalar type.

    :ivar name: canonical name (``float32``, never the alias ``float``).
    :ivar kind: ``"bool"``, ``"int"``, ``"uint"`` or ``"float"``.
    :ivar bits: storage width in bits.
    """

    name: str
    kind: str
    bits: int

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integral(self) -> bool:
        return self.kind in ("int", "uint", "bool")

    @property
    def is_signed(self) -> bool:
        return self.kind in ("int", "float")

    @property
    def is_half(self) -> bool:
        """float16 and bfloat16 are stored narrow but computed in float32."""
        return self.name in ("float16", "bfloat16")

    @property
    def compute(self) -> ScalarType:
        """The type arithmetic on this type is carried out in (float for the half types)."""
        return SCALAR_TYPES["float32"] if self.is_half else self

    @property
    def min_value(self) -> int | float:
        if self.is_float:
            return float("-inf")
        if self.kind == "bool":
            return 0
        return -(1 << (self.bits - 1)) if self.kind == "int" else 0

    @property
    def max_value(self) -> int | float:
        if self.is_float:
            return float("inf")
        if self.kind == "bool":
            return 1
        return (1 << (self.bits - 1)) - 1 if self.kind == "int" else (1 << self.bits) - 1

    def __str__(self) -> str:
        return self.name


SCALAR_TYPES: dict[str, ScalarType] = {
    t.name: t
    for t in (
        ScalarType("bool", "bool", 8),
        ScalarType("uint8", "uint", 8),
        ScalarType("uint16", "uint", 16),
        ScalarType("uint32", "uint", 32),
        ScalarType("uint64", "uint", 64),
        ScalarType("int8", "int", 8),
        ScalarType("int16", "int", 16),
        ScalarType("int32", "int", 32),
        ScalarType("int64", "int", 64),
        ScalarType("float16", "float", 16),
        ScalarType("bfloat16", "float", 16),
        ScalarType("float32", "float", 32),
        ScalarType("float64", "float", 64),
    )
}

TYPE_ALIASES: dict[str, str] = {"float": "float32", "double": "float64", "half": "float16"}

BOOL = SCALAR_TYPES["bool"]
INT32 = SCALAR_TYPES["int32"]
INT64 = SCALAR_TYPES["int64"]
FLOAT32 = SCALAR_TYPES["float32"]


def canonical_type(name: str) -> str:
    """The canonical spelling of a type name (``float`` -> ``float32``); the name if unknown."""
    return TYPE_ALIASES.get(name, name)


def lookup_type(name: str) -> ScalarType | None:
    """The scalar type named ``name`` (aliases allowed), or ``None``."""
    return SCALAR_TYPES.get(canonical_type(name))


def common_type(a: ScalarType, b: ScalarType) -> ScalarType:
    """The type of a binary arithmetic operation on two typed (non-weak) operands."""
    if a == b:
        return INT32 if a.kind == "bool" else a
    if a.kind == "bool":
        return b
    if b.kind == "bool":
        return a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            if a.bits == b.bits:  # float16 with bfloat16
                return FLOAT32
            return a if a.bits > b.bits else b
        return a if a.is_float else b
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    unsigned, signed = (a, b) if a.kind == "uint" else (b, a)
    return unsigned if unsigned.bits >= signed.bits else signed


def is_narrowing(value: ScalarType, target: ScalarType) -> bool:
    """Whether storing a ``value`` into a ``target`` tensor can lose information TC refuses to lose.

    Integer to float is allowed (as in C and TC); float to integer, a wider float to a narrower
    one, a wider integer to a narrower one and a signed to an unsigned integer are narrowing.
    Anything may be stored into a type that equals it, and ``bool`` into anything.
    """
    if value == target or value.kind == "bool":
        return False
    if target.kind == "bool":
        return True
    if target.is_float:
        if not value.is_float:
            return False
        if value.bits == target.bits:
            return True  # float16 <-> bfloat16 lose range or precision either way
        return value.bits > target.bits
    if value.is_float:
        return True
    if value.kind == target.kind:
        return value.bits > target.bits
    if value.kind == "int":  # signed -> unsigned
        return True
    return value.bits >= target.bits  # unsigned -> signed needs a wider signed type
