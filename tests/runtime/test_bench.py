"""The benchmark harness (``bench/``): interleaved timing, correctness marking and the result files.

The suite benchmark runs end to end on two kernels at their first small size with tiny repeat
counts and without torch.compile (Inductor compiles too slowly for a unit test); whatever backs
``Kernel.__call__`` (the reference evaluator today, compiled code later), the harness must check its
outputs against ``torch_ref`` before timing it and write the documented JSON structure. The same run
with ``--device cuda`` is marked ``cuda`` and skipped without a GPU; what the GPU path does without
one (sync hooks, defaults, the clean refusal) is tested on the CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import bench_helpers as BH
import pytest
import torch
from bench_helpers import BENCH

import tcjit
from tcjit import suite
from tcjit.testing import tolerance

KERNELS = ("matmul", "abs_sum")
CONTENDERS = ("tcjit", "eager", "compile")
TIMING_KEYS = {"median_s", "min_s", "max_s", "samples_s", "calls_per_sample", "rounds"}


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A loader for the bench scripts as modules; a scratch kernel cache (bench_helpers)."""
    return BH.bench_loader(monkeypatch, tmp_path)


def _check_timing(t: dict) -> None:
    assert set(t) == TIMING_KEYS
    assert t["rounds"] == len(t["samples_s"]) >= 1
    assert t["calls_per_sample"] >= 1
    assert 0 < t["min_s"] <= t["median_s"] <= t["max_s"]
    assert min(t["samples_s"]) == t["min_s"] and max(t["samples_s"]) == t["max_s"]


# ===================================================================================== end to end
def _run_suite_cli(out: Path, *extra: str) -> dict:
    """Run ``bench/cpu_suite.py`` on :data:`KERNELS` at small sizes, tiny budgets, no torch.compile;
    the JSON document it wrote to ``out``."""
    cmd = [sys.executable, str(BENCH / "cpu_suite.py"), "--kernels", ",".join(KERNELS), "--sizes", "small"]
    cmd += ["--repeat", "2", "--budget", "0.01", "--min-sample-ms", "2", "--no-compile", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "TCJIT_CACHE_DIR"}
    proc = subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.with_suffix(".json").read_text())


def test_cpu_suite_cli_writes_checked_results(tmp_path: Path) -> None:
    out = tmp_path / "results" / "cpu_suite"
    doc = _run_suite_cli(out)
    assert doc["benchmark"] == "cpu_suite"
    assert "gpu_name" not in doc["machine"] and "allow_tf32" not in doc["settings"]
    _check_suite_doc(doc, out)
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# CPU suite") and "| kernel | sizes | tcjit | eager | compile |" in md


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_gpu_suite_cli_writes_checked_results(tmp_path: Path) -> None:
    out = tmp_path / "results" / "gpu_suite"
    doc = _run_suite_cli(out, "--device", "cuda")
    assert doc["benchmark"] == "gpu_suite"
    machine = doc["machine"]
    assert machine["gpu_name"] == torch.cuda.get_device_name()
    major, minor = torch.cuda.get_device_capability()
    assert machine["gpu_compute_capability"] == f"{major}.{minor}"
    assert machine["gpu_total_memory_bytes"] > 0 and machine["cuda_runtime_version"] == torch.version.cuda
    for key in ("cuda_driver_version", "cudnn_version", "cupy_version"):
        assert key in machine
    assert doc["settings"]["device"] == "cuda"
    assert doc["settings"]["allow_tf32"] == {"cuda_matmul": False, "cudnn": False}
    _check_suite_doc(doc, out)
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# GPU suite") and f"- GPU: {machine['gpu_name']}" in md
    # On a GPU the static profile's prediction stands beside tcjit's time (6943468)
    assert "| kernel | sizes | tcjit | tcjit predicted | predicted/measured | eager | compile |" in md
    from tcjit.static_profile import device_named

    for r in doc["kernels"]:  # every timed kernel is a calibration point of the GPU model
        tc = r["contenders"]["tcjit"]
        calibration = tc["calibration"]
        assert len(calibration["cuda_source_sha256"]) == 64 and calibration["launches"]
        assert calibration["options"]["map_to_threads"]
        prediction = tc["prediction"]  # the static profile's, of the lowering that ran
        assert prediction["gpu"] == device_named(machine["gpu_name"]) and "error" not in prediction
        assert [x["name"] for x in prediction["launches"]] == [n for n, _, _ in calibration["launches"]]
        ratio = prediction["predicted_s"] / tc["timing"]["median_s"]
        assert r["tcjit_predicted_over_measured"] == pytest.approx(ratio)
    assert doc["geomean_predicted_over_measured"]["kernels"] == len(KERNELS)
    assert "| tcjit | tcjit predicted | predicted/measured |" in md


def test_cuda_calibration_names_the_source_nvrtc_compiles(bench) -> None:
    import hashlib

    from tcjit.pipeline import default_options, lowered

    harness = bench("_harness")
    k = suite.get("softmax")
    cdef = tcjit.define(k.source, name=k.entry).definition
    sizes = {"N": 64, "D": 96}
    options = default_options(cdef, sizes, "cuda")
    low = lowered(cdef, sizes, options, "cuda")
    record = harness.cuda_calibration(low, options)
    assert record["cuda_source_sha256"] == hashlib.sha256(low.source.encode()).hexdigest()
    assert record["launches"] == [[x.name, list(x.grid), list(x.block)] for x in low.kernels]
    assert all(f"\n{name}(" in low.source for name, _, _ in record["launches"])  # each is defined there
    assert record["options"] == json.loads(options.to_json())
    cpu = lowered(cdef, sizes, None, "cpu")
    assert harness.cuda_calibration(cpu) == {}


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the refusal without a GPU")
@pytest.mark.parametrize("script", ["gpu_micro.py", "gpu_ncu.py", "gpu_option_sweep.py"])
def test_gpu_scripts_without_a_gpu_exit_2(tmp_path: Path, script: str) -> None:
    cmd = [sys.executable, str(BENCH / script), "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "no usable CUDA device" in proc.stderr and not list(tmp_path.iterdir())


def _check_suite_doc(doc: dict, out: Path) -> None:
    """What every suite run on :data:`KERNELS` at small sizes without torch.compile must write."""
    machine = doc["machine"]
    for key in ("cpu_model", "torch_threads", "torch_version", "tcjit_commit", "date"):
        assert key in machine
    assert machine["torch_version"] == torch.__version__
    assert doc["settings"]["sizes"] == "small" and doc["settings"]["torch_compile"] is False
    assert [k["kernel"] for k in doc["kernels"]] == list(KERNELS)
    peaks = doc["peaks"]  # the yardsticks of the rates (small: 256^3 and 4 MiB)
    assert peaks["matmul_size"] == 256 and peaks["matmul_gflops"] > 0 and peaks["copy_gbs"] > 0
    assert "practical peaks: torch.matmul" in out.with_suffix(".md").read_text()

    for k in doc["kernels"]:
        sk = suite.get(k["kernel"])
        assert k["sizes"] == dict(sk.small_sizes[0])
        assert k["metric"] == sk.metric
        assert k["correctness_checked"] is True and k["all_correct"] is True
        assert k["tolerance"] == tolerance(torch.float32, sk.reduction_length(k["sizes"]))
        assert set(k["contenders"]) == set(CONTENDERS)
        for name in ("tcjit", "eager"):
            c = k["contenders"][name]
            assert c["status"] == "ok" and c["correct"] is True, c
            _check_timing(c["timing"])
            assert c["rate"] > 0
        assert k["contenders"]["compile"]["status"] == "skipped"
        assert k["contenders"]["compile"]["timing"] is None
        tc, eager = (k["contenders"][n]["timing"]["median_s"] for n in ("tcjit", "eager"))
        assert k["tcjit_over_eager"] == pytest.approx(tc / eager)
        assert k["speedup_vs_eager"] == pytest.approx(eager / tc)
        assert k["tcjit_over_compile"] is None
        assert k["tcjit_compile_s"] > 0
        assert k["contenders"]["tcjit"]["compile_method"] in ("tcjit.compile", "first call")

    md = out.with_suffix(".md").read_text()
    for name in KERNELS:
        assert f"| {name} |" in md


# ============================================================================ correctness marking
def _fake_define(result_of):
    """A stand-in for ``tcjit.define`` whose kernels return ``result_of(sk, *inputs)``."""

    def define(source: str, name: str | None = None, **_):
        sk = suite.get(name)
        return lambda *inputs: result_of(sk, *inputs)

    return define


def _small_bench(cpu_suite: ModuleType, name: str = "matmul") -> dict:
    sk = suite.get(name)
    return cpu_suite.bench_kernel(
        sk, sk.small_sizes[1], torch_compile=False, max_rounds=2, budget_s=0.0, min_sample_s=1e-4
    )


def test_wrong_tcjit_results_are_timed_but_marked(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu_suite = bench("cpu_suite")
    wrong = _fake_define(lambda sk, *x: tuple(2 * t + 1 for t in sk.torch_ref(*x)))
    monkeypatch.setattr(tcjit, "define", wrong)
    monkeypatch.setattr(tcjit, "compile", lambda kernel, *inputs, **_: kernel)
    r = _small_bench(cpu_suite)
    t = r["contenders"]["tcjit"]
    assert t["status"] == "wrong" and t["correct"] is False
    assert "output 0" in t["error"] and t["max_abs_err"] > 0
    _check_timing(t["timing"])
    assert r["all_correct"] is False
    assert r["contenders"]["eager"]["correct"] is True
    md = cpu_suite.render_markdown({"machine": BH.machine(), "settings": BH.settings(), "kernels": [r]})
    assert "(wrong)" in md and "tcjit: wrong" in md and "## Failures" in md


def test_runs_of_parts_of_the_suite_merge_into_one(bench, tmp_path: Path) -> None:
    cpu_suite = bench("cpu_suite")
    tmm, mm = _small_bench(cpu_suite, "tmm"), _small_bench(cpu_suite, "matmul")

    def doc(*kernels, **machine):
        return {
            "benchmark": "cpu_suite",
            "machine": {**BH.machine(), **machine},
            "settings": BH.settings(),
            "kernels": list(kernels),
            "geomean_speedup": cpu_suite.geomean_speedups(kernels),
        }

    merged = cpu_suite.merge_results([doc(tmm), doc(mm)])
    assert [k["kernel"] for k in merged["kernels"]] == ["matmul", "tmm"]  # suite order
    assert merged["geomean_speedup"] == cpu_suite.geomean_speedups([mm, tmm])
    assert merged["merged_from"] == 2
    with pytest.raises(ValueError, match="more than one run"):
        cpu_suite.merge_results([doc(mm), doc(mm)])
    with pytest.raises(ValueError, match="gpu_name"):
        cpu_suite.merge_results([doc(mm), doc(tmm, gpu_name="another GPU")])
    paths = []
    for name, d in (("a", doc(tmm)), ("b", doc(mm))):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(d))
    assert cpu_suite.main(["--merge", *map(str, paths), "--out", str(tmp_path / "m")]) == 0
    assert "| matmul |" in (tmp_path / "m.md").read_text()
    assert cpu_suite.main(["--merge", str(paths[0]), str(paths[0]), "--out", str(tmp_path / "x")]) == 2


def test_raising_tcjit_is_recorded_and_not_timed(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu_suite = bench("cpu_suite")

    def broken(sk, *x):
        raise tcjit.TCError("no schedule found")

    monkeypatch.setattr(tcjit, "define", _fake_define(broken))
    monkeypatch.setattr(tcjit, "compile", lambda kernel, *inputs, **_: kernel)
    r = _small_bench(cpu_suite)
    t = r["contenders"]["tcjit"]
    assert t["status"] == "error" and t["timing"] is None and "no schedule found" in t["error"]
    assert r["tcjit_over_eager"] is None
    _check_timing(r["contenders"]["eager"]["timing"])


def test_tcjit_compile_is_used_when_present(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu_suite = bench("cpu_suite")
    calls = []

    def compile_ahead(kernel, *inputs, options=None):
        calls.append((kernel, inputs, options))

    monkeypatch.setattr(tcjit, "compile", compile_ahead, raising=False)
    r = _small_bench(cpu_suite)
    assert len(calls) == 1 and isinstance(calls[0][0], tcjit.Kernel)
    assert [x.shape for x in calls[0][1]] == [
        torch.Size(s) for s in suite.get("matmul").input_shapes(r["sizes"])
    ]
    assert r["contenders"]["tcjit"]["compile_method"] == "tcjit.compile"
    assert r["contenders"]["tcjit"]["correct"] is True


# ======================================================================================== harness
def test_interleaved_rotates_and_respects_round_limits(bench) -> None:
    harness = bench("_harness")
    order: list[str] = []
    contenders = {n: (lambda n=n: order.append(n)) for n in "abc"}
    t = harness.interleaved(contenders, max_rounds=3, min_rounds=3, budget_s=0.0, calls_per_sample=1)
    assert list(t) == ["a", "b", "c"]
    assert all(len(x.samples_s) == 3 and x.calls_per_sample == 1 for x in t.values())
    timed = order[3:]  # after one calibration call each
    assert timed == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    one = harness.interleaved({"x": lambda: None}, max_rounds=1, budget_s=10.0, min_sample_s=1e-4)
    assert len(one["x"].samples_s) == 1


def test_calibrate_reaches_the_minimum_sample_time(bench) -> None:
    harness = bench("_harness")
    calls, per_call = harness.calibrate(lambda: sum(range(100)), min_sample_s=2e-3)
    assert calls > 1 and calls * per_call >= 2e-3


def test_sync_is_called_right_before_every_clock_read(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU hook, with a fake sync on CPU contenders: every sample, calibration included, syncs
    right before it reads the clock at its start and at its end, and nothing else syncs."""
    harness = bench("_harness")
    log: list[str] = []
    clock = harness.time.perf_counter

    def perf_counter() -> float:
        log.append("clock")
        return clock()

    monkeypatch.setattr(harness.time, "perf_counter", perf_counter)
    contenders = {n: (lambda n=n: log.append(n)) for n in "ab"}
    t = harness.interleaved(
        contenders, max_rounds=2, budget_s=0.0, calls_per_sample=3, sync=lambda: log.append("sync")
    )
    monkeypatch.undo()
    assert [x.calls_per_sample for x in t.values()] == [3, 3]

    def sample(name: str, calls: int) -> list[str]:
        return ["sync", "clock", *[name] * calls, "sync", "clock"]

    want = sample("a", 1) + sample("b", 1)  # one call of each, to size the rounds
    want += sample("a", 3) + sample("b", 3) + sample("b", 3) + sample("a", 3)  # two rotated rounds
    assert log == want

    syncs = []
    calls, _ = harness.calibrate(lambda: sum(range(100)), min_sample_s=1e-3, sync=lambda: syncs.append(1))
    assert calls > 1 and len(syncs) >= 2 and len(syncs) % 2 == 0  # two per calibration sample
    assert harness.device_sync("cpu") is None and harness.device_sync("cuda") is torch.cuda.synchronize


def test_check_outputs_reports_mismatches(bench) -> None:
    harness = bench("_harness")
    a = torch.ones(3)
    tol = {"rtol": 1e-5, "atol": 1e-5}
    assert harness.check_outputs((a,), (a.clone(),), tol).correct
    bad = harness.check_outputs((a + 1,), (a,), tol)
    assert not bad.correct and bad.max_abs_err == 1.0 and "output 0" in bad.message
    assert not harness.check_outputs((a,), (a, a), tol).correct
    assert not harness.check_outputs((a[:2],), (a,), tol).correct


def test_write_results_and_fresh_cache_dir(bench, tmp_path: Path) -> None:
    harness = bench("_harness")
    j, m = harness.write_results(tmp_path / "sub" / "r.json", {"x": (1, 2)}, "# hi")
    assert (j.name, m.name) == ("r.json", "r.md")
    assert json.loads(j.read_text()) == {"x": [1, 2]} and m.read_text() == "# hi\n"
    before = os.environ["TCJIT_CACHE_DIR"]
    with harness.fresh_cache_dir() as d:
        assert os.environ["TCJIT_CACHE_DIR"] == str(d) and not any(d.iterdir())
    assert os.environ["TCJIT_CACHE_DIR"] == before and not d.exists()


# =========================================================================================== devices
def test_sizes_and_outputs_follow_the_device(bench) -> None:
    cpu_suite = bench("cpu_suite")
    harness = bench("_harness")
    assert (cpu_suite.parse_args([]).device, cpu_suite.parse_args([]).sizes) == ("cpu", "cpu")
    assert cpu_suite.parse_args(["--device", "cuda"]).sizes == "gpu"
    for device in ("cpu", "cuda"):
        for sizes in ("cpu", "gpu", "small"):
            assert cpu_suite.parse_args(["--device", device, "--sizes", sizes]).sizes == sizes
    assert cpu_suite.parse_args([]).out is None  # resolved once the GPU's name is known
    assert cpu_suite.default_out("cpu") == harness.RESULTS / "cpu_suite"
    assert cpu_suite.default_out("cuda", "NVIDIA H100 80GB HBM3") == (
        harness.RESULTS / "gpu_suite_nvidia_h100_80gb_hbm3"
    )
    assert harness.slug("  Tesla V100-SXM2-16GB ") == "tesla_v100_sxm2_16gb"
    assert (cpu_suite.benchmark_name("cpu"), cpu_suite.benchmark_name("cuda")) == ("cpu_suite", "gpu_suite")

    tmm = suite.get("tmm")  # several GPU sizes: each is benchmarked
    assert harness.sizes_list(tmm, "gpu") == [dict(s) for s in tmm.gpu_sizes] and len(tmm.gpu_sizes) > 1
    assert harness.sizes_list(tmm, "cpu") == [dict(tmm.cpu_sizes)]
    assert harness.sizes_list(tmm, "small") == [dict(tmm.small_sizes[0])]
    assert harness.sizes_for(tmm, "gpu") == dict(tmm.gpu_sizes[0])

    machine = {**BH.machine(), "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_compute_capability": "9.0"}
    machine.update(gpu_total_memory_bytes=80 << 30, cuda_driver_version="12.8", cuda_runtime_version="12.8")
    machine.update(cudnn_version=90100, cupy_version=None, gpu_count=1)
    settings = {**BH.settings(), "device": "cuda", "allow_tf32": {"cuda_matmul": False, "cudnn": False}}
    doc = {"benchmark": "gpu_suite", "machine": machine, "settings": settings, "kernels": []}
    md = cpu_suite.render_markdown(doc)
    assert md.startswith("# GPU suite") and "- GPU: NVIDIA H100 80GB HBM3 (compute capability 9.0" in md
    assert "TF32 off" in md and "CuPy not importable" in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the refusal without a GPU")
def test_cuda_device_without_a_gpu_exits_2_with_one_line(bench, tmp_path: Path, capsys) -> None:
    BH.check_cuda_refusal(
        bench("cpu_suite").main, "cpu_suite.py", ["--kernels", "matmul"], tmp_path / "gpu", capsys
    )


def _check_call_overhead(doc: dict) -> None:
    """bench/call_overhead.py's JSON document: every case measured, correct, in order."""
    assert doc["complete"] is True
    assert [(c["case"], c["mode"]) for c in doc["cases"]] == [
        ("matmul 8x8", "no_grad"),
        ("pointwise 1 element", "no_grad"),
        ("matmul 8x8, grad", "grad"),
        ("matmul 8x8, forward+backward", "forward+backward"),
    ]
    assert [c["target_us"] for c in doc["cases"]] == [20, 20, 40, None]
    for c in doc["cases"]:
        assert c["correct"] is True
        _check_timing(c["tcjit_timing"])
        _check_timing(c["torch_timing"])
        assert c["overhead_us"] == pytest.approx(c["tcjit_us"] - c["torch_us"])


def test_call_overhead_runs(bench, tmp_path: Path) -> None:
    call_overhead = bench("call_overhead")
    out = tmp_path / "call_overhead"
    assert call_overhead.main(["--calls", "3", "--samples", "2", "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    _check_call_overhead(doc)
    assert "device" not in doc["settings"] and "gpu_name" not in doc["machine"]
    assert "**incomplete**" in call_overhead.render_markdown({**doc, "complete": False})
    assert call_overhead.default_out("cpu") == BENCH / "results" / "call_overhead"
    assert call_overhead.default_out("cuda", "NVIDIA H100 80GB HBM3") == (
        BENCH / "results" / "call_overhead_nvidia_h100_80gb_hbm3"
    )


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_call_overhead_runs_on_the_gpu(bench, tmp_path: Path) -> None:
    call_overhead = bench("call_overhead")
    out = tmp_path / "call_overhead_gpu"
    assert call_overhead.main(["--device", "cuda", "--calls", "3", "--samples", "2", "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    _check_call_overhead(doc)
    assert doc["settings"]["device"] == "cuda" and doc["machine"]["gpu_name"] == torch.cuda.get_device_name()
    assert "synchronises (torch.cuda.synchronize)" in out.with_suffix(".md").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the refusal without a GPU")
def test_call_overhead_on_cuda_without_a_gpu_exits_2_with_one_line(bench, tmp_path: Path, capsys) -> None:
    BH.check_cuda_refusal(bench("call_overhead").main, "call_overhead.py", [], tmp_path / "gpu", capsys)


@pytest.mark.full
def test_compile_latency_runs(bench, tmp_path: Path) -> None:
    compile_latency = bench("compile_latency")
    out = tmp_path / "compile_latency"
    assert compile_latency.main(["--kernels", "matmul", "--sizes", "small", "--out", str(out)]) == 0
    (k,) = json.loads(out.with_suffix(".json").read_text())["kernels"]
    assert k["kernel"] == "matmul" and k["correct"] is True and not k["errors"]
    assert k["cold_s"] > 0 and k["disk_hit_s"] > 0
    assert isinstance(k["islpy_imported_on_disk_hit"], bool)
    assert k["cold_target_s"] == 1.5 and k["disk_hit_target_s"] == 0.05


def test_training_step_runs(bench, tmp_path: Path) -> None:
    """bench/training_step.py at the small sizes: every contender's gradients checked, steps and
    breakdown timed, the derived TC recorded (torch.compile left out: it costs tens of seconds)."""
    training_step = bench("training_step")
    out = tmp_path / "training_step"
    argv = ["--sizes", "small", "--repeat", "2", "--budget", "0.01", "--no-compile"]
    argv += ["--cases", "mlp3,mlp3 dense"]
    assert training_step.main([*argv, "--out", str(out)]) == 0
    case, dense = json.loads(out.with_suffix(".json").read_text())["cases"]
    assert dense["case"] == "mlp3 dense" and dense["all_correct"] and dense["loss"].endswith("random tensor")
    assert (
        case["case"] == "mlp3"
        and case["all_correct"]
        and case["wanted"] == ["W1", "B1", "W2", "B2", "W3", "B3"]
    )
    assert case["contenders"]["compile"]["status"] == "skipped"
    for name in ("tcjit", "eager"):
        assert case["contenders"][name]["correct"] is True
        _check_timing(case["contenders"][name]["timing"])
    parts = [p["part"] for p in case["breakdown"]]
    assert "tcjit forward, augmented" in parts and "tcjit backward d_W1" in parts
    assert "def mlp3__bwd(" in case["derived_tc"]["backward"]
    assert "| mlp3 |" in out.with_suffix(".md").read_text()


def test_geomean_speedups_skip_wrong_and_untimed_contenders(bench) -> None:
    """The summary line: inverted time ratios, geometric mean, only over correct timed pairs."""
    cpu_suite = bench("cpu_suite")
    ok = {"status": "ok"}

    def record(over_eager, over_compile, compile_status="ok"):
        contenders = {"tcjit": ok, "eager": ok, "compile": {"status": compile_status}}
        return {"tcjit_over_eager": over_eager, "tcjit_over_compile": over_compile, "contenders": contenders}

    g = cpu_suite.geomean_speedups([record(0.5, 2.0), record(2.0, 0.25, "wrong"), record(0.125, None)])
    assert g["eager"] == pytest.approx(2.0)  # speedups 2, 0.5 and 8
    assert g["eager_kernels"] == 3
    assert g["compile"] == pytest.approx(0.5) and g["compile_kernels"] == 1

    # A kernel at several (GPU) sizes counts once, with the geometric mean of its ratios.
    sized = [{**record(x, None), "kernel": k} for k, x in (("tmm", 0.5), ("tmm", 0.125), ("abs_sum", 4.0))]
    g = cpu_suite.geomean_speedups(sized)
    assert g["eager_kernels"] == 2 and g["eager"] == pytest.approx(1.0)  # speedups 4 (tmm) and 0.25


def test_tuning_benchmark_cli_writes_results(tmp_path: Path) -> None:
    """bench/tuning.py end to end at a small size and a few seconds of tuning."""
    out = tmp_path / "results" / "tuning"
    env = dict(os.environ, TCJIT_CACHE_DIR=str(tmp_path / "kernels"))
    cmd = [sys.executable, str(BENCH / "tuning.py"), "--kernels", "matmul", "--sizes", "small"]
    # checkpoints count from the call, set-up included (about 7 s here): 12 s and 18 s see candidates
    cmd += ["--minutes", "0.3", "--checkpoints", "0.2,0.3", "--budget", "0.2", "--out", str(out)]
    subprocess.run(cmd, check=True, env=env, timeout=600, capture_output=True)
    doc = json.loads(out.with_suffix(".json").read_text())
    (k,) = doc["kernels"]
    assert k["kernel"] == "matmul" and k["candidates"] >= 2
    final = k["final_rounds"]  # what the tuner printed and stored: one pair, side by side
    assert final["rounds"] >= 1 and final["low"] <= final["high"]
    assert k["stored"] == ("options" if final["faster"] else "defaults")
    assert set(k["best_by_minutes_s"]) == {"0.2", "0.3"}
    # each checkpoint's winner re-measured in the benchmark's process, next to eager
    assert set(k["remeasured_by_minutes_s"]) == set(k["best_options_by_minutes"]) == {"0.2", "0.3"}
    assert all(t > 0 for t in k["remeasured_by_minutes_s"].values())
    assert "error" not in k["fresh_process"]
    assert "| matmul |" in out.with_suffix(".md").read_text()


def test_cflags_ab_builds_both_and_writes_results(
    bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each kernel is built with CFLAGS and with the changed flags (two specialisations), checked
    against torch and timed; CFLAGS itself is left as it was."""
    from tcjit import cpu_runtime

    before = cpu_runtime.CFLAGS
    built: list[tuple[str, ...]] = []
    compile_c = cpu_runtime.compile_c

    def recording(*args, **kwargs):
        built.append(cpu_runtime.compile_flags())
        return compile_c(*args, **kwargs)

    monkeypatch.setattr(cpu_runtime, "compile_c", recording)
    out = tmp_path / "ab"
    args = ["--drop=-fno-tree-loop-distribute-patterns", "--add=-fno-unroll-loops", "--kernels=matmul"]
    bench("cflags_ab").main([*args, "--sizes=small", "--budget=0.01", "--repeat=2", "--out", str(out)])
    assert cpu_runtime.CFLAGS == before
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["dropped"] == ["-fno-tree-loop-distribute-patterns"]
    assert data["added"] == ["-fno-unroll-loops"]
    (row,) = data["kernels"]
    assert row["kernel"] == "matmul" and row["a_s"] > 0 and row["b_s"] > 0
    assert "B's speed-up" in out.with_suffix(".md").read_text()
    assert built == [
        before,
        (*(f for f in before if f != "-fno-tree-loop-distribute-patterns"), "-fno-unroll-loops"),
    ]


def test_cubin_registers_matches_launches_to_profiler_rows(bench, tmp_path: Path) -> None:
    """``bench/cubin_registers.py`` on a run recorded like ``gpu_ncu.py``'s and a raw ncu CSV made
    up from it: each launch finds its row (by name, grid and block, in order), a changed digest is
    reported, and the summary counts the equal and the different figures."""
    from tcjit import nvrtc
    from tcjit.pipeline import default_options, lowered

    if not nvrtc.available():
        pytest.skip("no CUDA compiler")
    harness, script = bench("_harness"), bench("cubin_registers")
    k = suite.get("softmax")
    cdef = tcjit.define(k.source, name=k.entry).definition
    sizes = {"N": 64, "D": 96}
    options = default_options(cdef, sizes, "cuda")
    record = harness.cuda_calibration(lowered(cdef, sizes, options, "cuda"), options)
    wrong = dict(record, cuda_source_sha256="0" * 64)
    runs = [{"kernel": "softmax", "sizes": sizes, **record}, {"kernel": "softmax", "sizes": sizes, **wrong}]
    launches = tmp_path / "launches.json"
    launches.write_text(json.dumps({"machine": {"gpu_name": "Test GPU"}, "runs": runs}))
    cubin = nvrtc.compile_cubin(lowered(cdef, sizes, options, "cuda").source, name="s.cu")
    header = ["Kernel Name", "Grid Size", "Block Size", *script.NCU_COLUMNS.values()]
    rows = [header, ["", "", "", "register/thread", "byte/block", "", "byte"]]
    for i, (name, grid, block) in enumerate(record["launches"] * 2):
        r = cubin.resources(name)
        registers = r.registers + (1 if i == 0 else 0)  # the first launch differs by one register
        dims = [f"({', '.join(map(str, grid))})", f"({', '.join(map(str, block))})"]
        rows.append([name, *dims, str(registers), str(r.shared_bytes), str(r.barriers), "1,024"])
    csv_path = tmp_path / "ncu.csv"
    csv_path.write_text("\n".join(",".join(f'"{c}"' for c in row) for row in rows) + "\n")
    out = tmp_path / "cubin_registers"
    assert script.main(["--launches", str(launches), "--ncu", str(csv_path), "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    n = 2 * len(record["launches"])
    s = doc["summary"]
    assert s["launches"] == s["with_ncu_figures"] == n and s["without_ncu_figures"] == []
    assert (s["registers_equal"], s["registers_ours_lower"], s["registers_ours_higher"]) == (n - 1, 1, 0)
    assert s["largest_register_difference"]["launch"] == record["launches"][0][0]
    assert s["shared_equal"] == s["barriers_equal"] == n
    assert s["digest_mismatches"] == [{"kernel": "softmax", "sizes": sizes}] and s["launch_mismatches"] == []
    assert [r["ncu_stack_size"] for r in doc["launches"]] == [1024] * n
    md = out.with_suffix(".md").read_text()
    assert "on Test GPU" in md and "≠" in md
    assert "digests that differ from the recorded ones: softmax at N=64 D=96" in md
