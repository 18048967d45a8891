"""Automatic backward (polyhedral/autodiff/, tcjit/derived.py): gradcheck in float64.

Every kernel of KERNELS.md and a set of further programs (temporaries, versions, guards, scalar
arguments, strides, padding, every builtin with a derivative, ``*=``/``min=`` reductions, rank-0
values) are differentiated automatically and checked with ``torch.autograd.gradcheck`` on the CPU
target and on the emulated CUDA target. The default tier uses gradcheck's fast mode at one small
size; the full tier runs the exact (slow) mode at every small size of the suite. Also: only the
wanted gradients are derived, intermediates are saved rather than recomputed, statements without a
derivative raise :class:`tcjit.TCDerivativeError` at backward only, and the errors name the
statement.
"""

from __future__ import annotations

import re

import pytest
import torch

import tcjit
from tcjit import TCDerivativeError, suite
from tcjit.derived import derivation

TARGETS = ["cpu", "cuda-emulated"]


def _double(source: str) -> str:
    return source.replace("float(", "double(")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0):
    return torch.randn(*shape, dtype=torch.float64, generator=_gen(seed))


def uniform(lo, hi, *shape, seed=0):
    return lo + (hi - lo) * torch.rand(*shape, dtype=torch.float64, generator=_gen(seed))


def _gradcheck(kernel, inputs, target: str, fast: bool = True) -> None:
    """gradcheck of the kernel's floating-point outputs (integer ones are not differentiable)."""
    inputs = [
        x.requires_grad_() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs
    ]

    def run(*a):
        outs = kernel(*a, target=target)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return tuple(o for o in outs if o.is_floating_point())

    assert torch.autograd.gradcheck(run, inputs, fast_mode=fast)


# ------------------------------------------------------------------------------------ the suite
def _suite_sizes(k: suite.SuiteKernel):
    """The small sizes with at most ~3000 input elements (gradcheck's cost grows with them)."""
    fits = [s for s in k.small_sizes if sum(x.numel() for x in _shapes(k, s)) <= 3000]
    return fits


def _shapes(k, sizes):
    return [torch.empty(s) for s in k.input_shapes(sizes)]


def _interesting(k):
    """The fitting small size with the most elements (not the all-ones one)."""
    return max(_suite_sizes(k), key=lambda s: sum(x.numel() for x in _shapes(k, s)))


#: On the emulated CUDA target the default tier samples kernels of every kind; the full tier runs all.
EMULATED_SAMPLE = {"fcrelu", "gconv", "maxpool2x2", "softmax", "kronecker3", "layernorm"}


def _cases(names, sample):
    for name in names:
        yield pytest.param(name, "cpu", id=f"{name}-cpu")
        marks = () if name in sample else (pytest.mark.full,)
        yield pytest.param(name, "cuda-emulated", id=f"{name}-cuda-emulated", marks=marks)


@pytest.mark.parametrize(("name", "target"), list(_cases(suite.names(), EMULATED_SAMPLE)))
def test_every_suite_kernel_passes_gradcheck(name: str, target: str) -> None:
    k = suite.get(name)
    kernel = tcjit.define(_double(k.source), k.entry)
    inputs = [x.double() for x in k.make_inputs(_interesting(k))]
    _gradcheck(kernel, inputs, target)


@pytest.mark.full
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", suite.names())
def test_every_suite_kernel_passes_exact_gradcheck_at_every_small_size(name: str, target: str) -> None:
    k = suite.get(name)
    kernel = tcjit.define(_double(k.source), k.entry)
    for sizes in _suite_sizes(k):
        _gradcheck(kernel, [x.double() for x in k.make_inputs(sizes)], target, fast=False)


# ------------------------------------------------------------------------------ more programs
#: name -> (TC source in double, inputs). Each exercises one rule of the derivation.
PROGRAMS = {
    "chain_of_builtins": (
        "def f(double(N) X) -> (O) {"
        " O(i) = tanh(X(i)) * exp(-X(i)) + sqrt(fabs(X(i)) + 1.0) / (2.0 + sin(X(i))) }",
        lambda: [randn(7)],
    ),
    "guard": (
        "def f(double(N) X, double(N) Y) -> (O) { O(i) = X(i) > 0.0 ? X(i) * Y(i) : -X(i) * X(i) }",
        lambda: [randn(9), randn(9, seed=1)],
    ),
    "temporaries_softmax_1d": (
        """def f(double(N) X) -> (O) {
            T(i) = exp(X(i))
            S +=! T(r)
            O(i) = T(i) / S
        }""",
        lambda: [randn(6)],
    ),
    "versions_read_in_between": (
        """def f(double(N) X, double(N,K) Y) -> (O, P) {
            O(i) = X(i) * X(i)
            P(i) = O(i) * 3.0 + sin(O(i))
            O(i) += Y(i, r)
        }""",
        lambda: [randn(5), randn(5, 4, seed=1)],
    ),
    "in_place_activation": (
        """def f(double(B,M) I, double(N,M) W) -> (O) {
            O(b, n) +=! I(b, r) * W(n, r)
            O(b, n) = tanh(O(b, n))
            O(b, n) = O(b, n) * O(b, n)
        }""",
        lambda: [randn(3, 4), randn(5, 4, seed=1)],
    ),
    "strided_conv": (
        """def f(double(N,C,H,W) I, double(F,C,KH,KW) W1) -> (O) {
            O(n, f, h, w) +=! I(n, c, 2 * h + kh, 2 * w + kw) * W1(f, c, kh, kw)
                where h in 0:(H - KH) / 2 + 1, w in 0:(W - KW) / 2 + 1
        }""",
        lambda: [randn(1, 2, 7, 6), randn(3, 2, 3, 2, seed=1)],
    ),
    "padded_conv1d": (
        """def f(double(N) X, double(K) Kr) -> (float64(N) O) {
            O(i) +=! X(i + k - 1) * Kr(k) where i in 0:N, k in 0:K, i + k - 1 >= 0, i + k - 1 < N
        }""",
        lambda: [randn(8), randn(3, seed=1)],
    ),
    "product_with_zeros": (
        "def f(double(N,K) X) -> (P) { P(i) *=! X(i, r) }",
        lambda: [torch.tensor([[1.5, 0.0, 2.0], [0.0, 0.0, 3.0], [1.2, -0.7, 0.9]], dtype=torch.float64)],
    ),
    "min_reduction": (
        "def f(double(N,K) X) -> (M) { M(i) min=! X(i, r) * X(i, r) - X(i, r) }",
        lambda: [randn(4, 5)],
    ),
    "scalar_arguments": (
        "def f(double(N) X, double s, double t) -> (O) { O(i) = s * X(i) + t * t }",
        lambda: [randn(5), torch.tensor(1.5, dtype=torch.float64), torch.tensor(-0.5, dtype=torch.float64)],
    ),
    "rank0_output": (
        "def f(double(N,M) X) -> (S) { S +=! X(r, q) * X(r, q) * X(r, 0) }",
        lambda: [randn(4, 3)],
    ),
    "diagonal": (
        "def f(double(N,N) A, double(N) V) -> (O) { O(i) = A(i, i) * V(i) }",
        lambda: [randn(4, 4), randn(4, seed=1)],
    ),
    "broadcast_transpose": (
        "def f(double(N) X, double(M) Y, double(M,N) Z) -> (O) { O(i, j) = X(i) + Y(j) * Z(j, i) }",
        lambda: [randn(3), randn(4, seed=1), randn(4, 3, seed=2)],
    ),
    "several_outputs_one_integer": (
        """def f(double(N,K) X) -> (M, C, O) {
            M(i) max=! X(i, r)
            C(i) +=! int32(X(i, r) > 0.0)
            O(i) = M(i) * 2.0 + X(i, 0)
        }""",
        lambda: [randn(4, 6)],
    ),
    "sigmoid_and_pow": (
        "def f(double(N) X, double(N) Y) -> (O) { O(i) = sigmoid(X(i)) + pow(Y(i), X(i)) + pow(X(i), 2.0) }",
        lambda: [randn(6), uniform(0.5, 2.0, 6, seed=1)],
    ),
    "accumulate_without_init": (
        "def f(double(N,K) X) -> (O) { O(i) += X(i, r) * X(i, r) }",
        lambda: [randn(3, 4)],
    ),
    "mean_and_variance": (
        """def f(double(N,D) X) -> (Y) {
            mean(n) +=! X(n, r) / D
            var(n) +=! (X(n, r) - mean(n)) * (X(n, r) - mean(n)) / D
            Y(n, d) = (X(n, d) - mean(n)) * rsqrt(var(n) + 1e-5)
        }""",
        lambda: [randn(3, 5)],
    ),
    "embedding_gather": (
        "def f(double(V,D) W, int64(B,L) I, double(D) S) -> (O) { O(b, l, d) = W(I(b, l), d) * S(d) }",
        lambda: [randn(5, 3), torch.tensor([[0, 2, 2], [4, 0, 2]]), randn(3, seed=1)],
    ),
    "typed_output_partly_written": (
        "def f(double(N) X) -> (float64(N) O) { O(i) = X(i + 1) * X(i) where i in 0:N - 1 }",
        lambda: [randn(6)],
    ),
    "temporary_partly_read": (  # its adjoint is zeroed first, in float64 (not a literal's float32)
        """def f(double(N) X) -> (float64(N) O) {
            T(i) = X(i) * X(i)
            O(i) = T(i) * 3.0 where i in 0:N - 1
        }""",
        lambda: [randn(6)],
    ),
}


PROGRAMS_EMULATED_SAMPLE = {
    "embedding_gather",
    "strided_conv",
    "padded_conv1d",
    "versions_read_in_between",
    "product_with_zeros",
}


@pytest.mark.parametrize(("name", "target"), list(_cases(sorted(PROGRAMS), PROGRAMS_EMULATED_SAMPLE)))
def test_programs_pass_gradcheck(name: str, target: str) -> None:
    source, make = PROGRAMS[name]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tcjit.TCWarning)
        kernel = tcjit.define(source)
    _gradcheck(kernel, make(), target, fast=target == "cuda-emulated")


# ------------------------------------------------------------------------------------ builtins
#: builtin -> the range its arguments are drawn from (inside the domain, away from kinks).
UNARY = {
    "exp": (-2, 2), "exp2": (-2, 2), "exp10": (-1, 1), "expm1": (-2, 2), "log": (0.5, 3),
    "log2": (0.5, 3), "log10": (0.5, 3), "log1p": (0.5, 3), "sqrt": (0.5, 3), "rsqrt": (0.5, 3),
    "cbrt": (0.5, 3), "rcbrt": (0.5, 3), "sin": (-2, 2), "cos": (-2, 2), "tan": (-1, 1),
    "sinpi": (-1, 1), "cospi": (-1, 1), "asin": (-0.8, 0.8), "acos": (-0.8, 0.8), "atan": (-2, 2),
    "sinh": (-2, 2), "cosh": (-2, 2), "tanh": (-2, 2), "asinh": (-2, 2), "acosh": (1.5, 3),
    "atanh": (-0.8, 0.8), "erf": (-2, 2), "erfc": (-2, 2), "erfinv": (-0.8, 0.8),
    "erfcinv": (0.2, 1.8), "erfcx": (-1, 2), "normcdf": (-2, 2), "normcdfinv": (0.2, 0.8),
    "sigmoid": (-3, 3), "fabs": (0.5, 2), "j0": (0.5, 3), "j1": (0.5, 3), "y0": (0.5, 3),
    "y1": (0.5, 3), "cyl_bessel_i0": (0.5, 3), "cyl_bessel_i1": (0.5, 3),
}  # fmt: skip
BINARY = {
    "pow": ((0.5, 2), (-2, 2)), "atan2": ((-2, 2), (0.5, 2)), "copysign": ((0.5, 2), (-2, 2)),
    "fdim": ((-2, 2), (-2, 2)), "fdivide": ((-2, 2), (0.5, 2)), "fmax": ((-2, 2), (-2, 2)),
    "fmin": ((-2, 2), (-2, 2)), "max": ((-2, 2), (-2, 2)), "min": ((-2, 2), (-2, 2)),
    "fmod": ((2, 5), (0.7, 1.3)), "remainder": ((2, 5), (0.7, 1.3)), "hypot": ((0.5, 2), (0.5, 2)),
    "rhypot": ((0.5, 2), (0.5, 2)),
}  # fmt: skip


def _groups(names: list[str], size: int) -> list[list[str]]:
    return [names[k : k + size] for k in range(0, len(names), size)]


def _builtin_kernel(funcs: list[str], arity: int):
    """One statement per builtin, each on inputs of its own (one compile for several builtins)."""
    params, outs, body = [], [], []
    for k, f in enumerate(funcs):
        args = [f"X{k}_{a}" for a in range(arity)]
        params += [f"double(N) {x}" for x in args]
        outs.append(f"O{k}")
        body.append(f"O{k}(i) = {f}({', '.join(x + '(i)' for x in args)})")
    return tcjit.define(f"def f({', '.join(params)}) -> ({', '.join(outs)}) {{\n" + "\n".join(body) + "\n}")


@pytest.mark.parametrize("funcs", _groups(sorted(UNARY), 11), ids=lambda fs: f"{fs[0]}..{fs[-1]}")
def test_unary_builtins_pass_gradcheck(funcs: list[str]) -> None:
    inputs = [uniform(*UNARY[f], 5, seed=k) for k, f in enumerate(funcs)]
    _gradcheck(_builtin_kernel(funcs, 1), inputs, "cpu")


@pytest.mark.parametrize("funcs", _groups(sorted(BINARY), 7), ids=lambda fs: f"{fs[0]}..{fs[-1]}")
def test_binary_builtins_pass_gradcheck(funcs: list[str]) -> None:
    inputs = []
    for k, f in enumerate(funcs):
        a, b = BINARY[f]
        inputs += [uniform(*a, 5, seed=2 * k), uniform(*b, 5, seed=2 * k + 1)]
    _gradcheck(_builtin_kernel(funcs, 2), inputs, "cpu")


def test_many_argument_builtins_pass_gradcheck() -> None:
    kernel = tcjit.define(
        """def f(double(N) A, double(N) B, double(N) C, double(N) D) -> (O) {
            O(i) = fma(A(i), B(i), C(i)) + norm3d(A(i), B(i), C(i)) + norm4d(A(i), B(i), C(i), D(i))
                 + rnorm3d(A(i), B(i), D(i)) + rnorm4d(D(i), C(i), B(i), A(i))
        }"""
    )
    _gradcheck(kernel, [uniform(0.5, 2, 4, seed=k) for k in range(4)], "cpu")


def test_piecewise_constant_builtins_have_zero_gradient() -> None:
    kernel = tcjit.define(
        "def f(double(N) X) -> (O) { O(i) = floor(X(i)) + ceil(X(i)) + round(X(i)) + X(i) }"
    )
    x = uniform(0.1, 0.4, 5).requires_grad_()
    kernel(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(5, dtype=torch.float64))


# ------------------------------------------------------------------------- what is derived
#: Two outputs of different shapes from the same inputs: a call's loss may read either.
TWO_OUT = """
def two(double(B,M) X, double(N,M) W) -> (O, P) {
    O(b, n) +=! X(b, r_m) * W(n, r_m)
    P(b) +=! tanh(X(b, r_m))
}"""

MLP = """
def layer(double(B,M) I, double(N,M) W, double(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n) = fmax(O(b, n) + bias(n), 0)
}"""


def test_intermediates_are_saved_not_recomputed() -> None:
    d = derivation(tcjit.define(MLP))
    assert d.saved == ("O_0",)
    assert "-> (float64(B, N) O, float64(B, N) O_0)" in d.forward
    # the backward reads the saved pre-activation and never multiplies I by W again
    assert "O_0(b, n) +=!" not in d.backward and "I(b, r_m) * W(n, r_m)" not in d.backward


def test_a_convolution_input_gradient_reads_a_zero_padded_copy() -> None:
    """d_I of a convolution is a convolution of a zero-padded d_O with the kernel (no let-bindings
    or bound conditions, which split every loop); the statement's reuse of d_O is kept."""
    conv = suite.get("conv2d")
    d = derivation(tcjit.define(conv.source, name=conv.entry))
    assert "d_O_pad(p0, p1, p2, p3) = (p2 >= (KH - 1) && p2 < H && p3 >= (KW - 1) && p3 < W) ?" in d.backward
    assert "p2 in 0:(H + KH - 1)" in d.backward
    assert "d_I(n, r_c, y2, y3) +=! d_O_pad(n, f, -r_kh + y2 + KH - 1, -r_kw + y3 + KW - 1) *" in d.backward
    assert " h = " not in d.backward


#: Shifted reads the padding must leave as gathers (another factor reads the shifted variable:
#: X(i + r) twice; the subscript's coefficient is 2), and one it handles with an offset and a
#: bounded range (i + r + 1, i in 1:N - R).
SHIFTS = """
def square(double(N) X, double(R) K) -> (O) { O(i) +=! X(i + r) * X(i + r) * K(r) where i in 0:N - R + 1 }
def strided(double(N) X, double(R) K) -> (O) { O(i) +=! X(2 * i + r) * K(r) where i in 0:(N - R) / 2 + 1 }
def offset(double(N) X, double(R) K) -> (O) { O(i) +=! X(i + r + 1) * K(r) where i in 1:N - R }
"""


@pytest.mark.parametrize("target", TARGETS)
def test_shifted_reads_are_padded_only_where_that_is_exact(target: str) -> None:
    program = {name: tcjit.define(SHIFTS, name=name) for name in ("square", "strided", "offset")}
    assert "_pad" not in derivation(program["square"]).backward
    assert "_pad" not in derivation(program["strided"]).backward
    assert "d_O_pad(" in derivation(program["offset"]).backward
    x, k = randn(11, seed=4), randn(3, seed=5)
    for kernel in program.values():
        _gradcheck(kernel, [x.clone(), k.clone()], target, fast=False)


def test_only_wanted_gradients_are_derived_and_computed() -> None:
    kernel = tcjit.define(MLP)
    d = derivation(kernel, ("W",))
    assert "-> (float64(N, M) d_W)" in d.backward and "d_I" not in d.backward
    x, w, b = randn(3, 4), randn(5, 4, seed=1).requires_grad_(), randn(5, seed=2)
    kernel(x, w, b).sum().backward()
    assert x.grad is None and b.grad is None and w.grad is not None
    plan = kernel.grad_plan()
    built = [k for k in (plan.backward_for((False, True, False)),)]
    assert [o for o in built[0].outputs] == ["d_W"]


def test_a_call_layout_keeps_its_backward_specialisations() -> None:
    """Calls of one layout run their derived backward's specialisation directly (kept per wanted
    gradients, absent outputs and the output gradients' strides on the call's GradCall): output
    gradients that arrive expanded, transposed, in another dtype or not at all still give torch's
    gradients, the expanded and transposed ones read in place."""
    kernel = tcjit.define(TWO_OUT)
    x, w = randn(6, 4), randn(5, 4, seed=1)

    def step(loss_of, wanted):
        leaves = [t.detach().clone().requires_grad_(n in wanted) for t, n in zip((x, w), "xw")]
        loss_of(*kernel(*leaves)).backward()
        refs = [t.detach().clone().requires_grad_(n in wanted) for t, n in zip((x, w), "xw")]
        o, p = refs[0] @ refs[1].T, torch.tanh(refs[0]).sum(1)
        loss_of(o, p).backward()
        for got, want in zip(leaves, refs):
            assert (got.grad is None) == (want.grad is None)
            if want.grad is not None:
                torch.testing.assert_close(got.grad, want.grad)

    g = randn(5, 6, seed=3)
    step(lambda o, p: o.sum() + p.sum(), "xw")  # expanded gradients
    step(lambda o, p: (o * g.T).sum() + (p * 2).sum(), "xw")  # a transposed one
    step(lambda o, p: (o.float() * 3).sum(), "xw")  # float32 gradient, p absent
    step(lambda o, p: (p * p).sum(), "x")  # o absent, one input wanted
    step(lambda o, p: o.sum(), "w")
    (call,) = kernel._grad_calls.values()  # one layout: one GradCall, its backwards kept
    assert set(call.backwards) == {
        ((True, True), frozenset(), ((0, 0), (0,))),  # O (6, 5) and P (6,) expanded
        ((True, True), frozenset(), ((1, 6), (1,))),  # O's gradient g.T, column-major
        ((True, True), frozenset({"P"}), ((5, 1),)),  # converted to float64: contiguous
        ((True, False), frozenset({"O"}), ((1,),)),
        ((False, True), frozenset({"P"}), ((0, 0),)),
    }


def test_gradients_match_torch_in_float32() -> None:
    src = MLP.replace("double", "float")
    kernel = tcjit.define(src)
    g = _gen(3)
    x = torch.randn(8, 16, generator=g, requires_grad=True)
    w = torch.randn(12, 16, generator=g, requires_grad=True)
    b = torch.randn(12, generator=g, requires_grad=True)
    out = kernel(x, w, b)
    (out * out).sum().backward()
    grads = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    ref = torch.relu(x @ w.T + b)
    (ref * ref).sum().backward()
    for got, t in zip(grads, (x, w, b)):
        torch.testing.assert_close(got, t.grad, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------- outputs the loss does not read
#: Outputs read by later statements: A by B and (shifted: a gather) by C, B by C. An output the
#: loss reads that is also read later has an adjoint with a seed and contributions; an absent one
#: has contributions only.
READ_LATER = """
def f(double(N) X, double(N) Y) -> (A, B, float64(N) C) {
    A(i) = X(i) * Y(i)
    B(i) = exp(A(i)) + Y(i)
    C(i) = A(i + 1) * B(i) where i in 0:N - 1
}"""

#: Y and s reach Q only: when the loss reads P, their gradients are zeros.
SEPARATE = """
def f(double(N) X, double(N) Y, double s) -> (P, Q) {
    P(i) = X(i) * X(i)
    Q(i) = s * sin(Y(i))
}"""


def _mlp3_inputs():
    shapes = [(3, 5), (4, 5), (4,), (6, 4), (6,), (2, 6), (2,)]  # B=3, M=5, N=4, P=6, Q=2
    return [randn(*s, seed=k) for k, s in enumerate(shapes)]


#: name -> (source, entry, inputs, the outputs the loss reads)
ABSENT = {
    "mlp3_last": (suite.get("mlp3").source, "mlp3", _mlp3_inputs, (2,)),
    "mlp3_first_and_last": (suite.get("mlp3").source, "mlp3", _mlp3_inputs, (0, 2)),
    "read_later_last": (READ_LATER, None, lambda: [randn(6), randn(6, seed=1)], (2,)),
    "read_later_first_and_last": (READ_LATER, None, lambda: [randn(6), randn(6, seed=1)], (0, 2)),
    "read_later_middle": (READ_LATER, None, lambda: [randn(6), randn(6, seed=1)], (1,)),
    "separate": (
        SEPARATE,
        None,
        lambda: [randn(5), randn(5, seed=1), torch.tensor(1.5, dtype=torch.float64)],
        (0,),
    ),
}


def _recording_derivations(monkeypatch) -> list:
    """The derivations tcjit.derived makes from now on (the backwards derived per call)."""
    import tcjit.derived

    made, real = [], tcjit.derived.derive

    def derive(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tcjit.derived, "derive", derive)
    return made


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(ABSENT))
def test_outputs_the_loss_does_not_read_pass_gradcheck(case: str, target: str, monkeypatch) -> None:
    """The backward runs without the gradients of the outputs nobody differentiated (they arrive
    as None), and gives the gradients the backward taking zeros for them gives."""
    source, entry, make, read = ABSENT[case]
    kernel = tcjit.define(_double(source), entry)
    made = _recording_derivations(monkeypatch)
    inputs = [x.requires_grad_() for x in make()]

    def run(*a):
        outs = kernel(*a, target=target)
        return tuple(outs[k] for k in read)

    assert torch.autograd.gradcheck(run, inputs, fast_mode=target == "cuda-emulated")
    outs = kernel(*inputs, target=target)
    seeds = [randn(*o.shape, seed=20 + k) for k, o in enumerate(outs)]
    got = torch.autograd.grad([outs[k] for k in read], inputs, [seeds[k] for k in read], retain_graph=True)
    absent = frozenset(kernel.outputs) - {kernel.outputs[k] for k in read}
    assert absent in [d.absent for d in made]  # the backward that ran took no gradient for them
    for d in made:
        assert not any(f"d_{o})" in d.backward.split("->")[0] for o in d.absent)
    zeros = [seeds[k] if k in read else torch.zeros_like(o) for k, o in enumerate(outs)]
    want = torch.autograd.grad(outs, inputs, zeros)  # every gradient passed: the full backward
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_an_input_reached_only_from_an_absent_output_gets_zeros() -> None:
    kernel = tcjit.define(SEPARATE)
    x, y = randn(5).requires_grad_(), randn(5, seed=1).requires_grad_()
    s = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    p, _ = kernel(x, y, s)
    p.sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())
    assert torch.equal(y.grad, torch.zeros(5, dtype=torch.float64))
    assert torch.equal(s.grad, torch.zeros((), dtype=torch.float64))
    d = derivation(kernel, ("X", "Y", "s"), absent=frozenset({"Q"}))
    assert "d_Y(i0) = 0.0 where i0 in 0:N" in d.backward and "d_s() = 0.0" in d.backward
    assert "sin" not in d.backward and "cos" not in d.backward  # nothing flows from Q


def test_mlp3_without_the_gradients_of_o1_and_o2_copies_nothing() -> None:
    """The training case: loss = O3.sum(). The adjoints of O1 and O2 start from their first
    contribution (+=!) instead of a copy of a zero-filled gradient."""
    k = suite.get("mlp3")
    kernel = tcjit.define(k.source, k.entry)
    full = derivation(kernel)
    d = derivation(kernel, absent=frozenset({"O1", "O2"}))
    params = d.backward.split("->")[0]
    assert "float32(B, Q) d_O3)" in params and "d_O1" not in params and "d_O2" not in params
    assert "d_O2_1(i0, i1) = d_O2(i0, i1)" in full.backward  # what every output's gradient costs
    assert not re.search(r"\(i0\w*, i1\w*\) = d_", d.backward)  # no copy statement left
    assert "    d_O2(b, r_p) +=! d_O3_0(b, q) * W3(q, r_p) where" in d.backward
    assert "    d_O1(b, r_n) +=! d_O2_0(b, p) * W2(p, r_n) where" in d.backward
    assert d.backward.count("\n") == full.backward.count("\n") - 2
    assert d.wanted == full.wanted and d.backward_name == full.backward_name
    assert derivation(kernel, absent=frozenset({"O2", "O1"})).backward == d.backward  # deterministic
    with pytest.raises(tcjit.TCError, match="I: absent gradients of non-outputs"):
        derivation(kernel, absent=frozenset({"I"}))


def test_mlp3_gradients_of_the_last_output_match_torch_in_float32(monkeypatch) -> None:
    k = suite.get("mlp3")
    kernel = tcjit.define(k.source, k.entry)
    made = _recording_derivations(monkeypatch)
    inputs = [x.float().requires_grad_() for x in _mlp3_inputs()]
    kernel(*inputs)[2].sum().backward()
    got = [x.grad for x in inputs]
    ref = [x.detach().clone().requires_grad_() for x in inputs]
    k.torch_ref(*ref)[2].sum().backward()
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r.grad, rtol=1e-5, atol=1e-5)
    # the plan's derivation for every gradient (the forward's), then the backward without O1, O2
    assert [d.absent for d in made] == [frozenset(), frozenset({"O1", "O2"})]


# ------------------------------------------------------------------------------------ errors
def test_a_statement_without_derivative_fails_at_backward_and_names_it() -> None:
    kernel = tcjit.define(
        """def f(double(N) X, double(N) Y) -> (O) {
            T(i) = lgamma(X(i))
            O(i) = T(i) + Y(i) * Y(i)
        }"""
    )
    x, y = randn(4).abs() + 0.5, randn(4, seed=1)
    torch.testing.assert_close(kernel(x, y), torch.lgamma(x) + y * y)  # forward-only use works
    y.requires_grad_()
    kernel(x, y).sum().backward()  # the gradient wanted does not flow through lgamma
    torch.testing.assert_close(y.grad, 2 * y.detach())
    x.requires_grad_()
    out = kernel(x, y)  # the forward works with gradients recorded
    with pytest.raises(TCDerivativeError, match="'lgamma' has no derivative") as info:
        out.sum().backward()
    assert info.value.line == 2 and "T(i) = lgamma(X(i))" in str(info.value)


def test_a_statement_without_derivative_on_an_output_the_loss_does_not_read_is_no_error() -> None:
    kernel = tcjit.define(
        """def f(double(N) X) -> (P, Q) {
            P(i) = X(i) * X(i)
            Q(i) = lgamma(X(i))
        }"""
    )
    x = (randn(4).abs() + 0.5).requires_grad_()
    p, q = kernel(x)
    torch.testing.assert_close(q, torch.lgamma(x.detach()))
    p.sum().backward()  # Q's gradient is None: nothing flows through lgamma
    torch.testing.assert_close(x.grad, 2 * x.detach())
    p, q = kernel(x)
    with pytest.raises(TCDerivativeError, match="'lgamma' has no derivative"):
        (p + q).sum().backward()


def test_a_partial_overwrite_is_refused_when_a_gradient_is_wanted() -> None:
    kernel = tcjit.define(
        """def f(double(N) X) -> (float64(N) O) {
            O(i) = X(i) * 2.0
            O(i) = X(i) + 1.0 where i in 0:2
        }"""
    )
    x = randn(5).requires_grad_()
    out = kernel(x)
    with pytest.raises(TCDerivativeError, match="overwrites part of 'O'") as info:
        out.sum().backward()
    assert info.value.line == 3


def test_show_prints_the_derived_programs(tmp_path, capsys) -> None:
    from tcjit.cli import main

    path = tmp_path / "layer.tc"
    path.write_text(MLP)
    assert main(["show", str(path), "--stage", "backward"]) == 0
    out = capsys.readouterr().out
    assert "def layer__fwd(" in out and "def layer__bwd(" in out and "d_W(n, r_m) +=!" in out
