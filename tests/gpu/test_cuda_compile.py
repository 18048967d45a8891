"""Every generated CUDA kernel compiles to PTX (NVRTC through ctypes, or nvcc): no GPU needed.

The CUDA printer (mapping/cuda_printer.py) prints each launch of the GPU mapping; here the suite
kernels (float32 with several mapping option vectors, and float16 and float64 where their source
type-checks), programs in every scalar type with casts, every builtin in each float type, gathers
with run-time bounds checks and scalar arguments are lowered with ``lower_cuda`` and compiled. The
PTX must hold one ``.entry`` per launch, with the launch's thread count as its ``.maxntid`` (from
``__launch_bounds__``). The full tier widens the matrix to every small size, bfloat16 and more
option vectors.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import shutil
from pathlib import Path

import compiled_helpers as H
import pytest
import torch

from tcjit import nvrtc, suite
from tcjit.mapping.c_prelude import PRELUDE, builtin_callee
from tcjit.mapping.cuda_prelude import CUDA_PRELUDE, prelude_functions
from tcjit.mapping.cuda_printer import CudaKernelSource, cuda_type
from tcjit.mapping.layout import contiguous_strides
from tcjit.mapping.lower_gpu import lower_cuda
from tcjit.mapping.options import MappingOptions
from tcjit.polyhedral.errors import TCError, TCInternalError
from tcjit.polyhedral.lang.builtins import BUILTINS, LANGUAGE_FUNCTIONS
from tcjit.polyhedral.lang.check import check_source

pytestmark = pytest.mark.skipif(
    not nvrtc.available(),
    reason="no CUDA compiler: neither NVRTC (pip install nvidia-cuda-nvrtc) nor nvcc on PATH",
)

OPTIONS = H.CUDA_OPTIONS
BASIC = ("default", "3d", "untiled")
DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
}


# -------------------------------------------------------------------------------------------- helpers
def _strides(cdef, sizes) -> dict[str, tuple[int, ...]]:
    return {
        t.name: contiguous_strides(tuple(int(s.evaluate(sizes)) for s in t.shape)) for t in cdef.tensor_infos
    }


def _lower(cdef, sizes, option: str = "default") -> CudaKernelSource:
    return lower_cuda(cdef, sizes, _strides(cdef, sizes), OPTIONS[option].validate("cuda").values)


def _compile(ks: CudaKernelSource, name: str) -> str:
    """Compile ``ks`` and check its PTX: one entry per launch, with the launch's thread bound."""
    ptx = nvrtc.compile_ptx(ks.source, name=name)
    entries = dict(re.findall(r"\.entry (\w+)\([^)]*\)\s*\.maxntid (\d+), 1, 1", ptx))
    assert ptx.count(".entry ") == len(ks.kernels) == len(entries), ptx[:2000]
    printed = {n: int(t) for t, n in re.findall(r"__launch_bounds__\((\d+)\)\n(\w+)\(", ks.source)}
    for k in ks.kernels:
        assert printed[k.name] == k.threads, (k, printed)
        assert int(entries[k.name]) == k.threads, (k, entries)
    return ptx


@functools.cache
def _suite_cdef(name: str, dtype: str):
    """The suite kernel's checked def in ``dtype``; None where its source does not type-check."""
    k = suite.get(name)
    try:
        return check_source(k.source_for(DTYPES[dtype])).entry(k.entry)
    except TCError:
        return None


#: The small size (index) each type is compiled at in the default tier.
DEFAULT_SIZE = {"float32": 1, "float16": 1, "float64": 0}


def _suite_cases():
    """(name, dtype, option, size index): the default tier compiles float32 with each basic option
    vector at the second small size (and maxpool2x2 unrolled), and float16 and float64 with one of
    them (rotating over the kernels); the full tier every small size in every type with every
    option vector (float32) or every basic one."""
    out = []
    for i, k in enumerate(suite.SUITE.values()):
        name = k.name
        for j, dtype in enumerate(DTYPES):
            if _suite_cdef(name, dtype) is None:
                continue  # see test_only_half_types_lack_suite_kernels
            for option in OPTIONS:
                if dtype != "float32" and option not in BASIC:
                    continue
                for which in range(len(k.small_sizes)):
                    default = which == DEFAULT_SIZE.get(dtype) and (
                        (dtype == "float32" and option in BASIC) or option == BASIC[(i + j) % 3]
                    )
                    default |= (name, dtype, option, which) == ("maxpool2x2", "float32", "unrolled", 1)
                    marks = () if default else (pytest.mark.full,)
                    out.append(pytest.param(name, dtype, option, which, marks=marks))
    return out


# ------------------------------------------------------------------------------------------- the suite
@pytest.mark.parametrize("name, dtype, option, which", _suite_cases())
def test_suite_kernel_compiles_to_ptx(name: str, dtype: str, option: str, which: int) -> None:
    k = suite.get(name)
    ks = _lower(_suite_cdef(name, dtype), k.small_sizes[which], option)
    assert ks.kernels and ks.source.count('extern "C" __global__') == len(ks.kernels)
    _compile(ks, f"{name}_{dtype}_{option}.cu")


PROMOTED = ("shared", "shared-deep", "private")


@pytest.mark.parametrize(
    "name, option",
    [
        pytest.param(k.name, o, marks=() if i % len(PROMOTED) == j else (pytest.mark.full,))
        for i, k in enumerate(suite.SUITE.values())
        for j, o in enumerate(PROMOTED)
    ],
)
def test_promoted_suite_kernel_compiles_to_ptx(name: str, option: str) -> None:
    """Shared-memory buffers as static ``__shared__`` arrays, private ones as local arrays,
    copies, barriers and ``__ldg`` compile; a kernel that promotes something to shared memory uses
    it in its PTX."""
    k = suite.get(name)
    ks = _lower(k.checked, k.small_sizes[1], option)
    ptx = _compile(ks, f"{name}_{option}.cu")
    if "__shared__" in ks.source:
        assert ".shared" in ptx
    assert ("__ldg(" in ks.source) == (option == "shared")


def test_only_half_types_lack_suite_kernels() -> None:
    """Sources that do not type-check in a type are left out of the matrix: only in the half types
    (bn_reduce divides by ``float(N * H * W)``: a float32 value assigned to a float16 tensor)."""
    missing = [(k.name, d) for k in suite.SUITE.values() for d in DTYPES if _suite_cdef(k.name, d) is None]
    assert all(d in ("float16", "bfloat16") for _, d in missing), missing
    assert all(_suite_cdef(k.name, "float32") is not None for k in suite.SUITE.values())


# ------------------------------------------------------------------------------------------- programs
ARGS = ("A(i)", "B(i)", "C(i)", "D(i)")


@pytest.mark.parametrize(
    "tname", ["float", "double", *(pytest.param(t, marks=pytest.mark.full) for t in ("half", "bfloat16"))]
)
def test_every_builtin_compiles(tname: str) -> None:
    """Every builtin (the 64 CUDA names, ``sigmoid``, ``min`` and ``max``) in one expression: the
    prelude's helpers and CUDA's math functions they call exist in device code."""
    terms = [f"{n}({', '.join(ARGS[:a])})" for n, a in BUILTINS.items()]
    src = (
        f"def builtins({tname}(N) A, {tname}(N) B, {tname}(N) C, {tname}(N) D) -> (O) {{\n"
        "    O(i) = " + "\n        + ".join(terms) + "\n}"
    )
    ks = _lower(check_source(src).entry(), {"N": 37})
    ctype = "double" if tname == "double" else "float"
    for name in BUILTINS:
        if name not in LANGUAGE_FUNCTIONS:
            assert f"{builtin_callee(name, ctype)}(" in ks.source, name
    _compile(ks, f"builtins_{tname}.cu")


TYPES = [
    "bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
    "float16", "bfloat16", "float32", "float64",
]  # fmt: skip


FULL_ONLY_TYPES = ("uint16", "uint32", "int8", "float32", "float64")  # like others of their kind


@pytest.mark.parametrize(
    "tname", [pytest.param(t, marks=pytest.mark.full) if t in FULL_ONLY_TYPES else t for t in TYPES]
)
def test_every_type_compiles(tname: str) -> None:
    """Arithmetic (wrapping, division and remainder), min/max, comparisons, selects, negation, a
    scalar argument, the four reductions and a cast to every type, all in type ``tname``."""
    integral = not tname.startswith(("float", "bfloat"))
    rem = "A(i) % B(i)" if integral else "fmod(A(i), B(i))"
    casts = " + ".join(f"float64({u}(A(i)))" for u in TYPES)
    src = f"""
    def ops({tname}(N) A, {tname}(N) B, {tname} s) -> (E, Cv, Sum, Prod, Big, Small) {{
        E(i) = max(A(i) + B(i), A(i) - B(i)) * min(A(i) / B(i), {rem}) + (A(i) < B(i) ? -A(i) : A(i) * s + 3)
        Cv(i) = {casts}
        Sum +=! A(r_i)
        Prod(i) *=! B(i + r_j) where r_j in 0:3
        Big max=! A(r_i)
        Small min=! A(r_i)
    }}"""
    ks = _lower(check_source(src).entry(), {"N": 37})
    tensors = [p.name for p in ks.params if p.kind != "wide"]
    assert tensors == ["A", "B", "s", "E", "Cv", "Sum", "Prod", "Big", "Small"]
    # half sums and products accumulate in float32 buffers the runtime passes after the tensors
    wide = [p.name for p in ks.params if p.kind == "wide"]
    assert wide == (["Sum", "Prod"] if tname in ("float16", "bfloat16") else [])
    _compile(ks, f"ops_{tname}.cu")


GATHERS = """
def gathers(float(V,D) LUT, int32(B) I, int64(B,L) J, float(B,L) Wt, float(V,V) M, half h, int8 k)
    -> (E, Bag, Pair, Sh, GG, Safe) {
    E(b, d) = LUT(I(b), d) * h
    Bag(b, d) +=! Wt(b, r_l) * LUT(J(b, r_l), d)
    Pair(b) = M(I(b), J(b, 0)) + k
    Sh(b) = LUT((I(b) + 1) % V, 0)
    GG(b) = LUT(J(I(b) % B, 0), 1)
    Safe(b) = J(b, 0) < V - 1 ? LUT(J(b, 0) + 1, 0) : -1.0
}"""


@pytest.mark.parametrize("option", BASIC)
def test_gathers_are_checked_at_run_time(option: str) -> None:
    """Data-dependent subscripts go through ``tc_checked`` (the first failure claims the error
    slots with atomicCAS); scalars are passed by value (half as float)."""
    ks = _lower(check_source(GATHERS).entry(), {"V": 11, "D": 37, "B": 9, "L": 4}, option)
    assert len(ks.checks) >= 7 and ks.source.count("tc_checked(") >= len(ks.checks)
    assert "atomicCAS" in ks.source
    assert "float s_h" in ks.source and "int8_t s_k" in ks.source
    _compile(ks, f"gathers_{option}.cu")


# ---------------------------------------------------------------------------------- the printed code
def test_the_printed_kernel_reads_like_cuda() -> None:
    """Ids as int64 at the top, restrict pointers, TC lines as comments, barriers and thread-0
    code, no C-only constructs (OpenMP, malloc, restrict, C headers)."""
    k = suite.get("maxpool2x2")
    ks = _lower(k.checked, k.small_sizes[1], "untiled")
    src = ks.source.split("end of the tcjit prelude")[1]
    head = "const int64_t b0 = blockIdx.x, b1 = blockIdx.y, b2 = blockIdx.z;"
    assert src.count(head) == len(ks.kernels)
    assert src.count("const int64_t t0 = threadIdx.x, t1 = threadIdx.y, t2 = threadIdx.z;") == len(ks.kernels)
    assert "const float *__restrict__ t_I" in src and "float *__restrict__ t_O" in src
    assert "__syncthreads();" in src and "if (t0 == 0 && t1 == 0 && t2 == 0) {" in src
    assert "/* S0, line 2: O(n, c, h, w) max=! I(n, c, 2 * h + r_kh" in src
    for word in ("#pragma omp", "malloc", " restrict", "lgamma_r", "_Float16", "__atomic"):
        assert word not in src, word
    assert re.findall(r"#include <\w+\.h>", ks.source) == ["#include <stdint.h>"]  # nvcc only, not NVRTC
    assert [p.ctype for p in ks.params] == ["const float *restrict", "float *restrict"]
    assert cuda_type("const float *restrict") == "const float *__restrict__"


def test_float_literals_are_rounded_to_their_type() -> None:
    """The value the C compiler gives the C printer's literal (rounded to nearest, past the largest
    float to infinity), printed exactly: no CUDA warning about digits the type cannot hold."""
    src = "def lit(float(N) A, double(N) B) -> (O, P) { O(i) = A(i) * 0.1 + 1e39 - 0.5 \n P(i) = B(i) * 0.1 }"
    ks = _lower(check_source(src).entry(), {"N": 5})
    body = ks.source.split("end of the tcjit prelude")[1]
    assert "0x1.99999ap-4f" in body and "HUGE_VALF" in body and "0x1p-1f" in body
    assert "0x1.999999999999ap-4)" in body  # double: as in C
    assert "tc_checked" not in body  # no gathers, no helper
    _compile(ks, "lit.cu")


def test_launches_are_the_mapping() -> None:
    """One kernel per launch of the GPU mapping, with its tightened grid and block."""
    src = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"
    cdef = check_source(src).entry()
    ks = lower_cuda(
        cdef,
        {"M": 100, "K": 50, "N": 70},
        _strides(cdef, {"M": 100, "K": 50, "N": 70}),
        MappingOptions("naive").tile(32, 32, 32).map_to_blocks(4, 4).map_to_threads(16, 8).values,
        symbol="mm",
    )
    assert "kernel over ['S0', 'S0_init']: grid (4, 3, 1), block (16, 8, 1)" in ks.stages["decisions"]
    assert [k.name for k in ks.kernels] == ["mm_k0"]  # the initialisation in the update's kernel
    assert ks.kernels[0].grid == (4, 3, 1) and ks.kernels[0].block == (16, 8, 1)
    assert "__launch_bounds__(128)\nmm_k0(" in ks.source
    assert ks.zero_init == ()
    _compile(ks, "mm.cu")


def test_json_round_trip() -> None:
    ks = _lower(check_source(GATHERS).entry(), {"V": 11, "D": 37, "B": 9, "L": 4})
    data = json.loads(json.dumps(ks.to_json()))
    again = CudaKernelSource.from_json(data, ks.source)
    assert again == ks and again.to_json() == ks.to_json()
    assert again.kernels[0].threads == ks.kernels[0].threads


def test_the_cuda_prelude_has_every_helper_of_the_c_prelude() -> None:
    c, cuda = prelude_functions(PRELUDE), prelude_functions(CUDA_PRELUDE)
    assert len(c) > 100 and c == cuda
    assert "lgamma_r" not in CUDA_PRELUDE
    assert "#define TC_FN static __device__ __forceinline__" in CUDA_PRELUDE


# ---------------------------------------------------------------------------------------- compilers
def test_a_syntax_error_raises_with_the_compiler_log() -> None:
    bad = CUDA_PRELUDE + '\nextern "C" __global__ void k(float *x) {\n  x[0] = ;\n}\n'
    with pytest.raises(TCInternalError, match=r"broken\.cu") as err:
        nvrtc.compile_ptx(bad, name="broken.cu")
    assert "error" in str(err.value) and "expected an expression" in str(err.value)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="virtual architecture"):
        nvrtc.compile_ptx("", name="x.cu", arch="sm_90")
    with pytest.raises(ValueError, match="using"):
        nvrtc.compile_ptx("", name="x.cu", using="clang")


def test_nvrtc_is_used_when_the_wheel_is_installed() -> None:
    spec = importlib.util.find_spec("nvidia")
    roots = spec.submodule_search_locations or () if spec is not None else ()
    if not any(any(Path(root).glob("*/lib/libnvrtc.so.*")) for root in roots):
        pytest.skip("the nvidia-cuda-nvrtc wheel is not installed")
    assert nvrtc.backend() == "nvrtc"
    major, _ = nvrtc.nvrtc_version()
    assert major >= 12


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_nvcc_compiles_the_same_source() -> None:
    """The fallback: nvcc (with the host's headers) accepts what NVRTC (without any) does."""
    k = suite.get("softmax")
    ks = _lower(k.checked, k.small_sizes[1])
    ptx = nvrtc.compile_ptx(ks.source, name="softmax.cu", using="nvcc")
    assert ptx.count(".entry ") == len(ks.kernels)
    with pytest.raises(TCInternalError, match=r"broken\.cu"):
        nvrtc.compile_ptx("__global__ void k() { int x = ; }", name="broken.cu", using="nvcc")
