"""How long the first call of a tcjit kernel takes in a new process: cold, and from the disk cache.

For each suite kernel (at its CPU sizes by default), two fresh Python processes run one after the
other with the same, initially empty, ``TCJIT_CACHE_DIR``:

1. *cold*: nothing is cached; the kernel is parsed, scheduled, compiled and stored.
2. *disk hit*: the compiled kernel is in the on-disk cache; it should only be loaded.

In each, the clock starts after ``import torch, tcjit`` and the creation of the inputs
(``make_inputs``, fixed seed) and stops when ``tcjit.define(source, name=entry)(*inputs)`` returns:
parsing, checking, compiling (or loading) and one execution. The import time, the time of
``define`` alone and the whole process's wall time are recorded beside it. The disk-hit process also
reports whether ``islpy`` was imported by the call (``"islpy" in sys.modules`` before and after it):
a hit should not need the polyhedral machinery. Both processes check the result against
``torch_ref`` with ``tcjit.testing.tolerance``.

With ``--repeat N`` each pair runs N times, each with a new empty cache directory, and the medians
are reported. Targets, printed next to the numbers: cold < 1.5 s (fcrelu < 1 s), disk hit < 50 ms,
both as *latencies*: the first result minus one steady-state run of the kernel (the median of three
more calls in the same process), what compiling or the cache costs, not what the kernel computes
(gconv runs for about half a second at the CPU sizes). The raw first results are reported too.
The processes run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed, the packages
compiled first), as an installed package would.

    python bench/compile_latency.py                    # writes bench/results/compile_latency.{json,md}
    python bench/compile_latency.py --kernels fcrelu --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from _harness import (
    RESULTS,
    SIZE_KINDS,
    describe_error,
    format_seconds,
    format_sizes,
    machine_info,
    machine_markdown,
    markdown_table,
    select_kernels,
    sizes_for,
    write_results,
)

COLD_TARGET_S = 1.5
COLD_TARGET_S_FOR = {"fcrelu": 1.0}
DISK_HIT_TARGET_S = 0.05
DEFAULT_TIMEOUT_S = 600.0


def cold_target(kernel: str) -> float:
    """The cold-compile target for ``kernel`` (seconds)."""
    return COLD_TARGET_S_FOR.get(kernel, COLD_TARGET_S)


# ======================================================================================== child
def child(kernel: str, sizes_kind: str, out: Path) -> None:
    """Run in a fresh process: time one kernel's first result and write the measurement to ``out``."""
    t_start = time.perf_counter()
    import torch

    import tcjit
    from tcjit import suite
    from tcjit.testing import tolerance

    t_imported = time.perf_counter()
    sk = suite.get(kernel)
    sizes = sizes_for(sk, sizes_kind)
    inputs = sk.make_inputs(sizes)
    islpy_before = "islpy" in sys.modules
    record: dict[str, Any] = {"import_s": t_imported - t_start, "islpy_before_call": islpy_before}
    try:
        t0 = time.perf_counter()
        k = tcjit.define(sk.source, name=sk.entry)
        t1 = time.perf_counter()
        result = k(*inputs)
        t2 = time.perf_counter()
        runs = []
        for _ in range(3):  # the kernel's own run time, to tell loading from computing
            t3 = time.perf_counter()
            k(*inputs)
            runs.append(time.perf_counter() - t3)
    except Exception as e:
        record["error"] = describe_error(e)
    else:
        run_s = statistics.median(runs)
        record.update(
            define_s=t1 - t0,
            first_result_s=t2 - t0,
            run_s=run_s,
            latency_s=max(0.0, t2 - t0 - run_s),
            islpy_after_call="islpy" in sys.modules,
        )
        got = result if isinstance(result, tuple) else (result,)
        want = sk.torch_ref(*inputs)
        try:
            tol = tolerance(torch.float32, sk.reduction_length(sizes))
            assert len(got) == len(want), f"{len(got)} outputs, the reference has {len(want)}"
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, **tol)
            record["correct"] = True
        except AssertionError as e:
            record.update(correct=False, check_error=describe_error(e))
    out.write_text(json.dumps(record))


# ======================================================================================== parent
def _run_child(kernel: str, sizes_kind: str, cache_dir: Path, timeout_s: float) -> dict[str, Any]:
    """One fresh process measuring ``kernel`` with ``TCJIT_CACHE_DIR=cache_dir``; its record."""
    env = {**os.environ, "TCJIT_CACHE_DIR": str(cache_dir)}
    # an installed package has its bytecode compiled (pip does it): so do the measured processes
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="tcjit-latency-") as d:
        out = Path(d) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kernel, "--sizes", sizes_kind]
        cmd += ["--child-out", str(out)]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout_s:g} s", "process_s": time.perf_counter() - t0}
        process_s = time.perf_counter() - t0
        if proc.returncode != 0 or not out.exists():
            tail = " ".join(proc.stderr.split()[-60:])
            return {"error": f"child exited with {proc.returncode}: {tail}", "process_s": process_s}
        record = json.loads(out.read_text())
    record["process_s"] = process_s
    return record


def _median(runs: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def measure_kernel(kernel: str, sizes_kind: str, *, repeat: int, timeout_s: float) -> dict[str, Any]:
    """``repeat`` (cold, disk hit) pairs of processes for one kernel, each pair on a new cache."""
    from tcjit import suite

    sk = suite.get(kernel)
    cold_runs, hit_runs = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="tcjit-latency-cache-") as cache:
            cold_runs.append(_run_child(kernel, sizes_kind, Path(cache), timeout_s))
            hit_runs.append(_run_child(kernel, sizes_kind, Path(cache), timeout_s))
    cold, hit = _median(cold_runs, "latency_s"), _median(hit_runs, "latency_s")
    errors = [r["error"] for r in cold_runs + hit_runs if r.get("error")]
    measured = [r for r in hit_runs if "islpy_after_call" in r]
    islpy = [r["islpy_after_call"] for r in measured]
    islpy_by_call = [r["islpy_after_call"] and not r["islpy_before_call"] for r in measured]
    checks = [r["correct"] for r in cold_runs + hit_runs if "correct" in r]
    return {
        "kernel": kernel,
        "sizes": sizes_for(sk, sizes_kind),
        "cold_s": cold,
        "cold_first_result_s": _median(cold_runs, "first_result_s"),
        "disk_hit_s": hit,
        "disk_hit_first_result_s": _median(hit_runs, "first_result_s"),
        "run_s": _median(hit_runs, "run_s"),
        "cold_target_s": cold_target(kernel),
        "disk_hit_target_s": DISK_HIT_TARGET_S,
        "cold_meets_target": None if cold is None else cold < cold_target(kernel),
        "disk_hit_meets_target": None if hit is None else hit < DISK_HIT_TARGET_S,
        "islpy_imported_on_disk_hit": any(islpy) if islpy else None,
        "islpy_imported_by_disk_hit_call": any(islpy_by_call) if islpy_by_call else None,
        "correct": all(checks) if checks else None,
        "errors": errors,
        "cold_runs": cold_runs,
        "disk_hit_runs": hit_runs,
    }


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The result document as markdown: machine facts, the table, errors."""

    def vs(value: float | None, target: float) -> str:
        if value is None:
            return "error"
        return f"{format_seconds(value)} {'✓' if value < target else '✗'} (< {format_seconds(target)})"

    def yes_no(x: bool | None) -> str:
        return "—" if x is None else ("yes" if x else "no")

    rows = []
    notes = []
    for r in doc["kernels"]:
        runs = r["cold_runs"] + r["disk_hit_runs"]
        rows.append(
            [
                r["kernel"],
                format_sizes(r["sizes"]),
                vs(r["cold_s"], r["cold_target_s"]),
                format_seconds(r.get("cold_first_result_s")),
                vs(r["disk_hit_s"], r["disk_hit_target_s"]),
                format_seconds(r.get("disk_hit_first_result_s")),
                format_seconds(r.get("run_s")),
                yes_no(r["islpy_imported_on_disk_hit"]),
                format_seconds(_median(r["cold_runs"], "define_s")),
                format_seconds(_median(runs, "import_s")),
                format_seconds(_median(r["cold_runs"], "process_s")),
                yes_no(r["correct"]),
            ]
        )
        notes += [f"- {r['kernel']}: {e}" for e in r["errors"]]
    header = [
        "kernel",
        "sizes",
        "cold: latency (target)",
        "cold: first result",
        "disk hit: latency (target)",
        "disk hit: first result",
        "one run",
        "islpy on disk hit",
        "define",
        "import torch, tcjit",
        "cold process",
        "correct",
    ]
    s = doc["settings"]
    parts = [
        "# Compile latency: first result in a fresh process",
        "",
        machine_markdown(doc["machine"]),
        f"- sizes: {s['sizes']}; {s['repeat']} (cold, disk hit) pair(s) of processes per kernel, medians",
        "",
        markdown_table(header, rows),
        "",
        "Cold: empty `TCJIT_CACHE_DIR`; disk hit: a second process on the same directory. Both time "
        "`tcjit.define(...)(*inputs)` after the imports and the inputs' creation (parse, check, compile "
        "or load, one execution). Each *latency* is that first result minus one run of the kernel "
        "(the median of three later calls in the same process; `one run` shows the disk-hit "
        "process's; at these sizes a run takes up to a second, which neither a compiler nor a cache "
        "can save): what compiling, or loading from the cache, costs before the kernel starts. "
        "`islpy on disk hit`: whether `islpy` was in `sys.modules` after the disk-hit call. "
        "`cold process`: the whole cold process, interpreter start-up included. "
        "The processes may write Python bytecode caches, as an installed package has them.",
    ]
    if notes:
        parts += ["", "## Errors", "", *notes]
    return "\n".join(parts)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", default=None, help="comma-separated suite kernels (default: all)")
    p.add_argument("--sizes", choices=SIZE_KINDS, default="cpu", help="cpu sizes or the first small size")
    p.add_argument("--repeat", type=int, default=1, help="(cold, disk hit) pairs per kernel; medians")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per process")
    p.add_argument(
        "--out", type=Path, default=RESULTS / "compile_latency", help="writes <out>.json and <out>.md"
    )
    p.add_argument("--child", metavar="KERNEL", help=argparse.SUPPRESS)
    p.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child(args.child, args.sizes, args.child_out)
        return 0
    kernels = [sk.name for sk in select_kernels(args.kernels)]
    results = []
    import compileall

    root = Path(__file__).resolve().parent.parent
    for pkg in ("tcjit", "polyhedral", "mapping", "cache", "genetic"):
        if (root / pkg).is_dir():
            compileall.compile_dir(root / pkg, quiet=1)
    for name in kernels:
        r = measure_kernel(name, args.sizes, repeat=args.repeat, timeout_s=args.timeout)
        results.append(r)
        print(
            f"{name:<11} cold {format_seconds(r['cold_s'])}, disk hit {format_seconds(r['disk_hit_s'])}, "
            f"islpy on hit: {r['islpy_imported_on_disk_hit']}, correct: {r['correct']}",
            file=sys.stderr,
            flush=True,
        )
    doc = {
        "benchmark": "compile_latency",
        "machine": machine_info(),
        "settings": {"sizes": args.sizes, "repeat": args.repeat, "timeout_s": args.timeout},
        "targets": {
            "cold_s": COLD_TARGET_S,
            "cold_s_for": COLD_TARGET_S_FOR,
            "disk_hit_s": DISK_HIT_TARGET_S,
        },
        "kernels": results,
    }
    json_path, md_path = write_results(args.out, doc, render_markdown(doc))
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    return 1 if any(r["errors"] or r["correct"] is False for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
