"""TC names where they leave the language: C symbols and file names.

Definition names become C symbols and file names, whose length is bounded: :func:`bounded` keeps
short names and replaces the tail of long ones with a hash.
"""

from __future__ import annotations

import hashlib

__all__ = ["MAX_NAME", "bounded", "entry_symbol"]

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
