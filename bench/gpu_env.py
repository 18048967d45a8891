"""What the GPU routine (``scripts/gpu_check.sh``) prints first: the device and the software that
its figures depend on, one line each, so that a run's log says what it ran on.

    python bench/gpu_env.py           # the report
    python bench/gpu_env.py --slug    # the GPU's name for result files (nvidia_h100_80gb_hbm3)
    python bench/gpu_env.py --ncu     # the path of Nsight Compute's ncu, or nothing

The report: nvidia-smi's line for each GPU (name, driver, SM clock now and at most, memory clock,
temperature, power); Python; torch with its CUDA runtime and cuDNN, and the device as torch sees
it (compute capability, SMs, memory) or why no CUDA device is usable; the driver's CUDA version;
CuPy with the NVRTC it compiles tcjit's kernels with; the NVRTC or nvcc with which the static
profile compiles its cubins (``tcjit.nvrtc``: the registers behind every prediction); ncu; tcjit's
commit. Nothing here fails: what is missing is printed as missing. Exit status: 0 where a CUDA
device is usable, 2 where none is.
"""

from __future__ import annotations

import argparse
import glob
import platform
import shutil
import subprocess
import sys
from collections.abc import Sequence

from _harness import cuda_unusable, describe_error, gpu_info, machine_info, slug

SMI_QUERY = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw"
"""What nvidia-smi is asked for (``--query-gpu``)."""


def _run(*cmd: str) -> str | None:
    """The command's standard output, stripped; ``None`` where it cannot run or fails."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def ncu_path() -> str | None:
    """Nsight Compute's ``ncu``: on ``PATH``, else the newest under ``/opt/nvidia/nsight-compute``."""
    installed = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))
    return shutil.which("ncu") or (installed[-1] if installed else None)


def _nvrtc_line() -> str:
    try:
        from tcjit import nvrtc

        compilers = []
        if (v := nvrtc.nvrtc_version()) is not None:
            compilers.append(f"NVRTC {v[0]}.{v[1]}")
        if (v := nvrtc.nvcc_version()) is not None:
            compilers.append(f"nvcc {v[0]}.{v[1]}")
        used = nvrtc.backend()
    except Exception as e:  # tcjit not importable: say so, go on
        return f"not importable ({describe_error(e)})"
    if not compilers:
        return "none (pip install nvidia-cuda-nvrtc, or nvcc on PATH): no predictions"
    return f"{', '.join(compilers)}; the cubins use {used}"


def _cupy_line() -> str:
    try:
        import cupy
    except Exception as e:  # not installed or broken: either way not usable
        return f"not importable ({describe_error(e)})"
    try:
        v = cupy.cuda.nvrtc.getVersion()
        return f"{cupy.__version__}, its NVRTC {v[0]}.{v[1]}"
    except Exception as e:  # no CUDA library behind CuPy
        return f"{cupy.__version__}, its NVRTC unknown ({describe_error(e)})"


def report() -> tuple[list[str], bool]:
    """The report's lines, and whether a CUDA device is usable."""
    import torch

    smi = _run("nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv,noheader")
    lines = [f"nvidia-smi: {line}" for line in (smi or "not found or failing").splitlines()]
    lines.append(f"python: {platform.python_version()} ({sys.executable})")
    why = cuda_unusable()
    if why is None:
        g = gpu_info()
        props = torch.cuda.get_device_properties(0)
        lines.append(
            f"torch: {torch.__version__}, CUDA runtime {g['cuda_runtime_version']}, cuDNN "
            f"{g['cudnn_version']}; device {g['gpu_name']} (compute capability "
            f"{g['gpu_compute_capability']}, {props.multi_processor_count} SMs, "
            f"{g['gpu_total_memory_bytes'] / 2**30:.0f} GiB)"
        )
        lines.append(f"CUDA driver: for CUDA {g['cuda_driver_version'] or 'unknown'}")
    else:
        lines.append(f"torch: {torch.__version__}, CUDA runtime {torch.version.cuda}; {why}")
    lines.append(f"CuPy: {_cupy_line()}")
    lines.append(f"static profile's compiler: {_nvrtc_line()}")
    ncu = ncu_path()
    version = _run(ncu, "--version") if ncu else None
    lines.append(
        f"ncu: {ncu} ({version.splitlines()[-1] if version else 'version unknown'})" if ncu else "ncu: none"
    )
    try:
        m = machine_info("cpu")
        dirty = " (with uncommitted changes)" if m["tcjit_tree_dirty"] else ""
        lines.append(f"tcjit: {m['tcjit_version']} at commit {m['tcjit_commit'] or 'unknown'}{dirty}")
        lines.append(f"host: {m['cpu_model']}, {m['logical_cpus']} logical CPUs, {m['platform']}")
    except Exception as e:  # tcjit not importable: the routine's set-up failed, say so
        lines.append(f"tcjit: not importable ({describe_error(e)})")
    return lines, why is None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="The GPU routine's report of the device and its software.")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--slug", action="store_true", help="print the GPU's name for result files")
    what.add_argument("--ncu", action="store_true", help="print the path of ncu (nothing without one)")
    args = p.parse_args(argv)
    if args.ncu:
        print(ncu_path() or "")
        return 0
    if args.slug:
        import torch

        print(slug(torch.cuda.get_device_name()) if cuda_unusable() is None else "no_gpu")
        return 0
    lines, usable = report()
    print("\n".join(lines), flush=True)
    return 0 if usable else 2


if __name__ == "__main__":
    sys.exit(main())
