"""The GPU mapping (mapping/gpu.py), checked without a GPU and without a printer.

Each kernel's isl AST is built as the CUDA printer will build it and interpreted here in Python,
once per block id and thread id in the tightened launch bounds: every statement instance of the
program must run exactly once, in exactly one kernel, block and thread. Decisions (what went to
blocks and threads, innermost to x) and the tightened grid and block are checked on known cases.
"""

from __future__ import annotations

import itertools
from collections import Counter

import islpy as isl
import pytest

from tcjit.mapping import ir
from tcjit.mapping.gpu import barriers, folds_initialisations, map_gpu
from tcjit.mapping.gpu_ids import set_names
from tcjit.mapping.gpu_ir import BLOCK_IDS, THREAD0_MARK, THREAD_IDS
from tcjit.mapping.ir_isl import from_isl_ast
from tcjit.mapping.options import MappingOptions
from tcjit.mapping.prepare import tiled_schedule
from tcjit.polyhedral.lang.check import check_source

MATMUL = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"
SOFTMAX = """def softmax(float(N,D) I) -> (O, expsum, maxVal) {
    maxVal(n) max=! I(n, r_d)
    expsum(n) +=! exp(I(n, r_d) - maxVal(n))
    O(n, d) = exp(I(n, d) - maxVal(n)) / expsum(n)
}"""
ABS_SUM = "def abs_sum(float(M,N) A) -> (S) { S +=! fabs(A(r_m, r_n)) }"
CONV = """def conv(float(N,C,H,W) I, float(F,C,KH,KW) W1) -> (O) {
    O(n, f, h, w) +=! I(n, r_c, h + r_kh, w + r_kw) * W1(f, r_c, r_kh, r_kw)
}"""
SKEW = """def skew(float(N,D) I) -> (T, U) {
    T(n, d) = I(n, d) * 2
    U(n, d) = T(n, D - 1 - d) + 1
}"""


def _plan(src: str, sizes: dict, options: MappingOptions):
    cdef = check_source(src).entry()
    fold = folds_initialisations(options.values)  # the schedule the GPU's lowering maps
    scop, deps, fixed, sched = tiled_schedule(cdef, sizes, options.values, fold=fold)
    return scop, map_gpu(deps, sched, options.values, fixed)


def _value(e: ir.Expr, env: dict[str, int]) -> int:
    if isinstance(e, ir.Int):
        return e.value
    if isinstance(e, ir.Var):
        return env[e.name]
    a = [_value(x, env) for x in e.args]
    op = e.op
    if op == "neg":
        return -a[0]
    if op == "select":
        return a[1] if a[0] else a[2]
    table = {
        "+": lambda x, y: x + y,
        "-": lambda x, y: x - y,
        "*": lambda x, y: x * y,
        "min": min,
        "max": max,
        "floordiv": lambda x, y: x // y,
        "div": lambda x, y: x // y,
        "mod": lambda x, y: x % y,
        "<": lambda x, y: int(x < y),
        "<=": lambda x, y: int(x <= y),
        ">": lambda x, y: int(x > y),
        ">=": lambda x, y: int(x >= y),
        "==": lambda x, y: int(x == y),
        "&&": lambda x, y: int(bool(x) and bool(y)),
        "||": lambda x, y: int(bool(x) or bool(y)),
    }
    return table[op](*a)


def _run(node: ir.Node | None, env: dict[str, int], out: list) -> None:
    if node is None:
        return
    if isinstance(node, ir.Block):
        for c in node.children:
            _run(c, env, out)
    elif isinstance(node, ir.Mark):
        if node.name != THREAD0_MARK or all(env[t] == 0 for t in THREAD_IDS):
            _run(node.body, env, out)
    elif isinstance(node, ir.If):
        _run(node.then if _value(node.cond, env) else node.other, env, out)
    elif isinstance(node, ir.For):
        env = dict(env)
        env[node.var] = _value(node.init, env)
        while _value(node.cond, env):
            _run(node.body, env, out)
            if node.degenerate:
                break
            env[node.var] += node.step
    elif isinstance(node, ir.Run):
        out.append((node.statement, tuple(_value(a, env) for a in node.args)))
    else:
        raise AssertionError(node)


def _executed(plan, sizes: dict) -> tuple[Counter, Counter]:
    """Instances run (with multiplicity), and the (kernel, block, thread) that ran each."""
    runs: Counter = Counter()
    where: dict = {}
    for k, b, t, inst in instances_run(plan, sizes):
        runs[inst] += 1
        where[inst] = (k, b, t)
    return runs, Counter(where.values())


def instances_run(plan, sizes: dict):
    """Every statement instance each launch's isl AST runs, interpreted block by block and thread
    by thread: ``(kernel, block, thread, (statement, args))``."""
    for k, kernel in enumerate(plan.kernels):
        ast = isl.AstBuild.from_context(kernel.context).node_from_schedule(
            plan.schedule.intersect_domain(kernel.domain)
        )
        body = barriers(from_isl_ast(ast, params=dict(sizes)))
        for b in itertools.product(*(range(g) for g in kernel.grid)):
            for t in itertools.product(*(range(n) for n in kernel.block)):
                out: list = []
                _run(body, dict(zip(BLOCK_IDS, b)) | dict(zip(THREAD_IDS, t)), out)
                for inst in out:
                    yield k, b, t, inst


def _domain(scop, sizes: dict) -> set:
    points: set = set()
    cons = " and ".join(f"{p} = {sizes[p]}" for p in scop.params) or "0 = 0"
    fixed = isl.Set.read_from_str(scop.ctx, f"[{', '.join(scop.params)}] -> {{ : {cons} }}")
    dom = scop.domain.intersect_params(fixed)

    def add(p: isl.Point) -> None:
        space = p.get_space()
        n = space.dim(isl.dim_type.set)
        coords = tuple(int(p.get_coordinate_val(isl.dim_type.set, i).to_python()) for i in range(n))
        points.add((space.get_tuple_name(isl.dim_type.set), coords))

    dom.foreach_point(add)
    return points


OPTIONS = [
    MappingOptions("naive").tile(32, 32, 32).map_to_blocks(4, 4).map_to_threads(16, 8),
    MappingOptions("naive").tile(4, 8).map_to_blocks(2).map_to_threads(3, 5),  # fewer than needed
    MappingOptions("naive").tile(0).map_to_blocks(100, 100, 100).map_to_threads(64, 4, 4),
    MappingOptions("naive").outer_schedule_fusion_strategy("Max").tile(5, 3).map_to_threads(7),
    MappingOptions("naive").tile(4, 4, 4).map_to_threads(4, 2).unroll(8),
]
PROGRAMS = [
    (MATMUL, {"M": 13, "K": 7, "N": 11}),
    (SOFTMAX, {"N": 6, "D": 9}),
    (ABS_SUM, {"M": 5, "N": 3}),
    (CONV, {"N": 2, "C": 2, "H": 6, "W": 7, "F": 3, "KH": 3, "KW": 2}),
    (SKEW, {"N": 5, "D": 4}),
]


@pytest.mark.parametrize("options", OPTIONS, ids=["32x32", "small-grid", "untiled", "max-fusion", "unrolled"])
@pytest.mark.parametrize("src, sizes", PROGRAMS, ids=["matmul", "softmax", "abs_sum", "conv", "skew"])
def test_every_instance_runs_exactly_once(src: str, sizes: dict, options: MappingOptions) -> None:
    scop, plan = _plan(src, sizes, options)
    runs, _ = _executed(plan, sizes)
    twice = {i: n for i, n in runs.items() if n != 1}
    assert not twice, f"instances run more than once: {list(twice.items())[:5]}"
    assert set(runs) == _domain(scop, sizes), "\n".join(plan.decisions)


def _initialised_first_by_the_updating_thread(src: str, sizes: dict, options: MappingOptions):
    """Check, by running each launch's AST thread by thread, that every ``!`` initialisation
    runs in the kernel and block of every update of its element, before them, and in the same
    thread, unless a barrier follows it (a window reduced by the threads of a block, the
    initialisation on thread 0); return the plan."""
    scop, plan = _plan(src, sizes, options)
    first: dict = {}  # (update, element) -> (where, position) of its initialisation
    updates: list = []
    position = 0
    for k, b, t, (name, args) in instances_run(plan, sizes):
        position += 1
        if name.endswith("_init"):
            first[(name.removesuffix("_init"), args)] = ((k, b, t), position)
        elif scop.statement(name).kind == "update":
            updates.append((name, args, (k, b, t), position))
    assert first, "no initialisation ran"
    for name, args, where, pos in updates:
        n = len(scop.statement(name).source.lhs_vars)
        init = first.get((name, args[:n]))
        assert init is not None, f"{name}{args} has no initialisation before it"
        assert init[0][:2] == where[:2], f"{name}{args} runs in {where}, its initialisation in {init[0]}"
        if init[0] != where:
            assert any(d.startswith("sync: after child 0") for d in plan.decisions), (
                f"{name}{args} runs in thread {where[2]}, its initialisation in {init[0][2]}, no barrier"
            )
        else:
            assert init[1] < pos, f"{name}{args} runs before its initialisation"
    return plan


MLP2 = """def mlp2(float(B,M) I, float(N,M) W1, float(P,N) W2) -> (O1, O2) {
    O1(b, n) +=! I(b, r_m) * W1(n, r_m)
    O2(b, p) +=! O1(b, r_n) * W2(p, r_n)
}"""
POOL = """def pool(float(N,H,W) I) -> (O) {
    O(n, h, w) max=! I(n, 2 * h + r_kh, 2 * w + r_kw) where r_kh in 0:2, r_kw in 0:2
}"""


@pytest.mark.parametrize("options", OPTIONS, ids=["32x32", "small-grid", "untiled", "max-fusion", "unrolled"])
@pytest.mark.parametrize(
    "src, sizes",
    [PROGRAMS[0], PROGRAMS[3], (MLP2, {"B": 5, "M": 4, "N": 6, "P": 3}), (POOL, {"N": 2, "H": 6, "W": 5})],
    ids=["matmul", "conv", "mlp2", "pool"],
)
def test_an_initialisation_runs_in_the_thread_of_its_updates_before_them(
    src: str, sizes: dict, options: MappingOptions
) -> None:
    """Without block reductions, a ``!`` initialisation is no launch of its own: it runs in the
    kernel, block and thread that then update its element, before the first update. Its
    absence from a kernel, or a kernel of initialisations alone, would fail here."""
    plan = _initialised_first_by_the_updating_thread(src, sizes, options)
    for k in plan.kernels:
        names = set_names(k.domain)
        assert not all(n.endswith("_init") for n in names), f"a launch of initialisations: {names}"


def test_a_block_reduction_keeps_its_initialisation_launch() -> None:
    """With ``match_library_calls`` the initialisation of a block reduction (here spread over
    blocks, its sums added atomically) is a launch before the reduction's: every block's
    atomic addition must follow it."""
    opts = MappingOptions("naive").tile(1, 64).match_library_calls(True).map_to_threads(32)
    cdef = check_source(ABS_SUM).entry()
    sizes = {"M": 5, "N": 64}
    scop, deps, fixed, sched = tiled_schedule(cdef, sizes, opts.values, distribute=True)
    plan = map_gpu(deps, sched, opts.values, fixed, scop=scop)
    assert any("added atomically" in d for d in plan.decisions), plan.decisions
    assert [set_names(k.domain) for k in plan.kernels][:1] == [["S0_init"]], plan.decisions


def test_launches_join_where_the_same_threads_read_what_they_wrote() -> None:
    """mlp3: the scheduler gives a layer's initialisation, sum and ``fmax`` bands of their own,
    mapped on the same grid and threads; each element is initialised, summed into and rectified
    by one thread, so each layer is one launch (no barrier between). A layer reads the previous
    layer's outputs across threads (``O1(b, r_n)``): the layers stay apart."""
    plan = _lowered("mlp3")
    layers = [{"S0_init", "S0", "S1"}, {"S2_init", "S2", "S3"}, {"S4_init", "S4", "S5"}]
    assert [set(set_names(k.domain)) for k in plan.kernels] == layers, plan.decisions


def test_matmul_maps_tiles_to_blocks_and_points_to_threads_innermost_to_x() -> None:
    opts = MappingOptions("naive").tile(32, 32, 32).map_to_blocks(4, 4).map_to_threads(16, 8)
    _, plan = _plan(MATMUL, {"M": 100, "K": 50, "N": 70}, opts)
    update = plan.kernels[-1]
    assert update.grid == (4, 3, 1)  # ceil(100 / 32), ceil(70 / 32): tightened below 4 x 4
    assert update.block == (16, 8, 1)
    want = "threads: members [0, 1] of the band over ['S0'] -> x (16), y (8) (innermost to x)"
    assert want in plan.decisions
    ast = isl.AstBuild.from_context(update.context).node_from_schedule(
        plan.schedule.intersect_domain(update.domain)
    )
    code = ast.to_C_str()
    assert "c4 = t0" in code and "32 * b1 + c4" in code  # n, the last subscript, follows threadIdx.x


def test_launch_bounds_shrink_to_the_problem() -> None:
    opts = MappingOptions("naive").tile(32, 32, 32).map_to_blocks(256, 256).map_to_threads(32, 32)
    _, plan = _plan(MATMUL, {"M": 5, "K": 3, "N": 7}, opts)
    assert plan.kernels[-1].grid == (1, 1, 1)
    assert plan.kernels[-1].block == (7, 5, 1)


def test_a_whole_tensor_reduction_runs_on_one_thread() -> None:
    _, plan = _plan(ABS_SUM, {"M": 5, "N": 3}, OPTIONS[0])
    assert all(k.grid == (1, 1, 1) and k.block == (1, 1, 1) for k in plan.kernels)
    assert any("thread 0 runs it" in d for d in plan.decisions)


def test_unfused_statements_are_launches_in_order_joined_where_a_thread_reads_its_own() -> None:
    """Unfused softmax: thread ``n`` computes ``maxVal(n)`` and then ``expsum(n)`` (one launch);
    ``O(n, d)`` is mapped over ``d`` too and reads ``expsum(n)`` from another thread: its own
    launch, last."""
    _, plan = _plan(SOFTMAX, {"N": 6, "D": 9}, OPTIONS[0])
    assert [set_names(k.domain) for k in plan.kernels] == [["S0", "S0_init", "S1", "S1_init"], ["S2"]]
    joined = [d for d in plan.decisions if "in the launch of" in d]
    assert joined == [
        "kernel over ['S1', 'S1_init']: in the launch of ['S0', 'S0_init'] (every element it reads"
        " from there written by the same thread)"
    ], plan.decisions


# ====================================================== the default GPU mapping at the suite's sizes
def _lowered(name: str):
    from tcjit import suite
    from tcjit.mapping.defaults import default_options
    from tcjit.mapping.lower_gpu import lower_gpu

    k = suite.get(name)
    cdef = check_source(k.source).entry(k.entry)
    sizes = dict(k.gpu_sizes[0])
    return lower_gpu(cdef, sizes, default_options(cdef, sizes, "cuda").validate("cuda").values).plan


def test_threads_go_above_a_sequential_window_loop() -> None:
    """maxpool2x2's window is a sequential loop below its outputs' band: the threads take the
    outputs (8 x 32 per block) and each initialises its element and reduces its window alone, in
    one launch, with no barrier; mapped to the window instead, a block had 2 threads and a
    barrier after every step."""
    plan = _lowered("maxpool2x2")
    mapped = "threads: members [2, 3] of the band over ['S0', 'S0_init'] -> x (32), y (8) (innermost to x)"
    assert mapped in plan.decisions
    assert not any(d.startswith("sync") for d in plan.decisions)
    assert [(k.grid, k.block) for k in plan.kernels] == [((64, 128, 7), (32, 8, 1))]


def test_a_sequence_without_a_band_above_is_one_launch_per_statement_group() -> None:
    """mlp3's layers were one kernel without a band to map to blocks: a single block ran them.
    Each group is its own launch now, with a grid of its own. (cosine's norms, once the same,
    are one kernel under a band over its rows: tests/gpu/test_distribution.py.)"""
    for name in ("mlp3",):  # a launch per layer (its statements join: see above)
        plan = _lowered(name)
        assert len(plan.kernels) == 3, name
        assert all(k.grid[0] > 1 for k in plan.kernels), name
        assert not any("blocks: none (no band)" in d for d in plan.decisions), name


def test_default_gpu_grids_cover_the_outputs() -> None:
    """Every tile its own block: gconv at its first GPU size has one block per (n, g, f), its
    58 x 58 outputs on 32 x 8 threads (the grid cap of 256 x 256 with 32-wide tiles gave 1 block)."""
    plan = _lowered("gconv")
    assert [(k.grid, k.block) for k in plan.kernels] == [((32, 32, 4), (32, 8, 1))]


def test_launches_stay_apart_where_a_block_reads_another_blocks_results() -> None:
    """kronecker3's ``Y`` sums ``XW1(m, r_n0, d1, d2)`` over every ``n0``, which tiles of ``n0``
    on other blocks wrote; the thread ids alone agree. (The block ids once entered the check as
    the filters' parameters, which paired only instances of the same block: the launches were
    joined and the emulated target found the race.)"""
    from tcjit import suite

    k = suite.get("kronecker3")
    opts = MappingOptions("naive").tile(4, 4, 4).map_to_blocks(8, 8).map_to_threads(4, 4).unroll(8)
    _, plan = _plan(k.source, dict(k.small_sizes[1]), opts)
    assert [set_names(kk.domain) for kk in plan.kernels] == [
        ["S0", "S0_init"],
        ["S1", "S1_init"],
        ["S2", "S2_init"],
    ], plan.decisions
