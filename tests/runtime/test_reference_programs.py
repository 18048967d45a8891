"""The oracle (``tcjit.reference``) on TC programs that cover the whole language.

Each test is one realistic program with an independent expected result: hand-written PyTorch for
float programs, pure Python (C semantics written out) for the small integer ones. Integer results
are compared exactly. The language and its value semantics are those of notes/tc-language.md.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from tcjit import TCBoundsError, TCCallError, TCError, TCRangeError, TCWarning, reference
from tcjit.polyhedral.lang.check import check_source

F32 = {"rtol": 1e-5, "atol": 1e-5}
F64 = {"rtol": 1e-12, "atol": 1e-12}


def run(source: str, *inputs, entry: str | None = None, **kwargs):
    """Evaluate the only (or the named) def of ``source``."""
    return reference.evaluate(source, entry, *inputs, **kwargs)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)


def randint(lo: int, hi: int, *shape: int, seed: int = 0, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def wrap(x: int, bits: int, signed: bool = True) -> int:
    """``x`` reduced to a ``bits``-wide two's-complement (or unsigned) integer, as C stores it."""
    x &= (1 << bits) - 1
    return x - (1 << bits) if signed and x >> (bits - 1) else x


def c_div(a: int, b: int, bits: int = 32) -> int:
    """C ``a / b`` on ``bits``-wide signed integers, with the language's total rules."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return wrap(q if (a < 0) == (b < 0) else -q, bits)


def c_rem(a: int, b: int) -> int:
    """C ``a % b``: the sign of the dividend; by zero (and by -1) 0."""
    if b == 0:
        return 0
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


# ============================================================================ pooling and convolution
def test_average_pooling_3x3_stride_2() -> None:
    src = """
    def avgpool(float(N,C,H,W) I) -> (O) {
        O(n, c, h, w) +=! I(n, c, 2 * h + r_kh, 2 * w + r_kw) / 9.0 where r_kh in 0:3, r_kw in 0:3
    }"""
    I = randn(2, 3, 11, 8)
    O = run(src, I)
    assert O.shape == (2, 3, 5, 3)
    torch.testing.assert_close(O, F.avg_pool2d(I, 3, stride=2), **F32)


def test_overlapping_max_pooling_3x3_stride_2() -> None:
    src = """
    def maxpool(float(N,C,H,W) I) -> (O) {
        O(n, c, h, w) max=! I(n, c, 2 * h + r_kh, 2 * w + r_kw) where r_kh in 0:3, r_kw in 0:3
    }"""
    I = randn(2, 2, 9, 12, seed=1)
    assert torch.equal(run(src, I), F.max_pool2d(I, 3, stride=2))


def test_convolution_with_stride_2_and_bias() -> None:
    src = """
    def conv_s2(float(N,C,H,W) I, float(F,C,KH,KW) W1, float(F) bias) -> (O) {
        O(n, f, h, w) +=! I(n, r_c, 2 * h + r_kh, 2 * w + r_kw) * W1(f, r_c, r_kh, r_kw)
        O(n, f, h, w)  = O(n, f, h, w) + bias(f)
    }"""
    I, W1, b = randn(2, 3, 10, 9), randn(4, 3, 3, 2, seed=1), randn(4, seed=2)
    O = run(src, I, W1, b)
    assert O.shape == (2, 4, 4, 4)
    torch.testing.assert_close(O, F.conv2d(I, W1, b, stride=2), **F32)


def test_same_padding_expressed_with_domain_conditions() -> None:
    """Zero padding 1 without reading outside ``I``: conditions cut the iteration domain [ext].

    The ranges of ``h``, ``w``, ``r_kh`` and ``r_kw`` are given: conditions do not feed range
    inference, so from ``I(.., h + r_kh - 1, ..)`` alone ``r_kh`` would be inferred as ``1:2``.
    """
    src = """
    def conv_same(float(N,C,H,W) I, float(F,C,3,3) W1) -> (O) {
        O(n, f, h, w) +=! I(n, r_c, h + r_kh - 1, w + r_kw - 1) * W1(f, r_c, r_kh, r_kw)
            where h in 0:H, w in 0:W, r_kh in 0:3, r_kw in 0:3,
                  h + r_kh - 1 >= 0, h + r_kh - 1 < H, w + r_kw - 1 >= 0, w + r_kw - 1 < W
    }"""
    I, W1 = randn(1, 2, 7, 5), randn(3, 2, 3, 3, seed=1)
    O = run(src, I, W1)
    assert O.shape == (1, 3, 7, 5)
    torch.testing.assert_close(O, F.conv2d(I, W1, padding=1), **F32)


@pytest.mark.parametrize("op", ["+=", "+=!"])
def test_transposed_convolution_scatters_through_an_affine_lhs(op: str) -> None:
    """``O(2*i + k) += ...``: elements hit by several iterations are summed [ext]; without ``!``
    the sum starts from zero, or from the contents of ``outputs=`` (gradient accumulation)."""
    src = f"""
    def tconv1d(float(L) A, float(K) Wt) -> (O) {{
        O(2 * i + k) {op} A(i) * Wt(k)
    }}"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TCWarning)  # '+=' with nothing initialising O
        program = check_source(src)
    A, Wt = randn(7), randn(3, seed=1)
    want = F.conv_transpose1d(A[None, None], Wt[None, None], stride=2)[0, 0]
    O = reference.evaluate(program, "tconv1d", A, Wt)
    assert O.shape == want.shape == (15,)
    torch.testing.assert_close(O, want, **F32)
    O0 = randn(15, seed=2)
    O = reference.evaluate(program, "tconv1d", A, Wt, outputs=(O0.clone(),))
    torch.testing.assert_close(O, want + (O0 if op == "+=" else 0), **F32)


@pytest.mark.parametrize("op", ["+=", "+=!"])
def test_col2im_fold_scatter_accumulation(op: str) -> None:
    src = f"""
    def col2im(float(N,C,KH,KW,H,W) Col) -> (O) {{
        O(n, c, h + r_kh, w + r_kw) {op} Col(n, c, r_kh, r_kw, h, w)
    }}"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TCWarning)
        program = check_source(src)
    N, C, KH, KW, H, W = 2, 3, 2, 3, 4, 5
    Col = randn(N, C, KH, KW, H, W)
    O = reference.evaluate(program, "col2im", Col)
    want = F.fold(
        Col.reshape(N, C * KH * KW, H * W), output_size=(H + KH - 1, W + KW - 1), kernel_size=(KH, KW)
    )
    torch.testing.assert_close(O, want, **F32)


# ================================================================================= gathers and select
def test_concatenation_with_select() -> None:
    """Only the branch taken is read: ``A(i)`` for ``i >= N`` and ``B(i - N)`` for ``i < N`` are not."""
    src = """
    def cat(float(N) A, float(M) B) -> (O) {
        O(i) = i < N ? A(i) : B(i - N) where i in 0:N+M
    }"""
    A, B = randn(5), randn(3, seed=1)
    assert torch.equal(run(src, A, B), torch.cat([A, B]))


def test_lookup_table_gather_with_int64_indices() -> None:
    src = """
    def embed(float(V,D) LUT, int64(B) I) -> (O) {
        O(b, d) = LUT(I(b), d)
    }"""
    LUT, I = randn(10, 4), torch.tensor([3, 0, 9, 3, 7])
    assert torch.equal(run(src, LUT, I), F.embedding(I, LUT))


def test_gather_out_of_bounds_raises() -> None:
    src = """
    def embed(float(V,D) LUT, int64(B) I) -> (O) {
        O(b, d) = LUT(I(b), d)
    }"""
    for bad in (10, -1):
        with pytest.raises(TCBoundsError):
            run(src, randn(10, 4), torch.tensor([1, bad, 2]))


def test_weighted_embedding_bag() -> None:
    src = """
    def bag(float(V,D) LUT, int64(B,L) I, float(B,L) Wt) -> (O) {
        O(b, d) +=! Wt(b, r_l) * LUT(I(b, r_l), d)
    }"""
    LUT, I, Wt = randn(20, 6), randint(0, 20, 4, 3, seed=1), randn(4, 3, seed=2)
    want = F.embedding_bag(I, LUT, mode="sum", per_sample_weights=Wt)
    torch.testing.assert_close(run(src, LUT, I, Wt), want, **F32)


def test_argmin_by_two_min_reductions() -> None:
    """The first index reaching the row minimum: ``min=!`` over ``J`` where the value differs."""
    src = """
    def argmin(float(N,J) A) -> (mn, idx) {
        mn(i)  min=! A(i, r_j)
        idx(i) min=! A(i, r_j) == mn(i) ? r_j : J
    }"""
    A = torch.round(randn(6, 9) * 2)  # small integers: ties on purpose
    mn, idx = run(src, A)
    assert idx.dtype == torch.int64
    assert torch.equal(mn, A.amin(dim=1))
    assert torch.equal(idx, torch.argmin(A, dim=1))


def test_causal_sliding_window_mask_with_and_or_not() -> None:
    src = """
    def window(float(N,N) S) -> (O) {
        O(i, j) = (j <= i && i - j < 3) || (j == 0 && !(i > 4)) ? S(i, j) : -10000.0
    }"""
    S = randn(7, 7)
    i = torch.arange(7)[:, None]
    j = torch.arange(7)[None, :]
    keep = ((j <= i) & (i - j < 3)) | ((j == 0) & ~(i > 4))
    assert torch.equal(run(src, S), torch.where(keep, S, torch.tensor(-10000.0)))


def test_leaky_relu_with_a_value_comparison() -> None:
    src = """
    def leaky(float(N) A, float slope) -> (O) {
        O(i) = A(i) > 0 ? A(i) : slope * A(i)
    }"""
    A = randn(33)
    torch.testing.assert_close(run(src, A, 0.125), F.leaky_relu(A, 0.125), rtol=0, atol=0)


# =============================================================================== normalisations
def test_log_softmax() -> None:
    src = """
    def log_softmax(float(N,D) I) -> (O) {
        mx(n)  max=! I(n, r_d)
        lse(n) +=! exp(I(n, r_d) - mx(n))
        O(n, d) = I(n, d) - mx(n) - log(lse(n))
    }"""
    I = randn(5, 37) * 10
    torch.testing.assert_close(run(src, I), F.log_softmax(I, dim=1), **F32)


def test_rms_norm_with_a_let_binding_and_a_dimension_size() -> None:
    src = """
    def rmsnorm(float(N,D) I, float(D) g) -> (O) {
        ms(n) +=! x * x where x = I(n, r_d)
        O(n, d) = g(d) * I(n, d) * rsqrt(ms(n) / float(I.1) + 1e-6)
    }"""
    I, g = randn(4, 19), randn(19, seed=1)
    torch.testing.assert_close(run(src, I, g), F.rms_norm(I, (19,), g, eps=1e-6), **F32)


def test_layer_norm_over_two_dimensions() -> None:
    src = """
    def layernorm2(float(N,C,L) I, float(C,L) g, float(C,L) b) -> (O) {
        mean(n) +=! I(n, r_c, r_l) / float(C * L)
        var(n)  +=! d * d / float(C * L) where d = I(n, r_c, r_l) - mean(n)
        O(n, c, l) = g(c, l) * (I(n, c, l) - mean(n)) * rsqrt(var(n) + 1e-5) + b(c, l)
    }"""
    I, g, b = randn(3, 4, 7) + 3, randn(4, 7, seed=1), randn(4, 7, seed=2)
    torch.testing.assert_close(run(src, I, g, b), F.layer_norm(I, (4, 7), g, b, eps=1e-5), **F32)


def test_batch_norm_training_step_with_running_statistics() -> None:
    src = """
    def batchnorm(float(N,C,H,W) I, float(C) g, float(C) b, float(C) rm, float(C) rv, float momentum)
        -> (O, new_rm, new_rv) {
        mean(c) +=! I(r_n, c, r_h, r_w) / float(N * H * W)
        var(c)  +=! d * d / float(N * H * W) where d = I(r_n, c, r_h, r_w) - mean(c)
        O(n, c, h, w) = g(c) * (I(n, c, h, w) - mean(c)) * rsqrt(var(c) + 1e-5) + b(c)
        new_rm(c) = (1.0 - momentum) * rm(c) + momentum * mean(c)
        new_rv(c) = (1.0 - momentum) * rv(c) + momentum * var(c) * float(N * H * W) / float(N * H * W - 1)
    }"""
    I = randn(4, 3, 5, 6) * 2 + 1
    g, b, rm, rv = randn(3, seed=1), randn(3, seed=2), randn(3, seed=3), randn(3, seed=4).abs()
    O, new_rm, new_rv = run(src, I, g, b, rm, rv, 0.1)
    rm_t, rv_t = rm.clone(), rv.clone()
    want = F.batch_norm(I, rm_t, rv_t, g, b, training=True, momentum=0.1, eps=1e-5)
    torch.testing.assert_close(O, want, **F32)
    torch.testing.assert_close(new_rm, rm_t, **F32)
    torch.testing.assert_close(new_rv, rv_t, **F32)


def test_linear_then_exact_gelu_in_several_statements() -> None:
    """``+=!`` then two ``=`` rewriting the same tensor in place."""
    src = """
    def linear_gelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
        O(b, n) +=! I(b, r_m) * W(n, r_m)
        O(b, n)  = O(b, n) + bias(n)
        O(b, n)  = 0.5 * x * (1.0 + erf(x * 0.70710678118654752)) where x = O(b, n)
    }"""
    I, W, bias = randn(5, 12), randn(7, 12, seed=1), randn(7, seed=2)
    torch.testing.assert_close(run(src, I, W, bias), F.gelu(F.linear(I, W, bias)), **F32)


def test_sinusoidal_positional_encoding_from_index_values() -> None:
    """Index variables used as values (``float(p)``, ``k % 2``) and a select on them."""
    src = """
    def posenc(float(L,D) X) -> (O) {
        O(p, k) = X(p, k) + (k % 2 == 0 ? sin(a) : cos(a))
            where a = float(p) * exp(float(k - k % 2) * -0.5)
    }"""
    X = randn(6, 8)
    p = torch.arange(6, dtype=torch.float32)[:, None]
    k = torch.arange(8)[None, :]
    a = p * torch.exp((k - k % 2).float() * -0.5)
    torch.testing.assert_close(run(src, X), X + torch.where(k % 2 == 0, torch.sin(a), torch.cos(a)), **F32)


# =============================================================================== reductions
def test_product_reduction() -> None:
    src = """
    def rowprod(float(N,M) A, int64(N,K) X) -> (P, Q) {
        P(i) *=! A(i, r_j)
        Q(i) *=! X(i, r_k)
    }"""
    A = 1 + 0.1 * randn(4, 9)
    X = randint(-5, 6, 4, 7, seed=1)
    P, Q = run(src, A, X)
    torch.testing.assert_close(P, A.prod(dim=1), **F32)
    assert torch.equal(Q, X.prod(dim=1))


def test_max_reduction_and_min_max_builtins_ignore_nan() -> None:
    """``max=!`` is an fmax reduction: NaNs are skipped; a row of NaNs only gives the identity."""
    src = """
    def nanmax(float(N,M) A, float(N) B) -> (R, Mx, Mn) {
        R(i) max=! A(i, r_j)
        Mx(i) = max(B(i), A(i, 0))
        Mn(i) = fmin(B(i), A(i, 0))
    }"""
    nan = float("nan")
    A = torch.tensor([[1.0, nan, 3.0], [nan, nan, nan], [nan, -2.0, -5.0], [0.5, 0.25, nan]])
    B = torch.tensor([nan, 4.0, nan, 0.0])
    R, Mx, Mn = run(src, A, B)
    assert torch.equal(R, torch.tensor([3.0, -math.inf, -2.0, 0.5]))
    torch.testing.assert_close(Mx, torch.fmax(B, A[:, 0]), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(Mn, torch.fmin(B, A[:, 0]), rtol=0, atol=0, equal_nan=True)


def test_plain_accumulation_into_given_outputs() -> None:
    """``+=`` and ``max=`` without ``!`` start from the contents of ``outputs=`` (GEMM with beta=1,
    a running maximum), and from zero when tcjit allocates the output."""
    src = """
    def gemm_acc(float(M,K) A, float(K,N) B, float(M,N) X) -> (C, R) {
        C(m, n) += A(m, r_k) * B(r_k, n)
        R(m) max= X(m, r_n)
    }"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TCWarning)
        program = check_source(src)
    A, B, X = randn(4, 6), randn(6, 5, seed=1), randn(4, 5, seed=2)
    C0, R0 = randn(4, 5, seed=3), torch.tensor([0.0, 10.0, -10.0, float("nan")])
    C, R = torch.empty(4, 5), torch.empty(4)
    C.copy_(C0)
    R.copy_(R0)
    got = reference.evaluate(program, "gemm_acc", A, B, X, outputs=(C, R))
    assert got[0] is C and got[1] is R
    torch.testing.assert_close(C, C0 + A @ B, **F32)
    assert torch.equal(R, torch.fmax(R0, X.amax(dim=1)))
    C_new, R_new = reference.evaluate(program, "gemm_acc", A, B, X)
    torch.testing.assert_close(C_new, A @ B, **F32)
    assert torch.equal(R_new, X.amax(dim=1).clamp_min(0.0))


def test_plain_accumulation_warns_when_nothing_initialises() -> None:
    with pytest.warns(TCWarning):
        check_source("def acc(float(N,M) A) -> (S) { S(i) += A(i, r_j) }")


# ============================================================================== scalars and rank 0
def test_scalar_arguments_as_numbers_and_zero_dim_tensors() -> None:
    src = """
    def axpby(float(N) X, float(N) Y, float alpha, float beta, int32 shift) -> (O, Z) {
        O(i) = alpha * X(i) + beta * Y(i)
        Z(i) = int32(X(i) * 4.0) + shift
    }"""
    X, Y = randn(9), randn(9, seed=1)
    as_tensors = (torch.tensor(0.5), torch.tensor(-2.0), torch.tensor(3, dtype=torch.int32))
    for alpha, beta, shift in ((0.5, -2.0, 3), as_tensors):
        O, Z = run(src, X, Y, alpha, beta, shift)
        torch.testing.assert_close(O, 0.5 * X + -2.0 * Y, **F32)
        assert Z.dtype == torch.int32
        assert Z.tolist() == [int(v * 4.0) + 3 for v in X.tolist()]


def test_rank0_outputs_in_both_spellings() -> None:
    src = """
    def dot_norm(float(N) A, float(N) B) -> (S, T, int32 C, R) {
        S +=! A(r_i) * B(r_i)
        T() +=! A(r_i) * A(r_i)
        C +=! A(r_i) > 0 ? 1 : 0
        R = S * rsqrt(T)
    }"""
    A, B = randn(50), randn(50, seed=1)
    S, T, C, R = run(src, A, B)
    assert S.shape == T.shape == C.shape == R.shape == ()
    torch.testing.assert_close(R, torch.dot(A, B) / A.norm(), **F32)
    torch.testing.assert_close(S, torch.dot(A, B), **F32)
    torch.testing.assert_close(T, torch.dot(A, A), **F32)
    assert C.dtype == torch.int32 and int(C) == int((A > 0).sum())


def test_literal_dimensions() -> None:
    src = """
    def grey(float(M, 4) RGBA) -> (O) {
        O(m) = 0.299 * RGBA(m, 0) + 0.587 * RGBA(m, 1) + 0.114 * RGBA(m, 2)
    }"""
    A = torch.rand(10, 4, generator=torch.Generator().manual_seed(0))
    want = A[:, :3] @ torch.tensor([0.299, 0.587, 0.114])
    torch.testing.assert_close(run(src, A), want, **F32)
    with pytest.raises(TCCallError):
        run(src, torch.rand(10, 3))


def test_repeated_size_symbol_trace_and_diagonal() -> None:
    src = """
    def trace_diag(float(N, N) A) -> (t, d) {
        t +=! A(r_i, r_i)
        d(i) = A(i, i)
    }"""
    A = randn(6, 6)
    t, d = run(src, A)
    torch.testing.assert_close(t, torch.trace(A), **F32)
    assert torch.equal(d, torch.diagonal(A))
    with pytest.raises(TCCallError):
        run(src, randn(6, 5))


# ============================================================================= typed outputs
def test_typed_output_unwritten_elements_are_zero() -> None:
    """A lower-triangular copy (``where j <= i`` leaves the rest unwritten) and a diagonal matrix
    scattered from a vector, both into outputs whose sizes the signature fixes [ext]."""
    src = """
    def tril_diag(float(N, N) A, float(N) v) -> (float(N, N) L, float(N, N) D) {
        L(i, j) = A(i, j) where j <= i
        D(i, i) +=! v(i)
    }"""
    A, v = randn(5, 5), randn(5, seed=1)
    L, D = run(src, A, v)
    assert torch.equal(L, torch.tril(A))
    assert torch.equal(D, torch.diag(v))
    # Given outputs: the elements no statement writes keep their contents ([ext] "left as given").
    L0, D0 = torch.full((5, 5), 7.0), torch.full((5, 5), 7.0)
    L, D = run(src, A, v, outputs=(L0, D0))
    assert L is L0 and D is D0
    assert torch.equal(L, torch.where(torch.ones(5, 5, dtype=torch.bool).tril(), A, torch.tensor(7.0)))
    assert torch.equal(D, torch.where(torch.eye(5, dtype=torch.bool), v[:, None], torch.tensor(7.0)))


def test_bang_initialises_only_the_elements_the_statement_writes() -> None:
    """A sliding maximum into a typed output one element longer than the window count: the last
    element is not written, so it is zero, not the ``-inf`` identity."""
    src = """
    def slide_max(float(N) A) -> (float(N) O) {
        O(i) max=! A(i + r_k) where r_k in 0:2
    }"""
    A = randn(8)
    O = run(src, A)
    assert torch.equal(O[:-1], torch.maximum(A[:-1], A[1:]))
    assert O[-1].item() == 0.0


def test_a_write_below_zero_is_never_silent() -> None:
    """``O(i) max=! A(i + 1)`` infers ``-1 <= i < N - 1`` from ``A`` (TC's rule), so it would write
    ``O(-1)``: the checker refuses it when the kernel is defined, before anything runs."""
    src = """
    def shifted(float(N) A) -> (float(N) O) {
        O(i) max=! A(i + 1)
    }"""
    with pytest.raises(TCRangeError, match="can be negative") as e:
        check_source(src)
    assert (e.value.line, e.value.column) == (3, 11)


def test_non_contiguous_inputs() -> None:
    """Transposed and strided views are read by their strides."""
    src = """
    def mm(float(M,K) A, float(K,N) B) -> (C) {
        C(m, n) +=! A(m, r_k) * B(r_k, n)
    }"""
    A, B = randn(4, 6).T, randn(4, 10, seed=1)[:, ::2]
    assert not A.is_contiguous() and not B.is_contiguous()
    torch.testing.assert_close(run(src, A, B), A @ B, **F32)


def test_eye_like_from_exists() -> None:
    """``exists A(i, j)`` gives ``i`` and ``j`` their ranges without reading ``A``."""
    src = """
    def eye_like(float(N, M) A) -> (E) {
        E(i, j) = i == j ? 1.0 : 0.0 where exists A(i, j)
    }"""
    E = run(src, randn(4, 6))
    assert torch.equal(E, torch.eye(4, 6))


# ================================================================================= integer types
def test_int32_arithmetic_wraps_on_overflow() -> None:
    src = """
    def lcg_dot(int32(N) X, int32(N,M) A, int32(M) B) -> (R, S) {
        R(i) = X(i) * 1103515245 + 12345
        S(i) +=! A(i, r_j) * B(r_j)
    }"""
    X = torch.tensor([0, 1, 2**31 - 1, -(2**31), 123456789, -7], dtype=torch.int32)
    A = randint(-(2**20), 2**20, 6, 5, seed=1, dtype=torch.int32)
    B = randint(-(2**20), 2**20, 5, seed=2, dtype=torch.int32)
    R, S = run(src, X, A, B)
    assert R.dtype == S.dtype == torch.int32
    assert R.tolist() == [wrap(x * 1103515245 + 12345, 32) for x in X.tolist()]
    want = [wrap(sum(a * b for a, b in zip(row, B.tolist())), 32) for row in A.tolist()]
    assert S.tolist() == want


def test_int8_arithmetic_and_int32_accumulation() -> None:
    """Quantised style: int8 values wrap in int8; a dot product converts to int32 first."""
    src = """
    def q8(int8(N) A, int8(N) B, int8(M,N) Q) -> (Sum, Prod, Acc) {
        Sum(i) = A(i) + B(i)
        Prod(i) = A(i) * B(i)
        Acc(m) +=! int32(Q(m, r_n)) * int32(A(r_n))
    }"""
    A = torch.tensor([127, -128, 100, -100, 5, 0, -1], dtype=torch.int8)
    B = torch.tensor([1, -1, 100, -100, -6, 0, -128], dtype=torch.int8)
    Q = randint(-128, 128, 3, 7, seed=1, dtype=torch.int8)
    Sum, Prod, Acc = run(src, A, B, Q)
    assert Sum.dtype == Prod.dtype == torch.int8 and Acc.dtype == torch.int32
    a, b = A.tolist(), B.tolist()
    assert Sum.tolist() == [wrap(x + y, 8) for x, y in zip(a, b)]
    assert Prod.tolist() == [wrap(x * y, 8) for x, y in zip(a, b)]
    assert Acc.tolist() == [sum(q * x for q, x in zip(row, a)) for row in Q.tolist()]


def test_uint8_image_arithmetic_wraps() -> None:
    src = """
    def img(uint8(N) A, uint8(N) B) -> (Add, Sub, AbsDiff) {
        Add(i) = A(i) + B(i)
        Sub(i) = A(i) - B(i)
        AbsDiff(i) = A(i) > B(i) ? A(i) - B(i) : B(i) - A(i)
    }"""
    A = torch.tensor([0, 255, 200, 10, 128], dtype=torch.uint8)
    B = torch.tensor([1, 1, 100, 20, 128], dtype=torch.uint8)
    Add, Sub, AbsDiff = run(src, A, B)
    assert Add.dtype == torch.uint8
    a, b = A.tolist(), B.tolist()
    assert Add.tolist() == [(x + y) % 256 for x, y in zip(a, b)]
    assert Sub.tolist() == [(x - y) % 256 for x, y in zip(a, b)]
    assert AbsDiff.tolist() == [abs(x - y) for x, y in zip(a, b)]


def test_integer_division_and_remainder_truncate() -> None:
    """C: ``/`` truncates toward zero, ``%`` takes the dividend's sign; by zero gives 0 and
    ``INT_MIN / -1`` wraps to ``INT_MIN`` (no trap)."""
    src = """
    def divmod32(int32(N) A, int32(N) B) -> (Q, R) {
        Q(i) = A(i) / B(i)
        R(i) = A(i) % B(i)
    }"""
    a = [7, -7, 7, -7, 0, 5, -5, -(2**31), -(2**31), 2**31 - 1, 13, -1]
    b = [2, 2, -2, -2, 3, 0, 0, -1, 1, -1, 13, 7]
    Q, R = run(src, torch.tensor(a, dtype=torch.int32), torch.tensor(b, dtype=torch.int32))
    assert Q.tolist() == [c_div(x, y) for x, y in zip(a, b)]
    assert R.tolist() == [c_rem(x, y) for x, y in zip(a, b)]


def test_unsigned_16_and_32_bit_types() -> None:
    src = """
    def u(uint16(N) A, uint16(N) B, uint32(N) X, uint32(N) Y) -> (S16, D16, S32, M32, Q32) {
        S16(i) = A(i) + B(i)
        D16(i) = A(i) - B(i)
        S32(i) = X(i) + Y(i)
        M32(i) = X(i) * Y(i)
        Q32(i) = X(i) / Y(i)
    }"""
    a, b = [65535, 1, 40000, 0], [1, 2, 40000, 0]
    x, y = [4_000_000_000, 3, 2**32 - 1, 12], [500_000_000, 2**31, 2, 0]
    A, B = torch.tensor(a, dtype=torch.uint16), torch.tensor(b, dtype=torch.uint16)
    X, Y = torch.tensor(x, dtype=torch.uint32), torch.tensor(y, dtype=torch.uint32)
    outs = run(src, A, B, X, Y)
    assert [o.dtype for o in outs] == [torch.uint16] * 2 + [torch.uint32] * 3
    S16, D16, S32, M32, Q32 = (o.to(torch.int64).tolist() for o in outs)
    assert S16 == [(p + q) % 2**16 for p, q in zip(a, b)]
    assert D16 == [(p - q) % 2**16 for p, q in zip(a, b)]
    assert S32 == [(p + q) % 2**32 for p, q in zip(x, y)]
    assert M32 == [(p * q) % 2**32 for p, q in zip(x, y)]
    assert Q32 == [p // q if q else 0 for p, q in zip(x, y)]


def test_casts_truncate_and_promote() -> None:
    src = """
    def casts(float(N) A, int32(N) X) -> (T, H, U) {
        T(i) = int32(A(i))
        H(i) = float(X(i)) / 2.0
        U(i) = uint8(X(i))
    }"""
    A = torch.tensor([2.7, -2.7, -0.5, 0.5, 1e6 + 0.25, -3.0])
    X = torch.tensor([1, -3, 255, 256, -1, 7], dtype=torch.int32)
    T, H, U = run(src, A, X)
    assert T.dtype == torch.int32 and H.dtype == torch.float32 and U.dtype == torch.uint8
    assert T.tolist() == [int(v) for v in A.tolist()]
    assert H.tolist() == [v / 2 for v in X.tolist()]
    assert U.tolist() == [v % 256 for v in X.tolist()]


def test_rounding_builtins_follow_c() -> None:
    """``round`` is half away from zero (torch.round is half to even), ``fmod`` keeps the
    dividend's sign, ``remainder`` is IEEE (nearest quotient)."""
    src = """
    def rounding(double(N) A, double(N) B) -> (Rn, Tr, Fl, Ce, Fm, Rm) {
        Rn(i) = round(A(i))
        Tr(i) = trunc(A(i))
        Fl(i) = floor(A(i))
        Ce(i) = ceil(A(i))
        Fm(i) = fmod(A(i), B(i))
        Rm(i) = remainder(A(i), B(i))
    }"""
    a = [2.5, -2.5, 0.5, -0.5, 1.49, -7.25, 7.5, 3.0]
    b = [2.0, 2.0, 3.0, 3.0, 1.0, 2.0, 2.0, 2.0]
    outs = run(src, torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64))
    Rn, Tr, Fl, Ce, Fm, Rm = (o.tolist() for o in outs)
    assert Rn == [math.copysign(math.floor(abs(v) + 0.5), v) for v in a]
    assert Tr == [float(math.trunc(v)) for v in a]
    assert Fl == [float(math.floor(v)) for v in a]
    assert Ce == [float(math.ceil(v)) for v in a]
    assert Fm == [math.fmod(x, y) for x, y in zip(a, b)]
    assert Rm == [math.remainder(x, y) for x, y in zip(a, b)]


# ============================================================================ floating-point types
def test_float16_matmul_accumulates_wide_and_rounds_once() -> None:
    src = """
    def hgemm(float16(M,K) A, float16(K,N) B) -> (C) {
        C(m, n) +=! A(m, r_k) * B(r_k, n)
    }"""
    A, B = randn(8, 64, dtype=torch.float16), randn(64, 5, seed=1, dtype=torch.float16)
    C = run(src, A, B)
    assert C.dtype == torch.float16
    torch.testing.assert_close(C, (A.double() @ B.double()).half(), rtol=1e-3, atol=1e-3)


def test_half_sums_do_not_stall() -> None:
    """4096 ones summed in float16 give 4096 (a float16 accumulator would stop at 2048), 512 ones
    in bfloat16 give 512 (a bfloat16 accumulator stops at 256)."""
    src = """
    def sums(float16(N) A, bfloat16(M) B) -> (SA, SB) {
        SA +=! A(r_i)
        SB +=! B(r_j)
    }"""
    SA, SB = run(src, torch.ones(4096, dtype=torch.float16), torch.ones(512, dtype=torch.bfloat16))
    assert SA.dtype == torch.float16 and SB.dtype == torch.bfloat16
    assert float(SA) == 4096.0 and float(SB) == 512.0


def test_bfloat16_elementwise_computed_in_float_rounded_once() -> None:
    src = """
    def fma_bf16(bfloat16(N) A, bfloat16(N) B, bfloat16(N) C) -> (O) {
        O(i) = A(i) * B(i) + C(i)
    }"""
    A, B, C = (randn(257, seed=s, dtype=torch.bfloat16) for s in range(3))
    O = run(src, A, B, C)
    assert O.dtype == torch.bfloat16
    assert torch.equal(O, (A.float() * B.float() + C.float()).bfloat16())


def test_float64_program_keeps_double_literals() -> None:
    """A float literal takes the statement's float type: ``1e-300`` is not flushed to float32 zero."""
    src = """
    def dscale(double(N,M) A, double(M) x) -> (y, z) {
        y(i) +=! A(i, r_j) * x(r_j)
        z(i) = y(i) * 1e-300
    }"""
    A, x = randn(7, 300, dtype=torch.float64), randn(300, seed=1, dtype=torch.float64)
    y, z = run(src, A, x)
    assert y.dtype == z.dtype == torch.float64
    torch.testing.assert_close(y, A @ x, **F64)
    torch.testing.assert_close(z, (A @ x) * 1e-300, rtol=1e-12, atol=0)


# =================================================================================== programs
def test_several_definitions_and_entry_selection() -> None:
    src = """
    def relu(float(N) A) -> (O) {
        O(i) = fmax(A(i), 0)
    }
    def scale(float(N) A, float s) -> (O) {
        O(i) = s * A(i)
    }"""
    A = randn(11)
    assert torch.equal(run(src, A, entry="relu"), torch.relu(A))
    assert torch.equal(run(src, A, 3.0, entry="scale"), 3.0 * A)
    with pytest.raises(TCError):
        run(src, A)  # two defs, no entry named
    with pytest.raises(TCError):
        run(src, A, entry="gelu")


def test_call_errors() -> None:
    src = """
    def mm(float(M,K) A, float(K,N) B) -> (C) {
        C(m, n) +=! A(m, r_k) * B(r_k, n)
    }"""
    A, B = randn(3, 4), randn(4, 5)
    for bad in (
        (A,),  # too few
        (A, B, B),  # too many
        (A, B.double()),  # dtype
        (A, B[0]),  # rank
        (A, randn(3, 5)),  # K contradicts
    ):
        with pytest.raises(TCCallError):
            run(src, *bad)


def test_meta_tensors_cannot_be_evaluated() -> None:
    src = """
    def mul(float(N) A, float(N) B) -> (O) {
        O(i) = A(i) * B(i)
    }"""
    with pytest.raises(TCCallError):
        run(src, randn(5), torch.ones(5, device="meta"))


# ====================================================================== subscripts, bools, scans
def test_circular_shift_and_nearest_upsampling_floor_in_subscripts() -> None:
    """Division and remainder inside subscripts floor (as range inference assumes), unlike values:
    ``(i - 1) % N`` wraps around to ``N - 1``."""
    src = """
    def shift_up(float(N) A) -> (Roll, Up) {
        Roll(i) = A((i - 1) % N) where i in 0:N
        Up(i) = A(i / 2) where i in 0:2*N
    }"""
    A = randn(7)
    Roll, Up = run(src, A)
    assert torch.equal(Roll, torch.roll(A, 1))
    assert torch.equal(Up, torch.repeat_interleave(A, 2))


def test_boolean_masks_in_and_out() -> None:
    src = """
    def masks(bool(N) M, float(N) A, float t) -> (O, Above, Both) {
        O(i) = M(i) ? A(i) : 0.0
        Above(i) = A(i) > t
        Both(i) = M(i) && !Above(i)
    }"""
    M, A = randn(12, seed=1) > 0, randn(12)
    O, Above, Both = run(src, M, A, 0.25)
    assert Above.dtype == Both.dtype == torch.bool
    assert torch.equal(O, torch.where(M, A, torch.tensor(0.0)))
    assert torch.equal(Above, A > 0.25)
    assert torch.equal(Both, M & ~(A > 0.25))


def test_prefix_scans_with_a_condition_on_the_reduction_index() -> None:
    """Inclusive cumulative sum and maximum: ``where r_j <= i`` cuts a triangle out of the box."""
    src = """
    def scans(float(N) A) -> (Sum, Max) {
        Sum(i) +=! A(r_j) where i in 0:N, r_j <= i
        Max(i) max=! A(r_j) where i in 0:N, r_j <= i
    }"""
    A = randn(9)
    Sum, Max = run(src, A)
    torch.testing.assert_close(Sum, torch.cumsum(A, 0), **F32)
    assert torch.equal(Max, torch.cummax(A, 0).values)


def test_exclusive_scans_leave_the_identity_where_nothing_is_reduced() -> None:
    """Element 0 reduces over nothing: it keeps the identity ``!`` set (0, 1, -inf, INT_MIN)."""
    src = """
    def exscan(float(N) A, int32(N) X) -> (Sum, Prod, Max, IMax) {
        Sum(i)  +=! A(r_j) where i in 0:N, r_j < i
        Prod(i) *=! A(r_j) where i in 0:N, r_j < i
        Max(i)  max=! A(r_j) where i in 0:N, r_j < i
        IMax(i) max=! X(r_j) where i in 0:N, r_j < i
    }"""
    A = randn(6)
    X = torch.tensor([5, -3, 8, 8, -20, 1], dtype=torch.int32)
    Sum, Prod, Max, IMax = run(src, A, X)
    zero = torch.zeros(1)
    torch.testing.assert_close(Sum, torch.cat([zero, torch.cumsum(A, 0)[:-1]]), **F32)
    torch.testing.assert_close(Prod, torch.cat([zero + 1, torch.cumprod(A, 0)[:-1]]), **F32)
    assert torch.equal(Max, torch.cat([zero - math.inf, torch.cummax(A, 0).values[:-1]]))
    assert IMax.tolist() == [-(2**31), 5, 5, 8, 8, 8]


def test_64_bit_integers_wrap() -> None:
    src = """
    def wide(uint64(N) A, uint64(N) B, int64(N) X) -> (Sum, Quot, Less, Sq) {
        Sum(i) = A(i) + B(i)
        Quot(i) = A(i) / B(i)
        Less(i) = A(i) < B(i)
        Sq(i) = X(i) * X(i)
    }"""
    a, b = [2**63 + 1, 5, 2**64 - 1, 0], [2**63, 2, 2, 0]
    x = [2**32, 3 * 2**31 + 1, -5, 2**62]
    A, B = torch.tensor(a, dtype=torch.uint64), torch.tensor(b, dtype=torch.uint64)
    Sum, Quot, Less, Sq = run(src, A, B, torch.tensor(x))
    assert Sum.dtype == Quot.dtype == torch.uint64
    as_unsigned = [v % 2**64 for v in Sum.view(torch.int64).tolist()]
    assert as_unsigned == [(p + q) % 2**64 for p, q in zip(a, b)]
    assert [v % 2**64 for v in Quot.view(torch.int64).tolist()] == [p // q if q else 0 for p, q in zip(a, b)]
    assert Less.tolist() == [p < q for p, q in zip(a, b)]
    assert Sq.tolist() == [wrap(v * v, 64) for v in x]


def test_mixed_integer_float_promotion_and_sigmoid() -> None:
    """An int32 tensor times a float literal is float32; builtins of integers are float; the
    ``sigmoid`` extension."""
    src = """
    def promote(int32(N) X, float(N) A) -> (Half, Root, Gate) {
        Half(i) = X(i) * 0.5
        Root(i) = sqrt(X(i))
        Gate(i) = A(i) * sigmoid(A(i))
    }"""
    X, A = torch.tensor([1, 2, 3, 4, 9, 0], dtype=torch.int32), randn(6)
    Half, Root, Gate = run(src, X, A)
    assert Half.dtype == Root.dtype == torch.float32
    assert torch.equal(Half, X.float() * 0.5)
    assert torch.equal(Root, torch.sqrt(X.float()))
    torch.testing.assert_close(Gate, F.silu(A), **F32)


def test_scatter_max_follows_fmax_on_existing_nans() -> None:
    """A scattered ``max=`` folds fmax: NaN contributions are ignored, and an element holding NaN
    takes the first real contribution (or keeps NaN when it gets none)."""
    src = "def s(float(N) A, float(M) B) -> (O) { O(i + k) max= A(i) * B(k) }"
    nan = math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TCWarning)
        out = torch.tensor([nan, nan, nan, 5.0])
        reference.evaluate(src, "s", torch.tensor([1.0, 2.0]), torch.tensor([1.0, nan, 3.0]), outputs=(out,))
        assert out.tolist() == [1.0, 2.0, 3.0, 6.0]
        out = torch.tensor([nan, 7.0])
        reference.evaluate(src, "s", torch.tensor([nan]), torch.tensor([nan, 1.0]), outputs=(out,))
        assert math.isnan(out[0]) and out[1] == 7.0
