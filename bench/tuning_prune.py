"""How many candidate measurements the tuner's pruning skips on a GPU (issue 32), on matmul and gconv.

For each kernel, at its first GPU size (KERNELS.md), the genetic search over the ``cuda`` search
space that ``tcjit.tuning.tune_kernel`` builds (``tcjit.tuning.tuning_space``), with the static GPU
profile as its predictor (``tcjit.tuning.gpu_predictor``), runs twice with the same seed: without
pruning (``prune_factor=None``) and with the default settings (``TunerSettings``: prune over 4x
the prediction for the best measured, keep the top 4, explore a tenth of the rest).

- Without ``--measure`` (no GPU needed, only a CUDA compiler for the cubins' registers): a
  candidate's "measurement" is the model's own prediction. This counts the evaluations pruning
  would skip if the model were right, and the best time is a predicted one.
- With ``--measure`` on a CUDA machine: the real tuner, ``tune_kernel(..., target="cuda")``, with a
  private options database and kernel store per run, and the search's best measured time.

Reported per kernel: the candidates proposed, evaluated and pruned, the share of the proposed ones
skipped, and the best time without and with pruning.

    python bench/tuning_prune.py               # writes bench/results/tuning_prune_predicted_h100.*
    python bench/tuning_prune.py --measure     # on a GPU: bench/results/tuning_prune_<gpu>.*
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
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
    select_kernels,
    sizes_for,
    slug,
    write_results,
)

DEFAULT_KERNELS = "matmul,gconv"
RUNS = (("without", None), ("with", "default"))  # (label, prune_factor): the default is TunerSettings'
PREDICTED_NOTE = "predicted, no GPU: this counts the skips if the model were right"


def _counts(result: Any, seconds: float) -> dict[str, Any]:
    """One search's figures: every proposed candidate was evaluated or pruned."""
    evaluated = sum(g.evaluated for g in result.history)
    return {
        "proposed": evaluated + result.pruned,
        "evaluated": evaluated,
        "pruned": result.pruned,
        "pruned_per_generation": [g.pruned for g in result.history],
        "best_s": result.best_time,
        "best_options": None if result.best_options is None else result.best_options.to_json(),
        "stopped": result.stopped,
        "seconds": seconds,
    }


def predicted_runs(sk, args: argparse.Namespace) -> dict[str, Any]:
    """Both searches with the model's predictions standing in for measurements."""
    import tcjit
    from tcjit.binding import bind
    from tcjit.genetic import Measurement, TunerSettings, tune
    from tcjit.pipeline import call_strides
    from tcjit.tuning import gpu_predictor, tuning_space

    sizes = sizes_for(sk, "gpu")
    inputs = sk.make_inputs(sizes, device="meta")
    cdef = tcjit.define(sk.source, name=sk.entry).variant_for(*inputs).definition
    binding = bind(cdef, inputs)
    defaults, space = tuning_space(cdef, binding.sizes, "cuda")
    model = gpu_predictor(cdef, binding.sizes, call_strides(cdef, binding, None), args.gpu)
    known: dict[object, float | None] = {}  # each candidate predicted once, for both runs
    spent = [0.0]

    def predict(candidates):
        new = [c for c in dict.fromkeys(candidates) if c not in known]
        start = time.perf_counter()
        known.update(zip(new, model(new)))
        spent[0] += time.perf_counter() - start
        return [known[c] for c in candidates]

    def evaluate(candidates, best_time, deadline):
        return [
            Measurement(p, "ok") if p is not None else Measurement(None, "compile-error", "no prediction")
            for p in predict(candidates)
        ]

    out: dict[str, Any] = {"kernel": sk.name, "sizes": sizes, "defaults_s": predict([defaults])[0]}
    for label, factor in RUNS:
        knobs = {} if factor == "default" else {"prune_factor": factor}
        settings = TunerSettings(
            generations=args.generations, population=args.population, seed=args.seed, **knobs
        )
        start = time.perf_counter()
        result = tune(space, evaluate, settings, seeds=[defaults], predict=predict)
        out[label] = _counts(result, time.perf_counter() - start)
        print(f"{sk.name} {label} pruning: {out[label]['pruned']} pruned", file=sys.stderr, flush=True)
    out["model_seconds"] = spent[0]
    out["candidates_predicted"] = len(known)
    return out


def measured_runs(sk, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """Both searches by the real tuner on this machine's GPU."""
    import tcjit
    from tcjit.tuning import tune_kernel

    sizes = sizes_for(sk, "gpu")
    inputs = sk.make_inputs(sizes, device="cuda")
    kernel = tcjit.define(sk.source, name=sk.entry)
    out: dict[str, Any] = {"kernel": sk.name, "sizes": sizes}
    for label, factor in RUNS:
        state = scratch / sk.name / label  # a fresh database: nothing known, nothing resumed
        os.environ["TCJIT_OPTIONS_DB"] = str(state / "options.sqlite3")
        os.environ["TCJIT_CACHE_DIR"] = str(state / "kernels")
        knobs = {} if factor == "default" else {"prune_factor": factor}
        start = time.perf_counter()
        report = tune_kernel(
            kernel,
            *inputs,
            generations=args.generations,
            population=args.population,
            seed=args.seed,
            target="cuda",
            timeout=None if args.minutes is None else args.minutes * 60,
            progress=True,
            **knobs,
        )
        out[label] = _counts(report.result, time.perf_counter() - start)
        out[label]["final_rounds"] = None if report.verdict is None else report.verdict.to_json()
        out["defaults_s"] = report.start_default_time
    return out


def render_markdown(doc: dict[str, Any]) -> str:
    measured = doc["measure"]
    lines = [
        "# Tuning on a GPU: evaluations skipped by pruning",
        "",
        machine_markdown(doc["machine"]),
        "",
        f"- times: {'measured on the GPU by tune_kernel' if measured else PREDICTED_NOTE}",
        f"- model: the static GPU profile for {doc['gpu']}; search: {doc['generations']} generations of "
        f"{doc['population']}, seed {doc['seed']}, the same for both runs",
        "",
    ]
    header = ["kernel", "sizes", "proposed", "evaluated", "pruned", "skipped", "defaults"]
    header += ["best without pruning", "best with pruning"]
    if measured:
        header.append("tuning time without / with")
    rows = []
    for k in doc["kernels"]:
        w, p = k["without"], k["with"]
        rows.append(
            [
                k["kernel"],
                format_sizes(k["sizes"]),
                str(p["proposed"]),
                str(p["evaluated"]),
                str(p["pruned"]),
                f"{p['pruned'] / p['proposed']:.0%}" if p["proposed"] else "—",
                format_seconds(k["defaults_s"]),
                f"{format_seconds(w['best_s'])} ({w['evaluated']} evaluated)",
                format_seconds(p["best_s"]),
            ]
        )
        if measured:
            rows[-1].append(f"{w['seconds']:.0f} s / {p['seconds']:.0f} s")
    lines.append(markdown_table(header, rows))
    lines += [
        "",
        "`proposed`, `evaluated`, `pruned` and `skipped` (pruned / proposed) are the run with pruning "
        "(prune over 4x the model's prediction for the best measured, never the model's top 4 of a "
        "generation nor a random tenth of the rest); every candidate it proposed was evaluated or "
        "pruned. The run without pruning evaluates every candidate it proposes. Both runs start from "
        "the defaults' nearest point of the space and diverge once pruning changes what is measured.",
    ]
    if not measured:
        lines += [
            "",
            f"Without a GPU the evaluator answers the model's prediction ({PREDICTED_NOTE}); the best "
            "times are predicted, and a candidate the model cannot predict counts as failed.",
            "",
            *(
                f"- {k['kernel']}: the model predicted {k['candidates_predicted']} distinct candidates in "
                f"{k['model_seconds']:.0f} s ({k['model_seconds'] / max(k['candidates_predicted'], 1):.2f} s "
                "each: a cubin compiled per candidate for its registers), on this machine's CPU"
                for k in doc["kernels"]
            ),
        ]
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", default=DEFAULT_KERNELS, help="comma-separated suite kernels")
    p.add_argument("--generations", type=int, default=10, help="as tune_kernel's default")
    p.add_argument("--population", type=int, default=16, help="as tune_kernel's default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpu", default="h100", help="the model's GPU without --measure (h100, h200)")
    p.add_argument("--measure", action="store_true", help="run the real tuner on this machine's GPU")
    p.add_argument("--minutes", type=float, default=None, help="with --measure: a timeout per run")
    p.add_argument("--out", type=Path, help="results stem (default bench/results/tuning_prune_<machine>)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    kernels = select_kernels(args.kernels)
    if args.measure:
        import torch

        from tcjit.static_profile import device_named

        if not torch.cuda.is_available():
            print("--measure needs a CUDA device", file=sys.stderr)
            return 2
        args.gpu = device_named(torch.cuda.get_device_name())
    doc: dict[str, Any] = {
        "machine": machine_info("cuda" if args.measure else "cpu"),
        "measure": args.measure,
        "times": "measured" if args.measure else PREDICTED_NOTE,
        "gpu": args.gpu,
        "generations": args.generations,
        "population": args.population,
        "seed": args.seed,
        "kernels": [],
    }
    with tempfile.TemporaryDirectory(prefix="tcjit-bench-prune-") as scratch:
        for sk in kernels:
            runs = measured_runs(sk, args, Path(scratch)) if args.measure else predicted_runs(sk, args)
            doc["kernels"].append(runs)
    text = render_markdown(doc)
    print(text)
    machine = slug(doc["machine"]["gpu_name"]) if args.measure else f"predicted_{args.gpu}"
    json_path, md_path = write_results(args.out or RESULTS / f"tuning_prune_{machine}", doc, text)
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
