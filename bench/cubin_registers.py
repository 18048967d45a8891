"""Registers and shared memory from sm_90 cubins compiled here, against Nsight Compute's on an H100.

Issue 32's static GPU profile reads each kernel's resources from a cubin compiled without a GPU
(``tcjit.nvrtc.compile_cubin``). This script checks those figures against hardware: for every run
recorded by ``bench/gpu_ncu.py`` on a GPU (suite kernel, sizes, options, CUDA source digest,
launches), it regenerates the CUDA source with the recorded options, checks its SHA-256 against the
recorded one (a mismatch means HEAD no longer makes the source that was measured, and is reported),
compiles it to a cubin and sets per launch the registers, static shared memory and barriers ptxas
reports beside ``launch__registers_per_thread``, ``launch__shared_mem_per_block_static`` and
``launch__barrier_count`` from the profiler's raw CSV (rows matched to launches in order, by name,
grid and block), with the spills and stack frame ptxas reports.

The measured kernels were compiled by CuPy through the GPU machine's NVRTC with only
``--std=c++17`` and CuPy's choice of architecture; a different NVRTC release here allocates
registers differently, so small differences are reported as they are.

    python bench/cubin_registers.py [--launches RUNS.json] [--ncu RAW.csv] [--out STEM]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _harness import (
    REPO,
    RESULTS,
    format_sizes,
    machine_info,
    machine_markdown,
    markdown_table,
    ncu_rows,
    recorded_kernel,
    write_results,
)

GPU = "nvidia_h100_80gb_hbm3"
NCU_COLUMNS = {
    "registers": "launch__registers_per_thread",
    "shared_bytes": "launch__shared_mem_per_block_static",
    "barriers": "launch__barrier_count",
    "stack_size": "launch__stack_size",
}


def read_ncu(path: Path) -> dict[tuple[str, tuple[int, ...], tuple[int, ...]], list[dict[str, int]]]:
    """Nsight Compute's raw CSV (header row, units row, a row per launch): per (kernel name, grid,
    block), the launches' figures of :data:`NCU_COLUMNS`, in the order profiled."""
    out: dict[tuple, list[dict[str, int]]] = collections.defaultdict(list)
    for d in ncu_rows(path):
        key = (d["Kernel Name"], _dims(d["Grid Size"]), _dims(d["Block Size"]))
        out[key].append({k: int(d[c].replace(",", "")) for k, c in NCU_COLUMNS.items() if d.get(c, "")})
    return out


def _rel(path: Path) -> str:
    """``path`` relative to the repository where it is inside it (no machine's folders in results)."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.strip("() ").split(","))


def compare(launches_path: Path, ncu_path: Path, arch: str, using: str | None) -> dict[str, Any]:
    """The document: per run its digest check, per launch ours and ncu's figures, and a summary."""
    from tcjit import nvrtc, pipeline

    recorded = json.loads(launches_path.read_text())
    ncu = read_ncu(ncu_path)
    runs, rows = [], []
    compiler: tuple[str | None, tuple[int, int] | None] = (None, None)
    for run in recorded["runs"]:
        sk, cdef, options = recorded_kernel(run)
        low = pipeline.lowered(cdef, run["sizes"], options, "cuda")
        digest = hashlib.sha256(low.source.encode()).hexdigest()
        launches = [[k.name, list(k.grid), list(k.block)] for k in low.kernels]
        cubin = nvrtc.compile_cubin(low.source, name=f"tc_{sk.name}.cu", arch=arch, using=using)
        compiler = (cubin.compiler, cubin.version)
        runs.append(
            {
                "kernel": sk.name,
                "sizes": run["sizes"],
                "cuda_source_sha256": digest,
                "digest_matches": digest == run["cuda_source_sha256"],
                "launches_match": launches == run["launches"],
            }
        )
        for name, grid, block in run["launches"]:
            measured = ncu.get((name, tuple(grid), tuple(block)))
            theirs = measured.pop(0) if measured else {}
            try:
                ours = cubin.resources(name)
            except KeyError:
                ours = nvrtc.KernelResources(name=name)
            rows.append(
                {
                    "kernel": sk.name,
                    "sizes": run["sizes"],
                    "launch": name,
                    "grid": grid,
                    "block": block,
                    "registers": ours.registers,
                    "ncu_registers": theirs.get("registers"),
                    "shared_bytes": ours.shared_bytes,
                    "ncu_shared_bytes": theirs.get("shared_bytes"),
                    "barriers": ours.barriers,
                    "ncu_barriers": theirs.get("barriers"),
                    "stack_frame_bytes": ours.stack_frame_bytes,
                    "spill_store_bytes": ours.spill_store_bytes,
                    "spill_load_bytes": ours.spill_load_bytes,
                    "ncu_stack_size": theirs.get("stack_size"),
                }
            )
        status = "digest ok" if runs[-1]["digest_matches"] else "DIGEST DIFFERS"
        print(sk.name, format_sizes(run["sizes"]), status, file=sys.stderr, flush=True)
    return {
        "machine": machine_info(),
        "measured_on": recorded.get("machine", {}),
        "settings": {
            "arch": arch,
            "compiler": compiler[0],
            "compiler_version": compiler[1],
            "launches": _rel(launches_path),
            "ncu_csv": _rel(ncu_path),
        },
        "summary": summarise(runs, rows),
        "runs": runs,
        "launches": rows,
    }


def summarise(runs: list[dict], rows: list[dict]) -> dict[str, Any]:
    """How many launches match the profiler's figures exactly, and the largest register difference."""
    measured = [r for r in rows if r["ncu_registers"] is not None and r["registers"] is not None]
    diffs = [r["registers"] - r["ncu_registers"] for r in measured]
    worst = max(measured, key=lambda r: abs(r["registers"] - r["ncu_registers"]), default=None)
    return {
        "launches": len(rows),
        "with_ncu_figures": len(measured),
        "without_ncu_figures": [r["launch"] for r in rows if r["ncu_registers"] is None],
        "registers_equal": sum(d == 0 for d in diffs),
        "registers_ours_higher": sum(d > 0 for d in diffs),
        "registers_ours_lower": sum(d < 0 for d in diffs),
        "largest_register_difference": None
        if worst is None
        else {
            "launch": worst["launch"],
            "sizes": worst["sizes"],
            "ours": worst["registers"],
            "ncu": worst["ncu_registers"],
        },
        # ncu never showed fewer than 16 registers per thread on the H100: ptxas's count with that
        # floor, and the launches it does not explain
        "ncu_fewest_registers": min((r["ncu_registers"] for r in measured), default=None),
        "registers_equal_with_floor_16": sum(max(r["registers"], 16) == r["ncu_registers"] for r in measured),
        "registers_differing_with_floor_16": [
            {"launch": r["launch"], "sizes": r["sizes"], "ours": r["registers"], "ncu": r["ncu_registers"]}
            for r in measured
            if max(r["registers"], 16) != r["ncu_registers"]
        ],
        "shared_equal": sum(r["shared_bytes"] == r["ncu_shared_bytes"] for r in measured),
        "barriers_equal": sum(r["barriers"] == r["ncu_barriers"] for r in measured),
        "spilling_launches": [r["launch"] for r in rows if r["spill_store_bytes"] or r["spill_load_bytes"]],
        "digest_mismatches": [
            {"kernel": r["kernel"], "sizes": r["sizes"]} for r in runs if not r["digest_matches"]
        ],
        "launch_mismatches": [
            {"kernel": r["kernel"], "sizes": r["sizes"]} for r in runs if not r["launches_match"]
        ],
    }


def _cell(ours: object, theirs: object) -> str:
    if theirs is None:
        return f"{ours} / —"
    return f"{ours} / {theirs}" + ("" if ours == theirs else " ≠")


def render(doc: dict[str, Any]) -> str:
    s, settings, gpu = doc["summary"], doc["settings"], doc["measured_on"]
    n = s["with_ncu_figures"]
    version = ".".join(map(str, settings["compiler_version"] or ())) or "unknown"
    worst = s["largest_register_difference"]
    if worst is not None:
        worst = f"{worst['launch']} at {format_sizes(worst['sizes'])}: {worst['ours']} vs {worst['ncu']}"
    floor = ", ".join(
        f"{m['launch']} at {format_sizes(m['sizes'])} ({m['ours']} vs {m['ncu']})"
        for m in s["registers_differing_with_floor_16"]
    )
    digests = [f"{m['kernel']} at {format_sizes(m['sizes'])}" for m in s["digest_mismatches"]]
    lines = [
        f"# Registers of {settings['arch']} cubins compiled without a GPU vs Nsight Compute"
        f" on {gpu.get('gpu_name', 'a GPU')}",
        "",
        "Each suite kernel's CUDA source, regenerated from the options recorded in"
        f" `{settings['launches']}`, compiled here to a cubin by {settings['compiler']} {version}"
        " (`tcjit.nvrtc.compile_cubin`, ptxas `-v`), against the profiler's raw CSV"
        f" `{settings['ncu_csv']}` measured at commit {str(gpu.get('tcjit_commit'))[:7]}"
        f" (CuPy {gpu.get('cupy_version', '?')} compiled those kernels with that machine's NVRTC and"
        " only `--std=c++17`). Cells are `ours / ncu`; `≠` marks a difference.",
        "",
        f"- launches: {s['launches']}, with ncu figures: {n}",
        f"- registers per thread equal: {s['registers_equal']} of {n}"
        f" (ours higher: {s['registers_ours_higher']}, lower: {s['registers_ours_lower']})",
        f"- largest register difference: {worst or 'none'}",
        f"- ncu's fewest registers per thread: {s['ncu_fewest_registers']}; with ptxas's count raised to"
        f" 16, equal: {s['registers_equal_with_floor_16']} of {n}; still different: {floor or 'none'}",
        f"- static shared memory equal: {s['shared_equal']} of {n};"
        f" barriers equal: {s['barriers_equal']} of {n}",
        f"- launches that spill: {', '.join(s['spilling_launches']) or 'none'}",
        f"- CUDA source digests that differ from the recorded ones: {', '.join(digests) or 'none'}",
        "- ncu's `launch__stack_size` is the stack the driver reserves per thread (the context's limit,"
        " 1024 bytes by default), not the function's frame: it is kept in the JSON only.",
        "",
    ]
    header = [
        "kernel",
        "sizes",
        "launch",
        "grid",
        "block",
        "registers",
        "static smem (B)",
        "barriers",
        "stack frame (B)",
        "spill st/ld (B)",
    ]
    table = [
        [
            r["kernel"],
            format_sizes(r["sizes"]),
            r["launch"],
            "×".join(map(str, r["grid"])),
            "×".join(map(str, r["block"])),
            _cell(r["registers"], r["ncu_registers"]),
            _cell(r["shared_bytes"], r["ncu_shared_bytes"]),
            _cell(r["barriers"], r["ncu_barriers"]),
            str(r["stack_frame_bytes"]),
            f"{r['spill_store_bytes']}/{r['spill_load_bytes']}",
        ]
        for r in doc["launches"]
    ]
    lines += [markdown_table(header, table), "", "Compiled on:", "", machine_markdown(doc["machine"])]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Cubin registers and shared memory against Nsight Compute's.")
    p.add_argument("--launches", type=Path, default=RESULTS / f"gpu_ncu_launches_{GPU}.json")
    p.add_argument("--ncu", type=Path, default=RESULTS / f"gpu_ncu_{GPU}.csv", help="ncu --csv --page raw")
    p.add_argument("--arch", default="sm_90", help="the real architecture (sm_90: H100, H200)")
    p.add_argument("--using", choices=("nvrtc", "nvcc"), default=None, help="force a compiler")
    p.add_argument("--out", type=Path, default=RESULTS / f"cubin_registers_{GPU}", help="<out>.json and .md")
    args = p.parse_args(argv)
    doc = compare(args.launches, args.ncu, args.arch, args.using)
    json_path, md_path = write_results(args.out, doc, render(doc))
    print(render(doc))
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
