"""Top-level functions that tests/tuning/test_genetic.py runs in worker processes (they travel by
pickle).

A synthetic tuning problem: the "kernel" is a point of ``search_space("cpu", (64, 64))`` and its
time is a deterministic function of the options, smallest at a planted optimum. Candidates tiled
(1, 1) are planted to misbehave, by their unroll factor (:data:`PLANTED`); a random candidate is one
of them with probability 1/64.
"""

from __future__ import annotations

import math
import os
import signal
import time

from tcjit.genetic import Measurement
from tcjit.mapping import MappingOptions

#: The planted optimum's tile sizes (each a choice of the space for extent 64).
OPTIMUM = (16, 4)
STARTED = []  # pids recorded by the initializer, in each child


def synthetic_time(options: MappingOptions) -> float:
    """Seconds per call of a fake kernel: 1 ms at the optimum, more the further the tiles are."""
    v = options.values
    tiles = tuple(v.tile) + (0,) * (2 - len(v.tile))
    distance = sum(abs(math.log2(t or 128) - math.log2(o)) for t, o in zip(tiles, OPTIMUM))
    penalty = 0.3 * (not v.parallelize) + 0.2 * (not v.vectorize) + 0.05 * math.log2(v.unroll)
    return 1e-3 * (1.0 + distance + penalty)


def mark_started(path: str) -> None:
    """Initializer: append this child's pid to ``path`` (one line per fresh child)."""
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")


def square(x: int) -> int:
    return x * x


def getenv(name: str) -> str | None:
    return os.environ.get(name)


def fail_to_start() -> None:
    """An initializer that fails."""
    raise ImportError("planted: no such library")


def slow_measure(job: tuple[MappingOptions, float | None]) -> Measurement:
    """measure_fn that takes a while, so that a test can interrupt a search mid-batch."""
    time.sleep(0.15)
    return measure_candidate(job)


def fail_or_crash(x: object) -> object:
    """What a candidate can do to its worker, by item."""
    if x == "raise":
        raise ValueError("planted failure")
    if x == "abort":
        os.abort()
    if x == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if x == "exit":
        os._exit(3)
    if x == "hang":
        time.sleep(1000)
    if x == "spin":
        while True:
            pass
    if x == "stubborn":  # survives SIGTERM: only SIGKILL ends it
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(1000)
    if x == "print":
        print("noise on stdout")  # must not corrupt the protocol
        os.write(1, b"more noise on fd 1\n")
        return "printed"
    if x == "pid":
        return os.getpid()
    return x


#: unroll factor -> what a candidate tiled (1, 1) does.
PLANTED = {
    1: "wrong",  # measure_fn finds a wrong answer
    2: "compile-error",  # compile_fn raises
    4: "compile-abort",  # compile_fn aborts its process
    8: "compile-hang",  # compile_fn sleeps
    16: "measure-segv",  # measure_fn segfaults
    32: "measure-spin",  # measure_fn spins in a busy loop
}


def planted(options: MappingOptions) -> str | None:
    """The misbehaviour planted in ``options``, or None."""
    v = options.values
    return PLANTED[v.unroll] if tuple(v.tile) == (1, 1) else None


def planted_options(behaviour: str) -> MappingOptions:
    """The options that do ``behaviour`` (a value of :data:`PLANTED`)."""
    unroll = next(u for u, b in PLANTED.items() if b == behaviour)
    return MappingOptions().tile(1, 1).unroll(unroll).parallelize(True)


def compile_candidate(options: MappingOptions) -> MappingOptions:
    """compile_fn of the alternating evaluator: the "compiled kernel" is the options themselves."""
    what = planted(options)
    if what == "compile-error":
        raise RuntimeError("planted compile error")
    if what == "compile-abort":
        os.abort()
    if what == "compile-hang":
        time.sleep(1000)
    return options


def measure_candidate(job: tuple[MappingOptions, float | None]) -> Measurement:
    """measure_fn of the alternating evaluator: abandons candidates 10 times slower than the best."""
    options, best = job
    what = planted(options)
    if what == "measure-segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if what == "measure-spin":
        while True:
            pass
    if what == "wrong":
        return Measurement(None, "wrong", "max difference 1.5 at O[3, 7]")
    t = synthetic_time(options)
    if best is not None and t > 10 * best:
        return Measurement(t, "abandoned", f"slower than 10x the best ({best:.3g} s)")
    return Measurement(t, "ok")


def measure_task(job: tuple[MappingOptions, float | None]) -> Measurement:
    """task_fn of the Ray evaluator: compile and measure in one task."""
    return measure_candidate((compile_candidate(job[0]), job[1]))
