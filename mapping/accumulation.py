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

__all__ = ["LONG_SUM", "wide_accumulators"]

#: Sums of at least this many terms per element accumulate float32 in float64.
LONG_SUM = 1 << 14


def wide_accumulators(
    cdef: CheckedDef, sizes: Mapping[str, int], symbolic: frozenset[str] = frozenset()
) -> dict[str, ScalarType]:
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

    With ``symbolic`` sizes (:mod:`.symbolic`), a sum whose number of terms depends on one may be
    any length: it counts as :data:`LONG_SUM` terms at least, whatever its length at ``sizes``.
    """
    terms: dict[str, int] = {}
    for st in cdef.statements:
        if st.op in ("+=", "*=") and cdef.tensor(st.tensor).dtype.is_float:
            ranges = st.ranges[len(st.lhs_vars) :] if st.plain_lhs else st.ranges
            n = math.prod(max(0, r.hi.evaluate(sizes) - r.lo.evaluate(sizes)) for r in ranges)
            if any(not (r.hi - r.lo).symbols().isdisjoint(symbolic) for r in ranges):
                n = max(n, LONG_SUM)  # unbounded: as long as any admissible value makes it
            terms[st.tensor] = terms.get(st.tensor, 0) + n
    wide = {}
    for name, n in terms.items():
        t = cdef.tensor(name).dtype
        if t.is_half:
            wide[name] = SCALAR_TYPES["float32"] if n < LONG_SUM else SCALAR_TYPES["float64"]
        elif t.name == "float32" and n >= LONG_SUM:
            wide[name] = SCALAR_TYPES["float64"]
    return wide
