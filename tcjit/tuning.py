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

With ``size_ranges`` the run tunes a symbolic kernel for a range of sizes instead
(:mod:`tcjit.tuning_range`): each candidate compiled once, checked and timed at several sizes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .arguments import bind_arguments, check_target
from .cache import USE_DEFAULTS
from .polyhedral.errors import TCCallError, TCError, TCOptionsError
from .polyhedral.lang.checked import CheckedDef
from .tuning_confirm import confirmation_reserve, finalists, verdict
from .tuning_progress import format_duration, progress_printer
from .tuning_scratch import scratch_folder
from .tuning_worker import (
    compile_candidate,
    confirm_candidates,
    context_blob,
    init_worker,
    measure_candidate,
    ray_confirm,
    ray_task,
)

__all__ = [
    "TuningReport",
    "autotune",
    "bind_tuning_arguments",
    "format_duration",
    "gpu_predictor",
    "tune_kernel",
    "tuning_space",
]


@dataclass(frozen=True)
class TuningReport:
    """What a tuning run found (:func:`tune_kernel`), from the interleaved rounds at its end
    (:mod:`tcjit.tuning_confirm`): one measurement protocol for the summary and the database.

    :ivar best_options: the options calls use after this run: the winner when it was faster than
        the defaults beyond the noise, otherwise the defaults (and when the database keeps an
        earlier run's record with a greater speed-up, that record's options).
    :ivar best_time: the winner's time per call in the final rounds (the defaults' when no
        candidate was confirmed faster), seconds.
    :ivar default_options: the options a call would have used without tuning.
    :ivar default_time: the defaults' time per call in the same rounds; before the rounds (or
        without them: interrupted, out of time) the defaults' time at the start of the search.
    :ivar result: the search's :class:`~tcjit.genetic.TuningResult` (history per generation,
        every candidate measured, why it stopped).
    :ivar database: the options database's path, ``None`` when disabled (``TCJIT_OPTIONS_DB=""``).
    :ivar verdict: the :class:`~tcjit.tuning_confirm.Verdict` of the final rounds (the winner, its
        spread, whether it is faster); ``None`` when they did not run (Ctrl-C, out of time).
    :ivar stored: the :class:`~tcjit.cache.TunedOptions` the database holds for this key after the
        run (``None``: nothing, or no database).
    :ivar start_default_time: the defaults' time at the start of the search (the progress lines'
        reference), seconds.
    """

    best_options: object
    best_time: float | None
    default_options: object
    default_time: float | None
    result: object
    database: str | None
    verdict: object = None
    stored: object = None
    start_default_time: float | None = None

    @property
    def speedup(self) -> float | None:
        """``default_time / best_time`` as measured in the final rounds (1.0: nothing gained)."""
        if self.best_time is None or self.default_time is None or self.best_time <= 0:
            return None
        return self.default_time / self.best_time

    @property
    def pruned(self) -> int:
        """Candidates not measured because the GPU model predicted them far slower than the best
        (``prune_factor``); 0 on other targets."""
        return self.result.pruned

    @property
    def failed(self) -> int:
        """Candidates that failed to compile, crashed, hung or computed a wrong answer."""
        return sum(not m.valid and m.status not in ("abandoned", "skipped") for _, m in self.result.measured)


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


def tuning_space(cdef: CheckedDef, sizes: Mapping[str, int], target: str) -> tuple:
    """``(defaults, space)``: the default options of ``cdef`` at ``sizes`` on ``target`` and the
    search space a tuning run explores from them (tile choices from the outer bands' extents).

    Example: ``tuning_space(kernel.definition, {"M": 512, "K": 512, "N": 512}, "cuda")``.
    """
    from .mapping.prepare import outer_band_extents
    from .mapping.search_space import search_space
    from .pipeline import default_options

    defaults = default_options(cdef, sizes, target).validate(target)
    extents = outer_band_extents(cdef, sizes, defaults)
    return defaults, search_space(target, extents, base=defaults)


def gpu_predictor(
    cdef: CheckedDef, sizes: Mapping[str, int], strides: Mapping[str, tuple[int, ...]], gpu: str
) -> Callable[[Sequence], list[float | None]]:
    """The predictor a tuning run on a GPU hands to :func:`tcjit.genetic.tune`: each candidate's
    time per call predicted by the static GPU profile
    (:func:`tcjit.static_profile.predicted_seconds`, a cubin compiled per candidate, no GPU run),
    ``None`` for a candidate whose code the profile cannot lower or compile (never pruned).

    :arg sizes, strides: the call's, as :func:`tcjit.pipeline.call_strides` gives them.
    :arg gpu: the device predicted for: ``"h100"``, ``"h200"`` (:func:`tcjit.static_profile.device_named`).
    """
    from .static_profile import predicted_seconds

    def predict(candidates: Sequence) -> list[float | None]:
        out: list[float | None] = []
        for options in candidates:
            try:
                out.append(predicted_seconds(cdef, sizes, strides, options, gpu))
            except TCError:  # this candidate's code: the model cannot say, the evaluator will
                out.append(None)
        return out

    return predict


def _predictor(cdef: CheckedDef, binding, target: str):
    """The tuner's predictor for a call on ``target``: the static GPU profile of the inputs'
    device on ``"cuda"``; ``None`` elsewhere (CPU time has no model; emulated CUDA is not timed as
    a GPU)."""
    if target != "cuda":
        return None
    import torch

    from .pipeline import call_strides
    from .static_profile import device_named

    gpu = device_named(torch.cuda.get_device_name(binding.device))
    return gpu_predictor(cdef, binding.sizes, call_strides(cdef, binding, None), gpu)


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
    progress: bool | Callable | None = None,
    on_candidate: Callable | None = None,
    prune_factor: float | None = 4.0,
    keep_top: int = 4,
    explore_share: float = 0.1,
    size_ranges: Mapping[str, tuple[int, int]] | None = None,
) -> TuningReport:
    """:func:`autotune`, returning the whole :class:`TuningReport` instead of the best options.

    :arg on_candidate: called as ``on_candidate(options, measurement)`` as soon as each candidate
        is measured (the default options first), e.g. to record when each improvement was found.
    :arg size_ranges: tune for a range of sizes (:mod:`tcjit.tuning_range`): inclusive bounds
        per size left symbolic, ``{"B": (1, 64)}``, the inputs given at the upper bounds; times
        are then geometric means over the sizes measured.
    """
    from .binding import bind
    from .cache import Measured
    from .genetic import TunerSettings, WorkerPool, alternating_evaluator, tune
    from .kernel import Kernel
    from .tuned import options_database, range_key, tuning_key
    from .tuning_ray import ray_measure, task_resources

    started = time.monotonic()  # the timeout counts from here: set-up and final rounds included
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
        prune_factor=prune_factor,
        keep_top=keep_top,
        explore_share=explore_share,
    )
    workers = _check_settings(workers, compile_timeout, run_timeout)
    check_target(target)
    binding = bind(kernel.definition, inputs)
    kernel._refuse_meta(binding, "tuning runs the kernel and needs real data")
    target = target or ("cuda" if binding.device.type == "cuda" else "cpu")
    plan = None
    if size_ranges is not None:  # checked before anything runs; the inputs at the upper bounds
        from .tuning_range import range_plan

        plan = range_plan(kernel, binding, inputs, size_ranges, target)
        inputs = plan.inputs[0]
        binding = bind(kernel.definition, inputs)
    defaults, space = tuning_space(kernel.definition, binding.sizes, target)

    db = options_database()
    if plan is None:
        key = tuning_key(kernel, inputs, target)
    else:
        key = range_key(kernel, plan.family, plan.ranges, target, inputs)
    known = _decode_known(db, key, space) if (db is not None and resume) else []
    seeds = _seeds(db, key, defaults, target)
    blob = context_blob(kernel, binding, inputs, target, plan)
    report = progress_printer(progress, settings)
    deadline = None if settings.timeout is None else started + settings.timeout

    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(scratch_folder())
        if ray is None:
            context_path = os.path.join(scratch, "context.pt")
            with open(context_path, "wb") as f:
                f.write(blob)
            env = {"TCJIT_CACHE_DIR": os.path.join(scratch, "kernels"), "TCJIT_OPTIONS_DB": ""}
            pools = [
                stack.enter_context(WorkerPool(n, initializer=init_worker, initargs=(context_path,), env=env))
                for n in (workers, 1)
            ]
            measure = alternating_evaluator(
                compile_candidate,
                measure_candidate,
                compile_pool=pools[0],
                run_pool=pools[1],
                compile_timeout=compile_timeout,
                run_timeout=run_timeout,
            )
        else:
            measure = ray_measure(
                functools.partial(ray_task, blob, key.arch),
                address=ray,
                arch=key.arch,
                target=target,
                task_timeout=compile_timeout + run_timeout,
            )
            stack.callback(measure.close)
        # Measured twice: the first measurement in a fresh timing worker can be far slower than
        # the later ones (bench/results/HISTORY.md), and every comparison starts from this one.
        before = time.monotonic()
        measure([defaults], None, deadline)  # apart: never abandoned against its own first time
        baseline = measure([defaults], None, deadline)[0]
        setup = time.monotonic() - before  # workers started, the defaults compiled, checked, timed
        if baseline.status == "skipped":
            raise TCOptionsError(
                f"autotune {kernel.name}: timeout={timeout:g} s ran out before the default options were "
                f"measured (starting the workers and measuring them took {setup:.1f} s)",
                hint="give the run more time: the timeout counts from the call",
            )
        chunk = workers if ray is None else max(1, population)

        def evaluate(candidates, best, search_deadline):
            # The defaults' time is the best so far from the start: slow candidates of the first
            # generation are abandoned too. A batch goes to the workers a chunk (one candidate
            # per compiling worker) at a time, so that on_candidate sees each candidate when it
            # is measured, not when its whole generation is.
            if report:
                report.expect(len(candidates))
            out = []
            for start in range(0, len(candidates), chunk):
                if baseline.valid and (best is None or baseline.time < best):
                    best = baseline.time
                part = measure(candidates[start : start + chunk], best, search_deadline)
                for options, m in zip(candidates[start : start + chunk], part):
                    if m.valid and (best is None or m.time < best):
                        best = m.time
                    if m.status != "skipped" and on_candidate is not None:
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

        points = 1 if plan is None else len(plan.points)  # a range's finalists run at each point
        reserve = confirmation_reserve(baseline.time * points if baseline.valid else None, timeout, setup)
        left = None if deadline is None else max(0.1, deadline - time.monotonic() - reserve)
        result = tune(
            space,
            evaluate,
            dataclasses.replace(settings, timeout=left),
            seeds=seeds,
            known=known,
            on_generation=generation,
            on_measured=measured,
            predict=_predictor(kernel.definition, binding, target),
        )
        if db is not None and pending:
            db.record(key, list(pending))
        if not baseline.valid:
            raise TCCallError(
                f"autotune {kernel.name}: the default options did not compile or compute the right "
                f"answer ({baseline.status}: {baseline.detail})",
                hint="this is a bug in tcjit; please report it with the TC source and sizes",
            )
        if ray is None:
            pools[0].close()  # nothing compiles while the finalists are timed
        budget = None if deadline is None else deadline - time.monotonic() - CLOSE_SECONDS
        if result.stopped == "interrupted":  # Ctrl-C: confirm the best so far, briefly
            budget = min(budget if budget is not None else math.inf, INTERRUPTED_SECONDS)
        if report:
            again = " (Ctrl-C again to skip them)" if result.stopped == "interrupted" else ""
            report.note(f"timing the best candidates and the defaults in interleaved rounds{again}")
        chosen = finalists(defaults, result.measured, result.best_options)
        if ray is None:
            where = pools[1]
        else:
            import torch

            where = (key.arch, task_resources(target, torch.get_num_threads()))
        found = _run_confirmation(chosen, budget, where, blob, run_timeout)
    stored = None
    if db is not None and found is not None:
        stored = db.put(
            key,
            found.options.to_json() if found.faster else USE_DEFAULTS,
            found.time,
            baseline=found.default_time,
            evaluations=len(result.measured) + 1,
            low=found.low,
            high=found.high,
            rounds=found.rounds,
        )
    kernel._forget_default_specializations()
    out = _report(defaults, baseline.time, result, db, found, stored, target)
    if report:
        report.finish(out)
    return out


#: Seconds kept after the final rounds for closing the workers and writing the database, and the
#: most the final rounds take after a Ctrl-C.
CLOSE_SECONDS = 1.0
INTERRUPTED_SECONDS = 20.0


def _run_confirmation(chosen: list, budget: float | None, where, blob: bytes, run_timeout: float):
    """The :class:`~tcjit.tuning_confirm.Verdict` of ``chosen`` timed in interleaved rounds in one
    process: the timing worker of a :class:`~tcjit.genetic.WorkerPool`, or one Ray task (``where``
    is then the key's architecture and the task's resources); ``None`` when out of time,
    interrupted or failed (a Ray node of another architecture answers nothing)."""
    if budget is not None and budget <= 0:
        return None
    limit = (budget if budget is not None else run_timeout * len(chosen) * 2) + CLOSE_SECONDS
    try:
        if not isinstance(where, tuple):
            outcome = where.map(confirm_candidates, [(chosen, budget)], timeout=limit)[0]
            times = outcome.value if outcome.status == "ok" else None
        else:
            import ray

            arch, resources = where
            task = ray.remote(max_retries=0)(ray_confirm).options(**resources)
            times = ray.get(task.remote(blob, arch, chosen, budget), timeout=limit)
    except KeyboardInterrupt:
        return None
    except Exception:  # a lost Ray worker, a timeout: the search's figures are not confirmed
        return None
    return None if times is None else verdict(chosen, times)


def _report(defaults, start_time, result, db, found, stored, target) -> TuningReport:
    """The :class:`TuningReport`: the options calls use now, and this run's final figures."""
    from .mapping.options import MappingOptions

    best_options = defaults
    if found is not None and found.faster:
        best_options = found.options
    if stored is not None and not stored.uses_defaults:
        try:
            best_options = MappingOptions.from_json(stored.options).validate(target)
        except TCError:
            pass  # not usable by this version: calls use the defaults
    elif stored is not None:
        best_options = defaults
    if found is None:
        best_time = default_time = start_time
    else:
        best_time = found.time if found.faster else found.default_time
        default_time = found.default_time
    return TuningReport(
        best_options,
        best_time,
        defaults,
        default_time,
        result,
        str(db.path) if db is not None else None,
        verdict=found,
        stored=stored,
        start_default_time=start_time,
    )


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
    "prune_factor",
    "keep_top",
    "explore_share",
    "size_ranges",
)


def autotune(kernel, *inputs, **settings):
    """See :func:`tcjit.autotune`."""
    unknown = sorted(set(settings) - set(_SETTINGS))
    if unknown:
        raise TCOptionsError(
            f"autotune: no setting named {unknown[0]!r}; the settings are {', '.join(_SETTINGS)}"
        )
    return tune_kernel(kernel, *inputs, **settings).best_options


def bind_tuning_arguments(
    kernel, inputs: Sequence[object], keywords: Mapping[str, object]
) -> tuple[tuple, dict]:
    """``(inputs, settings)`` of an :func:`~tcjit.autotune` call: the keywords that name the
    tuner's settings (the keyword parameters of :func:`tcjit.tuning.tune_kernel`) stay settings,
    the others are the kernel's arguments, bound as for a call (:func:`bind_arguments`).

    :raises TCCallError: a keyword is neither a setting nor a parameter, or the arguments do not
        bind.
    """
    definition = getattr(kernel, "definition", None)
    if not isinstance(definition, CheckedDef):
        return tuple(inputs), dict(keywords)  # autotune reports what kernel should be
    tuner = [p.name for p in inspect.signature(tune_kernel).parameters.values() if p.kind is p.KEYWORD_ONLY]
    settings = {k: v for k, v in keywords.items() if k in tuner}
    named = {k: v for k, v in keywords.items() if k not in tuner}
    for name in named:
        if name not in definition.params:
            raise TCCallError(
                f"autotune: {name!r} is neither a tuner setting ({', '.join(tuner)}) nor a parameter of "
                f"{definition.name} ({', '.join(definition.params)})"
            )
    return bind_arguments(definition, inputs, named, reserved=tuner), settings
