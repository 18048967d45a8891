"""The process behind each worker of :class:`tcjit.genetic.workers.WorkerPool`.

Started as ``python -m tcjit.genetic.worker`` (never by :mod:`multiprocessing`, so the user's
``__main__`` script is never executed again here). It talks to the pool over its stdin and stdout
in frames: an 8-byte big-endian length, then that many bytes of pickle.

1. pool -> worker: ``("init", sys_path, blob)``; the worker sets ``sys.path`` to the parent's, then
   unpickles ``blob`` as ``(initializer, initargs)`` and runs ``initializer(*initargs)``.
   worker -> pool: ``("ready", pid)``, or ``("init-failed", message)`` and the worker exits.
2. pool -> worker: a pickled ``(fn, item)``; worker -> pool: ``("ok", fn(item))`` or
   ``("error", message)``. Repeated until stdin closes (the pool closed, or its process died).

The protocol runs on private duplicates of fds 0 and 1: fd 0 then reads ``/dev/null`` and fd 1
writes to fd 2, so whatever ``fn`` or a compiler it starts prints cannot corrupt a frame. The pool
captures fd 2 and keeps its last lines for the message of a crash; :mod:`faulthandler` writes the
Python stack there when the worker dies of a signal.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import sys
import threading
import time

from .protocol import describe, read_frame, write_frame

__all__ = ["main"]


def _watch_parent(parent: int) -> None:
    """Exit when the pool's process is gone, even while ``fn`` runs (stdin's EOF is read only between
    items). Polls, since ``PR_SET_PDEATHSIG`` fires when the parent *thread* ends."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(70)


def main() -> None:
    """Serve frames from stdin until it closes."""
    # The pool started this process in its own session, so a terminal's Ctrl-C reaches only the
    # pool, which decides what to kill; ignoring SIGINT here also covers a signal sent to the group.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    faulthandler.enable(all_threads=False)  # the stack of the thread that crashed, not the watchdog
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()

    frame = read_frame(proto_in)
    if frame is None:
        return
    _, path, blob = pickle.loads(frame)
    sys.path[:] = path
    try:
        initializer, initargs = pickle.loads(blob)
        if initializer is not None:
            initializer(*initargs)
    except BaseException as e:  # a failing initializer is reported, whatever it raised
        write_frame(proto_out, pickle.dumps(("init-failed", describe(e))))
        sys.exit(1)
    write_frame(proto_out, pickle.dumps(("ready", os.getpid())))

    while (frame := read_frame(proto_in)) is not None:
        try:
            fn, item = pickle.loads(frame)
            payload = pickle.dumps(("ok", fn(item)), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as e:  # SystemExit from fn fails that item only
            payload = pickle.dumps(("error", describe(e)))
        sys.stdout.flush()
        write_frame(proto_out, payload)


if __name__ == "__main__":
    main()
