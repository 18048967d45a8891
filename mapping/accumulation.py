"""How a kernel accumulates its sums: which tensors it holds in a wider type than they are stored in.

:func:`wide_accumulators` decides it from the definition and the sizes, for every target (the CPU
and CUDA lowerings, the emulation); :data:`LONG_SUM` is the length from which a float32 sum is
carried in float64, which the C printer's register tiles also respect when they block a long sum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.lang.types import SCALAR_TYPES, ScalarType

__all__ = ["LONG_SUM", "long_sums", "sum_lengths", "wide_accumulators"]

#: Sums of at least this many terms per element accumulate float32 in float64.
LONG_SUM = 1 << 14


def sum_lengths(cdef: CheckedDef, sizes: Mapping[str, int]) -> dict[str, tuple[int, frozenset[str]]]:
    """Each tensor a float ``+=`` or ``*=`` accumulates into: how many terms an element's sum has
    at ``sizes`` (its statements' together), and the sizes that number depends on."""
    out: dict[str, tuple[int, frozenset[str]]] = {}
    for st in cdef.statements:
        if st.op in ("+=", "*=") and cdef.tensor(st.tensor).dtype.is_float:
            ranges = st.ranges[len(st.lhs_vars) :] if st.plain_lhs else st.ranges
            n = math.prod(max(0, r.hi.evaluate(sizes) - r.lo.evaluate(sizes)) for r in ranges)
            on = frozenset().union(*((r.hi - r.lo).symbols() for r in ranges))
            before, known = out.get(st.tensor, (0, frozenset()))
            out[st.tensor] = (before + n, known | on)
    return out


def long_sums(cdef: CheckedDef, sizes: Mapping[str, int], symbolic: frozenset[str]) -> frozenset[str]:
    """The tensors whose sums have :data:`LONG_SUM` terms or more at ``sizes`` and a length that
    depends on a size of ``symbolic``.

    A kernel with symbolic sizes accumulates as :func:`wide_accumulators` decides at its
    representative sizes, so it serves only calls on the same side of :data:`LONG_SUM`: calls
    whose ``long_sums`` equal its representative's (the dispatch keeps the two kinds apart,
    :mod:`tcjit.dynamic`). A batch size thus gets at most two kernels, and every call accumulates
    in the type a kernel specialised to its sizes would use."""
    return frozenset(
        name
        for name, (n, on) in sum_lengths(cdef, sizes).items()
        if n >= LONG_SUM and not on.isdisjoint(symbolic)
    )


def wide_accumulators(cdef: CheckedDef, sizes: Mapping[str, int]) -> dict[str, ScalarType]:
    """Tensors whose sums the kernel accumulates in a wider type than they are stored in.

    float16 and bfloat16 targets of ``+=``/``*=`` accumulate in float32, float32 targets of sums
    with :data:`LONG_SUM` terms or more per element in float64: adding millions of float32 terms
    one by one loses every digit (the oracle, like torch, keeps them). The tensor lives in the
    wide buffer for the whole kernel and is rounded to its type once, at the end.

    Blocked summation: the register tile over a chain of reductions (``c_printer``,
    ``_chain_vector``) adds float32 products in float32 vector partial sums over blocks of fewer
    than :data:`LONG_SUM` terms per element (a convolution's ``h`` x ``w`` plane, or one row of
    ``w``), then adds each block, converted, into float64 partial sums. Each float32 partial is
    then no longer than the sums this rule leaves in float32 anywhere else, and the long sum is
    carried in float64, so the accuracy argument above holds for it too.

    A kernel with symbolic sizes applies the rule at its representative sizes and serves only
    calls whose sums fall on the same side of :data:`LONG_SUM` (:func:`long_sums`).
    """
    wide = {}
    for name, (n, _) in sum_lengths(cdef, sizes).items():
        t = cdef.tensor(name).dtype
        if t.is_half:
            wide[name] = SCALAR_TYPES["float32"] if n < LONG_SUM else SCALAR_TYPES["float64"]
        elif t.name == "float32" and n >= LONG_SUM:
            wide[name] = SCALAR_TYPES["float64"]
    return wide
