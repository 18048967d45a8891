"""``tcjit cache``: look at and manage the tuned-options database (and the kernel store).

* ``tcjit cache list``: one line per record (digest prefix, entry, target, input shapes, time,
  speedup over the tuning baseline, evaluations, date), newest first.
* ``tcjit cache show ID``: everything about the record whose digest starts with ``ID``.
* ``tcjit cache export [FILE]`` (JSON, stdout by default), ``tcjit cache import FILE`` (merge: the
  faster options win per key).
* ``tcjit cache clear [--yes] [--kernels]``: remove every record (``--kernels``: and every compiled
  kernel); asks first on a terminal (exit code 1 when the answer is no), refuses without ``--yes``
  elsewhere (exit code 2).

The database is ``TCJIT_OPTIONS_DB`` (see :func:`tcjit.tuned.options_database`).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import warnings

from .polyhedral.errors import TCCacheError, TCWarning
from .tuning import format_duration

__all__ = ["add_cache_parser"]


def _database():
    """The options database, or a :class:`TCCacheError` that says why there is none."""
    from .tuned import options_database

    with warnings.catch_warnings(record=True) as caught:  # why it is unusable, in the one message
        warnings.simplefilter("always", TCWarning)
        db = options_database()
    if db is None:
        why = str(caught[-1].message) if caught else "TCJIT_OPTIONS_DB is empty"
        why = why.removeprefix("tcjit: ").removeprefix("tuned-options database disabled: ")
        raise TCCacheError(
            f"the tuned-options database is disabled ({why})",
            hint="set TCJIT_OPTIONS_DB to a file, or unset it for the default",
        )
    return db


def _shapes(layout: str) -> str:
    """``64x32,32x16`` for a layout's inputs (``()``: a rank-0 tensor; ``scalar``: a number)."""
    try:
        items = json.loads(layout)
        return ",".join(
            "scalar" if item == "scalar" else ("x".join(map(str, item[1])) or "()") for item in items
        )
    except (ValueError, TypeError, IndexError):
        return "?"


def _speedup(rec) -> str:
    return "-" if rec.speedup is None else f"{rec.speedup:.2f}x"


def _cmd_list(args) -> int:
    db = _database()
    print(f"tuned options in {db.path}")
    records = db.records()
    if not records:
        print(f"no tuned options in {db.path}")
        return 0
    header = ("id", "entry", "target", "inputs", "time", "speedup", "evaluations", "date")
    rows = [
        (
            r.key.digest[:12],
            r.key.entry,
            r.key.target,
            _shapes(r.key.layout),
            format_duration(r.time),
            _speedup(r),
            str(r.evaluations),
            r.date[:16].replace("T", " "),
        )
        for r in records
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


def _one(db, ident: str):
    found = db.find(ident) if ident.strip() else []
    if not found:
        raise TCCacheError(f"no tuned options with an id starting {ident!r} in {db.path}")
    if len(found) > 1:
        ids = ", ".join(r.key.digest[:12] for r in found[:5])
        raise TCCacheError(f"{len(found)} records have an id starting {ident!r} ({ids}): give more of it")
    return found[0]


def _cmd_show(args) -> int:
    db = _database()
    rec = _one(db, args.id)
    key = rec.key
    try:
        options = json.dumps(json.loads(rec.options), indent=2, sort_keys=True)
    except ValueError:
        options = rec.options + "\n(not valid JSON: a call ignores these options)"
    try:
        layout = json.loads(key.layout)
    except ValueError:
        layout = [key.layout]
    print(f"id           {key.digest}")
    print(f"family       {key.family}")
    print(f"entry        {key.entry}")
    print(f"target       {key.target} ({key.arch})")
    print(f"tcjit        {key.version}")
    print("inputs       " + "\n             ".join(json.dumps(item) for item in layout))
    print(f"time         {format_duration(rec.time)} per call")
    print(f"baseline     {format_duration(rec.baseline)} per call (speedup {_speedup(rec)})")
    print(f"evaluations  {rec.evaluations}")
    print(f"improved     {rec.date}")
    measured = db.measured(key)
    counts = collections.Counter(m.status for m in measured)
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "none recorded"
    print(f"measured     {len(measured)} candidates: {summary}")
    print("options:")
    print(options)
    print("source:")
    print(key.source.rstrip())
    return 0


def _cmd_export(args) -> int:
    db = _database()
    records = db.export()
    text = json.dumps(records, indent=1, ensure_ascii=False) + "\n"
    if args.file in (None, "-"):
        sys.stdout.write(text)
    else:
        try:
            with open(args.file, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as err:
            raise TCCacheError(f"cannot write {args.file}: {err.strerror or err}") from None
        print(f"exported {len(records)} records from {db.path} to {args.file}", file=sys.stderr)
    return 0


def _cmd_import(args) -> int:
    db = _database()
    try:
        if args.file == "-":
            data = json.load(sys.stdin)
        else:
            with open(args.file, encoding="utf-8") as f:
                data = json.load(f)
    except OSError as err:
        raise TCCacheError(f"cannot read {args.file}: {err.strerror or err}") from None
    except ValueError as err:
        raise TCCacheError(f"{args.file} is not JSON: {err}") from None
    merged = db.import_records(data)
    print(f"merged {len(data)} records into {db.path}: {merged} new or faster")
    return 0


def _cmd_clear(args) -> int:
    db = _database()
    what = f"every tuned option in {db.path}" + (" and every compiled kernel" if args.kernels else "")
    if not args.yes:
        if not sys.stdin.isatty():
            print(f"tcjit: cache clear would remove {what}; add --yes to confirm", file=sys.stderr)
            return 2
        answer = input(f"remove {what}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return 1
    print(f"removed {db.clear()} tuned options from {db.path}")
    if args.kernels:
        from .compiler import kernel_store

        store = kernel_store()
        if store is None:
            print("the kernel cache is disabled (TCJIT_CACHE_DIR is empty)")
        else:
            store.clear()  # a TCError (unwritable directory) exits with code 2
            print(f"removed every compiled kernel from {store.root}")
    return 0


def add_cache_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``tcjit cache`` and its subcommands to the ``tcjit`` parser's subcommands."""
    p = sub.add_parser("cache", help="list, show, export, import or clear tuned options")
    actions = p.add_subparsers(dest="action", required=True)
    q = actions.add_parser("list", help="one line per stored record")
    q.set_defaults(func=_cmd_list)
    q = actions.add_parser("show", help="everything about one record")
    q.add_argument("id", help="the record's id, or enough of its start to be unique")
    q.set_defaults(func=_cmd_show)
    q = actions.add_parser("export", help="write every record as JSON")
    q.add_argument("file", nargs="?", help="where to write (default: standard output)")
    q.set_defaults(func=_cmd_export)
    q = actions.add_parser("import", help="merge records from an export (the faster options win)")
    q.add_argument("file", help="a JSON file written by export ('-': standard input)")
    q.set_defaults(func=_cmd_import)
    q = actions.add_parser("clear", help="remove every record")
    q.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    q.add_argument("--kernels", action="store_true", help="also empty the compiled-kernel cache")
    q.set_defaults(func=_cmd_clear)
