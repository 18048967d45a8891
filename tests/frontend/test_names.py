"""Any valid TC identifier works as the name of a definition, tensor, size or index: compiled
kernels (CPU and emulated CUDA) agree with the oracle whatever the names, however long, and
whatever they mean to the C compiler."""

from __future__ import annotations

import compiled_helpers as H
import pytest
import torch

from tcjit.mapping.options import MappingOptions
from tcjit.polyhedral.lang.builtins import BUILTINS, arity
from tcjit.polyhedral.names import ISL_KEYWORDS, MAX_NAME, bounded, entry_symbol, isl_name, tc_name

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


# isl's keywords (isl_stream.c; isl reads them in any case) that TC allows as names (min, max,
# floor and ceil are TC builtins, exists a TC keyword), names tcjit itself gives isl objects, and
# C's keywords and reserved or predefined identifiers.
ISL_WORDS = sorted(ISL_KEYWORDS - set(BUILTINS) - {"exists"})
CASED = ["AND", "Or", "NAN", "Infinity", "MOD", "True", "FLOORD"]
INTERNAL = ["a0", "e0", "o0", "p0", "s0", "x0", "b0", "t0", "t1", "c0", "v0", "S0", "S0_init", "R0", "tc_t"]
C_WORDS = ["int", "return", "for", "restrict", "NULL", "INFINITY", "errno", "_Bool", "__m256"]
NAMES = ISL_WORDS + CASED + INTERNAL + C_WORDS


def _as_indices(n: str) -> str:
    """``n`` (and ``n_``, which the escape must keep apart) as index names, and as the def's name;
    a transposed read, a reduction and a domain condition."""
    return (
        f"def {n}(float(M,K) X, float(N,K) Y) -> (Z) {{\n"
        f"    Z({n}, {n}_) +=! X({n}, r_k) * Y({n}_, r_k) where {n} + {n}_ >= 1\n"
        f"}}"
    )


def _as_sizes_and_tensors(n: str) -> str:
    """``n`` and ``n_`` as size names, ``n__`` and ``n___`` as tensor names (one namespace)."""
    return (
        f"def f(float({n},{n}_) {n}__, float({n}_,N) T) -> ({n}___) {{\n"
        f"    {n}___(i, j) +=! {n}__(i, k) * T(k, j) where k in 0:{n}_\n"
        f"    {n}___(i, j) = {n}___(i, j) + {n}__(i, {n}_ - 1)\n"
        f"}}"
    )


def _name_targets() -> list:
    """(name, target) pairs: the CPU for every name; the emulated CUDA target in the full tier
    only, except for tcjit's own isl names (thread and block ids among them) and a few keywords."""
    out = []
    for n in NAMES:
        full = n not in INTERNAL and n not in ("and", "NaN", "mod", "int")
        out.append(pytest.param(n, "cpu", id=f"{n}-cpu"))
        out.append(
            pytest.param(n, "cuda-emulated", id=f"{n}-emulated", marks=[pytest.mark.full] if full else [])
        )
    return out


@pytest.mark.parametrize("name, target", _name_targets())
def test_any_identifier_names_indices(name: str, target: str) -> None:
    """isl keywords and tcjit's own isl names as index names work (the Scop's isl text names them
    by an escape, :func:`~tcjit.polyhedral.names.isl_name`)."""
    g = torch.Generator().manual_seed(1)
    X, Y = torch.randn(3, 5, generator=g), torch.randn(4, 5, generator=g)
    H.check_against_oracle(_as_indices(name), None, (X, Y), target=target, reduction_length=5)


@pytest.mark.parametrize("fix", [False, True], ids=["param", "fixed"])
@pytest.mark.parametrize("name, target", _name_targets())
def test_any_identifier_names_sizes_and_tensors(name: str, target: str, fix: bool) -> None:
    """... and as size and tensor names, with the sizes as isl parameters or fixed first."""
    g = torch.Generator().manual_seed(2)
    A, T = torch.randn(3, 5, generator=g), torch.randn(5, 4, generator=g)
    opts = MappingOptions("naive").fix_parameters_before_scheduling(fix)
    if target != "cpu":
        opts = H.CUDA_OPTIONS["small"].fix_parameters_before_scheduling(fix)
    H.check_against_oracle(_as_sizes_and_tensors(name), None, (A, T), target=target, options=opts,
                           reduction_length=5)  # fmt: skip


def test_isl_names_are_an_injective_escape() -> None:
    """Escaped names keep apart, invert, and leave ordinary names alone."""
    names = [*NAMES, *(n + "_" for n in NAMES), *(n + "__" for n in NAMES), "M", "r_k", "i", "_"]
    escaped = [isl_name(n) for n in names]
    assert len(set(escaped)) == len(names)
    assert [tc_name(e) for e in escaped] == names
    assert all(e.lower() not in ISL_KEYWORDS for e in escaped)
    assert isl_name("M") == "M" and isl_name("r_k") == "r_k" and isl_name("and") == "and_"


def test_show_prints_tc_names() -> None:
    """``tcjit show --stage scop`` shows the names as written in TC."""
    from tcjit.polyhedral.lang.check import check_source
    from tcjit.polyhedral.scop import build_scop

    cdef = check_source(_as_sizes_and_tensors("and")).defs[0]
    text = build_scop(cdef).describe()
    assert "[and, and_, N] -> {" in text  # the sizes (isl: and_, and__)
    assert "-> and__[" in text and "-> and___[" in text and "and____" not in text  # the tensors
