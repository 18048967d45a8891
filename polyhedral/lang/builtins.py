"""The builtin functions of the TC language: CUDA math names, with their arities.

Every builtin exists on every target: the C backend maps them to libm and supplies the ones glibc
lacks; the reference evaluator implements them with torch. ``min`` and ``max`` are language
functions of two arguments that keep integer types (on floats they behave like ``fmin``/``fmax``).
``sigmoid`` is a tcjit extension.
"""

from __future__ import annotations

__all__ = ["BUILTINS", "CUDA_BUILTINS", "LANGUAGE_FUNCTIONS", "arity"]

# The 64 CUDA math builtins of TC, name -> number of arguments.
CUDA_BUILTINS: dict[str, int] = {
    "acos": 1, "acosh": 1, "asin": 1, "asinh": 1, "atan2": 2, "atan": 1, "atanh": 1, "cbrt": 1,
    "ceil": 1, "copysign": 2, "cos": 1, "cosh": 1, "cospi": 1, "cyl_bessel_i0": 1,
    "cyl_bessel_i1": 1, "erfc": 1, "erfcinv": 1, "erfcx": 1, "erf": 1, "erfinv": 1, "exp10": 1,
    "exp2": 1, "exp": 1, "expm1": 1, "fabs": 1, "fdim": 2, "fdivide": 2, "floor": 1, "fma": 3,
    "fmax": 2, "fmin": 2, "fmod": 2, "hypot": 2, "j0": 1, "j1": 1, "lgamma": 1, "log10": 1,
    "log1p": 1, "log2": 1, "logb": 1, "log": 1, "nextafter": 2, "norm3d": 3, "norm4d": 4,
    "normcdf": 1, "normcdfinv": 1, "pow": 2, "rcbrt": 1, "remainder": 2, "rhypot": 2,
    "rnorm3d": 3, "rnorm4d": 4, "round": 1, "rsqrt": 1, "sin": 1, "sinh": 1, "sinpi": 1,
    "sqrt": 1, "tan": 1, "tanh": 1, "tgamma": 1, "trunc": 1, "y0": 1, "y1": 1,
}  # fmt: skip

# Functions of the language itself: typed like arithmetic, not forced to a float type.
LANGUAGE_FUNCTIONS: dict[str, int] = {"min": 2, "max": 2}

# tcjit extensions: float functions like the CUDA ones.
EXTENSIONS: dict[str, int] = {"sigmoid": 1}

BUILTINS: dict[str, int] = {**CUDA_BUILTINS, **LANGUAGE_FUNCTIONS, **EXTENSIONS}

assert len(CUDA_BUILTINS) == 64


def arity(name: str) -> int | None:
    """The number of arguments builtin ``name`` takes, or ``None`` if it is no builtin."""
    return BUILTINS.get(name)
