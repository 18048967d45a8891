"""Training steps through tcjit kernels against torch eager and torch.compile: forward and backward.

A *step* is what a training loop does with one kernel: the forward of all its outputs with the
parameters requiring grad, a scalar loss, and the backward to every parameter (``p.grad`` set to
``None`` before each step, as ``optimizer.zero_grad()`` does). The loss is the sum of the last output
(``O3`` for mlp3, ``O`` for gconv), whose gradient autograd hands the backward as one element
expanded to the output's shape (every stride 0), or, in the ``dense`` cases, the sum of the last
output times a fixed random tensor of its shape: a gradient with a value per element, as a mean
squared error or a cross-entropy gives. Five cases, at the suite's CPU sizes (KERNELS.md, float32,
``make_inputs``' fixed seed):

- ``mlp3``, ``mlp3 dense``: gradients of the weights and biases ``W1, B1, W2, B2, W3, B3`` (not of
  the batch ``I``);
- ``gconv``, ``gconv dense``: gradient of the weights ``W1``;
- ``gconv +dI``: gradients of ``W1`` and of the input ``I`` (the convolution's input-gradient path).

Contenders, in one process:

- ``tcjit``: ``tcjit.define(source, name=entry)`` with default options (the options database is
  disabled: ``TCJIT_OPTIONS_DB=""``) and its derived backward (``backward="auto"``); the on-disk
  kernel cache is a fresh empty directory, and the first step, which compiles the augmented forward
  and the backward kernel, is timed apart as the setup;
- ``eager``: the suite's ``torch_ref`` (``nn.functional.linear`` + ``relu`` for mlp3,
  ``nn.functional.conv2d(..., groups=G)`` for gconv) with torch's autograd;
- ``compile``: ``torch.compile`` of the loss function (forward and loss; AOTAutograd compiles the
  backward), after ``torch._dynamo.reset()``.

Each contender's gradients are compared with float64 gradients (torch eager on the inputs converted
to float64) at ``tcjit.testing.tolerance(float32, n)``, ``n`` the longest reduction of the backward
(the batch for mlp3, ``N * OH * OW`` for gconv's weight gradient); a contender that disagrees is
still timed but marked wrong. Steps are timed interleaved (``bench/_harness.py``: one sample of each
contender per round, the median over rounds).

Then the *breakdown*: the parts of a step timed separately, interleaved with each other: tcjit's
plain forward (what a call under ``torch.no_grad()`` runs), its augmented forward (the outputs and
the intermediates the backward reads: ``kernel.grad_plan().forward``), its derived backward for the
case's gradients (``kernel.grad_plan().backward_for(needs)``) and for each gradient alone; torch's
forward while recording the graph and its backward (``torch.autograd.grad`` on a kept graph), for all
the gradients and for each alone. Their TC text (``tcjit.derived.derivation``) goes into the result
files too.

    python bench/training_step.py                      # writes bench/results/training_step_cpu.{json,md}
    python bench/training_step.py --sizes small --repeat 2 --budget 0.01 --no-compile --out /tmp/ts
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _harness import (
    DEFAULT_MIN_SAMPLE_S,
    RESULTS,
    SIZE_KINDS,
    as_tuple,
    bench_environment,
    check_outputs,
    describe_error,
    format_seconds,
    format_sizes,
    interleaved,
    machine_info,
    machine_markdown,
    markdown_table,
    sizes_for,
    write_results,
)

CONTENDERS = ("tcjit", "eager", "compile")
"""The contenders of the step comparison, in the order of the result tables."""

TARGET_SPEEDUP = 1.0
"""Issue 7's target: a tcjit step at least as fast as torch eager's (default options)."""

DEFAULT_REPEAT = 15
DEFAULT_BUDGET_S = 10.0


@dataclass(frozen=True)
class Case:
    """One benchmarked training step.

    :ivar label: how the results name it.
    :ivar kernel: the suite kernel.
    :ivar wanted: the inputs whose gradients the step computes.
    :ivar dense: the loss weighs the last output by a fixed random tensor (:func:`loss_weight`), so
        that its gradient is dense, instead of summing it (an expanded gradient).
    """

    label: str
    kernel: str
    wanted: tuple[str, ...]
    dense: bool = False


MLP3_PARAMS = ("W1", "B1", "W2", "B2", "W3", "B3")
CASES = (
    Case("mlp3", "mlp3", MLP3_PARAMS),
    Case("mlp3 dense", "mlp3", MLP3_PARAMS, dense=True),
    Case("gconv", "gconv", ("W1",)),
    Case("gconv dense", "gconv", ("W1",), dense=True),
    Case("gconv +dI", "gconv", ("I", "W1")),
)

LOSS_WEIGHT_SEED = 7
"""The seed of the dense cases' loss weights."""


def loss_weight(sk, inputs: Sequence, case: Case):
    """The tensor a dense case's loss multiplies the last output by (standard normal values, of its
    shape and dtype, from :data:`LOSS_WEIGHT_SEED`), or None for a loss that sums it."""
    import torch

    if not case.dense:
        return None
    with torch.no_grad():
        out = as_tuple(sk.torch_ref(*inputs))[-1]
    g = torch.Generator().manual_seed(LOSS_WEIGHT_SEED)
    return torch.randn(out.shape, generator=g, dtype=out.dtype)


def _loss(out, weight):
    """The case's scalar loss of the last output ``out``."""
    return out.sum() if weight is None else (out * weight).sum()


def backward_reduction_length(kernel: str, sizes: Mapping[str, int]) -> int:
    """The longest reduction of the backward: what the gradients' tolerance grows with."""
    if kernel == "mlp3":  # weight gradients sum over the batch, input gradients over a layer's width
        return max(sizes["B"], sizes["N"], sizes["P"], sizes["Q"])
    if kernel == "gconv":  # d_W1 sums over N * OH * OW, d_I over F * KH * KW
        oh, ow = sizes["H"] - sizes["KH"] + 1, sizes["W"] - sizes["KW"] + 1
        return max(sizes["N"] * oh * ow, sizes["F"] * sizes["KH"] * sizes["KW"])
    raise ValueError(f"no backward reduction length for {kernel}")


# =========================================================================================== steps
def _leaves(inputs: Sequence, names: Sequence[str], wanted: Sequence[str]) -> list:
    """Fresh copies of ``inputs``, those named in ``wanted`` requiring grad."""
    return [x.detach().clone().requires_grad_(n in wanted) for x, n in zip(inputs, names)]


def _step_fn(loss_fn: Callable[..., Any], leaves: Sequence, wanted_leaves: Sequence) -> Callable[[], None]:
    def step() -> None:
        for p in wanted_leaves:
            p.grad = None
        loss_fn(*leaves).backward()

    return step


def _grads(wanted_leaves: Sequence) -> tuple:
    return tuple(p.grad for p in wanted_leaves)


def _record(status: str, *, error: str | None = None, setup_s: float | None = None) -> dict[str, Any]:
    return {"status": status, "correct": None, "error": error, "max_abs_err": None, "setup_s": setup_s}


def _ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    if a.get("timing") is None or b.get("timing") is None:
        return None
    return a["timing"]["median_s"] / b["timing"]["median_s"]


def reference_grads(sk, inputs: Sequence, case: Case, weight=None) -> tuple:
    """The gradients of the case's loss (``weight``: :func:`loss_weight`) in float64 (torch eager),
    converted to float32, in input order."""
    names = sk.checked.params
    leaves = _leaves([x.double() for x in inputs], names, case.wanted)
    _loss(as_tuple(sk.torch_ref(*leaves))[-1], None if weight is None else weight.double()).backward()
    return tuple(x.grad.float() for x, n in zip(leaves, names) if n in case.wanted)


def bench_case(
    case: Case,
    sizes: Mapping[str, int],
    *,
    torch_compile: bool,
    max_rounds: int,
    budget_s: float,
    min_sample_s: float,
) -> dict[str, Any]:
    """Check and time one training step per contender, then the breakdown; the case's record."""
    import torch

    import tcjit
    from tcjit import suite
    from tcjit.derived import derivation
    from tcjit.testing import tolerance

    sk = suite.get(case.kernel)
    names = sk.checked.params
    inputs = sk.make_inputs(sizes)
    n_red = backward_reduction_length(case.kernel, sizes)
    tol = tolerance(torch.float32, n_red)
    weight = loss_weight(sk, inputs, case)
    want = reference_grads(sk, inputs, case, weight)

    kernel = tcjit.define(sk.source, name=sk.entry)
    compiled = None
    if torch_compile:
        torch._dynamo.reset()
        compiled = torch.compile(lambda *x: _loss(as_tuple(sk.torch_ref(*x))[-1], weight))
    loss_fns: dict[str, Callable[..., Any] | None] = {
        "tcjit": lambda *x: _loss(as_tuple(kernel(*x))[-1], weight),
        "eager": lambda *x: _loss(as_tuple(sk.torch_ref(*x))[-1], weight),
        "compile": compiled,
    }
    records: dict[str, dict[str, Any]] = {}
    steps: dict[str, Callable[[], None]] = {}
    for name in CONTENDERS:
        loss_fn = loss_fns[name]
        if loss_fn is None:
            records[name] = _record("skipped", error="--no-compile")
            continue
        leaves = _leaves(inputs, names, case.wanted)
        wanted_leaves = [x for x, n in zip(leaves, names) if n in case.wanted]
        step = _step_fn(loss_fn, leaves, wanted_leaves)
        try:
            t0 = time.perf_counter()
            step()  # the first step compiles (tcjit: forward and backward; torch.compile: both graphs)
            setup_s = time.perf_counter() - t0
        except Exception as e:
            records[name] = _record("error", error=describe_error(e))
            continue
        check = check_outputs(_grads(wanted_leaves), want, tol)
        records[name] = {
            **_record("ok" if check.correct else "wrong", setup_s=setup_s),
            "correct": check.correct,
            "max_abs_err": check.max_abs_err,
            "error": check.message or None,
        }
        steps[name] = step
    timings = interleaved(steps, max_rounds=max_rounds, budget_s=budget_s, min_sample_s=min_sample_s)
    for name, timing in timings.items():
        records[name]["timing"] = timing.to_json()
    t, e, c = records["tcjit"], records["eager"], records["compile"]
    over_eager, over_compile = _ratio(t, e), _ratio(t, c)
    result: dict[str, Any] = {
        "case": case.label,
        "kernel": case.kernel,
        "sizes": dict(sizes),
        "wanted": list(case.wanted),
        "loss": f"sum of {sk.checked.outputs[-1]}" + (" times a fixed random tensor" if case.dense else ""),
        "backward_reduction_length": n_red,
        "tolerance": tol,
        "all_correct": all(r["correct"] is not False for r in records.values()),
        "contenders": records,
        "tcjit_over_eager": over_eager,
        "speedup_vs_eager": None if over_eager is None else 1 / over_eager,
        "tcjit_over_compile": over_compile,
        "speedup_vs_compile": None if over_compile is None else 1 / over_compile,
        "meets_target": None if over_eager is None else 1 / over_eager >= TARGET_SPEEDUP,
    }
    if t["status"] in ("ok", "wrong"):
        try:
            result["breakdown"] = breakdown(
                kernel,
                sk,
                inputs,
                case,
                weight,
                max_rounds=max_rounds,
                budget_s=budget_s,
                min_sample_s=min_sample_s,
            )
        except Exception as err:  # a part that fails is reported, the step figures stand
            result["breakdown_error"] = describe_error(err)
        d = derivation(kernel, case.wanted)
        result["derived_tc"] = {"forward": d.forward, "backward": d.backward}
    return result


# ======================================================================================= breakdown
def breakdown(
    kernel,
    sk,
    inputs: Sequence,
    case: Case,
    weight=None,
    *,
    max_rounds: int,
    budget_s: float,
    min_sample_s: float,
) -> list[dict[str, Any]]:
    """The parts of a step, timed interleaved: tcjit's plain and augmented forward and derived
    backward kernels (for all the case's gradients, and for each alone when there are several), and
    torch's recording forward and backward (likewise). One record per part. The backward kernels
    get the gradient the step's loss gives (``weight``: :func:`loss_weight`)."""
    import torch

    names = list(sk.checked.params)
    plan = kernel.grad_plan()
    n_out = len(kernel.outputs)
    with torch.no_grad():
        fwd = as_tuple(plan.forward(*inputs))
    outs = fwd[:n_out]
    # The step's output gradients: for the last output what autograd passes (one expanded 1 for a
    # sum, the weight for a dense loss), zeros for the others (what GradPlan.grads passes for an
    # output that received no gradient).
    last = torch.ones((), dtype=outs[-1].dtype).expand_as(outs[-1]) if weight is None else weight
    grad_outs = [torch.zeros_like(o) for o in outs[:-1]] + [last]

    def needs_of(wanted: Sequence[str]) -> tuple[bool, ...]:
        return tuple(n in wanted for n in names)

    groups = [tuple(case.wanted)] + ([(w,) for w in case.wanted] if len(case.wanted) > 1 else [])
    parts: dict[str, Callable[[], object]] = {}
    meta: dict[str, dict[str, Any]] = {}

    def add(label: str, fn: Callable[[], object], **info: Any) -> None:
        fn()  # compiles tcjit's kernels; warms torch up
        parts[label] = fn
        meta[label] = info

    def no_grad(fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            with torch.no_grad():
                return fn()

        return run

    add("tcjit forward, plain (no grad)", no_grad(lambda: kernel(*inputs)), who="tcjit", phase="forward")
    add(
        "tcjit forward, augmented",
        no_grad(lambda: plan.forward(*inputs)),
        who="tcjit",
        phase="forward",
        saves=list(plan.forward.outputs[n_out:]),
    )
    for wanted in groups:
        bwd = plan.backward_for(needs_of(wanted))
        add(
            f"tcjit backward d_{', d_'.join(wanted)}",
            no_grad(lambda bwd=bwd: bwd(*inputs, *fwd, *grad_outs)),
            who="tcjit",
            phase="backward",
            wanted=list(wanted),
            kernel=bwd.name,
        )
    leaves = _leaves(inputs, names, case.wanted)
    add(
        "torch forward (recording the graph)",
        lambda: _loss(as_tuple(sk.torch_ref(*leaves))[-1], weight),
        who="eager",
        phase="forward",
    )
    loss = _loss(as_tuple(sk.torch_ref(*leaves))[-1], weight)
    for wanted in groups:
        ws = [x for x, n in zip(leaves, names) if n in wanted]
        add(
            f"torch backward d_{', d_'.join(wanted)}",
            lambda ws=ws: torch.autograd.grad(loss, ws, retain_graph=True),
            who="eager",
            phase="backward",
            wanted=list(wanted),
        )
    timings = interleaved(parts, max_rounds=max_rounds, budget_s=budget_s, min_sample_s=min_sample_s)
    return [{"part": label, **meta[label], "timing": timings[label].to_json()} for label in parts]


# ========================================================================================== report
def run(
    kinds: str,
    *,
    torch_compile: bool,
    max_rounds: int,
    budget_s: float,
    min_sample_s: float,
    cases: Sequence[Case] = CASES,
    progress: bool = True,
) -> dict[str, Any]:
    """Benchmark ``cases`` at the suite's ``kinds`` sizes; the JSON document. Call it after
    ``TCJIT_CACHE_DIR`` points at a fresh directory and ``TCJIT_OPTIONS_DB`` is empty (:func:`main`)."""
    from tcjit import suite

    results = []
    for case in cases:
        sizes = sizes_for(suite.get(case.kernel), kinds)
        r = bench_case(
            case,
            sizes,
            torch_compile=torch_compile,
            max_rounds=max_rounds,
            budget_s=budget_s,
            min_sample_s=min_sample_s,
        )
        results.append(r)
        if progress:
            print(_progress_line(r), file=sys.stderr, flush=True)
    return {
        "benchmark": "training_step",
        "machine": machine_info(),
        "settings": {
            "sizes": kinds,
            "dtype": "float32",
            "torch_compile": torch_compile,
            "max_rounds": max_rounds,
            "budget_s": budget_s,
            "min_sample_s": min_sample_s,
            "fresh_cache_dir": True,
            "options": "default (TCJIT_OPTIONS_DB disabled)",
            "step": "p.grad = None for the wanted inputs; loss = sum of the last output (dense cases: "
            "times a fixed random tensor); loss.backward()",
        },
        "target_speedup_vs_eager": TARGET_SPEEDUP,
        "cases": results,
    }


def _ms(record: Mapping[str, Any]) -> str:
    t = record.get("timing")
    if t is None:
        return record.get("status", "—")
    cell = format_seconds(t["median_s"])
    return cell + (" (wrong)" if record.get("correct") is False else "")


def _speedup(ratio: float | None) -> str:
    return "—" if ratio is None else f"{1 / ratio:.2f}×"


def _progress_line(r: Mapping[str, Any]) -> str:
    c = r["contenders"]
    return (
        f"{r['case']}: tcjit {_ms(c['tcjit'])}, eager {_ms(c['eager'])}, compile {_ms(c['compile'])}; "
        f"speedup vs eager {_speedup(r['tcjit_over_eager'])}"
    )


def render_markdown(doc: Mapping[str, Any], notes: str = "") -> str:
    """The result document as markdown; ``notes`` (the analysis, written by hand) goes at the end."""
    s = doc["settings"]
    rows = []
    failures = []
    for r in doc["cases"]:
        c = r["contenders"]
        rows.append(
            [
                r["case"],
                format_sizes(r["sizes"]),
                ", ".join(r["wanted"]),
                *(_ms(c[n]) for n in CONTENDERS),
                _speedup(r["tcjit_over_eager"]),
                _speedup(r["tcjit_over_compile"]),
                "✓" if r["meets_target"] else "✗" if r["meets_target"] is False else "—",
                format_seconds(c["tcjit"].get("setup_s")),
            ]
        )
        for n in CONTENDERS:
            if c[n]["status"] in ("wrong", "error"):
                failures.append(f"- {r['case']} / {n} ({c[n]['status']}): {c[n]['error']}")
    parts = [
        "# Training steps: tcjit vs torch eager vs torch.compile (CPU)",
        "",
        machine_markdown(doc["machine"]),
        f"- sizes: {s['sizes']} (KERNELS.md), {s['dtype']}; tcjit with {s['options']}; interleaved "
        f"rounds: up to {s['max_rounds']} within ~{s['budget_s']} s per contender, samples of >= "
        f"{s['min_sample_s'] * 1e3:.0f} ms; torch.compile: {'on' if s['torch_compile'] else 'off'}",
        f"- a step: {s['step']}",
        "",
        markdown_table(
            [
                "case",
                "sizes",
                "gradients of",
                "tcjit",
                "torch eager",
                "torch.compile",
                "tcjit speedup vs eager",
                "vs compile",
                f"target ≥ {doc['target_speedup_vs_eager']:.1f}× eager",
                "tcjit first step (compiles)",
            ],
            rows,
        ),
        "",
        "Times are medians over interleaved rounds of the time per step. Speedups are ratios of "
        "times (> 1: tcjit is faster). Gradients are checked against float64 at "
        "`tcjit.testing.tolerance(float32, n)`, n the backward's longest reduction; `(wrong)` marks a "
        "contender outside it.",
    ]
    if failures:
        parts += ["", "## Failures", "", *failures]
    parts += ["", "## Breakdown", ""]
    for r in doc["cases"]:
        parts += _breakdown_markdown(r)
    if notes:
        parts += ["", notes.strip()]
    return "\n".join(parts)


def _breakdown_markdown(r: Mapping[str, Any]) -> list[str]:
    lines = [f"### {r['case']}", ""]
    if r.get("breakdown_error"):
        return [*lines, f"breakdown failed: {r['breakdown_error']}", ""]
    parts = r.get("breakdown")
    if not parts:
        return [*lines, "no breakdown (tcjit did not run)", ""]
    step = (r["contenders"]["tcjit"].get("timing") or {}).get("median_s")
    rows = []
    for p in parts:
        median = p["timing"]["median_s"]
        note = p.get("kernel", "")
        if p.get("saves"):
            note = f"also returns {', '.join(p['saves'])}"
        share = f"{median / step:.0%}" if step and p["who"] == "tcjit" else ""
        rows.append([p["part"], format_seconds(median), share, note])
    lines += [markdown_table(["part", "median", "of the tcjit step", "note"], rows), ""]
    tc = r.get("derived_tc")
    if tc:
        lines += ["Derived TC (augmented forward and backward for these gradients):", "", "```"]
        lines += [tc["forward"].strip(), "", tc["backward"].strip(), "```", ""]
    return lines


# ============================================================================================= CLI
NOTES_MARK = "<!-- analysis -->"


def _existing_notes(md_path: Path) -> str:
    """The hand-written analysis kept at the end of an earlier result file (after :data:`NOTES_MARK`)."""
    try:
        text = md_path.read_text()
    except OSError:
        return ""
    _, mark, notes = text.partition(NOTES_MARK)
    return mark + notes if mark else ""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument(
        "--sizes", choices=SIZE_KINDS, default="cpu", help="the suite's cpu sizes or first small size"
    )
    p.add_argument("--cases", default=None, help="comma-separated case labels (default: all)")
    p.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, help="at most this many interleaved rounds")
    p.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="about this many seconds of timing per contender",
    )
    p.add_argument("--min-sample-ms", type=float, default=DEFAULT_MIN_SAMPLE_S * 1e3)
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument("--threads", type=int, default=None, help="torch threads and OMP_NUM_THREADS")
    p.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "training_step_cpu",
        help="writes <out>.json and <out>.md; an analysis after the marker in an existing <out>.md is kept",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cases = CASES
    if args.cases:
        chosen = [c.strip() for c in args.cases.split(",")]
        cases = tuple(c for c in CASES if c.label in chosen)
        if len(cases) != len(chosen):
            print(
                f"training_step.py: unknown case in {args.cases!r}; cases: "
                f"{', '.join(c.label for c in CASES)}",
                file=sys.stderr,
            )
            return 2
    os.environ["TCJIT_OPTIONS_DB"] = ""  # default options: nothing tuned is looked up
    with bench_environment(args.threads):
        doc = run(
            args.sizes,
            torch_compile=not args.no_compile,
            max_rounds=args.repeat,
            budget_s=args.budget,
            min_sample_s=args.min_sample_ms / 1e3,
            cases=cases,
        )
    md_path = args.out.with_name(args.out.name + ".md")
    json_path, md_path = write_results(args.out, doc, render_markdown(doc, _existing_notes(md_path)))
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    failed = [
        r["case"]
        for r in doc["cases"]
        if not r["all_correct"] or r["contenders"]["tcjit"]["status"] == "error"
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
