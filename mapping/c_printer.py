"""The C printer: a CPU kernel's C source from its kernel IR and the checked TC statements.

The code reads like hand-written C: one function per kernel, loops named ``c0, c1, ...`` as isl
built them, and at every statement instance a block that binds the TC index variables and performs
the TC statement, preceded by its TC line as a comment::

    /* S1: O(b, n) = fmax(O(b, n) + bias(n), 0) */
    { const int64_t i_b = 4 * c0 + c3; const int64_t i_n = 4 * c1 + c4;
      t_O[i_b * 9 + i_n] = fmaxf(t_O[i_b * 9 + i_n] + t_bias[i_n], 0.0f); }

Names from TC get a prefix (``t_`` tensors, ``i_`` index variables, ``s_`` scalar arguments) so
that no TC name can collide with C. Tensors are flat pointers indexed with the constant strides the
kernel is specialised to (inputs keep the strides they were passed with; nothing is copied).

Value semantics are the language's (docs/language.md), implemented by :mod:`.c_prelude`: integer
arithmetic wraps (computed in unsigned types and converted back),
integer division by zero gives 0, conversions follow :func:`tcjit.reference.convert`, half types are
stored as ``uint16_t`` and computed in ``float``. Subscripts that are not affine (gathers) are
checked at run time: the first one outside its tensor records its check number and value in the
kernel's error slots and is redirected to element 0, and the runtime raises ``TCBoundsError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang import ast as A
from ..polyhedral.lang.builtins import LANGUAGE_FUNCTIONS
from ..polyhedral.lang.checked import CheckedDef, CheckedStatement
from ..polyhedral.lang.types import SCALAR_TYPES, ScalarType, common_type
from ..polyhedral.scop import ScopStatement
from . import ir
from .c_prelude import PRELUDE, builtin_callee, int_suffix
from .packing import Pack, contiguous_strides, spanned_elements
from .parts import Part, Site

__all__ = ["BoundsCheck", "CParam", "c_storage_type", "print_kernel"]

INT64 = SCALAR_TYPES["int64"]

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
    """Prints typed TC expressions of one statement."""

    def __init__(self, printer: CPrinter, st: CheckedStatement):
        self.p = printer
        self.st = st
        self.cdef = printer.cdef

    def value(self, e: A.Expr) -> str:
        t = e.dtype
        if isinstance(e, A.IntLit):
            return c_int_literal(e.value, t) if t.is_integral else self.p.float_literal(float(e.value), t)
        if isinstance(e, A.FloatLit):
            return self.p.float_literal(e.value, t)
        if isinstance(e, A.Ident):
            if e.kind == "index":
                return convert(f"i_{e.name}", INT64, t)
            if e.kind == "size":
                n = self.p.sizes[e.name]
                return c_int_literal(n, t) if t.is_integral else self.p.float_literal(float(n), t)
            src = self.cdef.scalars[e.name].dtype
            return convert(f"s_{e.name}", src, t)
        if isinstance(e, A.DimSize):
            n = self.cdef.tensor(e.tensor).shape[e.dim].evaluate(self.p.sizes)
            return c_int_literal(n, t) if t.is_integral else self.p.float_literal(float(n), t)
        if isinstance(e, A.Access):
            return self.p.access_value(e, self, t)
        if isinstance(e, A.Cast):
            return convert(self.value(e.arg), e.arg.dtype, t)
        if isinstance(e, A.Unary):
            x = self.value(e.arg)
            if e.op == "!":
                return f"(!({x}))"
            x = convert(x, e.arg.dtype, t)
            if t.is_float:
                return f"(-({x}))"
            if t.kind == "bool":
                return f"(({x}) != 0)"  # -true is -1: still true
            return _wrapping("-", "0", x, t)
        if isinstance(e, A.Binary):
            return self.binary(e)
        if isinstance(e, A.Select):
            c = self.value(e.cond)
            a = convert(self.value(e.then), e.then.dtype, t)
            b = convert(self.value(e.other), e.other.dtype, t)
            return f"(({c}) ? ({a}) : ({b}))"
        if isinstance(e, A.Call):
            args = [convert(self.value(a), a.dtype, t) for a in e.args]
            if e.func in LANGUAGE_FUNCTIONS:
                return _minmax(e.func, args[0], args[1], t)
            return f"{builtin_callee(e.func, c_compute_type(t))}({', '.join(args)})"
        raise TCInternalError(f"cannot print {e!r}")

    def binary(self, e: A.Binary) -> str:
        op = e.op
        if op in ("&&", "||"):
            return f"(({self.value(e.lhs)}) {op} ({self.value(e.rhs)}))"
        if op in ("==", "!=", "<", "<=", ">", ">="):
            lt, rt = e.lhs.dtype, e.rhs.dtype
            t = lt if lt == rt else common_type(lt, rt)
            l = convert(self.value(e.lhs), lt, t)
            r = convert(self.value(e.rhs), rt, t)
            return f"(({l}) {op} ({r}))"
        t = e.dtype
        l = convert(self.value(e.lhs), e.lhs.dtype, t)
        r = convert(self.value(e.rhs), e.rhs.dtype, t)
        if op in ("+", "-", "*"):
            return f"(({l}) {op} ({r}))" if t.is_float else _wrapping(op, l, r, t)
        if t.is_float:
            return f"(({l}) / ({r}))"
        if t.kind == "bool":  # division of booleans: by false is 0, by true is the value
            return f"(({l}) && ({r}))" if op == "/" else "false"
        fn = "tc_div_" if op == "/" else "tc_mod_"
        return f"{fn}{int_suffix(t.name)}({l}, {r})"

    def index(self, e: A.Expr) -> str:
        """A subscript as int64 with index semantics (``/`` and ``%`` floor)."""
        if isinstance(e, A.IntLit):
            return f"INT64_C({e.value})"
        if isinstance(e, A.Ident) and e.kind == "index":
            return f"i_{e.name}"
        if isinstance(e, A.Unary) and e.op == "-":
            return f"(-({self.index(e.arg)}))"
        if isinstance(e, A.Binary) and e.op in ("+", "-", "*", "/", "%") and e.dtype.is_integral:
            l, r = self.index(e.lhs), self.index(e.rhs)
            if e.op in ("+", "-", "*"):
                return f"(({l}) {e.op} ({r}))"
            fn = "tc_floordiv_i64" if e.op == "/" else "tc_floormod_i64"
            return f"{fn}({l}, {r})"
        if isinstance(e, A.Ident) and e.kind == "size":
            return f"INT64_C({self.p.sizes[e.name]})"
        if isinstance(e, A.DimSize):
            return f"INT64_C({self.cdef.tensor(e.tensor).shape[e.dim].evaluate(self.p.sizes)})"
        v = self.value(e)
        if e.dtype.name == "uint64":
            return f"((int64_t)({v}))"
        return f"((int64_t)({v}))"


class _VectorExprs(ExprPrinter):
    """Prints the right-hand side of a vector register tile (:meth:`CPrinter.vector_tile`): the
    accesses ``loads`` (``id()``) are vector loads of ``vtype`` (GCC's vector extension,
    unaligned, may alias its element type); everything else is a scalar, which the vector
    arithmetic broadcasts."""

    def __init__(self, printer: CPrinter, st: CheckedStatement, vtype: str, loads: frozenset[int]):
        super().__init__(printer, st)
        self.vtype = vtype
        self.loads = loads

    def value(self, e: A.Expr) -> str:
        if isinstance(e, A.Access) and id(e) in self.loads:
            return f"(*(const {self.vtype} *)&t_{e.tensor}[{self.p.address(e.tensor, e.args, self, e)}])"
        return super().value(e)


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


def _fold_lanes(op: str, lanes_of: str, lanes: int, t: ScalarType) -> str:
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


class CPrinter:
    """Prints one kernel's IR as C (the CPU target; the GPU printers derive from it): statements,
    loops, register tiles, OpenMP regions, and the emulated target's checks."""

    #: C for a float literal of a value of type ``t`` in an expression (the CUDA printer rounds it to
    #: the type first: its compilers warn about digits the type cannot hold).
    float_literal = staticmethod(c_float_literal)

    def __init__(
        self,
        cdef: CheckedDef,
        statements: Mapping[str, ScopStatement],
        sizes: Mapping[str, int],
        strides: Mapping[str, tuple[int, ...]],
        checked: frozenset[int],
        wide: Mapping[str, ScalarType],
    ):
        self.cdef = cdef
        self.wide = wide
        self.statements = statements
        self.sizes = sizes
        self.strides = strides
        self.checked = checked  # id() of subscript nodes that need a run-time bounds check
        self.checks: list[BoundsCheck] = []
        self.lines: list[str] = []
        self.aliases: list[str] = []  # restrict-qualified views of every pointer
        self.signature: list[str] = []  # parameters of a parallel region's function
        self.arguments: list[str] = []  # what the kernel passes for them
        self.functions: list[str] = []  # parallel regions, printed before the kernel
        self.prototypes: list[str] = []  # their declarations (the entry point may be compiled apart)
        self.shadowed: list[str] = []  # the emulated target's race-checked tensors (outputs, temporaries)
        self.bounded: list[str] = []  # and its inputs: each access bounds-checked (after the shadowed)
        self.blocks_before = 0  # the emulated target: blocks of the launches printed so far
        self.enclosing: list[str] = []  # loop iterators in scope
        self.symbol = "tc_kernel"
        self.source_lines = cdef.source.splitlines()
        self.accumulator: _Accumulator | None = None  # inside a register tile's loop
        self.vector_types: dict[str, tuple[str, int]] = {}  # vector tiles' types: (element, bytes)
        self.pending_fetches: tuple[ir.Fetch, ...] = ()  # what the next parallel loop fetches (ir.Fetching)
        self.fetching: dict[str, list[str]] = {}  # while printing one: loop variable -> calls at its top
        self.helpers: list[list[str]] = []  # static functions the regions call (the fetches'), each's lines
        self.packed: frozenset[str] = frozenset()  # inputs read from packed panels
        self.buffer_shadows: list[tuple[str, int]] = []  # the emulated target's promoted buffers
        # updates whose complete vector register tiles start from zero (see :func:`print_kernel`),
        self.team = False  # the next parallel loop is shared out by an enclosing team (:meth:`team_region`)
        self.nowait = False  # and needs no barrier after it (:mod:`.barriers`)
        self.sites: Mapping[str, Site] = {}  # marks that fill a part of a packed input (:mod:`.packing`)

    # --------------------------------------------------------------------------------- memory
    def address(self, tensor: str, args: Sequence[A.Expr], ex: ExprPrinter, node) -> str:
        """C for the offset of element ``args`` of ``tensor``; ``node`` is the access (a read) or
        the statement (the element it writes), for the messages of run-time bounds checks."""
        info = self.cdef.tensor(tensor)
        if not args:
            return "0"
        writes = isinstance(node, A.Statement)
        span = node.lhs_span if writes else node.span
        terms = []
        for k, (arg, stride) in enumerate(zip(args, self.held_strides(tensor))):
            sub = ex.index(arg)
            if id(arg) in self.checked:
                n = info.shape[k].evaluate(self.sizes)
                self.checks.append(
                    BoundsCheck(
                        tensor,
                        k,
                        n,
                        (span.start, span.end, span.line, span.col),
                        "writes" if writes else "reads",
                    )
                )
                sub = f"tc_checked({sub}, INT64_C({n}), {len(self.checks)}, tc_errors)"
            if stride == 0:
                continue
            terms.append(sub if stride == 1 else f"({sub}) * INT64_C({stride})")
        return " + ".join(terms) or "0"

    def held_strides(self, tensor: str) -> tuple[int, ...]:
        """The element strides of ``tensor``'s array as the kernel holds it: its wide buffer's
        (contiguous) for a long sum, else the tensor's own."""
        if tensor in self.wide:
            return _contiguous(self.cdef.tensor(tensor), self.sizes)
        return tuple(self.strides[tensor])

    def element_type(self, tensor: str) -> ScalarType:
        """The type a tensor's elements have inside the kernel (wider for long sums)."""
        return self.wide.get(tensor) or self.cdef.tensor(tensor).dtype

    def race(self, tensor: str, addr: str, write: bool) -> str | None:
        """The emulated target's check of an access (:data:`EMULATION_HELPERS`): a C condition,
        false where the element is outside the tensor (the access must then not be made), or None.
        A written tensor's access is race-checked too."""
        if tensor in self.bounded:
            where = len(self.shadowed) + self.bounded.index(tensor)
            return f"tc_inside({addr}, {self.span(tensor)}, {where}, tc_errors)"
        if tensor not in self.shadowed:
            return None
        code = -2 - self.shadowed.index(tensor)
        return (
            f"tc_race(tc_sh_{tensor}, {self.span(tensor)}, {int(write)}, tc_gb, tc_tl, tc_first,"
            f" tc_phase, {code}, {addr}, tc_errors)"
        )

    def span(self, tensor: str) -> int:
        """The element offsets ``tensor``'s array (its wide buffer, or its storage) spans: the
        size of the emulated target's shadow of a written tensor."""
        info = self.cdef.tensor(tensor)
        shape = [s.evaluate(self.sizes) for s in info.shape]
        strides = _contiguous(info, self.sizes) if tensor in self.wide else self.strides[tensor]
        return max(1, spanned_elements(shape, strides))

    def access_value(self, e: A.Access, ex: ExprPrinter, want: ScalarType) -> str:
        """The value of the element access ``e`` reads, as ``want`` (the GPU printers redirect
        promoted accesses)."""
        return self.load(e.tensor, self.address(e.tensor, e.args, ex, e), want)

    def load(self, tensor: str, addr: str, want: ScalarType) -> str:
        check = self.race(tensor, addr, False)
        value = self._load(tensor, addr, want)
        return value if check is None else f"({check} ? {value} : 0)"

    def global_read(self, tensor: str, addr: str) -> str:
        """C reading element ``addr`` of ``tensor``'s array as it is held (wide buffer, or the
        tensor's storage; the CUDA printer may read inputs through the read-only cache)."""
        return self.held_lvalue(tensor, addr)

    def held_lvalue(self, tensor: str, addr: str) -> str:
        """C naming element ``addr`` of ``tensor``'s array as it is held (wide buffer, or the
        tensor's storage)."""
        return f"w_{tensor}[{addr}]" if tensor in self.wide else f"t_{tensor}[{addr}]"

    def held_value(self, tensor: str, raw: str, want: ScalarType) -> str:
        """An element of ``tensor`` as it is held (``raw``: storage bits, or the wide type), as
        ``want``."""
        if tensor in self.wide:
            return convert(raw, self.wide[tensor], want)
        t = self.cdef.tensor(tensor).dtype
        if t.name == "float16":
            raw = f"tc_h2f({raw})"
        elif t.name == "bfloat16":
            raw = f"tc_bf2f({raw})"
        return convert(raw, t, want)

    def _load(self, tensor: str, addr: str, want: ScalarType) -> str:
        return self.held_value(tensor, self.global_read(tensor, addr), want)

    def store(self, tensor: str, addr: str, value: str) -> str:
        """Store ``value``, already of the tensor's :meth:`element_type`."""
        check = self.race(tensor, addr, True)
        text = self._store(tensor, addr, value)
        return text if check is None else f"if ({check}) {{ {text} }}"

    def _store(self, tensor: str, addr: str, value: str) -> str:
        lvalue = self.held_lvalue(tensor, addr)
        return self.held_store(tensor, lvalue, value)

    def held_store(self, tensor: str, lvalue: str, value: str) -> str:
        """C storing ``value`` (of the tensor's :meth:`element_type`) into ``lvalue``, an element
        as ``tensor``'s elements are held."""
        if tensor in self.wide:
            return f"{lvalue} = {value};"
        t = self.cdef.tensor(tensor).dtype
        if t.name == "float16":
            value = f"tc_f2h({value})"
        elif t.name == "bfloat16":
            value = f"tc_f2bf({value})"
        return f"{lvalue} = {value};"

    # ------------------------------------------------------------------------------ statements
    def comment(self, sname: str) -> str:
        """The comment every printing of an instance of ``sname`` starts with: its TC line."""
        st = self.statements[sname].source
        line = st.source.span.line
        text = self.source_lines[line - 1].strip() if 0 < line <= len(self.source_lines) else ""
        text = text.replace("*/", "* /")
        what = " (initialisation)" if sname.endswith("_init") else ""
        return f"/* {sname}{what}, line {line}: {text} */"

    def bindings(self, sname: str, args: Sequence[ir.Expr], only: set[str] | None = None) -> str:
        dims = self.statements[sname].dims
        parts = []
        for d, a in zip(dims, args):
            if only is None or d in only:
                parts.append(f"const int64_t i_{d} = {expr(a)};")
        return " ".join(parts)

    def lhs_args(self, sname: str) -> tuple[A.Expr, ...]:
        """The subscripts of the element an instance of ``sname`` updates."""
        scop_st = self.statements[sname]
        st = scop_st.source
        if scop_st.kind == "init" and not st.plain_lhs:
            return tuple(A.Ident(d, kind="index", dtype=INT64) for d in scop_st.dims)
        return tuple(st.lhs)

    def lhs_address(self, sname: str, ex: ExprPrinter) -> str:
        st = self.statements[sname].source
        return self.address(st.tensor, self.lhs_args(sname), ex, st.source)

    def lhs(self, sname: str, ex: ExprPrinter) -> tuple[Callable[[ScalarType], str], Callable[[str], str]]:
        """How an instance of ``sname`` reads (as a type) and writes (a value) the element it
        updates (the GPU printers redirect promoted ones)."""
        tensor = self.statements[sname].source.tensor
        addr = self.lhs_address(sname, ex)
        return (lambda want: self.load(tensor, addr, want)), (lambda value: self.store(tensor, addr, value))

    def body(self, sname: str) -> str:
        """The C statement performing one instance of ``sname`` (index variables bound)."""
        scop_st = self.statements[sname]
        st = scop_st.source
        ex = ExprPrinter(self, st)
        t = self.cdef.tensor(st.tensor).dtype
        et = self.element_type(st.tensor).compute
        load, store = self.lhs(sname, ex)
        if scop_st.kind == "init":
            return store(reduction_identity(st.op, et))
        value = convert(convert(ex.value(st.rhs), st.value_type, t), t, et)
        if scop_st.kind == "assign":
            return store(value)
        old = load(et)
        return store(combine_update(st.op, old, f"({value})", et))

    def run(self, node: ir.Run, indent: str) -> None:
        acc = self.accumulator
        if acc is not None and node.statement == acc.statement:
            scop_st = self.statements[node.statement]
            st = scop_st.source
            et = self.element_type(st.tensor).compute
            t = self.cdef.tensor(st.tensor).dtype
            value = convert(convert(ExprPrinter(self, st).value(st.rhs), st.value_type, t), t, et)
            self.lines.append(f"{indent}{self.comment(node.statement)}")
            self.lines.append(f"{indent}{{ {self.bindings(node.statement, node.args)}")
            self.lines.append(f"{indent}  {acc.ref} = {combine_update(st.op, acc.ref, f'({value})', et)}; }}")
            return
        self.lines.append(f"{indent}{self.comment(node.statement)}")
        self.lines.append(f"{indent}{{ {self.bindings(node.statement, node.args)}")
        self.lines.append(f"{indent}  {self.body(node.statement)} }}")

    # ------------------------------------------------------------------------- register tiles
    def register_tile(self, n: ir.RegisterTile | ir.FullTiles, indent: str) -> None:
        """A register tile (:mod:`.register_tiles` planned it): the outputs its point loops update
        live in registers across its reduction loops."""
        if isinstance(n, ir.FullTiles):
            self.lines.append(f"{indent}if ({' && '.join(expr(c)[1:-1] for c in n.conds)}) {{")
            self.register_tile(n.full, indent + "  ")
            self.lines.append(f"{indent}}} else {{")
            self.register_tile(n.rolled, indent + "  ")
            self.lines.append(f"{indent}}}")
        elif n.form == "vector":
            self.vector_tile(n, indent)
        elif n.form == "chain_vector":
            self.chain_vector(n, indent)
        elif n.form == "chain_array":
            self.chain_array(n, indent)
        else:
            self.array_tile(n, indent)

    def _vtype(self, ctype: str, count: int) -> str:
        """The name of a vector type of ``count`` elements of C type ``ctype``, declared in the
        kernel."""
        suffix = {"float": "f32", "double": "f64", "int32_t": "i32", "int64_t": "i64"}[ctype]
        vtype = f"tc_v{count}{suffix}"
        self.vector_types[vtype] = (ctype, count * (4 if suffix.endswith("32") else 8))
        return vtype

    def _chain_open(self, chain: Sequence[ir.For], indent: str) -> tuple[list[str], str]:
        """Print the headers of a chain tile's reduction loops; their closing lines and the
        indentation inside them."""
        closing = []
        for c in chain:
            if c.degenerate:
                self.lines.append(f"{indent}{{ const int64_t {c.var} = {expr(c.init)};")
            else:
                self.lines.append(f"{indent}{self.loop_header(c)} {{")
            closing.append(f"{indent}}}")
            indent += "  "
        return closing, indent

    def chain_vector(self, n: ir.RegisterTile, indent: str) -> None:
        """The chain tile in GCC vector types: per output one vector of ``L`` partial sums
        (``n.lanes`` of the tensor's type); every step loads each operand's vector once for all
        the outputs that share it. ``vloop`` is strip-mined by ``L``; its remainder is one
        overlapping vector that ends at the loop's last value, the lanes counted already masked
        to +0 (bitwise, so that NaN and infinities in them count nothing), or scalar updates of
        single lanes when the loop is shorter than a vector.

        A float32 sum accumulated in float64 (a long sum, :data:`.accumulation.LONG_SUM`) is blocked:
        each run of ``vloop`` sums in float32 vectors, which are then converted and added into
        float64 vectors of partial sums. Each float32 partial thus sums at most one run of
        ``vloop`` (a row of a convolution's output: tens of terms), far fewer than the
        :data:`.accumulation.LONG_SUM` terms below which float32 sums are accurate enough everywhere else
        in tcjit, and the long sum itself is carried in float64."""
        t, vloop, runs, points, name = n.vector, n.vloop, n.runs, n.points, n.name
        first = runs[0]
        st = self.statements[first.statement].source
        et = self.element_type(st.tensor)
        wide = et != t
        ct, ect = c_compute_type(t), c_compute_type(et)
        lanes = n.lanes
        vt = self._vtype(ct, lanes)
        wt = self._vtype(ect, lanes)
        lane_int = "int32_t" if ct == "float" else "int64_t"
        it = self._vtype(lane_int, lanes)
        acc = f"{name}_p" if wide else name
        idx = "".join(f"[{p.var}]" for p in points if not p.degenerate)
        dims = "".join(f"[{e}]" for e in n.dims)
        nest = list(points)
        vex = _VectorExprs(self, st, vt, n.vector_loads)
        sex = ExprPrinter(self, st)
        addr = self.address(st.tensor, st.lhs, sex, st.source)
        lhs_bind = self.bindings(first.statement, first.args, set(st.lhs_vars))
        loops = ", ".join([*(c.var for c in n.loops), vloop.var])
        loops_ = list(n.loops)
        block = n.block
        how = f"vectors of {lanes}"
        if wide:
            per = f"iteration of {loops_[block - 1].var}" if block else "tile"
            how += f", {t.name} partial sums per {per} added into {et.name}"
        self.lines.append(
            f"{indent}{{ /* register tile (dot-product form over a chain of reductions, {how}):"
            f" '{st.tensor}' kept in {name} across loops {loops} */"
        )
        iota = ", ".join(str(k) for k in range(lanes))
        self.lines.append(f"{indent}  const {it} tc_iota = {{{iota}}}; (void)tc_iota;")
        self.lines.append(f"{indent}  {stack_array(wt, name + dims)}")
        self.point_nest(nest, f"{name}{idx} = ({wt}){{0}};", indent + "  ")
        closing, inner = self._chain_open(loops_[:block], indent + "  ")
        if wide:
            self.lines.append(f"{inner}{stack_array(vt, acc + dims)}")
            self.point_nest(nest, f"{acc}{idx} = ({vt}){{0}};", inner)
        more, inner_ = self._chain_open(loops_[block:], inner)
        outer, inner = inner, inner_
        hi = _upper_bound(vloop)
        v = vloop.var
        self.lines.append(
            f"{inner}const int64_t tc_lo = {expr(vloop.init)}, tc_hi = {hi};"
            f" const int64_t tc_main = tc_hi < tc_lo ? tc_lo"
            f" : tc_lo + (tc_hi - tc_lo + 1) / {lanes} * {lanes};"
        )
        self.lines.append(f"{inner}{self.comment(first.statement)}")
        vvalue = vex.value(st.rhs)

        def updates(value: Callable[[], str]) -> str:
            return " ".join(f"{{ {self.bindings(r.statement, r.args)} {value()} }}" for r in runs)

        self.lines.append(f"{inner}for (int64_t {v} = tc_lo; {v} < tc_main; {v} += {lanes}) {{")
        self.point_nest(nest, updates(lambda: f"{acc}{idx} += {vvalue};"), inner + "  ")
        self.lines.append(f"{inner}}}")
        self.lines.append(f"{inner}if (tc_main <= tc_hi && tc_hi - tc_lo + 1 >= {lanes}) {{")
        self.lines.append(
            f"{inner}  const int64_t {v} = tc_hi - {lanes - 1};"
            f" const {lane_int} tc_d = ({lane_int})(tc_main - {v}); const {it} tc_m = tc_iota >= tc_d;"
        )
        masked = f"({vt})(({it})({vvalue}) & tc_m)"
        self.point_nest(nest, updates(lambda: f"{acc}{idx} += {masked};"), inner + "  ")
        self.lines.append(f"{inner}}} else {{")
        svalue = convert(convert(sex.value(st.rhs), st.value_type, t), t, t)
        self.lines.append(f"{inner}  for (int64_t {v} = tc_main; {v} <= tc_hi; {v}++) {{")
        self.point_nest(
            nest,
            updates(lambda: f"{acc}{idx}[{v} - tc_main] += {svalue};"),
            inner + "    ",
            unroll=False,
        )
        self.lines.append(f"{inner}  }}")
        self.lines.append(f"{inner}}}")
        self.lines.extend(reversed(more))
        if wide:
            self.point_nest(nest, f"{name}{idx} += __builtin_convertvector({acc}{idx}, {wt});", outer)
        self.lines.extend(reversed(closing))
        self._store_lane_sums(st, addr, et, lanes, f"tc_s + {name}{idx}[tc_l]", nest, lhs_bind, indent)

    def chain_array(self, n: ir.RegisterTile, indent: str) -> None:
        """The chain tile where the update does not fit vector types (a conversion, a call, a
        gather): per output an array of ``n.lanes`` partial sums in the type the tensor is held
        in, ``vloop`` strip-mined into an ``omp simd`` loop over the lanes, its remainder
        accumulated into lane 0."""
        first, points, name = n.runs[0], n.points, n.name
        st = self.statements[first.statement].source
        et = self.element_type(st.tensor).compute
        ct = c_compute_type(et)
        lanes = n.lanes
        idx = "".join(f"[{p.var}]" for p in points if not p.degenerate)
        dims = "".join(f"[{e}]" for e in n.dims) + f"[{lanes}]"
        ex = ExprPrinter(self, st)
        addr = self.address(st.tensor, st.lhs, ex, st.source)
        lhs_bind = self.bindings(first.statement, first.args, set(st.lhs_vars))
        loops = ", ".join([*(c.var for c in n.loops), n.vloop.var])
        self.lines.append(
            f"{indent}{{ /* register tile (dot-product form over a chain of reductions, {lanes} lanes):"
            f" '{st.tensor}' kept in {name} across loops {loops} */"
        )
        self.lines.append(f"{indent}  {stack_array(ct, name + dims)}")
        zero = reduction_identity(st.op, et)
        self.point_nest(
            points, f"for (int tc_l = 0; tc_l < {lanes}; tc_l++) {name}{idx}[tc_l] = {zero};", indent + "  "
        )
        closing, inner = self._chain_open(n.loops, indent + "  ")
        self._lane_strips(n, f"{name}{idx}", inner)
        self.accumulator = None
        self.lines.extend(reversed(closing))
        combine = combine_update(st.op, "tc_s", f"{name}{idx}[tc_l]", et)
        self._store_lane_sums(st, addr, et, lanes, combine, points, lhs_bind, indent)

    def _store_lane_sums(self, st, addr, et, lanes: int, combine: str, points, lhs_bind, indent) -> None:
        """The end of a chain register tile: for each output of ``points``, its stored value
        combined with the tile's ``lanes`` partial sums (``combine``: an expression of ``tc_s`` and
        lane ``tc_l``, in element type ``et``) and stored back; then the tile's block closes."""
        finish = (
            f"{c_compute_type(et)} tc_s = {self.load(st.tensor, addr, et)};"
            f" for (int tc_l = 0; tc_l < {lanes}; tc_l++) tc_s = {combine};"
            f" {self.store(st.tensor, addr, 'tc_s')}"
        )
        self.point_nest(points, f"{lhs_bind} {finish}", indent + "  ")
        self.lines.append(f"{indent}}}")

    def _lane_strips(self, n: ir.RegisterTile, lanes_of: str, indent: str) -> None:
        """The dot-product forms' reduction loop ``n.vloop``, strip-mined (``n.compute``): whole
        strips of ``n.lanes`` iterations add into ``lanes_of[0 .. lanes - 1]`` (a ``simd`` lane
        loop inside the point loops), the remaining iterations into ``lanes_of[0]``."""
        lanes = n.lanes
        self.lines.append(
            f"{indent}const int64_t tc_lo = {expr(n.vloop.init)}, tc_hi = {_upper_bound(n.vloop)};"
            f" const int64_t tc_main = tc_hi < tc_lo ? tc_lo"
            f" : tc_lo + (tc_hi - tc_lo + 1) / {lanes} * {lanes};"
        )
        main, tail = n.compute.children
        self.accumulator = _Accumulator(n.statement, f"{lanes_of}[tc_l]")
        self.node(main, indent)
        self.accumulator = _Accumulator(n.statement, f"{lanes_of}[0]")
        self.node(tail, indent)

    def array_tile(self, n: ir.RegisterTile, indent: str) -> None:
        """The outer-product form (an array of sums per output, loaded before the reduction loop
        and stored after it) or the dot-product form (``n.lanes`` partial sums per output)."""
        dot = n.form == "dot"
        first, points, name, loop = n.runs[0], n.points, n.name, n.loops[0]
        st = self.statements[first.statement].source
        et = self.element_type(st.tensor).compute
        ct = c_compute_type(et)
        lanes = n.lanes
        idx = "".join(f"[{p.var}]" for p in points if not p.degenerate)
        dims = "".join(f"[{e}]" for e in n.dims) + (f"[{lanes}]" if dot else "")
        ex = ExprPrinter(self, st)
        addr = self.address(st.tensor, st.lhs, ex, st.source)
        lhs_bind = self.bindings(first.statement, first.args, set(st.lhs_vars))
        form = f"dot-product form, {lanes} lanes" if dot else "outer-product form"
        self.lines.append(
            f"{indent}{{ /* register tile ({form}): '{st.tensor}' kept in {name} across loop {loop.var} */"
        )
        self.lines.append(f"{indent}  {stack_array(ct, name + dims)}")
        if dot:
            zero = reduction_identity(st.op, et)
            start = f"for (int tc_l = 0; tc_l < {lanes}; tc_l++) {name}{idx}[tc_l] = {zero};"
        else:
            start = f"{name}{idx} = {self.load(st.tensor, addr, et)};"
        self.point_nest(points, f"{lhs_bind} {start}", indent + "  ")
        if dot:
            self._lane_strips(n, f"{name}{idx}", indent + "  ")
            finish = (
                f"{ct} tc_s = {self.load(st.tensor, addr, et)};"
                f" {_fold_lanes(st.op, f'{name}{idx}', lanes, et)}"
                f" {self.store(st.tensor, addr, 'tc_s')}"
            )
        else:
            self.accumulator = _Accumulator(first.statement, f"{name}{idx}")
            self.node(n.compute, indent + "  ")
            finish = self.store(st.tensor, addr, f"{name}{idx}")
        self.accumulator = None
        self.point_nest(points, f"{lhs_bind} {finish}", indent + "  ")
        self.lines.append(f"{indent}}}")

    def vector_tile(self, n: ir.RegisterTile, indent: str) -> None:
        """The outer-product form in vector registers (a micro-kernel, see
        :mod:`.register_tiles`): the sums live in ``n.lanes``-wide vector variables (GCC's vector
        extension) across the reduction loops, each row's operands loaded once per step."""
        first, runs, nest, name, loop = n.runs[0], n.runs, n.points, n.name, n.loops[0]
        st = self.statements[first.statement].source
        lanes = n.lanes
        vtype = self._vtype(c_compute_type(n.vector), lanes)
        idx = "".join(f"[{p.var}]" for p in nest if not p.degenerate)
        dims = "".join(f"[{e}]" for e in n.dims)
        lane0 = f"const int64_t {n.var} = {lanes} * tc_v;"
        ex = _VectorExprs(self, st, vtype, n.vector_loads)
        addr = self.address(st.tensor, st.lhs, ex, st.source)
        lhs_bind = self.bindings(first.statement, first.args, set(st.lhs_vars))
        start = None if n.start is None else " && ".join(f"{o} == {v}" for o, v in n.start)
        how = {None: "", "": ", whole sums from zero"}.get(start, f", from zero where {start}")
        self.lines.append(
            f"{indent}{{ /* register tile (outer-product form, vectors of {lanes}): '{st.tensor}' kept in"
            f" {name} across loop {loop.var}{how} */"
        )
        self.lines.append(f"{indent}  {stack_array(vtype, name + dims)}")
        zero = f"{name}{idx} = ({vtype}){{0}};"
        load = f"{lane0} {lhs_bind} {name}{idx} = *(const {vtype} *)&t_{st.tensor}[{addr}];"
        if start == "":
            self.point_nest(nest, zero, indent + "  ")
        elif start is None:
            self.point_nest(nest, load, indent + "  ")
        else:  # the first chunk of the reduction starts from zero; later ones add to what it stored
            self.lines.append(f"{indent}  if ({start}) {{")
            self.point_nest(nest, zero, indent + "    ")
            self.lines.append(f"{indent}  }} else {{")
            self.point_nest(nest, load, indent + "    ")
            self.lines.append(f"{indent}  }}")
        closing, inner = [], indent + "  "
        for chain in n.loops:
            self.lines.append(f"{inner}{self.loop_header(chain)} {{")
            closing.append(f"{inner}}}")
            inner += "  "
        self.lines.append(f"{inner}{self.comment(first.statement)}")
        value = ex.value(st.rhs)
        updates = " ".join(
            f"{{ {self.bindings(r.statement, r.args)} {name}{idx} += {value}; }}" for r in runs
        )
        self.point_nest(nest, f"{lane0} {updates}", inner)
        self.lines.extend(reversed(closing))
        self.point_nest(
            nest, f"{lane0} {lhs_bind} *({vtype} *)&t_{st.tensor}[{addr}] = {name}{idx};", indent + "  "
        )
        self.lines.append(f"{indent}}}")

    def point_nest(self, points: Sequence[ir.For], body: str, indent: str, *, unroll: bool = True) -> None:
        """The point loops of a register tile around ``body`` (their bounds use only outer loops);
        without ``unroll``, none is unrolled."""
        closing = []
        for p in points:
            if p.degenerate:
                self.lines.append(f"{indent}{{ const int64_t {p.var} = {expr(p.init)};")
            else:
                if "simd" in p.kind.split("+"):
                    self.lines.append(f"{indent}#pragma omp simd")
                elif unroll and "unroll" in p.kind.split("+"):
                    self.lines.append(f"{indent}#pragma GCC unroll {UNROLL_PRAGMA}")
                self.lines.append(f"{indent}{self.loop_header(p)} {{")
            closing.append(f"{indent}}}")
            indent += "  "
        self.lines.append(f"{indent}{body}")
        self.lines.extend(reversed(closing))

    def reduction_loop(self, n: ir.Accumulation, indent: str) -> None:
        """A reduction into a register (:mod:`.reduction_forms`): the element accumulates in a
        local across the loop, which OpenMP vectorises where ``n.vector``."""
        loop, run, vector = n.loop, n.loop.body, n.vector
        scop_st = self.statements[run.statement]
        st = scop_st.source
        t = self.cdef.tensor(st.tensor).dtype
        et = self.element_type(st.tensor).compute
        ct = c_compute_type(et)
        ex = ExprPrinter(self, st)
        addr = self.address(st.tensor, st.lhs, ex, st.source)
        rest = set(scop_st.dims) - set(st.lhs_vars)
        value = convert(convert(ex.value(st.rhs), st.value_type, t), t, et)
        pragma = None
        if vector and et.is_float and st.op in ("+=", "*="):
            pragma = f"#pragma omp simd reduction({st.op[0]}:tc_acc)"
        elif vector and et.is_float and st.op in ("max=", "min="):
            # the prelude's reductions; simdlen: gcc otherwise keeps 4 lanes
            fn = builtin_callee("fmax" if st.op == "max=" else "fmin", ct)
            pragma = f"#pragma omp simd simdlen({n.lanes}) reduction({fn}:tc_acc)"
        elif vector and et.is_integral and et.kind != "bool" and st.op in ("max=", "min="):
            pragma = f"#pragma omp simd reduction({st.op[:3]}:tc_acc)"
        acc = self.accumulator
        redirected = acc is not None and acc.statement == run.statement
        start = acc.ref if redirected else self.load(st.tensor, addr, et)
        finish = f"{acc.ref} = tc_acc;" if redirected else self.store(st.tensor, addr, "tc_acc")
        self.lines.append(f"{indent}{self.comment(run.statement)} /* accumulated in a register */")
        self.lines.append(f"{indent}{{ {self.bindings(run.statement, run.args, set(st.lhs_vars))}")
        self.lines.append(f"{indent}  {ct} tc_acc = {start};")
        if pragma:
            self.lines.append(f"{indent}  {pragma}")
        self.lines.append(f"{indent}  {self.loop_header(loop)} {{")
        self.lines.append(f"{indent}    {self.bindings(run.statement, run.args, rest)}")
        self.lines.append(f"{indent}    tc_acc = {combine_update(st.op, 'tc_acc', f'({value})', et)};")
        self.lines.append(f"{indent}  }}")
        self.lines.append(f"{indent}  {finish} }}")

    # ----------------------------------------------------------------------------------- loops
    @staticmethod
    def loop_header(loop: ir.For) -> str:
        v = loop.var
        c = loop.cond
        cond = expr(c)[1:-1] if isinstance(c, ir.Op) and c.op in ("<", "<=", ">", ">=", "==") else expr(c)
        return f"for (int64_t {v} = {expr(loop.init)}; {cond}; {v} += {loop.step})"

    def node(self, n: ir.Node | None, indent: str) -> None:
        if n is None:
            return
        if isinstance(n, ir.Block):
            for c in n.children:
                self.node(c, indent)
        elif isinstance(n, ir.Run):
            self.run(n, indent)
        elif isinstance(n, ir.Mark):
            if n.name in self.sites:
                self.part(n, indent)
                return
            if n.name == "thread0":  # the GPU mapping's code for thread 0 alone
                self.lines.append(f"{indent}if (t0 == 0 && t1 == 0 && t2 == 0) {{")
                self.node(n.body, indent + "  ")
                self.lines.append(f"{indent}}}")
                return
            self.node(n.body, indent)
            if n.name == "sync":  # the emulated target: a new barrier interval
                self.lines.append(f"{indent}tc_phase += 1; /* barrier */")
        elif isinstance(n, ir.If):
            self.lines.append(f"{indent}if ({expr(n.cond)}) {{")
            self.node(n.then, indent + "  ")
            if n.other is not None:
                self.lines.append(f"{indent}}} else {{")
                self.node(n.other, indent + "  ")
            self.lines.append(f"{indent}}}")
        elif isinstance(n, ir.For):
            self.loop(n, indent)
        elif isinstance(n, ir.Blocks):
            self.ids(n.grid, "b", "blocks of one launch", n.body, indent, n.buffers)
        elif isinstance(n, ir.Threads):
            self.ids(n.block, "t", "threads of the block up to the next barrier", n.body, indent)
        elif isinstance(n, (ir.RegisterTile, ir.FullTiles)):
            self.register_tile(n, indent)
        elif isinstance(n, ir.ParallelReduction):
            self.parallel_reduction(n, indent)
        elif isinstance(n, ir.Accumulation):
            self.reduction_loop(n, indent)
        elif isinstance(n, ir.Team):
            self.team_region(n, indent)
        elif isinstance(n, ir.Fetching):
            self.pending_fetches = n.fetches
            self.node(n.body, indent)
        else:
            raise TCInternalError(f"cannot print {n!r}")

    def part(self, n: ir.Mark, indent: str) -> None:
        """A site of :func:`~tcjit.mapping.parts.place_parts`: the part of a packed input that
        the code below reads, filled into this thread's buffer ``b_X`` from the tensor ``u_X``;
        ``t_X`` then points where the panel would start, so that the code reads it unchanged."""
        site = self.sites[n.name]
        name, strides = site.tensor, self.strides[site.tensor]
        origin = [expr(o) for o in site.origin]
        ct = c_storage_type(self.cdef.tensor(name).dtype)
        shift = " + ".join(f"({o}) * INT64_C({st})" for o, st in zip(origin, strides))
        self.lines.append(f"{indent}{{ /* the part of '{name}''s panel read below (option pack_operands) */")
        self.lines.append(f"{indent}  tc_part_{name}(u_{name}, b_{name}, {', '.join(origin)});")
        if site.ahead:  # the next iteration's part: on its way into cache while this one computes
            following = ", ".join(expr(o) for o in site.ahead)
            self.lines.append(f"{indent}  if ({expr(site.more)}) tc_ahead_{name}(u_{name}, {following});")
        self.lines.append(f"{indent}  const {ct} *restrict t_{name} = b_{name} - ({shift});")
        self.node(n.body, indent + "  ")
        self.lines.append(f"{indent}}}")

    def ids(
        self, dims: Sequence[int], prefix: str, what: str, body: ir.Node, indent: str, buffers=()
    ) -> None:
        """An emulated target's loop over block (``b``) or thread (``t``) ids, in the order the
        call's ``tc_order`` argument selects (:data:`EMULATION_HELPERS`); each block declares
        ``buffers`` (:meth:`declare_buffers`)."""
        count = math.prod(dims)
        k = f"tc_{prefix}i"
        self.lines.append(f"{indent}{{ /* {what}: {' x '.join(map(str, dims))} */")
        if prefix == "b":  # the launch's blocks have global ids tc_first .. tc_first + count - 1
            self.lines.append(f"{indent}  const int64_t tc_first = {self.blocks_before};")
            self.blocks_before += count
        self.lines.append(f"{indent}  const int64_t tc_{prefix}s = tc_stride({count});")
        self.lines.append(f"{indent}  for (int64_t {k} = 0; {k} < {count}; {k}++) {{")
        self.lines.append(
            f"{indent}    const int64_t tc_{prefix}l = tc_perm({k}, {count}, tc_{prefix}s, s_tc_order);"
        )
        x, y, flat = dims[0], dims[0] * dims[1], f"tc_{prefix}l"
        self.lines.append(
            f"{indent}    const int64_t {prefix}0 = {flat} % {x}, {prefix}1 = {flat} / {x} % {dims[1]},"
            f" {prefix}2 = {flat} / {y};"
        )
        self.lines.append(f"{indent}    (void){prefix}0; (void){prefix}1; (void){prefix}2;")
        if prefix == "b":
            self.lines.append(f"{indent}    const int64_t tc_gb = tc_first + tc_bl; (void)tc_gb;")
            self.declare_buffers(buffers, indent + "    ")
        self.node(body, indent + "    ")
        self.lines.append(f"{indent}  }}")
        self.lines.append(f"{indent}}}")

    def declare_buffers(self, buffers: Sequence[ir.Buffer], indent: str) -> None:
        """The emulated target: a block's promoted buffers (none here; see :mod:`.gpu_printer`)."""
        if buffers:
            raise TCInternalError("promoted buffers need the GPU printers")

    def loop(self, n: ir.For, indent: str) -> None:
        fetches, self.pending_fetches = self.pending_fetches, ()
        if n.degenerate:
            self.lines.append(f"{indent}{{ const int64_t {n.var} = {expr(n.init)};")
            self.enclosing.append(n.var)
            self.node(n.body, indent + "  ")
            self.enclosing.pop()
            self.lines.append(f"{indent}}}")
            return
        kinds = ir.loop_kinds(n)
        team, self.team = self.team, False
        nowait, self.nowait = self.nowait, False
        if "parallel" in kinds:
            simd = " simd" if "simd" in kinds else ""
            if team:
                wait = " nowait" if nowait else ""
                self.lines.append(f"{indent}#pragma omp for{simd} schedule(static){wait}")
            else:
                clauses = "num_threads(nthreads) if(nthreads > 1) schedule(static)"
                self.lines.append(f"{indent}#pragma omp parallel for{simd} {clauses}")
        elif "simd" in kinds:
            self.lines.append(f"{indent}#pragma omp simd")
        elif "unroll" in kinds:
            self.lines.append(f"{indent}#pragma GCC unroll {UNROLL_PRAGMA}")
        self.lines.append(f"{indent}{self.loop_header(n)} {{")
        for call in self.fetching.pop(n.var, ()):  # a later loop's input, a slice per iteration
            self.lines.append(f"{indent}  {call}")
        self.enclosing.append(n.var)
        if "parallel" in kinds:
            self.region(n, indent + "  ", fetches=fetches)
        else:
            self.node(n.body, indent + "  ")
        self.enclosing.pop()
        self.lines.append(f"{indent}}}")

    def team_region(self, n: ir.Team, indent: str) -> None:
        """Top-level code run by one team of threads (:mod:`.openmp_teams` formed it): the
        parallel loops shared out by ``omp for``, the rest run by one thread (``omp single``)."""
        self.lines.append(f"{indent}#pragma omp parallel num_threads(nthreads) if(nthreads > 1)")
        self.lines.append(f"{indent}{{")
        for m in n.members:
            if m.shared:
                self.team, self.nowait = True, m.nowait
                self.node(m.body, indent + "  ")
                self.team = self.nowait = False
            else:
                self.lines.append(f"{indent}  #pragma omp single")
                self.lines.append(f"{indent}  {{")
                self.node(m.body, indent + "    ")
                self.lines.append(f"{indent}  }}")
        self.lines.append(f"{indent}}}")

    def fetch_calls(self, fetches: Sequence[ir.Fetch]) -> tuple[list[str], dict[str, list[str]]]:
        """C for ``fetches`` (:mod:`.openmp_teams`) in an iteration of the parallel loop that makes
        them: what goes first (this iteration's share of each box's lines: a thread shares the box
        out over the iterations it runs, a block of them in a static schedule), and the calls by
        the variable of the loop at whose top each goes (a slice of the share per iteration of the
        loops down to it). Each fetch's helper is printed once; divisions stay out of the loops."""
        if not fetches:
            return [], {}
        var, first, trips = fetches[0].shared
        shares = [
            "  /* this iteration's share of the lines fetched for later loops (a static schedule:"
            " each thread runs a block of the iterations) */",
            "  const int64_t tc_T = omp_get_num_threads(), tc_t = omp_get_thread_num(),"
            f" tc_q = {trips} / tc_T, tc_r = {trips} % tc_T;",
            "  const int64_t tc_n = tc_q + (tc_t < tc_r),"
            f" tc_k = ({var} - {first}) - tc_t * tc_q - (tc_t < tc_r ? tc_t : tc_r);",
        ]
        calls: dict[str, list[str]] = {}
        for f in fetches:
            fn, lines = f"tc_fetch{len(self.helpers)}", f"tc_f{len(self.helpers)}"
            dtype = self.cdef.tensor(f.tensor).dtype
            helper, slots = _fetch_helper(fn, f, tuple(self.strides[f.tensor]), dtype)
            self.helpers.append(helper)
            index, count = "0", 1
            for v, lo, n in f.loops:
                at = f"({v} - {lo})" if lo else v
                index = at if index == "0" else f"({index}) * {n} + {at}"
                count *= n
            shares.append(
                f"  const int64_t {lines}_lo = INT64_C({slots}) * tc_k / tc_n, {lines}_hi = INT64_C({slots})"
                f" * (tc_k + 1) / tc_n, {lines}_per = ({lines}_hi - {lines}_lo + {count - 1}) / {count};"
            )
            start = f"{lines}_lo + ({index}) * {lines}_per"
            calls.setdefault(f.loops[-1][0], []).append(
                f"{fn}(t_{f.tensor}, {start}, tc_min_i64({start} + {lines}_per, {lines}_hi));"
            )
        return shares, calls

    def region(
        self,
        n: ir.For,
        indent: str,
        *,
        result: tuple[str, str, str] | None = None,
        fetches: Sequence[ir.Fetch] = (),
    ) -> str:
        """The body of a parallel loop, as a function of its own called once per iteration; the
        call is printed as a statement, or, with ``result`` (C type, variable, initial value), it
        is returned: the function then declares that variable and returns its final value.

        OpenMP hands shared pointers to the outlined loop body without ``restrict`` (even restrict
        locals declared in the body are lost), so the compiler would have to assume that outputs
        alias inputs and would vectorise nothing. A function with restrict parameters keeps it.
        """
        name = f"{self.symbol}_region{len(self.functions)}"
        outer = list(self.enclosing)
        saved, self.lines = self.lines, []
        shares, self.fetching = self.fetch_calls(fetches)
        self.node(n.body, "  ")
        self.fetching = {}
        body, self.lines = [*shares, *self.lines], saved
        decl = ", ".join([*(f"int64_t {v}" for v in outer), *self.signature, "int64_t *restrict tc_errors"])
        returns = result[0] if result else "void"
        self.prototypes.append(f"TC_REGION {returns} {name}({decl});")
        self.functions.append(
            "\n".join(
                [
                    f"#if TC_PART_OF({len(self.functions) + 1})",
                    f"TC_REGION {returns} __attribute__((noinline)) {name}({decl})",
                    "{",
                    *(f"  (void){v};" for v in outer),
                    *([f"  {result[0]} {result[1]} = {result[2]};"] if result else []),
                    *body,
                    *([f"  return {result[1]};"] if result else []),
                    "}",
                    "#endif",
                    "",
                ]
            )
        )
        call = f"{name}({', '.join([*outer, *self.arguments, 'tc_errors'])})"
        if result is None:
            self.lines.append(f"{indent}{call};")
        return call

    def parallel_reduction(self, n: ir.ParallelReduction, indent: str) -> None:
        """A reduction loop run by threads (:mod:`.reduction_forms`). Each iteration, a function of
        its own (:meth:`region`), reduces its part into a local variable it returns; the partial
        results land in an array, one slot per iteration, and are combined into the element in
        iteration order after the loop. The result does not depend on the number of threads.
        """
        loop, first, count = n.loop, n.first, n.count
        st = self.statements[first.statement].source
        et = self.element_type(st.tensor).compute
        ct = c_compute_type(et)
        identity = reduction_identity(st.op, et)
        addr = self.address(st.tensor, st.lhs, ExprPrinter(self, st), st.source)
        self.lines.append(
            f"{indent}{{ /* parallel reduction: '{st.tensor}' in {count} partial results over loop"
            f" {loop.var}, combined in order */"
        )
        self.lines.append(f"{indent}  {stack_array(ct, f'tc_part[{count}]')}")
        self.lines.append(
            f"{indent}  for (int64_t tc_k = 0; tc_k < {count}; tc_k++) tc_part[tc_k] = {identity};"
        )
        clauses = "num_threads(nthreads) if(nthreads > 1) schedule(static)"
        self.lines.append(f"{indent}  #pragma omp parallel for {clauses}")
        self.lines.append(f"{indent}  {self.loop_header(loop)} {{")
        self.enclosing.append(loop.var)
        self.accumulator = _Accumulator(first.statement, "tc_p")
        call = self.region(loop, indent + "    ", result=(ct, "tc_p", identity))
        self.accumulator = None
        self.enclosing.pop()
        slot = (
            f"({loop.var} - {loop.init.value}) / {loop.step}"
            if loop.init.value or loop.step > 1
            else loop.var
        )
        self.lines.append(f"{indent}    tc_part[{slot}] = {call};")
        self.lines.append(f"{indent}  }}")
        combine = combine_update(st.op, "tc_s", "tc_part[tc_k]", et)
        self.lines.append(
            f"{indent}  {{ {self.bindings(first.statement, first.args, set(st.lhs_vars))}"
            f" {ct} tc_s = {self.load(st.tensor, addr, et)};"
            f" for (int64_t tc_k = 0; tc_k < {count}; tc_k++) tc_s = {combine};"
            f" {self.store(st.tensor, addr, 'tc_s')} }}"
        )
        self.lines.append(f"{indent}}}")


# ------------------------------------------------------------------------------- register tiles
#: ``#pragma GCC unroll`` factor of a register tile's point loops (they are at most this long).
UNROLL_PRAGMA = 64


@dataclass(frozen=True)
class _Accumulator:
    """While printing a register tile's loop or a parallel reduction's part: instances of
    ``statement`` update ``ref`` instead of the tensor's element."""

    statement: str
    ref: str


def _emulated(node: ir.Node) -> bool:
    return isinstance(node, ir.Blocks) or (
        isinstance(node, ir.Block) and any(isinstance(c, ir.Blocks) for c in node.children)
    )


def _upper_bound(loop: ir.For) -> str:
    """C for the last value of ``loop`` (``var <= e`` or ``var < e``; ``e`` may not be constant)."""
    bound, shift = loop.cond.args[1], (1 if loop.cond.op == "<" else 0)
    return f"({expr(bound)} - {shift})"


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


def print_kernel(
    cdef: CheckedDef,
    body: ir.Node,
    statements: Mapping[str, ScopStatement],
    *,
    symbol: str,
    params: Sequence[CParam],
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    checked: frozenset[int] = frozenset(),
    wide: Mapping[str, ScalarType] | None = None,
    copy_in: frozenset[str] = frozenset(),
    header: str = "",
    printer: Callable[..., CPrinter] | None = None,
    packs: Mapping[str, Pack] | None = None,
    parallel: bool = True,
    folded: Sequence[str] = (),
    parts: Mapping[str, Part] | None = None,
    sites: Mapping[str, Site] | None = None,
    held: Mapping[str, int] | None = None,
    zeroed: frozenset[str] = frozenset(),
) -> tuple[str, tuple[BoundsCheck, ...]]:
    """The C source of one kernel and the run-time bounds checks it makes.

    The function is ``void symbol(int nthreads, int64_t *tc_errors, <params>)``; ``tc_errors``
    points at two int64 slots (check number, offending subscript), zero on entry.
    ``body`` is the kernel IR after the target's passes (:mod:`.openmp_teams`,
    :mod:`.reduction_forms`). ``printer`` makes the printer
    from ``(cdef, statements, sizes, strides, checked, wide)`` (the emulated target's prints
    promoted buffers). ``packs``: inputs read from transposed panels (:mod:`.packing`), which the
    kernel allocates and fills first; ``strides`` then holds the panels' strides for them.
    ``parts``: those of them filled a part at a time at the marks ``sites`` in ``body``
    (:func:`~tcjit.mapping.parts.place_parts`); ``strides`` holds the parts' strides for them.
    ``parallel``: whether the panels may be filled by several threads (the option parallelize).
    ``folded``: the ``!`` initialisations (``S0_init``) that ``body`` leaves out
    (:func:`~tcjit.mapping.reduction_forms.folded_initialisations`), named in a comment.

    ``held``: tensors of ``params`` (temporaries; name -> elements) the kernel keeps in a workspace
    of its own rather than taking them as parameters: the function is then a wrapper that takes
    the workspace (:data:`WORKSPACE_HELPERS`, kept between calls), sets those in ``zeroed`` to
    zero and calls the kernel's body, ``symbol_body``, which takes every tensor of ``params`` as
    a ``restrict`` parameter (:func:`_held_wrapper`).
    """
    wide = dict(wide or {})
    held = dict(held or {})
    packs = dict(packs or {})
    parts = dict(parts or {})
    emulated = _emulated(body)

    p = (printer or CPrinter)(cdef, statements, sizes, strides, checked, wide)
    p.symbol = symbol
    p.packed = frozenset(packs)
    p.sites = dict(sites or {})
    for q in params:
        if q.kind == "tensor" and q.name in parts:  # the tensor, and this thread's part buffer
            ct = c_storage_type(cdef.tensor(q.name).dtype)
            per = _padded_elements(parts[q.name].shape, cdef.tensor(q.name).dtype)
            mine = f"pk_{q.name} + (pn_{q.name} > 1 ? (int64_t)omp_get_thread_num() * {per} : 0)"
            p.aliases += [
                f"const {ct} *restrict u_{q.name} = p_{q.name};",
                f"{ct} *restrict b_{q.name} = {mine};",
            ]
            p.signature += [f"const {ct} *restrict u_{q.name}", f"{ct} *restrict b_{q.name}"]
            p.arguments += [f"p_{q.name}", mine]
        elif q.kind == "tensor":
            pointer = f"p_{q.name}"
            if q.name in packs:  # this thread's panel (its own, or the only one)
                per = _padded_elements(packs[q.name].shape, cdef.tensor(q.name).dtype)
                pointer = f"pk_{q.name} + (pn_{q.name} > 1 ? (int64_t)omp_get_thread_num() * {per} : 0)"
            p.aliases.append(f"{q.ctype} t_{q.name} = {pointer};")
            p.signature.append(f"{q.ctype} t_{q.name}")
            p.arguments.append(pointer)
        else:
            p.signature.append(f"{q.ctype} s_{q.name}")
            p.arguments.append(f"s_{q.name}")
    for name, wt in wide.items():
        p.aliases.append(f"{c_compute_type(wt)} *restrict w_{name} = wp_{name};")
        p.signature.append(f"{c_compute_type(wt)} *restrict w_{name}")
        p.arguments.append(f"wp_{name}")
    if emulated:
        p.shadowed = [*cdef.outputs, *cdef.temporaries]
        p.bounded = [q.name for q in params if q.kind == "tensor" and q.name not in p.shadowed]
    if folded:
        p.lines.append(f"  /* left out, as register tiles start their sums from zero: {', '.join(folded)} */")
    p.node(body, "  ")
    common, fills, panels, freed, panel_bytes = _panels(p, packs, parallel, parts)
    prologue, epilogue = _wide_buffers(p, wide, copy_in, cleanup=" ".join(freed))
    prologue, epilogue = [*panels, *prologue], [*epilogue, *(f"  {f}" for f in freed)]
    if emulated:
        shadows, frees = _shadows(p)
        prologue, epilogue = [*shadows, *prologue], [*epilogue, *frees]
    decl = ", ".join(
        ["int nthreads", "int64_t *restrict tc_errors", *(f"{q.ctype} {_cname(q)}" for q in params)]
    )
    wrapper = _held_wrapper(cdef, symbol, params, held, zeroed) if held else []
    release = _workspace_release(panel_bytes, _held_layout(cdef, held)[1] if held else None)
    text = [
        "/* Generated by tcjit. */",
        header.rstrip(),
        PRELUDE,
        "#include <stdlib.h>",
        *(["#include <omp.h>"] if packs or p.helpers else []),
        "",
        "static inline int64_t tc_checked(int64_t i, int64_t n, int64_t check, int64_t *errors) {",
        "  if (__builtin_expect(i < 0 || i >= n, 0)) {",
        "    __atomic_store_n(&errors[1], i, __ATOMIC_RELAXED);",
        "    __atomic_store_n(&errors[0], check, __ATOMIC_RELAXED);",
        "    return 0;",
        "  }",
        "  return i;",
        "}",
        "",
        *(EMULATION_HELPERS if _emulated(body) else ()),
        *(
            f"typedef {ct} {name} __attribute__((vector_size({n}), aligned(sizeof({ct})), may_alias));"
            for name, (ct, n) in sorted(p.vector_types.items())
        ),
        *_PARTS,
        *common,
        *(line for helper in p.helpers for line in helper),
        *p.prototypes,
        "",
        *p.functions,
        "#if TC_PART_OF(0)",
        *(WORKSPACE_HELPERS if packs or held else ()),
        *(release if packs or held else ()),
        *fills,
        f"static __attribute__((noinline)) void {symbol}_body({decl})" if held else f"void {symbol}({decl})",
        "{",
        "  (void)nthreads; (void)tc_errors;",
        *prologue,
        "  {",
        *(f"  {d}" for d in p.aliases),
        *p.lines,
        "  }",
        *epilogue,
        "}",
        *wrapper,
        "#endif",
        "",
    ]
    return "\n".join(text), tuple(p.checks)


def _held_wrapper(
    cdef: CheckedDef, symbol: str, params: Sequence[CParam], held: Mapping[str, int], zeroed: frozenset[str]
) -> list[str]:
    """The entry point of a kernel whose ``held`` tensors live in its workspace: it takes the
    workspace, places each tensor in it (64-byte aligned), zeroes those in ``zeroed`` and calls
    ``symbol_body`` with them as the parameters they are there. The body keeps its ``restrict``
    parameters: pointers into one allocation, as locals of the body, let gcc's vectoriser reorder
    the accesses of a ``#pragma omp simd`` loop across two of them (a wrong fcrelu gradient)."""
    offsets, total = _held_layout(cdef, held)
    outer = ["int nthreads", "int64_t *restrict tc_errors"]
    outer += [f"{q.ctype} {_cname(q)}" for q in params if q.name not in held]
    args = ["nthreads", "tc_errors"]
    for q in params:
        if q.name in held:
            ct = c_storage_type(cdef.tensor(q.name).dtype)
            args.append(f"({ct} *)(tc_ws + {offsets[q.name]})")
        else:
            args.append(_cname(q))
    names = ", ".join(f"'{name}'" for name in held)
    lines = [
        f"/* The temporaries {names} live in the kernel's workspace, kept between calls. */",
        f"void {symbol}({', '.join(outer)})",
        "{",
        f"  char *tc_ws = (char *)tc_take_workspace(&tc_kept_temporaries, {total});",
        "  if (!tc_ws) { tc_errors[0] = -1; return; }",
    ]
    for name in held:
        if name in zeroed:
            ct = c_storage_type(cdef.tensor(name).dtype)
            lines.append(f"  memset(tc_ws + {offsets[name]}, 0, {held[name]} * sizeof({ct}));")
    lines += [
        f"  {symbol}_body({', '.join(args)});",
        "  tc_give_workspace(&tc_kept_temporaries, tc_ws);",
        "}",
    ]
    return lines


def _held_layout(cdef: CheckedDef, held: Mapping[str, int]) -> tuple[dict[str, int], int]:
    """Where each ``held`` tensor (name -> elements) starts in the temporaries' workspace (bytes,
    64-byte aligned), and the workspace's size in bytes (64 at least)."""
    offsets: dict[str, int] = {}
    total = 0
    for name, elements in held.items():
        offsets[name] = total
        total += _padded_elements((elements,), cdef.tensor(name).dtype) * _item_bytes(cdef.tensor(name).dtype)
    return offsets, max(total, 64)


def _workspace_release(panel_bytes: Sequence[str], temporaries: int | None) -> list[str]:
    """The functions a library with a workspace exports for the runtime's memory budget
    (:mod:`tcjit.memory`): ``tc_kept_bytes(nthreads)``, the bytes its workspaces keep between
    calls on ``nthreads`` threads (``panel_bytes``: C that declares ``tc_bytes``, the panels' size,
    from ``nthreads``; ``temporaries``: the temporaries' workspace size, if any), and
    ``tc_release()``, which frees the workspaces kept in their slots. A call in flight on another
    thread has taken its workspace out of the slot (:data:`WORKSPACE_HELPERS`), so ``tc_release``
    never frees memory a call is using; such a call puts its workspace back when it returns."""
    lines = [
        "/* The bytes kept between calls on nthreads threads, and the function that frees them:",
        "   the runtime's memory budget calls them (tcjit.memory). */",
        "size_t tc_kept_bytes(int nthreads)",
        "{",
        "  size_t kept = 0;",
        "  (void)nthreads;",
    ]
    if panel_bytes:
        lines += [
            "  {",
            *(f"  {line}" for line in panel_bytes),
            f"    if (tc_bytes <= {KEPT_WORKSPACE_BYTES}) kept += tc_bytes;",
            "  }",
        ]
    if temporaries is not None and temporaries <= KEPT_WORKSPACE_BYTES:
        lines.append(f"  kept += {temporaries};")
    return [
        *lines,
        "  return kept;",
        "}",
        "void tc_release(void)",
        "{",
        "  tc_free_workspace(__atomic_exchange_n(&tc_kept_workspace, NULL, __ATOMIC_ACQ_REL));",
        "  tc_free_workspace(__atomic_exchange_n(&tc_kept_temporaries, NULL, __ATOMIC_ACQ_REL));",
        "}",
    ]


#: The kernel's functions are numbered (the entry point 0, each parallel region from 1) and each is
#: compiled only where ``TC_PART_OF(number)`` holds: one translation unit has them all, and the
#: runtime may compile the source several times, each with a part of them, in parallel, and link
#: the parts (:func:`tcjit.cpu_runtime.compile_c`). Region functions are then hidden, not static.
_PARTS = (
    "#ifndef TC_PART_OF",
    "#define TC_PART_OF(number) 1",
    "#define TC_REGION static",
    "#else",
    '#define TC_REGION __attribute__((visibility("hidden")))',
    "#endif",
)


#: Ids in the emulated target's orders (``tc_order``: 0 forward, 1 reversed, 2 shuffled: ``i * s +
#: n / 3`` modulo ``n`` with a stride ``s`` prime to ``n`` near ``n / 2``).
EMULATION_HELPERS = (
    "static int64_t tc_stride(int64_t n) {",
    "  int64_t s = n / 2 + 1;",
    "  for (;; s++) {",
    "    int64_t a = s, b = n;",
    "    while (b) { int64_t r = a % b; a = b; b = r; }",
    "    if (a == 1) return s;",
    "  }",
    "}",
    "/* Race check: the last write to each element of a written tensor, by (global block + 1, thread,",
    " * barrier phase). Another block of the same launch, or another thread of the same block in the",
    " * same phase, touching an element written since the launch began is a race: the first found",
    " * sets error slot 0 to `code` (-2 - the tensor's number) and slot 1 to the element's offset.",
    " * Every access is checked against the tensor's `span` elements first (tc_inside): one outside",
    " * (a mapping bug: on a GPU it reads or corrupts memory) sets slot 2 to 1 + the tensor's number",
    " * (written tensors, then inputs), overriding a race, and is not made: the check returns 0. */",
    "static inline int tc_inside(int64_t offset, int64_t span, int64_t tensor, int64_t *errors) {",
    "  if (offset >= 0 && offset < span) return 1;",
    "  if (!errors[2]) { errors[0] = -2 - tensor; errors[1] = offset; errors[2] = 1 + tensor; }",
    "  return 0;",
    "}",
    "typedef struct { int64_t block, thread, phase; } tc_shadow;",
    "static inline int tc_race(tc_shadow *shadow, int64_t span, int write, int64_t block, int64_t thread,",
    "                         int64_t first, int64_t phase, int64_t code, int64_t offset, int64_t *errors) {",
    "  if (!tc_inside(offset, span, -2 - code, errors)) return 0;",
    "  tc_shadow *s = shadow + offset;",
    "  if (s->block > first && (s->block != block + 1 || (s->phase == phase && s->thread != thread))) {",
    "    if (errors[0] == 0) { errors[0] = code; errors[1] = offset; }",
    "  }",
    "  if (write) { s->block = block + 1; s->thread = thread; s->phase = phase; }",
    "  return 1;",
    "}",
    "/* The same for a block's promoted buffer, reset when a block starts, with reads tracked too:",
    " * another thread of the block reading or writing an element written in the same barrier",
    " * interval, or writing one read in it (reader -1: several threads), is a race. */",
    "typedef struct { int64_t writer, wphase, reader, rphase; } tc_bshadow;",
    "static inline void tc_brace(tc_bshadow *s, int write, int64_t thread, int64_t phase, int64_t code,",
    "                            int64_t offset, int64_t *errors) {",
    "  int64_t me = thread + 1;",
    "  int conflict = (s->writer && s->wphase == phase && s->writer != me)",
    "                 || (write && s->reader && s->rphase == phase && s->reader != me);",
    "  if (conflict && errors[0] == 0) { errors[0] = code; errors[1] = offset; }",
    "  if (write) { s->writer = me; s->wphase = phase; }",
    "  else if (!s->reader || s->rphase != phase) { s->reader = me; s->rphase = phase; }",
    "  else if (s->reader != me) s->reader = -1;",
    "}",
    "static inline int64_t tc_perm(int64_t i, int64_t n, int64_t s, int64_t order) {",
    "  if (order == 1) return n - 1 - i;",
    "  if (order == 2)",
    "    return (int64_t)(((unsigned __int128)i * (uint64_t)s + (uint64_t)(n / 3)) % (uint64_t)n);",
    "  return i;",
    "}",
    "",
)


def _contiguous(info, sizes: Mapping[str, int]) -> tuple[int, ...]:
    return contiguous_strides(tuple(s.evaluate(sizes) for s in info.shape))


#: Side of the square blocks in which a transposed panel is filled: a block is read into a local
#: array along the tensor's rows and written out along the panel's (a register transpose).
PANEL_BLOCK = 8


def _transposer(item_bytes: int) -> list[str]:
    """C of ``tc_transpose8_u<bits>``: an 8 x 8 block of ``item_bytes``-byte elements transposed in
    registers. Row ``x`` of the source starts ``x * ss`` elements after ``src`` and is read as one
    vector; row ``y`` of the destination starts ``y * ds`` elements after ``dst`` and is written as
    one; ``dst[y * ds + x] = src[x * ss + y]``. Three rounds of two-vector shuffles (24 in all)
    replace the 64 single-element loads of an element-wise copy, which made a panel's fill much
    slower (bench/results/HISTORY.md). Compilers without
    ``__builtin_shufflevector`` (gcc before 12) copy element by element."""
    bits = 8 * item_bytes
    u, v = f"uint{bits}_t", f"tc_v8u{bits}"

    def rounds(a: str, b: str, mask: tuple[int, ...]) -> str:
        return f"__builtin_shufflevector({a}, {b}, {', '.join(map(str, mask))})"

    lo1, hi1 = (0, 8, 1, 9, 4, 12, 5, 13), (2, 10, 3, 11, 6, 14, 7, 15)
    lo2, hi2 = (0, 1, 8, 9, 4, 5, 12, 13), (2, 3, 10, 11, 6, 7, 14, 15)
    lo3, hi3 = (0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15)
    # round 1: rows pairwise interleaved by element; round 2: by pairs; round 3: by halves
    one = [(f"t{2 * i}", f"r{2 * i}", f"r{2 * i + 1}", lo1) for i in range(4)]
    one += [(f"t{2 * i + 1}", f"r{2 * i}", f"r{2 * i + 1}", hi1) for i in range(4)]
    two = []
    for half in (0, 4):
        two += [
            (f"q{half}", f"t{half}", f"t{half + 2}", lo2),
            (f"q{half + 1}", f"t{half}", f"t{half + 2}", hi2),
            (f"q{half + 2}", f"t{half + 1}", f"t{half + 3}", lo2),
            (f"q{half + 3}", f"t{half + 1}", f"t{half + 3}", hi2),
        ]
    lines = [
        f"typedef {u} {v} __attribute__((vector_size({8 * item_bytes}), aligned({item_bytes}), may_alias));",
        f"static inline void tc_transpose8_u{bits}(const void *restrict src, int64_t ss,",
        "                                        void *restrict dst, int64_t ds)",
        "{",
        f"  const {u} *s = (const {u} *)src;",
        f"  {u} *d = ({u} *)dst;",
        "#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)",
        *(f"  const {v} r{x} = *(const {v} *)(s + {x} * ss);" for x in range(8)),
        *(f"  const {v} {n} = {rounds(a, b, m)};" for n, a, b, m in one + two),
        *(
            f"  *({v} *)(d + {y} * ds) = {rounds(f'q{y % 4}', f'q{y % 4 + 4}', lo3 if y < 4 else hi3)};"
            for y in range(8)
        ),
        "#else",
        "  for (int64_t y = 0; y < 8; y += 1)",
        "    for (int64_t x = 0; x < 8; x += 1)",
        "      d[y * ds + x] = s[x * ss + y];",
        "#endif",
        "}",
    ]
    return lines


#: Panels with fewer elements are filled by one thread (starting a parallel region costs more).
MIN_PARALLEL_PANEL = 1 << 15

#: Each thread fills a panel of its own when all the copies take at most this many bytes: a
#: panel one thread wrote and another reads crosses between the cores' caches on every call,
#: which costs more than copying it twice (bench/results/HISTORY.md). Above it (many threads,
#: large panels) the threads fill one shared panel, each a part.
PRIVATE_PANELS_BYTES = 4 << 20


#: Workspaces up to this many bytes are kept for the next call (larger ones are freed).
KEPT_WORKSPACE_BYTES = 64 << 20

#: Workspaces of at least this many bytes are mapped (``mmap``) rather than allocated with
#: ``malloc``: unmapping returns them to the system at once, where glibc kept freed blocks in its
#: heap (it raises its own mmap threshold to the size of each block freed), and a process that
#: evicted forty 16 MB workspaces stayed 600 MB larger (bench/memory.py).
MAPPED_WORKSPACE_BYTES = 256 << 10

#: The memory of the panels and, in a slot of their own, of the temporaries (:func:`_held_wrapper`):
#: one workspace per kernel and slot, kept between calls and taken atomically, so that
#: a call does not allocate and touch fresh memory each time (glibc returns large blocks to the
#: system when freed; the timing is in bench/results/HISTORY.md), and concurrent calls each get
#: their own (the one that finds the slot empty allocates, and frees what it cannot give back).
#: Each workspace starts with a 64-byte header holding its size, which says how it was allocated
#: (:data:`MAPPED_WORKSPACE_BYTES`).
WORKSPACE_HELPERS = (
    "#include <sys/mman.h>",
    "static void *tc_kept_workspace = NULL;  /* the panels' */",
    "static void *tc_kept_temporaries = NULL;",
    "static void tc_free_workspace(void *w)",
    "{",
    "  if (!w) return;",
    "  size_t bytes = *(size_t *)w + 64;",
    f"  if (bytes >= {MAPPED_WORKSPACE_BYTES}) munmap(w, bytes); else free(w);",
    "}",
    "static void *tc_take_workspace(void **slot, size_t bytes)",
    "{",
    "  void *w = __atomic_exchange_n(slot, NULL, __ATOMIC_ACQ_REL);",
    "  if (w && *(size_t *)w >= bytes) return (char *)w + 64;",
    "  tc_free_workspace(w);",
    f"  if (bytes + 64 >= {MAPPED_WORKSPACE_BYTES}) {{",
    "    w = mmap(NULL, bytes + 64, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);",
    "    if (w == MAP_FAILED) return NULL;",
    "  } else {",
    "    w = aligned_alloc(64, bytes + 64);",
    "    if (!w) return NULL;",
    "  }",
    "  *(size_t *)w = bytes;",
    "  return (char *)w + 64;",
    "}",
    "static void tc_give_workspace(void **slot, void *p)",
    "{",
    "  void *w = (char *)p - 64, *none = NULL;",
    f"  if (*(size_t *)w > {KEPT_WORKSPACE_BYTES}",
    "      || !__atomic_compare_exchange_n(slot, &none, w, 0,",
    "                                      __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))",
    "    tc_free_workspace(w);",
    "}",
)


def _item_bytes(t: ScalarType) -> int:
    return max(1, t.bits // 8)


def _padded_elements(shape: Sequence[int], dtype: ScalarType) -> int:
    """Elements between two threads' panels or part buffers of ``shape``: its elements, rounded
    up to 64 bytes (the buffers' alignment, which ``aligned_alloc`` needs the size to be a
    multiple of)."""
    per_line = max(1, 64 // _item_bytes(dtype))
    return -(-math.prod(shape) // per_line) * per_line


def _block_copy(
    ct: str, rows: bool, item: int, src: str, src_strides: tuple[int, int], dst: str, dst_stride: int
) -> list[str]:
    """C that copies one full :data:`PANEL_BLOCK`-square block, transposed: ``src`` and ``dst`` are
    C for the offsets of its first element, ``src_strides`` the tensor's strides along the panel's
    last two dimensions (the first 1 when ``rows``: the block is transposed in registers),
    ``dst_stride`` the panel's along the first of them (along the second it is 1)."""
    blk = PANEL_BLOCK
    sa, sb = src_strides
    if rows:
        return [f"      tc_transpose8_u{8 * item}(src + {src}, {sb}, dst + {dst}, {dst_stride});"]
    return [
        f"      {stack_array(ct, f'tile[{blk}][{blk}]')}",
        f"      #pragma GCC unroll {blk}",
        f"      for (int64_t x = 0; x < {blk}; x += 1)",
        f"        #pragma GCC unroll {blk}",
        f"        for (int64_t y = 0; y < {blk}; y += 1)",
        f"          tile[x][y] = src[{src} + y * INT64_C({sa}) + x * INT64_C({sb})];",
        f"      #pragma GCC unroll {blk}",
        f"      for (int64_t y = 0; y < {blk}; y += 1)",
        f"        #pragma GCC unroll {blk}",
        f"        for (int64_t x = 0; x < {blk}; x += 1)",
        f"          dst[{dst} + y * INT64_C({dst_stride}) + x] = tile[x][y];",
    ]


def _part_bounds(pack: Pack, part: Part) -> list[str]:
    """C that clamps the part from element ``(o0, ...)`` on to the tensor: ``[l<d>, h<d>)`` per
    dimension ``d`` (:func:`_part_fill`, :func:`_part_ahead`)."""
    return [
        f"  const int64_t l{d} = o{d} > 0 ? o{d} : 0, "
        f"h{d} = o{d} + {part.shape[d]} < {pack.shape[d]} ? o{d} + {part.shape[d]} : {pack.shape[d]};"
        for d in range(len(pack.shape))
    ]


def _part_fill(name: str, pack: Pack, part: Part, ct: str, rows: bool, item: int) -> list[str]:
    """C of ``tc_part_X(src, dst, o0, ...)``: the part of ``X``'s panel whose first element is
    ``(o0, ...)``, of :attr:`Part.shape` clamped to the tensor, copied into ``dst`` with the part's
    strides, the panel's last two dimensions in :data:`PANEL_BLOCK`-square blocks."""
    blk = PANEL_BLOCK
    *outer, a, b = pack.order
    rank = len(pack.shape)
    lo = {d: f"l{d}" for d in range(rank)}
    hi = {d: f"h{d}" for d in range(rank)}

    def offset(strides, index, shift: bool) -> str:
        return " + ".join(
            f"({index[d]}{f' - o{d}' if shift else ''}) * INT64_C({strides[d]})" for d in pack.order
        )

    index = {**{d: f"e{d}" for d in outer}, a: "ga", b: "gb"}
    one = {**{d: f"e{d}" for d in outer}, a: "y", b: "x"}
    return [
        f"/* Fills the part of '{name}''s transposed panel from element (o0, ...) on (option",
        " * pack_operands: a part at a time, where the code reads it). */",
        f"static void __attribute__((unused)) tc_part_{name}(const {ct} *restrict src, {ct} *restrict dst, "
        + ", ".join(f"int64_t o{d}" for d in range(rank))
        + ")",
        "{",
        *_part_bounds(pack, part),
        *(f"  for (int64_t e{d} = {lo[d]}; e{d} < {hi[d]}; e{d} += 1)" for d in outer),
        f"  for (int64_t ga = {lo[a]}; ga < {hi[a]}; ga += {blk})",
        f"  for (int64_t gb = {lo[b]}; gb < {hi[b]}; gb += {blk}) {{",
        f"    if (ga + {blk} <= {hi[a]} && gb + {blk} <= {hi[b]}) {{",
        *_block_copy(
            ct,
            rows,
            item,
            offset(pack.source, index, False),
            (pack.source[a], pack.source[b]),
            offset(part.strides, index, True),
            part.strides[a],
        ),
        "    } else {",
        f"      for (int64_t y = ga; y < (ga + {blk} < {hi[a]} ? ga + {blk} : {hi[a]}); y += 1)",
        f"        for (int64_t x = gb; x < (gb + {blk} < {hi[b]} ? gb + {blk} : {hi[b]}); x += 1)",
        f"          dst[{offset(part.strides, one, True)}] = src[{offset(pack.source, one, False)}];",
        "    }",
        "  }",
        "}",
    ]


def _fetch_helper(fn: str, f: ir.Fetch, strides: tuple[int, ...], dtype: ScalarType) -> tuple[list[str], int]:
    """C of ``fn(src, from, to)``, which asks for the cache lines ``[from, to)`` of ``f``'s box of
    its tensor, into L2, and how many lines (slots) the box has. The box is fetched a row (its
    extent along the last dimension, unit-stride) at a time; each row has a slot for one line
    more than its length (it may start mid-line), so that the callers share lines out, a few per
    call (mlp3's ``d_W1`` fetches 8 or 9 lines of ``O1`` per register tile)."""
    ct = c_storage_type(dtype)
    item = _item_bytes(dtype)
    outer = f.box[:-1]
    rows = math.prod(hi - lo + 1 for lo, hi in outer)
    lo_last, hi_last = f.box[-1]
    length = hi_last - lo_last + 1
    slots = -(-length * item // CACHE_LINE) + 1
    span = " x ".join(f"{lo}:{hi + 1}" for lo, hi in f.box)
    body = [
        f"/* Brings the lines of '{f.tensor}' in {span} into cache for a later loop: slots [l, z) of"
        f" {rows * slots}, {slots} a row. */",
        f"static void {PREFETCHING} {fn}(const {ct} *restrict src, int64_t l, int64_t z)",
        "{",
        f"  for (int64_t row = l / {slots}, k = l % {slots}; l < z; row += 1, k = 0) {{",
        f"    int64_t q = row, at = INT64_C({lo_last});",
    ]
    for d in range(len(outer) - 1, -1, -1):
        lo, hi = outer[d]
        m = f"INT64_C({hi - lo + 1})"
        body.append(f"    at += (INT64_C({lo}) + q % {m}) * INT64_C({strides[d]}); q /= {m};")
    body += [
        f"    const char *a = (const char *)((uintptr_t)(src + at) & ~(uintptr_t){CACHE_LINE - 1})"
        f" + k * {CACHE_LINE};",
        f"    const char *end = (const char *)(src + at + {length});",
        f"    for (; k < {slots} && l < z; k += 1, l += 1, a += {CACHE_LINE})",
        "      if (a < end) __builtin_prefetch(a, 0, 2);",
        "  }",
        "}",
    ]
    return body, rows * slots


#: Bytes of a cache line: what one prefetch of :func:`_part_ahead` brings.
CACHE_LINE = 64

#: The attributes of a function that only prefetches (:func:`_part_ahead`, :func:`_fetch_helper`).
#: GCC counts ``__builtin_prefetch`` as free of side effects and may delete such a function's
#: calls: gcc 12 compiled an earlier version of the fetches of mlp3's backward to nothing (while a
#: hand-written prefetch in the caller's loop stayed). ``noipa`` keeps every call (the function
#: stays out of line: one call per register tile). tests/mapping/test_prefetch.py checks the machine code.
PREFETCHING = "__attribute__((unused, noipa))"


def _part_ahead(name: str, pack: Pack, part: Part, ct: str) -> list[str]:
    """C of ``tc_ahead_X(src, o0, ...)``: asks for the lines of ``X`` that the part from element
    ``(o0, ...)`` on will copy to be brought into the L2 cache (``__builtin_prefetch``, locality
    2), each line of a row of the unit-stride dimension once. A site calls it with the next
    iteration's part after filling its own (:attr:`~tcjit.mapping.parts.Site.ahead`), so that the next fill
    reads the tensor from cache: mlp3's forward fills its first weight in four parts, each of
    which would otherwise be read from memory the other kernels of a training step had pushed out
    of cache (the fills' times with and without: bench/results/HISTORY.md)."""
    rank = len(pack.shape)
    unit = pack.source.index(1)
    order = sorted((d for d in range(rank) if d != unit), key=lambda d: -pack.source[d])
    row = " + ".join(f"e{d} * INT64_C({pack.source[d]})" for d in order) or "0"
    return [
        f"/* Brings the lines of '{name}' that the part from element (o0, ...) on copies into cache. */",
        f"static void {PREFETCHING} tc_ahead_{name}(const {ct} *restrict src, "
        + ", ".join(f"int64_t o{d}" for d in range(rank))
        + ")",
        "{",
        *_part_bounds(pack, part),
        *(f"  for (int64_t e{d} = l{d}; e{d} < h{d}; e{d} += 1) {{" for d in order),
        f"    const {ct} *r = src + {row};",
        f"    const char *a = (const char *)((uintptr_t)(r + l{unit}) & ~(uintptr_t){CACHE_LINE - 1});",
        f"    for (const char *z = (const char *)(r + h{unit}); a < z; a += {CACHE_LINE})",
        "      __builtin_prefetch(a, 0, 2);",
        *("  }" for _ in order),
        "}",
    ]


def _panels(
    p: CPrinter, packs: Mapping[str, Pack], parallel: bool, parts: Mapping[str, Part]
) -> tuple[list[str], list[str], list[str], list[str], list[str]]:
    """C for each packed input's transposed panel (:mod:`.packing`): the helpers every part of
    the source needs (the block transposers, the functions that fill the ``parts``), the
    functions that fill a range of a whole panel's blocks, the prologue that allocates the panels
    and fills the whole ones, the statements that free them, and statements that declare
    ``tc_bytes``, the panels' size in bytes on ``nthreads`` threads. The fill walks the panel's
    outer dimensions in order and its last two in :data:`PANEL_BLOCK`-square blocks (edges
    element by element). Each thread fills and reads a panel of its own (``pk_X +
    omp_get_thread_num() * size``) when they fit :data:`PRIVATE_PANELS_BYTES`; else one panel is
    filled by all the threads. Without ``parallel`` one thread fills one panel. An input of
    ``parts`` gets one part buffer per thread instead, which the code fills where it reads."""
    common: list[str] = []
    functions: list[str] = []
    prologue: list[str] = []
    counts: list[str] = []
    sizes: list[str] = []
    transposers: dict[int, list[str]] = {}
    blk = PANEL_BLOCK
    for name, pack in packs.items():
        dtype = p.cdef.tensor(name).dtype
        ct = c_storage_type(dtype)
        count = math.prod(pack.shape)
        elements = _padded_elements(pack.shape, dtype)
        padded = elements * _item_bytes(dtype)
        *outer, a, b = pack.order  # b: the dimension made innermost
        na, nb = pack.shape[a], pack.shape[b]
        lead = outer[0] if outer else a  # the loop the threads share
        # a source contiguous along the panel's rows: whole blocks are transposed in registers
        item = _item_bytes(dtype)
        rows = pack.source[a] == 1 and blk == 8 and item in (1, 2, 4, 8)
        if rows and item not in transposers:
            transposers[item] = _transposer(item)
        step = 1 if outer else blk
        if name in parts:
            part = parts[name]
            padded = _padded_elements(part.shape, dtype) * item
            common += _part_fill(name, pack, part, ct, rows, item)
            if any(site.tensor == name and site.ahead for site in p.sites.values()):
                common += _part_ahead(name, pack, part, ct)
            prologue += [
                f"  /* '{name}' is read from transposed panels filled a part at a time, one part "
                "buffer per thread (option pack_operands) */",
                f"  {ct} *pk_{name} = ({ct} *)(tc_ws + tc_ws_at);",
                f"  tc_ws_at += pn_{name} * {padded};",
            ]
            threads = "nthreads > 1 ? nthreads : 1" if parallel else "1"
            counts.append(f"  const int64_t pn_{name} = {threads};  /* part buffers: one per thread */")
            sizes.append(f"pn_{name} * {padded}")
            continue

        def offset(strides, ia: str, ib: str, outer=outer, a=a, b=b, pack=pack) -> str:
            index = {**{d: f"e{d}" for d in outer}, a: ia, b: ib}
            return " + ".join(f"({index[d]}) * INT64_C({strides[d]})" for d in pack.order)

        loops = [
            f"for (int64_t e{d} = lo; e{d} < hi; e{d} += 1)"
            if d == lead
            else f"for (int64_t e{d} = 0; e{d} < {pack.shape[d]}; e{d} += 1)"
            for d in outer
        ]
        first_a = "lo" if not outer else "0"
        last_a = "hi" if not outer else str(na)
        loops += [
            f"for (int64_t ga = {first_a}; ga < {last_a}; ga += {blk})",
            f"for (int64_t gb = 0; gb < {nb}; gb += {blk}) {{",
        ]
        functions += [
            f"/* Fills blocks [lo, hi) of the leading loop of '{name}''s transposed panel. */",
            f"static void tc_fill_{name}(const {ct} *restrict src, {ct} *restrict dst,",
            "                           int64_t lo, int64_t hi)",
            "{",
            "  " + "\n  ".join(loops),
            f"    if (ga + {blk} <= {na} && gb + {blk} <= {nb}) {{",
            *_block_copy(
                ct,
                rows,
                item,
                offset(pack.source, "ga", "gb"),
                (pack.source[a], pack.source[b]),
                offset(pack.strides, "ga", "gb"),
                pack.strides[a],
            ),
            "    } else {",
            f"      for (int64_t y = ga; y < (ga + {blk} < {na} ? ga + {blk} : {na}); y += 1)",
            f"        for (int64_t x = gb; x < (gb + {blk} < {nb} ? gb + {blk} : {nb}); x += 1)",
            f"          dst[{offset(pack.strides, 'y', 'x')}] = src[{offset(pack.source, 'y', 'x')}];",
            "    }",
            "  }",
            "}",
        ]
        extent = pack.shape[lead]
        parts = f"(({extent} + {step - 1}) / {step})"
        prologue += [
            f"  /* '{name}' is read from a transposed panel, dimension {pack.dim} innermost "
            "(option pack_operands) */",
            f"  {ct} *pk_{name} = ({ct} *)(tc_ws + tc_ws_at);",
            f"  tc_ws_at += pn_{name} * {padded};",
        ]
        if parallel:
            prologue += [
                f"  if (pn_{name} > 1) {{",
                "    #pragma omp parallel num_threads(nthreads)",
                f"    for (int64_t k = omp_get_thread_num(); k < pn_{name}; k += omp_get_num_threads())",
                f"      tc_fill_{name}(p_{name}, pk_{name} + k * {elements}, 0, {extent});",
                "  } else {",
            ]
        else:
            prologue.append("  {")
        counts.append(
            f"  const int64_t pn_{name} = nthreads > 1 && (int64_t)nthreads * {padded} <= "
            f"{PRIVATE_PANELS_BYTES} ? nthreads : 1;  /* panels: one per thread, or one */"
            if parallel
            else f"  const int64_t pn_{name} = 1;  /* one panel (serial kernel) */"
        )
        sizes.append(f"pn_{name} * {padded}")
        if parallel and count >= MIN_PARALLEL_PANEL:
            prologue.append(
                "    #pragma omp parallel for num_threads(nthreads) if(nthreads > 1) schedule(static)"
            )
        prologue += [
            f"    for (int64_t part = 0; part < {parts}; part += 1)",
            f"      tc_fill_{name}(p_{name}, pk_{name}, part * {step}, "
            f"(part + 1) * {step} < {extent} ? (part + 1) * {step} : {extent});",
            "  }",
        ]
    if not packs:
        return [], [], [], [], []
    head = [
        *counts,
        f"  char *tc_ws = (char *)tc_take_workspace(&tc_kept_workspace, (size_t)({' + '.join(sizes)}));",
        "  if (!tc_ws) { tc_errors[0] = -1; return; }",
        "  int64_t tc_ws_at = 0;",
    ]
    helpers = [line for lines in transposers.values() for line in lines]
    return (
        [*helpers, *common],
        functions,
        [*head, *prologue],
        ["tc_give_workspace(&tc_kept_workspace, tc_ws);"],
        [*counts, f"  const size_t tc_bytes = (size_t)({' + '.join(sizes)});"],
    )


def _wide_buffers(p: CPrinter, wide: Mapping[str, ScalarType], copy_in: frozenset[str], cleanup: str = ""):
    """C that allocates each widened tensor's buffer (copying the tensor in when it is read before
    written) and, at the end, rounds it back into the tensor and frees it. ``cleanup``: C that
    frees what was allocated before, run when an allocation fails."""
    prologue: list[str] = []
    epilogue: list[str] = []
    for name, wt in wide.items():
        info = p.cdef.tensor(name)
        shape = [s.evaluate(p.sizes) for s in info.shape]
        count = math.prod(shape)
        ct = c_compute_type(wt)
        loops, subs = [], []
        for k, n in enumerate(shape):
            loops.append(f"for (int64_t e{k} = 0; e{k} < {n}; e{k} += 1)")
            subs.append(f"e{k}")
        dense = " + ".join(f"e{k} * INT64_C({st})" for k, st in enumerate(_contiguous(info, p.sizes))) or "0"
        actual = " + ".join(f"e{k} * INT64_C({st})" for k, st in enumerate(p.strides[name])) or "0"
        nest = " ".join(loops)
        prologue.append(
            f"  /* '{name}' is accumulated in {wt} (a long sum), stored as {info.dtype} at the end */"
        )
        prologue.append(f"  {ct} *wp_{name} = ({ct} *)malloc(sizeof({ct}) * {max(count, 1)});")
        undo = cleanup + " " if cleanup else ""
        prologue.append(f"  if (!wp_{name}) {{ {undo}tc_errors[0] = -1; return; }}")
        if name in copy_in:
            raw = f"p_{name}[{actual}]"
            if info.dtype.name == "float16":
                raw = f"tc_h2f({raw})"
            elif info.dtype.name == "bfloat16":
                raw = f"tc_bf2f({raw})"
            prologue.append(f"  {nest} wp_{name}[{dense}] = ({ct})({raw});")
        value = convert(f"wp_{name}[{dense}]", wt, info.dtype)
        if info.dtype.is_half:  # stored as bits: narrow through float32, as torch does
            half = "h" if info.dtype.name == "float16" else "bf"
            value = f"tc_f2{half}((float)(wp_{name}[{dense}]))"
        epilogue.append(f"  {nest} p_{name}[{actual}] = {value};")
        epilogue.append(f"  free(wp_{name});")
    return prologue, epilogue


def _shadows(p: CPrinter) -> tuple[list[str], list[str]]:
    """The emulated target's shadow of every written tensor (:data:`EMULATION_HELPERS`): one entry
    per element offset the kernel can use, and the phase counter."""
    prologue = ["  int64_t tc_phase = 0; (void)tc_phase;"]
    epilogue = []
    for name in p.shadowed:
        span = p.span(name)
        prologue.append(f"  tc_shadow *tc_sh_{name} = (tc_shadow *)calloc({span}, sizeof(tc_shadow));")
        prologue.append(f"  if (!tc_sh_{name}) {{ tc_errors[0] = -1; return; }}")
        epilogue.append(f"  free(tc_sh_{name});")
    for name, size in p.buffer_shadows:  # reset by each block
        shadow = "tc_bsh_" + name.removeprefix("tc_")
        prologue.append(f"  tc_bshadow *{shadow} = (tc_bshadow *)malloc({size} * sizeof(tc_bshadow));")
        prologue.append(f"  if (!{shadow}) {{ tc_errors[0] = -1; return; }}")
        epilogue.append(f"  free({shadow});")
    return prologue, epilogue


def _cname(q: CParam) -> str:
    return f"p_{q.name}" if q.kind == "tensor" else f"s_{q.name}"
