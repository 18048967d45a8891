"""How many specialisations this process compiled and loaded: :func:`tcjit.compile_counts`.

:func:`tcjit.pipeline.specialize` counts each specialisation it makes: ``"compiled"`` when it
lowers and builds one (isl, the mapping and the C compiler, or the CUDA source kept for NVRTC),
``"loaded"`` when it finds one in the on-disk kernel store. Importing this module imports nothing
heavy, so reading the counts never loads torch or isl.
"""

from __future__ import annotations

import threading

__all__ = ["compile_counts", "count"]

_LOCK = threading.Lock()
_COUNTS = {"compiled": 0, "loaded": 0}


def count(what: str) -> None:
    """Add one to the count ``what`` (``"compiled"`` or ``"loaded"``), atomically."""
    with _LOCK:
        _COUNTS[what] += 1


def compile_counts() -> dict[str, int]:
    """A snapshot of this process's counts: ``{"compiled": n, "loaded": n}`` (see the module
    docstring); later calls do not change the dict returned."""
    with _LOCK:
        return dict(_COUNTS)
