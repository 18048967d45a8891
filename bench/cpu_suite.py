"""The benchmark suite on the CPU or a CUDA GPU: tcjit against torch eager and torch.compile, kernel
by kernel.

For each kernel of :mod:`tcjit.suite` at its CPU sizes (float32, contiguous, ``make_inputs``' fixed
seed), three contenders run in this one process:

- ``tcjit``: ``tcjit.define(source, name=entry)``, compiled for the inputs' shapes by
  ``tcjit.compile`` when tcjit has it, else by its first call. That first compile (or call) is timed
  as the *compile latency*; the on-disk kernel cache (``TCJIT_CACHE_DIR``) is a fresh empty
  directory, set before tcjit is imported, so no kernel comes from an earlier run. Kernels compiled
  earlier in the same process have warmed up the compiler itself (imports, isl context):
  ``bench/compile_latency.py`` measures cold starts in fresh processes.
- ``eager``: ``kernel.torch_ref``, the torch code a user would otherwise write.
- ``compile``: ``torch.compile(kernel.torch_ref)`` (Inductor), compiled once per kernel after
  ``torch._dynamo.reset()`` and warmed up; a failure is recorded and the kernel goes on without it.

Before anything is timed, each contender's outputs are compared with ``torch_ref``'s by
``torch.testing.assert_close`` at ``tcjit.testing.tolerance(float32, reduction_length)``. A contender
that disagrees is still timed but marked ``wrong`` in both result files; one that raises is not timed.

Timing is interleaved (see ``bench/_harness.py``): one sample of each contender per round, samples of
at least ~20 ms of back-to-back calls, the median over rounds; the number of rounds is what fits in
``--budget`` seconds per contender (at least 3, at most ``--repeat``). Everything runs under
``torch.no_grad()``. Ratios are of times: ``tcjit/eager`` > 1 means tcjit is slower, and the speedup
is its inverse. The geometric mean of the speedups weighs every kernel alike (a kernel benchmarked
at several sizes counts once, with the geometric mean of its ratios).

``--device cuda`` runs the same on the GPU: inputs are made as on the CPU and moved to the device,
the reference outputs and the checks run there, the sizes default to the suite's GPU sizes (every
one of them, several for some kernels), float32 matmuls and convolutions run without TF32
(``torch.backends.cuda.matmul.allow_tf32`` and ``torch.backends.cudnn.allow_tf32`` off, recorded in
the settings), every timed sample synchronises the device (``torch.cuda.synchronize``) before it
reads the clock at its start and at its end, and tcjit runs with its default target (the CUDA
backend for CUDA tensors). Without a usable GPU it exits with status 2 and one line of explanation.

    python bench/cpu_suite.py                                  # all kernels, CPU sizes
    python bench/cpu_suite.py --kernels matmul,abs_sum --sizes small --repeat 3 --no-compile \\
        --out /tmp/cpu_suite                                   # a quick check of the harness
    python bench/cpu_suite.py --device cuda                    # all kernels, GPU sizes, on the GPU
    python bench/cpu_suite.py --device cuda --kernels matmul,abs_sum --sizes small --no-compile \\
        --out /tmp/gpu_suite                                   # a quick check on the GPU

    python bench/cpu_suite.py --merge a.json b.json --out bench/results/gpu_suite_...
                                                               # one file from runs of parts of the suite

writes ``<out>.json`` (every sample, medians, min/max, machine facts) and ``<out>.md`` (a table); by
default ``bench/results/cpu_suite``, or ``bench/results/gpu_suite_<GPU name>`` on a GPU (e.g.
``gpu_suite_nvidia_h100_80gb_hbm3``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _harness import (
    DEFAULT_MIN_SAMPLE_S,
    RESULTS,
    SUITE_SIZE_KINDS,
    Sync,
    as_tuple,
    bench_environment,
    check_outputs,
    cuda_calibration,
    cuda_unusable,
    describe_error,
    device_sync,
    disable_tf32,
    format_rate,
    format_seconds,
    format_sizes,
    interleaved,
    machine_info,
    machine_markdown,
    markdown_table,
    rate,
    select_kernels,
    sizes_list,
    slug,
    write_results,
)

if TYPE_CHECKING:
    import torch

    from tcjit.suite import SuiteKernel

CONTENDERS = ("tcjit", "eager", "compile")
"""The contenders, in the order of the result tables."""

DEFAULT_REPEAT = 30
DEFAULT_BUDGET_S = 1.5

DEVICES = ("cpu", "cuda")
"""``--device`` choices."""

DEFAULT_SIZES = {"cpu": "cpu", "cuda": "gpu"}
"""The sizes each device runs at unless ``--sizes`` says otherwise."""

PEAK_SIZES = {"cpu": (2048, 64 << 20), "cuda": (4096, 256 << 20), "small": (256, 1 << 20)}
"""The practical peaks' problems: the matmul's n (n^3) and the copy's float32 count (256 MiB on the
CPU, 1 GiB on a GPU, 4 MiB for ``small`` sizes on either)."""


def benchmark_name(device: str) -> str:
    """The result document's ``"benchmark"``: ``cpu_suite`` or ``gpu_suite``."""
    return "gpu_suite" if device == "cuda" else "cpu_suite"


def default_out(device: str, gpu_name: str | None = None) -> Path:
    """Where results go without ``--out``: ``bench/results/cpu_suite`` on the CPU,
    ``bench/results/gpu_suite_<slug of the GPU's name>`` on a GPU."""
    if device == "cuda":
        return RESULTS / f"gpu_suite_{slug(gpu_name or 'unknown')}"
    return RESULTS / "cpu_suite"


def _contender(status: str, *, error: str | None = None, setup_s: float | None = None) -> dict[str, Any]:
    """A contender's record before timing. ``status``: ``ok``, ``wrong``, ``error`` or ``skipped``."""
    return {
        "status": status,
        "correct": None,
        "error": error,
        "max_abs_err": None,
        "setup_s": setup_s,
        "timing": None,
        "rate": None,
    }


def _checked(
    record: dict[str, Any], result: object, want: Sequence[torch.Tensor], tol: Mapping[str, float]
) -> dict[str, Any]:
    """``record`` with the outcome of comparing ``result`` with the reference outputs."""
    check = check_outputs(as_tuple(result), want, tol)
    record.update(
        status="ok" if check.correct else "wrong",
        correct=check.correct,
        max_abs_err=check.max_abs_err,
        error=None if check.correct else check.message,
    )
    return record


def _prepare_tcjit(
    sk: SuiteKernel,
    inputs: tuple,
    want: Sequence[torch.Tensor],
    tol: Mapping[str, float],
    sync: Sync | None = None,
) -> tuple[dict[str, Any], Callable[[], object] | None]:
    """Define and compile the TC kernel (timed), check its outputs; its record and timed callable."""
    import tcjit

    sync = sync or _no_sync
    try:
        t0 = time.perf_counter()
        k = tcjit.define(sk.source, name=sk.entry)
        t1 = time.perf_counter()
        compile_ahead = getattr(tcjit, "compile", None)
        if compile_ahead is not None:
            spec = compile_ahead(k, *inputs)
            t2 = time.perf_counter()
            result = k(*inputs)
            method = "tcjit.compile"
        else:
            result = k(*inputs)  # compiles on first call, and is the warm-up
            sync()
            t2 = time.perf_counter()
            method = "first call"
    except Exception as e:
        return _contender("error", error=describe_error(e)), None
    record = _checked(_contender("ok", setup_s=t2 - t1), result, want, tol)
    record.update(define_s=t1 - t0, compile_method=method)
    if compile_ahead is not None and getattr(spec, "lowered", None) is not None:  # a CUDA kernel
        from tcjit.binding import bind
        from tcjit.pipeline import default_options

        sizes = bind(k.definition, inputs, None).sizes  # no options given, none tuned: the defaults
        record["calibration"] = cuda_calibration(spec, default_options(k.definition, sizes, "cuda"))
    return record, lambda: k(*inputs)


def _prepare_eager(
    sk: SuiteKernel,
    inputs: tuple,
    want: Sequence[torch.Tensor],
    tol: Mapping[str, float],
    sync: Sync | None = None,
) -> tuple[dict[str, Any], Callable[[], object] | None]:
    try:
        result = sk.torch_ref(*inputs)
    except Exception as e:
        return _contender("error", error=describe_error(e)), None
    return _checked(_contender("ok"), result, want, tol), lambda: sk.torch_ref(*inputs)


def _prepare_compile(
    sk: SuiteKernel,
    inputs: tuple,
    want: Sequence[torch.Tensor],
    tol: Mapping[str, float],
    sync: Sync | None = None,
) -> tuple[dict[str, Any], Callable[[], object] | None]:
    import torch

    sync = sync or _no_sync
    # Every suite kernel's torch_ref is the same code object (a method of SuiteKernel): without a
    # reset, dynamo's recompile limit would silently send later kernels to eager.
    torch._dynamo.reset()
    try:
        t0 = time.perf_counter()
        fn = torch.compile(sk.torch_ref)
        result = fn(*inputs)
        sync()
        t1 = time.perf_counter()
    except Exception as e:
        return _contender("error", error=describe_error(e)), None
    return _checked(_contender("ok", setup_s=t1 - t0), result, want, tol), lambda: fn(*inputs)


def _no_sync() -> None:
    pass


def _ratio(num: dict[str, Any], den: dict[str, Any]) -> float | None:
    if num["timing"] is None or den["timing"] is None:
        return None
    return num["timing"]["median_s"] / den["timing"]["median_s"]


def bench_kernel(
    sk: SuiteKernel,
    sizes: Mapping[str, int],
    *,
    torch_compile: bool,
    max_rounds: int,
    budget_s: float,
    min_sample_s: float,
    device: str = "cpu",
) -> dict[str, Any]:
    """Check and time the contenders on one kernel on ``device``; its record for the JSON file."""
    import torch

    from tcjit.testing import tolerance

    sync = device_sync(device)
    with torch.no_grad():
        inputs = sk.make_inputs(sizes, device=device)
        want = as_tuple(sk.torch_ref(*inputs))
        tol = tolerance(torch.float32, sk.reduction_length(sizes))
        records: dict[str, dict[str, Any]] = {}
        timed: dict[str, Callable[[], object]] = {}
        for name, prepare in zip(CONTENDERS, (_prepare_tcjit, _prepare_eager, _prepare_compile)):
            if name == "compile" and not torch_compile:
                records[name] = _contender("skipped", error="--no-compile")
                continue
            records[name], fn = prepare(sk, inputs, want, tol, sync)
            if fn is not None:
                timed[name] = fn
        timings = interleaved(
            timed, max_rounds=max_rounds, budget_s=budget_s, min_sample_s=min_sample_s, sync=sync
        )
    for name, timing in timings.items():
        records[name]["timing"] = timing.to_json()
        records[name]["rate"] = rate(sk, sizes, timing.median_s)
    t, e, c = records["tcjit"], records["eager"], records["compile"]
    over_eager, over_compile = _ratio(t, e), _ratio(t, c)
    return {
        "kernel": sk.name,
        "sizes": dict(sizes),
        "metric": sk.metric,
        "flops": sk.flops(sizes),
        "bytes": sk.bytes(sizes),
        "reduction_length": sk.reduction_length(sizes),
        "tolerance": tol,
        "correctness_checked": True,
        "all_correct": all(r["correct"] is not False for r in records.values()),
        "tcjit_compile_s": t["setup_s"],
        "torch_compile_s": c["setup_s"],
        "contenders": records,
        "tcjit_over_eager": over_eager,
        "speedup_vs_eager": None if over_eager is None else 1 / over_eager,
        "tcjit_over_compile": over_compile,
        "speedup_vs_compile": None if over_compile is None else 1 / over_compile,
    }


def run_suite(
    kernels: str | None,
    sizes_kind: str,
    *,
    device: str = "cpu",
    torch_compile: bool = True,
    max_rounds: int = DEFAULT_REPEAT,
    budget_s: float = DEFAULT_BUDGET_S,
    min_sample_s: float = DEFAULT_MIN_SAMPLE_S,
    progress: bool = True,
) -> dict[str, Any]:
    """Benchmark the named suite kernels (comma-separated; all for ``None``) on ``device`` at every
    size of ``sizes_kind``; the JSON document.

    Call it after ``TCJIT_CACHE_DIR`` points at a fresh directory (:func:`main` does), and for
    ``device="cuda"`` where CUDA is usable (:func:`_harness.cuda_unusable`). On CUDA it turns TF32 off
    for the rest of the process.
    """
    device_settings: dict[str, Any] = {}
    if device == "cuda":
        device_settings = {"device": device, "allow_tf32": disable_tf32()}
    peaks = practical_peaks(sizes_kind, device)
    results = []
    for sk in select_kernels(kernels):
        for sizes in sizes_list(sk, sizes_kind):
            r = bench_kernel(
                sk,
                sizes,
                torch_compile=torch_compile,
                max_rounds=max_rounds,
                budget_s=budget_s,
                min_sample_s=min_sample_s,
                device=device,
            )
            results.append(r)
            if progress:
                print(_progress_line(r), file=sys.stderr, flush=True)
    return {
        "benchmark": benchmark_name(device),
        "machine": machine_info(device),
        "settings": {
            "sizes": sizes_kind,
            "dtype": "float32",
            "torch_compile": torch_compile,
            "max_rounds": max_rounds,
            "budget_s": budget_s,
            "min_sample_s": min_sample_s,
            "fresh_cache_dir": True,
            "grad_mode": "no_grad",
            **device_settings,
        },
        "peaks": peaks,
        "kernels": results,
        "geomean_speedup": geomean_speedups(results),
    }


def geomean_speedups(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The geometric means over kernels of tcjit's speedups (time ratios inverted) over eager and
    over torch.compile, each over the kernels where both contenders were timed and correct. A kernel
    benchmarked at several sizes (GPU sizes) counts once, with the geometric mean of its ratios."""
    out: dict[str, Any] = {}
    for key, name in (("tcjit_over_eager", "eager"), ("tcjit_over_compile", "compile")):
        logs: dict[object, list[float]] = {}
        for i, r in enumerate(results):
            if r.get(key) and all(r["contenders"][c]["status"] == "ok" for c in ("tcjit", name)):
                logs.setdefault(r.get("kernel", i), []).append(math.log(r[key]))
        per_kernel = [statistics.fmean(v) for v in logs.values()]
        out[name] = math.exp(-statistics.fmean(per_kernel)) if per_kernel else None
        out[f"{name}_kernels"] = len(per_kernel)
    return out


def practical_peaks(sizes_kind: str = "cpu", device: str = "cpu") -> dict[str, Any]:
    """What this machine practically does, the yardsticks of the rates: torch.matmul's float32
    GFLOP/s (2 flops per multiply-add) and ``copy_``'s GB/s (bytes read plus written), medians of 5
    runs after a warm-up. On the CPU: 2048^3 and 256 MiB; on a GPU (call it with TF32 off): 4096^3
    and 1 GiB, each run between two ``torch.cuda.synchronize``. ``"small"`` sizes measure 256^3 and
    4 MiB on either (a quick check, not a peak)."""
    import torch

    n, count = PEAK_SIZES["small" if sizes_kind == "small" else device]
    sync = device_sync(device) or _no_sync

    def median_time(fn, *args) -> float:
        fn(*args)
        sync()
        times = []
        for _ in range(5):
            sync()
            t = time.perf_counter()
            fn(*args)
            sync()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    with torch.no_grad():
        t_mm = median_time(torch.matmul, torch.randn(n, n, device=device), torch.randn(n, n, device=device))
        src = torch.randn(count, device=device)
        t_copy = median_time(torch.empty_like(src).copy_, src)
    del src
    if device == "cuda":
        torch.cuda.empty_cache()  # give the peaks' 2 GiB back before the kernels run
    return {
        "matmul_size": n,
        "matmul_gflops": 2 * n**3 / t_mm / 1e9,
        "copy_bytes": 8 * count,
        "copy_gbs": 8 * count / t_copy / 1e9,
    }


def _of_peak(rate: float | None, metric: str, peaks: Mapping[str, Any] | None) -> str:
    if rate is None or not peaks:
        return "—"
    peak = peaks["matmul_gflops"] if metric == "GFLOP/s" else peaks["copy_gbs"]
    return f"{100 * rate / peak:.0f}%"


# ========================================================================================= report
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


def _progress_line(r: Mapping[str, Any]) -> str:
    times = ", ".join(f"{n} {_time_cell(c)}" for n, c in r["contenders"].items())
    return f"{r['kernel']:<11} {format_sizes(r['sizes'])}: {times}; correct: {_correct_cell(r['contenders'])}"


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The result document as markdown: machine facts, the table, failures, a legend."""
    header = [
        "kernel",
        "sizes",
        "tcjit",
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
                *(_time_cell(c[n]) for n in CONTENDERS),
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
        "`tcjit.testing.tolerance`.",
    ]
    if notes:
        parts += ["", "## Failures", "", *notes]
    return "\n".join(parts)


def _geomean_lines(doc: Mapping[str, Any]) -> list[str]:
    g = doc.get("geomean_speedup") or geomean_speedups(doc["kernels"])
    cells = [
        f"{g[n]:.3g}× over {label} ({g[f'{n}_kernels']} kernels)"
        for n, label in (("eager", "torch eager"), ("compile", "torch.compile"))
        if g.get(n)
    ]
    return [f"Geometric mean of tcjit's speedups: {'; '.join(cells)}.", ""] if cells else []


# ============================================================================================ CLI
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; ``sizes`` resolved (the device's default when not given), ``out`` left
    ``None`` when not given (:func:`default_out` needs the GPU's name)."""
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--device", choices=DEVICES, default="cpu", help="where the kernels run (default: cpu)")
    p.add_argument("--kernels", default=None, help="comma-separated suite kernels (default: all)")
    p.add_argument(
        "--sizes",
        choices=SUITE_SIZE_KINDS,
        default=None,
        help="the suite's cpu sizes, all its gpu sizes, or the first small size "
        "(default: cpu on the CPU, gpu with --device cuda)",
    )
    p.add_argument(
        "--repeat", type=int, default=DEFAULT_REPEAT, help="at most this many interleaved rounds per kernel"
    )
    p.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="about this many seconds of timing per contender and kernel (at least 3 rounds)",
    )
    p.add_argument(
        "--min-sample-ms",
        type=float,
        default=DEFAULT_MIN_SAMPLE_S * 1e3,
        help="each timed sample lasts at least this long",
    )
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out (Inductor is slow)")
    p.add_argument("--threads", type=int, default=None, help="torch threads and OMP_NUM_THREADS")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="writes <out>.json and <out>.md (default: bench/results/cpu_suite, or "
        "bench/results/gpu_suite_<GPU name> with --device cuda)",
    )
    p.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        default=None,
        metavar="JSON",
        help="run nothing: write one result (to --out) from the JSON files of runs of parts of the suite "
        "on one machine with the same settings",
    )
    args = p.parse_args(argv)
    if args.merge and args.out is None:
        p.error("--merge needs --out")
    if args.sizes is None:
        args.sizes = DEFAULT_SIZES[args.device]
    return args


def merge_results(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One document from the documents of runs of parts of the suite (a GPU run split over several
    sessions of a time-limited machine): the kernels in suite order, the geometric means over all of
    them; the machine facts, settings and peaks of the first. The runs must share the benchmark, the
    machine (CPU or GPU name), torch, tcjit's commit and every setting, and no kernel at one size may
    appear twice; else :class:`ValueError`."""
    if not docs:
        raise ValueError("nothing to merge")
    first = docs[0]
    same = ("cpu_model", "gpu_name", "torch_version", "tcjit_commit")
    for d in docs[1:]:
        if d["benchmark"] != first["benchmark"] or d["settings"] != first["settings"]:
            raise ValueError("the runs differ in benchmark or settings")
        for key in same:
            if d["machine"].get(key) != first["machine"].get(key):
                raise ValueError(
                    f"the runs differ in {key}: {first['machine'].get(key)!r}, {d['machine'].get(key)!r}"
                )
    from tcjit import suite

    order = {name: i for i, name in enumerate(suite.SUITE)}
    seen: set[tuple[str, str]] = set()
    kernels = []
    for d in docs:
        for k in d["kernels"]:
            key = (k["kernel"], json.dumps(k["sizes"], sort_keys=True))
            if key in seen:
                raise ValueError(f"{k['kernel']} at {k['sizes']} is in more than one run")
            seen.add(key)
            kernels.append(k)
    kernels.sort(key=lambda k: order.get(k["kernel"], len(order)))  # stable: sizes keep their order
    return {
        **first,
        "kernels": kernels,
        "geomean_speedup": geomean_speedups(kernels),
        "merged_from": len(docs),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.merge:
        try:
            doc = merge_results([json.loads(path.read_text()) for path in args.merge])
        except (OSError, ValueError, KeyError) as e:
            print(f"cpu_suite.py: --merge: {e}", file=sys.stderr)
            return 2
        json_path, md_path = write_results(args.out, doc, render_markdown(doc))
        print(f"wrote {json_path} and {md_path} from {len(args.merge)} runs", file=sys.stderr)
        return 0
    if args.device == "cuda":
        why = cuda_unusable()
        if why is not None:
            print(f"cpu_suite.py: --device cuda: {why}", file=sys.stderr)
            return 2
    with bench_environment(args.threads):
        doc = run_suite(
            args.kernels,
            args.sizes,
            device=args.device,
            torch_compile=not args.no_compile,
            max_rounds=args.repeat,
            budget_s=args.budget,
            min_sample_s=args.min_sample_ms / 1e3,
        )
    out = args.out or default_out(args.device, doc["machine"].get("gpu_name"))
    json_path, md_path = write_results(out, doc, render_markdown(doc))
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    failed = [
        k["kernel"]
        for k in doc["kernels"]
        if not k["all_correct"] or k["contenders"]["tcjit"]["status"] == "error"
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
