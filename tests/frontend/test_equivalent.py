"""TC's ``<=>`` annotation (``Z(i) = 1/(1+exp(-X(i))) <=> sigmoid(X(i))``): parsed and checked
like the right-hand side's expressions, then ignored, as TC did (docs/language.md, Statements)."""

from __future__ import annotations

import compiled_helpers as H
import pytest
import torch

import tcjit
from tcjit import TCNameError, TCSyntaxError, TCTypeError

SIGMOID = """
def sig(float(N) X) -> (Z) {
    Z(i) = 1 / (1 + exp(-X(i))) <=> sigmoid(X(i))
}"""

MATMUL = """
def mm(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, r_k) * B(r_k, n) <=> matmul(A(m, r_k), B(r_k, n)) where r_k in 0:K
    C(m, n) = C(m, n) * s <=> scale(C(m, n), s) where s = 2.0
}"""


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")):
        yield


@pytest.mark.parametrize("target", ["cpu", "cuda-emulated"])
def test_annotated_programs_compute_their_right_hand_sides(target: str) -> None:
    """The annotation changes nothing: results agree with the oracle and with torch."""
    x = torch.randn(7)
    (z,) = H.check_against_oracle(SIGMOID, None, (x,), target=target)
    torch.testing.assert_close(z, torch.sigmoid(x))
    a, b = torch.randn(3, 5), torch.randn(5, 4)
    (c,) = H.check_against_oracle(MATMUL, None, (a, b), target=target, reduction_length=5)
    torch.testing.assert_close(c, 2 * a @ b)


def test_annotations_are_ignored_by_the_canonical_text() -> None:
    """An annotated definition is the same kernel as the plain one (same canonical text, hence the
    same cache entries and tuned options)."""
    plain = SIGMOID.replace(" <=> sigmoid(X(i))", "")
    assert tcjit.define(SIGMOID).canonical_source == tcjit.define(plain).canonical_source


BAD = [
    ("unknown_tensor", "Z(i) = X(i) <=> sigmoid(Y(i))", TCNameError, 3, 29, ["'Y'"]),
    ("unknown_name", "Z(i) = X(i) <=> sigmoid(X(i) + q)", TCNameError, 3, 36, ["'q'", "<=>"]),
    ("wrong_rank", "Z(i) = X(i) <=> sigmoid(X(i, i))", TCTypeError, 3, 29, ["'X'"]),
    ("tensor_as_value", "Z(i) = X(i) <=> sigmoid(X)", TCTypeError, 3, 29, ["'X'"]),
    ("no_call", "Z(i) = X(i) <=> sigmoid", TCSyntaxError, 4, 1, ["'('"]),
    ("no_name", "Z(i) = X(i) <=> (X(i))", TCSyntaxError, 3, 21, ["'<=>'"]),
]


@pytest.mark.parametrize("stmt, cls, line, col, words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_annotations_are_checked(stmt: str, cls: type, line: int, col: int, words: list[str]) -> None:
    """Names, ranks and types in the annotation are checked like the right-hand side's."""
    src = f"\ndef f(float(N) X) -> (Z) {{\n    {stmt}\n}}"
    H.raises_at(cls, line, col, words, tcjit.define, src)
