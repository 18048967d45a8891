"""Worker processes that survive what a candidate does to them: crashes, hangs, exceptions.

:class:`WorkerPool` runs ``fn(item)`` in child processes and answers one :class:`Outcome` per item.
A child that segfaults, aborts or is killed for memory gives ``"crashed"``; one that does not answer
in time is killed (its whole process group: a compiler it started dies with it) and gives
``"timeout"``; either way a fresh child replaces it and the other items are unaffected::

    with WorkerPool(2, env={"OMP_NUM_THREADS": "1"}) as pool:
        outcomes = pool.map(compile_candidate, candidates, timeout=60.0)

Children are ``python -m tcjit.genetic.worker`` processes (see that module for the protocol), not
:mod:`multiprocessing` ones: a training script without an ``if __name__ == "__main__"`` guard is
never executed again in a child. ``fn``, the items, the answers and the initializer travel by
pickle, so they must be top-level functions and values of importable modules (not of ``__main__``).
Each child runs in its own session: a terminal's Ctrl-C reaches the parent only, which kills the
children that were busy and lets the KeyboardInterrupt propagate.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..polyhedral.errors import TCCallError, TCOptionsError
from .protocol import HEADER

__all__ = ["KILL_GRACE", "START_TIMEOUT", "Outcome", "WorkerPool"]

#: Seconds a fresh child may take to start and run the initializer before it counts as failed.
START_TIMEOUT = 120.0
#: Seconds between SIGTERM and SIGKILL when a child is killed.
KILL_GRACE = 0.5
#: Consecutive failed starts after which the items still waiting are answered with an error.
START_ATTEMPTS = 3
#: How much of a child's stderr is kept for the message of a crash, and when the file is emptied.
STDERR_TAIL = 2000
STDERR_KEEP = 1 << 20
STATUSES = ("ok", "error", "crashed", "timeout")


@dataclass(frozen=True)
class Outcome:
    """The result of one item of :meth:`WorkerPool.map`.

    :ivar status: ``"ok"``, ``"error"`` (``fn`` raised), ``"crashed"`` (the child died) or
        ``"timeout"`` (no answer in time; the child was killed).
    :ivar value: ``fn``'s return value when ``"ok"``, else ``None``.
    :ivar error: what went wrong, e.g. ``"ValueError: bad tile (at helpers.py:12 in compile_fn)"``,
        ``"exit code -11 (SIGSEGV)"`` followed by the child's last stderr lines, or
        ``"no answer within 5.0 s"``; empty when ``"ok"``.
    """

    status: str
    value: object = None
    error: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Outcome.status must be one of {STATUSES}, got {self.status!r}")


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"exit code {returncode} ({signal.Signals(-returncode).name})"
        except ValueError:
            return f"exit code {returncode}"
    return f"exit code {returncode}"


class _Child:
    """One child process: its pipes, its captured stderr, and what it is doing."""

    def __init__(self, env: Mapping[str, str], init_frame: bytes) -> None:
        self.stderr = tempfile.TemporaryFile()
        fd = self.stderr.fileno()
        # Appending: the file can be emptied between items while the child keeps its descriptor.
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tcjit.genetic.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=dict(env),
            start_new_session=True,
            bufsize=0,
        )
        self.out = self.proc.stdout.fileno()
        os.set_blocking(self.out, False)
        self.buffer = bytearray()
        self.state = "starting"  # -> "idle" <-> "busy"; "dead" once reaped
        self.since = time.monotonic()
        self.item: int | None = None
        self.send(init_frame)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, payload: bytes) -> None:
        """Write one frame; BrokenPipeError if the child is gone."""
        view = memoryview(HEADER.pack(len(payload)) + payload)
        fd = self.proc.stdin.fileno()
        while view:
            view = view[os.write(fd, view) :]

    def receive(self) -> tuple[list[bytes], bool]:
        """The complete frames readable now, and whether the child closed its end (it died)."""
        eof = False
        while True:
            try:
                chunk = os.read(self.out, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                eof = True
                break
            self.buffer += chunk
        frames = []
        while len(self.buffer) >= HEADER.size:
            (n,) = HEADER.unpack_from(self.buffer)
            if len(self.buffer) < HEADER.size + n:
                break
            frames.append(bytes(self.buffer[HEADER.size : HEADER.size + n]))
            del self.buffer[: HEADER.size + n]
        return frames, eof

    def stderr_tail(self) -> str:
        """The last lines the child wrote to stderr."""
        fd = self.stderr.fileno()
        size = os.fstat(fd).st_size
        data = os.pread(fd, STDERR_TAIL, max(0, size - STDERR_TAIL))
        lines = data.decode("utf-8", "replace").strip().splitlines()
        return "\n".join(lines[1:] if size > STDERR_TAIL and len(lines) > 1 else lines)

    def trim_stderr(self) -> None:
        if os.fstat(self.stderr.fileno()).st_size > STDERR_KEEP:
            os.ftruncate(self.stderr.fileno(), 0)

    def _exited(self, wait: float) -> bool:
        """Whether the child has exited, waiting up to ``wait`` seconds, without reaping it: its
        process group id stays reserved, so killing the group cannot hit an unrelated process."""
        end = time.monotonic() + wait
        while True:
            try:
                info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return True
            if info is not None:
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.01)

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def stop(self, *, grace: float) -> int:
        """End the child and everything it started; reap it; return its exit code.

        SIGTERM to its process group, SIGKILL after ``grace`` seconds (at once for a child stuck
        in C code that ignores SIGTERM). ``grace == 0`` skips the SIGTERM.
        """
        if self.state == "dead":
            return self.proc.returncode
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        if grace > 0 and not self._exited(0):
            self._signal_group(signal.SIGTERM)
            self._exited(grace)
        self._signal_group(signal.SIGKILL)  # also what the child started, if the child is gone
        returncode = self.proc.wait()
        self.proc.stdout.close()
        self.stderr.close()
        self.state = "dead"
        return returncode

    def close(self) -> None:
        """End an idle child: closing stdin makes it exit; killed if it has not after a moment."""
        if self.state == "dead":
            return
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        self._exited(KILL_GRACE)
        self.stop(grace=0)


def _close_children(children: list[_Child]) -> None:
    """Close every child (the pool's finalizer: close(), garbage collection, interpreter exit)."""
    for child in children:
        with contextlib.suppress(OSError):
            child.proc.stdin.close()
    for child in children:
        child.close()
    children.clear()


class WorkerPool:
    """A fixed number of worker processes that run picklable functions, robustly.

    :arg workers: how many children run items at once (>= 1). They start now, in the background.
    :arg initializer: called as ``initializer(*initargs)`` once in every fresh child, replacements
        included (e.g. to import torch or pin threads); a top-level function of an importable
        module. If it fails three times in a row, the items still waiting answer ``"error"``.
    :arg env: extra environment variables for the children, e.g. ``{"OMP_NUM_THREADS": "1"}``.

    A context manager; :meth:`close` also runs when the pool is garbage-collected and at
    interpreter exit. Children exit by themselves when the parent process dies.
    """

    def __init__(
        self,
        workers: int,
        *,
        initializer: Callable[..., Any] | None = None,
        initargs: tuple[Any, ...] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise TCOptionsError(f"WorkerPool workers: must be an integer >= 1, got {workers!r}")
        if initializer is not None:
            _check_importable(initializer, "initializer")
        self._size = workers
        self._env = {**os.environ, **(env or {})}
        blob = pickle.dumps((initializer, tuple(initargs)))
        self._init_frame = pickle.dumps(("init", list(sys.path), blob))
        self._children: list[_Child] = []
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_children, self._children)
        for _ in range(workers):
            self._spawn()

    @property
    def workers(self) -> int:
        """How many children run items at once."""
        return self._size

    @property
    def pids(self) -> tuple[int, ...]:
        """The process ids of the live children (for diagnostics and tests)."""
        return tuple(c.pid for c in self._children)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every child and reap it. Idempotent."""
        self._closed = True
        for child in self._children:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(child.out)
        self._finalizer()
        self._selector.close()

    def _spawn(self) -> _Child:
        child = _Child(self._env, self._init_frame)
        self._children.append(child)
        self._selector.register(child.out, selectors.EVENT_READ, child)
        return child

    def _remove(self, child: _Child, *, grace: float = 0.0) -> int:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(child.out)
        self._children.remove(child)
        return child.stop(grace=grace)

    def map(
        self, fn: Callable[[Any], Any], items: Sequence[Any], *, timeout: float | None = None
    ) -> list[Outcome]:
        """``fn(item)`` for every item, spread over the children; one :class:`Outcome` per item,
        in item order.

        :arg timeout: seconds an item may run, from when it is handed to a child; then that child
            is killed and replaced and the item is ``"timeout"``. ``None``: no limit.

        A KeyboardInterrupt (or any exception) raised here kills the children that were running
        an item or starting, reaps them, and propagates; the idle children stay for the next call.
        """
        if self._closed:
            raise TCCallError("WorkerPool.map: the pool is closed")
        if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
            raise TCOptionsError(f"WorkerPool.map timeout: must be a number > 0 or None, got {timeout!r}")
        _check_importable(fn, "fn")
        items = list(items)
        results: list[Outcome | None] = [None] * len(items)
        with self._lock:
            try:
                self._run(fn, items, timeout, results)
            except BaseException:
                for child in list(self._children):
                    if child.state in ("busy", "starting"):
                        self._remove(child)
                raise
        return results  # type: ignore[return-value]  # every slot is filled by _run

    def _run(self, fn: Callable[[Any], Any], items: list[Any], timeout: float | None, results: list) -> None:
        pending = deque(range(len(items)))
        failed_starts = 0

        def start_failed(reason: str) -> None:
            nonlocal failed_starts
            failed_starts += 1
            if failed_starts >= START_ATTEMPTS:
                while pending:
                    results[pending.popleft()] = Outcome("error", error=f"worker could not start: {reason}")

        while pending or any(c.state in ("busy", "starting") for c in self._children):
            takers = sum(c.state in ("idle", "starting") for c in self._children)
            while len(pending) > takers and len(self._children) < self._size:
                self._spawn()  # a replacement, or the pool's first children after a failed start
                takers += 1
            for child in [c for c in self._children if c.state == "idle"]:
                if not pending:
                    break
                index = pending.popleft()
                try:
                    payload = pickle.dumps((fn, items[index]), protocol=pickle.HIGHEST_PROTOCOL)
                except Exception as e:
                    results[index] = Outcome("error", error=f"cannot send the item: {type(e).__name__}: {e}")
                    continue
                try:
                    child.send(payload)
                except OSError:  # died while idle: not this item's fault
                    pending.appendleft(index)
                    self._remove(child)
                    continue
                child.state, child.item, child.since = "busy", index, time.monotonic()

            now = time.monotonic()
            waits = [c.since + START_TIMEOUT - now for c in self._children if c.state == "starting"]
            if timeout is not None:
                waits += [c.since + timeout - now for c in self._children if c.state == "busy"]
            wait = max(0.0, min(waits)) if waits else None
            if wait is None and not any(c.state in ("busy", "starting") for c in self._children):
                continue  # nothing running: dispatch again (children were replaced above)
            for key, _ in self._selector.select(wait):
                child: _Child = key.data
                frames, eof = child.receive()
                for frame in frames:
                    try:
                        kind, value = pickle.loads(frame)
                    except Exception as e:
                        kind, value = "error", f"cannot read the answer: {type(e).__name__}: {e}"
                    if child.state == "starting":
                        if kind == "ready":
                            child.state, failed_starts = "idle", 0
                        else:
                            self._remove(child)
                            start_failed(f"initializer failed: {value}")
                            break
                    elif child.state == "busy":
                        results[child.item] = (
                            Outcome("ok", value) if kind == "ok" else Outcome("error", error=value)
                        )
                        child.state, child.item = "idle", None
                        child.trim_stderr()
                if eof and child.state != "dead":
                    tail = child.stderr_tail()
                    was, item = child.state, child.item
                    text = _exit_text(self._remove(child, grace=KILL_GRACE))
                    text += f"\n{tail}" if tail else ""
                    if was == "busy":
                        results[item] = Outcome("crashed", error=text)
                    elif was == "starting":
                        start_failed(text)

            now = time.monotonic()
            for child in list(self._children):
                if child.state == "busy" and timeout is not None and now - child.since >= timeout:
                    results[child.item] = Outcome("timeout", error=f"no answer within {timeout:g} s")
                    self._remove(child, grace=KILL_GRACE)
                elif child.state == "starting" and now - child.since >= START_TIMEOUT:
                    self._remove(child)
                    start_failed(f"no answer to the start within {START_TIMEOUT:g} s")


def _check_importable(fn: object, what: str) -> None:
    """Refuse a function a child could only find by running the user's ``__main__`` again."""
    if getattr(fn, "__module__", None) == "__main__":
        raise TCCallError(
            f"WorkerPool {what}: {getattr(fn, '__qualname__', fn)!r} is defined in __main__, which "
            "worker processes do not import (they never run the user's script again)",
            hint="move it into a module that the script imports",
        )
