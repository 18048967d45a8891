"""Keyword arguments named after a kernel's parameters (tcjit.arguments): bound as Python binds a
function's, in calls, tcjit.compile, autotune and differentiable calls; the call's own keywords
(outputs, options, target) come first."""

from __future__ import annotations

import pytest
import torch

import tcjit
from tcjit import TCCallError

FCRELU = """
def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}
"""
SIGNATURE = "fcrelu(float32(B, M) I, float32(N, M) W, float32(N) bias) -> (float32(B, N) O)"

# a kernel whose parameters are named like the call's own keywords
CLASH = """
def clash(float(N) options, float(N) X, float target) -> (Y) {
    Y(i) = options(i) * X(i) + target
}
"""


@pytest.fixture(scope="module")
def fcrelu():
    return tcjit.define(FCRELU)


@pytest.fixture(scope="module")
def args():
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 6, generator=g), torch.randn(5, 6, generator=g), torch.randn(5, generator=g)


def test_keywords_bind_like_a_python_function(fcrelu, args):
    x, w, b = args
    want = fcrelu(x, w, b)
    for got in (
        fcrelu(I=x, W=w, bias=b),
        fcrelu(bias=b, I=x, W=w),
        fcrelu(x, bias=b, W=w),
        fcrelu(x, w, bias=b),
    ):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    out = torch.empty(4, 5)
    assert fcrelu(x, W=w, bias=b, outputs=out) is out
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    assert fcrelu.output_shapes(I=x, W=w, bias=b) == ((4, 5),)
    assert fcrelu.options_for(x, bias=b, W=w, target="cpu") == fcrelu.options_for(x, w, b, target="cpu")


@pytest.mark.parametrize(
    ("positional", "named", "message"),
    [
        (
            1,
            {"I": 0, "W": 1, "bias": 2},
            "fcrelu() got multiple values for argument 'I' (by position and by keyword)",
        ),
        (1, {"bias": 2}, "fcrelu() missing 1 required argument: 'W'"),
        (0, {"I": 0}, "fcrelu() missing 2 required arguments: 'W', 'bias'"),
        (1, {"W": 1, "bias": 2, "weight": 1}, "fcrelu() got an unexpected keyword argument 'weight'"),
        (4, {"bias": 2}, "fcrelu() takes 3 inputs but 4 positional ones were given (and 1 by keyword)"),
    ],
)
def test_keyword_mistakes_name_the_parameter_and_show_the_signature(fcrelu, args, positional, named, message):
    x, w, b = args
    values = (x, w, b, b)
    with pytest.raises(TCCallError) as info:
        fcrelu(*values[:positional], **{k: values[v] for k, v in named.items()})
    assert message in str(info.value) and f"the kernel is {SIGNATURE}" in str(info.value)
    with pytest.raises(TCCallError, match="got an unexpected keyword argument 'weight'"):
        tcjit.compile(fcrelu, x, W=w, weight=b)


def test_call_keywords_come_first_and_such_parameters_are_positional(args):
    """A parameter named ``options`` or ``target`` is passed positionally: the keyword is the
    call's, as for any Python function with keyword-only parameters; forgetting it says so."""
    k = tcjit.define(CLASH)
    o, x = args[2], args[2].flip(0)
    want = o * x + 0.5
    torch.testing.assert_close(k(o, x, 0.5), want)
    torch.testing.assert_close(k(o, x, 0.5, target="cpu"), want)
    with pytest.raises(TCCallError) as info:
        k(X=x, options=None, target="cpu")  # the call's options and target; no parameter 'options'
    assert "clash() missing 2 required arguments: 'options', 'target'" in str(info.value)
    assert (
        "'options', 'target' are also keywords of the call itself, which take them: pass the parameters "
        in str(info.value)
    )
    with pytest.raises(TCCallError) as info:
        k(o, x)  # positional only: the count error gives the same hint
    assert "clash takes 3 inputs (options, X, target), got 2" in str(info.value)
    assert "pass the parameters 'options', 'target' positionally" in str(info.value)
    with pytest.raises(TCCallError, match=r"options must be tcjit\.MappingOptions, got Tensor"):
        k(o, x, 0.5, options=o)  # the keyword is the call's, whatever it holds


def test_compile_takes_keywords(fcrelu, args):
    x, w, b = args
    meta = [t.to("meta") for t in args]
    spec = tcjit.compile(fcrelu, meta[0], bias=meta[2], W=meta[1])
    torch.testing.assert_close(spec(x, w, b), fcrelu(x, w, b), rtol=0, atol=0)


def test_differentiable_calls_take_keywords(fcrelu, args):
    x, w, b = (t.clone().requires_grad_() for t in args)
    fcrelu(x, w, b).sum().backward()
    want = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    fcrelu(bias=b, W=w, I=x).sum().backward()
    for t, g in zip((x, w, b), want):
        torch.testing.assert_close(t.grad, g)


def test_autotune_binds_keywords_after_its_settings(fcrelu, args):
    """Keywords naming the tuner's settings stay settings; the others bind the kernel's inputs;
    a keyword that is neither is refused before anything runs."""
    from tcjit.tuning import bind_tuning_arguments

    x, w, b = args
    inputs, settings = bind_tuning_arguments(fcrelu, (x,), {"bias": b, "workers": 1, "W": w})
    assert inputs == (x, w, b) and settings == {"workers": 1}
    with pytest.raises(TCCallError, match=r"autotune: 'wieght' is neither a tuner setting \(generations, "):
        tcjit.autotune(fcrelu, x, wieght=w, bias=b)
    with pytest.raises(TCCallError, match="fcrelu\\(\\) missing 1 required argument: 'W'"):
        tcjit.autotune(fcrelu, x, bias=b, generations=1)


@pytest.mark.full
def test_keywords_under_torch_compile(fcrelu, args):
    """Dynamo traces the binding of a valid call (nothing in it breaks the graph)."""
    x, w, b = args
    f = torch.compile(lambda x, w, b: fcrelu(x, bias=b, W=w) * 2, fullgraph=True)
    torch.testing.assert_close(f(x, w, b), fcrelu(x, w, b) * 2)
