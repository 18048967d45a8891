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
Each tcjit kernel on the GPU is also a check of the static GPU model: its record holds its CUDA
source digest, launches and options (``calibration``) and the static profile's prediction for
those options on this GPU (``prediction``, ``bench/_prediction.py``: the predicted time of a call,
its bound, each launch's predicted time, the model's digest; an ``error`` string where the
prediction failed, which never stops the suite), and the table puts the predicted time and the
ratio predicted/measured beside tcjit's time, with their geometric mean under it.

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
``gpu_suite_nvidia_h100_80gb_hbm3``). Both are rewritten after each kernel, marked incomplete
(``"complete": false``) until the last, so that a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
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
    interleaved,
    machine_info,
    rate,
    select_kernels,
    sizes_list,
    slug,
    write_results,
)
from _prediction import predict_call, predicted_over_measured
from _suite_report import CONTENDERS, geomean_predicted, geomean_speedups, progress_line, render_markdown

if TYPE_CHECKING:
    import torch

    from tcjit.suite import SuiteKernel

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
        import torch

        from tcjit.binding import bind
        from tcjit.pipeline import default_options
        from tcjit.static_profile import device_named

        sizes = bind(k.definition, inputs, None).sizes  # no options given, none tuned: the defaults
        options = default_options(k.definition, sizes, "cuda")
        record["calibration"] = cuda_calibration(spec, options)
        gpu = device_named(torch.cuda.get_device_name())
        record["prediction"] = predict_call(sk.name, sizes, options.to_json(), gpu)
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
    measured = t["timing"]["median_s"] if t["status"] == "ok" and t["timing"] else None
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
        "tcjit_predicted_over_measured": predicted_over_measured(t.get("prediction"), measured),
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
    checkpoint: Callable[[dict[str, Any]], object] | None = None,
) -> dict[str, Any]:
    """Benchmark the named suite kernels (comma-separated; all for ``None``) on ``device`` at every
    size of ``sizes_kind``; the JSON document (``"complete": True``).

    :arg checkpoint: called with the document so far (``"complete": False``) after each kernel and
        size, so that a run cut short keeps what it measured (:func:`main` writes the result files).

    Call it after ``TCJIT_CACHE_DIR`` points at a fresh directory (:func:`main` does), and for
    ``device="cuda"`` where CUDA is usable (:func:`_harness.cuda_unusable`). On CUDA it turns TF32 off
    for the rest of the process.
    """
    device_settings: dict[str, Any] = {}
    if device == "cuda":
        device_settings = {"device": device, "allow_tf32": disable_tf32()}
    results: list[dict[str, Any]] = []
    doc: dict[str, Any] = {
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
        "peaks": practical_peaks(sizes_kind, device),
        "kernels": results,
    }
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
                print(progress_line(r), file=sys.stderr, flush=True)
            if checkpoint is not None:
                checkpoint(_summarised(doc, complete=False))
    return _summarised(doc, complete=True)


def _summarised(doc: Mapping[str, Any], *, complete: bool) -> dict[str, Any]:
    """``doc`` with its geometric means over the kernels it holds, and whether it holds them all."""
    kernels = list(doc["kernels"])
    return {
        **doc,
        "kernels": kernels,
        "geomean_speedup": geomean_speedups(kernels),
        "geomean_predicted_over_measured": geomean_predicted(kernels),
        "complete": complete,
    }


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
    merged = _summarised({**first, "kernels": kernels}, complete=all(d.get("complete", True) for d in docs))
    return {**merged, "merged_from": len(docs)}


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

    def write(doc: Mapping[str, Any]) -> tuple[Path, Path]:
        out = args.out or default_out(args.device, doc["machine"].get("gpu_name"))
        return write_results(out, doc, render_markdown(doc))

    with bench_environment(args.threads):
        doc = run_suite(
            args.kernels,
            args.sizes,
            device=args.device,
            torch_compile=not args.no_compile,
            max_rounds=args.repeat,
            budget_s=args.budget,
            min_sample_s=args.min_sample_ms / 1e3,
            checkpoint=write,  # a run cut short keeps the kernels it finished
        )
    json_path, md_path = write(doc)
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    failed = [
        k["kernel"]
        for k in doc["kernels"]
        if not k["all_correct"] or k["contenders"]["tcjit"]["status"] == "error"
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
