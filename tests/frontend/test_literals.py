"""Literals at the edges of their types: compiled kernels and the oracle agree (docs/language.md,
Types). Integer literals out of range are refused (test_diagnostics.py); float literals round to
their type, to infinity beyond its range and to zero below its smallest subnormal."""

from __future__ import annotations

import math

import compiled_helpers as H
import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")):
        yield


FLOATS = {
    "float32_overflow": ("float", "1e39", math.inf),
    "float32_max": ("float", "3.4028234e38", 3.4028234663852886e38),
    "float64_overflow": ("double", "1e400", math.inf),
    "huge_literal": ("float", "9" * 5000 + ".0", math.inf),
    "float32_underflow": ("float", "1e-50", 0.0),
    "float64_underflow": ("double", "1e-400", 0.0),
}


@pytest.mark.parametrize("target", ["cpu", "cuda-emulated"])
@pytest.mark.parametrize("ty, literal, want", list(FLOATS.values()), ids=list(FLOATS))
def test_float_literals_round_to_their_type(ty: str, literal: str, want: float, target: str) -> None:
    """A float literal takes the statement's float type, rounded to nearest like a C constant."""
    src = f"def f({ty}(N) A) -> (B) {{\n    B(i) = A(i) + {literal}\n}}"
    dtype = torch.float32 if ty == "float" else torch.float64
    (B,) = H.check_against_oracle(src, None, (torch.zeros(3, dtype=dtype),), target=target)
    assert B.tolist() == [want] * 3
