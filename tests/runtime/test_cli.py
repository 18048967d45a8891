"""The tcjit command line: show (each stage), run (compiled, checked against the oracle), demo."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tcjit import MappingOptions
from tcjit.cli import main

CONV = str(Path(__file__).resolve().parents[2] / "docs" / "examples" / "conv2d.tc")
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
        ("ast", ["Def name='conv2d'  @", "\n  body:\n    - Statement tensor='O', op='+=', init=True"]),
        ("scop", ["S0_init (init, line 3)", "R3 reads", "I[a0 = n, a1 = r_c, a2 = h + r_kh"]),
        ("schedule", ["domain:", "\nchild:\n", "    child:\n      schedule:", "permutable: 1"]),
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


def _conv_sizes() -> dict[str, int]:
    return {name: int(value) for name, value in (part.split("=") for part in SIZES.split(","))}


_MIN_TILED = MappingOptions().tile(4, 8).outer_schedule_fusion_strategy("Min")


@pytest.mark.parametrize(
    ("flags", "stage", "keywords"),
    [
        ([], "ast", {}),
        (["--sizes", SIZES], "checked", {"sizes": _conv_sizes()}),
        ([], "canonical", {}),
        ([], "scop", {}),
        (["--fix-sizes", "--sizes", SIZES], "scop", {"sizes": _conv_sizes(), "fix_sizes": True}),
        ([], "schedule", {}),
        (["--fusion", "Max", "--tile", "2,0,3"], "schedule", {"fusion": "Max", "tiles": (2, 0, 3)}),
        (
            ["--tile", "2,2", "--fix-sizes", "--sizes", SIZES],
            "schedule",
            {"sizes": _conv_sizes(), "fix_sizes": True, "tiles": (2, 2)},
        ),
        (["--options", _MIN_TILED.to_json()], "schedule", {"options": _MIN_TILED}),
    ],
)
def test_show_prints_the_pipelines_front_stage(capsys, flags, stage, keywords):
    """``tcjit show`` prints what :func:`tcjit.pipeline.front_stage` returns, byte for byte: the
    hook is the API for the front stages' text, the command line only reads its flags."""
    from tcjit.pipeline import front_stage
    from tcjit.polyhedral.lang.check import check_source

    cdef = check_source(Path(CONV).read_text()).entry(None)
    code, out, _ = _run(capsys, "show", CONV, "--stage", stage, *flags)
    assert code == 0 and out == front_stage(cdef, stage, **keywords)


def test_show_c_is_the_generated_kernel(capsys, fcrelu_file):
    code, out, _ = _run(capsys, "show", fcrelu_file, "--stage", "c", "--sizes", FC_SIZES)
    assert code == 0
    assert "void tc_entry_fcrelu(" in out and "#pragma omp" in out
    _, other, _ = _run(capsys, "show", fcrelu_file, "--stage", "c", "--sizes", "B=64,M=56,N=40")
    assert other != out  # specialised to the sizes


def test_show_cuda_is_the_source_a_cuda_call_compiles(capsys, fcrelu_file):
    """The cuda target's source, without a GPU: what the pipeline lowers for CUDA tensors."""
    from tcjit.pipeline import lowered
    from tcjit.polyhedral.lang.check import check_source

    code, out, _ = _run(capsys, "show", fcrelu_file, "--stage", "cuda", "--sizes", FC_SIZES)
    assert code == 0 and 'extern "C" __global__' in out and "#pragma omp parallel" not in out
    want = lowered(check_source(FCRELU).entry(), {"B": 64, "M": 48, "N": 40}, None, "cuda").source
    assert out == want + ("" if want.endswith("\n") else "\n")
    code, shaped, _ = _run(
        capsys, "show", fcrelu_file, "--stage", "cuda", "--sizes", FC_SIZES, "--threads", "8,2"
    )
    assert code == 0 and "blocks of 8 x 2 x 1 threads" in shaped
    code, _, err = _run(
        capsys, "show", fcrelu_file, "--stage", "cuda", "--sizes", FC_SIZES, "--target", "cpu"
    )
    assert code == 2 and "leave out --target cpu" in err


def test_show_ir_and_the_c_without_its_prelude(capsys, fcrelu_file):
    """The kernel IR the printer prints, and the C with the prelude (the same in every kernel)
    left out; the emulated target's IR shows its launches, blocks and threads."""
    from tcjit.mapping import ir
    from tcjit.mapping.ir_text import render

    code, text, _ = _run(capsys, "show", fcrelu_file, "--stage", "ir", "--sizes", FC_SIZES)
    assert code == 0 and "# parallel" in text and re.search(r"^\s+S0\(", text, re.M), text
    code, gpu, _ = _run(
        capsys, "show", fcrelu_file, "--stage", "ir", "--sizes", FC_SIZES, "--target", "cuda-emulated"
    )
    assert code == 0 and "blocks of grid" in gpu and "threads (" in gpu
    _, full, _ = _run(capsys, "show", fcrelu_file, "--stage", "c", "--sizes", FC_SIZES)
    code, short, _ = _run(capsys, "show", fcrelu_file, "--stage", "c", "--sizes", FC_SIZES, "--no-prelude")
    assert code == 0 and "left out (--no-prelude)" in short and "tc_exp_f32" not in short
    assert full.endswith(short.split("left out (--no-prelude) */\n", 1)[1]) and len(short) < len(full) // 3
    code, _, err = _run(capsys, "show", fcrelu_file, "--stage", "tree", "--sizes", FC_SIZES, "--no-prelude")
    assert code == 2 and "--no-prelude goes with --stage c or cuda" in err
    loop = ir.For(
        "i",
        ir.Int(0),
        ir.Op("<", (ir.Var("i"), ir.Int(4))),
        1,
        ir.Run("S0", (ir.Var("i"),)),
        {ir.LoopKind.SIMD},
    )
    assert render(ir.If(ir.Op("==", (ir.Var("j"), ir.Int(0))), loop, None)) == (
        "if (j == 0):\n  for i = 0; (i < 4); i += 1  # simd\n    S0(i)"
    )


def test_show_options_says_what_a_call_would_use_and_why(capsys, fcrelu_file):
    """The defaults, a tuned record for contiguous inputs at these sizes (found as a call finds
    it, with meta tensors: nothing runs), and the flags, which win."""
    import tcjit
    from tcjit.pipeline import default_options
    from tcjit.testing import random_inputs
    from tcjit.tuned import tuning_key

    show = ("show", fcrelu_file, "--stage", "options", "--sizes", FC_SIZES)
    code, out, _ = _run(capsys, *show)
    kernel = tcjit.define(FCRELU)
    defaults = default_options(kernel.definition, {"B": 64, "M": 48, "N": 40}, "cpu")
    assert code == 0 and out.startswith("options: the defaults (from the kernel's structure)\n")
    assert f"  tile: {json.dumps(list(defaults.get('tile')))}\n" in out
    key = tuning_key(kernel, random_inputs(kernel.definition, {"B": 64, "M": 48, "N": 40}), "cpu")
    _tuned_db().put(key, tcjit.MappingOptions.naive().tile(8, 8).to_json(), 1e-5, baseline=2e-5)
    code, out, _ = _run(capsys, *show)
    assert code == 0 and f"options: tuned record {key.digest[:12]}" in out and "  tile: [8, 8]\n" in out
    code, out, _ = _run(capsys, *show, "--tile", "4,4")
    assert code == 0 and "options: given on the command line\n" in out and "  tile: [4, 4]\n" in out
    code, _, err = _run(capsys, "show", fcrelu_file, "--stage", "options")
    assert code == 2 and "--sizes" in err


def test_version(capsys):
    from tcjit import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out == f"tcjit {__version__}\n"


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
    code, _, err = _run(capsys, "show", fcrelu_file, "--stage", "c", "--sizes", "B=4,M=4")
    assert code == 2 and re.fullmatch(r"tcjit: --stage c needs concrete sizes.*missing: N\)\n", err)
    code, _, err = _run(capsys, "show", fcrelu_file, "--stage", "c", "--sizes", FC_SIZES, "--options", "{")
    assert code == 2 and "TCOptionsError" in err and "cannot be read" in err
    bad = json.dumps({"format": 1, "tile": [4]})
    code, _, err = _run(capsys, "show", fcrelu_file, "--stage", "tree", "--sizes", FC_SIZES, "--options", bad)
    assert code == 2 and "TCOptionsError" in err and "missing" in err


MLP2 = """
def mlp2(float(B,M) I, float(N,M) W1, float(P,N) W2) -> (O1, O2) {
    O1(b, n) +=! I(b, r_m) * W1(n, r_m)
    O1(b, n)  = fmax(O1(b, n), 0)
    O2(b, p) +=! O1(b, r_n) * W2(p, r_n)
}
"""


def test_show_backward_for_some_gradients_and_absent_outputs(capsys, tmp_path):
    """``--wrt`` and ``--absent`` print the backward a call with those needs runs: only the asked
    gradients, and no ``d_<O>`` parameter for an output whose gradient is absent."""
    path = tmp_path / "mlp2.tc"
    path.write_text(MLP2)
    code, full, _ = _run(capsys, "show", str(path), "--stage", "backward")
    assert code == 0
    assert "float32(B, N) d_O1, float32(B, P) d_O2) -> (float32(B, M) d_I, float32(N, M) d_W1, " in full
    code, out, _ = _run(capsys, "show", str(path), "--stage", "backward", "--wrt", "W2", "--absent", "O1")
    assert code == 0
    backward = out[out.index("def mlp2__bwd") :]
    assert "float32(B, P) d_O2) -> (float32(P, N) d_W2) {" in backward
    assert "d_O1" not in backward and "d_W1" not in backward
    for argv, message in [
        (["--wrt", "X"], r"--wrt takes inputs of the entry \(I, W1, W2\), got 'X': X is not one"),
        (["--absent", "O1,O2"], "--absent names every output"),
        (["--absent", "I"], "--absent takes outputs"),
    ]:
        code, _, err = _run(capsys, "show", str(path), "--stage", "backward", *argv)
        assert code == 2 and re.match("tcjit: " + message, err) and err.count("\n") == 1
    code, _, err = _run(capsys, "show", str(path), "--stage", "canonical", "--wrt", "W1")
    assert code == 2 and err == "tcjit: --wrt goes with --stage backward, not --stage canonical\n"


def test_front_stage_schedule_defaults_and_backward(capsys, tmp_path):
    """Without a strategy, tiles or options the schedule is fused as DEFAULT_FUSION and untiled;
    options give both; ``backward`` takes ``--wrt`` and ``--absent`` as ``wrt`` and ``absent``."""
    from tcjit.pipeline import FRONT_STAGES, front_stage
    from tcjit.polyhedral.lang.check import check_source
    from tcjit.stages import DEFAULT_FUSION

    cdef = check_source(FCRELU).entry(None)
    plain = front_stage(cdef, "schedule")
    assert plain == front_stage(cdef, "schedule", fusion=DEFAULT_FUSION, tiles=())
    opts = MappingOptions().tile(16, 2).outer_schedule_fusion_strategy("Max")
    tiled = front_stage(cdef, "schedule", options=opts)
    assert tiled == front_stage(cdef, "schedule", fusion="Max", tiles=(16, 2))
    assert "floor((b)/16)" in tiled and "floor" not in plain
    path = tmp_path / "mlp2.tc"
    path.write_text(MLP2)
    code, out, _ = _run(capsys, "show", str(path), "--stage", "backward", "--wrt", "W2", "--absent", "O1")
    mlp2 = check_source(MLP2).entry(None)
    assert code == 0 and out == front_stage(mlp2, "backward", wrt=["W2"], absent={"O1"})
    assert set(FRONT_STAGES) == {"ast", "checked", "canonical", "backward", "scop", "schedule"}
    with pytest.raises(ValueError, match="no front stage 'tree'"):
        front_stage(cdef, "tree")


def test_run_compiles_and_checks_against_the_oracle(capsys):
    code, out, _ = _run(capsys, "run", CONV, "--sizes", SIZES, "--budget", "0.01")
    assert code == 0 and "O: torch.float32 (1, 4, 6, 6)" in out
    assert re.search(r"max \|err\| vs oracle: \S+  ok", out)
    assert re.search(r"conv2d: compiled in [\d.]+ ms; run [\d.]+ ms \(median\); oracle [\d.]+ ms", out)
    # the same kernel again comes from the kernel cache
    code, out, _ = _run(capsys, "run", CONV, "--sizes", SIZES, "--budget", "0.01")
    assert code == 0 and "loaded from the kernel cache" in out


def test_a_reader_that_leaves_early_is_no_error(tmp_path):
    """``tcjit run ... | head -1``: the pipe closes after the first line; no traceback."""
    import subprocess
    import sys

    env = dict(os.environ, TCJIT_CACHE_DIR=str(tmp_path / "kernels"))
    cmd = f"{sys.executable} -m tcjit.cli run {CONV} --sizes {SIZES} --budget 0.01 | head -c 1"
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=300)
    assert proc.stdout and proc.stderr == "", proc.stderr


def test_run_takes_options(capsys, fcrelu_file):
    code, out, _ = _run(
        capsys, "run", fcrelu_file, "--sizes", FC_SIZES, "--tile", "8,8", "--no-parallel", "--budget", "0.01"
    )
    assert code == 0 and "ok" in out


def test_run_says_which_options_it_used(capsys, fcrelu_file):
    """The defaults, then a tuned record for exactly these inputs (its id as tcjit cache lists
    it), then options from the command line, which win over the record."""
    import tcjit
    from tcjit.testing import random_inputs
    from tcjit.tuned import tuning_key

    run = ("run", fcrelu_file, "--sizes", FC_SIZES, "--budget", "0")
    code, out, _ = _run(capsys, *run)
    assert code == 0 and "options: the defaults (from the kernel's structure)\n" in out
    kernel = tcjit.define(FCRELU)
    cdef = kernel.definition
    key = tuning_key(kernel, random_inputs(cdef, {"B": 64, "M": 48, "N": 40}), "cpu")
    tuned = tcjit.MappingOptions.naive().tile(8, 8)
    _tuned_db().put(key, tuned.to_json(), 1e-5, baseline=2e-5)
    code, out, _ = _run(capsys, *run)
    db = os.environ["TCJIT_OPTIONS_DB"]
    assert code == 0 and f"options: tuned record {key.digest[:12]} from {db}\n" in out
    assert any(line.startswith(key.digest[:12]) for line in _run(capsys, "cache", "list")[1].splitlines())
    code, out, _ = _run(capsys, *run, "--tile", "4,4")
    assert code == 0 and "options: given on the command line\n" in out


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


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "{missing}"],
        ["show", "{missing}", "--stage", "c", "--sizes", "N=4"],
        ["run", "{missing}", "--sizes", "N=4"],
        ["tune", "{missing}", "--sizes", "N=4"],
        ["show", "{folder}"],
        ["show", "{binary}"],
    ],
)
def test_a_file_that_cannot_be_read_is_one_line(capsys, tmp_path, argv):
    (tmp_path / "binary.tc").write_bytes(b"\xff\xfe def")
    paths = {"missing": tmp_path / "missing.tc", "folder": tmp_path, "binary": tmp_path / "binary.tc"}
    argv = [a.format(**paths) for a in argv]
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert re.fullmatch(
        r"tcjit: cannot read the TC file \S+: (No such file or directory|Is a directory|not UTF-8 text "
        r"\(byte 0\))\n",
        err,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", CONV, "--sizes", "N=x"], "--sizes expects NAME=INT[,NAME=INT...] with INT >= 0, got 'N=x'"),
        (["show", CONV, "--sizes", "=3"], "--sizes expects NAME=INT[,NAME=INT...] with INT >= 0, got '=3'"),
        (
            ["show", CONV, "--sizes", "N=-1"],
            "--sizes expects NAME=INT[,NAME=INT...] with INT >= 0, got 'N=-1'",
        ),
        (["show", CONV, "--sizes", "N=1,N=2"], "--sizes gives N twice"),
        (
            ["run", CONV, "--sizes", "N=1,Q=3"],
            "--sizes names Q, which is not a size of the entry (its sizes: N, C, H, W, F, KH, KW)",
        ),
        (
            ["tune", CONV, "--sizes", "Q=3"],
            "--sizes names Q, which is not a size of the entry (its sizes: N, C, H, W, F, KH, KW)",
        ),
        (
            ["show", CONV, "--stage", "c", "--sizes", SIZES, "--tile", "a,b"],
            "--tile expects INT[,INT...] with each INT >= 0, got 'a,b'",
        ),
        (
            ["run", CONV, "--sizes", SIZES, "--threads", "4,x"],
            "--threads expects INT[,INT...] with each INT >= 0, got '4,x'",
        ),
        (
            ["run", CONV, "--sizes", SIZES, "--budget", "-1"],
            "--budget takes a number of seconds >= 0, got -1.0",
        ),
        (
            ["show", CONV, "--tile", "4"],
            "--tile goes with --stage schedule, options, tree, ir, c, cuda or gpu-profile, "
            "not --stage checked",
        ),
        (
            ["show", CONV, "--stage", "scop", "--options", "{}"],
            "--options goes with --stage schedule, options, tree, ir, c, cuda or gpu-profile, "
            "not --stage scop",
        ),
        (
            ["show", CONV, "--stage", "schedule", "--threads", "4"],
            "--threads goes with --stage options, tree, ir, c, cuda or gpu-profile, not --stage schedule",
        ),
        (
            ["show", CONV, "--target", "cuda-emulated"],
            "--target goes with --stage options, tree, ir, c, cuda or gpu-profile, not --stage checked",
        ),
        (
            ["show", CONV, "--stage", "c", "--fix-sizes"],
            "--fix-sizes goes with --stage scop or schedule, not --stage c",
        ),
        (["show", CONV, "--stage", "schedule", "--fix-sizes"], "--fix-sizes needs --sizes"),
        (["demo", "--kernel", "nope"], "--kernel nope: no such suite kernel (the suite has matmul, "),
        (["demo", "--budget", "nan"], "--budget takes a number of seconds >= 0, got nan"),
    ],
)
def test_a_mistaken_argument_is_one_line(capsys, argv, message):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "" and err.startswith(f"tcjit: {message}") and err.count("\n") == 1, err


def test_warnings_are_printed_as_tcjit_lines(capsys, fcrelu_file, tmp_path, monkeypatch):
    """A warning on the way (here: a kernel cache that cannot be used) is printed as tcjit's own
    line (and its hint), not Python's ``file:line: category: message`` and source line."""
    folder = tmp_path / "not-a-folder"
    folder.write_text("")
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(folder))
    code, _, err = _run(capsys, "run", fcrelu_file, "--sizes", FC_SIZES, "--budget", "0")
    assert code == 0
    first, *rest = err.splitlines()
    assert first == f"tcjit: warning: kernel cache disabled: cannot use {folder} as the kernel cache: " + (
        "it is not a directory"
    )
    assert [line[:6] for line in rest] == ["hint: "] and ".py:" not in err  # no Python file:line


EMBEDDING = """
def embedding(float(V, D) W, int64(N) Idx) -> (O) {
    O(n, d) = W(Idx(n), d)
}
"""
GATHERS = """
def gathers(float(V,D) LUT, int32(B) I, int64(B,L) J, float(B,L) Wt, int64 k, int8(B) Small)
    -> (E, Bag, Sh, GG, X)
{
    E(b, d) = LUT(I(b), d)
    Bag(b, d) +=! Wt(b, r_l) * LUT(J(b, r_l), d)
    Sh(b) = LUT((I(b) + 1) % V, 0)
    GG(b) = LUT(J(I(b) % B, 0), 1)
    X(b) = LUT(k, b) + Small(b)
}
"""
GATHER_SIZES = "V=40,D=6,B=30,L=5"


def test_index_inputs_are_drawn_from_the_extent_they_index():
    """Each integer input read inside a subscript gets [0, smallest extent it indexes): ``I``
    indexes LUT's rows (V) and J's rows (B), so [0, min(V, B)); a rank-0 ``k`` as well; ``Small``
    is read as a value only and keeps the default distribution."""
    from tcjit.polyhedral.lang.check import check_source
    from tcjit.testing import index_ranges, random_inputs

    cdef = check_source(GATHERS).defs[0]
    assert index_ranges(cdef, {"V": 40, "D": 6, "B": 30, "L": 5}) == {
        "I": (0, 30),
        "J": (0, 40),
        "k": (0, 40),
    }
    assert index_ranges(cdef, {"V": 20, "D": 6, "B": 30, "L": 5})["I"] == (0, 20)
    _, I, J, _, k, small = random_inputs(cdef, {"V": 40, "D": 6, "B": 30, "L": 5}, seed=3)
    assert 0 <= int(I.min()) and int(I.max()) < 30 and int(I.max()) > 15  # the whole range is used
    assert 0 <= int(J.min()) and int(J.max()) < 40 and 0 <= k < 40
    assert int(small.min()) < 0  # [-8, 8) as before
    _, I, *_ = random_inputs(cdef, {"V": 40, "D": 6, "B": 30, "L": 5}, ranges={"I": (7, 9)})
    assert set(I.tolist()) == {7, 8}


def test_run_draws_indices_inside_the_tensor_they_index(capsys, tmp_path):
    """Random indices used to fail every kernel that takes indices (an out-of-bounds read)."""
    path = tmp_path / "emb.tc"
    path.write_text(EMBEDDING)
    code, out, err = _run(capsys, "run", str(path), "--sizes", "V=100,D=8,N=64", "--budget", "0")
    assert code == 0 and "ok" in out, err
    assert out.splitlines()[0] == "integer inputs: Idx in [0, 100) (the extent it indexes)"
    gathers = tmp_path / "gathers.tc"
    gathers.write_text(GATHERS)
    code, out, err = _run(capsys, "run", str(gathers), "--sizes", GATHER_SIZES, "--budget", "0")
    assert code == 0 and "ok" in out, err
    code, out, _ = _run(capsys, "run", str(path), "--sizes", "V=100,D=8,N=64", "--range", "Idx=98:100")
    assert code == 0 and out.splitlines()[0] == "integer inputs: Idx in [98, 100) (--range)"
    code, _, err = _run(capsys, "run", str(path), "--sizes", "V=100,D=8,N=64", "--range", "Idx=0:1000")
    assert code == 2 and "TCBoundsError" in err and "outside [0, 100)" in err


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        (["Idx=5:5"], "--range expects NAME=LO:HI with integers LO < HI (HI excluded), got 'Idx=5:5'"),
        (["Idx=a:b"], "--range expects NAME=LO:HI with integers LO < HI (HI excluded), got 'Idx=a:b'"),
        (["Idx"], "--range expects NAME=LO:HI with integers LO < HI (HI excluded), got 'Idx'"),
        (["Idx=0:3", "Idx=0:4"], "--range gives Idx twice"),
        (["W=0:3"], "--range W: W is float32; ranges are for integer inputs (Idx)"),
        (["Q=0:3"], "--range Q: Q is no input of embedding; ranges are for integer inputs (Idx)"),
        (["Idx=-1:10000000000000000000"], "--range Idx=-1:10000000000000000000 does not fit int64"),
    ],
)
def test_bad_ranges_are_one_line(capsys, tmp_path, ranges, message):
    path = tmp_path / "emb.tc"
    path.write_text(EMBEDDING)
    argv = [a for r in ranges for a in ("--range", r)]
    for command in ("run", "tune"):
        code, out, err = _run(capsys, command, str(path), "--sizes", "V=100,D=8,N=64", *argv)
        assert code == 2 and out == "" and err.startswith(f"tcjit: {message}") and err.count("\n") == 1, err


def test_demo_table_for_some_kernels(capsys):
    code, out, _ = _run(capsys, "demo", "--kernel", "fcrelu", "--kernel", "softmax", "--budget", "0.01")
    assert code == 0 and "2 of 2 kernels match torch" in out
    header = out.splitlines()[0].split()
    assert header[:3] == ["kernel", "sizes", "compile"] and header[-2:] == ["correct", "timing"]
    row = next(line for line in out.splitlines() if line.startswith("softmax"))
    assert "N=64,D=1000" in row and " ok " in row
    # Every row says whether its timing can be trusted ("-", or flags the legend explains).
    flags = row.split(" ok ", 1)[1].strip()
    assert flags == "-" or set(re.findall(r"[a-z]+", flags)) <= {"busy", "noisy", "cold", "tcjit", "torch"}
    assert "Sizes: each kernel's last small test size in tcjit.suite" in out
    assert all(f"\n  {flag}" in out for flag in ("busy", "noisy", "cold"))


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


def _tuned_db():
    """The test's own options database (conftest points TCJIT_OPTIONS_DB at a fresh path)."""
    from tcjit.cache import OptionsDatabase

    return OptionsDatabase(os.environ["TCJIT_OPTIONS_DB"])
