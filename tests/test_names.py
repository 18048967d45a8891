"""Any valid TC identifier works as the name of a definition, tensor, size or index: compiled
kernels (CPU and emulated CUDA) agree with the oracle whatever the names, however long, and
whatever they mean to the C compiler."""

from __future__ import annotations

import compiled_helpers as H
import pytest
import torch

from tcjit.polyhedral.lang.builtins import BUILTINS, arity
from tcjit.polyhedral.names import MAX_NAME, bounded, entry_symbol

TARGETS = ("cpu", "cuda-emulated")


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")):
        yield


def _mm(name="mm", A="A", B="B", C="C", sizes=("M", "K", "N"), idx=("m", "k", "n")) -> str:
    """A matrix product with the given names."""
    M, K, N = sizes
    m, k, n = idx
    return (
        f"def {name}(float({M},{K}) {A}, float({K},{N}) {B}) -> ({C}) {{\n"
        f"    {C}({m}, {n}) +=! {A}({m}, {k}) * {B}({k}, {n})\n"
        f"}}"
    )


def _mm_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(3, 5, generator=g), torch.randn(5, 4, generator=g)


def test_bounded_names_are_short_and_distinct() -> None:
    """Names longer than MAX_NAME are cut and hashed; distinct names stay distinct."""
    a, b = bounded("f" * 300), bounded("f" * 301)
    assert len(a) == len(b) == MAX_NAME and a != b and bounded("mm") == "mm"
    assert len(entry_symbol("f" * 5000)) < 100


@pytest.mark.parametrize("target", TARGETS)
def test_long_names_compile(target: str) -> None:
    """A 300-character definition name (a file name and a C symbol) and 300-character tensor,
    size and index names."""
    long = "x" * 300
    src = _mm(
        name="d" + long,
        A="A" + long,
        B="B" + long,
        C="C" + long,
        sizes=("M" + long, "K" + long, "N" + long),
        idx=("m" + long, "k" + long, "n" + long),
    )
    H.check_against_oracle(src, None, _mm_inputs(), target=target, reduction_length=5)


# Definition names that are names of the C prelude, the kernel's helpers or the C library.
C_CLASHES = ("exp_f32", "sigmoid_f32", "held_body", "take_workspace", "floordiv_i64", "exp", "main", "printf")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", C_CLASHES)
def test_definition_names_never_clash_with_c_names(name: str, target: str) -> None:
    """The kernel's symbol lives in a namespace of its own (``tc_entry_<name>``)."""
    H.check_against_oracle(_mm(name=name), None, _mm_inputs(), target=target, reduction_length=5)


def _named_like(builtin: str) -> str:
    """A definition named ``builtin`` whose body calls that builtin (on a positive value, so that
    every builtin is defined there; arguments repeated to its arity)."""
    args = ", ".join(["X(i) * 0.25 + 0.5"] * arity(builtin))
    return f"def {builtin}(float(N) X) -> (Z) {{\n    Z(i) = {builtin}({args})\n}}"


@pytest.mark.parametrize("builtin", sorted(BUILTINS))
def test_definitions_may_have_a_builtins_name(builtin: str) -> None:
    """As in TC, a definition may be named like any builtin (``def sigmoid``); a call of that
    builtin in its body still means the builtin (checked against the oracle's value of it)."""
    x = torch.rand(6, dtype=torch.float64)
    (z,) = H.as_tuple(H.ORACLE(_named_like(builtin), builtin, x.float()))
    plain = _named_like(builtin).replace(f"def {builtin}(", "def f(", 1)
    (want,) = H.as_tuple(H.ORACLE(plain, "f", x.float()))
    assert torch.equal(z.isnan(), want.isnan()) and torch.equal(z[~z.isnan()], want[~want.isnan()])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("builtin", ["sigmoid", "exp", "min", "max", "fma", "floor"])
def test_definitions_with_a_builtins_name_compile(builtin: str, target: str) -> None:
    """The compiled kernels of such definitions agree with the oracle."""
    H.check_against_oracle(_named_like(builtin), builtin, (torch.rand(6),), target=target)
