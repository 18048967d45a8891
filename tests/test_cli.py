"""The tcjit command line: show (each stage), run, demo."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcjit.cli import main

CONV = str(Path(__file__).resolve().parents[1] / "docs" / "examples" / "conv2d.tc")
SIZES = "N=1,C=3,H=8,W=8,F=4,KH=3,KW=3"


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


def test_run_prints_outputs(capsys):
    code, out, _ = _run(capsys, "run", CONV, "--sizes", SIZES)
    assert code == 0 and "O: torch.float32 (1, 4, 6, 6)" in out


def test_errors_are_reported_not_raised(capsys, tmp_path):
    bad = tmp_path / "bad.tc"
    bad.write_text("def f(float(N) A) -> (B) {\n    B(i) = A(i) +\n}\n")
    code, _, err = _run(capsys, "show", str(bad))
    assert code == 2 and "TCSyntaxError" in err and "^" in err
    code, _, err = _run(capsys, "run", CONV, "--sizes", "N=1,C=3,H=2,W=8,F=4,KH=3,KW=3")
    assert code == 2 and "empty range" in err
    code, _, err = _run(capsys, "show", CONV, "--entry", "nope")
    assert code == 2 and "unknown entry point 'nope'; the source defines conv2d" in err


def test_demo_checks_every_suite_kernel(capsys):
    code, out, _ = _run(capsys, "demo")
    assert code == 0 and "15 of 15 kernels match torch" in out
