"""The benchmarks of sizes that change (issue 34): ``bench/symbolic_sizes.py`` (symbolic against
specialised kernels) and ``bench/dynamic_batches.py`` (a training loop over new batch sizes), run end
to end at small sizes with tiny budgets: every contender checked, the documented JSON written, and
the compile counts the benchmarks report consistent with tcjit's own. symbolic_sizes' GPU run is
marked ``cuda`` (``scripts/gpu_check.sh`` runs it); its refusal without a GPU is tested here."""

from __future__ import annotations

import json
from pathlib import Path

import bench_helpers as BH
import pytest
import torch


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A loader for the bench scripts as modules; a scratch kernel cache (bench_helpers)."""
    return BH.bench_loader(monkeypatch, tmp_path)


SMALL_RUN = [
    "--kernels",
    "matmul,softmax",
    "--sizes",
    "small",
    "--no-compile",
    "--budget",
    "0.02",
    "--repeat",
    "3",
]
"""bench/symbolic_sizes.py on two kernels at small sizes, with tiny budgets and no torch.compile."""


def _check_symbolic_sizes(doc: dict, out: Path) -> None:
    """A symbolic_sizes result: every contender checked and timed at both points, and the symbolic
    kernels compile nothing at the size they were not mapped at."""
    assert [k["kernel"] for k in doc["kernels"]] == ["matmul", "softmax"]
    for k in doc["kernels"]:
        for point in ("at", "off"):
            contenders = k["points"][point]["contenders"]
            assert set(contenders) == {"specialised", "batch", "all", "eager"}
            assert all(c["correct"] and c["timing"]["median_s"] > 0 for c in contenders.values()), contenders
        assert k["points"]["off"]["contenders"]["batch"]["compiled"] == 0
        assert k["points"]["off"]["contenders"]["specialised"]["compiled"] == 1
    assert doc["symbolic_compiled_off_representative"] == 0
    assert set(doc["geomean_over_specialised"]["at"]) == {"batch", "all", "eager", "compile"}
    text = out.with_suffix(".md").read_text()
    assert "geomean" in text and "\nGeometric mean over the specialised kernels: at: batch " in text


def test_symbolic_sizes_runs(bench, tmp_path: Path) -> None:
    """bench/symbolic_sizes.py at small sizes on the CPU (the default device and sizes: cpu)."""
    symbolic_sizes = bench("symbolic_sizes")
    out = tmp_path / "symbolic_sizes"
    assert symbolic_sizes.main([*SMALL_RUN, "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    _check_symbolic_sizes(doc, out)
    assert doc["complete"] is True and doc["errors"] == []
    assert "device" not in doc["settings"] and "gpu_name" not in doc["machine"]
    assert out.with_suffix(".md").read_text().startswith("# Symbolic sizes against specialised kernels (CPU)")
    assert symbolic_sizes.default_out("cpu") == BH.BENCH / "results" / "symbolic_sizes"
    assert symbolic_sizes.default_out("cuda", "NVIDIA H100 80GB HBM3") == (
        BH.BENCH / "results" / "symbolic_sizes_nvidia_h100_80gb_hbm3"
    )


def test_symbolic_sizes_records_a_failing_kernel_and_exits_1(
    bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel whose benchmark raises is recorded with its error, the others are measured, and the
    run's exit status says so (the GPU routine's summary reads it)."""
    symbolic_sizes = bench("symbolic_sizes")
    real = symbolic_sizes.bench_kernel

    def failing_softmax(sk, **kw):
        if sk.name == "softmax":
            raise RuntimeError("launch failed")
        return real(sk, **kw)

    monkeypatch.setattr(symbolic_sizes, "bench_kernel", failing_softmax)
    out = tmp_path / "symbolic_sizes"
    assert symbolic_sizes.main([*SMALL_RUN, "--out", str(out)]) == 1
    doc = json.loads(out.with_suffix(".json").read_text())
    assert [k["kernel"] for k in doc["kernels"]] == ["matmul"] and doc["complete"] is True
    assert doc["errors"] == [{"kernel": "softmax", "error": "RuntimeError: launch failed"}]
    text = out.with_suffix(".md").read_text()
    assert "- **softmax failed**: RuntimeError: launch failed" in text and "**incomplete**" not in text
    assert "**incomplete**" in symbolic_sizes.markdown({**doc, "complete": False})


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_symbolic_sizes_runs_on_the_gpu(bench, tmp_path: Path) -> None:
    """The same on the GPU: CUDA kernels, the symbolic ones launching each call's grid."""
    symbolic_sizes = bench("symbolic_sizes")
    out = tmp_path / "symbolic_sizes_gpu"
    assert symbolic_sizes.main(["--device", "cuda", *SMALL_RUN, "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    _check_symbolic_sizes(doc, out)
    assert doc["settings"]["device"] == "cuda" and doc["machine"]["gpu_name"] == torch.cuda.get_device_name()
    assert doc["settings"]["allow_tf32"] == {"cuda_matmul": False, "cudnn": False}


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the refusal without a GPU")
def test_symbolic_sizes_on_cuda_without_a_gpu_exits_2_with_one_line(bench, tmp_path: Path, capsys) -> None:
    symbolic_sizes = bench("symbolic_sizes")
    BH.check_cuda_refusal(
        symbolic_sizes.main, "symbolic_sizes.py", ["--kernels", "matmul"], tmp_path / "gpu", capsys
    )


def test_dynamic_batches_runs(bench, tmp_path: Path) -> None:
    """bench/dynamic_batches.py: every phase recorded, and nothing compiled after the second size."""
    dynamic_batches = bench("dynamic_batches")
    out = tmp_path / "dynamic_batches"
    argv = ["--batches", "4,3,4,2", "--steps", "2", "--new-sizes", "3", "--new-steps", "2"]
    assert dynamic_batches.main([*argv, "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    extra = dynamic_batches.new_sizes([4, 3, 4, 2], 3)
    assert len(extra) == 3 and not set(extra) & {4, 3, 2}
    assert [p["batch"] for p in doc["tcjit"]] == [p["batch"] for p in doc["torch"]] == [4, 3, 4, 2, *extra]
    compiled = [p["compile_counts"]["compiled"] for p in doc["tcjit"]]
    assert compiled[0] < compiled[1] == compiled[-1], compiled
    assert all(len(p["steps_s"]) == 2 and p["first_excess_s"] is not None for p in doc["tcjit"])
    summary = doc["summary"]["tcjit"]
    assert (
        summary["sizes"] == extra
        and summary["compiled_during"] == 0
        and summary["median_excess_s"] is not None
    )
    text = out.with_suffix(".md").read_text()
    assert "first - median ms" in text and "more new batch sizes" in text
