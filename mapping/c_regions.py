"""The OpenMP regions of :class:`~tcjit.mapping.c_printer.CPrinter`: a parallel loop's body as a
function of its own (:meth:`RegionPrinter.region`, with the lines fetched ahead in it), a team of
threads over several loops (:mod:`.openmp_teams`) and a reduction run by threads, over a loop's
iterations or over chunks of them (:mod:`.reduction_forms`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from . import ir
from .c_exprs import (
    ExprPrinter,
    c_compute_type,
    combine_update,
    expr,
    reduction_identity,
    stack_array,
    upper_bound,
)
from .c_panels import fetch_helper
from .c_tiles import Accumulator

__all__ = ["RegionPrinter"]


class RegionPrinter:
    """The parallel regions of :class:`~tcjit.mapping.c_printer.CPrinter` (which provides the
    printer's state and its statement and memory methods)."""

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
            helper, slots = fetch_helper(fn, f, tuple(self.strides[f.tensor]), dtype)
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

    def chunked_reduction(
        self, loop: ir.For, first: ir.Run, count: int, ct: str, identity: str, clauses, indent
    ):
        """The threads' loop of a chunked parallel reduction (:meth:`parallel_reduction`): chunk
        ``tc_c`` of ``count`` runs the iterations ``tc_c * tc_n / count`` up to (not including)
        ``(tc_c + 1) * tc_n / count`` of ``loop``'s ``tc_n``, in a function of its own
        (:meth:`region`) that returns their partial result, stored in ``tc_part[tc_c]``."""
        self.lines.append(
            f"{indent}  const int64_t tc_lo = {expr(loop.init)},"
            f" tc_n = tc_max_i64(0, tc_floordiv_i64({upper_bound(loop)} - tc_lo, {loop.step}) + 1);"
        )
        self.lines.append(f"{indent}  #pragma omp parallel for {clauses}")
        self.lines.append(f"{indent}  for (int64_t tc_c = 0; tc_c < {count}; tc_c++) {{")
        lo, n = ir.Var("tc_lo"), ir.Var("tc_n")

        def start(c: ir.Expr) -> ir.Expr:  # the first iteration of chunk c: lo + (c * n / count) * step
            runs = ir.Op("div", (ir.Op("*", (c, n)), ir.Int(count)))
            return ir.Op("+", (lo, ir.Op("*", (runs, ir.Int(loop.step))) if loop.step > 1 else runs))

        tc_c = ir.Var("tc_c")
        after = start(ir.Op("+", (tc_c, ir.Int(1))))
        chunk = replace(loop, init=start(tc_c), cond=ir.Op("<", (ir.Var(loop.var), after)), kinds=frozenset())
        self.enclosing += ["tc_c", "tc_lo", "tc_n"]
        self.accumulator = Accumulator(first.statement, "tc_p")
        call = self.region(replace(loop, body=chunk), indent + "    ", result=(ct, "tc_p", identity))
        self.accumulator = None
        del self.enclosing[-3:]
        self.lines.append(f"{indent}    tc_part[tc_c] = {call};")
        self.lines.append(f"{indent}  }}")

    def parallel_reduction(self, n: ir.ParallelReduction, indent: str) -> None:
        """A reduction loop run by threads (:mod:`.reduction_forms`). Each iteration, a function of
        its own (:meth:`region`), reduces its part into a local variable it returns; the partial
        results land in an array, one slot per iteration, and are combined into the element in
        iteration order after the loop. The result does not depend on the number of threads.
        """
        loop, first, count = n.loop, n.first, n.count
        st = self.bodies[first.statement]
        et = self.element_type(st.tensor).compute
        ct = c_compute_type(et)
        identity = reduction_identity(st.op, et)
        addr = self.address(st.target, ExprPrinter(self))
        over = f"chunks of loop {loop.var} (its trip count is symbolic)" if n.chunked else f"loop {loop.var}"
        self.lines.append(
            f"{indent}{{ /* parallel reduction: '{st.tensor}' in {count} partial results over {over},"
            " combined in order */"
        )
        self.lines.append(f"{indent}  {stack_array(ct, f'tc_part[{count}]')}")
        self.lines.append(
            f"{indent}  for (int64_t tc_k = 0; tc_k < {count}; tc_k++) tc_part[tc_k] = {identity};"
        )
        clauses = "num_threads(nthreads) if(nthreads > 1) schedule(static)"
        if n.chunked:
            self.chunked_reduction(loop, first, count, ct, identity, clauses, indent)
        else:
            self.lines.append(f"{indent}  #pragma omp parallel for {clauses}")
            self.lines.append(f"{indent}  {self.loop_header(loop)} {{")
            self.enclosing.append(loop.var)
            self.accumulator = Accumulator(first.statement, "tc_p")
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
