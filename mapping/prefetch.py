"""Which inputs a kernel's parallel loop fetches into cache for a later loop.

A kernel's top-level parallel loops run one after another. The first loop that reads an input
(a tensor no statement of the kernel writes) finds it wherever the code before the kernel left
it: mlp3's derived backward reads ``O1``, which the forward wrote long before, for ``d_W2``, and
``I`` for ``d_W1``, from L3 or memory, a row of a register tile at a time (a 1 KB stride), so the
loop waits for them. An earlier loop with enough work of its own can ask for those lines instead
(``__builtin_prefetch`` into L2), a few at a time between its register tiles, so that they arrive
while it computes: mlp3's backward fetches ``O1`` during ``d_W1`` (8 or 9 lines per register
tile) and ``O2`` during ``d_W2``, which shortens the ``d_W2`` and ``d_W3`` loops in a training step
and leaves ``d_W1`` as fast as it was.

Only a loop with much more work than lines to fetch fetches (:data:`WORK_PER_LINE`): a loop with
little work per line slows down by more than the later loop gains (mlp3's ``d_O2`` and ``d_O1``,
with 256 statement instances a line, did when they fetched for the loops after them). The
timings behind both paragraphs are in bench/results/HISTORY.md.

The rule (:func:`plan_fetches`): for each top-level parallel loop ``B`` and each input it reads
that no earlier top-level loop read, the box of elements ``B`` reads (its subscripts bounded over
all its iterations, :func:`~tcjit.mapping.barriers.footprint`), if it spans at least
:data:`FETCH_MIN_BYTES` and at most :data:`FETCH_BYTES`, is fetched by the latest earlier
parallel loop ``A`` with at least :data:`WORK_PER_LINE` statement instances per cache line
fetched. ``A`` spreads the box's lines over the iterations of its first nested serial loops
(each asks for a few), so the fetches spread over its run instead of stalling it in one burst.
Every thread fetches the whole box: the loops that read an input first in a kernel (a weight
gradient's sum over the batch, a layer's weights) read all of it in every thread. A prefetch
changes no result; a wrong guess costs bandwidth and the instructions that ask (mlp3's backward
run alone, its inputs already in cache, is slightly slower with its fetches than without).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from . import ir
from .barriers import footprint
from .ir import Fetch
from .parts import accesses, constant_range

FETCH_BYTES = 512 * 1024
"""The largest box of an input one loop fetches for a later one (a quarter of the L2 of the
machines measured; larger inputs are streamed by the loop that reads them)."""

FETCH_MIN_BYTES = 4096
"""The smallest box fetched: a smaller input costs the loop that reads it a few misses at most."""

WORK_PER_LINE = 2048
"""Statement instances the fetching loop runs per cache line it fetches, at least: a loop with
less work is slowed by the fetches more than the later loop gains (module docstring)."""

LINE_BYTES = 64


def _instances(node: ir.Node | None) -> int:
    """Statement instances below ``node`` where every loop has constant bounds (0 otherwise)."""
    if node is None:
        return 0
    if isinstance(node, ir.Run):
        return 1
    if isinstance(node, ir.For):
        span = constant_range(node)
        return 0 if span is None else len(span) * _instances(node.body)
    if isinstance(node, ir.Mark):
        return _instances(node.body)
    if isinstance(node, ir.Block):
        return sum(_instances(c) for c in node.children)
    if isinstance(node, ir.If):
        return max(_instances(node.then), _instances(node.other))
    return 0


def _spreading_loops(loop: ir.For, lines: int) -> tuple[tuple[str, int, int], ...]:
    """The serial loops nested first below ``loop``'s body over whose iterations ``lines`` cache
    lines are spread: as deep as their iterations stay at most ``lines`` (each asks for one or
    more), down to a register tile's reduction or a vector loop."""
    chain: list[tuple[str, int, int]] = []
    count = 1
    node: ir.Node | None = loop.body
    while node is not None:
        while isinstance(node, ir.Mark):
            node = node.body
        if isinstance(node, ir.Block) and node.children:
            node = node.children[0]
            continue
        if not isinstance(node, ir.For) or node.degenerate or node.kinds or node.step != 1:
            break
        span = constant_range(node)
        if span is None or not span or count * len(span) > lines:
            break
        trips = len(span)
        chain.append((node.var, span.start, trips))
        count *= trips
        node = node.body
    return tuple(chain)


def _box_bytes(box: Sequence[tuple[int, int]], item_bytes: int) -> int:
    return math.prod(hi - lo + 1 for lo, hi in box) * item_bytes


def plan_fetches(
    loops: Sequence[ir.For],
    statements: Mapping[str, object],
    sizes: Mapping[str, int],
    shapes: Mapping[str, tuple[int, ...]],
    unit_last: Mapping[str, bool],
    item_bytes: Mapping[str, int],
) -> dict[int, list[Fetch]]:
    """What each of a kernel's top-level parallel ``loops`` (in program order) fetches for the
    later ones, by position (module docstring). ``shapes``: the shapes of the kernel's inputs, the
    tensors that may be fetched (no statement writes them); ``unit_last``: whether an input's last
    dimension has stride 1 (a box is fetched a row of it at a time); ``item_bytes``: its elements'
    size."""
    work = [_instances(n) for n in loops]
    seen: set[str] = set()
    plan: dict[int, list[Fetch]] = {}
    for j, loop in enumerate(loops):
        fp: dict = {}
        known = footprint(loop, statements, sizes, {}, fp)
        reads = {t for r in ir.runs(loop) for t, _ in accesses(statements[r.statement])[0]}
        for tensor in sorted(reads - seen) if known else ():  # else: its boxes are unknown
            if tensor not in shapes or not unit_last.get(tensor):
                continue
            boxes = fp[tensor][0]
            if not boxes:
                continue
            box = tuple(
                (max(0, min(b[d][0] for b in boxes)), min(shapes[tensor][d] - 1, max(b[d][1] for b in boxes)))
                for d in range(len(shapes[tensor]))
            )
            if (
                any(lo > hi for lo, hi in box)
                or not FETCH_MIN_BYTES <= _box_bytes(box, item_bytes[tensor]) <= FETCH_BYTES
            ):
                continue
            row = (box[-1][1] - box[-1][0] + 1) * item_bytes[tensor]
            lines = math.prod(hi - lo + 1 for lo, hi in box[:-1]) * -(-row // LINE_BYTES)
            for i in range(j - 1, -1, -1):
                if work[i] >= WORK_PER_LINE * lines:
                    spread = _spreading_loops(loops[i], lines)
                    outer = constant_range(loops[i])
                    if spread and outer and outer.step == 1:  # the share's index counts iterations
                        shared = (loops[i].var, outer.start, len(outer))
                        plan.setdefault(i, []).append(Fetch(tensor, box, shared, spread))
                    break
        seen |= reads
    return plan
