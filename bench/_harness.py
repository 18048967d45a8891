"""What the benchmark scripts share: interleaved timing, output checks, machine facts, result files.

Timing is interleaved: the contenders of one comparison (tcjit, torch eager, torch.compile, ...) run
in the same process, one timed *sample* of each per *round*, for many rounds, and each contender's
figure is the median of its samples. Noise that drifts over seconds (frequency scaling, a neighbour
on a shared machine, a warming page cache) then lands on every contender alike instead of on
whichever ran while it lasted, and the median discards the rounds that a burst of noise spoiled. The
order of the contenders rotates from round to round, so none always runs just after the same other.

A sample times enough back-to-back calls of one contender to last at least ``min_sample_s`` (about
20 ms by default) with :func:`time.perf_counter`, with the garbage collector paused, and reports the
time per call; the number of calls is calibrated once per contender before the first round. Caches
are not flushed between calls (KERNELS.md: that is part of the benchmark). On a GPU, where calls
only queue work, the timing functions take a ``sync`` callable (:func:`device_sync`:
``torch.cuda.synchronize``) that every sample calls right before it reads the clock at its start
and at its end, so a sample spans the device's work and not just the launches.

Importing this module does not import tcjit: a script first points ``TCJIT_CACHE_DIR`` at a fresh
directory (:func:`fresh_cache_dir`) and only then imports tcjit.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import gc
import json
import math
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from tcjit.suite import SuiteKernel

__all__ = [
    "DEFAULT_MIN_SAMPLE_S",
    "REPO",
    "RESULTS",
    "SIZE_KINDS",
    "SUITE_SIZE_KINDS",
    "CheckResult",
    "Timing",
    "as_tuple",
    "calibrate",
    "check_outputs",
    "cuda_unusable",
    "describe_error",
    "device_sync",
    "format_rate",
    "format_seconds",
    "format_sizes",
    "fresh_cache_dir",
    "gpu_info",
    "interleaved",
    "machine_info",
    "machine_markdown",
    "markdown_table",
    "rate",
    "select_kernels",
    "sizes_for",
    "sizes_list",
    "slug",
    "write_results",
]

REPO = Path(__file__).resolve().parent.parent
"""The repository root (for ``git rev-parse``)."""

RESULTS = Path(__file__).resolve().parent / "results"
"""Where the scripts write their results by default."""

DEFAULT_MIN_SAMPLE_S = 0.02
"""A timed sample lasts at least this long (seconds), so that timer resolution and call jitter vanish."""

SIZE_KINDS = ("cpu", "small")
"""``--sizes`` choices: the suite's CPU benchmark sizes, or its first small (test) size."""

SUITE_SIZE_KINDS = ("cpu", "gpu", "small")
"""``--sizes`` choices of the suite benchmark: :data:`SIZE_KINDS` and the suite's GPU benchmark sizes."""

Sync = Callable[[], object]
"""A zero-argument callable that waits for the device (``torch.cuda.synchronize``)."""


# ======================================================================================== timing
@dataclass(frozen=True)
class Timing:
    """Per-call times of one contender over all rounds (seconds).

    :ivar median_s: the median over samples of the time per call: the figure to report.
    :ivar min_s: the fastest sample's time per call.
    :ivar max_s: the slowest sample's time per call.
    :ivar samples_s: every sample's time per call, in round order.
    :ivar calls_per_sample: back-to-back calls in each sample.
    """

    median_s: float
    min_s: float
    max_s: float
    samples_s: tuple[float, ...]
    calls_per_sample: int

    @classmethod
    def of(cls, samples: Sequence[float], calls_per_sample: int) -> Timing:
        return cls(
            median_s=statistics.median(samples),
            min_s=min(samples),
            max_s=max(samples),
            samples_s=tuple(samples),
            calls_per_sample=calls_per_sample,
        )

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples_s"] = list(self.samples_s)
        d["rounds"] = len(self.samples_s)
        return d


def _sample(fn: Callable[[], object], calls: int, sync: Sync | None = None) -> float:
    """Time ``calls`` back-to-back calls of ``fn``; the time per call in seconds.

    With ``sync``, it is called right before the clock is read at the start and at the end, so that
    the sample starts on an idle device and ends when the device has done the calls' work.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if sync is not None:
            sync()
        t1 = time.perf_counter()
    finally:
        if gc_was_enabled:
            gc.enable()
    return (t1 - t0) / calls


def calibrate(
    fn: Callable[[], object], min_sample_s: float = DEFAULT_MIN_SAMPLE_S, *, sync: Sync | None = None
) -> tuple[int, float]:
    """How many back-to-back calls of ``fn`` last at least ``min_sample_s``, and the time per call
    measured while finding out (seconds).

    Grows the call count geometrically from 1, so that a slow ``fn`` is called once and a fast one
    about ``min_sample_s`` worth of times per step. ``fn`` should be warm (called once already).
    ``sync``: as for :func:`interleaved`.
    """
    calls = 1
    while True:
        per_call = _sample(fn, calls, sync)
        if per_call * calls >= min_sample_s:
            return calls, per_call
        # Aim 20% past the target, at most 100x more calls per step in case the first was an outlier.
        want = math.ceil(1.2 * min_sample_s / max(per_call, 1e-9))
        calls = max(calls + 1, min(want, 100 * calls))


def interleaved(
    contenders: Mapping[str, Callable[[], object]],
    *,
    max_rounds: int,
    budget_s: float,
    min_rounds: int = 3,
    min_sample_s: float = DEFAULT_MIN_SAMPLE_S,
    calls_per_sample: int | None = None,
    sync: Sync | None = None,
) -> dict[str, Timing]:
    """Time ``contenders`` (name -> zero-argument callable, already warmed up) round-robin.

    :arg max_rounds: at most this many rounds (samples per contender).
    :arg budget_s: roughly how long each contender may be timed in all (seconds); the number of
        rounds is what the slowest contender's sample fits into it, between ``min_rounds`` and
        ``max_rounds``.
    :arg min_rounds: at least this many rounds (capped by ``max_rounds``), so that a median exists.
    :arg min_sample_s: each sample lasts at least this long (seconds); ignored when
        ``calls_per_sample`` is given.
    :arg calls_per_sample: a fixed number of calls per sample instead of calibrating.
    :arg sync: called right before every sample (calibration included) reads the clock, at its
        start and at its end: ``torch.cuda.synchronize`` for CUDA contenders (:func:`device_sync`),
        ``None`` on the CPU.
    :returns: one :class:`Timing` per contender, in the order given.

    >>> t = interleaved({"noop": lambda: None}, max_rounds=3, budget_s=0.01, min_sample_s=1e-4)
    >>> len(t["noop"].samples_s)
    3
    """
    if not contenders:
        return {}
    names = list(contenders)
    calls: dict[str, int] = {}
    sample_s: dict[str, float] = {}
    for name in names:
        if calls_per_sample is None:
            n, per_call = calibrate(contenders[name], min_sample_s, sync=sync)
        else:
            n, per_call = calls_per_sample, _sample(contenders[name], 1, sync)
        calls[name] = n
        sample_s[name] = n * per_call
    slowest = max(sample_s.values())
    rounds = max(1, min(max_rounds, max(min_rounds, math.floor(budget_s / max(slowest, 1e-9)))))
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            samples[name].append(_sample(contenders[name], calls[name], sync))
    return {name: Timing.of(samples[name], calls[name]) for name in names}


# ==================================================================================== correctness
@dataclass(frozen=True)
class CheckResult:
    """The outcome of comparing a contender's outputs with the reference's.

    :ivar correct: whether every output matched within the tolerance.
    :ivar message: why not (``torch.testing.assert_close``'s report, shortened), or ``""``.
    :ivar max_abs_err: the largest absolute difference over all outputs (``None`` if not comparable).
    """

    correct: bool
    message: str = ""
    max_abs_err: float | None = None


def as_tuple(result: object) -> tuple:
    """A kernel's result as a tuple of outputs (tcjit returns a bare tensor for one output)."""
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def check_outputs(
    got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], tolerance: Mapping[str, float]
) -> CheckResult:
    """Compare outputs with ``torch.testing.assert_close`` at ``tolerance`` (``rtol``/``atol``)."""
    import torch

    if len(got) != len(want):
        return CheckResult(False, f"{len(got)} outputs, the reference has {len(want)}")
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(g, torch.Tensor):
            return CheckResult(False, f"output {i} is a {type(g).__name__}, not a tensor")
        if g.shape == w.shape and g.dtype == w.dtype:
            worst = max(worst, float((g.double() - w.double()).abs().max()) if g.numel() else 0.0)
        try:
            torch.testing.assert_close(g, w, rtol=tolerance["rtol"], atol=tolerance["atol"])
        except AssertionError as e:
            text = " ".join(str(e).split())
            return CheckResult(False, f"output {i}: {text[:400]}", worst if g.shape == w.shape else None)
    return CheckResult(True, "", worst)


def describe_error(e: BaseException) -> str:
    """``Type: message`` on one line, shortened: what a result file records of a failure."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:500]}"


# ======================================================================================= the suite
def select_kernels(names: str | None) -> list[SuiteKernel]:
    """The suite kernels named in a comma-separated list (all of them, in suite order, for ``None``)."""
    from tcjit import suite

    if not names:
        return list(suite.SUITE.values())
    return [suite.get(n.strip()) for n in names.split(",") if n.strip()]


def sizes_for(kernel: SuiteKernel, kind: str) -> dict[str, int]:
    """The sizes of ``kind`` (one of :data:`SUITE_SIZE_KINDS`) for ``kernel``; for ``"gpu"``, the
    first of its GPU sizes (:func:`sizes_list` gives them all)."""
    return sizes_list(kernel, kind)[0]


def sizes_list(kernel: SuiteKernel, kind: str) -> list[dict[str, int]]:
    """Every size of ``kind`` at which ``kernel`` is benchmarked: its CPU sizes, all its GPU sizes
    (several for some kernels), or its first small size."""
    if kind == "cpu":
        return [dict(kernel.cpu_sizes)]
    if kind == "gpu":
        return [dict(s) for s in kernel.gpu_sizes]
    if kind == "small":
        return [dict(kernel.small_sizes[0])]
    raise ValueError(f"unknown sizes {kind!r}; expected one of {', '.join(SUITE_SIZE_KINDS)}")


def rate(kernel: SuiteKernel, sizes: Mapping[str, int], seconds: float | None) -> float | None:
    """The kernel's metric (GFLOP/s or GB/s) for a run of ``seconds``; ``None`` without a time."""
    if seconds is None or seconds <= 0:
        return None
    work = kernel.flops(sizes) if kernel.metric == "GFLOP/s" else kernel.bytes(sizes)
    return work / seconds / 1e9


# ==================================================================================== environment
@contextlib.contextmanager
def fresh_cache_dir(prefix: str = "tcjit-bench-cache-") -> Iterator[Path]:
    """Point ``TCJIT_CACHE_DIR`` at a new empty directory for the duration; restore it and delete the
    directory afterwards. Enter it before importing tcjit so that nothing read the old value."""
    old = os.environ.get("TCJIT_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        os.environ["TCJIT_CACHE_DIR"] = d
        try:
            yield Path(d)
        finally:
            if old is None:
                os.environ.pop("TCJIT_CACHE_DIR", None)
            else:
                os.environ["TCJIT_CACHE_DIR"] = old


@contextlib.contextmanager
def bench_environment(threads: int | None) -> Iterator[Path]:
    """What a benchmark run happens in: :func:`fresh_cache_dir`, and with ``threads`` set, that many
    OpenMP threads (``OMP_NUM_THREADS``, read when tcjit's kernels are loaded) and torch threads."""
    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    with fresh_cache_dir() as d:
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        yield d


def device_sync(device: str) -> Sync | None:
    """What waits for ``device`` before a clock is read: ``torch.cuda.synchronize`` for ``"cuda"``,
    nothing (``None``) for ``"cpu"``."""
    if device == "cpu":
        return None
    if device == "cuda":
        import torch

        return torch.cuda.synchronize
    raise ValueError(f"unknown device {device!r}; expected cpu or cuda")


def disable_tf32() -> dict[str, bool]:
    """Turn TF32 off for float32 matmuls and cuDNN convolutions; the settings as torch now reads them."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return {
        "cuda_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn": bool(torch.backends.cudnn.allow_tf32),
    }


def cuda_unusable() -> str | None:
    """Why no CUDA device can run the benchmark, on one line; ``None`` when one can (torch sees a
    device and a tensor can be made and synchronised on it). Imports torch, not tcjit."""
    import torch

    with warnings.catch_warnings(record=True) as caught:  # a broken driver warns: keep it to one line
        warnings.simplefilter("always")
        if not torch.cuda.is_available():
            if torch.version.cuda is None:
                why = f"torch {torch.__version__} is built without CUDA"
            else:
                why = f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU"
            if caught:
                why += ": " + " ".join(str(caught[0].message).split())[:300]
            return f"no usable CUDA device ({why})"
        try:
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
        except Exception as e:  # whatever CUDA raises, the answer is "not usable"
            return f"no usable CUDA device ({describe_error(e)})"
    return None


def cuda_calibration(spec: object, options: object = None) -> dict[str, Any]:
    """What makes a timed CUDA kernel a calibration point of the static GPU model (issue 32): the
    SHA-256 of its CUDA source (the text NVRTC compiles, as ``tcjit show --stage cuda`` prints it
    with the options recorded), its launches (``[name, grid, block]`` each) and its options (JSON);
    empty for a specialisation that is not a CUDA one. ``spec``: a loaded CUDA specialisation or
    the lowering it was made from (``tcjit.pipeline.lowered(..., target="cuda")``)."""
    import hashlib

    lowered = getattr(spec, "lowered", spec)  # a loaded CudaSpecialization, or its CudaKernelSource
    kernels = getattr(lowered, "kernels", None)
    source = getattr(lowered, "source", None)
    if kernels is None or not isinstance(source, str):
        return {}
    record: dict[str, Any] = {
        "cuda_source_sha256": hashlib.sha256(source.encode()).hexdigest(),
        "launches": [[k.name, list(k.grid), list(k.block)] for k in kernels],
    }
    if options is not None:
        record["options"] = json.loads(options.to_json()) if hasattr(options, "to_json") else options
    return record


def ncu_rows(path: Path) -> list[dict[str, str]]:
    """The launches of Nsight Compute's raw CSV (``ncu --csv --page raw``: a header row, a units row,
    then a row per launch in the order profiled), each as column -> text."""
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))[1:]


def recorded_kernel(run: Mapping[str, Any]):
    """The suite kernel, its checked definition and the options of a run that a GPU run recorded
    (``bench/gpu_ncu.py``: ``kernel``, ``sizes``, ``options``, ``cuda_source_sha256``, ``launches``)."""
    import tcjit
    from tcjit import suite
    from tcjit.mapping.options import MappingOptions

    sk = suite.get(run["kernel"])
    cdef = tcjit.define(sk.source, name=sk.entry).definition
    return sk, cdef, MappingOptions.from_json(json.dumps(run["options"]))


def slug(text: str) -> str:
    """``text`` for a file name: lower case, runs of other than letters and digits as one ``_``
    (``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia_h100_80gb_hbm3"``)."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "unknown"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip()


def gpu_info(device: int | None = None) -> dict[str, Any]:
    """The CUDA device as torch reports it: name, compute capability, total memory, the driver's
    CUDA version and torch's CUDA runtime, cuDNN's version; CuPy's version (``None`` when CuPy does
    not import). Call it only where CUDA is usable."""
    import torch

    props = torch.cuda.get_device_properties(device)
    driver = None
    with contextlib.suppress(AttributeError, RuntimeError):  # a private helper, absent on CPU builds
        v = int(torch._C._cuda_getDriverVersion())
        driver = f"{v // 1000}.{v % 1000 // 10}"
    try:
        import cupy

        cupy_version = cupy.__version__
    except Exception:  # not installed, or broken: either way not usable
        cupy_version = None
    return {
        "gpu_name": props.name,
        "gpu_compute_capability": f"{props.major}.{props.minor}",
        "gpu_total_memory_bytes": props.total_memory,
        "gpu_count": torch.cuda.device_count(),
        "cuda_driver_version": driver,
        "cuda_runtime_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version(),
        "cupy_version": cupy_version,
    }


def machine_info(device: str = "cpu") -> dict[str, Any]:
    """Where and when a benchmark ran: CPU, threads, versions, the tcjit commit, the date (UTC);
    for ``device="cuda"`` also the GPU (:func:`gpu_info`).

    ``TCJIT_BENCH_COMMIT`` in the environment names the commit for a tree copied from a clean
    checkout to a machine whose ``.git`` is stale or missing (a lent GPU machine)."""
    import torch

    import tcjit

    status = _git("status", "--porcelain", "--untracked-files=no")
    commit = _git("rev-parse", "HEAD")
    if os.environ.get("TCJIT_BENCH_COMMIT"):  # a copy of a clean checkout on another machine (a GPU's)
        commit, status = os.environ["TCJIT_BENCH_COMMIT"], ""
    info = {
        "cpu_model": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "tcjit_version": tcjit.__version__,
        "tcjit_commit": commit,
        "tcjit_tree_dirty": None if status is None else bool(status),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if device == "cuda":
        info.update(gpu_info())
    return info


def machine_markdown(info: Mapping[str, Any]) -> str:
    """The machine facts as a markdown bullet list."""
    commit = info.get("tcjit_commit") or "unknown"
    if info.get("tcjit_tree_dirty"):
        commit += " (with uncommitted changes)"
    gpu = []
    if info.get("gpu_name"):
        gpu.append(
            f"- GPU: {info['gpu_name']} (compute capability {info['gpu_compute_capability']}, "
            f"{info['gpu_total_memory_bytes'] / 2**30:.0f} GiB), driver for CUDA "
            f"{info['cuda_driver_version'] or 'unknown'}, "
            f"torch's CUDA runtime {info['cuda_runtime_version']}, cuDNN {info['cudnn_version']}, "
            f"CuPy {info['cupy_version'] or 'not importable'}"
        )
    return "\n".join(
        [
            *gpu,
            f"- CPU: {info['cpu_model']} ({info['logical_cpus']} logical CPUs), "
            f"torch threads: {info['torch_threads']}, OMP_NUM_THREADS: {info['omp_num_threads'] or 'unset'}",
            f"- torch {info['torch_version']}, Python {info['python_version']}, {info['platform']}",
            f"- tcjit {info['tcjit_version']} at commit {commit}",
            f"- date: {info['date']}",
        ]
    )


# ======================================================================================= reporting
def format_seconds(s: float | None) -> str:
    """``1.40 ms``, ``12.3 µs``, ``2.10 s``; ``—`` for no value."""
    if s is None:
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if s >= scale or unit == "ns":
            v = s / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    raise AssertionError("unreachable")


def format_rate(value: float | None, metric: str) -> str:
    """``185 GFLOP/s``; ``—`` for no value."""
    if value is None:
        return "—"
    return f"{value:.3g} {metric}" if value < 1000 else f"{value:.0f} {metric}"


def format_sizes(sizes: Mapping[str, int]) -> str:
    """``M=512 K=512 N=512``."""
    return " ".join(f"{k}={v}" for k, v in sizes.items())


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table (``|`` in cells escaped)."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *(line(r) for r in rows)])


def write_results(stem: Path | str, data: Mapping[str, Any], markdown: str) -> tuple[Path, Path]:
    """Write ``<stem>.json`` and ``<stem>.md`` (creating the folder); return both paths.

    A ``stem`` ending in ``.json`` or ``.md`` loses that suffix first.
    """
    stem = Path(stem)
    if stem.suffix in (".json", ".md"):
        stem = stem.with_suffix("")
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path = stem.with_name(stem.name + ".json")
    md_path = stem.with_name(stem.name + ".md")
    json_path.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
    md_path.write_text(markdown.rstrip("\n") + "\n")
    return json_path, md_path


def _json_default(x: object) -> object:
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
