"""The final rounds of a tuning run (tcjit/tuning_confirm.py) and what the person watching sees
(tcjit/tuning_progress.py): the verdict from interleaved times, the rounds fitting a budget, the
bar reaching its end, the summary agreeing with what is stored. The whole protocol on real
kernels is in test_tuning.py."""

from __future__ import annotations

import io
import json
import time
from types import SimpleNamespace

import pytest

from tcjit.cache import USE_DEFAULTS, TunedOptions, TuningKey
from tcjit.genetic import Measurement, TunerSettings
from tcjit.mapping.options import MappingOptions
from tcjit.tuning_confirm import (
    FINALISTS,
    MIN_GAIN,
    ROUNDS,
    confirmation_reserve,
    finalists,
    interleaved_rounds,
    verdict,
)
from tcjit.tuning_progress import _Progress, progress_printer, summary, watched

D, A, B = MappingOptions(), MappingOptions().unroll(2), MappingOptions().unroll(4)


def test_the_winner_has_the_greatest_median_speed_up_and_its_spread():
    times = [[2.0, 2.2, 2.0, 1.9, 2.1], [1.0, 1.1, 1.0, 1.0, 1.05], [1.5, 1.5, 1.5, 1.5, 1.5]]
    v = verdict([D, A, B], times)
    assert v.options is A and v.faster and v.rounds == 5
    assert v.time == 1.0 and v.default_time == 2.0 and v.speedup == 2.0
    assert v.low == pytest.approx(1.9) and v.high == pytest.approx(2.0)
    assert v.noise == pytest.approx(2.2 / 1.9 - 1)
    doc = json.loads(json.dumps(v.to_json()))
    assert doc["options"] == A.to_json() and doc["speedup"] == 2.0 and doc["faster"] is True


def test_a_candidate_slower_in_one_round_is_not_faster_beyond_the_noise():
    v = verdict([D, A], [[1.0, 1.0, 1.0], [0.9, 1.05, 0.9]])
    assert v.options is A and not v.faster and v.low < 1 < v.high
    assert "not faster than the defaults beyond the noise" in v.why


def test_a_gain_below_the_threshold_is_not_faster():
    v = verdict([D, A], [[1.0] * 3, [1.0 / (1 + MIN_GAIN / 2)] * 3])
    assert v.low > 1 and not v.faster


def test_one_round_cannot_tell_and_a_noisy_machine_is_named():
    assert not verdict([D, A], [[1.0], [0.5]]).faster
    assert "one round only" in verdict([D, A], [[1.0], [0.5]]).why
    noisy = verdict([D, A], [[1.0, 1.5, 1.0], [0.9, 1.6, 0.95]])
    assert not noisy.faster and "too noisy to tell" in noisy.why and "50%" in noisy.why


def test_finalists_that_failed_are_left_out_and_the_defaults_can_win():
    v = verdict([D, A, B], [[1.0, 1.0], None, [1.2, 1.3]])
    assert v.options is D and not v.faster and v.speedup == 1.0
    assert verdict([D, A], [None, [1.0, 1.0]]) is None


def test_finalists_are_the_defaults_then_the_best_distinct_valid_candidates():
    opts = [MappingOptions().unroll(n) for n in (2, 4, 8, 16, 32)]
    measured = [
        (opts[0], Measurement(3.0, "ok")),
        (opts[1], Measurement(None, "crashed")),
        (opts[2], Measurement(1.0, "ok")),
        (opts[2], Measurement(1.0, "ok")),
        (opts[3], Measurement(2.0, "ok")),
        (opts[4], Measurement(5.0, "abandoned")),
    ]
    assert finalists(D, measured, opts[2]) == [D, opts[2], opts[3], opts[0]]
    assert len(finalists(D, measured * 3)) <= FINALISTS + 1


def test_the_rounds_interleave_and_stop_within_the_budget():
    order = []

    def runner(name, seconds):
        def run():
            order.append(name)
            time.sleep(seconds)

        return run

    times = interleaved_rounds([runner("d", 0.001), runner("a", 0.002)], lambda: None, None)
    assert [len(t) for t in times] == [ROUNDS, ROUNDS]
    assert all(a > d for d, a in zip(*times))
    firsts = []  # who starts each round: rotated
    started = time.perf_counter()
    interleaved_rounds([runner("x", 0.01), runner("y", 0.01)], lambda: firsts.append(None), 0.05)
    assert time.perf_counter() - started < 0.05 + 0.5
    short = interleaved_rounds([runner("x", 0.01)], lambda: None, 0.0)
    assert len(short[0]) == 1  # at least one round


def test_the_reserve_grows_with_the_kernel_and_stays_a_share_of_the_timeout():
    assert confirmation_reserve(1e-5, None) == 0
    assert confirmation_reserve(1e-5, 600) < confirmation_reserve(0.05, 600) <= 0.3 * 600
    assert confirmation_reserve(10.0, 60) == pytest.approx(18.0)
    # a timing worker stopped at the search's end starts again: as long as the set-up took
    assert confirmation_reserve(1e-5, 600, setup=9.0) > 9.0 > confirmation_reserve(1e-5, 600)


def _generation(index, best, pruned=0):
    return SimpleNamespace(index=index, best_time=best, failed=0, evaluated=3, elapsed=1.0, pruned=pruned)


def test_each_generation_bar_reaches_its_end():
    stream = io.StringIO()
    p = _Progress(TunerSettings(generations=2, population=4), stream, bars=True)
    p.start(Measurement(2e-3, "ok"))
    p.expect(3)  # a population of 4, one of them measured before: 3 to measure
    for status in ("ok", "crashed", "skipped"):
        p.candidate(D, Measurement(1e-3 if status == "ok" else None, status))
    assert p.bar.n == p.bar.total == 3
    p.generation(_generation(0, 1e-3))
    text = stream.getvalue()
    assert "3/3" in text and "1 failed, 1 skipped" in text
    assert "generation 1/2: best so far 1.00 ms, 2.00x over the defaults' 2.00 ms" in text
    assert "1 skipped (time ran out)" in text and "pruned" not in text
    p.expect(2)
    p.generation(_generation(1, 1e-3, pruned=5))
    assert "generation 2/2: best so far 1.00 ms" in stream.getvalue()
    assert "0 of 3 failed, 5 pruned (predicted far slower), 1.0 s" in stream.getvalue()


def test_progress_is_on_where_someone_watches_and_can_be_forced():
    settings = TunerSettings()
    assert not watched(io.StringIO())
    assert progress_printer(None, settings) is None  # pytest's stderr is not a terminal
    assert progress_printer(True, settings).bars is False  # forced: lines, no bar
    assert progress_printer(False, settings) is None
    seen = []
    printer = progress_printer(seen.append, settings)
    printer.generation(_generation(0, 1.0))
    assert len(seen) == 1


def _record(options, time_, baseline):
    key = TuningKey("src", "f", "[]", "cpu", "arch", "0")
    return TunedOptions(key, options, time_, baseline, 10, "2026-11-27T00:00:00+00:00", 1.1, 1.3, 5)


def test_the_summary_prints_what_is_stored():
    v = verdict([D, A], [[2.0, 2.0, 2.1], [1.6, 1.62, 1.61]])
    report = SimpleNamespace(
        verdict=v,
        result=SimpleNamespace(measured=[], stopped="timeout"),
        failed=0,
        pruned=0,
        start_default_time=6.6,
        stored=_record(A.to_json(), v.time, v.default_time),
    )
    lines = summary(report)
    assert lines[0].startswith("final rounds (3 interleaved): best 1.61 s, the defaults 2.00 s: 1.24x")
    assert "1 candidates measured, 0 failed; stopped" in lines[0]
    assert "the machine's speed changed during the run" in lines[1]
    assert lines[2].endswith("calls use the tuned options")
    report.stored = _record(USE_DEFAULTS, 1.0, 1.0)
    assert "keeps an earlier run's record (use the defaults)" in summary(report)[-1]
    report.pruned = 7
    assert "0 failed, 7 pruned (the GPU model predicted them far slower); stopped" in summary(report)[0]
