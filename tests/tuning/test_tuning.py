"""tcjit.autotune and ``tcjit tune``: the genetic search on real kernels, through real worker
processes, the real C compiler and a real SQLite options database.

The search itself (selection, crossover, planted crashing/hanging/miscompiling candidates) is
tested with synthetic problems in test_genetic.py; the database in test_options_db.py. Here: the
pieces put together, and what a user sees.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import tcjit
import tcjit.nvrtc
import tcjit.pipeline
from tcjit import TCCallError, TCOptionsError
from tcjit.cli import main
from tcjit.mapping.options import MappingOptions

MATMUL = """
def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, r_k) * B(r_k, n)
}
"""
SMALL = {"generations": 2, "population": 4, "seed": 0, "workers": 2}


def _inputs(m=16, k=8, n=12):
    g = torch.Generator().manual_seed(0)
    return torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)


def test_autotune_stores_the_best_and_later_calls_use_it(db, monkeypatch):
    import tcjit.tuning
    from tcjit.tuning import tune_kernel

    def no_model(*args):
        raise AssertionError("a CPU tuning run asked for the GPU model")

    monkeypatch.setattr(tcjit.tuning, "gpu_predictor", no_model)
    kernel = tcjit.define(MATMUL)
    a, b = _inputs()
    before = kernel(a, b)  # a default-options specialisation, forgotten after tuning
    report = tune_kernel(kernel, a, b, **SMALL)
    assert isinstance(report.best_options, MappingOptions)
    assert report.best_time is not None and report.default_time is not None
    assert report.best_time <= report.default_time
    assert report.failed == 0
    assert report.pruned == 0  # no model of CPU time: every candidate proposed is measured
    assert report.database == str(db)
    # The starting population and one more generation, at most, were measured.
    assert 1 <= len(report.result.measured) <= 2 * SMALL["population"]
    assert [g.index for g in report.result.history] == [0, 1]
    # The same kernel object, and a freshly defined one, now pick the tuned options up.
    assert kernel.options_for(a, b) == report.best_options
    assert tcjit.define(MATMUL).options_for(a, b) == report.best_options
    torch.testing.assert_close(kernel(a, b), before)
    torch.testing.assert_close(kernel(a, b), a @ b)
    # Other sizes, and another target, are not tuned: defaults.
    a2, b2 = _inputs(16, 8, 13)
    assert kernel.options_for(a2, b2) == tcjit.pipeline.default_options(
        kernel.definition, {"M": 16, "K": 8, "N": 13}, "cpu"
    )
    assert kernel.options_for(a, b, target="cuda-emulated") != report.best_options
    # Explicit options still win.
    naive = MappingOptions()
    assert kernel(a, b, options=naive).shape == (16, 12)


def test_a_fresh_process_uses_the_tuned_options(db):
    kernel = tcjit.define(MATMUL)
    a, b = _inputs()
    best = tcjit.autotune(kernel, a, b, **SMALL)
    script = textwrap.dedent(
        f"""
        import torch, tcjit
        k = tcjit.define({MATMUL!r})
        a, b = torch.zeros(16, 8), torch.zeros(8, 12)
        print(k.options_for(a, b).to_json())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert MappingOptions.from_json(out.stdout.strip()) == best


def test_a_second_run_resumes_and_measures_nothing_twice(db):
    from tcjit.tuning import tune_kernel

    kernel = tcjit.define(MATMUL)
    a, b = _inputs()
    first = tune_kernel(kernel, a, b, **SMALL)
    second = tune_kernel(kernel, a, b, **{**SMALL, "seed": 1})
    seen = {o.to_json() for o, _ in first.result.measured}
    again = [o for o, _ in second.result.measured if o.to_json() in seen]
    assert again == []  # (the default options are timed again in each run: the run's reference)
    from tcjit.tuned import options_database, tuning_key

    record = options_database().get(tuning_key(kernel, (a, b), "cpu"))
    assert record is not None
    assert record.evaluations == len(first.result.measured) + len(second.result.measured) + 2
    # one run's final rounds, never a mix of two runs' times; the greater gain (the newer at a tie)
    assert record == second.stored and record.rounds >= 2
    runs = [(r.verdict.time, r.verdict.default_time) for r in (first, second)]
    assert (record.time, record.baseline) in runs
    assert record.gain >= first.stored.gain


def test_options_tuned_for_other_sizes_seed_a_new_search(db):
    from tcjit.mapping.prepare import outer_band_extents
    from tcjit.mapping.search_space import search_space
    from tcjit.tuned import options_database, tuning_key
    from tcjit.tuning import tune_kernel

    kernel = tcjit.define(MATMUL)
    other = MappingOptions().tile(4, 2, 4).unroll(2).parallelize(False).register_tile(2, 2)
    options_database().put(tuning_key(kernel, _inputs(16, 8, 12), "cpu"), other.to_json(), 1e-6)
    a, b = _inputs(16, 8, 13)
    sizes = {"M": 16, "K": 8, "N": 13}
    defaults = tcjit.pipeline.default_options(kernel.definition, sizes, "cpu")
    # Options tuned for other sizes are never used for calls ...
    assert kernel.options_for(a, b) == defaults
    # ... but they seed the starting population of a search at these sizes.
    space = search_space("cpu", outer_band_extents(kernel.definition, sizes, defaults), base=defaults)
    seed = space.decode(space.encode(other, nearest=True))
    assert seed != defaults
    report = tune_kernel(kernel, a, b, **{**SMALL, "generations": 1})
    assert seed in [o for o, _ in report.result.measured]


def test_a_wrong_candidate_is_caught_by_the_oracle_check(monkeypatch):
    """The run phase compares every candidate's outputs with the oracle before timing it."""
    import tcjit.tuning_worker
    from tcjit.genetic import Measurement
    from tcjit.tuning_worker import WorkerState, check_and_time

    kernel = tcjit.define(MATMUL)
    a, b = _inputs()
    spec = tcjit.compile(kernel, a, b)
    right = WorkerState(kernel, (a, b), ((a @ b),), "cpu", 8)
    wrong = WorkerState(kernel, (a, b), ((a @ b) + 1e-2,), "cpu", 8)
    good = check_and_time(spec, right, None, Measurement)
    assert good.status == "ok" and good.time > 0
    bad = check_and_time(spec, wrong, None, Measurement)
    assert bad.status == "wrong" and bad.time is None and "max |error| 0.01" in bad.detail
    slow = check_and_time(spec, right, good.time / 100, Measurement)
    assert slow.status == "abandoned" and "slower than the best" in slow.detail
    # A kernel whose checked first call is long and far slower than the best is not timed at all.
    monkeypatch.setattr(tcjit.tuning_worker, "ABANDON_SECONDS", 0.0)
    hopeless = check_and_time(spec, right, good.time / 100, Measurement)
    assert hopeless.status == "abandoned" and hopeless.detail.startswith("first call")
    # A wrong answer is reported as wrong, however slow.
    assert check_and_time(spec, wrong, good.time / 100, Measurement).status == "wrong"


def test_the_timeout_is_honoured_with_the_final_rounds_included(db):
    """The search stops early enough for the final rounds to fit: the whole call returns within a
    couple of seconds of ``timeout`` (it took 80.6 s for 60 s, 47.6 s for 40 s before)."""
    from tcjit.tuning import tune_kernel

    kernel = tcjit.define(MATMUL)
    a, b = _inputs(48, 40, 44)
    start = time.monotonic()
    report = tune_kernel(kernel, a, b, generations=1000, population=8, seed=0, workers=2, timeout=12)
    elapsed = time.monotonic() - start
    assert report.result.stopped == "timeout"
    assert report.verdict is not None and report.verdict.rounds >= 2, report.verdict
    assert elapsed < 12 + 2.5, elapsed


def test_bad_calls_and_settings_are_tcerrors_before_anything_runs(db):
    kernel = tcjit.define(MATMUL)
    a, b = _inputs()
    with pytest.raises(TCCallError, match="Kernel"):
        tcjit.autotune(MATMUL, a, b)
    with pytest.raises(TCCallError, match=r"'generation' is neither a tuner setting .* nor a parameter"):
        tcjit.autotune(kernel, a, b, generation=3)
    with pytest.raises(TCOptionsError, match="generations"):
        tcjit.autotune(kernel, a, b, generations=0)
    with pytest.raises(TCOptionsError, match="workers"):
        tcjit.autotune(kernel, a, b, workers=0)
    for setting, value in (("prune_factor", 1.0), ("keep_top", -1), ("explore_share", 2.0)):
        with pytest.raises(TCOptionsError, match=setting):
            tcjit.autotune(kernel, a, b, **{setting: value})
    with pytest.raises(TCOptionsError, match=r"timeout=0.01 s ran out before the default options"):
        tcjit.autotune(kernel, a, b, timeout=0.01, workers=1)
    with pytest.raises(TCCallError, match="meta"):
        tcjit.autotune(kernel, a.to("meta"), b.to("meta"))
    with pytest.raises(TCCallError):
        tcjit.autotune(kernel, a, a)  # K mismatch: the call's own diagnostic
    assert not db.exists() or tcjit.tuned.options_database().records() == []


def test_the_tune_command_prints_progress_and_a_summary(db, tmp_path, capsys):
    path = tmp_path / "mm.tc"
    path.write_text(MATMUL)
    code = main(
        [
            "tune",
            str(path),
            "--sizes",
            "M=16,K=8,N=12",
            "--generations",
            "2",
            "--population",
            "4",
            "--seed",
            "0",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert "default options:" in captured.err
    assert "generation 1/2" in captured.err and "generation 2/2" in captured.err
    assert "over the defaults" in captured.err
    assert "final rounds (" in captured.err and "calls use the" in captured.err
    options = captured.out.split("options: ", 1)[1].splitlines()[0]
    if options != "the defaults (from the kernel's structure)":
        json.loads(options)
    assert f"stored in {db}: record " in captured.out


def test_ctrl_c_keeps_and_stores_the_best_so_far(db, tmp_path):
    """SIGINT during a long search ends it: the best so far is printed, stored, and no worker lives on."""
    script = tmp_path / "tune.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, torch, tcjit
            k = tcjit.define({MATMUL!r})
            a, b = torch.randn(16, 8), torch.randn(8, 12)
            best = tcjit.autotune(k, a, b, generations=1000, population=4, seed=0, workers=1,
                                  progress=lambda g: print("generation", g.index, flush=True))
            print("best", best.to_json(), flush=True)
            """
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("generation"), line + proc.stderr.read()
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "best {" in out
    from tcjit.tuned import options_database

    assert len(options_database().records()) == 1
    children = subprocess.run(["pgrep", "-f", "tcjit.genetic.worker"], capture_output=True, text=True)
    mine = [p for p in children.stdout.split() if _parent_of(int(p)) == proc.pid]
    assert mine == []


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def test_the_options_database_can_be_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("TCJIT_OPTIONS_DB", "")
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    from tcjit.tuning import tune_kernel

    kernel = tcjit.define(MATMUL)
    a, b = _inputs()
    report = tune_kernel(kernel, a, b, **SMALL)
    assert report.database is None
    assert kernel.options_for(a, b) == report.default_options  # nothing stored, nothing used
    # Candidates are compiled into the run's private store, never into the user's.
    assert not (tmp_path / "kernels").exists() or not any((tmp_path / "kernels").rglob("*.so"))


@pytest.mark.skipif(not tcjit.nvrtc.available(), reason="no CUDA compiler (NVRTC or nvcc)")
def test_the_gpu_predictor_is_the_static_profile_and_says_nothing_where_it_cannot():
    import random

    from tcjit.binding import bind
    from tcjit.pipeline import call_strides
    from tcjit.static_profile import predicted_seconds
    from tcjit.tuning import gpu_predictor, tuning_space

    cdef = tcjit.define(MATMUL).definition
    binding = bind(cdef, [t.to("meta") for t in _inputs(64, 32, 48)])
    strides = call_strides(cdef, binding, None)
    defaults, space = tuning_space(cdef, binding.sizes, "cuda")
    too_big = MappingOptions().max_shared_memory(10**9)  # more than a GPU has: not CUDA options
    candidates = [defaults, space.decode(space.random_genome(random.Random(0))), too_big]
    predicted = gpu_predictor(cdef, binding.sizes, strides, "h200")(candidates)
    assert predicted[:2] == [
        predicted_seconds(cdef, binding.sizes, strides, c, "h200") for c in candidates[:2]
    ]
    assert all(p > 0 for p in predicted[:2]) and predicted[2] is None


def test_a_tuning_run_on_a_gpu_predicts_for_its_kind_of_gpu_and_others_predict_nothing(monkeypatch):
    import tcjit.tuning
    from tcjit.binding import bind

    cdef = tcjit.define(MATMUL).definition
    binding = bind(cdef, _inputs())
    asked = []
    monkeypatch.setattr(tcjit.tuning, "gpu_predictor", lambda *args: asked.append(args) or len(asked))
    for name, kind in (("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("Tesla T4", "h100")):
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, name=name: name)
        assert tcjit.tuning._predictor(cdef, binding, "cuda") == len(asked)
        assert asked[-1][0] is cdef and asked[-1][1] == binding.sizes and asked[-1][3] == kind
    assert asked[-1][2] == {"A": (8, 1), "B": (12, 1), "C": (12, 1)}  # the call's strides
    for target in ("cpu", "cuda-emulated"):
        assert tcjit.tuning._predictor(cdef, binding, target) is None
