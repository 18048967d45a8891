"""Tuning for a range of sizes (``autotune(..., size_ranges=...)``, ``tcjit tune --sizes B=1..64``)
and the rule by which kernels with symbolic sizes use what it stores (tcjit/tuning_range.py,
tcjit.tuned.range_key and lookup_range_options, Kernel._family_choice).

The rule is tested with the pipeline faked (test_dynamic_shapes' ``made``): which options and
representative sizes each symbolic kernel was built with. The tuner is tested for real, tiny.
"""

from __future__ import annotations

import json

import pytest
import torch
from test_dynamic_shapes import FCRELU, fc, made  # noqa: F401 (made: a fixture)

import tcjit
import tcjit.pipeline
from tcjit import TCError, TCOptionsError
from tcjit.binding import bind
from tcjit.cache import USE_DEFAULTS, parse_range_layout
from tcjit.cli import main
from tcjit.dynamic import family_of
from tcjit.mapping.options import MappingOptions
from tcjit.tuned import options_database, range_key, tuning_key

MATMUL = """
def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, r_k) * B(r_k, n)
}
"""
SMALL = {"generations": 2, "population": 4, "seed": 0, "workers": 2}


def _store_range(kernel, lo: int, hi: int, options, n: int = 4):
    """Store ``options`` (None: "use the defaults") as tuned for fcrelu over B=lo..hi."""
    inputs = fc(hi, n=n)
    family = family_of(kernel.definition, {"B": hi, "M": 16, "N": n}, inputs, None, {"B"})
    key = range_key(kernel, family, {"B": (lo, hi)}, "cpu", inputs)
    text = USE_DEFAULTS if options is None else options.to_json()
    options_database().put(key, text, 1e-4, baseline=2e-4, rounds=3, low=1.5, high=2.5)
    return key


def _defaults(sizes):
    return tcjit.pipeline.default_options(tcjit.define(FCRELU).definition, sizes, "cpu")


# ------------------------------------------------------------------------- the rule for calls
def test_range_tuned_options_serve_symbolic_calls_inside_the_range_only(made):  # noqa: F811
    k = tcjit.define(FCRELU, dynamic=True)
    wide = MappingOptions().tile(8, 8).validate("cpu")
    narrow = MappingOptions().tile(4, 4).validate("cpu")
    exact = MappingOptions().tile(2, 2).validate("cpu")
    key = _store_range(k, 1, 64, wide)
    _store_range(k, 1, 16, narrow)
    options_database().put(tuning_key(k, fc(5), "cpu"), exact.to_json(), 1e-4, baseline=3e-4)
    assert json.loads(key.layout) == {
        "fixed": {"M": 16, "N": 4},
        "inputs": [
            ["float32", ["B", 16], "contiguous"],
            ["float32", [4, 16], [16, 1]],
            ["float32", [4], [1]],
        ],
        "ranges": {"B": [1, 64]},
    }

    k(*fc(5))  # never seen by a tuner: inside both ranges, the narrowest wins over the exact record
    assert made[-1].symbolic == {"B", "M", "N"} and made[-1].options == narrow
    assert made[-1].representative == {"B": 16, "M": 16, "N": 4}, "mapped at the range's upper bound"
    assert k.options_for(*fc(11)) == narrow
    k40 = tcjit.define(FCRELU, dynamic={"B"})
    k40(*fc(40))
    assert made[-1].options == wide and made[-1].representative == {"B": 64, "M": 16, "N": 4}
    k100 = tcjit.define(FCRELU, dynamic=True)
    k100(*fc(100))  # outside every range: the defaults at the call's sizes
    assert made[-1].options == _defaults({"B": 100, "M": 16, "N": 4})
    assert made[-1].options not in (wide, narrow)
    other = tcjit.define(FCRELU, dynamic={"B"})
    assert other.options_for(*fc(5, n=3)) == _defaults({"B": 5, "M": 16, "N": 3}), "N=3: not the record's"

    # Automatic dynamic shapes: the range must hold every call of the family seen.
    auto = tcjit.define(FCRELU)
    auto(*fc(5))
    assert made[-1].symbolic == frozenset() and made[-1].options == exact, "concrete: exact records only"
    auto(*fc(40))
    assert made[-1].symbolic == {"B"} and made[-1].options == wide, "5 and 40: only 1..64 holds both"
    concrete = tcjit.define(FCRELU, dynamic=False)
    concrete(*fc(7))
    assert made[-1].options == _defaults({"B": 7, "M": 16, "N": 4}), "concrete calls ignore ranges"


def test_a_range_record_that_says_use_the_defaults_means_the_defaults_at_its_upper_bound(made):  # noqa: F811
    k = tcjit.define(FCRELU, dynamic=True)
    options_database().put(
        tuning_key(k, fc(3), "cpu"), MappingOptions().tile(2, 2).to_json(), 1e-4, baseline=3e-4
    )
    _store_range(k, 2, 8, None)
    k(*fc(3))
    assert made[-1].options == _defaults({"B": 8, "M": 16, "N": 4})
    assert made[-1].representative == {"B": 8, "M": 16, "N": 4}
    k1 = tcjit.define(FCRELU, dynamic=True)
    k1(*fc(1))  # below the range: not covered; the exact record is for 3, not seen
    assert made[-1].options == _defaults({"B": 1, "M": 16, "N": 4})


# ------------------------------------------------------------------------------ the tuner
def test_a_range_tune_stores_one_record_that_symbolic_calls_in_the_range_use(db):
    from tcjit.tuning import tune_kernel

    kernel = tcjit.define(MATMUL)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 8, generator=g), torch.randn(8, 12, generator=g)
    report = tune_kernel(kernel, a, b, size_ranges={"M": (1, 16)}, **SMALL)
    assert report.failed == 0 and report.stored is not None
    assert parse_range_layout(report.stored.key.layout)["ranges"] == {"M": [1, 16]}
    assert [r.key for r in options_database().records()] == [report.stored.key], "one record, no exact one"
    assert report.stored.evaluations == len(report.result.measured) + 1

    fresh = tcjit.define(MATMUL, dynamic=True)
    a7 = torch.randn(7, 8, generator=g)
    assert fresh.options_for(a7, b) == report.best_options, "M=7 was never measured"
    torch.testing.assert_close(fresh(a7, b), a7 @ b)
    compiled = tcjit.compile_counts()["compiled"]
    a13 = torch.randn(13, 8, generator=g)
    torch.testing.assert_close(fresh(a13, b), a13 @ b)
    assert tcjit.compile_counts()["compiled"] == compiled
    outside = tcjit.define(MATMUL, dynamic=True)
    want = tcjit.pipeline.default_options(kernel.definition, {"M": 40, "K": 8, "N": 12}, "cpu")
    assert outside.options_for(torch.randn(40, 8), b) == want


def test_a_candidate_is_compiled_once_and_checked_and_timed_at_every_point(db):
    from tcjit import tuning_worker as W
    from tcjit.genetic import Measurement
    from tcjit.tuning_range import range_plan

    kernel = tcjit.define(MATMUL)
    a, b = torch.randn(8, 20).t(), torch.randn(8, 12)  # above the upper bound, not contiguous
    plan = range_plan(kernel, bind(kernel.definition, (a, b)), (a, b), {"M": (1, 16)}, "cpu")
    assert [p["M"] for p in plan.points] == [16, 6, 3, 1], "the bounds and two points between"
    assert [tuple(x.shape) for x in plan.inputs[1]] == [(6, 8), (8, 12)], "inputs cut down"
    torch.testing.assert_close(plan.inputs[0][0], a[:16])
    assert plan.inputs[0][0].is_contiguous(), "as symbolic kernels take them"
    binding = bind(kernel.definition, plan.inputs[0])
    W._STATE.clear()
    try:
        state = W._load_context(W.context_blob(kernel, binding, plan.inputs[0], "cpu", plan))
        assert [p.at for p in state.others] == ["M=6, K=8, N=12", "M=3, K=8, N=12", "M=1, K=8, N=12"]
        options = MappingOptions().tile(4, 4, 4).validate("cpu")
        before = tcjit.compile_counts()["compiled"]
        W.compile_candidate(options)
        m = W.measure_candidate((options, 1e-12))  # never abandoned: the best is a mean of points
        assert m.status == "ok" and m.time > 0
        assert tcjit.compile_counts()["compiled"] == before + 1, "one symbolic kernel for every point"
        times = W.confirm_candidates(([options, options], None))
        assert all(len(t) >= 1 for t in times)
        # A wrong answer at one point is a wrong candidate, and says where.
        wrong = state.others[1]
        state.others = (
            state.others[0],
            W.WorkerState(**{**vars(wrong), "expected": (wrong.expected[0] + 1,)}),
        )
        m = W.measure_candidate((options, None))
        assert m.status == "wrong" and m.detail.endswith("at M=3, K=8, N=12"), m
        assert W.confirm_candidates(([options], None)) == [None]
        assert isinstance(m, Measurement)
    finally:
        W._STATE.clear()


def test_bad_ranges_are_tcerrors_before_anything_runs(db):
    kernel = tcjit.define(MATMUL)
    a, b = torch.randn(16, 8), torch.randn(8, 12)
    bad = [
        ({"M": (5, 2)}, r"M=5\.\.2 is empty"),
        ({"M": (0, 4)}, r"M=0\.\.4 starts below 1"),
        ({"M": (1, 2**31)}, r"M=1\.\.2147483648 ends above 2147483647"),
        ({"Q": (1, 4)}, r"'Q', which is not a size of matmul"),
        ({"M": (1, 32)}, r"M=16, below the range's upper bound"),
        ({"M": 16}, r"two integers \(lo, hi\)"),
        ({}, r"must map size names"),
    ]
    for ranges, match in bad:
        with pytest.raises(TCOptionsError, match=match):
            tcjit.autotune(kernel, a, b, size_ranges=ranges)
    # Sizes that cannot be symbolic (every target has symbolic kernels since the CUDA targets got
    # them: a range tune on cuda-emulated runs).
    with pytest.raises(TCOptionsError, match="dynamic=False"):
        tcjit.autotune(tcjit.define(MATMUL, dynamic=False), a, b, size_ranges={"M": (1, 16)})
    long_a, long_b = torch.randn(2, 20000), torch.randn(20000, 3)
    with pytest.raises(TCOptionsError, match="shorter and longer than 16384 terms"):
        tcjit.autotune(kernel, long_a, long_b, size_ranges={"K": (1, 20000)})
    assert issubclass(TCOptionsError, TCError)
    assert not db.exists() or options_database().records() == []


def test_the_tune_command_takes_ranges_and_cache_list_shows_them(db, tmp_path, capsys):
    path = tmp_path / "mm.tc"
    path.write_text(MATMUL)
    assert main(["tune", str(path), "--sizes", "M=5..2,K=8,N=12"]) == 2
    assert "TCOptionsError: autotune: the range M=5..2 is empty" in capsys.readouterr().err
    assert main(["tune", str(path), "--sizes", "M=1..x,K=8,N=12"]) == 2
    assert "a range NAME=LO..HI (both included)" in capsys.readouterr().err
    assert main(["tune", str(path), "--sizes", "M=0..8,K=8,N=12"]) == 2
    assert "starts below 1" in capsys.readouterr().err
    args = ["--generations", "1", "--population", "3", "--workers", "1", "--seed", "0"]
    assert main(["tune", str(path), "--sizes", "M=1..8,K=8,N=12", *args]) == 0
    out = capsys.readouterr().out
    assert "tuning matmul at M=1..8 (symbolic), K=8, N=12" in out and "stored in" in out
    assert main(["cache", "list", "--options"]) == 0
    assert "Mx8,8x12 (M=1..8)" in capsys.readouterr().out


def test_range_records_are_exported_and_imported(db):
    kernel = tcjit.define(FCRELU)
    key = _store_range(kernel, 1, 64, MappingOptions().tile(8, 8))
    exported = options_database().export()
    options_database().clear()
    assert options_database().import_records(exported) == 1
    assert options_database().get(key) is not None
    broken = json.loads(key.layout)
    broken["ranges"] = {"B": [8, 2]}
    item = {**exported[0], "key": {**exported[0]["key"], "layout": json.dumps(broken)}}
    del item["digest"]
    with pytest.raises(TCError, match="layout must be JSON"):
        options_database().import_records([item])
    assert parse_range_layout(json.dumps(broken)) is None
    assert parse_range_layout('[["float32", [4], [1]]]') is None
