"""TC names where they leave the language: isl identifiers, C symbols and file names.

Any TC identifier is a valid name for an index, a size, a tensor or a definition, but not every one
is a valid isl identifier: isl's parser reads some words as keywords (``and``, ``mod``, ``NaN``, in
any case), and tcjit itself names isl objects (statements ``S0``, reference ids ``R0``, subscript
dimensions ``a0``, thread ids ``t0`` ...) in the same texts and parameter spaces as the user's
names. :func:`isl_name` maps every TC name to an isl identifier that is neither; it is injective,
the identity on every other name (so ordinary programs read the same in isl as in TC), and
:func:`tc_name` inverts it wherever a name comes back from isl (parameters in isl ASTs and
affine expressions, text that ``tcjit show`` prints).

The escape appends ``_`` to a name whose *base* (the name without trailing underscores) is
reserved: ``and`` is ``and_`` in isl, ``and_`` is ``and__``. Escaped names keep a reserved base, so
they never meet an unescaped one, and no internal name ends with ``_``.

Definition names become C symbols and file names, whose length is bounded: :func:`bounded` keeps
short names and replaces the tail of long ones with a hash.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["ISL_KEYWORDS", "MAX_NAME", "bounded", "entry_symbol", "isl_name", "tc_name", "tc_names_in"]

#: The words isl's tokenizer (``isl_stream.c``, ``check_keywords``) reads as keywords, compared
#: without regard to case.
ISL_KEYWORDS = frozenset(
    {
        "and", "ceil", "ceild", "exists", "false", "floor", "floord", "implies", "infinity",
        "infty", "max", "min", "mod", "nan", "not", "or", "rat", "true",
    }
)  # fmt: skip

# Names tcjit gives isl objects next to the user's: statements and their initialisations (S3,
# S3_init), reference ids (R0), tuple dimensions of accesses, boxes and copies (a0, e0, o0, p0,
# s0, x0), block and thread ids (b0, t0), isl AST iterators (c0), inserted statements and marks
# (tc_...). A new internal name must match this pattern.
_INTERNAL = re.compile(r"(?:[abceopstvwx][0-9]+|S[0-9]+(?:_init)?|R[0-9]+|tc_\w*)\Z")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _reserved(base: str) -> bool:
    return base.lower() in ISL_KEYWORDS or _INTERNAL.match(base) is not None


def isl_name(name: str) -> str:
    """The isl identifier of the TC name ``name``: ``name`` itself unless its base is reserved.

    >>> isl_name("M"), isl_name("and"), isl_name("and_"), isl_name("t0")
    ('M', 'and_', 'and__', 't0_')
    """
    return name + "_" if _reserved(name.rstrip("_")) else name


def tc_name(name: str) -> str:
    """The TC name of isl identifier ``name`` (inverts :func:`isl_name`; other names unchanged).

    >>> tc_name("and_"), tc_name("and__"), tc_name("M"), tc_name("S0")
    ('and', 'and_', 'M', 'S0')
    """
    return name[:-1] if name.endswith("_") and _reserved(name.rstrip("_")) else name


def tc_names_in(text: str) -> str:
    """``text`` printed by isl with every escaped identifier shown by its TC name."""
    return _IDENT.sub(lambda m: tc_name(m.group(0)), text)


#: The longest definition name kept whole in symbols and file names; longer ones are shortened
#: with a hash (file names are limited to 255 bytes on common file systems).
MAX_NAME = 64


def bounded(name: str, limit: int = MAX_NAME) -> str:
    """``name`` if it has at most ``limit`` characters, else its first characters and a hash of the
    whole name, ``limit`` characters in all (distinct names stay distinct).

    >>> bounded("matmul")
    'matmul'
    >>> len(bounded("f" * 300))
    64
    """
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
    return f"{name[: limit - len(digest) - 1]}_{digest}"


def entry_symbol(name: str) -> str:
    """The C symbol of definition ``name``'s kernel: in a namespace of its own (``tc_entry_``), so
    that no definition name clashes with a function of the C prelude (``tc_exp_f32``, ...) or of
    the C library, and bounded in length.

    >>> entry_symbol("matmul")
    'tc_entry_matmul'
    """
    return f"tc_entry_{bounded(name)}"
