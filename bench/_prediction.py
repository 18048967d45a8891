"""The static GPU model's side of a GPU run: the digest of the model's sources, which every
prediction recorded beside a measurement carries."""

from __future__ import annotations

import hashlib

from _harness import REPO

MODEL_SOURCES = ("mapping/gpu_access.py", "mapping/gpu_model.py", "mapping/gpu_profile.py")
"""The files whose text decides a prediction (the repository's paths)."""


def model_digest() -> str:
    """SHA-256 of the model's sources: a prediction is the model's at this digest."""
    h = hashlib.sha256()
    for name in MODEL_SOURCES:
        h.update((REPO / name).read_bytes())
    return h.hexdigest()
