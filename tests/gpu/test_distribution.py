"""Band distribution (mapping/distribution.py): statements that follow one another along a band's
inner members get a band each, below a band over the rows, so that a reduction's update is alone
in its band (a block reduction) and the statements that use its result run in the same kernel."""

from __future__ import annotations

import compiled_helpers as H
import islpy as isl
import pytest
import torch
from test_gpu_reduction import ORDERS, _run

import tcjit
from tcjit import suite
from tcjit.mapping.defaults import UNLIMITED_GRID
from tcjit.mapping.distribution import statement_order
from tcjit.mapping.options import MappingOptions
from tcjit.polyhedral.lang.check import check_source
from tcjit.polyhedral.schedule import bands


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")):
        yield


def _band(offset: int, inner: str = "j") -> isl.ScheduleNode:
    text = (
        '{ domain: "{ X[i, j] : 0 <= i < 4 and 0 <= j < 10; Y[i, j] : 0 <= i < 4 and 0 <= j < 10 }",'
        ' child: { schedule: "[{ X[i, j] -> [(i)]; Y[i, j] -> [(i)] },'
        f' {{ X[i, j] -> [(j)]; Y[i, j] -> [({inner} + {offset})] }}]", coincident: [1, 0] }} }}'
    )
    return isl.Schedule.read_from_str(isl.Context(), text).get_root().child(0)


def test_statements_that_follow_one_another_along_the_inner_member_are_ordered() -> None:
    assert statement_order(_band(10), 1) == ["X", "Y"]
    assert statement_order(_band(-10), 1) == ["Y", "X"]


@pytest.mark.parametrize("offset, inner", [(5, "j"), (9, "j"), (0, "9 - j")])
def test_statements_that_interleave_or_meet_are_not(offset: int, inner: str) -> None:
    """Y from 5 (X runs to 9), Y at 9 where X's last point is, or both over the same points:
    some instance of one comes between two of the other, or shares a point with one."""
    assert statement_order(_band(offset, inner), 1) is None


def _options(fusion: str = "Max") -> MappingOptions:
    return (
        MappingOptions("naive")
        .outer_schedule_fusion_strategy(fusion)
        .tile(4, 1024, 1024)
        .map_to_blocks(*UNLIMITED_GRID)
        .map_to_threads(16, 4)
        .match_library_calls(True)
    )


def _checked(name: str, which: int, opts: MappingOptions) -> tuple[str, tuple[torch.Tensor, ...]]:
    """The mapping decisions of suite kernel ``name`` at its small sizes ``which`` on the emulated
    target, after checking every thread order against the oracle; the last order's outputs."""
    inputs = H.suite_inputs(name, which)
    kernel = H.suite_kernel(name)
    spec = tcjit.compile(kernel, *inputs, options=opts, target="cuda-emulated")
    k = suite.get(name)
    for order in ORDERS:
        got = _run(kernel, inputs, opts, order)
        length = k.reduction_length(k.small_sizes[which])
        H.assert_all_same(got, H.suite_oracle(name, which), length, k.checked.outputs, what=name)
    return spec.stages["decisions"], got


@pytest.mark.parametrize("name", ["layernorm", "softmax"])
def test_a_fused_row_kernel_reduces_and_normalises_each_row_in_one_launch(name: str) -> None:
    """With fusion Max the scheduler puts a row's two reductions and its normalisation in one band,
    one after the other: distributed, each reduction is a block reduction, the normalisation is on
    the threads, and they share one kernel (the combines initialise), with a barrier between;
    every order matches the oracle."""
    decisions, _ = _checked(name, 1, _options())
    assert decisions.count("combined by a block tree reduction") == 2, decisions
    assert decisions.count("kernel over") == 1 and "threads: members [0] of the band over ['S2']" in decisions


def test_each_distributed_band_knows_its_own_parallel_members() -> None:
    """layernorm's O over d was in the reductions' band, whose inner member carries their sums: in
    its own band the member is coincident again (threads may take it), the reductions' are not."""
    from tcjit.mapping.prepare import tiled_schedule

    cdef = check_source(suite.get("layernorm").source).entry()
    sizes = {"N": 6, "D": 40}
    _, _, _, sched = tiled_schedule(cdef, sizes, _options().validate("cuda").values, distribute=True)
    coincident = {}
    for band in bands(sched):
        names = {n for n in ("S0", "S1", "S2") if f"{n}[" in band.get_domain().to_str()}
        if len(names) == 1 and band.band_n_member() == 1:
            coincident[names.pop()] = band.band_member_get_coincident(0)
    assert coincident == {"S0": False, "S1": False, "S2": True}


def test_cosine_computes_dot_and_the_quotient_in_one_kernel() -> None:
    """With the default fusion, cosine's dot and O share a band (O after the last r_n): distributed,
    dot is block-reduced and O follows it in the same launch, after the combine's barrier."""
    decisions, got = _checked("cosine", 1, _options("Preserve3Coincident"))
    assert "combined by a block tree reduction into dot" in decisions, decisions
    inputs = H.suite_inputs("cosine", 1)
    torch.testing.assert_close(got[0], torch.nn.functional.cosine_similarity(*inputs, dim=1, eps=1e-8))


def test_kernels_of_the_same_rows_become_one_with_fusion_max() -> None:
    """cosine's three reductions and its quotient depend on the same row only: with fusion Max they
    are one kernel (a band over m above them all), the initialisations taken over by the
    combines; every order matches the oracle."""
    decisions, _ = _checked("cosine", 2, _options())
    assert decisions.count("kernel over") == 1 and decisions.count("combined by a block tree") == 3, decisions


SHIFTED = """def shifted(float(N,D) I) -> (S, O) {
    S(n) +=! I(n, r_d)
    O(n) = S(N - 1 - n) * I(n, 0)
}"""


def test_kernels_with_a_dependence_between_rows_stay_apart() -> None:
    """O(n) reads S(N - 1 - n): fused over n, the block of row n would read what another block has
    not written yet. fuse_rows leaves such a tree as it is, and fuses cosine's."""
    from tcjit.mapping.distribution import fuse_rows
    from tcjit.mapping.prepare import tiled_schedule

    opts = _options("Preserve3Coincident").tile(1).validate("cuda").values
    cases = ((SHIFTED, {"N": 7, "D": 50}, False), (suite.get("cosine").source, {"M": 5, "N": 9}, True))
    for src, sizes, fused in cases:
        cdef = check_source(src).entry()
        _, deps, fixed, sched = tiled_schedule(cdef, sizes, opts, distribute=True)
        after = fuse_rows(sched, deps, sizes, fixed)
        assert after.plain_is_equal(sched) is not fused, cdef.name
        if fused:
            assert after.get_root().child(0).get_type() == isl.schedule_node_type.band
    x = torch.randn(7, 50)
    for order in ORDERS:
        _, o = _run(tcjit.define(SHIFTED), (x,), _options(), order)
        torch.testing.assert_close(o, x.sum(1).flip(0) * x[:, 0], rtol=1e-5, atol=1e-5)


FUZZED = """def fuzz(float(N2, N2, N2) X0) -> (O2) {
    O0(i, j) +=! X0(0, 0, 0) where i in 0:N2, j in 0:N2, i <= j
    O0(i, j) = fmax(O0(i, j), 0.0)
    O1 +=! (r_a >= 1 && r_a - 1 < N2 ? X0(r_a - 1, r_a - 1, r_a - 1) : 1.5) where r_a in 0:N2
    O1 = fmax(O1, 0.0)
    O2(i, j) +=! O1 where i in 0:N2, j in 0:N2
    O2(i, j) = fmax(O2(i, j), 0.0)
}"""


@pytest.mark.parametrize("n", [1, 3])
def test_a_scalar_statement_among_distributed_bands_promotes_without_a_thread_loop(n: int) -> None:
    """Found by the promotion fuzzer: with fusion Max, block reductions and shared memory, a
    thread-mapped part with no loop above it (the scalar O1) gave shared promotion's coalescing
    analysis no threadIdx.x member to step along; it is left out of that analysis."""
    opts = (
        MappingOptions()
        .outer_schedule_fusion_strategy("Max")
        .intra_tile_schedule_fusion_strategy("Max")
        .tile(0, 0, 0)
        .map_to_blocks(1)
        .map_to_threads(1)
        .use_shared_memory(True)
        .match_library_calls(True)
    )
    H.check_against_oracle(FUZZED, None, (torch.randn(n, n, n),), options=opts, target="cuda-emulated")
