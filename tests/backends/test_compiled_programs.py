"""Every TC program the oracle's tests run, compiled, against the oracle; plus the corners of the
language's value semantics (every dtype, casts, integer division, gathers, builtins).

The oracle's test modules (test_reference_programs.py, test_reference_kernels.py,
test_reference_builtins.py) write their programs inline, each with an independent expected result
(hand-written torch, pure Python with C semantics, mpmath). Here each of those tests runs again
with the module's ``reference`` replaced by :class:`compiled_helpers.CompiledReference`: every
``evaluate`` compiles the program (with a rotating point of the options matrix), runs it, checks
it against the real oracle (exactly for integers and bools; within tolerance for floats; the same
``TCError`` subclass when the oracle raises) and hands the compiled result to the test's own
assertions. The tests below them add what those modules do not isolate.
"""

from __future__ import annotations

import inspect
import math
import warnings

import compiled_helpers as H
import pytest
import test_reference_builtins as TRB
import test_reference_kernels as TRK
import test_reference_programs as TRP
import torch

import tcjit
from tcjit import TCBoundsError, TCCallError, TCError, TCRangeError, TCTypeError, TCWarning
from tcjit.polyhedral.lang.builtins import BUILTINS

F32 = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")):
        yield


# ===================================================================== the oracle's tests, compiled
def _collect(module, skip: frozenset[str] = frozenset()) -> list[tuple[str, dict, str, bool]]:
    """``(test name, kwargs, id, full)`` for every test function of ``module`` that runs a program
    (calls ``run`` or ``evaluate``) and every combination of its parametrisations; ``full``: it is
    marked for the full tier."""
    out = []
    for name, fn in inspect.getmembers(module, inspect.isfunction):
        if not name.startswith("test_") or fn.__module__ != module.__name__ or name in skip:
            continue
        body = inspect.getsource(fn)
        if "run(" not in body and "evaluate(" not in body:
            continue  # front-end only (check_source): nothing to compile
        marks = getattr(fn, "pytestmark", [])
        full = any(m.name == "full" for m in marks)
        combos: list[tuple[dict, str]] = [({}, "")]
        for m in marks:
            if m.name != "parametrize":
                continue
            argnames, values = m.args[0], m.args[1]
            names = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
            ids = m.kwargs.get("ids")
            new = []
            for kwargs, label in combos:
                for j, v in enumerate(values):
                    if isinstance(v, type(pytest.param(0))):
                        vid, v = v.id, v.values
                    else:
                        vid = None
                    vs = v if len(names) > 1 else (v,)
                    vid = vid or (ids[j] if ids else "-".join(map(str, vs)))
                    new.append(({**kwargs, **dict(zip(names, vs))}, f"{label}-{vid}" if label else vid))
            combos = new
        for kwargs, label in combos:
            out.append((name, kwargs, f"{name}[{label}]" if label else name, full))
    return out


def _params(cases, *, full_only=frozenset()):
    return [
        pytest.param(name, kwargs, i, id=tid, marks=pytest.mark.full if (full or name in full_only) else ())
        for i, (name, kwargs, tid, full) in enumerate(cases)
    ]


def _run_with_shim(module, name: str, kwargs: dict, configs: list[H.Config], monkeypatch) -> None:
    for config in configs:
        shim = H.CompiledReference(config.options())
        monkeypatch.setattr(module, "reference", shim)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TCWarning)  # the module's own tests check the warnings
            getattr(module, name)(**kwargs)
        assert shim.calls > 0, f"{name} ran no program"


def _configs(i: int, full_tier: bool, n_full: int = 4) -> list[H.Config]:
    return [H.rotating_config(i + 7 * j) for j in range(n_full if full_tier else 1)]


PROGRAM_CASES = _collect(TRP)
XFAIL_PROGRAMS: dict[str, str] = {}


def _program_params():
    out = []
    for p in _params(PROGRAM_CASES):
        name = p.values[0]
        marks = list(p.marks)
        if name in XFAIL_PROGRAMS:
            marks.append(pytest.mark.xfail(strict=True, raises=TCBoundsError, reason=XFAIL_PROGRAMS[name]))
        out.append(pytest.param(*p.values, id=p.id, marks=marks))
    return out


@pytest.mark.parametrize("name, kwargs, i", _program_params())
def test_reference_program_compiled(name: str, kwargs: dict, i: int, full_tier: bool, monkeypatch) -> None:
    """test_reference_programs.py with every ``evaluate`` compiled and checked against the oracle."""
    _run_with_shim(TRP, name, kwargs, _configs(i, full_tier), monkeypatch)


# The suite at every small size in float32 and float64 is test_compiled_suite's job in the default
# tier; here it runs in the full tier. The memory test measures the oracle itself.
KERNEL_CASES = _collect(TRK, skip=frozenset({"test_memory_stays_bounded_by_max_points"}))


@pytest.mark.parametrize(
    "name, kwargs, i",
    _params(
        KERNEL_CASES,
        full_only=frozenset(
            {
                "test_suite_kernel_matches_torch",
                "test_temporaries_give_the_same_final_outputs",  # test_compiled_suite does these
                "test_tiny_chunks_give_the_same_answer",  # the suite again (max_points is the oracle's)
            }
        ),
    ),
)
def test_reference_kernel_compiled(name: str, kwargs: dict, i: int, full_tier: bool, monkeypatch) -> None:
    """test_reference_kernels.py with every ``evaluate`` compiled and checked against the oracle."""
    _run_with_shim(TRK, name, kwargs, _configs(3 * i + 1, full_tier, 2), monkeypatch)


BUILTIN_CASES = _collect(TRB)


@pytest.mark.full
@pytest.mark.parametrize("name, kwargs, i", _params(BUILTIN_CASES))
def test_reference_builtin_compiled(name: str, kwargs: dict, i: int, monkeypatch) -> None:
    """test_reference_builtins.py (one program per builtin, f32 and f64, against mpmath at its
    tolerances) with the program compiled and checked against the oracle."""
    _run_with_shim(TRB, name, kwargs, [H.rotating_config(i)], monkeypatch)


# ================================================================================= every builtin
def _builtin_args(name: str, dtype: torch.dtype) -> list[torch.Tensor]:
    """The points test_reference_builtins uses (inside each builtin's domain)."""
    arity = BUILTINS[name]
    args = list(TRB._DOMAINS.get(name, [TRB._ANY]))
    n = len(args[0])
    for extra in (TRB._SECOND, TRB._THIRD, TRB._FOURTH)[len(args) - 1 : arity - 1]:
        args.append(extra[:n])
    return [torch.tensor(a, dtype=torch.float64).to(dtype) for a in args]


def _builtin_tolerance(dtype: torch.dtype) -> dict:
    # float64: libm vs the oracle's (mpmath-checked) values; float32: computed in float, a few ulps.
    return {"rtol": 1e-13, "atol": 1e-15} if dtype == torch.float64 else {"rtol": 4.8e-7, "atol": 1e-30}


def _builtin_program(names: list[str], dtype: torch.dtype) -> tuple[str, list[torch.Tensor]]:
    """One def with one statement (and output) per builtin, each on its own inputs."""
    tname = "double" if dtype == torch.float64 else "float"
    params, stmts, inputs = [], [], []
    for name in names:
        args = _builtin_args(name, dtype)
        pnames = [f"{name}_x{k}" for k in range(len(args))]
        params += [f"{tname}(N_{name}) {p}" for p in pnames]
        stmts.append(f"    O_{name}(i) = {name}({', '.join(f'{p}(i)' for p in pnames)})")
        inputs += args
    source = f"def builtins({', '.join(params)})\n    -> ({', '.join(f'O_{n}' for n in names)}) {{\n"
    return source + "\n".join(stmts) + "\n}", inputs


ALL_BUILTINS = TRB._builtin_names()
assert len(ALL_BUILTINS) == 65 and set(ALL_BUILTINS) == set(BUILTINS) - {"min", "max"}
#: Builtins per program in the default tier: compile time grows faster than linearly with the
#: number of statements (65 in one def take ~14 s, 6 groups of 11 ~3 s).
GROUP = 11


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("group", range(0, 65, GROUP), ids=lambda g: f"{ALL_BUILTINS[g]}..")
def test_every_builtin(group: int, dtype: torch.dtype) -> None:
    """Every builtin (the 64 CUDA names and ``sigmoid``), a group of them per def, on points inside
    its domain, against the oracle: float64 to 1e-13, float32 to 4 ulps (the full tier compiles one
    program per builtin and checks it against mpmath)."""
    names = ALL_BUILTINS[group : group + GROUP]
    source, inputs = _builtin_program(names, dtype)
    got = H.run_compiled(source, None, inputs, options=H.rotating_config(group).options())
    want = H.as_tuple(H.ORACLE(source, None, *inputs))
    assert len(got) == len(want) == len(names)
    for name, g, w in zip(names, got, want):
        assert g.dtype == dtype
        torch.testing.assert_close(
            g, w, **_builtin_tolerance(dtype), equal_nan=True, msg=lambda m, n=name: f"{n}: {m}"
        )


# ================================================================================ select-guarded reads
def test_accesses_guarded_by_a_select_are_not_refused() -> None:
    """``A(i - 1)`` is read only where ``i > 0`` (``?:``, ``&&`` and ``||`` evaluate only the operand
    they need): compiled, such reads are checked as the kernel runs, not refused at compile time
    (regression: lower_cpu's bounds proof once ignored the guard); when the guard lets a bad read
    through, the call raises TCBoundsError like the oracle."""
    A = torch.arange(4.0)
    src = "def shift(float(N) A) -> (O) { O(i) = i > 0 ? A(i - 1) : 0.0 where i in 0:N }"
    (O,) = H.check_against_oracle(src, None, (A,))
    assert O.tolist() == [0.0, 0.0, 1.0, 2.0]
    src = """def pos(float(N) A) -> (O) {
        O(i) = i > 0 && A(i - 1) > 0.5 || i == N - 1 && A(i) > 2.0 ? 1.0 : 0.0 where i in 0:N
    }"""
    (O,) = H.check_against_oracle(src, None, (A,))
    assert O.tolist() == [0.0, 0.0, 1.0, 1.0]
    src = "def bad(float(N) A) -> (O) { O(i) = i >= 0 ? A(i - 1) : 0.0 where i in 0:N }"
    with pytest.raises(TCBoundsError):
        H.check_against_oracle(src, None, (A,))


# ======================================================================================= every dtype
DTYPES = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}


def _extremes(tname: str) -> list[int | float]:
    dt = DTYPES[tname]
    if dt == torch.bool:
        return [True, False, True, True]
    if dt.is_floating_point:
        fi = torch.finfo(dt)
        return [fi.max, -fi.max, fi.tiny, -0.0, float("inf"), 1.0, float("nan"), 2.5]
    ii = torch.iinfo(dt)
    return [ii.max, ii.min, ii.max, ii.min + 1, 1, -1 if ii.min < 0 else 0, ii.max // 3, 7]


def _int_tensor(values: list, dt: torch.dtype) -> torch.Tensor:
    if dt == torch.uint64:  # carried as the bit pattern
        return torch.tensor([v - (1 << 64) if v >= 1 << 63 else v for v in values], dtype=torch.int64).view(
            torch.uint64
        )
    return torch.tensor(values, dtype=dt)


def _dtype_inputs(tname: str, n: int = 37) -> tuple[torch.Tensor, torch.Tensor]:
    """Random values of the type (tcjit.testing.random_inputs' distributions) with the extremes of
    the type up front: overflow wraps for integers, inf and NaN for floats."""
    dt = DTYPES[tname]
    g = torch.Generator().manual_seed(len(tname))
    out = []
    for k in range(2):
        if dt == torch.bool:
            x = torch.randint(0, 2, (n,), generator=g) == 1
        elif dt.is_floating_point:
            x = torch.randn(n, generator=g, dtype=torch.float64).to(dt)
        else:
            lo = 0 if tname.startswith("u") else -8
            x = torch.randint(lo, 16 if lo == 0 else 8, (n,), generator=g, dtype=torch.int64)
            x = _int_tensor(x.tolist(), dt) if dt == torch.uint64 else x.to(dt)
        ext = _extremes(tname)
        ext = ext if k == 0 else ext[::-1]
        head = (
            _int_tensor(ext, dt)
            if not dt.is_floating_point and dt != torch.bool
            else torch.tensor(ext, dtype=dt)
        )
        x[: len(ext)] = head
        out.append(x)
    return out[0], out[1]


@pytest.mark.parametrize("tname", list(DTYPES))
def test_every_dtype(tname: str) -> None:
    """Arithmetic, min/max, the four reductions, comparisons and selects in each of the 13 types,
    with the types' extremes (wrapping, inf, NaN) in the data; integers exactly as the oracle."""
    src = f"""
    def ops({tname}(N) A, {tname}(N) B) -> (S, D, P, Mx, Mn, Sum, Prod, Big, Small, Lt, Sel, Cp) {{
        S(i) = A(i) + B(i)
        D(i) = A(i) - B(i)
        P(i) = A(i) * B(i)
        Mx(i) = max(A(i), B(i))
        Mn(i) = min(A(i), B(i))
        Sum +=! A(r_i)
        Prod(i) *=! B(i + r_j) where r_j in 0:3
        Big max=! A(r_i)
        Small min=! A(r_i)
        Lt(i) = A(i) < B(i)
        Sel(i) = A(i) < B(i) ? A(i) : B(i)
        Cp(i) = A(i)
    }}"""
    A, B = _dtype_inputs(tname)
    config = H.rotating_config(list(DTYPES).index(tname))
    got = H.check_against_oracle(src, None, (A, B), options=config.options(), reduction_length=37, what=tname)
    assert got[-1].dtype == DTYPES[tname]


# ============================================================================ integer division by zero
def _c_div(a: int, b: int, bits: int, signed: bool) -> int:
    if b == 0:
        return 0
    if not signed:
        return a // b
    q = abs(a) // abs(b)
    return TRP.wrap(q if (a < 0) == (b < 0) else -q, bits)


def _c_rem(a: int, b: int, bits: int, signed: bool) -> int:
    if b == 0:
        return 0
    if not signed:
        return a % b
    return TRP.c_rem(a, b)


INT_TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("tname", INT_TYPES)
def test_integer_division_and_remainder_by_zero_and_min_by_minus_one(tname: str, full_tier: bool) -> None:
    """``/`` and ``%`` truncate; by zero (a tensor or the literal 0) they give 0; MIN / -1 wraps to
    MIN and MIN % -1 is 0: no trap, whatever the vectoriser does (37 elements: vector loops and
    their tails)."""
    dt = DTYPES[tname]
    bits = torch.iinfo(dt).bits
    signed = not tname.startswith("u")
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if signed:
        a = [7, -7, 7, -7, 0, 5, -5, lo, lo, hi, 13, -1, lo, 3, lo, hi]
        b = [2, 2, -2, -2, 3, 0, 0, -1, 1, -1, 13, 7, 0, lo, lo, lo]
    else:
        a = [7, 0, hi, 5, hi, hi, 1, 200, hi - 1]
        b = [2, 3, 1, 0, hi, 2, hi, 0, hi]
    reps = -(-37 // len(a))
    a, b = (a * reps)[:37], (b * reps)[:37]
    src = f"""
    def divmod({tname}(N) A, {tname}(N) B) -> (Q, R, Z, Y) {{
        Q(i) = A(i) / B(i)
        R(i) = A(i) % B(i)
        Z(i) = A(i) / 0
        Y(i) = A(i) % 0
    }}"""
    A, B = _int_tensor(a, dt), _int_tensor(b, dt)
    configs = [H.rotating_config(INT_TYPES.index(tname))]
    if full_tier:
        configs += [H.DEFAULT, H.Config("Min", (), H.MAPPINGS[3], True)]
    for config in configs:
        Q, R, Z, Y = H.check_against_oracle(src, None, (A, B), options=config.options(), what=tname)
        q = [v % (1 << bits) if not signed else v for v in H._as_int64(Q).tolist()]
        r = [v % (1 << bits) if not signed else v for v in H._as_int64(R).tolist()]
        assert q == [_c_div(x, y, bits, signed) for x, y in zip(a, b)]
        assert r == [_c_rem(x, y, bits, signed) for x, y in zip(a, b)]
        assert not Z.any() and not Y.any()


# ============================================================================================= casts
@pytest.mark.parametrize(
    "source_type",
    [
        "float32",
        "float64",
        "int64",
        "uint8",
        "bool",
        *(pytest.param(t, marks=pytest.mark.full) for t in ("int16", "float16")),
    ],
)
def test_casts_to_every_type(source_type: str) -> None:
    """``T(x)`` for every type T from a source type, on values every target can hold (floats
    truncate toward zero, integers narrower than the source wrap as C does)."""
    dt = DTYPES[source_type]
    if dt == torch.bool:
        X = torch.tensor([True, False, True, True, False] * 5)
    elif dt.is_floating_point:
        X = torch.tensor([0.0, 0.5, 1.75, 99.9, 127.0, 3.25, 42.5, 7.0, 0.999] * 3, dtype=torch.float64).to(
            dt
        )
    elif dt == torch.uint8:
        X = torch.tensor([0, 1, 127, 128, 200, 255, 3, 64, 99] * 3, dtype=dt)
    else:  # int16/int64: values that wrap in int8 and uint8, negative values for signed targets
        X = torch.tensor([0, 1, 127, 128, 255, 256, 300, -1, -128, -129, 1000, 7] * 3, dtype=dt)
    targets = list(DTYPES)
    stmts = "\n".join(f"        C_{t}(i) = {t}(X(i))" for t in targets)
    src = f"""
    def casts({source_type}(N) X) -> ({", ".join(f"C_{t}" for t in targets)}) {{
{stmts}
    }}"""
    got = H.check_against_oracle(src, None, (X,), what=source_type)
    assert [g.dtype for g in got] == [DTYPES[t] for t in targets]
    if dt.is_floating_point:
        assert got[targets.index("int32")].tolist() == [int(v) for v in X.tolist()]


# =========================================================================================== gathers
def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


GATHERS = """
def gathers(float(V,D) LUT, int32(B) I, int64(B,L) J, float(B,L) Wt, float(V,V) M)
    -> (E, Bag, Pair, Sh, GG, Safe) {
    E(b, d) = LUT(I(b), d)
    Bag(b, d) +=! Wt(b, r_l) * LUT(J(b, r_l), d)
    Pair(b) = M(I(b), J(b, 0))
    Sh(b) = LUT((I(b) + 1) % V, 0)
    GG(b) = LUT(J(I(b) % B, 0), 1)
    Safe(b) = J(b, 0) < V - 1 ? LUT(J(b, 0) + 1, 0) : -1.0
}"""


def _gather_inputs(V: int = 11, D: int = 37, B: int = 9, L: int = 4):
    g = torch.Generator().manual_seed(3)
    I = torch.randint(0, V, (B,), generator=g, dtype=torch.int32)
    J = torch.randint(0, V, (B, L), generator=g)
    J[0, 0] = V - 1  # Safe: the other branch would read LUT(V)
    return _randn(V, D, seed=1), I, J, _randn(B, L, seed=2), _randn(V, V, seed=4)


@pytest.mark.parametrize(
    "config", [H.DEFAULT, H.Config("Max", (1,), H.MAPPINGS[4], True)], ids=["default", "other"]
)
def test_gathers(config: H.Config) -> None:
    """Data-dependent subscripts: int32 and int64 indices, in a reduction, two at once, in an
    expression, a gather of a gather, and one guarded by a select whose other branch would be
    out of bounds (not evaluated, so no error)."""
    LUT, I, J, Wt, M = inputs = _gather_inputs()
    E, Bag, Pair, Sh, GG, Safe = H.check_against_oracle(GATHERS, None, inputs, options=config.options())
    assert torch.equal(E, LUT[I.long()])
    torch.testing.assert_close(Bag, torch.einsum("bl,bld->bd", Wt, LUT[J]), **F32)
    assert torch.equal(Pair, M[I.long(), J[:, 0]])
    assert torch.equal(Sh, LUT[(I.long() + 1) % 11, 0])
    assert torch.equal(GG, LUT[J[I.long() % 9, 0], 1])
    assert Safe[0].item() == -1.0


GATHER_1D = "def embed(float(V,D) LUT, int64(B) I) -> (O) { O(b, d) = LUT(I(b), d) }"
GATHER_SUM = "def bag(float(V,D) LUT, int64(B,L) I) -> (O) { O(b, d) +=! LUT(I(b, r_l), d) }"


@pytest.mark.parametrize("bad", [10, -1, 1 << 40], ids=["past-the-end", "negative", "huge"])
@pytest.mark.parametrize(
    "config",
    [
        pytest.param(H.DEFAULT, id="parallel"),
        pytest.param(H.Config("Min", (), H.MAPPINGS[1], False), id="serial", marks=pytest.mark.full),
    ],
)
def test_out_of_bounds_gather_raises_at_call_time(bad: int, config: H.Config) -> None:
    """An index outside the table raises TCBoundsError from the call (never a silent read or a
    crash), also from inside an OpenMP parallel loop (64 x 1024 = 65536 instances are enough to
    run on threads) and into given outputs; the kernel stays usable afterwards."""
    k = tcjit.define(GATHER_1D)
    LUT = _randn(10, 1024)
    I = torch.arange(64) % 10
    I[37] = bad
    opts = config.options()
    with pytest.raises(TCBoundsError, match="subscript 0 of 'LUT'"):
        H.check_against_oracle(GATHER_1D, None, (LUT, I), options=opts)
    with pytest.raises(TCBoundsError):
        k(LUT, I, options=opts, outputs=(torch.empty(64, 1024),))
    I[37] = 3
    assert torch.equal(k(LUT, I, options=opts), LUT[I])
    # In a reduction, the last element of the last row.
    J = torch.randint(0, 10, (5, 3), generator=torch.Generator().manual_seed(0))
    J[4, 2] = bad
    with pytest.raises(TCBoundsError):
        H.check_against_oracle(GATHER_SUM, None, (LUT, J), options=opts)


# =========================================================================== language features
FEATURES = [
    (
        "where-ranges-and-conditions",
        """
        def band(float(N,N) A, float(N) x) -> (Y, float(N) Z) {
            Y(i) +=! A(i, r_j) * x(r_j) where r_j in 0:N, r_j >= i - 1, r_j <= i + 1
            Z(i) = A(i, i + 1) where i in 0:N-1
        }""",
        lambda: (_randn(13, 13, seed=1), _randn(13, seed=2)),
    ),
    (
        "let-and-exists",
        """
        def lets(float(N,M) A, float(M) w) -> (O, E) {
            O(i, j) = y * y + y where y = A(i, j) * w(j)
            E(i, j) = i == j ? 1 : 0 where exists A(i, j)
        }""",
        lambda: (_randn(5, 7, seed=1), _randn(7, seed=2)),
    ),
    (
        "affine-lhs-scatters",
        """
        def scatter(float(L) A, float(K) W, float(N) v) -> (T, Mx, float(N,N) D, U) {
            T(2 * i + r_k) +=! A(i) * W(r_k)
            Mx(i + r_k) max=! A(i) * W(r_k)
            D(i, i) +=! v(i)
            U(3 * i) +=! A(i)
        }""",
        lambda: (_randn(9, seed=1), _randn(4, seed=2), _randn(6, seed=3)),
    ),
    (
        "rank0-outputs-and-scalars",
        """
        def scal(float(N) A, double s, int64 k, bool flag, float t) -> (S, double P, C, F) {
            S +=! A(r_i) * t
            P +=! float64(A(r_i)) * s + float64(k)
            C +=! A(r_i) > 0 ? k : 0
            F(i) = flag ? A(i) : -A(i)
        }""",
        lambda: (_randn(29, seed=1), 0.25, 3, True, 1.5),
    ),
    (
        "scalars-as-0d-tensors",
        """
        def scal(float(N) A, double s, int64 k, bool flag, float t) -> (S, double P, C, F) {
            S +=! A(r_i) * t
            P +=! float64(A(r_i)) * s + float64(k)
            C +=! A(r_i) > 0 ? k : 0
            F(i) = flag ? A(i) : -A(i)
        }""",
        lambda: (
            _randn(29, seed=1),
            torch.tensor(0.25, dtype=torch.float64),
            torch.tensor(-3),
            torch.tensor(False),
            torch.tensor(1.5),
        ),
    ),
    (
        "temporaries-chain",
        """
        def chain(float(N,M) A, float(M) v) -> (O) {
            t(i) +=! A(i, r_j) * v(r_j)
            u(i) = tanh(t(i))
            s +=! u(r_i)
            O(i) = u(i) - s / float(N)
        }""",
        lambda: (_randn(17, 23, seed=1), _randn(23, seed=2)),
    ),
    (
        "dimension-sizes-and-literal-dims",
        """
        def dims(float(N, 3) A, float(N) B) -> (O, Q) {
            O(i) = A(i, 0) * float(A.0) + A(i, 2) - B(N - 1 - i)
            Q(i, j) = B(i) * float(j) where j in 0:A.1
        }""",
        lambda: (_randn(8, 3, seed=1), _randn(8, seed=2)),
    ),
    (
        "index-arithmetic-values",
        """
        def idx(float(N) A) -> (O, Up, Roll) {
            O(i) = float(i * i % 7) - float(i / 3) + A(i)
            Up(i) = A(i / 3) where i in 0:3*N
            Roll(i) = A((i + 2) % N) where i in 0:N
        }""",
        lambda: (_randn(10, seed=1),),
    ),
    (
        "inplace-updates-of-one-tensor",
        """
        def upd(float(B,M) I, float(N,M) W, float(N) b) -> (O, R) {
            O(i, n) +=! I(i, r_m) * W(n, r_m)
            O(i, n) = O(i, n) + b(n)
            O(i, n) = fmax(O(i, n), 0)
            R(i) max=! O(i, r_n)
            R(i) = R(i) * 2.0
        }""",
        lambda: (_randn(6, 9, seed=1), _randn(5, 9, seed=2), _randn(5, seed=3)),
    ),
    (
        "prefix-scans",
        """
        def scans(float(N) A, int16(N) X) -> (S, P, Mn, IMn) {
            S(i) +=! A(r_j) where i in 0:N, r_j <= i
            P(i) *=! 1.0 + 0.1 * A(r_j) where i in 0:N, r_j < i
            Mn(i) min=! A(r_j) where i in 0:N, r_j < i
            IMn(i) min=! X(r_j) where i in 0:N, r_j > i
        }""",
        lambda: (_randn(21, seed=1), torch.arange(21, dtype=torch.int16) * 7 % 11 - 5),
    ),
]


@pytest.mark.parametrize("src, make", [pytest.param(s, m, id=n) for n, s, m in FEATURES])
def test_language_features(src: str, make, full_tier: bool) -> None:
    """Where-clauses (ranges, domain conditions, lets, exists), affine left-hand sides, rank-0
    outputs, scalar arguments (numbers and 0-d tensors), temporaries, ``T.k``, literal dimensions,
    index values, in-place rewrites of one tensor, scans: compiled = oracle."""
    i = [s for _, s, _ in FEATURES].index(src)
    configs = H.all_configs()[i * 13 :: 37] if full_tier else [H.rotating_config(i * 2)]
    for config in configs:
        H.check_against_oracle(src, None, make(), options=config.options(), reduction_length=30)


# ============================================================================ errors: same as oracle
MM = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"
SCALAR_ARG = "def sa(float(N) A, uint8 s) -> (O) { O(i) = A(i) + float(s) }"
ERRORS = [
    ("too-few-inputs", MM, lambda: (_randn(3, 4),), TCCallError),
    ("too-many-inputs", MM, lambda: (_randn(3, 4), _randn(4, 5), _randn(4, 5)), TCCallError),
    ("dtype", MM, lambda: (_randn(3, 4), _randn(4, 5).double()), TCCallError),
    ("rank", MM, lambda: (_randn(3, 4), _randn(4)), TCCallError),
    ("sizes-contradict", MM, lambda: (_randn(3, 4), _randn(5, 5)), TCCallError),
    ("meta-tensor", MM, lambda: (_randn(3, 4), torch.empty(4, 5, device="meta")), TCCallError),
    ("not-a-tensor", MM, lambda: (_randn(3, 4), [[1.0] * 5] * 4), TCCallError),
    (
        "literal-dim",
        "def g(float(M, 4) X) -> (O) { O(m) = X(m, 0) }",
        lambda: (_randn(3, 5),),
        TCCallError,
    ),
    (
        "repeated-size",
        "def t(float(N, N) A) -> (T) { T +=! A(r_i, r_i) }",
        lambda: (_randn(3, 4),),
        TCCallError,
    ),
    (
        "scalar-given-a-vector",
        "def s(float(N) A, float a) -> (O) { O(i) = a * A(i) }",
        lambda: (_randn(3), _randn(3)),
        TCCallError,
    ),
    (
        "empty-range",
        "def e(float(N) A) -> (O) { O(i) = A(i) where i in 0:N-3 }",
        lambda: (_randn(2),),
        TCRangeError,
    ),
    (
        "empty-conv-range",
        "def c(float(H) I, float(K) W) -> (O) { O(h) +=! I(h + r_k) * W(r_k) }",
        lambda: (_randn(3), _randn(5)),
        TCRangeError,
    ),
    (
        "affine-read-past-a-smaller-input",
        "def o(float(N) A, float(M) B) -> (O) { O(i) = A(i) + B(i) where i in 0:N }",
        lambda: (_randn(6), _randn(4)),
        TCBoundsError,
    ),
    ("gather-oob", GATHER_1D, lambda: (_randn(4, 3), torch.tensor([0, 4])), TCBoundsError),
    ("scalar-overflows-its-type", SCALAR_ARG, lambda: (_randn(3), 300), TCCallError),
    ("scalar-not-integral", SCALAR_ARG, lambda: (_randn(3), 2.5), TCCallError),
    (
        "two-entries-none-named",
        "def a(float(N) X) -> (O) { O(i) = X(i) }\ndef b(float(N) X) -> (O) { O(i) = -X(i) }",
        lambda: (_randn(3),),
        TCError,
    ),
]


@pytest.mark.parametrize("src, make, error", [pytest.param(s, m, e, id=n) for n, s, m, e in ERRORS])
def test_errors_match_the_oracle(src: str, make, error: type) -> None:
    """Programs and calls the oracle refuses: the compiled call raises the same TCError subclass."""
    with pytest.raises(error):
        H.check_against_oracle(src, None, make())


def test_narrowing_and_type_errors_are_raised_by_define() -> None:
    for src in (
        "def n(float(N) A) -> (int32 O) { O(i) = A(i) }",
        "def n(double(N) A) -> (float O) { O(i) = A(i) }",
        "def n(int32(N) A) -> (uint32 O) { O(i) = A(i) }",
    ):
        with pytest.raises(TCTypeError):
            tcjit.define(src)


def test_nan_and_inf_flow_through_floats() -> None:
    """NaN and inf: fmax/fmin and max=/min= ignore NaN, sums propagate it, 1/0 is inf."""
    src = """
    def nans(float(N,M) A) -> (Mx, Mn, S, R, F) {
        Mx(i) max=! A(i, r_j)
        Mn(i) min=! A(i, r_j)
        S(i) +=! A(i, r_j)
        R(i) = 1.0 / A(i, 0)
        F(i) = fmax(A(i, 1), fmin(A(i, 2), 0.0))
    }"""
    nan, inf = math.nan, math.inf
    A = torch.tensor(
        [[nan, 1.0, 2.0, 3.0], [nan, nan, nan, nan], [0.0, -inf, nan, 5.0], [-0.0, inf, -1.0, nan]] * 5
    )
    for config in (H.DEFAULT, H.Config("Max", (), H.MAPPINGS[3], False)):
        Mx, Mn, S, R, F = H.check_against_oracle(src, None, (A,), options=config.options())
        assert Mx[1].item() == -inf and Mn[1].item() == inf and math.isnan(S[0].item())
        assert R[2].item() == inf and R[3].item() == -inf
        assert torch.equal(F, torch.fmax(A[:, 1], torch.fmin(A[:, 2], torch.tensor(0.0))))


def test_vector_lane_reductions_and_exp_keep_special_values() -> None:
    """Rows long enough for vector lanes (max=/min= run in 8 lanes through the prelude's OpenMP
    reductions; exp is the prelude's vectorised tc_exp_f32): NaN ignored by max/min wherever it
    sits, -inf/inf identities, and exp's specials (NaN, +-inf, overflow, subnormal results, 0)."""
    src = """
    def lanes(float(N,M) A, int32(N,M) X) -> (Mx, Mn, IMx, IMn, E) {
        Mx(i) max=! A(i, r_j)
        Mn(i) min=! A(i, r_j)
        IMx(i) max=! X(i, r_j)
        IMn(i) min=! X(i, r_j)
        E(i, j) = exp(A(i, j))
    }"""
    nan, inf = math.nan, math.inf
    g = torch.Generator().manual_seed(7)
    A = torch.randn(6, 83, generator=g) * 30
    A[0, 37] = nan  # one NaN in a lane: ignored
    A[1] = nan  # all NaN: the identities
    A[2, ::3] = nan
    A[3, 5], A[3, 80] = inf, -inf
    specials = torch.tensor([nan, inf, -inf, 0.0, -0.0, 88.7, 88.8, -87.4, -103.0, -104.5, 1e-30, -1e-7])
    A[4, : specials.numel()] = specials
    X = torch.randint(-(2**31), 2**31 - 1, (6, 83), generator=g, dtype=torch.int32)
    Mx, Mn, IMx, IMn, E = H.check_against_oracle(src, None, (A, X))
    assert Mx[1].item() == -inf and Mn[1].item() == inf
    assert Mx[3].item() == inf and Mn[3].item() == -inf
    assert torch.equal(Mx[[0, 2]], torch.stack([r[~r.isnan()].max() for r in A[[0, 2]]]))
    assert torch.equal(IMx, X.amax(1)) and torch.equal(IMn, X.amin(1))
    want = torch.exp(A.double()).float()  # correctly rounded but for double rounding
    assert torch.equal(E.isnan(), want.isnan())
    ulps = (E.view(torch.int32).long() - want.view(torch.int32).long()).abs()[~want.isnan()]
    assert ulps.max().item() <= 1, ulps.max()


# ========================================================================================== zero sizes
def test_zero_sized_inputs() -> None:
    """A zero-sized dimension: empty outputs, or sums over nothing (zero)."""
    for A, B in ((_randn(2, 0), _randn(0, 3)), (_randn(0, 4), _randn(4, 3)), (_randn(2, 4), _randn(4, 0))):
        (C,) = H.check_against_oracle(MM, None, (A, B))
        assert C.shape == (A.shape[0], B.shape[1]) and not C.any()


EMPTY_REDUCTIONS = """
def empty(float(N,M) A, int32(N,M) X) -> (S, P, Mx, Mn, IP, IMx, T) {
    S(i) +=! A(i, r_j)
    P(i) *=! A(i, r_j)
    Mx(i) max=! A(i, r_j)
    Mn(i) min=! A(i, r_j)
    IP(i) *=! X(i, r_j)
    IMx(i) max=! X(i, r_j)
    T max=! A(r_i, r_j)
}"""


@pytest.mark.parametrize(
    "config", [H.DEFAULT, H.Config("Max", (), H.MAPPINGS[3], True)], ids=["default", "fixed"]
)
def test_empty_reductions_hold_the_identity(config: H.Config) -> None:
    """A size of 0 (here the reduced one): every '!' reduction holds its identity, as
    docs/language.md promises and the oracle gives (the parametric Scop assumes sizes >= 1, so
    such calls are specialised before scheduling)."""
    A, X = torch.empty(3, 0), torch.empty(3, 0, dtype=torch.int32)
    S, P, Mx, Mn, IP, IMx, T = H.check_against_oracle(
        EMPTY_REDUCTIONS, None, (A, X), options=config.options()
    )
    assert S.tolist() == [0.0] * 3 and P.tolist() == [1.0] * 3
    assert Mx.tolist() == [-math.inf] * 3 and Mn.tolist() == [math.inf] * 3
    assert IP.tolist() == [1] * 3 and IMx.tolist() == [-(2**31)] * 3 and T.item() == -math.inf


# ============================================================ temporaries in a CPU kernel's workspace
HELD = """
def held(float(N,M) A, float(N) b) -> (O) {
    T(i) += A(i, r_j)
    U(i, j) = A(i, j) * b(i)
    O(i) = T(i) + U(i, 0) + U(i, M - 1)
}"""

FC_BACKWARD = """
def fc_grad(double(B,M) I, double(N,M) W, double(N) bias, double(B,N) d_O) -> (d_I, d_W, d_bias) {
    P(b, n) +=! I(b, r_m) * W(n, r_m)
    G(b, n) = P(b, n) + bias(n) > 0.0 ? d_O(b, n) : 0.0
    d_I(b, m) +=! G(b, r_n) * W(r_n, m)
    d_W(n, m) +=! G(r_b, n) * I(r_b, m)
    d_bias(n) +=! G(r_b, n)
}"""


def test_temporaries_live_in_the_cpu_kernels_workspace_and_start_afresh_each_call() -> None:
    """A CPU kernel holds its temporaries in a workspace kept between calls (no tensors allocated
    per call): they are not parameters of the kernel; one read before it is written (``T``, a
    ``+=`` without ``!``) starts from zero on every call, not from the last call's sums; and
    temporaries side by side in the workspace keep their own values (with them as locals of one
    function, gcc's vectoriser reordered accesses across two of them: ``fc_grad``'s gradients
    were wrong)."""
    with pytest.warns(TCWarning, match="starts from zero"):
        k = tcjit.define(HELD)
    for seed in range(3):
        A, b = _randn(5, 7, seed=seed), _randn(5, seed=seed + 10)
        torch.testing.assert_close(k(A, b), A.sum(1) + A[:, 0] * b + A[:, -1] * b, **F32)
    (spec,) = k._specializations.values()
    assert [name for name, _, _ in spec.meta.params] == ["A", "b", "O"]
    assert "void tc_entry_held_body(" in spec.source
    assert "tc_take_workspace(&tc_kept_temporaries" in spec.source
    g = tcjit.define(FC_BACKWARD)
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        I, W, bias, d_O = (
            torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((4, 5), (3, 5), (3,), (4, 3))
        )
        G = torch.where(I @ W.T + bias > 0, d_O, torch.zeros_like(d_O))
        d_I, d_W, d_bias = g(I, W, bias, d_O)
        torch.testing.assert_close(d_I, G @ W)
        torch.testing.assert_close(d_W, G.T @ I)
        torch.testing.assert_close(d_bias, G.sum(0))
