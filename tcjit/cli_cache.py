"""``tcjit cache``: look at and manage the tuned-options database and the compiled-kernel store.

The two are separate: tuned options take hours of tuning to make, compiled kernels are rebuilt when
next needed. ``--options`` and ``--kernels`` pick one; ``list`` without either shows both, ``clear``
without either refuses (it never removes tuning results by surprise).

* ``tcjit cache list [--options] [--kernels]``: the tuned options, one line per record (digest
  prefix, entry, target, input shapes, whether calls use the tuned options or the defaults, the
  best time found, the speed-up over the defaults with its spread per round, evaluations, date),
  newest first; the compiled kernels, one line per entry (id, entry, target, input shapes, size,
  when stored, when last used), most recently used first, with the total and the cap. Listing
  loads and removes nothing and reads only folders and files the store trusts.
* ``tcjit cache show ID``: everything about the tuned-options record whose digest starts with ``ID``.
* ``tcjit cache export [FILE]`` (JSON, stdout by default), ``tcjit cache import FILE`` (merge: per
  key, the record with the greater speed-up over the defaults, measured within its run, wins).
* ``tcjit cache clear --options|--kernels [--yes]``: remove every tuned-options record, or every
  compiled kernel, or both (both flags); asks first on a terminal (exit code 1 when the answer is
  no), refuses without ``--yes`` elsewhere (exit code 2).

The database is ``TCJIT_OPTIONS_DB`` (see :func:`tcjit.tuned.options_database`), the kernel store
``TCJIT_CACHE_DIR`` (see :func:`tcjit.kernel_cache.kernel_store`).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import warnings

from .cache import parse_range_layout
from .cli_args import UsageError
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


def _shapes(layout: str | list) -> str:
    """``64x32,32x16`` for a layout's inputs, as JSON text or read (``()``: a rank-0 tensor;
    ``scalar``: a number); ``Bx32,32x16 (B=1..64)`` for a layout tuned for a range of sizes."""
    ranged = parse_range_layout(layout) if isinstance(layout, str) else None
    try:
        items = ranged["inputs"] if ranged else json.loads(layout) if isinstance(layout, str) else layout
        text = ",".join(
            "scalar" if item == "scalar" else ("x".join(map(str, item[1])) or "()") for item in items
        )
    except (ValueError, TypeError, IndexError):
        return "?"
    return f"{text} ({_ranges(ranged)})" if ranged else text


def _ranges(ranged: dict) -> str:
    """``B=1..64, T=8..512``: the ranges of a layout tuned for a range of sizes."""
    return ", ".join(f"{name}={lo}..{hi}" for name, (lo, hi) in sorted(ranged["ranges"].items()))


def _speedup(rec) -> str:
    """The record's speed-up over the defaults, with its spread per round when it has rounds."""
    if rec.speedup is None:
        return "-"
    if rec.rounds and rec.low is not None and rec.high is not None:
        return f"{rec.speedup:.2f}x ({rec.low:.2f}-{rec.high:.2f}x)"
    return f"{rec.speedup:.2f}x"


def _uses(rec) -> str:
    return "defaults" if rec.uses_defaults else "tuned"


def _kernel_store():
    """The compiled-kernel store, or a :class:`TCCacheError` that says why there is none."""
    from .kernel_cache import kernel_store

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TCWarning)
        store = kernel_store()
    if store is None:
        why = str(caught[-1].message).removeprefix("tcjit: ") if caught else "TCJIT_CACHE_DIR is empty"
        raise TCCacheError(
            f"the compiled-kernel store is disabled ({why.removeprefix('kernel cache disabled: ')})",
            hint="set TCJIT_CACHE_DIR to a folder of yours, or unset it for the default",
        )
    return store


def _count(n: int, one: str, several: str) -> str:
    return f"{n} {one if n == 1 else several}"


def _size(n: int) -> str:
    """``512 B``, ``45.1 kB``, ``1.2 MB`` (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _age(when: float | None, now: float) -> str:
    """``40 s ago``, ``3 min ago``, ``5 h ago``, ``2 days ago`` (``-`` when unknown)."""
    if when is None:
        return "-"
    seconds = max(0.0, now - when)
    for unit, length in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= length:
            return f"{int(seconds // length)} {unit} ago"
    return f"{int(seconds)} s ago"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


def _list_kernels() -> None:
    store = _kernel_store()
    entries = store.entries()  # a TCError (untrusted root) exits with code 2
    valid = [e for e in entries if e.problem is None]
    total = sum(e.bytes for e in entries)
    print(
        f"compiled kernels in {store.root}: {_count(len(valid), 'entry', 'entries')}, {_size(total)} "
        f"(cap {_size(store.max_bytes)}: TCJIT_CACHE_MAX_BYTES)"
    )
    if not entries:
        return
    now = time.time()
    rows = []
    for e in entries:
        try:
            key = json.loads(e.key) if e.key else {}
        except ValueError:
            key = {}
        rows.append(
            (
                e.directory.name[:12],
                str(key.get("entry", "-")),
                str(key.get("target", "-")),
                _shapes(key["inputs"]) if "inputs" in key else "-",
                _size(e.bytes),
                _age(e.created, now),
                _age(e.accessed, now) if e.problem is None else f"not used: {e.problem}",
            )
        )
    _table(("id", "entry", "target", "inputs", "size", "stored", "last used"), rows)


def _cmd_list(args) -> int:
    both = not (args.options or args.kernels)
    if args.options or both:
        _list_options()
    if args.kernels or both:
        if both:
            print()
        _list_kernels()
    return 0


def _list_options() -> None:
    db = _database()
    print(f"tuned options in {db.path}")
    records = db.records()
    if not records:
        print(f"no tuned options in {db.path}")
        return
    header = ("id", "entry", "target", "inputs", "uses", "best", "speedup", "evaluations", "date")
    rows = [
        (
            r.key.digest[:12],
            r.key.entry,
            r.key.target,
            _shapes(r.key.layout),
            _uses(r),
            format_duration(r.time),
            _speedup(r),
            str(r.evaluations),
            r.date[:16].replace("T", " "),
        )
        for r in records
    ]
    _table(header, rows)


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
    if rec.uses_defaults:
        options = "use the defaults (tuning found nothing faster beyond the noise)"
    ranged = parse_range_layout(key.layout)
    try:
        layout = ranged["inputs"] if ranged else json.loads(key.layout)
    except ValueError:
        layout = [key.layout]
    print(f"id           {key.digest}")
    print(f"family       {key.family}")
    print(f"entry        {key.entry}")
    print(f"target       {key.target} ({key.arch})")
    print(f"tcjit        {key.version}")
    if ranged:
        fixed = [f"{name}={value}" for name, value in ranged["fixed"].items()]
        print(f"sizes        {', '.join([f'{_ranges(ranged)} (symbolic)', *fixed])}")
    print("inputs       " + "\n             ".join(json.dumps(item) for item in layout))
    print(f"calls use    {'the default options' if rec.uses_defaults else 'the tuned options below'}")
    print(f"best found   {format_duration(rec.time)} per call")
    print(f"defaults     {format_duration(rec.baseline)} per call")
    how = f"{rec.rounds} interleaved rounds of one run" if rec.rounds else "different runs (schema 1)"
    print(f"speedup      {_speedup(rec)}, measured in {how}")
    print(f"evaluations  {rec.evaluations}")
    print(f"stored       {rec.date}")
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
    if not (args.options or args.kernels):
        raise UsageError(
            "cache clear needs --options (every tuned-options record: hours of tuning), --kernels "
            "(every compiled kernel: rebuilt when next needed) or both"
        )
    db = _database() if args.options else None
    store = _kernel_store() if args.kernels else None
    what = " and ".join(
        ([f"every tuned option in {db.path}"] if db else [])
        + ([f"every compiled kernel in {store.root}"] if store else [])
    )
    if not args.yes:
        if not sys.stdin.isatty():
            print(f"tcjit: cache clear would remove {what}; add --yes to confirm", file=sys.stderr)
            return 2
        answer = input(f"remove {what}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return 1
    if db is not None:
        print(f"removed {db.clear()} tuned options from {db.path}")
    if store is not None:
        count = sum(e.problem is None for e in store.entries())
        store.clear()  # a TCError (unwritable directory) exits with code 2
        print(f"removed {_count(count, 'compiled kernel', 'compiled kernels')} from {store.root}")
    return 0


def add_cache_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``tcjit cache`` and its subcommands to the ``tcjit`` parser's subcommands."""
    p = sub.add_parser("cache", help="list, show, export, import or clear tuned options and compiled kernels")
    actions = p.add_subparsers(dest="action", required=True)
    q = actions.add_parser("list", help="the tuned options and the compiled kernels (default: both)")
    q.add_argument("--options", action="store_true", help="the tuned options, one line per record")
    q.add_argument(
        "--kernels", action="store_true", help="the compiled kernels, one line per entry, with sizes and ages"
    )
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
    q = actions.add_parser(
        "clear", help="remove the tuned options (--options), the compiled kernels (--kernels)"
    )
    q.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    q.add_argument("--options", action="store_true", help="remove every tuned-options record")
    q.add_argument("--kernels", action="store_true", help="remove every compiled kernel")
    q.set_defaults(func=_cmd_clear)
