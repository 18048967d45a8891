"""Which candidates of a generation a performance model lets the tuner skip (see :func:`triage`).

A predictor (:data:`Predictor`, handed in to :func:`tcjit.genetic.tune`) says how many seconds each
candidate would take. The tuner evaluates the candidates in the order of their predictions, best
first, and skips ("prunes") those predicted far slower than the best candidate measured so far.

**The bar is in the model's own units.** A candidate is pruned when its prediction exceeds
``prune_factor`` times the *prediction* of the best candidate measured so far, not its measured
time. A static model is often off by a factor common to every candidate of a kernel (a latency, a
bandwidth, an overhead it does not know); comparing a prediction with a measurement would carry
that factor into the decision (a model twice too pessimistic would prune candidates as fast as
the best), while in the ratio of two predictions of the same kernel it cancels. What is left is the
model's error in *ranking* candidates, which the two safeguards below bound.

**A wrong model cannot hide good options.** The ``keep_top`` candidates the model ranks best in
each generation are never pruned, and each candidate the rule would prune is evaluated anyway with
probability ``explore_share`` (drawn from the search's private generator): a candidate the model
wrongly ranks last still gets measured now and then, and once measured, its true time makes it a
parent like any other.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from ..mapping.options import MappingOptions

__all__ = ["Predictor", "Pruner", "Triage", "prediction", "triage"]

log = logging.getLogger(__name__)

#: Predicted seconds per call of each candidate, in order; ``None`` where the model cannot say.
Predictor = Callable[[Sequence[MappingOptions]], Sequence["float | None"]]


def prediction(value: object) -> float | None:
    """A predictor's answer for one candidate as seconds, or ``None`` when it is not a finite
    number > 0 (the model cannot say: such a candidate is never pruned).

    Example: ``prediction(2e-4) == 2e-4``; ``prediction(float("nan")) is None``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


@dataclass(frozen=True)
class Triage:
    """The decision for one generation's candidates (indices into the list handed to :func:`triage`).

    :ivar order: the candidates to evaluate, best predicted first; those without a prediction
        last, in their original order.
    :ivar pruned: the candidates skipped, in ascending order of index.
    """

    order: tuple[int, ...]
    pruned: tuple[int, ...]


def triage(
    predicted: Sequence[float | None],
    bar: float | None,
    *,
    keep_top: int,
    explore_share: float,
    rng: random.Random,
) -> Triage:
    """Rank candidates by ``predicted`` seconds and prune those predicted slower than ``bar``.

    :arg predicted: one prediction per candidate (``None``: unknown, never pruned).
    :arg bar: predicted seconds above which a candidate is pruned (``prune_factor`` times the
        prediction of the best measured candidate); ``None``: prune nothing, only rank.
    :arg keep_top: the best-ranked candidates never pruned, e.g. 4.
    :arg explore_share: the probability in [0, 1] that a candidate over the bar, outside the top,
        is evaluated anyway, e.g. 0.1.
    :arg rng: the search's generator; drawn from once per candidate over the bar outside the top,
        and never when ``bar`` is ``None``.

    Example: ``triage([3.0, 1.0, None, 9.0], 4.0, keep_top=1, explore_share=0.0, rng=r)`` evaluates
    ``(1, 0, 2)`` and prunes ``(3,)``.
    """
    known = sorted((p, i) for i, p in enumerate(predicted) if p is not None)
    unknown = [i for i, p in enumerate(predicted) if p is None]
    kept, pruned = [], []
    for rank, (p, i) in enumerate(known):
        over = bar is not None and rank >= keep_top and p > bar
        if over and rng.random() >= explore_share:
            pruned.append(i)
        else:
            kept.append(i)
    return Triage(tuple(kept + unknown), tuple(sorted(pruned)))


class Pruner:
    """One search's use of a predictor: each genome is predicted once, and the first error of the
    predictor ends the pruning for the run (a model error never costs the search).

    :arg predict: the :data:`Predictor`.
    :arg decode: a genome's options (``SearchSpace.decode``).
    :arg prune_factor, keep_top, explore_share: as in :class:`~tcjit.genetic.TunerSettings`.
    :arg rng: the search's private generator (for the explore share).
    """

    def __init__(
        self,
        predict: Predictor,
        decode: Callable[[Hashable], MappingOptions],
        *,
        prune_factor: float,
        keep_top: int,
        explore_share: float,
        rng: random.Random,
    ) -> None:
        self.predict: Predictor | None = predict
        self.decode = decode
        self.prune_factor, self.keep_top, self.explore_share = prune_factor, keep_top, explore_share
        self.rng = rng
        self.predicted: dict[Hashable, float | None] = {}

    def predictions(self, genomes: Sequence[Hashable]) -> list[float | None] | None:
        """The predicted seconds of ``genomes``; ``None`` once the predictor has failed."""
        if self.predict is None:
            return None
        ask = [g for g in dict.fromkeys(genomes) if g not in self.predicted]
        try:
            answers = list(self.predict([self.decode(g) for g in ask])) if ask else []
            if len(answers) != len(ask):
                raise ValueError(f"it answered {len(answers)} predictions for {len(ask)} candidates")
        except Exception as e:  # a model error costs the pruning, never the search
            log.warning("tune: the predictor failed, no candidate is pruned in this run: %s", e)
            self.predict = None
            return None
        self.predicted.update(zip(ask, map(prediction, answers)))
        return [self.predicted[g] for g in genomes]

    def split(
        self, todo: Sequence[Hashable], best: Hashable | None
    ) -> tuple[list[Hashable], list[tuple[Hashable, str]]]:
        """``todo`` (genomes not measured yet) split into those to evaluate, best predicted first,
        and those pruned, each with a line saying why; ``best`` is the best measured genome
        (``None``: nothing measured yet, nothing pruned)."""
        if not todo:
            return [], []
        predicted = self.predictions([*todo, *([best] if best is not None else [])])
        if predicted is None:
            return list(todo), []
        best_predicted = predicted[-1] if best is not None else None
        bar = None if best_predicted is None else self.prune_factor * best_predicted
        chosen = triage(
            predicted[: len(todo)],
            bar,
            keep_top=self.keep_top,
            explore_share=self.explore_share,
            rng=self.rng,
        )
        pruned = [
            (
                todo[i],
                f"predicted {predicted[i]:.3g} s, over {self.prune_factor:g} x the {best_predicted:.3g} s "
                "predicted for the best measured",
            )
            for i in chosen.pruned
        ]
        return [todo[i] for i in chosen.order], pruned
