"""Operand packing for the CPU (option ``pack_operands``): transposed panels of contraction inputs.

A contraction vectorises best along its output's last index ``j`` (the *outer-product form*: every
operand that mentions ``j`` is read a whole vector at a time, the others are broadcast). In
``C(m, n) +=! A(m, r_k) * B(n, r_k)`` (``tmm``, a linear layer's ``I(b, r_m) * W(n, r_m)``) the
input ``B`` has ``n`` in its first dimension: along ``n`` its elements are ``K`` apart, so the
mapper vectorises along ``r_k`` instead (the dot-product form), which keeps one vector of partial
sums per output and adds them up at the end, and runs at about half the speed of the matrix
product (``bench/results/cpu_suite_xeon_avx512.md``, a run without packing: tmm 0.51x torch eager
where matmul is 0.93x).

Packing copies such an input, once per call and before any statement runs, into a buffer whose
layout has ``j``'s dimension innermost (unit stride) and the others in their order, densely: a
transposed panel, as every BLAS packs its operands. The kernel then reads the buffer instead of
the tensor, everywhere, so nothing but the strides the mapper and the printer see changes: the
buffer holds the same elements under the same subscripts. The mapper's stride scores then pick
``j`` as the vector loop and the outer-product register tile applies.

:func:`packed_operands` decides, from the definition, the sizes and the strides of the call; the C
printer allocates and fills the buffers (:func:`tcjit.mapping.c_kernel.print_kernel`'s
``packs``). An input is packed when:

* it is a tensor parameter of rank 2 or more (inputs are never written, so a copy made once stays
  valid for the whole kernel);
* some ``+=`` reduction's output has a plain last subscript ``j`` that the input has as the plain
  subscript of exactly one dimension, whose stride is not 1;
* every reduction reading the input asks for the same dimension, and no other statement reads it
  (a pointwise read along another index would lose its unit stride);
* each of its elements is read at least :data:`MIN_REUSE` times (the product of the output
  indices it does not mention), so that the copy costs a small part of the work.

Where the loops allow it, a panel is not filled whole before them but a part at a time, by the
loops that read it, into a small buffer per thread (:func:`.parts.place_parts`): what BLAS libraries do
with their packed blocks, so that the copy stays in the core's cache. That placement works on the
loop tree (:mod:`.ir`, which needs isl) and lives in :mod:`.parts`, so that this module stays
importable without isl (a kernel loaded from disk needs :func:`packed_operands`' rules only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..polyhedral.lang import ast as A
from ..polyhedral.lang.checked import CheckedDef
from .layout import Pack, contiguous_strides

__all__ = [
    "MIN_REUSE",
    "PART_REFILLS",
    "index_extent",
    "packed_operands",
]

#: The fewest times each element of a packed input must be read: below this the copy (a read and
#: a write of every element) is a large part of what the contraction does with it.
MIN_REUSE = 8

#: The parts of a panel filled by a kernel's run (:func:`.parts.place_parts`) may add up to at
#: most this many times the tensor (a part filled again for each iteration of a loop that does not
#: move it costs a copy each time); past that the panel is filled whole, before the loops.
PART_REFILLS = 2


def packed_operands(
    cdef: CheckedDef, sizes: Mapping[str, int], strides: Mapping[str, tuple[int, ...]] | None = None
) -> dict[str, Pack]:
    """The inputs of ``cdef`` to pack at ``sizes`` (the rules of this module's docstring), by name.

    :arg strides: element strides per input as passed; ``None`` (or a missing input) assumes
        contiguous tensors (what :func:`~tcjit.mapping.defaults.default_options` asks about).
    """
    wanted: dict[str, set[int]] = {}
    reuse: dict[str, int] = {}
    refused: set[str] = set()
    inputs = {p for p in cdef.params if p not in cdef.scalars}
    for st in cdef.statements:
        reads = [a for a in A.walk(st.rhs) if isinstance(a, A.Access) and a.tensor in inputs]
        j = _vector_index(st)
        for a in reads:
            where = [k for k, e in enumerate(a.args) if j is not None and j in A.index_vars(e)]
            if j is None or len(where) != 1 or not _plain(a.args[where[0]], j) or len(a.args) < 2:
                refused.add(a.tensor)
                continue
            wanted.setdefault(a.tensor, set()).add(where[0])
            mentioned = A.index_vars(a)
            times = math.prod(index_extent(st, v, sizes) for v in st.lhs_vars if v not in mentioned)
            reuse[a.tensor] = min(reuse.get(a.tensor, times), times)
    out: dict[str, Pack] = {}
    for name, dims in wanted.items():
        if name in refused or len(dims) != 1 or reuse[name] < MIN_REUSE:
            continue
        (dim,) = dims
        shape = tuple(s.evaluate(sizes) for s in cdef.tensor(name).shape)
        source = tuple((strides or {}).get(name) or contiguous_strides(shape))
        if source[dim] == 1 or math.prod(shape) == 0:
            continue
        order = (*(d for d in range(len(shape)) if d != dim), dim)
        dense = contiguous_strides(tuple(shape[d] for d in order))
        packed = [0] * len(shape)
        for d, s in zip(order, dense):
            packed[d] = s
        out[name] = Pack(name, dim, source, tuple(packed), shape)
    return out


def _vector_index(st) -> str | None:
    """The index a ``+=`` reduction's vector loop should run along: its output's plain last
    subscript; ``None`` for other statements (their reads are not packed)."""
    if st.op != "+=" or not st.reduction_vars or not st.lhs_vars or not st.plain_lhs:
        return None
    j = st.lhs_vars[-1]
    return j if _plain(st.lhs[-1], j) else None


def _plain(e: A.Expr, var: str) -> bool:
    return isinstance(e, A.Ident) and e.name == var


def index_extent(st, var: str, sizes: Mapping[str, int]) -> int:
    """How many values index variable ``var`` of statement ``st`` takes at ``sizes``."""
    r = st.range_of(var)
    return max(0, r.hi.evaluate(sizes) - r.lo.evaluate(sizes))
