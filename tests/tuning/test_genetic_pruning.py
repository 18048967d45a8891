"""The tuner's pruning (tcjit.genetic.tune with ``predict``): candidates a model predicts far slower
than the best measured are not evaluated.

Oracles: the synthetic problem of test_genetic.py (a known time per candidate, smallest at a planted
optimum), predictors written here as functions of that time (right up to a constant factor, or wrong
about the optimum on purpose), and the log of what the predictor and the evaluator were handed,
in order, which says what each generation pruned.
"""

from __future__ import annotations

import itertools
import logging
import random

import genetic_helpers as h
import pytest
from test_genetic import SPACE, Synthetic

from tcjit.genetic import Measurement, TunerSettings, tune
from tcjit.genetic import tuner as tuner_module
from tcjit.genetic.pruning import prediction, triage
from tcjit.mapping import FIELD_TARGETS, Parameter, SearchSpace
from tcjit.polyhedral.errors import TCOptionsError

#: 256 points; the synthetic time is smallest (1.2 ms) at tile (16, 4), unroll 1, and only there.
SMALL = SearchSpace(
    "cpu",
    (
        Parameter("tile[0]", (0, 1, 2, 4, 8, 16, 32, 64), FIELD_TARGETS["tile"]),
        Parameter("tile[1]", (0, 1, 2, 4, 8, 16, 32, 64), FIELD_TARGETS["tile"]),
        Parameter("unroll", (1, 2, 4, 8), FIELD_TARGETS["unroll"]),
    ),
)
FASTEST = min(
    (SMALL.decode(g) for g in itertools.product(*(range(len(p.choices)) for p in SMALL.parameters))),
    key=h.synthetic_time,
)


class Log:
    """One search's events in order: what the predictor was asked, what the evaluator was handed
    (and the best time it was told), and each generation's end."""

    def __init__(self, seconds=lambda c: 1000 * h.synthetic_time(c)):
        self.events: list[tuple] = []
        self.seconds = seconds
        self.evaluator = Synthetic()

    def predict(self, candidates):
        self.events.append(("predict", list(candidates)))
        return [self.seconds(c) for c in candidates]

    def evaluate(self, candidates, best_time, deadline):
        self.events.append(("evaluate", list(candidates), best_time))
        return self.evaluator(candidates, best_time, deadline)

    def generation(self, g):
        self.events.append(("generation", g))

    def run(self, settings, space=SPACE, **kwargs):
        return tune(
            space, self.evaluate, settings, predict=self.predict, on_generation=self.generation, **kwargs
        )

    def generations(self, best=None):
        """Per generation: (its Generation, candidates predicted, candidates evaluated in order,
        the best time before it); ``best``: the best known before the search."""
        out, asked, handed = [], [], []
        for event in self.events:
            if event[0] == "predict":
                asked += event[1]
            elif event[0] == "evaluate":
                handed += event[1]
                assert event[2] == best  # the evaluator is told the best before the generation
            else:
                out.append((event[1], asked, handed, best))
                asked, handed, best = [], [], event[1].best_time
        return out


# -- the rule -----------------------------------------------------------------------------------------


def test_triage_ranks_prunes_only_above_the_bar_and_keeps_the_top():
    rng = random.Random(0)
    chosen = triage([3.0, 1.0, None, 9.0, 8.0, 8.0000001], 8.0, keep_top=1, explore_share=0.0, rng=rng)
    assert chosen.order == (1, 0, 4, 2) and chosen.pruned == (3, 5)  # at the bar: kept; unknown: last
    chosen = triage([9.0, 5.0, 7.0], 1.0, keep_top=2, explore_share=0.0, rng=rng)
    assert chosen.order == (1, 2) and chosen.pruned == (0,)  # the model's best two, though over the bar
    assert triage([9.0, 5.0], 1.0, keep_top=0, explore_share=1.0, rng=rng).pruned == ()
    state = rng.getstate()
    assert triage([2.0, 1.0], None, keep_top=0, explore_share=0.5, rng=rng).order == (1, 0)
    assert rng.getstate() == state  # no bar: nothing drawn


def test_explore_share_is_the_share_of_candidates_over_the_bar_evaluated_anyway():
    chosen = triage([2.0] * 10_000, 1.0, keep_top=0, explore_share=0.1, rng=random.Random(1))
    assert 900 < len(chosen.order) < 1100


def test_predictions_that_are_not_seconds_say_nothing():
    assert prediction(2e-4) == 2e-4 and prediction(3) == 3.0
    for bad in (None, float("nan"), float("inf"), 0.0, -1.0, True, "1e-3"):
        assert prediction(bad) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prune_factor", 1.0),
        ("prune_factor", 0.5),
        ("prune_factor", float("inf")),
        ("prune_factor", True),
        ("prune_factor", "4"),
        ("keep_top", -1),
        ("keep_top", 2.0),
        ("explore_share", 1.5),
        ("explore_share", -0.1),
    ],
)
def test_settings_refuse_pruning_values_out_of_range(field, value):
    with pytest.raises(TCOptionsError, match=field) as info:
        TunerSettings(**{field: value})
    assert "must be" in str(info.value)


def test_pruned_is_a_status_and_not_a_failure():
    m = Measurement(None, "pruned", "predicted 8 ms, over 4 x the 1 ms predicted for the best measured")
    assert not m.valid and "pruned" not in tuner_module.FAILURES


# -- the search ---------------------------------------------------------------------------------------


def test_prunes_exactly_what_is_predicted_over_the_factor_in_the_models_own_units():
    # The model is 1000x too slow, everywhere: compared with measured times it would prune every
    # candidate; compared with its own prediction of the best, the factor cancels.
    log = Log()
    settings = TunerSettings(
        seed=0, generations=4, population=16, prune_factor=2.0, keep_top=0, explore_share=0
    )
    result = log.run(settings)
    total = 0
    for g, asked, handed, best in log.generations():
        pruned = [c for c in asked if c not in handed]  # each genome is predicted once
        assert g.pruned == len(pruned)
        if best is None:
            assert g.pruned == 0 and g.index == 0  # nothing measured yet: nothing pruned
            continue
        assert all(h.synthetic_time(c) > 2.0 * best for c in pruned)
        assert all(h.synthetic_time(c) <= 2.0 * best for c in handed)
        assert [h.synthetic_time(c) for c in handed] == sorted(h.synthetic_time(c) for c in handed)
        total += g.pruned
    assert total == result.pruned > 10
    assert sum(g.evaluated for g in result.history) == len(result.measured) == len(log.evaluator.candidates)


def test_candidates_are_evaluated_best_predicted_first():
    log = Log()
    log.run(TunerSettings(seed=1, generations=2, population=12, prune_factor=None))
    assert not any(e[0] == "predict" for e in log.events)  # no pruning: no model asked
    log = Log()
    log.run(TunerSettings(seed=1, generations=2, population=12, prune_factor=1000.0))
    batch = log.evaluator.batches[0]
    assert [h.synthetic_time(c) for c in batch] == sorted(h.synthetic_time(c) for c in batch)
    assert len(batch) == 12  # nothing measured before the first generation: nothing pruned


def test_the_models_top_candidates_are_evaluated_even_when_predicted_slow():
    # The known best is predicted 1 ms, every other candidate 1 s or more: all over the bar.
    best = SPACE.decode(SPACE.random_genome(random.Random(9)))
    known = [(best, Measurement(1e-3, "ok"))]

    def seconds(c):
        return 1e-3 if c == best else 1.0 + h.synthetic_time(c)

    log = Log(seconds)
    settings = TunerSettings(seed=2, generations=3, population=8, keep_top=3, explore_share=0.0)
    result = log.run(settings, known=known)
    for g, asked, handed, _ in log.generations(best=1e-3):
        new = sorted((c for c in asked if c != best), key=h.synthetic_time)
        assert handed == new[:3] and g.evaluated == 3 and g.pruned == len(new) - 3
    assert result.pruned > 0

    # With no top kept, nothing is evaluated at all; pruned candidates are never proposed again.
    log = Log(seconds)
    settings = TunerSettings(seed=2, generations=3, population=8, keep_top=0, explore_share=0.0)
    result = log.run(settings, known=known)
    assert log.evaluator.batches == [] and result.measured == ()
    asked = [c for e in log.events if e[0] == "predict" for c in e[1] if c != best]
    assert result.pruned == len(asked) == len(set(asked)) >= 3 * 8 - 2 * 2


def test_pruned_candidates_are_not_proposed_again():
    # 24 points, 40 proposals: repeats are certain unless pruned genomes count as seen.
    tiny = SearchSpace(
        "cpu",
        (
            Parameter("tile[0]", (0, 1, 2, 4), FIELD_TARGETS["tile"]),
            Parameter("unroll", (1, 2, 4, 8, 16, 32), FIELD_TARGETS["unroll"]),
        ),
    )
    best = tiny.decode((0, 0))
    log = Log(lambda c: 1e-3 if c == best else 1.0)
    settings = TunerSettings(seed=3, generations=5, population=8, keep_top=0, explore_share=0.0)
    result = log.run(settings, space=tiny, known=[(best, Measurement(1e-3, "ok"))])
    asked = [c for e in log.events if e[0] == "predict" for c in e[1] if c != best]
    assert result.pruned == len(asked) == len(set(asked)) <= 23 and result.measured == ()
    assert result.pruned >= 20


def test_a_wrong_model_does_not_hide_the_fastest_options_from_the_explore_share():
    # The model is right about every candidate but the fastest, which it ranks slowest.
    def seconds(c):
        return 1.0 if c == FASTEST else h.synthetic_time(c)

    knobs = {"seed": 0, "generations": 8, "population": 8, "prune_factor": 1.5, "keep_top": 0}
    plain = tune(SMALL, Synthetic(), TunerSettings(**{**knobs, "prune_factor": None}))
    assert plain.best_options == FASTEST  # the search without a model finds it

    blind = Log(seconds)
    result = blind.run(TunerSettings(**knobs, explore_share=0.0), space=SMALL)
    asked = [c for e in blind.events if e[0] == "predict" for c in e[1]]
    assert FASTEST in asked and FASTEST not in blind.evaluator.candidates  # proposed, and pruned
    assert result.best_time > h.synthetic_time(FASTEST)

    exploring = Log(seconds)
    result = exploring.run(TunerSettings(**knobs, explore_share=0.5), space=SMALL)
    assert result.best_options == FASTEST and result.pruned > 0


def test_no_prune_factor_is_the_search_without_a_model():
    plain = Synthetic()
    tune(SPACE, plain, TunerSettings(seed=3, generations=3, population=8))
    log = Log()
    result = log.run(TunerSettings(seed=3, generations=3, population=8, prune_factor=None))
    assert log.evaluator.candidates == plain.candidates and result.pruned == 0
    assert log.events and not any(e[0] == "predict" for e in log.events)


def test_a_failing_predictor_costs_one_warning_and_the_pruning_never_the_search(caplog):
    plain = Synthetic()
    settings = TunerSettings(seed=4, generations=3, population=8, prune_factor=1.1, keep_top=0)
    tune(SPACE, plain, settings)
    calls = []

    def raising(candidates):
        calls.append(len(candidates))
        raise RuntimeError("planted: the model cannot lower this kernel")

    with caplog.at_level(logging.WARNING, logger="tcjit.genetic"):
        failing = Synthetic()
        result = tune(SPACE, failing, settings, predict=raising)
    assert result.stopped == "generations" and result.pruned == 0 and len(calls) == 1
    assert failing.candidates == plain.candidates  # it failed before ranking anything
    warnings = [r for r in caplog.records if "predictor failed" in r.getMessage()]
    assert len(warnings) == 1 and "planted" in warnings[0].getMessage()

    # One that fails later (here: answers too few predictions) stops pruning from then on.
    answers = []

    def short_later(candidates):
        answers.append(len(candidates))
        if len(answers) == 2:
            return [1.0]
        return [1000 * h.synthetic_time(c) for c in candidates]

    result = tune(SPACE, Synthetic(), settings, predict=short_later)
    assert len(answers) == 2 and result.pruned == 0 and len(result.history) == 3
    assert sum(g.evaluated for g in result.history) == 3 * 8 - 2 * 2


def test_pruned_candidates_are_counted_and_never_handed_to_on_measured():
    seen = []
    log = Log()
    result = log.run(
        TunerSettings(seed=5, generations=4, population=12, prune_factor=1.5, keep_top=1),
        on_measured=lambda o, m: seen.append((o, m)),
    )
    asked = {c for e in log.events if e[0] == "predict" for c in e[1]}
    pruned = asked - set(log.evaluator.candidates)
    assert result.pruned == len(pruned) == sum(g.pruned for g in result.history) > 0
    assert tuple(seen) == result.measured and not pruned & {o for o, _ in seen}
    assert all(m.status != "pruned" for _, m in result.measured)


def test_pruned_genomes_are_no_parents():
    # The last generation was all pruned; its genomes hold the last choice of every gene, the one
    # measured genome the first. Without the rule, parents would be drawn uniformly from the pruned.
    settings = TunerSettings(seed=0, population=8, elites=1, crossover_rate=1.0, mutation_rate=0.0)
    search = tuner_module._Search(SPACE, Synthetic(), settings, None)
    measured = (0,) * len(search.sizes)
    search.remember(measured, SPACE.decode(measured), Measurement(1e-3, "ok"))
    rng = random.Random(0)
    pool = []
    for _ in range(8):
        genome = tuple(n - 1 if rng.random() < 0.9 else 0 for n in search.sizes)
        search.memo[genome] = Measurement(None, "pruned")
        pool.append(genome)
    children = search.breed(pool)
    last = [sum(g == n - 1 > 0 for g, n in zip(c, search.sizes)) for c in children]
    assert children[0] == measured and max(last) <= tuner_module.REPAIR_MUTATIONS


def test_known_pruned_or_skipped_measurements_are_not_measurements():
    options = SPACE.decode(SPACE.random_genome(random.Random(3)))
    ev = Synthetic()
    tune(
        SPACE,
        ev,
        TunerSettings(seed=0, generations=1, population=4),
        seeds=[options],
        known=[(options, Measurement(None, "pruned"))],
    )
    assert ev.batches[0][0] == options  # a later run may try what an earlier model pruned
