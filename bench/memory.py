"""What a process keeps for compiled kernels: resident memory and mapped kernel libraries.

Two figures (issue 29):

- ``shapes``: a two-statement kernel whose temporary ``T`` takes 16 MB (``--rows`` x ``--rows +
  s`` float32 elements, 2048 rows by default; its inputs and output hold a few KB, so that torch's
  own allocations do not blur the figure), called once with each of ``--shapes`` sizes (40), then
  deleted. Prints the resident set size (``VmRSS`` of /proc/self/status) growth after the calls,
  after ``del k; gc.collect()`` and after glibc's ``malloc_trim(0)`` (what glibc's heap keeps of
  blocks already freed), and how many kernel libraries are mapped at each point;
- ``kernels``: ``--kernels`` (500) distinct small kernels, each defined, called once and deleted.
  Prints how many kernel libraries stay mapped (/proc/self/maps) and the RSS growth.

Kernels come from ``TCJIT_CACHE_DIR`` when they are there (set it to a directory of your own: the
first run compiles 540 kernels, later ones load them). The process's memory budget is
``TCJIT_MEMORY_BUDGET`` (docs/cpu-backend.md, "Caches").

    TCJIT_CACHE_DIR=/tmp/memory-bench python bench/memory.py
    TCJIT_CACHE_DIR=/tmp/memory-bench TCJIT_MEMORY_BUDGET=128MiB python bench/memory.py --figure shapes
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os

import torch

import tcjit

TWO_STATEMENTS = """
def outer(float(N) A, float(M) B) -> (S) {
    T(i, j) = A(i) * B(j)
    S(i) +=! T(i, r_j)
}
"""


def rss_mib() -> float:
    """This process's resident set size in MiB (VmRSS)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def mapped_libraries() -> int:
    """How many tcjit kernel libraries are mapped into this process (distinct files)."""
    paths = set()
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        for line in f:
            if "/tcjit-so-" in line:
                paths.add(line.split(None, 5)[-1].strip())
    return len(paths)


def shapes_figure(shapes: int, rows: int) -> dict:
    """RSS and mapped libraries around ``shapes`` sizes of :data:`TWO_STATEMENTS` (a 16 MB
    temporary at the default ``rows``)."""
    k = tcjit.define(TWO_STATEMENTS)
    k(torch.ones(8), torch.ones(8))  # torch and tcjit warmed up: their own memory is in the start
    a = torch.ones(rows)
    gc.collect()
    start, libs0 = rss_mib(), mapped_libraries()
    for s in range(shapes):
        assert float(k(a, torch.ones(rows + s))[-1]) == rows + s
    gc.collect()
    held, libs1 = rss_mib(), mapped_libraries()
    del k
    gc.collect()
    after, libs2 = rss_mib(), mapped_libraries()
    ctypes.CDLL(None).malloc_trim(0)
    return {
        "figure": "shapes",
        "shapes": shapes,
        "temporary_mb": round(rows * rows * 4 / 1e6, 1),
        "rss_growth_after_calls_mib": round(held - start),
        "rss_growth_after_del_mib": round(after - start),
        "rss_growth_after_malloc_trim_mib": round(rss_mib() - start),
        "libraries_after_calls": libs1 - libs0,
        "libraries_after_del": libs2 - libs0,
    }


def kernels_figure(kernels: int) -> dict:
    """Mapped libraries and RSS after ``kernels`` distinct kernels were defined, called, deleted."""
    x = torch.ones(16)
    gc.collect()
    start, libs0 = rss_mib(), mapped_libraries()
    for n in range(kernels):
        k = tcjit.define(f"def add{n}(float(N) A) -> (B) {{ B(i) = A(i) + {n}.0 }}")
        assert float(k(x)[0]) == 1.0 + n
        del k
    gc.collect()
    return {
        "figure": "kernels",
        "kernels": kernels,
        "libraries_mapped_after_del": mapped_libraries() - libs0,
        "rss_growth_after_del_mib": round(rss_mib() - start),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figure", choices=("shapes", "kernels", "both"), default="both")
    parser.add_argument("--shapes", type=int, default=40)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--kernels", type=int, default=500)
    parser.add_argument("--out", default=None, help="write <out>.json and .md, e.g. bench/results/memory")
    args = parser.parse_args()
    torch.set_num_threads(2)
    figures = []
    if args.figure in ("shapes", "both"):
        figures.append(shapes_figure(args.shapes, args.rows))
        print(json.dumps(figures[-1]))
    if args.figure in ("kernels", "both"):
        figures.append(kernels_figure(args.kernels))
        print(json.dumps(figures[-1]))
    if args.out:
        import _harness as H

        info = H.machine_info()
        budget = os.environ.get("TCJIT_MEMORY_BUDGET", "the default")
        title = "# What the process keeps for compiled kernels"
        lines = [f"- `{json.dumps(f)}`" for f in figures]
        md = "\n".join([title, "", f"Budget: {budget}.", "", H.machine_markdown(info), "", *lines, ""])
        H.write_results(args.out, {"budget": budget, "machine": info, "figures": figures}, md)


if __name__ == "__main__":
    main()
