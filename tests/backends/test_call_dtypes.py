"""Calls with other float dtypes than declared [ext] (issue 7): retyped variants of a kernel.

Float types in a definition are defaults: a call maps each declared float type to the dtype its
parameters receive (one dtype per declared type and call) and runs the definition retyped that
way: a kernel of its own, compiled, cached on disk, differentiated and traced by torch.compile
separately from the declared one. Oracles: hand-written torch code in the dtype of the call, and
the reference evaluator run on the variant's canonical text.
"""

from __future__ import annotations

import json

import pytest
import torch
from compiled_helpers import LINEAR
from compiled_helpers import raises_at as _raises_at

import tcjit
import tcjit.pipeline
from tcjit import TCCallError
from tcjit.cache import FORMAT_VERSION
from tcjit.polyhedral.lang.parser import parse
from tcjit.polyhedral.lang.printer import def_to_tc
from tcjit.polyhedral.lang.retype import retype_def
from tcjit.testing import tolerance

MATMUL = """
def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, r_k) * B(r_k, n)
}
"""

#: Two declared float types: half inputs, a float bias and a float accumulator output.
MIXED = """
def mixed(half(M,K) A, half(K,N) B, float(N) bias) -> (float(M,N) C) {
    C(m, n) +=! A(m, r_k) * B(r_k, n)
    C(m, n) = C(m, n) + bias(n)
}
"""

GATHER = """
def gather(float(V, D) T, int64(B) I) -> (O) {
    O(b, d) = T(I(b), d)
}
"""

#: Conversions written in the body, an integer input and a rank-0 float argument.
CASTS = """
def casts(float(N) A, int32(N) I, float alpha) -> (O, P) {
    O(i) = float(I(i)) / 3 + A(i)
    P(i) = alpha * float(A(i) + 1e-10)
}
"""


FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _randn(*shape, dtype=torch.float32, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).requires_grad_(requires_grad)


def _float64_leaves(*shapes):
    return [_randn(*s, dtype=torch.float64, seed=n, requires_grad=True) for n, s in enumerate(shapes)]


@pytest.fixture
def count_specialize(monkeypatch) -> list:
    """Every specialisation compiled (or loaded) from now on, with the kernel it was made for."""
    calls: list = []
    real = tcjit.pipeline.specialize

    def counting(kernel, binding, inputs, outputs, options, target, **symbolic):
        spec = real(kernel, binding, inputs, outputs, options, target, **symbolic)
        calls.append((kernel, spec))
        return spec

    monkeypatch.setattr(tcjit.pipeline, "specialize", counting)
    return calls


# ======================================================================== results in each dtype
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_matmul_runs_in_the_dtype_passed(dtype):
    k = tcjit.define(MATMUL)
    a, b = _randn(4, 6, dtype=dtype, seed=1), _randn(6, 3, dtype=dtype, seed=2)
    c = k(a, b)
    assert c.dtype == dtype
    # half types are loaded as float, summed in float and rounded once when stored
    want = (a.float() @ b.float()).to(dtype) if dtype in (torch.float16, torch.bfloat16) else a @ b
    torch.testing.assert_close(c, want, **tolerance(dtype, 6))
    variant = k.variant_for(a, b)
    assert (variant is k) == (dtype == torch.float32)
    torch.testing.assert_close(
        c, tcjit.reference.evaluate(variant.canonical_source, None, a, b), **tolerance(dtype, 6)
    )


def test_the_variant_is_the_definition_retyped():
    k = tcjit.define(MATMUL)
    a, b = _randn(2, 3, dtype=torch.float64), _randn(3, 2, dtype=torch.float64)
    v = k.variant_for(a, b)
    assert v.retyping == {"float32": "float64"} and v.name == "matmul"
    assert v.signature == "matmul(float64(M, K) A, float64(K, N) B) -> (float64(M, N) C)"
    assert "float64(M, K) A, float64(K, N) B" in v.canonical_source and "float32" not in v.canonical_source
    assert "float32(M, K) A" in k.canonical_source
    assert v.source == k.source  # errors in the variant point at the text the user wrote
    assert k.variant_for(a, b) is v and k.variant_for(a.float(), b.float()) is k
    assert k.output_shapes(a, b) == ((2, 2),)
    assert k.options_for(a, b) == tcjit.pipeline.default_options(
        v.definition, {"M": 2, "K": 3, "N": 2}, "cpu"
    )


def test_retyping_is_simultaneous_and_leaves_integers_alone():
    d = parse("def f(half(N) A, float(N) B, int32(N) I) -> (float16(N) O, int64 S) {"
              " O(i) = half(float(A(i)) + B(i) * float(I(i))) S +=! int64(I(r_i)) }").defs[0]  # fmt: skip
    text = def_to_tc(retype_def(d, {"float16": "float32", "float32": "float16"}))
    assert text.startswith("def f(float32(N) A, float16(N) B, int32(N) I) -> (float32(N) O, int64 S)")
    assert "O(i) = float32(float16(A(i)) + B(i) * float16(I(i)))" in text
    assert "S() +=! int64(I(r_i))" in text
    assert retype_def(d, {}) is d
    with pytest.raises(ValueError, match="float type"):
        retype_def(d, {"int32": "int64"})


# ================================================================ specialisations and variants
def test_one_variant_per_dtype_and_the_declared_kernel_is_kept(count_specialize):
    k = tcjit.define(MATMUL)
    a, b = _randn(3, 4), _randn(4, 2)
    c32 = k(a, b)
    assert len(count_specialize) == 1 and count_specialize[0][0] is k
    c64 = k(a.double(), b.double())
    assert len(count_specialize) == 2 and len(k._variants) == 1
    v = k.variant_for(a.double(), b.double())
    assert count_specialize[1][0] is v and len(v._specializations) == 1
    k(a.double(), b.double())
    assert len(count_specialize) == 2, "a second float64 call is a lookup"
    again = k(a, b)
    assert len(count_specialize) == 2 and again.dtype == torch.float32
    assert (
        k._specializations[(None, None, tcjit.arguments.call_layouts((a, b)), None)] is count_specialize[0][1]
    )
    torch.testing.assert_close(again, c32)
    meta = [torch.empty(x.shape, dtype=torch.float16, device="meta") for x in (a, b)]
    tcjit.compile(k, *meta)  # ahead of time, for a layout no call has had yet
    assert len(count_specialize) == 3 and count_specialize[2][0] is k.variant_for(*meta)
    k(a.half(), b.half())
    assert len(count_specialize) == 3 and len(k._variants) == 2
    torch.testing.assert_close(c64, a.double() @ b.double(), **tolerance(torch.float64, 4))


def test_known_layouts_do_not_compute_a_retyping(monkeypatch):
    """The call's fast path is the dictionary lookup: the retyping is worked out on a miss only."""
    k = tcjit.define(MATMUL)
    a, b = _randn(3, 4), _randn(4, 2)
    k(a, b), k(a.double(), b.double())

    def refuse(*args):
        raise AssertionError("retyping computed on a known layout")

    monkeypatch.setattr(tcjit.binding, "float_substitution", refuse)
    assert k(a, b).dtype == torch.float32 and k(a.double(), b.double()).dtype == torch.float64
    with pytest.raises(AssertionError, match="retyping computed"):
        k(a.half(), b.half())


def test_the_disk_cache_holds_one_entry_per_variant(tmp_path, monkeypatch):
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    a, b = _randn(3, 4), _randn(4, 2)
    k = tcjit.define(MATMUL)
    for dtype in (torch.float32, torch.float64):
        assert tcjit.compile(k, a.to(dtype), b.to(dtype)).from_disk is False
    entries = sorted((tmp_path / "kernels").glob(f"v{FORMAT_VERSION}/*/*"))
    sources = sorted(
        json.loads(json.loads((e / "manifest.json").read_text())["key"])["source"] for e in entries
    )
    assert len(entries) == 2
    assert sources == sorted([k.canonical_source, k.variant_for(a.double(), b.double()).canonical_source])
    fresh = tcjit.define(MATMUL)  # a new process would do the same: found by the variant's text
    assert tcjit.compile(fresh, a.double(), b.double()).from_disk is True
    torch.testing.assert_close(fresh(a.double(), b.double()), a.double() @ b.double())


# ============================================================================== call mistakes
def test_one_declared_type_gets_one_dtype_per_call():
    k = tcjit.define(MATMUL)
    a = _randn(3, 5)
    err = _raises_at(
        TCCallError,
        2,
        26,
        ["'A' and 'B'", "declared float32", "torch.float32", "torch.float64"],
        k,
        a,
        _randn(5, 2, dtype=torch.float64),
    )
    assert "share one dtype per call" in err.hint
    _raises_at(
        TCCallError,
        2,
        26,
        ["'A' and 'B'", "torch.float16", "torch.bfloat16"],
        k,
        a.half(),
        _randn(5, 2).bfloat16(),
    )
    mixed = tcjit.define(MIXED)  # bias has a type of its own: any float dtype
    half = _randn(2, 3).half(), _randn(3, 4).half()
    assert mixed(*half, _randn(4, dtype=torch.float64)).dtype == torch.float64


def test_integer_and_float_tensors_do_not_swap():
    k = tcjit.define(MATMUL)
    _raises_at(
        TCCallError,
        2,
        26,
        ["input 'B'", "dtype torch.float32", "torch.int64"],
        k,
        _randn(3, 5),
        torch.ones(5, 2, dtype=torch.int64),
    )
    # with A float64 the declared float32 means float64 in this call; B must follow
    _raises_at(
        TCCallError,
        2,
        26,
        ["input 'B'", "dtype torch.float64", "torch.int32"],
        k,
        _randn(3, 5).double(),
        torch.ones(5, 2, dtype=torch.int32),
    )
    g = tcjit.define(GATHER)
    _raises_at(
        TCCallError,
        2,
        27,
        ["input 'I'", "torch.int64", "torch.float64"],
        g,
        _randn(4, 2).double(),
        torch.zeros(3).double(),
    )
    _raises_at(
        TCCallError,
        2,
        27,
        ["input 'I'", "torch.int64", "torch.int32"],
        g,
        _randn(4, 2).double(),
        torch.zeros(3, dtype=torch.int32),
    )


def test_a_retyping_that_does_not_check_is_a_call_error():
    """float16 as float64 and float32 as bfloat16 would store float64 products into a bfloat16 C."""
    mixed = tcjit.define(MIXED)
    a, b, bias = _randn(2, 3).double(), _randn(3, 4).double(), _randn(4).bfloat16()
    err = _raises_at(
        TCCallError, 3, 5, ["float16 as float64", "float32 as bfloat16", "narrow"], mixed, a, b, bias
    )
    assert "C(m, n) +=!" in str(err)


def test_outputs_must_have_the_variant_dtypes():
    k = tcjit.define(MATMUL)
    a, b = _randn(3, 5).double(), _randn(5, 2).double()
    _raises_at(
        TCCallError,
        2,
        44,
        ["output 'C'", "dtype torch.float64", "torch.float32"],
        k,
        a,
        b,
        outputs=(torch.empty(3, 2),),
    )
    out = torch.empty(3, 2, dtype=torch.float64)
    assert k(a, b, outputs=(out,)) is out
    torch.testing.assert_close(out, a @ b)
    _raises_at(
        TCCallError, 2, 44, ["output 'C'", "dtype torch.float32"], k, a.float(), b.float(), outputs=(out,)
    )


# =================================================================== what a retyping reaches
def test_an_int64_index_gathers_from_a_float64_table():
    g = tcjit.define(GATHER)
    table, idx = _randn(5, 3, dtype=torch.float64), torch.tensor([4, 0, 2, 2])
    out = g(table, idx)
    assert out.dtype == torch.float64 and idx.dtype == torch.int64
    torch.testing.assert_close(out, table[idx], rtol=0, atol=0)
    assert g.variant_for(table, idx).signature == "gather(float64(V, D) T, int64(B) I) -> (float64(B, D) O)"


@pytest.mark.parametrize(
    "dtypes, out",
    [
        ((torch.float16, torch.float32), torch.float32),  # as declared
        ((torch.bfloat16, torch.float32), torch.float32),  # half -> bfloat16 only
        ((torch.float32, torch.float64), torch.float64),  # each declared type on its own
        ((torch.float64, torch.float64), torch.float64),  # both to one type
    ],
    ids=str,
)
def test_two_declared_float_types_map_independently(dtypes, out):
    mixed = tcjit.define(MIXED)
    ab, c = dtypes
    a, b, bias = _randn(3, 5, dtype=ab, seed=1), _randn(5, 4, dtype=ab, seed=2), _randn(4, dtype=c, seed=3)
    got = mixed(a, b, bias)
    assert got.dtype == out
    # torch: products in the inputs' compute type (float for half types), sums in C's type
    compute = torch.float64 if ab == torch.float64 else torch.float32
    acc = torch.float64 if out == torch.float64 else torch.float32
    want = ((a.to(compute) @ b.to(compute)).to(acc) + bias.to(acc)).to(out)
    tol = tolerance(out if out in (torch.float16, torch.bfloat16) else compute, 5)
    torch.testing.assert_close(got, want, **tol)
    v = mixed.variant_for(a, b, bias)
    torch.testing.assert_close(got, tcjit.reference.evaluate(v.canonical_source, None, a, b, bias), **tol)


def test_casts_and_scalar_arguments_follow_the_retyping():
    k = tcjit.define(CASTS)
    a, i = _randn(6, dtype=torch.float64), torch.arange(6, dtype=torch.int32)
    o, p = k(a, i, 0.1)
    assert o.dtype == p.dtype == torch.float64
    # float32 anywhere (the conversions, alpha) would be off by ~1e-8, far beyond float64's tolerance
    torch.testing.assert_close(o, i.double() / 3 + a, **tolerance(torch.float64))
    torch.testing.assert_close(p, 0.1 * (a + 1e-10), **tolerance(torch.float64))
    v = k.variant_for(a, i, 0.1)
    assert "float64(N) A, int32(N) I, float64 alpha" in v.canonical_source
    assert "float64(I(i))" in v.canonical_source and "float32" not in v.canonical_source
    want = tcjit.reference.evaluate(v.canonical_source, None, a, i, 0.1)
    for g, w in zip((o, p), want):
        torch.testing.assert_close(g, w, **tolerance(torch.float64))
    o32, _ = k(a.float(), i, 0.1)  # declared: the cast rounds to float32
    assert o32.dtype == torch.float32


# ================================================================================== gradients
@pytest.mark.parametrize("target", ["cpu", "cuda-emulated"])
@pytest.mark.parametrize("backward", ["auto", "linear_grad"])
def test_gradcheck_in_float64_on_a_float_kernel(target, backward):
    k = tcjit.define(LINEAR, "linear", backward=backward)
    args = _float64_leaves((3, 4), (2, 4), (2,))
    assert torch.autograd.gradcheck(lambda *x: k(*x, target=target), args)
    v = k.variant_for(*args)
    plan = v.grad_plan()
    assert plan.kernel is v and v is not k
    if backward == "linear_grad":
        assert "def linear_grad(float64(M, K) A" in v.canonical_source
    # the declared float32 kernel still differentiates in float32 (its own plan)
    x32 = [a.detach().float().requires_grad_() for a in args]
    k(*x32, target=target).sum().backward()
    assert all(x.grad.dtype == torch.float32 for x in x32)
    assert k.grad_plan() is not plan


def test_grad_outputs_take_the_variant_dtypes():
    k = tcjit.define(LINEAR, "linear", backward="linear_grad")
    args = _float64_leaves((3, 4), (2, 4), (2,))
    plan = k.variant_for(*args).grad_plan()
    g = _randn(3, 2, dtype=torch.float64, seed=9)
    grads = plan.grads([a.detach() for a in args], (), (g.float(),), (True, True, True))
    g = g.float().double()  # what the variant's backward receives
    want = (g @ args[1].detach(), g.T @ args[0].detach(), g.sum(0))
    for got, w in zip(grads, want):
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, w, **tolerance(torch.float64, 3))


def test_make_autograd_retypes_its_backward_kernel():
    fwd = tcjit.define(LINEAR, "linear")
    bwd = tcjit.define(LINEAR, "linear_grad")
    k = tcjit.make_autograd(fwd, bwd)
    args = _float64_leaves((2, 3), (2, 3), (2,))
    assert torch.autograd.gradcheck(k, args)
    assert k.variant_for(*args).backward.definition.tensor("d_C").dtype.name == "float64"


# ============================================================================== torch.compile
def test_torch_compile_of_a_float64_call():
    """Inductor once (one tiny graph); aot_eager for the float32 call and for gradients."""
    k = tcjit.define(MATMUL)

    def f(x, y):
        return torch.relu(k(x, y)) * 2

    a, b = _randn(3, 4, dtype=torch.float64, seed=1), _randn(4, 2, dtype=torch.float64, seed=2)
    got = torch.compile(f, fullgraph=True)(a, b)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, f(a, b), rtol=0, atol=0)
    quick = torch.compile(f, fullgraph=True, backend="aot_eager")
    got32 = quick(a.float(), b.float())
    assert got32.dtype == torch.float32
    torch.testing.assert_close(got32, f(a.float(), b.float()), rtol=0, atol=0)
    x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
    quick(x, y).sum().backward()
    x2, y2 = a.clone().requires_grad_(), b.clone().requires_grad_()
    f(x2, y2).sum().backward()
    assert x.grad.dtype == torch.float64
    torch.testing.assert_close((x.grad, y.grad), (x2.grad, y2.grad), **tolerance(torch.float64, 4))
    with pytest.raises(Exception, match="'A' and 'B' are both declared float32"):
        quick(a, b.float())


@pytest.mark.full
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_torch_compile_with_inductor_in_each_dtype(dtype):
    k = tcjit.define(LINEAR, "linear")

    def f(x, w, b):
        return torch.tanh(k(x, w, b)).sum()

    args = [_randn(*s, dtype=dtype, seed=n) for n, s in enumerate([(5, 6), (3, 6), (3,)])]
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(*args), f(*args), **tolerance(dtype, 18))


# ================================================================================= full tier
@pytest.mark.full
@pytest.mark.parametrize("target", ["cpu", "cuda-emulated"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_suite_programs_in_each_dtype(target, dtype):
    """Every program of this file in every float dtype, against the reference on the variant."""
    cases = [
        (MATMUL, None, [(7, 9), (9, 5)]),
        (LINEAR, "linear", [(6, 8), (3, 8), (3,)]),
        (MIXED, None, [(4, 6), (6, 5), (5,)]),
    ]
    for src, name, shapes in cases:
        k = tcjit.define(src, name)
        args = [_randn(*s, dtype=dtype, seed=n) for n, s in enumerate(shapes)]
        got = k(*args, target=target)
        v = k.variant_for(*args)
        want = tcjit.reference.evaluate(v.program, name, *args)
        out_dtype = tcjit.binding.torch_dtype(v.definition.tensor(v.outputs[0]).dtype)
        assert got.dtype == out_dtype
        torch.testing.assert_close(got, want, **tolerance(out_dtype, 9))


@pytest.mark.full
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_the_benchmark_suite_called_in_another_dtype(dtype):
    """The suite's float kernels, called as written with float64 or bfloat16 inputs: torch's code
    in float64 (bfloat16: the oracle on the variant's text)."""
    from tcjit import suite

    for name in suite.names():
        s = suite.get(name)
        sizes = s.small_sizes[0]
        k = tcjit.define(s.source, s.entry)
        args = s.make_inputs(sizes, dtype=dtype)
        got = k(*args)
        got = got if isinstance(got, tuple) else (got,)
        v = k.variant_for(*args)
        assert v.retyping == {"float32": str(dtype).removeprefix("torch.")}, name
        if dtype == torch.float64:
            want = s.torch_ref(*args)
        else:
            want = tcjit.reference.evaluate(v.canonical_source, None, *args)
            want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype == dtype, name
            torch.testing.assert_close(g, w, **tolerance(dtype, s.reduction_length(sizes)), msg=name)


def test_autotune_on_float64_inputs_tunes_the_variant(tmp_path, monkeypatch):
    """The tuned options are stored for the variant's text and used by float64 calls only."""
    from tcjit.tuned import lookup_options
    from tcjit.tuning import tune_kernel

    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    k = tcjit.define(MATMUL)
    a, b = _randn(6, 4, dtype=torch.float64), _randn(4, 5, dtype=torch.float64)
    report = tune_kernel(k, a, b, generations=1, population=2, elites=1, seed=0, workers=1)
    v = k.variant_for(a, b)
    # a record under the variant's text (the tuned options, or "use the defaults"), none for float32
    assert lookup_options(v, (a, b), "cpu").key == report.stored.key
    assert lookup_options(k, (a.float(), b.float()), "cpu") is None
    assert k.options_for(a, b) == report.best_options
    assert tcjit.define(MATMUL).options_for(a, b) == report.best_options  # found in the database
    torch.testing.assert_close(k(a, b), a @ b, **tolerance(torch.float64, 4))
