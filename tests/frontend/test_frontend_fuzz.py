"""Fuzzing the TC front-end: whatever the text, ``check_source`` accepts it or raises a TCError.

Never anything else -- no IndexError, KeyError, AssertionError, RecursionError, no hang: every
example runs under a hard 10 s alarm. Five generators:

(a) arbitrary text, over an alphabet rich in TC characters and over all of Unicode, alone and inside
    a valid header (so that the body is lexed and parsed);
(b) mutations of valid programs (the 15 kernels of KERNELS.md and a few using the extensions):
    tokens or characters deleted, inserted, duplicated, swapped;
(c) random sequences of TC tokens, alone and inside a valid header;
(d) random statements from TC's grammar (all operators, builtins of any arity, casts, accesses of
    any rank, where clauses of every kind);
(e) mostly well-formed programs (names, ranks and arities right), which reach typing, range
    inference and the shape checks.

Example counts follow the test tier (``conftest.examples``). Inputs that once crashed or hung the
front-end (deep nesting, non-ASCII digits, exponential let substitution, expanded size products)
are kept at the end as regression tests with a time limit.
"""

from __future__ import annotations

import pickle
import signal
import warnings
from contextlib import contextmanager

import pytest
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tcjit.polyhedral.errors import TCError, TCInternalError, TCWarning
from tcjit.polyhedral.lang.builtins import BUILTINS
from tcjit.polyhedral.lang.check import check_source
from tcjit.polyhedral.lang.parser import tokenize

LIMIT_S = 10


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` in the front-end eats it."""


@contextmanager
def time_limit(seconds: float):
    def on_alarm(signum, frame):
        raise _Timeout(f"check_source ran longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class FrontendTimeout(Exception):
    """check_source ran past its limit (re-raised outside the signal handler, with a clean traceback)."""


def check_clean(source: str, seconds: float = LIMIT_S) -> None:
    """``check_source(source)`` succeeds or raises a well-formed TCError, within ``seconds``."""
    timed_out = False
    try:
        with time_limit(seconds), warnings.catch_warnings():
            warnings.simplefilter("ignore", TCWarning)
            check_source(source)
    except _Timeout:
        # The alarm can interrupt any bytecode; a traceback through such a frame may lack line
        # numbers and break pytest's reporting, so report the timeout from here instead.
        timed_out = True
    except TCError as e:
        assert not isinstance(e, TCInternalError), str(e)
        assert type(e) is not TCError, "raise a specific subclass"
        assert e.message
        text = str(e)  # renders
        assert e.message in text
        if e.span is not None:
            assert e.source == source
            assert 1 <= e.line <= source.count("\n") + 1
            assert e.column >= 1
            assert 0 <= e.span.start <= e.span.end <= len(source)
            assert "^" in text
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and back.message == e.message and back.line == e.line
    if timed_out:
        raise FrontendTimeout(f"check_source ran longer than {seconds} s on {source[:200]!r}")


FUZZ = settings(
    deadline=None,
    max_examples=examples(150, 1500),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

# ----------------------------------------------------------------------------------- corpus
KERNELS = [
    "def matmul(float(M,K) A, float(K,N) B) -> (C) {\n    C(m, n) +=! A(m, r_k) * B(r_k, n)\n}\n",
    "def tmm(float(M,K) A, float(N,K) B) -> (C) {\n    C(m, n) +=! A(m, r_k) * B(n, r_k)\n}\n",
    "def tbmm(float(B,M,K) X, float(B,N,K) Y) -> (Z) {\n    Z(b, m, n) +=! X(b, m, r_k) * Y(b, n, r_k)\n}\n",
    "def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {\n"
    "    O(b, n) +=! I(b, r_m) * W(n, r_m)\n    O(b, n)  = fmax(O(b, n) + bias(n), 0)\n}\n",
    "def mlp3(float(B,M) I, float(N,M) W1, float(N) B1, float(P,N) W2, float(P) B2,\n"
    "         float(Q,P) W3, float(Q) B3) -> (O1, O2, O3) {\n"
    "    O1(b, n) +=! I(b, r_m) * W1(n, r_m)\n    O1(b, n)  = fmax(O1(b, n) + B1(n), 0)\n"
    "    O2(b, p) +=! O1(b, r_n) * W2(p, r_n)\n    O2(b, p)  = fmax(O2(b, p) + B2(p), 0)\n"
    "    O3(b, q) +=! O2(b, r_p) * W3(q, r_p)\n    O3(b, q)  = fmax(O3(b, q) + B3(q), 0)\n}\n",
    "def gconv(float(N,G,C,H,W) I, float(G,F,C,KH,KW) W1) -> (O) {\n"
    "    O(n, g, f, h, w) +=! I(n, g, r_c, h + r_kh, w + r_kw) * W1(g, f, r_c, r_kh, r_kw)\n}\n",
    "def conv2d(float(N,C,H,W) I, float(F,C,KH,KW) W1) -> (O) {\n"
    "    O(n, f, h, w) +=! I(n, r_c, h + r_kh, w + r_kw) * W1(f, r_c, r_kh, r_kw)\n}\n",
    "def kronecker3(float(D0,N0) W0, float(D1,N1) W1, float(D2,N2) W2, float(M,N0,N1,N2) X)\n"
    "    -> (XW2, XW1, Y) {\n"
    "    XW2(m, n0, n1, d2) +=! X(m, n0, n1, r_n2) * W2(d2, r_n2)\n"
    "    XW1(m, n0, d1, d2) +=! XW2(m, n0, r_n1, d2) * W1(d1, r_n1)\n"
    "    Y(m, d0, d1, d2)   +=! XW1(m, r_n0, d1, d2) * W0(d0, r_n0)\n}\n",
    "def tensordot(float(N,C0,C1,C2) I0, float(N,C2,C3) I1) -> (O) {\n"
    "    O(n, c0, c1, c3) +=! I0(n, c0, c1, r_c2) * I1(n, r_c2, c3)\n}\n",
    "def softmax(float(N,D) I) -> (O, mx, sm) {\n    mx(n) max=! I(n, r_d)\n"
    "    sm(n) +=!   exp(I(n, r_d) - mx(n))\n    O(n, d) =   exp(I(n, d) - mx(n)) / sm(n)\n}\n",
    "def layernorm(float(N,D) I, float(D) gamma, float(D) beta) -> (O, mean, var) {\n"
    "    mean(n) +=! I(n, r_d) / D\n"
    "    var(n)  +=! (I(n, r_d) - mean(n)) * (I(n, r_d) - mean(n)) / D\n"
    "    O(n, d)  =  gamma(d) * (I(n, d) - mean(n)) * rsqrt(var(n) + 1e-5) + beta(d)\n}\n",
    "def bn_reduce(float(N,C,H,W) I) -> (mean) {\n    mean(c) +=! I(r_n, c, r_h, r_w)\n"
    "    mean(c)  =  mean(c) / float(N * H * W)\n}\n",
    "def cosine(float(M,N) A, float(M,N) B) -> (O, nA, nB, dot) {\n"
    "    nA(m)  +=! A(m, r_n) * A(m, r_n)\n    nB(m)  +=! B(m, r_n) * B(m, r_n)\n"
    "    dot(m) +=! A(m, r_n) * B(m, r_n)\n    O(m)    =  dot(m) / fmax(sqrt(nA(m) * nB(m)), 1e-8)\n}\n",
    "def maxpool2x2(float(N,C,H,W) I) -> (O) {\n"
    "    O(n, c, h, w) max=! I(n, c, 2 * h + r_kh, 2 * w + r_kw) where r_kh in 0:2, r_kw in 0:2\n}\n",
    "def abs_sum(float(M,N) A) -> (S) {\n    S +=! fabs(A(r_m, r_n))\n}\n",
]
EXTRA = [
    # affine left-hand side, domain conditions, typed output with sizes
    "def grad(float(N,C,H) I, float(N,C,HO) d_O, float(KH) W) -> (float(N,C,H) d_I) {\n"
    "    d_I(n, c, h + r_kh) +=! d_O(n, c, h) * W(r_kh) where h - r_kh >= 0, h + r_kh < H\n}\n",
    # let-binding, T.k, scalar argument, temporaries
    "def let(float(N) A, float alpha) -> (B) {\n    T(i) = x * alpha where x = A(i) + 1.0, i in 0:A.0\n"
    "    B(i) = T(i) > 0.0 ? T(i) : -T(i)\n}\n",
    # gather, exists, casts, integer arithmetic, rank-0 output
    "def emb(int32(N) X, float(V, D) L) -> (O, S) {\n"
    "    O(i, d) = L(X(i), d) * float(i % 2) + 1.5e3 where exists X(i)\n    S() +=! O(r_i, r_d)\n}\n",
    # integer and boolean types, min/max, strided read
    "def ints(int8(N) A, uint16(M) U) -> (int64(N) B, C) {\n"
    "    B(i) = int64(min(A(i), 3)) + max(i, 1)\n    C(j) = U(2 * j) != 0 && U(2 * j) < 7\n}\n",
]
CORPUS = KERNELS + EXTRA

HEADER = "def f(float(N) A, float(N, M) W, int32(N) X, float alpha) -> (B) {\n"


# Characters that crash the lexer today (str.isdigit() is true, the number pattern does not match):
# pinned by test_known_crash_inputs; kept out of the generators until the bug is fixed.
def _known_crash_char(c: str) -> bool:
    return c.isdigit() and not c.isascii()


def test_corpus_is_valid() -> None:
    for source in CORPUS:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_source(source)


# ------------------------------------------------------------------------------ (a) random text
TC_CHARS = "abcdefhijkmnrwxyzABCKMNOSTW_0123456789 \t\n()[]{},.:;?!=+-*/%<>&|#'\"@$\\eE"
tc_text = st.text(alphabet=st.sampled_from(TC_CHARS), max_size=200)
unicode_text = st.text(alphabet=st.characters(codec="utf-8").filter(lambda c: not _known_crash_char(c)),
                       max_size=120)  # fmt: skip
mixed_text = st.text(
    alphabet=st.one_of(st.sampled_from(TC_CHARS), st.characters().filter(lambda c: not _known_crash_char(c))),
    max_size=150,
)


@FUZZ
@given(st.one_of(tc_text, unicode_text, mixed_text))
def test_arbitrary_text(source: str) -> None:
    check_clean(source)


@FUZZ
@given(st.one_of(st.text(alphabet=st.sampled_from(TC_CHARS), max_size=80), mixed_text.map(lambda s: s[:80])))
def test_arbitrary_text_in_a_body(body: str) -> None:
    check_clean(HEADER + "    B(i) = " + body + "\n}\n")
    check_clean(HEADER + body + "\n}\n")


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decoded(data: bytes) -> None:
    source = data.decode("latin-1")
    if any(_known_crash_char(c) for c in source):
        source = "".join(" " if _known_crash_char(c) else c for c in source)
    check_clean(source)


# ---------------------------------------------------------------------------- (b) mutations
INSERTABLE = ["(", ")", ",", ":", ".", "?", "!", "-", "=", "+=!", "min=", "max=!", "*=", "{", "}", "->",
              "where", "in", "exists", "def", "0", "1", "1.5", "1e-5", "A", "i", "N", "exp", "float", "int8",
              "&&", "||", "==", "<=", "%", "/", "#", "\n"]  # fmt: skip
INSERTABLE_CHARS = "()[]{},.:;?!=+-*/%<>&|#\n\t 0123456789eEabijkNMr_λ\x00\x0c\r"


@st.composite
def mutated_token_program(draw) -> str:
    source = draw(st.sampled_from(CORPUS))
    toks = [t.text for t in tokenize(source)][:-1]
    for _ in range(draw(st.integers(1, 4))):
        if not toks:
            break
        k = draw(st.integers(0, len(toks) - 1))
        op = draw(st.sampled_from(["delete", "insert", "duplicate", "swap", "replace"]))
        if op == "delete":
            del toks[k]
        elif op == "insert":
            toks.insert(k, draw(st.sampled_from(INSERTABLE + toks)))
        elif op == "duplicate":
            toks.insert(k, toks[k])
        elif op == "swap":
            j = draw(st.integers(0, len(toks) - 1))
            toks[k], toks[j] = toks[j], toks[k]
        else:
            toks[k] = draw(st.sampled_from(INSERTABLE + toks))
    sep = draw(st.sampled_from([" ", "\n", "  "]))
    return sep.join(toks)


@st.composite
def mutated_char_program(draw) -> str:
    chars = list(draw(st.sampled_from(CORPUS)))
    for _ in range(draw(st.integers(1, 4))):
        if not chars:
            break
        k = draw(st.integers(0, len(chars) - 1))
        op = draw(st.sampled_from(["delete", "insert", "duplicate", "swap", "cut"]))
        if op == "delete":
            del chars[k]
        elif op == "insert":
            chars.insert(k, draw(st.sampled_from(INSERTABLE_CHARS)))
        elif op == "duplicate":
            chars.insert(k, chars[k])
        elif op == "swap":
            j = draw(st.integers(0, len(chars) - 1))
            chars[k], chars[j] = chars[j], chars[k]
        else:
            chars = chars[:k]
    return "".join(chars)


@FUZZ
@given(mutated_token_program())
def test_token_mutations_of_valid_programs(source: str) -> None:
    check_clean(source)


@FUZZ
@given(mutated_char_program())
def test_character_mutations_of_valid_programs(source: str) -> None:
    check_clean(source)


@FUZZ
@given(st.lists(st.sampled_from(CORPUS), min_size=1, max_size=3), st.sampled_from(["", "\n", "#x\n"]))
def test_concatenated_programs(sources: list[str], sep: str) -> None:
    check_clean(sep.join(sources))


# ------------------------------------------------------------------------ (c) token sequences
VOCABULARY = [
    *["def", "where", "in", "exists", "->", "(", ")", "{", "}", ",", ":", "?", ".", "!"],
    *["=", "+=", "+=!", "*=", "*=!", "min=", "min=!", "max=", "max=!"],
    *["+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||"],
    *["float", "double", "half", "bfloat16", "int8", "int32", "int64", "uint8", "bool", "float64"],
    *["A", "B", "C", "W", "X", "S", "T", "N", "M", "K", "i", "j", "k", "r_k", "alpha", "x", "f"],
    *["exp", "fmax", "fma", "min", "max", "sigmoid", "norm4d"],
    *["0", "1", "2", "3", "-1", "300", "1.5", "1e-5", ".5", "2147483648", "99999999999999999999"],
]


@FUZZ
@given(st.lists(st.sampled_from(VOCABULARY), max_size=40), st.sampled_from([" ", "\n"]))
def test_random_token_sequences(tokens: list[str], sep: str) -> None:
    check_clean(sep.join(tokens))


@FUZZ
@given(st.lists(st.sampled_from(VOCABULARY), max_size=40))
def test_random_token_sequences_in_a_body(tokens: list[str]) -> None:
    check_clean(HEADER + "    B(i) = " + " ".join(tokens) + "\n}\n")
    check_clean(HEADER + " ".join(tokens) + "\n}\n")


# ---------------------------------------------------------------------------- (d) grammar
NAMES = ["i", "j", "k", "r_k", "N", "M", "alpha", "A", "W", "X", "B", "T", "x", "exp", "where"]
TENSORS = ["A", "W", "X", "B", "T", "alpha", "N", "i", "Q"]
LEAVES = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from(["0", "1", "2", "7", "300", "2147483648", "0.5", "1e-5", "3.0"]),
    st.sampled_from(["A.0", "W.1", "W.2", "B.0", "X.0", "Q.0"]),
)
BINOPS = ["+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||"]
FUNCS = [*sorted(BUILTINS), "float", "int32", "int8", "bool", "double", "uint64"]


def _extend(children):
    return st.one_of(
        st.tuples(children, st.sampled_from(BINOPS), children).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(st.sampled_from(["-", "!"]), children).map(lambda t: t[0] + t[1]),
        children.map(lambda c: f"({c})"),
        st.tuples(children, children, children).map(lambda t: f"{t[0]} ? {t[1]} : {t[2]}"),
        st.tuples(st.sampled_from(FUNCS), st.lists(children, max_size=4)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"
        ),
        st.tuples(st.sampled_from(TENSORS), st.lists(children, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"
        ),
    )


EXPR = st.recursive(LEAVES, _extend, max_leaves=10)
ACCESS = st.tuples(st.sampled_from(TENSORS), st.lists(EXPR, max_size=3)).map(
    lambda t: f"{t[0]}({', '.join(t[1])})"
)
CLAUSE = st.one_of(
    st.tuples(st.sampled_from(NAMES), EXPR, EXPR).map(lambda t: f"{t[0]} in {t[1]}:{t[2]}"),
    ACCESS.map(lambda a: f"exists {a}"),
    st.tuples(st.sampled_from(NAMES), EXPR).map(lambda t: f"{t[0]} = {t[1]}"),
    EXPR,
)
LHS_INDEX = st.one_of(st.sampled_from(["i", "j", "k", "r_k", "N", "A", "exp"]), EXPR)
STATEMENT = st.tuples(
    st.sampled_from(["B", "T", "C", "A", "N", "alpha", "exp"]),
    st.one_of(st.none(), st.lists(LHS_INDEX, max_size=3)),
    st.sampled_from(["=", "+=", "+=!", "*=", "*=!", "min=", "min=!", "max=", "max=!"]),
    EXPR,
    st.lists(CLAUSE, max_size=3),
).map(
    lambda t: (
        "    "
        + t[0]
        + ("" if t[1] is None else f"({', '.join(t[1])})")
        + f" {t[2]} {t[3]}"
        + (" where " + ", ".join(t[4]) if t[4] else "")
    )
)
HEADERS = [
    HEADER,
    "def f(float(N) A, float(N, M) W, int32(N) X, float alpha) -> (float(N) B, C) {\n",
    "def f(int8(N) A, half(N, M, 4) W, uint8(N) X, double alpha) -> (int32 B) {\n",
    "def f(float(N) A, float(N, M) W, int32(N) X, float alpha) -> () {\n",
]


@FUZZ
@given(st.sampled_from(HEADERS), st.lists(STATEMENT, min_size=1, max_size=3))
def test_random_statements(header: str, statements: list[str]) -> None:
    check_clean(header + "\n".join(statements) + "\n}\n")


@FUZZ
@given(st.lists(st.sampled_from(["i", "j", "r_k"]), min_size=1, max_size=2, unique=True), EXPR,
       st.lists(CLAUSE, max_size=2))  # fmt: skip
def test_random_right_hand_sides(lhs: list[str], rhs: str, clauses: list[str]) -> None:
    where = (" where " + ", ".join(clauses)) if clauses else ""
    for op in ("=", "+=!"):
        check_clean(HEADER + f"    B({', '.join(lhs)}) {op} {rhs}{where}\n}}\n")


# ------------------------------------------------------------- (e) mostly well-formed programs
# The grammar above mostly hits early errors (a name of the wrong kind, an arity); this one keeps
# names, ranks and arities right so that most programs reach typing, range inference and the shape
# checks, with a few wrong choices left in (gathers, narrowing, floats in subscripts).
IDX_LEAVES = st.sampled_from(["i", "j", "r_k", "N", "M", "0", "1", "2", "3", "W.1", "X.0"])


def _idx_extend(kids):
    return st.one_of(
        st.tuples(kids, st.sampled_from(["+", "-"]), kids).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(st.sampled_from(["2", "3", "-1"]), kids).map(lambda t: f"{t[0]} * ({t[1]})"),
        st.tuples(kids, st.sampled_from(["2", "3"])).map(lambda t: f"({t[0]}) / {t[1]}"),
        kids.map(lambda k: f"X({k})"),
        kids.map(lambda k: f"int32({k})"),
    )


IDX = st.recursive(IDX_LEAVES, _idx_extend, max_leaves=4)
VAL_LEAVES = st.one_of(
    st.sampled_from(["A(i)", "W(i, j)", "A(r_k)", "W(i, r_k)", "A(i + r_k)", "W(2 * i, j)", "A(X(i))"]),
    IDX.map(lambda i: f"A({i})"),
    st.tuples(IDX, IDX).map(lambda t: f"W({t[0]}, {t[1]})"),
    st.sampled_from(["alpha", "1.5", "0", "2", "1e-3", "i", "N", "x"]),
)
ARITY = {**BUILTINS}


def _val_extend(kids):
    return st.one_of(
        st.tuples(kids, st.sampled_from(["+", "-", "*", "/"]), kids).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(kids, st.sampled_from(["<", ">=", "=="]), kids, kids, kids).map(
            lambda t: f"({t[0]} {t[1]} {t[2]} ? {t[3]} : {t[4]})"
        ),
        st.sampled_from(sorted(ARITY)).flatmap(
            lambda f: st.lists(kids, min_size=ARITY[f], max_size=ARITY[f]).map(
                lambda a: f"{f}({', '.join(a)})"
            )
        ),
        st.tuples(st.sampled_from(["float", "double", "int32", "half"]), kids).map(
            lambda t: f"{t[0]}({t[1]})"
        ),
        kids.map(lambda k: f"-{k}"),
    )


VAL = st.recursive(VAL_LEAVES, _val_extend, max_leaves=6)
SIZE = st.sampled_from(["0", "1", "3", "N", "M", "N - 1", "M / 2", "W.1", "2 * N", "N - M", "i"])
GOOD_CLAUSE = st.one_of(
    st.sampled_from(["r_k in 0:N", "r_k in 0:3", "j in 0:M", "i in 0:N", "exists A(i)", "exists W(i, j)",
                     "i + r_k < N", "i - j >= 0 && j < 4", "x = A(i) * 2.0", "x = alpha"]),
    st.tuples(st.sampled_from(["i", "j", "r_k"]), SIZE, SIZE).map(lambda t: f"{t[0]} in {t[1]}:{t[2]}"),
)  # fmt: skip
GOOD_HEADERS = [
    "def f(float(N) A, float(N, M) W, int32(N) X, float alpha) -> (B) {\n",
    "def f(float(N) A, float(N, M) W, int32(N) X, float alpha) -> (float(N, M) B) {\n",
    "def f(float(N) A, float(N, M) W, int32(N) X, float alpha) -> (double B, T) {\n",
]


# left-hand side indices, and an access that gives them their ranges
ANCHORED = [(["i"], "A(i)"), (["i", "j"], "W(i, j)"), (["j", "i"], "W(i, j)"), ([], "A(r_k)"),
            (["i"], "W(i, r_k)"), (["i + r_k"], "A(i) * A(r_k)"), (["2 * i", "j"], "W(i, j)"),
            (["i", "j"], "W(i, j) * A(i + r_k)")]  # fmt: skip


@st.composite
def mostly_good_program(draw) -> str:
    header = draw(st.sampled_from(GOOD_HEADERS))
    lines = []
    for _ in range(draw(st.integers(1, 3))):
        lhs, anchor = draw(st.sampled_from(ANCHORED))
        op = draw(st.sampled_from(["=", "+=!", "max=!", "+=", "*=!"]))
        tensor = draw(st.sampled_from(["B", "B", "T", "U"]))
        clauses = draw(st.lists(GOOD_CLAUSE, max_size=2))
        where = (" where " + ", ".join(clauses)) if clauses else ""
        args = f"({', '.join(lhs)})" if lhs or draw(st.booleans()) else ""
        rhs = draw(VAL)
        if draw(st.integers(0, 3)):  # usually bind the left-hand side's indices
            rhs = f"{anchor} {draw(st.sampled_from(['+', '*', '-']))} {rhs}"
        lines.append(f"    {tensor}{args} {op} {rhs}{where}")
    return header + "\n".join(lines) + "\n}\n"


@FUZZ
@given(mostly_good_program())
def test_mostly_well_formed_programs(source: str) -> None:
    check_clean(source)


# ------------------------------------------------------------------ known crashes and hangs
def _body(rhs: str) -> str:
    return "def f(float(N) A) -> (B) {\n    B(i) = " + rhs + "\n}\n"


def _let_doubling(n: int) -> str:
    lets = ["x0 = A(i)"] + [f"x{k} = x{k - 1} + x{k - 1}" for k in range(1, n)]
    return _body(f"x{n - 1} where " + ", ".join(lets))


def _size_product(k: int) -> str:
    factor = "(N + M + P + Q + R + 1)"
    return ("def f(float(N, M, P, Q, R) A) -> (B) {\n    B(i) = 1.0 where i in 0:"
            + " * ".join([factor] * k) + "\n}\n")  # fmt: skip


# These inputs are tiny; a front-end without the bug answers in milliseconds, hence the 3 s limit.
# fmt: off
# Inputs that once crashed or hung the front-end (RecursionError, AssertionError, exponential
# let substitution, expanded size products): each must now answer quickly, with a TCError or not.
KNOWN = [
    pytest.param("²", 10, id="superscript_digit_assertion"),
    pytest.param(_body("A(i) * ¹"), 10, id="superscript_digit_in_body"),
    pytest.param(_body("(" * 150 + "A(i)" + ")" * 150), 10, id="parentheses_150_deep"),
    pytest.param(_body("A(" * 150 + "i" + ")" * 150), 10, id="accesses_150_deep"),
    pytest.param(_let_doubling(24), 3, id="let_doubling_24"),
    pytest.param(_size_product(20), 3, id="range_bound_product_20"),
]
# fmt: on


@pytest.mark.parametrize(("source", "seconds"), KNOWN)
def test_known_crash_inputs(source: str, seconds: float) -> None:
    check_clean(source, seconds)


def test_small_instances_of_the_known_hangs_are_fine() -> None:
    """The same shapes at sizes that run fast today: they must keep working."""
    check_clean(_let_doubling(8))
    check_clean(_size_product(4))
    check_clean(_body("(" * 40 + "A(i)" + ")" * 40))
