"""Default mapping options: what a call without ``options=`` and without tuned options uses.

The choice is made from the definition's structure and the target (the sizes are passed for rules
that need them). TC's ``naive`` preset was one choice for every kernel; here each rule below names
the shape it applies to and why; what they bought, measured with ``bench/cpu_suite.py`` on the
2-core AMD EPYC (Zen, AVX2) these benchmarks run on, is in docs/performance.md. Rules are checked
in order; the first that applies wins.

CPU:

* **GEMM-shaped contraction** (outer-product form): one ``+=`` statement ``C(i, j) += f(...)``
  whose output's last subscript ``j`` is the last subscript (plain ``j``) of every operand that
  mentions it, with exactly one reduction variable (``matmul``). The register tile is 8 x 16 (16
  vector partial sums), computed in vector registers by the printer, over cache tiles of 64 rows x
  512 columns x 128 steps of the reduction, so a tile's operand rows stay in L1 and the 128 x 512
  slab of the right operand in L2 (matmul at the suite's CPU size: 0.63x torch eager's speed
  before, 0.81x with this rule and the vector tiles).
* **Everything else**: cache tiles of 64 x 256 x 512 on the outermost band, the outermost parallel
  loop on OpenMP threads, the best unit-stride loop on SIMD lanes and 4 x 16 register tiles where a
  band carries a reduction under a parallel vector loop (contractions in the dot-product form keep
  long reduction tiles: 128-step tiles made tmm, fcrelu and mlp3 slower when tried).

CUDA (and its emulation), not measured on a GPU yet (no device was available; docs/performance.md):

* **Row reductions** (:func:`has_row_reduction`): a reduction whose operands read along a plain
  reduction variable as their last subscript and each mention every output variable (no operand
  reused across outputs: memory-bound, ``softmax``, ``layernorm``, ``cosine``, ``bn_reduce``,
  ``abs_sum``). Block reductions (``match_library_calls``): the reduction loop on a warp of
  ``threadIdx.x`` (32: the tree's last steps are shuffles), 8 outputs on ``y``; tiles of 8 outputs
  by 1024 reduction steps, so that one tree combines 1024 terms (TC combines every tile).
* **Everything else**: TC's naive tiles, blocks and threads (32 x 32 x 32 tiles on up to 256 x 256
  blocks of 32 x 8 threads), each thread reducing sequentially.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..polyhedral.lang import ast as A
from ..polyhedral.lang.checked import CheckedDef, CheckedStatement
from .options import MappingOptions

__all__ = ["default_options", "has_row_reduction", "is_gemm_shaped", "outer_product_shaped"]


def default_options(cdef: CheckedDef, sizes: Mapping[str, int], target: str) -> MappingOptions:
    """The options a call of ``cdef`` at ``sizes`` on ``target`` uses when none were given or tuned
    (the rules of this module's docstring)."""
    del sizes  # no rule needs them yet
    if target != "cpu":
        naive = MappingOptions("naive").map_to_blocks(256, 256).map_to_threads(32, 8)
        if has_row_reduction(cdef):
            return naive.tile(8, 1024, 1024).match_library_calls(True)
        return naive.tile(32, 32, 32)
    base = MappingOptions("naive").vectorize(True)
    if is_gemm_shaped(cdef):
        return base.tile(64, 512, 128).register_tile(8, 16)
    return base.tile(64, 256, 512).register_tile(4, 16)


def is_gemm_shaped(cdef: CheckedDef) -> bool:
    """Whether ``cdef`` is one ``+=`` contraction over one reduction variable, of at least two
    operands, in the outer-product form (:func:`outer_product_shaped`)."""
    if len(cdef.statements) != 1:
        return False
    st = cdef.statements[0]
    if st.op != "+=" or len(st.reduction_vars) != 1 or len(st.lhs_vars) < 2:
        return False
    accesses = [a for a in A.walk(st.rhs) if isinstance(a, A.Access)]
    (k,) = st.reduction_vars
    return len(accesses) >= 2 and outer_product_shaped(st) and any(k in A.index_vars(a) for a in accesses)


def outer_product_shaped(st: CheckedStatement) -> bool:
    """Whether the output's last subscript is a plain index ``j`` that every operand mentioning
    ``j`` has as its plain last subscript: the vector loop along ``j`` then reads whole vectors
    of every operand or broadcasts it (``C(m, n) += A(m, k) * B(k, n)``)."""
    if not st.lhs_vars or not st.plain_lhs:
        return False
    j = st.lhs_vars[-1]
    if not (isinstance(st.lhs[-1], A.Ident) and st.lhs[-1].name == j):
        return False
    for a in A.walk(st.rhs):
        if isinstance(a, A.Access):
            where = [k for k, e in enumerate(a.args) if j in A.index_vars(e)]
            if where and (where != [len(a.args) - 1] or not isinstance(a.args[-1], A.Ident)):
                return False
    return True


def has_row_reduction(cdef: CheckedDef) -> bool:
    """Whether some reduction of ``cdef`` reads each operand along a plain reduction variable (its
    last subscript) and no operand is shared by several outputs (every access mentioning a
    reduction variable mentions every output variable): ``sm(n) +=! exp(I(n, r_d) - mx(n))``,
    not ``C(m, n) +=! A(m, r_k) * B(n, r_k)``."""
    for st in cdef.statements:
        if st.op not in ("+=", "*=", "max=", "min=") or not st.reduction_vars:
            continue
        reduced = [
            a
            for a in A.walk(st.rhs)
            if isinstance(a, A.Access) and set(A.index_vars(a)) & set(st.reduction_vars)
        ]
        if reduced and all(
            isinstance(a.args[-1], A.Ident)
            and a.args[-1].name in st.reduction_vars
            and set(st.lhs_vars) <= set(A.index_vars(a))
            for a in reduced
        ):
            return True
    return False
