"""Decisions of the CPU mapping that shape whole loop nests (``tcjit.mapping.cpu``)."""

from __future__ import annotations

import compiled_helpers as H
import pytest
import torch

from tcjit.mapping.defaults import default_options
from tcjit.mapping.lower_cpu import INIT_WINDOW
from tcjit.pipeline import lowered
from tcjit.polyhedral.lang.check import check_source


def _pool(op: str, k: int) -> str:
    return f"""def pool(float(N,C,H,W) I) -> (O) {{
    O(n, c, h, w) {op} I(n, c, {k} * h + r_kh, {k} * w + r_kw) where r_kh in 0:{k}, r_kw in 0:{k}
}}"""


def _source(src: str, sizes: dict) -> str:
    return lowered(check_source(src).entry(), sizes).source


@pytest.mark.parametrize("op", ["max=!", "+=!"])
@pytest.mark.parametrize("k", [2, 4])
def test_pooling_initialises_each_element_in_the_reduction_pass(op: str, k: int) -> None:
    """A window of at most INIT_WINDOW points: each output element is initialised right before
    its window is reduced, in one parallel loop and one vector loop (one pass over the output)."""
    assert k * k <= INIT_WINDOW
    sizes = {"N": 2, "C": 3, "H": 8 * k + 1, "W": 19 * k}
    src = _pool(op, k)
    text = _source(src, sizes)
    assert _fused(text), text[text.index("(initialisation)") - 400 :][:1500]
    g = torch.Generator().manual_seed(1)
    (I,) = (torch.randn(2, 3, sizes["H"], sizes["W"], generator=g),)
    H.check_against_oracle(src, None, (I,), reduction_length=k * k)


def test_larger_windows_and_contractions_keep_a_separate_initialisation() -> None:
    """Above INIT_WINDOW points (a 5x5 window) and for long contractions, the initialisation runs
    in a loop nest of its own before the reduction (register tiles need the reduction's band).
    The contraction's vector register tiles hold whole sums and start them from zero, so its
    initialisation, separate and then dead, is left out of the kernel altogether."""
    pool = _source(_pool("max=!", 5), {"N": 1, "C": 2, "H": 15, "W": 20})
    mm = _source(
        "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }",
        {"M": 64, "K": 64, "N": 64},
    )
    assert not _fused(pool)
    assert "(initialisation)" not in mm
    assert "left out, as register tiles start their sums from zero: S0_init" in mm


def _fused(text: str) -> bool:
    """Whether the first update follows the initialisation in the same vector loop, no loop
    opened or closed between them."""
    init = text.index("(initialisation)")
    update = text.index("/* S0, line", init)
    loop = text.rindex("\n", 0, text.rindex("for (", 0, init))
    between = text[init:update]
    return (
        "#pragma omp simd" in text[loop - 40 : init]
        and "for (" not in between
        and "}\n" not in between.replace("; }\n", "")
    )


def test_short_contractions_keep_their_register_tiles() -> None:
    """A contraction over few points (K = 11) is not a pooling window: an operand is shared
    between outputs, so the initialisation is hoisted and the register tile applies; every tile,
    the partial ones of M = 13 too, starts its sums from zero, so the initialisation is left out."""
    src = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"
    low = lowered(check_source(src).entry(), {"M": 13, "K": 11, "N": 48})
    assert "register tile" in low.stages["decisions"]
    assert "left out, as register tiles start their sums from zero: S0_init" in low.source
    assert "(initialisation)" not in low.source


def test_short_dot_product_contractions_initialise_in_place() -> None:
    """A 16-term contraction without the outer-product form (``W(d, r)`` moves along the output's
    last index but is not read along it): initialised in its loop nest, the 16 terms unrolled
    under the vector loop (kronecker3's first product), and no more than 16 unrolled in all."""
    src = "def k(float(M,R) X, float(D,R) W) -> (C) { C(m, d) +=! X(m, r_r) * W(d, r_r) }"
    sizes = {"M": 64, "R": 16, "D": 32}
    cdef = check_source(src).entry()
    unpacked = default_options(cdef, sizes, "cpu").pack_operands(False)  # packed, W has the form
    low = lowered(cdef, sizes, unpacked)
    assert _fused(low.source), low.stages["decisions"]
    assert low.source.count("/* S0, line") == 16
    g = torch.Generator().manual_seed(3)
    X, W = torch.randn(64, 16, generator=g), torch.randn(32, 16, generator=g)
    H.check_against_oracle(src, None, (X, W), reduction_length=16)
