"""Footprints of promotion: the box of the elements a scope iteration touches, and its copies.

:func:`footprint_box` gives per tensor dimension an offset (an affine function of the outer
schedule), a constant stride and a size; :func:`in_box` gives the box's elements back as a relation,
:func:`tensor_bounds` and :func:`clipped` keep the copies inside the tensor. :func:`aff_expr` writes
an offset as kernel IR, :func:`isl_text` in isl's syntax. Every function reads its arguments and
builds new values; a box always holds the footprint it was computed from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import islpy as isl

from ..polyhedral.errors import TCInternalError
from ..polyhedral.names import isl_name
from . import ir

__all__ = ["Box", "aff_expr", "clipped", "footprint_box", "in_box", "isl_text", "single_aff", "tensor_bounds"]


def _val(v: isl.Val) -> tuple[int, int]:
    """A rational ``Val`` as (numerator, denominator)."""
    return int(v.get_num_si()), int(v.get_den_val().to_python())


def aff_expr(aff: isl.Aff, names: Sequence[ir.Expr], params: Mapping[str, int | str]) -> ir.Expr:
    """Kernel IR for the quasi-affine ``aff``: its input dimensions are ``names``, its parameters
    take their values in ``params`` (by isl name: a number, or the C variable of a symbolic
    size); integer divisions are floors (``floordiv``)."""
    terms: list[tuple[int, int, ir.Expr]] = []  # (numerator, denominator, what it multiplies)
    for i in range(aff.dim(isl.dim_type.in_)):
        terms.append((*_val(aff.get_coefficient_val(isl.dim_type.in_, i)), names[i]))
    for i in range(aff.dim(isl.dim_type.param)):
        name = aff.get_dim_name(isl.dim_type.param, i)
        if name not in params:
            raise TCInternalError(f"parameter {name} has no value in {aff}")
        value = params[name]
        terms.append(
            (
                *_val(aff.get_coefficient_val(isl.dim_type.param, i)),
                ir.Var(value) if isinstance(value, str) else ir.Int(value),
            )
        )
    for i in range(aff.dim(isl.dim_type.div)):
        coefficient = _val(aff.get_coefficient_val(isl.dim_type.div, i))
        if coefficient[0]:  # a div is the floor of a rational affine form of the earlier ones
            terms.append((*coefficient, aff_expr(aff.get_div(i), names, params)))
    num, den = _val(aff.get_constant_val())
    common = math.lcm(den, *(d for _, d, _ in terms))
    out: ir.Expr = ir.Int(num * (common // den))
    for n, d, e in terms:
        c = n * (common // d)
        if c == 0:
            continue
        term = e if c == 1 else ir.Op("*", (ir.Int(c), e))
        out = term if out == ir.Int(0) else ir.Op("+", (out, term))
    return out if common == 1 else ir.Op("floordiv", (out, ir.Int(common)))


def isl_text(e: ir.Expr) -> str:
    """An expression :func:`aff_expr` built, in isl's syntax."""
    if isinstance(e, ir.Int):
        return str(e.value)
    if isinstance(e, ir.Var):
        return e.name
    a, b = (isl_text(x) for x in e.args)
    if e.op == "floordiv":
        return f"floor(({a}) / {b})"
    if e.op == "+":
        return f"({a}) + ({b})"
    if e.op == "*":  # aff_expr puts the constant first
        return f"{a} * ({b})"
    raise TCInternalError(f"not a quasi-affine form: {e}")


def single_aff(pa: isl.PwAff) -> isl.Aff | None:
    pieces = pa.coalesce().get_pieces()
    return pieces[0][1] if len(pieces) == 1 else None


@dataclass(frozen=True)
class Box:
    """The box of a footprint (:func:`footprint_box`): per tensor dimension an offset, an affine
    function on the scope's space, a constant stride and a size; buffer element ``k`` of element
    ``a`` is ``(a_k - offset_k) / stride_k``."""

    offsets: tuple[isl.Aff, ...]  # on the scope's space
    strides: tuple[int, ...]
    sizes: tuple[int, ...]


def footprint_box(footprint: isl.Map) -> Box | str:
    """The rectangular box of ``footprint`` (scope point -> elements), or why there is none.

    Per dimension, the offset is the lexicographic minimum when it is affine; where it is not
    (a last tile clipped at the tensor's start), any of its pieces that bounds it from below
    everywhere, the one giving the smallest size. The size spans every element from the offset.
    """
    offsets, strides, sizes = [], [], []
    n = footprint.dim(isl.dim_type.out)
    for i in range(n):
        mi = footprint.project_out(isl.dim_type.out, i + 1, n - i - 1).project_out(isl.dim_type.out, 0, i)
        stride = footprint.get_range_stride_info(i).get_stride()
        if not stride.is_int() or stride.is_zero():
            return "no constant stride"
        step = int(stride.to_python())
        lo = mi.lexmin_pw_multi_aff().get_pw_aff(0).coalesce()
        pieces = lo.get_pieces()
        best = None
        for _, aff in pieces:
            whole = isl.PwAff.from_aff(aff).intersect_domain(lo.domain())
            if len(pieces) > 1 and (step > 1 or not lo.domain().is_subset(lo.ge_set(whole))):
                continue  # a strided offset must be the minimum itself (the lattice)
            top = _largest(mi, aff)
            if top is not None and (best is None or top < best[1]):
                best = (aff, top)
        if best is None:
            return f"the offset of dimension {i} is not affine in the outer schedule"
        offsets.append(best[0])
        strides.append(step)
        sizes.append(best[1] // step + 1)
    return Box(tuple(offsets), tuple(strides), tuple(sizes))


def _largest(mi: isl.Map, offset: isl.Aff) -> int | None:
    """The largest ``a - offset(s)`` over ``mi`` (``s -> [a]``); None if unbounded."""
    space = mi.get_space()
    rel = (
        isl.MultiAff.range_map(space)
        .get_aff(0)
        .sub(offset.pullback_multi_aff(isl.MultiAff.domain_map(space)))
    )
    top = mi.wrap().max_val(rel)
    return int(top.to_python()) if top.is_int() else None


def in_box(footprint_space: isl.Space, box: Box) -> isl.Map:
    """The elements of the box of each scope point: ``{ s -> T[a] : 0 <= (a_k - offset_k(s)) /
    stride_k < size_k, exactly }``."""
    to_scope = isl.MultiAff.domain_map(footprint_space)
    to_element = isl.MultiAff.range_map(footprint_space)
    ctx = footprint_space.get_ctx()
    cond = isl.Set.universe(footprint_space.wrap())
    for k, (off, stride, size) in enumerate(zip(box.offsets, box.strides, box.sizes)):
        rel = to_element.get_aff(k).sub(off.pullback_multi_aff(to_scope))
        zero = isl.Aff.val_on_domain_space(rel.get_domain_space(), isl.Val.int_from_si(ctx, 0))
        top = isl.Aff.val_on_domain_space(
            rel.get_domain_space(), isl.Val.int_from_si(ctx, stride * (size - 1))
        )
        cond = cond.intersect(rel.ge_set(zero)).intersect(rel.le_set(top))
        if stride > 1:
            cond = cond.intersect(
                isl.Set.from_basic_set(rel.mod_val(isl.Val.int_from_si(ctx, stride)).zero_basic_set())
            )
    return cond.unwrap()


def tensor_bounds(tensor: str, shape: Sequence[int], ctx: isl.Context) -> isl.Set:
    """The elements of ``tensor`` (what the copies of a box are clipped to)."""
    names = [f"a{i}" for i in range(len(shape))]
    cons = " and ".join(f"0 <= {a} < {n}" for a, n in zip(names, shape))
    return isl.Set.read_from_str(ctx, f"{{ {isl_name(tensor)}[{', '.join(names)}] : {cons} }}")


def clipped(copies: Sequence[isl.Map | None], outer: isl.UnionSet, bounds: isl.Set) -> list[isl.Map | None]:
    """The copies (``s -> T[a]``, or None) at the scope's points ``outer``, clipped to the tensor.

    A read's access relation is not: a read under a guard (``i >= 1 ? T(i - 1) : 0``) reaches
    ``T[-1]`` in it though the program never evaluates it there (the bounds check of such a read
    runs as the kernel does). Its element is then in no copy, and its buffer element never read;
    copied in, it was read from outside the tensor (AddressSanitizer's heap-buffer-overflow in a
    fuzzed emulated kernel). A copy left empty is None: nothing to copy."""
    outer_set = isl.Set.from_union_set(outer)
    clipped = [None if c is None else c.intersect_domain(outer_set).intersect_range(bounds) for c in copies]
    return [None if c is None or c.is_empty() else c for c in clipped]
