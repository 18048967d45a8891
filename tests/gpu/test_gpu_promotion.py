"""Shared-memory promotion (mapping/promotion.py), checked on the CPU.

Suite kernels with promotion on run through the emulated target in every order and must match the
oracle; the decisions, the CUDA source and the emulated C show the buffers; every copy instance of
the isl AST (interpreted per block and thread, as test_gpu_mapping does) stays inside its tensor
and is made by one thread only. Broken mappings must be caught: a barrier removed (the race check
of the shared buffers, and without it the NaN the buffers start with, or the order comparison),
a copy that misses part of the tile (NaN), a copy that is not clipped to its tensor.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import compiled_helpers as H
import islpy as isl
import pytest
import test_compiled_fuzz as FUZZ
import test_gpu_mapping as TGM
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import tcjit
from tcjit import nvrtc, suite
from tcjit.mapping import emulation, promotion_private, promotion_shared
from tcjit.mapping import lower_gpu as lowering
from tcjit.mapping.layout import contiguous_strides
from tcjit.mapping.lower_gpu import lower_cuda, lower_gpu
from tcjit.mapping.options import MappingOptions
from tcjit.mapping.search_space import search_space
from tcjit.polyhedral.lang.check import check_source
from tcjit.testing import emulation_order


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")):
        yield


#: Promotion at the block mapping's depth (whole reductions in the tile), and one level deeper
#: (inside the tiled reduction loop: copies and barriers every iteration, unrolled copies).
PROMOTED = {
    "shared": MappingOptions("naive")
    .tile(8, 8, 4)
    .map_to_blocks(4, 4)
    .map_to_threads(8, 4)
    .use_shared_memory(True),
    "shared-deep": H.CUDA_OPTIONS["shared-deep"],
    "shared-3d": MappingOptions("naive")
    .tile(2, 3, 4)
    .map_to_blocks(2, 2, 2)
    .map_to_threads(2, 3, 4)
    .use_shared_memory(True)
    .shared_depth(4),
}
KERNELS = ("matmul", "tmm", "tbmm", "conv2d", "gconv", "fcrelu", "mlp3", "kronecker3")
ORDERS = ("forward", "reversed", "shuffled")
#: sizes whose extents the tiles do not divide (partial tiles everywhere)
MATMUL = suite.get("matmul")
PARTIAL = {"M": 37, "K": 53, "N": 29}
SMALL_PARTIAL = {"M": 13, "K": 11, "N": 9}  # for the AST interpreted in Python, thread by thread


def _run(kernel: tcjit.Kernel, inputs, options, order: str = "forward") -> tuple[torch.Tensor, ...]:
    with emulation_order(order):
        return H.as_tuple(kernel(*inputs, options=options, target="cuda-emulated"))


# ============================================================================ the suite, promoted
@pytest.mark.parametrize("name, option, which", H.rotation_params(KERNELS, PROMOTED))
def test_promoted_suite_kernel_matches_the_oracle_in_every_order(name: str, option: str, which: int) -> None:
    k = suite.get(name)
    opts = PROMOTED[option]
    kernel = H.suite_kernel(name, dynamic=False)  # the concrete mapping promotes (a symbolic one may not)
    spec = tcjit.compile(kernel, *H.suite_inputs(name, which), options=opts, target="cuda-emulated")
    assert " as tc_shared_" in spec.stages["decisions"], spec.stages["decisions"]
    first = _run(kernel, H.suite_inputs(name, which), opts)
    sizes = k.small_sizes[which]
    H.assert_all_same(
        first, H.suite_oracle(name, which), k.reduction_length(sizes), k.checked.outputs, what=name
    )
    for order in ORDERS[1:]:
        again = _run(kernel, H.suite_inputs(name, which), opts, order)
        for o, a, b in zip(k.checked.outputs, first, again):
            assert torch.equal(a, b), f"{name}.{o}: {order} order differs from forward (a race?)"
    # the same options with every size symbolic: tensors of a symbolic shape stay in global memory
    symbolic = _run(H.suite_kernel(name, dynamic=True), H.suite_inputs(name, which), opts, "shuffled")
    H.assert_all_same(
        symbolic, H.suite_oracle(name, which), k.reduction_length(sizes), k.checked.outputs, what=name
    )


def _strides(cdef, sizes) -> dict[str, tuple[int, ...]]:
    return {
        t.name: contiguous_strides(tuple(int(s.evaluate(sizes)) for s in t.shape)) for t in cdef.tensor_infos
    }


def test_promotion_shows_in_the_decisions_the_cuda_source_and_the_emulation() -> None:
    """A matmul promoted inside its tiled reduction loop: the tiles of A and B are read into shared
    memory, C is copied in and written back; the innermost dimension is padded to an odd length."""
    opts = PROMOTED["shared-deep"].shared_depth(3)
    a, b = torch.randn(37, 53), torch.randn(53, 29)
    spec = tcjit.compile(H.suite_kernel("matmul", dynamic=False), a, b, options=opts, target="cuda-emulated")
    decisions = spec.stages["decisions"]
    assert "shared: A[4][3] at depth 3 over ['S0'] as tc_shared_A, 48 bytes (copy in; reuse)" in decisions
    assert "shared: B[2][9] at depth 3 over ['S0'] as tc_shared_B" in decisions
    assert (
        "shared: C[4][9] at depth 3 over ['S0'] as tc_shared_C, 144 bytes (copy in, write back; reuse)"
        in decisions
    )
    assert "float tc_shared_A[4][3] TC_STACK_ALIGNED;" in spec.source
    assert "copy 'A' into tc_shared_A" in spec.source
    assert "write back 'C' from tc_shared_C" in spec.source
    body = spec.source.split("S0, line 2:")[1]
    assert "tc_shared_A[i_m - (4 * tc_floordiv_i64(i_m, 4))][i_r_k - (2 * tc_floordiv_i64(i_r_k, 2))]" in body
    assert "t_A[" not in body.split("}")[0]  # the statement reads the buffer, not the tensor
    torch.testing.assert_close(spec(a, b), a @ b, rtol=1e-4, atol=1e-4)
    cdef = MATMUL.checked
    ks = lower_cuda(
        cdef, PARTIAL, _strides(cdef, PARTIAL), opts.use_readonly_cache(True).validate("cuda").values
    )
    assert "__shared__ float tc_shared_A[4][3];" in ks.source
    assert "__shared__ float tc_shared_C[4][9];" in ks.source
    assert "= __ldg(&t_A[" in ks.source  # read-only inputs through the read-only cache
    assert ks.source.count("__syncthreads();") >= 3
    if nvrtc.available():
        ptx = nvrtc.compile_ptx(ks.source, name="promoted_matmul.cu")
        assert ".shared" in ptx and "ld.global.nc" in ptx


def test_without_promotion_nothing_changes() -> None:
    opts = PROMOTED["shared"].use_shared_memory(False)
    low = lower_gpu(MATMUL.checked, PARTIAL, opts.values)
    assert not any(d.startswith("shared:") for d in low.plan.decisions)
    assert not low.plan.copies and all(not k.buffers for k in low.plan.kernels)


def test_the_budget_and_the_gathers_are_respected() -> None:
    """Nothing larger than what is left of max_shared_memory; never a gather."""
    low = lower_gpu(MATMUL.checked, PARTIAL, PROMOTED["shared"].max_shared_memory(300).values)
    sizes = [math_prod(b.shape) * 4 for k in low.plan.kernels for b in k.buffers]
    assert sum(sizes) <= 300 and sizes, low.plan.decisions
    assert any("bytes, " in d and "left of the shared memory budget" in d for d in low.plan.decisions)
    src = "def g(float(V,D) LUT, int32(B) I) -> (E) { E(b, d) +=! LUT(I(b), r_d) * LUT(I(b), d) }"
    cdef = check_source(src).entry()
    low = lower_gpu(cdef, {"V": 11, "D": 9, "B": 7}, PROMOTED["shared"].values)
    assert any("LUT" in d and "a gather" in d for d in low.plan.decisions), low.plan.decisions
    lut, idx = torch.randn(11, 9), torch.randint(0, 11, (7,), dtype=torch.int32)
    got = H.as_tuple(tcjit.define(src)(lut, idx, options=PROMOTED["shared"], target="cuda-emulated"))
    H.assert_all_same(got, H.as_tuple(H.ORACLE(src, None, lut, idx)), 9)


def math_prod(shape) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


# ===================================================== every copy stays in its tensor, made once
def _copy_instances(plan, sizes) -> Counter:
    """(kernel, block, copy statement, args) -> how many threads run it, over every block and
    thread of each launch's isl AST (interpreted as test_gpu_mapping does)."""
    runs: Counter = Counter()
    for k, b, _, (stmt, args) in TGM.instances_run(plan, sizes):
        if stmt in plan.copies:
            runs[(k, b, stmt, args)] += 1
    return runs


def _check_copies(cdef, sizes, options) -> int:
    plan = lower_gpu(cdef, sizes, options.values).plan
    runs = _copy_instances(plan, sizes)
    assert runs, plan.decisions
    for (_, _, stmt, args), n in runs.items():
        copy = plan.copies[stmt]
        shape = [s.evaluate(sizes) for s in cdef.tensor(copy.tensor).shape]
        element = args[copy.prefix :]
        assert all(0 <= a < s for a, s in zip(element, shape)), f"{stmt} copies {element}, outside {shape}"
        assert n == 1, f"{stmt} {args} is copied by {n} threads of one block"
    return len(runs)


@pytest.mark.parametrize("option", ["shared", "shared-deep"])
def test_copies_of_partial_tiles_are_clipped_to_the_tensor(option: str) -> None:
    """13 x 11 x 9 in 8 x 8 x 4 (or 4 x 8 x 2) tiles: the boxes of the last tiles reach past the
    tensors; the copies stop at their edges, and each element is copied by one thread."""
    assert _check_copies(MATMUL.checked, SMALL_PARTIAL, PROMOTED[option]) > 0


def test_unclipped_copies_are_caught(monkeypatch) -> None:
    """The check above fails when copies are not clipped to the tensor (a broken promotion)."""

    def unbounded(tensor, shape, ctx):
        return isl.Set.read_from_str(ctx, f"{{ {tensor}[{', '.join(f'a{i}' for i in range(len(shape)))}] }}")

    _patch_promoters(monkeypatch, "tensor_bounds", unbounded)
    with pytest.raises(AssertionError, match="outside"):
        _check_copies(MATMUL.checked, SMALL_PARTIAL, PROMOTED["shared"])


def test_partial_tiles_match_the_oracle() -> None:
    a, b = torch.randn(37, 53), torch.randn(53, 29)
    for option in ("shared", "shared-deep"):
        for order in ORDERS:
            got = _run(H.suite_kernel("matmul"), (a, b), PROMOTED[option], order)[0]
            torch.testing.assert_close(got, a @ b, rtol=1e-4, atol=1e-4)


# ======================================================================== broken mappings caught
def _patch_promoters(monkeypatch, name: str, value) -> None:
    """Replace the footprint helper ``name`` where shared and private promotion look it up."""
    for module in (promotion_shared, promotion_private):
        monkeypatch.setattr(module, name, value)


def _drop(monkeypatch, where: str, index: int) -> None:
    """Promotion without one of its barriers: ``where`` ("before" or "after" the scope), the
    graft at ``index`` of that side."""
    graft = promotion_shared.SharedPromoter.graft

    def broken(self, scope, block):
        g = graft(self, scope, block)
        trees = list(getattr(g, where))
        del trees[index]
        return replace(g, **{where: tuple(trees)})

    monkeypatch.setattr(promotion_shared.SharedPromoter, "graft", broken)


def _unchecked(monkeypatch) -> None:
    """The emulation without the race check of shared buffers: only NaN and orders remain."""
    monkeypatch.setattr(emulation.EmulatedPrinter, "buffer_race", lambda self, buf, index, write: None)


FCRELU = suite.get("fcrelu")


def _fcrelu_case(name: str):
    """fcrelu at 7 x 61 x 17 (its output is copied in, updated and written back), renamed so
    that the kernel cache cannot return the correct kernel."""
    src = FCRELU.source.replace("def fcrelu(", f"def {name}(")
    inputs = FCRELU.make_inputs(FCRELU.small_sizes[1], seed=3)
    want = H.as_tuple(H.ORACLE(FCRELU.source, "fcrelu", *inputs))
    return tcjit.define(src), inputs, want


def test_the_barrier_after_the_copies_in_is_needed(monkeypatch) -> None:
    """Without it, a thread reads tile elements other threads have not copied yet: the race
    check reports it; without the race check, the NaN the tiles start with spoils the result."""
    kernel, inputs, want = _fcrelu_case("fcrelu_no_barrier_after_copy_in")
    H.assert_all_same(_run(kernel, inputs, PROMOTED["shared"]), want, 61)  # sound as mapped
    _drop(monkeypatch, "before", -1)
    kernel, inputs, want = _fcrelu_case("fcrelu_no_barrier_after_copy_in_2")
    with pytest.raises(tcjit.TCInternalError, match="shared-memory buffer 'tc_shared_"):
        _run(kernel, inputs, PROMOTED["shared"])
    _unchecked(monkeypatch)
    kernel, inputs, want = _fcrelu_case("fcrelu_no_barrier_after_copy_in_3")
    with pytest.raises(AssertionError, match="compiled != oracle"):  # fmax(NaN, 0) is 0: not NaN
        H.assert_all_same(_run(kernel, inputs, PROMOTED["shared"]), want, 61)
    src = MATMUL.source.replace("def matmul(", "def matmul_no_barrier_after_copy_in(")
    a, b = torch.randn(13, 11), torch.randn(11, 9)
    assert torch.isnan(_run(tcjit.define(src), (a, b), PROMOTED["shared"])[0]).any()


#: The output reversed: the thread that writes an element back (the box's innermost dimension on
#: threadIdx.x) is not the one that computed it (the loop over i on threadIdx.x).
REVERSED = "def rev(float(N,K) A) -> (O) { O(N - 1 - i) +=! A(i, r_k) }"
REV_OPTIONS = MappingOptions("naive").tile(8, 4).map_to_blocks(4).map_to_threads(8).use_shared_memory(True)


def test_a_reversed_output_is_written_back_after_a_barrier() -> None:
    a = torch.randn(21, 10)
    kernel = tcjit.define(REVERSED)
    spec = tcjit.compile(kernel, a, options=REV_OPTIONS, target="cuda-emulated")
    assert (
        "O[8] at depth 1 over ['S0', 'S0_init'] as tc_shared_O, 32 bytes (write back;"
        in spec.stages["decisions"]
    )
    for order in ORDERS:
        torch.testing.assert_close(_run(kernel, (a,), REV_OPTIONS, order)[0], a.sum(1).flip(0))


#: ``Above`` is written by S1 and read by S2 in one block's tile: both promote it (shared memory
#: over the block, a register per thread), and neither may copy it in, since every element read
#: was written first. Copying in read the uninitialised output (a bool of value 190: undefined
#: behaviour, reported by the sanitized run; on a GPU, wasted global reads).
MASKS = """
def masks(bool(N) M, float(N) A, float t) -> (O, Above, Both) {
    O(i) = M(i) ? A(i) : 0.0
    Above(i) = A(i) > t
    Both(i) = M(i) && !Above(i)
}"""
MASK_OPTIONS = (
    MappingOptions().tile(8, 8, 4).map_to_blocks(4, 4).map_to_threads(8, 4).use_readonly_cache(True)
)


@pytest.mark.parametrize("memory", ["shared", "private"])
def test_a_group_copies_in_only_what_it_reads_before_writing(memory: str) -> None:
    """PPCG's live-in reads: elements the scope iteration writes before reading are not copied in
    (the sanitizer sample runs this test too). What is read before being written still is: the
    matmul inside its reduction loop copies C in (the test above)."""
    opts = MASK_OPTIONS.use_shared_memory(memory == "shared").use_private_memory(memory == "private")
    m, a = torch.randn(29) > 0, torch.randn(29)
    kernel = tcjit.define(MASKS.replace("def masks(", f"def masks_{memory}("))
    spec = tcjit.compile(kernel, m, a, 0.25, options=opts, target="cuda-emulated")
    decisions = spec.stages["decisions"]
    assert f"{memory}: Above[" in decisions and "as tc_" + memory + "_Above" in decisions, decisions
    assert "(write back; reuse)" in decisions.split(f"tc_{memory}_Above")[1].splitlines()[0], decisions
    assert f"into tc_{memory}_Above" not in spec.source
    assert f"write back 'Above' from tc_{memory}_Above" in spec.source
    for order in ORDERS:
        out, above, both = _run(kernel, (m, a, 0.25), opts, order)
        assert torch.equal(above, a > 0.25) and torch.equal(both, m & ~(a > 0.25))
        assert torch.equal(out, torch.where(m, a, torch.tensor(0.0)))


#: ``T(i, j - 1)`` under its guard: the read's access relation reaches ``T[i, -1]`` at ``j = 0``,
#: though the program never evaluates it there. Copied in, that element was read from before the
#: tensor (AddressSanitizer's heap-buffer-overflow in a fuzzed emulated kernel, in the shadow of
#: the emulation's race check; without the sanitizer, the race check now reports it).
SHIFTED = """
def shifted(float(N, M) X) -> (T, O) {
    T(i, j) = X(i, j) * 2.0
    O(i, j) = (j >= 1 && j - 1 < M ? T(i, j - 1) : 1.5) + T(i, j) where j in 0:M
}"""
SHIFTED_OPTIONS = (
    MappingOptions()
    .outer_schedule_fusion_strategy("Max")
    .tile(4, 8)
    .map_to_blocks(4)
    .map_to_threads(4)
    .unroll(64)
)


@pytest.mark.parametrize("memory, copies", [("shared", "write back"), ("private", "copy in, write back")])
def test_a_guarded_read_outside_the_tensor_is_not_copied_in(memory: str, copies: str) -> None:
    """Shared, over the whole row: every element read but ``T[i, -1]`` is written first, so
    nothing is copied in. Private, per tile of 8 columns: the column before the tile (written by
    the thread's previous tile) is copied in, except before the first tile."""
    opts = SHIFTED_OPTIONS.use_shared_memory(memory == "shared").use_private_memory(memory == "private")
    x = torch.randn(9, 11)
    kernel = tcjit.define(SHIFTED.replace("def shifted(", f"def shifted_{memory}("))
    spec = tcjit.compile(kernel, x, options=opts, target="cuda-emulated")
    decisions = spec.stages["decisions"]
    assert f"as tc_{memory}_T" in decisions, decisions
    assert f"({copies}; reuse" in decisions.split(f"as tc_{memory}_T")[1].splitlines()[0], decisions
    assert _check_copies(check_source(SHIFTED).entry(), {"N": 9, "M": 11}, opts) > 0
    shifted = torch.cat([torch.full((9, 1), 1.5), 2 * x[:, :-1]], 1)
    for order in ORDERS:
        t, o = _run(kernel, (x,), opts, order)
        torch.testing.assert_close(t, 2 * x)
        torch.testing.assert_close(o, shifted + 2 * x)


def test_the_emulation_reports_an_access_outside_a_tensor(monkeypatch) -> None:
    """A broken promotion whose copies are not clipped to the tensor: the private copy in reads
    ``T[i, -1]`` (a written tensor), the matmul's last tiles copy rows of ``A`` past its end (an
    input). The emulated target reports each instead of making the access (before its race
    check's shadow of ``T``, past the end of ``A``'s storage)."""
    _patch_promoters(monkeypatch, "clipped", lambda copies, outer, bounds: list(copies))
    kernel = tcjit.define(SHIFTED.replace("def shifted(", "def shifted_unclipped("))
    opts = SHIFTED_OPTIONS.use_private_memory(True)
    with pytest.raises(tcjit.TCInternalError, match="element offset -1 of 'T', outside the tensor"):
        _run(kernel, (torch.randn(9, 11),), opts)

    def unbounded(tensor, shape, ctx):
        return isl.Set.read_from_str(ctx, f"{{ {tensor}[{', '.join(f'a{i}' for i in range(len(shape)))}] }}")

    _patch_promoters(monkeypatch, "tensor_bounds", unbounded)
    kernel = tcjit.define(MATMUL.source.replace("def matmul(", "def matmul_unclipped("))
    a, b = torch.randn(13, 11), torch.randn(11, 9)
    with pytest.raises(tcjit.TCInternalError, match="of 'A', outside the tensor"):
        _run(kernel, (a, b), PROMOTED["shared"])


def test_the_barrier_before_the_write_back_is_needed(monkeypatch) -> None:
    """Without it, threads write back elements other threads have not computed yet: the race
    check reports it; without the race check, the orders disagree or the result is wrong."""
    _drop(monkeypatch, "after", 0)
    a = torch.randn(21, 10)
    with pytest.raises(tcjit.TCInternalError, match="shared-memory buffer 'tc_shared_O"):
        _run(tcjit.define(REVERSED.replace("def rev(", "def rev_unsynced(")), (a,), REV_OPTIONS)
    _unchecked(monkeypatch)
    kernel = tcjit.define(REVERSED.replace("def rev(", "def rev_unsynced_unchecked("))
    results = [_run(kernel, (a,), REV_OPTIONS, order)[0] for order in ORDERS]
    differs = any(not torch.equal(r, results[0]) for r in results[1:])
    wrong = any(not torch.allclose(r, a.sum(1).flip(0), rtol=1e-4, atol=1e-4) for r in results)
    assert differs or wrong, "a write-back before the compute finished went unnoticed"


def test_the_barrier_after_the_scope_is_needed(monkeypatch) -> None:
    """Promoted inside the reduction loop, with C left in global memory (the budget), the next
    iteration's copies overwrite tiles of A and B that other threads may still read (a write
    after read): only the race check sees it, since barrier fission runs every thread loop to
    its end. The initialisation stays a launch of its own here: folded into the kernel, it runs
    before the copies in, which then start each iteration with a barrier of their own."""
    monkeypatch.setattr(lowering, "folds_initialisations", lambda options: False)
    opts = PROMOTED["shared-deep"].max_shared_memory(130)
    a, b = torch.randn(13, 11), torch.randn(11, 9)
    kernel = tcjit.define(MATMUL.source.replace("def matmul(", "def matmul_tight_budget("))
    spec = tcjit.compile(kernel, a, b, options=opts, target="cuda-emulated")
    decisions = spec.stages["decisions"]
    assert "C at depth 3 over ['S0'] not promoted (144 bytes, 130 left" in decisions, decisions
    assert " as tc_shared_A" in decisions and " as tc_shared_B" in decisions
    torch.testing.assert_close(_run(kernel, (a, b), opts)[0], a @ b, rtol=1e-4, atol=1e-4)
    _drop(monkeypatch, "after", -1)
    kernel = tcjit.define(MATMUL.source.replace("def matmul(", "def matmul_no_barrier_after_scope("))
    with pytest.raises(tcjit.TCInternalError, match=r"shared-memory buffer 'tc_shared_[AB]'"):
        _run(kernel, (a, b), opts)


def test_a_copy_that_misses_part_of_a_tile_gives_nan(monkeypatch) -> None:
    """A box one element short in its last dimension (a broken footprint): the element never
    copied still holds NaN when the compute reads it."""
    in_box = promotion_shared.in_box

    def short(space, box):
        return in_box(space, replace(box, sizes=(*box.sizes[:-1], max(1, box.sizes[-1] - 1))))

    monkeypatch.setattr(promotion_shared, "in_box", short)
    a, b = torch.randn(37, 53), torch.randn(53, 29)
    src = MATMUL.source.replace("def matmul(", "def matmul_short_copies(")
    got = _run(tcjit.define(src), (a, b), PROMOTED["shared"])[0]
    assert torch.isnan(got).any()


# ================================================== random programs, random points, promotion on
SPACE = search_space("cuda-emulated")


@st.composite
def promoted_points(draw) -> MappingOptions:
    """A point of the CUDA search space with shared memory, registers or both, at random depths
    (the private one no shallower than the shared one) and budget: with both, registers get only
    what shared memory leaves, so each alone too."""
    options = SPACE.decode([draw(st.integers(0, len(p.choices) - 1)) for p in SPACE.parameters])
    kind = draw(st.sampled_from(("shared", "private", "both")))
    shared = draw(st.sampled_from((None, 0, 1, 2, 3, 4, 6)))
    private = draw(st.sampled_from((None, 0, 2, 4, 5, 7, 9)))
    if shared is not None and private is not None and private < shared:
        private = None
    return (
        options.use_shared_memory(kind != "private")
        .use_private_memory(kind != "shared")
        .shared_depth(shared)
        .max_shared_memory(draw(st.sampled_from((None, 256, 4096))))
        .private_depth(private)
    )


@settings(max_examples=examples(10, 150), derandomize=examples(True, False), **FUZZ.SETTINGS)
@given(program=FUZZ.programs(), options=promoted_points(), order=st.sampled_from(ORDERS))
def test_random_programs_promoted_at_random_points_of_the_search_space(program, options, order) -> None:
    """Every drawn point with promotion on must compile and give the oracle's answer."""
    H.check_fuzz_program_emulated(program, options, order, what="emulated fuzz, promoted")
