"""The emulated CUDA target: a GPU-mapped kernel run on the CPU, so that CI checks every mapping.

The GPU mapping (:mod:`.gpu`) gives, per launch, kernel IR over the block and thread ids
``b0..b2, t0..t2``. :func:`~tcjit.mapping.lower_gpu.lower_emulated` turns each launch into loops
over the blocks outside and the threads inside (:mod:`.fission`), and :class:`EmulatedPrinter`
prints it as C (the CPU printer, the same value semantics).

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
from collections.abc import Sequence

from . import ir
from .c_exprs import c_float_literal, c_int_literal, stack_array
from .gpu_ir import THREAD_IDS
from .gpu_printer import GpuPrinter

__all__ = ["ORDERS", "EmulatedPrinter"]

#: The orders an emulated kernel can run its blocks and threads in (``tc_order``).
ORDERS = ("forward", "reversed", "shuffled")


def _shadow(buffer: str) -> str:
    """The race check's shadow of a shared buffer (``tc_bsh_shared_A`` for ``tc_shared_A``)."""
    return "tc_bsh_" + buffer.removeprefix("tc_")


class EmulatedPrinter(GpuPrinter):
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
