"""Reading the ``tcjit`` command line's arguments: the TC file and its entry, ``--sizes``,
integer lists (``--tile``, ``--blocks``, ``--threads``) and lists of names (``--wrt``, ``--absent``).

Shared by :mod:`tcjit.cli` and :mod:`tcjit.cli_cache`.
"""

from __future__ import annotations

__all__ = ["load_entry", "parse_ints", "parse_names", "parse_sizes"]


def parse_sizes(text: str | None) -> dict[str, int]:
    """``--sizes M=64,N=32`` as ``{"M": 64, "N": 32}`` (``None``: no sizes)."""
    sizes: dict[str, int] = {}
    for part in filter(None, (text or "").split(",")):
        key, _, value = part.partition("=")
        if not value.strip().lstrip("-").isdigit():
            raise SystemExit(f"tcjit: --sizes expects NAME=INT[,NAME=INT...], got {part!r}")
        sizes[key.strip()] = int(value)
    return sizes


def parse_ints(text: str | None) -> tuple[int, ...] | None:
    """``--tile 32,32`` as ``(32, 32)``; ``None`` when the flag was not given."""
    if text is None:
        return None
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise SystemExit(f"tcjit: --tile expects INT[,INT...], got {text!r}") from None


def load_entry(path: str, entry: str | None):
    """``(checked program, checked entry)`` of the TC file at ``path`` (``entry``: its name, or
    ``None`` for the only one)."""
    from .polyhedral.lang.check import check_source

    with open(path, encoding="utf-8") as f:
        program = check_source(f.read())
    cdef = program.entry(entry)
    return program, cdef


def parse_names(text: str | None, known, flag: str, what: str) -> tuple[str, ...] | None:
    """The comma-separated names of ``--wrt`` or ``--absent``, each one of ``known``."""
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SystemExit(
            f"tcjit: {flag} takes {what} of the entry ({', '.join(known)}), got {text!r}"
            + (f": {', '.join(unknown)} is not one" if unknown else "")
        )
    return names
