"""How the CPU target runs each reduction loop: in a register tile, by threads, or in a register.

A pure pass over the kernel IR (:func:`plan_reductions`). The CPU mapping marks the loops that
may run otherwise than as written (:mod:`.cpu`); for each marked loop this pass decides, from the
nest below it, whether it becomes

* a register tile (``accumulate``; :mod:`.tile_forms` decides the form):
  :class:`~tcjit.mapping.ir.RegisterTile`;
* a reduction run by threads (``parallel_reduction``), each iteration reducing its part into a
  partial result, combined in iteration order: :class:`~tcjit.mapping.ir.ParallelReduction`;
* a reduction into a register (``reduction``, ``simd_reduction``): the element one update
  instance updates held in a local across the loop, which OpenMP may vectorise:
  :class:`~tcjit.mapping.ir.Accumulation`;

and leaves every other loop as it is. A loop that does not fit its form runs as written. The
pass preserves the statement instances and, for each element, their order, except the order of
one output's terms in the forms that keep partial sums (lanes, threads), which the language allows
for its associative reductions.

:func:`folded_initialisations` then says which ``!`` initialisations the kernel leaves out:
those whose update is only run by register tiles that start their sums from zero
(:func:`~tcjit.mapping.tile_forms.tile_start`).
"""

from __future__ import annotations

from dataclasses import replace

from ..polyhedral.lang import ast as A
from . import ir
from .nests import constant_upper_bound
from .tile_forms import ASSOCIATIVE, TilingFacts, plan_tile

__all__ = ["MAX_PARTIALS", "folded_initialisations", "plan_reductions", "without_runs"]

#: The most iterations (partial results, on the stack) of a loop run as a parallel reduction.
MAX_PARTIALS = 4096

#: The partial results of a parallel reduction over a loop whose trip count is symbolic: its
#: iterations are shared out in this many runs of consecutive ones, so the order of the sum
#: depends on the sizes only, never on the number of threads (enough runs for 64 threads).
CHUNKS = 256


def plan_reductions(tree: ir.Node, facts: TilingFacts) -> ir.Node:
    """``tree`` with its marked reduction loops in the forms that fit them (module docstring)."""
    return _Planner(facts).node(tree, False)


class _Planner:
    """One walk of a kernel's IR: the register tiles found so far (their names are numbered in
    program order) and the enclosing loops whose iterations run in order in one thread."""

    def __init__(self, facts: TilingFacts):
        self.facts = facts
        self.tiles = 0
        self.serial: dict[str, ir.For] = {}

    def node(self, n: ir.Node | None, accumulating: bool) -> ir.Node | None:
        """``n`` planned; ``accumulating``: inside a register tile or a parallel reduction, where
        only register accumulators still apply."""
        if n is None or isinstance(n, ir.Run):
            return n
        if isinstance(n, ir.Block):
            return ir.Block(tuple(self.node(c, accumulating) for c in n.children))
        if isinstance(n, ir.If):
            return ir.If(n.cond, self.node(n.then, accumulating), self.node(n.other, accumulating))
        if isinstance(n, ir.For):
            return self.loop(n, accumulating)
        if isinstance(n, ir.Team):
            members = tuple(replace(m, body=self.node(m.body, accumulating)) for m in n.members)
            return ir.Team(members)
        if not hasattr(n, "body"):  # another statement instance (the GPU mapping's, :mod:`.gpu_ir`)
            return n
        return replace(n, body=self.node(n.body, accumulating))  # Mark, Blocks, Threads, Fetching, ...

    def loop(self, n: ir.For, accumulating: bool) -> ir.Node:
        if n.degenerate:
            return replace(n, body=self.node(n.body, accumulating))
        kinds = ir.loop_kinds(n)
        if ir.LoopKind.ACCUMULATE in kinds and not accumulating:
            name = f"tc_r{self.tiles}"
            tile = plan_tile(n, kinds, self.facts, name, self.serial, lambda inner: self.node(inner, True))
            if tile is not None:
                self.tiles += 1
                return tile
        if ir.LoopKind.PARALLEL_REDUCTION in kinds and not accumulating:
            found = self.parallel_reduction(n)
            if found is not None:
                return found
        if kinds & {ir.LoopKind.SIMD_REDUCTION, ir.LoopKind.REDUCTION} and ir.LoopKind.PARALLEL not in kinds:
            found = self.accumulation(n, vector=ir.LoopKind.SIMD_REDUCTION in kinds)
            if found is not None:
                return found
        plain = kinds <= {ir.LoopKind.UNROLL}
        if plain:  # its iterations run in order, in one thread (a first chunk: :func:`tile_start`)
            self.serial[n.var] = n
        body = self.node(n.body, accumulating)
        if plain:
            del self.serial[n.var]
        return replace(n, body=body)

    def parallel_reduction(self, loop: ir.For) -> ir.ParallelReduction | None:
        """A reduction loop run by threads (``parallel_reduction``, see :mod:`.cpu`); None (run it
        serially) unless every statement instance below ``loop`` updates one element, the same
        for all, by an associative and commutative operator, and ``loop`` has a constant start and
        at most :data:`MAX_PARTIALS` iterations. The result does not depend on the number of
        threads: the partial results are combined in iteration order.

        A loop whose bound depends on a symbolic size (``var <= e`` or ``var < e``, ``e`` free of
        ``var``, as is its start) is shared out in :data:`CHUNKS` runs of consecutive
        iterations instead, each reduced into a partial result (``chunked``)."""
        runs = ir.runs(loop.body)
        st = self.facts.one_element_update(runs, {loop.var} | _loop_vars(loop.body))
        if st is None or st.op not in ASSOCIATIVE:
            return None
        if self.chunkable(loop):
            return ir.ParallelReduction(replace(loop, body=self.node(loop.body, True)), runs[0], CHUNKS, True)
        hi = constant_upper_bound(loop.cond, loop.var)
        if not isinstance(loop.init, ir.Int) or loop.step < 1 or hi is None or hi < loop.init.value:
            return None
        count = (hi - loop.init.value) // loop.step + 1
        if count > MAX_PARTIALS:
            return None
        return ir.ParallelReduction(replace(loop, body=self.node(loop.body, True)), runs[0], count)

    def chunkable(self, loop: ir.For) -> bool:
        """Whether ``loop`` runs up to a bound that mentions a symbolic size, in the form
        ``var <= e`` / ``var < e`` with ``e`` and the start free of ``var``."""
        c = loop.cond
        return (
            isinstance(c, ir.Op)
            and c.op in ("<", "<=")
            and c.args[0] == ir.Var(loop.var)
            and loop.step >= 1
            and loop.var not in ir.free_vars(c.args[1]) | ir.free_vars(loop.init)
            and not self.facts.size_vars.isdisjoint(ir.free_vars(c.args[1]))
        )

    def accumulation(self, loop: ir.For, *, vector: bool) -> ir.Accumulation | None:
        """A reduction into a register across ``loop``; None if its body is not one instance of an
        update of one element that ``loop`` does not move, or the update reads its own target
        (every update must then stay in memory, in order)."""
        run = loop.body
        if not isinstance(run, ir.Run):
            return None
        scop_st = self.facts.statements[run.statement]
        st = scop_st.source
        if scop_st.kind != "update" or not st.plain_lhs:
            return None
        bound = dict(zip(scop_st.dims, run.args))
        if any(loop.var in ir.free_vars(bound[v]) for v in st.lhs_vars):
            return None
        if any(isinstance(a, A.Access) and a.tensor == st.tensor for a in A.walk(st.rhs)):
            return None  # the sum reads its own target: keep every update in memory, in order
        lanes = self.facts.lanes(self.facts.element_type(st.tensor).compute)
        return ir.Accumulation(loop, vector, lanes)


def _loop_vars(node: ir.Node | None) -> set[str]:
    """The variables of every loop in ``node``."""
    return {n.var for n in ir.nodes(node) if isinstance(n, ir.For)}


def folded_initialisations(planned: ir.Node, foldable: frozenset[str]) -> tuple[str, ...]:
    """The initialisations among ``foldable`` (``S0_init``: their updates write every element
    they write) that a kernel of the ``planned`` IR leaves out: those whose update runs only in
    register tiles that start their sums from zero, or start the first chunk from zero."""
    from_zero: dict[str, bool] = {}

    def seen(statement: str, zero: bool) -> None:
        from_zero[statement] = from_zero.get(statement, True) and zero

    for n in _printed(planned):
        if isinstance(n, ir.Run):
            seen(n.statement, False)
        elif isinstance(n, ir.Accumulation):
            seen(n.loop.body.statement, False)
        elif isinstance(n, ir.RegisterTile):
            seen(n.statement, n.form in ("vector", "outer") and n.start is not None)
    return tuple(sorted(name for name in foldable if from_zero.get(name.removesuffix("_init"), False)))


def _printed(node: ir.Node | None):
    """The statement instances, register accumulators and register tiles of planned ``node``,
    each as often as the kernel runs it in a place of its own (both copies of a split tile). The
    instances inside a ``vector`` or ``outer`` tile are the tile's (they update its sums)."""
    if node is None:
        return
    if isinstance(node, (ir.Run, ir.Accumulation)):
        yield node
    elif isinstance(node, ir.RegisterTile):
        yield node
        if node.form not in ("vector", "outer"):
            yield from _printed(node.compute)
    elif isinstance(node, ir.FullTiles):
        yield from _printed(node.full)
        yield from _printed(node.rolled)
    elif isinstance(node, ir.ParallelReduction):
        yield from _printed(node.loop.body)
    elif isinstance(node, ir.Block):
        for c in node.children:
            yield from _printed(c)
    elif isinstance(node, ir.If):
        yield from _printed(node.then)
        yield from _printed(node.other)
    elif isinstance(node, ir.Team):
        for m in node.members:
            yield from _printed(m.body)
    else:  # For, Mark, Blocks, Threads, Fetching
        yield from _printed(node.body)


def without_runs(node: ir.Node | None, names: frozenset[str]) -> ir.Node | None:
    """Unplanned ``node`` without the instances of the statements ``names``, and without the
    loops, conditions and blocks left empty (None if nothing is left)."""
    if isinstance(node, ir.Run):
        return None if node.statement in names else node
    if isinstance(node, ir.Block):
        kept = tuple(k for k in (without_runs(c, names) for c in node.children) if k is not None)
        return ir.Block(kept) if kept else None
    if isinstance(node, (ir.For, ir.Mark)):
        body = without_runs(node.body, names)
        return None if body is None else replace(node, body=body)
    if isinstance(node, ir.If):
        then, other = without_runs(node.then, names), without_runs(node.other, names)
        if then is None and other is None:
            return None
        return ir.If(node.cond, then if then is not None else ir.Block(()), other)
    return node
