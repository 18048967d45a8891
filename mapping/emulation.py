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
them. Barriers stay in the fissioned code as ``sync`` marks: the race check counts barrier
intervals there, so that the end of a loop's body and its start, with no barrier between them,
are one interval as on a GPU.

Promoted buffers (:mod:`.promotion`) are declared by each block, filled with NaN (integers: an
extreme of their type) so that a read of an element no copy wrote spoils the result, and
race-checked (reads included: a copy that overwrites a tile another thread still reads is a
race); values that live in one thread across a barrier (private buffers) have one copy per
thread.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.names import entry_symbol
from . import ir
from .accumulation import wide_accumulators
from .c_exprs import CParam, c_float_literal, c_int_literal, stack_array
from .c_kernel import print_kernel
from .gpu import THREAD_IDS
from .gpu_printer import GpuPrinter
from .lower import (
    CpuKernelSource,
    kernel_header,
    kernel_params,
    kernel_stages,
    lower_gpu,
)
from .reduction_forms import plan_reductions
from .register_tiles import TilingFacts

__all__ = ["ORDERS", "fission", "lower_emulated"]

#: The orders an emulated kernel can run its blocks and threads in (``tc_order``).
ORDERS = ("forward", "reversed", "shuffled")


def _has_barrier(node: ir.Node | None) -> bool:
    if node is None or isinstance(node, ir.Run):
        return False
    if isinstance(node, ir.Mark):
        return node.name == ir.SYNC_MARK or _has_barrier(node.body)
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
    launches = [ir.Blocks(k.grid, k.block, fission(body, k.block), k.buffers) for k, body in low.launches]
    params = [CParam("tc_order", "scalar", "int64_t"), *kernel_params(cdef)]
    symbol = symbol or entry_symbol(cdef.name) + "_emulated"
    # long float32 sums and half-precision sums accumulate wide, as on the CPU (the language's
    # semantics); the CUDA printer keeps such buffers in global memory the runtime allocates
    wide = wide_accumulators(cdef, sizes)
    header = kernel_header(cdef, f"emulated CUDA target, options: {options!r}")
    statements = {s.name: s for s in scop.statements}
    facts = TilingFacts(cdef, statements, sizes, strides, checked, wide, vector_bytes=32, emulated=True)
    body = plan_reductions(ir.Block(tuple(launches)), facts)
    text, checks = print_kernel(
        cdef,
        body,
        statements,
        symbol=symbol,
        params=params,
        sizes=sizes,
        strides=strides,
        checked=checked,
        wide=wide,
        copy_in=frozenset(zero) & frozenset(wide),
        header=header,
        printer=_EmulatedPrinter.factory(low.plan, scop),
    )
    stages = kernel_stages(sched, low.plan.schedule, low.plan.decisions, body)
    shared = tuple(b.name for k in low.plan.kernels for b in k.buffers if b.space == "shared")
    return CpuKernelSource(
        text, symbol, tuple(params), zero, checks, tuple(wide), stages, buffers=shared, kernel_ir=body
    )


def _shadow(buffer: str) -> str:
    """The race check's shadow of a shared buffer (``tc_bsh_shared_A`` for ``tc_shared_A``)."""
    return "tc_bsh_" + buffer.removeprefix("tc_")


class _EmulatedPrinter(GpuPrinter):
    """Promoted buffers in the emulation: each block declares its own, fills them with a poison
    value (NaN, or an integer type's extreme) so that an element read before it is copied spoils
    the result, and race-checks its shared buffers; a private buffer has one copy per thread,
    indexed by ``[t2][t1][t0]`` (it lives across the barriers that split the thread loops)."""

    block: tuple[int, int, int] = (1, 1, 1)

    def node(self, n: ir.Node | None, indent: str) -> None:
        if isinstance(n, ir.Blocks):
            self.block = n.block
        super().node(n, indent)

    def element(self, buf: ir.Buffer, index: Sequence[str]) -> str:
        if buf.space == "private":
            index = [*THREAD_IDS[::-1], *index]
        return super().element(buf, index)

    def buffer_race(self, buf: ir.Buffer, index: Sequence[str], write: bool) -> str | None:
        if buf.space != "shared":
            return None
        names = [n for n, _ in self.buffer_shadows]
        code = -2 - len(self.shadowed) - names.index(buf.name)
        at = self.flat(buf, index)
        return f"tc_brace(&{_shadow(buf.name)}[{at}], {int(write)}, tc_tl, tc_phase, {code}, {at}, tc_errors)"

    def declare_buffers(self, buffers: Sequence[ir.Buffer], indent: str) -> None:
        for buf in buffers:
            ct = self.buffer_type(buf)
            shape = [*self.block[::-1], *buf.shape] if buf.space == "private" else list(buf.shape)
            count = math.prod(shape)
            self.lines.append(f"{indent}{stack_array(ct, buf.name + ''.join(f'[{n}]' for n in shape))}")
            self.lines.append(
                f"{indent}{{ {ct} *tc_f = ({ct} *){buf.name};"
                f" for (int64_t tc_k = 0; tc_k < {count}; tc_k++) tc_f[tc_k] = {self.poison(buf)}; }}"
            )
            if buf.space == "shared":
                if buf.name not in [n for n, _ in self.buffer_shadows]:
                    self.buffer_shadows.append((buf.name, count))
                self.lines.append(
                    f"{indent}for (int64_t tc_k = 0; tc_k < {count}; tc_k++)"
                    f" {_shadow(buf.name)}[tc_k] = (tc_bshadow){{0, 0, 0, 0}};"
                )

    def poison(self, buf: ir.Buffer) -> str:
        """What a buffer holds before anything is copied in: NaN (half types: its bits), or the
        integer type's minimum (unsigned: maximum; bool: true, it has no other value)."""
        wide = self.wide.get(buf.tensor)
        t = wide or self.cdef.tensor(buf.tensor).dtype
        if t.name == "float16":
            return "((uint16_t)0x7e00)"
        if t.name == "bfloat16":
            return "((uint16_t)0x7fc0)"
        if t.is_float:
            return c_float_literal(math.nan, t)
        if t.kind == "bool":
            return "true"
        return c_int_literal(t.max_value if t.kind == "uint" else t.min_value, t)
