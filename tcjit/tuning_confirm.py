"""The end of a tuning run: the defaults and the best candidates timed in interleaved rounds.

One measurement protocol decides what a tuning run reports and stores. During the search each
candidate is timed once (:data:`~tcjit.tuning_worker.REPEATS` samples, in the timing worker); among
hundreds of such single measurements on a shared machine the fastest is partly the luckiest, and
the defaults' time from the start of a run says little about the machine at its end. So at the end:

1. The default options and the :data:`FINALISTS` best distinct candidates of the search are loaded
   in one process (the timing worker, or one Ray task) and checked against the oracle again.
2. They are timed in up to :data:`ROUNDS` rounds, each visiting every finalist once in a rotated
   order; a finalist's time in a round is the median of :data:`SAMPLES_PER_ROUND` samples. Rounds
   stop early when the time budget (what is left of ``timeout``) would not hold another one.
3. Per finalist, its speed-up in each round is the defaults' time of that round over its own
   (neighbours in time, so that a machine that slows down slows both). The winner has the greatest
   median speed-up; its time and the defaults' are their medians over the rounds, and ``low`` and
   ``high`` the least and greatest speed-up of a round.
4. The winner counts as faster only when it is faster in every round and by at least
   :data:`MIN_GAIN` overall, over at least two rounds. Otherwise the record says "use the
   defaults" (:data:`~tcjit.cache.USE_DEFAULTS`). Where the defaults' own time varied by more than
   :data:`NOISY` between rounds, the verdict says that the machine was too noisy to tell.

That pair (winner, defaults), its spread and the verdict are what the summary prints, what
:class:`~tcjit.tuning.TuningReport` holds and what the options database stores.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "FINALISTS",
    "MIN_GAIN",
    "NOISY",
    "ROUNDS",
    "SAMPLES_PER_ROUND",
    "Verdict",
    "confirmation_reserve",
    "finalists",
    "interleaved_rounds",
    "verdict",
]

#: Candidates of the search confirmed against the defaults (the best distinct valid ones).
FINALISTS = 3
#: Interleaved rounds at most; a finalist's time per round is the median of this many samples.
ROUNDS = 5
SAMPLES_PER_ROUND = 3
#: Faster than the defaults means faster in every round, and by this fraction overall.
MIN_GAIN = 0.02
#: The defaults' time varying by more than this between rounds (max / min - 1): too noisy to tell.
NOISY = 0.10
#: The least time one sample takes: short kernels are called several times per sample.
MIN_SAMPLE_SECONDS = 2e-3
#: Seconds to load and check the finalists before the rounds, counted in the reserve.
LOAD_SECONDS = 2.0
#: The largest share of a run's timeout kept for the confirmation.
MAX_RESERVE_SHARE = 0.3


def finalists(defaults, measured: Sequence, best_options=None) -> list:
    """The defaults, then the best distinct valid candidates of a search (best first), at most
    :data:`FINALISTS` of them; ``measured`` holds ``(options, Measurement)`` pairs."""
    ranked = sorted(((m.time, i, o) for i, (o, m) in enumerate(measured) if m.valid), key=lambda t: t[:2])
    out = [defaults]
    if best_options is not None and best_options != defaults:
        out.append(best_options)
    for _, _, options in ranked:
        if len(out) > FINALISTS:
            break
        if options not in out:
            out.append(options)
    return out


def confirmation_reserve(default_time: float | None, timeout: float | None, setup: float = 0.0) -> float:
    """Seconds of ``timeout`` kept for the confirmation: loading the finalists (at least
    :data:`LOAD_SECONDS`, or ``setup``, what starting the workers and measuring the defaults took:
    the timing worker may have to start again, if the search's end stopped it), then
    :data:`ROUNDS` rounds of ``1 + FINALISTS`` kernels as slow as the defaults; capped at
    :data:`MAX_RESERVE_SHARE` of the timeout (fewer rounds run where that is not enough); 0
    without a timeout."""
    if timeout is None:
        return 0.0
    per_kernel = SAMPLES_PER_ROUND * max(default_time or 0.0, MIN_SAMPLE_SECONDS) + 2 * (default_time or 0.0)
    wanted = max(LOAD_SECONDS, setup) + ROUNDS * (1 + FINALISTS) * per_kernel
    return min(wanted, MAX_RESERVE_SHARE * timeout)


def interleaved_rounds(
    runners: Sequence[Callable[[], object]], sync: Callable[[], None], budget: float | None
) -> list[list[float]]:
    """Time ``runners`` (each one call of a kernel) in interleaved rounds; per runner, its time per
    call in each round (seconds). At least one round; more while ``budget`` seconds (``None``: no
    limit) hold another one, up to :data:`ROUNDS`."""
    start = time.perf_counter()
    calls = []
    for run in runners:
        run()  # warm-up
        sync()
        t = time.perf_counter()
        run()
        sync()
        calls.append(max(1, math.ceil(MIN_SAMPLE_SECONDS / max(time.perf_counter() - t, 1e-7))))
    times: list[list[float]] = [[] for _ in runners]
    for r in range(ROUNDS):
        round_start = time.perf_counter()
        for k in range(len(runners)):
            i = (k + r) % len(runners)
            samples = []
            for _ in range(SAMPLES_PER_ROUND):
                t = time.perf_counter()
                for _ in range(calls[i]):
                    runners[i]()
                sync()
                samples.append((time.perf_counter() - t) / calls[i])
            times[i].append(statistics.median(samples))
        now = time.perf_counter()
        if budget is not None and now + (now - round_start) > start + budget:
            break
    return times


@dataclass(frozen=True)
class Verdict:
    """What the confirmation found (see the module docstring).

    :ivar options: the winner's options (the defaults when no finalist beat them).
    :ivar time: the winner's time per call, median over the rounds (seconds).
    :ivar default_time: the defaults' time per call in the same rounds.
    :ivar low: the winner's least speed-up in a round; ``high``: its greatest.
    :ivar rounds: the rounds measured.
    :ivar faster: whether the winner is faster than the defaults beyond the noise (stored as
        options; otherwise the record says "use the defaults").
    :ivar noise: how much the defaults' time varied between rounds (max / min - 1).
    :ivar why: one line, for people: why the winner is or is not used.
    """

    options: object
    time: float
    default_time: float
    low: float
    high: float
    rounds: int
    faster: bool
    noise: float
    why: str

    @property
    def speedup(self) -> float:
        """``default_time / time``."""
        return self.default_time / self.time

    def to_json(self) -> dict:
        """The figures as JSON-able values (for results files): the options as MappingOptions JSON."""
        return {
            "options": self.options.to_json(),
            "best_s": self.time,
            "defaults_s": self.default_time,
            "speedup": self.speedup,
            "low": self.low,
            "high": self.high,
            "rounds": self.rounds,
            "noise": self.noise,
            "faster": self.faster,
            "why": self.why,
        }


def verdict(candidates: Sequence, times: Sequence[Sequence[float] | None]) -> Verdict | None:
    """Decide from :func:`interleaved_rounds`' times (``None`` for a finalist that failed its
    check); ``candidates[0]`` is the defaults. ``None`` when the defaults have no times."""
    base = times[0]
    if not base:
        return None
    rounds = len(base)
    noise = max(base) / min(base) - 1
    best = None
    for options, t in zip(candidates, times):
        if not t or len(t) != rounds:
            continue
        ratios = [b / x for b, x in zip(base, t)]
        key = statistics.median(ratios)
        if best is None or key > best[0]:
            best = (key, options, t, ratios)
    assert best is not None  # the defaults themselves qualify
    _, options, t, ratios = best
    time_, default_time = statistics.median(t), statistics.median(base)
    low, high = min(ratios), max(ratios)
    is_defaults = options is candidates[0]
    faster = not is_defaults and rounds >= 2 and low > 1.0 and default_time / time_ >= 1 + MIN_GAIN
    if faster:
        why = f"faster than the defaults in each of {rounds} interleaved rounds"
    elif is_defaults:
        why = "no candidate was faster than the defaults"
    elif rounds < 2:
        why = "one round only (the time budget ran out): cannot tell the speed-up from the noise"
    else:
        why = f"not faster than the defaults beyond the noise ({low:.2f}x to {high:.2f}x per round)"
    if not faster and noise > NOISY:
        varied = f"{noise:.0%}" if noise < 1 else f"{noise + 1:.1f}-fold"
        why += f"; the machine was too noisy to tell: the defaults' time varied {varied} between rounds"
    return Verdict(options, time_, default_time, low, high, rounds, faster, noise, why)
