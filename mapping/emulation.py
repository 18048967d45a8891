"""The emulated CUDA target: a GPU-mapped kernel run on the CPU, so that CI checks every mapping.

The GPU mapping (:mod:`.gpu`) gives, per launch, an isl AST over the block and thread ids
``b0..b2, t0..t2``. Here the same AST becomes C (the CPU printer, the same value semantics) that
loops over the blocks outside and the threads inside (notes/polyhedral.md 3.2, "barrier fission",
as in MCUDA and POCL's work-item loops):

* a subtree without a barrier (a ``sync`` mark) runs inside a loop over the block's threads;
* a node holding a barrier runs once per block: a block of statements is split into maximal runs
  without barriers, each in its own thread loop, and the end of a thread loop is the barrier; a
  loop or condition holding a barrier must not depend on the thread ids (CUDA requires every
  thread to reach a ``__syncthreads``, and it is checked here: a TCInternalError otherwise).

The kernel takes an extra first argument, ``tc_order``: blocks and threads run forward (0),
reversed (1) or shuffled (2). A mapping that lets two threads or two blocks touch the same element
without a barrier between them gives different results in different orders; the tests compare
them. Nothing lives in a thread across a barrier yet (no private or shared promotion): when
promotion comes, such values must be expanded per thread here.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang.checked import CheckedDef
from . import ir
from .c_printer import CParam, print_kernel
from .gpu import SYNC_MARK, THREAD_IDS
from .lower import (
    CpuKernelSource,
    kernel_header,
    kernel_params,
    kernel_stages,
    lower_gpu,
    wide_accumulators,
)

__all__ = ["ORDERS", "fission", "lower_emulated"]

#: The orders an emulated kernel can run its blocks and threads in (``tc_order``).
ORDERS = ("forward", "reversed", "shuffled")


def _has_barrier(node: ir.Node | None) -> bool:
    if node is None or isinstance(node, ir.Run):
        return False
    if isinstance(node, ir.Mark):
        return node.name == SYNC_MARK or _has_barrier(node.body)
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
    """``node`` (one block's work) with loops over the threads around its barrier-free parts."""
    if not _has_barrier(node):
        return ir.Threads(block, node)
    if isinstance(node, ir.Mark):
        return (
            fission(node.body, block)
            if node.name == SYNC_MARK
            else ir.Mark(node.name, fission(node.body, block))
        )
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
    return ir.Block(tuple(out))


def lower_emulated(
    cdef: CheckedDef,
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    options,
    *,
    symbol: str | None = None,
) -> CpuKernelSource:
    """The C source of ``cdef``'s GPU mapping at ``sizes``, emulated (see the module's docstring).

    Its first parameter after ``nthreads`` and ``tc_errors`` is the scalar ``tc_order``.
    """
    low = lower_gpu(cdef, sizes, options)
    scop, _, _, sched, checked, zero = low.prepared
    launches = [ir.Blocks(k.grid, k.block, fission(body, k.block)) for k, body in low.launches]
    params = [CParam("tc_order", "scalar", "int64_t"), *kernel_params(cdef)]
    symbol = symbol or f"tc_{cdef.name}_emulated"
    # long float32 sums and half-precision sums accumulate wide, as on the CPU (the language's
    # semantics); the CUDA printer keeps such buffers in global memory the runtime allocates
    wide = wide_accumulators(cdef, sizes)
    header = kernel_header(cdef, f"emulated CUDA target, options: {options!r}")
    text, checks = print_kernel(
        cdef,
        ir.Block(tuple(launches)),
        {s.name: s for s in scop.statements},
        symbol=symbol,
        params=params,
        sizes=sizes,
        strides=strides,
        checked=checked,
        wide=wide,
        copy_in=frozenset(zero) & frozenset(wide),
        header=header,
    )
    stages = kernel_stages(sched, low.plan.schedule, low.plan.decisions)
    return CpuKernelSource(text, symbol, tuple(params), zero, checks, tuple(wide), stages)
