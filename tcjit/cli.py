"""The ``tcjit`` command line: ``demo``, ``show``, ``run``, ``tune`` and ``cache``.

* ``tcjit show FILE.tc --stage STAGE`` prints one stage of the compilation of an entry: ``ast``,
  ``checked`` (the default: types and index ranges), ``canonical``, ``backward`` (the derived
  augmented forward and backward TC of automatic differentiation; ``--wrt W1,B1`` for the
  backward for the gradients of some inputs only, ``--absent O1`` for a loss that does not read
  output ``O1``: the backward a training step with that loss runs), ``scop``, ``schedule``,
  ``options`` (the options a call would use, and where they come from: the flags, a tuned record
  or the defaults), ``tree`` (the mapped schedule tree and the mapping decisions), ``ir`` (the
  kernel IR the printer prints, indented), ``c`` (the generated C) or ``cuda`` (the CUDA source
  of the ``cuda`` target, which needs no GPU; ``--no-prelude`` leaves out the prelude both start
  with) or ``gpu-profile`` (the static GPU profile of the ``cuda`` target's kernels: per launch
  its occupancy, registers, what its warps ask of memory, a predicted time, its bound and a
  diagnosis, :func:`tcjit.gpu_profile`; ``--gpu h100|h200``, ``--format text|json``; no GPU
  needed, a CUDA compiler is). The last six need every size (``--sizes M=64,N=32``) and take the
  mapping options (``--options JSON``, ``--fusion``, ``--tile``, ``--no-parallel``, ``--no-vectorize``,
  ``--blocks``, ``--threads``, ``--target``); they lower for contiguous tensors, through the
  pipeline (:func:`tcjit.pipeline.lowered`). The stages before them are the pipeline's too
  (:func:`tcjit.pipeline.front_stage`).
* ``tcjit --version`` prints the version.
* ``tcjit run FILE.tc --sizes ...`` compiles the entry, runs it on random inputs, compares it with
  the oracle (:mod:`tcjit.reference`) and times it; exit code 1 on a mismatch. It says which
  options it used: those the flags give, a tuned record's (its id, as ``tcjit cache`` shows it), or
  the defaults. Integer inputs used
  as subscripts are drawn from the extent they index (:func:`tcjit.testing.index_ranges`);
  ``--range NAME=LO:HI`` sets an integer input's range (``tcjit tune`` takes it too).
* ``tcjit tune FILE.tc --sizes ...`` tunes the entry on random inputs; a size given as a range,
  ``B=1..64`` (bounds included), is tuned symbolic over that range (:mod:`tcjit.tuning_range`).
* ``tcjit demo`` compiles every benchmark-suite kernel at a small size, checks it against torch and
  the oracle, and prints compile and run times next to torch eager's.
* ``tcjit cache list|show|export|import|clear`` manages the tuned-options database
  (:mod:`tcjit.cli_cache`).

Every user mistake exits with code 2 and a message, never a Python traceback: a mistake on the
command line (a file that cannot be read, a bad ``--sizes``, a flag the chosen stage ignores) is one
line, ``tcjit: <message>``; a mistake in the TC text, the call or the options is the
:class:`~tcjit.TCError`'s message (with the source line and caret where it has one). Warnings are
printed as ``tcjit: warning: <message>``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Mapping

from .cli_args import (
    UsageError,
    check_seconds,
    load_entry,
    options_from_flags,
    options_origin,
    parse_ranges,
    parse_sizes,
    parse_tune_sizes,
)
from .cli_show import OPTION_STAGES, cmd_show
from .mapping.option_values import TARGETS
from .polyhedral.errors import TCError
from .stages import DEFAULT_FUSION, FRONT_STAGES

__all__ = ["main"]


# ------------------------------------------------------------------------------------- checking
def _median_time(fn: Callable[[], object], budget: float = 0.2, max_reps: int = 50) -> float:
    """Median wall time of ``fn()`` in seconds, after one warm-up call, within about ``budget`` s."""
    fn()
    times: list[float] = []
    spent = 0.0
    while len(times) < 3 or (spent < budget and len(times) < max_reps):
        start = time.perf_counter()
        fn()
        t = time.perf_counter() - start
        times.append(t)
        spent += t
    return statistics.median(times)


def _as_tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def cmd_run(args) -> int:
    """Compile an entry, run it on random inputs and compare it with the oracle; print error and times."""
    import tcjit

    from .reference import evaluate_def
    from .testing import compare_outputs, random_inputs, reduction_length

    check_seconds(args.budget, "--budget")
    program, cdef = load_entry(args.file, args.entry)
    sizes = parse_sizes(args.sizes, cdef.sizes)
    ranges = parse_ranges(args.range, cdef)
    kernel = tcjit.Kernel(program, cdef.name)
    inputs = random_inputs(cdef, sizes, seed=args.seed, ranges=ranges)
    _print_index_ranges(cdef, sizes, ranges)
    opts = options_from_flags(args, cdef, sizes)
    target = args.target or "cpu"
    print(f"options: {options_origin(kernel, inputs, target, opts)}")
    start = time.perf_counter()
    spec = tcjit.compile(kernel, *inputs, options=opts, target=target)
    t_compile = time.perf_counter() - start
    outs = _as_tuple(kernel(*inputs, options=opts, target=target))
    for name, o in zip(cdef.outputs, outs):
        summary = f"sum={o.double().sum().item():.6g}" if o.numel() else "empty"
        print(f"{name}: {o.dtype} {tuple(o.shape)} {summary}")
    start = time.perf_counter()
    want = evaluate_def(cdef, *inputs)
    t_oracle = time.perf_counter() - start
    err, ok = compare_outputs(outs, want, reduction_length(cdef, sizes))
    t_run = _median_time(lambda: kernel(*inputs, options=opts, target=target), budget=args.budget)
    how = "loaded from the kernel cache" if spec.from_disk else "compiled"
    print(f"max |err| vs oracle: {err:.3g}  {'ok' if ok else 'MISMATCH'}")
    print(
        f"{cdef.name}: {how} in {t_compile * 1e3:.1f} ms; run {t_run * 1e3:.3f} ms (median); "
        f"oracle {t_oracle * 1e3:.1f} ms"
    )
    if not ok:
        print(f"tcjit: {cdef.name}: the compiled kernel does not match the oracle", file=sys.stderr)
    return 0 if ok else 1


def _print_index_ranges(cdef, sizes: Mapping[str, int], given: Mapping[str, tuple[int, int]]) -> None:
    """One line saying where the integer inputs drawn from a range got it (nothing if none)."""
    from .testing import index_ranges

    ranges = {**index_ranges(cdef, sizes), **given}
    if ranges:
        print(
            "integer inputs: "
            + ", ".join(
                f"{name} in [{lo}, {hi}) ({'--range' if name in given else 'the extent it indexes'})"
                for name, (lo, hi) in ranges.items()
            )
        )


def cmd_tune(args) -> int:
    """Tune an entry on random inputs of the given sizes; store the best options; print a summary."""
    import tcjit

    from .testing import random_inputs
    from .tuning import tune_kernel

    program, cdef = load_entry(args.file, args.entry)
    sizes, size_ranges = parse_tune_sizes(args.sizes, cdef.sizes)
    ranges = parse_ranges(args.range, cdef)
    kernel = tcjit.Kernel(program, cdef.name)
    device = "cuda" if args.target == "cuda" else "cpu"
    inputs = random_inputs(cdef, sizes, device=device, seed=args.seed or 0, ranges=ranges)
    target = args.target
    settings = {
        name: getattr(args, name)
        for name in ("generations", "population", "timeout", "seed", "ray", "workers")
        if getattr(args, name) is not None
    }
    if size_ranges:
        settings["size_ranges"] = size_ranges
        sizes = {
            k: "{}..{} (symbolic)".format(*size_ranges[k]) if k in size_ranges else v
            for k, v in sizes.items()
        }
    print(f"tuning {cdef.name} at {', '.join(f'{k}={v}' for k, v in sizes.items())}", flush=True)
    report = tune_kernel(kernel, *inputs, target=target, progress=True, **settings)
    if report.best_options == report.default_options:
        print("options: the defaults (from the kernel's structure)")
    else:
        print(f"options: {report.best_options.to_json()}")
    if report.database is None:
        print("not stored (TCJIT_OPTIONS_DB is empty)")
    elif report.stored is None:
        print(f"nothing stored in {report.database} (the final rounds did not run)")
    else:
        what = "use the defaults" if report.stored.uses_defaults else "the tuned options"
        print(f"stored in {report.database}: record {report.stored.key.digest[:12]} ({what})")
    return 0


def cmd_demo(args) -> int:
    """Every suite kernel at a small size: compile, check against torch and the oracle, time."""
    import torch

    import tcjit

    from .demo_timing import FLAGS, demo_flags, time_calls
    from .reference import evaluate_def
    from .suite import SUITE
    from .testing import compare_outputs

    check_seconds(args.budget, "--budget")
    unknown = sorted(set(args.kernel or ()) - SUITE.keys())
    if unknown:
        raise UsageError(f"--kernel {unknown[0]}: no such suite kernel (the suite has {', '.join(SUITE)})")
    header = ("kernel", "sizes", "compile ms", "tcjit ms", "torch ms", "torch/tcjit", "correct", "timing")
    rows = []
    failures = 0
    start_all = time.perf_counter()
    for sk in SUITE.values():
        if args.kernel and sk.name not in args.kernel:
            continue
        sizes = sk.small_sizes[-1]
        kernel = tcjit.define(sk.source, sk.entry)
        inputs = sk.make_inputs(sizes)
        start = time.perf_counter()
        spec = tcjit.compile(kernel, *inputs)
        t_compile = time.perf_counter() - start
        got = _as_tuple(kernel(*inputs))
        with torch.no_grad():
            want = sk.torch_ref(*inputs)
        oracle = evaluate_def(sk.checked, *inputs)
        length = sk.reduction_length(sizes)
        err_torch, ok_torch = compare_outputs(got, want, length)
        err_oracle, ok_oracle = compare_outputs(got, oracle, length)
        ok = ok_torch and ok_oracle
        failures += not ok
        timed_tc = time_calls(lambda k=kernel, xs=inputs: k(*xs), budget=args.budget)
        with torch.no_grad():
            timed_torch = time_calls(lambda s=sk, xs=inputs: s.torch_ref(*xs), budget=args.budget)
        t_tc, t_torch = timed_tc.median, timed_torch.median
        flags = demo_flags(tcjit=timed_tc, torch=timed_torch)
        verdict = "ok" if ok else f"NO (torch {err_torch:.1e}, oracle {err_oracle:.1e})"
        rows.append(
            (
                sk.name,
                ",".join(f"{k}={v}" for k, v in sizes.items()),
                f"{t_compile * 1e3:.0f}" + (" (disk)" if spec.from_disk else ""),
                f"{t_tc * 1e3:.3f}",
                f"{t_torch * 1e3:.3f}",
                f"{t_torch / t_tc:.2f}" if t_tc > 0 else "-",
                verdict,
                flags or "-",
            )
        )
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*header))
    print(line.format(*("-" * w for w in widths)))
    for r in rows:
        print(line.format(*r))
    print(
        f"\n{len(rows) - failures} of {len(rows)} kernels match torch and the oracle "
        f"({time.perf_counter() - start_all:.1f} s). Times are medians of repeated calls on "
        f"{torch.get_num_threads()} thread(s); torch/tcjit > 1 means tcjit is faster. "
        "(disk): loaded from the kernel cache, not compiled."
    )
    print(
        "Sizes: each kernel's last small test size in tcjit.suite (odd, prime and unit extents that "
        "reach boundary code, at most ~2e6 multiply-adds), not the benchmark sizes of "
        "bench/cpu_suite.py (docs/performance.md)."
    )
    print("Timing flags (a flagged row's times are not to be trusted; run the demo again):")
    for flag, meaning in FLAGS.items():
        print(f"  {flag:<5}  {meaning}")
    return 1 if failures else 0


def _add_option_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--options", metavar="JSON", help="mapping options, as MappingOptions.to_json() writes them"
    )
    p.add_argument(
        "--fusion",
        choices=("Max", "Preserve3Coincident", "Min"),
        default=None,
        help=f"outer schedule fusion strategy (show --stage schedule: default {DEFAULT_FUSION})",
    )
    p.add_argument("--tile", help="tile sizes of the outermost band, e.g. 32,32 (0: untiled member)")
    p.add_argument("--no-parallel", action="store_true", help="no OpenMP parallel loop")
    p.add_argument("--no-vectorize", action="store_true", help="no SIMD loop")
    p.add_argument(
        "--target",
        choices=("cpu", "cuda-emulated"),
        help="cpu, or cuda-emulated: the CUDA mapping as C that runs blocks and threads on the CPU",
    )
    p.add_argument("--blocks", help="CUDA: map_to_blocks, e.g. 256,256")
    p.add_argument("--threads", help="CUDA: map_to_threads, e.g. 32,8 (x first)")


def _add_range_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--range",
        action="append",
        metavar="NAME=LO:HI",
        help="draw integer input NAME from [LO, HI) (repeatable); inputs used as subscripts are "
        "drawn from the extent they index by default, other integers from [-8, 8) ([0, 16) unsigned)",
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tcjit`` command."""
    from .version import __version__

    parser = argparse.ArgumentParser(prog="tcjit", description="Tensor Comprehensions for PyTorch")
    parser.add_argument("--version", action="version", version=f"tcjit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "demo", help="compile the benchmark suite's kernels, check and time them against torch"
    )
    p.add_argument("--kernel", action="append", help="only this suite kernel (repeatable)")
    p.add_argument("--budget", type=float, default=0.05, help="seconds of timing per kernel and side")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("show", help="print a stage of the compilation of an entry")
    p.add_argument("file")
    p.add_argument("--entry")
    p.add_argument(
        "--sizes", help="concrete sizes, e.g. M=64,N=32 (needed by --stage tree, ir, c, cuda and gpu-profile)"
    )
    p.add_argument("--stage", choices=(*FRONT_STAGES, *OPTION_STAGES), default="checked")
    _add_option_flags(p)
    p.add_argument(
        "--fix-sizes", action="store_true", help="specialise the Scop to --sizes before scheduling"
    )
    p.add_argument(
        "--no-prelude",
        action="store_true",
        help="--stage c and cuda: leave out the prelude (TC's value semantics, the same in every kernel)",
    )
    p.add_argument(
        "--wrt",
        help="--stage backward: the inputs whose gradients the backward returns, e.g. W1,B1 "
        "(default: every input of a float type)",
    )
    p.add_argument(
        "--absent",
        help="--stage backward: outputs whose gradient is absent (the loss does not read them), "
        "e.g. O1,O2: the backward a training step with that loss runs",
    )
    p.add_argument(
        "--gpu",
        help="--stage gpu-profile: the device predicted for, h100 (the default) or h200",
    )
    p.add_argument(
        "--format",
        choices=("text", "json"),
        help="--stage gpu-profile: text to read (default) or JSON to process",
    )
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("run", help="compile an entry, run it on random inputs, compare with the oracle")
    p.add_argument("file")
    p.add_argument("--entry")
    p.add_argument("--sizes", required=True, help="sizes of the inputs, e.g. M=64,N=32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", type=float, default=0.2, help="seconds spent timing the kernel")
    _add_range_flag(p)
    _add_option_flags(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser(
        "tune",
        help="search for fast options for an entry at given sizes (genetic search); store the best",
    )
    p.add_argument("file")
    p.add_argument("--entry")
    p.add_argument(
        "--sizes",
        required=True,
        help="sizes of the inputs, e.g. M=64,N=32; a range B=1..64 (bounds included, from 1) tunes B "
        "as a symbolic size: one kernel per candidate, timed at the bounds and two sizes between "
        "them (geometric mean), used by kernels with B symbolic for calls in the range",
    )
    p.add_argument("--generations", type=int, help="generations, the first included (default 10)")
    p.add_argument("--population", type=int, help="candidates per generation (default 16)")
    p.add_argument("--timeout", type=float, help="seconds for the whole search (default: no limit)")
    p.add_argument("--seed", type=int, help="seed of the search and of the random inputs")
    _add_range_flag(p)
    p.add_argument("--workers", type=int, help="parallel compilations (default: the CPU count)")
    p.add_argument(
        "--ray", metavar="ADDRESS", help="spread candidates over a Ray cluster ('auto', ray://...)"
    )
    p.add_argument(
        "--target",
        choices=TARGETS,
        default="cpu",
        help="cpu (default), cuda (inputs made on the GPU), or cuda-emulated",
    )
    p.set_defaults(func=cmd_tune)
    from .cli_cache import add_cache_parser

    add_cache_parser(sub)
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            return args.func(args)
        except UsageError as e:
            print(f"tcjit: {e}", file=sys.stderr)
            return 2
        except TCError as e:
            print(f"tcjit: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        except BrokenPipeError:  # `tcjit run ... | head`: the reader left; quietly, as cat does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit's flush
            return 141


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one line on stderr (``tcjit: warning: ...``), without the Python source line."""
    text = str(message).removeprefix("tcjit: ")
    print(f"tcjit: warning: {text}", file=file or sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
