"""The oracle's builtin functions (``tcjit.refmath`` through ``tcjit.reference``) against mpmath.

Every CUDA math builtin of the language and the ``sigmoid`` extension, each in a one-statement TC
program, at a handful of points inside its domain: float64 to ~1e-13 relative, float32 correctly
rounded to within an ulp (the language computes float32 builtins in float and rounds once). mpmath
(a dependency of torch through sympy) computes the mathematical values independently of torch.
"""

from __future__ import annotations

import math

import pytest
import torch

from tcjit import reference


def run(source: str, *inputs):
    return reference.evaluate(source, None, *inputs)


_ANY = [-2.5, -0.75, -0.1, 0.3, 1.0, 2.2, 7.9]
_POS = [0.3, 1.0, 2.2, 7.9, 123.4]
_UNIT = [-0.9, -0.3, 0.0, 0.25, 0.75]
_DOMAINS: dict[str, list[list[float]]] = {
    "acos": [_UNIT], "asin": [_UNIT], "atanh": [_UNIT], "erfinv": [_UNIT],
    "acosh": [[1.0, 1.5, 3.0, 10.0, 1e3]],
    "log": [_POS], "log2": [_POS], "log10": [_POS], "sqrt": [_POS], "rsqrt": [_POS], "logb": [_POS],
    "rcbrt": [_POS], "j0": [_POS[:4]], "j1": [_POS[:4]], "y0": [_POS[:4]], "y1": [_POS[:4]],
    "log1p": [[-0.5, -0.1, 1e-10, 0.3, 5.0]],
    "erfcinv": [[0.1, 0.5, 1.0, 1.5, 1.9]], "normcdfinv": [[0.01, 0.2, 0.5, 0.8, 0.99]],
    "tgamma": [[-2.5, -0.75, 0.3, 1.0, 2.2, 7.9]], "lgamma": [[-2.5, -0.75, 0.3, 1.0, 2.2, 7.9]],
    "pow": [[0.3, 1.0, 2.2, 7.9, 0.5], [-1.5, 2.0, 0.5, 3.3, -2.0]],
    "fmod": [_ANY, [1.5, -0.7, 2.0, 0.25, 3.0, -1.0, 2.5]],
    "remainder": [_ANY, [1.5, -0.7, 2.0, 0.25, 3.0, -1.0, 2.5]],
    "fdivide": [_ANY, [1.5, -0.7, 2.0, 0.25, 3.0, -1.0, 2.5]],
}  # fmt: skip
_SECOND = [0.5, 2.0, -1.25, 3.0, -0.4, 1.0, 0.9]
_THIRD = [1.5, -0.2, 0.7, -3.0, 2.5, 0.1, 4.0]
_FOURTH = [-1.0, 0.6, 2.5, 0.3, -0.8, 1.2, 0.05]


def _mp_reference():
    """Each builtin's mathematical value, computed with mpmath (independent of torch)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.prec = 200

    def logb(x):
        return float(math.frexp(float(x))[1] - 1)

    def cbrt(x):  # the real root (mpmath's is the principal complex one)
        return mp.sign(x) * mp.cbrt(abs(x))

    def rnd(x):
        return math.copysign(math.floor(abs(float(x)) + 0.5), float(x))

    return {
        "acos": mp.acos, "acosh": mp.acosh, "asin": mp.asin, "asinh": mp.asinh, "atan2": mp.atan2,
        "atan": mp.atan, "atanh": mp.atanh, "cbrt": cbrt, "ceil": mp.ceil,
        "copysign": lambda x, y: math.copysign(float(x), float(y)), "cos": mp.cos, "cosh": mp.cosh,
        "cospi": mp.cospi, "cyl_bessel_i0": lambda x: mp.besseli(0, x),
        "cyl_bessel_i1": lambda x: mp.besseli(1, x), "erfc": mp.erfc, "erfcinv": lambda y: mp.erfinv(1 - y),
        "erfcx": lambda x: mp.exp(x * x) * mp.erfc(x), "erf": mp.erf, "erfinv": mp.erfinv,
        "exp10": lambda x: mp.power(10, x), "exp2": lambda x: mp.power(2, x), "exp": mp.exp,
        "expm1": mp.expm1, "fabs": mp.fabs, "fdim": lambda x, y: max(x - y, 0),
        "fdivide": lambda x, y: x / y, "floor": mp.floor, "fma": lambda x, y, z: x * y + z,
        "fmax": max, "fmin": min, "fmod": lambda x, y: math.fmod(float(x), float(y)), "hypot": mp.hypot,
        "j0": lambda x: mp.besselj(0, x), "j1": lambda x: mp.besselj(1, x),
        "lgamma": lambda x: mp.log(abs(mp.gamma(x))), "log10": mp.log10, "log1p": mp.log1p,
        "log2": lambda x: mp.log(x, 2), "logb": logb, "log": mp.log,
        "nextafter": lambda x, y: math.nextafter(float(x), float(y)),
        "norm3d": lambda a, b, c: mp.sqrt(a * a + b * b + c * c),
        "norm4d": lambda a, b, c, d: mp.sqrt(a * a + b * b + c * c + d * d), "normcdf": mp.ncdf,
        "normcdfinv": lambda p: mp.sqrt(2) * mp.erfinv(2 * p - 1), "pow": mp.power,
        "rcbrt": lambda x: 1 / cbrt(x), "remainder": lambda x, y: math.remainder(float(x), float(y)),
        "rhypot": lambda x, y: 1 / mp.hypot(x, y),
        "rnorm3d": lambda a, b, c: 1 / mp.sqrt(a * a + b * b + c * c),
        "rnorm4d": lambda a, b, c, d: 1 / mp.sqrt(a * a + b * b + c * c + d * d), "round": rnd,
        "rsqrt": lambda x: 1 / mp.sqrt(x), "sin": mp.sin, "sinh": mp.sinh, "sinpi": mp.sinpi,
        "sqrt": mp.sqrt, "tan": mp.tan, "tanh": mp.tanh, "tgamma": mp.gamma,
        "trunc": lambda x: float(math.trunc(float(x))),
        "y0": lambda x: mp.bessely(0, x), "y1": lambda x: mp.bessely(1, x),
        "sigmoid": lambda x: 1 / (1 + mp.exp(-x)),
    }  # fmt: skip


def _builtin_names() -> list[str]:
    from tcjit.polyhedral.lang.builtins import CUDA_BUILTINS, EXTENSIONS

    return sorted(CUDA_BUILTINS) + sorted(EXTENSIONS)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", _builtin_names())
def test_builtin_function_against_mpmath(name: str, dtype: torch.dtype) -> None:
    """Each builtin in a one-statement program; float64 to ~1e-13 relative, float32 correctly
    rounded to within an ulp (the language computes it in float and rounds once)."""
    from tcjit.polyhedral.lang.builtins import BUILTINS

    mp = pytest.importorskip("mpmath")
    ref = _mp_reference()[name]
    arity = BUILTINS[name]
    args = list(_DOMAINS.get(name, [_ANY]))
    n = len(args[0])
    for extra in (_SECOND, _THIRD, _FOURTH)[len(args) - 1 : arity - 1]:
        args.append(extra[:n])
    tensors = [torch.tensor(a, dtype=torch.float64).to(dtype) for a in args]
    tname = "double" if dtype == torch.float64 else "float"
    params = ", ".join(f"{tname}(N) X{k}" for k in range(arity))
    call = ", ".join(f"X{k}(i)" for k in range(arity))
    got = run(f"def f({params}) -> (O) {{ O(i) = {name}({call}) }}", *tensors)
    assert got.dtype == dtype
    points = zip(*(t.double().tolist() for t in tensors))
    want = torch.tensor([float(ref(*(mp.mpf(v) for v in p))) for p in points], dtype=torch.float64)
    if dtype == torch.float64:
        torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-15)
    else:
        torch.testing.assert_close(got, want.float(), rtol=1.2e-7, atol=1e-30)
