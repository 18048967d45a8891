"""The values the tuned-options database stores, and the checks on them (no SQLite here).

:class:`TuningKey` (what options are stored under), :class:`TunedOptions` (a stored record),
:class:`Measured` (one candidate a tuning run measured); :func:`checked_values` and
:func:`validate_import` check what a caller or an imported file hands in; :func:`layout_distance`
orders other layouts of a kernel by how close their sizes are (:meth:`OptionsDatabase.nearest`);
:func:`parse_range_layout` reads the layout of a key tuned for a range of sizes.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

from tcjit.polyhedral.errors import TCCacheError

__all__ = [
    "KEY_FIELDS",
    "USE_DEFAULTS",
    "Measured",
    "TunedOptions",
    "TuningKey",
    "checked_rounds",
    "checked_values",
    "layout_distance",
    "parse_layout",
    "parse_range_layout",
    "validate_import",
]

KEY_FIELDS = ("source", "entry", "layout", "target", "arch", "version")
"""The fields of a :class:`TuningKey`, in order."""

USE_DEFAULTS = "defaults"
"""The ``options`` of a record whose tuning found nothing faster than the default options beyond the
noise: calls use the defaults of the tcjit that runs them (a marker, not a copy of today's defaults,
so that better defaults in a later version are not overridden by a stale record)."""


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class TuningKey:
    """What tuned options are stored under: DESIGN.md's cache key without the options.

    :ivar source: canonical TC text of the entry and what it depends on (``Kernel.canonical_source``).
    :ivar entry: the entry's name.
    :ivar layout: canonical JSON, one item per input: ``["float32", [64, 32], [32, 1]]`` (dtype,
        shape, strides) or ``"scalar"``; for options tuned for a range of sizes (symbolic sizes,
        ``tcjit tune --sizes B=1..64``), an object instead (:func:`parse_range_layout`).
    :ivar target: ``"cpu"``, ``"cuda"`` or ``"cuda-emulated"``.
    :ivar arch: the host's instruction-set identity (CPU targets) or ``"sm_90"`` (CUDA).
    :ivar version: the tcjit version that tuned.

    >>> TuningKey("def f...", "f", '[["float32",[4],[1]]]', "cpu", "x86_64-ab12", "0.1.0").digest[:8]
    '5a1ed389'
    """

    source: str
    entry: str
    layout: str
    target: str
    arch: str
    version: str

    @property
    def digest(self) -> str:
        """sha256 (hex) of the canonical JSON of all six fields: the record's id."""
        fields = {name: getattr(self, name) for name in KEY_FIELDS}
        return hashlib.sha256(_canonical(fields).encode("utf-8", "surrogatepass")).hexdigest()

    @property
    def family(self) -> str:
        """sha256 (hex) of (source, entry, target, arch): the same kernel at any sizes and version."""
        fields = [self.source, self.entry, self.target, self.arch]
        return hashlib.sha256(_canonical(fields).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class TunedOptions:
    """What tuning found for one key: the options to use, and the speed-up that decided it.

    ``time`` and ``baseline`` are one pair, measured by one tuning run at its end: the best
    candidate and the default options timed in ``rounds`` interleaved rounds in one process, each
    the median over the rounds; ``low`` and ``high`` are the least and the greatest speed-up of a
    single round. Records are compared by that speed-up (:attr:`gain`), never by absolute times
    from different runs or machines.

    :ivar key: the :class:`TuningKey`.
    :ivar options: MappingOptions JSON, or :data:`USE_DEFAULTS` when the best candidate was not
        faster than the defaults beyond the noise.
    :ivar time: seconds per call (median over the rounds) of the best candidate (for a
        :data:`USE_DEFAULTS` record too: what tuning found, and rejected).
    :ivar baseline: seconds per call of the default options in the same rounds (``None``: unknown).
    :ivar evaluations: candidates measured for this key, over all runs.
    :ivar date: ISO 8601 UTC time the record was stored, e.g. ``"2026-11-23T07:41:18+00:00"``.
    :ivar low: the lowest speed-up of one round (``None``: unknown).
    :ivar high: the highest speed-up of one round (``None``: unknown).
    :ivar rounds: interleaved rounds measured; 0 for a record of schema 1, whose time and baseline
        came from different runs (any record measured in rounds replaces it).
    """

    key: TuningKey
    options: str
    time: float
    baseline: float | None
    evaluations: int
    date: str
    low: float | None = None
    high: float | None = None
    rounds: int = 0

    @property
    def speedup(self) -> float | None:
        """``baseline / time``: the best candidate's speed-up over the defaults (``None``: no baseline)."""
        if self.baseline is None or self.time <= 0:
            return None
        return self.baseline / self.time

    @property
    def uses_defaults(self) -> bool:
        """Whether calls use the default options (tuning found nothing faster beyond the noise)."""
        return self.options == USE_DEFAULTS

    @property
    def gain(self) -> float:
        """What calls gain from this record: 1.0 for :data:`USE_DEFAULTS`, else the speed-up (1.0
        when unknown). Records of one key are merged by it."""
        if self.uses_defaults or self.speedup is None:
            return 1.0
        return self.speedup


@dataclass(frozen=True)
class Measured:
    """One candidate a tuning run measured.

    :ivar options: MappingOptions JSON.
    :ivar time: seconds per call (median); ``None`` when the candidate was invalid.
    :ivar status: ``"ok"``, ``"compile-error"``, ``"crashed"``, ``"timeout"``, ``"wrong"``,
        ``"abandoned"``, ...
    """

    options: str
    time: float | None
    status: str


def checked_values(
    options: object, time: object, baseline: object, evaluations: object
) -> tuple[str, float, float | None, int]:
    """``(options, time, baseline, evaluations)`` checked for storing."""
    if not isinstance(options, str):
        raise TypeError(
            f"options are stored as MappingOptions JSON text or {USE_DEFAULTS!r}, "
            f"got {type(options).__name__}"
        )
    for name, value in (("time", time), ("baseline", baseline)):
        if value is None and name == "baseline":
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    if isinstance(evaluations, bool) or not isinstance(evaluations, int) or evaluations < 0:
        raise ValueError(f"evaluations must be an integer >= 0, got {evaluations!r}")
    return options, float(time), None if baseline is None else float(baseline), evaluations  # type: ignore[arg-type]


def checked_rounds(low: object, high: object, rounds: object) -> tuple[float | None, float | None, int]:
    """``(low, high, rounds)`` of a record checked for storing: speed-ups > 0 (or ``None``), ``low
    <= high``, and a count of rounds >= 0."""
    for name, value in (("low", low), ("high", high)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ValueError(f"{name} must be a finite speed-up > 0 or None, got {value!r}")
    if low is not None and high is not None and low > high:
        raise ValueError(f"low ({low!r}) must not exceed high ({high!r})")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ValueError(f"rounds must be an integer >= 0, got {rounds!r}")
    return (None if low is None else float(low)), (None if high is None else float(high)), rounds


def validate_import(data: object, schema: int) -> list[tuple[TunedOptions, list[tuple]]]:
    """The records of an export of ``schema`` (or of schema 1, whose records have no rounds),
    checked, with their candidates as ``(options, time, status)``; :class:`TCCacheError` naming the
    first problem."""
    if not isinstance(data, list):
        raise TCCacheError(
            f"tuned options to import must be a JSON list of records, got {type(data).__name__}"
        )
    out = []
    for i, item in enumerate(data):
        where = f"record {i}"

        def bad(problem: str, where: str = where) -> TCCacheError:
            return TCCacheError(f"cannot import tuned options: {where}: {problem}")

        if not isinstance(item, dict):
            raise bad(f"expected an object, got {type(item).__name__}")
        if item.get("schema") not in (1, schema):
            raise bad(f"schema {item.get('schema')!r}, this tcjit reads schemas 1 to {schema}")
        key = item.get("key")
        if not isinstance(key, dict):
            raise bad("'key' must be an object")
        for name in KEY_FIELDS:
            if not isinstance(key.get(name), str):
                raise bad(f"key field {name!r} must be a string, got {key.get(name)!r}")
        extra = set(key) - set(KEY_FIELDS)
        if extra:
            raise bad(f"unknown key fields {sorted(extra)}")
        tkey = TuningKey(**{name: key[name] for name in KEY_FIELDS})
        try:
            if parse_range_layout(tkey.layout) is None:
                parse_layout(tkey.layout, strict=True)
            values = checked_values(
                item.get("options"), item.get("time"), item.get("baseline"), item.get("evaluations", 0)
            )
            spread = (None, None, 0)
            if item["schema"] != 1:
                spread = checked_rounds(item.get("low"), item.get("high"), item.get("rounds", 0))
        except (TypeError, ValueError) as err:
            raise bad(str(err)) from None
        if "digest" in item and item["digest"] != tkey.digest:
            raise bad(f"digest {item['digest']!r} does not match its key ({tkey.digest})")
        date = item.get("date")
        if not isinstance(date, str):
            raise bad(f"'date' must be an ISO 8601 string, got {date!r}")
        measured = item.get("measured", [])
        if not isinstance(measured, list):
            raise bad("'measured' must be a list")
        candidates = []
        for j, m in enumerate(measured):
            at = f"{where}, measured {j}"
            if (
                not isinstance(m, dict)
                or not isinstance(m.get("options"), str)
                or not isinstance(m.get("status"), str)
            ):
                raise bad("expected an object with string 'options' and 'status'", at)
            t = m.get("time")
            if t is not None and (
                isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0
            ):
                raise bad(f"'time' must be null or a finite number of seconds >= 0, got {t!r}", at)
            candidates.append((m["options"], None if t is None else float(t), m["status"]))
        out.append((TunedOptions(tkey, *values, date, *spread), candidates))
    return out


def parse_layout(layout: str, *, strict: bool = False) -> list | None:
    """The layout JSON as a list (``None`` if it is not one, or :class:`ValueError` when ``strict``)."""
    try:
        items = json.loads(layout)
        if not isinstance(items, list):
            raise ValueError("not a list")
        for item in items:
            if item == "scalar":
                continue
            dtype, shape, strides = item
            if not (isinstance(dtype, str) and all(isinstance(n, int) for n in (*shape, *strides))):
                raise ValueError("bad item")
        return items
    except (ValueError, TypeError) as err:
        if strict:
            raise ValueError(
                f'layout must be JSON: a list of [dtype, shape, strides] or "scalar" per input ({err})'
            ) from None
        return None


def parse_range_layout(layout: str) -> dict | None:
    """The layout of a key tuned for a range of sizes, read; ``None`` for any other text.

    Such a layout is a JSON object (a plain layout is a list)::

        {"fixed": {"M": 128}, "inputs": [["float32", ["B", 128], "contiguous"], "scalar"],
         "ranges": {"B": [1, 64]}}

    ``ranges``: each symbolic size and its inclusive bounds, ``1 <= lo <= hi``; ``fixed``: the
    other sizes' values; ``inputs``: per input ``"scalar"``, or its dtype, its dimensions (a
    number, or the expression of the sizes as text) and ``"contiguous"`` when its shape mentions a
    symbolic size, else its dtype, shape and strides.
    """
    try:
        value = json.loads(layout)
    except (ValueError, TypeError):
        return None
    if not isinstance(value, dict) or set(value) != {"fixed", "inputs", "ranges"}:
        return None
    ranges, fixed, inputs = value["ranges"], value["fixed"], value["inputs"]
    if not (isinstance(ranges, dict) and ranges and isinstance(fixed, dict) and isinstance(inputs, list)):
        return None
    for bounds in ranges.values():
        if not (
            isinstance(bounds, list)
            and len(bounds) == 2
            and all(type(n) is int for n in bounds)
            and 1 <= bounds[0] <= bounds[1]
        ):
            return None
    if not all(type(n) is int for n in fixed.values()):
        return None
    for item in inputs:
        if item == "scalar":
            continue
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)):
            return None
        dims, strides = item[1], item[2]
        if not (isinstance(dims, list) and all(type(d) in (int, str) for d in dims)):
            return None
        if strides != "contiguous" and not (
            isinstance(strides, list) and all(type(n) is int for n in (*dims, *strides))
        ):
            return None
    return value


def layout_distance(mine: list | None, theirs: list | None) -> tuple[int, float]:
    """How far the layout ``theirs`` is from ``mine``: (mismatch, sum of |log2| of size ratios).

    A different input count, kind, rank or dtype makes ``mismatch`` 1, so such a record sorts after
    every comparable one; the sizes of the inputs that do compare still order those among themselves.
    """
    if mine is None or theirs is None:
        return 1, math.inf
    mismatch = int(len(mine) != len(theirs))
    total = 0.0
    for a, b in zip(mine, theirs):
        if a == "scalar" or b == "scalar":
            mismatch |= a != b
            continue
        if a[0] != b[0] or len(a[1]) != len(b[1]):
            mismatch = 1
            continue
        total += sum(abs(math.log2(max(n, 1) / max(m, 1))) for n, m in zip(a[1], b[1]))
    return mismatch, total
