"""C for what a CPU kernel keeps in registers: register tiles in each of their forms and
register accumulators (the :class:`~tcjit.mapping.ir.RegisterTile`,
:class:`~tcjit.mapping.ir.FullTiles` and :class:`~tcjit.mapping.ir.Accumulation` nodes that
:mod:`.tile_forms` and :mod:`.reduction_forms` decide). :class:`TilePrinter` is part of
:class:`~tcjit.mapping.c_printer.CPrinter`; it prints the nodes as they are and decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import ir
from . import ir_values as V
from .c_exprs import (
    ExprPrinter,
    ValuePrinter,
    c_compute_type,
    combine_update,
    convert,
    expr,
    fold_lanes,
    reduction_identity,
    stack_array,
    upper_bound,
)
from .c_prelude import builtin_callee

__all__ = ["UNROLL_PRAGMA", "Accumulator", "TilePrinter"]


# ------------------------------------------------------------------------------- register tiles
#: ``#pragma GCC unroll`` factor of a register tile's point loops (they are at most this long).
UNROLL_PRAGMA = 64


@dataclass(frozen=True)
class Accumulator:
    """While printing a register tile's loop or a parallel reduction's part: instances of
    ``statement`` update ``ref`` instead of the tensor's element."""

    statement: str
    ref: str


class _VectorExprs(ExprPrinter):
    """Prints the right-hand side of a vector register tile (:meth:`CPrinter.vector_tile`): the
    accesses ``loads`` (their numbers in the body) are vector loads of ``vtype`` (GCC's vector
    extension, unaligned, may alias its element type); everything else is a scalar, which the
    vector arithmetic broadcasts."""

    def __init__(self, printer: ValuePrinter, vtype: str, loads: frozenset[int]):
        super().__init__(printer)
        self.vtype = vtype
        self.loads = loads

    def value(self, v: V.Value) -> str:
        if isinstance(v, V.Load) and isinstance(v.ref, V.Ref) and v.ref.access in self.loads:
            return f"(*(const {self.vtype} *)&t_{v.ref.tensor}[{self.p.address(v.ref, self)}])"
        return super().value(v)


class TilePrinter:
    """The register tiles and accumulators of :class:`~tcjit.mapping.c_printer.CPrinter` (which
    provides the printer's state and its memory and statement methods)."""

    accumulator: Accumulator | None

    # ------------------------------------------------------------------------- register tiles
    def register_tile(self, n: ir.RegisterTile | ir.FullTiles, indent: str) -> None:
        """A register tile (:mod:`.tile_forms` planned it): the outputs its point loops update
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
        st = self.bodies[first.statement]
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
        vex = _VectorExprs(self, vt, n.vector_loads)
        sex = ExprPrinter(self)
        addr = self.address(st.target, sex)
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
        hi = upper_bound(vloop)
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
        st = self.bodies[first.statement]
        et = self.element_type(st.tensor).compute
        ct = c_compute_type(et)
        lanes = n.lanes
        idx = "".join(f"[{p.var}]" for p in points if not p.degenerate)
        dims = "".join(f"[{e}]" for e in n.dims) + f"[{lanes}]"
        addr = self.address(st.target, ExprPrinter(self))
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
            f"{indent}const int64_t tc_lo = {expr(n.vloop.init)}, tc_hi = {upper_bound(n.vloop)};"
            f" const int64_t tc_main = tc_hi < tc_lo ? tc_lo"
            f" : tc_lo + (tc_hi - tc_lo + 1) / {lanes} * {lanes};"
        )
        main, tail = n.compute.children
        self.accumulator = Accumulator(n.statement, f"{lanes_of}[tc_l]")
        self.node(main, indent)
        self.accumulator = Accumulator(n.statement, f"{lanes_of}[0]")
        self.node(tail, indent)

    def array_tile(self, n: ir.RegisterTile, indent: str) -> None:
        """The outer-product form (an array of sums per output, loaded before the reduction loop
        and stored after it) or the dot-product form (``n.lanes`` partial sums per output)."""
        dot = n.form == "dot"
        first, points, name, loop = n.runs[0], n.points, n.name, n.loops[0]
        st = self.bodies[first.statement]
        et = self.element_type(st.tensor).compute
        ct = c_compute_type(et)
        lanes = n.lanes
        idx = "".join(f"[{p.var}]" for p in points if not p.degenerate)
        dims = "".join(f"[{e}]" for e in n.dims) + (f"[{lanes}]" if dot else "")
        addr = self.address(st.target, ExprPrinter(self))
        lhs_bind = self.bindings(first.statement, first.args, set(st.lhs_vars))
        form = f"dot-product form, {lanes} lanes" if dot else "outer-product form"
        first_chunk = None if dot or n.start is None else " && ".join(f"{o} == {v}" for o, v in n.start)
        how = {None: "", "": ", whole sums from zero"}.get(first_chunk, f", from zero where {first_chunk}")
        kept = f"'{st.tensor}' kept in {name} across loop {loop.var}{how}"
        self.lines.append(f"{indent}{{ /* register tile ({form}): {kept} */")
        self.lines.append(f"{indent}  {stack_array(ct, name + dims)}")
        zero = reduction_identity(st.op, et)
        if dot:
            start = f"for (int tc_l = 0; tc_l < {lanes}; tc_l++) {name}{idx}[tc_l] = {zero};"
            self.point_nest(points, f"{lhs_bind} {start}", indent + "  ")
        elif first_chunk is None:  # it loads
            self.point_nest(
                points, f"{lhs_bind} {name}{idx} = {self.load(st.tensor, addr, et)};", indent + "  "
            )
        elif first_chunk == "":  # whole sums: from the identity (the initialisation it stands for)
            self.point_nest(points, f"{name}{idx} = {zero};", indent + "  ")
        else:  # the first chunk of the reduction starts from zero; later ones add to what it stored
            self.lines.append(f"{indent}  if ({first_chunk}) {{")
            self.point_nest(points, f"{name}{idx} = {zero};", indent + "    ")
            self.lines.append(f"{indent}  }} else {{")
            self.point_nest(
                points, f"{lhs_bind} {name}{idx} = {self.load(st.tensor, addr, et)};", indent + "    "
            )
            self.lines.append(f"{indent}  }}")
        if dot:
            self._lane_strips(n, f"{name}{idx}", indent + "  ")
            finish = (
                f"{ct} tc_s = {self.load(st.tensor, addr, et)};"
                f" {fold_lanes(st.op, f'{name}{idx}', lanes, et)}"
                f" {self.store(st.tensor, addr, 'tc_s')}"
            )
        else:
            self.accumulator = Accumulator(first.statement, f"{name}{idx}")
            self.node(n.compute, indent + "  ")
            finish = self.store(st.tensor, addr, f"{name}{idx}")
        self.accumulator = None
        self.point_nest(points, f"{lhs_bind} {finish}", indent + "  ")
        self.lines.append(f"{indent}}}")

    def vector_tile(self, n: ir.RegisterTile, indent: str) -> None:
        """The outer-product form in vector registers (a micro-kernel, see
        :mod:`.tile_forms`): the sums live in ``n.lanes``-wide vector variables (GCC's vector
        extension) across the reduction loops, each row's operands loaded once per step."""
        first, runs, nest, name, loop = n.runs[0], n.runs, n.points, n.name, n.loops[0]
        st = self.bodies[first.statement]
        lanes = n.lanes
        vtype = self._vtype(c_compute_type(n.vector), lanes)
        idx = "".join(f"[{p.var}]" for p in nest if not p.degenerate)
        dims = "".join(f"[{e}]" for e in n.dims)
        lane0 = f"const int64_t {n.var} = {lanes} * tc_v;"
        ex = _VectorExprs(self, vtype, n.vector_loads)
        addr = self.address(st.target, ex)
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
                if ir.LoopKind.SIMD in p.kinds:
                    self.lines.append(f"{indent}#pragma omp simd")
                elif unroll and ir.LoopKind.UNROLL in p.kinds:
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
        st = self.bodies[run.statement]
        et = self.element_type(st.tensor).compute
        ct = c_compute_type(et)
        ex = ExprPrinter(self)
        addr = self.address(st.target, ex)
        rest = set(st.dims) - set(st.lhs_vars)
        value = ex.value(st.value)
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
