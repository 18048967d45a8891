"""A training loop whose batch size changes, as a user writes it: what a new batch size costs.

A two-layer MLP of tcjit ``fcrelu`` kernels (784 -> 512 -> 128, float32, on the CPU) trains with
SGD on random data; the batch size follows ``--batches`` (default ``32,17,32,5,1``: a short last
batch, an evaluation batch), each for ``--steps`` steps (forward, loss, derived backward, update),
then one no-grad evaluation call at that size. The kernels are defined with the default
``dynamic=None``: the first batch size specialises them, the second makes the batch size symbolic
(issue 34). For each phase the file records every step's time, the first step's, the median of the
later ones and the first step's excess over that median, and ``tcjit.compile_counts()`` after it;
the same loop in plain torch runs beside it for scale. One first step is one sample of a noisy
figure (a few ms, where a step takes 2), so the loop then runs ``--new-sizes`` more batch sizes
never seen (``--new-steps`` steps each) and records the median and the largest of their first
steps' excesses. The kernel cache is a fresh empty directory: nothing comes from disk. Issue 34's
target: from the third batch size on, the first step at a new size costs under 5 ms more than the
median of later steps at that size, and nothing compiles.

    python bench/dynamic_batches.py            # bench/results/dynamic_batches.{json,md}
    python bench/dynamic_batches.py --steps 3 --out /tmp/dyn     # a quick check
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _harness import RESULTS, bench_environment, machine_info, machine_markdown, markdown_table, write_results

FCRELU = """
def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}
"""
WIDTHS = (784, 512, 128)


def _parameters(seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for m, n in itertools.pairwise(WIDTHS):
        out += [
            (torch.randn(n, m, generator=g) / m**0.5).requires_grad_(),
            torch.zeros(n, requires_grad=True),
        ]
    return out


def new_sizes(batches: Sequence[int], count: int) -> list[int]:
    """``count`` batch sizes not in ``batches``, spread over 2 .. 2 * max(batches) in a fixed order."""
    top = 2 * max(batches)
    unseen = [b for b in range(2, top + 1) if b not in batches]
    step = max(1, len(unseen) // max(count, 1))
    return unseen[::step][:count]


def run_loop(kind: str, batches: Sequence[int], steps: int) -> list[dict[str, Any]]:
    """The loop with ``kind`` ``"tcjit"`` or ``"torch"`` layers; one record per phase (batch size),
    the phases of ``batches`` first (``steps`` steps each), then those of ``new_sizes`` (marked
    ``"extra": True``) if the caller appended them as ``(batch, steps)`` pairs."""
    import torch

    import tcjit

    params = _parameters()
    if kind == "tcjit":
        layers = [tcjit.define(FCRELU) for _ in WIDTHS[1:]]

        def forward(x):
            for layer, (w, b) in zip(layers, zip(params[::2], params[1::2])):
                x = layer(x, w, b)
            return x
    else:

        def forward(x):
            for w, b in zip(params[::2], params[1::2]):
                x = torch.relu(x @ w.T + b)
            return x

    g = torch.Generator().manual_seed(1)
    phases = []
    for entry in batches:
        batch, n, extra = (entry, steps, False) if isinstance(entry, int) else (*entry, True)
        times = []
        for _ in range(n):
            x, t = torch.randn(batch, WIDTHS[0], generator=g), torch.randn(batch, WIDTHS[-1], generator=g)
            start = time.perf_counter()
            loss = ((forward(x) - t) ** 2).mean()
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, d in zip(params, grads):
                    p -= 1e-3 * d
            times.append(time.perf_counter() - start)
        with torch.no_grad():
            start = time.perf_counter()
            forward(torch.randn(batch, WIDTHS[0], generator=g))
            evaluation = time.perf_counter() - start
        later = statistics.median(times[1:]) if len(times) > 1 else None
        phases.append(
            {
                "batch": batch,
                "extra": extra,
                "steps_s": times,
                "first_s": times[0],
                "median_later_s": later,
                "first_excess_s": None if later is None else times[0] - later,
                "evaluation_s": evaluation,
                "compile_counts": dict(tcjit.compile_counts()) if kind == "tcjit" else None,
            }
        )
    return phases


def summarise(doc: dict[str, Any]) -> dict[str, Any]:
    """The first steps' excess at the extra new sizes, per side: median, largest, and (tcjit) what
    compiled during them (must be 0)."""
    out: dict[str, Any] = {}
    for side in ("tcjit", "torch"):
        extra = [p for p in doc[side] if p["extra"]]
        excess = [p["first_excess_s"] for p in extra if p["first_excess_s"] is not None]
        out[side] = {
            "sizes": [p["batch"] for p in extra],
            "median_excess_s": statistics.median(excess) if excess else None,
            "max_excess_s": max(excess) if excess else None,
        }
    tc = [p for p in doc["tcjit"] if p["extra"]]
    main_phases = [p for p in doc["tcjit"] if not p["extra"]]
    if tc and main_phases:
        out["tcjit"]["compiled_during"] = (
            tc[-1]["compile_counts"]["compiled"] - main_phases[-1]["compile_counts"]["compiled"]
        )
    return out


def markdown(doc: dict[str, Any]) -> str:
    ms = lambda s: "-" if s is None else f"{s * 1e3:.2f}"  # noqa: E731
    rows = []
    seen: set[int] = set()
    for mine, plain in zip(doc["tcjit"], doc["torch"]):
        if mine["extra"]:
            continue
        new = mine["batch"] not in seen
        seen.add(mine["batch"])
        rows.append(
            [
                str(mine["batch"]),
                "yes" if new else "",
                ms(mine["first_s"]),
                ms(mine["median_later_s"]),
                ms(mine["first_excess_s"]),
                str(mine["compile_counts"]["compiled"]),
                ms(plain["median_later_s"]),
            ]
        )
    table = markdown_table(
        ["batch", "new size", "first step ms", "median later ms", "first - median ms", "compiled so far",
         "torch median ms"],
        rows,
    )  # fmt: skip
    summary = doc.get("summary", {})
    extra = ""
    if summary.get("tcjit", {}).get("sizes"):
        tc, plain = summary["tcjit"], summary["torch"]
        extra = (
            f"\n\nThen {len(tc['sizes'])} more new batch sizes ({', '.join(map(str, tc['sizes']))}), "
            f"{doc['settings']['new_steps']} steps each: first step minus the median of the later ones, "
            f"tcjit median {ms(tc['median_excess_s'])} ms (largest {ms(tc['max_excess_s'])} ms), "
            f"torch median {ms(plain['median_excess_s'])} ms (largest {ms(plain['max_excess_s'])} ms); "
            f"tcjit compiled {tc.get('compiled_during', '-')} kernels during them."
        )
    return (
        "# A training loop whose batch size changes (CPU)\n\n"
        f"Two fcrelu layers {' -> '.join(map(str, WIDTHS))}, {doc['settings']['steps']} steps per batch "
        "size, SGD; written by `bench/dynamic_batches.py`.\n\n"
        + table
        + extra
        + "\n\n"
        + machine_markdown(doc["machine"])
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="what a new batch size costs in a tcjit training loop")
    p.add_argument("--batches", default="32,17,32,5,1", help="comma-separated batch sizes, in order")
    p.add_argument("--steps", type=int, default=20, help="steps per batch size")
    p.add_argument("--new-sizes", type=int, default=12, help="more new batch sizes after --batches")
    p.add_argument("--new-steps", type=int, default=6, help="steps at each of them")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=RESULTS / "dynamic_batches")
    args = p.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    phases = [*batches, *((b, args.new_steps) for b in new_sizes(batches, args.new_sizes))]
    with bench_environment(args.threads):
        doc = {
            "benchmark": "dynamic_batches",
            "machine": machine_info(),
            "settings": {
                "batches": batches,
                "steps": args.steps,
                "widths": WIDTHS,
                "new_steps": args.new_steps,
            },
            "tcjit": run_loop("tcjit", phases, args.steps),
            "torch": run_loop("torch", phases, args.steps),
        }
        doc["summary"] = summarise(doc)
        write_results(args.out, doc, markdown(doc))
    tc = doc["summary"]["tcjit"]
    if tc["sizes"]:
        print(
            f"{len(tc['sizes'])} more new sizes: first-step excess median "
            f"{tc['median_excess_s'] * 1e3:.2f} ms, largest {tc['max_excess_s'] * 1e3:.2f} ms, "
            f"compiled {tc.get('compiled_during')}",
            file=sys.stderr,
        )
    for phase in doc["tcjit"]:
        excess = "-" if phase["first_excess_s"] is None else f"{phase['first_excess_s'] * 1e3:.2f}"
        compiled = phase["compile_counts"]["compiled"]
        print(
            f"batch {phase['batch']:4d}: first {phase['first_s'] * 1e3:8.2f} ms, excess {excess} ms, "
            f"compiled {compiled}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
