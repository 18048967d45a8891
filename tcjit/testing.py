"""Helpers for checking kernels: random inputs for any definition, tolerances per dtype, comparison
with the oracle."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence

import torch

from .binding import torch_dtype
from .polyhedral.errors import TCCallError
from .polyhedral.lang.checked import CheckedDef

__all__ = ["compare_outputs", "index_ranges", "random_inputs", "reduction_length", "tolerance"]


def index_ranges(cdef: CheckedDef, sizes: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """``[low, high)`` for every integer input whose values are used as subscripts
    (:func:`tcjit.polyhedral.lang.bounds.subscripting_inputs`): ``[0, n)`` with ``n`` the smallest
    extent, at ``sizes``, of the dimensions it subscripts, so that random values stay inside
    every tensor they index (``[0, 0)`` when one of those dimensions is empty).

    >>> index_ranges(embedding.definition, {"V": 100, "D": 8, "N": 4})
    {'Idx': (0, 100)}
    """
    from .polyhedral.lang.bounds import subscripting_inputs

    return {
        name: (0, max(0, min(int(e.evaluate(sizes)) for e in extents)))
        for name, extents in subscripting_inputs(cdef).items()
    }


def random_inputs(
    cdef: CheckedDef,
    sizes: Mapping[str, int],
    *,
    device: str | torch.device = "cpu",
    seed: int = 0,
    ranges: Mapping[str, tuple[int, int]] | None = None,
) -> tuple:
    """Deterministic random inputs for ``cdef`` at ``sizes``.

    Floats are standard normal, bools fair coins; integers used as subscripts are drawn from
    :func:`index_ranges`, other signed integers from [-8, 8), unsigned ones from [0, 16); scalar
    arguments are Python numbers drawn the same way.

    :arg ranges: ``[low, high)`` for some integer inputs by name, instead of the above.
    """
    missing = [s for s in cdef.sizes if s not in sizes]
    if missing:
        raise TCCallError(f"{cdef.name} needs sizes for {', '.join(missing)}")
    ranges = {**index_ranges(cdef, sizes), **(ranges or {})}
    g = torch.Generator().manual_seed(seed)
    out = []
    for name in cdef.params:
        if name in cdef.scalars:
            t = cdef.scalars[name].dtype
            shape: tuple[int, ...] = ()
        else:
            info = cdef.tensor(name)
            t = info.dtype
            shape = tuple(s.evaluate(sizes) for s in info.shape)
        if t.is_float:
            x = torch.randn(shape, generator=g, dtype=torch.float64)
        elif t.kind == "bool":
            x = torch.randint(0, 2, shape, generator=g) == 1
        elif name in ranges:
            low, high = ranges[name]
            x = (
                torch.randint(low, high, shape, generator=g)
                if high > low
                else torch.zeros(shape, dtype=torch.int64)
            )
        elif t.kind == "uint":
            x = torch.randint(0, 16, shape, generator=g)
        else:
            x = torch.randint(-8, 8, shape, generator=g)
        if name in cdef.scalars:
            out.append(x.item())
        else:
            out.append(x.to(torch_dtype(t)).to(device))
    return tuple(out)


def tolerance(dtype: torch.dtype, reduction_length: int = 1) -> dict[str, float]:
    """``rtol``/``atol`` for comparing a kernel with the oracle, growing with the reduction length."""
    scale = max(1.0, reduction_length) ** 0.5
    if dtype in (torch.float16, torch.bfloat16):
        eps = 1e-3 if dtype == torch.float16 else 8e-3
        return {"rtol": 2 * eps, "atol": 2 * eps * scale}
    if dtype == torch.float32:
        return {"rtol": 1e-5 * scale, "atol": 1e-5 * scale}
    if dtype == torch.float64:
        return {"rtol": 1e-12 * scale, "atol": 1e-12 * scale}
    return {"rtol": 0.0, "atol": 0.0}


@contextlib.contextmanager
def emulation_order(order: str) -> Iterator[None]:
    """Within the block, calls with ``target="cuda-emulated"`` run the CUDA kernels' blocks and
    threads in ``order``: ``"forward"`` (the default), ``"reversed"`` or ``"shuffled"``.

    A mapping that lets two threads or blocks touch one element without a barrier between them
    gives different results in different orders::

        with tcjit.testing.emulation_order("reversed"):
            y = kernel(x, target="cuda-emulated")
    """
    from .cpu_specialization import EMULATION_ORDER
    from .mapping.emulation import ORDERS

    if order not in ORDERS:
        raise TCCallError(f"unknown emulation order {order!r}; expected one of {', '.join(ORDERS)}")
    token = EMULATION_ORDER.set(ORDERS.index(order))
    try:
        yield
    finally:
        EMULATION_ORDER.reset(token)


def reduction_length(cdef, sizes: Mapping[str, int]) -> int:
    """The longest reduction of ``cdef`` at ``sizes`` (for tolerances)."""
    longest = 1
    for st in cdef.statements:
        n = math.prod(
            max(0, r.hi.evaluate(sizes) - r.lo.evaluate(sizes))
            for r in st.ranges
            if r.var in st.reduction_vars
        )
        longest = max(longest, n)
    return longest


def compare_outputs(got: Sequence, want: Sequence, reduction_length: int) -> tuple[float, bool]:
    """(largest absolute difference, whether every output is within the tolerance of its dtype)."""
    worst, ok = 0.0, True
    for g, w in zip(got, want):
        if g.shape != w.shape:
            return math.inf, False
        if g.numel() == 0:
            continue
        w = w.to(g.dtype)
        if g.dtype.is_floating_point:
            tol = tolerance(g.dtype, reduction_length)
            ok &= bool(torch.allclose(g, w, equal_nan=True, **tol))
            diff = (g.double() - w.double()).abs()
            both_nan = g.isnan() & w.isnan()
            diff = torch.where(both_nan, torch.zeros_like(diff), diff.nan_to_num(nan=math.inf))
            worst = max(worst, float(diff.max()))
        else:
            ok &= bool(torch.equal(g, w))
            if g.dtype != torch.bool:
                worst = max(worst, float((g.double() - w.double()).abs().max()))
            elif not torch.equal(g, w):
                worst = max(worst, 1.0)
    return worst, ok
