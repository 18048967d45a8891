"""What the tests of the benchmark scripts (``bench/``) share: loading a script as a module, the
machine facts and settings of a made-up result document, and the check of a script's refusal to
run on CUDA without a GPU."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
"""The benchmark scripts' folder."""


def bench_loader(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str], ModuleType]:
    """A loader for the bench scripts as modules (they import ``_harness`` as a sibling), for a
    test's ``bench`` fixture; the on-disk kernel cache points at an empty directory while the test
    runs."""
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "cache"))
    return importlib.import_module


def machine() -> dict:
    """Machine facts of a result document made up by a test (``_harness.machine_info``'s keys)."""
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


def settings() -> dict:
    """The settings of a suite result document made up by a test (small sizes, no torch.compile)."""
    return {
        "sizes": "small",
        "dtype": "float32",
        "grad_mode": "no_grad",
        "max_rounds": 2,
        "budget_s": 0.0,
        "min_sample_s": 1e-4,
        "torch_compile": False,
    }


def check_cuda_refusal(
    main: Callable[[list[str]], int], script: str, argv: list[str], out: Path, capsys
) -> None:
    """``main(["--device", "cuda", *argv, "--out", out])`` on a machine without a usable GPU exits
    with status 2 and one line on stderr that names ``script`` and says why, and writes nothing."""
    assert main(["--device", "cuda", *argv, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"{script}: --device cuda: no usable CUDA device (")
    assert not out.with_suffix(".json").exists()
