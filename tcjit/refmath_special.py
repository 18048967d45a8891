"""Special functions of :mod:`tcjit.refmath`: Gamma, the error function family and the normal
distribution, Bessel functions (see that module's docstring for why torch's own are not used).

The names without a leading underscore are those :mod:`tcjit.refmath` puts in its table of builtins.
"""

from __future__ import annotations

import torch

from .refmath_exact import (
    EULER_GAMMA,
    INF,
    INV_SQRT_PI,
    NAN,
    SQRT1_2_HI,
    SQRT1_2_LO,
    TWO_OVER_PI,
    fast_two_sum,
    ldexp,
    two_prod,
    two_sum,
)

__all__ = [
    "cyl_bessel_i0",
    "cyl_bessel_i1",
    "erfcinv",
    "erfcx",
    "erfinv",
    "j0",
    "j1",
    "normcdf",
    "normcdfinv",
    "tgamma",
    "tgamma_narrow",
    "y0",
    "y1",
]

# --------------------------------------------------------------------------------------------------
# Gamma
# --------------------------------------------------------------------------------------------------


def _gamma_near_one(f: torch.Tensor, fe: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``Gamma(f + fe)`` for ``1 <= f <= 2`` and tiny ``fe``, as a double-double.

    ``|lgamma| < 0.13`` there, so ``exp(lgamma(f))`` loses nothing to the exponential; the offset
    ``fe`` enters through ``Gamma' = Gamma * digamma``.
    """
    g = torch.exp(torch.lgamma(f))
    return fast_two_sum(g, g * fe * torch.special.digamma(f))


def _mul_dd_d(hi: torch.Tensor, lo: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Double-double times double."""
    p, e = two_prod(hi, d)
    return fast_two_sum(p, e + lo * d)


def _div_dd_dd(
    hi: torch.Tensor, lo: torch.Tensor, dh: torch.Tensor, dl: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Double-double divided by double-double."""
    q = hi / dh
    p, pe = two_prod(q, dh)
    return fast_two_sum(q, ((((hi - p) - pe) + lo) - q * dl) / dh)


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
    return torch.empty_like(x).index_put_((order,), ldexp(hi + lo, 100))


def _gamma_below_one(x: torch.Tensor) -> torch.Tensor:
    """``Gamma(x)`` for non-integer ``-190 < x < 1``: ``Gamma(x + m) / (x (x + 1) ... (x + m - 1))``.

    ``x + m`` and the factors are carried as exact double-doubles; the division starts with the
    factors nearest zero, so the running quotient only shrinks below ``2**-1022`` at the end (and it
    is scaled by ``2**600`` where the result is subnormal, to round once).
    """
    m, order = torch.sort(torch.floor(-x) + 2.0, descending=True)  # x + m in [1, 2]
    x = x[order]
    f, fe = two_sum(x, m)
    hi, lo = _gamma_near_one(f, fe)
    scaled = x < -100.0
    hi, lo = torch.where(scaled, hi * 2.0**600, hi), torch.where(scaled, lo * 2.0**600, lo)
    for j, c in enumerate(_counts_above(m)):
        dh, dl = two_sum(x[:c], m[:c] - (1.0 + j))  # factors x + m - 1, x + m - 2, ..., x
        hi[:c], lo[:c] = _div_dd_dd(hi[:c], lo[:c], dh, dl)
    result = torch.where(scaled, ldexp(hi + lo, -600), hi + lo)
    return torch.empty_like(x).index_put_((order,), result)


def tgamma(x: torch.Tensor) -> torch.Tensor:
    """The Gamma function (C ``tgamma``), to about an ulp in float64.

    ``tgamma(±0) = ±inf``, NaN at negative integers and ``-inf``, ``+inf`` above 171.62.
    (``exp(lgamma(x))`` would be hundreds of ulps off for large ``|x|``.)
    """
    out = torch.full_like(x, NAN)
    out = torch.where(x == 0, torch.copysign(torch.full_like(x, INF), x), out)
    out = torch.where(x >= 172.0, INF, out)  # includes +inf
    tiny = (x.abs() < 2.0**-54) & (x != 0)
    out = torch.where(tiny, 1.0 / x - EULER_GAMMA, out)
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


def tgamma_narrow(x: torch.Tensor) -> torch.Tensor:
    """Gamma for float32 results: ``±exp(lgamma(x))`` in float64 is off by ``~|lgamma| 2**-53``, far
    below a float32 ulp, and needs no loop."""
    g = torch.exp(torch.lgamma(x))
    g = torch.where((x < 0) & (torch.remainder(torch.floor(x), 2.0) == 1.0), -g, g)
    g = torch.where(x == 0, torch.copysign(torch.full_like(x, INF), x), g)
    return torch.where((x < 0) & (x == torch.floor(x)), NAN, g)  # poles and -inf


# --------------------------------------------------------------------------------------------------
# Error function family and the normal distribution
# --------------------------------------------------------------------------------------------------


def _times_sqrt1_2(v: torch.Tensor) -> torch.Tensor:
    """``v / sqrt(2)`` with the constant to double-double precision."""
    return torch.where(torch.isfinite(v), v * SQRT1_2_HI + v * SQRT1_2_LO, v)


def erfcinv(x: torch.Tensor) -> torch.Tensor:
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
            p, pe = two_prod(w, w)
            residual = ((torch.log(torch.special.erfcx(w)) - p) - pe) - log_y
            w = w + residual * torch.special.erfcx(w) * (0.5 / INV_SQRT_PI)
        v = torch.where(small, w, v)
    v = torch.where(upper, -v, v)
    return torch.where(v == 0, 0.0, v)


def normcdf(x: torch.Tensor) -> torch.Tensor:
    """Standard normal CDF ``erfc(-x / sqrt(2)) / 2``, accurate in the lower tail.

    (``torch.special.ndtr`` computes ``(1 + erf(x / sqrt(2))) / 2`` on the CPU, which cancels: it
    is off by 1e-9 relative at -5 and returns 0 from -10.) ``-x / sqrt(2)`` is carried as a
    double-double ``zh + zl``; ``zl`` enters through ``erfc' = -2 / sqrt(pi) exp(-z**2)``.
    """
    zh, zl = two_prod(-x, torch.full_like(x, SQRT1_2_HI))
    zl = zl - x * SQRT1_2_LO
    correction = zl * (2.0 * INV_SQRT_PI) * torch.exp(-zh * zh)
    return 0.5 * (torch.erfc(zh) - torch.where(torch.isfinite(correction), correction, 0.0))


def erfcx(x: torch.Tensor) -> torch.Tensor:
    """Scaled complementary error function ``exp(x**2) erfc(x)``.

    Computed as ``exp(x**2) erfc(|x|)`` below ``|x| = 12`` with ``x**2`` kept exact (about 2 ulp;
    ``torch.special.erfcx`` is off by up to 6 there), and ``2 exp(x**2) - erfcx(-x)`` below 0
    (torch rounds ``x**2`` before the exponential, hundreds of ulps near -25).
    """
    a = x.abs()
    p, e = two_prod(a, a)
    ex = torch.exp(p)
    ex = torch.where(torch.isfinite(ex) & torch.isfinite(e), ex + ex * e, ex)
    positive = torch.where(a < 12.0, ex * torch.erfc(a), torch.special.erfcx(a))
    return torch.where(x < 0, 2.0 * ex - positive, positive)


def erfinv(x: torch.Tensor) -> torch.Tensor:
    """Inverse error function; ``erfinv(±1) = ±inf``, NaN outside ``[-1, 1]``."""
    return torch.erfinv(x)


def normcdfinv(x: torch.Tensor) -> torch.Tensor:
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
    scale = INV_SQRT_PI / torch.sqrt(x)
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
        return j, _polevl(z, _Y0_YP) / _polevl(z, _Y0_YQ) + TWO_OVER_PI * log_x * j
    j = _polevl(z, _J1_RP) / _polevl(z, _J1_RQ) * x * (z - _J1_Z[0]) * (z - _J1_Z[1])
    y = x * (_polevl(z, _Y1_YP) / _polevl(z, _Y1_YQ)) + TWO_OVER_PI * j * log_x - TWO_OVER_PI / x
    return j, y


def _bessel(x: torch.Tensor, order: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(J(|x|), Y(|x|))`` of order 0 or 1 for finite nonzero ``x``, garbage elsewhere."""
    a = x.abs()
    far = a > 5.0
    jn, yn = _bessel_near(torch.where(far, 1.0, a), order)
    jf, yf = _bessel_far(torch.where(far, a, 6.0), order)
    return torch.where(far, jf, jn), torch.where(far, yf, yn)


def j0(x: torch.Tensor) -> torch.Tensor:
    """Bessel function of the first kind, order 0 (even; ``j0(±inf) = 0``)."""
    j = _bessel(x, 0)[0]
    j = torch.where(x == 0, 1.0, j)
    return torch.where(torch.isinf(x), 0.0, torch.where(torch.isnan(x), x, j))


def j1(x: torch.Tensor) -> torch.Tensor:
    """Bessel function of the first kind, order 1 (odd; ``j1(±0) = ±0``, ``j1(±inf) = ±0``)."""
    j = _bessel(x, 1)[0]
    j = torch.where(torch.isinf(x) | (x == 0), 0.0, torch.where(torch.isnan(x), x, j))
    return torch.where(torch.signbit(x), -j, j)


def _y(x: torch.Tensor, order: int) -> torch.Tensor:
    """Bessel function of the second kind: ``-inf`` at ``±0``, NaN below 0, ``0`` at ``+inf``."""
    y = _bessel(x, order)[1]
    y = torch.where(x == INF, 0.0, torch.where(torch.isnan(x), x, y))
    return torch.where(x == 0, -INF, torch.where(x < 0, NAN, y))


def y0(x: torch.Tensor) -> torch.Tensor:
    """Bessel function of the second kind, order 0: ``y0(±0) = -inf``, NaN below 0, ``y0(inf) = 0``."""
    return _y(x, 0)


def y1(x: torch.Tensor) -> torch.Tensor:
    """Bessel function of the second kind, order 1: ``y1(±0) = -inf``, NaN below 0, ``y1(inf) = 0``."""
    return _y(x, 1)


def cyl_bessel_i0(x: torch.Tensor) -> torch.Tensor:
    """Modified Bessel function of the first kind, order 0 (even; ``i0(±inf) = inf``).

    Past ``|x| = 700``, ``exp(|x|)`` alone would overflow before the result does: it is applied in
    two halves to the exponentially scaled ``i0e``.
    """
    a = x.abs()
    big = a > 700.0
    r = torch.where(big, torch.special.i0e(a) * torch.exp(0.5 * a) * torch.exp(0.5 * a), torch.special.i0(a))
    return torch.where(torch.isinf(a), INF, r)


def cyl_bessel_i1(x: torch.Tensor) -> torch.Tensor:
    """Modified Bessel function of the first kind, order 1 (odd; ``i1(±inf) = ±inf``)."""
    a = x.abs()
    big = a > 700.0
    r = torch.where(big, torch.special.i1e(a) * torch.exp(0.5 * a) * torch.exp(0.5 * a), torch.special.i1(a))
    r = torch.where(torch.isinf(a), INF, r)
    return torch.where(torch.signbit(x), -r, r)
