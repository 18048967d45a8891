"""The frames that :class:`~tcjit.genetic.workers.WorkerPool` and its worker processes exchange:
an 8-byte big-endian length, then that many bytes (a pickle). See :mod:`tcjit.genetic.worker`.

A module of its own so that the pool does not import the worker's ``__main__`` module (``python -m``
would then warn that it runs a module already imported).
"""

from __future__ import annotations

import os
import struct
import traceback

__all__ = ["HEADER", "describe", "read_frame", "write_frame"]

#: The length prefix of a frame.
HEADER = struct.Struct(">Q")


def read_exactly(fd: int, n: int) -> bytes | None:
    """``n`` bytes from ``fd`` (blocking); ``None`` at end of file."""
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> bytes | None:
    """One frame's payload from ``fd``; ``None`` at end of file."""
    header = read_exactly(fd, HEADER.size)
    if header is None:
        return None
    return read_exactly(fd, HEADER.unpack(header)[0])


def write_frame(fd: int, payload: bytes) -> None:
    """Write ``payload`` as one frame to ``fd`` (blocking)."""
    view = memoryview(HEADER.pack(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view) :]


def describe(error: BaseException) -> str:
    """``"ValueError: message (at helpers.py:12 in compile_fn)"``: the exception and where it was raised."""
    text = f"{type(error).__name__}: {error}"
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {os.path.basename(last.filename)}:{last.lineno} in {last.name})"
    return text
