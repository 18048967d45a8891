"""A training loop whose batch size changes, as a user writes it: what a new batch size costs.

A two-layer MLP of tcjit ``fcrelu`` kernels (784 -> 512 -> 128, float32, on the CPU) trains with
SGD on random data; the batch size follows ``--batches`` (default ``32,17,32,5,1``: a short last
batch, an evaluation batch), each for ``--steps`` steps (forward, loss, derived backward, update),
then one no-grad evaluation call at that size. The kernels are defined with the default
``dynamic=None``: the first batch size specialises them, the second makes the batch size symbolic
(issue 34). For each phase the file records every step's time, the first step's, the median of the
later ones and the first step's excess over that median, and ``tcjit.compile_counts()`` after it;
the same loop in plain torch runs beside it for scale. The kernel cache is a fresh empty directory:
nothing comes from disk. Issue 34's target: from the third batch size on, the first step at a new
size costs under 5 ms more than the median of later steps at that size, and nothing compiles.

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


def run_loop(kind: str, batches: Sequence[int], steps: int) -> list[dict[str, Any]]:
    """The loop with ``kind`` ``"tcjit"`` or ``"torch"`` layers; one record per phase (batch size)."""
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
    for batch in batches:
        times = []
        for _ in range(steps):
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
                "steps_s": times,
                "first_s": times[0],
                "median_later_s": later,
                "first_excess_s": None if later is None else times[0] - later,
                "evaluation_s": evaluation,
                "compile_counts": dict(tcjit.compile_counts()) if kind == "tcjit" else None,
            }
        )
    return phases


def markdown(doc: dict[str, Any]) -> str:
    ms = lambda s: "-" if s is None else f"{s * 1e3:.2f}"  # noqa: E731
    rows = []
    seen: set[int] = set()
    for mine, plain in zip(doc["tcjit"], doc["torch"]):
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
    return (
        "# A training loop whose batch size changes (CPU)\n\n"
        f"Two fcrelu layers {' -> '.join(map(str, WIDTHS))}, {doc['settings']['steps']} steps per batch "
        "size, SGD; written by `bench/dynamic_batches.py`.\n\n"
        + table
        + "\n\n"
        + machine_markdown(doc["machine"])
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="what a new batch size costs in a tcjit training loop")
    p.add_argument("--batches", default="32,17,32,5,1", help="comma-separated batch sizes, in order")
    p.add_argument("--steps", type=int, default=20, help="steps per batch size")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=RESULTS / "dynamic_batches")
    args = p.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    with bench_environment(args.threads):
        doc = {
            "benchmark": "dynamic_batches",
            "machine": machine_info(),
            "settings": {"batches": batches, "steps": args.steps, "widths": WIDTHS},
            "tcjit": run_loop("tcjit", batches, args.steps),
            "torch": run_loop("torch", batches, args.steps),
        }
        write_results(args.out, doc, markdown(doc))
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
