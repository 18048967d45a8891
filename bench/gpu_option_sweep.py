"""A sweep of GPU mapping options per suite kernel: the data behind the default GPU rules.

For each kernel at its first GPU size, a handful of option sets built from the rules of
``tcjit.mapping.defaults`` with their knobs turned (threads per block, outputs per thread, tiled
reductions, shared and private memory, unrolling; rows and lanes for row reductions) is compiled,
checked against ``torch_ref`` and timed: the median of interleaved samples, each between two
``torch.cuda.synchronize``, against torch eager in the same rounds. A candidate slower than 50 ms
a call after its first call is timed once. It is not the tuner (``tcjit tune`` searches the whole
space); it answers "which rule" questions in one short run on a lent GPU.

    python bench/gpu_option_sweep.py [--kernels matmul,conv2d] [--out bench/results/gpu_option_sweep]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _harness import (
    RESULTS,
    as_tuple,
    check_outputs,
    cuda_calibration,
    cuda_unusable,
    describe_error,
    disable_tf32,
    format_seconds,
    format_sizes,
    fresh_cache_dir,
    machine_info,
    machine_markdown,
    markdown_table,
    select_kernels,
    write_results,
)

SLOW_S = 0.05


def candidates(cdef, sizes) -> dict[str, Any]:
    """Named option sets for one kernel: the default rule first, then its knobs turned."""
    from tcjit.mapping import defaults as D

    if D.has_row_reduction(cdef):
        out = {"default": D.default_options(cdef, sizes, "cuda")}
        for rows, lanes in ((1, 128), (1, 256), (2, 128), (4, 64), (8, 32), (1, 1024), (4, 256)):
            for steps in (1024, 4096):
                out[f"rows {rows} lanes {lanes} steps {steps}"] = D.row_reduction_options(rows, lanes, steps)
        return out
    out = {"default": D.default_options(cdef, sizes, "cuda")}
    knobs = {
        "threads 128": {"threads": 128},
        "threads 512": {"threads": 512},
        "2x2 per thread": {"per_thread": (2, 2)},
        "4x1 per thread": {"per_thread": (4, 1)},
        "4x4 per thread": {"per_thread": (4, 4)},
        "4x4 private unroll 16": {"per_thread": (4, 4), "private": True, "unroll": 16},
        "private": {"private": True},
        "reduction tile 32 shared": {"reduction_tile": 32, "shared": True},
        "reduction tile 32 shared 2x2": {"reduction_tile": 32, "shared": True, "per_thread": (2, 2)},
        "reduction tile 16 shared private 4x4 unroll 16": {
            "reduction_tile": 16,
            "shared": True,
            "private": True,
            "per_thread": (4, 4),
            "unroll": 16,
        },
    }
    for name, kw in knobs.items():
        out[name] = D.gpu_options(cdef, sizes, **kw)
    return out


def time_calls(fns: dict[str, Any], rounds: int, sync) -> dict[str, float]:
    """Interleaved rounds of one call each (after a warm-up call); median seconds per call."""
    samples: dict[str, list[float]] = {n: [] for n in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            sync()
            t = time.perf_counter()
            fn()
            sync()
            samples[name].append(time.perf_counter() - t)
    return {n: statistics.median(v) for n, v in samples.items()}


def sweep_kernel(sk, sizes, rounds: int) -> dict[str, Any]:
    import torch

    import tcjit
    from tcjit.testing import tolerance

    sync = torch.cuda.synchronize
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in sk.make_inputs(sizes, seed=0)]
    want = as_tuple(sk.torch_ref(*inputs))
    tol = tolerance(torch.float32, sk.reduction_length(sizes))
    kernel = tcjit.define(sk.source, name=sk.entry)
    cdef = kernel.definition
    rows = []
    fast: dict[str, Any] = {"eager": lambda: sk.torch_ref(*inputs)}
    for name, opts in candidates(cdef, sizes).items():
        row: dict[str, Any] = {"candidate": name, "options": opts.to_json()}
        try:
            t = time.perf_counter()
            spec = tcjit.compile(kernel, *inputs, options=opts)
            row["compile_s"] = time.perf_counter() - t
            row["calibration"] = cuda_calibration(spec)  # the options are the row's own
            sync()
            t = time.perf_counter()
            got = spec(*inputs)
            sync()
            first = time.perf_counter() - t
            check = check_outputs(as_tuple(got), want, tol)
            row.update(correct=check.correct, error=check.message, first_call_s=first)
            if first > SLOW_S:
                row["median_s"] = first
            else:
                fast[name] = lambda spec=spec: spec(*inputs)
        except Exception as e:  # a candidate that fails is recorded, not fatal
            row.update(correct=False, error=describe_error(e))
        rows.append(row)
    for fn in fast.values():
        fn()
    medians = time_calls(fast, rounds, sync)
    for row in rows:
        if row["candidate"] in medians:
            row["median_s"] = medians[row["candidate"]]
    return {"kernel": sk.name, "sizes": dict(sizes), "eager_s": medians["eager"], "candidates": rows}


def render(doc: dict[str, Any]) -> str:
    lines = ["# GPU option sweep", "", machine_markdown(doc["machine"]), ""]
    for k in doc["kernels"]:
        lines += [f"## {k['kernel']} ({format_sizes(k['sizes'])}): eager {format_seconds(k['eager_s'])}", ""]
        best = min((r.get("median_s") or float("inf")) for r in k["candidates"] if r.get("correct"))
        table = []
        for r in k["candidates"]:
            t = r.get("median_s")
            note = "" if r.get("correct") else f"wrong or failed: {str(r.get('error'))[:80]}"
            table.append(
                [
                    r["candidate"] + (" **best**" if t == best and r.get("correct") else ""),
                    format_seconds(t),
                    f"{k['eager_s'] / t:.3g}x" if t else "-",
                    format_seconds(r.get("compile_s")),
                    note,
                ]
            )
        lines += [markdown_table(["candidate", "time", "speedup over eager", "compile", "note"], table), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="A sweep of GPU mapping options per suite kernel.")
    p.add_argument("--kernels", default=None, help="comma-separated suite kernels (default: all)")
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds per kernel")
    p.add_argument("--out", type=Path, default=RESULTS / "gpu_option_sweep", help="writes <out>.json and .md")
    args = p.parse_args(argv)
    why = cuda_unusable()
    if why is not None:
        print(f"gpu_option_sweep.py: {why}", file=sys.stderr)
        return 2
    with fresh_cache_dir():
        disable_tf32()
        kernels = []
        machine = machine_info("cuda")
        for sk in select_kernels(args.kernels):
            r = sweep_kernel(sk, sk.gpu_sizes[0], args.rounds)
            kernels.append(r)
            best = min(
                (c for c in r["candidates"] if c.get("correct") and c.get("median_s")),
                key=lambda c: c["median_s"],
                default=None,
            )
            default = next(c for c in r["candidates"] if c["candidate"] == "default")
            print(
                f"{sk.name:11} eager {format_seconds(r['eager_s'])}, default "
                f"{format_seconds(default.get('median_s'))}, best {best and best['candidate']}: "
                f"{format_seconds(best and best['median_s'])}",
                file=sys.stderr,
                flush=True,
            )
            # Written after each kernel: a run cut short keeps what it measured.
            doc = {"benchmark": "gpu_option_sweep", "machine": machine, "kernels": kernels}
            json_path, md_path = write_results(args.out, doc, render(doc))
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
