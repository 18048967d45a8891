"""Where the ``!`` initialisations of reductions run, decided before tiling for every target.

:func:`hoist_initialisations` moves the initialisations that share a band with their update before
that band (or, for short reduction windows, before the band's reduction members), each move kept
only if the legality check agrees (every instance kept, every dependence respected);
:func:`initialised_in_place` names the updates whose initialisations stay in their loop nest.
:func:`fold_initialisations` is the GPU's form, after tiling: each initialisation below the
leading coincident members of its update's band, so that it runs in the update's kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence

import islpy as isl

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang import ast as A
from ..polyhedral.schedule import PROOF_OPERATIONS, check_legality, rewrite_outermost_bands
from ..polyhedral.scop import Dependences, Scop
from .defaults import outer_product_shaped
from .tree_queries import leading_coincident, member_spread, statements_of

__all__ = ["beside_leaves", "fold_initialisations", "hoist_initialisations", "initialised_in_place"]


def hoist_initialisations(
    sched: isl.Schedule,
    deps: Dependences,
    sizes: Mapping[str, int] | None,
    *,
    window: int = 0,
    windows: Collection[str] = (),
) -> isl.Schedule:
    """Run the ``!`` initialisations that share a band with other statements before that band.

    Fused into the band of their update, initialisations execute under a guard (``if (k == 0)``)
    in the innermost loops, which stops the compiler from vectorising or keeping sums in registers.
    Moving them before the band is legal when nothing else in the band must precede them; the
    legality check decides, and the schedule is kept unchanged otherwise.

    With ``window`` > 0, where each reduction is one of ``windows`` (update statements whose
    operands all move with every output index: see :func:`initialised_in_place`) and sums at most
    ``window`` points per output, the initialisations stay inside the band: below a band over
    the outputs alone (the scheduler's sequence there already runs each element's
    initialisation before its reduction), else before the band's reduction members, for each
    output element. The element is
    then initialised and reduced in one pass over the outputs, not two (max pooling reads its
    output once instead of twice). Contractions' long reductions stay as they were, in the band
    that register tiles need.
    """

    def choices(node: isl.ScheduleNode, inits: Sequence[str], filt: isl.UnionSet) -> list[isl.Schedule]:
        candidates = []
        pooling = all(n[: -len("_init")] in windows for n in inits)
        if window and pooling and _reduction_points(node.get_domain(), inits) <= window:
            lead = leading_coincident(node)
            if lead == node.band_n_member():
                return []  # a band over the outputs alone: each element is initialised below it
            if lead > 0:
                candidates.append(node.band_split(lead).child(0).order_before(filt).get_schedule())
        candidates.append(node.order_before(filt).get_schedule())
        return candidates

    return _reorder(sched, deps, sizes, choices)


def fold_initialisations(
    sched: isl.Schedule, deps: Dependences, sizes: Mapping[str, int] | None
) -> isl.Schedule:
    """Run the ``!`` initialisations in the loop nest of their update, each element's before its
    first update: below the leading coincident members of the (tiled) outermost band they share
    with it, before the band's other members. The GPU's form (:mod:`.lower_gpu`): a tensor is
    initialised in the kernel that updates it, not by a launch of its own.

    Coincident members have distance 0 along every dependence, the initialisation's of an element
    to its updates among them, so an initialisation and the updates of its element take the same
    values on those members, and a mapping of them to blocks and threads puts them in the same
    thread. Where the legality check refuses the split, the initialisations go before the band
    (:func:`hoist_initialisations`' form); a band over the outputs alone already initialises each
    element below it, and a band without a leading coincident member (a reduction to a scalar)
    has no element to split on: its initialisations go before it.

    ``sched`` is the tiled schedule: the reduction members keep their tiles (the tile band is
    split, the point band stays below both children).
    """

    def choices(node: isl.ScheduleNode, inits: Sequence[str], filt: isl.UnionSet) -> list[isl.Schedule]:
        lead = leading_coincident(node)
        if lead == node.band_n_member():
            return []
        split = [node.band_split(lead).child(0).order_before(filt).get_schedule()] if lead else []
        return [*split, node.order_before(filt).get_schedule()]

    return _reorder(sched, deps, sizes, choices)


def _reorder(
    sched: isl.Schedule,
    deps: Dependences,
    sizes: Mapping[str, int] | None,
    choices: Callable[[isl.ScheduleNode, Sequence[str], isl.UnionSet], list[isl.Schedule]],
) -> isl.Schedule:
    """For each outermost band that holds ``!`` initialisations and other statements, the first
    of ``choices(band, initialisations, their instances)`` that the legality check accepts (the
    schedule unchanged where none is)."""

    def rewrite(node: isl.ScheduleNode) -> isl.Schedule | None:
        names = statements_of(node)
        inits = [n for n in names if n.endswith("_init")]
        if not inits or len(inits) == len(names):
            return None
        domain = node.get_domain()
        filt = isl.UnionSet.empty(domain.get_space())
        for n in inits:
            filt = filt.union(domain.extract_set(_space_named(domain, n)))
        for candidate in choices(node, inits, filt):
            try:
                check_legality(candidate, deps, sizes=sizes, max_operations=PROOF_OPERATIONS)
            except TCInternalError:
                continue
            return candidate
        return None

    return rewrite_outermost_bands(sched, rewrite)


def initialised_in_place(scop: Scop, packed: Collection[str] = frozenset()) -> frozenset[str]:
    """The update statements whose short reductions keep their ``!`` initialisation in their
    loop nest (:func:`hoist_initialisations`' ``windows``): pooling windows, where every operand
    moves with every output index (max pooling's ``I(n, c, 2 * h + r_kh, 2 * w + r_kw)``: no
    operand is shared between outputs, no register tile applies), and contractions without the
    outer-product form (:func:`~tcjit.mapping.defaults.outer_product_shaped`), whose
    dot-product register tile holds few partial sums over so short a reduction (kronecker3's
    first product, 16 terms, ran faster so than with its tile when the two were timed).
    Short contractions with the outer-product form (a matrix product with K = 16) are faster
    with their register tile. ``packed``: inputs read from transposed panels (the form is judged
    on the panels' layout)."""
    out = set()
    for st in scop.statements:
        src = st.source
        if st.kind != "update":
            continue
        reads = [a for a in A.walk(src.rhs) if isinstance(a, A.Access)]
        window = bool(reads) and all(set(src.lhs_vars) <= A.index_vars(a) for a in reads)
        if window or not outer_product_shaped(src, packed):
            out.add(st.name)
    return frozenset(out)


def beside_leaves(sequence: isl.ScheduleNode) -> bool:
    """Whether all children of ``sequence`` but one run one instance per outer iteration (no
    band below, or bands of one point: the initialisations :func:`hoist_initialisations` keeps
    in front of a pooling window)."""

    def loops(n: isl.ScheduleNode) -> bool:
        if n.get_type() == isl.schedule_node_type.band and any(
            (member_spread(n, j) or 2) > 1 for j in range(n.band_n_member())
        ):
            return True
        return any(loops(n.child(i)) for i in range(n.n_children()))

    return sum(loops(sequence.child(i)) for i in range(sequence.n_children())) == 1


def _reduction_points(domain: isl.UnionSet, inits: Sequence[str]) -> int:
    """The most points the reductions initialised by ``inits`` (``X_init``) sum over per output:
    the box of the update ``X``'s dimensions after the initialisation's (the reduction ones)."""
    most = 1
    for name in inits:
        if not _has_statement(domain, name[: -len("_init")]):
            continue  # the update has no instance (a size is 0): its reduction sums nothing
        init = domain.extract_set(_space_named(domain, name))
        update = domain.extract_set(_space_named(domain, name[: -len("_init")]))
        points = 1
        for i in range(init.dim(isl.dim_type.set), update.dim(isl.dim_type.set)):
            lo, hi = update.dim_min_val(i), update.dim_max_val(i)
            if not (lo.is_int() and hi.is_int()):
                return math.inf
            points *= max(0, int(hi.to_python()) - int(lo.to_python()) + 1)
        most = max(most, points)
    return most


def _has_statement(domain: isl.UnionSet, name: str) -> bool:
    lst = domain.get_set_list()
    return any(lst.get_at(i).get_tuple_name() == name for i in range(lst.n_set()))


def _space_named(domain: isl.UnionSet, name: str) -> isl.Space:
    lst = domain.get_set_list()
    for i in range(lst.n_set()):
        if lst.get_at(i).get_tuple_name() == name:
            return lst.get_at(i).get_space()
    raise TCInternalError(f"no statement {name}")
