"""The static GPU profile's prediction for every suite kernel at its GPU sizes, at HEAD, against the
torch eager times of the latest GPU run: the number the GPU issues move, known on any machine.

For each kernel of ``tcjit.suite`` and each of its GPU sizes, the kernel is lowered for the ``cuda``
target with HEAD's default options, compiled to a cubin for the device's architecture (registers),
and profiled (:func:`tcjit.static_profile.profile_at`): the predicted time of a call in a loop of
calls, the resource that bounds it, and the slowest launch's diagnosis. Beside it, from the latest
GPU run's results (``bench/results/gpu_suite_<gpu>.json``): torch eager's measured time, and
tcjit's measured time with whether HEAD still generates the CUDA source that run measured (the
same SHA-256): where it does, predicted against measured checks the whole call's model.

The host's cost of a call (:data:`tcjit.mapping.gpu_profile.HOST`) is fitted here on the run of
one-element tensors (``gpu_suite_small_<gpu>.json``: their device time is negligible), as a cost
per call plus one per launch, by least squares; the script prints the fit beside the constant the
model holds.

    python bench/gpu_predict.py [--gpu nvidia_h100_80gb_hbm3] [--device h100] [--kernels ...] [--out ...]

writes ``gpu_predict_<gpu>.json`` and ``.md`` (default: in bench/results).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _harness import (
    RESULTS,
    machine_info,
    machine_markdown,
    markdown_table,
    recorded_kernel,
    select_kernels,
    sizes_list,
    write_results,
)
from _prediction import model_digest


def _measured(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The kernels of a GPU suite run by (name, sizes as JSON)."""
    data = json.loads(path.read_text())
    out = {}
    for k in data["kernels"]:
        c = k["contenders"]
        out[(k["kernel"], json.dumps(k["sizes"], sort_keys=True))] = {
            "eager_s": (c.get("eager", {}).get("timing") or {}).get("median_s"),
            "tcjit_s": (c.get("tcjit", {}).get("timing") or {}).get("median_s"),
            "calibration": c.get("tcjit", {}).get("calibration") or {},
        }
    return {"commit": data["machine"].get("tcjit_commit"), "kernels": out}


def fit_host(path: Path, gpu: str) -> dict[str, Any]:
    """The host's cost model fitted on the one-element run ``path``: ``call + launch x launches``
    seconds by least squares over its kernels (the launches each call made, as the run recorded
    them, and the runtime's steps of its options at HEAD), with each kernel's predicted over
    measured time."""
    from tcjit.static_profile import profile_at

    data = json.loads(path.read_text())
    points = []
    for k in data["kernels"]:
        t = k["contenders"]["tcjit"]
        if not (t.get("timing") and t.get("calibration")):
            continue
        _, cdef, options = recorded_kernel({"kernel": k["kernel"], "options": t["calibration"]["options"]})
        profile = profile_at(cdef, k["sizes"], None, options, gpu)
        # the launches that run made (its record), whatever HEAD makes of the same options now
        steps = len(t["calibration"]["launches"]) + len(profile.runtime)
        points.append((k["kernel"], steps, t["timing"]["median_s"]))
    n = len(points)
    mx = statistics.mean(p[1] for p in points)
    my = statistics.mean(p[2] for p in points)
    sxx = sum((p[1] - mx) ** 2 for p in points)
    launch = sum((p[1] - mx) * (p[2] - my) for p in points) / sxx
    call = my - launch * mx
    ratios = {name: (call + launch * s) / t for name, s, t in points}
    return {"call_s": call, "launch_s": launch, "points": n, "ratios": ratios}


def predict_suite(kernels, gpu: str, measured: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per kernel and GPU size: HEAD's prediction beside the measured times."""
    from tcjit.mapping.layout import contiguous_layout
    from tcjit.mapping.lower_gpu import lower_cuda
    from tcjit.pipeline import default_options
    from tcjit.static_profile import profile_at

    records = []
    for sk in kernels:
        cdef = sk.checked
        for sizes in sizes_list(sk, "gpu"):
            options = default_options(cdef, sizes, "cuda")
            key = (sk.name, json.dumps(sizes, sort_keys=True))
            m = measured["kernels"].get(key, {})
            record: dict[str, Any] = {
                "kernel": sk.name,
                "sizes": sizes,
                **{k: m.get(k) for k in ("eager_s", "tcjit_s")},
            }
            try:
                profile = profile_at(cdef, sizes, None, options, gpu)
            except Exception as e:  # a model error is a finding, not the end of the table
                record["error"] = f"{type(e).__name__}: {e}"
                records.append(record)
                continue
            strides = contiguous_layout(cdef, sizes)
            source = lower_cuda(cdef, sizes, strides, options.validate("cuda").values).source
            digest = hashlib.sha256(source.encode()).hexdigest()
            slowest = max(profile.launches, key=lambda p: p.prediction.seconds)
            record.update(
                predicted_s=profile.seconds,
                device_s=profile.device_seconds,
                host_s=profile.host_seconds,
                bound=profile.bound,
                launches=len(profile.launches),
                slowest_launch=slowest.name,
                slowest_s=slowest.prediction.seconds,
                diagnosis=list(slowest.diagnosis),
                cuda_source_sha256=digest,
                same_source=m.get("calibration", {}).get("cuda_source_sha256") == digest,
            )
            records.append(record)
    return records


def _geomean(values: Sequence[float]) -> float | None:
    return math.exp(statistics.mean(math.log(v) for v in values)) if values else None


def _t(s: float | None) -> str:
    if s is None:
        return "—"
    return f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} µs"


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Geometric means: the predicted speedup over eager (the headline), the measured one, and
    predicted over measured where HEAD's source is the one measured."""
    ok = [r for r in records if r.get("predicted_s") and r.get("eager_s")]
    same = [r for r in ok if r["same_source"] and r.get("tcjit_s")]
    measured = [r for r in records if r.get("tcjit_s") and r.get("eager_s")]
    return {
        "predicted_speedup_over_eager": _geomean([r["eager_s"] / r["predicted_s"] for r in ok]),
        "predicted_kernels": len(ok),
        "measured_speedup_over_eager": _geomean([r["eager_s"] / r["tcjit_s"] for r in measured]),
        "measured_kernels": len(measured),
        "predicted_over_measured": _geomean([r["predicted_s"] / r["tcjit_s"] for r in same]),
        "same_source_kernels": len(same),
        "within_1_5x": sum(1 for r in same if 1 / 1.5 <= r["predicted_s"] / r["tcjit_s"] <= 1.5),
        "within_2x": sum(1 for r in same if 0.5 <= r["predicted_s"] / r["tcjit_s"] <= 2),
    }


def markdown(data: dict[str, Any]) -> str:
    s, host, model = data["summary"], data["host_fit"], data["model"]
    rows = []
    for r in data["kernels"]:
        sizes = " ".join(f"{k}={v}" for k, v in r["sizes"].items())
        if "error" in r:
            rows.append([r["kernel"], sizes, "error", "", "", "", "", "", r["error"]])
            continue
        pm = (
            f"{r['predicted_s'] / r['tcjit_s']:.2f}" if r.get("tcjit_s") and r["same_source"] else "(changed)"
        )
        speed = f"{r['eager_s'] / r['predicted_s']:.3g}×" if r.get("eager_s") else "—"
        rows.append(
            [
                r["kernel"],
                sizes,
                _t(r["predicted_s"]),
                r["bound"],
                _t(r.get("eager_s")),
                speed,
                _t(r.get("tcjit_s")),
                pm,
                "; ".join(r["diagnosis"][:2]),
            ]
        )
    fmt = lambda v: "—" if v is None else f"{v:.3g}"  # noqa: E731
    lines = [
        f"# GPU suite predicted by the static profile ({data['device']})",
        "",
        machine_markdown(data["machine"]),
        f"- measured: `{data['measured_file']}` (tcjit commit {str(data['measured_commit'])[:10]}); "
        f"model digest `{model['digest'][:16]}`",
        f"- host model: {host['call_s'] * 1e6:.3g} µs a call + {host['launch_s'] * 1e6:.3g} µs a launch, "
        f"fitted on {host['points']} one-element calls (`{host['file']}`), predicted/measured "
        f"{min(host['ratios'].values()):.2f}–{max(host['ratios'].values()):.2f}; the model holds "
        f"{model['host_call_s'] * 1e6:.3g} + {model['host_launch_s'] * 1e6:.3g} µs",
        "",
        f"**Predicted geometric-mean speedup over torch eager: {fmt(s['predicted_speedup_over_eager'])}×** "
        f"({s['predicted_kernels']} kernels and sizes; measured in that run: "
        f"{fmt(s['measured_speedup_over_eager'])}×). Where HEAD generates the source that run measured "
        f"({s['same_source_kernels']}): predicted/measured {fmt(s['predicted_over_measured'])} in geometric "
        f"mean, {s['within_1_5x']} within 1.5×, {s['within_2x']} within 2×.",
        "",
        markdown_table(
            [
                "kernel",
                "sizes",
                "predicted",
                "bound",
                "eager (measured)",
                "predicted speedup",
                "tcjit (measured)",
                "predicted/measured",
                "slowest launch: diagnosis",
            ],
            rows,
        ),
        "",
        "Predicted: a call in a loop of calls on the GPU named, HEAD's default options. `(changed)`: HEAD's "
        "CUDA source differs from the one measured, so the measured tcjit time is of other code.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="HEAD's predicted GPU suite against the latest measured eager times."
    )
    p.add_argument("--gpu", default="nvidia_h100_80gb_hbm3", help="the measured results files' GPU suffix")
    p.add_argument("--device", default="h100", help="the model's device (mapping/gpu_model.py DEVICES)")
    p.add_argument("--kernels", default=None, help="comma-separated suite kernels (default: all)")
    p.add_argument("--out", type=Path, default=None, help="writes <out>.json and .md")
    args = p.parse_args(argv)
    from tcjit import nvrtc
    from tcjit.mapping.gpu_model import DEVICES
    from tcjit.mapping.gpu_profile import HOST

    if not nvrtc.available():
        print("gpu_predict.py: no CUDA compiler (pip install nvidia-cuda-nvrtc)", file=sys.stderr)
        return 2
    if args.device not in DEVICES:
        print(f"gpu_predict.py: --device must be one of {', '.join(DEVICES)}", file=sys.stderr)
        return 2
    suite_file = RESULTS / f"gpu_suite_{args.gpu}.json"
    small_file = RESULTS / f"gpu_suite_small_{args.gpu}.json"
    measured = _measured(suite_file)
    records = predict_suite(select_kernels(args.kernels), args.device, measured)
    host = fit_host(small_file, args.device)
    data = {
        "benchmark": "gpu_predict",
        "device": DEVICES[args.device].name,
        "machine": machine_info("cpu"),
        "measured_file": suite_file.name,
        "measured_commit": measured["commit"],
        "model": {"digest": model_digest(), "host_call_s": HOST.call, "host_launch_s": HOST.launch},
        "host_fit": {**host, "file": small_file.name},
        "summary": summarise(records),
        "kernels": records,
    }
    text = markdown(data)
    print(text)
    out = args.out or RESULTS / f"gpu_predict_{args.gpu}"
    write_results(out, data, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
