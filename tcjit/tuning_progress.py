"""Progress of a tuning run for the person watching it (:func:`tcjit.autotune` with ``progress``).

``progress=None`` (the default) shows it wherever a person is watching: a terminal (standard error
is a TTY) or a notebook (an IPython kernel); elsewhere (a batch job, output to a file) it stays
quiet. ``True`` forces it (a bar on a terminal or in a notebook, else one line per generation),
``False`` turns it off, and a function is called with each
:class:`~tcjit.genetic.Generation` instead. The bar is tqdm's (``tqdm.auto``: a widget in a
notebook with ipywidgets, text elsewhere); one bar per generation, counting the candidates that
generation measures (those measured by an earlier run or in an earlier generation are not
measured again, so are not counted), and it always reaches its end.

Two kinds of figures appear, and are labelled: during the search, each candidate's single
measurement against the defaults' time at the start; at the end, the figures of the interleaved
rounds (:mod:`tcjit.tuning_confirm`), which are the ones the database stores.
"""

from __future__ import annotations

import sys
import time

from .polyhedral.errors import TCOptionsError

__all__ = ["format_duration", "progress_printer", "watched"]


def format_duration(seconds: float | None) -> str:
    """A time per call for people: ``"12.3 µs"``, ``"4.56 ms"``, ``"1.25 s"``; ``"-"`` for None."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None)
    ip = get() if get is not None else None
    return ip is not None and hasattr(ip, "kernel")


def watched(stream=None) -> bool:
    """Whether a person is watching: ``stream`` (standard error) is a terminal, or this process is
    a notebook's kernel."""
    stream = sys.stderr if stream is None else stream
    return bool(getattr(stream, "isatty", lambda: False)()) or _in_notebook()


class _Progress:
    """Bars and lines on a stream (``stream`` None: only ``callback`` per generation)."""

    def __init__(self, settings, stream, callback=None, *, bars: bool = False):
        self.settings = settings
        self.stream = stream
        self.callback = callback
        self.bars = bars
        self.bar = None
        self.baseline: float | None = None
        self.failed = 0
        self.skipped = 0
        self.started = time.monotonic()

    def __bool__(self) -> bool:
        return True

    def _line(self, text: str) -> None:
        if self.stream is None:
            return
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.refresh()  # its last state (n/n) is drawn before it gives way to the line
            self.bar.close()
            self.bar = None

    def start(self, baseline) -> None:
        self.baseline = baseline.time if baseline.valid else None
        self._line(f"default options: {format_duration(self.baseline)} ({baseline.status})")

    def expect(self, count: int) -> None:
        """A generation is about to measure ``count`` candidates."""
        self._close_bar()
        self.failed = self.skipped = 0
        if self.bars and self.stream is not None and count:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=count, desc="candidates", unit="", file=self.stream, leave=False)

    def candidate(self, options, m) -> None:
        self.failed += not m.valid and m.status not in ("abandoned", "skipped")
        self.skipped += m.status == "skipped"
        if self.bar is not None:
            self.bar.set_postfix_str(
                f"{self.failed} failed" + (f", {self.skipped} skipped" if self.skipped else "")
            )
            self.bar.update(1)

    def generation(self, g) -> None:
        self._close_bar()
        if self.callback is not None:
            self.callback(g)
        of = f"/{self.settings.generations}" if self.settings.generations < 1000 else ""
        speedup = "no valid candidate yet"
        if g.best_time and self.baseline:
            speedup = (
                f"{self.baseline / g.best_time:.2f}x over the defaults' {format_duration(self.baseline)}"
            )
        skipped = f", {self.skipped} skipped (time ran out)" if self.skipped else ""
        pruned = f", {g.pruned} pruned (predicted far slower)" if g.pruned else ""
        self._line(
            f"generation {g.index + 1}{of}: best so far {format_duration(g.best_time)}, "
            f"{speedup}; {g.failed} of {g.evaluated} failed{skipped}{pruned}, {g.elapsed:.1f} s"
        )

    def note(self, text: str) -> None:
        self._close_bar()
        self._line(text)

    def finish(self, report) -> None:
        self._close_bar()
        for line in summary(report):
            self._line(line)


def summary(report) -> list[str]:
    """The lines that end a tuning run: the final rounds' figures and what was stored."""
    v = report.verdict
    total = f"{len(report.result.measured) + 1} candidates measured, {report.failed} failed"
    if report.pruned:
        total += f", {report.pruned} pruned (the GPU model predicted them far slower)"
    lines = []
    if v is None:
        lines.append(
            f"not confirmed ({report.result.stopped}): the final rounds did not run; {total}. "
            "Nothing is stored (measured candidates are kept for the next run)."
        )
    else:
        lines.append(
            f"final rounds ({v.rounds} interleaved): best {format_duration(v.time)}, the defaults "
            f"{format_duration(v.default_time)}: {v.speedup:.2f}x ({v.low:.2f}x to {v.high:.2f}x per "
            f"round); {total}; stopped: {report.result.stopped}"
        )
        start = report.start_default_time
        if start and max(start, v.default_time) / min(start, v.default_time) > 1.5:
            lines.append(
                f"note: the defaults took {format_duration(start)} at the start and "
                f"{format_duration(v.default_time)} in the final rounds: the machine's speed changed "
                "during the run; the speed-up above compares times taken side by side"
            )
        used = "the tuned options" if v.faster else "the default options"
        lines.append(f"{v.why}: calls use {used}")
    stored = report.stored
    if stored is not None and v is not None and (stored.uses_defaults == v.faster or stored.time != v.time):
        kept = "use the defaults" if stored.uses_defaults else f"options {stored.gain:.2f}x faster in its run"
        lines.append(f"the database keeps an earlier run's record ({kept}), whose speed-up is greater")
    return lines


def progress_printer(progress, settings) -> _Progress | None:
    """The progress display ``progress`` asks for (see the module docstring), or ``None``."""
    if progress is None:
        progress = watched()
    if progress is False:
        return None
    if progress is True:
        return _Progress(settings, sys.stderr, bars=watched())
    if callable(progress):
        return _Progress(settings, None, progress)
    raise TCOptionsError(
        f"autotune: progress must be True, False, None (when watched) or a function, got {progress!r}"
    )
