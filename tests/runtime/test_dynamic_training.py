"""Issue 34 end to end: a training loop whose batch size changes (32, 17, 32, 5, 1: a short last
batch, an evaluation batch) computes what torch computes, and after the second distinct batch
size compiles nothing more, forward, derived backward or evaluation, by tcjit's own counter
(:func:`tcjit.compile_counts`). Real symbolic kernels: the mapping's lowering with symbolic sizes,
the C compiler, the runtime passing each call's sizes.
"""

from __future__ import annotations

import pytest
import torch

import tcjit

FCRELU = """
def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}
"""

BATCHES = (32, 17, 32, 5, 1)


def _close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("loss", ["mean square", "sum"])  # a dense and an expanded gradient
def test_a_training_loop_compiles_nothing_after_the_second_batch_size(tmp_path, monkeypatch, loss):
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))  # built, not found on disk
    g = torch.Generator().manual_seed(0)
    layer1, layer2 = tcjit.define(FCRELU), tcjit.define(FCRELU)
    w1 = (torch.randn(16, 24, generator=g) / 5).requires_grad_()
    b1 = torch.randn(16, generator=g).requires_grad_()
    w2 = (torch.randn(8, 16, generator=g) / 4).requires_grad_()
    b2 = torch.randn(8, generator=g).requires_grad_()
    params = (w1, b1, w2, b2)
    counts = []
    for batch in BATCHES:
        x, t = torch.randn(batch, 24, generator=g), torch.randn(batch, 8, generator=g)
        y = layer2(layer1(x, w1, b1), w2, b2)
        want = torch.relu(torch.relu(x @ w1.T + b1) @ w2.T + b2)
        _close(y, want)
        if loss == "sum":
            got_grads = torch.autograd.grad(y.sum(), params)
            want_grads = torch.autograd.grad(want.sum(), params)
        else:
            got_grads = torch.autograd.grad(((y - t) ** 2).mean(), params)
            want_grads = torch.autograd.grad(((want - t) ** 2).mean(), params)
        for got, wanted in zip(got_grads, want_grads):
            _close(got, wanted)
        with torch.no_grad():  # an evaluation call: the kernel itself, not its augmented forward
            _close(layer2(layer1(x, w1, b1), w2, b2), want)
        counts.append(tcjit.compile_counts())
    assert counts[1]["compiled"] > counts[0]["compiled"], "the second size compiles symbolic kernels"
    assert counts[-1] == counts[1], f"no compilation or load after the second size: {counts}"
    assert layer1.symbolic_sizes == layer2.symbolic_sizes == {"B"}
    for layer in (layer1, layer2):
        assert len(layer._families) == 1 and len(layer.grad_plan().forward._families) == 1


def test_every_size_symbolic_from_the_first_call_matches_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    k = tcjit.define(FCRELU, dynamic=True)
    before = None
    for b, m, n in ((32, 24, 16), (17, 7, 3), (1, 1, 1), (5, 40, 9)):
        x, w, bias = torch.randn(b, m), torch.randn(n, m), torch.randn(n)
        _close(k(x, w, bias), torch.relu(x @ w.T + bias))
        before = before or tcjit.compile_counts()
    assert tcjit.compile_counts() == before, "one kernel for every size"
    assert k(torch.randn(0, 4), torch.randn(3, 4), torch.randn(3)).shape == (0, 3), "0: its own"


def test_a_gather_outside_a_symbolic_dimension_reports_the_calls_size(tmp_path, monkeypatch):
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    k = tcjit.define("def gather(float(N) X, int64(K) idx) -> (Y) { Y(k) = X(idx(k)) }", dynamic=True)
    x = torch.arange(7.0)
    torch.testing.assert_close(k(x, torch.tensor([6, 0, 3])), torch.tensor([6.0, 0.0, 3.0]))
    before = tcjit.compile_counts()
    with pytest.raises(tcjit.TCBoundsError, match=r"element 9, outside \[0, 7\) \(dimension 0 has size 7\)"):
        k(x, torch.tensor([1, 9]))
    with pytest.raises(tcjit.TCBoundsError, match=r"element 12, outside \[0, 12\)"):
        k(torch.arange(12.0), torch.tensor([12]))
    assert tcjit.compile_counts() == before and k.symbolic_sizes == {"N", "K"}


def test_long_and_short_sums_over_a_symbolic_size_get_a_kernel_each(tmp_path, monkeypatch):
    """A float32 sum of 16384 terms or more accumulates in float64, as a kernel specialised to the
    call's sizes would: sums over a symbolic size shorter than that share one kernel (float32
    accumulators, as fast as a specialised kernel), longer ones another (float64), and no
    further size compiles anything. The long sum keeps float64's accuracy (0.1 is not a float32:
    a float32 accumulator drifts far from the exact sum)."""
    from tcjit.mapping.accumulation import LONG_SUM

    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    k = tcjit.define("def rowsum(float(N, K) A) -> (S) { S(n) +=! A(n, r_k) }", dynamic={"K"})
    counts = []
    for length in (10, 20, LONG_SUM + 3, LONG_SUM + 100, 30, 4 * LONG_SUM):
        a = torch.full((2, length), 0.1)
        torch.testing.assert_close(k(a), a.double().sum(1).float(), rtol=1e-6, atol=0)
        counts.append(tcjit.compile_counts()["compiled"])
    assert counts[1] == counts[0], "one kernel for the short sums"
    assert counts[2] == counts[0] + 1, "one more for the long sums"
    assert counts[-1] == counts[2], "no further compilation"
    assert len(k._families) == 2


def test_the_emulated_cuda_target_compiles_nothing_for_a_third_batch_size(tmp_path, monkeypatch):
    """The CUDA mapping with a symbolic batch size, run by the emulated target (its grids computed
    from each call's sizes, races and bounds checked) in every block and thread order: after the
    second batch size nothing is compiled or loaded, forward or derived backward, and every result
    equals torch's."""
    from tcjit.mapping.emulation import ORDERS
    from tcjit.testing import emulation_order

    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    k = tcjit.define(FCRELU)
    w, bias = torch.randn(8, 24).requires_grad_(), torch.randn(8).requires_grad_()
    counts = []
    for batch in BATCHES:
        x = torch.randn(batch, 24).requires_grad_()
        want = torch.relu(x @ w.T + bias)
        want_grads = torch.autograd.grad(((want - 1) ** 2).mean(), (x, w, bias))
        for order in ORDERS:
            with emulation_order(order):
                y = k(x, w, bias, target="cuda-emulated")
                _close(y, want)
                for got, wanted in zip(torch.autograd.grad(((y - 1) ** 2).mean(), (x, w, bias)), want_grads):
                    _close(got, wanted)  # the derived backward, on the emulated target too
        counts.append(tcjit.compile_counts())
    assert counts[1]["compiled"] > counts[0]["compiled"], "the second size compiles a symbolic kernel"
    assert counts[-1] == counts[1], f"no compilation or load after the second size: {counts}"
    assert k.symbolic_sizes == {"B"} and len(k.grad_plan().forward._families) == 1


def test_a_kernel_whose_proof_is_too_costly_specialises_each_size(tmp_path, monkeypatch):
    """A symbolic kernel's legality proofs are bounded (tcjit.dynamic, "Proofs"). With the budget
    cut to one isl operation no symbolic kernel can be proven: each definition (the forward and
    its derived backward) warns once, specialises every new size as dynamic=False would, and the
    results, gradients included, still match torch."""
    from tcjit.mapping import prepare

    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setattr(prepare, "PROOF_OPERATIONS", 1)
    k = tcjit.define(FCRELU)
    counts = []
    with pytest.warns(tcjit.TCWarning, match="its sizes stay concrete") as caught:
        for b in (8, 5, 3, 5):
            x, w, bias = torch.randn(b, 12), torch.randn(6, 12).requires_grad_(), torch.randn(6)
            y = k(x, w, bias)
            want = torch.relu(x @ w.T + bias)
            _close(y, want)
            _close(torch.autograd.grad(y.sum(), w)[0], torch.autograd.grad(want.sum(), w)[0])
            counts.append(tcjit.compile_counts()["compiled"])
        with torch.no_grad():  # the kernel itself, at a new size: it too tries, warns, specialises
            _close(k(x := torch.randn(4, 12), w, bias), torch.relu(x @ w.T + bias))
    refused = [str(w.message).split(":")[0] for w in caught if "stay concrete" in str(w.message)]
    assert sorted(refused) == ["fcrelu", "fcrelu__bwd", "fcrelu__fwd"], "each definition warns once"
    assert counts[2] > counts[1] > counts[0] and counts[3] == counts[2], f"a new size compiles: {counts}"
    assert k.symbolic_sizes == k.grad_plan().forward.symbolic_sizes == frozenset()


def test_kroneckers_backward_with_every_size_symbolic_compiles_in_bounded_time(tmp_path):
    """Found by the full tier: kronecker3 called at two sizes that differ in every size, then
    differentiated, spent hours in isl proving its backward with every size symbolic legal. It
    now gives up at the proof's budget and specialises (a subprocess, so a hang fails the test)."""
    script = """
import warnings, torch, tcjit
from tcjit import suite
k = suite.get("kronecker3")
f = tcjit.define(k.source, k.entry)
warnings.simplefilter("error", tcjit.TCWarning)
for i, sizes in enumerate(k.small_sizes[:2]):
    xs = [x.requires_grad_() for x in k.make_inputs(sizes)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tcjit.TCWarning)
        out = f(*xs)
        (out if isinstance(out, tuple) else (out,))[0].sum().backward()
    print(i, sorted(str(w.message).split(":")[0] for w in caught if "stay concrete" in str(w.message)))
"""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TCJIT_CACHE_DIR": str(tmp_path / "kernels")}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1].startswith("1 ["), proc.stdout
