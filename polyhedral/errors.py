"""The one error hierarchy of tcjit, rooted at :class:`TCError`.

Every mistake a user can make -- in the TC text, in a call, in options -- is reported with a
subclass of :class:`TCError` that carries the TC source, the position (1-based line and column) and
renders a caret excerpt::

    tcjit.polyhedral.errors.TCTypeError: fcrelu:3:21: index of W must be integral, got float32
        3 |     O(b, n) +=! I(b, r_m) * W(n, 1.5)
          |                                  ^~~

The compiler layers raise these; ``tcjit`` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ProofTooCostly",
    "Span",
    "TCBoundsError",
    "TCCacheError",
    "TCCallError",
    "TCDerivativeError",
    "TCError",
    "TCInternalError",
    "TCNameError",
    "TCOptionsError",
    "TCRangeError",
    "TCResourceError",
    "TCSemanticError",
    "TCSyntaxError",
    "TCTypeError",
    "TCWarning",
]


@dataclass(frozen=True, order=True)
class Span:
    """A half-open region ``[start, end)`` of a TC source, as character offsets.

    ``line`` and ``col`` are 1-based and refer to ``start``; they are what messages print.
    """

    start: int
    end: int
    line: int
    col: int

    def to(self, other: Span) -> Span:
        """The span from the start of ``self`` to the end of ``other``."""
        return Span(self.start, max(self.end, other.end), self.line, self.col)


def _excerpt(source: str, span: Span) -> str:
    """Render the source line of ``span`` with a caret and tildes under the spanned characters."""
    # Lines end at "\n" only, as the lexer counts them ("\r", "\f", ... are blanks to it).
    lines = source.split("\n")
    lineno = min(max(span.line, 1), len(lines))
    raw = lines[lineno - 1]
    line_start = sum(len(l) + 1 for l in lines[: lineno - 1])
    # One display column per character, so the caret lines up: blanks and controls become spaces.
    text = "".join(ch if ch.isprintable() else " " for ch in raw).rstrip()
    width = max(1, min(span.end, line_start + len(raw)) - span.start)
    gutter = f"{lineno:5d} | "
    marker = " " * (span.col - 1) + "^" + "~" * (width - 1)
    return f"{gutter}{text}\n{' ' * (len(gutter) - 2)}| {marker}"


class TCError(Exception):
    """Root of every error tcjit raises.

    :ivar message: the explanation, without position.
    :ivar source: the TC source the error refers to (``None`` if it refers to none).
    :ivar span: where in ``source`` (``None`` if nowhere in particular).
    :ivar line: 1-based line of the span, or ``None``.
    :ivar column: 1-based column of the span, or ``None``.
    :ivar where: a short name for the origin shown before the position (entry or file name).
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        span: Span | None = None,
        where: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.span = span
        self.where = where
        self.hint = hint
        super().__init__(self._render())

    @property
    def line(self) -> int | None:
        return self.span.line if self.span else None

    @property
    def column(self) -> int | None:
        return self.span.col if self.span else None

    def _render(self) -> str:
        head = self.message
        if self.span is not None:
            loc = f"{self.span.line}:{self.span.col}"
            head = f"{self.where}:{loc}: {self.message}" if self.where else f"line {loc}: {self.message}"
        parts = [head]
        if self.source is not None and self.span is not None:
            parts.append(_excerpt(self.source, self.span))
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)

    def __reduce__(self):  # errors cross process boundaries (the tuner's workers)
        return (
            _rebuild,
            (type(self), self.message, self.source, self.span, self.where, self.hint),
        )


def _rebuild(cls, message, source, span, where, hint):
    return cls(message, source=source, span=span, where=where, hint=hint)


class TCSyntaxError(TCError):
    """The text is not TC: an unexpected character or token, or a malformed construct."""


class TCNameError(TCError):
    """A name is undefined, defined twice, or redefines a builtin; an unknown entry point."""


class TCTypeError(TCError):
    """Types do not fit: non-integral index, non-boolean condition, narrowing, wrong arity or rank."""


class TCSemanticError(TCError):
    """A rule of the language is broken: writing an input, a reduction index with ``=``, ..."""


class TCRangeError(TCError):
    """Range inference failed: an index variable cannot be bounded, or its range is empty."""


class TCBoundsError(TCError):
    """An access can fall (or fell, for gathers) outside the tensor it reads or writes."""


class TCDerivativeError(TCError):
    """Automatic backward cannot differentiate a statement (named by the error's position): a
    builtin without a derivative on the way to a wanted gradient, a partial overwrite."""


class TCCallError(TCError):
    """A call does not fit the definition: count, dtype, rank, sizes, device, outputs."""


class TCOptionsError(TCError):
    """Mapping options are invalid: a value out of range, or a combination a target cannot run."""


class TCCacheError(TCError):
    """A cache or the tuned-options database cannot do what was asked: malformed data to import, no
    record (or several) matching an id. Damaged or unreadable files are warnings, not errors."""


class TCResourceError(TCError):
    """The system lacks what the work needs: no space left in ``TMPDIR`` or on a disk, a file
    system that cannot be written. Neither a mistake in the program nor a tcjit bug: the hint says
    what to free or where to point tcjit instead."""


class TCInternalError(TCError):
    """A compiler invariant failed. This is a bug in tcjit, never the user's fault: please report it."""


class ProofTooCostly(TCInternalError):
    """A legality proof stopped at its budget of isl operations (polyhedral/schedule.py,
    ``check_legality``'s ``max_operations``): unproven, so the schedule change it was asked about is
    not made, and a kernel with symbolic sizes gives way to a specialisation (tcjit/dynamic.py)."""


class TCWarning(UserWarning):
    """Something legal but probably unintended, such as accumulating into a tensor never initialised."""
