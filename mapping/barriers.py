"""Which barriers between a team's parallel loops a kernel can do without.

The CPU target runs consecutive top-level parallel loops in one team of threads, each shared out
by an ``omp for`` whose closing barrier keeps the loops in order (:mod:`.openmp_teams`). A
barrier costs more than its own time: every thread waits there for the slowest,
so a thread that runs late in each loop (the one that ran Python between the kernels, its caches
cold) sets the pace of every loop. Where each thread only touches, in the next loop, what it
touched itself in the loops since the last barrier, the barrier orders nothing and goes
(``nowait``): mlp3's three layers each work on their own rows of the batch in both loops of a
layer, and its derived backward repeats that for the gradients of the activations.

OpenMP makes it sound: two ``schedule(static)`` loops of the same team with the same number of
iterations (and no ``simd``) hand iteration ``k`` to the same thread (the OpenMP 5.2 "schedule"
clause, static schedules). So the barrier after loop ``A`` may go when, for every later loop ``B``
up to the next barrier, no element one iteration of ``A`` writes is read or written by another
iteration of ``B``, nor one it reads written by another iteration of ``B``: every conflict stays in
one thread, where the loops run in order.

The elements an iteration touches are over-approximated by boxes: each access's subscripts
bounded over the loops inside the iteration (the interval arithmetic of :mod:`.parts`). Disjoint
boxes prove the iterations independent; anything not affine, or a loop of more than
:data:`MAX_ITERATIONS` iterations, keeps the barrier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import ir
from .parts import (
    Interval,
    accesses,
    constant_interval,
    constant_range,
    run_dims,
    subscript_bounds,
    walk_runs,
)

MAX_ITERATIONS = 64
"""Loops of more iterations keep their barriers (the check compares every pair of iterations)."""

# A box: per dimension, the lowest and highest index (constants).
_Box = tuple[tuple[int, int], ...]


def footprint(
    node: ir.Node | None,
    statements: Mapping[str, object],
    sizes: Mapping[str, int],
    env: dict[str, Interval],
    out: dict[str, tuple[list[_Box], list[_Box]]],
) -> bool:
    """Add to ``out`` (tensor -> ``(read boxes, written boxes)``) what the code below ``node``
    touches, the loops above it bounded (or fixed) in ``env``; False where a bound is not a
    constant (a subscript or loop bound that is not affine)."""

    def visit(run: ir.Run, env: dict[str, Interval]) -> bool:
        st = statements[run.statement]
        dims = run_dims(st, run, env)
        if dims is None:
            return False
        reads, writes = accesses(st)
        for k, touched in ((0, reads), (1, writes)):
            for tensor, args in touched:
                box = tuple(constant_interval(subscript_bounds(e, dims, sizes)) for e in args)
                if any(b is None for b in box):
                    return False
                out.setdefault(tensor, ([], []))[k].append(box)  # type: ignore[arg-type]
        return True

    return walk_runs(node, env, visit)


def _iterations(loop: ir.For, statements, sizes) -> list[dict] | None:
    """Each iteration's footprint, or None where one cannot be bounded."""
    span = constant_range(loop)
    if span is None or len(span) > MAX_ITERATIONS:
        return None
    out = []
    for x in span:
        fp: dict[str, tuple[list[_Box], list[_Box]]] = {}
        if not footprint(loop.body, statements, sizes, {loop.var: ((((), x), ((), x)))}, fp):
            return None
        out.append(fp)
    return out


def _meet(a: _Box, b: _Box) -> bool:
    return len(a) == len(b) and all(lo <= y_hi and y_lo <= hi for (lo, hi), (y_lo, y_hi) in zip(a, b))


def _conflict(first: dict, second: dict) -> bool:
    """Whether one iteration's footprint and another's may touch an element one of them writes."""
    for tensor, (reads, writes) in first.items():
        other = second.get(tensor)
        if other is None:
            continue
        o_reads, o_writes = other
        if any(_meet(w, x) for w in writes for x in (*o_reads, *o_writes)):
            return True
        if any(_meet(r, w) for r in reads for w in o_writes):
            return True
    return False


def _same_threads(a: list[dict], b: list[dict]) -> bool:
    """Whether every conflict between the iterations of two loops of as many iterations is
    between iterations of the same number (which one thread runs, in order)."""
    return len(a) == len(b) and not any(
        _conflict(fa, fb) for i, fa in enumerate(a) for j, fb in enumerate(b) if i != j
    )


def needless_barriers(
    loops: Sequence[ir.For], statements: Mapping[str, object], sizes: Mapping[str, int]
) -> frozenset[int]:
    """The positions ``i`` in ``loops`` (consecutive ``omp for`` loops of one team, with nothing
    between them; none an ``omp for simd``) after which no barrier is needed before loop
    ``i + 1``: decided in order, each loop checked against every loop since the last barrier kept.
    The last loop's barrier is never among them (the caller knows what follows it)."""
    found: set[int] = set()
    since: list[list[dict] | None] = []
    for i, loop in enumerate(loops):
        its = _iterations(loop, statements, sizes)
        if i > 0:
            if its is not None and all(s is not None and _same_threads(s, its) for s in since):
                found.add(i - 1)
            else:
                since = []
        since.append(its)
    return frozenset(found)
