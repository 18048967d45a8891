"""The static GPU model's side of a GPU run: each timed tcjit kernel's predicted time, recorded
beside its measurement so that every GPU run also checks the model (issue 32).

:func:`predict_call` profiles a suite kernel with the options it ran with
(:func:`tcjit.static_profile.profile_at`: the ``cuda`` lowering, registers from the cubin that NVRTC
or nvcc compiles for the device's architecture, no GPU needed) and returns the record that
``bench/cpu_suite.py --device cuda`` and ``bench/gpu_option_sweep.py`` keep: the predicted seconds of
a call and of each launch, the bound that decides them, and the digest of the model's sources
(:func:`model_digest`). A prediction that fails (no CUDA compiler, an error in the model) is a
record with an ``error`` string: it never stops a benchmark. Its arguments are plain values, so
that it can run in a worker process while the GPU measures.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from _harness import REPO, describe_error, format_seconds, recorded_kernel

MODEL_SOURCES = ("mapping/gpu_access.py", "mapping/gpu_model.py", "mapping/gpu_profile.py")
"""The files whose text decides a prediction (the repository's paths)."""


def model_digest() -> str:
    """SHA-256 of the model's sources: a prediction is the model's at this digest."""
    h = hashlib.sha256()
    for name in MODEL_SOURCES:
        h.update((REPO / name).read_bytes())
    return h.hexdigest()


def predict_call(kernel: str, sizes: Mapping[str, int], options: str | Mapping[str, Any], gpu: str) -> dict:
    """The static profile's prediction for one call of suite kernel ``kernel`` at ``sizes`` with
    ``options`` (a :class:`~tcjit.MappingOptions` as JSON text or its parsed dict) on ``gpu`` (a key
    of :data:`tcjit.mapping.gpu_model.DEVICES`: ``tcjit.static_profile.device_named`` of the GPU's
    name), for contiguous inputs as the suite makes them.

    :returns: ``gpu``, ``model_digest`` and either ``error`` (``Type: message``) or
        ``predicted_s`` (a call in a loop of calls,
        :attr:`~tcjit.mapping.gpu_profile.GpuProfile.seconds`), ``device_s`` and ``host_s`` (its
        two sides), ``synced_s`` (their sum: about what a call between two synchronisations takes,
        the host's time and then the device's), ``bound`` (``host`` or the slowest launch's),
        ``launches`` (each launch's ``name``, ``predicted_s`` and ``bound``) and
        ``resources_from`` (the compiler that gave the registers).
    """
    record: dict[str, Any] = {"gpu": gpu, "model_digest": model_digest()}
    try:
        from tcjit.static_profile import profile_at

        text = options if isinstance(options, str) else json.dumps(options)
        _, cdef, opts = recorded_kernel({"kernel": kernel, "options": json.loads(text)})
        profile = profile_at(cdef, sizes, None, opts, gpu)
    except Exception as e:  # a prediction that fails is recorded, never fatal to the benchmark
        return {**record, "error": describe_error(e)}
    return {
        **record,
        "predicted_s": profile.seconds,
        "device_s": profile.device_seconds,
        "host_s": profile.host_seconds,
        "synced_s": profile.host_seconds + profile.device_seconds,
        "bound": profile.bound,
        "launches": [
            {"name": p.name, "predicted_s": p.prediction.seconds, "bound": p.prediction.bound}
            for p in profile.launches
        ],
        "resources_from": profile.resources_from,
    }


def predicted_over_measured(
    prediction: Mapping[str, Any] | None, measured_s: float | None, key: str = "predicted_s"
) -> float | None:
    """The prediction's ``key`` (``predicted_s`` for calls in a loop, ``synced_s`` for one call
    between two synchronisations) over ``measured_s`` (> 1: the model is pessimistic); ``None``
    where either is missing (no prediction, a failed one, no timing)."""
    if not prediction or not prediction.get(key) or not measured_s:
        return None
    return prediction[key] / measured_s


def per_kernel_geomean(pairs: Iterable[tuple[object, float]]) -> tuple[float | None, int]:
    """The geometric mean of positive ratios given as ``(kernel, ratio)`` pairs, each kernel
    counting once with the geometric mean of its own ratios (a kernel at several sizes weighs as
    much as one at a single size); and the number of kernels. ``(None, 0)`` for no pairs."""
    logs: dict[object, list[float]] = {}
    for kernel, ratio in pairs:
        logs.setdefault(kernel, []).append(math.log(ratio))
    if not logs:
        return None, 0
    return math.exp(statistics.fmean(statistics.fmean(v) for v in logs.values())), len(logs)


def prediction_cell(prediction: Mapping[str, Any] | None, key: str = "predicted_s") -> str:
    """A prediction's ``key`` (as for :func:`predicted_over_measured`) in a table, with its bound:
    ``1.23 ms (dram)``; ``error`` where it failed, ``—`` where none was made."""
    if not prediction:
        return "—"
    if prediction.get("error"):
        return "error"
    return f"{format_seconds(prediction[key])} ({prediction['bound']})"


def ratio_cell(ratio: float | None) -> str:
    """A predicted/measured ratio in a table: ``0.83``; ``—`` for none."""
    return "—" if ratio is None else f"{ratio:.2f}"


class Predictions:
    """Predictions (:func:`predict_call`) made in ``workers`` worker processes while the GPU
    measures in this one, or here, one at a time, with ``workers=0``. A context manager: leaving it
    cancels what has not started.

    >>> with Predictions(workers=0) as p:
    ...     record = p.result(p.submit("softmax", {"N": 64, "D": 96}, "{}", "v100"))
    >>> "error" in record
    True
    """

    def __init__(self, workers: int):
        self._pool = None
        if workers > 0:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawned, not forked: the parent has a CUDA context, which a forked child must not touch
            self._pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))

    def __enter__(self) -> Predictions:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def submit(self, kernel: str, sizes: Mapping[str, int], options: str, gpu: str) -> Future:
        """Start :func:`predict_call` with these arguments; its future."""
        if self._pool is not None:
            try:
                return self._pool.submit(predict_call, kernel, dict(sizes), options, gpu)
            except RuntimeError:  # a broken pool (a worker died): the rest are made here
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
        done: Future = Future()
        done.set_result(predict_call(kernel, sizes, options, gpu))
        return done

    @staticmethod
    def result(future: Future) -> dict[str, Any]:
        """The record of a submitted prediction, waiting for it; an ``error`` record where the
        worker itself failed (a prediction's own failures are records already)."""
        try:
            return future.result()
        except Exception as e:  # a broken worker process: recorded like any failed prediction
            return {"error": describe_error(e)}
