"""Tuning for a range of sizes: what :func:`tcjit.autotune` does with ``size_ranges``.

``autotune(kernel, *inputs, size_ranges={"B": (1, 64)})`` (``tcjit tune --sizes B=1..64,...``)
tunes the kernel with the sizes named left symbolic, as a kernel whose batch size changes runs
(:mod:`tcjit.dynamic`):

* **Bounds** are inclusive, ``1 <= lo <= hi <= 2**31 - 1``: a symbolic kernel serves every value
  in that range (a size of 0 always gets a specialisation of its own). The inputs are given at
  the upper bounds (or above: they are cut down).
* **One compilation per candidate.** Each candidate is compiled once as a symbolic kernel mapped
  at the upper bounds (the representative sizes), then checked against the oracle and timed at
  each :func:`sample_points` point: the upper bounds, the lower bounds and two points between
  them, a third and two thirds of the way in log scale (``B=1..64``: 64, 16, 4, 1). With several
  ranges, each point takes every range at the same fraction.
* **Fitness** is the geometric mean of the points' times. Divided by the default options' time
  at each point, every point would weigh alike, small sizes as much as large ones; since those
  divisors are the same for every candidate, the geometric mean of the plain times ranks the
  candidates alike and stays in seconds (the database's ``time`` and ``baseline`` are such
  means, and their ratio is the geometric mean of the per-point speed-ups).
* **Stored** under :func:`tcjit.tuned.range_key`: the symbolic sizes with their bounds, not their
  values. A kernel with those sizes symbolic uses it for its family when every call of the
  family seen lies in the ranges (:func:`tcjit.tuned.lookup_range_options`).

Inputs at the other points are the given inputs cut down: a dimension that is a range size is
sliced to its first ``n`` entries; a dimension that is an expression of one (``2 * B``) cannot be
cut and is refused. Integer inputs keep their values: indices into a range size must hold at its
lower bound. A tensor whose shape has a range size is tuned contiguous (copied if it is not), as
symbolic kernels take it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .dynamic import SYMBOLIC_TARGETS, Family, family_of, mentions
from .mapping.accumulation import long_sums
from .mapping.layout import MAX_SYMBOLIC_SIZE
from .polyhedral.errors import TCInternalError, TCOptionsError

__all__ = ["RangePlan", "describe_ranges", "geometric_mean", "range_plan", "sample_points", "sample_values"]

#: Where the points between the bounds lie, as fractions of the way from the lower to the upper
#: bound in log scale.
INNER_FRACTIONS = (2 / 3, 1 / 3)
_FRACTIONS = (1.0, *INNER_FRACTIONS, 0.0)


def _at(lo: int, hi: int, fraction: float) -> int:
    """The value ``fraction`` of the way from ``lo`` to ``hi`` in log scale, rounded."""
    return round(lo * (hi / lo) ** fraction)


@dataclass(frozen=True)
class RangePlan:
    """A range tune's sizes and inputs (:func:`range_plan`).

    :ivar ranges: the inclusive bounds per symbolic size, ``{"B": (1, 64)}``.
    :ivar points: the sizes of each sample point, the upper bounds first (every size, the fixed
        ones included).
    :ivar inputs: the inputs at each point, in the order of ``points``.
    :ivar family: the :class:`~tcjit.dynamic.Family` of the calls in range.
    """

    ranges: dict[str, tuple[int, int]]
    points: tuple[dict[str, int], ...]
    inputs: tuple[tuple, ...]
    family: Family


def sample_values(lo: int, hi: int) -> list[int]:
    """The values of one range a tune measures at: ``hi``, the points a third and two thirds of
    the way down in log scale (rounded), and ``lo``; no value twice.

    >>> sample_values(1, 64)
    [64, 16, 4, 1]
    """
    return list(dict.fromkeys(_at(lo, hi, f) for f in _FRACTIONS))


def sample_points(ranges: Mapping[str, tuple[int, int]], fixed: Mapping[str, int]) -> list[dict[str, int]]:
    """The sizes of each point a range tune measures at (:func:`sample_values`, every range at
    the same fraction), the upper bounds first, no point twice; ``fixed``: the other sizes."""
    points = []
    for f in _FRACTIONS:
        point = {**fixed, **{n: _at(lo, hi, f) for n, (lo, hi) in ranges.items()}}
        if point not in points:
            points.append(point)
    return points


def geometric_mean(values: Sequence[float]) -> float:
    """The geometric mean of positive ``values``."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


def describe_ranges(plan: RangePlan) -> str:
    """``B=1..64 (at 64, 16, 4, 1)``: the ranges and where they are sampled, for people."""
    return ", ".join(
        f"{n}={lo}..{hi} (at {', '.join(str(p[n]) for p in plan.points)})"
        for n, (lo, hi) in plan.ranges.items()
    )


def _checked_ranges(cdef, size_ranges: object) -> dict[str, tuple[int, int]]:
    """``size_ranges`` as ``{name: (lo, hi)}``, each a size of ``cdef`` with
    ``1 <= lo <= hi <= 2**31 - 1``."""
    if not isinstance(size_ranges, Mapping) or not size_ranges:
        raise TCOptionsError(
            f"autotune: size_ranges must map size names to (lo, hi) bounds, e.g. {{'B': (1, 64)}}, "
            f"got {size_ranges!r}"
        )
    out = {}
    for name, bounds in size_ranges.items():
        if name not in cdef.sizes:
            raise TCOptionsError(
                f"autotune: size_ranges names {name!r}, which is not a size of {cdef.name} "
                f"(its sizes: {', '.join(cdef.sizes) or 'none'})"
            )
        if (
            not isinstance(bounds, Sequence)
            or len(bounds) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in bounds)
        ):
            raise TCOptionsError(
                f"autotune: the range of {name} must be two integers (lo, hi), both included; got {bounds!r}"
            )
        lo, hi = bounds
        if lo < 1:
            raise TCOptionsError(
                f"autotune: the range {name}={lo}..{hi} starts below 1: a symbolic size serves values "
                "from 1 (a size of 0 always gets a specialisation of its own)",
                hint=f"start it at 1: {name}=1..{hi}",
            )
        if hi > MAX_SYMBOLIC_SIZE:
            raise TCOptionsError(
                f"autotune: the range {name}={lo}..{hi} ends above {MAX_SYMBOLIC_SIZE}: a symbolic size "
                f"serves values up to {MAX_SYMBOLIC_SIZE} (2**31 - 1)",
                hint=f"end it at {MAX_SYMBOLIC_SIZE} or below",
            )
        if lo > hi:
            raise TCOptionsError(
                f"autotune: the range {name}={lo}..{hi} is empty: its lower bound exceeds its upper bound",
                hint=f"write it lower bound first: {name}={hi}..{lo}",
            )
        out[name] = (lo, hi)
    return out


def _cut(cdef, inputs: Sequence[object], point: Mapping[str, int], names: frozenset[str]) -> tuple:
    """``inputs`` (at the upper bounds or above) cut down to the sizes of ``point``."""
    import torch

    out = []
    for p, x in zip(cdef.params, inputs):
        if isinstance(x, torch.Tensor) and mentions(cdef, p, names):
            for d, e in enumerate(cdef.tensor(p).shape):
                if not e.symbols().isdisjoint(names):
                    x = x.narrow(d, 0, point[str(e)])
            x = x.contiguous()
        out.append(x)
    return tuple(out)


def range_plan(kernel, binding, inputs: Sequence[object], size_ranges: object, target: str) -> RangePlan:
    """Check ``size_ranges`` for a tune of ``kernel`` on ``inputs`` (``binding``: their sizes) on
    ``target``, and plan it: the sample points and the inputs at each.

    :raises TCOptionsError: bounds that are not ``1 <= lo <= hi`` integers, a name that is not a
        size, a size that cannot be symbolic here (a target without symbolic kernels, a kernel
        defined with ``dynamic=False``, an input whose dimension is an expression of it), inputs
        smaller than the upper bounds, or a range whose sums are long (float64 accumulation) at
        one end and not at the other.
    """
    cdef = kernel.definition
    ranges = _checked_ranges(cdef, size_ranges)
    names = frozenset(ranges)
    shown = ", ".join(f"{n}={lo}..{hi}" for n, (lo, hi) in ranges.items())
    if target not in SYMBOLIC_TARGETS:
        raise TCOptionsError(
            f"autotune: size ranges ({shown}) are tuned as symbolic sizes, which the {target} target "
            f"does not have (only {', '.join(sorted(SYMBOLIC_TARGETS))})",
            hint="tune this target at concrete sizes",
        )
    if kernel.dynamic is False:
        raise TCOptionsError(
            f"autotune: {cdef.name} was defined with dynamic=False: its sizes are never symbolic, so "
            f"options tuned for a range ({shown}) would never be used",
            hint="define it with dynamic=None (the default), True or the names of the sizes",
        )
    for n, (_, hi) in ranges.items():
        if binding.sizes[n] < hi:
            raise TCOptionsError(
                f"autotune: the inputs have {n}={binding.sizes[n]}, below the range's upper bound "
                f"({n}={ranges[n][0]}..{hi})",
                hint=f"pass inputs at {n}={hi} (or more: they are cut down to each size measured)",
            )
    for p in cdef.params:
        for e in cdef.tensor(p).shape if p not in cdef.scalars else ():
            if not e.symbols().isdisjoint(names) and str(e) not in names:
                raise TCOptionsError(
                    f"autotune: input {p} has the dimension {e}, an expression of a size with a range "
                    f"({shown}): a range tune cuts inputs down along dimensions that are a size",
                    hint="tune at concrete sizes instead",
                )
    fixed = {n: v for n, v in binding.sizes.items() if n not in names}
    points = [{n: p[n] for n in cdef.sizes} for p in sample_points(ranges, fixed)]  # in the signature's order
    cut = tuple(_cut(cdef, inputs, point, names) for point in points)
    family = family_of(cdef, points[0], cut[0], None, names)
    if family is None:  # sizes >= 1 and contiguous tensors: a family
        raise TCInternalError(f"autotune: no family of symbolic sizes for {shown}")
    low = {**fixed, **{n: lo for n, (lo, _) in ranges.items()}}
    if long_sums(cdef, low, names) != family.long_sums:
        raise TCOptionsError(
            f"autotune: the range {shown} holds sums shorter and longer than 16384 terms, which "
            "symbolic kernels accumulate differently (float64 from 16384 terms on): two kernels",
            hint="tune two ranges, split where the sums reach 16384 terms",
        )
    return RangePlan(ranges, tuple(points), cut, family)
