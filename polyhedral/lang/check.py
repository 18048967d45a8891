"""Semantic analysis of TC definitions: names, types, the rules of the language, range inference.

``check(program)`` returns a :class:`~.checked.CheckedProgram` or raises a :class:`TCError` subclass
pointing at the offending part of the source. It never mutates the AST it is given.
"""

from __future__ import annotations

from ..errors import TCNameError, TCSyntaxError
from . import ast as A
from .check_statement import DefChecker
from .checked import CheckedProgram
from .parser import parse

__all__ = ["check", "check_source"]


def check_source(source: str) -> CheckedProgram:
    """Parse and check TC ``source``."""
    return check(parse(source))


def check(program: A.Program) -> CheckedProgram:
    """Check every definition of ``program``; raise the first error found."""
    try:
        return _check(program)
    except RecursionError:  # a safety net: the parser's depth limits are meant to stop this first
        raise TCSyntaxError("the program is nested too deeply to check", source=program.source) from None


def _check(program: A.Program) -> CheckedProgram:
    seen: dict[str, A.Def] = {}
    for d in program.defs:
        if d.name in seen:
            raise TCNameError(
                f"duplicate definition of '{d.name}' (first defined on line {seen[d.name].span.line})",
                source=program.source,
                span=d.name_span,
            )
        # A definition's name is never called from TC code, so it may be a builtin's (TC allowed
        # `def sigmoid`): a call in any body still means the builtin.
        seen[d.name] = d
    return CheckedProgram(program, tuple(DefChecker(d, program.source).run() for d in program.defs))
