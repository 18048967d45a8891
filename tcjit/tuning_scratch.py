"""Scratch folders of tuning runs, and the clean-up of those whose run died.

A tuning run keeps its pickled context (the kernel and the inputs) and its workers' kernel cache in
a folder ``tcjit-tune-*`` of ``TMPDIR``, removed when the run ends. A run killed with ``SIGKILL``
cannot remove it, so each run first removes what dead runs left: the run that owns a folder holds
an exclusive ``flock`` on its ``lock`` file as long as it lives, and the kernel releases that lock
when the process dies, however it dies. A folder of this user whose lock can be taken belongs to
a dead run; so does one without a lock file (a run killed before it made one) that has not changed
for an hour. Another user's folders and anything that is not a real directory are left alone, and
nothing is followed through a link.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator

__all__ = ["PREFIX", "remove_dead_scratch", "scratch_folder"]

PREFIX = "tcjit-tune-"
"""The name every scratch folder starts with."""

_LOCK = "lock"
_STALE_SECONDS = 3600  # a folder without a lock, untouched this long, belongs to a dead run


@contextlib.contextmanager
def scratch_folder() -> Iterator[str]:
    """A new private (0700) scratch folder in ``TMPDIR`` for one tuning run, locked while in use
    and removed at the end; the folders of dead runs are removed first.

    >>> with scratch_folder() as scratch:
    ...     context_path = os.path.join(scratch, "context.pt")
    """
    parent = tempfile.gettempdir()
    remove_dead_scratch(parent)
    path = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    try:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(os.path.join(path, _LOCK), flags, 0o600)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)  # unlocked last: no other run removes the folder while this one still uses it


def remove_dead_scratch(parent: str) -> list[str]:
    """Remove the scratch folders in ``parent`` whose tuning run died (see the module's
    docstring); the names removed. Never raises: what cannot be examined is left alone."""
    try:
        dir_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []
    removed = []
    try:
        with os.scandir(dir_fd) as it:
            names = [entry.name for entry in it if entry.name.startswith(PREFIX)]
        for name in names:
            if _belongs_to_a_dead_run(name, dir_fd):
                shutil.rmtree(name, dir_fd=dir_fd, ignore_errors=True)
                removed.append(name)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return removed


def _belongs_to_a_dead_run(name: str, dir_fd: int) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return False
    try:
        folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        lock = os.open(_LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except FileNotFoundError:
        return time.time() - st.st_mtime > _STALE_SECONDS
    except OSError:
        return False
    finally:
        os.close(folder)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its run is alive
        return False
    finally:
        os.close(lock)
    return True
