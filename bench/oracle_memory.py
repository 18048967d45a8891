"""The reference evaluator on KERNELS.md's gconv at its CPU size: time, error and peak memory.

The oracle is not a fast path: this shows that its memory stays bounded (chunked evaluation) on
the largest iteration space of the suite, 7.4e9 points. torch eager runs the same convolution in the
same process, first, so that the peak it leaves is the baseline the oracle's growth is measured from.

    python bench/oracle_memory.py            # writes bench/results/oracle_memory.json
"""

from __future__ import annotations

import json
import platform
import resource
import time
from pathlib import Path

import torch

from tcjit import reference
from tcjit.suite import SUITE


def main() -> None:
    torch.set_num_threads(2)
    sk = SUITE["gconv"]
    sizes = sk.cpu_sizes
    inputs = sk.make_inputs(sizes)
    rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # noqa: E731 (MiB)
    base = rss()
    t = time.perf_counter()
    (want,) = sk.torch_ref(*inputs)
    t_torch = time.perf_counter() - t
    after_torch = rss()
    t = time.perf_counter()
    got = reference.evaluate(sk.source, sk.entry, *inputs)
    t_oracle = time.perf_counter() - t
    peak = rss()
    result = {
        "kernel": "gconv",
        "sizes": sizes,
        "iteration_points": got.numel() * sizes["C"] * sizes["KH"] * sizes["KW"],
        "max_points": reference.DEFAULT_MAX_POINTS,
        "torch_eager_s": round(t_torch, 3),
        "oracle_s": round(t_oracle, 2),
        "max_abs_err": float((got - want).abs().max()),
        "peak_rss_mib": {
            "inputs": round(base),
            "after_torch": round(after_torch),
            "after_oracle": round(peak),
        },
        "oracle_growth_mib": round(peak - after_torch),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
    }
    out = Path(__file__).parent / "results" / "oracle_memory.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
