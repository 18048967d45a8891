"""tcjit kernels inside PyTorch programs: torch.compile, grad modes, layouts (tcjit/ops.py, tcjit/kernel.py).

``torch.compile(fullgraph=True)`` traces models made of tcjit kernels (each call one
``torch.library`` custom operator whose fake implementation gets the output shapes from range
inference), and their outputs and gradients equal eager calls. Most cases compile with the
``aot_eager`` backend (Dynamo and AOTAutograd trace exactly as with inductor, without generating
code: seconds instead of tens of seconds); one small model goes through inductor, the default.
``torch.library.opcheck`` checks each kind of operator (schema, fake implementation, autograd
registration, AOT dispatch). Eager calls: ``no_grad``, ``inference_mode``, non-contiguous and
expanded inputs, double backward, torch.func transforms and forward-mode AD (all three refused
plainly).
"""

from __future__ import annotations

import pytest
import torch
from compiled_helpers import LINEAR

import tcjit
from tcjit import TCCallError, ops

FCRELU = """
def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}
"""

#: Two outputs, one of them integer (not differentiable), and a rank-0 argument.
STATS = """
def stats(float(N, K) X, float s) -> (M, A) {
    M(n) max=! s * X(n, r_k)
    A(n) +=! int64(X(n, r_k) == M(n) / s)
}
"""

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.fixture(scope="module")
def fcrelu():
    return tcjit.define(FCRELU)


def _randn(*shape, requires_grad=False, seed=0, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=dtype).to(device)
    return x.requires_grad_(requires_grad)


class _Recorder:
    """A torch.compile backend that keeps the FX graphs Dynamo hands it and runs them as they are."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def targets(self) -> list[str]:
        return [str(n.target) for g in self.graphs for n in g.graph.nodes if n.op == "call_function"]


class _MLP(torch.nn.Module):
    """Two tcjit fcrelu layers with torch code between and after them."""

    def __init__(self, kernel, m=8, h=16, n=4):
        super().__init__()
        self.kernel = kernel
        self.w1 = torch.nn.Parameter(_randn(h, m, seed=1) / m**0.5)
        self.b1 = torch.nn.Parameter(_randn(h, seed=2))
        self.w2 = torch.nn.Parameter(_randn(n, h, seed=3) / h**0.5)
        self.b2 = torch.nn.Parameter(_randn(n, seed=4))

    def forward(self, x):
        h = self.kernel(x, self.w1, self.b1)
        y = self.kernel(torch.tanh(h) * 2, self.w2, self.b2)
        return torch.nn.functional.log_softmax(y, dim=1).sum()


def _loss_and_grads(model, x):
    model.zero_grad(set_to_none=True)
    x.grad = None
    loss = model(x)
    loss.backward()
    return (
        loss.detach(),
        [p.grad.clone() for p in model.parameters()],
        None if x.grad is None else x.grad.clone(),
    )


# ============================================================================ torch.compile
def test_compiled_model_equals_eager_with_inductor(fcrelu):
    model = _MLP(fcrelu)
    x = _randn(5, 8, seed=5)
    want = _loss_and_grads(model, x)
    compiled = torch.compile(model, fullgraph=True)
    got = _loss_and_grads(compiled, x)
    torch.testing.assert_close(got[0], want[0])
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w)


def test_compiled_graph_holds_the_custom_operators_and_no_break(fcrelu):
    model = _MLP(fcrelu)
    x = _randn(3, 8, seed=6, requires_grad=True)
    want = _loss_and_grads(model, x)
    rec = _Recorder()
    got = _loss_and_grads(torch.compile(model, fullgraph=True, backend=rec), x)
    assert len(rec.graphs) == 1  # one graph: no break
    name = ops.op_name(fcrelu, ("Tensor",) * 3, None, None, "fwd")
    assert rec.targets().count(f"tcjit.{name}.default") == 2
    assert (
        f"tcjit::{name}" in ops.registered_ops()
        and f"tcjit::{name[: -len('_fwd')]}_bwd" in ops.registered_ops()
    )
    torch.testing.assert_close(got[0], want[0])
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w)
    torch.testing.assert_close(got[2], want[2])  # the batch's gradient: d_I of the first layer


def test_compiled_call_without_gradients_uses_the_plain_operator(fcrelu):
    x, w, b = _randn(4, 8, seed=7), _randn(6, 8, seed=8, requires_grad=True), _randn(6, seed=9)
    plain = ops.op_name(fcrelu, ("Tensor",) * 3, None, None)
    for mode in (torch.no_grad, torch.inference_mode):
        rec = _Recorder()
        f = torch.compile(lambda x, w, b: fcrelu(x, w, b) * 2, fullgraph=True, backend=rec)
        with mode():
            y = f(x, w, b)
        assert not y.requires_grad
        assert rec.targets().count(f"tcjit.{plain}.default") == 1, rec.targets()
        torch.testing.assert_close(y, 2 * torch.relu(x @ w.detach().T + b))


def test_compiled_functions_recompile_for_new_sizes(fcrelu):
    f = torch.compile(lambda x, w, b: fcrelu(x, w, b).sum(1), fullgraph=True, backend="aot_eager")
    w, b = _randn(6, 8, seed=10), _randn(6, seed=11)
    for batch in (3, 5, 7, 3):  # the third size would make Dynamo's shapes symbolic
        x = _randn(batch, 8, seed=batch)
        torch.testing.assert_close(f(x, w, b), torch.relu(x @ w.T + b).sum(1))


def test_compiled_multiple_outputs_scalar_argument_and_integer_output():
    stats = tcjit.define(STATS)
    x = _randn(4, 5, seed=12, requires_grad=True)
    x.data[1, 2] = x.data[1, 4] = 9.0  # a tie: the gradient is shared by the two
    want_m, want_a = stats(x, 2.0)
    (want_g,) = torch.autograd.grad(want_m.sum(), x)

    def f(x):
        m, a = stats(x, 2.0)
        return m, a

    got_m, got_a = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    (got_g,) = torch.autograd.grad(got_m.sum(), x)
    assert got_a.dtype == torch.int64 and not got_a.requires_grad
    torch.testing.assert_close((got_m, got_a), (want_m, want_a))
    torch.testing.assert_close(got_g, want_g)
    expected = torch.zeros(4, 5)
    expected[x.detach() == x.detach().max(1, keepdim=True).values] = 1.0
    expected /= expected.sum(1, keepdim=True)
    torch.testing.assert_close(got_g, 2 * expected)


#: Two layers, both outputs returned: a loss usually reads the second only.
TWO_LAYERS = """
def two(float(B,M) I, float(N,M) W1, float(P,N) W2) -> (H, O) {
    H(b, n) +=! I(b, r_m) * W1(n, r_m)
    H(b, n) = fmax(H(b, n), 0)
    O(b, p) +=! H(b, r_n) * W2(p, r_n)
}
"""


@pytest.mark.parametrize("read", [("O",), ("H", "O")])
def test_compiled_backward_takes_none_for_an_output_the_loss_does_not_read(read, monkeypatch):
    """Under torch.compile an output nothing differentiates passes None to the backward operator
    (gradients are not materialised), whose derived backward then takes no gradient for it."""
    import tcjit.derived

    made, real = [], tcjit.derived.derive

    def derive(*args, **kwargs):  # the derivations made from now on
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tcjit.derived, "derive", derive)
    two = tcjit.define(TWO_LAYERS)
    x, w1, w2 = _randn(3, 5, seed=19), _randn(4, 5, seed=20, requires_grad=True), _randn(2, 4, seed=21)
    w2.requires_grad_()

    def loss(x, w1, w2):
        outs = dict(zip(("H", "O"), two(x, w1, w2)))
        return sum((outs[o] * outs[o]).sum() for o in read)

    got = torch.autograd.grad(torch.compile(loss, fullgraph=True, backend="aot_eager")(x, w1, w2), (w1, w2))
    h = torch.relu(x @ w1.T)
    outs = {"H": h, "O": h @ w2.T}
    want = torch.autograd.grad(sum((outs[o] * outs[o]).sum() for o in read), (w1, w2))
    torch.testing.assert_close(got, want)
    assert made[-1].absent == frozenset({"H", "O"}) - set(read)


#: A valid 1-d convolution: its output's length is a size expression of the input's.
CONV1D = """
def conv1d(float(N, L) X, float(K) F) -> (Y) {
    Y(n, l) +=! X(n, l + r_k) * F(r_k)
}
"""


@pytest.mark.parametrize("how", ("dynamic", "mark_dynamic"))
def test_symbolic_sizes_compile_one_graph_for_every_batch_size(fcrelu, how):
    """``torch.compile(dynamic=True)`` and ``mark_dynamic``: the fake implementation keeps a
    symbolic size symbolic (no guard fixes it, no constraint violation), so one graph, forward
    and backward, serves every batch size; values and gradients equal eager ones."""
    model = _MLP(fcrelu)
    rec = _Recorder()
    compiled = torch.compile(model, fullgraph=True, backend=rec, dynamic=True if how == "dynamic" else None)
    for batch in (6, 3, 6, 9, 2):
        x = _randn(batch, 8, seed=batch, requires_grad=True)
        if how == "mark_dynamic":
            torch._dynamo.mark_dynamic(x, 0)
        want = _loss_and_grads(model, x)
        got = _loss_and_grads(compiled, x)
        torch.testing.assert_close(got[0], want[0])
        for g, w in zip([*got[1], got[2]], [*want[1], want[2]]):
            torch.testing.assert_close(g, w)
    assert len(rec.graphs) == 1, f"{len(rec.graphs)} graphs"


def test_a_symbolic_output_shape_is_the_size_expression_of_the_inputs():
    conv = tcjit.define(CONV1D)
    rec = _Recorder()
    f = torch.compile(lambda x, k: conv(x, k) * 2, fullgraph=True, backend=rec, dynamic=True)
    for n, length, taps in ((2, 10, 3), (3, 17, 3), (4, 9, 5)):
        x, k = _randn(n, length, seed=length), _randn(taps, seed=taps)
        y = f(x, k)
        assert y.shape == (n, length - taps + 1)
        torch.testing.assert_close(y, 2 * torch.nn.functional.conv1d(x[:, None], k[None, None])[:, 0])
    assert len(rec.graphs) == 1
    shapes = {
        str(n.meta["example_value"].shape)
        for g in rec.graphs
        for n in g.graph.nodes
        if n.op == "call_function" and "tcjit" in str(n.target)
    }
    assert len(shapes) == 1 and "s" in shapes.pop()  # symbolic, e.g. torch.Size([s0, s1 - s2 + 1])


def test_operators_pass_opcheck(fcrelu):
    """Schema, fake implementation, autograd registration and AOT dispatch of each kind of operator."""
    x, w, b = _randn(3, 8, seed=13), _randn(5, 8, seed=14), _randn(5, seed=15)
    kinds = ("Tensor",) * 3
    with torch.no_grad():
        torch.compile(lambda *a: fcrelu(*a), fullgraph=True, backend="aot_eager")(x, w, b)
    torch.compile(lambda *a: fcrelu(*a), fullgraph=True, backend="aot_eager")(x, w.requires_grad_(), b)
    call = getattr(torch.ops.tcjit, ops.op_name(fcrelu, kinds, None, None)).default
    fwd = getattr(torch.ops.tcjit, ops.op_name(fcrelu, kinds, None, None, "fwd")).default
    for op, args in ((call, (x, w.detach(), b)), (fwd, (x, w, b))):
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, result


def test_fake_implementation_checks_the_call_like_an_eager_call(fcrelu):
    f = torch.compile(lambda x, w, b: fcrelu(x, w, b), fullgraph=True, backend="aot_eager")
    """With fullgraph=True Dynamo wraps the fake implementation's TCCallError in its own error,
    message, line, column and caret included."""
    with pytest.raises(Exception, match="sizes contradict: M is 8 from dimension 1 of 'I' but 7") as info:
        f(_randn(3, 8), _randn(5, 7), _randn(5))
    assert "TCCallError" in str(info.value) and "fcrelu:2:34" in str(info.value)


def test_outputs_argument_is_refused_under_compile(fcrelu):
    out = torch.empty(3, 5)
    f = torch.compile(lambda x, w, b: fcrelu(x, w, b, outputs=(out,)), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"outputs= cannot be used under torch\.compile"):
        f(_randn(3, 8), _randn(5, 8), _randn(5))


def test_operator_names_are_stable_and_distinguish_kernels(fcrelu):
    kinds = ("Tensor",) * 3
    again = tcjit.define(FCRELU)
    assert ops.op_name(again, kinds, None, None) == ops.op_name(fcrelu, kinds, None, None)
    other = tcjit.define(FCRELU.replace("fmax(O(b, n) + bias(n), 0)", "O(b, n) + bias(n)"))
    assert ops.op_name(other, kinds, None, None) != ops.op_name(fcrelu, kinds, None, None)
    tiled = tcjit.MappingOptions.naive().tile(4, 4)
    assert ops.op_name(fcrelu, kinds, tiled, None) != ops.op_name(fcrelu, kinds, None, None)
    assert ops.op_name(fcrelu, kinds, None, "cuda-emulated") != ops.op_name(fcrelu, kinds, None, None)
    assert ops.op_name(fcrelu, kinds, None, None, "fwd").startswith("fcrelu_")


@pytest.mark.full
def test_compiled_emulated_target_with_options(fcrelu):
    opts = tcjit.MappingOptions.naive().tile(2, 4)
    x, w, b = _randn(3, 8, seed=16, requires_grad=True), _randn(5, 8, seed=17, requires_grad=True), _randn(5)

    def f(x, w, b):
        return fcrelu(x, w, b, options=opts, target="cuda-emulated").sum()

    got = torch.autograd.grad(torch.compile(f, fullgraph=True, backend="aot_eager")(x, w, b), (x, w))
    want = torch.autograd.grad(torch.relu(x @ w.T + b).sum(), (x, w))
    torch.testing.assert_close(got, want)


@CUDA
def test_compiled_model_on_cuda_equals_eager(fcrelu):
    model = _MLP(fcrelu).cuda()
    x = _randn(5, 8, seed=18, device="cuda")
    want = _loss_and_grads(model, x)
    got = _loss_and_grads(torch.compile(model, fullgraph=True), x)
    torch.testing.assert_close(got[0], want[0])
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w)


# ================================================================================ grad modes
@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_calls_without_gradients_take_the_plain_path(mode):
    k = tcjit.define(FCRELU)  # a fresh kernel: no grad plan made yet
    x, w, b = _randn(3, 8), _randn(4, 8, requires_grad=True), _randn(4, requires_grad=True)
    with mode():
        y = k(x, w, b)
    assert not y.requires_grad and y.grad_fn is None
    assert k._plan is None  # nothing derived, nothing compiled for a backward
    if mode is torch.inference_mode:
        assert y.is_inference()
    torch.testing.assert_close(y, torch.relu(x @ w.detach().T + b.detach()))


def test_inputs_that_need_no_gradient_get_none(fcrelu):
    x, w, b = _randn(3, 8), _randn(4, 8, requires_grad=True), _randn(4)
    y = fcrelu(x, w, b)
    assert y.requires_grad
    y.sum().backward()
    assert x.grad is None and b.grad is None and w.grad is not None


def test_double_backward_is_refused_plainly(fcrelu):
    """create_graph=True asks for gradients that can be differentiated again: refused when asked."""
    x, w, b = _randn(3, 8, requires_grad=True), _randn(4, 8, requires_grad=True), _randn(4)
    with pytest.raises(TCCallError, match="double backward"):
        torch.autograd.grad(fcrelu(x, w, b).pow(2).sum(), w, create_graph=True)
    (gw,) = torch.autograd.grad(fcrelu(x, w, b).pow(2).sum(), w)  # once is fine
    assert gw.shape == w.shape


_TRANSFORMS = {
    "vmap": lambda k, x, w, b: torch.func.vmap(lambda xx: k(xx, w, b))(x.unsqueeze(0)),
    "grad": lambda k, x, w, b: torch.func.grad(lambda ww: k(x, ww, b).sum())(w),
    "vjp": lambda k, x, w, b: torch.func.vjp(lambda ww: k(x, ww, b), w),
    "jacrev": lambda k, x, w, b: torch.func.jacrev(lambda ww: k(x, ww, b))(w),
    "jacfwd": lambda k, x, w, b: torch.func.jacfwd(lambda ww: k(x, ww, b))(w),
    "jvp": lambda k, x, w, b: torch.func.jvp(lambda ww: k(x, ww, b), (w,), (torch.ones_like(w),)),
}


@pytest.mark.parametrize("transform", sorted(_TRANSFORMS))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_torch_func_transforms_are_refused_plainly(fcrelu, transform, requires_grad):
    """Under vmap the kernel would meet a batched tensor without storage, under grad and jvp a
    wrapped one: a TCCallError naming the kernel, with or without the autograd wrapping, and
    the kernel works again once the transform has returned."""
    x, w, b = _randn(3, 8), _randn(4, 8, requires_grad=requires_grad), _randn(4)
    with pytest.raises(TCCallError, match=r"fcrelu: tcjit kernels cannot run under torch\.func"):
        _TRANSFORMS[transform](fcrelu, x, w, b)
    torch.testing.assert_close(fcrelu(x, w, b), torch.relu(x @ w.T + b))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_forward_mode_dual_tensors_are_refused(fcrelu, requires_grad):
    """Without the check a call that needs no gradient dropped the tangent silently (its output
    was not dual), and one that does failed in torch's Function without naming the kernel."""
    import torch.autograd.forward_ad as fwad

    x, w, b = _randn(3, 8), _randn(4, 8), _randn(4)
    with fwad.dual_level():
        dual = fwad.make_dual(w.clone().requires_grad_(requires_grad), torch.ones_like(w))
        with pytest.raises(TCCallError, match="argument 1 is a dual tensor of forward-mode AD"):
            fcrelu(x, dual, b)
        y = fcrelu(x, w, b)  # plain tensors while a dual level is open: an ordinary call
    torch.testing.assert_close(y, torch.relu(x @ w.T + b))


# ================================================================================= layouts
def test_non_contiguous_inputs_pass_gradcheck():
    k = tcjit.define(FCRELU.replace("float", "double"))
    g = torch.Generator().manual_seed(19)
    xt = torch.randn(8, 3, dtype=torch.float64, generator=g, requires_grad=True)  # passed transposed
    w2 = torch.randn(4, 16, dtype=torch.float64, generator=g, requires_grad=True)  # every other column
    b = torch.randn(4, dtype=torch.float64, generator=g, requires_grad=True)
    assert not xt.t().is_contiguous() and not w2[:, ::2].is_contiguous()
    assert torch.autograd.gradcheck(lambda xt, w2, b: k(xt.t(), w2[:, ::2], b), (xt, w2, b))
    assert torch.autograd.gradcheck(
        lambda xt, w2, b: k(xt.t(), w2[:, ::2], b, target="cuda-emulated"), (xt, w2, b)
    )


def test_expanded_inputs_pass_gradcheck():
    """A stride-0 input (a bias broadcast to the batch, a row expanded): gradients sum over the copies."""
    add = tcjit.define("def add(double(B, N) X, double(B, N) Y) -> (Z) { Z(b, n) = X(b, n) * Y(b, n) }")
    g = torch.Generator().manual_seed(20)
    x = torch.randn(5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    row = torch.randn(1, 3, dtype=torch.float64, generator=g, requires_grad=True)
    assert row.expand(5, 3).stride() == (0, 1)
    assert torch.autograd.gradcheck(lambda x, row: add(x, row.expand(5, 3)), (x, row))
    z = add(x, row.expand(5, 3))
    (grow,) = torch.autograd.grad(z.sum(), row)
    torch.testing.assert_close(grow, x.detach().sum(0, keepdim=True))


@pytest.mark.parametrize("target", ["cpu", "cuda-emulated"])
def test_output_gradients_are_read_in_the_layout_they_arrive_in(target):
    """A derived backward reads an output's gradient in place, in whatever layout autograd hands
    it: ``out.sum()``'s is expanded (every stride 0), a product's is contiguous, one through a
    transpose is column-major. Each layout gets a specialisation of its own (no copy is made to
    fit one), and alternating between them keeps every gradient right."""
    k = tcjit.define(FCRELU.replace("float", "double"))
    x = _randn(3, 8, requires_grad=True, seed=21, dtype=torch.float64)
    w = _randn(4, 8, requires_grad=True, seed=22, dtype=torch.float64)
    b = _randn(4, requires_grad=True, seed=23, dtype=torch.float64)
    r = _randn(3, 4, seed=24, dtype=torch.float64)
    losses = {
        "expanded": lambda o: o.sum(),
        "contiguous": lambda o: (o * r).sum(),
        "transposed": lambda o: (o.t() * r.t().contiguous()).sum(),
    }
    for _ in range(2):
        for name, loss in losses.items():
            got = torch.autograd.grad(loss(k(x, w, b, target=target)), (x, w, b))
            want = torch.autograd.grad(loss(torch.relu(x @ w.T + b)), (x, w, b))
            for g, e in zip(got, want):
                torch.testing.assert_close(g, e, msg=lambda m, name=name: f"{name}: {m}")
    (call,) = k._grad_calls.values()
    assert {strides for _, _, strides in call.backwards} == {((0, 0),), ((4, 1),), ((1, 3),)}


def test_gradients_have_the_inputs_shapes_and_dtypes(fcrelu):
    xt = _randn(8, 3, requires_grad=True)
    w = _randn(4, 8, requires_grad=True)
    b = _randn(4, requires_grad=True)
    fcrelu(xt.t(), w.expand(4, 8), b).sum().backward()
    for p in (xt, w, b):
        assert p.grad.shape == p.shape and p.grad.dtype == p.dtype
    torch.testing.assert_close(xt.grad, torch.autograd.grad(torch.relu(xt.t() @ w.T + b).sum(), xt)[0])


# ======================================================================== copying, pickling
class _Layer(torch.nn.Module):
    """A model holding a kernel beside its parameters, as training code writes one."""

    def __init__(self, kernel):
        super().__init__()
        self.kernel = kernel
        self.w = torch.nn.Parameter(_randn(4, 8, seed=30))
        self.b = torch.nn.Parameter(_randn(4, seed=31))

    def forward(self, x):
        return self.kernel(x, self.w, self.b)


def test_deepcopy_of_a_model_shares_its_kernel(fcrelu):
    """copy.deepcopy(model) (EMA and teacher models, best-model snapshots) failed on the loaded
    code's ctypes pointers. Now the parameters are copied and the kernel shared, as a function is."""
    import copy

    m = _Layer(fcrelu)
    c = copy.deepcopy(m)
    assert c.kernel is fcrelu and c.w is not m.w and copy.copy(fcrelu) is fcrelu
    with torch.no_grad():
        c.w.mul_(2)  # the copy trains apart from the original
    x = _randn(3, 8, seed=32)
    c(x).sum().backward()
    assert m.w.grad is None and c.w.grad is not None
    torch.testing.assert_close(c(x), torch.relu(x @ (2 * m.w).T + m.b))


def test_pickled_kernels_are_redefined_from_their_source(tmp_path):
    """Kernels pickle as what defines them (source, entry, backward, options); every kind of
    backward comes back, torch.save(model) round-trips, and so do a retyped variant and a source
    of several entries. Unpickling warns nothing (the definition warned when it was made)."""
    import pickle
    import warnings

    mm = tcjit.define("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }")
    mm_grad = tcjit.define(
        """def mm_grad(float(M,K) A, float(K,N) B, float(M,N) dC) -> (dA, dB) {
            dA(m, k) +=! dC(m, r_n) * B(k, r_n)
            dB(k, n) +=! dC(r_m, n) * A(r_m, k)
        }"""
    )
    linear = tcjit.define(LINEAR, name="linear", backward="linear_grad", options=tcjit.MappingOptions("mlp"))
    kernels = {
        "auto": tcjit.define(FCRELU),
        "entry": linear,
        "make_autograd": tcjit.make_autograd(mm, mm_grad),
        "variant": tcjit.define(FCRELU).variant_for(*(_randn(1, dtype=torch.float64),) * 3),
    }
    with pytest.warns(tcjit.TCWarning):  # '+=' without '!': warned at definition
        warns = tcjit.define("def acc(float(N,K) X) -> (S) { S(n) += X(n, r_k) }")
    for name, k in kernels.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            u = pickle.loads(pickle.dumps(k))
        assert u is not k and u.signature == k.signature and u.options == k.options, name
        assert u.retyping == k.retyping and type(u.backward) is type(k.backward), name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pickle.loads(pickle.dumps(warns)).signature == warns.signature

    a, b = _randn(3, 8, requires_grad=True, seed=33), _randn(8, 4, requires_grad=True, seed=34)
    u = pickle.loads(pickle.dumps(kernels["make_autograd"]))
    torch.autograd.grad(u(a, b).sum(), (a, b))  # the user-given backward runs
    assert u.backward.name == "mm_grad"

    m = _Layer(kernels["entry"])
    torch.save(m, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    x = _randn(3, 8, requires_grad=True, seed=35)
    got = torch.autograd.grad(loaded(x).sum(), (x, loaded.w, loaded.b))
    want = torch.autograd.grad((x @ m.w.T + m.b).sum(), (x, m.w, m.b))
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)

    defs = tcjit.define(FCRELU + "def twice(float(N) X) -> (Y) { Y(n) = 2 * X(n) }")
    assert pickle.loads(pickle.dumps(defs)).names == defs.names
    torch.testing.assert_close(pickle.loads(pickle.dumps(defs)).twice(torch.ones(3)), torch.full((3,), 2.0))


def test_compiled_specialisations_copy_as_themselves_and_refuse_pickling():
    import copy
    import pickle

    spec = tcjit.compile(tcjit.define(FCRELU), _randn(3, 8), _randn(4, 8), _randn(4))
    assert copy.deepcopy(spec) is spec
    with pytest.raises(TCCallError, match="cannot be pickled"):
        pickle.dumps(spec)
