"""Progress of a tuning run for the person watching it (:func:`tcjit.autotune` with ``progress``)."""

from __future__ import annotations

import sys
import time

from .polyhedral.errors import TCOptionsError

__all__ = ["format_duration", "progress_printer"]


def format_duration(seconds: float | None) -> str:
    """A time per call for people: ``"12.3 µs"``, ``"4.56 ms"``, ``"1.25 s"``; ``"-"`` for None."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


class _Progress:
    """A one-line progress bar on a terminal (a line per generation otherwise)."""

    def __init__(self, settings, stream, callback=None):
        self.settings = settings
        self.stream = stream
        self.callback = callback
        self.baseline: float | None = None
        self.count = 0
        self.failed = 0
        self.live = bool(getattr(stream, "isatty", lambda: False)())
        self.started = time.monotonic()

    def __bool__(self) -> bool:
        return True

    def _write(self, text: str, *, final: bool) -> None:
        if self.stream is None:
            return
        if self.live:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        elif final:
            self.stream.write(text + "\n")
        self.stream.flush()

    def start(self, baseline) -> None:
        self.baseline = baseline.time if baseline.valid else None
        self._write(f"default options: {format_duration(self.baseline)} ({baseline.status})", final=True)

    def candidate(self, options, m) -> None:
        self.count += 1
        self.failed += not m.valid and m.status not in ("abandoned", "skipped")
        width = self.settings.population
        done = self.count % width or width
        bar = "#" * (20 * done // width)
        self._write(f"  [{bar:<20}] {done}/{width} candidates, {self.failed} failed", final=False)

    def generation(self, g) -> None:
        if self.callback is not None:
            self.callback(g)
        self.count = 0
        of = f"/{self.settings.generations}" if self.settings.generations < 1000 else ""
        speedup = (
            f"{self.baseline / g.best_time:.2f}x over the defaults"
            if g.best_time and self.baseline
            else "no valid candidate yet"
        )
        self._write(
            f"generation {g.index + 1}{of}: best {format_duration(g.best_time)}, "
            f"{speedup}, {g.failed} of {g.evaluated} failed, {g.elapsed:.1f} s",
            final=True,
        )

    def note(self, text: str) -> None:
        self._write(text, final=True)

    def finish(self, report) -> None:
        speedup = f"{report.speedup:.2f}x" if report.speedup else "-"
        self._write(
            f"best {format_duration(report.best_time)} ({speedup} over the defaults' "
            f"{format_duration(report.default_time)}); {len(report.result.measured) + 1} candidates "
            f"measured, {report.failed} failed; stopped: {report.result.stopped}",
            final=True,
        )


def progress_printer(progress, settings) -> _Progress | None:
    if progress is None or progress is False:
        return None
    if progress is True:
        return _Progress(settings, sys.stderr)
    if callable(progress):
        return _Progress(settings, None, progress)
    raise TCOptionsError(f"autotune: progress must be True, False or a function, got {progress!r}")
