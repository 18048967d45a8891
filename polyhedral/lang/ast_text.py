"""The parse tree of a TC definition as indented text (``tcjit show --stage ast``).

One node per line: its kind, its own values (names, operators, literals, types) and where it starts
in the source; the nodes it holds are indented below it, each under the field that holds it. The
form is generic over the syntax tree's node classes (:mod:`.ast`), so a new node prints without
changes here.
"""

from __future__ import annotations

import dataclasses

from ..errors import Span

__all__ = ["ast_text"]


def ast_text(node: object) -> str:
    """``node`` (a :class:`~tcjit.polyhedral.lang.ast.Def` or any node of its tree) as indented
    text."""
    lines: list[str] = []
    _visit(node, "", "", lines)
    return "\n".join(lines)


def _is_node(value: object) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, (type, Span))


def _visit(node: object, pad: str, label: str, lines: list[str]) -> None:
    own, held = [], []
    where = ""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, Span):
            where = where or f"  @{value.line}:{value.col}"
        elif _is_node(value) or (isinstance(value, tuple) and value and all(_is_node(v) for v in value)):
            held.append((f.name, value))
        elif value is not None and value != () and f.name != "dtype":
            own.append(f"{f.name}={_scalar(value)}")
    dtype = getattr(node, "dtype", None)
    typed = f" : {dtype}" if dtype is not None else ""
    head = f"{label}{type(node).__name__}"
    lines.append(f"{pad}{head}{' ' if own else ''}{', '.join(own)}{typed}{where}")
    for name, value in held:
        if isinstance(value, tuple):
            lines.append(f"{pad}  {name}:")
            for v in value:
                _visit(v, pad + "    ", "- ", lines)
        else:
            _visit(value, pad + "  ", f"{name}: ", lines)


def _scalar(value: object) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, tuple):
        return "(" + ", ".join(_scalar(v) for v in value) + ")"
    return str(value)
