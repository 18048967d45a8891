"""Real CUDA kernels on a real GPU (tcjit/cuda_runtime.py): skipped on machines without one.

Every suite kernel at its small sizes, launched on CUDA tensors, against the oracle run on the
same inputs on the CPU; launches on the current stream and inside a CUDA graph; outputs on the
inputs' device; the disk cache; errors instead of fallbacks. The launches go through the driver
with prepared argument buffers (tcjit/cuda_launch.py): scalars of every width, and threads calling
one specialisation at once.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import compiled_helpers as H
import pytest
import torch

import tcjit
from tcjit import suite
from tcjit.mapping.options import MappingOptions

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

OPTIONS = {
    "default": None,
    "small": MappingOptions("naive").tile(4, 8, 2).map_to_blocks(3, 2).map_to_threads(4, 2),
    "3d": MappingOptions("naive").tile(2, 3, 4).map_to_blocks(2, 2, 2).map_to_threads(2, 3, 4),
}
CASES = [(k.name, w) for k in suite.SUITE.values() for w in range(len(k.small_sizes))]


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")):
        yield


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("name, which", CASES, ids=[f"{n}-{w}" for n, w in CASES])
def test_suite_kernel_on_the_gpu_matches_the_oracle(name: str, which: int, option: str) -> None:
    k = suite.get(name)
    sizes = k.small_sizes[which]
    inputs = k.make_inputs(sizes, seed=which)
    want = H.as_tuple(H.ORACLE(k.source, k.entry, *inputs))
    kernel = tcjit.define(k.source, k.entry)
    got = H.as_tuple(kernel(*(x.cuda() for x in inputs), options=OPTIONS[option]))
    assert all(g.device.type == "cuda" for g in got)
    H.assert_all_same(
        tuple(g.cpu() for g in got), want, k.reduction_length(sizes), k.checked.outputs, what=name
    )


def test_launches_follow_the_current_stream_and_replay_in_a_graph() -> None:
    mm = tcjit.define("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }")
    a, b = torch.randn(67, 45, device="cuda"), torch.randn(45, 33, device="cuda")
    mm(a, b)  # compile outside the capture
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        c = mm(a, b)
    side.synchronize()
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = mm(a, b)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-4)


def test_out_of_bounds_gathers_raise() -> None:
    src = "def g(float(V,D) LUT, int64(B) I) -> (O) { O(b, d) = LUT(I(b), d) }"
    lut, idx = torch.randn(5, 3, device="cuda"), torch.tensor([0, 4, 7], device="cuda")
    with pytest.raises(tcjit.TCBoundsError, match="element 7"):
        tcjit.define(src)(lut, idx)


def test_half_sums_accumulate_wide_and_round_once() -> None:
    src = "def hgemm(float16(M,K) A, float16(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"
    a = torch.randn(8, 64, dtype=torch.float16, device="cuda")
    b = torch.randn(64, 5, dtype=torch.float16, device="cuda")
    c = tcjit.define(src)(a, b)
    assert c.dtype == torch.float16
    torch.testing.assert_close(c, (a.double() @ b.double()).half(), rtol=1e-3, atol=1e-3)


def test_threads_calling_one_specialisation_at_once_get_their_own_results() -> None:
    """One specialisation has one argument buffer: two threads calling it at once, each with its
    own inputs and a scalar that changes every call, get their own results."""
    axpy = tcjit.define("def axpy(float(N) X, float(N) Y, float a) -> (Z) { Z(i) = a * X(i) + Y(i) }")
    xs = [torch.randn(4096, device="cuda") for _ in range(2)]
    ys = [torch.randn(4096, device="cuda") for _ in range(2)]
    spec = tcjit.compile(axpy, xs[0], ys[0], 1.0)

    def calls(t: int) -> list[tuple[float, torch.Tensor]]:
        out = [(a, spec(xs[t], ys[t], a)) for a in (float(100 * t + n) for n in range(100))]
        torch.cuda.synchronize()
        return out

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(calls, range(2)))
    for t, calls_made in enumerate(results):
        for a, z in calls_made:
            torch.testing.assert_close(z, a * xs[t] + ys[t], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("flip", [True, False])
def test_scalars_of_every_width_and_int64_values_reach_the_kernel(flip: bool) -> None:
    """Each scalar is passed in its own C type: an int64 above 2**32 (its high word matters), a
    negative int32, a uint8 above 127, a bool, float, double and a half passed as float."""
    mix = tcjit.define(
        """
        def mix(int64(N) I, float(N) A, int64 k, int32 j, uint8 u, bool flip, float alpha, float64 beta,
                float16 h) -> (O, P, Q) {
            O(i) = I(i) * k + j + u
            P(i) = flip ? A(i) * alpha : A(i)
            Q(i) = float(A(i) * beta) + h
        }"""
    )
    i = torch.randint(-1000, 1000, (37,), dtype=torch.int64, device="cuda")
    a = torch.randn(37, device="cuda")
    k, j, u, alpha, beta, h = 2**40 + 3, -7, 200, 0.5, 1e-3, 0.25
    o, p, q = mix(i, a, k, j, u, flip, alpha, beta, h)
    torch.testing.assert_close(o, i * k + j + u, rtol=0, atol=0)
    torch.testing.assert_close(p, a * alpha if flip else a)
    torch.testing.assert_close(q, (a.double() * beta).float() + h)


@pytest.mark.parametrize("name", ["fcrelu", "softmax", "matmul"])
def test_a_symbolic_batch_size_compiles_once_and_launches_each_calls_grid(name: str) -> None:
    """The batch size symbolic from the first call: every later batch size (1 included, and sizes
    needing more blocks than the first) launches the grid it needs, matches the oracle and
    compiles nothing."""
    k = suite.get(name)
    lead = k.checked.sizes[0]
    kernel = tcjit.define(k.source, k.entry, dynamic={lead})
    before = None
    for batch in (40, 1, 7, 333, 40):
        sizes = {**k.small_sizes[-1], lead: batch}
        inputs = k.make_inputs(sizes, seed=batch)
        want = H.as_tuple(H.ORACLE(k.source, k.entry, *inputs))
        got = H.as_tuple(kernel(*(x.cuda() for x in inputs)))
        H.assert_all_same(
            tuple(g.cpu() for g in got), want, k.reduction_length(sizes), k.checked.outputs, what=name
        )
        before = before or tcjit.compile_counts()
    assert tcjit.compile_counts() == before and kernel.symbolic_sizes == {lead}
