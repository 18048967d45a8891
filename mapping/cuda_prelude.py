"""The CUDA prelude of generated GPU kernels: the C prelude's value semantics as CUDA C++.

:data:`CUDA_PRELUDE` is what :mod:`.cuda_printer` puts at the top of every generated ``.cu``
source. It is built from the pieces of :mod:`.c_prelude` (the same integer division and modulo,
index arithmetic, conversions, half-precision storage and builtins, so that a kernel computes the
same values on both targets), with what CUDA device code needs instead of the C head:

* **No standard headers.** NVRTC has none by default: under NVRTC (``__CUDACC_RTC__``) the fixed
  width integer types are typedefs of their own (``int64_t`` is ``long long``) and ``INT64_C``,
  ``UINT64_C``, ``INT64_MIN``... are macros; under nvcc ``<stdint.h>`` provides them. ``INFINITY``,
  ``NAN``, ``HUGE_VAL`` and ``HUGE_VALF`` are the bit patterns (``__int_as_float``). ``bool`` is
  C++'s. Device math functions (``expf``, ``lgammaf``, ``j0``, ``erfcinv``...), ``isnan``,
  ``signbit`` and ``memcpy`` are builtins of CUDA device code.
* **Helpers** are ``static __device__ __forceinline__`` (``TC_FN``): each kernel's translation unit
  has its own copies, and unused ones cost nothing.
* **lgamma.** The C prelude calls the reentrant ``lgamma_r`` (glibc's ``lgamma`` writes the global
  ``signgam``); it does not exist on the device, where ``lgamma`` writes nothing and is thread-safe:
  ``tc_lgamma_f32``/``tc_lgamma_f64`` call it (the float version still computes in double).
* **Half precision** uses the C prelude's portable bit-level conversions (``TC_NO_FLOAT16``; CUDA
  has no ``_Float16``): the same bits as the CPU target, including NaN payloads.

Accuracy: the helpers written in the prelude are the CPU's, but the math library underneath is
CUDA's (its documented ulp bounds), not glibc's; comments inherited from :mod:`.c_prelude` that
name glibc mean CUDA's library here.
"""

from __future__ import annotations

import re

from .c_prelude import _FMINMAX, _HALF, _HEAD, _INDEX, _MATH, _integers, _via_double

__all__ = ["CUDA_PRELUDE", "prelude_functions"]

_CUDA_HEAD = r"""/* ---- tcjit CUDA prelude: TC value semantics in CUDA C++ (tcjit.mapping.cuda_prelude) */
#ifndef TC_PRELUDE_INCLUDED
#define TC_PRELUDE_INCLUDED 1

#if defined(__CUDACC_RTC__) /* NVRTC: no standard headers */
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif
#ifndef INT64_C
#define INT64_C(c) c##LL
#endif
#ifndef UINT64_C
#define UINT64_C(c) c##ULL
#endif
#ifndef INT64_MAX
#define INT64_MAX INT64_C(0x7FFFFFFFFFFFFFFF)
#endif
#ifndef INT64_MIN
#define INT64_MIN (-INT64_MAX - 1)
#endif
#ifndef UINT64_MAX
#define UINT64_MAX UINT64_C(0xFFFFFFFFFFFFFFFF)
#endif
#ifndef INFINITY
#define INFINITY __int_as_float(0x7F800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7FC00000)
#endif
#ifndef HUGE_VALF
#define HUGE_VALF __int_as_float(0x7F800000)
#endif
#ifndef HUGE_VAL
#define HUGE_VAL __longlong_as_double(0x7FF0000000000000LL)
#endif

#define TC_FN static __device__ __forceinline__
#define TC_NO_FLOAT16 1 /* no _Float16 in CUDA: the bit-level half conversions below */
/* Most helpers go unused in a given kernel: no warning 177 ("declared but never referenced"). */
#pragma nv_diagnostic push
#pragma nv_diag_suppress 177

"""

# The C head's constants (TC_PI_HI ... TC_LN2): everything from the first of them on.
_CONSTANTS = _HEAD[_HEAD.index("#define TC_PI_HI") :]

_C_LGAMMA = re.compile(r"/\* lgamma\(x\) = .*?\nTC_FN float tc_lgamma_f32\(float x\) \{.*?\n\}\n", re.S)

_CUDA_LGAMMA = """/* lgamma(x) = log|Gamma(x)| (+inf at the poles): CUDA's lgamma, which writes no signgam
 * and is thread-safe on the device. The float version computes in double, as on the CPU. */
TC_FN double tc_lgamma_f64(double x) { return lgamma(x); }
TC_FN float tc_lgamma_f32(float x) { return (float)lgamma((double)x); }
"""


_C_END = "#endif /* TC_PRELUDE_INCLUDED */"


def _math() -> str:
    text, n = _C_LGAMMA.subn(lambda _: _CUDA_LGAMMA, _MATH)
    if n != 1 or "lgamma_r" in text or text.count(_C_END) != 1:
        raise AssertionError("the C prelude's lgamma helpers changed: update tcjit.mapping.cuda_prelude")
    text = text.replace(_C_END, "#pragma nv_diagnostic pop\n" + _C_END)
    return text.replace("{via_double}\n", _via_double())


#: The CUDA C++ text every generated ``.cu`` source starts with (after its header comment).
CUDA_PRELUDE: str = _CUDA_HEAD + _CONSTANTS + _integers() + _FMINMAX + _INDEX + _HALF + _math()


def prelude_functions(text: str) -> list[str]:
    """The names of the ``TC_FN`` helpers defined in prelude ``text`` (C or CUDA), in order."""
    return re.findall(r"^TC_FN [\w ]+?\b(tc_\w+)\(", text, re.M)
