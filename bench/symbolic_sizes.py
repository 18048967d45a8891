"""Symbolic sizes against specialised ones, on the CPU or a GPU: what a kernel that serves every
batch size costs against one compiled for the exact sizes of the call (issue 34's speed target:
within 10% in geometric mean with the batch size symbolic; every size symbolic is reported too).

For each kernel of :mod:`tcjit.suite` at its CPU sizes (float32, contiguous, ``make_inputs``' fixed
seed), in this one process, with a fresh empty kernel cache:

- ``specialised``: ``tcjit.define(source, name=entry, dynamic=False)``: one kernel per layout, the
  sizes fixed before code generation;
- ``batch``: ``dynamic=[B]`` where ``B`` is the kernel's first size (its batch or leading size): that
  size symbolic from the first call, the others fixed;
- ``all``: ``dynamic=True``: every size symbolic;
- ``eager``: ``kernel.torch_ref``; ``compile``: ``torch.compile(kernel.torch_ref, dynamic=True)``
  (Inductor's kernels for symbolic sizes; ``--no-compile`` leaves it out).

Each kernel is measured at two points: ``at``, the suite's CPU sizes, which are also the sizes the
symbolic kernels are first called with (their *representative* sizes, where their mapping choices
are made), and ``off``, the same with the first size halved plus one (3 for 1 and 2; a value the symbolic
kernels were not chosen for, as a short last batch is). The symbolic kernels are built once, at
``at``; at ``off`` they must compile nothing (``tcjit.compile_counts()`` is checked), while the
specialised kernel compiles for it. Every contender's outputs are compared with ``torch_ref``'s
(``tcjit.testing.tolerance``) before it is timed; timing is interleaved (``bench/_harness.py``),
under ``torch.no_grad()``. The figure per point is each symbolic kernel's time over the specialised
kernel's (< 1 is faster), with their geometric means over the kernels.

``--device cuda`` runs the same on the GPU at each kernel's first GPU size (the inputs made as on
the CPU and moved to the device): the tcjit kernels are CUDA kernels, whose symbolic forms compute
their grids per launch; every timed sample synchronises the device before each clock read, and TF32
is off (as in ``bench/cpu_suite.py --device cuda``). Without a usable GPU it exits with status 2
and one line. Results go to ``bench/results/symbolic_sizes_<GPU name>``.

    python bench/symbolic_sizes.py                     # bench/results/symbolic_sizes.{json,md}
    python bench/symbolic_sizes.py --kernels matmul,softmax --budget 0.5 --no-compile --out /tmp/sym
    python bench/symbolic_sizes.py --device cuda --no-compile  # bench/results/symbolic_sizes_<gpu>.*
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from _harness import (
    RESULTS,
    as_tuple,
    bench_environment,
    check_outputs,
    cuda_unusable,
    describe_error,
    device_sync,
    disable_tf32,
    format_seconds,
    format_sizes,
    interleaved,
    machine_info,
    machine_markdown,
    markdown_table,
    select_kernels,
    sizes_for,
    slug,
    write_results,
)

SYMBOLIC = ("batch", "all")
CONTENDERS = ("specialised", *SYMBOLIC, "eager", "compile")
DEFAULT_SIZES = {"cpu": "cpu", "cuda": "gpu"}
"""The suite's sizes each ``--device`` runs at unless ``--sizes`` says otherwise."""


def default_out(device: str, gpu_name: str | None = None) -> Path:
    """Where results go without ``--out``: ``bench/results/symbolic_sizes`` on the CPU,
    ``bench/results/symbolic_sizes_<slug of the GPU's name>`` on a GPU."""
    if device == "cuda":
        return RESULTS / f"symbolic_sizes_{slug(gpu_name or 'unknown')}"
    return RESULTS / "symbolic_sizes"


def _points(sizes: Mapping[str, int], lead: str) -> dict[str, dict[str, int]]:
    off = sizes[lead] // 2 + 1
    return {"at": dict(sizes), "off": {**sizes, lead: off if off != sizes[lead] else off + 2}}


def bench_kernel(
    sk,
    *,
    torch_compile: bool,
    budget_s: float,
    max_rounds: int,
    sizes_kind: str = "cpu",
    device: str = "cpu",
) -> dict[str, Any]:
    """Check and time the contenders on one kernel at its two points on ``device``; its record."""
    import torch

    import tcjit
    from tcjit.testing import tolerance

    lead = sk.checked.sizes[0]
    kernels = {
        "specialised": tcjit.define(sk.source, name=sk.entry, dynamic=False),
        "batch": tcjit.define(sk.source, name=sk.entry, dynamic=[lead]),
        "all": tcjit.define(sk.source, name=sk.entry, dynamic=True),
    }
    # every suite kernel's torch_ref is one code object: reset, or dynamo's recompile limit sends
    # later kernels to eager
    torch._dynamo.reset()
    compiled = torch.compile(sk.torch_ref, dynamic=True) if torch_compile else None
    record: dict[str, Any] = {"kernel": sk.name, "symbolic_batch_size": lead, "points": {}}
    for point, sizes in _points(sizes_for(sk, sizes_kind), lead).items():
        inputs = sk.make_inputs(sizes, device=device)
        want = as_tuple(sk.torch_ref(*inputs))
        tol = tolerance(torch.float32, sk.reduction_length(sizes))
        timed: dict[str, Callable[[], object]] = {}
        contenders: dict[str, dict[str, Any]] = {}
        with torch.no_grad():
            for name, fn in (
                *((name, (lambda k=k, x=inputs: k(*x))) for name, k in kernels.items()),
                ("eager", lambda x=inputs: sk.torch_ref(*x)),
                *((("compile", lambda x=inputs: compiled(*x)),) if compiled is not None else ()),
            ):
                before = tcjit.compile_counts()["compiled"]
                try:
                    result = fn()
                except Exception as e:
                    contenders[name] = {"status": "error", "error": describe_error(e)}
                    continue
                check = check_outputs(as_tuple(result), want, tol)
                contenders[name] = {
                    "status": "ok",
                    "correct": check.correct,
                    "max_abs_error": check.max_abs_err,
                    "message": check.message,
                    "compiled": tcjit.compile_counts()["compiled"] - before,
                }
                timed[name] = fn
            timings = interleaved(timed, max_rounds=max_rounds, budget_s=budget_s, sync=device_sync(device))
        for name, timing in timings.items():
            contenders[name]["timing"] = timing.to_json()
        spec = contenders["specialised"].get("timing")
        ratios = {}
        for name in (*SYMBOLIC, "eager", "compile"):
            t = contenders.get(name, {}).get("timing")
            ratios[name] = None if t is None or spec is None else t["median_s"] / spec["median_s"]
        record["points"][point] = {"sizes": sizes, "contenders": contenders, "over_specialised": ratios}
    return record


def _geomean(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def summarise(doc: dict[str, Any]) -> dict[str, Any]:
    """The geometric means of each symbolic kernel's time over the specialised kernel's, per point."""
    doc["geomean_over_specialised"] = {
        point: {
            name: _geomean([k["points"][point]["over_specialised"][name] for k in doc["kernels"]])
            for name in (*SYMBOLIC, "eager", "compile")
        }
        for point in ("at", "off")
    }
    doc["symbolic_compiled_off_representative"] = sum(
        k["points"]["off"]["contenders"][name].get("compiled", 0) for k in doc["kernels"] for name in SYMBOLIC
    )
    return doc


def markdown(doc: Mapping[str, Any]) -> str:
    """The result table: per kernel and point, the specialised time and each contender's ratio."""

    def ratio(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    rows = []
    for k in doc["kernels"]:
        for point, p in k["points"].items():
            spec = p["contenders"]["specialised"].get("timing")
            wrong = [n for n, c in p["contenders"].items() if c.get("correct") is False]
            rows.append(
                [
                    k["kernel"],
                    point,
                    format_sizes(p["sizes"]),
                    format_seconds(spec["median_s"] if spec else None),
                    *(ratio(p["over_specialised"][n]) for n in (*SYMBOLIC, "eager", "compile")),
                    ", ".join(wrong) or "",
                ]
            )
    means = doc["geomean_over_specialised"]
    for point in ("at", "off"):
        rows.append(
            [
                "**geomean**",
                point,
                "",
                "",
                *(ratio(means[point][n]) for n in (*SYMBOLIC, "eager", "compile")),
                "",
            ]
        )
    table = markdown_table(
        ["kernel", "point", "sizes", "specialised", "batch / spec.", "all / spec.", "eager / spec.",
         "compile / spec.", "wrong"],
        rows,
    )  # fmt: skip
    return (
        f"# Symbolic sizes against specialised kernels ({_where(doc)})\n\n"
        + "Times over the specialised kernel's (< 1: faster). `at`: the sizes the symbolic kernels were "
        "first called with (their representative sizes); `off`: the first size halved plus one, which "
        "they serve without compiling. `compile`: torch.compile(dynamic=True). Written by "
        "`bench/symbolic_sizes.py`.\n\n"
        + table
        + "\n\nGeometric mean over the specialised kernels: "
        + "; ".join(
            f"{point}: batch {ratio(means[point]['batch'])}, all {ratio(means[point]['all'])}"
            for point in ("at", "off")
        )
        + f"\n\nSymbolic kernels compiled at `off`: {doc['symbolic_compiled_off_representative']} "
        "(must be 0).\n\n"
        + "".join(f"- **{e['kernel']} failed**: {e['error']}\n" for e in doc.get("errors", ()))
        + ("\n" if doc.get("errors") else "")
        + (
            ""
            if doc.get("complete", True)
            else "**incomplete**: the run was cut short or is still going.\n\n"
        )
        + machine_markdown(doc["machine"])
    )


def _where(doc: Mapping[str, Any]) -> str:
    """The device a result document was measured on, for its title."""
    if doc.get("settings", {}).get("device") == "cuda":
        return f"GPU: {doc['machine'].get('gpu_name') or 'unknown'}, TF32 off"
    return "CPU"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="symbolic against specialised kernels, on the CPU or a GPU")
    p.add_argument("--device", choices=tuple(DEFAULT_SIZES), default="cpu", help="where the kernels run")
    p.add_argument("--kernels", default=None, help="comma-separated suite kernels (default: all)")
    p.add_argument("--budget", type=float, default=2.0, help="seconds of timing per contender and point")
    p.add_argument("--repeat", type=int, default=15, help="at most this many rounds")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument(
        "--sizes",
        choices=("cpu", "gpu", "small"),
        default=None,
        help="the suite's CPU sizes, its first GPU sizes, or small ones "
        "(default: cpu, or gpu with --device cuda)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="writes <out>.json and <out>.md (default: bench/results/symbolic_sizes, or "
        "bench/results/symbolic_sizes_<GPU name> with --device cuda)",
    )
    args = p.parse_args(argv)
    sizes_kind = args.sizes or DEFAULT_SIZES[args.device]
    device_settings: dict[str, Any] = {}
    if args.device == "cuda":
        why = cuda_unusable()
        if why is not None:
            print(f"symbolic_sizes.py: --device cuda: {why}", file=sys.stderr)
            return 2
        device_settings = {"device": "cuda", "allow_tf32": disable_tf32()}
    with bench_environment(args.threads):
        doc: dict[str, Any] = {
            "benchmark": "symbolic_sizes",
            "machine": machine_info(args.device),
            "settings": {
                "budget_s": args.budget,
                "max_rounds": args.repeat,
                "torch_compile": not args.no_compile,
                "sizes": sizes_kind,
                **device_settings,
            },
            "kernels": [],
            "errors": [],
            "complete": False,
        }
        out = args.out or default_out(args.device, doc["machine"].get("gpu_name"))
        for sk in select_kernels(args.kernels):
            try:
                record = bench_kernel(
                    sk,
                    torch_compile=not args.no_compile,
                    budget_s=args.budget,
                    max_rounds=args.repeat,
                    sizes_kind=sizes_kind,
                    device=args.device,
                )
            except Exception as e:  # one kernel's failure is recorded, the others go on
                doc["errors"].append({"kernel": sk.name, "error": describe_error(e)})
                print(f"{sk.name}: {doc['errors'][-1]['error']}", file=sys.stderr)
                continue
            doc["kernels"].append(record)
            at, off = record["points"]["at"]["over_specialised"], record["points"]["off"]["over_specialised"]
            print(
                f"{sk.name:12s} at: batch {at['batch'] or 0:.3f} all {at['all'] or 0:.3f}   "
                f"off: batch {off['batch'] or 0:.3f} all {off['all'] or 0:.3f}",
                file=sys.stderr,
                flush=True,
            )
            write_results(out, summarise(doc), markdown(doc))  # a run cut short keeps what it measured
        doc["complete"] = True
        write_results(out, summarise(doc), markdown(doc))
    print(f"wrote {out}.json and {out}.md ({os.cpu_count()} CPUs)", file=sys.stderr)
    wrong = [
        k["kernel"]
        for k in doc["kernels"]
        for p in k["points"].values()
        if any(c.get("correct") is False for c in p["contenders"].values())
    ]
    return 1 if doc["errors"] or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
