"""Tuning through Ray, end to end: a suite kernel tuned with ``ray=ADDRESS``, every candidate compiled
and measured on Ray workers, the stored options read back and checked against torch.

Without ``--address`` the script starts a local Ray head of its own (``ray start --head --block``
in its own session, a private temporary folder, free ports, ``--num-cpus`` = this machine's CPUs)
and stops it at the end (its process group, by id); with ``--address`` it tunes on that cluster.
Options go to a private options database, kernels to a private kernel store.

Reported: how long the head took to start and the tuning took, which nodes measured how many
candidates and their architecture (that of this machine, or the run is refused), the defaults'
and the winner's times, the key's architecture and the options stored under it, and whether a
call with them computes what torch does.

    python bench/tuning_ray.py                         # writes bench/results/tuning_ray.*
    python bench/tuning_ray.py --address 10.0.0.1:6379 --kernel gconv --sizes cpu --timeout 600
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    RESULTS,
    format_seconds,
    format_sizes,
    machine_info,
    machine_markdown,
    markdown_table,
    write_results,
)

#: Seconds a local head may take to start before the script gives up.
HEAD_START_TIMEOUT = 90.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_ray_head(num_cpus: int, env: dict[str, str] | None = None) -> Iterator[str]:
    """A Ray head on this machine for the duration of the block; yields its address.

    It runs in its own session with its own temporary folder and free ports (other Ray instances
    on the machine are not touched, and ``ray stop``, which would stop them too, is never used);
    at the end its whole process group is stopped, by id.
    """
    import ray

    folder = tempfile.mkdtemp(prefix="tcjit-ray-", dir="/tmp")  # short: Ray's socket paths are long
    port = _free_port()
    ray_bin = Path(sys.executable).with_name("ray")
    cmd = [str(ray_bin), "start", "--head", "--block", f"--port={port}", f"--num-cpus={num_cpus}"]
    cmd += ["--node-ip-address=127.0.0.1", f"--temp-dir={folder}", "--include-dashboard=false"]
    cmd += ["--disable-usage-stats"]
    for option in ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port"):
        cmd.append(f"--{option}={_free_port()}")
    log = open(os.path.join(folder, "head.log"), "w+b")  # closed at the end of the block
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True
    )
    try:
        deadline = time.monotonic() + HEAD_START_TIMEOUT
        while b"Ray runtime started" not in Path(log.name).read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = Path(log.name).read_bytes()[-2000:].decode(errors="replace")
                raise RuntimeError(
                    f"the local Ray head did not start within {HEAD_START_TIMEOUT:g} s:\n{tail}"
                )
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        # `ray start --block` does not always pass SIGTERM on: the group goes, whatever is left of it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


def tune_through_ray(address: str, name: str, size_kind: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Tune suite kernel ``name`` on the cluster at ``address``; what happened, as a dict."""
    import torch

    import tcjit
    from tcjit.suite import SUITE
    from tcjit.testing import compare_outputs
    from tcjit.tuned import options_database, stored_options, tuning_key
    from tcjit.tuning import tune_kernel

    sk = SUITE[name]
    sizes = sk.small_sizes[-1] if size_kind == "small" else sk.cpu_sizes
    kernel = tcjit.define(sk.source, sk.entry)
    inputs = sk.make_inputs(sizes)
    start = time.monotonic()
    report = tune_kernel(kernel, *inputs, ray=address, **settings)
    tuned_s = time.monotonic() - start
    key = tuning_key(kernel, inputs, "cpu")
    record = options_database().get(key)
    options = stored_options(kernel, inputs, "cpu")
    got = kernel(*inputs, options=options)
    with torch.no_grad():
        want = sk.torch_ref(*inputs)
    error, correct = compare_outputs(
        got if isinstance(got, tuple) else (got,), want, sk.reduction_length(sizes)
    )
    measured = [m for _, m in report.result.measured]
    where = Counter((getattr(m, "node", ""), getattr(m, "arch", "")) for m in measured)
    return {
        "kernel": name,
        "sizes": dict(sizes),
        "settings": settings,
        "tuning_s": tuned_s,
        "stopped": report.result.stopped,
        "candidates": len(measured),
        "statuses": dict(Counter(m.status for m in measured)),
        "measured_as": sorted({type(m).__name__ for m in measured}),
        "nodes": [{"node": n, "arch": a, "candidates": c} for (n, a), c in sorted(where.items())],
        "default_time_s": report.default_time,
        "best_time_s": report.best_time,
        "speedup": report.speedup,
        "key_arch": key.arch,
        "stored": record is not None,
        "stored_options": record.options if record else None,
        # a call uses what the run decided: the tuned options, or the defaults ("use the defaults")
        "stored_options_used": (options if options is not None else report.default_options)
        == report.best_options,
        "final_rounds": None if report.verdict is None else report.verdict.to_json(),
        "correct": bool(correct),
        "max_error": error,
    }


def _final_rounds_line(final: dict | None) -> str:
    """The final rounds' verdict as one line of the results file."""
    if final is None:
        return "- final rounds: did not run"
    return (
        f"- final rounds (one Ray task, side by side): best {format_seconds(final['best_s'])} vs the "
        f"defaults {format_seconds(final['defaults_s'])}: {final['speedup']:.2f}x ({final['low']:.2f}x "
        f"to {final['high']:.2f}x per round, {final['rounds']} rounds); {final['why']}"
    )


def _markdown(doc: dict[str, Any]) -> str:
    r = doc["run"]
    lines = [
        f"# Tuning through Ray: {r['kernel']} at {format_sizes(r['sizes'])}",
        "",
        f"Ray {doc['ray_version']}, {doc['cluster']}; head started in {doc['head_start_s']:.1f} s"
        if doc["head_start_s"] is not None
        else f"Ray {doc['ray_version']}, {doc['cluster']}",
        f"Tuning ({', '.join(f'{k}={v}' for k, v in r['settings'].items())}): {r['tuning_s']:.1f} s, "
        f"{r['candidates']} candidates ({', '.join(f'{v} {k}' for k, v in r['statuses'].items())}), "
        f"stopped: {r['stopped']}; whole run {doc['total_s']:.1f} s.",
        "",
        markdown_table(
            ("node", "architecture", "candidates measured"),
            [(n["node"], n["arch"], str(n["candidates"])) for n in r["nodes"]],
        ),
        "",
        f"- defaults {format_seconds(r['default_time_s'])}, best {format_seconds(r['best_time_s'])} "
        f"({r['speedup']:.2f}x)"
        if r["speedup"]
        else "- no speed-up measured",
        f"- stored under architecture `{r['key_arch']}`: {r['stored']}; the call uses them: "
        f"{r['stored_options_used']}; matches torch: {r['correct']} (max |error| {r['max_error']:.2g})",
        f"- options: `{r['stored_options']}`",
        _final_rounds_line(r["final_rounds"]),
        "",
        "## Machine",
        "",
        machine_markdown(doc["machine"]),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", help="a running Ray cluster (default: start a local head for the run)")
    p.add_argument("--kernel", default="matmul", help="suite kernel (default matmul)")
    p.add_argument("--sizes", choices=("small", "cpu"), default="small", help="its test or benchmark sizes")
    p.add_argument("--generations", type=int, default=3)
    p.add_argument("--population", type=int, default=6)
    p.add_argument("--timeout", type=float, default=120.0, help="the search's seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS / "tuning_ray"), help="results file stem (.json and .md)")
    args = p.parse_args(argv)
    started = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="tcjit-bench-ray-")
    # Private stores; the head's workers inherit them (on a cluster, each node has its own).
    env = {"TCJIT_CACHE_DIR": os.path.join(scratch, "kernels"), "RAY_AUTH_MODE": "disabled"}
    os.environ.update(env)
    os.environ["TCJIT_OPTIONS_DB"] = os.path.join(scratch, "options.sqlite3")
    import ray

    settings = {"generations": args.generations, "population": args.population}
    settings.update(timeout=args.timeout, seed=args.seed)
    with contextlib.ExitStack() as stack:
        head_start = None
        address = args.address
        if address is None:
            address = stack.enter_context(local_ray_head(os.cpu_count() or 1, env))
            head_start = time.monotonic() - started
        run = tune_through_ray(address, args.kernel, args.sizes, settings)
    doc = {
        "ray_version": ray.__version__,
        "cluster": f"the cluster at {args.address}" if args.address else "a local head started for the run",
        "head_start_s": head_start,
        "total_s": time.monotonic() - started,
        "run": run,
        "machine": machine_info(),
    }
    for path in write_results(args.out, doc, _markdown(doc)):
        print(f"wrote {path}")
    print(_markdown(doc).split("\n## Machine")[0])
    shutil.rmtree(scratch, ignore_errors=True)
    return 0 if run["correct"] and run["stored"] else 1


if __name__ == "__main__":
    sys.exit(main())
