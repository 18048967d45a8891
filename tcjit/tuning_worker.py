"""The worker side of a tuning run: what the compile and timing workers (or Ray tasks) run.

A run's context (the kernel's source, the inputs, the oracle's outputs) is written once
(:func:`context_blob`) and loaded by each worker; :func:`compile_candidate` compiles a candidate
into the run's private kernel store, :func:`measure_candidate` checks it against the oracle and
times it (the search's single measurement), :func:`confirm_candidates` times the finalists in
interleaved rounds (:mod:`tcjit.tuning_confirm`). The functions are top-level so that they travel
to worker processes by reference.

A run over a range of sizes (:mod:`tcjit.tuning_range`) has several points: the kernel is defined
with those sizes symbolic, a candidate is compiled once at the first point (the upper bounds) and
checked and timed at every point; its time is the geometric mean of the points' times, and each
round of the confirmation takes the geometric mean of the points' times in that round.
"""

from __future__ import annotations

import functools
import hashlib
import io
import math
import statistics
import time
from dataclasses import dataclass

from .polyhedral.errors import TCError
from .tuning_confirm import MIN_SAMPLE_SECONDS
from .tuning_range import geometric_mean

__all__ = [
    "WorkerState",
    "check_and_time",
    "compile_candidate",
    "confirm_candidates",
    "context_blob",
    "init_worker",
    "measure_candidate",
    "ray_confirm",
    "ray_task",
]

#: A candidate whose first timing sample is this many times slower than the best so far is not
#: timed further (scored "abandoned": valid but never the best).
ABANDON_FACTOR = 3.0
#: A first call (the one checked against the oracle) longer than this, and ABANDON_FACTOR times
#: the best so far, abandons the candidate at once: for kernels that run for a good fraction of a
#: second, timing a hopeless candidate seven more times is most of a tuning run's time.
ABANDON_SECONDS = 0.05
#: Timing samples per candidate (the median is its time); a sample takes at least
#: MIN_SAMPLE_SECONDS (short kernels are called several times per sample).
REPEATS = 7


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
    symbolic: frozenset[str] | None = None  # a range tune: the sizes left symbolic (define's dynamic=)
    others: tuple = ()  # a range tune: (sizes, inputs, expected, reduction_length) per other point


@dataclass
class WorkerState:
    """A worker's loaded run: the kernel, its inputs, the oracle's outputs, the target; for a
    run over a range of sizes, one state per other point (``others``: the same kernel; ``at``:
    the point's sizes, for messages)."""

    kernel: object
    inputs: tuple
    expected: tuple
    target: str
    reduction_length: int
    others: tuple = ()
    at: str = ""

    @property
    def points(self) -> tuple:
        """This state and the other points' (one for a run at one size)."""
        return (self, *self.others)


_STATE: dict[str, WorkerState] = {}  # per context digest: a Ray worker may serve several runs


def _load_context(blob: bytes) -> WorkerState:
    digest = hashlib.sha256(blob).hexdigest()
    state = _STATE.get(digest)
    if state is not None:
        return state
    import torch

    from . import definitions as kernels

    ctx: _Context = torch.load(io.BytesIO(blob), weights_only=False)
    torch.set_num_threads(max(1, ctx.threads))
    device = "cuda" if ctx.target == "cuda" else "cpu"
    inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in ctx.inputs)
    kernel = kernels.define(ctx.source, name=ctx.entry, dynamic=ctx.symbolic)
    others = tuple(
        WorkerState(
            kernel,
            tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in point_inputs),
            expected,
            ctx.target,
            length,
            at=_sizes_text(sizes),
        )
        for sizes, point_inputs, expected, length in ctx.others
    )
    state = WorkerState(kernel, inputs, ctx.expected, ctx.target, ctx.reduction_length, others)
    _STATE.clear()
    _STATE[digest] = state
    return state


def init_worker(context_path: str) -> None:
    """Worker initializer: load the run's context (the kernel, inputs and expected outputs)."""
    with open(context_path, "rb") as f:
        _load_context(f.read())


def _worker_state() -> WorkerState:
    return next(iter(_STATE.values()))  # a worker process serves one run


def compile_candidate(options):
    """Compile ``options`` into the run's kernel store (a worker's compile phase); returns them."""
    state = _worker_state()
    from . import definitions as kernels

    kernels.compile(state.kernel, *state.inputs, options=options, target=state.target)
    return options


def measure_candidate(arg):
    """Check a compiled candidate against the oracle, then time it (a worker's run phase)."""
    from .genetic import Measurement

    options, best = arg
    return _measure_in(_worker_state(), options, best, Measurement)


def _measure_in(state: WorkerState, options, best: float | None, Measurement):
    """Compile ``options`` (found in the run's store: compiled already) and measure them: checked
    and timed at the run's one size, or at every point of a range (the geometric mean of their
    times; not abandoned early, since ``best`` is such a mean)."""
    from . import definitions as kernels

    if not state.others:
        spec = kernels.compile(state.kernel, *state.inputs, options=options, target=state.target)
        return check_and_time(spec, state, best, Measurement)
    times = []
    for point in state.points:  # one symbolic kernel serves every point: found, not compiled
        spec = kernels.compile(point.kernel, *point.inputs, options=options, target=point.target)
        m = check_and_time(spec, point, None, Measurement)
        if not m.valid:
            where = f" at {point.at}" if point.at else " at the upper bounds"
            return Measurement(m.time, m.status, f"{m.detail}{where}")
        times.append(m.time)
    return Measurement(geometric_mean(times), "ok")


def ray_task(blob: bytes, arch: str, arg):
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
    try:
        return located(_measure_in(state, options, best, Measurement), here)
    except TCError as e:
        return located(Measurement(None, "compile-error", _one_line(e)), here)


def confirm_candidates(arg):
    """The timing worker's last job: load, check and time the finalists in interleaved rounds."""
    finalists, budget = arg
    return _confirm_in(_worker_state(), finalists, budget)


def ray_confirm(blob: bytes, arch: str, finalists, budget):
    """:func:`confirm_candidates` as one Ray task: every finalist on that one worker; ``None`` on
    a worker whose architecture is not ``arch`` (the tuning key's)."""
    from .tuning_ray import worker_identity

    state = _load_context(blob)
    if worker_identity(state.target).arch != arch:
        return None
    return _confirm_in(state, finalists, budget)


def _confirm_in(state: WorkerState, finalists, budget: float | None) -> list:
    """Per finalist, its times per call in each round, or ``None`` when it failed to compile or
    computed a wrong answer (:func:`~tcjit.tuning_confirm.interleaved_rounds`)."""
    import torch

    from . import definitions as kernels
    from .testing import compare_outputs
    from .tuning_confirm import interleaved_rounds

    start = time.perf_counter()
    points = state.points
    runners, where = [], []
    for i, options in enumerate(finalists):
        mine = []
        for point in points:
            try:
                spec = kernels.compile(point.kernel, *point.inputs, options=options, target=point.target)
            except TCError:
                break
            got = spec.run(point.inputs, None)
            if not compare_outputs([g.cpu() for g in got], point.expected, point.reduction_length)[1]:
                break
            mine.append(functools.partial(spec.run, point.inputs, None))
        if len(mine) == len(points):
            runners += mine
            where.append(i)
    out: list = [None] * len(finalists)
    if not runners:
        return out
    sync = torch.cuda.synchronize if state.target == "cuda" else (lambda: None)
    left = None if budget is None else budget - (time.perf_counter() - start)
    rounds = interleaved_rounds(runners, sync, left)
    for k, i in enumerate(where):  # per round, the geometric mean over the points
        mine = rounds[k * len(points) : (k + 1) * len(points)]
        out[i] = [geometric_mean(per_round) for per_round in zip(*mine)]
    return out


def check_and_time(spec, state: WorkerState, best: float | None, Measurement):
    """Check ``spec`` against the oracle (``"wrong"``), then time it: median of REPEATS samples,
    abandoned early when much slower than ``best``. A :class:`~tcjit.genetic.Measurement`."""
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


def _sizes_text(sizes) -> str:
    return ", ".join(f"{n}={v}" for n, v in sizes.items())


def context_blob(kernel, binding, inputs, target: str, plan=None) -> bytes:
    """The run's context as bytes: the kernel's source, the inputs (CPU copies) and the oracle's
    outputs; with a :class:`~tcjit.tuning_range.RangePlan`, the symbolic sizes and every other
    point's inputs and outputs as well (``inputs``, ``binding``: the first point's)."""
    import torch

    from .reference import evaluate_def
    from .testing import reduction_length

    cdef = kernel.definition

    def oracle(point_inputs) -> tuple[tuple, tuple]:
        cpu = tuple(x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in point_inputs)
        with torch.no_grad():
            return cpu, tuple(t.cpu() for t in evaluate_def(cdef, *cpu))

    cpu_inputs, expected = oracle(inputs)
    others = []
    if plan is not None:
        for sizes, point_inputs in zip(plan.points[1:], plan.inputs[1:]):
            others.append((sizes, *oracle(point_inputs), reduction_length(cdef, sizes)))
    ctx = _Context(
        source=kernel.source,
        entry=kernel.name,
        target=target,
        inputs=cpu_inputs,
        expected=expected,
        reduction_length=reduction_length(cdef, binding.sizes),
        threads=torch.get_num_threads(),
        symbolic=None if plan is None else frozenset(plan.ranges),
        others=tuple(others),
    )
    buf = io.BytesIO()
    torch.save(ctx, buf)
    return buf.getvalue()
