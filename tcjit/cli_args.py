"""Reading the ``tcjit`` command line's arguments: the TC file and its entry, ``--sizes``,
integer lists (``--tile``, ``--blocks``, ``--threads``) and lists of names (``--wrt``, ``--absent``).

A mistake in an argument raises :class:`UsageError`, which ``tcjit`` prints as one line
(``tcjit: <message>``) before exiting with code 2. Shared by :mod:`tcjit.cli` and
:mod:`tcjit.cli_cache`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = [
    "UsageError",
    "check_seconds",
    "load_entry",
    "options_from_flags",
    "options_origin",
    "parse_ints",
    "parse_names",
    "parse_ranges",
    "parse_sizes",
    "parse_tune_sizes",
    "read_file",
]


class UsageError(Exception):
    """A mistake on the command line itself (a file that cannot be read, a flag's value): printed
    as ``tcjit: <message>`` on one line, exit code 2. Mistakes in the TC text, the call or the
    options are :class:`~tcjit.TCError` instead (with the source line and caret where they have one)."""


def read_file(path: str, what: str = "TC file") -> str:
    """The text of the file at ``path`` (UTF-8).

    :raises UsageError: it is missing, a directory, unreadable or not UTF-8 text.
    """
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as err:
        raise UsageError(f"cannot read the {what} {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"cannot read the {what} {path}: not UTF-8 text (byte {err.start})") from None


def load_entry(path: str, entry: str | None):
    """``(checked program, checked entry)`` of the TC file at ``path`` (``entry``: its name, or
    ``None`` for the only one).

    :raises UsageError: the file cannot be read.
    :raises TCError: the text does not check, or names no such entry.
    """
    from .polyhedral.lang.check import check_source

    program = check_source(read_file(path))
    cdef = program.entry(entry)
    return program, cdef


def parse_sizes(text: str | None, known: Sequence[str] | None = None) -> dict[str, int]:
    """``--sizes M=64,N=32`` as ``{"M": 64, "N": 32}`` (``None``: no sizes).

    :arg known: the entry's size symbols; a name outside them is a mistake.
    :raises UsageError: a part is not ``NAME=INT`` with ``INT >= 0``, a name is given twice or is
        not one of ``known``.
    """
    sizes: dict[str, int] = {}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        key, eq, value = (s.strip() for s in part.partition("="))
        if not eq or not key.isidentifier() or not value.isdigit():
            raise UsageError(f"--sizes expects NAME=INT[,NAME=INT...] with INT >= 0, got {part!r}")
        if key in sizes:
            raise UsageError(f"--sizes gives {key} twice")
        if known is not None and key not in known:
            raise UsageError(
                f"--sizes names {key}, which is not a size of the entry "
                f"(its sizes: {', '.join(known) or 'none'})"
            )
        sizes[key] = int(value)
    return sizes


def parse_tune_sizes(
    text: str | None, known: Sequence[str] | None = None
) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """``tcjit tune --sizes B=1..64,M=128`` as ``(sizes, ranges)``: ``sizes`` as
    :func:`parse_sizes` gives them, a range's size at its upper bound (where the inputs are
    made), and ``ranges`` ``{"B": (1, 64)}`` (inclusive bounds; whether they make sense is the
    tuner's to say, :func:`tcjit.tuning_range.range_plan`).

    :raises UsageError: as :func:`parse_sizes`, or a range is not ``NAME=INT..INT``.
    """
    plain, ranges = [], {}
    for part in (p.strip() for p in (text or "").split(",")):
        key, _, value = (s.strip() for s in part.partition("="))
        if ".." not in value:
            plain.append(part)
            continue
        lo, _, hi = (s.strip() for s in value.partition(".."))
        if not key.isidentifier() or not lo.isdigit() or not hi.isdigit():
            raise UsageError(f"--sizes expects NAME=INT or a range NAME=LO..HI (both included), got {part!r}")
        if key in ranges:
            raise UsageError(f"--sizes gives {key} twice")
        ranges[key] = (int(lo), int(hi))
    sizes = parse_sizes(",".join(plain), known)
    for key, (_, hi) in ranges.items():
        if key in sizes:
            raise UsageError(f"--sizes gives {key} twice")
        if known is not None and key not in known:
            listed = ", ".join(known) or "none"
            raise UsageError(f"--sizes names {key}, which is not a size of the entry (its sizes: {listed})")
        sizes[key] = hi
    order = [p.partition("=")[0].strip() for p in (text or "").split(",")]
    return {k: sizes[k] for k in order if k in sizes}, ranges


def parse_ints(text: str | None, flag: str) -> tuple[int, ...] | None:
    """``--tile 32,32`` as ``(32, 32)``; ``None`` when the flag was not given.

    :arg flag: the flag's name, for the message.
    :raises UsageError: a part is not an integer >= 0, or there is none.
    """
    if text is None:
        return None
    parts = [t.strip() for t in text.split(",") if t.strip()]
    if not parts or not all(t.isdigit() for t in parts):
        raise UsageError(f"{flag} expects INT[,INT...] with each INT >= 0, got {text!r}")
    return tuple(int(t) for t in parts)


def parse_names(text: str | None, known, flag: str, what: str) -> tuple[str, ...] | None:
    """The comma-separated names of ``--wrt`` or ``--absent``, each one of ``known``.

    :raises UsageError: no name, or one outside ``known``.
    """
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UsageError(
            f"{flag} takes {what} of the entry ({', '.join(known)}), got {text!r}"
            + (f": {', '.join(unknown)} is not one" if unknown else "")
        )
    return names


def parse_ranges(texts: Sequence[str] | None, cdef) -> dict[str, tuple[int, int]]:
    """``--range Idx=0:10`` (repeatable) as ``{"Idx": (0, 10)}``: the values of an integer input
    are drawn from ``[0, 10)``.

    :arg cdef: the checked entry; each name must be one of its integer inputs (tensor or rank-0).
    :raises UsageError: a part is not ``NAME=LO:HI`` with ``LO < HI``, a name is given twice, is no
        integer input of the entry, or the range does not fit the input's type.
    """
    ranges: dict[str, tuple[int, int]] = {}
    integer = {name: cdef.param_type(name) for name in cdef.params}
    integer = {name: t for name, t in integer.items() if t.kind in ("int", "uint")}
    for text in texts or ():
        name, eq, bounds = (s.strip() for s in text.partition("="))
        low, colon, high = (s.strip() for s in bounds.partition(":"))
        if not (eq and colon and name and _is_int(low) and _is_int(high)) or int(low) >= int(high):
            raise UsageError(f"--range expects NAME=LO:HI with integers LO < HI (HI excluded), got {text!r}")
        if name in ranges:
            raise UsageError(f"--range gives {name} twice")
        if name not in integer:
            what = f"is {cdef.param_type(name)}" if name in cdef.params else f"is no input of {cdef.name}"
            raise UsageError(
                f"--range {name}: {name} {what}; ranges are for integer inputs "
                f"({', '.join(integer) or 'it has none'})"
            )
        t = integer[name]
        if int(low) < t.min_value or int(high) - 1 > t.max_value:
            raise UsageError(
                f"--range {name}={low}:{high} does not fit {t} (values {t.min_value} to {t.max_value})"
            )
        ranges[name] = (int(low), int(high))
    return ranges


def _is_int(text: str) -> bool:
    return text.removeprefix("-").isdigit()


def check_seconds(value: float | None, flag: str) -> None:
    """``--budget`` and other durations must be finite and >= 0.

    :raises UsageError: otherwise.
    """
    if value is not None and not 0 <= value < float("inf"):
        raise UsageError(f"{flag} takes a number of seconds >= 0, got {value}")


def options_from_flags(args, cdef, sizes: Mapping[str, int], target: str | None = None):
    """The mapping options the flags describe (validated for ``--target``), or ``None`` if no
    flag was given.

    ``--options`` (``MappingOptions.to_json()`` text) is the base, else the defaults of a call;
    ``--fusion``, ``--tile``, ``--blocks``, ``--threads``, ``--no-parallel`` and ``--no-vectorize``
    then override single fields.
    """
    from .mapping.options import MappingOptions
    from .pipeline import default_options

    target = target or args.target or "cpu"
    tiles = parse_ints(args.tile, "--tile")
    blocks = parse_ints(args.blocks, "--blocks")
    threads = parse_ints(args.threads, "--threads")
    flags = (
        args.options,
        args.fusion,
        tiles,
        blocks,
        threads,
        args.no_parallel or None,
        args.no_vectorize or None,
    )
    if all(f is None for f in flags):
        return None
    opts = MappingOptions.from_json(args.options) if args.options else default_options(cdef, sizes, target)
    if blocks is not None:
        opts = opts.map_to_blocks(*blocks)
    if threads is not None:
        opts = opts.map_to_threads(*threads)
    if args.fusion:
        opts = opts.outer_schedule_fusion_strategy(args.fusion)
    if tiles is not None:
        opts = opts.tile(*tiles)
    if args.no_parallel:
        opts = opts.parallelize(False)
    if args.no_vectorize:
        opts = opts.vectorize(False)
    return opts.validate(target)


def options_origin(kernel, inputs, target: str, given) -> str:
    """Where the options of ``kernel(*inputs, options=given, target=target)`` come from, as
    ``tcjit run`` says it: the command line, a tuned record (its id in ``tcjit cache``), or the
    defaults. Looked up as a call looks them up (:func:`tcjit.tuned.lookup_options`)."""
    from .tuned import lookup_options

    if given is not None:
        return "given on the command line"
    found = lookup_options(kernel, inputs, target)
    if found is not None and found.options is None:
        return (
            f"the defaults (from the kernel's structure): tuned record {found.key.digest[:12]} from "
            f"{found.database} found nothing faster"
        )
    if found is not None:
        return f"tuned record {found.key.digest[:12]} from {found.database}"
    return "the defaults (from the kernel's structure)"
