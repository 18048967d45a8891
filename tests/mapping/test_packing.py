"""Operand packing (option ``pack_operands``; mapping/packing.py, the C printer's panels).

Which inputs are packed is decided from the definition, the sizes and the call's strides; a packed
kernel computes what the oracle computes with private panels (one per thread), with a shared one
and with panels filled a part at a time inside the loops that read them (where those parts go is
decided from the loops), at sizes with partial 8 x 8 blocks, for float32, float64 and float16, for
transposed views and for inputs that are not contiguous; the default options pack where the rule
says, and options written before the field existed read as not packing.
"""

from __future__ import annotations

import json
import re

import compiled_helpers as H
import pytest
import torch

import tcjit
from tcjit.mapping.layout import contiguous_strides
from tcjit.mapping.lower_cpu import lower_cpu
from tcjit.mapping.options import MappingOptions
from tcjit.mapping.packing import MIN_REUSE, packed_operands
from tcjit.mapping.parts import PART_BYTES, PART_REFILLS
from tcjit.polyhedral.lang.check import check_source

TMM = "def tmm(float(M,K) A, float(N,K) B) -> (C) { C(m, n) +=! A(m, r_k) * B(n, r_k) }"
MATMUL = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"
TBMM = """def tbmm(float(B,M,K) X, float(B,N,K) Y) -> (Z) {
    Z(b, m, n) +=! X(b, m, r_k) * Y(b, n, r_k)
}"""
FCRELU = """def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}"""
MLP2 = """def mlp2(float(B,M) I, float(N,M) W1, float(N) B1, float(P,N) W2) -> (O1, O2) {
    O1(b, n) +=! I(b, r_m) * W1(n, r_m)
    O1(b, n)  = fmax(O1(b, n) + B1(n), 0)
    O2(b, p) +=! O1(b, r_n) * W2(p, r_n)
}"""
ALSO_POINTWISE = """def both(float(M,K) A, float(N,K) B) -> (C, D) {
    C(m, n) +=! A(m, r_k) * B(n, r_k)
    D(n, k) = B(n, k) * 2
}"""

PACK = MappingOptions("naive").vectorize(True).tile(64, 512, 128).register_tile(8, 16).pack_operands(True)


def _cdef(src: str):
    return check_source(src).entry()


# ------------------------------------------------------------------------------------ decisions
def test_tmm_packs_its_second_operand() -> None:
    packs = packed_operands(_cdef(TMM), {"M": 64, "N": 48, "K": 40})
    assert list(packs) == ["B"]
    b = packs["B"]
    assert (b.dim, b.source, b.strides, b.order) == (0, (40, 1), (1, 48), (1, 0))


def test_batched_operand_keeps_its_batch_outermost() -> None:
    packs = packed_operands(_cdef(TBMM), {"B": 3, "M": 16, "N": 5, "K": 7})
    assert list(packs) == ["Y"]
    assert packs["Y"].order == (0, 2, 1) and packs["Y"].strides == (35, 1, 5)


@pytest.mark.parametrize(
    "src, sizes, strides, why",
    [
        (MATMUL, {"M": 64, "N": 48, "K": 40}, None, "already the outer-product form"),
        (TMM, {"M": MIN_REUSE - 1, "N": 48, "K": 40}, None, "each element read fewer than MIN_REUSE times"),
        (TMM, {"M": 64, "N": 48, "K": 40}, {"B": (1, 48)}, "a transposed view is unit-stride along n"),
        (ALSO_POINTWISE, {"M": 64, "N": 48, "K": 40}, None, "a pointwise read wants the tensor's layout"),
    ],
    ids=["matmul", "little-reuse", "transposed-view", "pointwise-read"],
)
def test_not_packed(src: str, sizes: dict, strides, why: str) -> None:
    assert packed_operands(_cdef(src), sizes, strides) == {}, why


def test_matmul_packs_a_transposed_view() -> None:
    """``B`` passed as ``X.t()`` has ``n`` along its large stride: packing restores the form."""
    packs = packed_operands(_cdef(MATMUL), {"M": 64, "N": 48, "K": 40}, {"B": (1, 40)})
    assert list(packs) == ["B"] and packs["B"].strides == (48, 1)


def test_the_panel_changes_the_vector_loop() -> None:
    """With the panel the mapper vectorises along n (the outer-product register tile); the C
    fills the panel first and frees it last."""
    sizes = {"M": 64, "N": 48, "K": 40}
    cdef = _cdef(TMM)
    strides = {
        t.name: contiguous_strides(tuple(s.evaluate(sizes) for s in t.shape)) for t in cdef.tensor_infos
    }
    packed = lower_cpu(cdef, sizes, strides, PACK.validate("cpu").values, vector_bytes=32)
    plain = lower_cpu(cdef, sizes, strides, PACK.pack_operands(False).validate("cpu").values, vector_bytes=32)
    assert "transposed panel" in packed.source
    assert "tc_give_workspace(&tc_kept_workspace, tc_ws)" in packed.source
    assert "register tile (outer-product form" in packed.source
    assert "register tile (dot-product form" in plain.source and "transposed panel" not in plain.source


# ---------------------------------------------------------------------------------- correctness
def _check(src: str, inputs, options=PACK, reduction: int = 1) -> None:
    kernel = tcjit.define(src, backward=None)
    got = H.as_tuple(kernel(*inputs, options=options))
    want = H.as_tuple(tcjit.reference.evaluate(src, kernel.name, *inputs))
    for g, w in zip(got, want):
        H.assert_same(g, w, reduction, what=kernel.name)


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "m, n, k", [(9, 13, 37), (16, 32, 64), (8, 1, 5)], ids=["partial-blocks", "whole-blocks", "one-column"]
)
def test_tmm_matches_the_oracle(m: int, n: int, k: int, threads: int, monkeypatch) -> None:
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    _check(TMM, (_randn(m, k), _randn(n, k, seed=1)), reduction=k)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_other_dtypes(dtype) -> None:
    src = TMM.replace("float(", "double(") if dtype == torch.float64 else TMM.replace("float(", "half(")
    _check(src, (_randn(12, 19, dtype=dtype), _randn(10, 19, dtype=dtype, seed=1)), reduction=19)


@pytest.mark.parametrize("ctype, dtype", [("int8", torch.int8), ("int64", torch.int64)])
def test_integer_panels(ctype: str, dtype) -> None:
    """Whole 8 x 8 blocks are transposed in registers for every element size (1, 2, 4 and 8
    bytes: these two and the float tests); integer products are exact, so any misplaced element
    shows. 16 x 24 x 40 has whole blocks only, 11 x 19 x 21 partial ones too."""
    src = TMM.replace("float(", f"{ctype}(")
    g = torch.Generator().manual_seed(3)
    for m, n, k in [(16, 24, 40), (11, 19, 21)]:
        a = torch.randint(-3, 4, (m, k), generator=g).to(dtype)
        b = torch.randint(-3, 4, (n, k), generator=g).to(dtype)
        kernel = tcjit.define(src, backward=None)
        got = kernel(a, b, options=PACK)
        want = tcjit.reference.evaluate(src, kernel.name, a, b)
        assert got.dtype == dtype and torch.equal(got, want), (m, n, k)


def test_the_panel_is_transposed_in_registers() -> None:
    """A source contiguous along the panel's rows is copied 8 x 8 blocks at a time through
    ``tc_transpose8_u<bits>``; a source strided along them (a column slice) element by element."""
    sizes = {"M": 16, "N": 24, "K": 40}
    cdef = _cdef(TMM)
    dense = {"A": (40, 1), "B": (40, 1), "C": (24, 1)}
    sliced = {**dense, "B": (80, 2)}
    values = PACK.validate("cpu").values
    assert "tc_transpose8_u32(src" in lower_cpu(cdef, sizes, dense, values, vector_bytes=32).source
    assert "tc_transpose8_u32" not in lower_cpu(cdef, sizes, sliced, values, vector_bytes=32).source


def test_tbmm_and_fcrelu() -> None:
    _check(TBMM, (_randn(3, 11, 9), _randn(3, 17, 9, seed=1)), reduction=9)
    _check(FCRELU, (_randn(10, 21), _randn(19, 21, seed=1), _randn(19, seed=2)), reduction=21)


def test_strided_inputs() -> None:
    """Packing reads the tensor with its own strides: a column slice and a transposed view."""
    b = _randn(13, 80, seed=1)[:, ::2]  # strides (80, 2)
    _check(TMM, (_randn(9, 40), b), reduction=40)
    _check(MATMUL, (_randn(9, 40), _randn(24, 40, seed=1).t()), reduction=40)


def test_shared_panel() -> None:
    """A panel too large to copy once per thread is filled once, by all the threads (2.4 MiB of
    float32 twice exceeds the private budget), when parts would be copied too often (4 parallel
    iterations of 64 rows, each reading all of it)."""
    sizes = {"M": 256, "N": 800, "K": 800}
    text = _source(TMM, sizes)
    assert "tc_fill_B" in text and "tc_part_B" not in text
    a, b = _randn(256, 800), _randn(800, 800, seed=1)
    _check(TMM, (a, b), reduction=800)


# ------------------------------------------------------------------------------ parts inside loops
def _source(src: str, sizes: dict, options=PACK) -> str:
    cdef = _cdef(src)
    strides = {
        t.name: contiguous_strides(tuple(s.evaluate(sizes) for s in t.shape)) for t in cdef.tensor_infos
    }
    return lower_cpu(cdef, sizes, strides, options.validate("cpu").values, vector_bytes=64).source


def _sites(text: str) -> list[str]:
    return re.findall(r"tc_part_\w+\(u_\w+, b_\w+, [^;]*\);", text)


def test_a_large_panel_is_filled_a_reduction_chunk_at_a_time() -> None:
    """mlp3's first layer: a 512 KB panel is more than a part (PART_BYTES), so each thread fills
    the 128 columns of ``r_m`` that a chunk of the reduction reads, in a buffer of its own, at the
    start of the chunk; nothing is filled before the kernel's loops."""
    text = _source(FCRELU, {"B": 128, "M": 512, "N": 256})
    assert _sites(text) == ["tc_part_W(u_W, b_W, 0, (128 * c2));"]
    assert "tc_fill_W" not in text and "pn_W = nthreads > 1 ? nthreads : 1" in text
    assert PART_BYTES >= 256 * 128 * 4


def test_the_next_part_is_brought_into_cache_while_a_chunk_computes() -> None:
    """A part that moves with its loop: after filling its own, each chunk but the last asks for
    the lines of ``W`` the next chunk's part copies (``tc_ahead_W``, the next origin); a part that
    does not move (one whole part per parallel iteration) asks for none."""
    text = _source(FCRELU, {"B": 128, "M": 600, "N": 203})
    calls = [line.strip() for line in text.splitlines() if "tc_ahead_W(u_W" in line]
    assert calls == ["if (((c2 + 1) <= 4)) tc_ahead_W(u_W, 0, (128 + (128 * c2)));"]
    whole = _source(TMM, {"M": 9, "N": 13, "K": 37})
    assert _sites(whole) == ["tc_part_B(u_B, b_B, 0, 0);"] and "tc_ahead_B(u_B" not in whole


def test_a_small_panel_is_filled_once_per_parallel_iteration() -> None:
    assert _sites(_source(TMM, {"M": 9, "N": 13, "K": 37})) == ["tc_part_B(u_B, b_B, 0, 0);"]


def test_parts_copied_more_than_twice_leave_the_panel_whole() -> None:
    """Sixteen parallel iterations of 64 rows each read all of ``B``: a part per iteration would
    copy it sixteen times (PART_REFILLS), so it is filled once per thread before the loops."""
    text = _source(TMM, {"M": 1024, "N": 64, "K": 64})
    assert not _sites(text) and "tc_fill_B" in text and PART_REFILLS < 16


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize(
    "b, m, n, site",
    [
        (128, 600, 203, "tc_part_W(u_W, b_W, 0, (128 * c2));"),
        (128, 512, 256, "tc_part_W(u_W, b_W, 0, (128 * c2));"),
        (9, 37, 13, "tc_part_W(u_W, b_W, 0, 0);"),
    ],
    ids=["partial-chunk-and-blocks", "mlp3-layer", "whole-part"],
)
def test_parts_match_the_oracle(b: int, m: int, n: int, site: str, threads: int, monkeypatch) -> None:
    """Parts with a last reduction chunk of 88 columns and 8 x 8 blocks cut at 203 rows (the fill
    clamps the part to the tensor), two parallel iterations of chunked parts, a whole part; one,
    two and three threads, each with its own part buffer."""
    assert _sites(_source(FCRELU, {"B": b, "M": m, "N": n})) == [site]
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    _check(FCRELU, (_randn(b, m), _randn(n, m, seed=1), _randn(n, seed=2)), reduction=m)


def test_the_workspace_is_reused_and_results_stay_right() -> None:
    """The panel's workspace is kept between calls: later calls with other values are right."""
    kernel = tcjit.define(TMM, backward=None)
    for seed in range(3):
        a, b = _randn(12, 33, seed=seed), _randn(20, 33, seed=seed + 10)
        H.assert_same(kernel(a, b, options=PACK), a @ b.t(), 33, what=f"call {seed}")


# -------------------------------------------------------------------------------------- options
def test_default_options_pack_linear_layers() -> None:
    kernel = tcjit.define(FCRELU, backward=None)
    x, w, bias = _randn(128, 64), _randn(32, 64, seed=1), _randn(32, seed=2)
    from tcjit.pipeline import default_options

    options = default_options(kernel.definition, {"B": 128, "M": 64, "N": 32}, "cpu")
    assert options.values.pack_operands and options.values.register_tile[0] == 8
    H.assert_same(kernel(x, w, bias), torch.relu(x @ w.t() + bias), 64)


@pytest.mark.parametrize(
    "rows, columns", [(64, 32), (128, 32), (129, 512), (4096, 512)], ids=["64", "128", "129", "4096"]
)
def test_panels_filled_in_parts_take_columns_of_the_register_tile(rows: int, columns: int) -> None:
    """Over at most two tiles of 64 rows a linear layer's weight is filled a part at a time
    (PART_REFILLS): the columns are then tiled by the register tile's width, and a part (128
    steps of the reduction by 32 columns) is what a thread's tiles read; over more rows the panel
    is filled whole and the columns keep tiles of 512."""
    from tcjit.mapping.defaults import default_options, filled_in_parts

    cdef = _cdef(FCRELU)
    sizes = {"B": rows, "M": 512, "N": 256}
    options = default_options(cdef, sizes, "cpu", vector_bytes=64)
    assert options.values.tile == (64, columns, 128)
    assert filled_in_parts(cdef, sizes, {"W"}, (64, 512, 128)) is (columns == 32)
    text = _source(FCRELU, sizes, options)
    if columns == 32:
        assert _sites(text) == ["tc_part_W(u_W, b_W, (32 * c1), (128 * c2));"]
    else:
        assert "tc_fill_W" in text and not _sites(text)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_column_tiles_on_threads_match_the_oracle(threads: int, monkeypatch) -> None:
    """Two layers over one tile of 64 rows, by the default options: each layer's tiles of columns
    run on the threads (the rows give them one tile), each filling its own parts of the weight,
    and the second layer reads every column of ``O1`` that all threads wrote (a barrier between)."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    inputs = (_randn(64, 96), _randn(80, 96, seed=1), _randn(80, seed=2), _randn(48, 80, seed=3))
    _check(MLP2, inputs, options=None, reduction=96)


def test_format_2_options_read_as_one_element_per_thread() -> None:
    """Options written before ``vector_width`` (format 2: tuned rows, stored kernels' options)
    read as the behaviour they had: one element per thread along x."""
    old = json.loads(MappingOptions("naive").vector_width(1).to_json())
    assert old.pop("vector_width") == 1
    old["format"] = 2
    assert MappingOptions.from_dict(old) == MappingOptions("naive")
    with pytest.raises(tcjit.TCError, match="vector_width"):
        MappingOptions.from_dict({**old, "vector_width": 4})


def test_format_1_options_read_as_not_packing() -> None:
    old = json.loads(MappingOptions("naive").to_json())
    assert old.pop("pack_operands") is False
    assert old.pop("vector_width") == 1  # format 3's
    old["format"] = 1
    assert MappingOptions.from_dict(old) == MappingOptions("naive")
    with pytest.raises(tcjit.TCError, match="pack_operands"):
        MappingOptions.from_dict({**old, "pack_operands": True})
    assert MappingOptions.from_json(PACK.to_json()) == PACK
