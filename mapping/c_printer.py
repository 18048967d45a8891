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
from dataclasses import dataclass, replace

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang import ast as A
from ..polyhedral.lang.builtins import LANGUAGE_FUNCTIONS
from ..polyhedral.lang.checked import CheckedDef, CheckedStatement
from ..polyhedral.lang.types import SCALAR_TYPES, ScalarType, common_type
from ..polyhedral.scop import ScopStatement
from . import ir
from .accumulation import LONG_SUM
from .barriers import needless_barriers
from .c_prelude import PRELUDE, builtin_callee, int_suffix
from .packing import Pack, contiguous_strides, spanned_elements
from .parts import Part, Site, affine, constant_range
from .prefetch import Fetch, plan_fetches

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
    """Prints the right-hand side of a vector register tile (:meth:`CPrinter.vector_tile`): an
    access that moves along the vector dimension is a vector load of ``vtype`` (GCC's vector
    extension, unaligned, may alias its element type); everything else is a scalar, which the
    vector arithmetic broadcasts."""

    def __init__(self, printer: CPrinter, st: CheckedStatement, vdim: str, vtype: str):
        super().__init__(printer, st)
        self.vdim = vdim
        self.vtype = vtype

    def value(self, e: A.Expr) -> str:
        if isinstance(e, A.Access) and self.p._vector_access(e.tensor, e.args, self.vdim) == "vector":
            return f"(*(const {self.vtype} *)&t_{e.tensor}[{self.p.address(e.tensor, e.args, self, e)}])"
        return super().value(e)


def _moves_by_one(e: ir.Expr, var: str) -> bool:
    """Whether ``e`` is ``var`` or ``x + var`` with ``x`` free of ``var``."""
    if e == ir.Var(var):
        return True
    return (
        isinstance(e, ir.Op)
        and e.op == "+"
        and e.args[1] == ir.Var(var)
        and var not in ir.free_vars(e.args[0])
    )


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
        self.serial: dict[str, ir.For] = {}  # enclosing loops printed as plain serial C loops
        self.symbol = "tc_kernel"
        self.source_lines = cdef.source.splitlines()
        self.accumulator: _Accumulator | None = None  # inside a register tile's loop
        self.tiles = 0  # register tiles printed (their arrays are numbered)
        self.vector_types: dict[str, tuple[str, int]] = {}  # vector tiles' types: (element, bytes)
        self.fetches: dict[int, list[Fetch]] = {}  # id() of a top-level parallel loop -> what it fetches
        self.fetching: dict[str, list[str]] = {}  # while printing one: loop variable -> calls at its top
        self.helpers: list[list[str]] = []  # static functions the regions call (the fetches'), each's lines
        self.packed: frozenset[str] = frozenset()  # inputs read from packed panels
        self.vector_bytes = 32
        self.buffer_shadows: list[tuple[str, int]] = []  # the emulated target's promoted buffers
        # updates whose complete vector register tiles start from zero (see :func:`print_kernel`),
        # and for each statement printed, whether every printing of it started so
        self.foldable: frozenset[str] = frozenset()
        self.printed: dict[str, bool] = {}
        self.team = False  # the next parallel loop is shared out by an enclosing team (:meth:`top`)
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
    def comment(self, sname: str, *, from_zero: bool = False) -> str:
        """The comment every printing of an instance of ``sname`` starts with (it also records
        the printing: ``from_zero`` when a register tile holds the whole reduction of each of its
        outputs and starts it from zero, or starts the first chunk from zero, :meth:`tile_start`)."""
        self.printed[sname] = self.printed.get(sname, True) and from_zero
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

    def one_element_update(self, runs: Sequence[ir.Run], inner: set[str]) -> CheckedStatement | None:
        """The update statement every one of ``runs`` instantiates, if they all update one element
        that none of the loop variables ``inner`` moves, and its right-hand side does not read the
        tensor it updates (a register or a partial result can then hold the element); else None."""
        if not runs or len({r.statement for r in runs}) != 1:
            return None
        scop_st = self.statements[runs[0].statement]
        st = scop_st.source
        if scop_st.kind != "update" or not st.plain_lhs:
            return None
        if any(isinstance(a, A.Access) and a.tensor == st.tensor for a in A.walk(st.rhs)):
            return None
        elements = set()
        for r in runs:
            bound = dict(zip(scop_st.dims, r.args))
            element = tuple(bound[v] for v in st.lhs_vars)
            if any(ir.free_vars(e) & inner for e in element):
                return None
            elements.add(element)
        return st if len(elements) == 1 else None

    def register_tile(self, loop: ir.For, kinds: set[str], indent: str) -> bool:
        """A register tile (see :mod:`.cpu`): the outputs the point loops below ``loop`` update
        live in a local array across ``loop``; False (print it plainly) if the nest does not fit.

        Expected shape: ``loop`` (a reduction loop), more reduction loops, then the point loops
        (``unroll``/``simd`` kinds, or single-iteration ones) around instances of one update
        statement only, whose output element depends on neither ``loop`` nor the loops between.
        With ``simd_reduction`` on ``loop`` itself (the dot-product form) ``loop`` is strip-mined
        into :attr:`lanes` partial sums per output, added up after it.
        """
        if "simd_reduction" not in kinds:
            shape = _reduction_chain(loop)
            if shape is not None:
                return self.chain_tile(loop, *shape, indent)
        chain, node = [], loop.body
        while isinstance(node, (ir.For, ir.Mark)):
            if isinstance(node, ir.Mark):
                node = node.body
            elif node.degenerate or set(node.kind.split("+")) & {"unroll", "simd"}:
                break
            else:
                chain.append(node)
                node = node.body
        inner = {loop.var, *(c.var for c in chain)}
        found = self._tile_points(node, inner)
        if found is None:
            return False
        points, node, runs, st, extents = found
        dot = "simd_reduction" in kinds
        if dot and (chain or any("simd" in p.kind.split("+") for p in points) or st.op not in _ASSOCIATIVE):
            dot = False
        lanes = self.lanes(self.element_type(st.tensor)) if dot else 1
        if math.prod(extents) * lanes > MAX_REGISTER_TILE:
            return False
        name = f"tc_r{self.tiles}"
        self.tiles += 1
        full, conds = _full_tiles(points)
        if conds:
            self.lines.append(f"{indent}if ({' && '.join(conds)}) {{")
            self._register_tile(loop, full, node, runs, extents, dot, name, indent + "  ")
            self.lines.append(f"{indent}}} else {{")
            # Unrolling loops with variable bounds costs the compiler time and buys nothing.
            rolled = [_without_kind(p, "unroll") for p in points]
            self._register_tile(loop, rolled, node, runs, extents, dot, name, indent + "  ")
            self.lines.append(f"{indent}}}")
        else:
            self._register_tile(loop, points, node, runs, extents, dot, name, indent)
        return True

    def _tile_points(self, node: ir.Node, inner: set[str]):
        """``(points, body, runs, statement, extents)`` of a register tile whose point loops start
        at ``node``: the ``unroll``/``simd`` (or single-iteration) loops, of constant extents and
        bounds free of the reduction loops ``inner`` and of each other, around instances of one
        update of one element that ``inner`` does not move (:meth:`one_element_update`); None
        if the nest is not of that shape."""
        points: list[ir.For] = []
        while isinstance(node, (ir.For, ir.Mark)):
            if isinstance(node, ir.Mark):
                node = node.body
                continue
            if not (node.degenerate or set(node.kind.split("+")) & {"unroll", "simd"}):
                return None
            points.append(node)
            node = node.body
        runs = _flat_runs(node)
        st = self.one_element_update(runs or [], inner) if points else None
        if st is None:
            return None
        pvars = {p.var for p in points}
        extents = []
        for p in points:
            if (ir.free_vars(p.init) | ir.free_vars(p.cond)) & (inner | (pvars - {p.var})):
                return None
            if p.degenerate:
                continue
            hi = _constant_upper_bound(p.cond, p.var)
            if not isinstance(p.init, ir.Int) or p.init.value < 0 or p.step != 1 or hi is None:
                return None
            extents.append(hi + 1)
        return points, node, runs, st, extents

    def chain_tile(self, loop: ir.For, chain: list[ir.For], vloop: ir.For, indent: str) -> bool:
        """The dot-product register tile over a chain of reductions (:mod:`.cpu`,
        ``_register_tile_chain``): ``loop`` (marked ``accumulate``), the loops ``chain`` below it,
        the ``simd_reduction`` loop ``vloop``, then the point loops around one ``+=`` update.
        Every output of the tile keeps a vector of partial sums across all of them; the lanes
        are added up once, after ``loop``. False (print the nest plainly) if it does not fit."""
        if not self.canonical(vloop) or vloop.step != 1:
            return False
        inner = {loop.var, *(c.var for c in chain), vloop.var}
        found = self._tile_points(vloop.body, inner)
        if found is None:
            return False
        points, node, runs, st, extents = found
        if st.op != "+=":
            return False
        plan = self._chain_plan(runs, vloop)
        if plan is not None:
            if math.prod(extents) > MAX_VECTOR_ACCUMULATORS:
                return False
        elif math.prod(extents) * self.lanes(self.element_type(st.tensor)) > MAX_REGISTER_TILE:
            return False
        name = f"tc_r{self.tiles}"
        self.tiles += 1
        full, conds = _full_tiles(points)
        copies = [(full, indent + "  "), ([_without_kind(p, "unroll") for p in points], indent + "  ")]
        if not conds:
            copies = [(points, indent)]
        for k, (pts, ind) in enumerate(copies):
            if conds:
                self.lines.append(
                    f"{indent}if ({' && '.join(conds)}) {{" if k == 0 else f"{indent}}} else {{"
                )
            if plan is not None:
                self._chain_vector(loop, chain, vloop, pts, runs, extents, plan, name, ind)
            else:
                self._chain_array(loop, chain, vloop, pts, node, runs, extents, name, ind)
        if conds:
            self.lines.append(f"{indent}}}")
        return True

    def _chain_plan(self, runs: Sequence[ir.Run], vloop: ir.For):
        """``(type, dimension)`` if the chain tile's update can run in vector registers along loop
        ``vloop``: a ``+=`` of float32 or float64 values into a tensor of that type (or of float32
        ones accumulated in float64, a long sum, where ``vloop`` runs a known number of times
        below :data:`.accumulation.LONG_SUM`: one run is the shortest float32 block
        :meth:`_chain_vector` may use), one dimension moving by one along ``vloop``
        and a right-hand side :meth:`_vector_value` accepts; None otherwise (and in the
        emulated target, which checks races per element)."""
        if self.shadowed:
            return None
        scop_st = self.statements[runs[0].statement]
        st = scop_st.source
        t = self.cdef.tensor(st.tensor).dtype
        et = self.element_type(st.tensor)
        if t.name not in ("float32", "float64") or st.value_type != t:
            return None
        if et != t:
            runs_of = _extent(vloop)
            if not (t.name == "float32" and et.name == "float64") or runs_of is None or runs_of >= LONG_SUM:
                return None  # float32 blocks need runs of a known length below LONG_SUM
        vdims = set()
        for run in runs:
            bound = dict(zip(scop_st.dims, run.args))
            moving = [d for d in scop_st.dims if vloop.var in ir.free_vars(bound[d])]
            if len(moving) != 1 or not _moves_by_one(bound[moving[0]], vloop.var):
                return None
            vdims.add(moving[0])
        if len(vdims) != 1:
            return None
        (vdim,) = vdims
        if vdim in st.lhs_vars or not self._vector_value(st.rhs, t, vdim):
            return None
        return t, vdim

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

    def _chain_vector(self, loop, chain, vloop, points, runs, extents, plan, name, indent) -> None:
        """The chain tile in GCC vector types: per output one vector of ``L`` partial sums
        (:attr:`lanes` of the tensor's type); every step loads each operand's vector once for all
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
        t, vdim = plan
        first = runs[0]
        st = self.statements[first.statement].source
        et = self.element_type(st.tensor)
        wide = et != t
        ct, ect = c_compute_type(t), c_compute_type(et)
        lanes = self.lanes(t)
        vt = self._vtype(ct, lanes)
        wt = self._vtype(ect, lanes)
        lane_int = "int32_t" if ct == "float" else "int64_t"
        it = self._vtype(lane_int, lanes)
        acc = f"{name}_p" if wide else name
        idx = "".join(f"[{p.var}]" for p in points if not p.degenerate)
        dims = "".join(f"[{e}]" for e in extents)
        nest = list(points)
        vex = _VectorExprs(self, st, vdim, vt)
        sex = ExprPrinter(self, st)
        addr = self.address(st.tensor, st.lhs, sex, st.source)
        lhs_bind = self.bindings(first.statement, first.args, set(st.lhs_vars))
        loops = ", ".join([loop.var, *(c.var for c in chain), vloop.var])
        loops_ = [loop, *chain]
        block = _float32_block(loops_, vloop) if wide else 0  # float32 partials inside loops_[:block]
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
        hi = _constant_upper_bound(vloop.cond, vloop.var, constant=False)
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
            [_without_kind(p, "unroll") for p in nest],
            updates(lambda: f"{acc}{idx}[{v} - tc_main] += {svalue};"),
            inner + "    ",
        )
        self.lines.append(f"{inner}  }}")
        self.lines.append(f"{inner}}}")
        self.lines.extend(reversed(more))
        if wide:
            self.point_nest(nest, f"{name}{idx} += __builtin_convertvector({acc}{idx}, {wt});", outer)
        self.lines.extend(reversed(closing))
        self._store_lane_sums(st, addr, et, lanes, f"tc_s + {name}{idx}[tc_l]", nest, lhs_bind, indent)

    def _chain_array(self, loop, chain, vloop, points, node, runs, extents, name, indent) -> None:
        """The chain tile where the update does not fit vector types (a conversion, a call, a
        gather): per output an array of :attr:`lanes` partial sums in the type the tensor is held
        in, ``vloop`` strip-mined into an ``omp simd`` loop over the lanes, its remainder
        accumulated into lane 0."""
        first = runs[0]
        st = self.statements[first.statement].source
        et = self.element_type(st.tensor).compute
        ct = c_compute_type(et)
        lanes = self.lanes(self.element_type(st.tensor))
        idx = "".join(f"[{p.var}]" for p in points if not p.degenerate)
        dims = "".join(f"[{e}]" for e in extents) + f"[{lanes}]"
        ex = ExprPrinter(self, st)
        addr = self.address(st.tensor, st.lhs, ex, st.source)
        lhs_bind = self.bindings(first.statement, first.args, set(st.lhs_vars))
        loops = ", ".join([loop.var, *(c.var for c in chain), vloop.var])
        self.lines.append(
            f"{indent}{{ /* register tile (dot-product form over a chain of reductions, {lanes} lanes):"
            f" '{st.tensor}' kept in {name} across loops {loops} */"
        )
        self.lines.append(f"{indent}  {stack_array(ct, name + dims)}")
        zero = reduction_identity(st.op, et)
        self.point_nest(
            points, f"for (int tc_l = 0; tc_l < {lanes}; tc_l++) {name}{idx}[tc_l] = {zero};", indent + "  "
        )
        closing, inner = self._chain_open([loop, *chain], indent + "  ")
        self._lane_strips(vloop, points, node, first.statement, f"{name}{idx}", lanes, inner)
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

    def _lane_strips(
        self, vloop, points, node, statement: str, lanes_of: str, lanes: int, indent: str
    ) -> None:
        """The dot-product forms' reduction loop ``vloop``, strip-mined: whole strips of ``lanes``
        iterations add into ``lanes_of[0 .. lanes - 1]`` (a ``simd`` lane loop inside the point
        loops), the remaining iterations into ``lanes_of[0]``."""
        hi = _constant_upper_bound(vloop.cond, vloop.var, constant=False)
        self.lines.append(
            f"{indent}const int64_t tc_lo = {expr(vloop.init)}, tc_hi = {hi};"
            f" const int64_t tc_main = tc_hi < tc_lo ? tc_lo"
            f" : tc_lo + (tc_hi - tc_lo + 1) / {lanes} * {lanes};"
        )
        lane_loop = ir.For(
            "tc_l",
            ir.Int(0),
            ir.Op("<", (ir.Var("tc_l"), ir.Int(lanes))),
            1,
            _substitute_runs(node, {vloop.var: ir.Op("+", (ir.Var("tc_k"), ir.Var("tc_l")))}),
            kind="simd",
        )
        main = ir.For(
            "tc_k",
            ir.Var("tc_lo"),
            ir.Op("<", (ir.Var("tc_k"), ir.Var("tc_main"))),
            lanes,
            _rebuild(points, lane_loop),
        )
        tail = ir.For(
            vloop.var,
            ir.Var("tc_main"),
            ir.Op("<=", (ir.Var(vloop.var), ir.Var("tc_hi"))),
            1,
            _rebuild(points, node),
        )
        self.accumulator = _Accumulator(statement, f"{lanes_of}[tc_l]")
        self.loop(main, indent)
        self.accumulator = _Accumulator(statement, f"{lanes_of}[0]")
        self.loop(tail, indent)

    def _register_tile(self, loop, points, node, runs, extents, dot, name, indent) -> None:
        if not dot and self.vector_tile(loop, points, node, name, indent):
            return
        first = runs[0]
        st = self.statements[first.statement].source
        et = self.element_type(st.tensor).compute
        ct = c_compute_type(et)
        lanes = self.lanes(self.element_type(st.tensor)) if dot else 1
        idx = "".join(f"[{p.var}]" for p in points if not p.degenerate)
        dims = "".join(f"[{e}]" for e in extents) + (f"[{lanes}]" if dot else "")
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
            self._lane_strips(loop, points, node, first.statement, f"{name}{idx}", lanes, indent + "  ")
            finish = (
                f"{ct} tc_s = {self.load(st.tensor, addr, et)};"
                f" {_fold_lanes(st.op, f'{name}{idx}', lanes, et)}"
                f" {self.store(st.tensor, addr, 'tc_s')}"
            )
        else:
            self.accumulator = _Accumulator(first.statement, f"{name}{idx}")
            body = _rebuild_chain(loop.body, points)
            self.loop(ir.For(loop.var, loop.init, loop.cond, loop.step, body), indent + "  ")
            finish = self.store(st.tensor, addr, f"{name}{idx}")
        self.accumulator = None
        self.point_nest(points, f"{lhs_bind} {finish}", indent + "  ")
        self.lines.append(f"{indent}}}")

    def vector_tile(self, loop: ir.For, points, node, name: str, indent: str) -> bool:
        """The outer-product form in vector registers (a micro-kernel); False if it does not apply.

        A register tile whose innermost point loop is the ``simd`` loop, of a constant extent that
        is a multiple of :attr:`lanes`, the others unrolled, around one instance of a ``+=`` whose
        output and operands are float32 or float64 (no conversions, no wide accumulator) and whose
        right-hand side is ``+ - *`` of accesses, literals and scalars. Every access moves by one
        element along the vector loop (a vector load) or not at all (a scalar, broadcast). The sums
        live in ``<lanes>``-wide vector variables (GCC's vector extension) across the reduction
        loops, each row's operands loaded once per step: the code gcc makes of it is a BLAS
        micro-kernel (``float[..][..]`` arrays with an ``omp simd`` loop leave it spilling partial
        sums to the stack).
        """
        runs = _flat_runs(node)
        live = [p for p in points if not p.degenerate]
        if not runs or not live or live[-1].kind.split("+").count("simd") != 1:
            return False
        extents = []
        for p in live:
            hi = _constant_upper_bound(p.cond, p.var)
            if hi is None or _variable_bounds(p.cond) or p.init != ir.Int(0) or p.step != 1:
                return False
            if p is not live[-1] and "unroll" not in p.kind.split("+"):
                return False
            extents.append(hi + 1)
        simd = live[-1].var
        plan = self._vector_plan(runs, simd, "vector")
        if plan is None:
            return False
        st, et, vdim = plan
        lanes = self.lanes(et)
        if extents[-1] % lanes or math.prod(extents) // lanes > MAX_VECTOR_ACCUMULATORS:
            return False
        vtype = self.vector_type(et)
        chunks = extents[-1] // lanes
        chunk = ir.For(
            "tc_v", ir.Int(0), ir.Op("<=", (ir.Var("tc_v"), ir.Int(chunks - 1))), 1, node, kind="unroll"
        )
        nest = (
            [
                ir.For(p.var, p.init, p.cond, p.step, p.body, kind="unroll") if p.degenerate is False else p
                for p in points[:-1]
            ]
            if points[-1] is live[-1]
            else None
        )
        if nest is None:  # a degenerate point loop inside the vector loop: keep the plain form
            return False
        nest.append(chunk)
        idx = "".join(f"[{p.var}]" for p in live[:-1]) + "[tc_v]"
        dims = "".join(f"[{e}]" for e in extents[:-1]) + f"[{chunks}]"
        lane0 = f"const int64_t {simd} = {lanes} * tc_v;"
        ex = _VectorExprs(self, st, vdim, vtype)
        addr = self.address(st.tensor, st.lhs, ex, st.source)
        first = runs[0]
        lhs_bind = self.bindings(first.statement, first.args, set(st.lhs_vars))
        across = [loop]  # the reduction loops between the tile's loop and its point loops
        while True:
            nxt = across[-1].body
            while isinstance(nxt, ir.Mark):
                nxt = nxt.body
            if not isinstance(nxt, ir.For) or nxt.var in {p.var for p in points}:
                break
            across.append(nxt)
        start = self.tile_start(across, runs)
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
        from_zero = start is not None
        closing, inner = [], indent + "  "
        for chain in across:
            self.lines.append(f"{inner}{self.loop_header(chain)} {{")
            closing.append(f"{inner}}}")
            inner += "  "
        self.lines.append(f"{inner}{self.comment(first.statement, from_zero=from_zero)}")
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
        return True

    def tile_start(self, loops: Sequence[ir.For], runs: Sequence[ir.Run]) -> str | None:
        """How a register tile across ``loops`` (its reduction loop and those below it, above the
        point loops) around ``runs`` starts its sums: ``""`` from zero, as each execution holds
        the whole reduction of every output it updates; a C condition, true in the execution that
        updates its outputs first (the first chunk of a reduction an enclosing loop splits), which
        starts from zero while the others load what the earlier ones stored; None: it loads.

        The update must be in :attr:`foldable` (a ``+=!``). Each reduction variable is bound to
        ``i + c`` or ``k*o + i + c``: ``i`` one of ``loops``, a different one for each variable,
        over a constant range ``[a, b)``; ``o`` an enclosing serial loop (:attr:`serial`) over a
        constant range, ``k = b - a``, none of the outputs' subscripts depending on it. Together
        they span the variable's whole range ``[lo, hi)``: ``a + c = lo`` and ``b + c = hi``
        without ``o``; ``k*o_lo + a + c = lo`` and ``k*o_hi + b + c = hi`` with it.

        Why that suffices: an instance runs once, and the schedule orders an output's instances
        by ``o`` before ``i`` (``o`` encloses the tile, and the point of the output fixes every
        other loop). The execution at ``o = o_lo`` runs the output's first points, ``[lo, lo + k)``
        (the domain is a box over the variable's range, as the constant bounds show), so no
        instance updated the output before it: it holds the initialisation's zero there, which
        the tile need not load; the later chunks load what it stored. With no ``o``, an execution
        runs every point, and each output holds zero at its start.
        """
        sname = runs[0].statement
        if sname not in self.foldable:
            return None
        scop_st = self.statements[sname]
        st = scop_st.source
        spans = {}
        for loop in loops:
            span = _constant_span(loop)
            if span is None:
                return None
            spans[loop.var] = span
        try:
            ranges = {
                v: (st.range_of(v).lo.evaluate(self.sizes), st.range_of(v).hi.evaluate(self.sizes))
                for v in st.reduction_vars
            }
        except (KeyError, ValueError, TypeError):  # a range over sizes this printer was not given
            return None
        first: dict[str, int] = {}  # chunk loop -> its first value
        for run in runs:
            bound = dict(zip(scop_st.dims, run.args))
            inner, outer = [], []
            for v in st.reduction_vars:
                form = affine(bound[v])
                if form is None:
                    return None
                coefs, c = dict(form[0]), form[1]
                mine = [(u, k) for u, k in coefs.items() if u in spans]
                rest = [(u, k) for u, k in coefs.items() if u not in spans]
                if len(mine) != 1 or mine[0][1] != 1 or len(rest) > 1:
                    return None
                a, b = spans[mine[0][0]]
                lo, hi = ranges[v]
                inner.append(mine[0][0])
                if not rest:
                    if (a + c, b + c) != (lo, hi):
                        return None
                    continue
                o, k = rest[0]
                chunk = self.serial.get(o)
                span = None if chunk is None else _constant_span(chunk)
                if span is None or k != b - a or (k * span[0] + a + c, k * (span[1] - 1) + b + c) != (lo, hi):
                    return None
                outer.append(o)
                first[o] = span[0]
            if len(set(inner)) != len(inner) or len(set(outer)) != len(outer):
                return None
            lhs = {d: a for d, a in zip(scop_st.dims, run.args) if d not in st.reduction_vars}
            if any(set(outer) & ir.free_vars(a) for a in lhs.values()):
                return None
        return " && ".join(f"{o} == {v}" for o, v in sorted(first.items()))

    def vector_type(self, t: ScalarType) -> str:
        """The name of the vector type of ``t`` (:attr:`lanes` of them), declared in the kernel."""
        ctype = c_compute_type(t)
        vtype = f"tc_v{self.lanes(t)}{'f32' if ctype == 'float' else 'f64'}"
        self.vector_types[vtype] = (ctype, self.lanes(t) * _ctype_size(t))
        return vtype

    def _vector_plan(self, runs: Sequence[ir.Run], var: str, output: str):
        """``(statement, type, dimension)`` if ``runs`` (instances of one statement) can run in
        vector registers along loop ``var``: a float32 or float64 ``+=`` without conversions or a
        wide accumulator, one dimension moving by one along ``var``, its output moving as
        ``output`` says (:meth:`_vector_access`) and a right-hand side :meth:`_vector_value`
        accepts; None otherwise (and in the emulated target, which checks races per element)."""
        if self.shadowed:
            return None
        scop_st = self.statements[runs[0].statement]
        st = scop_st.source
        et = self.element_type(st.tensor)
        if st.op != "+=" or et.name not in ("float32", "float64") or st.tensor in self.wide:
            return None
        if st.value_type != et or self.cdef.tensor(st.tensor).dtype != et:
            return None
        vdims = set()
        for run in runs:
            bound = dict(zip(scop_st.dims, run.args))
            moving = [d for d in scop_st.dims if var in ir.free_vars(bound[d])]
            if len(moving) != 1 or not _moves_by_one(bound[moving[0]], var):
                return None
            vdims.add(moving[0])
        if len(vdims) != 1:
            return None
        (vdim,) = vdims
        if self._vector_access(st.tensor, st.lhs, vdim) != output or not self._vector_value(st.rhs, et, vdim):
            return None
        return st, et, vdim

    def _vector_access(self, tensor: str, args: Sequence[A.Expr], vdim: str) -> str | None:
        """How an access moves along the vector dimension ``vdim``: ``"scalar"`` (not at all: no
        subscript mentions ``vdim``, or those that do are of stride 0, as in an expanded tensor
        such as the gradient ``sum().backward()`` passes), ``"vector"`` (by one element: a
        subscript ``vdim`` or ``vdim + c`` of stride 1), or None."""
        if tensor in self.wide or any(id(a) in self.checked for a in args):
            return None
        strides = self.strides[tensor]
        moving = [k for k, a in enumerate(args) if vdim in A.index_vars(a)]
        if all(strides[k] == 0 for k in moving):
            return "scalar"
        if len(moving) != 1 or strides[moving[0]] != 1:
            return None
        a = args[moving[0]]
        if isinstance(a, A.Ident):
            return "vector"
        if isinstance(a, A.Binary) and a.op in ("+", "-"):  # vdim + e, vdim - e, e + vdim
            pairs = [(a.lhs, a.rhs)] + ([(a.rhs, a.lhs)] if a.op == "+" else [])
            for this, other in pairs:
                if isinstance(this, A.Ident) and this.name == vdim and vdim not in A.index_vars(other):
                    return "vector"
        return None

    def _vector_value(self, e: A.Expr, t: ScalarType, vdim: str) -> bool:
        """Whether :class:`_VectorExprs` can print ``e``: ``+ - *`` of type ``t`` over accesses that
        :meth:`_vector_access` accepts, literals and scalar arguments."""
        if e.dtype != t:
            return False
        if isinstance(e, (A.IntLit, A.FloatLit)):
            return True
        if isinstance(e, A.Ident):
            return e.kind == "scalar"
        if isinstance(e, A.Access):
            return (
                self.cdef.tensor(e.tensor).dtype == t
                and self._vector_access(e.tensor, e.args, vdim) is not None
            )
        if isinstance(e, A.Unary):
            return e.op == "-" and self._vector_value(e.arg, t, vdim)
        if isinstance(e, A.Binary):
            return (
                e.op in ("+", "-", "*")
                and self._vector_value(e.lhs, t, vdim)
                and self._vector_value(e.rhs, t, vdim)
            )
        return False

    def point_nest(self, points: Sequence[ir.For], body: str, indent: str) -> None:
        """The point loops of a register tile around ``body`` (their bounds use only outer loops)."""
        closing = []
        for p in points:
            if p.degenerate:
                self.lines.append(f"{indent}{{ const int64_t {p.var} = {expr(p.init)};")
            else:
                if "simd" in p.kind.split("+"):
                    self.lines.append(f"{indent}#pragma omp simd")
                elif "unroll" in p.kind.split("+"):
                    self.lines.append(f"{indent}#pragma GCC unroll {UNROLL_PRAGMA}")
                self.lines.append(f"{indent}{self.loop_header(p)} {{")
            closing.append(f"{indent}}}")
            indent += "  "
        self.lines.append(f"{indent}{body}")
        self.lines.extend(reversed(closing))

    def lanes(self, t: ScalarType) -> int:
        """Partial sums per output in the dot-product form: one vector register of ``t``."""
        return max(1, self.vector_bytes // max(1, _ctype_size(t)))

    def reduction_loop(self, loop: ir.For, indent: str, *, vector: bool) -> bool:
        """A vector reduction: accumulate in a register across ``loop``; False if it does not apply."""
        run = loop.body
        if not isinstance(run, ir.Run):
            return False
        scop_st = self.statements[run.statement]
        st = scop_st.source
        if scop_st.kind != "update" or not st.plain_lhs:
            return False
        bound = dict(zip(scop_st.dims, run.args))
        if any(loop.var in ir.free_vars(bound[v]) for v in st.lhs_vars):
            return False
        if any(isinstance(a, A.Access) and a.tensor == st.tensor for a in A.walk(st.rhs)):
            return False  # the sum reads its own target: keep every update in memory, in order
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
            pragma = f"#pragma omp simd simdlen({self.lanes(et)}) reduction({fn}:tc_acc)"
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
        return True

    # ----------------------------------------------------------------------------------- loops
    @staticmethod
    def loop_header(loop: ir.For) -> str:
        v = loop.var
        c = loop.cond
        cond = expr(c)[1:-1] if isinstance(c, ir.Op) and c.op in ("<", "<=", ">", ">=", "==") else expr(c)
        return f"for (int64_t {v} = {expr(loop.init)}; {cond}; {v} += {loop.step})"

    @staticmethod
    def canonical(loop: ir.For) -> bool:
        c = loop.cond
        return (
            isinstance(c, ir.Op)
            and c.op in ("<", "<=")
            and c.args[0] == ir.Var(loop.var)
            and loop.var not in ir.free_vars(c.args[1])
        )

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
        if n.degenerate:
            self.lines.append(f"{indent}{{ const int64_t {n.var} = {expr(n.init)};")
            self.enclosing.append(n.var)
            self.node(n.body, indent + "  ")
            self.enclosing.pop()
            self.lines.append(f"{indent}}}")
            return
        kinds = set(n.kind.split("+")) if self.canonical(n) else {"serial"}
        if "accumulate" in kinds and self.accumulator is None and self.register_tile(n, kinds, indent):
            return
        if "parallel_reduction" in kinds and self.accumulator is None and self.parallel_reduction(n, indent):
            return
        if kinds & {"simd_reduction", "reduction"} and "parallel" not in kinds:
            if self.reduction_loop(n, indent, vector="simd_reduction" in kinds):
                return
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
        plain = kinds <= {"serial", "unroll"}
        if plain:  # its iterations run in order, in one thread (a first chunk: :meth:`tile_start`)
            self.serial[n.var] = n
        if "parallel" in kinds:
            self.region(n, indent + "  ")
        else:
            self.node(n.body, indent + "  ")
        if plain:
            del self.serial[n.var]
        self.enclosing.pop()
        self.lines.append(f"{indent}}}")

    def top(self, tree: ir.Node, indent: str) -> None:
        """The kernel's body: consecutive top-level parallel loops, with the serial code between
        them, share one team of threads (``omp parallel``), which shares out each loop
        (``omp for``) and runs the serial code on one thread (``omp single``). Both end in a
        barrier, as each loop's own ``omp parallel for`` did, so the order of the work is
        unchanged; what goes is the start and end of a parallel region per loop (mlp3's
        derived backward had 16). Code that opens parallel loops of its own below the top level
        (a ``parallel_reduction``, a serial loop around parallel ones) ends the team."""
        children = tree.children if isinstance(tree, ir.Block) else (tree,)
        group: list[tuple[ir.Node, bool]] = []
        self.plan_fetches(children)

        def flush() -> None:
            if sum(shared for _, shared in group) < 2:
                for c, _ in group:
                    self.node(c, indent)
            else:
                self.lines.append(f"{indent}#pragma omp parallel num_threads(nthreads) if(nthreads > 1)")
                self.lines.append(f"{indent}{{")
                free = self._needless_barriers(group)
                for k, (c, shared) in enumerate(group):
                    if shared:
                        self.team, self.nowait = True, k in free
                        self.node(c, indent + "  ")
                        self.team = self.nowait = False
                    else:
                        self.lines.append(f"{indent}  #pragma omp single")
                        self.lines.append(f"{indent}  {{")
                        self.node(c, indent + "    ")
                        self.lines.append(f"{indent}  }}")
                self.lines.append(f"{indent}}}")
            group.clear()

        for c in children:
            if self._shareable(c):
                group.append((c, True))
            elif not ir.opens_parallel(c):
                group.append((c, False))
            else:
                flush()
                self.node(c, indent)
        flush()

    def plan_fetches(self, children: Sequence[ir.Node]) -> None:
        """Which top-level parallel loops fetch inputs of later ones into cache
        (:func:`~tcjit.mapping.prefetch.plan_fetches`): inputs read in place (not from a packed
        panel), whose last dimension has stride 1."""
        loops = []
        for c in children:
            while isinstance(c, ir.Mark):
                c = c.body
            if isinstance(c, ir.For) and not c.degenerate and "parallel" in c.kind.split("+"):
                loops.append(c)
        shapes, unit_last, item_bytes = {}, {}, {}
        for name in self.cdef.params:
            info = self.cdef.tensors.get(name)  # rank-0 scalars are not tensors
            if info is None or not info.shape or name in self.packed or name not in self.strides:
                continue
            shapes[name] = tuple(int(d.evaluate(self.sizes)) for d in info.shape)
            unit_last[name] = tuple(self.strides[name])[-1:] == (1,)
            item_bytes[name] = _item_bytes(info.dtype)
        plan = plan_fetches(loops, self.statements, self.sizes, shapes, unit_last, item_bytes)
        self.fetches = {id(loops[i]): f for i, f in plan.items()}

    def fetch_calls(self, fetches: Sequence[Fetch]) -> tuple[list[str], dict[str, list[str]]]:
        """C for ``fetches`` (:meth:`plan_fetches`) in an iteration of the parallel loop that makes
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

    def _needless_barriers(self, group: Sequence[tuple[ir.Node, bool]]) -> frozenset[int]:
        """The positions in a team's ``group`` (nodes, and whether each is a shared loop) of the
        loops that need no barrier after them: the last, when nothing follows it in the team (the
        team's end waits for every thread), and those :func:`~tcjit.mapping.barriers.
        needless_barriers` finds among consecutive plain ``omp for`` loops (the ``simd`` ones
        may split their iterations differently, and serial code in between runs in one thread
        after a barrier)."""
        free: set[int] = set()
        if group and group[-1][1]:
            free.add(len(group) - 1)
        run: list[tuple[int, ir.For]] = []

        def decide() -> None:
            loops = [n for _, n in run]
            free.update(run[i][0] for i in needless_barriers(loops, self.statements, self.sizes))
            run.clear()

        for k, (c, shared) in enumerate(group):
            n = c
            while isinstance(n, ir.Mark):
                n = n.body
            if shared and isinstance(n, ir.For) and "simd" not in n.kind.split("+"):
                run.append((k, n))
            else:
                decide()
        decide()
        return frozenset(free)

    def _shareable(self, n: ir.Node) -> bool:
        """Whether ``n`` is a parallel loop that :meth:`loop` prints as an ``omp parallel for``
        (not a reduction in any form), which a team's ``omp for`` may share out instead."""
        while isinstance(n, ir.Mark) and n.name not in ("thread0", "sync"):
            n = n.body
        if not isinstance(n, ir.For) or n.degenerate or not self.canonical(n):
            return False
        kinds = set(n.kind.split("+"))
        reductions = {"accumulate", "parallel_reduction", "simd_reduction", "reduction"}
        return "parallel" in kinds and not kinds & reductions

    def region(self, n: ir.For, indent: str, *, result: tuple[str, str, str] | None = None) -> str:
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
        shares, self.fetching = self.fetch_calls(self.fetches.get(id(n), ()))
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

    def parallel_reduction(self, loop: ir.For, indent: str) -> bool:
        """A reduction loop run by threads (``parallel_reduction``, see :mod:`.cpu`); False (print
        it serially) unless every statement instance below ``loop`` updates one element, the same
        for all, by an associative and commutative operator, and ``loop`` has a constant start and
        at most :data:`MAX_PARTIALS` iterations.

        Each iteration, a function of its own (:meth:`region`), reduces its part into a local
        variable it returns; the partial results land in an array, one slot per iteration, and are
        combined into the element in iteration order after the loop. The result does not depend on
        the number of threads.
        """
        runs = ir.runs(loop.body)
        st = self.one_element_update(runs, {loop.var} | _loop_vars(loop.body))
        if st is None or st.op not in _ASSOCIATIVE:
            return False
        hi = _constant_upper_bound(loop.cond, loop.var)
        if not isinstance(loop.init, ir.Int) or loop.step < 1 or hi is None or hi < loop.init.value:
            return False
        count = (hi - loop.init.value) // loop.step + 1
        if count > MAX_PARTIALS:
            return False
        et = self.element_type(st.tensor).compute
        ct = c_compute_type(et)
        identity = reduction_identity(st.op, et)
        addr = self.address(st.tensor, st.lhs, ExprPrinter(self, st), st.source)
        first = runs[0]
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
        return True


# ------------------------------------------------------------------------------- register tiles
#: ``#pragma GCC unroll`` factor of a register tile's point loops (they are at most this long).
UNROLL_PRAGMA = 64

#: The largest register tile (local array elements) the printer emits; larger ones spill anyway.
MAX_REGISTER_TILE = 512

#: The most vector partial sums a vector register tile keeps (x86-64 has 16 vector registers with
#: AVX2: 6 x 2 sums, 2 loaded operand vectors and a broadcast fit).
MAX_VECTOR_ACCUMULATORS = 16

#: The most iterations (partial results, on the stack) of a loop run as a parallel reduction.
MAX_PARTIALS = 4096

_ASSOCIATIVE = ("+=", "*=", "max=", "min=")


@dataclass(frozen=True)
class _Accumulator:
    """While printing a register tile's loop or a parallel reduction's part: instances of
    ``statement`` update ``ref`` instead of the tensor's element."""

    statement: str
    ref: str


def _ctype_size(t: ScalarType) -> int:
    return {"double": 8, "float": 4}.get(c_compute_type(t), max(1, t.bits // 8))


def _emulated(node: ir.Node) -> bool:
    return isinstance(node, ir.Blocks) or (
        isinstance(node, ir.Block) and any(isinstance(c, ir.Blocks) for c in node.children)
    )


def _loop_vars(node: ir.Node | None) -> set[str]:
    """The variables of every loop in ``node``."""
    if isinstance(node, ir.For):
        return {node.var} | _loop_vars(node.body)
    if isinstance(node, ir.Mark):
        return _loop_vars(node.body)
    if isinstance(node, ir.Block):
        return set().union(*(_loop_vars(c) for c in node.children))
    if isinstance(node, ir.If):
        return _loop_vars(node.then) | _loop_vars(node.other)
    return set()


def _without_runs(node: ir.Node | None, names: frozenset[str]) -> ir.Node | None:
    """``node`` without the instances of the statements ``names``, and without the loops,
    conditions and blocks left empty (None if nothing is left)."""
    if isinstance(node, ir.Run):
        return None if node.statement in names else node
    if isinstance(node, ir.Block):
        kept = tuple(k for k in (_without_runs(c, names) for c in node.children) if k is not None)
        return ir.Block(kept) if kept else None
    if isinstance(node, (ir.For, ir.Mark)):
        body = _without_runs(node.body, names)
        return None if body is None else replace(node, body=body)
    if isinstance(node, ir.If):
        then, other = _without_runs(node.then, names), _without_runs(node.other, names)
        if then is None and other is None:
            return None
        return ir.If(node.cond, then if then is not None else ir.Block(()), other)
    return node


def _flat_runs(node: ir.Node) -> list[ir.Run] | None:
    """The statement instances of a loop-free ``node`` in order; None if it has loops or guards."""
    if isinstance(node, ir.Run):
        return [node]
    if isinstance(node, ir.Mark):
        return _flat_runs(node.body)
    if isinstance(node, ir.Block):
        out: list[ir.Run] = []
        for c in node.children:
            part = _flat_runs(c)
            if part is None:
                return None
            out += part
        return out
    return None


def _substitute_runs(node: ir.Node, values: dict[str, ir.Expr]) -> ir.Node:
    """Loop-free ``node`` with ``values`` substituted into its statement arguments."""
    if isinstance(node, ir.Run):
        return ir.Run(node.statement, tuple(ir.substitute(a, values) for a in node.args))
    if isinstance(node, ir.Mark):
        return ir.Mark(node.name, _substitute_runs(node.body, values))
    if isinstance(node, ir.Block):
        return ir.Block(tuple(_substitute_runs(c, values) for c in node.children))
    raise TCInternalError(f"cannot substitute into {node!r}")


def _reduction_chain(loop: ir.For) -> tuple[list[ir.For], ir.For] | None:
    """``(chain, vector loop)`` if the loops below ``loop`` lead, through loops that are not a
    register tile's point loops, to a ``simd_reduction`` loop (the chain form of a register
    tile); None otherwise."""
    chain, node = [], loop.body
    while isinstance(node, (ir.For, ir.Mark)):
        if isinstance(node, ir.Mark):
            node = node.body
            continue
        kinds = set(node.kind.split("+"))
        if "simd_reduction" in kinds and not node.degenerate:
            return chain, node
        if kinds & {"unroll", "simd"}:
            return None
        chain.append(node)
        node = node.body
    return None


def _extent(loop: ir.For) -> int | None:
    """How many iterations ``loop`` runs, if its bounds are constants."""
    if loop.degenerate:
        return 1
    hi = _constant_upper_bound(loop.cond, loop.var)
    if hi is None or _variable_bounds(loop.cond) or not isinstance(loop.init, ir.Int) or loop.step < 1:
        return None
    return max(0, (hi - loop.init.value) // loop.step + 1)


def _float32_block(loops: Sequence[ir.For], vloop: ir.For) -> int:
    """Where a chain tile of a float32 sum held in float64 starts its float32 partial sums: the
    number of ``loops`` (outermost first) outside them. The partials sum the loops inside, as
    many of them as keep an output's terms per block below :data:`.accumulation.LONG_SUM` (a float32 sum
    that long is accurate enough everywhere in tcjit): a convolution's whole ``h`` x ``w``
    plane, or, where the bounds are not constants, one run of ``vloop``."""

    terms = _extent(vloop)
    if terms is None:
        return len(loops)
    block = len(loops)
    for k in reversed(range(len(loops))):
        n = _extent(loops[k])
        if n is None or terms * n >= LONG_SUM:
            break
        terms *= n
        block = k
    return block


def _rebuild(points: Sequence[ir.For], body: ir.Node) -> ir.Node:
    """The nest of ``points`` (copies of the loops) around ``body``."""
    for p in reversed(points):
        body = ir.For(p.var, p.init, p.cond, p.step, body, kind=p.kind, degenerate=p.degenerate)
    return body


def _without_kind(loop: ir.For, kind: str) -> ir.For:
    """``loop`` with ``kind`` removed from its ``+``-joined kinds (``serial`` if none is left)."""
    kinds = [k for k in loop.kind.split("+") if k != kind]
    return replace(loop, kind="+".join(kinds) or "serial")


def _full_tiles(points: Sequence[ir.For]) -> tuple[list[ir.For], list[str]]:
    """A register tile's point loops with constant bounds, and the C conditions under which a
    tile is full. Partial tiles (extents that the tile size does not divide) have bounds such as
    ``min(2, 63 - 3 * c3)``, which the compiler cannot unroll; full tiles get a copy with constant
    bounds, which it unrolls and keeps in registers."""
    full, conds = [], []
    for p in points:
        if p.degenerate:
            full.append(p)
            continue
        hi = _constant_upper_bound(p.cond, p.var)
        conds += [f"{expr(e)} >= {hi}" for e in _variable_bounds(p.cond)]
        full.append(ir.For(p.var, p.init, ir.Op("<=", (ir.Var(p.var), ir.Int(hi))), 1, p.body, kind=p.kind))
    return full, conds


def _variable_bounds(cond: ir.Expr) -> list[ir.Expr]:
    """The non-constant operands of the ``min`` bounding a point loop (a partial tile's bounds)."""
    found: list[ir.Expr] = []

    def visit(e: ir.Expr) -> None:
        if isinstance(e, ir.Op) and e.op == "min":
            for a in e.args:
                visit(a)
        elif not isinstance(e, ir.Int):
            found.append(e)

    visit(cond.args[1])
    if cond.op == "<":
        return [ir.Op("-", (e, ir.Int(1))) for e in found]
    return found


def _rebuild_chain(node: ir.Node, points: Sequence[ir.For]) -> ir.Node:
    """``node`` (a register tile's loop body) with its point loops replaced by ``points``."""
    if isinstance(node, ir.Mark):
        return _rebuild_chain(node.body, points)
    if isinstance(node, ir.For) and not (node.degenerate or set(node.kind.split("+")) & {"unroll", "simd"}):
        return ir.For(
            node.var, node.init, node.cond, node.step, _rebuild_chain(node.body, points), kind=node.kind
        )
    inner = node
    for _ in points:
        while isinstance(inner, ir.Mark):
            inner = inner.body
        inner = inner.body
    return _rebuild(points, inner)


def _constant_span(loop: ir.For) -> tuple[int, int] | None:
    """``[first, last + 1)`` of a loop with exact constant bounds and step 1
    (:func:`~tcjit.mapping.parts.constant_range`); None otherwise."""
    span = None if loop.degenerate else constant_range(loop)
    return None if span is None or span.step != 1 else (span.start, span.stop)


def _constant_upper_bound(cond: ir.Expr, var: str, *, constant: bool = True):
    """The largest value of ``var`` that ``cond`` (``var <= e`` / ``var < e``) allows: an int
    (``constant``: the smallest integer operand of ``e``'s ``min``; None if there is none), or,
    with ``constant=False``, C for it."""
    if not (isinstance(cond, ir.Op) and cond.op in ("<", "<=") and cond.args[0] == ir.Var(var)):
        return None
    bound, shift = cond.args[1], (1 if cond.op == "<" else 0)
    if not constant:
        return f"({expr(bound)} - {shift})"
    found: list[int] = []

    def visit(e: ir.Expr) -> None:
        if isinstance(e, ir.Int):
            found.append(e.value)
        elif isinstance(e, ir.Op) and e.op == "min":
            for a in e.args:
                visit(a)

    visit(bound)
    return min(found) - shift if found else None


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
    vector_bytes: int = 32,
    printer: Callable[..., CPrinter] | None = None,
    packs: Mapping[str, Pack] | None = None,
    parallel: bool = True,
    foldable: frozenset[str] = frozenset(),
    parts: Mapping[str, Part] | None = None,
    sites: Mapping[str, Site] | None = None,
    held: Mapping[str, int] | None = None,
    zeroed: frozenset[str] = frozenset(),
) -> tuple[str, tuple[BoundsCheck, ...]]:
    """The C source of one kernel and the run-time bounds checks it makes.

    The function is ``void symbol(int nthreads, int64_t *tc_errors, <params>)``; ``tc_errors``
    points at two int64 slots (check number, offending subscript), zero on entry.
    ``vector_bytes`` is the width of the target's vector registers (the dot-product form of a
    register tile keeps one register of partial sums per output). ``printer`` makes the printer
    from ``(cdef, statements, sizes, strides, checked, wide)`` (the emulated target's prints
    promoted buffers). ``packs``: inputs read from transposed panels (:mod:`.packing`), which the
    kernel allocates and fills first; ``strides`` then holds the panels' strides for them.
    ``parts``: those of them filled a part at a time at the marks ``sites`` in ``body``
    (:func:`~tcjit.mapping.parts.place_parts`); ``strides`` holds the parts' strides for them.
    ``parallel``: whether the panels may be filled by several threads (the option parallelize).
    ``foldable``: ``!`` initialisations (``S0_init``) whose update writes every element they write
    (:func:`~tcjit.mapping.lower.lower_cpu` proves it); one is left out of the kernel when every
    register tile of its update holds whole sums and starts them from zero
    or from zero at their first chunk (:meth:`CPrinter.tile_start`): the kernel is printed again
    without it.

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

    def printed(tree: ir.Node) -> CPrinter:
        p = (printer or CPrinter)(cdef, statements, sizes, strides, checked, wide)
        p.symbol = symbol
        p.vector_bytes = vector_bytes
        p.foldable = frozenset(name.removesuffix("_init") for name in foldable)
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
            p.node(tree, "  ")
        else:
            p.top(tree, "  ")
        return p

    p = printed(body)
    # An initialisation is left out when every printing of its update started from zero
    # (a complete register tile) and the update writes every element it would have written.
    folded = sorted(name for name in foldable if p.printed.get(name.removesuffix("_init"), False))
    if folded:
        p = printed(_without_runs(body, frozenset(folded)))
        note = f"  /* left out, as register tiles start their sums from zero: {', '.join(folded)} */"
        p.lines.insert(0, note)
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


def _fetch_helper(fn: str, f: Fetch, strides: tuple[int, ...], dtype: ScalarType) -> tuple[list[str], int]:
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
