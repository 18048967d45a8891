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

Accuracy (``tests/test_c_prelude.py`` checks it against mpmath and :mod:`tcjit.refmath`; the numbers
are from 10**6 random arguments per function): every float builtin is within 1 ulp of the oracle
(those computed in double equal it but for rare double roundings). In double, glibc's functions are
within 3 ulps of the oracle (tgamma 6); the ones written here within 7 ulps of mpmath (1.6e-15
relative): cyl_bessel_i0/i1 7, erfinv erfcinv normcdfinv rcbrt 4, the others 2. Near the zeros of
j0 j1 y0 y1 glibc (like the oracle) is accurate relative to the functions' envelope only.
"""

from __future__ import annotations

from ..polyhedral.lang.builtins import BUILTINS, LANGUAGE_FUNCTIONS

__all__ = ["PRELUDE", "builtin_callee", "int_suffix"]

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
# (tc_<name>_f32): glibc 2.36's float versions are 2 to 3 ulps off (acoshf atanhf coshf sinhf tanhf
# log10f erfcf) or more (tgammaf 6, j0f j1f y0f y1f 9 near their zeros), measured against the oracle.
_VIA_DOUBLE = "acosh atanh cosh sinh tanh log10 erfc tgamma j0 j1 y0 y1".split()

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

_HEAD = r"""/* ---- tcjit prelude: TC value semantics in C (generated by tcjit.mapping.c_prelude) ---- */
#ifndef TC_PRELUDE_INCLUDED
#define TC_PRELUDE_INCLUDED 1
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* lgamma_r, j0 ... y1 are POSIX/XSI: declared under _GNU_SOURCE */
#endif
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* The reentrant lgamma (glibc's lgamma writes the global signgam: not thread-safe). */
extern double lgamma_r(double, int *);

#if defined(__GNUC__)
#define TC_FN static inline __attribute__((const))
#else
#define TC_FN static inline
#endif

/* Every array a kernel keeps on its stack (accumulator tiles, partial results, transposed tiles,
 * emulated block buffers) is declared 64-byte aligned. gcc 12 raises such an array's alignment
 * itself for its vector accesses, plans a stack realignment for it, and drops the realignment
 * where it sees the array only through a pointer register: an aligned vector access then faults
 * (or not, as the caller's stack happens to lie). A declared alignment keeps the realignment. */
#ifndef TC_STACK_ALIGNED /* bench/cflags_ab.py --add=-DTC_STACK_ALIGNED= measures the cost */
#if defined(__GNUC__)
#define TC_STACK_ALIGNED __attribute__((aligned(64)))
#else
#define TC_STACK_ALIGNED
#endif
#endif

#define TC_PI_HI 0x1.921fb54442d18p+1           /* pi = TC_PI_HI + TC_PI_LO to ~2**-107 */
#define TC_PI_LO 0x1.1a62633145c07p-53
#define TC_SQRT1_2_HI 0x1.6a09e667f3bcdp-1      /* sqrt(1/2) = HI + LO */
#define TC_SQRT1_2_LO (-0x1.bdd3413b26456p-55)
#define TC_INV_SQRT_PI 0x1.20dd750429b6dp-1     /* 1 / sqrt(pi) */
#define TC_TWO_OVER_SQRT_PI 0x1.20dd750429b6dp+0 /* 2 / sqrt(pi) */
#define TC_INV_SQRT_2PI 0x1.9884533d43651p-2    /* 1 / sqrt(2 pi) */
#define TC_LN2 0x1.62e42fefa39efp-1             /* log(2) */
"""

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

_INDEX = r"""
/* Index arithmetic (subscripts): floor division and modulo on int64, like Python's // and %;
 * by zero gives 0; MIN // -1 wraps to MIN. */
TC_FN int64_t tc_floordiv_i64(int64_t a, int64_t b) {
    int64_t d = (b == 0 || b == -1) ? 1 : b;
    int64_t q = a / d, r = a % d;
    q -= (int64_t)((r != 0) & ((r ^ d) < 0)); /* truncated quotient -> floor */
    int64_t neg = (int64_t)(0u - (uint64_t)a);
    return b == 0 ? 0 : (b == -1 ? neg : q);
}
TC_FN int64_t tc_floormod_i64(int64_t a, int64_t b) {
    int64_t d = (b == 0 || b == -1) ? 1 : b;
    int64_t r = a % d;
    r += ((r != 0) & ((r ^ d) < 0)) ? d : 0; /* the sign of the divisor */
    return (b == 0 || b == -1) ? 0 : r;
}

/* ======================================================================================
 * Conversions (tcjit.reference.convert). Float -> integer: truncate toward zero; NaN and
 * +-inf give 0; clamp to [-2**63, 2**63 - 1024] (2**63 - 1024 is the largest double below
 * 2**63); the caller narrows the int64 with a C cast (low bits kept). To uint64, values in
 * [2**63, 2**64) first subtract 2**64 (exactly), so they map to their bit patterns.
 * ====================================================================================== */
TC_FN int64_t tc_f64_to_i64(double x) {
    if (!isfinite(x)) return 0;
    if (x <= -0x1p63) return INT64_MIN;
    if (x >= 0x1p63) return INT64_C(0x7FFFFFFFFFFFFC00);
    return (int64_t)x; /* C truncates toward zero */
}
TC_FN uint64_t tc_f64_to_u64(double x) {
    if (x >= 0x1p63) x -= 0x1p64; /* exact below 2**64; inf stays inf (-> 0) */
    return (uint64_t)tc_f64_to_i64(x);
}
"""

_HALF = r"""
/* ======================================================================================
 * float16 and bfloat16 storage (uint16_t). Round to nearest even, overflow to inf, NaN stays
 * NaN, subnormals exact. _Float16 (gcc >= 12 on x86-64: F16C instructions with -march=native)
 * is used for float16 when available; TC_NO_FLOAT16 forces the portable bit-level code.
 * ====================================================================================== */
#if defined(__FLT16_MAX__) && !defined(TC_NO_FLOAT16)
#define TC_HAVE_FLOAT16 1
__extension__ typedef _Float16 tc__float16; /* __extension__: no -Wpedantic warning */
#endif

/* |x| (finite, >= 0) rounded to nearest even in a binary format with p significand bits and
 * minimum normal exponent emin, computed in double with ONE rounding: with e = max(exponent(a),
 * emin), adding c = 2**(e - p + 53) leaves the sum with an ulp of exactly 2**(e - p + 1), the
 * target's ulp at a (or its subnormal spacing), so the hardware rounds at the right bit; the
 * subtraction is exact. Needs round-to-nearest and no -ffast-math reassociation. */
TC_FN double tc__round_narrow(double a, int p, int emin) {
    uint64_t bits;
    memcpy(&bits, &a, sizeof bits);
    int e = (int)((bits >> 52) & 0x7FF) - 1023;
    if (e < emin) e = emin;
    uint64_t cbits = (uint64_t)(e - p + 53 + 1023) << 52;
    double c;
    memcpy(&c, &cbits, sizeof c);
    double s = a + c; /* the one rounding */
    return s - c;
}

/* double -> float16 bits, rounded once. */
TC_FN uint16_t tc_d2h(double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 48) & 0x8000u);
    double a = fabs(x);
    if (isnan(x)) return (uint16_t)(sign | 0x7E00u | ((bits >> 42) & 0x3FFu)); /* quiet NaN */
    if (!(a < 65536.0)) return (uint16_t)(sign | 0x7C00u);                    /* inf, overflow */
    double r = tc__round_narrow(a, 11, -14);
    if (r >= 65536.0) return (uint16_t)(sign | 0x7C00u); /* rounded up past 65504 */
    if (r < 0x1p-14) return (uint16_t)(sign | (uint16_t)(r * 0x1p24)); /* subnormal: exact int */
    uint64_t rb;
    memcpy(&rb, &r, sizeof rb);
    uint16_t e = (uint16_t)(((rb >> 52) & 0x7FF) - 1023 + 15);
    return (uint16_t)(sign | (e << 10) | ((rb >> 42) & 0x3FFu));
}

/* float -> float16 bits. */
TC_FN uint16_t tc_f2h(float x) {
#ifdef TC_HAVE_FLOAT16
    tc__float16 v = (tc__float16)x;
    uint16_t h;
    memcpy(&h, &v, sizeof h);
    return h;
#else
    return tc_d2h((double)x); /* exact widening, then one rounding */
#endif
}

/* float16 bits -> float (exact). */
TC_FN float tc_h2f(uint16_t h) {
#ifdef TC_HAVE_FLOAT16
    tc__float16 v;
    memcpy(&v, &h, sizeof v);
    return (float)v;
#else
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    uint32_t bits;
    if (e == 0) {
        float f = (float)m * 0x1p-24f; /* zero or subnormal: exact */
        return sign ? -f : f;
    }
    if (e == 0x1F)
        bits = sign | 0x7F800000u | (m << 13); /* inf, NaN (payload kept) */
    else
        bits = sign | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
#endif
}

/* bfloat16 bits -> float (exact: bfloat16 is the top half of a float). */
TC_FN float tc_bf2f(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* float -> bfloat16 bits: round the low 16 bits to nearest even (carries into the exponent
 * give the next binade or inf, as they should). */
TC_FN uint16_t tc_f2bf(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* double -> bfloat16 bits, rounded once. */
TC_FN uint16_t tc_d2bf(double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 48) & 0x8000u);
    double a = fabs(x);
    if (isnan(x)) return (uint16_t)(sign | 0x7FC0u | ((bits >> 45) & 0x7Fu));
    if (!(a < 0x1p128)) return (uint16_t)(sign | 0x7F80u);
    double r = tc__round_narrow(a, 8, -126);
    if (r >= 0x1p128) return (uint16_t)(sign | 0x7F80u);
    if (r < 0x1p-126) return (uint16_t)(sign | (uint16_t)(r * 0x1p133));
    uint64_t rb;
    memcpy(&rb, &r, sizeof rb);
    uint16_t e = (uint16_t)(((rb >> 52) & 0x7FF) - 1023 + 127);
    return (uint16_t)(sign | (e << 7) | ((rb >> 45) & 0x7Fu));
}
"""

_MATH = r"""
/* ======================================================================================
 * Builtins that glibc lacks or that differ from CUDA's. Float versions compute in double and
 * round once (as the oracle does); the double versions are accurate to a few ulps unless noted.
 * ====================================================================================== */

/* fdivide(x, y) = x / y, correctly rounded (not CUDA's approximate __fdividef). */
TC_FN float tc_fdivide_f32(float x, float y) { return x / y; }
TC_FN double tc_fdivide_f64(double x, double y) { return x / y; }

/* rsqrt(x) = 1 / sqrt(x): rsqrt(+-0) = +-inf, rsqrt(inf) = 0, NaN below 0. Two roundings in
 * double (< 1.5 ulp); the float version is then rounded once more from double. */
TC_FN double tc_rsqrt_f64(double x) { return 1.0 / sqrt(x); }
TC_FN float tc_rsqrt_f32(float x) { return (float)(1.0 / sqrt((double)x)); }

/* rcbrt(x) = 1 / cbrt(x): rcbrt(+-0) = +-inf, rcbrt(+-inf) = +-0. */
TC_FN double tc_rcbrt_f64(double x) { return 1.0 / cbrt(x); }
TC_FN float tc_rcbrt_f32(float x) { return (float)(1.0 / cbrt((double)x)); }

/* exp(x) in float, vectorisable (glibc's expf is a call gcc cannot vectorise without -ffast-math),
 * within an ulp: SLEEF's expf_u10 scheme. x = q ln2 + s with q = round(x / ln2) by the 1.5 * 2**23
 * shift (q sits in the low bits of the sum), s by a two-part ln2 (Cody and Waite), |s| <= ln2 / 2;
 * exp(s) = 1 + (s + s**2 P(s)) with SLEEF's minimax P; the result is scaled by 2**q in two factors,
 * each a normal float, so results in the subnormal range and at the overflow edge are right. x is
 * first clamped to [-104, 89], where the result still rounds to 0 or overflows to inf; a NaN passes
 * through the clamp (comparisons are false) and stays a NaN. Branch-free and inlined, so it
 * vectorises in an 'omp simd' loop. */
TC_FN float tc_exp_f32(float x) {
    x = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
    float qs = x * 0x1.715476p+0f + 0x1.8p23f;
    int32_t qi;
    memcpy(&qi, &qs, sizeof qi);
    qi -= 0x4b400000;                           /* the bits of 1.5 * 2**23: q, an int */
    float q = qs - 0x1.8p23f;
    float s = x - q * 0x1.62e4p-1f;             /* ln2 = 0x1.62e4p-1 + 0x1.7f7d1cp-20 */
    s = s - q * 0x1.7f7d1cp-20f;
    float u = 0x1.a057b4p-13f;
    u = u * s + 0x1.6d2d92p-10f;
    u = u * s + 0x1.11114cp-7f;
    u = u * s + 0x1.5554f4p-5f;
    u = u * s + 0x1.555556p-3f;
    u = u * s + 0x1p-1f;
    u = ((s * s) * u + s) + 1.0f;
    int32_t h = qi >> 1;
    /* Shifted unsigned: for a NaN x, qi holds NaN's bits and a signed shift would overflow (UB). */
    uint32_t b1 = (uint32_t)(h + 127) << 23, b2 = (uint32_t)(qi - h + 127) << 23;
    float f1, f2;
    memcpy(&f1, &b1, sizeof f1);
    memcpy(&f2, &b2, sizeof f2);
    return u * f1 * f2;
}

/* exp10(x) = 10**x through pow (10 is exact, glibc's pow is correctly rounded in practice);
 * portable (exp10 is a GNU extension). */
TC_FN double tc_exp10_f64(double x) { return pow(10.0, x); }
TC_FN float tc_exp10_f32(float x) { return powf(10.0f, x); }

/* sigmoid(x) = 1 / (1 + exp(-x)), with exp(-|x|) so that neither tail overflows (sigmoid(-inf)
 * = 0, sigmoid(inf) = 1). */
TC_FN double tc_sigmoid_f64(double x) {
    double e = exp(-fabs(x));
    return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}
TC_FN float tc_sigmoid_f32(float x) { return (float)tc_sigmoid_f64((double)x); }

/* lgamma(x) = log|Gamma(x)| by glibc's reentrant lgamma_r (+inf at the poles). glibc's lgammaf
 * is up to 5 ulps off: the float version computes in double. */
TC_FN double tc_lgamma_f64(double x) {
    int sign;
    return lgamma_r(x, &sign);
}
TC_FN float tc_lgamma_f32(float x) {
    int sign;
    return (float)lgamma_r((double)x, &sign);
}

{via_double}
/* ---- sin(pi x), cos(pi x) -------------------------------------------------------------
 * The argument is reduced modulo 2 exactly (fmod is exact), folded into [0, 1/2] by exact
 * subtractions, and pi * t is carried as a double-double hi + lo (the error of the product from
 * an fma), so that sin(pi t) = sin(hi) + lo cos(hi) is within about an ulp. sinpi(n) = +-0 with
 * the sign of x, cospi(n + 1/2) = +0, +-inf and NaN give NaN. */
TC_FN double tc__sinpi_small(double t) { /* 0 <= t <= 1/4 */
    double hi = t * TC_PI_HI;
    double lo = fma(t, TC_PI_HI, -hi) + t * TC_PI_LO;
    return sin(hi) + lo * cos(hi);
}
TC_FN double tc__cospi_small(double t) { /* 0 <= t <= 1/4 */
    double hi = t * TC_PI_HI;
    double lo = fma(t, TC_PI_HI, -hi) + t * TC_PI_LO;
    return cos(hi) - lo * sin(hi);
}
TC_FN double tc_sinpi_f64(double x) {
    double a = fabs(fmod(x, 2.0)); /* NaN for +-inf */
    int flip = a >= 1.0;
    double b = flip ? a - 1.0 : a; /* sin(pi (b + 1)) = -sin(pi b), b in [0, 1) */
    if (b > 0.5) b = 1.0 - b;      /* sin(pi (1 - b)) = sin(pi b), b in [0, 1/2] */
    double v = b <= 0.25 ? tc__sinpi_small(b) : tc__cospi_small(0.5 - b);
    if (flip != (signbit(x) != 0)) v = -v;
    return v == 0 ? copysign(0.0, x) : v;
}
TC_FN double tc_cospi_f64(double x) {
    double a = fabs(fmod(x, 2.0));
    if (a > 1.0) a = 2.0 - a; /* cos(pi (2 - a)) = cos(pi a), a in [0, 1] */
    int flip = a > 0.5;
    double b = flip ? 1.0 - a : a; /* cos(pi (1 - a)) = -cos(pi a), b in [0, 1/2] */
    double v = b <= 0.25 ? tc__cospi_small(b) : tc__sinpi_small(0.5 - b);
    if (flip) v = -v;
    return v == 0 ? 0.0 : v;
}
TC_FN float tc_sinpi_f32(float x) { return (float)tc_sinpi_f64((double)x); }
TC_FN float tc_cospi_f32(float x) { return (float)tc_cospi_f64((double)x); }

/* ---- Euclidean norms -----------------------------------------------------------------
 * norm = sqrt(sum x_i**2) without spurious overflow or underflow: when the largest |x_i| lies
 * outside [2**-500, 2**500] all are scaled by 2**-+600 (exact) first. Any infinite argument
 * gives inf (even with a NaN), else NaN propagates; rnorm = 1 / norm (inf for all zeros, 0 if
 * any is infinite). Float versions: the squares of floats are exact in double and cannot
 * overflow, so no scaling is needed. */
TC_FN double tc__norm_scale(double a, double b, double c, double d) {
    double m = fmax(fmax(fabs(a), fabs(b)), fmax(fabs(c), fabs(d)));
    return m > 0x1p500 ? 0x1p-600 : (m < 0x1p-500 ? 0x1p600 : 1.0);
}
TC_FN double tc__sumsq(double a, double b, double c, double d) { return a * a + b * b + c * c + d * d; }
TC_FN double tc_norm3d_f64(double a, double b, double c) {
    if (isinf(a) || isinf(b) || isinf(c)) return INFINITY;
    double s = tc__norm_scale(a, b, c, 0.0);
    return sqrt(tc__sumsq(a * s, b * s, c * s, 0.0)) / s;
}
TC_FN double tc_norm4d_f64(double a, double b, double c, double d) {
    if (isinf(a) || isinf(b) || isinf(c) || isinf(d)) return INFINITY;
    double s = tc__norm_scale(a, b, c, d);
    return sqrt(tc__sumsq(a * s, b * s, c * s, d * s)) / s;
}
TC_FN double tc_rhypot_f64(double a, double b) {
    if (isinf(a) || isinf(b)) return 0.0;
    double s = tc__norm_scale(a, b, 0.0, 0.0);
    return s / sqrt(tc__sumsq(a * s, b * s, 0.0, 0.0));
}
TC_FN double tc_rnorm3d_f64(double a, double b, double c) {
    if (isinf(a) || isinf(b) || isinf(c)) return 0.0;
    double s = tc__norm_scale(a, b, c, 0.0);
    return s / sqrt(tc__sumsq(a * s, b * s, c * s, 0.0));
}
TC_FN double tc_rnorm4d_f64(double a, double b, double c, double d) {
    if (isinf(a) || isinf(b) || isinf(c) || isinf(d)) return 0.0;
    double s = tc__norm_scale(a, b, c, d);
    return s / sqrt(tc__sumsq(a * s, b * s, c * s, d * s));
}
TC_FN double tc__sq(float x) { return (double)x * (double)x; }
TC_FN float tc_norm3d_f32(float a, float b, float c) {
    if (isinf(a) || isinf(b) || isinf(c)) return INFINITY;
    return (float)sqrt(tc__sq(a) + tc__sq(b) + tc__sq(c));
}
TC_FN float tc_norm4d_f32(float a, float b, float c, float d) {
    if (isinf(a) || isinf(b) || isinf(c) || isinf(d)) return INFINITY;
    return (float)sqrt(tc__sq(a) + tc__sq(b) + tc__sq(c) + tc__sq(d));
}
TC_FN float tc_rhypot_f32(float a, float b) {
    if (isinf(a) || isinf(b)) return 0.0f;
    return (float)(1.0 / sqrt(tc__sq(a) + tc__sq(b)));
}
TC_FN float tc_rnorm3d_f32(float a, float b, float c) {
    if (isinf(a) || isinf(b) || isinf(c)) return 0.0f;
    return (float)(1.0 / sqrt(tc__sq(a) + tc__sq(b) + tc__sq(c)));
}
TC_FN float tc_rnorm4d_f32(float a, float b, float c, float d) {
    if (isinf(a) || isinf(b) || isinf(c) || isinf(d)) return 0.0f;
    return (float)(1.0 / sqrt(tc__sq(a) + tc__sq(b) + tc__sq(c) + tc__sq(d)));
}

/* ---- The normal distribution and the error function family -------------------------- */

/* normcdf(x) = erfc(-x / sqrt(2)) / 2, accurate in the lower tail (no 1 + erf cancellation).
 * -x / sqrt(2) is carried as a double-double zh + zl (the product's error from an fma, plus the
 * constant's low part); zl enters through erfc' = -2 / sqrt(pi) exp(-z**2). */
TC_FN double tc_normcdf_f64(double x) {
    double zh = -x * TC_SQRT1_2_HI;
    double zl = fma(-x, TC_SQRT1_2_HI, -zh) - x * TC_SQRT1_2_LO;
    double corr = zl * TC_TWO_OVER_SQRT_PI * exp(-zh * zh);
    if (!isfinite(corr)) corr = 0.0; /* x = +-inf */
    return 0.5 * (erfc(zh) - corr);
}
TC_FN float tc_normcdf_f32(float x) { return (float)tc_normcdf_f64((double)x); }

/* erfcx(x) = exp(x**2) erfc(x).
 * x < 12: exp(x**2) with x**2 = p + e exact (fma), exp(p + e) = exp(p) (1 + e), times glibc's
 *   erfc (no cancellation on either side; below -26.6 the result overflows to inf, as it should).
 * x >= 12: the asymptotic series erfcx(x) = 1 / (x sqrt(pi)) sum_n (-1)**n (2n - 1)!! / (2x**2)**n
 *   (Abramowitz & Stegun 7.1.23); at x = 12 its terms fall below 2**-56 after 11 terms, far
 *   before the smallest one (about exp(-144)). */
TC_FN double tc_erfcx_f64(double x) {
    if (x < 12.0) {
        double p = x * x;
        double e = fma(x, x, -p);
        double ex = exp(p);
        if (isfinite(ex)) ex += ex * e;
        return ex * erfc(x);
    }
    if (isnan(x)) return x;
    double t = 0.5 / (x * x); /* 0 when x * x overflows */
    double term = 1.0, sum = 1.0;
    for (int n = 1; n <= 16; ++n) {
        term *= -(2 * n - 1) * t;
        sum += term;
        if (fabs(term) < 0x1p-56) break;
    }
    return sum * (TC_INV_SQRT_PI / x);
}
TC_FN float tc_erfcx_f32(float x) { return (float)tc_erfcx_f64((double)x); }

/* The inverse of the normal CDF by Wichura's algorithm AS 241 (PPND16, Applied Statistics 37
 * (1988) 477-484; about 1e-16 relative): a rational function of r = 0.180625 - q**2 in the
 * centre |q| = |p - 1/2| <= 0.425, of r = sqrt(-log(min(p, 1 - p))) - 1.6 or - 5 in the tails.
 * The callers hand in q (or its multiple) and log(min(p, 1 - p)) computed without rounding p,
 * which is what makes erfinv and erfcinv accurate near 0, 1 and 2. */
TC_FN double tc__ppnd16_centre(double r) { /* ndtri(p) = q * this */
    double num = ((((((((2.5090809287301226727e+3 * r + 3.3430575583588128105e+4) * r
                     + 6.7265770927008700853e+4) * r + 4.5921953931549871457e+4) * r
                     + 1.3731693765509461125e+4) * r + 1.9715909503065514427e+3) * r
                     + 1.3314166789178437745e+2) * r + 3.3871328727963666080e+0));
    double den = ((((((((5.2264952788528545610e+3 * r + 2.8729085735721942674e+4) * r
                     + 3.9307895800092710610e+4) * r + 2.1213794301586595867e+4) * r
                     + 5.3941960214247511077e+3) * r + 6.8718700749205790830e+2) * r
                     + 4.2313330701600911252e+1) * r + 1.0));
    return num / den;
}
TC_FN double tc__ppnd16_tail(double log_pmin) { /* |ndtri(p)| from log(min(p, 1 - p)) */
    double r = sqrt(-log_pmin);
    if (r <= 5.0) {
        r -= 1.6;
        double num = (((((((7.74545014278341407640e-4 * r + 2.27238449892691845833e-2) * r
                        + 2.41780725177450611770e-1) * r + 1.27045825245236838258e+0) * r
                        + 3.64784832476320460504e+0) * r + 5.76949722146069140550e+0) * r
                        + 4.63033784615654529590e+0) * r + 1.42343711074968357734e+0);
        double den = (((((((1.05075007164441684324e-9 * r + 5.47593808499534494600e-4) * r
                        + 1.51986665636164571966e-2) * r + 1.48103976427480074590e-1) * r
                        + 6.89767334985100004550e-1) * r + 1.67638483018380384940e+0) * r
                        + 2.05319162663775882187e+0) * r + 1.0);
        return num / den;
    }
    r -= 5.0;
    double num = (((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r
                    + 1.24266094738807843860e-3) * r + 2.65321895265761230930e-2) * r
                    + 2.96560571828504891230e-1) * r + 1.78482653991729133580e+0) * r
                    + 5.46378491116411436990e+0) * r + 6.65790464350110377720e+0);
    double den = (((((((2.04426310338993978564e-15 * r + 1.42151175831644588870e-7) * r
                    + 1.84631831751005468180e-5) * r + 7.86869131145613259100e-4) * r
                    + 1.48753612908506148525e-2) * r + 1.36929880922735805310e-1) * r
                    + 5.99832206555887937690e-1) * r + 1.0);
    return num / den;
}

/* normcdfinv(p): -inf at 0, inf at 1, NaN outside [0, 1]. */
TC_FN double tc_normcdfinv_f64(double p) {
    if (!(p > 0.0 && p < 1.0)) return p == 0.0 ? -INFINITY : (p == 1.0 ? INFINITY : NAN);
    double q = p - 0.5;
    if (fabs(q) <= 0.425) return q * tc__ppnd16_centre(0.180625 - q * q);
    double v = tc__ppnd16_tail(log(q < 0.0 ? p : 1.0 - p)); /* 1 - p is exact here */
    return q < 0.0 ? -v : v;
}
TC_FN float tc_normcdfinv_f32(float p) { return (float)tc_normcdfinv_f64((double)p); }

/* erfinv(y) = ndtri((1 + y) / 2) / sqrt(2): q = y / 2 and, in the tails, min(p, 1 - p) =
 * (1 - |y|) / 2 with 1 - |y| exact. erfinv(+-1) = +-inf, NaN outside [-1, 1], erfinv(-0) = -0. */
TC_FN double tc_erfinv_f64(double y) {
    double a = fabs(y);
    if (!(a < 1.0)) return a == 1.0 ? copysign(INFINITY, y) : (isnan(y) ? y : NAN);
    if (a <= 0.85) {
        double q = 0.5 * y;
        return y * (tc__ppnd16_centre(0.180625 - q * q) * (0.5 * TC_SQRT1_2_HI));
    }
    double v = tc__ppnd16_tail(log(1.0 - a) - TC_LN2) * TC_SQRT1_2_HI;
    return copysign(v, y);
}
TC_FN float tc_erfinv_f32(float y) { return (float)tc_erfinv_f64((double)y); }

/* erfcinv(x) = erfinv(1 - x) = -ndtri(x / 2) / sqrt(2); above 1, erfcinv(x) = -erfcinv(2 - x)
 * (2 - x exact). In the tail log(x / 2) is taken as log(x) - log(2), exact for subnormal x too.
 * erfcinv(0) = inf, erfcinv(2) = -inf, erfcinv(1) = +0, NaN outside [0, 2]. */
TC_FN double tc_erfcinv_f64(double x) {
    if (!(x > 0.0 && x < 2.0)) return x == 0.0 ? INFINITY : (x == 2.0 ? -INFINITY : (isnan(x) ? x : NAN));
    int upper = x > 1.0;
    double y = upper ? 2.0 - x : x; /* in (0, 1] */
    double v;
    if (y >= 0.15) {
        double t = 1.0 - y; /* erfinv's argument, in [0, 0.85] */
        double q = 0.5 * t;
        v = t * (tc__ppnd16_centre(0.180625 - q * q) * (0.5 * TC_SQRT1_2_HI));
    } else {
        v = tc__ppnd16_tail(log(y) - TC_LN2) * TC_SQRT1_2_HI;
    }
    return upper ? -v : v;
}
TC_FN float tc_erfcinv_f32(float x) { return (float)tc_erfcinv_f64((double)x); }

/* ---- Modified Bessel functions of the first kind, orders 0 and 1 ---------------------
 * |x| <= 25: the power series I_n(x) = (x/2)**n sum_k (x**2/4)**k / (k! (k + n)!) (A&S 9.6.10),
 *   all terms positive, summed until they fall below 2**-56 of the sum (at most ~50 terms), with
 *   x**2 / 4 carried to double-double accuracy.
 * |x| > 25: the Hankel expansion I_n(x) = exp(x) / sqrt(2 pi x) sum_k (-1)**k a_k(n) / x**k with
 *   a_k = prod_{j<=k} (4n**2 - (2j - 1)**2) / (k! 8**k) (A&S 9.7.1); its smallest term is about
 *   exp(-2x) < 2**-72, reached well after the 2**-56 cut-off (at most ~20 terms). Above 700,
 *   exp(x) is applied in two halves so the result does not overflow before it must (x > 713.98).
 * I0 is even, I1 odd; I0(+-inf) = inf, I1(+-inf) = +-inf. */
TC_FN double tc__bessel_i(double a, int n) { /* I_n(a), a >= 0 finite */
    if (a <= 25.0) {
        double p = a * a;
        double z = 0.25 * p, zl = 0.25 * fma(a, a, -p); /* x**2 / 4 = z + zl */
        double term = n ? 0.5 * a : 1.0, sum = term, ksum = 0.0;
        for (int k = 1; k < 100; ++k) {
            term *= z / ((double)k * (double)(k + n));
            sum += term;
            ksum += k * term;
            if (term <= sum * 0x1p-56) break;
        }
        /* The terms used z, not z + zl: add zl * d(sum)/dz = zl * sum_k k term_k / z, which
         * removes the error that rounding z would otherwise put into every term, k times. */
        return z > 0.0 ? sum + ksum * (zl / z) : sum;
    }
    double mu = 4.0 * n * n, t = 0.125 / a;
    double term = 1.0, sum = 1.0;
    for (int k = 1; k < 40; ++k) {
        double odd = 2.0 * k - 1.0;
        term *= -(mu - odd * odd) * t / k;
        sum += term;
        if (fabs(term) <= sum * 0x1p-56) break;
    }
    double s = sum * TC_INV_SQRT_2PI / sqrt(a);
    if (a <= 700.0) return exp(a) * s;
    double h = exp(0.5 * a);
    return h * (h * s);
}
TC_FN double tc_cyl_bessel_i0_f64(double x) {
    double a = fabs(x);
    if (isnan(x) || isinf(x)) return a;
    return tc__bessel_i(a, 0);
}
TC_FN double tc_cyl_bessel_i1_f64(double x) {
    if (isnan(x) || isinf(x)) return x;
    return copysign(tc__bessel_i(fabs(x), 1), x);
}
TC_FN float tc_cyl_bessel_i0_f32(float x) { return (float)tc_cyl_bessel_i0_f64((double)x); }
TC_FN float tc_cyl_bessel_i1_f32(float x) { return (float)tc_cyl_bessel_i1_f64((double)x); }

#endif /* TC_PRELUDE_INCLUDED */
/* ---- end of the tcjit prelude ---- */
"""

_INT_TYPES = (
    ("i8", "int8_t", "uint8_t", True), ("i16", "int16_t", "uint16_t", True),
    ("i32", "int32_t", "uint32_t", True), ("i64", "int64_t", "uint64_t", True),
    ("u8", "uint8_t", "uint8_t", False), ("u16", "uint16_t", "uint16_t", False),
    ("u32", "uint32_t", "uint32_t", False), ("u64", "uint64_t", "uint64_t", False),
)  # fmt: skip


def _integers() -> str:
    parts = [_INTEGERS_DOC]
    for s, t, u, signed in _INT_TYPES:
        parts.append((_SIGNED_DIVMOD if signed else _UNSIGNED_DIVMOD).format(T=t, U=u, s=s))
    parts.append("/* min and max of integers (tc_fmin/tc_fmax serve floats: NaN ignored). */\n")
    for s, t, _, _ in _INT_TYPES:
        parts.append(_MINMAX.format(T=t, s=s))
    return "".join(parts)


def _via_double() -> str:
    lines = [
        "/* Float versions that are glibc's double function rounded once: glibc's own float versions",
        " * are 2 to 3 ulps off (acoshf atanhf coshf sinhf tanhf log10f erfcf) or more (tgammaf: 6,",
        " * j0f j1f y0f y1f: 9 near their zeros). */",
    ]
    lines += [f"TC_FN float tc_{n}_f32(float x) {{ return (float){n}((double)x); }}" for n in _VIA_DOUBLE]
    return "\n".join(lines) + "\n\n"


# fmax/fmin as selects: glibc's results (NaN operands ignored, the first operand on ties), but
# inline, so that loops over them vectorise (GCC calls the library's fmaxf in a loop otherwise,
# one element at a time, unless -ffinite-math-only).
_FMINMAX = """/* fmax and fmin (NaN operands ignored, ties give the first operand: glibc's), vectorisable. */
TC_FN float tc_fmax_f32(float a, float b) { return (a >= b || b != b) ? a : b; }
TC_FN float tc_fmin_f32(float a, float b) { return (a <= b || b != b) ? a : b; }
TC_FN double tc_fmax_f64(double a, double b) { return (a >= b || b != b) ? a : b; }
TC_FN double tc_fmin_f64(double a, double b) { return (a <= b || b != b) ? a : b; }
#ifdef _OPENMP
/* They are associative and commutative (but for the sign of a zero result), so a max= or min=
 * reduction loop may run in vector lanes: 'omp simd reduction(tc_fmax_f32:acc)'. The identity is
 * the one the language's initialisation writes. */
#pragma omp declare reduction(tc_fmax_f32 : float : omp_out = tc_fmax_f32(omp_out, omp_in)) \\
    initializer(omp_priv = -HUGE_VALF)
#pragma omp declare reduction(tc_fmin_f32 : float : omp_out = tc_fmin_f32(omp_out, omp_in)) \\
    initializer(omp_priv = HUGE_VALF)
#pragma omp declare reduction(tc_fmax_f64 : double : omp_out = tc_fmax_f64(omp_out, omp_in)) \\
    initializer(omp_priv = -HUGE_VAL)
#pragma omp declare reduction(tc_fmin_f64 : double : omp_out = tc_fmin_f64(omp_out, omp_in)) \\
    initializer(omp_priv = HUGE_VAL)
#endif

"""

PRELUDE: str = (
    _HEAD + _integers() + _FMINMAX + _INDEX + _HALF + _MATH.replace("{via_double}\n", _via_double())
)
