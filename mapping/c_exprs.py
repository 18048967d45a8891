"""C for a kernel's values: the C types of TC's types, literals, conversions, and the values of
statement bodies (:class:`ExprPrinter`, over :mod:`.ir_values`), with the language's value semantics
(docs/language.md): integer arithmetic wraps (computed in unsigned types and converted back),
integer division by zero gives 0, conversions follow :func:`tcjit.reference.convert`, half types
are stored as ``uint16_t`` and computed in ``float``; and C for the kernel IR's integer
expressions (:func:`expr`). The C prelude (:mod:`.c_prelude`) defines the functions it calls.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang.builtins import LANGUAGE_FUNCTIONS
from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.lang.types import ScalarType
from . import ir
from . import ir_values as V
from .c_prelude import builtin_callee, int_suffix

__all__ = [
    "BoundsCheck",
    "CParam",
    "ExprPrinter",
    "ValuePrinter",
    "c_compute_type",
    "c_float_literal",
    "c_int_literal",
    "c_storage_type",
    "combine_update",
    "convert",
    "expr",
    "fold_lanes",
    "reduction_identity",
    "stack_array",
    "upper_bound",
]


class ValuePrinter(Protocol):
    """What an :class:`ExprPrinter` asks of the kernel's printer: the kernel, its sizes, and how
    it writes a float literal and reads a tensor's element (the GPU printers redirect promoted
    accesses)."""

    cdef: CheckedDef
    sizes: Mapping[str, int]

    def float_literal(self, value: float, t: ScalarType) -> str: ...

    def access_value(self, load: V.Load, ex: ExprPrinter) -> str: ...

    def address(self, ref: V.Ref, ex: ExprPrinter) -> str: ...


_STORAGE = {
    "bool": "bool",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "float16": "uint16_t",
    "bfloat16": "uint16_t",
    "float32": "float",
    "float64": "double",
}


def c_storage_type(t: ScalarType) -> str:
    """The C type an element of a tensor of type ``t`` is stored as."""
    return _STORAGE[t.name]


def c_compute_type(t: ScalarType) -> str:
    """The C type values of type ``t`` are computed in."""
    return "float" if t.is_half else _STORAGE[t.name]


@dataclass(frozen=True)
class CParam:
    """One parameter of the kernel function after ``nthreads`` and ``errors``.

    :ivar name: the TC name. :ivar kind: ``"tensor"`` or ``"scalar"``.
    :ivar ctype: its C type (``float *``, ``int32_t``...).
    """

    name: str
    kind: str
    ctype: str


@dataclass(frozen=True)
class BoundsCheck:
    """A subscript checked at run time: number ``index + 1`` in the error slot means it failed."""

    tensor: str
    dim: int
    size: int
    span: tuple[int, int, int, int]  # start, end, line, column of the access in the TC source
    verb: str


# ------------------------------------------------------------------------------------ expressions
def c_float_literal(value: float, t: ScalarType) -> str:
    """C for the literal ``value`` of float type ``t`` (exact: hexadecimal; NaN and infinities as
    expressions and macros of the prelude)."""
    if math.isnan(value):
        return "(0.0 / 0.0)" if c_compute_type(t) == "double" else "(0.0f / 0.0f)"
    if math.isinf(value):
        inf = "HUGE_VAL" if c_compute_type(t) == "double" else "HUGE_VALF"
        return inf if value > 0 else f"(-{inf})"
    text = float(value).hex()
    return text if c_compute_type(t) == "double" else f"{text}f"


def c_int_literal(value: int, t: ScalarType) -> str:
    """C for the literal ``value`` of integer or bool type ``t`` (wrapped into an unsigned type's
    range; the 64-bit types through their macros, ``INT64_MIN`` spelled so)."""
    if t.kind == "bool":
        return "true" if value else "false"
    if t.name == "uint64":
        return f"UINT64_C({value % (1 << 64)})"
    if t.name == "int64":
        if value == -(1 << 63):
            return "INT64_MIN"
        return f"INT64_C({value})"
    if t.kind == "uint":
        value %= 1 << t.bits
        return f"(({c_compute_type(t)}){value}u)"
    return f"(({c_compute_type(t)}){value})"


def convert(code: str, src: ScalarType, dst: ScalarType) -> str:
    """C for converting a value of type ``src`` to ``dst`` (:func:`tcjit.reference.convert`)."""
    if src == dst:
        return code
    if dst.kind == "bool":
        return f"(({code}) != 0)"
    if dst.is_float:
        # integers go through double, as the oracle converts them (int64 -> float64 -> float32)
        wide = f"(double)({code})" if src.is_integral else f"({code})"
        if dst.is_half:  # torch narrows to 16 bits through float32, and so does the oracle
            half = "h" if dst.name == "float16" else "bf"
            return f"tc_{half}2f(tc_f2{half}((float){wide}))"
        if dst.name == "float64":
            return f"(double)({code})"
        return f"(float){wide}"
    if src.is_float:
        wide = f"(double)({code})"
        if dst.name == "uint64":
            return f"tc_f64_to_u64({wide})"
        return f"(({c_compute_type(dst)})tc_f64_to_i64({wide}))"
    return f"(({c_compute_type(dst)})({code}))"


class ExprPrinter:
    """Prints the IR values of statement bodies (:mod:`.ir_values`) as C."""

    def __init__(self, printer: ValuePrinter):
        self.p = printer

    def value(self, v: V.Value) -> str:
        if isinstance(v, V.Literal):
            t = v.dtype
            if isinstance(v.value, int) and t.is_integral:
                return c_int_literal(v.value, t)
            return self.p.float_literal(float(v.value), t)
        if isinstance(v, V.IndexVar):
            return f"i_{v.name}"
        if isinstance(v, V.SizeValue):
            return v.text
        if isinstance(v, V.ScalarParam):
            return f"s_{v.name}"
        if isinstance(v, V.Convert):
            return convert(self.value(v.arg), v.src, v.dst)
        if isinstance(v, V.Load):
            return self.p.access_value(v, self)
        if isinstance(v, V.Not):
            return f"(!({self.value(v.arg)}))"
        if isinstance(v, V.Negate):
            x, t = self.value(v.arg), v.dtype
            if t.is_float:
                return f"(-({x}))"
            if t.kind == "bool":
                return f"(({x}) != 0)"  # -true is -1: still true
            return _wrapping("-", "0", x, t)
        if isinstance(v, (V.Logic, V.Compare)):
            return f"(({self.value(v.lhs)}) {v.op} ({self.value(v.rhs)}))"
        if isinstance(v, V.Arith):
            return self.arith(v)
        if isinstance(v, V.Select):
            return f"(({self.value(v.cond)}) ? ({self.value(v.then)}) : ({self.value(v.other)}))"
        if isinstance(v, V.Call):
            args = [self.value(a) for a in v.args]
            if v.func in LANGUAGE_FUNCTIONS:
                return _minmax(v.func, args[0], args[1], v.dtype)
            return f"{builtin_callee(v.func, c_compute_type(v.dtype))}({', '.join(args)})"
        raise TCInternalError(f"cannot print {v!r}")

    def arith(self, v: V.Arith) -> str:
        op, t = v.op, v.dtype
        l, r = self.value(v.lhs), self.value(v.rhs)
        if op in ("+", "-", "*"):
            return f"(({l}) {op} ({r}))" if t.is_float else _wrapping(op, l, r, t)
        if t.is_float:
            return f"(({l}) / ({r}))"
        if t.kind == "bool":  # division of booleans: by false is 0, by true is the value
            return f"(({l}) && ({r}))" if op == "/" else "false"
        fn = "tc_div_" if op == "/" else "tc_mod_"
        return f"{fn}{int_suffix(t.name)}({l}, {r})"

    def index(self, s: V.Subscript) -> str:
        """A subscript as int64 with index semantics (``/`` and ``%`` floor)."""
        if isinstance(s, V.SubConst):
            return f"INT64_C({s.value})"
        if isinstance(s, V.SubVar):
            return f"i_{s.name}"
        if isinstance(s, V.SubNeg):
            return f"(-({self.index(s.arg)}))"
        if isinstance(s, V.SubArith):
            l, r = self.index(s.lhs), self.index(s.rhs)
            if s.op in ("+", "-", "*"):
                return f"(({l}) {s.op} ({r}))"
            fn = "tc_floordiv_i64" if s.op == "/" else "tc_floormod_i64"
            return f"{fn}({l}, {r})"
        return f"((int64_t)({self.value(s.value)}))"


def _wrapping(op: str, a: str, b: str, t: ScalarType) -> str:
    """Integer ``a op b`` in type ``t``, wrapping as two's complement.

    Computed in an unsigned type of at least 32 bits (unsigned arithmetic wraps in C; signed
    overflow is undefined), then converted back (GCC converts modulo 2**bits). Kernels are not
    compiled with ``-fwrapv``: it would stop the compiler from proving that ``p[i + 1]`` follows
    ``p[i]``, and with it most vectorisation.
    """
    u = "uint64_t" if t.bits > 32 else "uint32_t"
    return f"(({c_compute_type(t)})(({u})({a}) {op} ({u})({b})))"


def _minmax(op: str, a: str, b: str, t: ScalarType) -> str:
    if t.is_float:
        fn = builtin_callee(
            "fmin" if op == "min" else "fmax", "double" if c_compute_type(t) == "double" else "float"
        )
        return f"{fn}({a}, {b})"
    if t.kind == "bool":
        return f"(({a}) && ({b}))" if op == "min" else f"(({a}) || ({b}))"
    return f"tc_{op}_{int_suffix(t.name)}({a}, {b})"


def reduction_identity(op: str, t: ScalarType) -> str:
    """C for the value a reduction ``op`` (``+=``, ``*=``, ``min=``, ``max=``) of type ``t``
    starts from: what the language's ``!`` initialisation writes."""
    if op == "+=":
        return c_int_literal(0, t) if t.is_integral else c_float_literal(0.0, t)
    if op == "*=":
        return c_int_literal(1, t) if t.is_integral else c_float_literal(1.0, t)
    if t.is_float:
        return c_float_literal(math.inf if op == "min=" else -math.inf, t)
    return c_int_literal(t.max_value if op == "min=" else t.min_value, t)


def combine_update(op: str, acc: str, v: str, t: ScalarType) -> str:
    """C combining ``v`` into the accumulator value ``acc`` by reduction ``op`` in type ``t``
    (integers wrap; min and max of floats ignore NaN, as the prelude's fmin/fmax)."""
    if op in ("+=", "*="):
        sym = op[0]
        if t.is_float:
            return f"{acc} {sym} {v}"
        if t.kind == "bool":
            return f"({acc}) {'||' if sym == '+' else '&&'} ({v})"
        return _wrapping(sym, acc, v, t)
    return _minmax("min" if op == "min=" else "max", acc, v, t)


def fold_lanes(op: str, lanes_of: str, lanes: int, t: ScalarType) -> str:
    """C that combines the ``lanes`` partial results ``lanes_of[0 .. lanes - 1]`` into ``tc_s``.

    A fixed pairwise tree (lane l with lane l + lanes / 2, then with l + lanes / 4, ...): each
    level is independent across lanes, so it runs as vector operations, where combining them one by
    one into ``tc_s`` is a chain of ``lanes`` dependent scalar adds per output (the compiler may
    not reassociate float sums); on AVX-512's 16 lanes that chain cost the dot-product form of
    tmm a third of its time. The lanes are partial sums in an order the strip-mining chose, so
    the tree's order is as good a one (and for sums, a more accurate one)."""
    if lanes < 2 or lanes & (lanes - 1):
        combine = combine_update(op, "tc_s", f"{lanes_of}[tc_l]", t)
        return f"for (int tc_l = 0; tc_l < {lanes}; tc_l++) tc_s = {combine};"
    levels = []
    w = lanes // 2
    while w >= 1:
        combine = combine_update(op, f"{lanes_of}[tc_l]", f"{lanes_of}[tc_l + {w}]", t)
        levels.append(f"for (int tc_l = 0; tc_l < {w}; tc_l++) {lanes_of}[tc_l] = {combine};")
        w //= 2
    return " ".join(levels) + f" tc_s = {combine_update(op, 'tc_s', f'{lanes_of}[0]', t)};"


# ------------------------------------------------------------------------------------------ printer
def stack_array(ctype: str, declarator: str) -> str:
    """The declaration of an array the generated C keeps on the stack, e.g.
    ``stack_array("float", "tc_r0[4][5]")``: declared ``TC_STACK_ALIGNED`` (the C prelude says why
    every such array must be)."""
    return f"{ctype} {declarator} TC_STACK_ALIGNED;"


def expr(e: ir.Expr) -> str:
    """C for an IR expression (int64 arithmetic)."""
    if isinstance(e, ir.Int):
        return str(e.value) if -(1 << 31) < e.value < (1 << 31) else f"INT64_C({e.value})"
    if isinstance(e, ir.Var):
        return e.name
    a = [expr(x) for x in e.args]
    op = e.op
    if op == "neg":
        return f"(-{a[0]})"
    if op in ("min", "max"):
        return f"tc_{op}_i64({a[0]}, {a[1]})"
    if op == "floordiv":
        return f"tc_floordiv_i64({a[0]}, {a[1]})"
    if op == "div":
        return f"({a[0]} / {a[1]})"
    if op == "mod":
        return f"({a[0]} % {a[1]})"
    if op == "select":
        return f"({a[0]} ? {a[1]} : {a[2]})"
    return f"({a[0]} {op} {a[1]})"


def upper_bound(loop: ir.For) -> str:
    """C for the last value of ``loop`` (``var <= e`` or ``var < e``; ``e`` may not be constant)."""
    bound, shift = loop.cond.args[1], (1 if loop.cond.op == "<" else 0)
    return f"({expr(bound)} - {shift})"


def c_int(value: int | str) -> str:
    """C ``int64_t`` for a value or for C text (a symbolic kernel's extents and strides)."""
    return f"INT64_C({value})" if isinstance(value, int) else f"({value})"


def c_product(values) -> int | str:
    """The product of ``values`` (ints, or C text): an int where all are."""
    number, texts = 1, []
    for v in values:
        if isinstance(v, int):
            number *= v
        else:
            texts.append(f"({v})")
    if not texts:
        return number
    return " * ".join(([] if number == 1 else [f"INT64_C({number})"]) + texts)
