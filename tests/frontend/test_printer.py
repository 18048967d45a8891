"""Canonical printing: parse(to_tc(p)) == p, and printing is a fixpoint."""

from __future__ import annotations

import re

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from tcjit.polyhedral.lang import ast as A
from tcjit.polyhedral.lang.builtins import BUILTINS
from tcjit.polyhedral.lang.check import check_source
from tcjit.polyhedral.lang.parser import parse
from tcjit.polyhedral.lang.printer import to_tc
from tcjit.suite import SUITE

NAMES = st.sampled_from(["a", "b", "i", "j", "r_k", "N", "M", "X", "T0", "_t"])
TYPES = st.sampled_from(["float32", "float64", "int32", "int8", "uint16", "bool", "float16", "bfloat16"])
BINOPS = st.sampled_from(["||", "&&", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%"])


def exprs():
    leaves = st.one_of(
        st.integers(0, 2**40).map(A.IntLit),
        st.floats(min_value=0, max_value=1e30, allow_nan=False, allow_infinity=False).map(A.FloatLit),
        NAMES.map(A.Ident),
        st.builds(A.DimSize, NAMES, st.integers(0, 5)),
    )

    def grow(children):
        return st.one_of(
            st.builds(A.Unary, st.sampled_from(["-", "!"]), children),
            st.builds(A.Binary, BINOPS, children, children),
            st.builds(A.Select, children, children, children),
            st.builds(A.Cast, TYPES, children),
            st.builds(A.Access, NAMES, st.lists(children, max_size=3).map(tuple)),
            st.sampled_from(sorted(BUILTINS)).flatmap(
                lambda f: st.lists(children, min_size=BUILTINS[f], max_size=BUILTINS[f]).map(
                    lambda args, f=f: A.Call(f, tuple(args))
                )
            ),
        )

    return st.recursive(leaves, grow, max_leaves=12)


def statements():
    clause = st.one_of(
        st.builds(A.RangeClause, NAMES, exprs(), exprs()),
        st.builds(A.LetClause, NAMES, exprs()),
        st.builds(A.ExistsClause, st.builds(A.Access, NAMES, st.lists(exprs(), max_size=2).map(tuple))),
        st.builds(A.ConditionClause, exprs()),
    )
    return st.builds(
        A.Statement,
        NAMES,
        st.lists(exprs(), max_size=3).map(tuple),
        st.sampled_from(["=", "+=", "*=", "min=", "max="]),
        st.booleans(),
        exprs(),
        st.lists(clause, max_size=3).map(tuple),
    ).filter(lambda s: s.op != "=" or not s.init)


def programs():
    dims = st.lists(st.one_of(NAMES, st.integers(0, 99)).map(A.Dim), max_size=3).map(tuple)
    param = st.builds(A.Param, NAMES, TYPES, st.one_of(st.none(), dims))
    ret = st.one_of(st.builds(A.Return, NAMES), st.builds(A.Return, NAMES, TYPES, st.one_of(st.none(), dims)))
    d = st.builds(
        A.Def,
        st.sampled_from(["f", "g", "kernel_1"]),
        st.lists(param, max_size=3).map(tuple),
        st.lists(ret, max_size=2).map(tuple),
        st.lists(statements(), max_size=3).map(tuple),
    )
    return st.lists(d, min_size=1, max_size=2).map(lambda ds: A.Program(tuple(ds)))


@settings(max_examples=examples(100, 3000), deadline=None)
@given(programs())
def test_print_parse_round_trip(program):
    text = to_tc(program)
    again = parse(text)
    assert again == program, text
    assert to_tc(again) == text


def test_suite_round_trips_and_checks_identically():
    for sk in SUITE.values():
        program = parse(sk.source)
        text = to_tc(program)
        assert parse(text) == program
        original, canonical = check_source(sk.source), check_source(text)
        assert [d.signature() for d in original.defs] == [d.signature() for d in canonical.defs]


def test_canonical_text_ignores_layout_comments_and_aliases():
    a = "def f(float(N) A) -> (B) {\n  # doubled\n  B(i) = ((A(i))) * 2.0\n}"
    b = "def f(float32(N) A)->(B){B(i)=A(i)*2.}"
    assert to_tc(parse(a)) == to_tc(parse(b))
    assert to_tc(parse(a)) == "def f(float32(N) A) -> (B) {\n    B(i) = A(i) * 2.0\n}\n"


def test_parentheses_only_where_precedence_needs_them():
    cases = {
        "a - (b - c)": "a - (b - c)",
        "(a - b) - c": "a - b - c",
        "a * (b + c)": "a * (b + c)",
        "-(a + b)": "-(a + b)",
        "(c ? a : b) + 1": "(c ? a : b) + 1",
        "c ? a : d ? e : f": "c ? a : d ? e : f",
        "(a < b) == (c < d)": "a < b == (c < d)",
        "!(a && b) || c": "!(a && b) || c",
    }
    for src, want in cases.items():
        text = to_tc(parse(f"def f() -> (O) {{ O(i) = {src} }}"))
        got = re.search(r"O\(i\) = (.*)\n", text).group(1)
        assert got == want, src
