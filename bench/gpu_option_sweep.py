"""A sweep of GPU mapping options per suite kernel: the data behind the default GPU rules.

For each kernel at its first GPU size, a handful of option sets built from the rules of
``tcjit.mapping.defaults`` with their knobs turned (threads per block, outputs per thread, tiled
reductions, shared and private memory, unrolling; rows and lanes for row reductions) is compiled,
checked against ``torch_ref`` and timed: the median of interleaved samples, each between two
``torch.cuda.synchronize``, against torch eager in the same rounds. A candidate slower than 50 ms
a call after its first call is timed once. It is not the tuner (``tcjit tune`` searches the whole
space); it answers "which rule" questions in one short run on a lent GPU.

Each candidate is also a check of the static GPU model: the static profile's prediction for its
options on this GPU (``bench/_prediction.py``) is made in worker processes while the GPU measures
(``--prediction-workers``) and recorded beside its time, with the ratio predicted/measured; the
predicted time compared is that of one call between two synchronisations (``synced_s``: the host's
time, then the device's), as each sample is. Each kernel's section names its fastest candidate
measured and predicted (the one the model would pick), and the document the geometric mean of
predicted/measured. The files are rewritten after each kernel.

    python bench/gpu_option_sweep.py [--kernels matmul,conv2d] [--out bench/results/gpu_option_sweep]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future
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
from _prediction import Predictions, per_kernel_geomean, predicted_over_measured, prediction_cell, ratio_cell

SLOW_S = 0.05


def candidates(cdef, sizes) -> dict[str, Any]:
    """Named option sets for one kernel: the default rule first, then its knobs turned."""
    from tcjit.mapping import defaults as D

    if D.has_row_reduction(cdef):
        default = D.default_options(cdef, sizes, "cuda")
        out = {"default": default}
        # the default's fusion: Max fuses a row's statements into one kernel (Preserve3Coincident
        # where the default splits the reduction over the grid)
        fusion = default.validate("cuda").values.outer_schedule_fusion_strategy
        for rows, lanes in ((1, 128), (1, 256), (2, 128), (4, 64), (8, 32), (1, 1024), (4, 256)):
            for steps in (1024, 4096):
                out[f"rows {rows} lanes {lanes} steps {steps}"] = D.row_reduction_options(
                    rows, lanes, steps, fusion=fusion
                )
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
        "vector 1": {"vector": 1},
        "vector 2": {"vector": 2},
        "vector 4": {"vector": 4},
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


def sweep_kernel(sk, sizes, rounds: int, predictions: Predictions | None = None) -> dict[str, Any]:
    """Compile, check and time every candidate of suite kernel ``sk`` at ``sizes`` against eager;
    with ``predictions``, each candidate's prediction is made there meanwhile and recorded beside
    its time."""
    import torch

    import tcjit
    from tcjit.static_profile import device_named
    from tcjit.testing import tolerance

    sync = torch.cuda.synchronize
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in sk.make_inputs(sizes, seed=0)]
    want = as_tuple(sk.torch_ref(*inputs))
    tol = tolerance(torch.float32, sk.reduction_length(sizes))
    kernel = tcjit.define(sk.source, name=sk.entry)
    cdef = kernel.definition
    rows = []
    fast: dict[str, Any] = {"eager": lambda: sk.torch_ref(*inputs)}
    sets = candidates(cdef, sizes)
    gpu = device_named(torch.cuda.get_device_name())
    pending = {
        name: predictions.submit(sk.name, sizes, opts.to_json(), gpu)
        for name, opts in sets.items()
        if predictions is not None
    }
    for name, opts in sets.items():
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
        if row["candidate"] in pending:
            record_prediction(row, pending[row["candidate"]])
    return {"kernel": sk.name, "sizes": dict(sizes), "eager_s": medians["eager"], "candidates": rows}


def record_prediction(row: dict[str, Any], future: Future) -> None:
    """Put into a candidate's ``row`` (its ``median_s`` measured) the prediction that ``future``
    makes (:meth:`_prediction.Predictions.submit`) and the ratio of its ``synced_s`` to the measured
    time: each sample is one call between two synchronisations, the host's time, then the device's."""
    row["prediction"] = Predictions.result(future)
    row["predicted_over_measured"] = predicted_over_measured(
        row["prediction"], row.get("median_s"), "synced_s"
    )


def _fastest(rows: Sequence[dict[str, Any]], time_of, within: float = 1.0) -> list[str]:
    """The correct ``rows``' candidates whose ``time_of(row)`` (``None`` left out) is within a factor
    ``within`` of the least, fastest first."""
    timed = sorted((time_of(r), r["candidate"]) for r in rows if r.get("correct") and time_of(r))
    return [name for t, name in timed if t <= timed[0][0] * within]


def geomean_predicted(kernels: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The geometric mean of predicted/measured over the correct, timed candidates, each kernel once
    (``_prediction.per_kernel_geomean``): ``value`` and ``kernels``."""
    value, n = per_kernel_geomean(
        (k["kernel"], r["predicted_over_measured"])
        for k in kernels
        for r in k["candidates"]
        if r.get("correct") and r.get("predicted_over_measured")
    )
    return {"value": value, "kernels": n}


def render(doc: dict[str, Any]) -> str:
    """The sweep as markdown: per kernel, each candidate's measured and predicted time."""
    lines = ["# GPU option sweep", "", machine_markdown(doc["machine"]), ""]
    g = geomean_predicted(doc["kernels"])
    if g["value"]:
        lines += [
            f"Geometric mean of the static profile's predicted over the measured time: {g['value']:.3g}"
            f" ({g['kernels']} kernels). `predicted`: the profile's time of one call between two"
            " synchronisations (its host's time, then its device's: `synced_s` in the JSON), as each"
            " sample times it, and the bound that decides a call in a loop (`host`, or the slowest"
            " launch's).",
            "",
        ]
    for k in doc["kernels"]:
        lines += [f"## {k['kernel']} ({format_sizes(k['sizes'])}): eager {format_seconds(k['eager_s'])}", ""]
        rows = k["candidates"]
        best = next(iter(_fastest(rows, lambda r: r.get("median_s"))), None)
        predicted_best = _fastest(rows, lambda r: (r.get("prediction") or {}).get("synced_s"), 1.01)
        if predicted_best:
            ties = f" ({len(predicted_best)} within 1%)" if len(predicted_best) > 1 else ""
            lines += [f"Fastest measured: {best}; fastest predicted: {', '.join(predicted_best)}{ties}.", ""]
        table = []
        for r in rows:
            t = r.get("median_s")
            note = "" if r.get("correct") else f"wrong or failed: {str(r.get('error'))[:80]}"
            prediction = r.get("prediction")
            if prediction and prediction.get("error"):
                note += f" prediction: {prediction['error'][:80]}"
            table.append(
                [
                    r["candidate"] + (" **best**" if r["candidate"] == best else ""),
                    format_seconds(t),
                    prediction_cell(prediction, "synced_s"),
                    ratio_cell(r.get("predicted_over_measured")),
                    f"{k['eager_s'] / t:.3g}x" if t else "-",
                    format_seconds(r.get("compile_s")),
                    note.strip(),
                ]
            )
        header = [
            "candidate",
            "time",
            "predicted",
            "predicted/measured",
            "speedup over eager",
            "compile",
            "note",
        ]
        lines += [markdown_table(header, table), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="A sweep of GPU mapping options per suite kernel.")
    p.add_argument("--kernels", default=None, help="comma-separated suite kernels (default: all)")
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds per kernel")
    p.add_argument("--out", type=Path, default=RESULTS / "gpu_option_sweep", help="writes <out>.json and .md")
    p.add_argument(
        "--prediction-workers",
        type=int,
        default=max(0, min(8, (os.cpu_count() or 1) - 2)),
        help="processes that make the static profile's predictions while the GPU measures "
        "(0: in this process, between the candidates; default: up to 8, leaving 2 CPUs)",
    )
    args = p.parse_args(argv)
    why = cuda_unusable()
    if why is not None:
        print(f"gpu_option_sweep.py: {why}", file=sys.stderr)
        return 2
    with fresh_cache_dir(), Predictions(args.prediction_workers) as predictions:
        disable_tf32()
        kernels = []
        machine = machine_info("cuda")
        for sk in select_kernels(args.kernels):
            r = sweep_kernel(sk, dict(sk.gpu_sizes[0]), args.rounds, predictions)
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
            doc = {
                "benchmark": "gpu_option_sweep",
                "machine": machine,
                "kernels": kernels,
                "geomean_predicted_over_measured": geomean_predicted(kernels),
            }
            json_path, md_path = write_results(args.out, doc, render(doc))
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
