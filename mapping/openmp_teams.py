"""The CPU kernel's top level: which parallel loops share a team of threads, which barriers go,
and which loops fetch inputs into cache for later ones.

A pure pass over the kernel IR (:func:`plan_teams`): it regroups the top-level statements into
:class:`~tcjit.mapping.ir.Team` nodes and wraps the fetching loops in
:class:`~tcjit.mapping.ir.Fetching` nodes, and changes nothing else; the order of the statements,
their loops and their instances are preserved, and so is every result (a team's ``omp for``
loops end in a barrier as the ``omp parallel for`` loops they replace did, unless
:mod:`.barriers` proves it orders nothing; a prefetch changes no result).

Consecutive top-level parallel loops, with the serial code between them, share one team of
threads (``omp parallel``), which shares out each loop (``omp for``) and runs the serial code on
one thread (``omp single``). What goes is the start and end of a parallel region per loop (mlp3's
derived backward had 16). Code that opens parallel loops of its own below the top level (a
``parallel_reduction``, a serial loop around parallel ones) ends the team.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.scop import ScopStatement
from . import ir
from .barriers import needless_barriers
from .prefetch import plan_fetches

__all__ = ["plan_teams"]

_REDUCTIONS = frozenset(
    {
        ir.LoopKind.ACCUMULATE,
        ir.LoopKind.PARALLEL_REDUCTION,
        ir.LoopKind.SIMD_REDUCTION,
        ir.LoopKind.REDUCTION,
    }
)


def plan_teams(
    tree: ir.Node,
    cdef: CheckedDef,
    statements: Mapping[str, ScopStatement],
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    packed: frozenset[str],
) -> ir.Node:
    """``tree`` (a CPU kernel's body) with its top-level statements grouped into teams of
    threads and its fetching loops marked (module docstring). ``strides``: the kernel's tensors'
    (an input is fetched a row at a time where its last dimension has stride 1); ``packed``:
    the inputs read from packed panels (never fetched: the panels are filled first)."""
    children = tree.children if isinstance(tree, ir.Block) else (tree,)
    fetches = _fetches(children, cdef, statements, sizes, strides, packed)
    out: list[ir.Node] = []
    group: list[tuple[ir.Node, bool]] = []

    def flush() -> None:
        if sum(shared for _, shared in group) < 2:
            out.extend(_fetching(c, fetches) for c, _ in group)
        else:
            free = _needless_barriers(group, statements, sizes)
            members = tuple(
                ir.TeamMember(_fetching(c, fetches), shared, k in free) for k, (c, shared) in enumerate(group)
            )
            out.append(ir.Team(members))
        group.clear()

    for c in children:
        if _shareable(c):
            group.append((c, True))
        elif not ir.opens_parallel(c):
            group.append((c, False))
        else:
            flush()
            out.append(_fetching(c, fetches))
    flush()
    if not isinstance(tree, ir.Block) and len(out) == 1:
        return out[0]
    return ir.Block(tuple(out))


def _top_loop(node: ir.Node) -> ir.For | None:
    """The parallel loop a top-level statement is (below its marks), or None."""
    while isinstance(node, ir.Mark):
        node = node.body
    if isinstance(node, ir.For) and not node.degenerate and ir.LoopKind.PARALLEL in node.kinds:
        return node
    return None


def _fetches(
    children: Sequence[ir.Node],
    cdef: CheckedDef,
    statements: Mapping[str, ScopStatement],
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    packed: frozenset[str],
) -> dict[int, tuple[ir.Fetch, ...]]:
    """What each top-level parallel loop (by ``id()``) fetches for later ones
    (:func:`~tcjit.mapping.prefetch.plan_fetches`): inputs read in place (not from a packed
    panel), whose last dimension has stride 1, and whose shape ``sizes`` fixes (a symbolic
    kernel's passes get only its fixed sizes)."""
    loops = [loop for loop in map(_top_loop, children) if loop is not None]
    shapes, unit_last, item_bytes = {}, {}, {}
    for name in cdef.params:
        info = cdef.tensors.get(name)  # rank-0 scalars are not tensors
        if info is None or not info.shape or name in packed or name not in strides:
            continue
        if not all(d.symbols() <= sizes.keys() for d in info.shape):
            continue  # its shape depends on a symbolic size (not in ``sizes``): not fetched
        shapes[name] = tuple(int(d.evaluate(sizes)) for d in info.shape)
        unit_last[name] = tuple(strides[name])[-1:] == (1,)
        item_bytes[name] = max(1, info.dtype.bits // 8)
    plan = plan_fetches(loops, statements, sizes, shapes, unit_last, item_bytes)
    return {id(loops[i]): tuple(f) for i, f in plan.items()}


def _fetching(node: ir.Node, fetches: Mapping[int, tuple[ir.Fetch, ...]]) -> ir.Node:
    """``node`` with its parallel loop wrapped in the fetches it makes, if any."""
    if isinstance(node, ir.Mark):
        return replace(node, body=_fetching(node.body, fetches))
    if isinstance(node, ir.For) and fetches.get(id(node)):
        return ir.Fetching(fetches[id(node)], node)
    return node


def _needless_barriers(
    group: Sequence[tuple[ir.Node, bool]], statements: Mapping[str, ScopStatement], sizes: Mapping[str, int]
) -> frozenset[int]:
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
        free.update(run[i][0] for i in needless_barriers(loops, statements, sizes))
        run.clear()

    for k, (c, shared) in enumerate(group):
        n = c
        while isinstance(n, ir.Mark):
            n = n.body
        if shared and isinstance(n, ir.For) and ir.LoopKind.SIMD not in n.kinds:
            run.append((k, n))
        else:
            decide()
    decide()
    return frozenset(free)


def _shareable(n: ir.Node) -> bool:
    """Whether ``n`` is a parallel loop that the printer prints as an ``omp parallel for`` (not a
    reduction in any form), which a team's ``omp for`` may share out instead."""
    while isinstance(n, ir.Mark) and n.name not in ("thread0", "sync"):
        n = n.body
    if not isinstance(n, ir.For) or n.degenerate or not ir.canonical(n):
        return False
    return ir.LoopKind.PARALLEL in n.kinds and not n.kinds & _REDUCTIONS
