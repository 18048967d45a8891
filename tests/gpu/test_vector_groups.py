"""Vector groups (``vector_width``, mapping/gpu_vectors.py): a thread's consecutive elements as
one wide access.

The emulated target prints the same groups as the CUDA printer (element by element, race-checked),
so every group below runs on the CPU in every thread order against the oracle; the CUDA source is
compiled to PTX, whose loads and stores must be the wide ones.
"""

from __future__ import annotations

import re

import compiled_helpers as H
import pytest
import torch

import tcjit
from tcjit import nvrtc
from tcjit.mapping import ir
from tcjit.mapping.gpu_vectors import linear
from tcjit.mapping.layout import contiguous_strides
from tcjit.mapping.lower_gpu import lower_cuda
from tcjit.mapping.options import MappingOptions
from tcjit.polyhedral.lang.check import check_source
from tcjit.testing import emulation_order

GROUP = "per access (vector_width)"

#: (source, sizes, dtype): pointwise kernels whose innermost extent the widths divide
PROGRAMS = {
    "add": ("def add(float(N,D) A, float(N,D) B) -> (C) { C(n, d) = A(n, d) + B(n, d) }", {"N": 6, "D": 64}),
    "bias_relu": (
        "def bias_relu(float(N,D) X, float(D) bias) -> (Y) { Y(n, d) = fmax(X(n, d) + bias(d), 0) }",
        {"N": 5, "D": 32},
    ),
    "scale_in_place": (
        """def scale_in_place(float(N,D) X) -> (Y) {
    Y(n, d) = X(n, d)
    Y(n, d) = Y(n, d) * 3 + 1
}""",
        {"N": 3, "D": 16},
    ),
    "window_max": (
        "def window_max(float(N,D,K) X) -> (M) { M(n, d) max=! X(n, d, r_k) }",
        {"N": 4, "D": 16, "K": 3},
    ),
    "half": (
        "def half(float16(N,D) A, float16(N,D) B) -> (C) { C(n, d) = A(n, d) * B(n, d) }",
        {"N": 3, "D": 64},
    ),
}


def _options(width: int) -> MappingOptions:
    return MappingOptions("naive").tile(2, 64).map_to_blocks(4, 4).map_to_threads(8, 2).vector_width(width)


def _inputs(name: str, seed: int = 0) -> tuple[torch.Tensor, ...]:
    src, sizes = PROGRAMS[name]
    cdef = check_source(src).entry()
    g = torch.Generator().manual_seed(seed)
    out = []
    for t in cdef.tensor_infos:
        if t.name in cdef.params:
            shape = tuple(int(s.evaluate(sizes)) for s in t.shape)
            dtype = torch.float16 if t.dtype.name == "float16" else torch.float32
            out.append(torch.randn(shape, generator=g).to(dtype))
    return tuple(out)


@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_groups_match_the_oracle_in_every_order(name: str, width: int) -> None:
    src, _ = PROGRAMS[name]
    k = tcjit.define(src)
    inputs = _inputs(name)
    spec = tcjit.compile(k, *inputs, options=_options(width), target="cuda-emulated")
    assert GROUP in spec.source, f"{name}: no group printed"
    want = H.as_tuple(H.ORACLE(src, None, *inputs))
    first = None
    for order in ("forward", "reversed", "shuffled"):
        with emulation_order(order):
            got = H.as_tuple(k(*inputs, options=_options(width), target="cuda-emulated"))
        for g, w in zip(got, want):
            torch.testing.assert_close(g.float(), w.float(), rtol=1e-3, atol=1e-3)
        if first is None:
            first = got
        else:
            assert all(torch.equal(a, b) for a, b in zip(first, got)), f"{order} order differs (a race?)"


def test_a_view_that_starts_mid_vector_takes_the_element_path() -> None:
    """``A`` starting one element into its storage is not 16-byte aligned: the group's test sends
    the kernel down the loop as it is, with the same results."""
    src, _ = PROGRAMS["add"]
    k = tcjit.define(src)
    a = torch.randn(6 * 64 + 1)[1:].view(6, 64)
    b = torch.randn(6, 64)
    assert a.data_ptr() % 16 != 0
    got = k(a, b, options=_options(4), target="cuda-emulated")
    torch.testing.assert_close(got, a + b)


def test_a_group_needs_consecutive_aligned_elements() -> None:
    """No group where the grouped index runs with a stride (``A(n, 2 * d)``) or where the
    innermost extent leaves a partial group (``D = 30`` with 4 elements a thread: the loop's
    bound is no constant)."""
    k = tcjit.define(PROGRAMS["add"][0])
    spec = tcjit.compile(
        k, torch.randn(4, 30), torch.randn(4, 30), options=_options(4), target="cuda-emulated"
    )
    assert GROUP not in spec.source
    k2 = tcjit.define("def s(float(N,E) A, float(N,D) B) -> (C) { C(n, d) = A(n, 2 * d) + B(n, d) }")
    a, b = torch.randn(4, 64), torch.randn(4, 32)
    spec = tcjit.compile(k2, a, b, options=_options(4), target="cuda-emulated")
    assert GROUP in spec.source  # B and C are grouped, A is read element by element
    assert "tc_vr1" not in spec.source
    torch.testing.assert_close(spec(a, b), a[:, ::2] + b)


def test_linear_forms() -> None:
    v, t = ir.Var("c4"), ir.Var("t0")
    assert linear(ir.Op("+", (ir.Op("*", (ir.Int(4), t)), v))) == {"t0": 4, "c4": 1}
    assert linear(ir.Op("-", (v, ir.Op("neg", (t,))))) == {"c4": 1, "t0": 1}
    assert linear(ir.Op("*", (t, v))) is None  # not affine
    assert linear(ir.Op("floordiv", (t, ir.Int(2)))) is None


@pytest.mark.skipif(not nvrtc.available(), reason="no CUDA compiler")
@pytest.mark.parametrize(
    "name, dtype, width, wide",
    [("add", "f32", 4, "v4.u32"), ("add", "f32", 2, "v2.u32"), ("half", "u16", 4, "v2.u32")],
)
def test_the_ptx_loads_and_stores_whole_groups(name: str, dtype: str, width: int, wide: str) -> None:
    """In the CUDA source a group is read and written through CUDA's built-in vector type of its
    size and the load and store intrinsics: one access each (``ld.global.nc.v4.u32`` and
    ``st.global.wb.v4.u32`` for 4 float32)."""
    src, sizes = PROGRAMS[name]
    cdef = check_source(src).entry()
    strides = {
        t.name: contiguous_strides(tuple(int(s.evaluate(sizes)) for s in t.shape)) for t in cdef.tensor_infos
    }
    ks = lower_cuda(cdef, sizes, strides, _options(width).validate("cuda").values)
    ptx = nvrtc.compile_ptx(ks.source, name=name)
    loads = re.findall(r"ld\.global(?:\.nc|\.ca)?\.(v\d\.\w+)", ptx)
    stores = re.findall(r"st\.global(?:\.wb)?\.(v\d\.\w+)", ptx)
    assert wide in loads and wide in stores, (loads, stores)
