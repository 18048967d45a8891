"""Gathers on the left-hand side of accumulations (scatters): ``dW(I(b), d) +=! dO(b, d)``.

The backward of a gather (an embedding lookup, ``LUT(J(b, l), d)``) adds each iteration's value
into the element its data-dependent subscripts name. Checked here on every target (C + OpenMP,
the emulated CUDA mapping with its race check, CUDA source compiled to PTX) and by the oracle,
all against hand-written torch (``index_add_``, ``scatter_add_``, ``scatter_reduce_``):
duplicates (several iterations hitting one element, more iterations than rows), ``!`` (the whole
tensor starts at the identity) against a plain ``+=`` into ``outputs=``, out-of-range indices
(an error, never a write outside the tensor), and that iterations which may hit one element never
run concurrently.
"""

from __future__ import annotations

import math
import warnings

import compiled_helpers as H
import islpy as isl
import pytest
import torch

import tcjit
from tcjit import TCBoundsError, TCInternalError, TCSemanticError
from tcjit.mapping import accumulation, prepare
from tcjit.mapping.options import MappingOptions
from tcjit.polyhedral.lang.check import check_source
from tcjit.polyhedral.schedule import bands
from tcjit.polyhedral.scop import Dependences, build_scop, compute_dependences
from tcjit.testing import emulation_order

TARGETS = ("cpu", "cuda-emulated")
ORDERS = ("forward", "reversed", "shuffled")
DTYPES = {"float32": torch.float32, "float64": torch.float64}

EMB = """
def emb_grad({t}(V,D) W, int64(B) I, {t}(B,D) dO) -> ({t}(V,D) dW) {{
    dW(I(b), d) {op} dO(b, d)
}}"""


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")):
        yield


def _emb(dtype: str = "float32", op: str = "+=!") -> tcjit.Kernel:
    return tcjit.define(EMB.format(t=dtype, op=op))


def _indices(n: int, high: int, *, seed: int, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """``n`` random indices in [0, high), the first two 0 (a row hit twice at least), viewed as
    ``shape``."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, high, (n,), generator=g)
    idx[: min(n, 2)] = 0  # row 0 twice at least
    return idx.view(shape) if shape else idx


def _randn(*shape: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _run(kernel: tcjit.Kernel, *inputs, target: str, outputs=None, options=None) -> tuple[torch.Tensor, ...]:
    """The kernel's outputs on ``target``; on the emulated one, the same bits in every order of
    blocks and threads (each order race-checked)."""
    if target == "cpu":
        return H.as_tuple(kernel(*inputs, target=target, outputs=_clone(outputs), options=options))
    first = None
    for order in ORDERS:
        with emulation_order(order):
            got = H.as_tuple(kernel(*inputs, target=target, outputs=_clone(outputs), options=options))
        if first is None:
            first = got
        else:
            for a, b in zip(first, got):
                assert torch.equal(a, b), f"{order} order differs from forward (a race?)"
    return first


def _clone(outputs):
    return None if outputs is None else tuple(t.clone() for t in outputs)


def _oracle(kernel: tcjit.Kernel, *inputs, outputs=None) -> tuple[torch.Tensor, ...]:
    with warnings.catch_warnings():  # the definition's own warnings were seen when it was defined
        warnings.simplefilter("ignore", tcjit.TCWarning)
        return H.as_tuple(tcjit.reference.evaluate(kernel.source, None, *inputs, outputs=_clone(outputs)))


def _check(got, want, torch_want, reduction_length: int) -> None:
    for g, w, t in zip(got, want, torch_want):
        H.assert_same(w, t, reduction_length, what="oracle vs torch")
        H.assert_same(g, t, reduction_length, what="compiled vs torch")


# ================================================================================ embedding backward
def _emb_params() -> list:
    """(B, D, V) x dtype x target: three corners in the default tier (B > V: rows hit several
    times; B < V: rows never hit), the whole matrix in the full tier."""
    default = {
        ((40, 6, 7), "float32", "cpu"),
        ((40, 6, 7), "float64", "cuda-emulated"),
        ((3, 4, 5), "float64", "cpu"),
    }
    shapes = [(40, 6, 7), (3, 4, 5), (1, 1, 1), (64, 1, 2), (100, 17, 3), (7, 33, 50)]
    out = []
    for shape in shapes:
        for dtype in DTYPES:
            for target in TARGETS:
                marks = () if (shape, dtype, target) in default else pytest.mark.full
                ident = "B{}xD{}xV{}".format(*shape) + f"-{dtype}-{target}"
                out.append(pytest.param(shape, dtype, target, id=ident, marks=marks))
    return out


@pytest.mark.parametrize("shape, dtype, target", _emb_params())
def test_embedding_backward_is_index_add(shape, dtype: str, target: str) -> None:
    B, D, V = shape
    t = DTYPES[dtype]
    k = _emb(dtype)
    W, I, dO = torch.zeros(V, D, dtype=t), _indices(B, V, seed=B + D), _randn(B, D, dtype=t, seed=V)
    want = torch.zeros(V, D, dtype=t).index_add_(0, I, dO)
    _check(_run(k, W, I, dO, target=target), _oracle(k, W, I, dO), (want,), B)


# ===================================================================================== other forms
FORMS = """
def forms(int32(B,L) I, float(B,L,D) dO, int64(N,K) J, float(N,K) Y, float(V,D) W, float(N,M) X)
    -> (float(V,D) dW, float(N,M) dX, float(V,D) dS)
{
    dW(I(b, l), d) +=! dO(b, l, d)
    dX(i, J(i, k)) +=! Y(i, k)
    dS(I(b, l), D - 1 - d) +=! dO(b, l, d) * 2.0
}"""


FORMS_SIZES = (5, 3, 4, 6, 4, 7, 5)  # B, L, D, V, N, K, M


@pytest.mark.parametrize("target", TARGETS)
def test_two_dimensional_and_mixed_gathers(target: str) -> None:
    """A 2-D index tensor (a bag of embeddings), a gather in the last dimension (``scatter_add_``),
    and a gather next to an affine subscript (columns reversed)."""
    B, L, D, V, N, K, M = FORMS_SIZES
    k = tcjit.define(FORMS)
    I = _indices(B * L, V, seed=5, shape=(B, L)).int()
    dO = _randn(B, L, D, dtype=torch.float32, seed=6)
    J = _indices(N * K, M, seed=7, shape=(N, K))
    Y = _randn(N, K, dtype=torch.float32, seed=8)
    inputs = (I, dO, J, Y, torch.zeros(V, D), torch.zeros(N, M))
    dW = torch.zeros(V, D).index_add_(0, I.reshape(-1).long(), dO.reshape(-1, D))
    dX = torch.zeros(N, M).scatter_add_(1, J, Y)
    dS = torch.zeros(V, D).index_add_(0, I.reshape(-1).long(), 2 * dO.reshape(-1, D)).flip(1)
    _check(_run(k, *inputs, target=target), _oracle(k, *inputs), (dW, dX, dS), B * L)


EXTREMES = """
def extremes(float(V,D) W, int64(B) I, float(B,D) dO) -> (float(V,D) Mx, float(V,D) Mn, float(V,D) Pr) {
    Mx(I(b), d) max=! dO(b, d)
    Mn(I(b), d) min=! dO(b, d)
    Pr(I(b), d) *=! dO(b, d)
}"""


@pytest.mark.parametrize("target", TARGETS)
def test_other_reductions_are_scatter_reduce(target: str) -> None:
    """``max=!``, ``min=!``, ``*=!``: rows nobody hits keep the identity (``-inf``, ``inf``, 1)."""
    B, D, V = 11, 3, 6
    k = tcjit.define(EXTREMES)
    I = _indices(B, V - 1, seed=9)  # row V - 1 is never hit
    W, dO = torch.zeros(V, D), _randn(B, D, dtype=torch.float32, seed=10)
    want = []
    for how, identity in (("amax", -math.inf), ("amin", math.inf), ("prod", 1.0)):
        want.append(torch.full((V, D), identity).scatter_reduce_(0, I[:, None].expand(B, D), dO, how))
        assert (want[-1][V - 1] == identity).all()
    _check(_run(k, W, I, dO, target=target), _oracle(k, W, I, dO), want, B)


@pytest.mark.full
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "int64", "uint8"])
@pytest.mark.parametrize("op", ["+=!", "max=!", "min=!", "*=!"])
def test_scatter_in_every_kind_of_type(op: str, dtype: str, target: str) -> None:
    """Half types (reduced in float32, rounded once) and integers (exactly: wrapping)."""
    k = _emb(dtype, op)
    cdef = k.definition
    B, D, V = 30, 5, 4
    W, I, dO = tcjit.testing.random_inputs(cdef, {"B": B, "D": D, "V": V}, seed=11)
    I = _indices(B, V, seed=12)
    want = _oracle(k, W, I, dO)
    for g, w in zip(_run(k, W, I, dO, target=target), want):
        H.assert_same(g, w, B, what=f"{op} {dtype}")


# ========================================================================== '!' against outputs=
@pytest.mark.parametrize("target", TARGETS)
def test_bang_initialises_the_whole_tensor_and_plain_accumulates(target: str) -> None:
    """Into an ``outputs=`` tensor: ``+=!`` zeroes every element first (rows nobody hits end up
    0), ``+=`` adds to what the tensor holds; a tensor tcjit allocates starts at zero."""
    B, D, V = 9, 3, 5
    I = _indices(B, V - 2, seed=13)  # rows V - 2 and V - 1 are never hit
    W, dO = torch.zeros(V, D), _randn(B, D, dtype=torch.float32, seed=14)
    given = _randn(V, D, dtype=torch.float32, seed=15)
    sums = torch.zeros(V, D).index_add_(0, I, dO)
    bang = _emb()
    with pytest.warns(tcjit.TCWarning):  # '+=' into a tensor nothing initialised: a warning
        plain = _emb(op="+=")
    _check(
        _run(bang, W, I, dO, target=target, outputs=(given,)),
        _oracle(bang, W, I, dO, outputs=(given,)),
        (sums,),
        B,
    )
    _check(
        _run(plain, W, I, dO, target=target, outputs=(given,)),
        _oracle(plain, W, I, dO, outputs=(given,)),
        (given + sums,),
        B,
    )


@pytest.mark.parametrize("target", ["cpu", pytest.param("cuda-emulated", marks=pytest.mark.full)])
def test_a_long_float32_sum_into_given_outputs(target: str) -> None:
    """Sums this long accumulate in float64 buffers (``wide_accumulators``): a plain ``+=`` must
    start them from the given tensor, ``+=!`` from zero."""
    B, D, V = 4096, 4, 3
    assert B * D >= accumulation.LONG_SUM
    with pytest.warns(tcjit.TCWarning):
        plain = _emb(op="+=")
    I, dO = _indices(B, V, seed=16), _randn(B, D, dtype=torch.float32, seed=17)
    W, given = torch.zeros(V, D), torch.full((V, D), 1000.0)
    want = given.double() + torch.zeros(V, D, dtype=torch.float64).index_add_(0, I, dO.double())
    (got,) = _run(plain, W, I, dO, target=target, outputs=(given,))
    torch.testing.assert_close(got, want.float(), rtol=1e-6, atol=1e-4)
    (got,) = _run(_emb(), W, I, dO, target=target, outputs=(given,))
    torch.testing.assert_close(got, (want - 1000.0).float(), rtol=1e-6, atol=1e-4)


# ================================================================================ indices out of range
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("bad", [-1, 5, 1 << 40])
def test_an_index_out_of_range_is_an_error_not_a_write_outside(bad: int, target: str) -> None:
    """The compiled kernel checks the subscript it writes through, like a gathered read: the call
    raises TCBoundsError (pointing at the left-hand side, saying 'writes'), and nothing outside
    the output changed (it is a view into a larger tensor with guard rows around it)."""
    B, D, V = 6, 3, 5
    k = _emb()
    I = torch.tensor([0, 1, bad, 2, 0, 4])
    W, dO = torch.zeros(V, D), _randn(B, D, dtype=torch.float32, seed=18)
    guarded = torch.full((V + 2, D), 1234.5)
    for run in (
        lambda: k(W, I, dO, target=target, outputs=(guarded[1 : V + 1],)),
        lambda: k(W, I, dO, target=target),
        lambda: tcjit.reference.evaluate(k.source, None, W, I, dO),
    ):
        with pytest.raises(
            TCBoundsError, match=rf"subscript 0 of 'dW' writes element {bad}, outside \[0, {V}\)"
        ) as e:
            run()
        assert "dW(I(b), d)" in str(e.value)
    assert (guarded[0] == 1234.5).all() and (guarded[V + 1] == 1234.5).all()


def test_an_index_out_of_range_in_a_two_dimensional_gather() -> None:
    k = tcjit.define(FORMS)
    B, L, D, V, N, K, M = FORMS_SIZES
    J = torch.zeros(N, K, dtype=torch.int64)
    J[2, 3] = -3
    inputs = (torch.zeros(B, L, dtype=torch.int32), torch.ones(B, L, D), J, torch.ones(N, K))
    inputs += (torch.zeros(V, D), torch.zeros(N, M))
    for target in TARGETS:
        with pytest.raises(TCBoundsError, match="subscript 1 of 'dX' writes element -3"):
            k(*inputs, target=target)


# ================================================================================== no races
def test_duplicates_on_many_threads_lose_no_update() -> None:
    """Integer sums (exact) of 65536 iterations into 2 rows on 4 OpenMP threads: a lost update
    (two threads adding to one element at once) would show in the counts."""
    B = 1 << 16
    k = _emb("int32")
    I = _indices(B, 2, seed=19)
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        (got,) = _run(
            k, torch.zeros(2, 1, dtype=torch.int32), I, torch.ones(B, 1, dtype=torch.int32), target="cpu"
        )
    finally:
        torch.set_num_threads(before)
    assert got.view(-1).tolist() == torch.bincount(I, minlength=2).tolist()


@pytest.mark.parametrize(
    "option",
    [o if o in ("small", "shared") else pytest.param(o, marks=pytest.mark.full) for o in H.CUDA_OPTIONS],
)
def test_emulated_mappings_of_a_scatter_are_race_free(option: str) -> None:
    """Few rows hit many times, under mappings with many blocks and threads: the emulation's race
    check (and the comparison of orders) passes, and the sums are right."""
    B, D, V = 96, 5, 3
    k = _emb()
    W, I, dO = torch.zeros(V, D), _indices(B, V, seed=20), _randn(B, D, dtype=torch.float32, seed=21)
    want = torch.zeros(V, D).index_add_(0, I, dO)
    got = _run(k, W, I, dO, target="cuda-emulated", options=H.CUDA_OPTIONS[option])
    H.assert_same(got[0], want, B)


def test_the_race_check_would_see_a_scatter_run_in_parallel(monkeypatch) -> None:
    """The test above can fail: with the scatter's self-dependences dropped from the model, the
    GPU mapping puts iterations that hit one row on different threads, and the emulation reports
    the race."""

    def without_scatter_dependences(scop):
        deps = compute_dependences(scop)
        update = isl.UnionSet.read_from_str(scop.ctx, "{ S0[d, b] }")

        def drop(m: isl.UnionMap) -> isl.UnionMap:
            return m.subtract(m.intersect_domain(update).intersect_range(update))

        return Dependences(drop(deps.flow), drop(deps.false), drop(deps.all), deps.reduction)

    monkeypatch.setattr(prepare, "compute_dependences", without_scatter_dependences)
    k = tcjit.define(EMB.format(t="float", op="+=!").replace("emb_grad", "emb_grad_racy"))
    W, I, dO = torch.zeros(3, 4), _indices(64, 3, seed=22), _randn(64, 4, dtype=torch.float32, seed=23)
    with pytest.raises(TCInternalError, match="race"):
        k(W, I, dO, target="cuda-emulated", options=H.CUDA_OPTIONS["small"])


def test_the_scop_sees_a_may_write_of_the_whole_dimension() -> None:
    """The gathered dimension of the write is unconstrained within the tensor, the ``!``
    initialisation writes the whole tensor, two iterations that differ only in ``b`` depend on each
    other (a reduction with nothing to relax), and no coincident (parallel) schedule member
    separates them."""
    sizes = {"V": 5, "D": 3, "B": 8}
    cdef = check_source(EMB.format(t="float", op="+=!")).entry()
    scop = build_scop(cdef, sizes)
    ctx = scop.ctx
    (write,) = [a for a in scop.accesses if a.statement == "S0" and a.write]
    assert not write.exact
    update = isl.UnionSet.read_from_str(ctx, "{ S0[d, b] }")
    writes = scop.untagged_writes.intersect_domain(update)
    assert writes.is_equal(
        isl.UnionMap.read_from_str(
            ctx, "{ S0[d, b] -> dW[a0, d] : 0 <= d < 3 and 0 <= b < 8 and 0 <= a0 < 5 }"
        )
    )
    init = scop.domain.intersect(isl.UnionSet.read_from_str(ctx, "{ S0_init[e0, e1] }"))
    assert init.is_equal(isl.UnionSet.read_from_str(ctx, "{ S0_init[e0, e1] : 0 <= e0 < 5 and 0 <= e1 < 3 }"))
    (red,) = scop.reductions
    assert red.reduction_dims == ()
    self_deps = isl.UnionMap.read_from_str(ctx, "{ S0[d, b] -> S0[d, b2] : 0 <= d < 3 and 0 <= b < b2 < 8 }")
    assert self_deps.is_subset(compute_dependences(scop).all)

    _, _, _, sched = prepare.tiled_schedule(cdef, sizes, MappingOptions("naive").values)
    for band in bands(sched):
        partial = band.band_get_partial_schedule()
        for i in range(band.band_n_member()):
            member = isl.UnionMap.from_union_pw_aff(partial.get_union_pw_aff(i))
            apart = self_deps.intersect_domain(band.get_domain()).apply_domain(member).apply_range(member)
            if not apart.deltas().is_subset(isl.UnionSet.read_from_str(sched.get_ctx(), "{ [0] }")):
                assert not band.band_member_get_coincident(i), str(band)


def test_a_subscript_tensor_computed_earlier_is_a_dependence() -> None:
    """The tensors a left-hand side's subscripts read are reads of the statement: an index tensor
    computed by an earlier statement is computed first, on every target."""
    src = """
    def shifted(int64(B) I, float(B) X, float(V) Z) -> (float(V) O) {
        J(b) = (I(b) + 1) % V
        O(J(b)) +=! X(b)
    }"""
    k = tcjit.define(src)
    I, X, Z = _indices(20, 4, seed=24), _randn(20, dtype=torch.float32, seed=25), torch.zeros(4)
    want = torch.zeros(4).index_add_(0, (I + 1) % 4, X)
    for target in TARGETS:
        _check(_run(k, I, X, Z, target=target), _oracle(k, I, X, Z), (want,), 20)


# ================================================================================== the front-end
@pytest.mark.parametrize(
    "src, message",
    [
        (
            "def f(int64(B) I, float(B) X, float(V) Z) -> (float(V) O) { O(I(b)) = X(b) }",
            "left-hand side subscripts of '=' must be index variables",
        ),
        (
            "def f(int64(B) I, float(B) X) -> (O) { O(I(b)) +=! X(b) }",
            "the shape of a tensor cannot follow from a non-affine subscript",
        ),
        (
            "def f(float(B) X) -> (float(B) O) { O(i) = X(i)\n O(int64(O(b))) += X(b) }",
            "a left-hand side subscript may not read 'O'",
        ),
    ],
    ids=["assignment", "undeclared", "self-read"],
)
def test_what_the_checker_refuses(src: str, message: str) -> None:
    with pytest.raises(tcjit.TCError, match=message) as e:
        tcjit.define(src)
    assert isinstance(e.value, TCSemanticError)


# ===================================================================================== CUDA source
CUDA_CASES = [
    ("emb", EMB.format(t="float", op="+=!"), {"V": 5, "D": 6, "B": 40}),
    ("emb_half_max", EMB.format(t="half", op="max=!"), {"V": 5, "D": 6, "B": 40}),
    ("forms", FORMS, {"B": 5, "L": 3, "D": 4, "V": 6, "N": 4, "K": 7, "M": 5}),
]


def _cuda_params():
    out = []
    for name, src, sizes in CUDA_CASES:
        for option in H.CUDA_OPTIONS:
            marks = () if (name, option) in (("emb", "default"), ("forms", "shared")) else pytest.mark.full
            out.append(pytest.param(src, sizes, option, id=f"{name}-{option}", marks=marks))
    return out


@pytest.mark.parametrize("src, sizes, option", _cuda_params())
def test_cuda_source_compiles_to_ptx(src: str, sizes: dict, option: str) -> None:
    TCC = pytest.importorskip("test_cuda_compile")
    from tcjit import nvrtc

    if not nvrtc.available():
        pytest.skip("no CUDA compiler")
    ks = TCC._lower(check_source(src).entry(), sizes, option)
    assert any(c.verb == "writes" for c in ks.checks)
    TCC._compile(ks, f"scatter_{option}.cu")
