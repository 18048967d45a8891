"""The tcjit command line: show (each stage), run (compiled, checked against the oracle), demo."""

from __future__ import annotations

import collections
import json
import os
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
    assert "void tc_entry_fcrelu(" in out and "#pragma omp" in out
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
        with pytest.raises(SystemExit, match=message):
            main(["show", str(path), "--stage", "backward", *argv])
    with pytest.raises(SystemExit, match="go with --stage backward"):
        main(["show", str(path), "--stage", "canonical", "--wrt", "W1"])


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


# ----------------------------------------------------------------------------------- tcjit cache
def _tuned_db():
    """The test's own options database (conftest points TCJIT_OPTIONS_DB at a fresh path)."""
    from tcjit.cache import OptionsDatabase

    return OptionsDatabase(os.environ["TCJIT_OPTIONS_DB"])


def _cache_key(shape, entry="fcrelu"):
    from tcjit.cache import TuningKey

    layout = json.dumps([["float32", list(shape), [shape[1], 1]], ["float32", [40, 48], [48, 1]], "scalar"])
    return TuningKey("def fcrelu...", entry, layout, "cpu", "x86_64-test", "0.1.0")


def test_cache_list_empty_then_records(capsys):
    code, out, _ = _run(capsys, "cache", "list")
    path = os.environ["TCJIT_OPTIONS_DB"]
    assert code == 0 and out.splitlines() == [f"tuned options in {path}", f"no tuned options in {path}"]
    db = _tuned_db()
    key = _cache_key((64, 48))
    db.put(key, '{"tile":[32,32]}', 25e-6, baseline=100e-6, evaluations=321)
    db.put(_cache_key((8, 48), entry="other"), "{}", 2.5e-3)
    code, out, _ = _run(capsys, "cache", "list")
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"tuned options in {path}"
    assert lines[1].split() == ["id", "entry", "target", "inputs", "time", "speedup", "evaluations", "date"]
    mine = next(line for line in lines if line.startswith(key.digest[:12]))
    for word in ("fcrelu", "cpu", "64x48,40x48,scalar", "25.0 µs", "4.00x", "321"):
        assert word in mine
    assert "2.50 ms" in next(line for line in lines if " other " in line)


def test_cache_show_and_ambiguous_or_unknown_ids(capsys):
    from tcjit.cache import Measured

    db = _tuned_db()
    key = _cache_key((64, 48))
    db.put(key, '{"tile":[32,32],"unroll":4}', 25e-6, baseline=50e-6, evaluations=3)
    db.record(key, [Measured("a", 1.0, "ok"), Measured("b", None, "crashed"), Measured("c", 2.0, "ok")])
    code, out, _ = _run(capsys, "cache", "show", key.digest[:8])
    assert code == 0
    assert f"id           {key.digest}" in out and "entry        fcrelu" in out
    assert '"unroll": 4' in out and "2.00x" in out
    assert "3 candidates: 1 crashed, 2 ok" in out and "def fcrelu..." in out
    code, _, err = _run(capsys, "cache", "show", "zzzz")
    assert code == 2 and err.startswith("tcjit: TCCacheError: no tuned options with an id starting 'zzzz'")
    for n in range(40):  # enough records that some share a first hex digit
        db.put(_cache_key((n + 1, 48)), "{}", 1.0)
    first = collections.Counter(r.key.digest[0] for r in db.records()).most_common(1)[0][0]
    code, _, err = _run(capsys, "cache", "show", first)
    assert code == 2 and "give more of it" in err


def test_cache_disabled_database_is_an_error(capsys, monkeypatch):
    monkeypatch.setenv("TCJIT_OPTIONS_DB", "")
    code, _, err = _run(capsys, "cache", "list")
    assert code == 2 and "TCCacheError: the tuned-options database is disabled" in err


def test_cache_export_import_round_trip(capsys, tmp_path, monkeypatch):
    db = _tuned_db()
    db.put(_cache_key((64, 48)), "{}", 1e-4, evaluations=2)
    db.put(_cache_key((32, 48)), "{}", 2e-4, evaluations=2)
    code, out, _ = _run(capsys, "cache", "export")
    assert code == 0 and len(json.loads(out)) == 2
    file = tmp_path / "tuned.json"
    assert _run(capsys, "cache", "export", str(file))[0] == 0
    assert json.loads(file.read_text()) == json.loads(out)
    monkeypatch.setenv("TCJIT_OPTIONS_DB", str(tmp_path / "elsewhere.sqlite3"))
    code, out, _ = _run(capsys, "cache", "import", str(file))
    assert code == 0 and "merged 2 records" in out and "2 new or faster" in out
    assert _run(capsys, "cache", "import", str(file))[1].endswith("0 new or faster\n")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"schema": 1}]')
    code, _, err = _run(capsys, "cache", "import", str(bad))
    assert code == 2 and "TCCacheError" in err and "record 0" in err
    bad.write_text("[{")
    assert _run(capsys, "cache", "import", str(bad))[0] == 2


def test_cache_clear_needs_confirmation(capsys, monkeypatch, tmp_path):
    import io

    db = _tuned_db()
    db.put(_cache_key((64, 48)), "{}", 1e-4)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal
    code, _, err = _run(capsys, "cache", "clear")
    assert code == 2 and "--yes" in err and len(db.records()) == 1

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdin", Tty("n\n"))
    assert _run(capsys, "cache", "clear")[0] == 1 and len(db.records()) == 1
    monkeypatch.setattr("sys.stdin", Tty("y\n"))
    code, out, _ = _run(capsys, "cache", "clear")
    assert code == 0 and "removed 1 tuned options" in out and db.records() == []


def test_cache_clear_kernels_empties_the_kernel_store(capsys, tmp_path, fcrelu_file):
    from tcjit.compiler import kernel_store

    assert _run(capsys, "run", fcrelu_file, "--sizes", FC_SIZES, "--budget", "0.01")[0] == 0
    store = kernel_store()
    assert store.total_bytes() > 0
    code, out, _ = _run(capsys, "cache", "clear", "--yes", "--kernels")
    assert code == 0 and "removed every compiled kernel" in out
    assert store.total_bytes() == 0
