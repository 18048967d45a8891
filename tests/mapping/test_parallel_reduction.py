"""Reductions to one element run in threads (mapping/cpu_parallel.py, ``_reduction_only``;
reduction_forms.py; c_printer.py, ``parallel_reduction``).

A sum over a whole tensor has no parallel loop: every iteration updates the same element. The
mapper marks its outermost reduction loop ``parallel_reduction``; each iteration computes a
partial result in a function of its own, and the partial results are combined in iteration
order, so the result is the same for every number of threads.
"""

from __future__ import annotations

import compiled_helpers as H
import pytest
import torch

from tcjit.mapping import ir
from tcjit.pipeline import lowered
from tcjit.polyhedral.lang.check import check_source

SIZES = {"M": 300, "N": 233}  # 69900 instances: enough work for threads


def _source(op: str, dtype: str = "float", body: str = "fabs(A(r_m, r_n))") -> str:
    return f"def red({dtype}(M,N) A) -> (S) {{ S {op} {body} }}"


def _inputs(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(SIZES["M"], SIZES["N"], generator=g, dtype=dtype),)
    return (torch.randint(-1000, 1000, (SIZES["M"], SIZES["N"]), generator=g, dtype=dtype),)


@pytest.mark.parametrize("op", ["+=!", "max=!", "min=!", "*=!"])
def test_whole_tensor_reductions_run_in_threads(op: str) -> None:
    body = "1 + A(r_m, r_n) / 50000" if op == "*=!" else "A(r_m, r_n)"
    src = _source(op, body=body)
    low = lowered(check_source(src).entry(), SIZES)
    assert "parallel reduction (partial results in threads)" in low.stages["decisions"]
    (red,) = [n for n in ir.nodes(low.kernel_ir) if isinstance(n, ir.ParallelReduction)]
    assert red.first.statement == "S0" and red.count >= 2
    assert "parallel reduction: 'S'" in low.source
    H.check_against_oracle(src, None, _inputs(), reduction_length=SIZES["M"] * SIZES["N"])


def test_integer_sums_wrap_as_in_the_oracle() -> None:
    src = _source("+=!", "int32", "A(r_m, r_n) * 70000")
    low = lowered(check_source(src).entry(), SIZES)
    assert [n.first.statement for n in ir.nodes(low.kernel_ir) if isinstance(n, ir.ParallelReduction)] == [
        "S0"
    ]
    H.check_against_oracle(src, None, _inputs(torch.int32))


def test_the_result_does_not_depend_on_the_number_of_threads() -> None:
    src = _source("+=!")
    (x,) = _inputs()
    saved = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results.append(H.run_compiled(src, None, (x,))[0])
    finally:
        torch.set_num_threads(saved)
    assert all(torch.equal(results[0], r) for r in results[1:])
    torch.testing.assert_close(results[0].double(), x.double().abs().sum(), rtol=1e-6, atol=0)


def test_a_reduction_into_a_row_stays_a_parallel_loop_over_rows() -> None:
    src = "def rows(float(M,N) A) -> (S) { S(m) +=! A(m, r_n) }"
    low = lowered(check_source(src).entry(), SIZES)
    assert "parallel reduction" not in low.stages["decisions"]
    assert "parallel: member" in low.stages["decisions"]


def test_a_reduction_of_a_reductions_result() -> None:
    """The second sum reads the first's result: each may run in threads, one after the other."""
    src = """def two(float(M,N) A) -> (S, T) {
        S +=! A(r_m, r_n)
        T +=! A(r_m, r_n) * S
    }"""
    (x,) = _inputs()
    H.check_against_oracle(src, None, (x,), reduction_length=SIZES["M"] * SIZES["N"])
