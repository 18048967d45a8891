"""The genetic search over a :class:`~tcjit.mapping.SearchSpace`, after Tensor Comprehensions' tuner.

An individual is a genome of the space (one choice index per parameter). The search runs
``settings.generations`` generations of ``settings.population`` individuals:

1. **Starting population.** The seeds (options tuned for other sizes, presets, the defaults),
   mapped to their nearest point of the space, then uniformly random genomes. Measurements handed
   in as ``known`` (an earlier run of the same problem, read from the options database) are never
   measured again, and they compete with the starting population for parenthood.
2. **Evaluation.** The candidates not measured yet go to the evaluator in one batch (it compiles
   them in parallel and times them one at a time, see :mod:`tcjit.genetic.evaluation`). A genome is
   measured at most once per run.
3. **Fitness** is ``1 / time`` for a valid candidate and 0 for the rest (failures, wrong answers,
   candidates abandoned because they were much slower than the best). Parents are drawn in
   proportion to fitness after TC's sigma scaling (``max(f - (mean - 2 sigma), 0)``), which keeps
   the draw proportional but less flat than raw ``1 / time``. Until some candidate is valid,
   parents are drawn uniformly.
4. **Next generation.** The ``elites`` best valid genomes so far are copied unchanged. Every other
   child is bred, with probability ``crossover_rate``, gene by gene from three parents (uniform
   crossover; TC took each gene from one of three parents), else copied from one parent. Parents
   are drawn by stochastic universal sampling, proportionally to fitness. Each gene is then
   resampled with probability ``mutation_rate``. A child that repeats a genome already measured
   (or already in the generation) is mutated again, a few times, then replaced by a random genome.

Randomness: every draw comes from one private :class:`random.Random` seeded with
``settings.seed``. The operators (selection, crossover, mutation) are written here on that
generator rather than taken from ``deap.tools``, whose operators draw from the global
:mod:`random` module; so the search never disturbs the caller's ``random`` state, is reproducible
even when the evaluator uses ``random``, and two searches may run in two threads. DEAP provides the
individual and fitness types (:mod:`deap.creator`, created once), the :class:`deap.base.Toolbox`
that binds the operators, the :class:`deap.tools.HallOfFame` that holds the elites and the
:class:`deap.tools.Logbook` logged after each generation.

Pruning (with a ``predict`` function handed in, e.g. a static GPU model): candidates are evaluated
best predicted first, so that good ones raise the evaluator's bar early; those predicted over
``prune_factor`` times the *prediction* of the best candidate measured so far are ``"pruned"``: not
evaluated, not parents, not proposed again, not handed to ``on_measured`` (a later run with a better
model may try them). Comparing two predictions, not a prediction with a time, cancels the model's
error common to all candidates; the ``keep_top`` best-predicted candidates and a random
``explore_share`` of the rest are never pruned, so that a model that ranks wrongly cannot hide
good options (:mod:`tcjit.genetic.pruning` says why at length). Nothing is pruned before something
is measured; a predictor that raises costs a warning and the pruning for the rest of the run.

Stopping: after ``generations`` generations; when ``settings.timeout`` has passed (checked before
each evaluator call and handed to it as a deadline); or on Ctrl-C. A KeyboardInterrupt raised in
the evaluator (e.g. by :meth:`WorkerPool.map`, after it has killed its busy workers), in a callback
or between generations ends the search with ``stopped="interrupted"``; it is **not** re-raised:
:func:`tune` returns the best found so far, so that an interrupted tuning run still stores and
reports it. Measurements of the batch that was interrupted are lost.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..mapping.options import MappingOptions
from ..mapping.search_space import SearchSpace
from ..polyhedral.errors import TCError, TCOptionsError
from .pruning import Predictor, Pruner

__all__ = [
    "FAILURES",
    "STATUSES",
    "Evaluator",
    "Generation",
    "Measurement",
    "Predictor",
    "TunerSettings",
    "TuningResult",
    "tune",
]

log = logging.getLogger(__name__)

#: Every status a :class:`Measurement` may have.
STATUSES = ("ok", "compile-error", "crashed", "timeout", "wrong", "abandoned", "skipped", "error", "pruned")
#: The statuses counted as failures in :attr:`Generation.failed`.
FAILURES = frozenset({"compile-error", "crashed", "timeout", "wrong", "error"})
#: How often a child that repeats a measured genome is mutated again before it is resampled.
REPAIR_MUTATIONS = 5
RESAMPLES = 20
PARENTS = 3  # per bred child, as in TC
SIGMA_SCALE = 2.0  # TC's sigma scaling of the fitness before selection (tc/autotuner/genetic_search.cc)


@dataclass(frozen=True)
class Measurement:
    """One candidate's result.

    :ivar time: seconds per call (median of repeats); ``None`` when invalid. Candidates
        ``"abandoned"`` early keep their partial time. Example: ``0.00131``.
    :ivar status: ``"ok"``; a failure: ``"compile-error"``, ``"crashed"``, ``"timeout"``,
        ``"wrong"`` (the output differs from the reference), ``"error"``; ``"abandoned"``: valid but
        much slower than the best so far, stopped early (never the best, not a failure);
        ``"skipped"``: not evaluated (deadline or interrupt; neither remembered nor counted);
        ``"pruned"``: not evaluated because the model predicted it far slower than the best
        (not a failure, not measured: never stored, never a parent, not proposed again in the run).
    :ivar detail: one line: the error, the exit signal, the largest difference...
    """

    time: float | None
    status: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Measurement.status must be one of {STATUSES}, got {self.status!r}")
        if self.status == "ok" and not (
            isinstance(self.time, (int, float)) and math.isfinite(self.time) and self.time > 0
        ):
            raise ValueError(
                f"Measurement: an 'ok' measurement needs a time > 0 in seconds, got {self.time!r}"
            )

    @property
    def valid(self) -> bool:
        """Whether the candidate ran correctly and was timed to the end."""
        return self.status == "ok" and self.time is not None


class Evaluator(Protocol):
    """Measures a batch of candidates: one :class:`Measurement` per candidate, in the same order.

    ``best_time`` is the best valid time so far (``None``: none yet), so that an evaluator can
    abandon candidates much slower than it. ``deadline`` is a :func:`time.monotonic` value (or
    ``None``): past it, the evaluator answers ``"skipped"`` for the candidates it has not started.
    Candidate failures are Measurements; an exception raised by the evaluator ends the search
    (a KeyboardInterrupt ends it with ``stopped="interrupted"``).
    """

    def __call__(
        self, candidates: Sequence[MappingOptions], best_time: float | None, deadline: float | None
    ) -> list[Measurement]: ...


def _check(name: str, value: Any, ok: bool, allowed: str) -> None:
    if not ok:
        raise TCOptionsError(f"tuner setting {name}: must be {allowed}, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_rate(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0


@dataclass(frozen=True)
class TunerSettings:
    """The knobs of the genetic search (defaults sized for a 2-core machine).

    :ivar generations: generations to run, the starting population included (>= 1). Example: 5.
    :ivar population: candidates per generation (>= 2). Example: 16.
    :ivar crossover_rate: probability in [0, 1] that a child is bred gene by gene from three
        parents rather than copied from one. Example: 0.8.
    :ivar mutation_rate: per-gene probability in [0, 1] of resampling the gene. Example: 0.1.
    :ivar elites: best valid individuals copied unchanged into the next generation (0 <= elites <
        population). Example: 2.
    :ivar seed: fixes the candidates proposed, given the same measurements; ``None``: random.
    :ivar timeout: seconds for the whole search (> 0), or ``None`` for no limit. Example: 600.0.
    :ivar prune_factor: with a predictor, candidates predicted slower than this many times the
        prediction of the best measured candidate are not evaluated (> 1); ``None``: never prune
        (nor call the predictor). Example: 4.0.
    :ivar keep_top: the candidates of each generation the predictor ranks best, never pruned
        (>= 0). Example: 4.
    :ivar explore_share: the probability in [0, 1] that a candidate over the bar, outside the top,
        is evaluated anyway (a random share of the rest). Example: 0.1.
    """

    generations: int = 5
    population: int = 16
    crossover_rate: float = 0.8
    mutation_rate: float = 0.1
    elites: int = 2
    seed: int | None = None
    timeout: float | None = None
    prune_factor: float | None = 4.0
    keep_top: int = 4
    explore_share: float = 0.1

    def __post_init__(self) -> None:
        _check(
            "generations",
            self.generations,
            _is_int(self.generations) and self.generations >= 1,
            "an integer >= 1",
        )
        _check(
            "population",
            self.population,
            _is_int(self.population) and self.population >= 2,
            "an integer >= 2",
        )
        _check("crossover_rate", self.crossover_rate, _is_rate(self.crossover_rate), "a number in [0, 1]")
        _check("mutation_rate", self.mutation_rate, _is_rate(self.mutation_rate), "a number in [0, 1]")
        _check(
            "elites",
            self.elites,
            _is_int(self.elites) and 0 <= self.elites < self.population,
            f"an integer in [0, population - 1 = {self.population - 1}]",
        )
        _check("seed", self.seed, self.seed is None or _is_int(self.seed), "an integer or None")
        _check(
            "timeout",
            self.timeout,
            self.timeout is None
            or (
                isinstance(self.timeout, (int, float))
                and not isinstance(self.timeout, bool)
                and math.isfinite(self.timeout)
                and self.timeout > 0
            ),
            "a number of seconds > 0 or None",
        )
        factor = self.prune_factor
        _check(
            "prune_factor",
            factor,
            factor is None or (_is_finite(factor) and factor > 1),
            "a number > 1 or None",
        )
        _check("keep_top", self.keep_top, _is_int(self.keep_top) and self.keep_top >= 0, "an integer >= 0")
        _check("explore_share", self.explore_share, _is_rate(self.explore_share), "a number in [0, 1]")


@dataclass(frozen=True)
class Generation:
    """Progress after one generation (what ``on_generation`` receives).

    :ivar index: 0 for the starting population.
    :ivar best_time: the best valid time so far, over all generations and ``known`` (seconds).
    :ivar best_options: the options of that time.
    :ivar evaluated: candidates measured in this generation (not memoised hits, not skipped).
    :ivar failed: of those, the failures (compile-error, crashed, timeout, wrong, error).
    :ivar elapsed: seconds since the search started.
    :ivar pruned: candidates of this generation not evaluated because the predictor ranked them
        far slower than the best measured (see :class:`TunerSettings`).
    """

    index: int
    best_time: float | None
    best_options: MappingOptions | None
    evaluated: int
    failed: int
    elapsed: float
    pruned: int = 0


@dataclass(frozen=True)
class TuningResult:
    """What :func:`tune` found.

    :ivar best_options: the fastest valid options measured (this run or ``known``), or ``None``.
    :ivar best_time: their time in seconds, or ``None``.
    :ivar history: one :class:`Generation` per generation evaluated.
    :ivar measured: every candidate measured in this run with its result, in order (not ``known``
        ones, not skipped or pruned ones).
    :ivar stopped: ``"generations"`` (all ran), ``"timeout"`` or ``"interrupted"`` (Ctrl-C).
    """

    best_options: MappingOptions | None
    best_time: float | None
    history: tuple[Generation, ...]
    measured: tuple[tuple[MappingOptions, Measurement], ...]
    stopped: str

    @property
    def pruned(self) -> int:
        """Candidates not evaluated because the predictor ranked them far slower, over all generations."""
        return sum(g.pruned for g in self.history)


# -- DEAP types and operators -----------------------------------------------------------------------

_CREATOR_LOCK = threading.Lock()


def _deap() -> tuple[Any, Any, Any]:
    """DEAP's modules, with tcjit's fitness and individual types created once per process."""
    from deap import base, creator, tools  # imported here: worker processes never need DEAP

    with _CREATOR_LOCK:  # creator.create warns and replaces a class created twice
        if not hasattr(creator, "TcjitFitness"):
            creator.create("TcjitFitness", base.Fitness, weights=(1.0,))
        if not hasattr(creator, "TcjitIndividual"):
            creator.create("TcjitIndividual", list, fitness=creator.TcjitFitness)
    return base, creator, tools


def _sigma_scaled(fitness: Sequence[float]) -> list[float]:
    """TC's sigma scaling: ``max(f - (mean - 2 sigma), 0)`` over the valid individuals (invalid ones
    stay 0). Raw ``1 / time`` differs little between candidates a few tens of percent apart, which
    makes roulette selection nearly uniform; subtracting a baseline sharpens it while keeping it
    proportional, and a lone outlier cannot take over the next generation."""
    valid = [f for f in fitness if f > 0]
    if len(valid) < 2:
        return list(fitness)
    mean = sum(valid) / len(valid)
    sigma = math.sqrt(sum((f - mean) ** 2 for f in valid) / len(valid))
    base = mean - SIGMA_SCALE * sigma
    scaled = [max(f - base, 0.0) if f > 0 else 0.0 for f in fitness]
    return scaled if sum(scaled) > 0 else list(fitness)


def _select_sus(rng: random.Random, pool: Sequence[Any], k: int) -> list[Any]:
    """``k`` individuals by stochastic universal sampling on their sigma-scaled fitness (uniformly if
    every fitness is 0), in random order."""
    weights = _sigma_scaled([ind.fitness.values[0] for ind in pool])
    total = sum(weights)
    if total <= 0:
        return [rng.choice(pool) for _ in range(k)]
    step = total / k
    point = rng.uniform(0, step)
    chosen, acc, i = [], weights[0], 0
    for _ in range(k):
        while acc < point and i < len(pool) - 1:
            i += 1
            acc += weights[i]
        chosen.append(pool[i])
        point += step
    rng.shuffle(chosen)
    return chosen


def _crossover(rng: random.Random, parents: Sequence[Sequence[int]]) -> list[int]:
    """Uniform crossover: each gene from one of ``parents``, drawn uniformly."""
    return [parents[rng.randrange(len(parents))][g] for g in range(len(parents[0]))]


def _mutate(
    rng: random.Random, genome: list[int], sizes: Sequence[int], rate: float, force: bool
) -> list[int]:
    """Resample each gene with probability ``rate``; with ``force``, also change one gene for sure."""
    out = [rng.randrange(n) if rng.random() < rate else g for g, n in zip(genome, sizes)]
    if force:
        movable = [i for i, n in enumerate(sizes) if n > 1]
        if movable:
            i = rng.choice(movable)
            out[i] = (out[i] + 1 + rng.randrange(sizes[i] - 1)) % sizes[i]
    return out


# -- the search -------------------------------------------------------------------------------------


class _Search:
    """The state of one :func:`tune` run."""

    def __init__(
        self,
        space: SearchSpace,
        evaluate: Evaluator,
        settings: TunerSettings,
        on_measured: Any,
        predict: Predictor | None = None,
    ):
        base, self.creator, self.tools = _deap()
        self.space, self.evaluate, self.settings, self.on_measured = space, evaluate, settings, on_measured
        self.sizes = [len(p.choices) for p in space.parameters]
        self.rng = random.Random(settings.seed)
        self.pruner = None
        if predict is not None and settings.prune_factor is not None:
            self.pruner = Pruner(
                predict,
                space.decode,
                prune_factor=settings.prune_factor,
                keep_top=settings.keep_top,
                explore_share=settings.explore_share,
                rng=self.rng,
            )
        self.toolbox = base.Toolbox()
        self.toolbox.register("select", _select_sus, self.rng)
        self.toolbox.register("mate", _crossover, self.rng)
        self.toolbox.register("mutate", _mutate, self.rng, sizes=self.sizes, rate=settings.mutation_rate)
        self.hall = self.tools.HallOfFame(max(settings.elites, 1), similar=lambda a, b: a == b)
        self.memo: dict[tuple[int, ...], Measurement] = {}
        self.measured: list[tuple[MappingOptions, Measurement]] = []
        self.best: tuple[float, MappingOptions] | None = None
        self.best_genome: tuple[int, ...] | None = None
        self.skipped = False  # whether the evaluator skipped candidates of the last batch (deadline)
        self.start = time.monotonic()
        self.deadline = None if settings.timeout is None else self.start + settings.timeout

    def individual(self, genome: Sequence[int]) -> Any:
        ind = self.creator.TcjitIndividual(genome)
        m = self.memo.get(tuple(genome))
        ind.fitness.values = (1.0 / m.time,) if m is not None and m.valid else (0.0,)
        return ind

    def remember(self, genome: tuple[int, ...], options: MappingOptions, m: Measurement) -> None:
        self.memo[genome] = m
        if m.valid and (self.best is None or m.time < self.best[0]):
            self.best, self.best_genome = (m.time, options), genome
        if m.valid:
            self.hall.update([self.individual(genome)])

    def add_known(self, known: Sequence[tuple[MappingOptions, Measurement]]) -> list[tuple[int, ...]]:
        genomes = []
        for options, m in known:
            if m.status in ("skipped", "pruned"):
                continue
            try:  # exactly: a measurement of nearby options is not a measurement of these
                genome = self.space.encode(options)
            except TCError:
                log.info("tune: known options are not a point of the search space, ignored: %s", options)
                continue
            old = self.memo.get(genome)
            if old is None or (m.valid and (not old.valid or m.time < old.time)):
                self.remember(genome, self.space.decode(genome), m)
                if old is None:
                    genomes.append(genome)
        return genomes

    def starting_population(self, seeds: Sequence[MappingOptions]) -> list[tuple[int, ...]]:
        population: list[tuple[int, ...]] = []
        for options in seeds:
            try:
                genome = self.space.encode(options, nearest=True)
            except TCError as e:
                log.info("tune: seed skipped, it has no nearest point in the search space: %s", e)
                continue
            if genome not in population and len(population) < self.settings.population:
                population.append(genome)
        while len(population) < self.settings.population:
            population.append(self.fresh(population))
        return population

    def fresh(self, taken: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
        """A random genome neither measured nor in ``taken``, if a few draws find one."""
        for _ in range(RESAMPLES):
            genome = self.space.random_genome(self.rng)
            if genome not in self.memo and genome not in taken:
                return genome
        return genome

    def breed(self, pool: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """The next generation from the individuals of ``pool`` (the last generation, and for the
        first, the ``known`` ones)."""
        settings = self.settings
        children = [tuple(ind) for ind in self.hall[: settings.elites]]
        n = settings.population - len(children)
        # A pruned genome is no parent: it was never measured, and the model ranked it far slower.
        # Something was measured before anything was pruned, so the elites can stand in.
        pool = [g for g in pool if not self.pruned(g)] or [tuple(ind) for ind in self.hall]
        individuals = [self.individual(g) for g in pool]
        parents = self.toolbox.select(individuals, PARENTS * n)
        for i in range(n):
            group = parents[PARENTS * i : PARENTS * (i + 1)]
            if self.rng.random() < settings.crossover_rate:
                child = self.toolbox.mate(group)
            else:
                child = list(group[0])
            child = tuple(self.toolbox.mutate(child, force=False))
            for _ in range(REPAIR_MUTATIONS):  # repair a repeat ...
                if child not in self.memo and child not in children:
                    break
                child = tuple(self.toolbox.mutate(list(child), force=True))
            else:
                if child in self.memo or child in children:  # ... or resample it
                    child = self.fresh(children)
            children.append(child)
        return children

    def pruned(self, genome: tuple[int, ...]) -> bool:
        m = self.memo.get(genome)
        return m is not None and m.status == "pruned"

    def prune(self, todo: list[tuple[int, ...]]) -> tuple[list[tuple[int, ...]], int]:
        """``todo`` less what the predictor prunes, best predicted first; and how many it pruned."""
        if self.pruner is None:
            return todo, 0
        keep, pruned = self.pruner.split(todo, self.best_genome)
        for genome, detail in pruned:
            self.memo[genome] = Measurement(None, "pruned", detail)
        return keep, len(pruned)

    def run_generation(self, index: int, population: Sequence[tuple[int, ...]]) -> Generation | None:
        """Measure what ``population`` has not measured yet, less what the predictor prunes;
        ``None`` if the deadline passed first."""
        todo = list(dict.fromkeys(g for g in population if g not in self.memo))
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return None
        todo, pruned = self.prune(todo)
        candidates = [self.space.decode(g) for g in todo]
        best = None if self.best is None else self.best[0]
        results = list(self.evaluate(candidates, best, self.deadline)) if candidates else []
        if len(results) != len(candidates):
            raise TCError(
                f"tune: the evaluator answered {len(results)} measurements for {len(candidates)} candidates"
            )
        evaluated = failed = 0
        self.skipped = False
        for genome, options, m in zip(todo, candidates, results):
            if not isinstance(m, Measurement):
                raise TCError(f"tune: the evaluator answered {m!r}, not a Measurement")
            if m.status == "skipped":
                self.skipped = True
                continue
            self.remember(genome, options, m)
            self.measured.append((options, m))
            evaluated += 1
            failed += m.status in FAILURES
            if self.on_measured is not None:
                self.on_measured(options, m)
        best_time, best_options = (None, None) if self.best is None else self.best
        elapsed = time.monotonic() - self.start
        return Generation(index, best_time, best_options, evaluated, failed, elapsed, pruned)

    def result(self, history: list[Generation], stopped: str) -> TuningResult:
        best_time, best_options = (None, None) if self.best is None else self.best
        return TuningResult(best_options, best_time, tuple(history), tuple(self.measured), stopped)


def tune(
    space: SearchSpace,
    evaluate: Evaluator,
    settings: TunerSettings = TunerSettings(),
    *,
    seeds: Sequence[MappingOptions] = (),
    known: Sequence[tuple[MappingOptions, Measurement]] = (),
    on_generation: Callable[[Generation], None] | None = None,
    on_measured: Callable[[MappingOptions, Measurement], None] | None = None,
    predict: Predictor | None = None,
) -> TuningResult:
    """Search ``space`` for the fastest options, measuring candidates with ``evaluate``.

    :arg space: the points to search, e.g. ``search_space("cpu", (512, 512))``.
    :arg evaluate: an :class:`Evaluator` (see :mod:`tcjit.genetic.evaluation`).
    :arg settings: the knobs of the search (:class:`TunerSettings`).
    :arg seeds: options that start the first generation, in order, mapped to their nearest point
        of the space (presets, options tuned for other sizes). Repeats and options without a nearest
        point are skipped; at most ``population`` are used.
    :arg known: measurements of earlier runs of this problem (resume): never measured again; the
        best of them is the best so far. Options that are not points of ``space`` are ignored
        (hand them in as ``seeds``).
    :arg on_generation: called after each generation with its :class:`Generation`.
    :arg on_measured: called with every newly measured candidate (to store it); skipped and
        pruned ones excluded.
    :arg predict: ``predict(candidates)`` answers predicted seconds per call for each candidate
        (``None`` where the model cannot say); with it, candidates are evaluated best predicted
        first and those predicted far slower than the best are pruned (see the module docstring
        and :class:`TunerSettings`). ``None``, or ``settings.prune_factor`` ``None``: it is not
        called, and every candidate is evaluated, in proposal order.
    :returns: a :class:`TuningResult`; ``stopped`` says why the search ended. A KeyboardInterrupt
        ends the search and is not re-raised (see the module docstring).
    """
    search = _Search(space, evaluate, settings, on_measured, predict)
    logbook = search.tools.Logbook()
    logbook.header = ["gen", "evaluated", "pruned", "failed", "best", "elapsed"]
    history: list[Generation] = []
    try:
        pool = search.add_known(known)
        population = search.starting_population(seeds)
        for index in range(settings.generations):
            if index > 0:
                population = search.breed(pool)
            generation = search.run_generation(index, population)
            if generation is None:
                return search.result(history, "timeout")
            history.append(generation)
            logbook.record(
                gen=index,
                evaluated=generation.evaluated,
                pruned=generation.pruned,
                failed=generation.failed,
                best=generation.best_time,
                elapsed=round(generation.elapsed, 3),
            )
            log.info("tune: %s", logbook.stream)
            if on_generation is not None:
                on_generation(generation)
            pool = population if index > 0 else list(dict.fromkeys([*population, *pool]))
            past = search.deadline is not None and time.monotonic() >= search.deadline
            if search.skipped or (past and index + 1 < settings.generations):
                return search.result(history, "timeout")
    except KeyboardInterrupt:
        log.warning("tune: interrupted; returning the best options found so far")
        return search.result(history, "interrupted")
    return search.result(history, "generations")
