"""The C prelude of generated CPU kernels: TC's value semantics written in C, and the builtin table.

:data:`PRELUDE` is C99/C11 text that the C printer puts at the very top of every generated kernel
(before any ``#include`` of its own: the prelude defines ``_GNU_SOURCE`` and includes ``<math.h>``,
``<stdint.h>``, ``<stdbool.h>`` and ``<string.h>``). Kernels are compiled by gcc with ``-O3
-march=native -fopenmp -ffp-contract=fast -fno-math-errno`` and linked with ``-lm``; never with
``-ffast-math``, so NaN, infinities and signed zeros keep their IEEE meaning. Every helper is a
``static inline`` pure function named ``tc_*`` (``tc__*`` for internal pieces): unused ones cost
nothing, nothing clashes between kernels, and all of them may be called from OpenMP ``parallel``
and ``simd`` loops (no state, no ``errno``; ``lgamma`` goes through the reentrant ``lgamma_r``).

What the prelude provides (the oracle is :mod:`tcjit.reference` with :mod:`tcjit.refmath`):

* **Builtins.** :func:`builtin_callee` names the C function implementing each builtin for the
  compute types ``float`` and ``double``. glibc's function is used where it is accurate and has
  C99/CUDA special values; the others are written here (``cospi sinpi rcbrt rhypot norm3d norm4d
  rnorm3d rnorm4d normcdf normcdfinv erfinv erfcinv erfcx cyl_bessel_i0 cyl_bessel_i1 fdivide rsqrt
  sigmoid exp10``, plus ``lgamma`` through ``lgamma_r``). Like the oracle, the float version of every
  hard function computes in double and rounds once; the easy ones use glibc's float functions, which
  are within an ulp, but for ``exp``: its float version is the prelude's ``tc_exp_f32`` (SLEEF's
  scheme, within an ulp), which vectorises where glibc's ``expf`` is a call per element.
  ``min``/``max`` are not builtins here: on floats they are ``tc_fmin_f32``...
  ``tc_fmax_f64`` (glibc's fmin/fmax as selects that vectorise: NaN operands ignored), on integers
  ``tc_min_<T>``/``tc_max_<T>``.
* **Integer ``/`` and ``%`` in values**: ``tc_div_<T>``, ``tc_mod_<T>`` for ``T`` in ``i8 i16 i32
  i64 u8 u16 u32 u64`` (:func:`int_suffix`), returning ``T``. C's truncating division, made total:
  by zero gives 0; for signed types ``x / -1`` is ``-x`` with two's-complement wrap (``MIN / -1 ==
  MIN``) and ``x % -1 == 0``. No input traps (the divisor is replaced before dividing).
* **Index arithmetic** (subscripts): ``tc_floordiv_i64``, ``tc_floormod_i64`` floor like Python's
  ``//`` and ``%``; by zero gives 0, ``MIN // -1`` wraps to ``MIN``.
* **Float to integer**: ``tc_f64_to_i64(double)`` truncates toward zero, gives 0 for NaN and
  ``±inf``, and clamps to ``[-2**63, 2**63 - 1024]``; ``tc_f64_to_u64(double)`` first maps
  ``[2**63, 2**64)`` to its bit pattern (subtracts ``2**64``). The printer widens float operands
  to double and narrows the int64 result with a C cast (keeping the low bits, which is
  ``reference.convert``). Integer to bool is ``!= 0``; integer to float is C's conversion.
* **Half precision storage**: float16 and bfloat16 are stored as ``uint16_t`` and computed in
  float: ``tc_h2f tc_f2h tc_d2h tc_bf2f tc_f2bf tc_d2bf``, all round to nearest even, overflow to
  infinity, keep NaN a NaN, and round once (``tc_d2h``/``tc_d2bf`` round a double directly, never
  through float). Where gcc has ``_Float16`` the float16 conversions use it (F16C instructions
  with ``-march=native``); defining ``TC_NO_FLOAT16`` selects the portable bit-level code. From
  float32 they agree bitwise with torch's ``.to(torch.float16)``/``.to(torch.bfloat16)``; from
  float64 torch rounds through float32 (a double rounding): doubles just off a midpoint of the
  narrow format (about one random double in 2**14 for float16, in 2**17 for bfloat16) round
  differently there, and the prelude's result is the correctly rounded one.

The C text lives in ``prelude/`` as files C tools can read, concatenated in this order (the CUDA
prelude, :mod:`.cuda_prelude`, swaps in the two ``.cuh`` files): ``c_head.h`` (feature macros,
headers, ``TC_FN``), ``constants.h``, the integer helpers (:func:`integer_functions`, from
templates here), ``fminmax.h`` (glibc's fmax/fmin as inline selects, so that loops over them
vectorise: gcc calls the library's ``fmaxf`` an element at a time otherwise), ``index.h``,
``half.h``, ``builtins.h``, ``lgamma.h``, ``via_double.h`` (whose functions give the table below
its list of builtins computed through double), ``special.h`` and ``end.h``.

Accuracy (``tests/mapping/test_c_prelude.py`` checks it against mpmath and :mod:`tcjit.refmath`; the
numbers are from 10**6 random arguments per function): every float builtin is within 1 ulp of the
oracle (those computed in double equal it but for rare double roundings). In double, glibc's
functions are within 3 ulps of the oracle (tgamma 6); the ones written here within 7 ulps of mpmath
(1.6e-15 relative): cyl_bessel_i0/i1 7, erfinv erfcinv normcdfinv rcbrt 4, the others 2. Near the
zeros of j0 j1 y0 y1 glibc (like the oracle) is accurate relative to the functions' envelope only.
"""

from __future__ import annotations

import importlib.resources
import re

from ..polyhedral.lang.builtins import BUILTINS, LANGUAGE_FUNCTIONS

__all__ = [
    "PRELUDE",
    "assemble_prelude",
    "builtin_callee",
    "int_suffix",
    "integer_functions",
    "prelude_piece",
    "without_prelude",
]

_PIECES = importlib.resources.files(__package__) / "prelude"


_PRELUDE_END = "/* ---- end of the tcjit prelude ---- */\n"


def without_prelude(source: str, why: str) -> str:
    """Generated ``source`` with its prelude (from its first line to its end marker) replaced by a
    line that says so, and ``why`` (``tcjit show --no-prelude``, generated-code snapshots)."""
    start = source.find("/* ---- tcjit")
    end = source.find(_PRELUDE_END)
    if start < 0 or end < 0:
        return source
    lines = source[start:end].count("\n") + 1
    note = f"/* the tcjit prelude: {lines} lines, left out ({why}) */\n"
    return source[:start] + note + source[end + len(_PRELUDE_END) :]


def prelude_piece(name: str) -> str:
    """The text of the prelude's C (``.h``) or CUDA (``.cuh``) file ``name`` in ``prelude/``."""
    return (_PIECES / name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# The builtin table
# --------------------------------------------------------------------------------------------------

# Builtins whose C99 (glibc) functions are right for both types: double `name`, float `name` + "f"
# (glibc 2.36's float versions of these are within an ulp of the correctly rounded result).
_LIBM_BOTH = (
    "acos asin asinh atan2 atan cbrt ceil copysign cos erf exp2 expm1 fabs fdim floor fma "
    "fmod hypot log1p log2 logb log nextafter pow remainder round sin sqrt tan trunc"
).split()

# Builtins whose double function is glibc's but whose float one is the double function rounded once
# (tc_<name>_f32, the functions of via_double.h): glibc 2.36's float versions are 2 to 3 ulps off
# (acoshf atanhf coshf sinhf tanhf log10f erfcf) or more (tgammaf 6, j0f j1f y0f y1f 9 near their
# zeros), measured against the oracle.
_VIA_DOUBLE = re.findall(
    r"^TC_FN float tc_(\w+)_f32\(float x\) \{ return \(float\)\1\(\(double\)x\); \}$",
    prelude_piece("via_double.h"),
    re.M,
)

# Builtins written in the prelude, for both types: tc_<name>_f32, tc_<name>_f64.
_OWN = (
    "cospi sinpi rcbrt rhypot norm3d norm4d rnorm3d rnorm4d normcdf normcdfinv erfinv erfcinv erfcx "
    "cyl_bessel_i0 cyl_bessel_i1 fdivide rsqrt sigmoid exp10 lgamma fmax fmin"
).split()

# Builtins whose float function is written in the prelude to vectorise (tc_<name>_f32, computed in
# double and rounded once) and whose double function is glibc's: the hot ones of real kernels.
_VECTOR_FLOAT = ["exp"]

_CALLEES: dict[str, tuple[str, str]] = {}  # name -> (float callee, double callee)
for _name in _LIBM_BOTH:
    _CALLEES[_name] = (_name + "f", _name)
for _name in _VIA_DOUBLE:
    _CALLEES[_name] = (f"tc_{_name}_f32", _name)
for _name in _OWN:
    _CALLEES[_name] = (f"tc_{_name}_f32", f"tc_{_name}_f64")
for _name in _VECTOR_FLOAT:
    _CALLEES[_name] = (f"tc_{_name}_f32", _name)

assert set(_CALLEES) == set(BUILTINS) - set(LANGUAGE_FUNCTIONS), sorted(
    set(_CALLEES) ^ (set(BUILTINS) - set(LANGUAGE_FUNCTIONS))
)


def builtin_callee(name: str, ctype: str) -> str:
    """C function implementing builtin ``name`` (a key of BUILTINS except min/max, plus sigmoid) for
    ctype ``'float'`` or ``'double'``.

    >>> builtin_callee("exp", "float"), builtin_callee("erfinv", "double")
    ('tc_exp_f32', 'tc_erfinv_f64')
    """
    if ctype not in ("float", "double"):
        raise ValueError(f"builtins compute in 'float' or 'double', not {ctype!r}")
    try:
        callees = _CALLEES[name]
    except KeyError:
        if name in LANGUAGE_FUNCTIONS:
            raise ValueError(
                f"{name!r} is a language function: tc_fmin/tc_fmax on floats, tc_{name}_<T> on integers"
            ) from None
        raise ValueError(f"no builtin named {name!r}") from None
    return callees[0] if ctype == "float" else callees[1]


_INT_SUFFIX = {
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
}  # fmt: skip


def int_suffix(tc_type_name: str) -> str:
    """The suffix of the integer helpers for a TC integer type: ``'int32'`` -> ``'i32'``,
    ``'uint8'`` -> ``'u8'`` (``bool`` is not accepted: it converts with ``!= 0``)."""
    try:
        return _INT_SUFFIX[tc_type_name]
    except KeyError:
        raise ValueError(f"no integer helpers for type {tc_type_name!r}") from None


# --------------------------------------------------------------------------------------------------
# The C text
# --------------------------------------------------------------------------------------------------

_INTEGERS_DOC = r"""
/* ======================================================================================
 * Integers. Value division and remainder truncate (C); by zero gives 0; for signed types
 * x / -1 is -x wrapped (MIN / -1 == MIN) and x % -1 == 0. The divisor is replaced by 1 before
 * dividing in those cases, so nothing traps and the selects stay branch-free.
 * ====================================================================================== */
"""

_SIGNED_DIVMOD = r"""TC_FN {T} tc_div_{s}({T} a, {T} b) {{
    {T} d = (b == 0 || b == -1) ? 1 : b;
    {T} q = ({T})(a / d);
    {T} neg = ({T})({U})(0u - ({U})a); /* -a with two's-complement wrap */
    return b == 0 ? 0 : (b == -1 ? neg : q);
}}
TC_FN {T} tc_mod_{s}({T} a, {T} b) {{
    {T} d = (b == 0 || b == -1) ? 1 : b;
    {T} r = ({T})(a % d);
    return (b == 0 || b == -1) ? 0 : r;
}}
"""

_UNSIGNED_DIVMOD = r"""TC_FN {T} tc_div_{s}({T} a, {T} b) {{
    {T} d = b == 0 ? 1 : b;
    {T} q = ({T})(a / d);
    return b == 0 ? 0 : q;
}}
TC_FN {T} tc_mod_{s}({T} a, {T} b) {{
    {T} d = b == 0 ? 1 : b;
    {T} r = ({T})(a % d);
    return b == 0 ? 0 : r;
}}
"""

_MINMAX = r"""TC_FN {T} tc_min_{s}({T} a, {T} b) {{ return a < b ? a : b; }}
TC_FN {T} tc_max_{s}({T} a, {T} b) {{ return a < b ? b : a; }}
"""

_INT_TYPES = (
    ("i8", "int8_t", "uint8_t", True), ("i16", "int16_t", "uint16_t", True),
    ("i32", "int32_t", "uint32_t", True), ("i64", "int64_t", "uint64_t", True),
    ("u8", "uint8_t", "uint8_t", False), ("u16", "uint16_t", "uint16_t", False),
    ("u32", "uint32_t", "uint32_t", False), ("u64", "uint64_t", "uint64_t", False),
)  # fmt: skip


def integer_functions() -> str:
    """Division, remainder, min and max of every integer type (``tc_div_i32``...), from the
    templates above: the same text in the C and the CUDA prelude."""
    parts = [_INTEGERS_DOC]
    for s, t, u, signed in _INT_TYPES:
        parts.append((_SIGNED_DIVMOD if signed else _UNSIGNED_DIVMOD).format(T=t, U=u, s=s))
    parts.append("/* min and max of integers (tc_fmin/tc_fmax serve floats: NaN ignored). */\n")
    for s, t, _, _ in _INT_TYPES:
        parts.append(_MINMAX.format(T=t, s=s))
    return "".join(parts)


#: The files after the integers that both preludes share, in order, up to the math library's
#: ``lgamma`` (``lgamma.h``: glibc's reentrant ``lgamma_r``; the CUDA prelude's ``lgamma.cuh``).
_SHARED_PIECES = ("fminmax.h", "index.h", "half.h", "builtins.h")
#: The files after ``lgamma``, up to ``end.h``.
_SHARED_TAIL = ("via_double.h", "special.h")


def assemble_prelude(head: str, lgamma: str, before_end: str = "") -> str:
    """A prelude's text: the file ``head``, the constants, the integer helpers, the shared files
    with the file ``lgamma`` among them, ``before_end`` and the end (:data:`PRELUDE`, and
    :data:`~tcjit.mapping.cuda_prelude.CUDA_PRELUDE` with its own head and ``lgamma``)."""
    return (
        prelude_piece(head)
        + prelude_piece("constants.h")
        + integer_functions()
        + "".join(map(prelude_piece, _SHARED_PIECES))
        + prelude_piece(lgamma)
        + "".join(map(prelude_piece, _SHARED_TAIL))
        + before_end
        + prelude_piece("end.h")
    )


PRELUDE: str = assemble_prelude("c_head.h", "lgamma.h")
