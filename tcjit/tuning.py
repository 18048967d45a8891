"""Autotuning: the genetic search of :mod:`tcjit.genetic` applied to one kernel and one input layout.

:func:`autotune` (``tcjit.autotune``) and ``tcjit tune`` come here. What happens::

    defaults ──▶ search space specialised to the sizes (tile choices from the loop extents)
    oracle   ──▶ tcjit.reference computes the expected outputs once
    database ──▶ seeds (stored best, defaults, options tuned for the nearest sizes) and, when
                 resuming, every candidate an earlier run measured (never measured again)
    search   ──▶ per generation: compile the new candidates in parallel worker processes, then
                 time them one at a time in another (never while compiling), comparing each
                 candidate's outputs with the oracle's before timing it
    store    ──▶ the best options and every measured candidate go to the options database;
                 later calls with this layout on this kind of device use the best options

Candidates run in worker processes (``tcjit.genetic.workers``): one that crashes, hangs or
computes a wrong answer is scored invalid and the search goes on. Worker processes never run the
user's ``__main__`` again, so a training script without a ``__main__`` guard may call
:func:`autotune`. Candidates are compiled into a private kernel store that is removed afterwards:
hundreds of candidates never crowd the user's kernel cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from .polyhedral.errors import TCCallError, TCError, TCOptionsError
from .tuning_scratch import scratch_folder

__all__ = ["TuningReport", "autotune", "tune_kernel"]

#: A candidate whose first timing sample is this many times slower than the best so far is not
#: timed further (scored "abandoned": valid but never the best).
ABANDON_FACTOR = 3.0
#: A first call (the one checked against the oracle) longer than this, and ABANDON_FACTOR times
#: the best so far, abandons the candidate at once: for kernels that run for a good fraction of a
#: second, timing a hopeless candidate seven more times is most of a tuning run's time.
ABANDON_SECONDS = 0.05
#: Timing samples per candidate (the median is its time), and the least time one sample takes:
#: short kernels are called several times per sample.
REPEATS = 7
MIN_SAMPLE_SECONDS = 2e-3


@dataclass(frozen=True)
class TuningReport:
    """What a tuning run found (:func:`tune_kernel`).

    :ivar best_options: the fastest options measured (the default options when nothing beat them).
    :ivar best_time: their time per call, seconds (median of :data:`REPEATS` samples).
    :ivar default_options: the options a call would have used without tuning.
    :ivar default_time: their time per call, seconds; ``None`` if they failed (a bug: reported).
    :ivar result: the search's :class:`~tcjit.genetic.TuningResult` (history per generation,
        every candidate measured, why it stopped).
    :ivar database: the options database's path, ``None`` when disabled (``TCJIT_OPTIONS_DB=""``).
    """

    best_options: object
    best_time: float | None
    default_options: object
    default_time: float | None
    result: object
    database: str | None

    @property
    def speedup(self) -> float | None:
        """``default_time / best_time``: what tuning bought (1.0: nothing)."""
        if self.best_time is None or self.default_time is None or self.best_time <= 0:
            return None
        return self.default_time / self.best_time

    @property
    def failed(self) -> int:
        """Candidates that failed to compile, crashed, hung or computed a wrong answer."""
        return sum(not m.valid and m.status not in ("abandoned", "skipped") for _, m in self.result.measured)


# ------------------------------------------------------------------------------ the worker side
@dataclass(frozen=True)
class _Context:
    """Everything a worker process needs, written once per tuning run (``torch.save``)."""

    source: str
    entry: str
    target: str
    inputs: tuple  # CPU copies of the inputs (numbers stay numbers)
    expected: tuple  # the oracle's outputs (CPU)
    reduction_length: int
    threads: int


@dataclass
class _State:
    kernel: object
    inputs: tuple
    expected: tuple
    target: str
    reduction_length: int


_STATE: dict[str, _State] = {}  # per context digest: a Ray worker may serve several runs


def _load_context(blob: bytes) -> _State:
    digest = hashlib.sha256(blob).hexdigest()
    state = _STATE.get(digest)
    if state is not None:
        return state
    import torch

    import tcjit

    ctx: _Context = torch.load(io.BytesIO(blob), weights_only=False)
    torch.set_num_threads(max(1, ctx.threads))
    device = "cuda" if ctx.target == "cuda" else "cpu"
    inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in ctx.inputs)
    kernel = tcjit.define(ctx.source, name=ctx.entry)
    state = _State(kernel, inputs, ctx.expected, ctx.target, ctx.reduction_length)
    _STATE.clear()
    _STATE[digest] = state
    return state


def _init_worker(context_path: str) -> None:
    """Worker initializer: load the run's context (the kernel, inputs and expected outputs)."""
    with open(context_path, "rb") as f:
        _load_context(f.read())


def _worker_state() -> _State:
    return next(iter(_STATE.values()))  # a worker process serves one run


def _compile_candidate(options):
    """Compile ``options`` into the run's kernel store (a worker's compile phase); returns them."""
    state = _worker_state()
    import tcjit

    tcjit.compile(state.kernel, *state.inputs, options=options, target=state.target)
    return options


def _measure_candidate(arg):
    """Check a compiled candidate against the oracle, then time it (a worker's run phase)."""
    from .genetic import Measurement

    options, best = arg
    state = _worker_state()
    import tcjit

    spec = tcjit.compile(state.kernel, *state.inputs, options=options, target=state.target)
    return _check_and_time(spec, state, best, Measurement)


def _ray_task(blob: bytes, arch: str, arg):
    """One candidate on a Ray worker: compile and measure it there, on that worker's device.

    Answers a :class:`~tcjit.tuning_ray.RayMeasurement` naming the node and its architecture. A
    worker whose architecture is not ``arch`` (the tuning key's) measures nothing ("skipped"): its
    time would be stored for another kind of machine.
    """
    from .genetic import Measurement
    from .tuning_ray import located, worker_identity

    options, best = arg
    state = _load_context(blob)
    here = worker_identity(state.target)
    if here.arch != arch:
        detail = f"measured nothing: this node is {here.arch}, not {arch}"
        return located(Measurement(None, "skipped", detail), here)
    import tcjit

    try:
        spec = tcjit.compile(state.kernel, *state.inputs, options=options, target=state.target)
    except TCError as e:
        return located(Measurement(None, "compile-error", _one_line(e)), here)
    return located(_check_and_time(spec, state, best, Measurement), here)


def _check_and_time(spec, state: _State, best: float | None, Measurement):
    import torch

    from .testing import compare_outputs

    cuda = state.target == "cuda"

    def run():
        return spec.run(state.inputs, None)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    start = time.perf_counter()
    got = run()
    sync()
    first = time.perf_counter() - start
    worst, ok = compare_outputs([g.cpu() for g in got], state.expected, state.reduction_length)
    if not ok:
        return Measurement(None, "wrong", f"outputs differ from the oracle (max |error| {worst:.3g})")
    if best is not None and first > ABANDON_SECONDS and first > ABANDON_FACTOR * best:
        # A slow kernel is hopeless after its first (checked) call: time nothing more.
        return Measurement(first, "abandoned", f"first call {first / best:.1f}x slower than the best")
    run()  # warm-up
    sync()
    start = time.perf_counter()
    run()
    sync()
    once = time.perf_counter() - start
    calls = max(1, math.ceil(MIN_SAMPLE_SECONDS / max(once, 1e-7)))
    samples: list[float] = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        sync()
        samples.append((time.perf_counter() - start) / calls)
        if best is not None and len(samples) == 1 and samples[0] > ABANDON_FACTOR * best:
            return Measurement(samples[0], "abandoned", f"{samples[0] / best:.1f}x slower than the best")
    return Measurement(statistics.median(samples), "ok")


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


# ------------------------------------------------------------------------------ the parent side
def _check_settings(workers, compile_timeout, run_timeout) -> int:
    if workers is None:
        workers = max(1, min(os.cpu_count() or 1, 8))
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise TCOptionsError(f"autotune: workers must be an integer >= 1, got {workers!r}")
    for name, value in (("compile_timeout", compile_timeout), ("run_timeout", run_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise TCOptionsError(f"autotune: {name} must be a number of seconds > 0, got {value!r}")
    return workers


def _context_blob(kernel, binding, inputs, target: str) -> bytes:
    import torch

    from .reference import evaluate_def
    from .testing import reduction_length

    cdef = kernel.definition
    cpu_inputs = tuple(x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in inputs)
    with torch.no_grad():
        expected = tuple(t.cpu() for t in evaluate_def(cdef, *cpu_inputs))
    ctx = _Context(
        source=kernel.source,
        entry=kernel.name,
        target=target,
        inputs=cpu_inputs,
        expected=expected,
        reduction_length=reduction_length(cdef, binding.sizes),
        threads=torch.get_num_threads(),
    )
    buf = io.BytesIO()
    torch.save(ctx, buf)
    return buf.getvalue()


def _decode_known(db, key, space):
    """Candidates measured by earlier runs for this key that are points of ``space``."""
    from .genetic import Measurement
    from .mapping.options import MappingOptions

    known = []
    for m in db.measured(key):
        try:
            options = MappingOptions.from_json(m.options)
            space.encode(options)
        except TCError:
            continue  # another version's options, or the defaults (not a point): measured again if proposed
        known.append((options, Measurement(m.time, m.status)))
    return known


def _seeds(db, key, defaults, target: str) -> list:
    """The starting points of a search: the best stored for this key, the defaults, then options
    tuned for the same kernel at the nearest sizes (those that still parse and validate)."""
    from .mapping.options import MappingOptions

    def usable(records) -> list:
        out = []
        for record in records:
            try:
                out.append(MappingOptions.from_json(record.options).validate(target))
            except TCError:
                continue  # written by another version: not a seed
        return out

    if db is None:
        return [defaults]
    stored = db.get(key)
    return [*usable([stored] if stored else []), defaults, *usable(db.nearest(key))]


def tune_kernel(
    kernel,
    *inputs,
    generations: int = 10,
    population: int = 16,
    timeout: float | None = None,
    seed: int | None = None,
    ray: str | None = None,
    target: str | None = None,
    crossover_rate: float = 0.8,
    mutation_rate: float = 0.1,
    elites: int = 2,
    workers: int | None = None,
    compile_timeout: float = 120.0,
    run_timeout: float = 30.0,
    resume: bool = True,
    progress: bool | Callable | None = False,
    on_candidate: Callable | None = None,
) -> TuningReport:
    """:func:`autotune`, returning the whole :class:`TuningReport` instead of the best options.

    :arg on_candidate: called as ``on_candidate(options, measurement)`` as soon as each candidate
        is measured (the default options first), e.g. to record when each improvement was found.
    """
    from .binding import bind
    from .cache import Measured
    from .genetic import TunerSettings, WorkerPool, alternating_evaluator, tune
    from .kernel import Kernel, default_options
    from .mapping.lower import outer_band_extents
    from .mapping.search_space import search_space
    from .tuned import options_database, tuning_key
    from .tuning_ray import ray_measure

    if not isinstance(kernel, Kernel):
        raise TCCallError(f"autotune takes a Kernel (from tcjit.define), got {type(kernel).__name__}")
    # Other float dtypes than declared tune the retyped variant those calls run (stored under its text).
    kernel = kernel.variant_for(*inputs)
    settings = TunerSettings(
        generations=generations,
        population=population,
        crossover_rate=crossover_rate,
        mutation_rate=mutation_rate,
        elites=elites,
        seed=seed,
        timeout=timeout,
    )
    workers = _check_settings(workers, compile_timeout, run_timeout)
    if target is not None and target not in ("cpu", "cuda", "cuda-emulated"):
        raise TCCallError(f"unknown target {target!r}; expected one of cpu, cuda, cuda-emulated")
    binding = bind(kernel.definition, inputs)
    kernel._refuse_meta(binding, "tuning runs the kernel and needs real data")
    target = target or ("cuda" if binding.device.type == "cuda" else "cpu")
    defaults = default_options(kernel.definition, binding.sizes, target).validate(target)
    extents = outer_band_extents(kernel.definition, binding.sizes, defaults)
    space = search_space(target, extents, base=defaults)

    db = options_database()
    key = tuning_key(kernel, inputs, target)
    known = _decode_known(db, key, space) if (db is not None and resume) else []
    seeds = _seeds(db, key, defaults, target)
    blob = _context_blob(kernel, binding, inputs, target)
    report = _progress_printer(progress, settings)

    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(scratch_folder())
        if ray is None:
            context_path = os.path.join(scratch, "context.pt")
            with open(context_path, "wb") as f:
                f.write(blob)
            env = {"TCJIT_CACHE_DIR": os.path.join(scratch, "kernels"), "TCJIT_OPTIONS_DB": ""}
            pools = [
                stack.enter_context(
                    WorkerPool(n, initializer=_init_worker, initargs=(context_path,), env=env)
                )
                for n in (workers, 1)
            ]
            measure = alternating_evaluator(
                _compile_candidate,
                _measure_candidate,
                compile_pool=pools[0],
                run_pool=pools[1],
                compile_timeout=compile_timeout,
                run_timeout=run_timeout,
            )
        else:
            measure = ray_measure(
                functools.partial(_ray_task, blob, key.arch),
                address=ray,
                arch=key.arch,
                target=target,
                task_timeout=compile_timeout + run_timeout,
            )
            stack.callback(measure.close)
        # Measured twice: the first measurement in a fresh timing worker ran up to 1.7x slow
        # (gconv: 696 ms, then 405 ms when confirmed), and every comparison starts from this one.
        baseline = measure([defaults, defaults], None, None)[-1]
        chunk = workers if ray is None else max(1, population)

        def evaluate(candidates, best, deadline):
            # The defaults' time is the best so far from the start: slow candidates of the first
            # generation are abandoned too. A batch goes to the workers a chunk (one candidate
            # per compiling worker) at a time, so that on_candidate sees each candidate when it
            # is measured, not when its whole generation is.
            out = []
            for start in range(0, len(candidates), chunk):
                if baseline.valid and (best is None or baseline.time < best):
                    best = baseline.time
                part = measure(candidates[start : start + chunk], best, deadline)
                for options, m in zip(candidates[start : start + chunk], part):
                    if m.valid and (best is None or m.time < best):
                        best = m.time
                    if m.status != "skipped":
                        if on_candidate is not None:
                            on_candidate(options, m)
                        if report:
                            report.candidate(options, m)
                out += part
            return out

        if on_candidate is not None:
            on_candidate(defaults, baseline)
        if report:
            report.start(baseline)
        pending: list = []

        def measured(options, m) -> None:
            pending.append(Measured(options.to_json(), m.time, m.status))

        def generation(g) -> None:
            if db is not None and pending:
                db.record(key, pending)
            pending.clear()
            if baseline.valid and (g.best_time is None or baseline.time < g.best_time):
                # The defaults are measured apart (they need not be a point of the space) but
                # count for the best so far, as for the result.
                g = dataclasses.replace(g, best_time=baseline.time, best_options=defaults)
            if report:
                report.generation(g)

        result = tune(
            space,
            evaluate,
            settings,
            seeds=seeds,
            known=known,
            on_generation=generation,
            on_measured=measured,
        )
        generation_tail = list(pending)
        if db is not None and generation_tail:
            db.record(key, generation_tail)
        default_time = baseline.time if baseline.valid else None
        best_options, best_time = defaults, default_time
        if result.best_time is not None and (best_time is None or result.best_time < best_time):
            best_options, best_time = result.best_options, result.best_time
        if result.stopped != "interrupted" and best_time is not None:
            if report:
                report.note("confirming the best candidates against the defaults")
            confirmed = _confirm(measure, _finalists(defaults, result))
            if confirmed is not None:
                (best_options, best_time), default_time = (
                    confirmed[0],
                    dict(confirmed).get(defaults, default_time),
                )
    if best_time is None:
        raise TCCallError(
            f"autotune {kernel.name}: no candidate compiled and computed the right answer, not even "
            f"the default options ({baseline.status}: {baseline.detail})",
            hint="this is a bug in tcjit; please report it with the TC source and sizes",
        )
    if db is not None:
        db.put(
            key,
            best_options.to_json(),
            best_time,
            baseline=default_time,
            evaluations=len(result.measured) + 1,
        )
    kernel._forget_default_specializations()
    out = TuningReport(best_options, best_time, defaults, default_time, result, str(db.path) if db else None)
    if report:
        report.finish(out)
    return out


#: After the search, the best few candidates are measured again with the defaults, in
#: CONFIRM_ROUNDS interleaved rounds; the winner is the one with the lowest median there. One
#: candidate's time in the search is a single measurement on a shared machine: among hundreds,
#: the fastest is partly the luckiest.
FINALISTS = 3
CONFIRM_ROUNDS = 3


def _finalists(defaults, result) -> list:
    """The defaults and the best distinct valid candidates of the search (best first)."""
    ranked = sorted(
        ((m.time, i, o) for i, (o, m) in enumerate(result.measured) if m.valid), key=lambda t: t[:2]
    )
    out = [defaults]
    if result.best_options is not None:
        out.append(result.best_options)
    for _, _, options in ranked:
        if len(out) > FINALISTS:
            break
        if options not in out:
            out.append(options)
    return out


def _confirm(measure, finalists: list) -> list | None:
    """``[(options, median time)]`` of the finalists over CONFIRM_ROUNDS interleaved rounds,
    fastest first (only those valid in every round); ``None`` if interrupted (Ctrl-C)."""
    times: dict[int, list[float]] = {i: [] for i in range(len(finalists))}
    try:
        for r in range(CONFIRM_ROUNDS):
            order = [(i + r) % len(finalists) for i in range(len(finalists))]
            for i, m in zip(order, measure([finalists[i] for i in order], None, None)):
                if m.valid:
                    times[i].append(m.time)
    except KeyboardInterrupt:
        return None
    medians = [(statistics.median(t), i) for i, t in times.items() if len(t) == CONFIRM_ROUNDS]
    return [(finalists[i], t) for t, i in sorted(medians)] or None


_SETTINGS = (
    "generations",
    "population",
    "timeout",
    "seed",
    "ray",
    "target",
    "crossover_rate",
    "mutation_rate",
    "elites",
    "workers",
    "compile_timeout",
    "run_timeout",
    "resume",
    "progress",
)


def autotune(kernel, *inputs, **settings):
    """See :func:`tcjit.autotune`."""
    unknown = sorted(set(settings) - set(_SETTINGS))
    if unknown:
        raise TCOptionsError(
            f"autotune: no setting named {unknown[0]!r}; the settings are {', '.join(_SETTINGS)}"
        )
    return tune_kernel(kernel, *inputs, **settings).best_options


# ------------------------------------------------------------------------------------- progress
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

    def finish(self, report: TuningReport) -> None:
        speedup = f"{report.speedup:.2f}x" if report.speedup else "-"
        self._write(
            f"best {format_duration(report.best_time)} ({speedup} over the defaults' "
            f"{format_duration(report.default_time)}); {len(report.result.measured) + 1} candidates "
            f"measured, {report.failed} failed; stopped: {report.result.stopped}",
            final=True,
        )


def _progress_printer(progress, settings) -> _Progress | None:
    if progress is None or progress is False:
        return None
    if progress is True:
        return _Progress(settings, sys.stderr)
    if callable(progress):
        return _Progress(settings, None, progress)
    raise TCOptionsError(f"autotune: progress must be True, False or a function, got {progress!r}")
