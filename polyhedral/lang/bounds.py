"""Proving, at a call's concrete sizes, that accesses stay inside their tensors.

Kernels are specialised to concrete sizes, so this runs once per shape, before any code: for every
statement whose domain is its ranges' box (no ``where`` conditions), each affine subscript of each
access that is always evaluated -- the left-hand side, and reads outside ``?:``/``&&``/``||``
operands -- is bounded exactly over the box and compared with its tensor's dimension. A subscript
that can leave its tensor is a :class:`TCBoundsError` pointing at it. Accesses this cannot decide
(under domain conditions, in a conditional operand, gathers) are checked exactly elsewhere: by the
polyhedral bounds proof of the compiler and, in the reference evaluator, at every point.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from ..errors import TCBoundsError
from . import ast as A
from .checked import CheckedDef, CheckedStatement
from .ranges import Affine, IndexRange, affine_form, extreme
from .sizes import SizeExpr

__all__ = ["check_bounds", "refuse_outside_for_all_sizes", "subscripting_inputs", "unconditional_accesses"]


def unconditional_accesses(e: A.Expr) -> Iterator[A.Access]:
    """Accesses evaluated at every point: not inside a ``?:`` branch or a short-circuit operand."""
    stack = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, A.Access):
            yield node
        if isinstance(node, A.Select):
            stack.append(node.cond)
        elif isinstance(node, A.Binary) and node.op in ("&&", "||"):
            stack.append(node.lhs)
        else:
            stack.extend(A.children(node))


def _fmt(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


@dataclass(frozen=True)
class _Check:
    """One affine subscript of an access :func:`check_bounds` bounds: ``rest + sum(c * v)``."""

    tensor: str
    dim: int
    sub: A.Expr
    verb: str
    coeffs: tuple[tuple[str, int], ...]
    rest: SizeExpr


@dataclass(frozen=True)
class _Statement:
    """A statement without domain conditions: its ranges and the subscripts to bound."""

    st: CheckedStatement
    ranges: tuple[tuple[str, SizeExpr, SizeExpr], ...]
    checks: tuple[_Check, ...]


_PLANS: dict[int, tuple[weakref.ref, tuple[_Statement, ...]]] = {}


def _plan(cdef: CheckedDef) -> tuple[_Statement, ...]:
    """What :func:`check_bounds` evaluates for ``cdef`` at each call's sizes: the affine forms of
    its subscripts, found once per definition (a new batch size of a symbolic kernel binds again:
    the walk over the accesses would otherwise be most of the dispatch)."""
    found = _PLANS.get(id(cdef))
    if found is not None and found[0]() is cdef:
        return found[1]
    plan = tuple(
        _Statement(st, tuple((r.var, r.lo, r.hi) for r in st.ranges), _checks(cdef, st))
        for st in cdef.statements
        if not st.conditions
    )
    key = id(cdef)
    _PLANS[key] = (weakref.ref(cdef, lambda _: _PLANS.pop(key, None)), plan)
    return plan


def _checks(cdef: CheckedDef, st: CheckedStatement) -> tuple[_Check, ...]:
    """The affine subscripts of ``st``'s accesses that are always evaluated."""
    index_vars = {r.var for r in st.ranges}
    sizes = set(cdef.sizes)
    accesses = [(st.tensor, st.lhs, "writes")] if st.lhs else []
    accesses += [(a.tensor, a.args, "reads") for a in unconditional_accesses(st.rhs) if a.args]
    checks = []
    for tensor, subscripts, verb in accesses:
        for k, sub in enumerate(subscripts):
            aff = affine_form(sub, index_vars, sizes.__contains__, lambda t, d: cdef.tensor(t).shape[d])
            if aff is not None:
                checks.append(_Check(tensor, k, sub, verb, tuple(aff.coeffs), aff.rest))
    return tuple(checks)


def _check_statement(cdef: CheckedDef, plan: _Statement, sizes: Mapping[str, int], shapes) -> None:
    box = {v: (lo.evaluate(sizes), hi.evaluate(sizes)) for v, lo, hi in plan.ranges}
    if any(hi <= lo for lo, hi in box.values()):
        return  # no points: nothing is accessed
    for c in plan.checks:
        n = shapes[c.tensor][c.dim]
        lo = hi = c.rest.evaluate(sizes)
        for v, k in c.coeffs:
            a, b = box[v][0] * k, (box[v][1] - 1) * k
            lo, hi = lo + min(a, b), hi + max(a, b)
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise TCBoundsError(
                f"subscript {c.dim} of '{c.tensor}' {c.verb} element {bad}, outside [0, {n}), "
                f"at {_fmt(sizes)}",
                source=cdef.source,
                span=c.sub.span,
                where=cdef.name,
                hint="ranges: " + ", ".join(str(r) for r in plan.st.ranges),
            )


def check_bounds(cdef: CheckedDef, sizes: Mapping[str, int]) -> None:
    """Raise :class:`TCBoundsError` if an access of ``cdef`` leaves its tensor at ``sizes``."""
    shapes = {t.name: tuple(s.evaluate(sizes) for s in t.shape) for t in cdef.tensor_infos}
    for plan in _plan(cdef):
        _check_statement(cdef, plan, sizes, shapes)


def refuse_outside_for_all_sizes(
    st: CheckedStatement,
    ranges: Mapping[str, IndexRange],
    affine: Callable[[A.Expr], Affine | None],
    dim_size: Callable[[str, int], SizeExpr],
    error: Callable[[str, object, str | None], Exception],
) -> None:
    """At definition time, reject a subscript that leaves its tensor for *every* choice of sizes >= 1.

    Whether it does for the sizes of a particular call is proved when the call binds them
    (:func:`check_bounds`); this catches what can never run, before any call.
    """

    def refuse(tensor: str, subscripts, verb: str) -> None:
        for k, sub in enumerate(subscripts):
            aff = affine(sub)
            if aff is None:
                continue
            dim = dim_size(tensor, k)
            low, high = extreme(aff, ranges, upper=False), extreme(aff, ranges, upper=True)
            if low.bounds()[1] < 0:
                what = f"is negative (at most {low})"
            elif (high - dim).bounds()[0] >= 0:
                what = f"reaches {high}, at or beyond the size {dim} of dimension {k}"
            else:
                continue
            hint = "ranges: " + ", ".join(str(ranges[v]) for v in sorted(aff.vars)) if aff.vars else None
            raise error(
                f"subscript {k} of '{tensor}' {verb} outside the tensor for all sizes: it {what}",
                sub.span,
                hint,
            )

    if st.lhs:
        refuse(st.tensor, st.lhs, "writes")
    for acc in unconditional_accesses(st.rhs):
        if acc.args:
            refuse(acc.tensor, acc.args, "reads")


def subscripting_inputs(cdef: CheckedDef) -> dict[str, tuple[SizeExpr, ...]]:
    """The integer inputs whose values are used as subscripts, each with the extents of the
    dimensions it subscripts (in order of appearance, repeats left out).

    An input counts when it is read anywhere inside a subscript: an index tensor ``Idx`` in
    ``A(Idx(i))`` or ``A((Idx(i) + 1) % N)`` subscripts dimension 0 of ``A``; in ``LUT(J(I(b)), d)``
    both ``J`` and ``I`` subscript dimension 0 of ``LUT``, and ``I`` also dimension 0 of ``J``. So
    does a rank-0 integer argument in a subscript. Left-hand sides count (scatters), as do
    accesses under conditions: values that stay inside these extents can be read and written.

    >>> f = check_source("def f(float(V) A, int64(N) Idx) -> (O) { O(i) = A(Idx(i)) }").defs[0]
    >>> subscripting_inputs(f)
    {'Idx': (SizeExpr('V'),)}
    """

    integer = {name for name in cdef.params if cdef.param_type(name).kind in ("int", "uint")}
    found: dict[str, list[SizeExpr]] = {}

    def subscripted(tensor: str, subscripts) -> None:
        for sub, extent in zip(subscripts, cdef.tensor(tensor).shape):
            for node in A.walk(sub):
                if isinstance(node, A.Access):
                    name = node.tensor
                elif isinstance(node, A.Ident) and node.kind == "scalar":
                    name = node.name
                else:
                    continue
                if name in integer:
                    extents = found.setdefault(name, [])
                    if extent not in extents:
                        extents.append(extent)

    for st in cdef.statements:
        subscripted(st.tensor, st.lhs)
        for e in (*st.lhs, st.rhs):
            for acc in A.walk(e):
                if isinstance(acc, A.Access) and acc.args:
                    subscripted(acc.tensor, acc.args)
    return {name: tuple(extents) for name, extents in found.items()}
