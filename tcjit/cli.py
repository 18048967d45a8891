"""The ``tcjit`` command line: ``demo``, ``show`` and ``run``."""

from __future__ import annotations

import argparse
import sys
import time

from .polyhedral.errors import TCError

__all__ = ["main"]


def _parse_sizes(text: str | None) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for part in filter(None, (text or "").split(",")):
        key, _, value = part.partition("=")
        if not value.strip().lstrip("-").isdigit():
            raise SystemExit(f"tcjit: --sizes expects NAME=INT[,NAME=INT...], got {part!r}")
        sizes[key.strip()] = int(value)
    return sizes


def _load_entry(path: str, entry: str | None):
    from .polyhedral.lang.check import check_source

    with open(path, encoding="utf-8") as f:
        program = check_source(f.read())
    cdef = program.entry(entry)
    return program, cdef


def cmd_show(args) -> int:
    """Print one stage of the front-end for an entry."""
    from .polyhedral.lang.parser import parse
    from .polyhedral.lang.printer import def_to_tc

    program, cdef = _load_entry(args.file, args.entry)
    sizes = _parse_sizes(args.sizes)
    if args.stage == "ast":
        print(parse(program.source).get(cdef.name))
    elif args.stage == "canonical":
        print(def_to_tc(cdef.ast), end="")
    elif args.stage in ("scop", "schedule"):
        from .polyhedral.schedule import schedule, tile
        from .polyhedral.scop import build_scop, compute_dependences

        if cdef.sizes and not sizes and args.fix_sizes:
            raise SystemExit("tcjit: --fix-sizes needs --sizes")
        scop = build_scop(cdef, sizes if args.fix_sizes else None)
        if args.stage == "scop":
            print(scop.describe())
        else:
            sched = schedule(scop, compute_dependences(scop), fusion=args.fusion)
            tiles = tuple(int(t) for t in args.tile.split(",")) if args.tile else ()
            print(tile(sched, tiles).get_root())
    elif args.stage == "checked":
        print(cdef.signature())
        for name in cdef.temporaries:
            t = cdef.tensor(name)
            print(f"  temporary {t.dtype}({', '.join(map(str, t.shape))}) {name}")
        for st in cdef.statements:
            print(f"line {st.line}: {st.tensor} {st.source.op_text}  ({st.value_type})")
            for r in st.ranges:
                kind = "reduction" if r.var in st.reduction_vars else "index"
                concrete = ""
                if sizes and r.lo.symbols() | r.hi.symbols() <= sizes.keys():
                    concrete = f"   = [{r.lo.evaluate(sizes)}, {r.hi.evaluate(sizes)})"
                print(f"    {kind:9} {r}{concrete}")
    return 0


def cmd_run(args) -> int:
    """Run an entry on random inputs and print its outputs' shapes and summaries."""
    import tcjit

    from .testing import random_inputs

    program, cdef = _load_entry(args.file, args.entry)
    kernel = tcjit.Kernel(program, cdef.name)
    inputs = random_inputs(cdef, _parse_sizes(args.sizes), seed=args.seed)
    start = time.perf_counter()
    outs = kernel(*inputs)
    elapsed = time.perf_counter() - start
    outs = outs if isinstance(outs, tuple) else (outs,)
    for name, o in zip(cdef.outputs, outs):
        summary = f"sum={o.double().sum().item():.6g}" if o.numel() else "empty"
        print(f"{name}: {o.dtype} {tuple(o.shape)} {summary}")
    print(f"{cdef.name}: {elapsed * 1e3:.1f} ms (reference evaluator)")
    return 0


def cmd_demo(args) -> int:
    """Every suite kernel: define, infer shapes, run through tcjit, compare with torch."""
    import torch

    import tcjit

    from .suite import SUITE

    rows = []
    failures = 0
    for sk in SUITE.values():
        kernel = tcjit.define(sk.source, sk.entry)
        sizes = sk.small_sizes[0]
        inputs = sk.make_inputs(sizes)
        start = time.perf_counter()
        got = kernel(*inputs)
        t_tc = time.perf_counter() - start
        start = time.perf_counter()
        want = sk.torch_ref(*inputs)
        t_torch = time.perf_counter() - start
        got = got if isinstance(got, tuple) else (got,)
        err = max(
            float((g.double() - w.double()).abs().max()) if g.numel() else 0.0 for g, w in zip(got, want)
        )
        ok = all(torch.allclose(g, w, rtol=1e-4, atol=1e-4) for g, w in zip(got, want))
        failures += not ok
        shapes = ", ".join(f"{o}({', '.join(s)})" for o, s in kernel.symbolic_output_shapes.items())
        rows.append(
            (
                sk.name,
                shapes,
                f"{err:.1e}",
                "ok" if ok else "MISMATCH",
                f"{t_tc * 1e3:.1f}",
                f"{t_torch * 1e3:.2f}",
            )
        )
    header = ("kernel", "outputs (inferred shapes)", "max |err|", "check", "tcjit ms", "torch ms")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*header))
    print(line.format(*("-" * w for w in widths)))
    for r in rows:
        print(line.format(*r))
    print(
        f"\n{len(rows) - failures} of {len(rows)} kernels match torch. tcjit times are the reference "
        "evaluator's: the compiled backends replace it."
    )
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tcjit`` command."""
    parser = argparse.ArgumentParser(prog="tcjit", description="Tensor Comprehensions for PyTorch")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="run the benchmark suite's kernels and compare with torch")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("show", help="print a stage of the compilation of an entry")
    p.add_argument("file")
    p.add_argument("--entry")
    p.add_argument("--sizes", help="concrete sizes, e.g. M=64,N=32")
    p.add_argument("--stage", choices=("ast", "checked", "canonical", "scop", "schedule"), default="checked")
    p.add_argument("--fusion", choices=("Max", "Preserve3Coincident", "Min"), default="Preserve3Coincident")
    p.add_argument("--tile", help="tile sizes of the outermost bands, e.g. 32,32 (0: untiled member)")
    p.add_argument(
        "--fix-sizes", action="store_true", help="specialise the Scop to --sizes before scheduling"
    )
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("run", help="run an entry on random inputs")
    p.add_argument("file")
    p.add_argument("--entry")
    p.add_argument("--sizes", required=True, help="sizes of the inputs, e.g. M=64,N=32")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_run)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except TCError as e:
        print(f"tcjit: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
