"""The static GPU model's side of a GPU run: the digest of the model's sources, which every
prediction recorded beside a measurement carries, and the geometric mean of ratios per kernel.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Iterable

from _harness import REPO

MODEL_SOURCES = ("mapping/gpu_access.py", "mapping/gpu_model.py", "mapping/gpu_profile.py")
"""The files whose text decides a prediction (the repository's paths)."""


def model_digest() -> str:
    """SHA-256 of the model's sources: a prediction is the model's at this digest."""
    h = hashlib.sha256()
    for name in MODEL_SOURCES:
        h.update((REPO / name).read_bytes())
    return h.hexdigest()


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
