"""The suite benchmark's report (``bench/cpu_suite.py``): the markdown table of a result document,
the progress line of each kernel, and the geometric means of tcjit's speedups."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from _harness import format_rate, format_seconds, format_sizes, machine_markdown, markdown_table
from _prediction import per_kernel_geomean, prediction_cell, ratio_cell

CONTENDERS = ("tcjit", "eager", "compile")
"""The contenders, in the order of the result tables."""


def geomean_speedups(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The geometric means over kernels of tcjit's speedups (time ratios inverted) over eager and
    over torch.compile, each over the kernels where both contenders were timed and correct. A kernel
    benchmarked at several sizes (GPU sizes) counts once, with the geometric mean of its ratios."""
    out: dict[str, Any] = {}
    for key, name in (("tcjit_over_eager", "eager"), ("tcjit_over_compile", "compile")):
        mean, kernels = per_kernel_geomean(
            (r.get("kernel", i), r[key])
            for i, r in enumerate(results)
            if r.get(key) and all(r["contenders"][c]["status"] == "ok" for c in ("tcjit", name))
        )
        out[name] = None if mean is None else 1 / mean
        out[f"{name}_kernels"] = kernels
    return out


def geomean_predicted(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The geometric mean over kernels of the static GPU profile's predicted time over tcjit's
    measured time (``tcjit_predicted_over_measured``), each kernel once (:func:`geomean_speedups`):
    ``value`` (``None`` without a prediction beside a measurement) and ``kernels``."""
    value, kernels = per_kernel_geomean(
        (r.get("kernel", i), r["tcjit_predicted_over_measured"])
        for i, r in enumerate(results)
        if r.get("tcjit_predicted_over_measured")
    )
    return {"value": value, "kernels": kernels}


def _of_peak(rate: float | None, metric: str, peaks: Mapping[str, Any] | None) -> str:
    if rate is None or not peaks:
        return "—"
    peak = peaks["matmul_gflops"] if metric == "GFLOP/s" else peaks["copy_gbs"]
    return f"{100 * rate / peak:.0f}%"


def _time_cell(record: Mapping[str, Any]) -> str:
    if record["status"] == "skipped":
        return "skipped"
    if record["timing"] is None:
        return "error"
    cell = format_seconds(record["timing"]["median_s"])
    return cell + " (wrong)" if record["status"] == "wrong" else cell


def _ratio_cell(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.3g} ({1 / ratio:.3g}×)"


def _correct_cell(records: Mapping[str, Mapping[str, Any]]) -> str:
    bad = [f"{n}: {r['status']}" for n, r in records.items() if r["status"] in ("wrong", "error")]
    return "yes" if not bad else "; ".join(bad)


def progress_line(r: Mapping[str, Any]) -> str:
    """One kernel's line while the suite runs: each contender's time (tcjit's prediction beside its
    own where one was made) and what was not correct."""
    times = ", ".join(f"{n} {_time_cell(c)}" for n, c in r["contenders"].items())
    prediction = r["contenders"]["tcjit"].get("prediction")
    if prediction:
        ratio = r.get("tcjit_predicted_over_measured")
        times += f"; tcjit predicted {prediction_cell(prediction)}"
        times += f", predicted/measured {ratio_cell(ratio)}" if ratio else ""
    return f"{r['kernel']:<11} {format_sizes(r['sizes'])}: {times}; correct: {_correct_cell(r['contenders'])}"


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The result document as markdown: machine facts, the table, failures, a legend. Where tcjit's
    records hold predictions (a GPU run), the static profile's predicted time and its ratio to the
    measured one stand beside tcjit's time."""
    predicted = any("prediction" in r["contenders"]["tcjit"] for r in doc["kernels"])
    header = [
        "kernel",
        "sizes",
        "tcjit",
        *(["tcjit predicted", "predicted/measured"] if predicted else []),
        "eager",
        "compile",
        "tcjit rate",
        "tcjit % of peak",
        "eager rate",
        "compile rate",
        "tcjit/eager (speedup)",
        "tcjit/compile (speedup)",
        "compile latency",
        "correct",
    ]
    rows = []
    notes = []
    for r in doc["kernels"]:
        c = r["contenders"]
        latency = format_seconds(r["tcjit_compile_s"])
        if c["tcjit"].get("compile_method"):
            latency += f" ({c['tcjit']['compile_method']})"
        rows.append(
            [
                r["kernel"],
                format_sizes(r["sizes"]),
                _time_cell(c["tcjit"]),
                *(
                    [
                        prediction_cell(c["tcjit"].get("prediction")),
                        ratio_cell(r.get("tcjit_predicted_over_measured")),
                    ]
                    if predicted
                    else []
                ),
                *(_time_cell(c[n]) for n in CONTENDERS[1:]),
                format_rate(c["tcjit"]["rate"], r["metric"]),
                _of_peak(c["tcjit"]["rate"], r["metric"], doc.get("peaks")),
                *(format_rate(c[n]["rate"], r["metric"]) for n in CONTENDERS[1:]),
                _ratio_cell(r["tcjit_over_eager"]),
                _ratio_cell(r["tcjit_over_compile"]),
                latency,
                _correct_cell(c),
            ]
        )
        for n in CONTENDERS:
            if c[n]["status"] in ("wrong", "error"):
                notes.append(f"- {r['kernel']} / {n} ({c[n]['status']}): {c[n]['error']}")
        if (c["tcjit"].get("prediction") or {}).get("error"):
            notes.append(f"- {r['kernel']} / prediction: {c['tcjit']['prediction']['error']}")
    s = doc["settings"]
    gpu = doc.get("benchmark") == "gpu_suite"
    on_gpu = ""
    if gpu:
        tf32 = s.get("allow_tf32") or {}
        on_gpu = (
            f"; on the GPU, TF32 {'on' if any(tf32.values()) else 'off'}, every sample between two "
            "torch.cuda.synchronize"
        )
    peaks = doc.get("peaks")
    peak_text = (
        f"torch.matmul's GFLOP/s on {peaks['matmul_size']}^3 or copy_'s GB/s (read plus written) on "
        f"{peaks['copy_bytes'] / 2 / 2**20:.0f} MiB"
        if peaks
        else "torch.matmul's GFLOP/s or copy_'s GB/s (read plus written)"
    )
    parts = [
        f"# {'GPU' if gpu else 'CPU'} suite: tcjit vs torch eager vs torch.compile",
        "",
        machine_markdown(doc["machine"]),
        f"- sizes: {s['sizes']}, {s['dtype']}, {s['grad_mode']}; interleaved rounds: up to "
        f"{s['max_rounds']} within ~{s['budget_s']} s per contender, samples of >= "
        f"{s['min_sample_s'] * 1e3:.0f} ms; torch.compile: {'on' if s['torch_compile'] else 'off'}{on_gpu}",
        *(
            [
                f"- practical peaks: torch.matmul {doc['peaks']['matmul_gflops']:.1f} GFLOP/s on "
                f"{doc['peaks']['matmul_size']}^3, copy_ {doc['peaks']['copy_gbs']:.1f} GB/s"
            ]
            if doc.get("peaks")
            else []
        ),
        *(
            ["- **incomplete**: the run stopped before its last kernel; these are the ones it finished"]
            if doc.get("complete") is False
            else []
        ),
        "",
        markdown_table(header, rows),
        "",
        *_geomean_lines(doc),
        "Times are medians over interleaved rounds of the time per call. Rates: GFLOP/s (2 flops per "
        "multiply-add) or GB/s of compulsory traffic, per the kernel's metric. `tcjit/eager` and "
        "`tcjit/compile` are ratios of times (> 1: tcjit is slower); the speedup in parentheses is "
        "the inverse. `% of peak`: the tcjit rate against this machine's practical peak, "
        f"{peak_text} (the peaks line above; the paper peak is higher). Compile latency: tcjit's "
        "first compile (or first call) with an empty on-disk cache, in a process that may already "
        "have compiled other kernels. `(wrong)`: outputs differ from torch_ref beyond "
        "`tcjit.testing.tolerance`." + (_PREDICTED_LEGEND if predicted else ""),
    ]
    if notes:
        parts += ["", "## Failures", "", *notes]
    return "\n".join(parts)


_PREDICTED_LEGEND = (
    " `tcjit predicted`: the static GPU profile's time for a call in a loop of calls, with the options"
    " tcjit ran with (`tcjit.static_profile.profile_at`, registers from the cubin NVRTC compiles; the"
    " JSON holds each launch's prediction and the model's digest), and the bound that decides it;"
    " `predicted/measured` > 1: the model is pessimistic."
)


def _geomean_lines(doc: Mapping[str, Any]) -> list[str]:
    g = doc.get("geomean_speedup") or geomean_speedups(doc["kernels"])
    cells = [
        f"{g[n]:.3g}× over {label} ({g[f'{n}_kernels']} kernels)"
        for n, label in (("eager", "torch eager"), ("compile", "torch.compile"))
        if g.get(n)
    ]
    lines = [f"Geometric mean of tcjit's speedups: {'; '.join(cells)}.", ""] if cells else []
    p = doc.get("geomean_predicted_over_measured") or geomean_predicted(doc["kernels"])
    if p["value"]:
        lines += [
            f"Geometric mean of the static profile's predicted over tcjit's measured time: "
            f"{p['value']:.3g} ({p['kernels']} kernels).",
            "",
        ]
    return lines
