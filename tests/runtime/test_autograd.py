"""Gradients through tcjit kernels with a user-supplied backward (tcjit/autograd.py).

``torch.autograd.gradcheck`` in float64 on the CPU and emulated CUDA targets, for a backward
entry named at ``define`` and for ``make_autograd``; inputs that need no gradient get none; an
output the loss does not read gets zeros in a user backward, and a call none of whose outputs
receives a gradient runs no backward; the errors of kernels without a usable backward; double
backward refused; ``no_grad`` keeps the plain path.
"""

from __future__ import annotations

import pytest
import torch

import tcjit
from tcjit import TCCallError

MM = """
def mm(double(M,K) A, double(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }
def mm_grad(double(M,K) A, double(K,N) B, double(M,N) dC) -> (dA, dB) {
    dA(m, k) +=! dC(m, r_n) * B(k, r_n)
    dB(k, n) +=! dC(r_m, n) * A(r_m, k)
}
"""

#: Two outputs, a scalar argument and a temporary: the backward gets one gradient per output.
SCALED = """
def scaled(double(N) X, double s) -> (Y, Z) {
    Y(i) = s * X(i) * X(i)
    Z(i) = X(i) + 1
}
def scaled_grad(double(N) X, double s, double(N) dY, double(N) dZ) -> (dX, ds) {
    dX(i) = 2 * s * X(i) * dY(i) + dZ(i)
    ds +=! X(r_i) * X(r_i) * dY(r_i)
}
"""

TARGETS = ["cpu", "cuda-emulated"]


def _inputs(*shapes, requires_grad=True):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, dtype=torch.float64, generator=g).requires_grad_(requires_grad) for s in shapes]


@pytest.mark.parametrize("target", TARGETS)
def test_a_named_backward_entry_passes_gradcheck(target: str) -> None:
    mm = tcjit.define(MM, "mm", backward="mm_grad")
    a, b = _inputs((3, 4), (4, 5))
    assert torch.autograd.gradcheck(lambda a, b: mm(a, b, target=target), (a, b))
    c = mm(a, b, target=target)
    assert c.requires_grad and c.grad_fn is not None
    torch.testing.assert_close(c, a @ b)


@pytest.mark.parametrize("target", TARGETS)
def test_make_autograd_passes_gradcheck(target: str) -> None:
    defs = tcjit.define(MM, backward=None)
    mm = tcjit.make_autograd(defs.mm, defs.mm_grad)
    a, b = _inputs((2, 3), (3, 4))
    assert torch.autograd.gradcheck(lambda a, b: mm(a, b, target=target), (a, b))


def test_several_outputs_and_a_scalar_argument() -> None:
    k = tcjit.define(SCALED, "scaled", backward="scaled_grad")
    (x,) = _inputs((6,))
    s = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, s: k(x, s), (x, s))
    # only Y used: Z's gradient is zeros, and x's gradient is 2 s x
    y, _ = k(x, s)
    (gx,) = torch.autograd.grad(y.sum(), (x,))
    torch.testing.assert_close(gx, 2 * 1.5 * x.detach())


def test_a_user_backward_receives_zeros_for_an_output_the_loss_does_not_read(monkeypatch) -> None:
    """Only a derived backward is asked for without the gradients that arrive as None; a backward
    written by hand takes one gradient per output, as in Tensor Comprehensions."""
    k = tcjit.define(SCALED, "scaled", backward="scaled_grad")
    received = []
    call = tcjit.Kernel.__call__

    def spy(self, *args, **kwargs):
        if self.name == "scaled_grad":
            received.append(args)
        return call(self, *args, **kwargs)

    monkeypatch.setattr(tcjit.Kernel, "__call__", spy)
    (x,) = _inputs((6,))
    _, z = k(x, 2.0)
    (gx,) = torch.autograd.grad((z * z).sum(), (x,))
    torch.testing.assert_close(gx, 2 * (x.detach() + 1))  # dX = 2 s X dY + dZ with dY = 0
    ((_, _, d_y, d_z),) = received
    assert torch.equal(d_y, torch.zeros(6, dtype=torch.float64))
    torch.testing.assert_close(d_z, 2 * (x.detach() + 1))


class _Cut(torch.autograd.Function):
    """The identity, whose backward passes no gradient on (None)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return None


@pytest.mark.parametrize("backward", ["auto", "scaled_grad"])
def test_a_call_whose_outputs_receive_no_gradient_runs_no_backward(backward: str, monkeypatch) -> None:
    """Every output gradient None: no kernel runs and the inputs get None, as torch's own
    operators give (x * 2 in place of the kernel leaves x.grad None too)."""
    from tcjit.autograd import GradPlan

    k = tcjit.define(SCALED, "scaled", backward=backward)
    ran = []
    monkeypatch.setattr(GradPlan, "grads", lambda *a: ran.append(a))
    (x,) = _inputs((6,))
    w = torch.ones(6, dtype=torch.float64, requires_grad=True)
    y, z = k(x, 1.5)
    (_Cut.apply(y).sum() + _Cut.apply(z).sum() + w.sum()).backward()
    assert ran == [] and x.grad is None
    torch.testing.assert_close(w.grad, torch.ones(6, dtype=torch.float64))
    (_Cut.apply(x * 2).sum() + w.sum()).backward()  # torch's operator in the kernel's place
    assert x.grad is None


@pytest.mark.parametrize("backward", ["auto", "scaled_grad"])
def test_plan_grads_with_every_output_gradient_absent_are_zeros(backward: str) -> None:
    """What the torch.compile backward operator returns then (one tensor per wanted input): zeros
    in the inputs' shapes and dtypes, without asking for a backward kernel."""
    k = tcjit.define(SCALED, "scaled", backward=backward)
    plan = k.grad_plan()

    def refuse(*args):
        raise AssertionError("no backward kernel is needed")

    plan = type(plan)(plan.kernel, plan.forward, plan.n_saved, refuse, plan.derived)
    x = torch.randn(6, dtype=torch.float64)
    s = torch.tensor(1.5, dtype=torch.float64)
    gx, gs = plan.grads([x, s], [], [None, None], (True, True))
    assert torch.equal(gx, torch.zeros(6, dtype=torch.float64)) and gx.dtype == torch.float64
    assert torch.equal(gs, torch.zeros((), dtype=torch.float64))
    assert plan.grads([x, 1.5], [], [None, None], (True, True))[1] is None  # a number has none


def test_inputs_that_need_no_gradient_get_none() -> None:
    mm = tcjit.define(MM, "mm", backward="mm_grad")
    a, b = _inputs((3, 4), (4, 5))
    b.requires_grad_(False)
    mm(a, b).sum().backward()
    assert b.grad is None
    torch.testing.assert_close(a.grad, torch.ones(3, 5, dtype=torch.float64) @ b.T)


def test_no_grad_calls_stay_plain() -> None:
    mm = tcjit.define(MM, "mm", backward="mm_grad")
    a, b = _inputs((3, 4), (4, 5))
    with torch.no_grad():
        c = mm(a, b)
    assert not c.requires_grad and c.grad_fn is None
    with torch.inference_mode():
        assert not mm(a, b).requires_grad


def test_kernels_without_a_usable_backward_say_so() -> None:
    a, b = _inputs((3, 4), (4, 5))
    with pytest.raises(TCCallError, match="backward=None"):
        tcjit.define(MM, "mm", backward=None)(a, b)
    with pytest.raises(TCCallError, match="outputs= cannot be used"):
        tcjit.define(MM, "mm", backward="mm_grad")(a, b, outputs=torch.empty(3, 5, dtype=torch.float64))
    defs = tcjit.define(MM, backward=None)
    with pytest.raises(TCCallError, match="must take the 2 inputs of 'mm'"):
        tcjit.make_autograd(defs.mm, defs.mm)
    with pytest.raises(TCCallError, match="must be a tcjit Kernel"):
        tcjit.make_autograd(defs.mm, lambda *x: x)


def test_a_backward_returning_the_wrong_shape_is_reported() -> None:
    src = MM.replace("dA(m, k) +=! dC(m, r_n) * B(k, r_n)", "dA(k, m) +=! dC(m, r_n) * B(k, r_n)")
    mm = tcjit.define(src, "mm", backward="mm_grad")
    a, b = _inputs((3, 4), (4, 5))
    with pytest.raises(TCCallError, match=r"mm_grad: gradient 0 has shape \(4, 3\).*'A'.*\(3, 4\)"):
        mm(a, b).sum().backward()


def test_double_backward_is_refused() -> None:
    mm = tcjit.define(MM, "mm", backward="mm_grad")
    a, b = _inputs((2, 2), (2, 2))
    with pytest.raises(TCCallError, match="double backward"):
        torch.autograd.grad(mm(a, b).sum(), (a,), create_graph=True)


def test_the_backward_is_part_of_the_cache_key() -> None:
    defs = tcjit.define(MM, backward=None)
    plain = tcjit.define(MM, "mm", backward=None)
    tuned = tcjit.make_autograd(defs.mm, defs.mm_grad)
    assert "mm_grad" in tuned.canonical_source and "mm_grad" not in plain.canonical_source


#: KERNELS.md kernels with backward entries written by hand (as a TC user would), including a
#: convolution whose output gradient is declared with size expressions [ext].
USER_BACKWARDS = {
    "conv2d": (
        """
def conv2d(double(N,C,H,W) I, double(F,C,KH,KW) W1) -> (O) {
    O(n, f, h, w) +=! I(n, r_c, h + r_kh, w + r_kw) * W1(f, r_c, r_kh, r_kw)
}
def conv2d_grad(double(N,C,H,W) I, double(F,C,KH,KW) W1, double(N,F,H-KH+1,W-KW+1) d_O)
    -> (double(N,C,H,W) d_I, double(F,C,KH,KW) d_W1) {
    d_I(n, c, y, x) +=! d_O(n, f, y - kh, x - kw) * W1(f, c, kh, kw)
        where y in 0:H, x in 0:W, kh in 0:KH, kw in 0:KW,
              y - kh >= 0, y - kh < H - KH + 1, x - kw >= 0, x - kw < W - KW + 1
    d_W1(f, c, kh, kw) +=! d_O(n, f, h, w) * I(n, c, h + kh, w + kw)
}""",
        [(2, 3, 6, 5), (4, 3, 3, 2)],
    ),
    "softmax": (
        """
def softmax(double(N,D) I) -> (O) {
    mx(n) max=! I(n, r_d)
    sm(n) +=! exp(I(n, r_d) - mx(n))
    O(n, d) = exp(I(n, d) - mx(n)) / sm(n)
}
def softmax_grad(double(N,D) I, double(N,D) d_O) -> (d_I) {
    mx(n) max=! I(n, r_d)
    sm(n) +=! exp(I(n, r_d) - mx(n))
    O(n, d) = exp(I(n, d) - mx(n)) / sm(n)
    dot(n) +=! d_O(n, r_d) * O(n, r_d)
    d_I(n, d) = O(n, d) * (d_O(n, d) - dot(n))
}""",
        [(3, 7)],
    ),
    "fcrelu": (
        """
def fcrelu(double(B,M) I, double(N,M) W, double(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}
def fcrelu_grad(double(B,M) I, double(N,M) W, double(N) bias, double(B,N) d_O) -> (d_I, d_W, d_bias) {
    P(b, n) +=! I(b, r_m) * W(n, r_m)
    G(b, n) = P(b, n) + bias(n) > 0.0 ? d_O(b, n) : 0.0
    d_I(b, m) +=! G(b, r_n) * W(r_n, m)
    d_W(n, m) +=! G(r_b, n) * I(r_b, m)
    d_bias(n) +=! G(r_b, n)
}""",
        [(4, 5), (3, 5), (3,)],
    ),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(USER_BACKWARDS))
def test_user_backwards_of_suite_kernels_pass_gradcheck(name: str, target: str) -> None:
    source, shapes = USER_BACKWARDS[name]
    k = tcjit.define(source, name, backward=f"{name}_grad")
    inputs = _inputs(*shapes)
    assert torch.autograd.gradcheck(lambda *a: k(*a, target=target), inputs)
