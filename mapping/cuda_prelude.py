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

from .c_prelude import assemble_prelude

__all__ = ["CUDA_PRELUDE", "prelude_functions"]

#: The CUDA C++ text every generated ``.cu`` source starts with (after its header comment): the C
#: prelude's files with ``cuda_head.cuh`` for its head and ``lgamma.cuh`` for its ``lgamma``, and the
#: diagnostics ``cuda_head.cuh`` silences restored before the end.
CUDA_PRELUDE: str = assemble_prelude("cuda_head.cuh", "lgamma.cuh", "#pragma nv_diagnostic pop\n")


def prelude_functions(text: str) -> list[str]:
    """The names of the ``TC_FN`` helpers defined in prelude ``text`` (C or CUDA), in order."""
    return re.findall(r"^TC_FN [\w ]+?\b(tc_\w+)\(", text, re.M)
