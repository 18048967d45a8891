"""The benchmark suite as data (``tcjit.suite``): consistent with its TC sources and cheap to test."""

from __future__ import annotations

import math

import pytest
import torch

from tcjit import suite

ORDER = (
    "matmul", "tmm", "tbmm", "fcrelu", "mlp3", "gconv", "conv2d", "kronecker3", "tensordot",
    "softmax", "layernorm", "bn_reduce", "cosine", "maxpool2x2", "abs_sum",
)  # fmt: skip
CONTRACTIONS = {"matmul", "tmm", "tbmm", "fcrelu", "mlp3", "gconv", "conv2d", "kronecker3", "tensordot"}


def test_fifteen_kernels_in_the_order_of_kernels_md() -> None:
    assert tuple(suite.SUITE) == ORDER == suite.names()
    assert suite.get("conv2d") is suite.SUITE["conv2d"]
    with pytest.raises(KeyError, match="matmul"):
        suite.get("matmull")


@pytest.mark.parametrize("name", ORDER)
def test_kernel_data_is_consistent(name: str) -> None:
    k = suite.get(name)
    assert k.entry == name and k.checked.name == name
    assert k.metric == ("GFLOP/s" if name in CONTRACTIONS else "GB/s")
    symbols = set(k.checked.sizes)
    for sizes in [k.cpu_sizes, *k.gpu_sizes, *k.small_sizes, k.large_size]:
        assert set(sizes) == symbols, sizes
        assert all(n >= 1 for n in sizes.values())
        assert all(n >= 1 for shape in k.output_shapes(sizes) for n in shape)
        assert k.flops(sizes) > 0 and k.bytes(sizes) > 0
    assert 2 <= len(k.small_sizes) <= 3
    assert any(1 in s.values() for s in k.small_sizes), "a small size with a unit dimension"
    for sizes in k.small_sizes:
        assert k.flops(sizes) < 4e6, "small sizes stay under ~2e6 multiply-adds"
    assert set(k.temporaries) <= set(k.checked.outputs)


@pytest.mark.parametrize("name", ORDER)
def test_inputs_are_deterministic_and_torch_ref_has_every_output(name: str) -> None:
    k = suite.get(name)
    sizes = k.small_sizes[1]
    a, b = k.make_inputs(sizes, seed=4), k.make_inputs(sizes, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, k.make_inputs(sizes, seed=5)))
    assert tuple(x.shape for x in a) == k.input_shapes(sizes)
    assert all(x.dtype == torch.float32 and x.is_contiguous() for x in a)
    half = k.make_inputs(sizes, dtype=torch.float16, seed=4)
    assert all(h.dtype == torch.float16 for h in half)
    outs = k.torch_ref(*a)
    assert tuple(o.shape for o in outs) == k.output_shapes(sizes)


def test_work_formulas() -> None:
    mm = suite.get("matmul")
    assert mm.flops(mm.cpu_sizes) == 2 * 512**3
    assert mm.bytes(mm.cpu_sizes) == 3 * 4 * 512**2
    conv = suite.get("conv2d")
    s = conv.cpu_sizes  # N=8 C=F=64 H=W=58 3x3: output 56x56
    assert conv.flops(s) == 2 * 8 * 64 * 64 * 9 * 56 * 56
    pool = suite.get("maxpool2x2")
    s = pool.cpu_sizes
    assert pool.bytes(s) == 4 * (math.prod(s.values()) + math.prod(s.values()) // 4)
    assert suite.get("abs_sum").output_shapes({"M": 3, "N": 5}) == ((),)


def test_source_variants() -> None:
    k = suite.get("softmax")
    assert "-> (O)" in k.source_without_temporaries()
    assert "-> (O, sm)" in k.source_without_temporaries(["O", "sm"])
    double = suite.get("bn_reduce").source_for(torch.float64)
    assert double.startswith("def bn_reduce(double(N,C,H,W) I)")
    assert "float(N * H * W)" in double  # the body, with its cast, is unchanged
    assert suite.get("matmul").source_for(torch.float32) == suite.get("matmul").source


def test_sources_are_kernels_md_verbatim():
    """The suite's TC texts are KERNELS.md's. The repository holds a byte-for-byte copy of it
    (tests/data/KERNELS.md), so that this runs in any clone; where the original is beside the
    checkout (../shared/, where CI and sessions have it), the copy must still equal it."""
    import re
    from pathlib import Path

    copy = Path(__file__).resolve().parents[1] / "data" / "KERNELS.md"
    block = re.search(r"```\n(.*?)```", copy.read_text(encoding="utf-8"), re.S).group(1)
    defs = [c.strip() for c in re.split(r"(?m)^(?=def )", block) if c.strip()]
    assert defs == [sk.source.strip() for sk in suite.SUITE.values()]
    original = Path(__file__).resolve().parents[3] / "shared" / "KERNELS.md"
    if original.exists():
        assert copy.read_bytes() == original.read_bytes(), f"{copy} differs from {original}: copy it again"
