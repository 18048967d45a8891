"""The fixed cost of calling a tcjit kernel: tiny inputs, where the call is nearly all overhead.

Two comparisons, each a tcjit kernel against the torch op that computes the same thing:

- ``matmul 8x8``: the suite's TC matmul on 8x8 float32 inputs against ``torch.mm``;
- ``pointwise 1 element``: ``C(i) = A(i) + B(i)`` on 1-element float32 inputs against ``torch.add``;
- ``matmul 8x8, grad``: the matmul again, both inputs requiring grad and grad mode on, so each call
  is recorded for autograd (tcjit's ``torch.autograd.Function`` running the augmented forward of
  the derived backward; torch's ``MmBackward0`` node). Only the forward call is timed, as in the
  cases above: what wrapping a call for autograd adds to it (issue 7's target: under 40 µs more
  than ``torch.mm``);
- ``matmul 8x8, forward+backward``: the same call, then ``torch.autograd.grad`` of the output's
  sum to both inputs (tcjit runs its derived backward kernel): for information, no target.

The kernel is compiled first (``tcjit.compile`` if tcjit has it, else a warm-up call; a warm-up
forward and backward for the gradient cases, which compiles the augmented forward and the backward)
with a fresh empty ``TCJIT_CACHE_DIR`` and its result (and gradients) checked against the torch
op's. Then both run interleaved (see ``bench/_harness.py``), under ``torch.no_grad()`` for the
plain cases: each round times ``--calls`` back-to-back calls of one and then of the other, the
order alternating between rounds; the figure is the median over ``--samples`` rounds of the time per
call, in µs. The difference tcjit - torch is the overhead tcjit adds to a call (binding the
arguments to sizes, looking the compiled kernel up, allocating the outputs, crossing into C, and
for the gradient cases recording the call for autograd); target: under 20 µs without gradients,
under 40 µs with.

With ``--device cuda`` the inputs are on the GPU and each round times the host's cost of the
back-to-back calls (tcjit's launches and torch's are asynchronous: a call returns once its work is
queued), then waits with ``torch.cuda.synchronize()`` before it stops the clock, so that a sample
also covers the device's work on its calls when that is the longer (``bench/_harness.py``: the
clock starts on an idle device, after a synchronisation). Nothing synchronises between the calls
of a round. TF32 is off, as in the suite. A machine without a usable CUDA device gets one line on
stderr and exit status 2.

    python bench/call_overhead.py            # writes bench/results/call_overhead.{json,md}
    python bench/call_overhead.py --calls 200 --samples 3 --out /tmp/call_overhead   # quick check
    python bench/call_overhead.py --device cuda   # bench/results/call_overhead_<GPU name>.{json,md}
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _harness import (
    RESULTS,
    as_tuple,
    check_outputs,
    cuda_unusable,
    describe_error,
    device_sync,
    disable_tf32,
    format_seconds,
    fresh_cache_dir,
    interleaved,
    machine_info,
    machine_markdown,
    markdown_table,
    slug,
    write_results,
)

OVERHEAD_TARGET_S = 20e-6
GRAD_OVERHEAD_TARGET_S = 40e-6
DEFAULT_CALLS = 20_000
DEFAULT_SAMPLES = 15

ADD_TC = """
def add(float(N) A, float(N) B) -> (C) {
    C(i) = A(i) + B(i)
}
"""


@dataclass(frozen=True)
class Case:
    """One comparison: a TC kernel and the torch op it should cost about as much as.

    :ivar name: how the results call it.
    :ivar source: the TC text.
    :ivar entry: the ``def`` to call.
    :ivar shapes: the input shapes (float32, standard normal, seed 0).
    :ivar torch_name: the torch op, as printed.
    :ivar reduction_length: the longest reduction (for the tolerance).
    :ivar mode: ``"no_grad"`` (the plain call), ``"grad"`` (inputs require grad: the forward call,
        recorded for autograd) or ``"forward+backward"`` (that call and the gradients of its sum).
    :ivar target_s: the overhead target, or ``None`` (for information).
    """

    name: str
    source: str
    entry: str
    shapes: tuple[tuple[int, ...], ...]
    torch_name: str
    reduction_length: int
    mode: str = "no_grad"
    target_s: float | None = OVERHEAD_TARGET_S

    def torch_op(self) -> Callable[..., object]:
        import torch

        return {"torch.mm": torch.mm, "torch.add": torch.add}[self.torch_name]


def cases() -> tuple[Case, ...]:
    from tcjit import suite

    mm = suite.get("matmul")
    return (
        Case("matmul 8x8", mm.source, mm.entry, ((8, 8), (8, 8)), "torch.mm", 8),
        Case("pointwise 1 element", ADD_TC, "add", ((1,), (1,)), "torch.add", 1),
        Case(
            "matmul 8x8, grad",
            mm.source,
            mm.entry,
            ((8, 8), (8, 8)),
            "torch.mm",
            8,
            "grad",
            GRAD_OVERHEAD_TARGET_S,
        ),
        Case(
            "matmul 8x8, forward+backward",
            mm.source,
            mm.entry,
            ((8, 8), (8, 8)),
            "torch.mm",
            8,
            "forward+backward",
            None,
        ),
    )


def _step(case: Case, f: Callable[..., object], inputs: tuple) -> Callable[[], object]:
    """What one timed call of ``f`` does in ``case.mode``."""
    import torch

    if case.mode == "forward+backward":
        return lambda: torch.autograd.grad(f(*inputs).sum(), inputs)
    return lambda: f(*inputs)


def measure(case: Case, *, calls: int, samples: int, device: str = "cpu") -> dict[str, Any]:
    """Compile, check and time one case with its inputs on ``device`` (``"cpu"`` or ``"cuda"``);
    its record for the JSON file."""
    import contextlib

    import torch

    import tcjit
    from tcjit.testing import tolerance

    grad = case.mode != "no_grad"
    gen = torch.Generator().manual_seed(0)
    inputs = tuple(torch.randn(s, generator=gen).to(device).requires_grad_(grad) for s in case.shapes)
    op = case.torch_op()
    record: dict[str, Any] = {
        "case": case.name,
        "shapes": [list(s) for s in case.shapes],
        "torch": case.torch_name,
        "mode": case.mode,
    }
    mode = contextlib.nullcontext() if grad else torch.no_grad()
    with mode:
        want = as_tuple(op(*inputs))
        if grad:
            want += torch.autograd.grad(want[0].sum(), inputs)
        try:
            k = tcjit.define(case.source, name=case.entry)
            compile_ahead = getattr(tcjit, "compile", None)
            if compile_ahead is not None and not grad:
                compile_ahead(k, *inputs)
            got = as_tuple(k(*inputs))
            if grad:
                got += torch.autograd.grad(got[0].sum(), inputs)
        except Exception as e:
            record.update(error=describe_error(e), correct=None)
            return record
        check = check_outputs(
            tuple(t.detach().cpu() for t in got),
            tuple(t.detach().cpu() for t in want),
            tolerance(torch.float32, case.reduction_length),
        )
        record.update(correct=check.correct, check_error=check.message or None)
        if grad and not got[0].requires_grad:
            record.update(correct=False, check_error="the output was not recorded for autograd")
        timings = interleaved(
            {"tcjit": _step(case, k, inputs), "torch": _step(case, op, inputs)},
            max_rounds=samples,
            min_rounds=samples,
            budget_s=0.0,
            calls_per_sample=calls,
            sync=device_sync(device),
        )
    t, o = timings["tcjit"].median_s, timings["torch"].median_s
    record.update(
        tcjit_timing=timings["tcjit"].to_json(),
        torch_timing=timings["torch"].to_json(),
        tcjit_us=t * 1e6,
        torch_us=o * 1e6,
        overhead_us=(t - o) * 1e6,
        target_us=None if case.target_s is None else case.target_s * 1e6,
        meets_target=None if case.target_s is None else t - o < case.target_s,
    )
    return record


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The result document as markdown."""
    rows = []
    for r in doc["cases"]:
        if "error" in r:
            rows.append([r["case"], "error", "—", "—", "—", r["error"]])
            continue
        rows.append(
            [
                r["case"],
                format_seconds(r["tcjit_us"] * 1e-6),
                f"{format_seconds(r['torch_us'] * 1e-6)} ({r['torch']})",
                f"{r['overhead_us']:.1f} µs"
                + (
                    ""
                    if r["target_us"] is None
                    else f" {'✓' if r['meets_target'] else '✗'} (< {r['target_us']:.0f} µs)"
                ),
                "yes" if r["correct"] else "no",
                r.get("check_error") or "",
            ]
        )
    s = doc["settings"]
    cuda = s.get("device") == "cuda"
    return "\n".join(
        [
            "# Call overhead on tiny inputs" + (" on the GPU" if cuda else ""),
            "",
            *(
                []
                if doc.get("complete", True)
                else ["**incomplete**: the run stopped before its last case", ""]
            ),
            machine_markdown(doc["machine"]),
            f"- {s['samples']} interleaved samples of {s['calls']} back-to-back calls each, "
            "medians of the time per call; the plain cases under torch.no_grad(), the grad cases with "
            "both inputs requiring grad",
            *(
                [
                    "- inputs on the GPU, TF32 off; a sample synchronises (torch.cuda.synchronize) before "
                    "its clock starts and before it stops, never between its calls"
                ]
                if cuda
                else []
            ),
            "",
            markdown_table(["case", "tcjit", "torch", "tcjit - torch (target)", "correct", "note"], rows),
        ]
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=DEFAULT_CALLS, help="back-to-back calls per sample")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="interleaved samples per contender")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the inputs live")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="writes <out>.json and <out>.md (default: bench/results/call_overhead on the CPU, "
        "bench/results/call_overhead_<GPU name> on CUDA)",
    )
    return p.parse_args(argv)


def default_out(device: str, gpu_name: str | None = None) -> Path:
    """Where results go without ``--out``: ``bench/results/call_overhead`` on the CPU,
    ``bench/results/call_overhead_<slug of the GPU's name>`` on CUDA."""
    if device == "cuda":
        return RESULTS / f"call_overhead_{slug(gpu_name or 'unknown')}"
    return RESULTS / "call_overhead"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings: dict[str, Any] = {"calls": args.calls, "samples": args.samples}
    if args.device == "cuda":
        why = cuda_unusable()
        if why is not None:
            print(f"call_overhead.py: --device cuda: {why}", file=sys.stderr)
            return 2
        settings.update(device="cuda", allow_tf32=disable_tf32())
    with fresh_cache_dir():
        results: list[dict[str, Any]] = []
        doc = {
            "benchmark": "call_overhead",
            "machine": machine_info(args.device),
            "settings": settings,
            "target_overhead_us": OVERHEAD_TARGET_S * 1e6,
            "target_grad_overhead_us": GRAD_OVERHEAD_TARGET_S * 1e6,
            "cases": results,
            "complete": False,
        }
        out = args.out or default_out(args.device, doc["machine"].get("gpu_name"))
        for case in cases():
            r = measure(case, calls=args.calls, samples=args.samples, device=args.device)
            results.append(r)
            summary = r.get("error") or (
                f"tcjit {r['tcjit_us']:.2f} µs, {r['torch']} {r['torch_us']:.2f} µs, "
                f"overhead {r['overhead_us']:.2f} µs, correct: {r['correct']}"
            )
            print(f"{case.name}: {summary}", file=sys.stderr, flush=True)
            write_results(out, doc, render_markdown(doc))  # a run cut short keeps the cases it measured
    doc["complete"] = True
    json_path, md_path = write_results(out, doc, render_markdown(doc))
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    return 1 if any("error" in r or not r["correct"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
