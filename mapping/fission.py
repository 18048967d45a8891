"""Barrier fission: one block's GPU code as loops over its threads between barriers.

The GPU mapping (:mod:`.gpu`) gives, per launch, kernel IR over the block and thread ids
``b0..b2, t0..t2``, its barriers as ``sync`` marks. :func:`fission` rewrites one block's work so
that it runs on one CPU thread (notes/polyhedral.md 3.2, "barrier fission", as in MCUDA and POCL's
work-item loops):

* a subtree without a barrier runs inside a loop over the block's threads
  (:class:`~tcjit.mapping.ir.Threads`);
* a node holding a barrier runs once per block: a block of statements is split into maximal runs
  without barriers, each in its own thread loop, and the end of a thread loop is the barrier; a
  loop or condition holding a barrier must not depend on the thread ids (CUDA requires every
  thread to reach a ``__syncthreads``, and it is checked here: a TCInternalError otherwise; the
  CUDA target runs the check too).

The pass preserves every statement instance and, within each thread, their order.
"""

from __future__ import annotations

from dataclasses import replace

from ..polyhedral.errors import TCInternalError
from . import ir
from .gpu_ir import THREAD_IDS, CopyElement, FirstThread, ReductionStep, WarpSteps

__all__ = ["fission"]


def _has_barrier(node: ir.Node | None) -> bool:
    if node is None or isinstance(node, (ir.Run, CopyElement, ReductionStep)):
        return False
    if isinstance(node, ir.Mark):
        return node.name == ir.SYNC_MARK or _has_barrier(node.body)
    if isinstance(node, (WarpSteps, FirstThread)):
        return _has_barrier(node.body)
    if isinstance(node, ir.For):
        return _has_barrier(node.body)
    if isinstance(node, ir.If):
        return _has_barrier(node.then) or _has_barrier(node.other)
    if isinstance(node, ir.Block):
        return any(_has_barrier(c) for c in node.children)
    raise TCInternalError(f"unexpected {node!r} in a GPU kernel")


def _thread_free(e: ir.Expr, what: str) -> None:
    if ir.free_vars(e) & set(THREAD_IDS):
        raise TCInternalError(f"a barrier under a {what} that depends on the thread ids: {e}")


def fission(node: ir.Node, block: tuple[int, int, int]) -> ir.Node:
    """``node`` (one block's work) with loops over the threads around its barrier-free parts;
    the barriers stay, as ``sync`` marks around nothing, between them (the emulation counts
    barrier intervals there: two thread loops with no barrier between them, such as the end of
    a loop's body and its start, are one interval on a GPU)."""
    if not _has_barrier(node):
        return ir.Threads(block, node)
    if isinstance(node, ir.Mark):
        if node.name != ir.SYNC_MARK:
            return ir.Mark(node.name, fission(node.body, block))
        barrier = ir.Mark(ir.SYNC_MARK, ir.Block(()))
        if node.body == ir.Block(()):
            return barrier
        return _flat(ir.Block((fission(node.body, block), barrier)))
    if isinstance(node, (WarpSteps, FirstThread)):
        return replace(node, body=fission(node.body, block))
    if isinstance(node, ir.For):
        _thread_free(node.init, "loop")
        _thread_free(node.cond, "loop")
        return ir.For(
            node.var, node.init, node.cond, node.step, fission(node.body, block), degenerate=node.degenerate
        )
    if isinstance(node, ir.If):
        _thread_free(node.cond, "condition")
        other = None if node.other is None else fission(node.other, block)
        return ir.If(node.cond, fission(node.then, block), other)
    assert isinstance(node, ir.Block)
    out: list[ir.Node] = []
    run: list[ir.Node] = []
    for c in node.children:
        if _has_barrier(c):
            if run:
                out.append(ir.Threads(block, ir.Block(tuple(run))))
                run = []
            out.append(fission(c, block))
        else:
            run.append(c)
    if run:
        out.append(ir.Threads(block, ir.Block(tuple(run))))
    return _flat(ir.Block(tuple(out)))


def _flat(node: ir.Block) -> ir.Block:
    """``node`` with the blocks among its children replaced by their children."""
    out: list[ir.Node] = []
    for c in node.children:
        out.extend(c.children if isinstance(c, ir.Block) else (c,))
    return ir.Block(tuple(out))
