"""The C printer: a CPU kernel's C source from its kernel IR: loops and statement bodies (:mod:`.ir_values`).

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

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.lang.types import ScalarType
from . import ir
from . import ir_values as V
from .c_exprs import (
    BoundsCheck,
    ExprPrinter,
    c_float_literal,
    c_int,
    c_product,
    c_storage_type,
    combine_update,
    convert,
    expr,
    reduction_identity,
)
from .c_regions import RegionPrinter
from .c_tiles import UNROLL_PRAGMA, Accumulator, TilePrinter
from .layout import size_text, spanned_elements, strides_text, symbolic_in

__all__ = ["CPrinter"]


class CPrinter(TilePrinter, RegionPrinter):
    """Prints one kernel's IR as C (the CPU target; the GPU printers derive from it): statements,
    loops, register tiles, OpenMP regions, and the emulated target's checks."""

    #: C for a float literal of a value of type ``t`` in an expression (the CUDA printer rounds it to
    #: the type first: its compilers warn about digits the type cannot hold).
    float_literal = staticmethod(c_float_literal)

    def __init__(
        self,
        cdef: CheckedDef,
        bodies: Mapping[str, V.Body],
        sizes: Mapping[str, int],
        strides: Mapping[str, tuple[int, ...]],
        wide: Mapping[str, ScalarType],
    ):
        self.cdef = cdef
        self.wide = wide
        self.bodies = bodies  # every statement's body (:mod:`.bodies`)
        self.sizes = sizes
        self.strides = strides
        self.symbolic: frozenset[str] = (
            frozenset()
        )  # sizes read from the kernel's arguments (set by print_kernel)
        self.panels: frozenset[str] = frozenset()  # inputs read from packed panels (set by print_kernel)
        self.checks: list[BoundsCheck] = []
        self.lines: list[str] = []
        self.aliases: list[str] = []  # restrict-qualified views of every pointer
        self.signature: list[str] = []  # parameters of a parallel region's function
        self.arguments: list[str] = []  # what the kernel passes for them
        self.functions: list[str] = []  # parallel regions, printed before the kernel
        self.prototypes: list[str] = []  # their declarations (the entry point may be compiled apart)
        self.shadowed: list[str] = []  # the emulated target's race-checked tensors (outputs, temporaries)
        self.bounded: list[str] = []  # and its inputs: each access bounds-checked (after the shadowed)
        self.blocks_before: int | str = 0  # the emulated target: blocks of the launches printed so far
        self.enclosing: list[str] = []  # loop iterators in scope
        self.symbol = "tc_kernel"
        self.source_lines = cdef.source.splitlines()
        self.accumulator: Accumulator | None = None  # inside a register tile's loop
        self.vector_types: dict[str, tuple[str, int]] = {}  # vector tiles' types: (element, bytes)
        self.fetching: dict[str, list[str]] = {}  # while printing one: loop variable -> calls at its top
        self.helpers: list[list[str]] = []  # static functions the regions call (the fetches'), each's lines
        self.buffer_shadows: list[tuple[str, int]] = []  # the emulated target's promoted buffers
        # updates whose complete vector register tiles start from zero (see :func:`print_kernel`),
        self.team = False  # the next parallel loop is shared out by an enclosing team (:meth:`team_region`)
        self.nowait = False  # and needs no barrier after it (:mod:`.barriers`)

    # --------------------------------------------------------------------------------- memory
    def address(self, ref: V.Ref, ex: ExprPrinter) -> str:
        """C for the offset of the element ``ref`` names in its tensor's array, its run-time
        bounds checks made (and numbered) as the address is printed."""
        if not ref.subscripts:
            return "0"
        info = self.cdef.tensor(ref.tensor)
        terms = []
        for k, (arg, checked, stride) in enumerate(
            zip(ref.subscripts, ref.checked, self.held_strides(ref.tensor))
        ):
            sub = ex.index(arg)
            if checked:
                n = size_text(info.shape[k], self.sizes, self.symbolic)
                self.checks.append(
                    BoundsCheck(
                        ref.tensor,
                        k,
                        n if isinstance(n, int) else -1,
                        ref.span,
                        "writes" if ref.writes else "reads",
                    )
                )
                sub = f"tc_checked({sub}, {c_int(n)}, {len(self.checks)}, tc_errors)"
            if stride == 0:
                continue
            terms.append(sub if stride == 1 else f"({sub}) * {c_int(stride)}")
        return " + ".join(terms) or "0"

    def held_strides(self, tensor: str) -> tuple[int | str, ...]:
        """The element strides of ``tensor``'s array as the kernel holds it: its wide buffer's
        (contiguous) for a long sum, else the tensor's own; C text where one depends on a
        symbolic size (such tensors are contiguous)."""
        if tensor in self.wide:
            return strides_text(self.cdef.tensor(tensor), self.sizes, self.symbolic)
        return self.tensor_strides(tensor)

    def tensor_strides(self, tensor: str) -> tuple[int | str, ...]:
        """The element strides of ``tensor`` itself: as given, or, where its shape depends on a
        symbolic size (the tensor is then contiguous), C text; a packed input's are its panel's
        (of fixed strides, :mod:`.packing`)."""
        info = self.cdef.tensor(tensor)
        if tensor in self.panels:
            return tuple(self.strides[tensor])
        if self.symbolic and any(symbolic_in(d, self.symbolic) for d in info.shape):
            return strides_text(info, self.sizes, self.symbolic)
        return tuple(self.strides[tensor])

    def shape(self, tensor: str) -> tuple[int | str, ...]:
        """``tensor``'s extents: values, or C text where one depends on a symbolic size."""
        return tuple(size_text(d, self.sizes, self.symbolic) for d in self.cdef.tensor(tensor).shape)

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

    def span(self, tensor: str) -> int | str:
        """The element offsets ``tensor``'s array (its wide buffer, or its storage) spans: the
        size of the emulated target's shadow of a written tensor (C text where it depends on a
        symbolic size: the tensor is contiguous)."""
        shape, strides = self.shape(tensor), self.held_strides(tensor)
        if all(isinstance(x, int) for x in (*shape, *strides)):
            return max(1, spanned_elements(shape, strides))
        return f"tc_max_i64(1, {c_int(c_product(shape))})"

    def access_value(self, load: V.Load, ex: ExprPrinter) -> str:
        """The value ``load`` reads (the GPU printers add references to buffers)."""
        if not isinstance(load.ref, V.Ref):
            raise TCInternalError(f"the C printer cannot read {load.ref!r}")
        return self.load(load.ref.tensor, self.address(load.ref, ex), load.dtype)

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
        line = self.bodies[sname].line
        text = self.source_lines[line - 1].strip() if 0 < line <= len(self.source_lines) else ""
        text = text.replace("*/", "* /")
        what = " (initialisation)" if sname.endswith("_init") else ""
        return f"/* {sname}{what}, line {line}: {text} */"

    def bindings(self, sname: str, args: Sequence[ir.Expr], only: set[str] | None = None) -> str:
        dims = self.bodies[sname].dims
        parts = []
        for d, a in zip(dims, args):
            if only is None or d in only:
                parts.append(f"const int64_t i_{d} = {expr(a)};")
        return " ".join(parts)

    def updated(
        self, target: V.Target, ex: ExprPrinter
    ) -> tuple[Callable[[ScalarType], str], Callable[[str], str]]:
        """How a statement reads (as a type) and writes (a value) the element ``target`` it
        updates, its address printed once (the GPU printers add buffers)."""
        if not isinstance(target, V.Ref):
            raise TCInternalError(f"the C printer cannot write {target!r}")
        tensor, addr = target.tensor, self.address(target, ex)
        return (lambda want: self.load(tensor, addr, want)), (lambda value: self.store(tensor, addr, value))

    def body(self, sname: str) -> str:
        """The C statement performing one instance of ``sname`` (index variables bound)."""
        b = self.bodies[sname]
        ex = ExprPrinter(self)
        et = self.element_type(b.tensor).compute
        load, store = self.updated(b.target, ex)
        if b.kind == "init":
            return store(reduction_identity(b.op, et))
        value = ex.value(b.value)
        if b.kind == "assign":
            return store(value)
        old = load(et)
        return store(combine_update(b.op, old, f"({value})", et))

    def run(self, node: ir.Run, indent: str) -> None:
        acc = self.accumulator
        if acc is not None and node.statement == acc.statement:
            b = self.bodies[node.statement]
            et = self.element_type(b.tensor).compute
            value = ExprPrinter(self).value(b.value)
            self.lines.append(f"{indent}{self.comment(node.statement)}")
            self.lines.append(f"{indent}{{ {self.bindings(node.statement, node.args)}")
            self.lines.append(f"{indent}  {acc.ref} = {combine_update(b.op, acc.ref, f'({value})', et)}; }}")
            return
        self.lines.append(f"{indent}{self.comment(node.statement)}")
        self.lines.append(f"{indent}{{ {self.bindings(node.statement, node.args)}")
        self.lines.append(f"{indent}  {self.body(node.statement)} }}")

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
        elif isinstance(n, ir.PartFill):
            self.part(n, indent)
        elif isinstance(n, ir.Mark):
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
        elif isinstance(n, ir.Fetching) and isinstance(n.body, ir.For):
            self.loop(n.body, indent, fetches=n.fetches)  # the parallel loop whose iterations fetch
        elif isinstance(n, ir.Fetching):  # a loop a pass replaced: nothing to fetch from
            self.node(n.body, indent)
        else:
            raise TCInternalError(f"cannot print {n!r}")

    def part(self, n: ir.PartFill, indent: str) -> None:
        """A site of :func:`~tcjit.mapping.parts.place_parts`: the part of a packed input that
        the code below reads, filled into this thread's buffer ``b_X`` from the tensor ``u_X``;
        ``t_X`` then points where the panel would start, so that the code reads it unchanged."""
        site = n.site
        name, strides = site.tensor, self.strides[site.tensor]
        origin = [expr(o) for o in site.origin]
        ct = c_storage_type(self.cdef.tensor(name).dtype)
        shift = " + ".join(f"({o}) * INT64_C({st})" for o, st in zip(origin, strides))
        self.lines.append(f"{indent}{{ /* the part of '{name}''s panel read below (option pack_operands) */")
        self.lines.append(
            f"{indent}  tc_part_{name}(u_{name}, b_{name}, {', '.join([*origin, *site.sizes])});"
        )
        if site.ahead:  # the next iteration's part: on its way into cache while this one computes
            following = ", ".join([*(expr(o) for o in site.ahead), *site.sizes])
            self.lines.append(f"{indent}  if ({expr(site.more)}) tc_ahead_{name}(u_{name}, {following});")
        self.lines.append(f"{indent}  const {ct} *restrict t_{name} = b_{name} - ({shift});")
        self.node(n.body, indent + "  ")
        self.lines.append(f"{indent}}}")

    def ids(
        self, dims: Sequence[int | str], prefix: str, what: str, body: ir.Node, indent: str, buffers=()
    ) -> None:
        """An emulated target's loop over block (``b``) or thread (``t``) ids, in the order the
        call's ``tc_order`` argument selects (:data:`EMULATION_HELPERS`); each block declares
        ``buffers`` (:meth:`declare_buffers`). A grid dimension may be C text (computed per call
        from a symbolic kernel's size arguments)."""
        if all(isinstance(d, int) for d in dims):
            count: int | str = math.prod(dims)
            x, y = dims[0], dims[0] * dims[1]
        else:
            dims = [d if isinstance(d, int) else f"({d})" for d in dims]
            count, x, y = f"({c_product(dims)})", dims[0], f"({c_product(dims[:2])})"
        k = f"tc_{prefix}i"
        self.lines.append(f"{indent}{{ /* {what}: {' x '.join(map(str, dims))} */")
        if prefix == "b":  # the launch's blocks have global ids tc_first .. tc_first + count - 1
            self.lines.append(f"{indent}  const int64_t tc_first = {self.blocks_before};")
            before = self.blocks_before
            both = isinstance(before, int) and isinstance(count, int)
            self.blocks_before = before + count if both else f"{before} + {count}"
        self.lines.append(f"{indent}  const int64_t tc_{prefix}s = tc_stride({count});")
        self.lines.append(f"{indent}  for (int64_t {k} = 0; {k} < {count}; {k}++) {{")
        self.lines.append(
            f"{indent}    const int64_t tc_{prefix}l = tc_perm({k}, {count}, tc_{prefix}s, s_tc_order);"
        )
        flat = f"tc_{prefix}l"
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

    def loop(self, n: ir.For, indent: str, *, fetches: Sequence[ir.Fetch] = ()) -> None:
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
        if ir.LoopKind.PARALLEL in kinds:
            simd = " simd" if ir.LoopKind.SIMD in kinds else ""
            if team:
                wait = " nowait" if nowait else ""
                self.lines.append(f"{indent}#pragma omp for{simd} schedule(static){wait}")
            else:
                clauses = "num_threads(nthreads) if(nthreads > 1) schedule(static)"
                self.lines.append(f"{indent}#pragma omp parallel for{simd} {clauses}")
        elif ir.LoopKind.SIMD in kinds:
            self.lines.append(f"{indent}#pragma omp simd")
        elif ir.LoopKind.UNROLL in kinds:
            self.lines.append(f"{indent}#pragma GCC unroll {UNROLL_PRAGMA}")
        self.lines.append(f"{indent}{self.loop_header(n)} {{")
        for call in self.fetching.pop(n.var, ()):  # a later loop's input, a slice per iteration
            self.lines.append(f"{indent}  {call}")
        self.enclosing.append(n.var)
        if ir.LoopKind.PARALLEL in kinds:
            self.region(n, indent + "  ", fetches=fetches)
        else:
            self.node(n.body, indent + "  ")
        self.enclosing.pop()
        self.lines.append(f"{indent}}}")
