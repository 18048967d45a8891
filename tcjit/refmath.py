"""Torch implementations of TC's builtin math functions, for the reference evaluator.

The reference evaluator is the oracle that compiled kernels are checked against, so these favour
accuracy over speed, and they follow the C99/CUDA math library exactly on special values (signed
zeros, infinities, NaN): no input value makes a function raise.

Every function takes tensors of one floating dtype (the statement's compute type: float32 or float64;
the caller computes half types in float32), broadcastable to each other, and returns a tensor of that
dtype with the broadcast shape. Inputs narrower than float64 are computed in float64 and rounded once
at the end, which makes the float32 results correctly rounded or within a hair of it. float64 inputs
are computed as accurately as torch allows. Where torch's own function is inexact, the function is
built here instead, mostly from error-free transformations (double-double arithmetic):

- ``j0 j1 y0 y1``: torch's port of Cephes drops the implicit leading 1 of Cephes' ``p1evl``
  denominators (1e-8 relative error near 5) and evaluates ``cos(x - pi/4)`` at a rounded argument
  (no correct digit left far from 0); here Cephes' rationals with glibc's phase computation.
- ``normcdf``: ``torch.special.ndtr`` cancels in the lower tail on the CPU (0 below -10).
- ``erfcx`` below 0, ``tgamma``, ``cbrt``, ``rsqrt``, ``fma``, the norms: torch has no accurate (or
  no) counterpart; ``fmod``: torch's vectorised CPU kernel returns NaN when ``x / y`` overflows.

float64 results are within about 2 ulps (Bessel functions: of their envelope, ~20 ulps of it for
``y0``, ``y1`` in [2, 5]); ``fma``, ``fmod``, ``remainder``, ``round``... are exact.

``FUNCTIONS`` maps every name of :data:`tcjit.polyhedral.lang.builtins.CUDA_BUILTINS`, plus the
``sigmoid`` extension, to its implementation; :func:`apply` calls one by name.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import refmath_exact as exact
from . import refmath_special as special

__all__ = ["FUNCTIONS", "apply"]

# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------


def _nextafter(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The next representable value after ``x`` towards ``y``, in the input dtype itself."""
    (x, y), _ = exact.prepare((x, y))
    return torch.nextafter(x, y)


def _torch(fn: Callable[..., torch.Tensor], doc: str) -> Callable[..., torch.Tensor]:
    """A float64 kernel that is a torch function whose C semantics need no adjustment."""

    def kernel(*args: torch.Tensor) -> torch.Tensor:
        return fn(*args)

    kernel.__doc__ = doc[0].upper() + doc[1:]
    return kernel


_KERNELS: dict[str, Callable[..., torch.Tensor]] = {
    "acos": _torch(torch.acos, "arc cosine (NaN outside [-1, 1])."),
    "acosh": _torch(torch.acosh, "inverse hyperbolic cosine (NaN below 1)."),
    "asin": _torch(torch.asin, "arc sine (NaN outside [-1, 1])."),
    "asinh": _torch(torch.asinh, "inverse hyperbolic sine."),
    "atan": _torch(torch.atan, "arc tangent."),
    "atan2": _torch(torch.atan2, "arc tangent of y / x in the quadrant of (x, y)."),
    "atanh": _torch(torch.atanh, "inverse hyperbolic tangent (±inf at ±1)."),
    "cbrt": exact.cbrt,
    "ceil": _torch(torch.ceil, "round towards +inf."),
    "copysign": _torch(torch.copysign, "|x| with the sign of y."),
    "cos": _torch(torch.cos, "cosine."),
    "cosh": _torch(torch.cosh, "hyperbolic cosine."),
    "cospi": exact.cospi,
    "cyl_bessel_i0": special.cyl_bessel_i0,
    "cyl_bessel_i1": special.cyl_bessel_i1,
    "erfc": _torch(torch.erfc, "complementary error function."),
    "erfcinv": special.erfcinv,
    "erfcx": special.erfcx,
    "erf": _torch(torch.erf, "error function."),
    "erfinv": special.erfinv,
    "exp10": exact.exp10,
    "exp2": _torch(torch.exp2, "2 ** x."),
    "exp": _torch(torch.exp, "e ** x."),
    "expm1": _torch(torch.expm1, "e ** x - 1, accurate near 0."),
    "fabs": _torch(torch.abs, "absolute value."),
    "fdim": exact.fdim,
    "fdivide": _torch(torch.div, "x / y."),
    "floor": _torch(torch.floor, "round towards -inf."),
    "fmax": _torch(torch.fmax, "maximum, ignoring a NaN operand."),
    "fmin": _torch(torch.fmin, "minimum, ignoring a NaN operand."),
    "fmod": exact.fmod,
    "hypot": exact.hypot,
    "j0": special.j0,
    "j1": special.j1,
    "lgamma": _torch(torch.lgamma, "log |Gamma(x)| (+inf at non-positive integers)."),
    "log10": _torch(torch.log10, "base-10 logarithm."),
    "log1p": _torch(torch.log1p, "log(1 + x), accurate near 0."),
    "log2": _torch(torch.log2, "base-2 logarithm."),
    "logb": exact.logb,
    "log": _torch(torch.log, "natural logarithm (-inf at ±0, NaN below 0)."),
    "norm3d": exact.norm3d,
    "norm4d": exact.norm4d,
    "normcdf": special.normcdf,
    "normcdfinv": special.normcdfinv,
    "pow": exact.pow,
    "rcbrt": exact.rcbrt,
    "remainder": exact.remainder,
    "rhypot": exact.rhypot,
    "rnorm3d": exact.rnorm3d,
    "rnorm4d": exact.rnorm4d,
    "round": exact.round,
    "rsqrt": exact.rsqrt,
    "sin": _torch(torch.sin, "sine."),
    "sinh": _torch(torch.sinh, "hyperbolic sine."),
    "sinpi": exact.sinpi,
    "sqrt": _torch(torch.sqrt, "square root (NaN below 0, sqrt(-0) = -0)."),
    "tan": _torch(torch.tan, "tangent."),
    "tanh": _torch(torch.tanh, "hyperbolic tangent."),
    "tgamma": special.tgamma,
    "trunc": _torch(torch.trunc, "round towards zero."),
    "y0": special.y0,
    "y1": special.y1,
    "sigmoid": exact.sigmoid,
}

# Cheaper kernels for float32 (and narrower) arguments.
_NARROW: dict[str, Callable[..., torch.Tensor]] = {
    "tgamma": special.tgamma_narrow,
    "hypot": exact.norm_narrow,
    "norm3d": exact.norm_narrow,
    "norm4d": exact.norm_narrow,
    "rhypot": exact.rnorm_narrow,
    "rnorm3d": exact.rnorm_narrow,
    "rnorm4d": exact.rnorm_narrow,
}

FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    name: exact.wide(name, kernel, _NARROW.get(name)) for name, kernel in _KERNELS.items()
}
FUNCTIONS["fma"] = exact.fma
FUNCTIONS["nextafter"] = _nextafter


def apply(name: str, *args: torch.Tensor) -> torch.Tensor:
    """Evaluate builtin ``name`` on ``args`` (tensors of one floating dtype, broadcastable)."""
    try:
        function = FUNCTIONS[name]
    except KeyError:
        raise KeyError(f"no builtin named {name!r}") from None
    return function(*args)
