"""Block reductions (mapping/reduction.py), checked on the CPU.

With ``match_library_calls``, a reduction loop goes to threadIdx.x and the threads' partial
results are combined by a tree in shared memory (the last five steps as warp shuffles on CUDA).
Suite kernels with reductions run through the emulated target in every thread order and must
match the oracle and agree with each other bit for bit (the tree's order is fixed); the decisions
and sources show the tree; broken trees must be caught: a barrier removed between two steps or
after the last one is a race the emulation's shared-memory check reports.
"""

from __future__ import annotations

import compiled_helpers as H
import islpy as isl
import pytest
import test_gpu_promotion as TGP
import torch

import tcjit
from tcjit import nvrtc, suite
from tcjit.mapping import gpu, ir, reduction
from tcjit.mapping.lower_gpu import lower_cuda
from tcjit.mapping.options import MappingOptions
from tcjit.polyhedral.errors import TCInternalError
from tcjit.polyhedral.lang.check import check_source


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")):
        yield


#: x on the reduction, y (and z) on outputs; x of 32 (the warp form on CUDA); partial tiles.
REDUCED = {
    "xy": MappingOptions("naive")
    .tile(8, 32, 16)
    .map_to_blocks(4, 4)
    .map_to_threads(16, 4)
    .match_library_calls(True),
    "warp": MappingOptions("naive")
    .tile(4, 64)
    .map_to_blocks(8)
    .map_to_threads(32, 2)
    .match_library_calls(True),
    "xyz": MappingOptions("naive")
    .tile(3, 4, 5)
    .map_to_blocks(2, 2)
    .map_to_threads(8, 2, 2)
    .match_library_calls(True)
    .use_shared_memory(True),
}
KERNELS = ("softmax", "layernorm", "bn_reduce", "cosine", "abs_sum", "matmul", "tbmm", "kronecker3")
ORDERS = ("forward", "reversed", "shuffled")


_run = TGP._run
_strides = TGP._strides


@pytest.mark.parametrize("name, option, which", H.rotation_params(KERNELS, REDUCED))
def test_reduced_suite_kernel_matches_the_oracle_in_every_order(name: str, option: str, which: int) -> None:
    k = suite.get(name)
    opts = REDUCED[option]
    inputs = H.suite_inputs(name, which)
    kernel = H.suite_kernel(name, dynamic=False)  # the concrete mapping's block reductions
    spec = tcjit.compile(kernel, *inputs, options=opts, target="cuda-emulated")
    assert "combined by a block tree reduction" in spec.stages["decisions"], spec.stages["decisions"]
    first = _run(kernel, inputs, opts)
    sizes = k.small_sizes[which]
    H.assert_all_same(
        first, H.suite_oracle(name, which), k.reduction_length(sizes), k.checked.outputs, what=name
    )
    # blocks that add their results atomically add them in the blocks' order (a float sum then
    # differs from one order to another, as on a GPU): the oracle judges each order
    atomic = "added atomically" in spec.stages["decisions"]
    # the same options with every size symbolic (its strides are C arithmetic of the sizes)
    symbolic = _run(H.suite_kernel(name, dynamic=True), inputs, opts, "shuffled")
    H.assert_all_same(
        symbolic, H.suite_oracle(name, which), k.reduction_length(sizes), k.checked.outputs, what=name
    )
    for order in ORDERS[1:]:
        again = _run(kernel, inputs, opts, order)
        if atomic:
            H.assert_all_same(
                again, H.suite_oracle(name, which), k.reduction_length(sizes), k.checked.outputs, what=name
            )
            continue
        for o, a, b in zip(k.checked.outputs, first, again):
            assert torch.equal(a, b), f"{name}.{o}: {order} order differs from forward (a race?)"


ROWS = """def rows(float(N,D) I) -> (S, M) {
    S(n) +=! I(n, r_d)
    M(n) max=! I(n, r_d) * I(n, r_d)
}"""


def test_the_tree_shows_in_the_decisions_the_cuda_source_and_the_emulation() -> None:
    """Row sums over 100 columns on 32 x 2 threads: one output per thread row and step of a band
    above the thread mapping, a tree of five steps (shuffles on CUDA), one combine per row."""
    x = torch.randn(9, 100)
    opts = REDUCED["warp"]
    kernel = tcjit.define(ROWS)
    spec = tcjit.compile(kernel, x, options=opts, target="cuda-emulated")
    decisions = spec.stages["decisions"]
    assert (
        "reduction: member 1 of the band over ['S0'] -> x (32), member 0 -> y (2), combined by a block"
        " tree reduction into S (+=); a band of members [0] above it (one output per row)" in decisions
    )
    assert "into M (max=)" in decisions
    for s in (16, 8, 4, 2, 1):
        assert f"block reduction 0: step {s} */ if (t0 < {s} && t0 + {s} < 32)" in spec.source
    assert "step 32" not in spec.source
    s, m = spec(x)
    torch.testing.assert_close(s, x.sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m, (x * x).amax(1))
    cdef = check_source(ROWS).entry()
    ks = lower_cuda(
        cdef, {"N": 9, "D": 100}, _strides(cdef, {"N": 9, "D": 100}), opts.validate("cuda").values
    )
    assert "__shared__ float tc_shared_red0[1][2][32];" in ks.source
    assert "tc_v = tc_v + __shfl_down_sync(0xffffffffu, tc_v, 16);" in ks.source
    assert "tc_v = tc_fmax_f32(tc_v, __shfl_down_sync(0xffffffffu, tc_v, 1));" in ks.source
    if nvrtc.available():
        ptx = nvrtc.compile_ptx(ks.source, name="rows.cu")
        assert "shfl.sync.down" in ptx and "bar.sync" in ptx


def test_a_width_not_a_multiple_of_32_reduces_through_shared_memory_on_cuda() -> None:
    """Block x of 24 (tightened to the reduced extent): steps 16, 8, 4, 2, 1 through shared
    memory with barriers, no shuffle (a warp would mix two rows); int64 sums too."""
    src = ROWS.replace("float(N,D)", "int64(N,D)")
    cdef = check_source(src).entry()
    opts = MappingOptions("naive").tile(4, 64).map_to_threads(64, 2).match_library_calls(True)
    ks = lower_cuda(cdef, {"N": 5, "D": 24}, _strides(cdef, {"N": 5, "D": 24}), opts.validate("cuda").values)
    assert "__shfl" not in ks.source and "t0 + 16 < 24" in ks.source
    x = torch.randint(-(2**40), 2**40, (5, 24))
    s, m = tcjit.define(src)(x, options=opts, target="cuda-emulated")
    assert torch.equal(s, x.sum(1)) and torch.equal(m, (x * x).amax(1))


def test_without_match_library_calls_reductions_stay_in_one_thread() -> None:
    x = torch.randn(9, 100)
    opts = REDUCED["warp"].match_library_calls(False)
    spec = tcjit.compile(tcjit.define(ROWS), x, options=opts, target="cuda-emulated")
    assert "reduction:" not in spec.stages["decisions"] and "block reduction" not in spec.source


def test_a_whole_tensor_reduction_has_one_block_of_threads() -> None:
    """abs_sum has no coincident member: no block mapping, but the reduction still goes to threads."""
    a = torch.randn(7, 301)
    opts = MappingOptions("naive").tile(8, 128).map_to_threads(64).match_library_calls(True)
    kernel = H.suite_kernel("abs_sum", dynamic=False)
    spec = tcjit.compile(kernel, a, options=opts, target="cuda-emulated")
    decisions = spec.stages["decisions"]
    assert "blocks: none" in decisions and "of the band over ['S0'] -> x (64), combined" in decisions
    torch.testing.assert_close(H.as_tuple(spec(a))[0], a.abs().sum(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_a_reduction_with_too_few_outputs_spreads_over_blocks_and_adds_atomically(dtype) -> None:
    """A sum over whole rows of a short matrix: its rows (outputs) give one block, so the tiles
    of the reduction loop go to blocks too, and each block adds its tree's result atomically
    (int64: as unsigned long long, two's complement)."""
    src = "def row_sums(float(N,D) I) -> (S) {\n    S(n) +=! I(n, r_d)\n}"
    src = src.replace("float(N,D)", "int64(N,D)") if dtype == torch.int64 else src
    opts = (
        MappingOptions("naive")
        .tile(4, 64)
        .map_to_blocks(4, 16)
        .map_to_threads(32, 2)
        .match_library_calls(True)
    )
    x = torch.randn(3, 1000) if dtype == torch.float32 else torch.randint(-(2**40), 2**40, (3, 1000))
    kernel = tcjit.define(src)
    spec = tcjit.compile(kernel, x, options=opts, target="cuda-emulated")
    assert "(member 1: a reduction, its blocks' results added atomically)" in spec.stages["decisions"]
    for order in ORDERS:
        got = _run(kernel, (x,), opts, order)[0]
        if dtype == torch.int64:
            assert torch.equal(got, x.sum(1))
        else:
            torch.testing.assert_close(got, x.sum(1), rtol=1e-5, atol=1e-4)
    cdef = check_source(src).entry()
    sizes = {"N": 3, "D": 1000}
    ks = lower_cuda(cdef, sizes, _strides(cdef, sizes), opts.validate("cuda").values)
    assert ks.kernels[-1].grid == (1, 16, 1)
    if dtype == torch.int64:
        assert "atomicAdd((unsigned long long *)&t_S[" in ks.source
    else:
        assert "atomicAdd(&t_S[" in ks.source
    if nvrtc.available():
        ptx = nvrtc.compile_ptx(ks.source, name="row_sums.cu")
        assert "atom.global.add" in ptx or "red.global.add" in ptx  # red: the result unused


@pytest.mark.parametrize("tile", [(1, 1), (4, 2)])
def test_a_thread_keeps_its_accumulator_across_the_loops_of_its_share(tile) -> None:
    """bn_reduce's reduction loops ``r_n`` and ``r_h`` run one after the other in each thread
    around its share of ``r_w``: the private accumulator spans them, and the tree and the combine
    run once per output a block owns (not once per ``r_h``). With four channels to a block
    (tile 4), the channel's loop stays outside: the accumulator is reset per channel. Every order
    matches the oracle, and no barrier is left in the loops the accumulator spans."""
    x = torch.randn(3, 8, 5, 37)
    opts = (
        MappingOptions("naive").tile(*tile).map_to_blocks(64, 64).map_to_threads(16).match_library_calls(True)
    )
    kernel = H.suite_kernel("bn_reduce", dynamic=False)
    spec = tcjit.compile(kernel, x, options=opts, target="cuda-emulated")
    assert "private accumulators across the loops" in spec.stages["decisions"], spec.stages["decisions"]
    for order in ORDERS:
        torch.testing.assert_close(
            _run(kernel, (x,), opts, order)[0], x.mean((0, 2, 3)), rtol=1e-5, atol=1e-6
        )
    cdef = check_source(suite.get("bn_reduce").source).entry()
    sizes = {"N": 3, "C": 8, "H": 5, "W": 37}
    source = lower_cuda(cdef, sizes, _strides(cdef, sizes), opts.validate("cuda").values).source
    share = source[source.index("block reduction 0: identity") : source.index("block reduction 0: partial")]
    loops = share[: share.rindex("}")]  # a barrier may follow the loops, before the store
    assert loops.count("for (") >= 2 and "__syncthreads" not in loops, share


def test_the_default_split_reduction_matches_the_oracle_in_every_order() -> None:
    """bn_reduce at 16 channels of 8 x 56 x 56 terms: the defaults split it over the grid (a block
    per channel and image, added atomically), and every order of the emulation agrees with the
    oracle."""
    x = torch.randn(8, 16, 56, 56)
    kernel = H.suite_kernel("bn_reduce", dynamic=False)
    spec = tcjit.compile(kernel, x, target="cuda-emulated")
    decisions = spec.stages["decisions"]
    assert "its blocks' results added atomically" in decisions and "private accumulators" in decisions
    for order in ORDERS:
        got = H.as_tuple(_run(kernel, (x,), None, order))[0]
        torch.testing.assert_close(got, x.mean((0, 2, 3)), rtol=1e-5, atol=1e-6)


def test_a_combine_that_alone_writes_each_element_initialises_it() -> None:
    """Row sums and maxima, a block per 4 rows, a row in one tile: each element gets one combine,
    which stores ``identity op result``; the initialisations' launch is gone. Every order
    matches the oracle. In tiles of 64 columns, each element gets two combines, one after the
    other, and keeps its initialisation."""
    x = torch.randn(11, 100)  # not a shape an earlier test compiled: a fresh spec has its stages
    kernel = tcjit.define(ROWS)
    two = tcjit.compile(kernel, x, options=REDUCED["warp"], target="cuda-emulated")
    assert "does not run" not in two.stages["decisions"]
    opts = REDUCED["warp"].tile(4, 128)
    spec = tcjit.compile(kernel, x, options=opts, target="cuda-emulated")
    decisions = spec.stages["decisions"]
    assert "(S0_init does not run)" in decisions and "(S1_init does not run)" in decisions, decisions
    cdef = check_source(ROWS).entry()
    sizes = {"N": 11, "D": 100}
    ks = lower_cuda(cdef, sizes, _strides(cdef, sizes), opts.validate("cuda").values)
    assert len(ks.kernels) == 2 and "(initialisation)" not in ks.source  # S's kernel and M's
    assert (
        "= 0x0.0p+0f + (tc_shared_red" in ks.source
        and "tc_fmax_f32((-HUGE_VALF), (tc_shared_red" in ks.source
    )
    for order in ORDERS:
        s, m = _run(kernel, (x,), opts, order)
        torch.testing.assert_close(s, x.sum(1), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(m, (x * x).amax(1))


def test_blocks_that_share_an_element_keep_its_initialisation() -> None:
    """A reduction spread over blocks adds each block's result atomically: the element must hold
    the identity first, so its initialisation keeps its launch."""
    x = torch.randn(8, 16, 56, 56)
    spec = tcjit.compile(H.suite_kernel("bn_reduce", dynamic=False), x, target="cuda-emulated")
    assert "added atomically" in spec.stages["decisions"] and "does not run" not in spec.stages["decisions"]


def _without_barriers(which):
    """``gpu.expand_trees`` with the barriers ``which(position, steps)`` selects removed: in each
    block of the tree, ``steps`` are the positions of its steps."""
    original = reduction.expand_trees

    def strip(node: ir.Node) -> ir.Node:
        if isinstance(node, ir.Block):
            kids = [strip(c) for c in node.children]
            runs = [i for i, c in enumerate(kids) if isinstance(c, ir.Run) and "_step_" in c.statement]
            if not runs:
                return ir.Block(tuple(kids))
            drop = {
                i
                for i, c in enumerate(kids)
                if isinstance(c, ir.Mark) and c.name == ir.SYNC_MARK and which(i, runs)
            }
            return ir.Block(tuple(c for i, c in enumerate(kids) if i not in drop))
        if isinstance(node, ir.Mark):
            return ir.Mark(node.name, strip(node.body))
        if isinstance(node, ir.For):
            return ir.For(
                node.var, node.init, node.cond, node.step, strip(node.body), node.kinds, node.degenerate
            )
        if isinstance(node, ir.If):
            return ir.If(node.cond, strip(node.then), None if node.other is None else strip(node.other))
        return node

    return lambda body, reductions: strip(original(body, reductions))


@pytest.mark.parametrize(
    "what, which",
    [
        ("between two steps", lambda i, runs: runs[0] < i < runs[-1]),
        ("after the last step", lambda i, runs: i > runs[-1]),
    ],
)
def test_a_missing_barrier_in_the_tree_is_a_race(what: str, which, monkeypatch) -> None:
    """Each barrier of the tree is needed: without the one between two steps a thread reads a
    partial result another thread has not combined yet; without the last one, the next row's
    store overwrites a partial result the last step still reads. The emulation reports both."""
    monkeypatch.setattr(gpu, "expand_trees", _without_barriers(which))
    x = torch.randn(6, 77)
    src = ROWS.replace("def rows(", f"def rows_{'mid' if 'two' in what else 'end'}(")
    with pytest.raises(TCInternalError, match="tc_shared_red"):
        tcjit.define(src)(x, options=REDUCED["xy"], target="cuda-emulated")


def test_a_thread_row_owning_two_elements_is_refused() -> None:
    """The check the mapper relies on: per schedule point, one element per thread row and one row
    per element."""
    ctx = isl.DEFAULT_CONTEXT
    prefix = isl.UnionMap.read_from_str(ctx, "{ S[i, r] -> [0] : 0 <= i < 4 and 0 <= r < 8 }")
    out = isl.UnionMap.read_from_str(ctx, "{ S[i, r] -> O[i] }")
    one_row_each = isl.UnionMap.read_from_str(ctx, "{ S[i, r] -> [i, 0] }")
    two_per_row = isl.UnionMap.read_from_str(ctx, "{ S[i, r] -> [floor(i / 2), 0] }")
    two_rows = isl.UnionMap.read_from_str(ctx, "{ S[i, r] -> [r, 0] }")
    assert reduction.single_owner(prefix, one_row_each, out)
    assert not reduction.single_owner(prefix, two_per_row, out)
    assert not reduction.single_owner(prefix, two_rows, out)


def test_tree_steps() -> None:
    assert reduction.tree_steps(1) == []
    assert reduction.tree_steps(2) == [1]
    assert reduction.tree_steps(24) == [16, 8, 4, 2, 1]
    assert reduction.tree_steps(32) == [16, 8, 4, 2, 1]
    assert reduction.tree_steps(33) == [32, 16, 8, 4, 2, 1]
