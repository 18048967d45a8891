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

import math
from collections.abc import Callable
from functools import reduce

import torch

__all__ = ["FUNCTIONS", "apply"]

_F64 = torch.float64
_I64 = torch.int64
_INF = math.inf
_NAN = math.nan
_PI_HI = math.pi  # pi = _PI_HI + _PI_LO to about 2**-107
_PI_LO = 1.2246467991473532e-16
_SQRT1_2_HI = 0.7071067811865476  # sqrt(1/2) = _SQRT1_2_HI + _SQRT1_2_LO
_SQRT1_2_LO = -4.833646656726457e-17
_INV_SQRT_PI = 0.5641895835477563
_EULER_GAMMA = 0.5772156649015329
_TWO_OVER_PI = 0.6366197723675814


# --------------------------------------------------------------------------------------------------
# Error-free transformations and exact scaling (float64 tensors)
# --------------------------------------------------------------------------------------------------


def _two_sum(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, e)`` with ``s = fl(a + b)`` and ``a + b = s + e`` exactly (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """TwoSum for ``|a| >= |b|`` (or ``a == 0``): renormalises a double-double ``a + b``."""
    s = a + b
    return s, b - (s - a)


def _split(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Veltkamp's split of a double into two 26-bit halves (exact for ``|a| < 2**996``)."""
    t = 134217729.0 * a  # 2**27 + 1
    hi = t - (t - a)
    return hi, a - hi


def _two_prod(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p, e)`` with ``p = fl(a * b)`` and ``a * b = p + e`` exactly (Dekker's product).

    Exact while nothing overflows or underflows: ``|a|, |b| < 2**996`` and ``|a * b| > 2**-969``.
    """
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _add_odd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` rounded to odd: exact if representable, else the neighbour with an odd last bit.

    Rounding to odd in 53 bits and then to nearest in at most 51 bits is the same as rounding the
    exact value to nearest once (Boldo and Melquiond), which is how double roundings are avoided.
    """
    s, e = _two_sum(a, b)
    even = (s.view(_I64) & 1) == 0
    bump = (e != 0) & even & torch.isfinite(s)
    return torch.where(bump, torch.nextafter(s, torch.where(e > 0, _INF, -_INF).to(s.dtype)), s)


def _pow2(k: torch.Tensor) -> torch.Tensor:
    """``2.0 ** k`` for an integer tensor, exactly (subnormal powers included; 0 below 2**-1074)."""
    k = k.to(_I64)
    normal = ((k.clamp(-1022, 1023) + 1023) << 52).view(_F64)
    subnormal = (torch.ones_like(k) << (k + 1074).clamp(0, 51)).view(_F64)
    return torch.where(k >= -1022, normal, torch.where(k >= -1074, subnormal, 0.0))


def _ldexp(x: torch.Tensor, k: torch.Tensor | int) -> torch.Tensor:
    """``x * 2**k`` with a single rounding, for any integer ``k`` (``torch.ldexp`` overflows 2**k)."""
    if isinstance(k, int):
        k = torch.full_like(x, k, dtype=_I64)
    m, e = torch.frexp(x)  # x = m * 2**e, 0.5 <= |m| < 1
    big = e.to(_I64) + k  # the result is m * 2**big
    normal = (m * 2.0) * _pow2((big - 1).clamp(-1022, 1023))
    normal = torch.where(big > 1024, m * _INF, normal)
    tiny = (m * 2.0**-1000) * _pow2((big + 1000).clamp(-1075, 0))  # one rounding, into subnormals
    out = torch.where(big >= -1021, normal, tiny)
    return torch.where(torch.isfinite(x) & (x != 0), out, x)


def _exponent(x: torch.Tensor) -> torch.Tensor:
    """``floor(log2(|x|))`` of finite nonzero ``x`` as an int64 tensor (subnormals exact)."""
    return torch.frexp(x)[1].to(_I64) - 1


# --------------------------------------------------------------------------------------------------
# Dtype handling
# --------------------------------------------------------------------------------------------------


def _prepare(args: tuple[torch.Tensor, ...]) -> tuple[list[torch.Tensor], torch.dtype]:
    """Broadcast the arguments and find their (common) floating dtype."""
    if not args:
        raise TypeError("a builtin needs at least one argument")
    dtype = reduce(torch.promote_types, (a.dtype for a in args))
    if not dtype.is_floating_point:
        raise TypeError(f"builtins take floating tensors, not {dtype}")
    return [a.to(dtype) for a in torch.broadcast_tensors(*args)], dtype


def _wide(
    name: str, kernel: Callable[..., torch.Tensor], narrow: Callable[..., torch.Tensor] | None = None
) -> Callable[..., torch.Tensor]:
    """Wrap float64 kernels: broadcast, compute in float64, round once to the input dtype.

    ``narrow``, if given, is a cheaper float64 kernel that is accurate enough for narrower results.
    """

    def function(*args: torch.Tensor) -> torch.Tensor:
        xs, dtype = _prepare(args)
        chosen = kernel if dtype == _F64 or narrow is None else narrow
        return chosen(*(x.to(_F64) for x in xs)).to(dtype)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = kernel.__doc__
    return function


# --------------------------------------------------------------------------------------------------
# Elementary functions
# --------------------------------------------------------------------------------------------------


def _cbrt(x: torch.Tensor) -> torch.Tensor:
    """Real cube root (``cbrt(-8) = -2``): ``pow`` then one Newton step with an exact residual."""
    a = x.abs()
    tiny, huge = a < 2.0**-900, a > 2.0**900
    s = torch.where(tiny, a * 2.0**600, torch.where(huge, a * 2.0**-600, a))  # exact scaling
    y = s.pow(1.0 / 3.0)
    p1, e1 = _two_prod(y, y)
    p2, e2 = _two_prod(p1, y)  # y**3 = p2 + e2 + e1 * y (to 2**-106)
    y = y + (((s - p2) - e2) - e1 * y) / (3.0 * y * y)
    y = torch.where(tiny, y * 2.0**-200, torch.where(huge, y * 2.0**200, y))
    return torch.where(torch.isfinite(x) & (x != 0), torch.copysign(y, x), x)


def _rcbrt(x: torch.Tensor) -> torch.Tensor:
    """``1 / cbrt(x)``: ``rcbrt(±0) = ±inf``, ``rcbrt(±inf) = ±0``."""
    return 1.0 / _cbrt(x)


def _rsqrt(x: torch.Tensor) -> torch.Tensor:
    """``1 / sqrt(x)`` with one Newton step on an exact residual (``rsqrt(-0) = -inf``)."""
    m, e = torch.frexp(x)
    e = e.to(_I64)
    odd = (e & 1) != 0
    m = torch.where(odd, m * 2.0, m)  # x = m * 2**e with e even and 0.5 <= m < 2
    e = torch.where(odd, e - 1, e)
    y = 1.0 / torch.sqrt(m)
    p, pe = _two_prod(y, y)
    q, qe = _two_prod(p, m)  # m * y * y = q + qe + pe * m
    y = y + 0.5 * y * (((1.0 - q) - qe) - pe * m)
    y = y * _pow2(-(e >> 1))
    return torch.where((x > 0) & torch.isfinite(x), y, 1.0 / torch.sqrt(x))


def _exp10(x: torch.Tensor) -> torch.Tensor:
    """``10 ** x``."""
    return torch.pow(10.0, x)


def _logb(x: torch.Tensor) -> torch.Tensor:
    """The binary exponent ``floor(log2(|x|))`` as a float: ``logb(0) = -inf``, ``logb(±inf) = inf``."""
    e = _exponent(x).to(_F64)
    return torch.where(x == 0, -_INF, torch.where(torch.isfinite(x), e, x.abs()))


def _pow(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """C ``pow``: ``pow(x, ±0) = 1`` and ``pow(1, y) = 1`` even for NaN; ``pow(-8, 1/3)`` is NaN."""
    r = torch.pow(x, y)
    r = torch.where((x == -1) & torch.isinf(y), 1.0, r)
    return torch.where((y == 0) | (x == 1), 1.0, r)


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    """``1 / (1 + exp(-x))``, evaluated so that neither tail overflows."""
    e = torch.exp(-x.abs())
    return torch.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


# --------------------------------------------------------------------------------------------------
# Rounding and remainders (all exact)
# --------------------------------------------------------------------------------------------------


def _round(x: torch.Tensor) -> torch.Tensor:
    """Round half away from zero (C ``round``; ``torch.round`` rounds half to even)."""
    t = torch.trunc(x)
    return torch.where((x - t).abs() >= 0.5, t + torch.copysign(torch.ones_like(x), x), t)


def _fdim(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Positive difference: ``x - y`` if ``x > y``, else ``+0``; NaN if either is NaN."""
    r = torch.where(x > y, x - y, 0.0)
    return torch.where(torch.isnan(x) | torch.isnan(y), _NAN, r)


def _fmod(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """C ``fmod``: ``x - trunc(x / y) * y`` with the sign of ``x``, exact.

    torch's vectorised CPU kernel returns NaN where ``x / y`` overflows (exponents more than ~1023
    apart); there ``x`` is first reduced modulo ``y * 2**k``, a multiple of ``y`` (also exact), with
    ``k`` chosen so that each reduction's quotient stays below ``2**1000`` (at most two rounds).
    """
    ok = torch.isfinite(x) & torch.isfinite(y) & (x != 0) & (y != 0)
    for _ in range(3):
        k = _exponent(x) - _exponent(y) - 1000
        far = (k > 0) & ok
        if not far.any():
            break
        x = torch.where(far, torch.fmod(x, _ldexp(y.abs(), torch.where(far, k, 0))), x)
    return torch.fmod(x, y)


def _remainder(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """IEEE 754 remainder ``x - n * y`` with ``n`` the quotient rounded half to even (exact).

    As fdlibm: ``r = |fmod(x, 2|y|)|`` lies in ``[0, 2|y|)``; subtract ``|y|`` at most twice (the
    subtractions are exact by Sterbenz' lemma) and give the result the sign of ``x``. NaN when
    ``y == 0`` or ``x`` is infinite; ``x`` when ``y`` is infinite.
    """
    p = y.abs()
    r = _fmod(x, p + p).abs()  # fmod(x, inf) = x when 2|y| overflows
    first = r + r > p
    r = torch.where(first, r - p, r)
    r = torch.where(first & (r + r >= p), r - p, r)
    return torch.where(torch.signbit(x), -r, r)


# --------------------------------------------------------------------------------------------------
# Fused multiply-add, norms
# --------------------------------------------------------------------------------------------------


def _fma64(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``a * b + c`` rounded once, in float64 (torch has no fused multiply-add).

    The operands are scaled by powers of two so that Dekker's product cannot overflow or underflow,
    the three-term sum is rounded correctly with Boldo and Melquiond's round-to-odd algorithm, and
    the result is scaled back with one rounding. Correctly rounded except possibly for a result in
    ``[2**-1023, 2**-1022)`` (a subnormal with 52 bits), where a tie may go to the wrong side.
    """
    ma, ea = torch.frexp(a)
    mb, eb = torch.frexp(b)
    k = ea.to(_I64) + eb.to(_I64)  # a * b = ma * mb * 2**k, 0.25 <= |ma * mb| < 1
    cs = _ldexp(c, -k)
    c_dominates = cs.abs() > 2.0**600  # |a * b| < 2**-600 |c|: the sum rounds to c
    cs = torch.where((cs.abs() < 2.0**-600) & (c != 0), torch.copysign(torch.full_like(c, 2.0**-700), c), cs)
    uh, ul = _two_prod(ma, mb)
    th, tl = _two_sum(cs, ul)
    vh, vl = _two_sum(uh, th)
    v = _add_odd(tl, vl)
    near = _ldexp(vh + v, k)
    odd = _ldexp(_add_odd(vh, v), k)  # rounded to odd first: one correct rounding into subnormals
    r = torch.where(near.abs() < 2.0**-1022, odd, near)
    r = torch.where(c_dominates, c, r)
    naive = a * b + c
    special = ~(torch.isfinite(a) & torch.isfinite(b) & torch.isfinite(c)) | (a == 0) | (b == 0)
    r = torch.where(special, naive, r)
    # a * b may overflow where the exact product is finite: fma(huge, huge, -inf) is -inf.
    return torch.where(torch.isfinite(a) & torch.isfinite(b) & torch.isinf(c), c, r)


def _fma(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``x * y + z`` with a single rounding (C ``fma``)."""
    (x, y, z), dtype = _prepare((x, y, z))
    if dtype == _F64:
        return _fma64(x, y, z)
    # Narrower types: the product is exact in float64; the sum rounded to odd in 53 bits then to
    # nearest in 24 bits (or fewer) is the correctly rounded fma.
    x, y, z = x.to(_F64), y.to(_F64), z.to(_F64)
    return _add_odd(x * y, z).to(dtype)


def _norm_dd(*xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``sqrt(sum(x**2))`` as ``(hi + lo) * 2**e`` without overflow or underflow.

    Returns ``(hi, lo, e, special)``: ``special`` holds the C result where it is not computed
    (``inf`` if any argument is infinite, even if another is NaN; else NaN; 0 when all are 0).
    """
    a = [x.abs() for x in xs]
    m = reduce(torch.maximum, a)  # propagates NaN
    e = torch.where(torch.isfinite(m) & (m != 0), _exponent(m) + 1, 0)
    half = (-e) >> 1
    s1, s2 = _pow2(half), _pow2(-e - half)  # 2**-e in two representable factors
    hi = torch.zeros_like(m)
    lo = torch.zeros_like(m)
    for ai in a:
        # The largest becomes [0.5, 1) exactly, so no square overflows; only arguments below 2**-1000
        # of it can lose bits, and their squares do not matter.
        b = ai * s1 * s2
        p, pe = _two_prod(b, b)
        hi, s = _two_sum(hi, p)
        lo = lo + (s + pe)
    hi, lo = _fast_two_sum(hi, lo)
    r = torch.sqrt(hi)
    r2, r2e = _two_prod(r, r)
    rl = (((hi - r2) - r2e) + lo) / (2.0 * r)
    r, rl = _fast_two_sum(r, rl)
    any_inf = reduce(torch.logical_or, [torch.isinf(ai) for ai in a])
    special = torch.where(any_inf, _INF, torch.where(m == 0, 0.0, _NAN))
    return r, rl, e, special


def _norm(*xs: torch.Tensor) -> torch.Tensor:
    """Euclidean norm ``sqrt(x0**2 + x1**2 + ...)`` without spurious overflow (hypot, norm3d...)."""
    hi, lo, e, special = _norm_dd(*xs)
    ok = torch.isfinite(hi) & (hi != 0)
    return torch.where(ok, _ldexp(hi + lo, e), special)


def _rnorm(*xs: torch.Tensor) -> torch.Tensor:
    """``1 / norm(...)`` (rhypot, rnorm3d...): ``inf`` for all zeros, ``0`` if any is infinite."""
    hi, lo, e, special = _norm_dd(*xs)
    q = 1.0 / hi
    p, pe = _two_prod(q, hi)
    q = q + (((1.0 - p) - pe) - q * lo) / hi  # 1 / (hi + lo) to about 2**-100
    ok = torch.isfinite(hi) & (hi != 0)
    return torch.where(ok, _ldexp(q, -e), 1.0 / special)


def _norm_narrow(*xs: torch.Tensor) -> torch.Tensor:
    """The norm of float32 (or narrower) values in float64: squares exact, no overflow possible."""
    r = torch.sqrt(reduce(torch.add, [x * x for x in xs]))
    return torch.where(reduce(torch.logical_or, [torch.isinf(x) for x in xs]), _INF, r)


def _rnorm_narrow(*xs: torch.Tensor) -> torch.Tensor:
    """``1 / norm`` of float32 (or narrower) values, in float64."""
    return 1.0 / _norm_narrow(*xs)


def _hypot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``sqrt(x**2 + y**2)`` without overflow; ``hypot(±inf, NaN) = inf``."""
    return _norm(x, y)


def _norm3d(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``sqrt(a**2 + b**2 + c**2)`` without overflow."""
    return _norm(a, b, c)


def _norm4d(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``sqrt(a**2 + b**2 + c**2 + d**2)`` without overflow."""
    return _norm(a, b, c, d)


def _rhypot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``1 / hypot(x, y)``."""
    return _rnorm(x, y)


def _rnorm3d(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``1 / norm3d(a, b, c)``."""
    return _rnorm(a, b, c)


def _rnorm4d(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``1 / norm4d(a, b, c, d)``."""
    return _rnorm(a, b, c, d)


# --------------------------------------------------------------------------------------------------
# sin(pi x), cos(pi x)
# --------------------------------------------------------------------------------------------------


def _pi_times(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``pi * t`` as a double-double ``hi + lo``."""
    hi, lo = _two_prod(t, torch.full_like(t, _PI_HI))
    return hi, lo + t * _PI_LO


def _sin_pi_small(t: torch.Tensor) -> torch.Tensor:
    """``sin(pi t)`` for ``0 <= t <= 1/4``."""
    hi, lo = _pi_times(t)
    return torch.sin(hi) + lo * torch.cos(hi)


def _cos_pi_small(t: torch.Tensor) -> torch.Tensor:
    """``cos(pi t)`` for ``0 <= t <= 1/4``."""
    hi, lo = _pi_times(t)
    return torch.cos(hi) - lo * torch.sin(hi)


def _sinpi(x: torch.Tensor) -> torch.Tensor:
    """``sin(pi x)``, reduced modulo 2 exactly: ``±0`` (sign of x) at integers, ``±1`` at half-integers."""
    a = torch.fmod(x, 2.0).abs()  # exact (x / 2 cannot overflow); NaN for ±inf
    flip = a >= 1.0
    b = torch.where(flip, a - 1.0, a)  # sin(pi (b + 1)) = -sin(pi b); b in [0, 1)
    b = torch.where(b > 0.5, 1.0 - b, b)  # sin(pi (1 - b)) = sin(pi b); b in [0, 1/2]
    v = torch.where(b <= 0.25, _sin_pi_small(b), _cos_pi_small(0.5 - b))
    v = torch.where(flip != torch.signbit(x), -v, v)
    return torch.where(v == 0, torch.copysign(torch.zeros_like(x), x), v)


def _cospi(x: torch.Tensor) -> torch.Tensor:
    """``cos(pi x)``, reduced modulo 2 exactly: ``±1`` at integers, ``+0`` at half-integers."""
    a = torch.fmod(x, 2.0).abs()  # exact (x / 2 cannot overflow); NaN for ±inf
    a = torch.where(a > 1.0, 2.0 - a, a)  # cos(pi (2 - a)) = cos(pi a); a in [0, 1]
    flip = a > 0.5
    b = torch.where(flip, 1.0 - a, a)  # cos(pi (1 - a)) = -cos(pi a); b in [0, 1/2]
    v = torch.where(b <= 0.25, _cos_pi_small(b), _sin_pi_small(0.5 - b))
    v = torch.where(flip, -v, v)
    return torch.where(v == 0, 0.0, v)


# --------------------------------------------------------------------------------------------------
# Gamma
# --------------------------------------------------------------------------------------------------


def _gamma_near_one(f: torch.Tensor, fe: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``Gamma(f + fe)`` for ``1 <= f <= 2`` and tiny ``fe``, as a double-double.

    ``|lgamma| < 0.13`` there, so ``exp(lgamma(f))`` loses nothing to the exponential; the offset
    ``fe`` enters through ``Gamma' = Gamma * digamma``.
    """
    g = torch.exp(torch.lgamma(f))
    return _fast_two_sum(g, g * fe * torch.special.digamma(f))


def _mul_dd_d(hi: torch.Tensor, lo: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Double-double times double."""
    p, e = _two_prod(hi, d)
    return _fast_two_sum(p, e + lo * d)


def _div_dd_dd(
    hi: torch.Tensor, lo: torch.Tensor, dh: torch.Tensor, dl: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Double-double divided by double-double."""
    q = hi / dh
    p, pe = _two_prod(q, dh)
    return _fast_two_sum(q, ((((hi - p) - pe) + lo) - q * dl) / dh)


def _counts_above(n: torch.Tensor) -> list[int]:
    """For ``n`` sorted in descending order: how many elements exceed 0, 1, 2, ... ``max(n) - 1``."""
    if n.numel() == 0:
        return []
    steps = torch.arange(int(n[0].item()), dtype=n.dtype, device=n.device)
    return torch.searchsorted(-n, -steps).tolist()


def _gamma_above_one(x: torch.Tensor) -> torch.Tensor:
    """``Gamma(x)`` for ``1 <= x < 172``: ``Gamma(f) * f (f + 1) ... (x - 1)`` with ``f`` in [1, 2).

    The elements are sorted by their number of factors, so that step ``k`` works on a prefix.
    """
    n, order = torch.sort(torch.floor(x) - 1.0, descending=True)
    f = x[order] - n  # exact, and so is every factor f + k
    hi, lo = _gamma_near_one(f, torch.zeros_like(f))
    hi, lo = hi * 2.0**-100, lo * 2.0**-100  # keeps 171! in range
    for k, c in enumerate(_counts_above(n)):
        hi[:c], lo[:c] = _mul_dd_d(hi[:c], lo[:c], f[:c] + k)
    return torch.empty_like(x).index_put_((order,), _ldexp(hi + lo, 100))


def _gamma_below_one(x: torch.Tensor) -> torch.Tensor:
    """``Gamma(x)`` for non-integer ``-190 < x < 1``: ``Gamma(x + m) / (x (x + 1) ... (x + m - 1))``.

    ``x + m`` and the factors are carried as exact double-doubles; the division starts with the
    factors nearest zero, so the running quotient only shrinks below ``2**-1022`` at the end (and it
    is scaled by ``2**600`` where the result is subnormal, to round once).
    """
    m, order = torch.sort(torch.floor(-x) + 2.0, descending=True)  # x + m in [1, 2]
    x = x[order]
    f, fe = _two_sum(x, m)
    hi, lo = _gamma_near_one(f, fe)
    scaled = x < -100.0
    hi, lo = torch.where(scaled, hi * 2.0**600, hi), torch.where(scaled, lo * 2.0**600, lo)
    for j, c in enumerate(_counts_above(m)):
        dh, dl = _two_sum(x[:c], m[:c] - (1.0 + j))  # factors x + m - 1, x + m - 2, ..., x
        hi[:c], lo[:c] = _div_dd_dd(hi[:c], lo[:c], dh, dl)
    result = torch.where(scaled, _ldexp(hi + lo, -600), hi + lo)
    return torch.empty_like(x).index_put_((order,), result)


def _tgamma(x: torch.Tensor) -> torch.Tensor:
    """The Gamma function (C ``tgamma``), to about an ulp in float64.

    ``tgamma(±0) = ±inf``, NaN at negative integers and ``-inf``, ``+inf`` above 171.62.
    (``exp(lgamma(x))`` would be hundreds of ulps off for large ``|x|``.)
    """
    out = torch.full_like(x, _NAN)
    out = torch.where(x == 0, torch.copysign(torch.full_like(x, _INF), x), out)
    out = torch.where(x >= 172.0, _INF, out)  # includes +inf
    tiny = (x.abs() < 2.0**-54) & (x != 0)
    out = torch.where(tiny, 1.0 / x - _EULER_GAMMA, out)
    negative_integer = (x < 0) & (x == torch.floor(x))
    far = (x <= -190.0) & ~negative_integer & torch.isfinite(x)  # |Gamma| < 2**-1075
    odd = torch.remainder(torch.floor(x), 2.0) == 1.0
    out = torch.where(far, torch.where(odd, -0.0, 0.0), out)

    above = (x >= 1.0) & (x < 172.0)
    if above.any():
        out = out.masked_scatter(above, _gamma_above_one(x[above]))
    below = (x > -190.0) & (x < 1.0) & ~tiny & ~negative_integer & (x != 0)
    if below.any():
        out = out.masked_scatter(below, _gamma_below_one(x[below]))
    return out


def _tgamma_narrow(x: torch.Tensor) -> torch.Tensor:
    """Gamma for float32 results: ``±exp(lgamma(x))`` in float64 is off by ``~|lgamma| 2**-53``, far
    below a float32 ulp, and needs no loop."""
    g = torch.exp(torch.lgamma(x))
    g = torch.where((x < 0) & (torch.remainder(torch.floor(x), 2.0) == 1.0), -g, g)
    g = torch.where(x == 0, torch.copysign(torch.full_like(x, _INF), x), g)
    return torch.where((x < 0) & (x == torch.floor(x)), _NAN, g)  # poles and -inf


# --------------------------------------------------------------------------------------------------
# Error function family and the normal distribution
# --------------------------------------------------------------------------------------------------


def _times_sqrt1_2(v: torch.Tensor) -> torch.Tensor:
    """``v / sqrt(2)`` with the constant to double-double precision."""
    return torch.where(torch.isfinite(v), v * _SQRT1_2_HI + v * _SQRT1_2_LO, v)


def _erfcinv(x: torch.Tensor) -> torch.Tensor:
    """Inverse complementary error function: ``-ndtri(x / 2) / sqrt(2)``.

    ``erfcinv(0) = inf``, ``erfcinv(2) = -inf``, NaN outside ``[0, 2]``. Above 1 it uses
    ``erfcinv(x) = -erfcinv(2 - x)`` (exact subtraction). For subnormal ``x``, where ``x / 2`` would
    round, Newton steps on ``log(erfc(v)) = log(erfcx(v)) - v**2`` refine the estimate.
    """
    upper = x > 1.0
    y = torch.where(upper, 2.0 - x, x)
    small = (y > 0) & (y < 2.0**-1021)
    v = _times_sqrt1_2(-torch.special.ndtri(torch.where(small, 2.0**-1021, y) * 0.5))
    if small.any():
        log_y = torch.log(y)
        w = v
        for _ in range(4):
            p, pe = _two_prod(w, w)
            residual = ((torch.log(torch.special.erfcx(w)) - p) - pe) - log_y
            w = w + residual * torch.special.erfcx(w) * (0.5 / _INV_SQRT_PI)
        v = torch.where(small, w, v)
    v = torch.where(upper, -v, v)
    return torch.where(v == 0, 0.0, v)


def _normcdf(x: torch.Tensor) -> torch.Tensor:
    """Standard normal CDF ``erfc(-x / sqrt(2)) / 2``, accurate in the lower tail.

    (``torch.special.ndtr`` computes ``(1 + erf(x / sqrt(2))) / 2`` on the CPU, which cancels: it
    is off by 1e-9 relative at -5 and returns 0 from -10.) ``-x / sqrt(2)`` is carried as a
    double-double ``zh + zl``; ``zl`` enters through ``erfc' = -2 / sqrt(pi) exp(-z**2)``.
    """
    zh, zl = _two_prod(-x, torch.full_like(x, _SQRT1_2_HI))
    zl = zl - x * _SQRT1_2_LO
    correction = zl * (2.0 * _INV_SQRT_PI) * torch.exp(-zh * zh)
    return 0.5 * (torch.erfc(zh) - torch.where(torch.isfinite(correction), correction, 0.0))


def _erfcx(x: torch.Tensor) -> torch.Tensor:
    """Scaled complementary error function ``exp(x**2) erfc(x)``.

    Computed as ``exp(x**2) erfc(|x|)`` below ``|x| = 12`` with ``x**2`` kept exact (about 2 ulp;
    ``torch.special.erfcx`` is off by up to 6 there), and ``2 exp(x**2) - erfcx(-x)`` below 0
    (torch rounds ``x**2`` before the exponential, hundreds of ulps near -25).
    """
    a = x.abs()
    p, e = _two_prod(a, a)
    ex = torch.exp(p)
    ex = torch.where(torch.isfinite(ex) & torch.isfinite(e), ex + ex * e, ex)
    positive = torch.where(a < 12.0, ex * torch.erfc(a), torch.special.erfcx(a))
    return torch.where(x < 0, 2.0 * ex - positive, positive)


def _erfinv(x: torch.Tensor) -> torch.Tensor:
    """Inverse error function; ``erfinv(±1) = ±inf``, NaN outside ``[-1, 1]``."""
    return torch.erfinv(x)


def _normcdfinv(x: torch.Tensor) -> torch.Tensor:
    """Inverse of the standard normal CDF; ``normcdfinv(0) = -inf``, ``normcdfinv(1) = inf``."""
    return torch.special.ndtri(x)


# --------------------------------------------------------------------------------------------------
# Bessel functions
# --------------------------------------------------------------------------------------------------

# Cephes' rational approximations (Moshier, as in torch's ATen/native/Math.h, but with the implicit
# leading 1 of Cephes' p1evl restored in the denominators marked (1.0, ...): torch drops it and loses
# about 8 digits near x = 5). Small x: J0 = (z - DR1)(z - DR2) RP/RQ and J1 = x (z - Z1)(z - Z2) RP/RQ
# in z = x**2; Y0 = YP/YQ + 2/pi log(x) J0 and Y1 = x YP/YQ + 2/pi (J1 log(x) - 1/x). Large x (> 5):
# the Hankel factors P = PP/PQ and Q = 5/x QP/QQ in z = 25/x**2 with
# J0 = sqrt(2 / (pi x)) (P cos(x - pi/4) - Q sin(x - pi/4)), Y0 with sin and cos exchanged, the
# phase x - 3pi/4 for order 1. torch evaluates the cosines at a rounded x - pi/4, which costs
# ~ulp(x) absolute accuracy; here they come from sin(x) and cos(x) of the exact argument (glibc's way).
_J0_DR = (5.78318596294678452118e00, 3.04712623436620863991e01)
_J0_RP = (-4.79443220978201773821e09, 1.95617491946556577543e12, -2.49248344360967716204e14,
          9.70862251047306323952e15)  # fmt: skip
_J0_RQ = (1.0, 4.99563147152651017219e02, 1.73785401676374683123e05, 4.84409658339962045305e07,
          1.11855537045356834862e10, 2.11277520115489217587e12, 3.10518229857422583814e14,
          3.18121955943204943306e16, 1.71086294081043136091e18)  # fmt: skip
_Y0_YP = (1.55924367855235737965e04, -1.46639295903971606143e07, 5.43526477051876500413e09,
          -9.82136065717911466409e11, 8.75906394395366999549e13, -3.46628303384729719441e15,
          4.42733268572569800351e16, -1.84950800436986690637e16)  # fmt: skip
_Y0_YQ = (1.0, 1.04128353664259848412e03, 6.26107330137134956842e05, 2.68919633393814121987e08,
          8.64002487103935000337e10, 2.02979612750105546709e13, 3.17157752842975028269e15,
          2.50596256172653059228e17)  # fmt: skip
_J1_Z = (1.46819706421238932572e01, 4.92184563216946036703e01)
_J1_RP = (-8.99971225705559398224e08, 4.52228297998194034323e11, -7.27494245221818276015e13,
          3.68295732863852883286e15)  # fmt: skip
_J1_RQ = (1.0, 6.20836478118054335476e02, 2.56987256757748830383e05, 8.35146791431949253037e07,
          2.21511595479792499675e10, 4.74914122079991414898e12, 7.84369607876235854894e14,
          8.95222336184627338078e16, 5.32278620332680085395e18)  # fmt: skip
_Y1_YP = (1.26320474790178026440e09, -6.47355876379160291031e11, 1.14509511541823727583e14,
          -8.12770255501325109621e15, 2.02439475713594898196e17, -7.78877196265950026825e17)  # fmt: skip
_Y1_YQ = (1.0, 5.94301592346128195359e02, 2.35564092943068577943e05, 7.34811944459721705660e07,
          1.87601316108706159478e10, 3.88231277496238566008e12, 6.20557727146953693363e14,
          6.87141087355300489866e16, 3.97270608116560655612e18)  # fmt: skip
_J0_PP = (7.96936729297347051624e-04, 8.28352392107440799803e-02, 1.23953371646414299388e00,
          5.44725003058768775090e00, 8.74716500199817011941e00, 5.30324038235394892183e00,
          9.99999999999999997821e-01)  # fmt: skip
_J0_PQ = (9.24408810558863637013e-04, 8.56288474354474431428e-02, 1.25352743901058953537e00,
          5.47097740330417105182e00, 8.76190883237069594232e00, 5.30605288235394617618e00,
          1.00000000000000000218e00)  # fmt: skip
_J0_QP = (-1.13663838898469149931e-02, -1.28252718670509318512e00, -1.95539544257735972385e01,
          -9.32060152123768231369e01, -1.77681167980488050595e02, -1.47077505154951170175e02,
          -5.14105326766599330220e01, -6.05014350600728481186e00)  # fmt: skip
_J0_QQ = (1.0, 6.43178256118178023184e01, 8.56430025976980587198e02, 3.88240183605401609683e03,
          7.24046774195652478189e03, 5.93072701187316984827e03, 2.06209331660327847417e03,
          2.42005740240291393179e02)  # fmt: skip
_J1_PP = (7.62125616208173112003e-04, 7.31397056940917570436e-02, 1.12719608129684925192e00,
          5.11207951146807644818e00, 8.42404590141772420927e00, 5.21451598682361504063e00,
          1.00000000000000000254e00)  # fmt: skip
_J1_PQ = (5.71323128072548699714e-04, 6.88455908754495404082e-02, 1.10514232634061696926e00,
          5.07386386128601488557e00, 8.39985554327604159757e00, 5.20982848682361821619e00,
          9.99999999999999997461e-01)  # fmt: skip
_J1_QP = (5.10862594750176621635e-02, 4.98213872951233449420e00, 7.58238284132545283818e01,
          3.66779609360150777800e02, 7.10856304998926107277e02, 5.97489612400613639965e02,
          2.11688757100572135698e02, 2.52070205858023719784e01)  # fmt: skip
_J1_QQ = (1.0, 7.42373277035675149943e01, 1.05644886038262816351e03, 4.98641058337653607651e03,
          9.56231892404756170795e03, 7.99704160447350683650e03, 2.82619278517639096600e03,
          3.36093607810698293419e02)  # fmt: skip


def _polevl(z: torch.Tensor, coefficients: tuple[float, ...]) -> torch.Tensor:
    """Horner evaluation, highest degree first."""
    r = torch.zeros_like(z)
    for c in coefficients:
        r = r * z + c
    return r


def _bessel_far(x: torch.Tensor, order: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(J, Y)`` of order 0 or 1 for ``x > 5`` (finite), from the Hankel factors and exact phases."""
    pp, pq, qp, qq = (_J0_PP, _J0_PQ, _J0_QP, _J0_QQ) if order == 0 else (_J1_PP, _J1_PQ, _J1_QP, _J1_QQ)
    z = 25.0 / (x * x)
    p = _polevl(z, pp) / _polevl(z, pq)
    q = 5.0 / x * _polevl(z, qp) / _polevl(z, qq)
    s, c = torch.sin(x), torch.cos(x)
    ss, cc = s - c, s + c  # sqrt(2) sin(x - pi/4), sqrt(2) cos(x - pi/4)
    # Whichever of ss, cc cancels is recomputed from ss * cc = -cos(2x) (glibc's device).
    w = -torch.cos(x + x)
    fix = torch.isfinite(w) & (x < 2.0**1023)
    cc = torch.where(fix & (s * c < 0), w / ss, cc)
    ss = torch.where(fix & (s * c >= 0), w / cc, ss)
    scale = _INV_SQRT_PI / torch.sqrt(x)
    if order == 0:
        return scale * (p * cc - q * ss), scale * (p * ss + q * cc)
    # Order 1: the phase is x - 3 pi / 4, so cos -> ss / sqrt(2) and sin -> -cc / sqrt(2).
    return scale * (p * ss + q * cc), scale * (q * ss - p * cc)


def _bessel_near(x: torch.Tensor, order: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(J, Y)`` of order 0 or 1 for ``0 < x <= 5``."""
    z = x * x
    log_x = torch.log(x)
    if order == 0:
        j = (z - _J0_DR[0]) * (z - _J0_DR[1]) * _polevl(z, _J0_RP) / _polevl(z, _J0_RQ)
        j = torch.where(x < 1e-5, 1.0 - 0.25 * z, j)
        return j, _polevl(z, _Y0_YP) / _polevl(z, _Y0_YQ) + _TWO_OVER_PI * log_x * j
    j = _polevl(z, _J1_RP) / _polevl(z, _J1_RQ) * x * (z - _J1_Z[0]) * (z - _J1_Z[1])
    y = x * (_polevl(z, _Y1_YP) / _polevl(z, _Y1_YQ)) + _TWO_OVER_PI * j * log_x - _TWO_OVER_PI / x
    return j, y


def _bessel(x: torch.Tensor, order: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(J(|x|), Y(|x|))`` of order 0 or 1 for finite nonzero ``x``, garbage elsewhere."""
    a = x.abs()
    far = a > 5.0
    jn, yn = _bessel_near(torch.where(far, 1.0, a), order)
    jf, yf = _bessel_far(torch.where(far, a, 6.0), order)
    return torch.where(far, jf, jn), torch.where(far, yf, yn)


def _j0(x: torch.Tensor) -> torch.Tensor:
    """Bessel function of the first kind, order 0 (even; ``j0(±inf) = 0``)."""
    j = _bessel(x, 0)[0]
    j = torch.where(x == 0, 1.0, j)
    return torch.where(torch.isinf(x), 0.0, torch.where(torch.isnan(x), x, j))


def _j1(x: torch.Tensor) -> torch.Tensor:
    """Bessel function of the first kind, order 1 (odd; ``j1(±0) = ±0``, ``j1(±inf) = ±0``)."""
    j = _bessel(x, 1)[0]
    j = torch.where(torch.isinf(x) | (x == 0), 0.0, torch.where(torch.isnan(x), x, j))
    return torch.where(torch.signbit(x), -j, j)


def _y(x: torch.Tensor, order: int) -> torch.Tensor:
    """Bessel function of the second kind: ``-inf`` at ``±0``, NaN below 0, ``0`` at ``+inf``."""
    y = _bessel(x, order)[1]
    y = torch.where(x == _INF, 0.0, torch.where(torch.isnan(x), x, y))
    return torch.where(x == 0, -_INF, torch.where(x < 0, _NAN, y))


def _y0(x: torch.Tensor) -> torch.Tensor:
    """Bessel function of the second kind, order 0: ``y0(±0) = -inf``, NaN below 0, ``y0(inf) = 0``."""
    return _y(x, 0)


def _y1(x: torch.Tensor) -> torch.Tensor:
    """Bessel function of the second kind, order 1: ``y1(±0) = -inf``, NaN below 0, ``y1(inf) = 0``."""
    return _y(x, 1)


def _cyl_bessel_i0(x: torch.Tensor) -> torch.Tensor:
    """Modified Bessel function of the first kind, order 0 (even; ``i0(±inf) = inf``).

    Past ``|x| = 700``, ``exp(|x|)`` alone would overflow before the result does: it is applied in
    two halves to the exponentially scaled ``i0e``.
    """
    a = x.abs()
    big = a > 700.0
    r = torch.where(big, torch.special.i0e(a) * torch.exp(0.5 * a) * torch.exp(0.5 * a), torch.special.i0(a))
    return torch.where(torch.isinf(a), _INF, r)


def _cyl_bessel_i1(x: torch.Tensor) -> torch.Tensor:
    """Modified Bessel function of the first kind, order 1 (odd; ``i1(±inf) = ±inf``)."""
    a = x.abs()
    big = a > 700.0
    r = torch.where(big, torch.special.i1e(a) * torch.exp(0.5 * a) * torch.exp(0.5 * a), torch.special.i1(a))
    r = torch.where(torch.isinf(a), _INF, r)
    return torch.where(torch.signbit(x), -r, r)


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------


def _nextafter(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The next representable value after ``x`` towards ``y``, in the input dtype itself."""
    (x, y), _ = _prepare((x, y))
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
    "cbrt": _cbrt,
    "ceil": _torch(torch.ceil, "round towards +inf."),
    "copysign": _torch(torch.copysign, "|x| with the sign of y."),
    "cos": _torch(torch.cos, "cosine."),
    "cosh": _torch(torch.cosh, "hyperbolic cosine."),
    "cospi": _cospi,
    "cyl_bessel_i0": _cyl_bessel_i0,
    "cyl_bessel_i1": _cyl_bessel_i1,
    "erfc": _torch(torch.erfc, "complementary error function."),
    "erfcinv": _erfcinv,
    "erfcx": _erfcx,
    "erf": _torch(torch.erf, "error function."),
    "erfinv": _erfinv,
    "exp10": _exp10,
    "exp2": _torch(torch.exp2, "2 ** x."),
    "exp": _torch(torch.exp, "e ** x."),
    "expm1": _torch(torch.expm1, "e ** x - 1, accurate near 0."),
    "fabs": _torch(torch.abs, "absolute value."),
    "fdim": _fdim,
    "fdivide": _torch(torch.div, "x / y."),
    "floor": _torch(torch.floor, "round towards -inf."),
    "fmax": _torch(torch.fmax, "maximum, ignoring a NaN operand."),
    "fmin": _torch(torch.fmin, "minimum, ignoring a NaN operand."),
    "fmod": _fmod,
    "hypot": _hypot,
    "j0": _j0,
    "j1": _j1,
    "lgamma": _torch(torch.lgamma, "log |Gamma(x)| (+inf at non-positive integers)."),
    "log10": _torch(torch.log10, "base-10 logarithm."),
    "log1p": _torch(torch.log1p, "log(1 + x), accurate near 0."),
    "log2": _torch(torch.log2, "base-2 logarithm."),
    "logb": _logb,
    "log": _torch(torch.log, "natural logarithm (-inf at ±0, NaN below 0)."),
    "norm3d": _norm3d,
    "norm4d": _norm4d,
    "normcdf": _normcdf,
    "normcdfinv": _normcdfinv,
    "pow": _pow,
    "rcbrt": _rcbrt,
    "remainder": _remainder,
    "rhypot": _rhypot,
    "rnorm3d": _rnorm3d,
    "rnorm4d": _rnorm4d,
    "round": _round,
    "rsqrt": _rsqrt,
    "sin": _torch(torch.sin, "sine."),
    "sinh": _torch(torch.sinh, "hyperbolic sine."),
    "sinpi": _sinpi,
    "sqrt": _torch(torch.sqrt, "square root (NaN below 0, sqrt(-0) = -0)."),
    "tan": _torch(torch.tan, "tangent."),
    "tanh": _torch(torch.tanh, "hyperbolic tangent."),
    "tgamma": _tgamma,
    "trunc": _torch(torch.trunc, "round towards zero."),
    "y0": _y0,
    "y1": _y1,
    "sigmoid": _sigmoid,
}

# Cheaper kernels for float32 (and narrower) arguments.
_NARROW: dict[str, Callable[..., torch.Tensor]] = {
    "tgamma": _tgamma_narrow,
    "hypot": _norm_narrow,
    "norm3d": _norm_narrow,
    "norm4d": _norm_narrow,
    "rhypot": _rnorm_narrow,
    "rnorm3d": _rnorm_narrow,
    "rnorm4d": _rnorm_narrow,
}

FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    name: _wide(name, kernel, _NARROW.get(name)) for name, kernel in _KERNELS.items()
}
FUNCTIONS["fma"] = _fma
FUNCTIONS["nextafter"] = _nextafter


def apply(name: str, *args: torch.Tensor) -> torch.Tensor:
    """Evaluate builtin ``name`` on ``args`` (tensors of one floating dtype, broadcastable)."""
    try:
        function = FUNCTIONS[name]
    except KeyError:
        raise KeyError(f"no builtin named {name!r}") from None
    return function(*args)
