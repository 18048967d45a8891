"""Random loop nests of the shape of convolutions and masked contractions, compiled, against the oracle.

tests/backends/test_compiled_fuzz.py draws small programs over rank 1-3 tensors with naive-based options.
This module draws what it left out, where generated C once crashed the process (issue 29):

* tensors of rank 1-5 and outputs of rank 0-5;
* windowed and strided subscripts: sums of index terms with coefficients 1-3 and an offset
  (``X(b, 2*h + 3*w + r_k + 1)``), and the convolution window ``h + r_i`` whose range inference
  narrows ``h``;
* several reduction indices in one statement (up to three), and a second statement that reduces
  or rescales the first's result;
* conditionals inside reductions: uint8 and bool masks (``M(f, r_c) == 1``, ``M(a, b) && ...``),
  comparisons of values (``X(...) > 0.0``) and of indices (``r_i <= h``), under ``?:``;
* sizes that are 1, 4 or primes (so most tiles, vector widths and unroll factors do not divide
  them), now and then larger ones so that OpenMP threads run;
* options: the defaults a call without ``options=`` gets, every preset, uniformly random points of
  the tuner's search space (based on the defaults, as the tuner searches), and naive-based ones;
* the vector width the generated C is planned for: 16, 32 or 64 bytes (``TCJIT_VECTOR_BYTES``).

The compiled result must match the oracle, or, where the oracle refuses the call (an access out
of bounds for the drawn sizes), the compiled call must raise the same TCError subclass.
"""

from __future__ import annotations

import random
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
from tcjit.cpu_runtime import VECTOR_WIDTHS
from tcjit.mapping.options import PRESETS, MappingOptions
from tcjit.mapping.search_space import search_space


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")), H.checking_stack_frames():
        yield


LHS_VARS = ("a", "b", "c", "d", "e")
RED_VARS = ("r_i", "r_j", "r_k")
EXTENTS = (1, 2, 3, 4, 5, 7)
LARGE_EXTENTS = (11, 13, 17, 31)
FLOAT_WRAPS = ("{x}", "{x}", "fmax(0.0, {x})", "tanh({x})", "fabs({x})", "0.5 * {x}")
INT_WRAPS = ("{x}", "{x}", "max({x}, 0)", "({x} % 5)")


@dataclass(frozen=True)
class Nest:
    """A drawn program: its source, its size values and how to make its inputs."""

    source: str
    sizes: dict[str, int]
    inputs: tuple[tuple[str, str, tuple[str, ...]], ...]  # (name, TC type, size symbols)
    reduction_length: int

    def make_inputs(self, seed: int) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(seed)
        out = []
        for _, tname, dims in self.inputs:
            shape = tuple(self.sizes[d] for d in dims)
            if tname == "uint8":
                out.append(torch.randint(0, 3, shape, generator=g).to(torch.uint8))
            elif tname == "bool":
                out.append(torch.randint(0, 2, shape, generator=g).to(torch.bool))
            elif tname in ("float", "double"):
                dtype = torch.float32 if tname == "float" else torch.float64
                out.append(torch.randn(shape, generator=g, dtype=torch.float64).to(dtype))
            else:
                out.append(torch.randint(-6, 7, shape, generator=g).to(torch.int32))
        return tuple(out)


@st.composite
def nests(draw) -> Nest:
    tname = draw(st.sampled_from(("float", "float", "float", "double", "int32")))
    floating = tname != "int32"
    wraps = FLOAT_WRAPS if floating else INT_WRAPS
    zero = "0.0" if floating else "0"
    lhs = list(LHS_VARS[: draw(st.integers(0, 5))])
    red = list(RED_VARS[: draw(st.integers(1, 3))])
    extent = {v: draw(st.sampled_from(EXTENTS)) for v in lhs + red}
    if lhs and draw(st.integers(0, 3)) == 0:  # enough instances for OpenMP threads and tiles
        extent[draw(st.sampled_from(lhs))] = draw(st.sampled_from(LARGE_EXTENTS))
    inferred: set[str] = set()  # left-hand indices whose range inference narrows (no where)

    sizes: dict[str, int] = {}
    inputs: list[tuple[str, str, tuple[str, ...]]] = []

    def new_size(value: int) -> str:
        name = f"S{len(sizes)}"
        sizes[name] = value
        return name

    def subscript(pool: list[str]) -> tuple[str, int]:
        """A subscript over ``pool`` and the size its dimension needs."""
        kind = draw(st.integers(0, 9))
        if kind == 0 or not pool:
            c = draw(st.integers(0, 1))
            return str(c), c + 1
        if kind <= 5:
            v = draw(st.sampled_from(pool))
            return v, extent[v]
        terms = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True))
        coefs = [draw(st.integers(1, 3)) for _ in terms]
        offset = draw(st.integers(0, 2))
        text = " + ".join(v if k == 1 else f"{k}*{v}" for v, k in zip(terms, coefs))
        if offset:
            text += f" + {offset}"
        return text, sum(k * (extent[v] - 1) for v, k in zip(terms, coefs)) + offset + 1

    def read(rank: int) -> str:
        pool = lhs + red
        subs, dims = [], []
        for _ in range(rank):
            text, need = subscript(pool)
            subs.append(text)
            dims.append(new_size(need + (1 if draw(st.integers(0, 5)) == 0 else 0)))
        name = f"X{len(inputs)}"
        inputs.append((name, tname, tuple(dims)))
        return f"{name}({', '.join(subs)})"

    # Convolution windows: h + r_i over an input whose range inference bounds h (one or two
    # windows, among plain index dimensions: I(b, r_c, h + r_i, w + r_j)).
    factors = []
    if lhs and draw(st.booleans()):
        pairs = list(zip(draw(st.permutations(lhs)), draw(st.permutations(red))))
        pairs = pairs[: draw(st.integers(1, min(2, len(pairs))))]
        plain = draw(st.lists(st.sampled_from(lhs + red), max_size=2))
        subs, dims = [], []
        for v in plain:
            subs.append(v)
            dims.append(new_size(extent[v]))
        for h, r in pairs:
            subs.append(f"{h} + {r}")
            dims.append(new_size(extent[h] + extent[r] - 1))
            inferred.add(h)
        inputs.append((f"X{len(inputs)}", tname, tuple(dims)))
        factors.append(f"X{len(inputs) - 1}({', '.join(subs)})")
    for _ in range(draw(st.integers(1, 3)) - len(factors)):
        factors.append(read(draw(st.integers(1, 5))))
    body = " * ".join(draw(st.sampled_from(wraps)).format(x=f) for f in factors)

    conditions = []
    for _ in range(draw(st.integers(0, 2))):
        form = draw(st.integers(0, 3))
        pool = lhs + red
        if form == 0:  # a uint8 mask compared with a literal
            subs = [draw(st.sampled_from(pool)) for _ in range(draw(st.integers(1, 2)))]
            dims = tuple(new_size(extent[v]) for v in subs)
            inputs.append((f"M{len(inputs)}", "uint8", dims))
            conditions.append(f"M{len(inputs) - 1}({', '.join(subs)}) == 1")
        elif form == 1:  # a bool mask
            subs = [draw(st.sampled_from(pool)) for _ in range(draw(st.integers(1, 2)))]
            dims = tuple(new_size(extent[v]) for v in subs)
            inputs.append((f"M{len(inputs)}", "bool", dims))
            conditions.append(f"M{len(inputs) - 1}({', '.join(subs)})")
        elif form == 2:  # a comparison of values
            conditions.append(f"{read(draw(st.integers(1, 3)))} > {zero}")
        elif len(pool) >= 2:  # a comparison of indices
            v, w = draw(st.permutations(pool))[:2]
            conditions.append(f"{v} <= {w}")
    if conditions:
        body = f"({' && '.join(conditions)}) ? {body} : {zero}"

    op = draw(st.sampled_from(("+=!", "+=!", "max=!", "min=!")))
    where = [f"{v} in 0:{extent[v]}" for v in lhs + red if v not in inferred]
    target = f"O({', '.join(lhs)})" if lhs else "O"
    lines = [f"    {target} {op} {body}" + (f" where {', '.join(where)}" if where else "")]
    outputs = ["O"]
    if lhs and draw(st.booleans()):  # a second reduction, over the first's result
        keep = lhs[: draw(st.integers(0, len(lhs) - 1))]
        follow = draw(st.sampled_from(("{o}", "fmax({o}, 0.0)" if floating else "max({o}, 0)", "{o} * 2")))
        second = f"P({', '.join(keep)})" if keep else "P"
        lines.append(f"    {second} +=! {follow.format(o=target)}")
        outputs = ["P"] if draw(st.booleans()) else ["O", "P"]
    params = ", ".join(f"{t}({', '.join(dims)}) {n}" for n, t, dims in inputs)
    source = f"def nest({params}) -> ({', '.join(outputs)}) {{\n" + "\n".join(lines) + "\n}"
    length = 1
    for v in red:
        length *= extent[v]
    return Nest(source, sizes, tuple(inputs), length * max([1, *extent.values()]))


@st.composite
def option_points(draw) -> tuple[str, object]:
    """How a call is mapped: ``("defaults", None)``, ``("preset", name)``, ``("space", seed)`` (a
    random point of the tuner's space around the defaults) or ``("naive", options)``."""
    kind = draw(st.sampled_from(("defaults", "defaults", "preset", "space", "space", "naive")))
    if kind == "preset":
        return kind, draw(st.sampled_from(PRESETS))
    if kind == "space":
        return kind, draw(st.integers(0, 2**31))
    if kind == "naive":
        register_tile = draw(st.one_of(st.just(()), st.lists(st.integers(1, 4), min_size=1, max_size=3)))
        return kind, (
            MappingOptions("naive")
            .tile(*draw(st.lists(st.integers(0, 9), max_size=4)))
            .vectorize(draw(st.booleans()))
            .parallelize(draw(st.booleans()))
            .unroll(draw(st.sampled_from((1, 2, 4, 8))))
            .register_tile(*register_tile)
        )
    return kind, None


def resolve_options(point: tuple[str, object], kernel: tcjit.Kernel, inputs) -> MappingOptions | None:
    """The options of an :func:`option_points` draw for ``kernel`` on ``inputs``."""
    kind, value = point
    if kind == "defaults":
        return None
    if kind == "preset":
        return MappingOptions(value)
    if kind == "naive":
        return value
    from tcjit.binding import bind
    from tcjit.mapping.prepare import outer_band_extents
    from tcjit.pipeline import default_options

    sizes = bind(kernel.definition, inputs).sizes
    defaults = default_options(kernel.definition, sizes, "cpu").validate("cpu")
    space = search_space("cpu", outer_band_extents(kernel.definition, sizes, defaults), base=defaults)
    return space.sample(random.Random(value))


def check_nest(nest: Nest, point: tuple[str, object], width: int) -> None:
    note(nest.source)
    note(f"sizes: {nest.sizes}; options: {point!r}; vector bytes: {width}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TCWarning)
            kernel = tcjit.define(nest.source)
    except TCError as e:
        event(f"rejected by define: {type(e).__name__}")
        assume(False)
    inputs = nest.make_inputs(seed=sum(nest.sizes.values()))
    with H.environment("TCJIT_VECTOR_BYTES", str(width)):
        try:
            options = resolve_options(point, kernel, inputs)
        except TCError as e:  # sizes the oracle refuses too (checked below)
            event(f"options unresolved: {type(e).__name__}")
            options = None
        try:
            H.check_against_oracle(
                nest.source,
                None,
                inputs,
                options=options,
                reduction_length=nest.reduction_length,
                what="nest",
            )
        except TCError as e:
            event(f"refused by both: {type(e).__name__}")
            return
    event(f"compared: {point[0]}")


SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    "database": None,
}


@settings(max_examples=examples(30, 400), derandomize=examples(True, False), **SETTINGS)
@given(nest=nests(), point=option_points(), width=st.sampled_from(VECTOR_WIDTHS))
def test_random_nests_match_the_oracle(nest: Nest, point, width: int) -> None:
    check_nest(nest, point, width)


def test_the_nest_grammar_mostly_gives_valid_programs() -> None:
    """At least 90% of 80 drawn nests pass tcjit.define (no compilation), and the draws cover
    every form the module promises: rank 5, strided windows, several reductions, masks."""
    draws: list[Nest] = []

    @settings(max_examples=80, derandomize=True, **SETTINGS)
    @given(nest=nests())
    def draw(nest: Nest) -> None:
        draws.append(nest)

    draw()
    rejected = 0
    for nest in draws:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TCWarning)
                tcjit.define(nest.source)
        except TCError:
            rejected += 1
    assert rejected <= 0.1 * len(draws), f"{rejected} of {len(draws)} drawn nests rejected"
    texts = "\n".join(n.source for n in draws)
    assert any(len(dims) == 5 for n in draws for _, _, dims in n.inputs), "no rank-5 tensor drawn"
    for form in ("uint8(", "bool(", "2*", "r_k", "== 1 ?"[:4], " + r_"):
        assert form in texts, f"no drawn nest has {form!r}"
