"""The oracle (``tcjit.reference``) on the benchmark suite, against hand-written PyTorch.

Every kernel of KERNELS.md at each of its small sizes, in float32 and float64; the variants with
intermediates left out of the outputs (temporaries); a larger size in the full tier; and the
chunking that keeps the oracle's memory bounded.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from tcjit import reference, suite
from tcjit.polyhedral.lang.check import check_source

SMALL = [
    pytest.param(k.name, i, id=f"{k.name}-{i}")
    for k in suite.SUITE.values()
    for i in range(len(k.small_sizes))
]
WITH_TEMPORARIES = [k.name for k in suite.SUITE.values() if k.temporaries]


def _tuple(x) -> tuple[torch.Tensor, ...]:
    return x if isinstance(x, tuple) else (x,)


def _tolerances(k: suite.SuiteKernel, sizes, dtype: torch.dtype) -> dict[str, float]:
    """Relative and absolute tolerances for values of magnitude ~sqrt(L) summed over L terms."""
    root = math.sqrt(max(1, k.reduction_length(sizes)))
    if dtype == torch.float64:
        return {"rtol": 1e-10, "atol": 1e-12 * root}
    return {"rtol": 1e-4, "atol": 1e-5 * root}


def _compare(k: suite.SuiteKernel, sizes, got, want, dtype: torch.dtype) -> None:
    got, want = _tuple(got), _tuple(want)
    names = k.checked.outputs
    assert len(got) == len(want) == len(names)
    tol = _tolerances(k, sizes, dtype)
    for name, g, w in zip(names, got, want):
        assert g.dtype == dtype, name
        assert g.shape == w.shape, name
        torch.testing.assert_close(g, w, **tol, msg=lambda m, name=name: f"{k.name}.{name}: {m}")


@pytest.mark.parametrize("name, which", SMALL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_suite_kernel_matches_torch(name: str, which: int, dtype: torch.dtype) -> None:
    k = suite.get(name)
    sizes = k.small_sizes[which]
    inputs = k.make_inputs(sizes, dtype=dtype, seed=which)
    got = reference.evaluate(k.source_for(dtype), k.entry, *inputs)
    _compare(k, sizes, got, k.torch_ref(*inputs), dtype)


@pytest.mark.parametrize("name", WITH_TEMPORARIES)
def test_temporaries_give_the_same_final_outputs(name: str) -> None:
    """KERNELS.md: the intermediates may be left out of ``-> (...)``; the other outputs do not change."""
    k = suite.get(name)
    sizes = k.small_sizes[1]
    inputs = k.make_inputs(sizes, seed=3)
    full = dict(zip(k.checked.outputs, _tuple(reference.evaluate(k.source, k.entry, *inputs))))
    finals = [o for o in k.checked.outputs if o not in k.temporaries]
    # All intermediates left out, and all but the first one left out.
    for keep in (finals, [k.temporaries[0], *finals]):
        source = k.source_without_temporaries(keep)
        program = check_source(source)
        assert program.get(k.entry).outputs == tuple(keep)
        assert set(program.get(k.entry).temporaries) == set(k.temporaries) - set(keep)
        got = _tuple(reference.evaluate(program, k.entry, *inputs))
        assert len(got) == len(keep)
        for o, g in zip(keep, got):
            torch.testing.assert_close(g, full[o], rtol=1e-6, atol=1e-7, msg=lambda m, o=o: f"{o}: {m}")


def test_checked_program_and_source_give_the_same_result() -> None:
    k = suite.get("fcrelu")
    inputs = k.make_inputs(k.small_sizes[1])
    a = reference.evaluate(k.source, "fcrelu", *inputs)
    b = reference.evaluate(check_source(k.source), "fcrelu", *inputs)
    c = reference.evaluate(k.source, None, *inputs)  # the only def
    assert torch.equal(a, b) and torch.equal(a, c)


def test_preallocated_outputs_are_filled_and_returned() -> None:
    """With ``!`` the previous contents of an ``outputs=`` tensor do not matter."""
    k = suite.get("softmax")
    sizes = k.small_sizes[1]
    (I,) = k.make_inputs(sizes)
    outs = tuple(torch.full(s, float("nan")) for s in k.output_shapes(sizes))
    got = reference.evaluate(k.source, "softmax", I, outputs=outs)
    assert all(g is o for g, o in zip(got, outs))
    _compare(k, sizes, got, k.torch_ref(I), torch.float32)


@pytest.mark.full
@pytest.mark.parametrize("name", list(suite.SUITE))
def test_suite_kernel_at_a_larger_size(name: str) -> None:
    k = suite.get(name)
    sizes = k.large_size
    inputs = k.make_inputs(sizes, seed=11)
    got = reference.evaluate(k.source, k.entry, *inputs)
    _compare(k, sizes, got, k.torch_ref(*inputs), torch.float32)


# ------------------------------------------------------------------------------------ bounded memory
@pytest.mark.parametrize("name", ["matmul", "gconv", "kronecker3", "softmax", "maxpool2x2", "abs_sum"])
def test_tiny_chunks_give_the_same_answer(name: str) -> None:
    """Cutting iteration spaces into boxes of a few dozen points (prime, so boxes are ragged) changes
    nothing but the order of float64 additions."""
    k = suite.get(name)
    sizes = k.small_sizes[1]
    inputs = k.make_inputs(sizes, seed=5)
    whole = _tuple(reference.evaluate(k.source, k.entry, *inputs))
    chunked = _tuple(reference.evaluate(k.source, k.entry, *inputs, max_points=61))
    for w, c in zip(whole, chunked):
        torch.testing.assert_close(c, w, rtol=1e-6, atol=1e-7)


def _peak_rss_reset() -> bool:
    """Reset the kernel's peak-RSS counter of this process (Linux); False where not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def test_memory_stays_bounded_by_max_points() -> None:
    """A 256^3 matmul has 1.7e7 iteration points (128 MiB per int64 grid if materialised at once);
    with ``max_points=2**16`` the oracle must stay within a few MiB of extra memory. (Peak RSS is
    reset through /proc, so this runs in-process; tests/runtime/test_reference_memory.py measures the same
    bound in a subprocess at a larger scale.)"""
    k = suite.get("matmul")
    sizes = {"M": 256, "K": 256, "N": 256}
    A, B = k.make_inputs(sizes)
    reset = _peak_rss_reset()
    before = _peak_rss_bytes()
    C = reference.evaluate(k.source, "matmul", A, B, max_points=1 << 16)
    peak = _peak_rss_bytes()
    torch.testing.assert_close(C, (A.double() @ B.double()).float(), rtol=1e-5, atol=1e-5)
    if not reset:
        warnings.warn("cannot reset the peak RSS here; memory bound not measured", stacklevel=1)
        return
    # At the default budget (2**23 points) this run grows by ~160 MiB.
    assert peak - before < 48 << 20, f"peak memory grew by {(peak - before) >> 20} MiB"
