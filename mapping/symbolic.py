"""Symbolic sizes: what a kernel compiled for every value of some size parameters needs.

A kernel lowered with ``symbolic`` size names works for every admissible value of each of them,
``1 <= value <= MAX_SYMBOLIC_SIZE`` (2**31 - 1; the other sizes stay fixed at their values). The
mapping still makes its choices at concrete sizes: ``sizes`` always holds a value for every size,
the *representative* one for a symbolic size, and the cost-driven passes (tiles, parallel loops,
register tiles) read it. What the code's correctness rests on is made for every admissible value
instead:

* isl's context leaves each symbolic size free in that range (:func:`params_context`): the
  legality proofs, the proofs that accesses stay inside their tensors, the initialisations a
  kernel may drop, and the generated loop bounds hold for every admissible value. The upper
  bound is what lets a GPU kernel walk the tiles along ``blockIdx.x`` with no grid-stride loop
  (:data:`~tcjit.mapping.layout.MAX_SYMBOLIC_SIZE`);
* the C kernel takes each symbolic size as an ``int64_t`` argument after its other parameters,
  named :func:`~tcjit.mapping.layout.size_var`, and prints every shape, stride and extent that
  depends on one as C arithmetic of those arguments (:func:`~tcjit.mapping.layout.size_text`).

A size may be symbolic only where the Scop can be parametric in it
(:func:`symbolic_candidates`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import islpy as isl

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.names import isl_name
from .layout import MAX_SYMBOLIC_SIZE, admissible, contiguous_strides, symbolic_in

__all__ = [
    "GENERIC_SIZE",
    "affine_in_sizes",
    "check_symbolic",
    "generic_strides",
    "params_context",
    "symbolic_candidates",
]

#: The value a symbolic size takes in the strides the mapping's passes see
#: (:func:`generic_strides`): a prime, so that no product of sizes is 0 or 1 or equals another.
GENERIC_SIZE = 4099


def affine_in_sizes(cdef: CheckedDef) -> bool:
    """Whether every range of ``cdef`` is affine in the sizes (no product of sizes), so that isl
    can keep the Scop parametric."""
    return not any("*" in r.lo.to_isl() or "*" in r.hi.to_isl() for st in cdef.statements for r in st.ranges)


def symbolic_candidates(cdef: CheckedDef) -> frozenset[str]:
    """The sizes of ``cdef`` a kernel may leave symbolic: every size where the Scop can be
    parametric (:func:`affine_in_sizes`), else none."""
    return frozenset(cdef.sizes) if affine_in_sizes(cdef) else frozenset()


def check_symbolic(cdef: CheckedDef, sizes: Mapping[str, int], symbolic: Collection[str]) -> frozenset[str]:
    """``symbolic`` as a frozenset, refused (:class:`TCInternalError`: the caller's policy must not
    ask for it) where a name is not a size of ``cdef`` that may be symbolic, where a
    representative value is not admissible (below 1 or above :data:`MAX_SYMBOLIC_SIZE`), or where a
    fixed size is 0 (empty tensors specialise)."""
    symbolic = frozenset(symbolic)
    if not symbolic:
        return symbolic
    bad = symbolic - symbolic_candidates(cdef)
    if bad:
        raise TCInternalError(f"{cdef.name}: sizes {sorted(bad)} cannot be symbolic")
    if not all(admissible(sizes[s]) for s in symbolic) or any(sizes[s] == 0 for s in cdef.sizes):
        raise TCInternalError(
            f"{cdef.name}: a symbolic kernel needs sizes from 1 to {MAX_SYMBOLIC_SIZE}, got {dict(sizes)}"
        )
    return symbolic


def generic_strides(cdef: CheckedDef, sizes: Mapping[str, int], symbolic: Collection[str]) -> dict:
    """The contiguous strides of every tensor whose shape depends on a symbolic size, with each
    symbolic size at :data:`GENERIC_SIZE` and the others at ``sizes``: what the passes' choices
    read. At the representative sizes a stride may be 1 by accident (``I(B, M)`` at ``M = 1``
    walks ``B`` with stride 1) and a pass would make the loop over it a vector loop; at the
    generic size such a stride is never 0 or 1 (the printers print the true strides,
    :func:`~tcjit.mapping.layout.strides_text`)."""
    if not symbolic:
        return {}
    generic = {**sizes, **{s: GENERIC_SIZE for s in symbolic}}
    return {
        t.name: contiguous_strides(tuple(d.evaluate(generic) for d in t.shape))
        for t in cdef.tensor_infos
        if any(symbolic_in(d, symbolic) for d in t.shape)
    }


def params_context(ctx: isl.Context, params: Collection[str], sizes: Mapping[str, int], symbolic) -> isl.Set:
    """The parameters' values as an isl params set: each fixed size equal to its value, each
    symbolic one admissible, ``1 <= value <= MAX_SYMBOLIC_SIZE``."""
    params = tuple(params)
    if not params:
        return isl.Set.universe(isl.Space.params_alloc(ctx, 0))
    cons = " and ".join(
        f"1 <= {isl_name(p)} <= {MAX_SYMBOLIC_SIZE}" if p in symbolic else f"{isl_name(p)} = {sizes[p]}"
        for p in params
    )
    return isl.Set.read_from_str(ctx, f"[{', '.join(map(isl_name, params))}] -> {{ : {cons} }}")
