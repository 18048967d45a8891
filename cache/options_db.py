"""The tuned-options database: the best mapping options found for each kernel, shared by processes.

One SQLite file (``TCJIT_OPTIONS_DB``; :func:`tcjit.tuned.options_database` picks it). Schema
version :data:`SCHEMA_VERSION`, kept in ``PRAGMA user_version``::

    tuned      one row per tuning key: what tuning found (TunedOptions)
        digest       TEXT PRIMARY KEY   sha256 of the key's canonical JSON (TuningKey.digest)
        family       TEXT NOT NULL      sha256 of (source, entry, target, arch) (TuningKey.family)
        source, entry, layout, target, arch, version   TEXT NOT NULL: the key's fields
        options      TEXT NOT NULL      MappingOptions JSON, or "defaults" (USE_DEFAULTS)
        time         REAL NOT NULL      seconds per call of the best candidate  } one run's final
        baseline     REAL               seconds per call of the defaults        } interleaved rounds
        evaluations  INTEGER NOT NULL   candidates measured for this key, over all runs
        date         TEXT NOT NULL      ISO 8601 UTC of the measurement
        low, high    REAL               the least and greatest speed-up of one round
        rounds       INTEGER NOT NULL   rounds measured (0: a record of schema 1)
    measured   every candidate a tuning run measured, for resuming it
        id           INTEGER PRIMARY KEY (insertion order)
        digest       TEXT NOT NULL      the key's digest (a run may record before any row in tuned)
        options      TEXT NOT NULL      MappingOptions JSON
        time         REAL               seconds per call; NULL: the candidate was invalid
        status       TEXT NOT NULL      "ok", "compile-error", "crashed", "timeout", "wrong", ...
        date         TEXT NOT NULL      ISO 8601 UTC of the recording
    indices: tuned_family ON tuned(family); measured_digest ON measured(digest, id)

Concurrency: the file is in WAL mode, so readers never wait for writers; every write is one
``BEGIN IMMEDIATE`` transaction (the write lock is taken before the row is read, so two processes
improving the same key cannot both read the old time and overwrite each other), and a busy writer is
waited for up to :data:`BUSY_TIMEOUT_S`. Each process opens its own connection, guarded by a lock
for its threads; a forked child closes the connection it inherited, unused, and opens its own
(see ``OptionsDatabase._drop_inherited`` for why closing, not keeping it, is the safe choice).

Damage is never fatal and never destroys data. A file SQLite cannot read ("file is not a database",
"database disk image is malformed", a failed ``PRAGMA quick_check`` when opened) is moved, with its
``-wal`` and ``-shm``, to ``<path>.corrupt-<UTC time>``, reported with a :class:`TCWarning`, and an
empty database takes its place. That happens under an exclusive ``flock`` on ``<path>.lock``, where
the damage is checked again, so that two processes finding it at once move it once; a process whose
open file was moved away notices (the path names another inode) and reopens. A file written by a
newer tcjit (a larger ``user_version``), or an SQLite file of something else, is left untouched:
an older schema is brought up to date (:func:`~tcjit.cache.options_rows.bring_up_to_date`) by the first
process that opens it;
one warning, reads find nothing, writes are skipped. A missing file reads as empty and is created
(parent directories mode 0700) by the first write. A write that fails (read-only directory, full
disk) warns and returns what it would have stored; reads that fail warn once and find nothing. On a
read-only file system the file is opened for reading only (WAL mode could not create its ``-shm``
index there): reads work, writes warn.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import math
import os
import sqlite3
import threading
import warnings
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tcjit.polyhedral.errors import TCCacheError, TCWarning

from .options_rows import (
    SELECT_TUNED,
    bring_up_to_date,
    exported,
    import_record,
    merge_record,
    record_from_row,
)
from .tuning_records import (
    Measured,
    TunedOptions,
    TuningKey,
    checked_rounds,
    checked_values,
    layout_distance,
    parse_layout,
    validate_import,
)

__all__ = ["SCHEMA_VERSION", "Measured", "OptionsDatabase", "TunedOptions", "TuningKey"]

SCHEMA_VERSION: int = 2
"""Version of the tables above (``PRAGMA user_version``). A file of a newer version is left alone."""

BUSY_TIMEOUT_S = 30.0
"""Seconds a write waits for another process's transaction before it gives up (and warns)."""

_CORRUPT_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_CORRUPT_WORDS = ("file is not a database", "malformed", "file is encrypted")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class _Corrupt(Exception):
    """The file is damaged (raised inside this module only)."""


class _Newer(Exception):
    """The file is not ours to write: a newer schema, or another program's database."""


_DATABASES: weakref.WeakSet[OptionsDatabase] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for db in list(_DATABASES):
        db._lock = threading.RLock()  # a thread of the parent may have held it at the fork
        db._drop_inherited()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class OptionsDatabase:
    """Tuned mapping options, keyed by :class:`TuningKey`, in one SQLite file shared by processes.

    Opens lazily: nothing touches the disk until the first call, and reading a missing file finds
    nothing without creating it. See the module docstring for the schema, the concurrency story and
    what happens to damaged files.

    >>> db = OptionsDatabase("/tmp/options.sqlite3")
    >>> db.put(key, options_json, 1.5e-4, baseline=4.0e-4, evaluations=120, rounds=5).speedup
    2.6666666666666665

    :ivar path: the database file (absolute).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(os.path.abspath(os.fspath(path)))
        if self.path.is_dir():
            raise TCCacheError(f"cannot use {self.path} as the options database: it is a directory")
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._inode: tuple[int, int] | None = None
        self._newer: str | None = None  # why the file is left alone, once found
        self._warned: set[str] = set()
        _DATABASES.add(self)

    # ------------------------------------------------------------------------------------ reading
    def get(self, key: TuningKey) -> TunedOptions | None:
        """The options stored for exactly ``key``, or ``None`` (also when the file cannot be read)."""
        rows = self._read(f"{SELECT_TUNED} FROM tuned WHERE digest = ?", (key.digest,))
        return record_from_row(rows[0]) if rows else None

    def measured(self, key: TuningKey) -> list[Measured]:
        """Every candidate :meth:`record` stored for ``key``, oldest first."""
        rows = self._read(
            "SELECT options, time, status FROM measured WHERE digest = ? ORDER BY id", (key.digest,)
        )
        return [Measured(*row) for row in rows]

    def nearest(self, key: TuningKey, limit: int = 5) -> list[TunedOptions]:
        """Up to ``limit`` records of the same kernel (:attr:`TuningKey.family`) at other layouts.

        ``key``'s own record is excluded; records of any tcjit version count. Closest sizes come first:
        the distance is the sum over inputs of ``|log2(n / m)|`` per dimension (64 vs 128: 1); records
        whose inputs differ in count, rank or dtype come after all others; ties go to the newest.
        Meant to seed a tuning run at new sizes.
        """
        rows = self._read(
            f"{SELECT_TUNED} FROM tuned WHERE family = ? AND digest != ? ORDER BY date DESC",
            (key.family, key.digest),
        )
        mine = parse_layout(key.layout)
        ranked = sorted(
            (record_from_row(row) for row in rows),
            key=lambda r: layout_distance(mine, parse_layout(r.key.layout)),
        )
        return ranked[: max(limit, 0)]

    def records(self) -> list[TunedOptions]:
        """Every stored record, newest improvement first."""
        rows = self._read(f"{SELECT_TUNED} FROM tuned ORDER BY date DESC, digest")
        return [record_from_row(row) for row in rows]

    def find(self, prefix: str) -> list[TunedOptions]:
        """The records whose digest starts with ``prefix`` (hex, any case; ``""`` matches all)."""
        prefix = prefix.strip().lower()
        if any(c not in "0123456789abcdef" for c in prefix):
            return []
        rows = self._read(
            f"{SELECT_TUNED} FROM tuned WHERE substr(digest, 1, ?) = ? ORDER BY date DESC",
            (len(prefix), prefix),
        )
        return [record_from_row(row) for row in rows]

    def export(self) -> list[dict]:
        """Every record as JSON-able dicts, newest first, each with its measured candidates.

        One item per record::

            {"schema": 2, "digest": "ab12…", "key": {"source": …, "entry": …, "layout": …,
             "target": …, "arch": …, "version": …}, "options": "{…}", "time": 1.5e-4,
             "baseline": 4e-4, "evaluations": 120, "date": "2026-…", "low": 2.5, "high": 2.8,
             "rounds": 5, "measured": [{"options": "{…}", "time": 2e-4, "status": "ok"}, …]}

        Candidates recorded for a key that has no record yet are not exported.
        """
        return [exported(rec, self.measured(rec.key), SCHEMA_VERSION) for rec in self.records()]

    # ------------------------------------------------------------------------------------ writing
    def put(
        self,
        key: TuningKey,
        options: str,
        time: float,
        *,
        baseline: float | None = None,
        evaluations: int = 0,
        low: float | None = None,
        high: float | None = None,
        rounds: int = 0,
    ) -> TunedOptions:
        """Offer what one tuning run found for ``key``; return what is stored now.

        Atomic: the record with the greater :attr:`~TunedOptions.gain` (the speed-up over the
        defaults measured within its own run; 1.0 for :data:`~tcjit.cache.USE_DEFAULTS`) is kept,
        the offer at a tie, and any offer measured in rounds replaces a record of schema 1;
        ``evaluations`` adds to the stored count. A write that fails (read-only directory, full
        disk, a newer schema) warns with :class:`TCWarning` and returns the record as it would have
        been stored.

        :arg options: MappingOptions JSON, or :data:`~tcjit.cache.USE_DEFAULTS`.
        :arg time: seconds per call of the best candidate (median over the rounds), finite, >= 0.
        :arg baseline: seconds per call of the default options in the same rounds.
        :arg evaluations: candidates this run measured.
        :arg low: the least speed-up of one round; ``high``: the greatest; ``rounds``: how many.
        :raises ValueError: a negative or non-finite time or baseline, negative evaluations, a
            speed-up <= 0 or ``low > high``, negative rounds.
        """
        values = checked_values(options, time, baseline, evaluations)
        rec = TunedOptions(key, *values, _now(), *checked_rounds(low, high, rounds))
        stored = self._write(
            lambda conn: merge_record(conn, rec, add_evaluations=True), "store tuned options"
        )
        return rec if stored is None else stored

    def record(self, key: TuningKey, measured: Sequence[Measured]) -> None:
        """Append a run's measured candidates for ``key`` (see :meth:`measured`), in one transaction."""
        rows = []
        for m in measured:
            if not isinstance(m, Measured) or not isinstance(m.options, str) or not isinstance(m.status, str):
                raise TypeError(f"record() takes Measured items with text options and status, got {m!r}")
            if m.time is not None and not (math.isfinite(m.time) and m.time >= 0):
                raise ValueError(f"a measured time must be finite and >= 0 seconds, got {m.time!r}")
            rows.append((key.digest, m.options, m.time, m.status, _now()))
        if rows:
            self._write(
                lambda conn: conn.executemany(
                    "INSERT INTO measured (digest, options, time, status, date) VALUES (?, ?, ?, ?, ?)", rows
                ),
                "record measured candidates",
            )

    def import_records(self, data: object) -> int:
        """Merge records as :meth:`export` writes them; return how many were new or faster.

        Everything is validated before anything is written. Per key the record with the greater
        speed-up over the defaults, each measured within its own run, wins (as in :meth:`put`);
        ``evaluations`` become the larger of the two counts (importing the same file twice changes
        nothing); measured candidates not already stored are appended.

        :raises TCCacheError: ``data`` is not a list of records of this schema, naming the first
            item and field that is wrong.
        """
        items = validate_import(data, SCHEMA_VERSION)
        return (
            self._write(
                lambda conn: sum(import_record(conn, rec, measured) for rec, measured in items),
                "import tuned options",
            )
            or 0
        )

    def remove(self, digests: Iterable[str]) -> int:
        """Remove the records with these (full) digests and their measured candidates; rows removed."""
        wanted = sorted(set(digests))

        def remove(conn: sqlite3.Connection) -> int:
            removed = 0
            for digest in wanted:
                removed += conn.execute("DELETE FROM tuned WHERE digest = ?", (digest,)).rowcount
                conn.execute("DELETE FROM measured WHERE digest = ?", (digest,))
            return removed

        return (self._write(remove, "remove tuned options") or 0) if wanted else 0

    def clear(self) -> int:
        """Remove every record and every measured candidate; return the records removed."""

        def clear(conn: sqlite3.Connection) -> int:
            conn.execute("DELETE FROM measured")
            return conn.execute("DELETE FROM tuned").rowcount

        return (self._write(clear, "clear tuned options") or 0) if self.path.exists() else 0

    def close(self) -> None:
        """Close this process's connection (a later call reopens it)."""
        with self._lock:
            self._drop_inherited()  # closes, in the process that opened it or in a forked child

    # ------------------------------------------------------------------------------- connection
    def _read(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        """Rows of a query; [] when the file is missing, newer or unreadable (the last warns once)."""
        ok, rows = self._run(
            lambda conn: [] if conn is None else conn.execute(sql, params).fetchall(), create=False
        )
        if not ok:
            if rows is not None:
                self._warn_once(f"cannot read the tuned-options database {self.path}: {rows}")
            return []
        return rows

    def _write(self, change, doing: str):
        """Run ``change(conn)`` in one ``BEGIN IMMEDIATE`` transaction; its result, or ``None`` (warned)."""

        def transaction(conn: sqlite3.Connection):
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = change(conn)
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            return result

        ok, result = self._run(transaction, create=True)
        if ok:
            return result
        if result is not None:
            warnings.warn(f"tcjit: could not {doing} in {self.path}: {result}", TCWarning, stacklevel=3)
        return None

    def _run(self, op, *, create: bool) -> tuple[bool, object]:
        """``(True, op(conn))``, retried once after a damaged file was moved aside; else ``(False, why)``.

        ``why`` is ``None`` when the warning was given already (a newer schema). ``op`` gets ``None``
        when the file is missing and ``create`` is false.
        """
        with self._lock:
            for attempt in range(2):
                try:
                    return True, op(self._connection(create=create))
                except _Newer as err:
                    self._warn_newer(err)
                    return False, None
                except (sqlite3.DatabaseError, _Corrupt) as err:
                    if attempt == 1 or not (isinstance(err, _Corrupt) or _is_corrupt(err)):
                        return False, str(err)
                    try:
                        self._recover(str(err))
                    except _Newer as newer:
                        self._warn_newer(newer)
                        return False, None
                    except OSError as again:
                        return False, again.strerror or str(again)
                    except (sqlite3.Error, _Corrupt) as again:
                        return False, f"{err}; then {again}"
                except OSError as err:
                    return False, err.strerror or str(err)
        return False, "still damaged after it was rebuilt"

    def _connection(self, *, create: bool) -> sqlite3.Connection | None:
        """This process's open, checked connection; ``None`` if the file is missing and not ``create``.

        Call with ``self._lock`` held.
        :raises _Newer: the file is not ours to use.
        """
        if self._newer is not None:
            raise _Newer(self._newer)
        if self._pid != os.getpid():
            self._drop_inherited()
        if self._conn is not None and create and _on_read_only_file_system(self.path.parent):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        if self._conn is not None and self._inode != _inode(self.path):
            with contextlib.suppress(sqlite3.Error):  # moved aside (damaged) or replaced: follow the path
                self._conn.close()
            self._conn = None
        if self._conn is None:
            if not create and not self.path.exists():
                return None
            if _on_read_only_file_system(self.path.parent):
                if create:
                    raise OSError(errno.EROFS, os.strerror(errno.EROFS))
                return self._open_read_only()
            if create:
                _make_parents(self.path.parent)
            with self._flocked(required=create):
                self._conn = self._open_checked()
        return self._conn

    def _open_read_only(self) -> sqlite3.Connection | None:
        """The file on a read-only file system, open for reading only; ``None`` if it has no tables.

        SQLite reads a WAL-mode file through its ``-shm`` index, which it cannot create here: with a
        ``-wal`` and ``-shm`` left beside it the file opens with ``mode=ro``, otherwise (or if that
        fails) as ``immutable``, which nobody can change it from here anyway.
        """
        uri = self.path.as_uri()
        modes = ["immutable=1"]
        if os.path.exists(f"{self.path}-wal") and os.path.exists(f"{self.path}-shm"):
            modes.insert(0, "mode=ro")
        for attempt, mode in enumerate(modes):
            conn = sqlite3.connect(f"{uri}?{mode}", uri=True, isolation_level=None, check_same_thread=False)
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            except sqlite3.OperationalError:
                conn.close()
                if attempt + 1 < len(modes):
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            break
        if version == 0 or version > SCHEMA_VERSION:
            conn.close()
            if version == 0 and not tables:
                return None  # created, never written
            self._newer = _not_ours(version, tables)
            raise _Newer(self._newer)
        self._conn, self._inode = conn, _inode(self.path)
        return conn

    def _drop_inherited(self) -> None:
        """In a forked child: close the parent's connection, unused, before opening one's own.

        Closing is what keeps the parent's data safe. SQLite keeps one record of its locks per
        file and process; a child that left the inherited connection open would share that record
        with its new connection and believe it holds the shared lock that only the parent holds.
        When the parent then closed its connection, SQLite would find no other user, checkpoint and
        delete the WAL under the child, and the child's later writes would be lost. Closing it
        in the child only releases locks the child never held (POSIX locks are per process), and
        SQLite checkpoints on close only with an exclusive lock, which the parent's shared one denies.
        """
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn, self._pid = None, os.getpid()

    def _open_checked(self) -> sqlite3.Connection:
        """Open the file, check it and create the schema; move a damaged file aside first.

        Call under the file lock: the damage is checked again there, so it is moved once.
        """
        try:
            return self._open()
        except _Corrupt as err:
            self._set_aside(str(err))
        return self._open()

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if version > SCHEMA_VERSION or (version == 0 and tables):
                self._newer = _not_ours(version, tables)
                conn.close()
                raise _Newer(self._newer)
            check = conn.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                found = "; ".join(str(r[0]) for r in check).replace("\n", "; ")
                raise _Corrupt(f"PRAGMA quick_check: {found[:200]}")
            if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
                raise sqlite3.OperationalError("cannot switch to WAL mode")
            conn.execute("PRAGMA synchronous = FULL")  # tuning hours are worth an fsync per write
            if version < SCHEMA_VERSION:
                conn.execute("BEGIN IMMEDIATE")  # then read again: another process may have done it
                bring_up_to_date(conn, conn.execute("PRAGMA user_version").fetchone()[0], SCHEMA_VERSION)
                conn.execute("COMMIT")
            self._inode = _inode(self.path)
            return conn
        except sqlite3.DatabaseError as err:
            conn.close()
            if _is_corrupt(err):
                raise _Corrupt(str(err)) from err
            raise
        except BaseException:
            conn.close()
            raise

    def _recover(self, reason: str) -> None:
        """A query found damage: drop the connection, then check again and move aside under the lock."""
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        with self._flocked(required=True):
            try:
                self._open().close()  # repaired by another process meanwhile, or never damaged
            except _Corrupt as err:
                self._set_aside(f"{reason}; {err}")

    def _set_aside(self, reason: str) -> None:
        """Move the damaged file and its -wal and -shm to ``<path>.corrupt-<UTC time>``; warn."""
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while aside.exists():
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
            n += 1
        # The main file last: a new database must never meet the damaged one's WAL.
        for suffix in ("-wal", "-shm", ""):
            try:
                os.rename(f"{self.path}{suffix}", f"{aside}{suffix}")
            except FileNotFoundError:
                continue
            except OSError as err:
                raise OSError(
                    err.errno, f"it is damaged ({reason}) and cannot be moved aside: {err.strerror}"
                ) from err
        warnings.warn(
            f"tcjit: the tuned-options database {self.path} is damaged ({reason}); it was moved to "
            f"{aside} and an empty database replaces it",
            TCWarning,
            stacklevel=5,
        )

    @contextlib.contextmanager
    def _flocked(self, *, required: bool) -> Iterator[None]:
        """Hold the exclusive ``flock`` on ``<path>.lock``; without it (read-only directory) when not
        ``required``."""
        try:
            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            if required:
                raise
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            warnings.warn(f"tcjit: {message}", TCWarning, stacklevel=4)

    def _warn_newer(self, err: _Newer) -> None:
        self._warn_once(
            f"the tuned-options database {self.path} is left untouched: {err}; "
            "nothing is read from it and nothing is written"
        )


# ---------------------------------------------------------------------------------------- helpers
def _is_corrupt(err: sqlite3.Error) -> bool:
    code = getattr(err, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _CORRUPT_CODES:
        return True
    return any(word in str(err) for word in _CORRUPT_WORDS)


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _not_ours(version: int, tables: set[str]) -> str:
    """Why a file of schema ``version`` holding ``tables`` is left alone."""
    if version > SCHEMA_VERSION:
        return f"a newer tcjit wrote it (schema {version}; this one reads {SCHEMA_VERSION})"
    return f"it is an SQLite database of something else (tables {', '.join(sorted(tables))})"


def _on_read_only_file_system(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _make_parents(directory: Path) -> None:
    """Create ``directory`` and missing parents with mode 0700 (a private place for tuning results)."""
    if directory.is_dir():
        return
    _make_parents(directory.parent)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
