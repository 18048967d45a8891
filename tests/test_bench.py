"""The benchmark harness (``bench/``): interleaved timing, correctness marking and the result files.

The suite benchmark runs end to end on two kernels at their first small size with tiny repeat
counts and without torch.compile (Inductor compiles too slowly for a unit test); whatever backs
``Kernel.__call__`` (the reference evaluator today, compiled code later), the harness must check its
outputs against ``torch_ref`` before timing it and write the documented JSON structure.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import tcjit
from tcjit import suite
from tcjit.testing import tolerance

BENCH = Path(__file__).resolve().parent.parent / "bench"
KERNELS = ("matmul", "abs_sum")
CONTENDERS = ("tcjit", "eager", "compile")
TIMING_KEYS = {"median_s", "min_s", "max_s", "samples_s", "calls_per_sample", "rounds"}


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A loader for the bench scripts as modules (they import ``_harness`` as a sibling); the on-disk
    kernel cache points at an empty directory while the test runs."""
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "cache"))

    def load(name: str) -> ModuleType:
        return importlib.import_module(name)

    return load


def _check_timing(t: dict) -> None:
    assert set(t) == TIMING_KEYS
    assert t["rounds"] == len(t["samples_s"]) >= 1
    assert t["calls_per_sample"] >= 1
    assert 0 < t["min_s"] <= t["median_s"] <= t["max_s"]
    assert min(t["samples_s"]) == t["min_s"] and max(t["samples_s"]) == t["max_s"]


# ===================================================================================== end to end
def test_cpu_suite_cli_writes_checked_results(tmp_path: Path) -> None:
    out = tmp_path / "results" / "cpu_suite"
    cmd = [sys.executable, str(BENCH / "cpu_suite.py"), "--kernels", ",".join(KERNELS), "--sizes", "small"]
    cmd += ["--repeat", "2", "--budget", "0.01", "--min-sample-ms", "2", "--no-compile", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "TCJIT_CACHE_DIR"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr

    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["benchmark"] == "cpu_suite"
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
    assert "| kernel | sizes | tcjit | eager | compile |" in md
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
    md = cpu_suite.render_markdown({"machine": _machine(), "settings": _settings(), "kernels": [r]})
    assert "(wrong)" in md and "tcjit: wrong" in md and "## Failures" in md


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


def _machine() -> dict:
    return {
        "cpu_model": "test",
        "logical_cpus": 1,
        "torch_threads": 1,
        "omp_num_threads": None,
        "torch_version": "x",
        "python_version": "x",
        "platform": "x",
        "tcjit_version": "x",
        "tcjit_commit": None,
        "tcjit_tree_dirty": None,
        "date": "x",
    }


def _settings() -> dict:
    return {
        "sizes": "small",
        "dtype": "float32",
        "grad_mode": "no_grad",
        "max_rounds": 2,
        "budget_s": 0.0,
        "min_sample_s": 1e-4,
        "torch_compile": False,
    }


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


def test_call_overhead_runs(bench, tmp_path: Path) -> None:
    call_overhead = bench("call_overhead")
    out = tmp_path / "call_overhead"
    assert call_overhead.main(["--calls", "3", "--samples", "2", "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    assert [c["case"] for c in doc["cases"]] == ["matmul 8x8", "pointwise 1 element"]
    for c in doc["cases"]:
        assert c["correct"] is True
        _check_timing(c["tcjit_timing"])
        _check_timing(c["torch_timing"])
        assert c["overhead_us"] == pytest.approx(c["tcjit_us"] - c["torch_us"])


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
