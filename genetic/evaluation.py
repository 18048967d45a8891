"""Evaluators for :func:`tcjit.genetic.tune`, built from functions handed in.

The tuner knows nothing about compiling or timing kernels: ``tcjit.autotune`` hands in top-level
functions (picklable, of an importable module) that compile a candidate and time it, and one of
these evaluators runs them robustly:

- :func:`alternating_evaluator` on one machine: every candidate of a batch is compiled in parallel
  in one :class:`~tcjit.genetic.workers.WorkerPool`, then the compiled ones are timed one at a time
  in another (one worker). The phases never overlap, so on a small CPU no compilation steals cycles
  from a timing.
- :func:`ray_evaluator` across a Ray cluster: one task per candidate, compiled and timed on the
  device of the worker that runs it.

A candidate that fails in any way -- an exception, a crash, a hang, a wrong answer -- becomes a
:class:`~tcjit.genetic.tuner.Measurement` with that status; the search goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..mapping.options import MappingOptions
from ..polyhedral.errors import TCOptionsError
from .tuner import Evaluator, Measurement
from .workers import START_TIMEOUT, Outcome, WorkerPool

__all__ = ["DETAIL_LIMIT", "NodeAnswer", "alternating_evaluator", "ray_evaluator"]

#: The longest :attr:`Measurement.detail` built here, in characters.
DETAIL_LIMIT = 500


def one_line(text: str) -> str:
    """``text`` on one line (lines joined by `` | ``), at most :data:`DETAIL_LIMIT` characters."""
    line = " | ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return line if len(line) <= DETAIL_LIMIT else line[: DETAIL_LIMIT - 3] + "..."


def _failure(outcome: Outcome, *, error_status: str) -> Measurement:
    """The Measurement of an outcome that is not ``"ok"``: ``"error"`` becomes ``error_status``."""
    status = error_status if outcome.status == "error" else outcome.status
    return Measurement(None, status, one_line(outcome.error))


def _answer(value: object) -> Measurement:
    """A measure function's answer, checked."""
    if isinstance(value, Measurement):
        return value
    return Measurement(None, "error", one_line(f"the measure function answered {value!r}, not a Measurement"))


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _capped(timeout: float, deadline: float | None) -> tuple[float, bool]:
    """The timeout for work started now, shortened to the time left before ``deadline`` (at least
    a second); and whether the deadline shortened it (a "timeout" then means "skipped")."""
    if deadline is None:
        return timeout, False
    left = max(1.0, deadline - time.monotonic())
    return (left, True) if left < timeout else (timeout, False)


def _cut_short(m: Measurement, capped: bool) -> Measurement:
    """A timeout caused by the deadline, not by the candidate, is a skip (not a failure)."""
    if capped and m.status == "timeout":
        return Measurement(None, "skipped", "the search's time budget ran out while it ran")
    return m


def _check_timeout(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise TCOptionsError(f"evaluator {name}: must be a number of seconds > 0, got {value!r}")


class _Alternating:
    """The evaluator :func:`alternating_evaluator` returns."""

    def __init__(
        self,
        compile_fn: Callable[[MappingOptions], object],
        measure_fn: Callable[[tuple[object, float | None]], Measurement],
        compile_pool: WorkerPool,
        run_pool: WorkerPool,
        compile_timeout: float,
        run_timeout: float,
    ) -> None:
        self.compile_fn, self.measure_fn = compile_fn, measure_fn
        self.compile_pool, self.run_pool = compile_pool, run_pool
        self.compile_timeout, self.run_timeout = compile_timeout, run_timeout

    def __call__(
        self, candidates: Sequence[MappingOptions], best_time: float | None, deadline: float | None
    ) -> list[Measurement]:
        results: list[Measurement | None] = [None] * len(candidates)
        compiled: list[tuple[int, object]] = []
        # Phase 1: compile. With a deadline, in chunks of one candidate per worker, so that it is
        # honoured within a chunk's time rather than a whole batch's; else in one call, so that no
        # worker waits for the slowest compilation of a chunk.
        chunk = self.compile_pool.workers if deadline is not None else max(1, len(candidates))
        for start in range(0, len(candidates), chunk):
            if _past(deadline):
                break
            part = list(candidates[start : start + chunk])
            timeout, capped = _capped(self.compile_timeout, deadline)
            for offset, outcome in enumerate(self.compile_pool.map(self.compile_fn, part, timeout=timeout)):
                if outcome.status == "ok":
                    compiled.append((start + offset, outcome.value))
                else:
                    failure = _failure(outcome, error_status="compile-error")
                    results[start + offset] = _cut_short(failure, capped)
        # Phase 2: time them one at a time, the best time updated as it improves.
        best = best_time
        for index, token in compiled:
            if _past(deadline):
                break
            timeout, capped = _capped(self.run_timeout, deadline)
            outcome = self.run_pool.map(self.measure_fn, [(token, best)], timeout=timeout)[0]
            m = _answer(outcome.value) if outcome.status == "ok" else _failure(outcome, error_status="error")
            m = results[index] = _cut_short(m, capped)
            if m.valid and (best is None or m.time < best):
                best = m.time
        return [Measurement(None, "skipped") if m is None else m for m in results]


def alternating_evaluator(
    compile_fn: Callable[[MappingOptions], object],
    measure_fn: Callable[[tuple[object, float | None]], Measurement],
    *,
    compile_pool: WorkerPool,
    run_pool: WorkerPool,
    compile_timeout: float,
    run_timeout: float,
) -> Evaluator:
    """An evaluator that compiles a batch in parallel, then times it one candidate at a time.

    :arg compile_fn: ``compile_fn(options)`` compiles a candidate in a worker of ``compile_pool``
        and returns a picklable token for ``measure_fn`` (a path to the built kernel, ...). An
        exception is a ``"compile-error"``.
    :arg measure_fn: ``measure_fn((token, best_time))`` checks the candidate's output and times it
        in the worker of ``run_pool``; returns a :class:`Measurement` (``"wrong"`` for a wrong
        answer, ``"abandoned"`` when it is much slower than ``best_time``). An exception is an
        ``"error"``.
    :arg compile_pool: the workers that compile (e.g. one per core).
    :arg run_pool: the worker that times (one, so that timings never overlap).
    :arg compile_timeout: seconds one compilation may take before its worker is killed.
    :arg run_timeout: seconds one measurement may take (a hanging kernel) before its worker is killed.

    A worker that crashes gives ``"crashed"``, one that does not answer ``"timeout"``. Past the
    deadline, the candidates not yet compiled or timed are ``"skipped"``. The pools belong to the
    caller, who closes them.
    """
    _check_timeout("compile_timeout", compile_timeout)
    _check_timeout("run_timeout", run_timeout)
    return _Alternating(compile_fn, measure_fn, compile_pool, run_pool, compile_timeout, run_timeout)


_STARTED = "tcjit: task started"


def _ray_task(task_fn: Callable[[tuple[MappingOptions, float | None]], Measurement], job: Any) -> Any:
    """What each Ray task runs, as a streaming generator: first a marker when it starts (the
    timeout counts from there, not from submission, so a task waiting for a worker to start is
    not timed out), then ``task_fn``'s answer, checked."""
    yield _STARTED
    yield _answer(task_fn(job))


def _call(fn: Callable[[], object]) -> object:
    return fn()


@dataclass(frozen=True)
class NodeAnswer:
    """One node's answer to :meth:`on_every_node <ray_evaluator>`.

    :ivar node: the node's address as Ray knows it, e.g. ``"10.0.0.12"``.
    :ivar value: what the function returned there; ``None`` when it failed.
    :ivar error: one line saying why it failed (an exception on that node, e.g. tcjit not
        installed there, or no answer in time); empty when it answered.
    """

    node: str
    value: object = None
    error: str = ""


class _Ray:
    """The evaluator :func:`ray_evaluator` returns; :meth:`close` shuts Ray down if it started it."""

    def __init__(
        self,
        ray: Any,
        task_fn: Any,
        task_timeout: float,
        max_in_flight: int | None,
        started: bool,
        task_options: Mapping[str, Any],
    ) -> None:
        self.ray, self.task_fn, self.task_timeout = ray, task_fn, task_timeout
        self.max_in_flight = max_in_flight
        self.started = started
        self.task_options = dict(task_options)
        # No retries: a task whose worker died is a crashed candidate, not a flaky node.
        remote = ray.remote(max_retries=0, num_returns="streaming")(_ray_task)
        self.remote = remote.options(**task_options) if task_options else remote

    def _slots(self) -> int:
        if self.max_in_flight is not None:
            return self.max_in_flight
        return max(1, int(self.ray.cluster_resources().get("CPU", 1)))

    def _next(self, task: Any) -> object:
        """The next value a ready task yielded, or the Measurement of its failure."""
        ray = self.ray
        try:
            return ray.get(next(task))
        except StopIteration:
            return Measurement(None, "error", "the task ended without an answer")
        except ray.exceptions.TaskCancelledError:
            return Measurement(None, "timeout", f"no answer within {self.task_timeout:g} s")
        except (
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.NodeDiedError,
            ray.exceptions.ObjectLostError,
        ) as e:
            return Measurement(None, "crashed", one_line(f"{type(e).__name__}: {e}"))
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if getattr(e, "cause", None) is not None else e
            return Measurement(None, "error", one_line(f"{type(cause).__name__}: {cause}"))
        except ray.exceptions.RayError as e:
            return Measurement(None, "crashed", one_line(f"{type(e).__name__}: {e}"))

    def __call__(
        self, candidates: Sequence[MappingOptions], best_time: float | None, deadline: float | None
    ) -> list[Measurement]:
        ray = self.ray
        results: list[Measurement | None] = [None] * len(candidates)
        slots = self._slots()
        best = best_time
        waiting = list(range(len(candidates)))
        running: dict[Any, list[Any]] = {}  # task -> [candidate, submitted, started or None]

        def due(entry: list[Any]) -> float:
            return entry[1] + START_TIMEOUT if entry[2] is None else entry[2] + self.task_timeout

        try:
            while waiting or running:
                while waiting and len(running) < slots and not _past(deadline):
                    index = waiting.pop(0)
                    task = self.remote.remote(self.task_fn, (candidates[index], best))
                    running[task] = [index, time.monotonic(), None]
                if not running:
                    break  # past the deadline: the rest is skipped
                wait = max(0.0, min(due(e) for e in running.values()) - time.monotonic())
                ready, _ = ray.wait(list(running), num_returns=1, timeout=wait)
                for task in ready:
                    value = self._next(task)
                    if value == _STARTED:
                        running[task][2] = time.monotonic()
                        continue
                    index = running.pop(task)[0]
                    results[index] = m = value if isinstance(value, Measurement) else _answer(value)
                    if m.valid and (best is None or m.time < best):
                        best = m.time
                now = time.monotonic()
                for task, entry in list(running.items()):
                    if now >= due(entry):
                        ray.cancel(task, force=True)
                        del running[task]
                        text = f"no answer within {self.task_timeout:g} s"
                        if entry[2] is None:
                            text = f"not started within {START_TIMEOUT:g} s (no free worker or resources?)"
                        results[entry[0]] = Measurement(None, "timeout", text)
        except BaseException:
            for task in running:
                ray.cancel(task, force=True)
            raise
        return [Measurement(None, "skipped") if m is None else m for m in results]

    def on_every_node(self, fn: Callable[[], object], *, timeout: float = START_TIMEOUT) -> list[NodeAnswer]:
        """``fn()`` once on every alive node that has the resources one task asks for, pinned to
        that node (e.g. to ask each node what kind of machine it is before any candidate runs there).

        :arg fn: a top-level function of a module the workers can import; it runs with the task's
            resources (so with ``{"num_gpus": 1}`` it sees a GPU).
        :arg timeout: seconds for all the answers together; a node that has not answered by then
            answers a ``"timeout"`` error.
        :returns: one :class:`NodeAnswer` per such node; none when no node has the resources.
        """
        ray = self.ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        need = {
            "CPU": self.task_options.get("num_cpus", 1),
            "GPU": self.task_options.get("num_gpus", 0),
            **self.task_options.get("resources", {}),
        }
        probe = ray.remote(max_retries=0)(_call)
        asked = {}
        for node in ray.nodes():
            if node.get("Alive") and all(node["Resources"].get(k, 0) >= v for k, v in need.items() if v):
                strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
                ref = probe.options(**self.task_options, scheduling_strategy=strategy).remote(fn)
                asked[ref] = node["NodeManagerAddress"]
        ready, late = ray.wait(list(asked), num_returns=len(asked), timeout=timeout)
        out = []
        for ref in ready:
            try:
                out.append(NodeAnswer(asked[ref], ray.get(ref)))
            except ray.exceptions.RayTaskError as e:
                cause = e.cause if getattr(e, "cause", None) is not None else e
                out.append(NodeAnswer(asked[ref], None, one_line(f"{type(cause).__name__}: {cause}")))
            except ray.exceptions.RayError as e:
                out.append(NodeAnswer(asked[ref], None, one_line(f"{type(e).__name__}: {e}")))
        for ref in late:
            ray.cancel(ref, force=True)
            out.append(NodeAnswer(asked[ref], None, f"timeout: no answer within {timeout:g} s"))
        return out

    def close(self) -> None:
        """Shut Ray down if this evaluator started it."""
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
        self.started = False


def ray_evaluator(
    task_fn: Callable[[tuple[MappingOptions, float | None]], Measurement],
    *,
    address: str | None = None,
    task_timeout: float,
    max_in_flight: int | None = None,
    task_options: Mapping[str, Any] | None = None,
) -> Evaluator:
    """An evaluator that runs each candidate as one Ray task: ``task_fn((options, best_time))``
    compiles and times it on the worker's own device and returns a :class:`Measurement`.

    :arg address: the Ray cluster to join (``"auto"``, ``"ray://head:10001"``); ``None``: the Ray
        already initialised in this process, else a new local one.
    :arg task_timeout: seconds from a task's start on a worker to its answer; then it is cancelled
        (its worker process killed) and the candidate is ``"timeout"``. A task not started within
        :data:`~tcjit.genetic.workers.START_TIMEOUT` seconds of its submission is cancelled too.
    :arg max_in_flight: tasks submitted at once (default: the cluster's CPUs). Tasks submitted
        later see the best time of the ones finished before.
    :arg task_options: Ray resources per task, e.g. ``{"num_gpus": 1}`` so that each task has a GPU
        of its own (default: Ray's, one CPU).

    A task whose worker dies is ``"crashed"``; an exception in ``task_fn`` is ``"error"``. Ray is
    imported here (``pip install 'tcjit[ray]'``). The evaluator has a ``close()`` that shuts Ray
    down if it was started here, and an ``on_every_node(fn)`` that runs ``fn()`` once on each node
    able to run a task and returns a :class:`NodeAnswer` per node.
    """
    _check_timeout("task_timeout", task_timeout)
    if max_in_flight is not None and (
        isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1
    ):
        raise TCOptionsError(
            f"evaluator max_in_flight: must be an integer >= 1 or None, got {max_in_flight!r}"
        )
    try:
        import ray
    except ImportError as e:
        raise TCOptionsError(
            "ray_evaluator needs Ray, which is not installed", hint="pip install 'tcjit[ray]'"
        ) from e
    started = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
        started = True
    return _Ray(ray, task_fn, float(task_timeout), max_in_flight, started, dict(task_options or {}))
