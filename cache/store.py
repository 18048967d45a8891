"""The on-disk store of compiled kernels: one directory per cache key, shared by a user's processes.

Layout under the root (``TCJIT_CACHE_DIR``; the runtime picks it and computes the key)::

    root/lock                  flock: eviction, clearing and the removal of corrupt entries
    root/tmp/put-*             entries being written (a crashed writer's are deleted after an hour)
    root/tmp/del-*             entries being deleted
    root/v{FORMAT_VERSION}/…   the entries (format in :mod:`tcjit.cache.entry`)

Writers build an entry in ``root/tmp`` and make it visible with one ``os.rename`` of the complete,
fsynced directory, so readers see all of it or nothing and take no lock. The rename fails if the
entry exists: the first writer wins and the others return its entry. Entries disappear only by a
rename into ``root/tmp`` made under the exclusive lock, and a corrupt entry is re-checked under that
lock before it goes, so no process removes an entry that another has just put in place of a corrupt
one. A reader whose entry is evicted under it gets a miss.

Nothing another user could have written is used (:mod:`tcjit.cache.trust`). On every read the
folders above the root are checked, then the root, the version and prefix folders, the entry and
each of its files are opened one name at a time from the one above, without following links, and
checked on the open descriptor: owned by this user and writable by nobody else. A root that fails
is not used at all (a warning, once per store; :meth:`KernelStore.put` raises); a folder or file
inside it that fails makes the entry corrupt, and it is removed. Removal and the clean-up of
``root/tmp`` work on descriptors too and never follow a link out of the root. The store never
changes the mode of a folder it did not create.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import shutil
import stat
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

from tcjit.polyhedral.errors import TCError, TCWarning

from .entry import (
    FORMAT_VERSION,
    Entry,
    StoredEntry,
    describe_entry,
    entry_location,
    make_entry,
    prepare_put,
    read_entry,
    record_access,
    write_entry,
)
from .trust import UntrustedError, ancestors_problem, check_fd, open_checked, trust_problem

__all__ = ["FORMAT_VERSION", "Entry", "KernelStore", "StoredEntry"]

_STALE_SECONDS = 3600  # a put- directory untouched this long belongs to a writer that died
_RESCAN_SECONDS = 60  # how long put trusts its running estimate of the store's size
_INSTALL_ATTEMPTS = 5
_VERSION_DIR = re.compile(r"v\d+")
_NO_FOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_log = logging.getLogger(__name__)


class KernelStore:
    """A size-capped directory of compiled kernels, safe to share between processes of one user.

    Constructing a store only checks an existing root; the first :meth:`put` creates the directories
    (mode 0700). :meth:`get` never raises on a corrupt, missing, unreadable or untrusted cache (an
    untrusted root costs one :class:`TCWarning`); :meth:`put`, :meth:`clear` and :meth:`evict` raise
    :class:`TCError` when the root cannot be created, written or trusted, which the runtime reports
    as a warning before running uncached.

    :ivar root: the store's root directory (absolute).
    :ivar max_bytes: the size cap, in bytes of file content (manifests included).
    """

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int = 2 << 30) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.root = Path(os.path.abspath(os.fspath(root)))
        self.max_bytes = max_bytes
        self._estimate: tuple[int, float] | None = None  # (bytes, time.monotonic() of the last scan)
        self._warned: set[str] = set()
        self._check_root()

    # ------------------------------------------------------------------------------------ reading
    def get(self, key: str) -> Entry | None:
        """The valid entry stored under ``key``, or ``None`` on a miss.

        A corrupt entry (unparsable manifest, another format version, a manifest that does not
        match its digest, a missing, truncated or altered file, a folder or file that another user
        owns or that others can write) or a foreign one (its manifest names another key) is removed
        and reported as a miss. A hit records the access for least-recently-used eviction.
        """
        found = self._verify(key)
        if isinstance(found, tuple):
            found = self._remove_if_corrupt(key, *found)
        if found is not None:
            record_access(found.directory)
        return found

    def _verify(self, key: str) -> Entry | tuple[str, Path] | None:
        """The entry under ``key``; ``(why, what to remove)`` if it is corrupt; ``None`` if absent.

        Walks down from the root one name at a time (see the module's docstring).
        """
        directory = entry_location(self.root, key)
        with contextlib.ExitStack() as fds:
            try:
                fd = self._open_root()
            except FileNotFoundError:
                return None
            except (UntrustedError, OSError) as err:
                self._warn_once(f"the kernel cache {self.root} is not used: {_reason(err)}")
                return None
            fds.callback(os.close, fd)
            path = self.root
            for name in directory.relative_to(self.root).parts:
                path = path / name
                try:
                    fd = open_checked(name, fd, directory=True)
                except FileNotFoundError:
                    return None
                except (UntrustedError, OSError) as err:
                    return _reason(err), path
                fds.callback(os.close, fd)
            found = read_entry(fd, directory, key)
            return (found, directory) if isinstance(found, str) else found

    def entries(self) -> list[StoredEntry]:
        """Every entry of the store, of every format version: the valid ones most recently used
        first, then the others: what ``tcjit cache list --kernels`` shows. Nothing is loaded,
        removed or touched (not even the last access).

        Walks down from the root one name at a time as :meth:`get` does, without following links
        and checking each folder and file on its descriptor: a folder or entry that another user
        owns or can write is listed with that problem, and nothing in it is read.

        :raises TCError: the root cannot be trusted or read.
        """
        found: list[StoredEntry] = []
        if not os.path.lexists(self.root):
            return found
        with self._io_errors("list entries"), contextlib.ExitStack() as fds:
            root_fd = self._open_root()
            fds.callback(os.close, root_fd)
            for level in sorted(n for n in os.listdir(root_fd) if _VERSION_DIR.fullmatch(n)):
                self._describe_level(root_fd, self.root / level, found)
        return sorted(found, key=lambda e: (e.problem is not None, -e.accessed))

    def _describe_level(self, root_fd: int, level: Path, found: list[StoredEntry]) -> None:
        """Add the entries under the version folder ``level`` (open relative to ``root_fd``)."""

        def opened(name: str, dir_fd: int, path: Path) -> int | None:
            try:
                return open_checked(name, dir_fd, directory=True)
            except FileNotFoundError:  # removed meanwhile
                return None
            except (UntrustedError, OSError) as err:
                found.append(StoredEntry(path, None, 0, None, 0.0, _reason(err)))
                return None

        with contextlib.ExitStack() as fds:
            level_fd = opened(level.name, root_fd, level)
            if level_fd is None:
                return
            fds.callback(os.close, level_fd)
            for prefix in sorted(os.listdir(level_fd)):
                prefix_fd = opened(prefix, level_fd, level / prefix)
                if prefix_fd is None:
                    continue
                try:
                    for name in sorted(os.listdir(prefix_fd)):
                        entry_fd = opened(name, prefix_fd, level / prefix / name)
                        if entry_fd is not None:
                            try:
                                found.append(describe_entry(entry_fd, level / prefix / name, self.root))
                            finally:
                                os.close(entry_fd)
                finally:
                    os.close(prefix_fd)

    def total_bytes(self) -> int:
        """Bytes of file content in all entries, of every format version (temporaries excluded)."""
        return sum(size for _, _, size in self._scan())

    # ------------------------------------------------------------------------------------ writing
    def put(
        self, key: str, files: Mapping[str, bytes], metadata: Mapping[str, object] | None = None
    ) -> Entry:
        """Store ``files`` (name -> content) and JSON ``metadata`` under ``key``; return the entry.

        A key names one artefact: if a valid entry for ``key`` exists (another process stored it
        first), that entry is kept and returned and ``files`` are discarded. When the store may have
        grown past ``max_bytes``, least recently used entries are evicted down to 90 % of the cap
        (never the entry just stored), so that a full store does not rescan on every put.

        :raises TCError: the root cannot be created, written or trusted.
        :raises ValueError: a file name is invalid (see :func:`~tcjit.cache.entry.prepare_put`).
        :raises TypeError: a content is not bytes, or the metadata is not JSON.
        """
        final = entry_location(self.root, key)
        blobs, meta = prepare_put(files, metadata)
        existing = self.get(key)
        if existing is not None:
            return existing
        with self._io_errors("store an entry"), contextlib.ExitStack() as fds:
            root_fd = self._prepare_root()
            fds.callback(os.close, root_fd)
            tmp_fd = _make_dir("tmp", root_fd)
            fds.callback(os.close, tmp_fd)
            _clean_temporaries(tmp_fd)
            name = f"put-{uuid.uuid4().hex}"
            os.close(_make_dir(name, tmp_fd))  # becomes the entry's directory, mode 0700
            try:
                size = write_entry(self.root / "tmp" / name, key, blobs, meta)
                stored = self._install(root_fd, tmp_fd, name, final, key, blobs, meta)
            finally:
                _delete(name, tmp_fd)
        self._account(size, keep=stored.directory)
        return stored

    def _install(
        self, root_fd: int, tmp_fd: int, name: str, final: Path, key: str, blobs: dict, meta: dict
    ) -> Entry:
        """Rename the complete entry ``tmp/name`` to ``final``; if another put won the race, use theirs."""
        for _ in range(_INSTALL_ATTEMPTS):
            try:
                with contextlib.ExitStack() as fds:
                    level_fd = _make_dir(final.parent.parent.name, root_fd)
                    fds.callback(os.close, level_fd)
                    prefix_fd = _make_dir(final.parent.name, level_fd)
                    fds.callback(os.close, prefix_fd)
                    os.rename(name, final.name, src_dir_fd=tmp_fd, dst_dir_fd=prefix_fd)
                    os.fsync(prefix_fd)
            except FileNotFoundError:  # clear() removed the version directory meanwhile
                continue
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                theirs = self.get(key)  # if theirs is corrupt, get removes it and we retry
                if theirs is not None:
                    return theirs
                continue
            return make_entry(key, final, blobs, meta)
        raise TCError(f"could not install kernel cache entry {final}: it kept changing under other processes")

    # ----------------------------------------------------------------------------------- removing
    def clear(self) -> None:
        """Remove every entry, of every format version, and stale temporaries."""
        self._check_root()
        if not os.path.isdir(self.root):
            return
        with self._io_errors("clear entries"), self._locked():
            for level in _subdirs(self.root, _VERSION_DIR):
                self._remove(level)
            self._clean_temporaries()
        self._estimate = (0, time.monotonic())

    def evict(self) -> int:
        """Remove least recently used entries until the store holds at most ``max_bytes``.

        Entries of every format version compete: an old version's entries, unused since an upgrade,
        go first. Holds the exclusive lock on ``root/lock`` meanwhile. Returns the bytes freed.
        """
        return self._evict(self.max_bytes, keep=None)

    def _evict(self, target: int, keep: Path | None) -> int:
        self._check_root()
        if not os.path.isdir(self.root):
            return 0
        with self._io_errors("evict entries"), self._locked():
            self._clean_temporaries()
            entries = sorted(self._scan())  # oldest access first; the path breaks ties
            total = sum(size for _, _, size in entries)
            freed = 0
            for _, directory, size in entries:
                if total <= target:
                    break
                if directory != keep and self._remove(directory):
                    total -= size
                    freed += size
        self._estimate = (total, time.monotonic())
        return freed

    def _account(self, added: int, keep: Path) -> None:
        """Add a put's bytes to the running size estimate; evict when it may exceed the cap.

        Between rescans (a minute apart at most) a process counts only its own puts, so the store
        can overshoot the cap by what other processes wrote meanwhile, until one of them rescans.
        """
        if self._estimate is None or time.monotonic() - self._estimate[1] > _RESCAN_SECONDS:
            self._estimate = (self.total_bytes(), time.monotonic())
        else:
            self._estimate = (self._estimate[0] + added, self._estimate[1])
        if self._estimate[0] > self.max_bytes:
            try:
                self._evict(self.max_bytes * 9 // 10, keep=keep)
            except TCError as err:  # the entry is stored; a failed eviction must not fail the put
                _log.warning("%s", err)

    def discard(self, key: str) -> bool:
        """Remove the entry stored under ``key`` (one its user found unusable); whether one was there.

        :raises TCError: the root cannot be written or trusted.
        """
        directory = entry_location(self.root, key)
        self._check_root()  # before the lock file is made in a root that is not ours to write
        with self._io_errors("discard an entry"), self._locked():
            return self._remove(directory)

    def _remove_if_corrupt(self, key: str, reason: str, component: Path) -> Entry | None:
        """Re-check a corrupt-looking entry under the lock; remove the component at fault (the
        entry, or a folder above it) if it still is corrupt."""
        try:
            with self._locked():
                found = self._verify(key)
                if isinstance(found, tuple):
                    reason, component = found
                    _log.info("kernel cache: removing %s: %s", component, reason)
                    self._remove(component)
                    return None
                return found  # it vanished, or a valid entry replaced it meanwhile
        except (OSError, UntrustedError) as err:  # a read-only root: a miss all the same
            _log.info("kernel cache: cannot remove %s (%s): %s", component, reason, _reason(err))
            return None

    def _remove(self, path: Path) -> bool:
        """Move ``path`` (below the root) into ``root/tmp`` in one rename, then delete it.

        Every folder on the way is opened without following links, so nothing outside the root
        moves or goes. Call with the lock held.
        """
        parts = path.relative_to(self.root).parts
        with contextlib.ExitStack() as fds:
            root_fd = self._open_root()
            fds.callback(os.close, root_fd)
            tmp_fd = _make_dir("tmp", root_fd)
            fds.callback(os.close, tmp_fd)
            parent_fd = root_fd
            for name in parts[:-1]:
                try:
                    parent_fd = os.open(name, _NO_FOLLOW_DIR, dir_fd=parent_fd)
                except (FileNotFoundError, NotADirectoryError):
                    return False
                fds.callback(os.close, parent_fd)
            trash = f"del-{uuid.uuid4().hex}"
            try:
                os.rename(parts[-1], trash, src_dir_fd=parent_fd, dst_dir_fd=tmp_fd)
            except FileNotFoundError:
                return False
            _delete(trash, tmp_fd)
            return True

    def _clean_temporaries(self) -> None:
        """Delete what dead processes left in ``root/tmp`` (see :func:`_clean_temporaries`)."""
        with contextlib.ExitStack() as fds:
            root_fd = self._open_root()
            fds.callback(os.close, root_fd)
            try:
                tmp_fd = open_checked("tmp", root_fd, directory=True)
            except FileNotFoundError:
                return
            fds.callback(os.close, tmp_fd)
            _clean_temporaries(tmp_fd)

    # ----------------------------------------------------------------------------------- the root
    def _check_root(self) -> None:
        """Refuse a root that is not a directory or that another user could have written.

        Another user's directory or link could hand us a kernel of theirs to load and run.
        """
        problem = _root_problem(self.root)
        if problem:
            raise TCError(
                f"cannot use {self.root} as the kernel cache: {problem}",
                hint=_TRUST_HINT,
            )

    def _open_root(self) -> int:
        """The root, open and checked (with the folders above it); raises if it is not usable."""
        problem = _root_problem(self.root)
        if problem:
            raise UntrustedError(problem)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # a link of ours: followed
        try:
            check_fd(fd, str(self.root), directory=True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _prepare_root(self) -> int:
        """Create the root (and missing folders above it, mode 0700) if needed; the root, open."""
        self._check_root()
        if not os.path.lexists(self.root):
            _make_parents(self.root)
        return self._open_root()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the exclusive lock on ``root/lock`` (flock: released when the descriptor closes)."""
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _io_errors(self, doing: str) -> Iterator[None]:
        """Turn an ``OSError`` (permissions, full disk, ...) or an untrusted folder into a
        :class:`TCError` that says where."""
        try:
            yield
        except UntrustedError as err:
            raise TCError(f"cannot {doing} in the kernel cache {self.root}: {err}", hint=_TRUST_HINT) from err
        except OSError as err:
            raise TCError(
                f"cannot {doing} in the kernel cache {self.root}: {err.strerror or err}",
                hint="make the directory writable or point TCJIT_CACHE_DIR at another one",
            ) from err

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            warnings.warn(f"tcjit: {message}", TCWarning, stacklevel=4)

    def _scan(self) -> list[tuple[int, Path, int]]:
        """(last access in ns, directory, bytes) of every entry of every format version."""
        out = []
        for level in _subdirs(self.root, _VERSION_DIR):
            for prefix in _subdirs(level):
                for directory in _subdirs(prefix):
                    try:
                        access = os.stat(directory, follow_symlinks=False).st_mtime_ns
                        with os.scandir(directory) as it:
                            size = sum(f.stat(follow_symlinks=False).st_size for f in it)
                    except (FileNotFoundError, NotADirectoryError):  # removed meanwhile
                        continue
                    out.append((access, directory, size))
        return out


_TRUST_HINT = (
    "the kernel cache must be a folder of yours that only you can write (chmod go-w), below "
    "folders that only you or root can write; or point TCJIT_CACHE_DIR at another one"
)


def _reason(err: BaseException) -> str:
    return (err.strerror if isinstance(err, OSError) else None) or str(err)


def _root_problem(root: Path) -> str | None:
    """Why ``root`` cannot be a store's root, or ``None`` if it can (it may not exist yet)."""
    problem = ancestors_problem(root)
    if problem:
        return problem
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return "it is a dangling symbolic link" if os.path.islink(root) else None
    except OSError as err:
        return err.strerror
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    return trust_problem(st)


def _make_dir(name: str, dir_fd: int) -> int:
    """``name`` in ``dir_fd``, created with mode 0700 if missing; open (no link followed) and checked.

    Only a directory this call created has its mode set (umask may have narrowed it).
    """
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
        created = True
    except FileExistsError:
        created = False
    if created:
        fd = os.open(name, _NO_FOLLOW_DIR, dir_fd=dir_fd)
        try:
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
    return open_checked(name, dir_fd, directory=True)


def _make_parents(directory: Path) -> None:
    """Create ``directory`` and the missing folders above it, each with mode 0700 (set on the
    folders created here only: umask may have narrowed it)."""
    if os.path.lexists(directory):
        return
    _make_parents(directory.parent)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        return
    fd = os.open(directory, _NO_FOLLOW_DIR)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _delete(name: str, dir_fd: int) -> None:
    """Delete ``name`` in ``dir_fd`` and, if it is a directory, all it holds; never follows a link."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)


def _clean_temporaries(tmp_fd: int) -> None:
    """Delete what dead processes left in the open ``root/tmp``: all del-*, and put-* older than an hour."""
    with os.scandir(tmp_fd) as it:
        children = list(it)
    now = time.time()
    for child in children:
        try:
            age = now - child.stat(follow_symlinks=False).st_mtime
        except FileNotFoundError:
            continue
        if child.name.startswith("del-") or age > _STALE_SECONDS:
            _delete(child.name, tmp_fd)


def _subdirs(path: Path, pattern: re.Pattern[str] | None = None) -> list[Path]:
    """Real (not linked) subdirectories of ``path`` whose names match ``pattern``; [] if it is gone."""
    try:
        with os.scandir(path) as it:
            children = [c for c in it if c.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [Path(c.path) for c in children if pattern is None or pattern.fullmatch(c.name)]
