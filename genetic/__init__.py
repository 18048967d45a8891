"""tcjit.genetic: the genetic search over MappingOptions, and robust evaluation of its candidates.

- :mod:`~tcjit.genetic.tuner`: :func:`tune`, a DEAP genetic search over a
  :class:`~tcjit.mapping.SearchSpace` (seeds, resume from known measurements, elites, timeout,
  Ctrl-C), with :class:`TunerSettings`, :class:`Measurement`, :class:`Generation`,
  :class:`TuningResult` and the :class:`Evaluator` protocol; with a :data:`Predictor` handed in, it
  skips candidates a model predicts far slower than the best (:mod:`~tcjit.genetic.pruning`).
- :mod:`~tcjit.genetic.workers`: :class:`WorkerPool`, child processes that survive crashing,
  hanging and raising candidates (``python -m tcjit.genetic.worker``, never :mod:`multiprocessing`).
- :mod:`~tcjit.genetic.evaluation`: evaluators built from functions handed in:
  :func:`alternating_evaluator` (compile in parallel, then time one at a time, on one machine) and
  :func:`ray_evaluator` (one Ray task per candidate, across a cluster).

Candidate evaluation and persistence are functions handed in, never imported: this package imports
only tcjit.mapping (and tcjit.polyhedral's errors), deap and, optionally, ray. DEAP is imported when a
search starts, so worker processes start without it.
"""

from .evaluation import alternating_evaluator, ray_evaluator
from .tuner import Evaluator, Generation, Measurement, Predictor, TunerSettings, TuningResult, tune
from .workers import Outcome, WorkerPool

__all__ = [
    "Evaluator",
    "Generation",
    "Measurement",
    "Outcome",
    "Predictor",
    "TunerSettings",
    "TuningResult",
    "WorkerPool",
    "alternating_evaluator",
    "ray_evaluator",
    "tune",
]
