"""The builtins' torch implementations (``tcjit.refmath``), the oracle's math library.

Oracles, in order of preference: Python's ``math`` module (on the points where it does not raise),
the platform C library through ctypes (C's own answers on special values: signed zeros, infinities,
NaN), exact rational arithmetic (fma, remainder, round), mpmath (torch's own dependency, through
sympy) where neither has the function, identities (``erf(erfinv(x)) = x``...) and a few known values.
float64 results are compared in ulps; float32 ones against the float64 oracle rounded to float32.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import math
import random
import struct
from collections.abc import Callable, Sequence
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch

from tcjit import refmath
from tcjit.polyhedral.lang import builtins

INF, NAN = math.inf, math.nan
F32, F64 = torch.float32, torch.float64
DTYPES = [pytest.param(F64, id="f64"), pytest.param(F32, id="f32")]
NAMES = sorted(refmath.FUNCTIONS)
ARITY = {**builtins.CUDA_BUILTINS, **builtins.EXTENSIONS}

# Special and ordinary values: signed zeros, infinities, NaN, subnormals, the extremes, integers,
# half-integers, and values near the edges of the functions' domains.
SPECIAL = [
    0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.0, -2.0, 2.5, -2.5, 3.0, -3.0,
    0.1, -0.1, 0.75, -0.75, 0.49999999999999994, 1e-300, -1e-300, 5e-324, -5e-324, 1e-310,
    2.2250738585072014e-308, 1e-45, 1e-40, 1e-8, -1e-8, 1e300, -1e300, 1.7976931348623157e308,
    -1.7976931348623157e308, 3.4028234663852886e38, 10.0, -7.25, 30.0, 100.5, -100.5, 171.5,
    172.0, -190.5, 700.0, 1000.0, 4503599627370497.0, 1e16, -1e16, 2.0**60 + 2.0**8, 1.9999, 0.0001,
]  # fmt: skip
SPECIAL_SMALL = [0.0, -0.0, INF, -INF, NAN, 1.0, -1.5, 0.5, 2.0, -3.0, 1e-310, 1e300, -1e300, 0.1]
SPECIAL_TINY = [0.0, -0.0, INF, -INF, NAN, 1.0, -2.5, 1e-310, 1e300]


def f32(x: float) -> float:
    """``x`` rounded to float32 (to nearest, overflowing to infinity)."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(INF, x)


def ulp(x: float, dtype: torch.dtype) -> float:
    """The unit in the last place of finite ``x`` in ``dtype`` (the smallest subnormal near 0)."""
    x = abs(x)
    if dtype == F64:
        return math.ulp(x)
    return 2.0**-149 if x < 2.0**-126 else 2.0 ** (math.frexp(x)[1] - 24)


def same(
    got: float, want: float, tol_ulps: float, dtype: torch.dtype, abs_tol: float = 0.0, zero_sign: bool = True
) -> bool:
    """NaN matches NaN, infinities and zeros match exactly (sign included), finite values in ulps."""
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if math.isinf(want) or math.isinf(got) or want == 0 == got:
        return got == want and (math.copysign(1, got) == math.copysign(1, want) or not zero_sign)
    return got == want or abs(got - want) <= max(tol_ulps * ulp(want, dtype), abs_tol)


def run(name: str, points: Sequence[tuple[float, ...]], dtype: torch.dtype) -> list[float]:
    """``refmath`` on the given argument tuples, in ``dtype``, as Python floats."""
    columns = [torch.tensor(c, dtype=dtype) for c in zip(*points)]
    out = refmath.apply(name, *columns)
    assert out.dtype == dtype and out.shape == (len(points),), name
    return out.tolist()


def check(
    name: str,
    oracle: Callable[..., float],
    points: Sequence[tuple[float, ...]],
    dtype: torch.dtype,
    tol: float = 2.0,
    abs_tol: float = 0.0,
    zero_sign: bool = True,
) -> None:
    """Compare with an oracle computing in float64; skip points where the oracle raises."""
    if dtype == F32:
        points = sorted({tuple(f32(v) for v in p) for p in points}, key=str)
    got = run(name, points, dtype)
    bad = []
    for p, g in zip(points, got):
        try:
            want = oracle(*p)
        except (ValueError, OverflowError, ZeroDivisionError):
            continue
        if dtype == F32:
            want = f32(want)
        if not same(g, want, tol, dtype, abs_tol, zero_sign):
            bad.append((p, g, want))
    assert not bad, f"{name} ({dtype}): {len(bad)} mismatches, e.g. {bad[:5]}"


def grid(values: Sequence[float], arity: int) -> list[tuple[float, ...]]:
    return list(itertools.product(values, repeat=arity))


def rand(lo: float, hi: float, n: int, seed: int, log: bool = False) -> list[float]:
    r = random.Random(seed)
    if log:
        return [math.exp(r.uniform(math.log(lo), math.log(hi))) for _ in range(n)]
    return [r.uniform(lo, hi) for _ in range(n)]


ORDINARY = [
    *rand(-10, 10, 200, 1),
    *rand(1e-300, 1e300, 200, 2, log=True),
    *(-v for v in rand(1e-30, 1e30, 100, 3, log=True)),
]

# --------------------------------------------------------------------------------------------------
# The table itself
# --------------------------------------------------------------------------------------------------


def test_every_builtin_is_implemented() -> None:
    assert set(builtins.CUDA_BUILTINS) <= set(refmath.FUNCTIONS)
    assert "sigmoid" in refmath.FUNCTIONS
    assert set(refmath.FUNCTIONS) == set(builtins.CUDA_BUILTINS) | {"sigmoid"}
    assert len(refmath.FUNCTIONS) == 65


@pytest.mark.parametrize("dtype", DTYPES)
def test_no_value_raises_and_dtype_is_kept(dtype: torch.dtype) -> None:
    values = torch.tensor([0.0, -0.0, INF, -INF, NAN, -1.0, -2.5, 1e-310, 1e300, -1e300, 3.0], dtype=dtype)
    for name in NAMES:
        n = ARITY[name]
        args = [values.roll(i) for i in range(n)]
        out = refmath.apply(name, *args)
        assert out.dtype == dtype and out.shape == values.shape, name
        scalar = refmath.apply(name, *[torch.tensor(-0.5, dtype=dtype)] * n)
        assert scalar.shape == () and scalar.dtype == dtype, name
        empty = refmath.apply(name, *[torch.empty(0, dtype=dtype)] * n)
        assert empty.shape == (0,), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcasting(dtype: torch.dtype) -> None:
    shapes = {2: [(2, 1), (3,)], 3: [(2, 1, 1), (1, 3, 1), (4,)], 4: [(2, 1, 1, 1), (3, 1, 1), (4, 1), (5,)]}
    result = {2: (2, 3), 3: (2, 3, 4), 4: (2, 3, 4, 5)}
    g = torch.Generator().manual_seed(0)
    for name in NAMES:
        n = ARITY[name]
        if n == 1:
            continue
        args = [torch.rand(s, generator=g, dtype=dtype) * 4 - 1 for s in shapes[n]]
        out = refmath.apply(name, *args)
        assert out.shape == result[n] and out.dtype == dtype, name
        full = [a.expand(result[n]).contiguous() for a in args]
        torch.testing.assert_close(out, refmath.apply(name, *full), rtol=0, atol=0, equal_nan=True)


def test_bad_calls() -> None:
    with pytest.raises(KeyError, match="nope"):
        refmath.apply("nope", torch.zeros(1))
    with pytest.raises(TypeError):
        refmath.apply("sin", torch.zeros(1, dtype=torch.int32))


# --------------------------------------------------------------------------------------------------
# Against Python's math module
# --------------------------------------------------------------------------------------------------


def _c_round(x: float) -> float:
    if not math.isfinite(x) or abs(x) >= 2.0**52:
        return x
    return math.copysign(float(Decimal(x).quantize(Decimal(1), rounding=ROUND_HALF_UP)), x)


def _fdim(x: float, y: float) -> float:
    if math.isnan(x) or math.isnan(y):
        return NAN
    return x - y if x > y else 0.0


def _fmax(x: float, y: float) -> float:
    return y if math.isnan(x) else x if math.isnan(y) else max(x, y)


def _fmin(x: float, y: float) -> float:
    return y if math.isnan(x) else x if math.isnan(y) else min(x, y)


def _rnorm(*args: float) -> float:
    h = math.hypot(*args)
    if math.isinf(h) and all(map(math.isfinite, args)):
        raise OverflowError  # the oracle cannot say; refmath's is checked against mpmath
    return 1 / h


def _pow(x: float, y: float) -> float:
    if y == 0 or x == 1:
        return 1.0
    return math.pow(x, y)


def _integral(fn: Callable[[float], int]) -> Callable[[float], float]:
    """ceil, floor, trunc as C has them: floats, a zero result keeps the sign of the argument."""
    return lambda x: math.copysign(float(fn(x)), x) if abs(fn(x)) < 1 else float(fn(x))


def _logb(x: float) -> float:
    if x == 0 or not math.isfinite(x):
        raise ValueError  # left to the C library test
    return float(math.frexp(x)[1] - 1)


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


MATH: dict[str, Callable[..., float]] = {
    "acos": math.acos, "acosh": math.acosh, "asin": math.asin, "asinh": math.asinh,
    "atan": math.atan, "atan2": math.atan2, "atanh": math.atanh, "cbrt": math.cbrt,
    "ceil": _integral(math.ceil), "copysign": math.copysign, "cos": math.cos, "cosh": math.cosh,
    "erf": math.erf, "erfc": math.erfc, "exp": math.exp, "exp2": math.exp2,
    "exp10": lambda x: math.pow(10.0, x), "expm1": math.expm1, "fabs": math.fabs, "fdim": _fdim,
    "fdivide": lambda x, y: x / y, "floor": _integral(math.floor), "fmax": _fmax, "fmin": _fmin,
    "fmod": math.fmod, "hypot": math.hypot, "log": math.log, "log10": math.log10,
    "log1p": math.log1p, "log2": math.log2, "logb": _logb, "nextafter": math.nextafter,
    "norm3d": math.hypot, "norm4d": math.hypot, "pow": _pow, "rcbrt": lambda x: 1 / math.cbrt(x),
    "remainder": math.remainder, "rhypot": _rnorm, "rnorm3d": _rnorm, "rnorm4d": _rnorm,
    "round": _c_round, "rsqrt": lambda x: 1 / math.sqrt(x), "sin": math.sin, "sinh": math.sinh,
    "sqrt": math.sqrt, "tan": math.tan, "tanh": math.tanh, "tgamma": math.gamma,
    "trunc": _integral(math.trunc), "sigmoid": _sigmoid,
}  # fmt: skip

# Tolerances in ulps where 2 is too tight: math.gamma is itself ~10 ulp, glibc's cbrt is off by up to
# 2 ulps (refmath's is correctly rounded but for ties), 1/f(x) rounds twice in the oracle.
MATH_TOL = {"tgamma": 20.0, "cbrt": 4.0, "rcbrt": 4.0, "sigmoid": 3.0}
# Exact functions: no tolerance at all.
EXACT = {"ceil", "copysign", "fabs", "fdim", "floor", "fmax", "fmin", "fmod", "nextafter", "remainder",
         "round", "trunc", "logb", "fdivide", "fma"}  # fmt: skip
# C leaves the sign of a zero result open: fmax(-0, +0) may be either zero.
UNSIGNED_ZERO = {"fmax", "fmin"}


MATH_CASES = [
    pytest.param(name, dtype, id=f"{name}-{tag}")
    for name in sorted(MATH)
    for dtype, tag in ((F64, "f64"), (F32, "f32"))
    if not (name == "nextafter" and dtype is F32)  # math's is float64: see numpy's below
]


@pytest.mark.parametrize("name, dtype", MATH_CASES)
def test_against_math(name: str, dtype: torch.dtype) -> None:
    n = ARITY[name]
    values = {1: SPECIAL + ORDINARY, 2: SPECIAL, 3: [*SPECIAL_SMALL, 0.25, -7.0], 4: SPECIAL_TINY}[n]
    points = grid(values, n)
    if n == 2:
        points += list(zip(ORDINARY, reversed(ORDINARY)))
    tol = 0.0 if name in EXACT else MATH_TOL.get(name, 2.0)
    check(name, MATH[name], points, dtype, tol, zero_sign=name not in UNSIGNED_ZERO)


# --------------------------------------------------------------------------------------------------
# Against the C library itself, on special values (what C returns where math raises)
# --------------------------------------------------------------------------------------------------


def _libm() -> ctypes.CDLL | None:
    path = ctypes.util.find_library("m")
    try:
        return ctypes.CDLL(path) if path else None
    except OSError:
        return None


LIBM = _libm()
LIBM_NAMES = sorted(
    set(ARITY)
    - {"cospi", "sinpi", "cyl_bessel_i0", "cyl_bessel_i1", "erfcinv", "erfcx", "erfinv", "fdivide",
       "normcdf", "normcdfinv", "rcbrt", "rhypot", "rnorm3d", "rnorm4d", "rsqrt", "norm3d", "norm4d",
       "sigmoid"}
)  # fmt: skip
# glibc's Bessel functions and Gamma are not correctly rounded either: compare loosely, with an
# absolute floor near the Bessel functions' zeros.
LIBM_TOL = {"j0": 8.0, "j1": 8.0, "y0": 8.0, "y1": 8.0, "tgamma": 8.0, "lgamma": 4.0, "cbrt": 4.0}
LIBM_ABS = {"j0": 1e-16, "j1": 1e-16, "y0": 1e-16, "y1": 1e-16, "lgamma": 1e-16}


def _c_function(name: str, dtype: torch.dtype) -> Callable[..., float]:
    assert LIBM is not None
    n = ARITY[name]
    single = name == "nextafter" and dtype == F32  # the only one whose float32 version differs
    ctype = ctypes.c_float if single else ctypes.c_double
    fn = getattr(LIBM, name + "f" if single else name)
    fn.restype = ctype
    fn.argtypes = [ctype] * n
    return fn


@pytest.mark.skipif(LIBM is None, reason="no C math library to load")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", LIBM_NAMES)
def test_special_values_against_libm(name: str, dtype: torch.dtype) -> None:
    n = ARITY[name]
    values = {1: SPECIAL, 2: SPECIAL, 3: SPECIAL_SMALL, 4: SPECIAL_TINY}[n]
    tol = 0.0 if name in EXACT else LIBM_TOL.get(name, 2.0)
    oracle = _c_function(name, dtype)
    check(name, oracle, grid(values, n), dtype, tol, LIBM_ABS.get(name, 0.0), name not in UNSIGNED_ZERO)


@pytest.mark.parametrize("dtype", DTYPES)
def test_specified_special_values(dtype: torch.dtype) -> None:
    table = [
        ("pow", (NAN, 0.0), 1.0), ("pow", (NAN, -0.0), 1.0), ("pow", (1.0, NAN), 1.0),
        ("pow", (-8.0, 1 / 3), NAN), ("pow", (-2.0, 3.0), -8.0), ("pow", (-1.0, INF), 1.0),
        ("pow", (0.0, -1.0), INF), ("pow", (-0.0, -1.0), -INF), ("pow", (-0.0, -2.0), INF),
        ("cbrt", (-8.0,), -2.0), ("cbrt", (-0.0,), -0.0), ("cbrt", (-INF,), -INF), ("cbrt", (27.0,), 3.0),
        ("rcbrt", (-0.0,), -INF), ("rcbrt", (INF,), 0.0), ("rcbrt", (-8.0,), -0.5),
        ("rsqrt", (-0.0,), -INF), ("rsqrt", (0.0,), INF), ("rsqrt", (INF,), 0.0), ("rsqrt", (-1.0,), NAN),
        ("rsqrt", (4.0,), 0.5), ("sqrt", (-0.0,), -0.0),
        ("erfcinv", (0.0,), INF), ("erfcinv", (2.0,), -INF), ("erfcinv", (1.0,), 0.0),
        ("erfcinv", (-0.5,), NAN), ("erfcinv", (2.5,), NAN), ("erfcinv", (NAN,), NAN),
        ("erfinv", (1.0,), INF), ("erfinv", (-1.0,), -INF), ("erfinv", (1.5,), NAN),
        ("erfinv", (-0.0,), -0.0),
        ("normcdfinv", (0.0,), -INF), ("normcdfinv", (1.0,), INF), ("normcdfinv", (0.5,), 0.0),
        ("normcdfinv", (1.5,), NAN), ("normcdf", (INF,), 1.0), ("normcdf", (-INF,), 0.0),
        ("normcdf", (NAN,), NAN), ("erfcx", (INF,), 0.0), ("erfcx", (-INF,), INF), ("erfcx", (0.0,), 1.0),
        ("logb", (0.0,), -INF), ("logb", (-0.0,), -INF), ("logb", (-INF,), INF), ("logb", (NAN,), NAN),
        ("logb", (-8.0,), 3.0), ("logb", (0.75,), -1.0),
        ("round", (2.5,), 3.0), ("round", (-2.5,), -3.0), ("round", (0.49999999999999994,), 0.0),
        ("round", (-0.4,), -0.0), ("round", (0.5,), 1.0), ("round", (-0.5,), -1.0),
        ("fdim", (INF, INF), 0.0), ("fdim", (3.0, 5.0), 0.0), ("fdim", (5.0, 3.0), 2.0),
        ("fdim", (NAN, 1.0), NAN), ("fdim", (1.0, NAN), NAN), ("fdim", (INF, -INF), INF),
        ("fmax", (NAN, 1.0), 1.0), ("fmin", (1.0, NAN), 1.0), ("fmax", (NAN, NAN), NAN),
        ("remainder", (5.0, 0.0), NAN), ("remainder", (INF, 1.0), NAN), ("remainder", (5.0, INF), 5.0),
        ("remainder", (5.0, 2.0), 1.0), ("remainder", (7.0, 2.0), -1.0), ("remainder", (-5.0, 2.0), -1.0),
        ("remainder", (-4.0, 2.0), -0.0), ("remainder", (4.0, -2.0), 0.0), ("remainder", (NAN, 1.0), NAN),
        ("fmod", (-5.0, 3.0), -2.0), ("fmod", (5.0, 0.0), NAN), ("fmod", (5.0, INF), 5.0),
        ("fmod", (-0.0, 1.0), -0.0),
        ("tgamma", (0.0,), INF), ("tgamma", (-0.0,), -INF), ("tgamma", (-1.0,), NAN),
        ("tgamma", (-INF,), NAN), ("tgamma", (INF,), INF), ("tgamma", (171.7,), INF),
        ("tgamma", (5.0,), 24.0), ("tgamma", (0.5,), math.sqrt(math.pi)), ("tgamma", (-200.5,), -0.0),
        ("tgamma", (-201.5,), 0.0), ("lgamma", (0.0,), INF), ("lgamma", (-2.0,), INF),
        ("lgamma", (-INF,), INF), ("lgamma", (1.0,), 0.0), ("lgamma", (2.0,), 0.0),
        ("j0", (INF,), 0.0), ("j0", (-INF,), 0.0), ("j0", (0.0,), 1.0), ("j1", (INF,), 0.0),
        ("j1", (-INF,), -0.0), ("j1", (-0.0,), -0.0), ("y0", (0.0,), -INF), ("y0", (-0.0,), -INF),
        ("y0", (-1.0,), NAN), ("y0", (INF,), 0.0), ("y0", (-INF,), NAN), ("y1", (0.0,), -INF),
        ("y1", (-2.0,), NAN), ("y1", (INF,), 0.0),
        ("cyl_bessel_i0", (INF,), INF), ("cyl_bessel_i0", (-INF,), INF), ("cyl_bessel_i0", (0.0,), 1.0),
        ("cyl_bessel_i1", (INF,), INF), ("cyl_bessel_i1", (-INF,), -INF), ("cyl_bessel_i1", (-0.0,), -0.0),
        ("hypot", (INF, NAN), INF), ("hypot", (NAN, -INF), INF), ("hypot", (NAN, 1.0), NAN),
        ("hypot", (0.0, -0.0), 0.0), ("rhypot", (INF, NAN), 0.0), ("rhypot", (0.0, 0.0), INF),
        ("norm3d", (NAN, 1.0, -INF), INF), ("norm3d", (NAN, 1.0, 2.0), NAN),
        ("norm4d", (0.0, 0.0, 0.0, 0.0), 0.0),
        ("rnorm3d", (0.0, -0.0, 0.0), INF), ("rnorm4d", (1.0, NAN, 1.0, INF), 0.0),
        ("norm3d", (1e300, 1e300, 1e300), math.sqrt(3) * 1e300), ("rnorm4d", (1.0, 1.0, 1.0, 1.0), 0.5),
        ("sigmoid", (INF,), 1.0), ("sigmoid", (-INF,), 0.0), ("sigmoid", (0.0,), 0.5),
        ("sigmoid", (NAN,), NAN), ("sigmoid", (-1000.0,), 0.0),
        ("sinpi", (INF,), NAN), ("cospi", (-INF,), NAN), ("sinpi", (NAN,), NAN),
        ("fma", (2.0, 3.0, 4.0), 10.0), ("fma", (INF, 0.0, 1.0), NAN), ("fma", (1e300, 1e300, -INF), -INF),
        ("fma", (1.0, 1.0, NAN), NAN), ("fma", (-0.0, 1.0, -0.0), -0.0), ("fma", (0.0, -1.0, 0.0), 0.0),
        ("copysign", (1.0, -0.0), -1.0), ("copysign", (-2.0, INF), 2.0),
    ]  # fmt: skip
    bad = []
    for name, args, want in table:
        if dtype == F32:
            if any(f32(a) != a for a in args if math.isfinite(a)):
                continue  # not a float32 value
            want = f32(want)
        got = run(name, [args], dtype)[0]
        if not same(got, want, 2.0, dtype):
            bad.append((name, args, got, want))
    assert not bad, bad


# --------------------------------------------------------------------------------------------------
# Exact functions, exhaustively on random operands
# --------------------------------------------------------------------------------------------------


def _random_floats(n: int, seed: int, dtype: torch.dtype, emin: int, emax: int) -> list[float]:
    """Random finite values with exponents spread over ``[emin, emax]`` and both signs."""
    r = random.Random(seed)
    out = [r.choice((-1, 1)) * r.uniform(1, 2) * 2.0 ** r.randint(emin, emax) for _ in range(n)]
    return [f32(v) for v in out] if dtype == F32 else out


@pytest.mark.parametrize("dtype", DTYPES)
def test_remainder_and_fmod_are_exact(dtype: torch.dtype) -> None:
    emin, emax = (-149, 127) if dtype == F32 else (-1074, 1023)
    xs = _random_floats(3000, 1, dtype, emin, emax)
    ys = _random_floats(3000, 2, dtype, emin, emax)
    near = _random_floats(2000, 3, dtype, -10, 10)  # quotients near half-integers and small ones
    r = random.Random(4)
    ys += [v * r.choice((0.5, 1.0, 2.0, 3.0, 1.5)) for v in near[:1000]]
    xs += [v * k / 2 for v, k in zip(near[1000:], range(1000))]
    cast = f32 if dtype == F32 else float
    points = [(cast(x), cast(y)) for x, y in zip(xs, ys)]
    for name, oracle in (("remainder", math.remainder), ("fmod", math.fmod)):
        got = run(name, points, dtype)
        bad = [(p, g) for p, g in zip(points, got) if not same(g, oracle(*p), 0, dtype)]
        assert not bad, (name, bad[:5])


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_half_away_from_zero(dtype: torch.dtype) -> None:
    values = [k / 2 for k in range(-40, 41)] + [k / 2 + d for k in range(-9, 10) for d in (-1e-6, 1e-6)]
    values += [0.49999999999999994, -0.49999999999999994, 4503599627370495.5, 2.0**52 + 1, 2.0**60]
    values += _random_floats(500, 5, dtype, -5, 60)
    points = [(f32(v) if dtype == F32 else v,) for v in values]
    got = run("round", points, dtype)
    bad = [(p, g) for p, g in zip(points, got) if not same(g, _c_round(p[0]), 0, dtype)]
    assert not bad, bad[:5]


def test_nextafter_float32_in_float32() -> None:
    xs = [0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 3.4028234663852886e38, 1.17549435e-38, INF, NAN, 2.5]
    ys = [1.0, -1.0, 0.0, INF, -INF, NAN, 2.5]
    points = [(f32(x), f32(y)) for x in xs for y in ys]
    got = run("nextafter", points, F32)
    for (x, y), g in zip(points, got):
        with np.errstate(over="ignore"):  # nextafter(max, inf) is inf
            want = float(np.nextafter(np.float32(x), np.float32(y)))
        assert same(g, want, 0, F32), (x, y, g, want)
    # the smallest float32 subnormal, not float64's
    assert run("nextafter", [(0.0, 1.0)], F32)[0] == 2.0**-149


def _exact(v: Fraction, dtype: torch.dtype) -> float:
    """``v`` correctly rounded to ``dtype`` (ties to even)."""
    try:
        d = float(v)  # correctly rounded to float64
    except OverflowError:
        return math.copysign(INF, v)
    if dtype == F64:
        return d
    if abs(v) >= Fraction(2**128 - 2**103):  # halfway between the largest float32 and 2**128
        return math.copysign(INF, v)
    near = torch.tensor(d, dtype=F64).to(F32)
    candidates = [near, torch.nextafter(near, torch.tensor(INF)), torch.nextafter(near, -torch.tensor(INF))]
    candidates = [c.item() for c in candidates if torch.isfinite(c)]
    return min(candidates, key=lambda c: (abs(Fraction(c) - v), int(np.float32(c).view(np.int32)) & 1))


def _fma_cases(dtype: torch.dtype, seed: int) -> list[tuple[float, float, float]]:
    """Random operands and hard cases: odd products of p + 1 bits lie exactly halfway between two
    floats (a tiny addend, or half an ulp, decides the rounding), cancellations, huge products,
    subnormal ones."""
    r = random.Random(seed)
    p = 24 if dtype == F32 else 53
    emin, emax = (-149, 127) if dtype == F32 else (-1074, 1023)
    bits_a = p // 2 + 1
    bits_b = p + 2 - bits_a
    cases = []
    for _ in range(1500):
        a = (r.randrange(2 ** (bits_a - 1), 2**bits_a) | 1) * r.choice((-1, 1))
        b = r.randrange(2 ** (bits_b - 1), 2**bits_b) | 1
        a = float(a) * 2.0 ** r.randint(emin // 2, emax // 2 - bits_a)
        b = float(b) * 2.0 ** r.randint(emin // 2, emax // 2 - bits_b)
        prod = Fraction(a) * Fraction(b)
        rounded = _exact(prod, dtype)
        step = ulp(rounded, dtype) if math.isfinite(rounded) else 1.0
        c = r.choice(
            [
                0.0,
                r.choice((-1, 1)) * max(step * 2.0**-40, 2.0**emin),  # a tiny addend decides a tie
                r.choice((-1, 1)) * step / 2,  # makes (or breaks) a tie
                -rounded if math.isfinite(rounded) else 1.0,  # cancellation: the product's error
                r.uniform(-1, 1) * 2.0 ** r.randint(emin, emax),
                rounded * r.uniform(-2, 2) if math.isfinite(rounded) else -1.0,
            ]
        )
        cases.append((a, b, f32(c) if dtype == F32 else c))
    for _ in range(500):
        cases.append(tuple(r.uniform(-1, 1) * 2.0 ** r.randint(emin // 2, emax // 2) for _ in range(3)))
    if dtype == F32:
        cases = [tuple(f32(v) for v in case) for case in cases]
    return cases


@pytest.mark.parametrize("dtype", DTYPES)
def test_fma_is_correctly_rounded(dtype: torch.dtype) -> None:
    cases = _fma_cases(dtype, 7)
    got = run("fma", cases, dtype)
    bad = []
    for (a, b, c), g in zip(cases, got):
        exact = Fraction(a) * Fraction(b) + Fraction(c)
        want = _exact(exact, dtype)
        if dtype == F64 and 2.0**-1023 <= abs(exact) < 2.0**-1022 and abs(g - want) <= 2.0**-1074:
            continue  # documented: a tie among the 52-bit subnormals may round the wrong way
        if not same(g, want, 0, dtype):
            bad.append(((a, b, c), g, want))
    assert not bad, bad[:5]


# --------------------------------------------------------------------------------------------------
# Functions math lacks: identities, known values, mpmath
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_sinpi_cospi_exact_points(dtype: torch.dtype) -> None:
    ints = [float(k) for k in range(-12, 13)] + [2.0**52 + 1, 2.0**60, -(2.0**53) - 2, 1e300]
    if dtype == F32:
        ints = [f32(v) for v in ints if abs(v) < 1e30]
    halves = [k + 0.5 for k in range(-12, 12)]
    s = run("sinpi", [(v,) for v in [*ints, -0.0]], dtype)
    for v, g in zip([*ints, -0.0], s):
        assert g == 0 and math.copysign(1, g) == math.copysign(1, v), (v, g)
    c = run("cospi", [(v,) for v in ints], dtype)
    for v, g in zip(ints, c):
        assert g == (1.0 if math.fmod(v, 2) == 0 else -1.0), (v, g)
    s = run("sinpi", [(v,) for v in halves], dtype)
    for v, g in zip(halves, s):
        assert g == (1.0 if math.fmod(v - 0.5, 2) == 0 else -1.0), (v, g)
    c = run("cospi", [(v,) for v in halves], dtype)
    assert all(g == 0 and math.copysign(1, g) == 1 for g in c), c
    # quarter-integers: sqrt(1/2) up to an ulp
    q = run("sinpi", [(0.25,), (-0.75,), (2.25,)], dtype)
    want = f32(math.sqrt(0.5)) if dtype == F32 else math.sqrt(0.5)
    assert all(same(g, w, 1, dtype) for g, w in zip(q, [want, -want, want])), q


@pytest.mark.parametrize("dtype", DTYPES)
def test_sinpi_cospi_against_math_near_zero(dtype: torch.dtype) -> None:
    # sin(pi x) in float64 is accurate for small x, where pi * x rounds harmlessly
    xs = rand(-0.25, 0.25, 200, 11) + rand(1e-300, 1e-3, 100, 12, log=True)
    check("sinpi", lambda x: math.sin(math.pi * x), [(x,) for x in xs], dtype, 2.0)
    check("cospi", lambda x: math.cos(math.pi * x), [(x,) for x in xs], dtype, 2.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_inverse_error_functions(dtype: torch.dtype) -> None:
    tol = 1e-15 if dtype == F64 else 2e-7
    xs = torch.tensor([*rand(-0.999, 0.999, 300, 21), 0.0, 0.5, -0.9999999], dtype=dtype)
    back = refmath.apply("erf", refmath.apply("erfinv", xs))
    torch.testing.assert_close(back, xs, rtol=4 * tol, atol=tol)
    # erfc loses the information below -1 (2 - tiny) and in float32 past 9 (subnormal results)
    ys = torch.tensor([*rand(-1, 25 if dtype == F64 else 9, 300, 22), 0.0, 1.0, 5.0], dtype=dtype)
    back = refmath.apply("erfcinv", refmath.apply("erfc", ys))
    torch.testing.assert_close(back, ys, rtol=4 * tol, atol=tol)
    # (normcdf(normcdfinv(p)) = p is ill-conditioned in the tail: normcdfinv's own rounding shows)
    xs = torch.tensor([*rand(-37 if dtype == F64 else -12, 2, 300, 23), 0.0, 1.0], dtype=dtype)
    back = refmath.apply("normcdfinv", refmath.apply("normcdf", xs))
    torch.testing.assert_close(back, xs, rtol=4 * tol, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_erfcx_against_exp_erfc(dtype: torch.dtype) -> None:
    xs = rand(-2, 2, 300, 31)  # beyond, exp(x * x) in the oracle is inexact (see the mpmath test)
    check("erfcx", lambda x: math.exp(x * x) * math.erfc(x), [(x,) for x in xs], dtype, 8.0)


def test_known_values() -> None:
    # Correctly rounded values (mpmath at 300 bits).
    table = {
        "j0": [(1.0, 0.7651976865579666), (10.0, -0.24593576445134835), (1e10, 2.175591750246892e-06)],
        "j1": [(1.0, 0.4400505857449335), (-10.0, -0.04347274616886144)],
        "y0": [(1.0, 0.08825696421567696), (10.0, 0.055671167283599395)],
        "y1": [(1.0, -0.7812128213002887), (10.0, 0.24901542420695388)],
        "cyl_bessel_i0": [(1.0, 1.2660658777520084), (-10.0, 2815.7166284662544),
                          (710.0, 3.345334558619656e306)],
        "cyl_bessel_i1": [(1.0, 0.565159103992485), (-10.0, -2670.9883037012546)],
        "erfinv": [(0.5, 0.4769362762044699), (-0.9, -1.1630871536766743)],
        "erfcinv": [(0.5, 0.4769362762044699), (1e-300, 26.209469960516124), (1.5, -0.4769362762044699)],
        "normcdfinv": [(0.975, 1.9599639845400538), (1e-10, -6.361340902404057)],
        "normcdf": [(1.959963984540054, 0.975), (-10.0, 7.619853024160525e-24),
                    (-37.0, 5.725571222524577e-300)],
        "erfcx": [(1.0, 0.427583576155807), (-1.0, 5.008980080762283), (30.0, 0.01879588886141675)],
        "tgamma": [(0.5, 1.772453850905516), (-0.5, -3.544907701811032), (171.5, 9.4833675668248e307),
                   (-170.5, -3.3127395215386074e-308), (1e-300, 9.999999999999999e299),
                   (23.0, 1.1240007277776077e21)],
        "sigmoid": [(2.0, 0.8807970779778824), (-40.0, 4.248354255291589e-18)],
        "cbrt": [(-27.0, -3.0), (2.0, 1.2599210498948732)],
        "exp10": [(2.0, 100.0), (-3.0, 0.001)],
    }  # fmt: skip
    for name, rows in table.items():
        got = run(name, [(x,) for x, _ in rows], F64)
        for (x, want), g in zip(rows, got):
            assert same(g, want, 2, F64, 1e-16 if name[0] in "jy" else 0), (name, x, g, want)


try:  # torch's own dependency (through sympy), but not a declared one of tcjit
    import mpmath
except ImportError:  # pragma: no cover
    mpmath = None
needs_mpmath = pytest.mark.skipif(mpmath is None, reason="mpmath is not installed")


def _erfcinv_mp(y: object) -> object:
    """erfcinv in mpmath: erfinv(1 - y) needs ~-log2(y) bits; Newton on erfc(v) = y does not."""
    if y >= 0.5:
        return -mpmath.erfinv(y - 1)
    if y == 0:
        return mpmath.inf
    v = mpmath.sqrt(-mpmath.log(y))  # a rough start; Newton converges from above
    for _ in range(100):
        step = (mpmath.erfc(v) - y) * mpmath.sqrt(mpmath.pi) / 2 * mpmath.exp(v * v)
        v += step
        if abs(step) < abs(v) * mpmath.mpf(2) ** -110:
            break
    return v


def _erfcx_mp(x: object) -> object:
    if x > 1e8:  # the asymptotic series, where mpmath's exp(x * x) would overflow
        return (1 - 1 / (2 * x * x)) / (x * mpmath.sqrt(mpmath.pi))
    return mpmath.exp(x * x) * mpmath.erfc(x)


def _mp(fn: Callable[..., object], prec: int = 150) -> Callable[..., float]:
    def oracle(*args: float) -> float:
        with mpmath.workprec(prec):
            return float(fn(*(mpmath.mpf(a) for a in args)))

    return oracle


def _envelope_floor(scale: float) -> Callable[[float], float]:
    return lambda x: scale * min(1.0, math.sqrt(2 / (math.pi * abs(x)))) if x else scale


_LIN, _LOG = False, True
# name: (mpmath oracle, (lo, hi, count, log-uniform) ranges of arguments, tolerance in ulps,
#        absolute floor in units of the Bessel envelope min(1, sqrt(2 / (pi x))))
MPMATH_CASES: dict[str, tuple[Callable[..., object], list[tuple[float, float, int, bool]], float, float]] = {
    "j0": (lambda x: mpmath.besselj(0, x), [(-30, 30, 150, _LIN), (30, 1e300, 50, _LOG)], 4, 1e-15),
    "j1": (lambda x: mpmath.besselj(1, x), [(-30, 30, 150, _LIN), (30, 1e300, 50, _LOG)], 4, 1e-15),
    "y0": (lambda x: mpmath.bessely(0, x), [(1e-300, 30, 150, _LOG), (30, 1e300, 25, _LOG)], 4, 6e-15),
    "y1": (lambda x: mpmath.bessely(1, x), [(1e-300, 30, 150, _LOG), (30, 1e300, 25, _LOG)], 4, 6e-15),
    "cyl_bessel_i0": (lambda x: mpmath.besseli(0, x), [(-50, 50, 150, _LIN), (690, 713, 20, _LIN)], 8, 0),
    "cyl_bessel_i1": (lambda x: mpmath.besseli(1, x), [(-50, 50, 150, _LIN), (690, 713, 20, _LIN)], 8, 0),
    "tgamma": (
        lambda x: mpmath.gamma(x),
        [(-185, 172, 200, _LIN), (-2, 2, 50, _LIN), (1e-300, 1, 50, _LOG)],
        3,
        0,
    ),
    "lgamma": (lambda x: mpmath.loggamma(x).real, [(-50, 50, 200, _LIN), (1e-300, 1e300, 50, _LOG)], 4, 0),
    "erfinv": (lambda x: mpmath.erfinv(x), [(-1, 1, 200, _LIN), (0.9999, 1 - 1e-16, 50, _LIN)], 3, 0),
    "erfcinv": (lambda x: _erfcinv_mp(x), [(1e-323, 1, 100, _LOG), (0, 2, 100, _LIN)], 4, 0),
    "normcdfinv": (lambda p: -mpmath.sqrt(2) * _erfcinv_mp(2 * p), [(1e-300, 1, 150, _LOG)], 4, 0),
    "normcdf": (lambda x: mpmath.ncdf(x), [(-38, 9, 200, _LIN)], 3, 0),
    "erfcx": (lambda x: _erfcx_mp(x), [(-26, 40, 200, _LIN), (40, 1e300, 30, _LOG)], 3, 0),
    "sinpi": (lambda x: mpmath.sinpi(x), [(-5, 5, 200, _LIN), (1, 1e15, 50, _LOG)], 2, 0),
    "cospi": (lambda x: mpmath.cospi(x), [(-5, 5, 200, _LIN), (1, 1e15, 50, _LOG)], 2, 0),
    "cbrt": (
        lambda x: mpmath.sign(x) * mpmath.cbrt(abs(x)),
        [(1e-320, 1e308, 200, _LOG), (-1e-30, -1e30, 50, _LOG)],
        1,
        0,
    ),
    "rcbrt": (lambda x: 1 / mpmath.cbrt(x), [(1e-320, 1e308, 200, _LOG)], 1, 0),
    "rsqrt": (lambda x: 1 / mpmath.sqrt(x), [(1e-323, 1e308, 200, _LOG)], 1, 0),
    "sigmoid": (lambda x: 1 / (1 + mpmath.exp(-x)), [(-745, 40, 200, _LIN)], 2, 0),
    "exp10": (lambda x: mpmath.power(10, x), [(-323, 308, 200, _LIN)], 2, 0),
}


def _arguments(ranges: list[tuple[float, float, int, bool]], seed: int) -> list[float]:
    """Uniform or log-uniform arguments (a negative log range is mirrored)."""
    out = []
    for i, (lo, hi, n, log) in enumerate(ranges):
        sign = -1.0 if log and lo < 0 else 1.0
        out += [sign * v for v in rand(abs(lo), abs(hi), n, seed + i, log)]
    return out


MPMATH_CASES_N = {
    "hypot": 2, "rhypot": 2, "norm3d": 3, "rnorm3d": 3, "norm4d": 4, "rnorm4d": 4,
}  # fmt: skip


@needs_mpmath
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(MPMATH_CASES))
def test_against_mpmath(name: str, dtype: torch.dtype) -> None:
    fn, ranges, ulps, floor = MPMATH_CASES[name]
    xs = _arguments(ranges, seed=sorted(MPMATH_CASES).index(name) * 10)
    abs_floor = _envelope_floor(floor)
    if dtype == F32:
        xs = [f32(x) for x in xs]
        ulps, floor = 1, 0
    points = [(x,) for x in xs if math.isfinite(x)]
    got = run(name, points, dtype)
    oracle = _mp(fn)
    bad = []
    for (x,), g in zip(points, got):
        try:
            want = oracle(x)
        except (ValueError, ZeroDivisionError):  # poles (x rounded to float32 may hit one)
            continue
        if dtype == F32:
            want = f32(want)
        if not same(g, want, ulps, dtype, abs_floor(x) if floor else 0.0):
            bad.append((x, g, want))
    assert not bad, bad[:5]


@needs_mpmath
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(MPMATH_CASES_N))
def test_norms_against_mpmath(name: str, dtype: torch.dtype) -> None:
    n = MPMATH_CASES_N[name]
    r = random.Random(80 + n)
    emin, emax = (-149, 127) if dtype == F32 else (-1074, 1023)
    points = []
    for _ in range(200):
        e = r.randint(emin + 60, emax - 2)  # similar magnitudes, then wildly different ones
        points.append(tuple(r.uniform(-1, 1) * 2.0 ** (e + r.randint(-3, 0)) for _ in range(n)))
        points.append(tuple(r.uniform(-1, 1) * 2.0 ** r.randint(emin, emax) for _ in range(n)))
    if dtype == F32:
        points = [tuple(f32(v) for v in p) for p in points]
    reciprocal = name.startswith("r")

    def oracle(*args: float) -> float:
        s = mpmath.sqrt(mpmath.fsum(mpmath.mpf(a) ** 2 for a in args))
        v = 1 / s if reciprocal else s
        return float(v) if abs(v) < mpmath.mpf(2) ** 1024 else INF

    check(name, lambda *a: mpmath.workprec(200)(oracle)(*a), points, dtype, 1.0)
