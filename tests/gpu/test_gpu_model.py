"""The GPU model (:mod:`tcjit.mapping.gpu_model`): occupancy and its limiter, each term of a
launch's predicted time on hand-made launches, and the calibration it was fitted on, which must be
rerun (``python bench/gpu_calibration.py``) whenever the model changes."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from pathlib import Path

import pytest

from tcjit.mapping.gpu_access import AccessProfile, LaunchAccesses
from tcjit.mapping.gpu_model import DEVICES, H100, occupancy, predict_launch

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize(
    "threads, registers, shared, blocks, limiter",
    [
        (256, 32, 0, 8, "warps"),  # 64 warps an SM, 8 a block
        (256, 30, 0, 8, "warps"),  # registers round up to 32 a thread, per warp of 32
        (256, 80, 0, 3, "registers"),  # 80 x 256 = 20480 registers a block
        (32, 16, 0, 32, "blocks"),
        (256, 32, 100 * 1024, 2, "shared memory"),
        (1024, 64, 0, 1, "registers"),
    ],
)
def test_occupancy_and_its_limiter(threads, registers, shared, blocks, limiter) -> None:
    occ = occupancy(H100, threads, registers, shared)
    assert (occ.blocks, occ.limiter) == (blocks, limiter)
    assert occ.warps == blocks * -(-threads // 32)


def _launch(grid, block, accesses=(), barriers=0, executions=None) -> LaunchAccesses:
    return LaunchAccesses(grid, block, executions or {"S0": 1}, tuple(accesses), barriers, 0)


def _read(requests: int, lines: int, sectors: int | None = None) -> AccessProfile:
    return AccessProfile("S0", "A", "read", "global", 1, sectors or 4 * lines, lines, 1, 32, requests, 4)


def test_a_strided_access_costs_a_cycle_per_line_on_every_sm() -> None:
    # 132 x 4 blocks of 8 warps, each warp 1000 requests of 32 lines: issue-bound
    la = _launch((528, 1, 1), (32, 8, 1), [_read(1000, 32)])
    p = predict_launch(la, H100, registers=32, shared_bytes=0, fmas={}, compulsory_bytes=1 << 20)
    cycles = 4 * 8 * 1000 * 32 * H100.l1_cycles_per_line
    assert p.bound == "issue" and p.terms["issue"] == pytest.approx(cycles / H100.clock_hz)
    assert p.seconds == pytest.approx(p.terms["issue"] + H100.launch_floor)
    coalesced = predict_launch(
        _launch((528, 1, 1), (32, 8, 1), [_read(1000, 1)]),
        H100,
        registers=32,
        shared_bytes=0,
        fmas={},
        compulsory_bytes=1 << 20,
    )
    assert coalesced.terms["issue"] == pytest.approx(p.terms["issue"] / 32)


def test_few_warps_are_latency_bound_and_barriers_serialise_their_loads() -> None:
    # 32 blocks of one warp: 32 SMs with one warp each, 128 bytes a request
    free = _launch((32, 1, 1), (32, 1, 1), [_read(1000, 1)])
    serial = dataclasses.replace(free, barriers=2000)
    nbytes = 1 << 26
    a = predict_launch(free, H100, registers=32, shared_bytes=0, fmas={}, compulsory_bytes=nbytes)
    b = predict_launch(serial, H100, registers=32, shared_bytes=0, fmas={}, compulsory_bytes=nbytes)
    in_flight = 32 * 1 * 128
    assert a.bound == b.bound == "latency"
    assert a.terms["latency"] == pytest.approx(
        nbytes / (in_flight * H100.loads_in_flight / H100.memory_latency)
    )
    barriers = 2000 * H100.barrier_cycles / H100.clock_hz
    assert b.terms["latency"] == pytest.approx(nbytes / (in_flight / H100.memory_latency) + barriers)


def test_many_small_blocks_are_bound_by_starting_them() -> None:
    la = _launch((132 * 200, 1, 1), (8, 1, 1), [_read(1, 1, 1)])
    p = predict_launch(la, H100, registers=16, shared_bytes=0, fmas={}, compulsory_bytes=132 * 200 * 32)
    assert p.bound == "dispatch" and p.terms["dispatch"] == pytest.approx(200 * H100.block_dispatch)


def test_a_streaming_launch_is_dram_bound_at_the_copy_bandwidth() -> None:
    la = _launch((132 * 64, 1, 1), (256, 1, 1), [_read(4, 1)])
    nbytes = 1 << 30
    h100 = predict_launch(la, H100, registers=32, shared_bytes=0, fmas={}, compulsory_bytes=nbytes)
    h200 = predict_launch(la, DEVICES["h200"], registers=32, shared_bytes=0, fmas={}, compulsory_bytes=nbytes)
    assert h100.bound == "dram" and h100.terms["dram"] == pytest.approx(nbytes / 2.98e12)
    assert h200.terms["dram"] < h100.terms["dram"]


def test_the_committed_calibration_is_of_this_model() -> None:
    """Changing the model (mapping/gpu_access.py, mapping/gpu_model.py) means rerunning its
    calibration, whose results file records the model's digest and the error of every point."""
    sys.path.insert(0, str(BENCH))
    try:
        calibration = importlib.import_module("gpu_calibration")
    finally:
        sys.path.remove(str(BENCH))
    results = [
        p for p in sorted((BENCH / "results").glob("gpu_calibration_*.json")) if "_frozen" not in p.name
    ]
    assert results
    for path in results:
        summary = json.loads(path.read_text())["summary"]
        assert summary["model_digest"] == calibration.model_digest(), (
            f"rerun bench/gpu_calibration.py ({path.name})"
        )
        fitted = summary["fitted"]
        assert (fitted["memory_latency_s"], fitted["loads_in_flight"], fitted["block_dispatch_s"]) == (
            H100.memory_latency,
            H100.loads_in_flight,
            H100.block_dispatch,
        )


@pytest.mark.full
def test_the_calibration_reproduces_its_committed_errors(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        calibration = importlib.import_module("gpu_calibration")
        assert calibration.main(["--out", str(tmp_path / "cal")]) == 0
    finally:
        sys.path.remove(str(BENCH))
    """Every measured point that still reproduces at HEAD (its CUDA source unchanged) has the error
    the committed calibration gave it: the model's constants predict it, not a refit on the points
    that survive. The points lost since the freeze are counted (all of them, and no point left,
    where every source changed since the last GPU run), and nothing is gained without a new
    measurement."""
    new = json.loads((tmp_path / "cal.json").read_text())
    old = json.loads((BENCH / "results" / "gpu_calibration_nvidia_h100_80gb_hbm3.json").read_text())
    committed = {calibration._point_key(p): p["ratio"] for p in old["points"]}
    here = {calibration._point_key(p): p["ratio"] for p in new["points"]}
    assert set(here) <= set(committed), "a new point needs a new GPU measurement"
    assert here == pytest.approx({k: committed[k] for k in here})
    summary = new["summary"]
    assert summary["fitted"] == old["summary"]["fitted"]
    assert sum(summary.get("lost", {}).values()) == len(committed) - len(here)


def _bench_module(name: str):
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def test_the_committed_suite_prediction_is_of_this_model_and_host() -> None:
    """``bench/gpu_predict.py``'s committed result (the predicted suite, the number the GPU issues
    move) is rerun whenever the model changes; the host constants it reports are the model's."""
    from tcjit.mapping.gpu_profile import HOST

    digest = _bench_module("gpu_calibration").model_digest()
    results = sorted((BENCH / "results").glob("gpu_predict_*.json"))
    assert results
    for path in results:
        data = json.loads(path.read_text())
        assert data["model"]["digest"] == digest, f"rerun bench/gpu_predict.py ({path.name})"
        fit = data["host_fit"]
        assert (round(fit["call_s"], 7), round(fit["launch_s"], 7)) == (HOST.call, HOST.launch)


@pytest.mark.skipif(not __import__("tcjit.nvrtc").nvrtc.available(), reason="no CUDA compiler")
def test_the_suite_prediction_script_writes_its_results(tmp_path: Path) -> None:
    predict = _bench_module("gpu_predict")
    assert predict.main(["--kernels", "softmax,abs_sum", "--out", str(tmp_path / "p")]) == 0
    data = json.loads((tmp_path / "p.json").read_text())
    assert [(r["kernel"], r["sizes"]) for r in data["kernels"]] == [
        ("softmax", {"N": 32768, "D": 1024}),
        ("abs_sum", {"M": 16384, "N": 16384}),
    ]
    for r in data["kernels"]:
        assert r["predicted_s"] >= max(r["device_s"], r["host_s"]) > 0 and r["bound"] and r["diagnosis"]
        assert r["eager_s"] > 0 and isinstance(r["same_source"], bool)
    summary = data["summary"]
    speedups = [r["eager_s"] / r["predicted_s"] for r in data["kernels"]]
    assert summary["predicted_speedup_over_eager"] == pytest.approx((speedups[0] * speedups[1]) ** 0.5)
    assert "Predicted geometric-mean speedup over torch eager" in (tmp_path / "p.md").read_text()


def test_the_model_is_frozen_or_its_calibration_shows_the_frozen_predictions() -> None:
    """Issue 32 froze the model: a later model comes with a calibration that shows the frozen
    model's predictions beside its own (``bench/gpu_calibration.py``, the frozen file)."""
    for path in sorted((BENCH / "results").glob("gpu_calibration_*_frozen.json")):
        frozen = json.loads(path.read_text())
        calibration = json.loads(path.with_name(path.name.replace("_frozen", "")).read_text())
        summary = calibration["summary"]
        if summary["model_digest"] == frozen["model_digest"]:
            continue
        assert summary["frozen"]["changed"] and summary["frozen"]["model_digest"] == frozen["model_digest"]
        assert (
            summary["frozen"]["points"] == sum("frozen_predicted_s" in p for p in calibration["points"]) > 0
        )
    assert list((BENCH / "results").glob("gpu_calibration_*_frozen.json"))


def test_a_changed_model_is_reported_beside_the_frozen_one() -> None:
    calibration = _bench_module("gpu_calibration")
    point = {"set": "gpu_ncu", "kernel": "k", "candidate": "default", "launch": "k0", "digest": "d"}
    old = [{**point, "predicted_s": 3e-6, "measured_s": 1e-6, "ratio": 3.0}]
    data = {"summary": {"model_digest": "a", "fitted": {}, "within_1.5x": 0, "within_2x": 0}, "points": old}
    frozen = calibration.frozen_record(data)
    new = [{**point, "predicted_s": 1.2e-6, "measured_s": 1e-6, "ratio": 1.2}, {**point, "launch": "k1"}]
    assert calibration.beside_frozen(new, frozen, "a") == {"model_digest": "a", "changed": False}
    said = calibration.beside_frozen(new, frozen, "b")
    assert new[0]["frozen_predicted_s"] == 3e-6 and "frozen_predicted_s" not in new[1]
    assert said == {
        "model_digest": "a",
        "changed": True,
        "points": 1,
        "frozen_within_1.5x": 0,
        "frozen_within_2x": 0,
        "new_within_1.5x": 1,
        "new_within_2x": 1,
    }
    assert "the model has changed since it was frozen" in calibration.frozen_lines(said)[0]
