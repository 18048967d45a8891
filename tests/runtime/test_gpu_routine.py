"""The GPU routine on a machine without a GPU: the static profile's predictions that the GPU
benchmarks record beside their measurements (``bench/_prediction.py``), the report that shows them,
the microbenchmarks' kernels compiled for sm_90, and ``scripts/gpu_check.sh``'s command line.

What needs a GPU (the measurements themselves) is tested by the ``cuda`` tests of test_bench.py,
which ``scripts/gpu_check.sh`` runs first on a lent GPU.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path

import bench_helpers as BH
import pytest
import torch

import tcjit
from tcjit import nvrtc, suite


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A loader for the bench scripts as modules; a scratch kernel cache (bench_helpers)."""
    return BH.bench_loader(monkeypatch, tmp_path)


def _softmax_options(rows: int, lanes: int):
    from tcjit.mapping.defaults import row_reduction_options

    return row_reduction_options(rows, lanes, 1024)


# ===================================================================================== predictions
def test_a_prediction_is_the_static_profile_of_the_options_run(bench) -> None:
    from tcjit.static_profile import profile_at

    prediction, calibration = bench("_prediction"), bench("gpu_calibration")
    k = suite.get("softmax")
    cdef = tcjit.define(k.source, name=k.entry).definition
    sizes = {"N": 32768, "D": 1024}  # the device time decides, not the host's
    warp_rows, block_rows = _softmax_options(8, 32), _softmax_options(1, 1024)
    record = prediction.predict_call("softmax", sizes, warp_rows.to_json(), "h200")
    assert record["gpu"] == "h200" and record["model_digest"] == calibration.model_digest()
    if not nvrtc.available():  # the registers come from a cubin: without a compiler, an error
        assert "error" in record and "predicted_s" not in record
        return
    profile = profile_at(cdef, sizes, None, warp_rows, "h200")
    assert record["predicted_s"] == profile.seconds and record["bound"] == profile.bound
    assert (record["device_s"], record["host_s"]) == (profile.device_seconds, profile.host_seconds)
    assert [(x["name"], x["predicted_s"], x["bound"]) for x in record["launches"]] == [
        (p.name, p.prediction.seconds, p.prediction.bound) for p in profile.launches
    ]
    assert "sm_90" in record["resources_from"]
    # the options as parsed JSON give the same record; other options another prediction
    assert prediction.predict_call("softmax", sizes, json.loads(warp_rows.to_json()), "h200") == record
    other = prediction.predict_call("softmax", sizes, block_rows.to_json(), "h200")
    assert other["predicted_s"] != record["predicted_s"]
    assert other["predicted_s"] == profile_at(cdef, sizes, None, block_rows, "h200").seconds


def test_a_failed_prediction_is_an_error_string(bench) -> None:
    prediction = bench("_prediction")
    sizes = {"N": 64, "D": 96}
    options = _softmax_options(8, 32).to_json()
    unknown_gpu = prediction.predict_call("softmax", sizes, options, "v100")
    assert unknown_gpu["error"].startswith("TCCallError: no GPU 'v100'")
    assert unknown_gpu["gpu"] == "v100" and len(unknown_gpu["model_digest"]) == 64
    bad_options = prediction.predict_call("softmax", sizes, '{"no_such_option": 1}', "h100")
    assert bad_options["error"].startswith("TCOptionsError: ") and "predicted_s" not in bad_options
    assert prediction.prediction_cell(bad_options) == "error"
    assert prediction.predicted_over_measured(bad_options, 1e-3) is None


def test_the_gpu_suite_table_puts_the_prediction_beside_the_measurement(bench) -> None:
    """A suite record as ``bench/cpu_suite.py --device cuda`` makes it, from a real measurement (on
    the CPU here) and a real prediction: the table gains the predicted time and the ratio beside
    tcjit's time, the summary their geometric mean, and a failed prediction a line of its own."""
    cpu_suite, report, prediction = bench("cpu_suite"), bench("_suite_report"), bench("_prediction")
    sk = suite.get("softmax")
    sizes = dict(sk.small_sizes[0])
    records = []
    for gpu in ("h100", "v100"):  # the second prediction fails: the GPU is not in the model's table
        r = cpu_suite.bench_kernel(
            sk, sizes, torch_compile=False, max_rounds=2, budget_s=0.0, min_sample_s=1e-4
        )
        assert r["tcjit_predicted_over_measured"] is None  # a CPU run predicts nothing
        t = r["contenders"]["tcjit"]
        t["prediction"] = prediction.predict_call("softmax", sizes, _softmax_options(8, 32).to_json(), gpu)
        r["tcjit_predicted_over_measured"] = prediction.predicted_over_measured(
            t["prediction"], t["timing"]["median_s"]
        )
        records.append(r)
    ok, failed = records
    if "error" in ok["contenders"]["tcjit"]["prediction"]:
        pytest.skip("no CUDA compiler: the prediction needs a cubin")
    ratio = ok["tcjit_predicted_over_measured"]
    assert (
        ratio
        == ok["contenders"]["tcjit"]["prediction"]["predicted_s"]
        / (ok["contenders"]["tcjit"]["timing"]["median_s"])
    )
    assert failed["tcjit_predicted_over_measured"] is None
    assert report.geomean_predicted(records) == {"value": pytest.approx(ratio), "kernels": 1}
    doc = {
        "benchmark": "gpu_suite",
        "machine": {**BH.machine(), "gpu_name": None},
        "settings": {**BH.settings(), "device": "cuda", "allow_tf32": {"cuda_matmul": False}},
        "kernels": records,
    }
    md = report.render_markdown(doc)
    assert "| kernel | sizes | tcjit | tcjit predicted | predicted/measured | eager |" in md
    cell = prediction.prediction_cell(ok["contenders"]["tcjit"]["prediction"])
    assert cell.endswith(f"({ok['contenders']['tcjit']['prediction']['bound']})")
    assert f"| {cell} | {ratio:.2f} |" in md and "| error | — |" in md
    assert f"predicted over tcjit's measured time: {ratio:.3g} (1 kernels)" in md
    assert "- softmax / prediction: TCCallError: no GPU 'v100'" in md
    assert f"tcjit predicted {cell}, predicted/measured {ratio:.2f}" in report.progress_line(ok)
    cpu_doc = {
        **doc,
        "kernels": [
            cpu_suite.bench_kernel(
                sk, sizes, torch_compile=False, max_rounds=2, budget_s=0.0, min_sample_s=1e-4
            )
        ],
    }
    assert "predicted" not in report.render_markdown(cpu_doc)  # no prediction, no columns


def test_the_option_sweep_records_each_candidates_prediction(bench) -> None:
    """Predictions made in a worker process (as while the GPU measures) are the ones made here;
    each candidate's row gets its prediction and the ratio of one synchronised call's predicted time
    to its measured one; the report names the fastest candidate measured and predicted."""
    prediction, sweep = bench("_prediction"), bench("gpu_option_sweep")
    sizes = {"N": 32768, "D": 1024}
    sets = {"rows 8 lanes 32": _softmax_options(8, 32), "rows 1 lanes 1024": _softmax_options(1, 1024)}
    here = {name: prediction.predict_call("softmax", sizes, o.to_json(), "h100") for name, o in sets.items()}
    if any("error" in r for r in here.values()):
        pytest.skip("no CUDA compiler: the prediction needs a cubin")
    with prediction.Predictions(workers=1) as workers:
        pending = {name: workers.submit("softmax", sizes, o.to_json(), "h100") for name, o in sets.items()}
        rows = [{"candidate": name, "correct": True, "median_s": 1e-3} for name in sets]
        for row in rows:
            sweep.record_prediction(row, pending[row["candidate"]])
    for row in rows:
        made = row["prediction"]
        assert made == here[row["candidate"]]
        assert made["synced_s"] == made["host_s"] + made["device_s"] >= made["predicted_s"]
        assert row["predicted_over_measured"] == pytest.approx(made["synced_s"] / 1e-3)
    doc = {
        "machine": BH.machine(),
        "kernels": [{"kernel": "softmax", "sizes": sizes, "eager_s": 1e-3, "candidates": rows}],
    }
    g = sweep.geomean_predicted(doc["kernels"])
    assert g["kernels"] == 1 and g["value"] == pytest.approx(
        math.sqrt(rows[0]["predicted_over_measured"] * rows[1]["predicted_over_measured"])
    )
    rows[1]["median_s"] = 2e-3  # measured: the warp-per-row candidate is the faster
    md = sweep.render(doc)
    assert "| candidate | time | predicted | predicted/measured | speedup over eager |" in md
    fastest = min(rows, key=lambda r: r["prediction"]["synced_s"])["candidate"]
    assert f"Fastest measured: rows 8 lanes 32; fastest predicted: {fastest}." in md
    cell = prediction.prediction_cell(rows[0]["prediction"], "synced_s")
    assert f"| rows 8 lanes 32 **best** | 1 ms | {cell} |" in md


def test_predictions_go_on_without_a_worker_process(bench) -> None:
    prediction = bench("_prediction")
    with prediction.Predictions(workers=0) as here:
        record = here.result(here.submit("softmax", {"N": 64, "D": 96}, "{}", "h100"))
    assert record["error"].startswith("TCOptionsError") and len(record["model_digest"]) == 64
    broken: Future = Future()
    broken.set_exception(RuntimeError("a worker died"))
    assert prediction.Predictions.result(broken) == {"error": "RuntimeError: a worker died"}


# ============================================================================ written as it goes
def test_the_suite_writes_its_results_after_each_kernel(bench, tmp_path: Path) -> None:
    """A run cut short (a lent GPU's time running out) keeps the kernels it finished: the result
    files are rewritten after each kernel, marked incomplete until the last."""
    cpu_suite = bench("cpu_suite")
    out = tmp_path / "suite"
    seen = []

    def checkpoint(doc: dict) -> None:
        seen.append(([k["kernel"] for k in doc["kernels"]], doc["complete"]))
        cpu_suite.write_results(out, doc, cpu_suite.render_markdown(doc))

    doc = cpu_suite.run_suite(
        "abs_sum,matmul",
        "small",
        torch_compile=False,
        max_rounds=2,
        budget_s=0.0,
        min_sample_s=1e-4,
        progress=False,
        checkpoint=checkpoint,
    )
    assert seen == [(["abs_sum"], False), (["abs_sum", "matmul"], False)]
    assert doc["complete"] is True and [k["kernel"] for k in doc["kernels"]] == ["abs_sum", "matmul"]
    written = json.loads(out.with_suffix(".json").read_text())
    assert written["complete"] is False and written["geomean_speedup"]["eager_kernels"] == 2
    assert "**incomplete**" in out.with_suffix(".md").read_text()
    assert "**incomplete**" not in cpu_suite.render_markdown(doc)
    first, second = {**written, "kernels": written["kernels"][:1]}, {**doc, "kernels": doc["kernels"][1:]}
    assert cpu_suite.merge_results([first, second])["complete"] is False  # a part was cut short
    assert cpu_suite.merge_results([{**first, "complete": True}, second])["complete"] is True


# ================================================================================ microbenchmarks
def _micro_cubin(micro):
    if not nvrtc.available():
        pytest.skip("no CUDA compiler")
    extra = [o for o in micro.OPTIONS if o not in nvrtc.BASE_OPTIONS]
    return nvrtc.compile_cubin(micro.SOURCE, name="gpu_micro.cu", arch="sm_90", options=extra)


def test_every_microbenchmark_kernel_compiles_for_sm_90(bench) -> None:
    """What bench/gpu_micro.py launches on a lent GPU compiles here, with the options it uses there,
    and without spilling registers (which would time local memory instead of what is measured)."""
    micro = bench("gpu_micro")
    cubin = _micro_cubin(micro)
    assert sorted(cubin.names) == sorted(micro.KERNELS)
    assert not [k.name for k in cubin.kernels if k.spills or k.stack_frame_bytes]


def test_the_loads_in_flight_kernels_keep_k_requests_per_warp(bench) -> None:
    """Little's law reads the latency off the bandwidth only if each warp has exactly K requests in
    flight and 64 warps fit an SM: K global loads per iteration in the PTX, the next iteration's
    addresses waiting for their values, at most 32 registers a thread."""
    import re

    micro = bench("gpu_micro")
    cubin = _micro_cubin(micro)
    ptx = nvrtc.compile_ptx(micro.SOURCE, name="gpu_micro.cu", arch="compute_90")
    for k in micro.IN_FLIGHT:
        assert cubin.resources(f"stream_loads_{k}").registers <= 65536 // (64 * 32)
        body = ptx.split(f".entry stream_loads_{k}(")[1].split("\n}\n")[0]
        assert len(re.findall(r"\bld\.global\.", body)) == k
        assert re.search(r"mul\.f32\s+%f\d+, %f\d+, 0f00000000;\s+cvt\.rzi\.s32\.f32", body)


def test_the_microbenchmarks_are_written_after_each_measurement(bench) -> None:
    micro = bench("gpu_micro")
    seen = []

    def broken() -> dict:
        raise RuntimeError("no such counter")

    out = micro.measure(
        {"first": lambda: {"x": 1.0}, "second": broken}, checkpoint=lambda r: seen.append(dict(r))
    )
    assert seen == [{"first": {"x": 1.0}}, out] and out["second"] == {
        "error": "RuntimeError: no such counter"
    }
    doc = {"machine": BH.machine(), "results": out, "complete": False}
    md = micro.render(doc)
    assert "**incomplete**" in md and "| first: x | 1 |" in md
    assert "**incomplete**" not in micro.render({**doc, "complete": True})


# ================================================================================ the GPU routine
ROUTINE = BH.BENCH.parent / "scripts" / "gpu_check.sh"


def _routine(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``scripts/gpu_check.sh ARGS`` with this interpreter as its Python."""
    env = {**os.environ, "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(ROUTINE), *args], capture_output=True, text=True, timeout=120, env=env)


def _plan(*args: str, **env: str) -> dict[str, int]:
    """The steps and time limits that ``--plan`` prints, in order."""
    proc = _routine("--plan", *args, **env)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[1:]]
    assert all(len(r) == 3 and r[2] == "s" for r in rows), proc.stdout
    return {name: int(seconds) for name, seconds, _ in rows}


def test_the_routine_script_parses_and_documents_its_modes() -> None:
    assert subprocess.run(["bash", "-n", str(ROUTINE)]).returncode == 0
    shown = _routine("--help")
    assert shown.returncode == 0
    for words in ("--quick", "under 3 minutes", "under 6 minutes", "--compile", "--plan", "ncu-sweep"):
        assert words in shown.stdout
    assert "overhead   bench/call_overhead.py --device cuda" in shown.stdout
    assert "symbolic   bench/symbolic_sizes.py --device cuda" in shown.stdout


@pytest.mark.parametrize("args", [["bogus"], ["--frobnicate"], ["--budget", "soon"]])
def test_the_routine_refuses_a_bad_command_line_before_doing_anything(tmp_path: Path, args) -> None:
    proc = _routine(*args, OUT=str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("gpu_check.sh: ") and len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_routine_shares_its_budget_between_its_steps() -> None:
    quick = _plan("--quick")
    assert list(quick) == ["tests", "suite", "micro", "overhead"] and all(s > 10 for s in quick.values())
    assert sum(quick.values()) <= 170  # under 3 minutes, the set-up included
    full = _plan()
    assert list(full)[:5] == ["tests", "suite", "symbolic", "micro", "overhead"] and list(full)[-1] == "sweep"
    assert set(full) <= {"tests", "suite", "symbolic", "micro", "overhead", "ncu", "sweep"}
    assert quick["overhead"] < quick["micro"] and full["overhead"] < full["micro"]  # weight 1 of 2
    assert sum(full.values()) <= 350  # under 6 minutes
    assert _plan("--quick", "--compile")["suite"] > quick["suite"]  # torch.compile takes longer
    assert list(_plan("micro", "suite")) == ["micro", "suite"]  # steps named: those, in that order
    assert _plan("--budget", "100", "suite", "micro") == {"suite": 63, "micro": 32}  # 95 s by 4:2
    assert _plan("--quick", SUITE_S="42")["suite"] == 42


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the refusal without a GPU")
def test_the_routine_reports_the_software_and_stops_without_a_gpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (tmp_path / "wheels").mkdir()  # none: this interpreter has what the routine needs
    proc = _routine("--quick", OUT=str(out), WHEELS=str(tmp_path / "wheels"))
    assert proc.returncode == 2
    assert proc.stdout.rstrip().endswith("gpu_check.sh: no usable CUDA device: nothing to measure")
    for line in (
        "nvidia-smi: ",
        f"python: {platform.python_version()} ",
        f"torch: {torch.__version__}",
        "CuPy: ",
        "static profile's compiler: ",
        "ncu: ",
        "tcjit: ",
    ):
        assert f"\n{line}" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.log"]
    assert (out / "gpu_check.log").read_text() == proc.stdout
