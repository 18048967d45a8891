"""The GPU mapping lowered with symbolic sizes (mapping/symbolic.py, mapping/lower_gpu.py): one
kernel, run at many values of its symbolic sizes, must compute what torch computes at each.

The emulated target is the oracle: it runs the CUDA mapping on the CPU with its grids computed
from the call's sizes, checks every access against its tensor and every pair of accesses for a
race, in three block and thread orders. The CUDA source of the same mapping must compile to PTX,
and its launch table must carry the grids' expressions through JSON. Kernels are run through
ctypes directly, so that the lowering is tested apart from the runtime's policy (the dispatch:
tests/runtime/test_dynamic_shapes.py).
"""

from __future__ import annotations

import ctypes
import re

import compiled_helpers as H
import pytest
import torch

from tcjit import nvrtc
from tcjit.cpu_runtime import compile_c, load
from tcjit.mapping import ir
from tcjit.mapping.cuda_printer import CudaKernelSource, CudaLaunch
from tcjit.mapping.emulation import ORDERS
from tcjit.mapping.layout import contiguous_layout
from tcjit.mapping.lower_gpu import lower_cuda, lower_emulated, lower_gpu
from tcjit.pipeline import default_options
from tcjit.suite import SUITE

DEFAULT_TIER = ("matmul", "fcrelu", "softmax", "bn_reduce")


def _options(cdef, rep, option):
    chosen = default_options(cdef, rep, "cuda") if option == "default" else H.CUDA_OPTIONS[option]
    return chosen.validate("cuda").values


def _emulate(cdef, rep, symbolic, option="default"):
    low = lower_emulated(
        cdef, rep, contiguous_layout(cdef, rep), _options(cdef, rep, option), symbolic=symbolic
    )
    assert low.sizes == tuple(sorted(symbolic))
    fn = getattr(load(compile_c(low.source, name=cdef.name), name=cdef.name), low.symbol)
    return low, fn


def _run(cdef, low, fn, inputs, sizes, order: int):
    """The emulated kernel's outputs on ``inputs`` at ``sizes`` in block and thread ``order``."""
    shape = lambda name: tuple(d.evaluate(sizes) for d in cdef.tensor(name).shape)  # noqa: E731
    outs = [torch.zeros(shape(o), dtype=inputs[0].dtype) for o in cdef.outputs]
    kept, args = [], []
    for q in low.params:
        if q.name == "tc_order":
            args.append(ctypes.c_int64(order))
            continue
        if q.name in cdef.params:
            t = inputs[cdef.params.index(q.name)]
        elif q.name in cdef.outputs:
            t = outs[cdef.outputs.index(q.name)]
        else:
            t = torch.zeros(shape(q.name))
            kept.append(t)
        args.append(ctypes.c_void_p(t.data_ptr()))
    args += [ctypes.c_int64(sizes[name]) for name in low.sizes]
    errors = (ctypes.c_int64 * 3)()
    fn(1, errors, *args)
    return outs, list(errors)


def _sweep(name, symbolic_of, option="default", rep_index=0):
    """The kernel lowered for the emulated target at small size ``rep_index``, run at 1, 2, 7 and
    around the representative (the leading size symbolic) or at every small size (every size
    symbolic), in every order; the results equal torch's and do not depend on the order."""
    k = SUITE[name]
    cdef = k.checked
    rep = dict(k.small_sizes[min(rep_index, len(k.small_sizes) - 1)])
    lead = cdef.sizes[0]
    symbolic = frozenset(symbolic_of(cdef))
    if symbolic == {lead}:
        points = [{**rep, lead: v} for v in sorted({1, 2, 7, rep[lead], rep[lead] + 5})]
    else:
        points = [dict(s) for s in k.small_sizes]
    low, fn = _emulate(cdef, rep, symbolic, option)
    for sizes in points:
        inputs = k.make_inputs(sizes, seed=1)
        first = None
        for order in range(len(ORDERS)):
            outs, errors = _run(cdef, low, fn, inputs, sizes, order)
            assert errors[0] == 0, (name, sizes, ORDERS[order], errors)
            if first is None:
                first = outs
                tol = 1e-3 * max(1.0, k.reduction_length(sizes) ** 0.5 / 16)
                for got, want in zip(outs, k.torch_ref(*inputs)):
                    torch.testing.assert_close(
                        got, want, rtol=tol, atol=tol, msg=lambda m, at=sizes: f"{name} at {at}: {m}"
                    )
            else:
                for o, a, b in zip(cdef.outputs, first, outs):
                    assert torch.equal(a, b), f"{name}.{o} at {sizes}: {ORDERS[order]} differs (a race?)"


@pytest.mark.parametrize("name", DEFAULT_TIER)
def test_an_emulated_kernel_with_a_symbolic_leading_size_computes_every_value(name) -> None:
    """The batch size symbolic, mapped at the second small size: 1, 2, 7 and around it."""
    _sweep(name, lambda cdef: {cdef.sizes[0]}, rep_index=1)


@pytest.mark.parametrize("option", ("small", "shared", "vector"))
def test_symbolic_sizes_with_blocks_shared_memory_and_vectors(option) -> None:
    """Grid-stride loops over small grids, promotion (of the tensors of fixed shape only) and
    vector groups, with the batch size symbolic."""
    _sweep("matmul", lambda cdef: {cdef.sizes[0]}, option, rep_index=1)
    _sweep("fcrelu", lambda cdef: {cdef.sizes[0]}, option, rep_index=1)


@pytest.mark.full
@pytest.mark.parametrize("rep_index", (0, 1))
@pytest.mark.parametrize("option", ("default", "small", "3d", "shared", "private", "vector", "unrolled"))
@pytest.mark.parametrize("which", ("lead", "all"))
@pytest.mark.parametrize("name", sorted(SUITE))
def test_every_suite_kernel_is_right_emulated_with_symbolic_sizes(name, which, option, rep_index) -> None:
    _sweep(
        name,
        (lambda cdef: {cdef.sizes[0]}) if which == "lead" else (lambda cdef: cdef.sizes),
        option,
        rep_index=rep_index,
    )


@pytest.mark.parametrize(
    "name", [n if n in DEFAULT_TIER else pytest.param(n, marks=pytest.mark.full) for n in sorted(SUITE)]
)
def test_the_tiles_along_blockidx_x_need_no_grid_stride_loop(name) -> None:
    """A symbolic size is at most 2**31 - 1 (MAX_SYMBOLIC_SIZE), the blocks a grid has along x:
    with the default options a member mapped to blockIdx.x is walked one tile per block, as in a
    concrete kernel, at every admissible value (a grid-stride loop there cost tensordot 32% on an
    H200). Along y and z (65535 blocks) a symbolic extent may keep one."""
    k = SUITE[name]
    cdef = k.checked
    small, gpu = dict(k.small_sizes[-1]), dict(k.gpu_sizes[0])
    for rep, symbolic in ((small, {cdef.sizes[0]}), (small, set(cdef.sizes)), (gpu, {cdef.sizes[0]})):
        values = default_options(cdef, rep, "cuda").validate("cuda").values
        layout = contiguous_layout(cdef, rep)
        source = lower_cuda(cdef, rep, layout, values, symbolic=frozenset(symbolic)).source
        loop = re.search(r"for \(int64_t (c\d+) = b0;[^)]*\)", source)
        assert loop is None, f"{name} at {rep}, {sorted(symbolic)} symbolic: {loop.group(0)}"


def test_a_grid_that_depends_on_a_symbolic_size_is_computed_per_call() -> None:
    """matmul with M symbolic: the launch along M carries its block count as an expression,
    whose value is the blocks a concrete kernel would launch at each M; the fixed N's grid stays
    a number, and the thread block serves every value of M."""
    k = SUITE["matmul"]
    cdef = k.checked
    rep = {"M": 40, "K": 16, "N": 24}
    values = H.CUDA_OPTIONS["small"].validate("cuda").values
    low = lower_gpu(cdef, rep, values, symbolic=frozenset({"M"}))
    (plan, _), *_ = low.launches
    assert plan.grid_exprs, "the grid along M should be computed per call"
    for m in (1, 3, 4, 5, 40, 1000):
        concrete = lower_gpu(cdef, {**rep, "M": m}, values).launches[0][0]
        launch = CudaLaunch("k", plan.grid, plan.block, plan.grid_exprs)
        assert launch.grid_at({**rep, "M": m}) == concrete.grid, m
    assert lower_gpu(cdef, rep, values).launches[0][0].grid == plan.grid  # at the representative


def test_only_tensors_of_fixed_shape_are_promoted() -> None:
    """matmul with M symbolic and shared memory: A(M, K) and C(M, N) stay in global memory (their
    footprints depend on M), B(K, N) is copied to shared memory as in a concrete kernel."""
    cdef = SUITE["matmul"].checked
    rep = {"M": 40, "K": 16, "N": 24}
    values = H.CUDA_OPTIONS["shared"].validate("cuda").values
    plan = lower_gpu(cdef, rep, values, symbolic=frozenset({"M"})).plan
    assert {b.tensor for k in plan.kernels for b in k.buffers} == {"B"}
    assert {"A", "C"} <= {b.tensor for k in lower_gpu(cdef, rep, values).plan.kernels for b in k.buffers}
    for name in ("A", "C"):
        assert f"shared: {name} left alone (its shape depends on a symbolic size)" in plan.decisions


def test_grid_expressions_round_trip_through_json() -> None:
    launch = CudaLaunch(
        "tc_k0",
        (2, 3, 1),
        (32, 4, 1),
        (
            ir.Op(
                "min",
                (ir.Int(256), ir.Op("floordiv", (ir.Op("+", (ir.Var("tc_z_B"), ir.Int(31))), ir.Int(32)))),
            ),
            None,
            None,
        ),
    )
    again = CudaLaunch.from_json(launch.to_json())
    assert again == launch
    assert again.grid_at({"B": 1}) == (1, 3, 1)
    assert again.grid_at({"B": 33}) == (2, 3, 1)
    assert again.grid_at({"B": 10**6}) == (256, 3, 1)
    concrete = CudaLaunch("tc_k0", (2, 3, 1), (32, 4, 1))
    assert concrete.to_json() == ["tc_k0", [2, 3, 1], [32, 4, 1]]  # concrete kernels' metadata as before
    assert CudaLaunch.from_json(concrete.to_json()).grid_at({"B": 7}) == (2, 3, 1)


def test_a_symbolic_cuda_source_carries_its_sizes_and_grids() -> None:
    k = SUITE["fcrelu"]
    cdef = k.checked
    rep = dict(k.small_sizes[1])
    values = default_options(cdef, rep, "cuda").validate("cuda").values
    ks = lower_cuda(cdef, rep, contiguous_layout(cdef, rep), values, symbolic=frozenset({"B"}))
    assert ks.sizes == ("B",)
    assert re.search(r"int64_t tc_z_B\)", ks.source)
    assert any(launch.grid_exprs for launch in ks.kernels)
    again = CudaKernelSource.from_json(ks.to_json(), ks.source)
    assert again.kernels == ks.kernels and again.sizes == ks.sizes


@pytest.mark.skipif(not nvrtc.available(), reason="no CUDA compiler (NVRTC or nvcc)")
@pytest.mark.parametrize(
    "name, option", [("matmul", "shared"), ("fcrelu", "default"), ("softmax", "default")]
)
def test_symbolic_cuda_source_compiles_to_ptx(name, option) -> None:
    """Every size symbolic: every shape, stride and extent is C arithmetic of the size arguments."""
    k = SUITE[name]
    cdef = k.checked
    rep = dict(k.small_sizes[-1])
    ks = lower_cuda(
        cdef, rep, contiguous_layout(cdef, rep), _options(cdef, rep, option), symbolic=frozenset(cdef.sizes)
    )
    ptx = nvrtc.compile_ptx(ks.source, name=name)
    assert ptx.count(".entry ") == len(ks.kernels)
    for launch in ks.kernels:  # each entry takes the sizes as its last parameters (64-bit)
        entry = re.search(rf"\.entry {launch.name}\(([^)]*)\)", ptx).group(1)
        assert entry.count(".param .u64") >= len(cdef.sizes) + len(ks.params), entry


@pytest.mark.full
@pytest.mark.skipif(not nvrtc.available(), reason="no CUDA compiler (NVRTC or nvcc)")
@pytest.mark.parametrize("option", ("default", "shared", "private", "vector", "3d"))
@pytest.mark.parametrize("which", ("lead", "all"))
@pytest.mark.parametrize("name", sorted(SUITE))
def test_every_symbolic_suite_kernel_compiles_to_ptx(name, which, option) -> None:
    k = SUITE[name]
    cdef = k.checked
    rep = dict(k.small_sizes[-1])
    symbolic = frozenset({cdef.sizes[0]} if which == "lead" else cdef.sizes)
    ks = lower_cuda(cdef, rep, contiguous_layout(cdef, rep), _options(cdef, rep, option), symbolic=symbolic)
    assert nvrtc.compile_ptx(ks.source, name=name).count(".entry ") == len(ks.kernels)
