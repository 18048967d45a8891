"""Which files the kernel store may load code from: those no other user can have written.

The store loads native code, so whoever can write into it can run code as its user. A directory
or file is *trusted* when this user owns it and neither group nor others may write it
(:func:`trust_problem`). The folders that lead to the store's root must also be safe from other
users (:func:`ancestors_problem`), as OpenSSH's ``StrictModes`` asks of ``~/.ssh``: each is owned
by this user or by root and is writable by nobody else, unless it is sticky (``/tmp``), where
others may add names but not rename or remove ours. Symbolic links on the way to the root are
followed only when this user or root owns them.

Every check reads a ``stat`` result through :func:`owner_and_mode`, the one place that says who
owns a file and what its mode is: tests replace it (``monkeypatch.setattr``) to pretend that a
given file belongs to another user, without needing root.

Inside the root nothing is reached by a path that could lead elsewhere: :func:`open_checked` opens
one name relative to an open directory without following a link, checks the descriptor it got and
returns it, so that what was checked is what is read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = [
    "UntrustedError",
    "ancestors_problem",
    "check_fd",
    "open_checked",
    "owner_and_mode",
    "trust_problem",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted in an entry must fail the check, not hang the reader.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UntrustedError(Exception):
    """A file or directory of the store another user could have written; the message says why.

    Internal to the cache layer: the store turns it into a miss, a warning or a :class:`TCError`.
    """


def owner_and_mode(st: os.stat_result) -> tuple[int, int]:
    """The owner's uid and the ``st_mode`` of a ``stat`` result: what every trust check reads.

    Tests replace this function to make a chosen file (matched by ``st_ino``) look as if another
    user owned it or as if group and others could write it.
    """
    return st.st_uid, st.st_mode


def trust_problem(st: os.stat_result) -> str | None:
    """Why the store must not trust the file or directory of ``st``, or ``None`` if it may.

    Trusted: owned by the effective user, writable by neither group nor others.
    """
    uid, mode = owner_and_mode(st)
    me = os.geteuid()
    if uid != me:
        return f"it is owned by uid {uid}, not you ({me})"
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"group or others can write it (mode {stat.S_IMODE(mode):04o})"
    return None


def ancestors_problem(path: Path) -> str | None:
    """Why the folders leading to ``path`` (not ``path`` itself) are unsafe, or ``None``.

    Checks every symbolic link met on the way (owned by this user or root) and every directory
    above the place each name resolves to: owned by this user or root, and not writable by group or
    others unless sticky. Names that do not exist yet are fine (they will be created by this user).
    """
    me = os.geteuid()
    checked: set[Path] = set()
    path = Path(os.path.abspath(path))
    prefixes = [path, *path.parents][::-1]  # "/" first, ``path`` last
    for prefix in prefixes[1:]:
        # the directory that holds ``prefix``, and everything above it, as they really are
        problem = _chain_problem(Path(os.path.realpath(prefix.parent)), me, checked)
        if problem:
            return problem
        try:
            link = os.lstat(prefix)
        except FileNotFoundError:
            return None
        except OSError as err:
            return f"cannot examine {prefix}: {err.strerror}"
        if stat.S_ISLNK(link.st_mode):
            uid, _ = owner_and_mode(link)
            if uid not in (me, 0):
                return f"{prefix} is a symbolic link owned by uid {uid}, not you ({me}) nor root"
    # where ``path`` itself leads, if it is a link
    return _chain_problem(Path(os.path.realpath(path)).parent, me, checked)


def _chain_problem(directory: Path, me: int, checked: set[Path]) -> str | None:
    """Why ``directory`` (a resolved path) or one above it is unsafe for the store; memoised."""
    for folder in [directory, *directory.parents]:
        if folder in checked:
            return None  # it and everything above it were checked already
        try:
            st = os.lstat(folder)
        except OSError as err:
            return f"cannot examine {folder}: {err.strerror}"
        uid, mode = owner_and_mode(st)
        if uid not in (me, 0):
            return f"the folder {folder} above it is owned by uid {uid}, not you ({me}) nor root"
        if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
            return (
                f"the folder {folder} above it can be written by group or others "
                f"(mode {stat.S_IMODE(mode):04o}, not sticky)"
            )
        checked.add(folder)
    return None


def open_checked(name: str, dir_fd: int, *, directory: bool) -> int:
    """Open ``name`` in the directory ``dir_fd`` without following a link; the checked descriptor.

    :arg directory: whether ``name`` must be a directory (else a regular file).
    :raises UntrustedError: it is not of that kind (a link, a FIFO, ...) or not trusted.
    :raises OSError: it cannot be opened (``FileNotFoundError`` if it is missing).
    """
    try:
        fd = os.open(name, _DIR_FLAGS if directory else _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UntrustedError(f"{name} is a symbolic link") from err
        raise
    try:
        check_fd(fd, name, directory=directory)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_fd(fd: int, name: str, *, directory: bool) -> None:
    """Raise :class:`UntrustedError` unless the open ``fd`` is a trusted directory or regular file."""
    st = os.fstat(fd)
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not kind_ok:
        raise UntrustedError(f"{name} is not a {'directory' if directory else 'regular file'}")
    problem = trust_problem(st)
    if problem:
        raise UntrustedError(f"{name}: {problem}")
