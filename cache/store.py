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
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from tcjit.polyhedral.errors import TCError

from .entry import (
    FORMAT_VERSION,
    Entry,
    entry_location,
    fsync_dir,
    make_entry,
    prepare_put,
    record_access,
    verify_entry,
    write_entry,
)

__all__ = ["FORMAT_VERSION", "Entry", "KernelStore"]

_STALE_SECONDS = 3600  # a put- directory untouched this long belongs to a writer that died
_RESCAN_SECONDS = 60  # how long put trusts its running estimate of the store's size
_INSTALL_ATTEMPTS = 5
_VERSION_DIR = re.compile(r"v\d+")
_log = logging.getLogger(__name__)


class KernelStore:
    """A size-capped directory of compiled kernels, safe to share between processes of one user.

    Constructing a store only checks an existing root; the first :meth:`put` creates the directories
    (mode 0700). :meth:`get` never raises on a corrupt, missing or unreadable cache; :meth:`put`,
    :meth:`clear` and :meth:`evict` raise :class:`TCError` when the root cannot be created or written,
    which the runtime reports as a warning before running uncached.

    :ivar root: the store's root directory (absolute).
    :ivar max_bytes: the size cap, in bytes of file content (manifests included).
    """

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int = 2 << 30) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.root = Path(os.path.abspath(os.fspath(root)))
        self.max_bytes = max_bytes
        self._estimate: tuple[int, float] | None = None  # (bytes, time.monotonic() of the last scan)
        self._check_root()

    # ------------------------------------------------------------------------------------ reading
    def get(self, key: str) -> Entry | None:
        """The valid entry stored under ``key``, or ``None`` on a miss.

        A corrupt entry (unparsable manifest, another format version, a missing, truncated or
        altered file) or a foreign one (its manifest names another key) is removed and reported as
        a miss. A hit records the access for least-recently-used eviction.
        """
        directory = entry_location(self.root, key)
        found = verify_entry(directory, key)
        if isinstance(found, str):
            found = self._remove_if_corrupt(directory, key, found)
        if found is not None:
            record_access(directory)
        return found

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

        :raises TCError: the root cannot be created or written.
        :raises ValueError: a file name is invalid (see :func:`~tcjit.cache.entry.prepare_put`).
        :raises TypeError: a content is not bytes, or the metadata is not JSON.
        """
        final = entry_location(self.root, key)
        blobs, meta = prepare_put(files, metadata)
        existing = self.get(key)
        if existing is not None:
            return existing
        with self._io_errors("store an entry"):
            self._prepare_root()
            _mkdir(final.parent.parent, final.parent)
            self._clean_temporaries()
            tmp = Path(tempfile.mkdtemp(prefix="put-", dir=self.root / "tmp"))
            try:
                os.chmod(tmp, 0o700)  # becomes the entry's directory; umask may have narrowed it
                size = write_entry(tmp, key, blobs, meta)
                stored = self._install(tmp, final, key, list(blobs), meta)
            finally:
                if os.path.lexists(tmp):
                    shutil.rmtree(tmp, ignore_errors=True)
        self._account(size, keep=stored.directory)
        return stored

    def _install(self, tmp: Path, final: Path, key: str, names: list[str], meta: dict) -> Entry:
        """Rename the complete entry ``tmp`` to ``final``; if another put won the race, use theirs."""
        for _ in range(_INSTALL_ATTEMPTS):
            try:
                os.rename(tmp, final)
            except FileNotFoundError:  # clear() removed the version directory meanwhile
                _mkdir(final.parent.parent, final.parent)
                continue
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                theirs = self.get(key)  # if theirs is corrupt, get removes it and we retry
                if theirs is not None:
                    return theirs
                continue
            fsync_dir(final.parent)
            return make_entry(key, final, names, meta)
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

        :raises TCError: the root cannot be written.
        """
        directory = entry_location(self.root, key)
        with self._io_errors("discard an entry"), self._locked():
            return self._remove(directory)

    def _remove_if_corrupt(self, directory: Path, key: str, reason: str) -> Entry | None:
        """Re-check a corrupt-looking entry under the lock; remove it if it still is corrupt."""
        try:
            with self._locked():
                found = verify_entry(directory, key)
                if isinstance(found, str):
                    _log.info("kernel cache: removing %s: %s", directory, found)
                    self._remove(directory)
                    return None
                return found  # it vanished, or a valid entry replaced it meanwhile
        except OSError as err:  # a read-only root: a miss all the same
            _log.info("kernel cache: cannot remove %s (%s): %s", directory, reason, err)
            return None

    def _remove(self, path: Path) -> bool:
        """Move ``path`` out of sight in one rename, then delete it. Call with the lock held."""
        _mkdir(self.root / "tmp")
        trash = self.root / "tmp" / f"del-{uuid.uuid4().hex}"
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            return False
        if os.path.islink(trash):
            os.unlink(trash)
        else:
            shutil.rmtree(trash, ignore_errors=True)
        return True

    def _clean_temporaries(self) -> None:
        """Delete what dead processes left in ``root/tmp``: all del-*, and put-* older than an hour."""
        try:
            with os.scandir(self.root / "tmp") as it:
                children = list(it)
        except (FileNotFoundError, NotADirectoryError):
            return
        now = time.time()
        for child in children:
            try:
                age = now - child.stat(follow_symlinks=False).st_mtime
            except FileNotFoundError:
                continue
            if child.name.startswith("del-") or age > _STALE_SECONDS:
                shutil.rmtree(child.path, ignore_errors=True)

    # ----------------------------------------------------------------------------------- the root
    def _check_root(self) -> None:
        """Refuse a root that is not a directory, or that another user owns or links to.

        Another user's directory or link could hand us a kernel of theirs to load and run.
        """
        problem = _root_problem(self.root)
        if problem:
            raise TCError(f"cannot use {self.root} as the kernel cache: {problem}")

    def _prepare_root(self) -> None:
        """Create the root (0700) and ``root/tmp`` if needed; take group and other access away."""
        self._check_root()
        if not os.path.lexists(self.root):
            os.makedirs(self.root.parent, exist_ok=True)
            _mkdir(self.root)
        mode = os.stat(self.root).st_mode
        if mode & 0o077:  # narrow only: a root the user made read-only stays read-only
            os.chmod(self.root, stat.S_IMODE(mode) & 0o700)
        _mkdir(self.root / "tmp")

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
        """Turn an ``OSError`` (permissions, full disk, ...) into a :class:`TCError` that says where."""
        try:
            yield
        except OSError as err:
            raise TCError(
                f"cannot {doing} in the kernel cache {self.root}: {err.strerror or err}",
                hint="make the directory writable or point TCJIT_CACHE_DIR at another one",
            ) from err

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


def _root_problem(root: Path) -> str | None:
    """Why ``root`` cannot be a store's root, or ``None`` if it can (it may not exist yet)."""
    me = os.geteuid()
    try:
        link = os.lstat(root)
        if stat.S_ISLNK(link.st_mode) and link.st_uid != me:
            return f"it is a symbolic link owned by uid {link.st_uid}, not you ({me})"
        st = os.stat(root)
    except FileNotFoundError:
        return "it is a dangling symbolic link" if os.path.islink(root) else None
    except OSError as err:
        return err.strerror
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != me:
        return f"it is owned by uid {st.st_uid}, not you ({me})"
    return None


def _mkdir(*paths: Path) -> None:
    """Create each of ``paths`` with mode 0700 unless it exists (chmod: umask may have narrowed it)."""
    for path in paths:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        os.chmod(path, 0o700)


def _subdirs(path: Path, pattern: re.Pattern[str] | None = None) -> list[Path]:
    """Real (not linked) subdirectories of ``path`` whose names match ``pattern``; [] if it is gone."""
    try:
        with os.scandir(path) as it:
            children = [c for c in it if c.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [Path(c.path) for c in children if pattern is None or pattern.fullmatch(c.name)]
