"""Random valid TC programs, compiled with random mapping options, against the oracle.

Programs come from a small grammar that always type-checks: 1-3 inputs of rank 1-3 over four
size symbols (1-6 each; sometimes two of them 16-40, so that parallel loops actually run), and
1-3 statements, each writing a new tensor from the inputs and the tensors written before it, with
``=``, ``+=!``, ``*=!`` (values kept near 1), ``max=!`` or ``min=!``; subscripts are index
variables in any order (permutations, diagonals, broadcasts: a left-hand index no access uses gets
a ``where i in 0:N``), constants, shifts ``X(i + c)`` whose range TC's inference narrows, or
that ``where i in 0:N-c`` restricts when nothing else does, and reads ``X(i - c)`` guarded by
``i >= c && i - c < N ? ... : literal``; domain conditions between two indices (``i <= j``) make
some domains non-rectangular. Values are float32 or float64 (right-hand sides mix ``+ - * /``,
value selects, ``fmax``/``fmin``, ``tanh``, ``fabs`` and ``exp`` of bounded values) or int32 or
int64 (``+ - * / %``, ``max``/``min``, selects: wrapping arithmetic, ``/`` and ``%`` by zero, the
literal 0 included, give 0; compared exactly). Sometimes a statement is
followed by an in-place rewrite of its tensor, and earlier tensors are left out of ``-> (...)``
(temporaries).

The compiled results must match the oracle (within the float tolerance), or, when the oracle
refuses the call (an empty range or an access out of bounds for the drawn sizes), the compiled
call must raise the same TCError subclass.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import compiled_helpers as H
import pytest
import torch
from conftest import examples
from hypothesis import HealthCheck, assume, event, given, note, settings
from hypothesis import strategies as st

import tcjit
from tcjit import TCError, TCWarning
from tcjit.mapping.options import MappingOptions


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")), H.checking_stack_frames():
        yield


SYMS = ("N0", "N1", "N2", "N3")
LHS_VARS = ("i", "j", "k")
RED_VARS = ("r_a", "r_b")
OPS = ("=", "+=!", "*=!", "max=!", "min=!")


@dataclass(frozen=True)
class Grammar:
    """The expression forms of one value kind."""

    unary: tuple[str, ...]
    binary: tuple[str, ...]
    literals: tuple[str, ...]
    follow_ups: tuple[str, ...]
    product: str  # how a ``*=!`` right-hand side is kept near 1 (floats) or left alone (integers)


FLOAT = Grammar(
    unary=("{a}", "{a}", "{a}", "tanh({a})", "fabs({a})", "-{a}", "exp(tanh({a}))", "0.5 * {a}"),
    binary=(
        "({a} + {b})",
        "({a} - {b})",
        "({a} * {b})",
        "({a} / (1.0 + fabs({b})))",
        "fmax({a}, {b})",
        "fmin({a}, {b})",
        "({a} > {b} ? {a} : 0.5 * {b})",
    ),
    literals=("1.5", "0.25", "2.0", "-1.0"),
    follow_ups=("fmax({o}, 0.0)", "{o} * 0.5 + 1.0", "tanh({o})", "{o} / (1.0 + fabs({o}))"),
    product="1.0 + 0.01 * tanh({a})",
)
# Integers: exact comparisons; overflow wraps, and / and % by zero give 0 (literal 0 included).
INTEGER = Grammar(
    unary=("{a}", "{a}", "{a}", "-{a}", "({a} % 5)", "({a} / 2)", "max({a}, 0)"),
    binary=(
        "({a} + {b})",
        "({a} - {b})",
        "({a} * {b})",
        "({a} / {b})",
        "({a} % {b})",
        "max({a}, {b})",
        "min({a}, {b})",
        "({a} < {b} || {a} == 3 ? {b} : {a})",
    ),
    literals=("3", "-2", "7", "0"),
    follow_ups=("max({o}, 0)", "{o} * 3 + 1", "{o} / 2", "{o} % 7"),
    product="{a}",
)
TYPES = [
    ("float", torch.float32, FLOAT),
    ("float", torch.float32, FLOAT),
    ("float", torch.float32, FLOAT),
    ("double", torch.float64, FLOAT),
    ("int32", torch.int32, INTEGER),
    ("int64", torch.int64, INTEGER),
]


class Program:
    def __init__(self, source, sizes, inputs, dtype, statements):
        self.source = source
        self.sizes = sizes
        self.inputs = inputs  # (name, dims)
        self.dtype = dtype
        self.statements = statements

    def make_inputs(self, seed: int) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(seed)
        out = []
        for _, dims in self.inputs:
            shape = tuple(self.sizes[d] for d in dims)
            if self.dtype.is_floating_point:
                out.append(torch.randn(shape, generator=g, dtype=torch.float64).to(self.dtype))
            else:
                out.append(torch.randint(-8, 8, shape, generator=g).to(self.dtype))
        return tuple(out)


@st.composite
def programs(draw) -> Program:
    sizes = {s: draw(st.integers(1, 6)) for s in SYMS}
    if draw(st.integers(0, 3)) == 0:  # large enough for OpenMP threads (>= 2**15 instances)
        for s in draw(st.permutations(SYMS))[:2]:
            sizes[s] = draw(st.integers(16, 40))
    tname, dtype, grammar = draw(st.sampled_from(TYPES))

    # (name, bound of each dimension: its size symbol, or 'T.k' for a tensor written earlier)
    tensors: list[tuple[str, tuple[str, ...]]] = []
    inputs = []
    for t in range(draw(st.integers(1, 3))):
        dims = tuple(draw(st.sampled_from(SYMS)) for _ in range(draw(st.integers(1, 3))))
        inputs.append((f"X{t}", dims))
        tensors.append((f"X{t}", dims))

    used = sorted({d for _, dims in inputs for d in dims})  # a where bound may name only these
    lines: list[str] = []
    written: list[str] = []
    for s in range(draw(st.integers(1, 3))):
        name = f"O{s}"
        lhs = list(draw(st.permutations(LHS_VARS))[: draw(st.integers(0, 3))])
        op = draw(st.sampled_from(OPS))
        red = list(RED_VARS[: draw(st.integers(1, 2))]) if op != "=" else []
        variables = lhs + red
        occurrences: dict[str, list[tuple[str, int]]] = {v: [] for v in variables}
        leaves = []
        guarded: set[str] = set()  # variables read under a select guard (they need a range too)
        for _ in range(draw(st.integers(1, 3))):
            tensor, dims = draw(st.sampled_from(tensors))
            if not dims:
                leaves.append(tensor)
                continue
            subs, guards = [], []
            for bound in dims:
                if not variables or draw(st.integers(0, 9)) == 0:
                    subs.append("0")
                    continue
                v = draw(st.sampled_from(variables))
                if draw(st.integers(0, 7)) == 0:  # a read below the range, guarded by a select
                    c = draw(st.integers(1, 2))
                    guards.append(f"{v} >= {c} && {v} - {c} < {bound}")
                    guarded.add(v)
                    subs.append(f"{v} - {c}")
                    continue
                shift = draw(st.sampled_from((0, 0, 0, 1, 2)))
                occurrences[v].append((bound, shift))
                subs.append(v if shift == 0 else f"{v} + {shift}")
            access = f"{tensor}({', '.join(subs)})"
            if guards:
                access = f"({' && '.join(guards)} ? {access} : {draw(st.sampled_from(grammar.literals))})"
            leaves.append(access)
        if draw(st.booleans()):
            leaves.append(draw(st.sampled_from(grammar.literals)))
        expr = draw(st.sampled_from(grammar.unary)).format(a=leaves[0])
        for leaf in leaves[1:]:
            b = draw(st.sampled_from(grammar.unary)).format(a=leaf)
            expr = draw(st.sampled_from(grammar.binary)).format(a=expr, b=b)
        expr = draw(st.sampled_from(grammar.unary)).format(a=expr)
        if op == "*=!":
            expr = grammar.product.format(a=expr)

        where = []
        for v in variables:
            occ = occurrences[v]
            if not occ:
                if v in lhs or v in guarded:  # a broadcast, or only read under a guard
                    where.append(f"{v} in 0:{draw(st.sampled_from(used))}")
            elif all(shift for _, shift in occ):  # only shifted: inference would start below 0
                # the tightest bound among the inputs' (sizes known), else a written tensor's
                bound, c = min(occ, key=lambda o: (sizes.get(o[0], 1 << 20) - o[1], o))
                where.append(f"{v} in 0:{bound}-{c}")
                # the other shifted reads as domain conditions (written tensors' sizes are unknown here)
                where += sorted({f"{v} + {c2} < {b2}" for b2, c2 in occ if (b2, c2) != (bound, c)})
        live = [v for v in variables if v in lhs or occurrences[v]]
        if len(live) >= 2 and draw(st.integers(0, 3)) == 0:  # a non-rectangular domain
            v1, v2 = draw(st.permutations(live))[:2]
            cond = draw(st.sampled_from(("{a} <= {b}", "{a} < {b} + 2", "{a} + {b} < 5")))
            where.append(cond.format(a=v1, b=v2))
        target = f"{name}({', '.join(lhs)})" if lhs else name
        line = f"    {target} {op} {expr}"
        if where:
            line += " where " + ", ".join(where)
        lines.append(line)
        if draw(st.integers(0, 3)) == 0:
            lines.append(f"    {target} = {draw(st.sampled_from(grammar.follow_ups)).format(o=target)}")
        written.append(name)
        tensors.append((name, tuple(f"{name}.{d}" for d in range(len(lhs)))))

    # Earlier tensors may be left out of the outputs (temporaries); the last one never is.
    outputs = [w for w in written[:-1] if draw(st.integers(0, 2))] + [written[-1]]
    params = ", ".join(f"{tname}({', '.join(dims)}) {n}" for n, dims in inputs)
    source = f"def fuzz({params}) -> ({', '.join(outputs)}) {{\n" + "\n".join(lines) + "\n}"
    return Program(source, sizes, inputs, dtype, len(lines))


@st.composite
def mapping_options(draw) -> MappingOptions:
    tile = draw(st.one_of(st.sampled_from(H.TILES), st.lists(st.integers(0, 9), max_size=4).map(tuple)))
    register_tile = draw(
        st.one_of(st.just(()), st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
    )
    return (
        MappingOptions("naive")
        .outer_schedule_fusion_strategy(draw(st.sampled_from(H.FUSIONS)))
        .tile(*tile)
        .fix_parameters_before_scheduling(draw(st.booleans()))
        .parallelize(draw(st.booleans()))
        .vectorize(draw(st.booleans()))
        .unroll(draw(st.sampled_from((1, 2, 4, 8, 32))))
        .register_tile(*register_tile)
    )


def _check_program(program: Program, options: MappingOptions) -> None:
    note(program.source)
    note(f"sizes: {program.sizes}")
    note(f"options: {options!r}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TCWarning)
            tcjit.define(program.source)
    except TCError as e:
        event(f"rejected by define: {type(e).__name__}")
        assume(False)
    inputs = program.make_inputs(seed=sum(program.sizes.values()))
    biggest = max(program.sizes.values())
    reduction_length = biggest * biggest * program.statements
    try:
        H.check_against_oracle(
            program.source, None, inputs, options=options, reduction_length=reduction_length, what="fuzz"
        )
    except TCError as e:  # the oracle refused too, with the same class (checked)
        event(f"refused by both: {type(e).__name__}")
        return
    event("compared")


SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    "database": None,
}


@settings(max_examples=examples(25, 300), derandomize=examples(True, False), **SETTINGS)
@given(program=programs(), options=mapping_options())
def test_random_programs_match_the_oracle(program: Program, options: MappingOptions) -> None:
    _check_program(program, options)


def test_the_grammar_mostly_gives_valid_programs() -> None:
    """Keep the rejection rate of the generator low: of 60 drawn programs (no compilation),
    at least 90% pass tcjit.define."""
    rejected = 0
    draws = []

    @settings(max_examples=60, derandomize=True, **SETTINGS)
    @given(program=programs())
    def draw(program: Program) -> None:
        draws.append(program.source)

    draw()
    for source in draws:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TCWarning)
                tcjit.define(source)
        except TCError:
            rejected += 1
    assert len(draws) >= 30
    assert rejected <= 0.1 * len(draws), f"{rejected} of {len(draws)} generated programs rejected"
