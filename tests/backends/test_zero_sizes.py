"""Sizes of 0 anywhere: outputs with no elements, reductions over nothing (the ``!`` identity),
statements with no instance followed by statements that have some. Compiled kernels (CPU and
emulated CUDA) agree with the oracle, forward and through the derived backward, for each size
symbol of the KERNELS.md kernels set to 0 in turn."""

from __future__ import annotations

import itertools

import compiled_helpers as H
import pytest
import torch

import tcjit
from tcjit import TCRangeError, suite

TARGETS = ("cpu", "cuda-emulated")
KERNELS = ("matmul", "fcrelu", "mlp3", "conv2d", "kronecker3", "softmax", "layernorm", "cosine",
           "maxpool2x2", "abs_sum", "bn_reduce")  # fmt: skip
# Those whose torch code (the gradients' reference) accepts every size of 0.
DIFFERENTIABLE = ("matmul", "fcrelu", "mlp3", "kronecker3", "cosine", "abs_sum", "bn_reduce")


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")):
        yield


def _sizes(name: str, zero: str) -> dict[str, int]:
    k = suite.get(name)
    sizes = dict(k.small_sizes[1] if len(k.small_sizes) > 1 else k.small_sizes[0])
    return {**sizes, zero: 0}


def _inputs(name: str, sizes: dict[str, int], dtype=torch.float32) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(s, generator=g, dtype=dtype) for s in suite.get(name).input_shapes(sizes))


def _cases(names) -> list:
    return [pytest.param(n, z, id=f"{n}-{z}=0") for n in names for z in suite.get(n).small_sizes[0]]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, zero", _cases(KERNELS))
def test_a_size_of_zero_matches_the_oracle(name: str, zero: str, target: str) -> None:
    """Forward, every output against the oracle; where the size empties an inferred range (a
    convolution with H = 0 < KH) compiled code and oracle raise the same TCRangeError."""
    k = suite.get(name)
    try:
        H.check_against_oracle(k.source, name, _inputs(name, _sizes(name, zero)), target=target,
                               reduction_length=64)  # fmt: skip
    except TCRangeError as e:
        assert "empty range" in e.message


@pytest.mark.parametrize("target", ["cpu", pytest.param("cuda-emulated", marks=pytest.mark.full)])
@pytest.mark.parametrize("name, zero", _cases(DIFFERENTIABLE))
def test_a_size_of_zero_differentiates_like_torch(name: str, zero: str, target: str) -> None:
    """The derived backward: every input's gradient equals torch's on its own code."""
    k = suite.get(name)
    xs = [x.requires_grad_() for x in _inputs(name, _sizes(name, zero), torch.float64)]
    ys = [x.detach().clone().requires_grad_() for x in xs]
    kernel = tcjit.define(k.source_for(torch.float64), name)

    def loss(outs) -> torch.Tensor:  # weights tell the outputs' elements apart
        outs = outs if isinstance(outs, tuple) else (outs,)
        return sum((o * torch.arange(1.0, o.numel() + 1, dtype=o.dtype).reshape(o.shape)).sum() for o in outs)

    got = torch.autograd.grad(loss(kernel(*xs, target=target)), xs, allow_unused=True)
    want = torch.autograd.grad(loss(k.torch_ref(*ys)), ys, allow_unused=True)
    for x, g, w in zip(xs, got, want):
        g = torch.zeros_like(x) if g is None else g
        w = torch.zeros_like(x) if w is None else w
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)


FCRELU_CONFIGS = [H.DEFAULT, *(H.rotating_config(i) for i in range(5))]


@pytest.mark.parametrize("config", FCRELU_CONFIGS, ids=[c.id for c in FCRELU_CONFIGS])
def test_fcrelu_over_an_empty_reduction_is_relu_of_the_bias(config: H.Config) -> None:
    """fcrelu with M = 0: the product sums nothing (0, from ``+=!``), then the next statement
    runs: relu(bias) in every row, as torch computes it, for several CPU mappings."""
    I, W, bias = torch.randn(4, 0), torch.randn(3, 0), torch.randn(3)
    for target, options in itertools.product(TARGETS, (config.options(), None)):
        options = options if target == "cpu" else None
        src = suite.get("fcrelu").source
        (O,) = H.check_against_oracle(src, "fcrelu", (I, W, bias), options=options, target=target)
        torch.testing.assert_close(O, torch.relu(I @ W.T + bias))
