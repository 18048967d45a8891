"""The tcjit command line: show (each stage), run (compiled, checked against the oracle), demo."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tcjit.cli import main

CONV = str(Path(__file__).resolve().parents[1] / "docs" / "examples" / "conv2d.tc")
SIZES = "N=1,C=3,H=8,W=8,F=4,KH=3,KW=3"
FCRELU = """
def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}
"""
FC_SIZES = "B=64,M=48,N=40"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Every test compiles into its own kernel cache, never the user's."""
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))


@pytest.fixture
def fcrelu_file(tmp_path) -> str:
    path = tmp_path / "fcrelu.tc"
    path.write_text(FCRELU)
    return str(path)


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_show_checked_with_concrete_ranges(capsys):
    code, out, _ = _run(capsys, "show", CONV, "--sizes", SIZES)
    assert code == 0
    assert "-> (float32(N, F, H - KH + 1, W - KW + 1) O)" in out
    assert "index     0 <= h < H - KH + 1   = [0, 6)" in out
    assert "reduction 0 <= r_kw < KW   = [0, 3)" in out


@pytest.mark.parametrize(
    ("stage", "words"),
    [
        ("canonical", ["def conv2d(float32(N, C, H, W) I"]),
        ("ast", ["Statement(tensor='O'"]),
        ("scop", ["S0_init (init, line 3)", "R3 reads", "I[a0 = n, a1 = r_c, a2 = h + r_kh"]),
        ("schedule", ["domain:", "schedule:", "permutable: 1"]),
    ],
)
def test_show_stages(capsys, stage, words):
    code, out, _ = _run(capsys, "show", CONV, "--stage", stage)
    assert code == 0
    for w in words:
        assert w in out


def test_show_schedule_tiled_and_fixed(capsys):
    code, out, _ = _run(
        capsys, "show", CONV, "--stage", "schedule", "--tile", "2,2", "--fix-sizes", "--sizes", SIZES
    )
    assert code == 0 and "floor((f)/2)" in out and "KH" not in out


def test_show_c_is_the_generated_kernel(capsys, fcrelu_file):
    code, out, _ = _run(capsys, "show", fcrelu_file, "--stage", "c", "--sizes", FC_SIZES)
    assert code == 0
    assert "void tc_fcrelu(" in out and "#pragma omp" in out
    _, other, _ = _run(capsys, "show", fcrelu_file, "--stage", "c", "--sizes", "B=64,M=56,N=40")
    assert other != out  # specialised to the sizes


def test_show_tree_is_the_mapped_schedule_with_decisions(capsys, fcrelu_file):
    code, out, _ = _run(capsys, "show", fcrelu_file, "--stage", "tree", "--sizes", FC_SIZES)
    assert code == 0
    assert "domain:" in out and "schedule:" in out and "B = 64" in out
    assert "mapping decisions:" in out
    assert re.search(r"mark: \"(parallel|simd)", out)


def test_show_tree_and_c_follow_the_options(capsys, fcrelu_file):
    import tcjit

    base = ("show", fcrelu_file, "--sizes", "B=512,M=64,N=128")
    _, default_c, _ = _run(capsys, *base, "--stage", "c")
    assert "#pragma omp parallel for" in default_c and "#pragma omp simd" in default_c
    code, serial, _ = _run(capsys, *base, "--stage", "c", "--no-parallel", "--no-vectorize")
    assert code == 0 and "#pragma omp parallel" not in serial and "#pragma omp simd" not in serial
    code, tiled, _ = _run(capsys, *base, "--stage", "tree", "--tile", "4,8")
    assert code == 0 and "floor((b)/4)" in tiled and "floor((n)/8)" in tiled
    opts = tcjit.MappingOptions().tile(16, 2).parallelize(False).vectorize(True)
    code, from_json, _ = _run(capsys, *base, "--stage", "tree", "--options", opts.to_json())
    assert code == 0 and "floor((b)/16)" in from_json and "floor((n)/2)" in from_json
    assert "parallel: none" in from_json or "parallel" not in from_json.split("mapping decisions:")[1]
    # --options also drives the schedule stage's fusion and tiles
    code, sched, _ = _run(capsys, "show", fcrelu_file, "--stage", "schedule", "--options", opts.to_json())
    assert code == 0 and "floor((b)/16)" in sched


def test_show_mapped_stages_need_sizes_and_valid_options(capsys, fcrelu_file):
    with pytest.raises(SystemExit, match=r"needs concrete sizes.*missing: N"):
        main(["show", fcrelu_file, "--stage", "c", "--sizes", "B=4,M=4"])
    code, _, err = _run(capsys, "show", fcrelu_file, "--stage", "c", "--sizes", FC_SIZES, "--options", "{")
    assert code == 2 and "TCOptionsError" in err and "cannot be read" in err
    bad = json.dumps({"format": 1, "tile": [4]})
    code, _, err = _run(capsys, "show", fcrelu_file, "--stage", "tree", "--sizes", FC_SIZES, "--options", bad)
    assert code == 2 and "TCOptionsError" in err and "missing" in err


def test_run_compiles_and_checks_against_the_oracle(capsys):
    code, out, _ = _run(capsys, "run", CONV, "--sizes", SIZES, "--budget", "0.01")
    assert code == 0 and "O: torch.float32 (1, 4, 6, 6)" in out
    assert re.search(r"max \|err\| vs oracle: \S+  ok", out)
    assert re.search(r"conv2d: compiled in [\d.]+ ms; run [\d.]+ ms \(median\); oracle [\d.]+ ms", out)
    # the same kernel again comes from the kernel cache
    code, out, _ = _run(capsys, "run", CONV, "--sizes", SIZES, "--budget", "0.01")
    assert code == 0 and "loaded from the kernel cache" in out


def test_run_takes_options(capsys, fcrelu_file):
    code, out, _ = _run(
        capsys, "run", fcrelu_file, "--sizes", FC_SIZES, "--tile", "8,8", "--no-parallel", "--budget", "0.01"
    )
    assert code == 0 and "ok" in out


def test_run_exits_1_on_a_mismatch(capsys, monkeypatch, fcrelu_file):
    import tcjit.reference

    real = tcjit.reference.evaluate_def

    def wrong(cdef, *inputs, **kw):
        return tuple(o + 1 for o in real(cdef, *inputs, **kw))

    monkeypatch.setattr(tcjit.reference, "evaluate_def", wrong)
    code, out, err = _run(capsys, "run", fcrelu_file, "--sizes", FC_SIZES, "--budget", "0.01")
    assert code == 1 and "MISMATCH" in out and "does not match the oracle" in err


def test_errors_are_reported_not_raised(capsys, tmp_path):
    bad = tmp_path / "bad.tc"
    bad.write_text("def f(float(N) A) -> (B) {\n    B(i) = A(i) +\n}\n")
    code, _, err = _run(capsys, "show", str(bad))
    assert code == 2 and "TCSyntaxError" in err and "^" in err
    code, _, err = _run(capsys, "show", str(bad), "--stage", "c", "--sizes", "N=4")
    assert code == 2 and "TCSyntaxError" in err and "^" in err
    code, _, err = _run(capsys, "run", str(bad), "--sizes", "N=4")
    assert code == 2 and "TCSyntaxError" in err and "^" in err
    code, _, err = _run(capsys, "run", CONV, "--sizes", "N=1,C=3,H=2,W=8,F=4,KH=3,KW=3")
    assert code == 2 and "empty range" in err
    code, _, err = _run(capsys, "run", CONV, "--sizes", "N=1,C=3")
    assert code == 2 and "needs sizes for" in err
    code, _, err = _run(capsys, "show", CONV, "--entry", "nope")
    assert code == 2 and "unknown entry point 'nope'; the source defines conv2d" in err


def test_demo_table_for_some_kernels(capsys):
    code, out, _ = _run(capsys, "demo", "--kernel", "fcrelu", "--kernel", "softmax", "--budget", "0.01")
    assert code == 0 and "2 of 2 kernels match torch" in out
    header = out.splitlines()[0].split()
    assert header[:3] == ["kernel", "sizes", "compile"] and header[-1] == "correct"
    row = next(line for line in out.splitlines() if line.startswith("softmax"))
    assert "N=64,D=1000" in row and row.rstrip().endswith("ok")


@pytest.mark.full
def test_demo_checks_every_suite_kernel(capsys):
    code, out, _ = _run(capsys, "demo")
    assert code == 0 and "15 of 15 kernels match torch" in out


def test_the_cuda_mapping_runs_emulated_from_the_command_line(capsys, fcrelu_file):
    sizes = ["--sizes", "B=5,M=7,N=9"]
    assert (
        main(["run", fcrelu_file, *sizes, "--target", "cuda-emulated", "--threads", "4,2", "--tile", "4,4"])
        == 0
    )
    assert "ok" in capsys.readouterr().out
    assert (
        main(["show", fcrelu_file, *sizes, "--stage", "tree", "--target", "cuda-emulated", "--blocks", "3"])
        == 0
    )
    out = capsys.readouterr().out
    assert "blocks: members 0..0" in out and "-> x (3)" in out and "kernel over" in out
    assert main(["show", fcrelu_file, *sizes, "--stage", "c", "--target", "cuda-emulated"]) == 0
    assert "threads of the block up to the next barrier" in capsys.readouterr().out
