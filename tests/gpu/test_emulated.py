"""The CUDA mapping run through the emulated target (``target="cuda-emulated"``) on the CPU.

Every suite kernel at its small sizes, with several mapping option vectors (tile sizes, block and
thread shapes larger and smaller than the problem, 1-D to 3-D), must match the oracle, and its
results must not depend on the order blocks and threads run in (forward, reversed, shuffled): a
race or a missing barrier shows up as a difference between orders.
"""

from __future__ import annotations

import warnings

import compiled_helpers as H
import pytest
import test_compiled_fuzz as FUZZ
import test_compiled_programs as TCP
import test_reference_kernels as TRK
import test_reference_programs as TRP
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import tcjit
from tcjit import suite
from tcjit.mapping import gpu, gpu_blocks, gpu_reductions, gpu_threads, ir
from tcjit.mapping.fission import fission
from tcjit.mapping.options import MappingOptions
from tcjit.mapping.search_space import search_space
from tcjit.polyhedral.errors import TCInternalError
from tcjit.testing import emulation_order


@pytest.fixture(scope="module", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    with H.private_cache(tmp_path_factory.mktemp("tcjit-cache")):
        yield


OPTIONS = {**H.CUDA_OPTIONS, "default": None}  # None: the call's own default options

CASES = [(k.name, which) for k in suite.SUITE.values() for which in range(min(2, len(k.small_sizes)))]


def _emulated(name: str, which: int, options, order: str) -> tuple[torch.Tensor, ...]:
    with emulation_order(order):
        return H.as_tuple(
            H.suite_kernel(name)(*H.suite_inputs(name, which), options=options, target="cuda-emulated")
        )


def _suite_params() -> list:
    """Every kernel x size x option vector; the default tier keeps 3 option vectors per kernel
    and size (a rotation that covers every vector for every kernel), the full tier all of them."""
    names = list(OPTIONS)
    out = []
    for i, (name, which) in enumerate(CASES):
        kept = {names[(3 * i + j) % len(names)] for j in range(3)}
        for option in names:
            marks = () if option in kept else pytest.mark.full
            out.append(pytest.param(name, which, option, id=f"{name}-{which}-{option}", marks=marks))
    return out


@pytest.mark.parametrize("name, which, option", _suite_params())
def test_suite_kernel_emulated_matches_the_oracle_in_every_order(name: str, which: int, option: str) -> None:
    k = suite.get(name)
    sizes = k.small_sizes[which]
    first = _emulated(name, which, OPTIONS[option], "forward")
    H.assert_all_same(
        first, H.suite_oracle(name, which), k.reduction_length(sizes), k.checked.outputs, what=name
    )
    for order in ("reversed", "shuffled"):
        again = _emulated(name, which, OPTIONS[option], order)
        for o, a, b in zip(k.checked.outputs, first, again):
            assert torch.equal(a, b), f"{name}.{o}: {order} order differs from forward (a race?)"


def test_the_emulation_is_the_mapping() -> None:
    """The emulated kernel's decisions are the GPU mapper's: blocks, threads, launch bounds."""
    k = suite.get("matmul")
    sizes = {"M": 100, "K": 50, "N": 70}
    opts = MappingOptions("naive").tile(32, 32, 32).map_to_blocks(4, 4).map_to_threads(16, 8)
    a, b = torch.randn(100, 50), torch.randn(50, 70)
    spec = tcjit.compile(tcjit.define(k.source, k.entry), a, b, options=opts, target="cuda-emulated")
    decisions = spec.stages["decisions"]
    assert "kernel over ['S0', 'S0_init']: grid (4, 3, 1), block (16, 8, 1)" in decisions, decisions
    assert "blocks of one launch: 4 x 3 x 1" in spec.source
    torch.testing.assert_close(spec(a, b), a @ b, rtol=1e-4, atol=1e-4)
    del sizes


def test_barriers_split_thread_loops() -> None:
    """Statements before and after a barrier run in separate loops over the threads; the barrier
    stays between them (where the emulation starts a new barrier interval)."""
    block = (4, 1, 1)
    s = ir.Run("S0", ())
    body = ir.Block((ir.Mark("sync", s), ir.Run("S1", ())))
    out = fission(body, block)
    barrier = ir.Mark("sync", ir.Block(()))
    assert out == ir.Block((ir.Threads(block, s), barrier, ir.Threads(block, ir.Block((ir.Run("S1", ()),)))))


def test_a_barrier_under_a_thread_dependent_loop_is_refused() -> None:
    body = ir.For(
        "c0", ir.Var("t0"), ir.Op("<", (ir.Var("c0"), ir.Int(8))), 4, ir.Mark("sync", ir.Run("S0", ()))
    )
    with pytest.raises(TCInternalError, match="thread ids"):
        fission(body, (4, 1, 1))


def test_unknown_orders_are_refused() -> None:
    with pytest.raises(tcjit.TCError, match="shuffled"), emulation_order("sideways"):
        pass


def test_cuda_itself_is_refused_plainly_on_cpu_tensors() -> None:
    """No silent fallback: target='cuda' on CPU tensors is an error, whatever is installed."""
    k = H.suite_kernel("matmul")
    with pytest.raises(tcjit.TCCallError, match="needs CUDA tensors"):
        k(*H.suite_inputs("matmul", 0), target="cuda")


SUMPOOL = """def sumpool(float(N,C,H,W) I) -> (O) {
    O(n, c, h, w) +=! I(n, c, 2 * h + r_kh, 2 * w + r_kw) where r_kh in 0:2, r_kw in 0:2
}"""


#: 32 x 8 threads: with one output, the outputs' band has one iteration and the threads go to the
#: window (the sizes-derived defaults would give the one output a single thread).
WINDOW_ON_THREADS = MappingOptions("naive").tile(32, 32, 32).map_to_threads(32, 8)


def test_a_barrier_orders_updates_of_one_element_by_several_threads() -> None:
    """With one output element, the scheduler walks the window as c = 2 r_kh + r_kw and the
    mapper puts r_kh on threads: thread r_kh updates at c = 2 r_kh and 2 r_kh + 1, so a barrier
    must follow every c. Without it, reversed threads add 1 + 0 first and 1e8 swallows it."""
    x = torch.tensor([[1e8, -1e8], [1.0, 0.0]]).reshape(1, 1, 2, 2)
    x = torch.cat([x, torch.zeros(1, 1, 2, 1)], dim=3)  # W = 3: one output column
    opts = WINDOW_ON_THREADS
    k = tcjit.define(SUMPOOL)
    spec = tcjit.compile(k, x, target="cuda-emulated", options=opts)
    assert "sync: after each iteration of the band over ['S0']" in spec.stages["decisions"]
    results = []
    for order in ("forward", "reversed", "shuffled"):
        with emulation_order(order):
            results.append(k(x, target="cuda-emulated", options=opts))
    assert [r.item() for r in results] == [1.0, 1.0, 1.0]


# ================================================== the oracle's programs, through the emulation
#: Option vectors for programs whose sizes are unknown here: a rotation, one per test.
ROTATION = [o for o in OPTIONS.values() if o is not None] + [None]


def _emulated_shim(module, name: str, kwargs: dict, i: int, monkeypatch) -> None:
    orders = ("forward", "reversed", "shuffled")
    shim = H.CompiledReference(ROTATION[i % len(ROTATION)], target="cuda-emulated")
    monkeypatch.setattr(module, "reference", shim)
    with warnings.catch_warnings(), emulation_order(orders[i % 3]):
        warnings.simplefilter("ignore", tcjit.TCWarning)  # the module's own tests check the warnings
        getattr(module, name)(**kwargs)
    assert shim.calls > 0, f"{name} ran no program"


@pytest.mark.parametrize("name, kwargs, i", TCP._params(TCP.PROGRAM_CASES))
def test_reference_program_emulated(name: str, kwargs: dict, i: int, monkeypatch) -> None:
    """test_reference_programs.py with every ``evaluate`` run through the emulated CUDA target
    (a rotating option vector and order) and checked against the oracle."""
    _emulated_shim(TRP, name, kwargs, i, monkeypatch)


@pytest.mark.parametrize(
    "name, kwargs, i",
    TCP._params(
        TCP.KERNEL_CASES,
        full_only=frozenset(
            {"test_suite_kernel_matches_torch", "test_temporaries_give_the_same_final_outputs"}
        ),
    ),
)
def test_reference_kernel_emulated(name: str, kwargs: dict, i: int, monkeypatch) -> None:
    """test_reference_kernels.py through the emulated CUDA target."""
    _emulated_shim(TRK, name, kwargs, i, monkeypatch)


# ============================================ the tuner's contract: any point of the search space
SPACE = search_space("cuda-emulated")


@st.composite
def space_points(draw) -> MappingOptions:
    """A point of the CUDA search space, drawn gene by gene as the tuner does."""
    return SPACE.decode([draw(st.integers(0, len(p.choices) - 1)) for p in SPACE.parameters])


@settings(max_examples=examples(15, 200), derandomize=examples(True, False), **FUZZ.SETTINGS)
@given(
    program=FUZZ.programs(),
    options=space_points(),
    order=st.sampled_from(("forward", "reversed", "shuffled")),
)
def test_random_programs_at_random_points_of_the_search_space(program, options, order) -> None:
    """Every drawn point must compile and give the oracle's answer under emulation."""
    H.check_fuzz_program_emulated(program, options, order, what="emulated fuzz")


def test_empty_reductions_hold_the_identity_emulated() -> None:
    """A reduced size of 0: every '!' reduction's initialisation still runs (its own launch)."""
    A, X = torch.empty(3, 0), torch.empty(3, 0, dtype=torch.int32)
    got = H.check_against_oracle(TCP.EMPTY_REDUCTIONS, None, (A, X), target="cuda-emulated")
    assert got[1].tolist() == [1.0] * 3 and got[6].item() == float("-inf")


# ============================================================== the race check of the emulation
MAXPOOL1 = """def maxpool_one(float(N,C,H,W) I) -> (O) {
    O(n, c, h, w) max=! I(n, c, 2 * h + r_kh, 2 * w + r_kw) where r_kh in 0:2, r_kw in 0:2
}"""


def test_a_missing_barrier_is_a_race_even_where_every_order_agrees(monkeypatch) -> None:
    """max= gives the same answer in any order, so only the shadow check sees that two threads
    update O(0, 0, 0, 0) in one barrier interval once the mapper places no barrier."""
    x = torch.randn(1, 1, 2, 3)
    opts = WINDOW_ON_THREADS
    k = tcjit.define(MAXPOOL1)
    got = k(x, target="cuda-emulated", options=opts)
    torch.testing.assert_close(got, H.as_tuple(H.ORACLE(MAXPOOL1, None, x))[0])
    monkeypatch.setattr(gpu._Mapper, "place_syncs", lambda self, sched, start: [])
    with pytest.raises(tcjit.TCInternalError, match="race") as info:
        tcjit.define(MAXPOOL1.replace("maxpool_one", "maxpool_one_without_barriers"))(
            x, target="cuda-emulated", options=opts
        )
    assert "element offset 0 of 'O'" in str(info.value)


def test_blocks_that_share_an_element_are_a_race(monkeypatch) -> None:
    """A (broken) mapper that took a reduction member for coincident puts it on blocks: two blocks
    then add into S, which the shadow check reports."""
    src = "def total(float(N) A) -> (S) { S +=! A(r_n) }"
    for module in (gpu_blocks, gpu_threads, gpu_reductions):  # every use the GPU mapper makes
        monkeypatch.setattr(module, "leading_coincident", lambda band: band.band_n_member())
    opts = MappingOptions("naive").tile(4).map_to_blocks(8).map_to_threads(1)
    with pytest.raises(tcjit.TCInternalError, match="race"):
        tcjit.define(src)(torch.randn(32), options=opts, target="cuda-emulated")


# ========================================== found by the full tier's fuzzing (kept as regressions)
TRIANGLE = "def tri(float(N) X) -> (O) { O(i, j) +=! X(0) where i in 0:N, j in 0:N, i <= j }"
TRIANGLE3 = """def tri3(float(N) X) -> (O) {
    O(i, j, k) = ((X(0) + (i >= 1 && i - 1 < N ? X(i - 1) : 1.5)) + X(i)) where j in 0:N, k in 0:N, i <= j
}"""


@pytest.mark.parametrize(
    "src, options",
    [
        (
            TRIANGLE,
            MappingOptions("naive")
            .outer_schedule_fusion_strategy("Max")
            .tile(1, 0, 0)
            .map_to_blocks(2)
            .map_to_threads(2),
        ),
        (
            TRIANGLE3,
            MappingOptions("naive")
            .outer_schedule_fusion_strategy("Max")
            .tile(0, 0, 1)
            .map_to_blocks(1, 1, 2)
            .map_to_threads(1, 2)
            .use_shared_memory(True),
        ),
    ],
    ids=["triangle", "triangle-promoted"],
)
def test_blocks_whose_instances_all_run_on_threads_above_0_are_launched(src, options) -> None:
    """Block i = 1 of O(i, j) where i <= j runs only j = 1, on thread 1: the grid was tightened with
    the thread ids pinned to 0, which dropped that block and left row 1 unwritten."""
    x = torch.randn(2)
    for order in ("forward", "reversed", "shuffled"):
        with emulation_order(order):
            H.check_against_oracle(src, None, (x,), options=options, target="cuda-emulated", what=order)


# ============================================== initialisations in the kernel of their update
MLP2 = """def mlp2(float(B,M) I, float(N,M) W1, float(P,N) W2) -> (O1, O2) {
    O1(b, n) +=! I(b, r_m) * W1(n, r_m)
    O2(b, p) +=! O1(b, r_n) * W2(p, r_n)
}"""


@pytest.mark.parametrize(
    "src, inputs, launches",
    [
        (suite.get("matmul").source, (torch.randn(37, 19), torch.randn(19, 45)), 1),
        (suite.get("maxpool2x2").source, (torch.randn(2, 3, 10, 14),), 1),
        (MLP2, (torch.randn(9, 7), torch.randn(6, 7), torch.randn(5, 6)), 2),
    ],
    ids=["matmul", "maxpool2x2", "mlp2"],
)
def test_initialisations_run_in_their_updates_launch_over_garbage(src, inputs, launches) -> None:
    """Default options (no block reduction): each ``!`` initialisation runs in the launch of its
    update, and outputs that start as NaN come out right in every order, with no race: an
    initialisation after an update, in another block, or in another thread without a barrier
    would leave a NaN, differ between orders or trip the race check."""
    k = tcjit.define(src)
    want = H.as_tuple(H.ORACLE(src, None, *inputs))
    results = []
    for order in ("forward", "reversed", "shuffled"):
        outs = tuple(torch.full_like(w, float("nan")) for w in want)
        with emulation_order(order):
            got = H.as_tuple(k(*inputs, outputs=outs, target="cuda-emulated"))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
        results.append(got)
    assert all(torch.equal(a, b) for r in results[1:] for a, b in zip(r, results[0]))
    spec = tcjit.compile(k, *inputs, target="cuda-emulated")
    assert spec.source.count("blocks of one launch") == launches, spec.stages["decisions"]
