"""The tables of the tuned-options database (:mod:`tcjit.cache.options_db`): their schema, and
reading, merging and importing rows inside a connection the database module opened.

The schema is documented in :mod:`tcjit.cache.options_db`; :data:`SCHEMA` creates it.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence

from .tuning_records import KEY_FIELDS, Measured, TunedOptions, TuningKey

__all__ = [
    "MIGRATIONS",
    "SCHEMA",
    "SELECT_TUNED",
    "TUNED_COLUMNS",
    "bring_up_to_date",
    "exported",
    "import_record",
    "merge_record",
    "record_from_row",
]

TUNED_COLUMNS = (*KEY_FIELDS, "options", "time", "baseline", "evaluations", "date", "low", "high", "rounds")
SELECT_TUNED = f"SELECT {', '.join(TUNED_COLUMNS)}"
SCHEMA = """
CREATE TABLE tuned (
    digest TEXT PRIMARY KEY, family TEXT NOT NULL,
    source TEXT NOT NULL, entry TEXT NOT NULL, layout TEXT NOT NULL,
    target TEXT NOT NULL, arch TEXT NOT NULL, version TEXT NOT NULL,
    options TEXT NOT NULL, time REAL NOT NULL, baseline REAL,
    evaluations INTEGER NOT NULL, date TEXT NOT NULL,
    low REAL, high REAL, rounds INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX tuned_family ON tuned(family);
CREATE TABLE measured (
    id INTEGER PRIMARY KEY, digest TEXT NOT NULL, options TEXT NOT NULL,
    time REAL, status TEXT NOT NULL, date TEXT NOT NULL
);
CREATE INDEX measured_digest ON measured(digest, id);
"""
MIGRATIONS = {
    # schema 1 -> 2: the spread of the speed-up and the rounds it was measured in (0: a record of
    # schema 1, whose time and baseline came from different runs)
    1: (
        "ALTER TABLE tuned ADD COLUMN low REAL",
        "ALTER TABLE tuned ADD COLUMN high REAL",
        "ALTER TABLE tuned ADD COLUMN rounds INTEGER NOT NULL DEFAULT 0",
    ),
}
"""Per schema version, the statements that bring a file of that version to the next one."""


def bring_up_to_date(conn: sqlite3.Connection, version: int, target: int) -> None:
    """Create the tables in an empty file (``version`` 0), or migrate them from ``version`` to
    ``target`` (inside a write transaction); then set ``user_version``."""
    if version == 0:
        statements = [st for st in SCHEMA.split(";") if st.strip()]
    else:
        statements = [st for v in range(version, target) for st in MIGRATIONS[v]]
    for statement in statements:
        conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {target}")


def record_from_row(row: Sequence) -> TunedOptions:
    """A :class:`TunedOptions` from a row of ``TUNED_COLUMNS``."""
    return TunedOptions(TuningKey(*row[:6]), *row[6:])


def exported(rec: TunedOptions, measured: Sequence[Measured], schema: int) -> dict:
    """One record of :meth:`~tcjit.cache.OptionsDatabase.export`, with its measured candidates."""
    return {
        "schema": schema,
        "digest": rec.key.digest,
        "key": {name: getattr(rec.key, name) for name in KEY_FIELDS},
        "options": rec.options,
        "time": rec.time,
        "baseline": rec.baseline,
        "evaluations": rec.evaluations,
        "date": rec.date,
        "low": rec.low,
        "high": rec.high,
        "rounds": rec.rounds,
        "measured": [{"options": m.options, "time": m.time, "status": m.status} for m in measured],
    }


def _better(offer: TunedOptions, old: TunedOptions) -> bool:
    """Whether ``offer`` replaces ``old``: a record of schema 1 (no rounds) always gives way to one
    measured in rounds; otherwise the greater :attr:`~TunedOptions.gain` wins, each measured within
    its own run; at a tie the newer measurement wins (two "use the defaults" records, say)."""
    if (old.rounds == 0) != (offer.rounds == 0):
        return old.rounds == 0
    return offer.gain >= old.gain


def merge_record(conn: sqlite3.Connection, offer: TunedOptions, *, add_evaluations: bool) -> TunedOptions:
    """Store ``offer`` or keep the stored record (inside a write transaction, :func:`_better`
    decides); the result."""
    key = offer.key
    row = conn.execute(f"{SELECT_TUNED} FROM tuned WHERE digest = ?", (key.digest,)).fetchone()
    if row is None:
        merged = offer
    else:
        old = record_from_row(row)
        evaluations = (
            old.evaluations + offer.evaluations
            if add_evaluations
            else max(old.evaluations, offer.evaluations)
        )
        best = offer if _better(offer, old) else old
        merged = dataclasses.replace(best, evaluations=evaluations)
    conn.execute(
        f"INSERT OR REPLACE INTO tuned (digest, family, {', '.join(TUNED_COLUMNS)}) "
        f"VALUES ({', '.join('?' * (len(TUNED_COLUMNS) + 2))})",
        (
            key.digest,
            key.family,
            *(getattr(key, name) for name in KEY_FIELDS),
            merged.options,
            merged.time,
            merged.baseline,
            merged.evaluations,
            merged.date,
            merged.low,
            merged.high,
            merged.rounds,
        ),
    )
    return merged


def import_record(conn: sqlite3.Connection, rec: TunedOptions, measured: list[tuple]) -> bool:
    """Merge one imported record and its candidates; whether the record was new or replaced the
    stored one."""
    row = conn.execute(f"{SELECT_TUNED} FROM tuned WHERE digest = ?", (rec.key.digest,)).fetchone()
    merged = merge_record(conn, rec, add_evaluations=False)
    have = set(conn.execute("SELECT options, time, status FROM measured WHERE digest = ?", (rec.key.digest,)))
    for m in measured:
        if m not in have:
            have.add(m)
            conn.execute(
                "INSERT INTO measured (digest, options, time, status, date) VALUES (?, ?, ?, ?, ?)",
                (rec.key.digest, *m, rec.date),
            )
    return row is None or dataclasses.replace(record_from_row(row), evaluations=merged.evaluations) != merged
