"""The derivative rules of the builtins, as TC text templates (see :data:`DERIVATIVES`)."""

from __future__ import annotations

from .text import paren

#: Derivatives of builtins: one template per argument, in terms of the arguments ``{0}``, ``{1}``,
#: ... and the call's value ``{f}``. ``"0"``: derivative zero (piecewise constant); a missing
#: entry: no derivative tcjit can express.
_LN2, _LN10, _PI = "0.6931471805599453", "2.302585092994046", "3.141592653589793"
_2_SQRTPI, _SQRTPI_2 = "1.1283791670955126", "0.886226925452758"
_FMAX = "({0} > {1} || {1} != {1}) ? 1.0 : (({0} == {1}) ? 0.5 : 0.0)"
_FMIN = "({0} < {1} || {1} != {1}) ? 1.0 : (({0} == {1}) ? 0.5 : 0.0)"
DERIVATIVES: dict[str, tuple[str, ...]] = {
    "exp": ("{f}",),
    "exp2": (f"{_LN2} * {{f}}",),
    "exp10": (f"{_LN10} * {{f}}",),
    "expm1": ("{f} + 1.0",),
    "log": ("1.0 / {0}",),
    "log2": (f"1.0 / ({{0}} * {_LN2})",),
    "log10": (f"1.0 / ({{0}} * {_LN10})",),
    "log1p": ("1.0 / (1.0 + {0})",),
    "sqrt": ("0.5 / {f}",),
    "rsqrt": ("-0.5 * {f} / {0}",),
    "cbrt": ("1.0 / (3.0 * {f} * {f})",),
    "rcbrt": ("-{f} / (3.0 * {0})",),
    "sin": ("cos({0})",),
    "cos": ("-sin({0})",),
    "tan": ("1.0 + {f} * {f}",),
    "sinpi": (f"{_PI} * cospi({{0}})",),
    "cospi": (f"-{_PI} * sinpi({{0}})",),
    "asin": ("rsqrt(1.0 - {0} * {0})",),
    "acos": ("-rsqrt(1.0 - {0} * {0})",),
    "atan": ("1.0 / (1.0 + {0} * {0})",),
    "sinh": ("cosh({0})",),
    "cosh": ("sinh({0})",),
    "tanh": ("1.0 - {f} * {f}",),
    "asinh": ("rsqrt({0} * {0} + 1.0)",),
    "acosh": ("rsqrt({0} * {0} - 1.0)",),
    "atanh": ("1.0 / (1.0 - {0} * {0})",),
    "erf": (f"{_2_SQRTPI} * exp(-({{0}} * {{0}}))",),
    "erfc": (f"-{_2_SQRTPI} * exp(-({{0}} * {{0}}))",),
    "erfinv": (f"{_SQRTPI_2} * exp({{f}} * {{f}})",),
    "erfcinv": (f"-{_SQRTPI_2} * exp({{f}} * {{f}})",),
    "erfcx": (f"2.0 * {{0}} * {{f}} - {_2_SQRTPI}",),
    "normcdf": ("0.3989422804014327 * exp(-0.5 * {0} * {0})",),
    "normcdfinv": ("2.5066282746310002 * exp(0.5 * {f} * {f})",),
    "sigmoid": ("{f} * (1.0 - {f})",),
    "fabs": ("({0} > 0.0) ? 1.0 : (({0} < 0.0) ? -1.0 : 0.0)",),
    "floor": ("0",),
    "ceil": ("0",),
    "round": ("0",),
    "trunc": ("0",),
    "logb": ("0",),
    "j0": ("-j1({0})",),
    "j1": ("j0({0}) - (({0} == 0.0) ? 0.5 : j1({0}) / {0})",),
    "y0": ("-y1({0})",),
    "y1": ("y0({0}) - y1({0}) / {0}",),
    "cyl_bessel_i0": ("cyl_bessel_i1({0})",),
    "cyl_bessel_i1": ("cyl_bessel_i0({0}) - (({0} == 0.0) ? 0.5 : cyl_bessel_i1({0}) / {0})",),
    "pow": (
        "({1} == 0.0) ? 0.0 : {1} * pow({0}, {1} - 1.0)",
        "({f} == 0.0) ? 0.0 : {f} * log({0})",
    ),
    "atan2": ("{1} / ({0} * {0} + {1} * {1})", "-{0} / ({0} * {0} + {1} * {1})"),
    "copysign": ("({0} == 0.0) ? 0.0 : copysign(1.0, {0}) * copysign(1.0, {1})", "0"),
    "fdim": ("({0} > {1}) ? 1.0 : 0.0", "({0} > {1}) ? -1.0 : 0.0"),
    "fdivide": ("1.0 / {1}", "-{f} / {1}"),
    "fmax": (_FMAX, _FMAX.format("{1}", "{0}")),
    "fmin": (_FMIN, _FMIN.format("{1}", "{0}")),
    "max": (_FMAX, _FMAX.format("{1}", "{0}")),
    "min": (_FMIN, _FMIN.format("{1}", "{0}")),
    "fmod": ("1.0", "-(({0} - {f}) / {1})"),
    "remainder": ("1.0", "-(({0} - {f}) / {1})"),
    "hypot": ("{0} / {f}", "{1} / {f}"),
    "rhypot": ("-{0} * {f} * {f} * {f}", "-{1} * {f} * {f} * {f}"),
    "norm3d": ("{0} / {f}", "{1} / {f}", "{2} / {f}"),
    "norm4d": ("{0} / {f}", "{1} / {f}", "{2} / {f}", "{3} / {f}"),
    "rnorm3d": tuple(f"-{{{k}}} * {{f}} * {{f}} * {{f}}" for k in range(3)),
    "rnorm4d": tuple(f"-{{{k}}} * {{f}} * {{f}} * {{f}}" for k in range(4)),
    "fma": ("{1}", "{0}", "1.0"),
}


def fill(template: str, args: list[str], value: str) -> str:
    """A template of :data:`DERIVATIVES` filled in with the texts of the call's arguments and of
    its value."""
    text = template.format(*(paren(a) for a in args), f=paren(value))
    # fmax/fmin's NaN test of a literal operand is always false: `x > 0 || 0 != 0` is `x > 0`.
    for a in args:
        if _is_number(a):
            text = text.replace(f" || {a} != {a})", ")")
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
