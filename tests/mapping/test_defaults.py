"""Default options from the kernel's structure (``tcjit.mapping.defaults``)."""

from __future__ import annotations

import math

import pytest
import torch

import tcjit
from tcjit import suite
from tcjit.cpu_runtime import vector_bytes
from tcjit.mapping.defaults import (
    SPLIT_BLOCKS,
    UNLIMITED_GRID,
    default_choice,
    default_options,
    has_row_reduction,
    is_contraction_chain,
    is_gemm_shaped,
    main_statement,
    reduction_tiles,
    vector_width,
)
from tcjit.polyhedral.lang.check import check_source

SHIFTED = """def f(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, r_k) * B(r_k, n + 1) where n in 0:N-1
}"""


def _cdef(src: str):
    return check_source(src).entry()


@pytest.mark.parametrize(
    "src, gemm",
    [
        ("def f(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }", True),
        ("def f(float(M,K) A, float(K,N) B, float s) -> (C) { C(m, n) +=! s * A(m, r_k) * B(r_k, n) }", True),
        ("def f(float(M,K) A, float(N,K) B) -> (C) { C(m, n) +=! A(m, r_k) * B(n, r_k) }", False),
        ("def f(float(M,K) A, float(K,N) B) -> (C) { C(m, n) max=! A(m, r_k) * B(r_k, n) }", False),
        ("def f(float(M,K) A) -> (S) { S(m, n) +=! A(m, r_k) where n in 0:4 }", False),
        ("def f(float(M,N) A) -> (C) { C(m, n) = A(m, n) }", False),
        ("def f(float(B,M,K) A, float(K,N) W) -> (C) { C(b, m, n) +=! A(b, m, r_k) * W(r_k, n) }",
         True),
        (SHIFTED, False),
        ("""def f(float(M,K) A, float(K,N) B) -> (C, D) {
               C(m, n) +=! A(m, r_k) * B(r_k, n)
               D(m, n) = C(m, n)
           }""", False),
    ],
)  # fmt: skip
def test_gemm_shape(src: str, gemm: bool) -> None:
    assert is_gemm_shaped(_cdef(src)) is gemm


def test_suite_kernels_get_the_rule_of_their_shape() -> None:
    gemm = {n for n in suite.names() if is_gemm_shaped(_cdef_of(n))}
    assert gemm == {"matmul", "tensordot"}
    # with their strided operands packed (mapping/packing.py), these take the GEMM rule too
    packed = {"tmm", "tbmm", "fcrelu", "mlp3", "kronecker3"}
    for name in suite.names():
        k = suite.get(name)
        o = default_options(_cdef_of(name), k.cpu_sizes, "cpu", vector_bytes=32).validate("cpu").values
        want = ((64, 512, 128), (8, 16), True) if name in gemm | packed else ((64, 256, 512), (4, 16), False)
        if name in {"fcrelu", "mlp3"}:  # 128 rows: the weight's panel is filled in parts of 16 columns
            want = ((64, 16, 128), (8, 16), True)
        elif name == "tbmm":  # Y's panel in parts too (its 26 columns are one tile of 16 or of 128)
            want = ((64, 512, 16), (8, 16), True)
        assert (o.tile, o.register_tile, o.pack_operands) == want, name
        assert o.vectorize and o.parallelize
        g = default_options(_cdef_of(name), k.cpu_sizes, "cuda").validate("cuda").values
        rows = name in {"softmax", "layernorm", "bn_reduce", "cosine", "abs_sum"}
        assert has_row_reduction(_cdef_of(name)) is rows, name
        if rows:  # at the CPU sizes, bn_reduce and abs_sum are split over the grid
            split = {"bn_reduce": (1, 1, 1024, 1024), "abs_sum": (4, 1024)}
            assert g.tile == split.get(name, (8, 1024, 1024)) and g.map_to_threads == (32, 8), name
        else:  # the innermost output variable on x (up to 32), the next on y, outer ones in tiles of 1
            st, extents = main_statement(_cdef_of(name), k.cpu_sizes)
            lhs = extents[: len(st.lhs_vars)]
            assert g.map_to_threads[0] == min(32, 1 << (lhs[-1] - 1).bit_length()), name
            assert g.tile[-1] == g.map_to_threads[0] and all(t == 1 for t in g.tile[:-2]), name
            assert len(g.tile) == len(lhs), name
        assert g.map_to_blocks == UNLIMITED_GRID
        assert g.match_library_calls is rows
        assert g.vector_width == 1, name  # no suite kernel streams (maxpool2x2 reads at a stride)


@pytest.mark.parametrize(
    "src, rows",
    [
        ("def f(float(N,D) I) -> (S) { S(n) +=! I(n, r_d) }", True),
        ("def f(float(N,D) I) -> (S) { S(n) max=! I(n, r_d) * I(n, r_d) }", True),
        ("def f(float(N,D) I) -> (S) { S() +=! I(r_n, r_d) }", True),
        ("def f(float(N,D) I) -> (S) { S(d) +=! I(r_n, d) }", False),  # reduced along rows
        ("def f(float(M,K) A, float(N,K) B) -> (C) { C(m, n) +=! A(m, r_k) * B(n, r_k) }", False),
        ("def f(float(N,D) I) -> (S) { S(n) +=! I(n, 2 * r_d) where r_d in 0:D/2 }", False),
    ],
)
def test_row_reduction_shape(src: str, rows: bool) -> None:
    assert has_row_reduction(_cdef(src)) is rows


def _cdef_of(name: str):
    k = suite.get(name)
    return check_source(k.source).get(k.entry)


def test_a_call_without_options_uses_the_rule() -> None:
    """What a call compiles is what the rule chose: the options are in the kernel's header."""
    A, B = torch.randn(24, 16), torch.randn(16, 32)
    spec = tcjit.compile(
        tcjit.define("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"), A, B
    )
    columns = 16 * max(1, vector_bytes() // 32)  # 16 vector partial sums on every host
    assert "tile=(64, 512, 128)" in spec.source and f"register_tile=(8, {columns})" in spec.source


def test_the_gemm_tile_is_as_many_vectors_wide_on_every_host() -> None:
    mm = _cdef("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }")
    conv = _cdef_of("conv2d")
    for width, columns in ((16, 16), (32, 16), (64, 32)):
        o = default_options(mm, {"M": 64, "K": 64, "N": 64}, "cpu", vector_bytes=width).values
        assert o.register_tile == (8, columns)
        c = default_options(conv, suite.get("conv2d").cpu_sizes, "cpu", vector_bytes=width).values
        assert c.register_tile == (4, 16)  # 32 columns made conv2d slower on AVX-512


def test_derived_backwards_of_linear_layers_are_contraction_chains() -> None:
    """mlp3's derived backward (contractions, bias sums over the batch, relu' pointwise) gets the
    GEMM rule; forward kernels and convolutions' backwards do not."""
    from tcjit.derived import derivation

    def backward(name: str):
        k = suite.get(name)
        return check_source(derivation(tcjit.define(k.source, name=k.entry)).backward).entry()

    assert is_contraction_chain(backward("mlp3")) and is_contraction_chain(backward("matmul")) is False
    assert not is_contraction_chain(backward("gconv")) and not is_contraction_chain(backward("conv2d"))
    assert not any(is_contraction_chain(_cdef_of(n)) for n in suite.names())
    o = default_options(backward("mlp3"), suite.get("mlp3").cpu_sizes, "cpu").values
    assert (o.tile, o.register_tile) == ((64, 512, 128), (8, 16))


@pytest.mark.parametrize(
    "name, sizes, tiles",
    [
        # 256 channels of 200,704 terms: 8 blocks a channel, 8 images each (2048 blocks)
        ("bn_reduce", {"N": 64, "C": 256, "H": 56, "W": 56}, (1, 8, 1024, 1024)),
        # one output of 2^28 terms: 2048 blocks of 8 rows
        ("abs_sum", {"M": 16384, "N": 16384}, (8, 1024)),
        # too few terms to split (5 x 7 x 11), or enough outputs to fill the GPU
        ("bn_reduce", {"N": 3, "C": 5, "H": 7, "W": 11}, None),
        ("softmax", {"N": 32768, "D": 1024}, None),
        ("cosine", {"M": 256, "N": 256}, None),
    ],
)
def test_a_reduction_with_few_outputs_is_split_over_the_grid(name, sizes, tiles) -> None:
    """:func:`reduction_tiles`: fewer outputs than twice the multiprocessors and at least 8192 terms
    each: a block per output and about eight blocks a multiprocessor in all."""
    cdef = _cdef_of(name)
    assert reduction_tiles(cdef, sizes) == tiles
    if tiles:
        st, extents = main_statement(cdef, sizes)
        outputs = math.prod(extents[: len(st.lhs_vars)])
        blocks = outputs * -(-extents[len(st.lhs_vars)] // tiles[len(st.lhs_vars)])
        assert SPLIT_BLOCKS <= blocks < 2 * SPLIT_BLOCKS
        assert default_options(cdef, sizes, "cuda").validate("cuda").values.tile == tiles


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_a_row_reduction_and_its_normalisation_are_one_kernel_by_default(name) -> None:
    """Unsplit row reductions fuse ``Max``: at the GPU size, a row's two reductions and the
    statement that uses them are one launch, whose combines initialise the reductions."""
    from tcjit.mapping.layout import contiguous_layout
    from tcjit.mapping.lower_gpu import lower_cuda

    cdef = _cdef_of(name)
    sizes = suite.get(name).gpu_sizes[0]
    opts = default_options(cdef, sizes, "cuda").validate("cuda").values
    assert opts.outer_schedule_fusion_strategy == "Max"
    ks = lower_cuda(cdef, sizes, contiguous_layout(cdef, sizes), opts)
    assert len(ks.kernels) == 1 and ks.source.count("block reduction 1: identity") == 1


@pytest.mark.parametrize(
    "src, sizes, width",
    [
        ("def f(float(N,D) A, float(N,D) B) -> (C) { C(n, d) = A(n, d) + B(n, d) }", {"N": 8, "D": 1024}, 4),
        ("def f(float16(N,D) A) -> (C) { C(n, d) = A(n, d) * 2 }", {"N": 8, "D": 1024}, 8),
        ("def f(double(N,D) A) -> (C) { C(n, d) = A(n, d) * 2 }", {"N": 8, "D": 1024}, 2),
        ("def f(float(N,D) A, float(D) b) -> (C) { C(n, d) = A(n, d) + b(d) }", {"N": 8, "D": 96}, 4),
        ("def f(float(N,D) A) -> (C) { C(n, d) = A(n, d) }", {"N": 8, "D": 30}, 2),  # 4 leaves a part
        ("def f(float(N,D) A) -> (C) { C(n, d) = A(n, d) }", {"N": 8, "D": 12}, 1),  # too few threads
        ("def f(float(N,D) A) -> (C) { C(d, n) = A(n, d) }", {"N": 64, "D": 64}, 1),  # a transpose
        (
            "def f(float(N,H,W) I) -> (O) { O(n, h, w) max=! I(n, h + r_k, w) where r_k in 0:3 }",
            {"N": 2, "H": 66, "W": 256},
            4,
        ),
        ("def f(float(M,K) A, float(K) x) -> (y) { y(m) +=! A(m, r_k) * x(r_k) }", {"M": 64, "K": 8}, 1),
    ],
    ids=["add", "half", "double", "bias", "part", "narrow", "transpose", "window", "contraction"],
)
def test_streaming_statements_get_a_vector_width(src: str, sizes: dict, width: int) -> None:
    """Pointwise statements and constant windows whose operands all read along the output's
    innermost variable: 16 bytes of the widest element per thread, halved until the width divides
    the innermost extent and leaves 8 threads along x; anything else 1."""
    cdef = check_source(src).entry()
    assert vector_width(cdef, sizes) == width
    options, rule = default_choice(cdef, sizes, "cuda")
    values = options.validate("cuda").values
    assert values.vector_width == width
    assert ("consecutive outputs a thread" in rule) is (width > 1), rule
    assert values.tile[-1] == values.map_to_threads[0] * width
