"""Lexer and recursive-descent parser for TC source text.

``parse(source)`` returns an immutable :class:`~.ast.Program` or raises :class:`TCSyntaxError` with
the position of the offending token. Operator precedence, lowest first: ``?:`` (right
associative), ``||``, ``&&``, ``== != < <= > >=``, ``+ -``, ``* / %``, unary ``- !``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..errors import Span, TCSyntaxError, TCTypeError
from . import ast as A
from .builtins import BUILTINS
from .types import canonical_type, lookup_type

_T = TypeVar("_T")

__all__ = ["MAX_NESTING", "Token", "parse", "tokenize"]

#: Deepest nesting of parentheses, calls and unary operators accepted, and the deepest expression
#: tree (a chain ``a + b + ...`` is as deep as it is long). Deeper input is refused with a
#: TCSyntaxError rather than letting Python's recursion limit crash a later pass.
MAX_NESTING = 64
MAX_DEPTH = 256

_ASSIGN_OPS = {"=", "+=", "+=!", "*=", "*=!", "min=", "min=!", "max=", "max=!"}
_PUNCT = sorted(
    ["<=>", "->", "+=!", "*=!", "+=", "*=", "==", "!=", "<=", ">=", "&&", "||",
     "(", ")", "{", "}", ",", ":", "?", "+", "-", "*", "/", "%", "<", ">", "!", "=", "."],
    key=len, reverse=True,
)  # fmt: skip
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?")
_DIGITS = frozenset("0123456789")
_INT64_DIGITS = len(str(2**63))  # longer literals (without leading zeros) never fit
_BINARY_LEVELS = (("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%"))


@dataclass(frozen=True)
class Token:
    """A lexical token: ``kind`` is ``ident``, ``int``, ``float``, ``op`` or ``eof``."""

    kind: str
    text: str
    span: Span

    def describe(self) -> str:
        if self.kind == "eof":
            return "end of input"
        return f"'{self.text}'"


def tokenize(source: str) -> list[Token]:
    """Split ``source`` into tokens; comments (``#`` to end of line) and whitespace are dropped."""
    tokens: list[Token] = []
    pos, line, line_start, n = 0, 1, 0, len(source)

    def span(start: int, end: int) -> Span:
        return Span(start, end, line, start - line_start + 1)

    while pos < n:
        c = source[pos]
        if c == "\n":
            pos += 1
            line += 1
            line_start = pos
            continue
        if c in " \t\r\f\v":
            pos += 1
            continue
        if c == "#":
            end = source.find("\n", pos)
            pos = n if end < 0 else end
            continue
        after_ident = bool(tokens) and tokens[-1].kind == "ident" and tokens[-1].span.end == pos
        if c in _DIGITS or (c == "." and pos + 1 < n and source[pos + 1] in _DIGITS and not after_ident):
            m = _NUMBER.match(source, pos)
            assert m is not None
            text = m.group(0)
            end = m.end()
            if end < n and (source[end].isalpha() or source[end] == "_"):
                bad = _IDENT.match(source, end)
                stop = bad.end() if bad else end + 1
                raise TCSyntaxError(
                    f"malformed number '{source[pos:stop]}'", source=source, span=span(pos, stop)
                )
            kind = "float" if ("." in text or "e" in text or "E" in text) else "int"
            tokens.append(Token(kind, text, span(pos, end)))
            pos = end
            continue
        m = _IDENT.match(source, pos)
        if m:
            text, end = m.group(0), m.end()
            # `min=` / `max=` (and with `!`) are assignment operators, `min(` a function.
            if text in ("min", "max") and source.startswith("=", end) and not source.startswith("==", end):
                end += 1
                if source.startswith("!", end) and not source.startswith("!=", end):
                    end += 1
                tokens.append(Token("op", source[pos:end], span(pos, end)))
            else:
                tokens.append(Token("ident", text, span(pos, end)))
            pos = end
            continue
        for p in _PUNCT:
            if source.startswith(p, pos):
                if p in ("+=!", "*=!") and source.startswith("=", pos + len(p)):
                    p = p[:-1]  # `+= != x` is not `+=!`
                tokens.append(Token("op", p, span(pos, pos + len(p))))
                pos += len(p)
                break
        else:
            shown = c if c.isprintable() else repr(c)[1:-1]
            raise TCSyntaxError(f"unexpected character '{shown}'", source=source, span=span(pos, pos + 1))
    tokens.append(Token("eof", "", Span(n, n, line, n - line_start + 1)))
    return tokens


class _Parser:
    def __init__(self, source: str):
        self.source = source
        self.toks = tokenize(source)
        self.i = 0
        self.depth = 0
        self.tree_depth: dict[int, int] = {}  # id(node) -> depth of its tree, for MAX_DEPTH

    # ---------------------------------------------------------------------------- token helpers
    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def advance(self) -> Token:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def at(self, text: str) -> bool:
        return self.tok.kind in ("op", "ident") and self.tok.text == text

    def comma_separated(self, item: Callable[[], _T], *, closing: str | None = None) -> list[_T]:
        """``item()`` once, then again after each comma; nothing at all where ``closing`` (say
        ``")"``) comes first. The closing token itself is left to the caller."""
        if closing is not None and self.at(closing):
            return []
        items = [item()]
        while self.at(","):
            self.advance()
            items.append(item())
        return items

    def error(self, message: str, tok: Token | None = None, hint: str | None = None) -> TCSyntaxError:
        tok = tok or self.tok
        return TCSyntaxError(message, source=self.source, span=tok.span, hint=hint)

    def integer(self, tok: Token) -> int:
        """The value of integer token ``tok``. A literal with more digits than any int64 is refused
        here, with the checker's message for smaller literals out of range, before Python's limit
        on converting long digit strings is reached."""
        digits = tok.text.lstrip("0")
        if len(digits) > _INT64_DIGITS:
            shown = digits if len(digits) <= 40 else f"{digits[:8]}...{digits[-8:]} ({len(digits)} digits)"
            raise TCTypeError(
                f"integer literal {shown} does not fit int64",
                source=self.source,
                span=tok.span,
                hint="integer literals are int64 at most; a float literal (with '.') may be larger",
            )
        return int(tok.text)

    def expect(self, text: str, what: str | None = None) -> Token:
        if self.at(text):
            return self.advance()
        raise self.error(f"expected '{text}'{' ' + what if what else ''} but found {self.tok.describe()}")

    def ident(self, what: str) -> Token:
        if self.tok.kind == "ident":
            return self.advance()
        raise self.error(f"expected {what} but found {self.tok.describe()}")

    # ------------------------------------------------------------------------------ definitions
    def program(self) -> A.Program:
        defs = []
        while self.tok.kind != "eof":
            if not self.at("def"):
                raise self.error(f"expected 'def' but found {self.tok.describe()}")
            defs.append(self.definition())
        return A.Program(tuple(defs), self.source)

    def definition(self) -> A.Def:
        start = self.expect("def")
        name = self.ident("the name of the definition")
        self.expect("(", "after the definition's name")
        params: list[A.Param] = self.comma_separated(self.param, closing=")")
        self.expect(")", "to close the parameter list")
        self.expect("->", "before the list of outputs")
        self.expect("(", "to open the list of outputs")
        returns: list[A.Return] = self.comma_separated(self.ret, closing=")")
        self.expect(")", "to close the list of outputs")
        self.expect("{", "to open the body")
        body = []
        while not self.at("}"):
            if self.tok.kind == "eof":
                raise self.error(f"expected '}}' to close the body of '{name.text}' but found end of input")
            body.append(self.statement())
        end = self.expect("}")
        return A.Def(
            name.text, tuple(params), tuple(returns), tuple(body), start.span.to(end.span), name.span
        )

    def type_name(self, what: str) -> Token:
        t = self.ident(what)
        if lookup_type(t.text) is None:
            raise TCSyntaxError(
                f"unknown scalar type '{t.text}'",
                source=self.source,
                span=t.span,
                hint="types are bool, (u)int8/16/32/64, float16 (half), bfloat16, float32 (float), "
                "float64 (double)",
            )
        return t

    def dims(self) -> tuple[A.Dim, ...]:
        self.expect("(")
        dims: list[A.Dim] = []
        if not self.at(")"):
            while True:
                t = self.tok
                if t.kind not in ("ident", "int", "op") and not self.at("("):
                    raise self.error(f"expected a size symbol or an integer size but found {t.describe()}")
                e = self.binary(0)
                if isinstance(e, A.Ident):
                    dims.append(A.Dim(e.name, e.span))
                elif isinstance(e, A.IntLit):
                    dims.append(A.Dim(e.value, e.span))
                else:  # [ext] a size expression of sizes bound elsewhere: float(N, H - KH + 1) dO
                    dims.append(A.Dim(e, e.span))
                if not self.at(","):
                    break
                self.advance()
        self.expect(")", "to close the list of sizes")
        return tuple(dims)

    def param(self) -> A.Param:
        ty = self.type_name("the type of a parameter")
        dims = self.dims() if self.at("(") else None
        name = self.ident("the name of the parameter")
        return A.Param(name.text, canonical_type(ty.text), dims, ty.span.to(name.span))

    def ret(self) -> A.Return:
        first = self.ident("the name of an output")
        if self.at(",") or self.at(")"):
            return A.Return(first.text, None, None, first.span)
        self.i -= 1
        ty = self.type_name("the type of an output")
        dims = self.dims() if self.at("(") else None
        name = self.ident("the name of the output")
        return A.Return(name.text, canonical_type(ty.text), dims, ty.span.to(name.span))

    # ------------------------------------------------------------------------------- statements
    def statement(self) -> A.Statement:
        name = self.ident("the start of a statement (a tensor name)")
        indices: tuple[A.Expr, ...] = ()
        lhs_end = name.span
        if self.at("("):
            self.advance()
            args = self.comma_separated(self.expr, closing=")")
            lhs_end = self.expect(")", "to close the left-hand side").span
            indices = tuple(args)
        op_tok = self.tok
        if op_tok.kind != "op" or op_tok.text not in _ASSIGN_OPS:
            raise self.error(
                f"expected an assignment operator (=, +=, +=!, *=, *=!, min=, min=!, max=, max=!) "
                f"but found {op_tok.describe()}"
            )
        self.advance()
        init = op_tok.text.endswith("!")
        op = op_tok.text.rstrip("!")
        rhs = self.expr()
        equivalent = self.equivalent() if self.at("<=>") else None
        clauses: list[A.Clause] = []
        end = self.toks[self.i - 1].span
        if self.at("where"):
            self.advance()
            clauses = self.comma_separated(self.clause)
            end = self.toks[self.i - 1].span
        if not (self.tok.kind == "ident" or self.at("}")):
            raise self.error(
                f"expected the end of the statement (a new statement or '}}') but found {self.tok.describe()}"
            )
        return A.Statement(
            name.text,
            indices,
            op,
            init,
            rhs,
            tuple(clauses),
            name.span.to(end),
            name.span.to(lhs_end),
            equivalent,
        )

    def equivalent(self) -> A.Equivalent:
        """TC's annotation ``<=> name(arg, ...)`` (after the right-hand side, before ``where``)."""
        start = self.expect("<=>")
        name = self.ident("the name of an equivalent computation after '<=>'")
        self.expect("(", "after the name of the equivalent computation")
        args: list[A.Expr] = self.comma_separated(self.expr, closing=")")
        end = self.expect(")", "to close the equivalent computation's arguments")
        return A.Equivalent(name.text, tuple(args), start.span.to(end.span))

    def clause(self) -> A.Clause:
        t = self.tok
        if self.at("exists"):
            self.advance()
            e = self.primary()
            if not isinstance(e, A.Access):
                raise TCSyntaxError(
                    "expected a tensor access after 'exists'",
                    source=self.source,
                    span=getattr(e, "span", t.span),
                )
            return A.ExistsClause(e, t.span.to(e.span))
        if t.kind == "ident" and self.peek().kind == "ident" and self.peek().text == "in":
            self.advance()
            self.advance()
            lo = self.binary(0)
            self.expect(":", "between the bounds of a range")
            hi = self.binary(0)
            return A.RangeClause(t.text, lo, hi, t.span.to(hi.span))
        if t.kind == "ident" and self.peek().kind == "op" and self.peek().text == "=":
            self.advance()
            self.advance()
            value = self.expr()
            return A.LetClause(t.text, value, t.span.to(value.span))
        cond = self.expr()
        return A.ConditionClause(cond, cond.span)

    # ------------------------------------------------------------------------------ expressions
    def nest(self):
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"expression nested more than {MAX_NESTING} levels deep")

    def node(self, e: A.Expr, *kids: A.Expr) -> A.Expr:
        """Record the depth of a new node's tree; refuse trees deeper than MAX_DEPTH."""
        d = 1 + max((self.tree_depth.get(id(k), 1) for k in kids), default=0)
        if d > MAX_DEPTH:
            raise TCSyntaxError(
                f"expression more than {MAX_DEPTH} levels deep",
                source=self.source,
                span=e.span,
                hint="split it with let-bindings (where x = ...) or temporaries",
            )
        self.tree_depth[id(e)] = d
        return e

    def expr(self) -> A.Expr:
        cond = self.binary(0)
        if self.at("?"):
            self.advance()
            self.nest()
            then = self.expr()
            self.expect(":", "in a conditional expression 'c ? a : b'")
            other = self.expr()
            self.depth -= 1
            cond = self.node(A.Select(cond, then, other, cond.span.to(other.span)), cond, then, other)
        return cond

    def binary(self, level: int) -> A.Expr:
        if level == len(_BINARY_LEVELS):
            return self.unary()
        lhs = self.binary(level + 1)
        while self.tok.kind == "op" and self.tok.text in _BINARY_LEVELS[level]:
            op = self.advance().text
            rhs = self.binary(level + 1)
            lhs = self.node(A.Binary(op, lhs, rhs, lhs.span.to(rhs.span)), lhs, rhs)
        return lhs

    def unary(self) -> A.Expr:
        if self.at("-") or self.at("!"):
            t = self.advance()
            self.nest()
            arg = self.unary()
            self.depth -= 1
            return self.node(A.Unary(t.text, arg, t.span.to(arg.span)), arg)
        return self.primary()

    def primary(self) -> A.Expr:
        t = self.tok
        if t.kind == "int":
            self.advance()
            return A.IntLit(self.integer(t), t.span)
        if t.kind == "float":
            self.advance()
            return A.FloatLit(float(t.text), t.span)
        if self.at("("):
            self.advance()
            self.nest()
            e = self.expr()
            self.depth -= 1
            end = self.expect(")", "to close the parenthesis")
            wider = _respan(e, t.span.to(end.span))
            self.tree_depth[id(wider)] = self.tree_depth.get(id(e), 1)
            return wider
        if t.kind == "ident":
            if t.text in ("def", "where", "in", "exists"):
                raise self.error(f"expected an expression but found the keyword '{t.text}'")
            self.advance()
            if self.at("."):
                self.advance()
                k = self.tok
                if k.kind != "int":
                    raise self.error(
                        f"expected a dimension number after '{t.text}.' but found {k.describe()}"
                    )
                self.advance()
                return A.DimSize(t.text, self.integer(k), t.span.to(k.span))
            if not self.at("("):
                return A.Ident(t.text, t.span)
            self.advance()
            self.nest()
            args: list[A.Expr] = self.comma_separated(self.expr, closing=")")
            end = self.expect(")", f"to close the arguments of '{t.text}'")
            self.depth -= 1
            span = t.span.to(end.span)
            if lookup_type(t.text) is not None:
                if len(args) != 1:
                    raise TCSyntaxError(
                        f"a conversion to {t.text} takes one argument, got {len(args)}",
                        source=self.source,
                        span=span,
                    )
                return self.node(A.Cast(canonical_type(t.text), args[0], span), args[0])
            if t.text in BUILTINS:
                return self.node(A.Call(t.text, tuple(args), span), *args)
            return self.node(A.Access(t.text, tuple(args), span), *args)
        raise self.error(f"expected an expression but found {t.describe()}")


def _respan(e: A.Expr, span: Span) -> A.Expr:
    """The same expression with its span widened to include surrounding parentheses."""
    from dataclasses import replace

    return replace(e, span=span)


def parse(source: str) -> A.Program:
    """Parse TC ``source`` text into a :class:`~.ast.Program` (syntax only; see :func:`.check.check`).

    :raises TCSyntaxError: with the position of the first offending token.
    """
    if not isinstance(source, str):
        raise TCSyntaxError(f"TC source must be a str, got {type(source).__name__}")
    try:
        return _Parser(source).program()
    except RecursionError:  # a safety net: MAX_NESTING and MAX_DEPTH are meant to stop this first
        raise TCSyntaxError("the source is nested too deeply to parse") from None
