"""Compiler flags A/B: the suite's kernels built with today's flags and with one flag changed, timed
interleaved in one process.

A flag added to (or dropped from) ``tcjit.cpu_runtime.CFLAGS`` changes every CPU kernel; this script
says by how much, kernel by kernel, before such a change lands. Both builds come from the same
generated C with the default options (the flags are part of the cache key, so each build is its own
specialisation), their outputs are checked against torch, and each pair is timed round-robin
(``_harness.interleaved``) so that drifting noise lands on both alike::

    python bench/cflags_ab.py --drop=-fno-tree-loop-distribute-patterns
    python bench/cflags_ab.py --add=-funroll-loops --kernels=fcrelu,mlp3

Writes ``bench/results/cflags_ab.{json,md}`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import statistics

import _harness as H


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--add", action="append", default=[], help="a flag the B build adds")
    ap.add_argument("--drop", action="append", default=[], help="a flag of CFLAGS the B build drops")
    ap.add_argument("--kernels", default=None, help="comma-separated suite kernels (default: all)")
    ap.add_argument("--sizes", choices=("cpu", "small"), default="cpu", help="the suite's sizes to run at")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timing per build and kernel")
    ap.add_argument("--repeat", type=int, default=40, help="at most this many interleaved rounds")
    ap.add_argument("--threads", type=int, default=None, help="torch threads and OMP_NUM_THREADS")
    ap.add_argument("--out", default=str(H.RESULTS / "cflags_ab"))
    args = ap.parse_args(argv)
    if not args.add and not args.drop:
        ap.error("name a flag to --add or --drop")

    with H.bench_environment(args.threads):
        import torch

        import tcjit
        from tcjit import cpu_runtime
        from tcjit.testing import tolerance

        base = cpu_runtime.CFLAGS
        missing = [f for f in args.drop if f not in base]
        if missing:
            ap.error(f"not in CFLAGS: {', '.join(missing)}")
        variant = tuple(f for f in base if f not in args.drop) + tuple(args.add)
        label = "; ".join([*(f"B drops `{f}`" for f in args.drop), *(f"B adds `{f}`" for f in args.add)])
        rows, data = [], []
        for sk in H.select_kernels(args.kernels):
            sizes = H.sizes_for(sk, args.sizes)
            inputs = sk.make_inputs(sizes)
            want = sk.torch_ref(*inputs)
            builds = {}
            for name, flags in (("A", base), ("B", variant)):
                cpu_runtime.CFLAGS = flags
                try:
                    k = tcjit.define(sk.source, sk.entry)
                    tol = tolerance(torch.float32, sk.reduction_length(sizes))
                    check = H.check_outputs(H.as_tuple(k(*inputs)), want, tol)
                    if not check.correct:
                        raise RuntimeError(f"{sk.name}, build {name}: {check.message}")
                    spec = tcjit.compile(k, *inputs)
                finally:
                    cpu_runtime.CFLAGS = base
                builds[name] = lambda spec=spec, inputs=inputs: spec(*inputs)
            for fn in builds.values():
                fn()
            timing = H.interleaved(builds, max_rounds=args.repeat, budget_s=args.budget)
            a, b = timing["A"].median_s, timing["B"].median_s
            rows.append([sk.name, H.format_seconds(a), H.format_seconds(b), f"{a / b:.3f}x"])
            data.append({"kernel": sk.name, "sizes": sizes, "a_s": a, "b_s": b, "b_speedup": a / b})
            print(f"{sk.name}: A {rows[-1][1]}, B {rows[-1][2]}, B's speed-up {rows[-1][3]}", flush=True)
        geo = statistics.geometric_mean([d["b_speedup"] for d in data])
        info = H.machine_info()
        md = (
            f"# Compiler flags A/B\n\nA: `{' '.join(base)}`\n\nB: as A, but {label}\n\n"
            + H.machine_markdown(info)
            + "\n\n"
            + H.markdown_table(["kernel", "A", "B", "B's speed-up"], rows)
            + f"\n\nGeometric mean of B's speed-up: {geo:.3f}x ({torch.get_num_threads()} threads)\n"
        )
        result = {"dropped": args.drop, "added": args.add, "a": list(base), "machine": info, "kernels": data}
        H.write_results(args.out, result, md)
        print(f"geometric mean of B's speed-up: {geo:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
