"""Symbolic sizes through the pipeline, the kernel store and the CPU runtime (issue 34): keys
without the symbolic sizes' values, kernels that take the sizes' values as their last arguments,
outputs shaped per call, run-time bounds checks on dimensions of symbolic size.

The lowering is the mapping's (``Target.lower(..., symbolic=)``, the contract of
tcjit/dynamic.py); here a stand-in lowering (``stub_lower``) writes the C of two small kernels
by hand, taking the sizes it is told are symbolic as ``int64_t`` arguments after the others, so
that everything after the lowering runs for real: the C compiler, the store, loading, calls.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import tcjit
from tcjit.binding import bind
from tcjit.dynamic import family_of, key_part
from tcjit.kernel_cache import cache_key
from tcjit.targets import TARGETS

SCALE = "def scale(float(N, M) X, float(M) s) -> (Y) { Y(n, m) = X(n, m) * s(m) }"
GATHER = "def gather(float(N) X, int64(K) idx) -> (Y) { Y(k) = X(idx(k)) }"


def _scale_c(sizes, strides, symbolic) -> tuple[str, list]:
    x0, x1 = ("M", "1") if "N" in symbolic or "M" in symbolic else map(str, strides["X"])
    loops = "for (int64_t n = 0; n < N; n++) for (int64_t m = 0; m < M; m++)"
    body = f"{loops} Y[n * M + m] = X[n * {x0} + m * {x1}] * s[m];"
    return body, [["X", "tensor", "float *"], ["s", "tensor", "float *"], ["Y", "tensor", "float *"]]


def _gather_c(sizes, strides, symbolic) -> tuple[str, list]:
    body = (
        "for (int64_t k = 0; k < K; k++) { int64_t i = idx[k];"
        " if (i < 0 || i >= N) { if (!tc_errors[0]) { tc_errors[0] = 1; tc_errors[1] = i; } i = 0; }"
        " Y[k] = X[i]; }"
    )
    return body, [["X", "tensor", "float *"], ["idx", "tensor", "int64_t *"], ["Y", "tensor", "float *"]]


@pytest.fixture
def lowered(monkeypatch, tmp_path) -> list[dict]:
    """A private kernel store, and the CPU target's lowering replaced by hand-written C for SCALE
    and GATHER; what each lowering was asked for."""
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    asked: list[dict] = []

    def stub_lower(cdef, sizes, strides, values, symbolic=frozenset()):
        asked.append({"sizes": dict(sizes), "strides": dict(strides), "symbolic": frozenset(symbolic)})
        body, params = {"scale": _scale_c, "gather": _gather_c}[cdef.name](sizes, strides, symbolic)
        order = tuple(n for n in reversed(cdef.sizes) if n in symbolic)  # any order: the meta says it
        fixed = "".join(f"const int64_t {n} = {sizes[n]}; " for n in cdef.sizes if n not in symbolic)
        args = ", ".join(f"{c.replace(' *', '')} *{n}" for n, _, c in params)
        args += "".join(f", int64_t {n}" for n in order)
        source = (
            "#include <stdint.h>\n"
            f"void tc_{cdef.name}(int nthreads, int64_t *tc_errors, {args}) {{ {fixed}{body} }}\n"
        )
        span = cdef.statements[0].source.span
        dim = -1 if "N" in symbolic else sizes["N"]
        checks = [["X", 0, dim, [span.start, span.end, span.line, span.col], "reads"]]
        meta = {
            "symbol": f"tc_{cdef.name}",
            "params": params,
            "zero_init": [],
            "checks": checks if cdef.name == "gather" else [],
            "wide": [],
        }
        if order:
            meta["sizes"] = list(order)
        return SimpleNamespace(source=source, stages={}, to_json=lambda: meta)

    monkeypatch.setattr(TARGETS["cpu"], "lower", stub_lower)
    return asked


def test_a_symbolic_kernel_serves_every_size_and_is_stored_without_their_values(lowered):
    k = tcjit.define(SCALE)
    s = torch.randn(8)
    before = tcjit.compile_counts()["compiled"]
    for n in (32, 17, 32, 5, 1):
        x = torch.randn(n, 8)
        torch.testing.assert_close(k(x, s), x * s, rtol=0, atol=0)
    assert tcjit.compile_counts()["compiled"] - before == 2, "32, then 17 with N symbolic"
    assert [a["symbolic"] for a in lowered] == [frozenset(), {"N"}]
    assert lowered[1]["sizes"] == {"N": 32, "M": 8}, "the largest call seen"
    assert lowered[1]["strides"] == {"X": (8, 1), "s": (1,), "Y": (8, 1)}, "contiguous at those sizes"
    (spec,) = k._families.values()
    assert spec.sizes == ("N",) and not spec.from_disk
    x, s3 = torch.randn(2, 3), torch.randn(3)
    torch.testing.assert_close(k(x, s3), x * s3, rtol=0, atol=0)  # M's second value
    assert lowered[2]["symbolic"] == {"N", "M"} and lowered[2]["sizes"] == {"N": 32, "M": 8}
    assert lowered[2]["strides"] == {"X": (8, 1), "s": (1,), "Y": (8, 1)}, "at those sizes, not the call's"
    # another process, or kernel, with N symbolic from the first call: the same key
    loaded = tcjit.compile_counts()["loaded"]
    again = tcjit.define(SCALE, dynamic={"N"})
    x = torch.randn(9, 8)
    torch.testing.assert_close(again(x, s), x * s, rtol=0, atol=0)
    assert tcjit.compile_counts()["loaded"] == loaded + 1 and len(lowered) == 3
    (found,) = again._families.values()
    assert found.from_disk and found.sizes == ("N",)


def test_sizes_zero_non_contiguous_tensors_and_outputs(lowered):
    k = tcjit.define(SCALE, dynamic=True)
    s = torch.randn(6)
    x = torch.randn(4, 6)
    torch.testing.assert_close(k(x, s), x * s, rtol=0, atol=0)
    assert lowered[-1]["symbolic"] == {"N", "M"}
    assert k(torch.randn(0, 6), s).shape == (0, 6)
    assert lowered[-1]["symbolic"] == frozenset(), "N = 0: concrete"
    t = torch.randn(6, 5).T  # not contiguous: concrete, strides as passed
    torch.testing.assert_close(k(t, torch.ones(6) * 2), t * 2, rtol=0, atol=0)
    assert lowered[-1]["symbolic"] == frozenset() and lowered[-1]["strides"]["X"] == (1, 5)
    n = len(lowered)
    out = torch.empty(3, 7)
    x = torch.randn(3, 7)
    assert k(x, torch.ones(7), outputs=out) is out
    torch.testing.assert_close(out, x, rtol=0, atol=0)
    out = torch.empty(2, 3)
    x = torch.randn(2, 3)
    k(x, torch.ones(3), outputs=out)  # outputs= of another size: the same family
    torch.testing.assert_close(out, x, rtol=0, atol=0)
    assert len(lowered) == n + 1, "one family for outputs= calls"


def test_a_bounds_check_on_a_symbolic_dimension_names_the_calls_size(lowered):
    k = tcjit.define(GATHER, dynamic=True)
    x = torch.arange(7.0)
    torch.testing.assert_close(k(x, torch.tensor([6, 0, 3])), torch.tensor([6.0, 0.0, 3.0]))
    assert k._families and lowered[-1]["symbolic"] == {"N", "K"}
    with pytest.raises(tcjit.TCBoundsError, match=r"element 9, outside \[0, 7\) \(dimension 0 has size 7\)"):
        k(x, torch.tensor([1, 9]))
    with pytest.raises(tcjit.TCBoundsError, match=r"element 12, outside \[0, 12\)"):
        k(torch.arange(12.0), torch.tensor([12]))
    assert len(lowered) == 1, "one kernel for every size"


def test_the_key_of_a_family_holds_which_sizes_are_symbolic_not_their_values():
    k = tcjit.define("def fc(float(B,M) I, float(N,M) W) -> (O) { O(b, n) +=! I(b, r_m) * W(n, r_m) }")
    cdef = k.definition
    options = tcjit.MappingOptions().to_json()

    def key(b, m=16, symbolic=("B",)):
        args = (torch.randn(b, m), torch.randn(4, m))
        family = family_of(cdef, bind(cdef, args).sizes, args, None, symbolic)
        part = None if family is None else key_part(cdef, family)
        return cache_key(k.canonical_source, k.name, args, None, "cpu", options, symbolic=part)

    assert key(977) == key(613)
    assert "977" not in key(977)
    parsed = json.loads(key(977))
    assert parsed["symbolic"] == {
        "sizes": ["B"],
        "admissible": "1..2147483647",
        "long_sums": [],
        "fixed": {"M": 16, "N": 4},
    }
    assert parsed["inputs"] == [["float32", ["B", 16], "contiguous"], ["float32", [4, 16], [16, 1]]]
    assert key(977, m=8) != key(977), "the other sizes' values are in the key"
    assert key(977, symbolic=("B", "M")) != key(977), "so is which sizes are symbolic"
    concrete = json.loads(key(977, symbolic=()))
    assert "symbolic" not in concrete and concrete["inputs"][0] == ["float32", [977, 16], [16, 1]]
