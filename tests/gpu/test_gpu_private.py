"""Private (register) promotion (mapping/promotion.py ``promote_private``), checked on the CPU.

Suite kernels with ``use_private_memory`` (alone, and next to shared memory) run through the
emulated target in every order and must match the oracle; the decisions, the emulated C and the
CUDA source show the private buffers, and the CUDA source compiles. Broken promotions must be
caught: a copy in skipped (the emulation's per-thread buffers start as NaN, as shared ones do) and
a write-back skipped (the output keeps what the initialisation wrote).
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace

import compiled_helpers as H
import pytest
import test_gpu_promotion as TGP
import torch

import tcjit
from tcjit import nvrtc, suite
from tcjit.mapping import promotion_private
from tcjit.mapping.lower_gpu import lower_cuda, lower_gpu
from tcjit.mapping.options import MappingOptions


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")):
        yield


_BASE = MappingOptions("naive").tile(4, 8, 2).map_to_blocks(3, 2).map_to_threads(4, 2)

#: Private promotion alone (just below the thread mapping, where the reduction loop runs per
#: thread), with unrolled inner loops, and next to shared memory (the budget leaves the output
#: to registers: A and B go to shared memory inside the tiled reduction loop).
PRIVATE = {
    "private": _BASE.use_private_memory(True),
    "private-unrolled": MappingOptions("naive")
    .tile(4, 4, 4)
    .map_to_blocks(8, 8)
    .map_to_threads(4, 4)
    .unroll(8)
    .use_private_memory(True),
    "private-shared": _BASE.use_shared_memory(True)
    .shared_depth(3)
    .unroll(4)
    .unroll_copy_shared(True)
    .max_shared_memory(130)
    .use_private_memory(True),
}
KERNELS = TGP.KERNELS
ORDERS = TGP.ORDERS
MATMUL = suite.get("matmul")


@functools.cache
def _lowered(name: str, option: str, which: int):
    k = suite.get(name)
    return lower_gpu(k.checked, k.small_sizes[which], PRIVATE[option].values)


@pytest.mark.parametrize("name, option, which", H.rotation_params(KERNELS, PRIVATE))
def test_private_suite_kernel_matches_the_oracle_in_every_order(name: str, option: str, which: int) -> None:
    k = suite.get(name)
    decisions = _lowered(name, option, which).plan.decisions
    # next to shared memory, or with unrolled loops, the output may be in shared memory, or have
    # no reuse per thread: promotion decides, but only the first option vector must promote
    promoted = [
        d for d in decisions if d.startswith("private: ") and (" as tc_private_" in d or option != "private")
    ]
    assert promoted, decisions
    inputs = H.suite_inputs(name, which)
    first = TGP._run(H.suite_kernel(name), inputs, PRIVATE[option])
    sizes = k.small_sizes[which]
    H.assert_all_same(
        first, H.suite_oracle(name, which), k.reduction_length(sizes), k.checked.outputs, what=name
    )
    for order in ORDERS[1:]:
        again = TGP._run(H.suite_kernel(name), inputs, PRIVATE[option], order)
        for o, a, b in zip(k.checked.outputs, first, again):
            assert torch.equal(a, b), f"{name}.{o}: {order} order differs from forward (a race?)"


def test_private_promotion_shows_in_the_decisions_the_emulation_and_the_cuda_source() -> None:
    """matmul: C(m, n) is one register per thread across the reduction loop below the thread
    mapping (copied in, written back, no barrier); A and B are shared by threads and refused."""
    a, b = torch.randn(13, 11), torch.randn(11, 9)
    kernel = tcjit.define(MATMUL.source.replace("def matmul(", "def matmul_private("))
    spec = tcjit.compile(kernel, a, b, options=PRIVATE["private"], target="cuda-emulated")
    decisions = spec.stages["decisions"]
    assert (
        "private: C[1][1] at depth 5 over ['S0'] as tc_private_C (copy in, write back; reuse)" in decisions
    ), decisions
    assert "private: C at depth 5 over ['S0_init'] not promoted (no reuse within a thread)" in decisions
    assert (
        "private: A at depth 5 over ['S0'] not promoted (R3 depends on a loop that is not unrolled)"
        in decisions
    )
    # the emulation: one copy per thread ([t2][t1][t0]), poisoned with NaN like shared buffers
    assert "float tc_private_C[1][2][4][1][1] TC_STACK_ALIGNED;" in spec.source
    assert (
        "tc_f = (float *)tc_private_C; for (int64_t tc_k = 0; tc_k < 8; tc_k++) tc_f[tc_k] = (0.0f / 0.0f);"
        in (spec.source)
    )
    assert "tc_private_C[t2][t1][t0][i_m - i_m][i_n - i_n]" in spec.source  # constant after unrolling
    torch.testing.assert_close(spec(a, b), a @ b, rtol=1e-4, atol=1e-4)
    cdef = MATMUL.checked
    sizes = TGP.PARTIAL
    plain = lower_cuda(cdef, sizes, TGP._strides(cdef, sizes), _BASE.validate("cuda").values)
    ks = lower_cuda(cdef, sizes, TGP._strides(cdef, sizes), PRIVATE["private"].validate("cuda").values)
    assert re.search(r"^\s*float tc_private_C\[1\]\[1\];$", ks.source, re.M), ks.source
    assert "__shared__" not in ks.source
    assert "copy 'C' into tc_private_C" in ks.source and "write back 'C' from tc_private_C" in ks.source
    assert ks.source.count("__syncthreads();") == plain.source.count("__syncthreads();")  # none added
    if nvrtc.available():
        ptx = nvrtc.compile_ptx(ks.source, name="private_matmul.cu")
        assert ".local" not in ptx  # the private array lives in a register


def test_private_next_to_shared_memory() -> None:
    """Shared memory first: a tensor promoted to shared memory is left alone; C, over the shared
    budget, goes to a register; both kinds of buffers in one CUDA kernel, which compiles."""
    decisions = _lowered("matmul", "private-shared", 1).plan.decisions
    assert "private: C[1][1] at depth 5 over ['S0'] as tc_private_C (copy in, write back; reuse)" in decisions
    assert "private: A at depth 5 over ['S0'] not promoted (in shared memory already)" in decisions
    assert any(d.startswith("shared: A[4][3] at depth 3") for d in decisions), decisions
    cdef, sizes = MATMUL.checked, TGP.PARTIAL
    ks = lower_cuda(cdef, sizes, TGP._strides(cdef, sizes), PRIVATE["private-shared"].validate("cuda").values)
    assert "__shared__ float tc_shared_A[4][3];" in ks.source and "float tc_private_C[1][1];" in ks.source
    if nvrtc.available():
        nvrtc.compile_ptx(ks.source, name="private_shared_matmul.cu")


def test_refusals_and_the_depth() -> None:
    """Elements other threads touch too stay out of registers (A and B, even below an unrolled
    loop); a private depth above the thread mapping is raised to just below it."""
    decisions = _lowered("matmul", "private-unrolled", 1).plan.decisions
    assert "private: C[1][1] at depth 5 over ['S0'] as tc_private_C (copy in, write back; reuse)" in decisions
    assert (
        "private: A at depth 5 over ['S0'] not promoted (an element is touched by two threads)" in decisions
    )
    low = lower_gpu(MATMUL.checked, TGP.PARTIAL, PRIVATE["private"].private_depth(1).values)
    assert "private: depth 1 raised to 5 (below the thread mapping)" in low.plan.decisions
    assert any(" as tc_private_C" in d for d in low.plan.decisions)
    low = lower_gpu(MATMUL.checked, TGP.PARTIAL, _BASE.values)
    assert not any(d.startswith("private:") for d in low.plan.decisions)


def test_without_private_promotion_nothing_changes() -> None:
    cdef, sizes = MATMUL.checked, TGP.PARTIAL
    plain = lower_cuda(cdef, sizes, TGP._strides(cdef, sizes), _BASE.validate("cuda").values)
    off = _BASE.use_private_memory(False).private_depth(7)
    source = lower_cuda(cdef, sizes, TGP._strides(cdef, sizes), off.validate("cuda").values).source
    assert source.replace("private_depth=7", "private_depth=None") == plain.source  # but the options shown


# ======================================================================== broken promotions caught
def _broken(monkeypatch, side: str) -> None:
    """Private promotion without its copies on ``side`` ("before": copies in, "after": writes back)."""
    graft = promotion_private.PrivatePromoter.private_graft

    def broken(self, scope):
        return replace(graft(self, scope), **{side: ()})

    monkeypatch.setattr(promotion_private.PrivatePromoter, "private_graft", broken)


def test_a_skipped_copy_in_reads_the_poisoned_register(monkeypatch) -> None:
    """Without its copy in, the accumulator starts as the NaN the per-thread buffer is filled
    with: the whole output is NaN (in every order)."""
    _broken(monkeypatch, "before")
    a, b = torch.randn(13, 11), torch.randn(11, 9)
    kernel = tcjit.define(MATMUL.source.replace("def matmul(", "def matmul_private_no_copy_in("))
    for order in ORDERS:
        got = TGP._run(kernel, (a, b), PRIVATE["private"], order)[0]
        assert torch.isnan(got).all(), got
    # integers start at their type's minimum: with no copy in, each thread's register keeps
    # summing from it over the tiles and elements it runs, so every element is the minimum plus
    # some sum of products (not the oracle's)
    src = "def imm(int32(M,K) A, int32(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"
    a, b = torch.randint(0, 5, (13, 11), dtype=torch.int32), torch.randint(0, 5, (11, 9), dtype=torch.int32)
    got = TGP._run(tcjit.define(src), (a, b), PRIVATE["private"])[0].to(torch.int64) + 2**31
    want = a.to(torch.int64) @ b.to(torch.int64)
    assert (got >= 0).all() and (got < 2**16).all() and not torch.equal(got, want), got


def test_a_skipped_write_back_is_caught(monkeypatch) -> None:
    """Without its write-back the output keeps the initialisation's zeros."""
    _broken(monkeypatch, "after")
    a, b = torch.randn(13, 11), torch.randn(11, 9)
    kernel = tcjit.define(MATMUL.source.replace("def matmul(", "def matmul_private_no_write_back("))
    got = TGP._run(kernel, (a, b), PRIVATE["private"])[0]
    with pytest.raises(AssertionError):
        torch.testing.assert_close(got, a @ b, rtol=1e-4, atol=1e-4)
    assert torch.equal(got, torch.zeros_like(got))
