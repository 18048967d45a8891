"""Exact and elementary pieces of :mod:`tcjit.refmath`: error-free transformations (double-double
arithmetic), dtype handling, rounding and remainders, fused multiply-add, norms, sin(pi x).

The names without a leading underscore are those :mod:`tcjit.refmath` (its table of builtins) and
:mod:`tcjit.refmath_special` (the double-double helpers and constants) use.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce

import torch

__all__ = [
    "EULER_GAMMA",
    "INF",
    "INV_SQRT_PI",
    "NAN",
    "SQRT1_2_HI",
    "SQRT1_2_LO",
    "TWO_OVER_PI",
    "cbrt",
    "cospi",
    "exp10",
    "fast_two_sum",
    "fdim",
    "fma",
    "fmod",
    "hypot",
    "ldexp",
    "logb",
    "norm3d",
    "norm4d",
    "norm_narrow",
    "pow",
    "prepare",
    "rcbrt",
    "remainder",
    "rhypot",
    "rnorm3d",
    "rnorm4d",
    "rnorm_narrow",
    "round",
    "rsqrt",
    "sigmoid",
    "sinpi",
    "two_prod",
    "two_sum",
    "wide",
]

_F64 = torch.float64
_I64 = torch.int64
INF = math.inf
NAN = math.nan
_PI_HI = math.pi  # pi = _PI_HI + _PI_LO to about 2**-107
_PI_LO = 1.2246467991473532e-16
SQRT1_2_HI = 0.7071067811865476  # sqrt(1/2) = SQRT1_2_HI + SQRT1_2_LO
SQRT1_2_LO = -4.833646656726457e-17
INV_SQRT_PI = 0.5641895835477563  # 1 / sqrt(pi)
EULER_GAMMA = 0.5772156649015329  # the Euler-Mascheroni constant
TWO_OVER_PI = 0.6366197723675814


# --------------------------------------------------------------------------------------------------
# Error-free transformations and exact scaling (float64 tensors)
# --------------------------------------------------------------------------------------------------


def two_sum(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, e)`` with ``s = fl(a + b)`` and ``a + b = s + e`` exactly (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fast_two_sum(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """TwoSum for ``|a| >= |b|`` (or ``a == 0``): renormalises a double-double ``a + b``."""
    s = a + b
    return s, b - (s - a)


def _split(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Veltkamp's split of a double into two 26-bit halves (exact for ``|a| < 2**996``)."""
    t = 134217729.0 * a  # 2**27 + 1
    hi = t - (t - a)
    return hi, a - hi


def two_prod(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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
    s, e = two_sum(a, b)
    even = (s.view(_I64) & 1) == 0
    bump = (e != 0) & even & torch.isfinite(s)
    return torch.where(bump, torch.nextafter(s, torch.where(e > 0, INF, -INF).to(s.dtype)), s)


def _pow2(k: torch.Tensor) -> torch.Tensor:
    """``2.0 ** k`` for an integer tensor, exactly (subnormal powers included; 0 below 2**-1074)."""
    k = k.to(_I64)
    normal = ((k.clamp(-1022, 1023) + 1023) << 52).view(_F64)
    subnormal = (torch.ones_like(k) << (k + 1074).clamp(0, 51)).view(_F64)
    return torch.where(k >= -1022, normal, torch.where(k >= -1074, subnormal, 0.0))


def ldexp(x: torch.Tensor, k: torch.Tensor | int) -> torch.Tensor:
    """``x * 2**k`` with a single rounding, for any integer ``k`` (``torch.ldexp`` overflows 2**k)."""
    if isinstance(k, int):
        k = torch.full_like(x, k, dtype=_I64)
    m, e = torch.frexp(x)  # x = m * 2**e, 0.5 <= |m| < 1
    big = e.to(_I64) + k  # the result is m * 2**big
    normal = (m * 2.0) * _pow2((big - 1).clamp(-1022, 1023))
    normal = torch.where(big > 1024, m * INF, normal)
    tiny = (m * 2.0**-1000) * _pow2((big + 1000).clamp(-1075, 0))  # one rounding, into subnormals
    out = torch.where(big >= -1021, normal, tiny)
    return torch.where(torch.isfinite(x) & (x != 0), out, x)


def _exponent(x: torch.Tensor) -> torch.Tensor:
    """``floor(log2(|x|))`` of finite nonzero ``x`` as an int64 tensor (subnormals exact)."""
    return torch.frexp(x)[1].to(_I64) - 1


# --------------------------------------------------------------------------------------------------
# Dtype handling
# --------------------------------------------------------------------------------------------------


def prepare(args: tuple[torch.Tensor, ...]) -> tuple[list[torch.Tensor], torch.dtype]:
    """Broadcast the arguments and find their (common) floating dtype."""
    if not args:
        raise TypeError("a builtin needs at least one argument")
    dtype = reduce(torch.promote_types, (a.dtype for a in args))
    if not dtype.is_floating_point:
        raise TypeError(f"builtins take floating tensors, not {dtype}")
    return [a.to(dtype) for a in torch.broadcast_tensors(*args)], dtype


def wide(
    name: str, kernel: Callable[..., torch.Tensor], narrow: Callable[..., torch.Tensor] | None = None
) -> Callable[..., torch.Tensor]:
    """Wrap float64 kernels: broadcast, compute in float64, round once to the input dtype.

    ``narrow``, if given, is a cheaper float64 kernel that is accurate enough for narrower results.
    """

    def function(*args: torch.Tensor) -> torch.Tensor:
        xs, dtype = prepare(args)
        chosen = kernel if dtype == _F64 or narrow is None else narrow
        return chosen(*(x.to(_F64) for x in xs)).to(dtype)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = kernel.__doc__
    return function


# --------------------------------------------------------------------------------------------------
# Elementary functions
# --------------------------------------------------------------------------------------------------


def cbrt(x: torch.Tensor) -> torch.Tensor:
    """Real cube root (``cbrt(-8) = -2``): ``pow`` then one Newton step with an exact residual."""
    a = x.abs()
    tiny, huge = a < 2.0**-900, a > 2.0**900
    s = torch.where(tiny, a * 2.0**600, torch.where(huge, a * 2.0**-600, a))  # exact scaling
    y = s.pow(1.0 / 3.0)
    p1, e1 = two_prod(y, y)
    p2, e2 = two_prod(p1, y)  # y**3 = p2 + e2 + e1 * y (to 2**-106)
    y = y + (((s - p2) - e2) - e1 * y) / (3.0 * y * y)
    y = torch.where(tiny, y * 2.0**-200, torch.where(huge, y * 2.0**200, y))
    return torch.where(torch.isfinite(x) & (x != 0), torch.copysign(y, x), x)


def rcbrt(x: torch.Tensor) -> torch.Tensor:
    """``1 / cbrt(x)``: ``rcbrt(±0) = ±inf``, ``rcbrt(±inf) = ±0``."""
    return 1.0 / cbrt(x)


def rsqrt(x: torch.Tensor) -> torch.Tensor:
    """``1 / sqrt(x)`` with one Newton step on an exact residual (``rsqrt(-0) = -inf``)."""
    m, e = torch.frexp(x)
    e = e.to(_I64)
    odd = (e & 1) != 0
    m = torch.where(odd, m * 2.0, m)  # x = m * 2**e with e even and 0.5 <= m < 2
    e = torch.where(odd, e - 1, e)
    y = 1.0 / torch.sqrt(m)
    p, pe = two_prod(y, y)
    q, qe = two_prod(p, m)  # m * y * y = q + qe + pe * m
    y = y + 0.5 * y * (((1.0 - q) - qe) - pe * m)
    y = y * _pow2(-(e >> 1))
    return torch.where((x > 0) & torch.isfinite(x), y, 1.0 / torch.sqrt(x))


def exp10(x: torch.Tensor) -> torch.Tensor:
    """``10 ** x``."""
    return torch.pow(10.0, x)


def logb(x: torch.Tensor) -> torch.Tensor:
    """The binary exponent ``floor(log2(|x|))`` as a float: ``logb(0) = -inf``, ``logb(±inf) = inf``."""
    e = _exponent(x).to(_F64)
    return torch.where(x == 0, -INF, torch.where(torch.isfinite(x), e, x.abs()))


def pow(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """C ``pow``: ``pow(x, ±0) = 1`` and ``pow(1, y) = 1`` even for NaN; ``pow(-8, 1/3)`` is NaN."""
    r = torch.pow(x, y)
    r = torch.where((x == -1) & torch.isinf(y), 1.0, r)
    return torch.where((y == 0) | (x == 1), 1.0, r)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    """``1 / (1 + exp(-x))``, evaluated so that neither tail overflows."""
    e = torch.exp(-x.abs())
    return torch.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


# --------------------------------------------------------------------------------------------------
# Rounding and remainders (all exact)
# --------------------------------------------------------------------------------------------------


def round(x: torch.Tensor) -> torch.Tensor:
    """Round half away from zero (C ``round``; ``torch.round`` rounds half to even)."""
    t = torch.trunc(x)
    return torch.where((x - t).abs() >= 0.5, t + torch.copysign(torch.ones_like(x), x), t)


def fdim(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Positive difference: ``x - y`` if ``x > y``, else ``+0``; NaN if either is NaN."""
    r = torch.where(x > y, x - y, 0.0)
    return torch.where(torch.isnan(x) | torch.isnan(y), NAN, r)


def fmod(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
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
        x = torch.where(far, torch.fmod(x, ldexp(y.abs(), torch.where(far, k, 0))), x)
    return torch.fmod(x, y)


def remainder(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """IEEE 754 remainder ``x - n * y`` with ``n`` the quotient rounded half to even (exact).

    As fdlibm: ``r = |fmod(x, 2|y|)|`` lies in ``[0, 2|y|)``; subtract ``|y|`` at most twice (the
    subtractions are exact by Sterbenz' lemma) and give the result the sign of ``x``. NaN when
    ``y == 0`` or ``x`` is infinite; ``x`` when ``y`` is infinite.
    """
    p = y.abs()
    r = fmod(x, p + p).abs()  # fmod(x, inf) = x when 2|y| overflows
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
    cs = ldexp(c, -k)
    c_dominates = cs.abs() > 2.0**600  # |a * b| < 2**-600 |c|: the sum rounds to c
    cs = torch.where((cs.abs() < 2.0**-600) & (c != 0), torch.copysign(torch.full_like(c, 2.0**-700), c), cs)
    uh, ul = two_prod(ma, mb)
    th, tl = two_sum(cs, ul)
    vh, vl = two_sum(uh, th)
    v = _add_odd(tl, vl)
    near = ldexp(vh + v, k)
    odd = ldexp(_add_odd(vh, v), k)  # rounded to odd first: one correct rounding into subnormals
    r = torch.where(near.abs() < 2.0**-1022, odd, near)
    r = torch.where(c_dominates, c, r)
    naive = a * b + c
    special = ~(torch.isfinite(a) & torch.isfinite(b) & torch.isfinite(c)) | (a == 0) | (b == 0)
    r = torch.where(special, naive, r)
    # a * b may overflow where the exact product is finite: fma(huge, huge, -inf) is -inf.
    return torch.where(torch.isfinite(a) & torch.isfinite(b) & torch.isinf(c), c, r)


def fma(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``x * y + z`` with a single rounding (C ``fma``)."""
    (x, y, z), dtype = prepare((x, y, z))
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
        p, pe = two_prod(b, b)
        hi, s = two_sum(hi, p)
        lo = lo + (s + pe)
    hi, lo = fast_two_sum(hi, lo)
    r = torch.sqrt(hi)
    r2, r2e = two_prod(r, r)
    rl = (((hi - r2) - r2e) + lo) / (2.0 * r)
    r, rl = fast_two_sum(r, rl)
    any_inf = reduce(torch.logical_or, [torch.isinf(ai) for ai in a])
    special = torch.where(any_inf, INF, torch.where(m == 0, 0.0, NAN))
    return r, rl, e, special


def _norm(*xs: torch.Tensor) -> torch.Tensor:
    """Euclidean norm ``sqrt(x0**2 + x1**2 + ...)`` without spurious overflow (hypot, norm3d...)."""
    hi, lo, e, special = _norm_dd(*xs)
    ok = torch.isfinite(hi) & (hi != 0)
    return torch.where(ok, ldexp(hi + lo, e), special)


def _rnorm(*xs: torch.Tensor) -> torch.Tensor:
    """``1 / norm(...)`` (rhypot, rnorm3d...): ``inf`` for all zeros, ``0`` if any is infinite."""
    hi, lo, e, special = _norm_dd(*xs)
    q = 1.0 / hi
    p, pe = two_prod(q, hi)
    q = q + (((1.0 - p) - pe) - q * lo) / hi  # 1 / (hi + lo) to about 2**-100
    ok = torch.isfinite(hi) & (hi != 0)
    return torch.where(ok, ldexp(q, -e), 1.0 / special)


def norm_narrow(*xs: torch.Tensor) -> torch.Tensor:
    """The norm of float32 (or narrower) values in float64: squares exact, no overflow possible."""
    r = torch.sqrt(reduce(torch.add, [x * x for x in xs]))
    return torch.where(reduce(torch.logical_or, [torch.isinf(x) for x in xs]), INF, r)


def rnorm_narrow(*xs: torch.Tensor) -> torch.Tensor:
    """``1 / norm`` of float32 (or narrower) values, in float64."""
    return 1.0 / norm_narrow(*xs)


def hypot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``sqrt(x**2 + y**2)`` without overflow; ``hypot(±inf, NaN) = inf``."""
    return _norm(x, y)


def norm3d(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``sqrt(a**2 + b**2 + c**2)`` without overflow."""
    return _norm(a, b, c)


def norm4d(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``sqrt(a**2 + b**2 + c**2 + d**2)`` without overflow."""
    return _norm(a, b, c, d)


def rhypot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``1 / hypot(x, y)``."""
    return _rnorm(x, y)


def rnorm3d(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``1 / norm3d(a, b, c)``."""
    return _rnorm(a, b, c)


def rnorm4d(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``1 / norm4d(a, b, c, d)``."""
    return _rnorm(a, b, c, d)


# --------------------------------------------------------------------------------------------------
# sin(pi x), cos(pi x)
# --------------------------------------------------------------------------------------------------


def _pi_times(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``pi * t`` as a double-double ``hi + lo``."""
    hi, lo = two_prod(t, torch.full_like(t, _PI_HI))
    return hi, lo + t * _PI_LO


def _sin_pi_small(t: torch.Tensor) -> torch.Tensor:
    """``sin(pi t)`` for ``0 <= t <= 1/4``."""
    hi, lo = _pi_times(t)
    return torch.sin(hi) + lo * torch.cos(hi)


def _cos_pi_small(t: torch.Tensor) -> torch.Tensor:
    """``cos(pi t)`` for ``0 <= t <= 1/4``."""
    hi, lo = _pi_times(t)
    return torch.cos(hi) - lo * torch.sin(hi)


def sinpi(x: torch.Tensor) -> torch.Tensor:
    """``sin(pi x)``, reduced modulo 2 exactly: ``±0`` (sign of x) at integers, ``±1`` at half-integers."""
    a = torch.fmod(x, 2.0).abs()  # exact (x / 2 cannot overflow); NaN for ±inf
    flip = a >= 1.0
    b = torch.where(flip, a - 1.0, a)  # sin(pi (b + 1)) = -sin(pi b); b in [0, 1)
    b = torch.where(b > 0.5, 1.0 - b, b)  # sin(pi (1 - b)) = sin(pi b); b in [0, 1/2]
    v = torch.where(b <= 0.25, _sin_pi_small(b), _cos_pi_small(0.5 - b))
    v = torch.where(flip != torch.signbit(x), -v, v)
    return torch.where(v == 0, torch.copysign(torch.zeros_like(x), x), v)


def cospi(x: torch.Tensor) -> torch.Tensor:
    """``cos(pi x)``, reduced modulo 2 exactly: ``±1`` at integers, ``+0`` at half-integers."""
    a = torch.fmod(x, 2.0).abs()  # exact (x / 2 cannot overflow); NaN for ±inf
    a = torch.where(a > 1.0, 2.0 - a, a)  # cos(pi (2 - a)) = cos(pi a); a in [0, 1]
    flip = a > 0.5
    b = torch.where(flip, 1.0 - a, a)  # cos(pi (1 - a)) = -cos(pi a); b in [0, 1/2]
    v = torch.where(b <= 0.25, _cos_pi_small(b), _sin_pi_small(0.5 - b))
    v = torch.where(flip, -v, v)
    return torch.where(v == 0, 0.0, v)
