"""A parallel loop fetches into cache the inputs a later loop reads first (mapping/prefetch.py).

The fetch changes no result, so the checks are on the generated C (which loop asks for which
lines) and on the results against the oracle; the time it saves is in
bench/results/training_step_cpu.md.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess

import compiled_helpers as H
import pytest
import torch

import tcjit
from tcjit import suite
from tcjit.cpu_runtime import CFLAGS
from tcjit.mapping import ir
from tcjit.mapping.options import MappingOptions
from tcjit.mapping.prefetch import FETCH_BYTES
from tcjit.pipeline import lowered

#: Layer 2 reads W, which layer 1 (a product of its own) does not.
PREP = """def prep(float(M,K) A, float(K,N) B, float(N,P) W) -> (C, E) {
    C(m, n) +=! A(m, r_k) * B(r_k, n)
    E(m, p) +=! C(m, r_n) * W(r_n, p)
}"""

OPTS = MappingOptions("naive").vectorize(True).tile(16, 64, 64).register_tile(4, 32)


def _inputs(N: int, P: int):
    g = torch.Generator().manual_seed(0)
    shapes = ((256, 64), (64, N), (N, P))
    return tuple(torch.randn(*shape, generator=g) for shape in shapes)


def _fetching(N: int, P: int) -> list[ir.Fetching]:
    """The loops of PREP's kernel (at :data:`OPTS`) that fetch inputs for later ones, in order."""
    low = lowered(tcjit.define(PREP).definition, {"M": 256, "K": 64, "N": N, "P": P}, OPTS)
    return [n for n in ir.nodes(low.kernel_ir) if isinstance(n, ir.Fetching)]


def _region_calls(source: str) -> list[tuple[str, list[str]]]:
    """Each parallel region's function name with the fetch calls in it."""
    out, name = [], None
    for line in source.splitlines():
        if line.startswith("TC_REGION void __attribute__((noinline)) tc_"):
            name = line.split("void __attribute__((noinline)) ")[1].split("(")[0]
            out.append((name, []))
        elif "tc_fetch" in line and not line.startswith(("static", "/*")) and out:
            out[-1][1].append(line.strip())
    return out


def test_a_loop_fetches_the_input_a_later_loop_reads_first() -> None:
    """``W`` (64 x 64 floats, 16 KB, 256 lines) is read first by the second layer; the first
    layer, with 256 x 64 x 64 products of its own (WORK_PER_LINE per line at least), asks for its
    lines, a few at the top of each iteration of its tile loops. The results are the oracle's."""
    inputs = _inputs(64, 64)
    (fetching,) = _fetching(64, 64)
    ((fetch,),) = [fetching.fetches]
    assert fetch.tensor == "W" and fetch.box == ((0, 63), (0, 63))
    source = tcjit.compile(tcjit.define(PREP), *inputs, options=OPTS).source
    assert "/* Brings the lines of 'W' in 0:64 x 0:64 into cache for a later loop" in source
    regions = _region_calls(source)
    calls = [c for _, cs in regions for c in cs]
    assert len(calls) == 1 and calls[0].startswith("tc_fetch0(t_W, "), regions
    first = next(i for i, (_, cs) in enumerate(regions) if cs)
    assert first == 0, regions  # the first layer's region, not the second's
    H.check_against_oracle(PREP, None, inputs, options=OPTS, reduction_length=64)


@pytest.mark.parametrize("N, P", [(512, 512)])
def test_inputs_larger_than_the_fetch_limit_are_left_to_the_loop_that_reads_them(N: int, P: int) -> None:
    """A 512 x 512 ``W`` (1 MB) is more than :data:`FETCH_BYTES`: no loop fetches it."""
    assert N * P * 4 > FETCH_BYTES
    inputs = _inputs(N, P)
    assert not _fetching(N, P)
    source = tcjit.compile(tcjit.define(PREP), *inputs, options=OPTS).source
    assert "tc_fetch" not in source
    H.check_against_oracle(PREP, None, inputs, options=OPTS, reduction_length=N)


#: mlp3's first layer: W's part of the next chunk is asked for after each fill (``tc_ahead_W``).
FCRELU = """def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}"""


def _prefetches(source: str, tmp_path) -> int:
    """How many prefetch instructions the system compiler makes of a kernel's C (its flags)."""
    cc = os.environ.get("CC", "cc")
    c, s = tmp_path / "k.c", tmp_path / "k.s"
    c.write_text(source)
    flags = [f for f in CFLAGS if f != "-shared"]
    subprocess.run([cc, *flags, "-S", "-o", str(s), str(c)], check=True, capture_output=True)
    text = s.read_text()
    return text.count("prefetcht") + text.count("\tprfm")


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64", "aarch64", "arm64"), reason="ISA")
@pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")
def test_the_compiler_keeps_the_prefetches(tmp_path) -> None:
    """A function that only prefetches looks free of side effects to GCC, which deleted every call
    of an earlier version of the fetch helpers in mlp3's derived backward (gcc 12: the C asked for
    ``O1``'s lines, the machine code did not; the timing showed it). The helpers are now ``noipa``
    (``c_panels.PREFETCHING``), and this checks the machine code itself: that backward's
    fetches, and the look-ahead of the next part of a packed weight in the first layer, are
    there."""
    sk = suite.get("mlp3")
    inputs = sk.make_inputs(dict(sk.cpu_sizes))
    kernel = tcjit.define(sk.source, name=sk.entry)
    plan = kernel.grad_plan()
    with torch.no_grad():
        saved = plan.forward(*inputs)
    backward = plan.backward_for((False, *([True] * 6)), frozenset({"O1", "O2"}))
    source = tcjit.compile(backward, *inputs, *saved, torch.ones_like(saved[2])).source
    fetches = source.count("__builtin_prefetch(a, 0, 2)")
    assert fetches >= 2, fetches  # O1 for d_W2 during d_W1, O2 for d_W3 during d_W2
    assert _prefetches(source, tmp_path) >= fetches
    g = torch.Generator().manual_seed(0)
    fc = tuple(torch.randn(*shape, generator=g) for shape in ((128, 512), (256, 512), (256,)))
    ahead = tcjit.compile(tcjit.define(FCRELU), *fc).source
    assert "tc_ahead_W(u_W" in ahead
    assert _prefetches(ahead, tmp_path) >= 1
