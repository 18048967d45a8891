"""The benchmarks of sizes that change (issue 34): ``bench/symbolic_sizes.py`` (symbolic against
specialised kernels) and ``bench/dynamic_batches.py`` (a training loop over new batch sizes), run end
to end at small sizes with tiny budgets: every contender checked, the documented JSON written, and
the compile counts the benchmarks report consistent with tcjit's own."""

from __future__ import annotations

import json
from pathlib import Path

import bench_helpers as BH
import pytest


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A loader for the bench scripts as modules; a scratch kernel cache (bench_helpers)."""
    return BH.bench_loader(monkeypatch, tmp_path)


def test_symbolic_sizes_runs(bench, tmp_path: Path) -> None:
    """bench/symbolic_sizes.py at small sizes: every contender checked and timed at both points,
    and the symbolic kernels compile nothing at the size they were not mapped at."""
    symbolic_sizes = bench("symbolic_sizes")
    out = tmp_path / "symbolic_sizes"
    argv = [
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
    assert symbolic_sizes.main([*argv, "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
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
    assert "geomean" in out.with_suffix(".md").read_text()


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
