"""The reference evaluator's memory stays bounded whatever the size of the iteration space."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, resource, sys, time
import torch
from tcjit import reference
points, max_points = int(sys.argv[1]), int(sys.argv[2])
# A contraction whose iteration space has `points` points but whose inputs and output are small:
# O(i, j) = sum_k A(i, k) * B(k, j) with K large.
I = J = 64
K = points // (I * J)
a, b = torch.randn(I, K), torch.randn(K, J)
torch.set_num_threads(1)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
o = reference.evaluate("def mm(float(I,K) A, float(K,J) B) -> (O) { O(i, j) +=! A(i, r_k) * B(r_k, j) }",
                       "mm", a, b, max_points=max_points)
elapsed = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
err = float((o.double() - a.double() @ b.double()).abs().max())
print(json.dumps({"growth_mib": (peak - base) / 1024, "seconds": elapsed, "err": err}))
"""


def _run(points: int, max_points: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(points), str(max_points)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_chunked_evaluation_bounds_memory():
    # 2**26 points evaluated 2**20 at a time: the temporaries of one chunk, not of the whole space.
    r = _run(1 << 26, 1 << 20)
    assert r["err"] < 1e-2
    assert r["growth_mib"] < 200, r


@pytest.mark.full
def test_a_billion_points_at_the_default_budget_stays_near_a_gibibyte():
    from tcjit.reference import DEFAULT_MAX_POINTS

    r = _run(1 << 30, DEFAULT_MAX_POINTS)
    assert r["err"] < 1e-1
    assert r["growth_mib"] < 1400, r
