/* ---- tcjit CUDA prelude: TC value semantics in CUDA C++ (tcjit.mapping.cuda_prelude) */
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

