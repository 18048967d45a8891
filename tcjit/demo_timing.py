"""How ``tcjit demo`` times a call, and when it says its figure cannot be trusted.

The demo times each kernel (and torch's version of it) for a fraction of a second: one warm-up
call, then at least :data:`MIN_REPEATS` timed calls; the figure is their median. Such a short
measurement is easily spoilt, and a spoilt one is flagged rather than printed as a result:

``busy``
    other processes used at least :data:`BUSY_FRACTION` of the machine's CPU time while it ran
    (``/proc/stat``'s busy time less this process's own), so the kernel shared the cores;
``noisy``
    the median is more than :data:`NOISY_RATIO` times the fastest call: the typical call was
    interrupted (a preempted OpenMP thread shows as a multiple of the scheduler's time slice);
``cold``
    the first half of the timed calls took more than :data:`COLD_RATIO` times as long as the
    second (medians): one warm-up call did not bring caches, pages and threads to their steady
    state, and the figure includes the warming. (One slow first call among many is not enough.)
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "BUSY_FRACTION",
    "COLD_RATIO",
    "FLAGS",
    "MIN_REPEATS",
    "NOISY_RATIO",
    "Timed",
    "demo_flags",
    "time_calls",
]

#: Timed calls at least (more while the budget lasts).
MIN_REPEATS = 5
#: Share of the machine's CPU time (all cores) other processes may use before a timing is "busy".
#: /proc/stat counts in ticks of 10 ms: over a 0.1 s timing on 2 cores one tick is 5%.
BUSY_FRACTION = 0.25
#: Median over the fastest call beyond which a timing is "noisy".
NOISY_RATIO = 1.5
#: Median of the first half of the calls over the second half's beyond which a timing is "cold".
COLD_RATIO = 2.0
#: Each flag and what it means, for the legend.
FLAGS = {
    "busy": f"other processes used >= {BUSY_FRACTION:.0%} of the CPUs while it was timed",
    "noisy": f"median > {NOISY_RATIO}x the fastest call: calls were interrupted",
    "cold": f"first half of the calls > {COLD_RATIO}x slower than the second: still warming up",
}


def _machine_busy_seconds() -> float | None:
    """CPU seconds all processes have spent since boot (``/proc/stat``); ``None`` off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    steal_guest = sum(fields[7:])  # steal, guest, guest_nice: not this machine's work, or counted twice
    return (sum(fields) - idle - steal_guest) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


@dataclass(frozen=True)
class Timed:
    """One timing: the calls' wall times and what else the machine did meanwhile.

    :ivar samples: seconds per timed call, in call order (the warm-up excluded).
    :ivar others_fraction: share of all CPUs' time that other processes used while the calls ran
        (0.3: 30%); ``None`` where it cannot be read.
    """

    samples: tuple[float, ...]
    others_fraction: float | None

    @property
    def median(self) -> float:
        """The figure printed: the median call, in seconds."""
        return statistics.median(self.samples)

    def flags(self) -> list[str]:
        """The :data:`FLAGS` this timing earns, e.g. ``["busy", "noisy"]``; empty when it is clean.

        >>> Timed((0.004, 0.005, 0.001, 0.001, 0.001), 0.0).flags()
        ['cold']
        """
        out = []
        if self.others_fraction is not None and self.others_fraction >= BUSY_FRACTION:
            out.append("busy")
        if self.median > NOISY_RATIO * min(self.samples):
            out.append("noisy")
        half = len(self.samples) // 2
        if half and statistics.median(self.samples[:half]) > COLD_RATIO * statistics.median(
            self.samples[half:]
        ):
            out.append("cold")
        return out


def time_calls(fn: Callable[[], object], budget: float = 0.05, max_reps: int = 50) -> Timed:
    """Time ``fn()``: one warm-up call, then :data:`MIN_REPEATS` calls or more, within about
    ``budget`` seconds (at most ``max_reps``), watching the machine's CPU time meanwhile."""
    fn()
    samples: list[float] = []
    machine, own, wall = _machine_busy_seconds(), _own_seconds(), time.perf_counter()
    while len(samples) < MIN_REPEATS or (sum(samples) < budget and len(samples) < max_reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    wall = time.perf_counter() - wall
    after = _machine_busy_seconds()
    others = None
    if machine is not None and after is not None and wall > 0:
        others = max(0.0, (after - machine) - (_own_seconds() - own)) / (wall * (os.cpu_count() or 1))
    return Timed(tuple(samples), others)


def demo_flags(**sides: Timed) -> str:
    """One row's flags, e.g. ``"busy, cold (tcjit)"``: a flag without a side applies to every side.

    >>> demo_flags(tcjit=Timed((1.0,) * 5, 0.5), torch=Timed((1.0,) * 5, 0.5))
    'busy'
    """
    out = []
    for flag in FLAGS:
        which = [side for side, t in sides.items() if flag in t.flags()]
        if which:
            out.append(flag if len(which) == len(sides) else f"{flag} ({', '.join(which)})")
    return ", ".join(out)
