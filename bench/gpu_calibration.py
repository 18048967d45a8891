"""Calibration of the static GPU model (``mapping/gpu_model.py``) on the GPU measurements committed
in ``bench/results``: predicted against measured time for every launch Nsight Compute timed.

A calibration point is one launch of one suite kernel at one GPU size, as a GPU run recorded it
(``bench/gpu_ncu.py`` under ``ncu``, ``scripts/gpu_check.sh ncu``): the CUDA source's SHA-256, the
options, the grid and block, the launch's duration (``gpu__time_duration.sum``) and the registers
per thread the hardware reports. Each point is reproduced at HEAD: the suite kernel is lowered again
with the recorded options, and a point whose source digest differs is listed as not reproducible
and left out. Each reproducible point is predicted by the model as it stands (the constants of
``DEVICES``). The model's three fitted constants (the memory latency under load, the loads a warp
keeps in flight, the time to start a block) were fitted on every point when the model was frozen,
by a grid search that minimises the mean squared log error; the fit is run again on the points
that still reproduce, and again with each suite kernel left out in turn, to show the error on
kernels the fit did not see. A refit that differs from the model's constants is reported, never
used: as the generated code changes, fewer measured points reproduce, and a fit on the survivors
alone would move the model without a new measurement.

    python bench/gpu_calibration.py [--gpu nvidia_h100_80gb_hbm3] [--device h100] [--out ...] [--freeze]

**The frozen model.** ``--freeze`` also writes ``<out>_frozen.json``: the model's
digest and every point's prediction when the model was frozen (issue 32's close). A later model
may only be a change made with new GPU measurements, and its calibration must show the old
predictions beside the new: whenever the frozen file's digest is not the model's, every point
that the frozen file predicted gets its frozen prediction beside the new one, and the summary
the frozen model's errors on the same points.

writes ``gpu_calibration_<gpu>.json`` and ``.md`` (every point with its error; the fit; the digest
of the model's sources).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _harness import RESULTS, markdown_table, ncu_rows, recorded_kernel, write_results
from _prediction import model_digest

LATENCIES = tuple(x / 1e9 for x in (200, 300, 400, 500, 600, 700, 800, 1000))
IN_FLIGHT = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
DISPATCH = tuple(x / 1e9 for x in (0, 20, 40, 60, 80, 100))
#: The sets of measured launches: the suite's defaults, and the option sweep's variants.
SETS = ("gpu_ncu", "gpu_ncu_sweep")


def load_points(gpu: str, which: str = "gpu_ncu") -> tuple[list[dict[str, Any]], list[str]]:
    """The reproducible calibration points of the GPU run ``gpu`` (a results file suffix) in the set
    ``which`` (:data:`SETS`), and a line for each run that is not."""
    from tcjit.mapping.gpu_model import DEVICES
    from tcjit.mapping.gpu_profile import LaunchResources, profile_lowering
    from tcjit.mapping.layout import contiguous_layout
    from tcjit.mapping.lower_gpu import lower_cuda, lower_gpu

    rows = ncu_rows(RESULTS / f"{which}_{gpu}.csv")
    runs = json.loads((RESULTS / f"{which}_launches_{gpu}.json").read_text())["runs"]
    points, missing, row = [], [], 0
    for run in runs:
        sizes = run["sizes"]
        _, cdef, options = recorded_kernel(run)
        options = options.validate("cuda").values
        strides = contiguous_layout(cdef, sizes)
        measured = rows[row : row + len(run["launches"])]
        row += len(run["launches"])
        low = lower_gpu(cdef, sizes, options)
        source = lower_cuda(cdef, sizes, strides, options, low=low).source
        if hashlib.sha256(source.encode()).hexdigest() != run["cuda_source_sha256"]:
            what = run.get("candidate", "default")
            missing.append(
                f"{run['kernel']} {sizes} {what}: HEAD's CUDA source differs from the measured one"
            )
            continue
        # the registers the hardware reports (launch__registers_per_thread), not the cubin's
        resources = {
            name: LaunchResources(int(float(r["launch__registers_per_thread"])))
            for (name, _, _), r in zip(run["launches"], measured)
        }
        profile = profile_lowering(cdef, sizes, strides, low, resources, DEVICES["h100"])
        for (name, grid, block), lp, r in zip(run["launches"], profile.launches, measured):
            la = lp.accesses
            if r["Kernel Name"] != name or list(la.grid) != grid or list(la.block) != block:
                raise SystemExit(f"gpu_calibration.py: the ncu rows do not follow the launches at {name}")
            points.append(
                {
                    "kernel": run["kernel"],
                    "set": which,
                    "candidate": run.get("candidate", "default"),
                    "sizes": sizes,
                    "launch": name,
                    "grid": grid,
                    "block": block,
                    "digest": run["cuda_source_sha256"],
                    "measured_s": float(r["gpu__time_duration.sum"].replace(",", "")) * 1e-9,
                    "registers": lp.resources.registers,
                    "shared_bytes": lp.shared_bytes,
                    "accesses": la,
                    "fmas": lp.flops,
                    "compulsory": lp.compulsory_bytes,
                }
            )
    return points, missing


def predict(point: dict[str, Any], device) -> Any:
    from tcjit.mapping.gpu_model import predict_launch

    return predict_launch(
        point["accesses"],
        device,
        registers=point["registers"],
        shared_bytes=point["shared_bytes"],
        fmas=point["fmas"],
        compulsory_bytes=point["compulsory"],
    )


def _error(points, device) -> float:
    return statistics.mean(math.log(predict(p, device).seconds / p["measured_s"]) ** 2 for p in points)


def fit(points, device):
    """``device`` with the memory latency, loads in flight and block dispatch that fit ``points``
    best."""

    def with_(c):
        return dataclasses.replace(device, memory_latency=c[0], loads_in_flight=c[1], block_dispatch=c[2])

    best = min(
        ((lat, k, b) for lat in LATENCIES for k in IN_FLIGHT for b in DISPATCH),
        key=lambda c: _error(points, with_(c)),
    )
    return with_(best)


def _point_key(r: dict[str, Any]) -> str:
    return json.dumps([r["set"], r["kernel"], r["candidate"], r["launch"], r["digest"]])


def frozen_record(data: dict[str, Any]) -> dict[str, Any]:
    """What the frozen model's file keeps of a calibration: its digest, fit, summary figures, and
    each point's prediction."""
    s = data["summary"]
    return {
        "model_digest": s["model_digest"],
        "fitted": s["fitted"],
        "within_1.5x": s["within_1.5x"],
        "within_2x": s["within_2x"],
        "points": {_point_key(r): r["predicted_s"] for r in data["points"]},
    }


def beside_frozen(records: list[dict[str, Any]], frozen: dict[str, Any], digest: str) -> dict[str, Any]:
    """The frozen model's predictions beside this model's, where the model has changed since it was
    frozen: each record that the frozen model predicted gets ``frozen_predicted_s``, and the
    summary counts both models' errors on those points."""
    if frozen["model_digest"] == digest:
        return {"model_digest": digest, "changed": False}
    both = []
    for r in records:
        old = frozen["points"].get(_point_key(r))
        if old is not None:
            r["frozen_predicted_s"] = old
            both.append((old / r["measured_s"], r["ratio"]))

    def within(f: float, rs) -> int:
        return sum(1 for x in rs if 1 / f <= x <= f)

    return {
        "model_digest": frozen["model_digest"],
        "changed": True,
        "points": len(both),
        "frozen_within_1.5x": within(1.5, [o for o, _ in both]),
        "frozen_within_2x": within(2.0, [o for o, _ in both]),
        "new_within_1.5x": within(1.5, [n for _, n in both]),
        "new_within_2x": within(2.0, [n for _, n in both]),
    }


def _constants(device) -> dict[str, float]:
    return {
        "memory_latency_s": device.memory_latency,
        "loads_in_flight": device.loads_in_flight,
        "block_dispatch_s": device.block_dispatch,
    }


def refit_lines(device, refit, n: int) -> list[str]:
    """The summary's line on a refit that differs from the model's constants (none where it agrees)."""
    if _constants(refit) == _constants(device):
        return [f"- a fit on the {n} points gives the same constants"]
    return [
        f"- a fit on these {n} points alone would give {refit.memory_latency * 1e9:.0f} ns,"
        f" {refit.loads_in_flight:g} loads in flight, {refit.block_dispatch * 1e9:.0f} ns a block;"
        " not used: the model changes only with new GPU measurements (`--freeze`)"
    ]


def lost_points(records: list[dict[str, Any]], frozen: dict[str, Any]) -> dict[str, int]:
    """Per suite kernel, the points the frozen model predicted that no longer reproduce at HEAD (the
    generated code changed since they were measured)."""
    here = {_point_key(r) for r in records}
    lost: dict[str, int] = {}
    for key in frozen["points"]:
        if key not in here:
            kernel = json.loads(key)[1]
            lost[kernel] = lost.get(kernel, 0) + 1
    return dict(sorted(lost.items()))


def lost_lines(lost: dict[str, int] | None) -> list[str]:
    """The summary's line on the points lost since the model was frozen."""
    if not lost:
        return []
    return [
        f"- **{sum(lost.values())} points measured when the model was frozen no longer reproduce**"
        " (HEAD's CUDA differs; they return when a GPU run measures HEAD): "
        + ", ".join(f"{k} {n}" for k, n in lost.items())
    ]


def frozen_lines(frozen: dict[str, Any] | None) -> list[str]:
    """The summary's line on the frozen model (none where there is no frozen file)."""
    if not frozen:
        return []
    if not frozen["changed"]:
        return [f"- the model is the frozen one (digest `{frozen['model_digest'][:16]}`)"]
    n = frozen["points"]
    return [
        f"- **the model has changed since it was frozen** (digest `{frozen['model_digest'][:16]}`): on the"
        f" {n} points both predict, the frozen model within 1.5x {frozen['frozen_within_1.5x']}/{n},"
        f" within 2x {frozen['frozen_within_2x']}/{n}; this one within 1.5x {frozen['new_within_1.5x']}/{n},"
        f" within 2x {frozen['new_within_2x']}/{n} (each point's frozen prediction: `frozen_predicted_s`)"
    ]


def write_unreproduced(args: argparse.Namespace, missing: list[str], device) -> int:
    """The results when no measured point reproduces at HEAD (every source changed since the last
    GPU run): the model's digest and constants, the points lost since the freeze, no errors."""
    out = args.out or RESULTS / f"gpu_calibration_{args.gpu}"
    summary: dict[str, Any] = {
        "points": 0,
        "not_reproducible": missing,
        "fitted": _constants(device),
        "refit": _constants(device),
        "model_digest": model_digest(),
        "device": dataclasses.asdict(device),
    }
    committed_frozen = RESULTS / f"gpu_calibration_{args.gpu}_frozen.json"
    if committed_frozen.exists():
        summary["lost"] = lost_points([], json.loads(committed_frozen.read_text()))
    lines = [
        f"# GPU model calibration: {device.name}",
        "",
        "- points: **none reproduces at HEAD**: every measured launch's CUDA source differs now;"
        " they return when a GPU run measures HEAD (scripts/gpu_check.sh). Runs not reproducible:"
        f" {'; '.join(missing) or 'none'}",
        f"- the model's fitted constants: memory latency {device.memory_latency * 1e9:.0f} ns, loads in"
        f" flight per warp {device.loads_in_flight:g}, {device.block_dispatch * 1e9:.0f} ns to start a"
        f" block; model digest `{summary['model_digest'][:16]}`",
        *lost_lines(summary.get("lost")),
    ]
    write_results(out, {"benchmark": "gpu_calibration", "summary": summary, "points": []}, "\n".join(lines))
    print("\n".join(lines))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Predicted against measured time of every GPU launch measured.")
    p.add_argument("--gpu", default="nvidia_h100_80gb_hbm3", help="the results files' GPU suffix")
    p.add_argument("--device", default="h100", help="the model's device (mapping/gpu_model.py DEVICES)")
    p.add_argument("--out", type=Path, default=None, help="writes <out>.json and .md")
    p.add_argument("--freeze", action="store_true", help="also writes the frozen model's file")
    args = p.parse_args(argv)
    from tcjit.mapping.gpu_model import DEVICES

    points, missing = load_points(args.gpu, "gpu_ncu")
    sweep: list[dict[str, Any]] = []
    if (RESULTS / f"gpu_ncu_sweep_{args.gpu}.csv").exists():
        sweep, more = load_points(args.gpu, "gpu_ncu_sweep")
        missing += more
    # out of sample: the sweep's variants, predicted by the fit on the suite's defaults alone
    if not points + sweep:
        return write_unreproduced(args, missing, DEVICES[args.device])
    by_defaults = fit(points, DEVICES[args.device]) if points else DEVICES[args.device]
    unseen = [predict(p, by_defaults).seconds / p["measured_s"] for p in sweep]
    points = points + sweep
    device = DEVICES[args.device]
    refit = fit(points, device)
    kernels = sorted({p["kernel"] for p in points})
    left_out = {}
    for k in kernels:
        others = [p for p in points if p["kernel"] != k]
        if not others:  # one kernel's points reproduce: nothing to fit them on without it
            continue
        fitted = fit(others, DEVICES[args.device])
        left_out[k] = [predict(p, fitted).seconds / p["measured_s"] for p in points if p["kernel"] == k]
    table, records = [], []
    for pt in points:
        pred = predict(pt, device)
        ratio = pred.seconds / pt["measured_s"]
        records.append(
            {
                **{
                    k: pt[k]
                    for k in (
                        "kernel",
                        "set",
                        "candidate",
                        "sizes",
                        "launch",
                        "grid",
                        "block",
                        "digest",
                        "registers",
                        "measured_s",
                    )
                },
                "predicted_s": pred.seconds,
                "ratio": ratio,
                "bound": pred.bound,
                "terms": pred.terms,
                "occupancy": dataclasses.asdict(pred.occupancy),
            }
        )
        sizes = " ".join(f"{k}={v}" for k, v in pt["sizes"].items())
        table.append(
            [
                pt["kernel"],
                sizes,
                pt["candidate"],
                pt["launch"].rsplit("_", 1)[-1],
                " x ".join(map(str, pt["grid"])),
                " x ".join(map(str, pt["block"])),
                f"{pt['measured_s'] * 1e6:.1f}",
                f"{pred.seconds * 1e6:.1f}",
                f"{ratio:.2f}",
                pred.bound,
            ]
        )
    ratios = [r["ratio"] for r in records]

    def within(f: float, rs: Sequence[float]) -> int:
        return sum(1 for r in rs if 1 / f <= r <= f)

    loo = [r for k in left_out for r in left_out[k]]
    summary = {
        "points": len(points),
        "not_reproducible": missing,
        "within_1.5x": within(1.5, ratios),
        "within_2x": within(2.0, ratios),
        "geomean_ratio": math.exp(statistics.mean(math.log(r) for r in ratios)),
        "left_out_within_1.5x": within(1.5, loo),
        "left_out_within_2x": within(2.0, loo),
        "sweep_by_defaults_fit": {
            "points": len(unseen),
            "within_1.5x": within(1.5, unseen),
            "within_2x": within(2.0, unseen),
        },
        "fitted": _constants(device),
        "refit": _constants(refit),
        "model_digest": model_digest(),
        "device": dataclasses.asdict(device),
    }
    out = args.out or RESULTS / f"gpu_calibration_{args.gpu}"
    # the committed frozen file is compared with wherever the results go; --freeze writes beside them
    frozen_path = out.with_name(out.name + "_frozen.json")
    committed_frozen = RESULTS / f"gpu_calibration_{args.gpu}_frozen.json"
    if committed_frozen.exists() and not args.freeze:
        frozen = json.loads(committed_frozen.read_text())
        summary["frozen"] = beside_frozen(records, frozen, summary["model_digest"])
        summary["lost"] = lost_points(records, frozen)
    lines = [
        f"# GPU model calibration: {DEVICES[args.device].name}",
        "",
        f"- points: {len(points)} launches measured by Nsight Compute: the suite's defaults"
        f" (`gpu_ncu_{args.gpu}.csv`, {len(points) - len(sweep)}) and the option sweep's variants"
        f" (`gpu_ncu_sweep_{args.gpu}.csv`, {len(sweep)}), each reproduced at HEAD by its CUDA source"
        f" digest; runs not reproducible: {'; '.join(missing) or 'none'}",
        f"- out of sample: the sweep's {len(unseen)} launches predicted by the fit on the defaults alone:"
        f" within 1.5x {within(1.5, unseen)}, within 2x {within(2.0, unseen)}",
        f"- the model's fitted constants: memory latency {device.memory_latency * 1e9:.0f} ns, loads in"
        f" flight per warp {device.loads_in_flight:g}, {device.block_dispatch * 1e9:.0f} ns to start a"
        f" block; model digest `{summary['model_digest'][:16]}`",
        *refit_lines(device, refit, len(points)),
        *lost_lines(summary.get("lost")),
        f"- within 1.5x: {summary['within_1.5x']}/{len(points)};"
        f" within 2x: {summary['within_2x']}/{len(points)};"
        f" geometric mean of predicted/measured {summary['geomean_ratio']:.2f}",
        "- each suite kernel left out of the fit in turn:"
        f" within 1.5x {summary['left_out_within_1.5x']}/{len(loo)},"
        f" within 2x {summary['left_out_within_2x']}/{len(loo)}",
        *frozen_lines(summary.get("frozen")),
        "",
        markdown_table(
            [
                "kernel",
                "sizes",
                "options",
                "launch",
                "grid",
                "block",
                "measured µs",
                "predicted µs",
                "predicted/measured",
                "bound",
            ],
            table,
        ),
        "",
        "Left out of the fit, per kernel (predicted/measured of its launches): "
        + ("; ".join(f"{k} {', '.join(f'{r:.2f}' for r in left_out[k])}" for k in left_out) or "none"),
    ]
    data = {"benchmark": "gpu_calibration", "summary": summary, "points": records}
    write_results(out, data, "\n".join(lines))
    if args.freeze:
        frozen_path.write_text(json.dumps(frozen_record(data), indent=1) + "\n")
    print("\n".join(lines[:6]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
