"""Each suite kernel once at its GPU sizes, for a profiler to read: the hardware's own counts
(bytes from DRAM, sectors per request, bank conflicts, occupancy, registers) of every tcjit launch,
against which the static GPU model's per-access predictions are checked.

    ncu --kernel-name regex:^tc_ --csv --page raw --section LaunchStats ... \\
        python bench/gpu_ncu.py --out launches.json

Every kernel is compiled (default options, a fresh kernel cache) and then called once; the launches
that the profiler sees are, in order, those listed in ``--out``: per suite kernel and size, its CUDA
source digest, launches and options (:func:`_harness.cuda_calibration`), so that each profiled
launch can be matched with the source that made it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from _harness import (
    cuda_calibration,
    cuda_unusable,
    describe_error,
    disable_tf32,
    fresh_cache_dir,
    machine_info,
    select_kernels,
    sizes_list,
)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Each suite kernel once at its GPU sizes, for a profiler.")
    p.add_argument("--kernels", default=None, help="comma-separated suite kernels (default: all)")
    p.add_argument("--out", type=Path, required=True, help="JSON list of the launches, in order")
    p.add_argument(
        "--sweep",
        action="store_true",
        help="each kernel at its first GPU size under every option set of bench/gpu_option_sweep.py instead",
    )
    args = p.parse_args(argv)
    why = cuda_unusable()
    if why is not None:
        print(f"gpu_ncu.py: {why}", file=sys.stderr)
        return 2
    with fresh_cache_dir():
        import torch

        import tcjit
        from tcjit.binding import bind
        from tcjit.pipeline import default_options

        disable_tf32()
        runs = []
        for sk in select_kernels(args.kernels):
            for sizes in sizes_list(sk, "gpu")[:1] if args.sweep else sizes_list(sk, "gpu"):
                inputs = sk.make_inputs(sizes, device="cuda")
                k = tcjit.define(sk.source, name=sk.entry)
                if args.sweep:
                    from gpu_option_sweep import candidates

                    sets = candidates(k.definition, bind(k.definition, inputs, None).sizes)
                else:
                    sets = {
                        "default": default_options(
                            k.definition, bind(k.definition, inputs, None).sizes, "cuda"
                        )
                    }
                for name, options in sets.items():
                    try:
                        spec = tcjit.compile(k, *inputs, options=None if name == "default" else options)
                        torch.cuda.synchronize()
                        spec(*inputs)  # the launches the profiler reads
                        torch.cuda.synchronize()
                    except Exception as e:  # a candidate that fails is left out, not fatal
                        print(sk.name, name, "failed:", describe_error(e), file=sys.stderr, flush=True)
                        continue
                    run = {"kernel": sk.name, "sizes": dict(sizes), "candidate": name}
                    runs.append({**run, **cuda_calibration(spec, options)})
                    print(sk.name, sizes, name, file=sys.stderr, flush=True)
                    args.out.write_text(json.dumps({"machine": machine_info("cuda"), "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
