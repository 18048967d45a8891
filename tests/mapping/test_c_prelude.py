"""The C prelude of CPU kernels (``tcjit.mapping.c_prelude``) against the oracle and mpmath.

One harness is compiled per session: the prelude followed by small exported functions that apply
one helper elementwise (``apply_exp_f64(const double *x0, double *y, long n)`` for every builtin
and both compute types, and wrappers for the integer, conversion and half-precision helpers). It is
built with the kernel flags plus ``-Wall -Wextra -Werror`` and loaded with ctypes. A second, small
library builds the half-precision conversions with ``TC_NO_FLOAT16`` (the portable bit-level code).

Tolerances: float results within 2 ulps of the oracle (which is correctly rounded or within a hair
of it; measured: all within 1). Double results within the ulps of ``_F64_ULPS`` of the oracle (4 by
default; up to 24 where both sides are a few ulps off in different ways, all far inside the
language's 1e-12). Three places where the oracle is not the right judge are handled explicitly:
torch's ``lgamma`` is accurate in absolute, not relative, terms near the zeros of lgamma
(``_F64_ABS``); glibc's and the oracle's Bessel functions J and Y are accurate relative to their
envelope near their zeros (``_BESSEL_ENVELOPE``); torch's float64 ``sinh``/``cosh`` overflow a
little early, so a handful of disagreeing points with finite arguments are settled by mpmath.
Exact functions (rounding, remainders, fma...) must match bitwise. Special values (NaN, infinities,
signed zeros) must match exactly, NaN equal to NaN.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import itertools
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from tcjit import reference, refmath
from tcjit.mapping.c_prelude import PRELUDE, builtin_callee, int_suffix
from tcjit.polyhedral.lang.builtins import BUILTINS, LANGUAGE_FUNCTIONS
from tcjit.polyhedral.lang.types import SCALAR_TYPES

_NAMES = sorted(n for n in BUILTINS if n not in LANGUAGE_FUNCTIONS)
_CTYPES = {"f32": "float", "f64": "double"}
_NP = {"f32": np.float32, "f64": np.float64}
_TORCH = {"f32": torch.float32, "f64": torch.float64}
_INTS = {  # suffix -> (C type, numpy dtype, TC type)
    "i8": ("int8_t", np.int8, "int8"), "i16": ("int16_t", np.int16, "int16"),
    "i32": ("int32_t", np.int32, "int32"), "i64": ("int64_t", np.int64, "int64"),
    "u8": ("uint8_t", np.uint8, "uint8"), "u16": ("uint16_t", np.uint16, "uint16"),
    "u32": ("uint32_t", np.uint32, "uint32"), "u64": ("uint64_t", np.uint64, "uint64"),
}  # fmt: skip
_FLAGS = [
    "-O3",
    "-march=native",
    "-fopenmp",
    "-ffp-contract=fast",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-shared",
    "-fPIC",
]
_WARNINGS = ["-Wall", "-Wextra", "-Wno-unused-function", "-Werror"]


# --------------------------------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------------------------------


def _loop(signature: str, body: str, pragma: str = "omp simd") -> str:
    return f"void {signature} {{\n#pragma {pragma}\n    for (long i = 0; i < n; ++i) {body};\n}}\n"


def _half_wrappers() -> str:
    out = []
    for fn, src, dst in [("h2f", "uint16_t", "float"), ("bf2f", "uint16_t", "float"),
                         ("f2h", "float", "uint16_t"), ("f2bf", "float", "uint16_t"),
                         ("d2h", "double", "uint16_t"), ("d2bf", "double", "uint16_t")]:  # fmt: skip
        out.append(_loop(f"conv_{fn}(const {src} *x, {dst} *y, long n)", f"y[i] = tc_{fn}(x[i])"))
    return "".join(out)


def _harness() -> str:
    parts = [PRELUDE, "\n/* ---- test wrappers ---- */\n"]
    for name in _NAMES:
        k = BUILTINS[name]
        for tag, ct in _CTYPES.items():
            params = ", ".join(f"const {ct} *restrict x{j}" for j in range(k))
            args = ", ".join(f"x{j}[i]" for j in range(k))
            callee = builtin_callee(name, ct)
            parts.append(
                _loop(f"apply_{name}_{tag}({params}, {ct} *restrict y, long n)", f"y[i] = {callee}({args})")
            )
    # The same callees in an OpenMP parallel loop.
    parts.append(_loop("par_erfinv_f64(const double *x, double *y, long n)", "y[i] = tc_erfinv_f64(x[i])",
                       "omp parallel for simd schedule(static)"))  # fmt: skip
    for s, (ct, _, _) in _INTS.items():
        for op in ("div", "mod", "min", "max"):
            parts.append(_loop(f"int_{op}_{s}(const {ct} *a, const {ct} *b, {ct} *y, long n)",
                               f"y[i] = tc_{op}_{s}(a[i], b[i])"))  # fmt: skip
        conv = "tc_f64_to_u64(x[i])" if s == "u64" else f"({ct})tc_f64_to_i64(x[i])"
        parts.append(_loop(f"conv_f64_to_{s}(const double *x, {ct} *y, long n)", f"y[i] = {conv}"))
    for op in ("floordiv", "floormod"):
        parts.append(_loop(f"index_{op}(const int64_t *a, const int64_t *b, int64_t *y, long n)",
                           f"y[i] = tc_{op}_i64(a[i], b[i])"))  # fmt: skip
    parts.append(_half_wrappers())
    return "".join(parts)


class _Lib:
    """A compiled harness: call a wrapper on numpy arrays."""

    def __init__(self, path: Path):
        self.dll = ctypes.CDLL(str(path))

    def __call__(self, fname: str, out_dtype, *arrays: np.ndarray) -> np.ndarray:
        arrays = tuple(np.ascontiguousarray(a) for a in arrays)
        n = len(arrays[0])
        assert all(len(a) == n for a in arrays)
        y = np.empty(n, dtype=out_dtype)
        fn = getattr(self.dll, fname)
        fn.argtypes = [ctypes.c_void_p] * (len(arrays) + 1) + [ctypes.c_long]
        fn.restype = None
        fn(*(a.ctypes.data_as(ctypes.c_void_p) for a in arrays), y.ctypes.data_as(ctypes.c_void_p), n)
        return y


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> tuple[_Lib, _Lib]:
    """The harness and the portable half-precision library, compiled in parallel once."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("c_prelude")
    sources = {
        "harness": _harness(),
        "portable": "#define TC_NO_FLOAT16 1\n" + PRELUDE + _half_wrappers(),
    }
    procs = {}
    for stem, text in sources.items():
        (d / f"{stem}.c").write_text(text)
        cmd = [cc, *_FLAGS, *_WARNINGS, str(d / f"{stem}.c"), "-o", str(d / f"{stem}.so"), "-lm"]
        procs[stem] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for stem, p in procs.items():
        out, _ = p.communicate()
        assert p.returncode == 0, f"compiling the {stem} failed:\n{out}"
        assert out == "", f"warnings compiling the {stem}:\n{out}"
    return _Lib(d / "harness.so"), _Lib(d / "portable.so")


@pytest.fixture(scope="module")
def lib(libs) -> _Lib:
    return libs[0]


# --------------------------------------------------------------------------------------------------
# Comparisons
# --------------------------------------------------------------------------------------------------


def _ordered(x: np.ndarray) -> np.ndarray:
    """Bit patterns as integers whose order is the order of the values (ulps apart = distance)."""
    ints = x.view(np.int32 if x.dtype == np.float32 else np.int64).astype(np.int64)
    mag = ints & (0x7FFFFFFF if x.dtype == np.float32 else 0x7FFFFFFFFFFFFFFF)
    return np.where(ints < 0, -mag, mag)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in ulps of finite values (inf where the signs differ, beyond small magnitudes)."""
    a, b = _ordered(got), _ordered(want)
    same_side = (a >= 0) == (b >= 0)
    with np.errstate(over="ignore"):
        d = np.abs(a - b).astype(np.float64)
    return np.where(same_side | (np.abs(a) < 1 << 20) & (np.abs(b) < 1 << 20), d, np.inf)


def _errors(got: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(exact_bad, ulps): where NaN, infinities or signed zeros differ; the ulp distance elsewhere."""
    gn, wn = np.isnan(got), np.isnan(want)
    special = gn | wn | np.isinf(got) | np.isinf(want) | ((got == 0) & (want == 0))
    same = (gn & wn) | ((got == want) & (np.signbit(got) == np.signbit(want)))
    ulps = np.zeros(got.shape)
    ulps[~special] = _ulps(got[~special], want[~special])
    return special & ~same, ulps


def _report(name, inputs, got, want, bad) -> str:
    idx = np.flatnonzero(bad)[:8]
    rows = [f"{name}: {int(bad.sum())} of {bad.size} differ"]
    for i in idx:
        args = ", ".join(repr(float(a[i])) for a in inputs)
        rows.append(f"  ({args}) -> {float(got[i])!r}, want {float(want[i])!r}")
    return "\n".join(rows)


# Allowed double errors in ulps against the oracle (default: _F64_DEFAULT_ULPS). Exact ones are 0.
_EXACT = {"ceil", "copysign", "fabs", "fdim", "floor", "fma", "fmax", "fmin", "fmod", "nextafter",
          "remainder", "round", "trunc", "logb", "fdivide"}  # fmt: skip
_F64_DEFAULT_ULPS = 4
_F64_ULPS = {
    "tgamma": 16,  # glibc's tgamma: up to ~6 ulps here (the oracle's is within ~1)
    "erfinv": 12, "erfcinv": 12, "normcdfinv": 12,  # AS 241: <= 4 ulps; the oracle's up to ~4
    "cyl_bessel_i0": 24, "cyl_bessel_i1": 24,  # series / Hankel here (<= 7 ulps), torch's Cephes (<= 9)
    "cbrt": 6, "rcbrt": 8,  # glibc's cbrt: up to ~3 ulps
    "erfcx": 8, "normcdf": 8, "norm3d": 6, "norm4d": 6, "rhypot": 6, "rnorm3d": 6, "rnorm4d": 6,
    "j0": 16, "j1": 16, "y0": 16, "y1": 16,  # away from zeros; near them see _BESSEL_ENVELOPE
}  # fmt: skip
# Absolute errors allowed besides: the oracle's lgamma (torch's) is accurate to ~1e-16 absolute,
# not relative, near the zeros of lgamma on the negative axis (-2.457..., -2.747..., ...).
_F64_ABS = {"lgamma": 2.0**-50}
_F32_ULPS = 2
# J and Y: error allowed relative to the envelope sqrt(2 / (pi x)) (or 1) near their zeros.
_BESSEL = {"j0", "j1", "y0", "y1"}
_BESSEL_ENVELOPE = {"f32": 2.0**-23, "f64": 2.0**-46}


def _allowed(name: str, tag: str) -> float:
    if name in _EXACT:
        return 0
    if tag == "f32":
        return _F32_ULPS
    return _F64_ULPS.get(name, _F64_DEFAULT_ULPS)


def _check(name: str, tag: str, inputs: list[np.ndarray], got: np.ndarray, want: np.ndarray) -> float:
    """Assert ``got`` matches ``want`` for builtin ``name``; returns the largest ulp error.

    Where the oracle itself is wrong (torch's ``sinh``/``cosh`` overflow a little early in float64),
    a handful of disagreeing points with finite arguments are settled by mpmath instead.
    """
    exact_bad, ulps = _errors(got, want)
    bad = exact_bad | (ulps > _allowed(name, tag))
    if tag == "f64" and name in _F64_ABS:
        with np.errstate(invalid="ignore"):
            bad &= exact_bad | ~(np.abs(got - want) <= _F64_ABS[name])
    if name in _BESSEL:
        x = np.abs(inputs[0].astype(np.float64))
        envelope = np.maximum(np.minimum(1.0, np.sqrt(2.0 / (np.pi * np.maximum(x, 1e-300)))), np.abs(want))
        with np.errstate(invalid="ignore"):
            close = np.abs(got.astype(np.float64) - want) <= _BESSEL_ENVELOPE[tag] * envelope
        bad &= exact_bad | ~close
    finite = np.logical_and.reduce([np.isfinite(a) for a in inputs])
    if 0 < bad.sum() <= 8 and finite[bad].all():
        for i in np.flatnonzero(bad):
            truth = np.array([_mp_value(name, [float(a[i]) for a in inputs])]).astype(got.dtype)
            e, u = _errors(got[i : i + 1], truth)
            bad[i] = e[0] or u[0] > max(_allowed(name, tag), 1)
    assert not bad.any(), _report(f"{name}_{tag}", inputs, got, want, bad)
    return float(ulps[~bad].max(initial=0.0))


@functools.cache
def _reference_builtins_module():
    """tests/runtime/test_reference_builtins.py: its mpmath table and test points."""
    path = Path(__file__).resolve().parents[1] / "runtime" / "test_reference_builtins.py"
    spec = importlib.util.spec_from_file_location("_tc_reference_builtins", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _mp_functions():
    return _reference_builtins_module()._mp_reference()


def _mp_value(name: str, args: list[float]) -> float:
    """The mathematical value of builtin ``name`` (mpmath at 200 bits), as a float64."""
    mp = pytest.importorskip("mpmath")
    with np.errstate(over="ignore"):
        return float(_mp_functions()[name](*(mp.mpf(a) for a in args)))


def _run(lib: _Lib, name: str, tag: str, inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(C result, oracle result) of builtin ``name`` on ``inputs``."""
    got = lib(f"apply_{name}_{tag}", _NP[tag], *inputs)
    want = refmath.apply(name, *(torch.from_numpy(a) for a in inputs)).numpy()
    assert want.dtype == got.dtype
    return got, want


# --------------------------------------------------------------------------------------------------
# The Python interface
# --------------------------------------------------------------------------------------------------


def test_interface() -> None:
    import re

    assert builtin_callee("exp", "float") == "tc_exp_f32" and builtin_callee("exp", "double") == "exp"
    assert builtin_callee("erfinv", "float") == "tc_erfinv_f32"
    for name in _NAMES:
        for ct in ("float", "double"):
            assert re.fullmatch(r"[a-z_][a-z0-9_]*", builtin_callee(name, ct))
    for bad in [("min", "float"), ("max", "double"), ("nosuch", "float"), ("exp", "float16")]:
        with pytest.raises(ValueError):
            builtin_callee(*bad)
    assert [int_suffix(t) for _, _, t in _INTS.values()] == list(_INTS)
    with pytest.raises(ValueError):
        int_suffix("bool")
    for header in ("<math.h>", "<stdint.h>", "<stdbool.h>", "<string.h>"):
        assert f"#include {header}" in PRELUDE
    # Every function is static inline (through TC_FN) and named tc_*.
    definitions = re.findall(r"^(\w[\w ]*?)\s+\**(\w+)\(([^)]*)\)\s*\{", PRELUDE, re.M)
    assert len(definitions) > 90
    assert len(definitions) == len(re.findall(r"^TC_FN ", PRELUDE, re.M))
    for head, fname, _ in definitions:
        assert head.startswith("TC_FN "), fname
        assert fname.startswith("tc_"), fname
    for name in _NAMES:
        for ct in ("float", "double"):
            callee = builtin_callee(name, ct)
            if callee.startswith("tc_"):
                assert re.search(rf"\b{callee}\(", PRELUDE), callee


# --------------------------------------------------------------------------------------------------
# Builtins against mpmath at the points of the oracle's own test
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", _NAMES)
def test_builtin_against_mpmath(lib: _Lib, name: str) -> None:
    """At the points where the oracle is checked against mpmath: float64 to 1e-13 relative, float32
    within an ulp or two of the mathematical value."""
    rb = _reference_builtins_module()
    arity = BUILTINS[name]
    args = list(rb._DOMAINS.get(name, [rb._ANY]))
    n = len(args[0])
    for extra in (rb._SECOND, rb._THIRD, rb._FOURTH)[len(args) - 1 : arity - 1]:
        args.append(extra[:n])
    for tag in ("f64", "f32"):
        xs = [np.array(a, dtype=np.float64).astype(_NP[tag]) for a in args]
        got = lib(f"apply_{name}_{tag}", _NP[tag], *xs)
        want = np.array([_mp_value(name, [float(v) for v in p]) for p in zip(*xs)])
        want = np.where(want == 0, np.copysign(0.0, got), want)  # mpmath has no signed zeros
        if tag == "f64":
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15, err_msg=f"{name} {tag}")
        else:
            exact_bad, ulps = _errors(got, want.astype(np.float32))
            assert not exact_bad.any() and ulps.max() <= 2, (name, got, want)


# --------------------------------------------------------------------------------------------------
# Builtins against the oracle: special values and random values
# --------------------------------------------------------------------------------------------------

_SPECIAL = [
    math.nan,
    math.inf,
    -math.inf,
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.5,
    2.0,
    -3.0,
    -7.5,
    1e-310,
    5e-324,
    1e300,
]
_SPECIAL_F32 = [*_SPECIAL[:12], 1e-40, 1e-45, 3e38]


@pytest.mark.parametrize("name", _NAMES)
def test_builtin_special_values(lib: _Lib, name: str) -> None:
    """Every combination of NaN, infinities, signed zeros and a few ordinary values, against the
    oracle: NaN equals NaN, the sign of a zero counts."""
    arity = BUILTINS[name]
    for tag in ("f64", "f32"):
        values = _SPECIAL if tag == "f64" else _SPECIAL_F32
        grid = np.array(list(itertools.product(values, repeat=arity)), dtype=np.float64)
        inputs = [np.ascontiguousarray(grid[:, j]).astype(_NP[tag]) for j in range(arity)]
        got, want = _run(lib, name, tag, inputs)
        _check(name, tag, inputs, got, want)


def _log_uniform(rng, n: int, lo: float, hi: float, signed: bool = True) -> np.ndarray:
    x = 10.0 ** rng.uniform(lo, hi, n)
    return x * rng.choice([-1.0, 1.0], n) if signed else x


def _near(rng, n: int, a: float, lo: float, side: float) -> np.ndarray:
    """Points a + side * 10**u, u in [lo, 0): approaching ``a`` from one side."""
    return a + side * 10.0 ** rng.uniform(lo, 0.0, n)


def _sample(name: str, tag: str, rng, n: int) -> list[np.ndarray]:
    """Random arguments for ``name`` across wide magnitude ranges inside its domain."""
    f32 = tag == "f32"
    big = 37.0 if f32 else 300.0
    tiny = 45.0 if f32 else 323.0  # about the smallest subnormal
    eps = 7.0 if f32 else 16.0
    q = n // 4

    def wide(signed=True, lo=-big, hi=big):
        return _log_uniform(rng, n, lo, hi, signed)

    def mixed(scale, signed=True):  # half uniform in [-scale, scale], half log-uniform in magnitude
        u = rng.uniform(-scale if signed else 0.0, scale, n - n // 2)
        return np.concatenate([u, _log_uniform(rng, n // 2, -big, math.log10(scale), signed)])

    def unit():  # [-1, 1], crowding towards +-1
        u = rng.uniform(-1, 1, n - 2 * q)
        return np.concatenate([u, _near(rng, q, 1.0, -eps, -1.0), _near(rng, q, -1.0, -eps, 1.0)])

    def interval(lo, hi):  # (lo, hi), crowding towards both ends
        u = rng.uniform(lo, hi, n - 2 * q)
        return np.concatenate(
            [u, _near(rng, q, lo, -tiny if lo == 0 else -eps, 1.0), _near(rng, q, hi, -eps, -1.0)]
        )

    one = {
        "acos": unit, "asin": unit, "atanh": unit, "erfinv": unit,
        "acosh": lambda: 1.0 + wide(False, -eps, big),
        "log1p": lambda: np.concatenate([_near(rng, q, -1.0, -eps, 1.0), wide()[: n - q]]),
        "erfcinv": lambda: interval(0.0, 2.0), "normcdfinv": lambda: interval(0.0, 1.0),
        "exp": lambda: mixed(750.0), "exp2": lambda: mixed(1100.0), "exp10": lambda: mixed(330.0),
        "expm1": lambda: mixed(750.0), "sinh": lambda: mixed(750.0), "cosh": lambda: mixed(750.0),
        "sigmoid": lambda: mixed(800.0), "tanh": lambda: mixed(30.0),
        "erf": lambda: mixed(8.0), "erfc": lambda: mixed(30.0), "normcdf": lambda: mixed(40.0),
        "erfcx": lambda: np.concatenate([mixed(30.0)[: n - q], _log_uniform(rng, q, 0, big, False)]),
        "tgamma": lambda: mixed(180.0), "lgamma": lambda: mixed(200.0),
        "cyl_bessel_i0": lambda: mixed(720.0), "cyl_bessel_i1": lambda: mixed(720.0),
        "j0": lambda: mixed(100.0), "j1": lambda: mixed(100.0),
        "y0": lambda: mixed(100.0, False), "y1": lambda: mixed(100.0, False),
        "log": lambda: wide(False), "log2": lambda: wide(False), "log10": lambda: wide(False),
        "sqrt": lambda: wide(False), "rsqrt": lambda: wide(False),
        "sinpi": lambda: mixed(10.0), "cospi": lambda: mixed(10.0),
    }  # fmt: skip
    if name in one:
        args = [one[name]()]
    elif name == "pow":
        x = np.concatenate([wide(False, -10, 10)[: n - q], -np.floor(rng.uniform(1, 30, q))])
        y = np.concatenate([rng.uniform(-30, 30, n - q), np.floor(rng.uniform(-30, 30, q))])
        args = [x, y]
    elif name == "fma":
        args = [wide(True, -big / 3, big / 3) for _ in range(3)]
    elif name in ("norm3d", "norm4d", "rnorm3d", "rnorm4d", "hypot", "rhypot"):
        scale = wide(False)  # arguments of similar magnitude, sometimes very different ones
        args = [
            scale * wide(True, -3, 3) if k % 2 else scale * rng.uniform(-1, 1, n)
            for k in range(BUILTINS[name])
        ]
    else:
        args = [wide() for _ in range(BUILTINS[name])]
    return [a.astype(_NP[tag]) for a in args]


@pytest.mark.parametrize("name", _NAMES)
def test_builtin_random_values(lib: _Lib, name: str) -> None:
    """2000 random arguments per function and type against the oracle (see the module docstring
    for the tolerances)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    for tag in ("f64", "f32"):
        with np.errstate(over="ignore", invalid="ignore"):
            inputs = _sample(name, tag, rng, 2000)
        got, want = _run(lib, name, tag, inputs)
        _check(name, tag, inputs, got, want)


def test_builtin_in_parallel_loop(lib: _Lib) -> None:
    """The callees run in OpenMP parallel loops (no shared state): same results as serially."""
    x = np.random.default_rng(1).uniform(-1, 1, 200_000)
    assert np.array_equal(lib("par_erfinv_f64", np.float64, x), lib("apply_erfinv_f64", np.float64, x))


# --------------------------------------------------------------------------------------------------
# Integers: value division and remainder, min and max; index floor division and modulo
# --------------------------------------------------------------------------------------------------


def _int_operands(dtype, rng, n: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    info = np.iinfo(dtype)
    edges = {info.min, info.min + 1, -2, -1, 0, 1, 2, 3, 7, info.max - 1, info.max}
    edges = sorted(e for e in edges if info.min <= e <= info.max)
    pa, pb = zip(*itertools.product(edges, repeat=2))
    big = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    small = rng.integers(max(info.min, -20), min(info.max, 20), n, dtype=dtype, endpoint=True)
    a = np.concatenate([np.array(pa, dtype=dtype), big, big, small])
    b = np.concatenate([np.array(pb, dtype=dtype), rng.permutation(big), small, rng.permutation(small)])
    return a, b


@pytest.mark.parametrize("suffix", list(_INTS))
def test_integer_division_and_extrema(lib: _Lib, suffix: str) -> None:
    """tc_div/tc_mod/tc_min/tc_max against the oracle's integer semantics (a one-statement TC program
    per operator): truncation, by zero 0, MIN / -1 == MIN, x % -1 == 0."""
    _, dtype, tname = _INTS[suffix]
    a, b = _int_operands(dtype, np.random.default_rng(len(suffix) * 7 + dtype().itemsize))
    for op, expr in (("div", "A(i) / B(i)"), ("mod", "A(i) % B(i)"), ("min", "min(A(i), B(i))"),
                     ("max", "max(A(i), B(i))")):  # fmt: skip
        got = lib(f"int_{op}_{suffix}", dtype, a, b)
        src = f"def f({tname}(N) A, {tname}(N) B) -> (C) {{ C(i) = {expr} }}"
        want = reference.evaluate(src, None, torch.from_numpy(a), torch.from_numpy(b)).numpy()
        assert want.dtype == dtype
        bad = got != want
        assert not bad.any(), (op, suffix, a[bad][:5], b[bad][:5], got[bad][:5], want[bad][:5])


def test_index_floor_division(lib: _Lib) -> None:
    """tc_floordiv_i64/tc_floormod_i64 are Python's // and % (by zero 0, MIN // -1 wraps)."""
    rng = np.random.default_rng(5)
    a, b = _int_operands(np.int64, rng, 1000)
    got_q = lib("index_floordiv", np.int64, a, b)
    got_r = lib("index_floormod", np.int64, a, b)

    def wrap(v: int) -> int:
        return (v + 2**63) % 2**64 - 2**63

    for x, y, q, r in zip(a.tolist(), b.tolist(), got_q.tolist(), got_r.tolist()):
        want = (0, 0) if y == 0 else (wrap(x // y), x % y)
        assert (q, r) == want, (x, y, q, r, want)


# --------------------------------------------------------------------------------------------------
# Conversions
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", list(_INTS))
def test_float_to_integer(lib: _Lib, suffix: str) -> None:
    """(T) tc_f64_to_i64(x) and tc_f64_to_u64(x) against ``reference.convert`` from float64."""
    _, dtype, tname = _INTS[suffix]
    rng = np.random.default_rng(11)
    edges = [math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 0.99, -0.99, 1.5, -1.5, 127.9, 128.0,
             -128.5, -129.0, 255.5, 256.0, 65535.7, 65536.0, -32769.0, 2.0**31, -(2.0**31) - 1, 2.0**32 + 3,
             2.0**53 + 2, 2.0**63 - 1024, 2.0**63, -(2.0**63), -(2.0**63) - 2048, 2.0**64 - 2048, 2.0**64,
             1.5e19, 1e20, -1e20, 1e300, -1e300, 5e-324]  # fmt: skip
    x = np.concatenate([np.array(edges), _log_uniform(rng, 3000, -3, 21), rng.uniform(-300, 300, 1000)])
    got = lib(f"conv_f64_to_{suffix}", dtype, x)
    want = reference.convert(torch.from_numpy(x), SCALAR_TYPES["float64"], SCALAR_TYPES[tname])
    want = want.numpy().view(np.uint64) if suffix == "u64" else want.numpy().astype(dtype)
    bad = got != want
    assert not bad.any(), (suffix, x[bad][:6], got[bad][:6], want[bad][:6])


def _all_halves() -> np.ndarray:
    return np.arange(65536, dtype=np.uint32).astype(np.uint16)


def _same_floats(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Bitwise equal, or both NaN."""
    return (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))


def _is_nan_bits(h: np.ndarray, bf: bool) -> np.ndarray:
    if bf:
        return ((h & 0x7F80) == 0x7F80) & ((h & 0x7F) != 0)
    return ((h & 0x7C00) == 0x7C00) & ((h & 0x3FF) != 0)


def _same_bits(got: np.ndarray, want: np.ndarray, bf: bool) -> np.ndarray:
    return (got == want) | (_is_nan_bits(got, bf) & _is_nan_bits(want, bf))


def _torch_narrow(x: np.ndarray, bf: bool) -> np.ndarray:
    t = torch.from_numpy(x).to(torch.bfloat16 if bf else torch.float16)
    return t.view(torch.int16).numpy().view(np.uint16)


def _round_to_odd_float(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded to odd (truncate, then set the last bit if inexact): rounding that
    to nearest even in 11 or 8 bits is the correctly rounded result from float64 (Boldo-Melquiond)."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        f = np.where(np.abs(f.astype(np.float64)) > np.abs(x), np.nextafter(f, np.float32(0)), f)
        inexact = (f.astype(np.float64) != x) & ~np.isnan(x)
    return (f.view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)


@pytest.mark.parametrize("portable", [False, True], ids=["float16", "portable"])
def test_half_to_float_exhaustive(libs, portable: bool) -> None:
    """tc_h2f and tc_bf2f on all 65536 bit patterns equal torch's widening (NaN: both NaN)."""
    lib = libs[1] if portable else libs[0]
    h = _all_halves()
    for fn, dtype in (("h2f", torch.float16), ("bf2f", torch.bfloat16)):
        got = lib(f"conv_{fn}", np.float32, h)
        want = torch.from_numpy(h.view(np.int16)).view(dtype).float().numpy()
        same = _same_floats(got, want)
        assert same.all(), (fn, h[~same][:5], got[~same][:5], want[~same][:5])


def _narrow_values() -> np.ndarray:
    """Every finite float16 and bfloat16 value and the midpoints between neighbours, in float64."""
    bits = _all_halves()
    out = []
    for v in (bits.view(np.float16).astype(np.float64), (bits.astype(np.uint32) << 16).view(np.float32)):
        v = np.unique(v[np.isfinite(v)].astype(np.float64))
        out += [v, (v[1:] + v[:-1]) / 2]  # the midpoints are exact in float32 and float64
    return np.concatenate(out)


def _narrowing_inputs(rng) -> tuple[np.ndarray, np.ndarray, int]:
    """float32 inputs for tc_f2h/tc_f2bf and float64 inputs for tc_d2h/tc_d2bf: every half and
    bfloat16 value, the midpoints between neighbours and their float/double neighbours (ties and
    near-ties, the double-rounding traps), random bit patterns and random values in range. Also
    returns how many of the float64 inputs are the crafted ones (they come first)."""
    exact = _narrow_values()
    signs = rng.choice([-1.0, 1.0], 300_000)
    f32 = [exact.astype(np.float32)]
    f32 += [np.nextafter(f32[0], np.float32(direction)) for direction in (np.inf, -np.inf)]
    f32.append(rng.integers(0, 2**32, 400_000, dtype=np.uint64).astype(np.uint32).view(np.float32))
    f32.append((rng.uniform(-1, 1, 300_000) * 2.0 ** rng.integers(-30, 18, 300_000)).astype(np.float32))
    specials = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 65504, 65519.996, 65520, 3.4e38]
    f32.append(np.array(specials, dtype=np.float32))
    f64 = [exact]
    for direction in (np.inf, -np.inf):
        f64.append(np.nextafter(exact, direction))
        f64.append(exact + np.abs(exact) * direction * 2.0**-40)  # a hair off: float rounds it to a tie
    crafted = sum(map(len, f64))
    f64.append(rng.integers(0, 2**63, 300_000, dtype=np.uint64).view(np.float64) * signs)
    f64.append(rng.uniform(-1, 1, 300_000) * 2.0 ** rng.integers(-140, 130, 300_000))
    f64.append(np.concatenate(f32).astype(np.float64))
    return np.concatenate(f32), np.concatenate(f64), crafted


@pytest.mark.parametrize("portable", [False, True], ids=["float16", "portable"])
def test_narrowing_to_half_and_bfloat16(libs, portable: bool) -> None:
    """tc_f2h/tc_f2bf equal torch's conversion from float32 bitwise; tc_d2h/tc_d2bf round float64
    once: they equal the correctly rounded result (torch's conversion of the value rounded to odd in
    float32; numpy's float16 conversion agrees) and torch's own conversion from float64 except where
    torch rounds twice through float32."""
    lib = libs[1] if portable else libs[0]
    with np.errstate(invalid="ignore", over="ignore"):
        x32, x64, crafted = _narrowing_inputs(np.random.default_rng(3))
    for bf in (False, True):
        name = "bf" if bf else "h"
        got = lib(f"conv_f2{name}", np.uint16, x32)
        want = _torch_narrow(x32, bf)
        same = _same_bits(got, want, bf)
        assert same.all(), (name, x32[~same][:5], got[~same][:5], want[~same][:5])

        got = lib(f"conv_d2{name}", np.uint16, x64)
        want = _torch_narrow(_round_to_odd_float(x64), bf)
        same = _same_bits(got, want, bf)
        assert same.all(), (name, x64[~same][:5], got[~same][:5], want[~same][:5])
        if not bf:
            with np.errstate(over="ignore", invalid="ignore"):
                numpy_bits = x64.astype(np.float16).view(np.uint16)
            assert _same_bits(got, numpy_bits, bf).all()
        # torch from float64 rounds through float32: where it differs, that double rounding is why
        # (for random doubles about one in 2**14 for float16, one in 2**17 for bfloat16).
        torch_bits = _torch_narrow(x64, bf)
        differs = ~_same_bits(got, torch_bits, bf)
        via_float = _torch_narrow(x64[differs].astype(np.float32), bf)
        assert _same_bits(torch_bits[differs], via_float, bf).all()
        assert differs[:crafted].sum() > 1000  # the near-ties crafted above do show it


@pytest.mark.parametrize(
    "step",
    [pytest.param(997, id="4 million floats"), pytest.param(61, marks=pytest.mark.full, id="70 million")],
)
def test_vectorised_exp_is_within_one_ulp_everywhere(lib: _Lib, step: int) -> None:
    """The prelude's own float exp (``tc_exp_f32``, SLEEF's scheme) against float64 exp rounded
    to float, over float bit patterns spread evenly across the whole range (every sign, exponent,
    NaN and infinity): never more than 1 ulp off, NaN exactly where the reference has NaN."""
    x = np.arange(0, 1 << 32, step, dtype=np.uint64).astype(np.uint32).view(np.float32)
    got = lib("apply_exp_f32", np.float32, x)
    with np.errstate(all="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    assert np.array_equal(np.isinf(got[finite]), np.isinf(want[finite]))
    ulps = _ulps(got[finite], want[finite])
    assert ulps.max() <= 1, (x[finite][ulps > 1][:5], got[finite][ulps > 1][:5])
