"""The public API: define, kernels, namespaces, call-time checks with positions in the TC source."""

from __future__ import annotations

import pickle

import pytest
import torch
from compiled_helpers import raises_at as _raises_at

import tcjit
from tcjit import TCCallError, TCError, TCNameError, TCRangeError, TCSemanticError

MATMUL = """
def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, r_k) * B(r_k, n)
}
"""

TWO = """
def scale(float(N) X, float alpha) -> (Y) {
    Y(i) = alpha * X(i)
}
def fixed(float(N, 4) X) -> (S) {
    S(i) +=! X(i, r_j)
}
"""


def test_define_one_entry_returns_a_kernel():
    k = tcjit.define(MATMUL)
    assert isinstance(k, tcjit.Kernel)
    assert k.name == "matmul" and k.inputs == ("A", "B") and k.outputs == ("C",)
    assert k.sizes == ("M", "K", "N")
    assert k.signature == "matmul(float32(M, K) A, float32(K, N) B) -> (float32(M, N) C)"
    assert k.symbolic_output_shapes == {"C": ("M", "N")}
    a, b = torch.randn(3, 5), torch.randn(5, 2)
    torch.testing.assert_close(k(a, b), a @ b)


def test_define_several_entries_returns_a_namespace():
    T = tcjit.define(TWO)
    assert isinstance(T, tcjit.Definitions) and T.names == ("scale", "fixed")
    torch.testing.assert_close(T.scale(torch.ones(3), 2.5), torch.full((3,), 2.5))
    assert [k.name for k in T] == ["scale", "fixed"] and T["fixed"] is T.fixed
    with pytest.raises(AttributeError, match="defined: scale, fixed"):
        T.nope  # noqa: B018
    assert tcjit.define(TWO, "fixed").name == "fixed"


def test_unknown_entry_and_empty_source():
    with pytest.raises(TCNameError, match=r"unknown entry point 'nope'.*scale, fixed"):
        tcjit.define(TWO, "nope")
    with pytest.raises(TCNameError, match="defines no entry point"):
        tcjit.define("# nothing here\n")


def test_backward_entry_is_validated_at_define_time():
    src = (
        MATMUL
        + """
def matmul_grad(float(M,K) A, float(K,N) B, float(M,N) d_C) -> (d_A, d_B) {
    d_A(m, k) +=! d_C(m, r_n) * B(k, r_n)
    d_B(k, n) +=! d_C(r_m, n) * A(r_m, k)
}
def wrong(float(M,K) A) -> (d_A) {
    d_A(m, k) = A(m, k)
}
"""
    )
    k = tcjit.define(src, "matmul", backward="matmul_grad")
    assert "def matmul_grad" in k.canonical_source
    with pytest.raises(TCNameError, match="backward entry 'missing'"):
        tcjit.define(src, "matmul", backward="missing")
    with pytest.raises(TCSemanticError, match="must take the 2 inputs") as e:
        tcjit.define(src, "matmul", backward="wrong")
    assert e.value.line == 10
    with pytest.raises(TCCallError, match="pass name="):
        tcjit.define(src, backward="matmul_grad")


def test_call_checks_point_into_the_source():
    k = tcjit.define(MATMUL)
    a = torch.randn(3, 5)
    _raises_at(TCCallError, 2, 5, ["takes 2 inputs", "got 1"], k, a)
    _raises_at(
        TCCallError,
        2,
        26,
        ["input 'B'", "torch.float32", "torch.int64"],
        k,
        a,
        torch.ones(5, 2, dtype=torch.int64),
    )
    # [ext] other float dtypes retype the kernel, one dtype per declared type
    # (tests/backends/test_call_dtypes.py)
    _raises_at(
        TCCallError,
        2,
        26,
        ["'A' and 'B'", "torch.float32", "torch.float64"],
        k,
        a,
        torch.randn(5, 2).double(),
    )
    _raises_at(TCCallError, 2, 26, ["input 'B'", "2 dimensions", "got 1"], k, a, torch.randn(5))
    _raises_at(
        TCCallError, 2, 32, ["sizes contradict", "K is 5", "dimension 1 of 'A'", "4"], k, a, torch.randn(4, 2)
    )
    _raises_at(TCCallError, 2, 26, ["must be a torch.Tensor", "list"], k, a, [[1.0]])
    T = tcjit.define(TWO)
    _raises_at(TCCallError, 5, 20, ["dimension 1 of input 'X' must be 4", "got 3"], T.fixed, torch.ones(2, 3))
    _raises_at(TCCallError, 2, 23, ["argument 'alpha'", "str"], T.scale, torch.ones(2), "x")
    _raises_at(TCCallError, 2, 23, ["scalar", "shape (2,)"], T.scale, torch.ones(2), torch.ones(2))


def test_empty_ranges_at_call_time_show_the_condition():
    conv = tcjit.define("""
def conv(float(N) I, float(K) W) -> (O) {
    O(i) +=! I(i + r_k) * W(r_k)
}""")
    torch.testing.assert_close(conv(torch.ones(5), torch.ones(3)), torch.full((3,), 3.0))
    err = _raises_at(
        TCRangeError, 3, 5, ["empty range", "N - K + 1", "N=2", "K=3"], conv, torch.ones(2), torch.ones(3)
    )
    assert "N - K + 1 > 0" in str(err)


def test_empty_inputs_give_empty_outputs():
    k = tcjit.define(MATMUL)
    assert k(torch.ones(0, 4), torch.ones(4, 3)).shape == (0, 3)
    torch.testing.assert_close(k(torch.ones(2, 0), torch.ones(0, 3)), torch.zeros(2, 3))


def test_output_shapes_on_meta_tensors():
    k = tcjit.define(MATMUL)
    shapes = k.output_shapes(torch.empty(7, 3, device="meta"), torch.empty(3, 11, device="meta"))
    assert shapes == ((7, 11),)


def test_outputs_argument():
    with pytest.warns(tcjit.TCWarning, match="no earlier statement initialises"):
        acc = tcjit.define("def acc(float(N, K) A) -> (S) { S(i) += A(i, r_k) }", backward=None)
    a = torch.ones(3, 4)
    out = torch.full((3,), 10.0)
    res = acc(a, outputs=(out,))
    assert res is out
    torch.testing.assert_close(out, torch.full((3,), 14.0))
    k = tcjit.define(MATMUL)
    _raises_at(
        TCCallError,
        2,
        44,
        ["output 'C'", "shape (3, 2)", "(2, 3)"],
        k,
        torch.ones(3, 5),
        torch.ones(5, 2),
        outputs=(torch.empty(2, 3),),
    )
    _raises_at(
        TCCallError,
        2,
        44,
        ["output 'C'", "dtype torch.float32"],
        k,
        torch.ones(3, 5),
        torch.ones(5, 2),
        outputs=(torch.empty(3, 2, dtype=torch.float64),),
    )


def test_bad_targets_options_and_gradients():
    k = tcjit.define(MATMUL)
    a, b = torch.ones(2, 2), torch.ones(2, 2)
    with pytest.raises(TCCallError, match="unknown target 'gpu'"):
        k(a, b, target="gpu")
    forward_only = tcjit.define(MATMUL, backward=None)
    with pytest.raises(TCCallError, match=r"requires grad.*backward=None"):
        forward_only(a.requires_grad_(), b)
    with torch.no_grad():
        forward_only(a, b)


def test_errors_are_one_hierarchy_and_pickle():
    for cls in (tcjit.TCSyntaxError, tcjit.TCTypeError, tcjit.TCCallError, tcjit.TCBoundsError):
        assert issubclass(cls, TCError)
    try:
        tcjit.define("def f(float(N) A) -> (B) {\n  B(i) = A(i) +\n}")
    except TCError as e:
        again = pickle.loads(pickle.dumps(e))
        assert type(again) is type(e) and str(again) == str(e) and again.line == e.line


def test_gather_out_of_bounds_is_a_bounds_error():
    lut = tcjit.define("def lut(float(V, D) T, int64(B) I) -> (O) { O(b, d) = T(I(b), d) }")
    t = torch.randn(4, 3)
    torch.testing.assert_close(lut(t, torch.tensor([3, 0])), t[[3, 0]])
    err = _raises_at(tcjit.TCBoundsError, 1, 55, ["'T'", "element 4", "[0, 4)"], lut, t, torch.tensor([1, 4]))
    assert err.where == "lut"
