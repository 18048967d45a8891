"""The tables of the tuned-options database (:mod:`tcjit.cache.options_db`): their schema, and
reading, merging and importing rows inside a connection the database module opened.

The schema is documented in :mod:`tcjit.cache.options_db`; :data:`SCHEMA` creates it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .tuning_records import KEY_FIELDS, TunedOptions, TuningKey

__all__ = ["SCHEMA", "SELECT_TUNED", "TUNED_COLUMNS", "import_record", "merge_record", "record_from_row"]

SELECT_TUNED = (
    "SELECT source, entry, layout, target, arch, version, options, time, baseline, evaluations, date"
)
TUNED_COLUMNS = (*KEY_FIELDS, "options", "time", "baseline", "evaluations", "date")
SCHEMA = """
CREATE TABLE tuned (
    digest TEXT PRIMARY KEY, family TEXT NOT NULL,
    source TEXT NOT NULL, entry TEXT NOT NULL, layout TEXT NOT NULL,
    target TEXT NOT NULL, arch TEXT NOT NULL, version TEXT NOT NULL,
    options TEXT NOT NULL, time REAL NOT NULL, baseline REAL,
    evaluations INTEGER NOT NULL, date TEXT NOT NULL
);
CREATE INDEX tuned_family ON tuned(family);
CREATE TABLE measured (
    id INTEGER PRIMARY KEY, digest TEXT NOT NULL, options TEXT NOT NULL,
    time REAL, status TEXT NOT NULL, date TEXT NOT NULL
);
CREATE INDEX measured_digest ON measured(digest, id);
"""


def record_from_row(row: Sequence) -> TunedOptions:
    """A :class:`TunedOptions` from a row of ``TUNED_COLUMNS``."""
    key = TuningKey(*row[:6])
    options, time, baseline, evaluations, date = row[6:]
    return TunedOptions(key, options, time, baseline, evaluations, date)


def merge_record(conn: sqlite3.Connection, offer: TunedOptions, *, add_evaluations: bool) -> TunedOptions:
    """Store ``offer`` or keep the faster stored record (inside a write transaction); the result."""
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
        best = offer if offer.time < old.time else old
        baseline = old.baseline if old.baseline is not None else offer.baseline
        merged = TunedOptions(key, best.options, best.time, baseline, evaluations, best.date)
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
        ),
    )
    return merged


def import_record(conn: sqlite3.Connection, rec: TunedOptions, measured: list[tuple]) -> bool:
    """Merge one imported record and its candidates; whether the record was new or faster."""
    before = conn.execute("SELECT time FROM tuned WHERE digest = ?", (rec.key.digest,)).fetchone()
    merge_record(conn, rec, add_evaluations=False)
    have = set(conn.execute("SELECT options, time, status FROM measured WHERE digest = ?", (rec.key.digest,)))
    for m in measured:
        if m not in have:
            have.add(m)
            conn.execute(
                "INSERT INTO measured (digest, options, time, status, date) VALUES (?, ?, ?, ?, ?)",
                (rec.key.digest, *m, rec.date),
            )
    return before is None or rec.time < before[0]
