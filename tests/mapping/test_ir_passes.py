"""The CPU target's IR passes on hand-built kernel IR: :mod:`tcjit.mapping.openmp_teams`,
:mod:`tcjit.mapping.reduction_forms` and :mod:`tcjit.mapping.tile_forms`.

Each test builds the loop nest a mapping could have produced (the statements come from a real Scop:
their dimensions and accesses are what the passes read), runs one pass, and checks the decision
it made, and that nothing else changed: the statement instances, in order."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tcjit.mapping import ir
from tcjit.mapping.ir_text import render
from tcjit.mapping.layout import contiguous_strides
from tcjit.mapping.openmp_teams import plan_teams
from tcjit.mapping.reduction_forms import folded_initialisations, plan_reductions, without_runs
from tcjit.mapping.tile_forms import TilingFacts
from tcjit.polyhedral.lang.check import check_source
from tcjit.polyhedral.scop import build_scop

MATMUL = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"
ROWSUM = "def rowsum(float(M,K) A) -> (O) { O(m) +=! A(m, r_k) }"
TWO = """def two(float(M,N) A) -> (B, C) {
    B(i, j) = A(i, j) * 2.0
    C(i, j) = B(i, j) + 1.0
}"""
FLIPPED = """def flipped(float(M,N) A) -> (B, C) {
    B(i, j) = A(i, j) * 2.0
    C(i, j) = B(M - 1 - i, j) + 1.0
}"""


def _kernel(src: str, sizes: dict, *, foldable=frozenset(), vector_bytes=32):
    """The checked def, its Scop's statements and the facts the passes read, at ``sizes``."""
    cdef = check_source(src).entry()
    statements = {s.name: s for s in build_scop(cdef, sizes).statements}
    strides = {
        t.name: contiguous_strides(tuple(int(s.evaluate(sizes)) for s in t.shape)) for t in cdef.tensor_infos
    }
    facts = TilingFacts(cdef, statements, sizes, strides, frozenset(), {}, vector_bytes, foldable=foldable)
    return cdef, statements, strides, facts


def _loop(var: str, n: int | ir.Expr, body: ir.Node, kind: str = "") -> ir.For:
    """``for (var = 0; var < n; var += 1) body``, run as ``kind`` says (``+``-joined kinds)."""
    bound = ir.Int(n) if isinstance(n, int) else n
    kinds = frozenset(ir.LoopKind(k) for k in kind.split("+") if k)
    return ir.For(var, ir.Int(0), ir.Op("<", (ir.Var(var), bound)), 1, body, kinds=kinds)


def _run(statement: str, *vars: str) -> ir.Run:
    return ir.Run(statement, tuple(ir.Var(v) for v in vars))


def _of(node: ir.Node, kind: type) -> list:
    return [n for n in ir.nodes(node) if isinstance(n, kind)]


# ----------------------------------------------------------------------------------- OpenMP teams
def _rows(statement: str) -> ir.For:
    return _loop("c0", 16, _loop("c1", 8, _run(statement, "c0", "c1")), "parallel")


def test_consecutive_parallel_loops_share_a_team_without_needless_barriers() -> None:
    cdef, statements, strides, _ = _kernel(TWO, {"M": 16, "N": 8})
    tree = ir.Block((_rows("S0"), _rows("S1")))
    planned = plan_teams(tree, cdef, statements, {"M": 16, "N": 8}, strides, frozenset())
    (team,) = planned.children
    assert isinstance(team, ir.Team)
    assert [(m.shared, m.nowait) for m in team.members] == [(True, True), (True, True)]
    assert ir.runs(planned) == ir.runs(tree)


def test_a_barrier_stays_where_a_loop_reads_rows_other_threads_wrote() -> None:
    cdef, statements, strides, _ = _kernel(FLIPPED, {"M": 16, "N": 8})
    tree = ir.Block((_rows("S0"), _rows("S1")))
    (team,) = plan_teams(tree, cdef, statements, {"M": 16, "N": 8}, strides, frozenset()).children
    assert [m.nowait for m in team.members] == [False, True]


def test_one_parallel_loop_needs_no_team() -> None:
    cdef, statements, strides, _ = _kernel(TWO, {"M": 16, "N": 8})
    serial = _loop("c0", 16, _loop("c1", 8, _run("S1", "c0", "c1")))
    tree = ir.Block((_rows("S0"), serial))
    planned = plan_teams(tree, cdef, statements, {"M": 16, "N": 8}, strides, frozenset())
    assert not _of(planned, ir.Team)
    assert planned == tree


# ----------------------------------------------------------------------------------- reduction forms
def test_a_reduction_loop_accumulates_in_a_register() -> None:
    _, _, _, facts = _kernel(ROWSUM, {"M": 4, "K": 100})
    sums = _loop("c1", 100, _run("S0", "c0", "c1"), "simd_reduction")
    tree = _loop("c0", 4, ir.Block((_run("S0_init", "c0"), sums)))
    planned = plan_reductions(tree, facts)
    (acc,) = _of(planned, ir.Accumulation)
    assert acc.vector and acc.lanes == 8  # 32-byte vectors of float32
    assert ir.runs(planned) == ir.runs(tree)


def test_a_loop_that_moves_the_updated_element_stays_as_written() -> None:
    _, _, _, facts = _kernel(ROWSUM, {"M": 4, "K": 100})
    tree = _loop("c0", 100, _loop("c1", 4, _run("S0", "c1", "c0"), "reduction"))  # c1 runs over rows
    assert plan_reductions(tree, facts) == tree


def test_a_parallel_reduction_keeps_one_partial_result_per_iteration() -> None:
    _, _, _, facts = _kernel(ROWSUM, {"M": 4, "K": 100})
    inner = ir.For(
        "c2", ir.Int(0), ir.Op("<", (ir.Var("c2"), ir.Int(10))), 1,
        ir.Run("S0", (ir.Var("c0"), ir.Op("+", (ir.Op("*", (ir.Int(10), ir.Var("c1"))), ir.Var("c2"))))),
    )  # fmt: skip
    tree = _loop("c0", 4, _loop("c1", 10, inner, "parallel_reduction"))
    (red,) = _of(plan_reductions(tree, facts), ir.ParallelReduction)
    assert red.count == 10 and red.first.statement == "S0"
    assert ir.opens_parallel(red)


# ------------------------------------------------------------------------------------ register tiles
def _matmul_nest(columns: int, kind: str = "accumulate", point: str = "simd") -> ir.Node:
    """Row ``c0`` of C: the reduction loop ``c1`` over ``r_k`` (marked ``kind``) around the point
    loop ``c2`` over ``columns`` columns of the row."""
    update = _run("S0", "c0", "c2", "c1")
    return _loop("c0", 4, _loop("c1", 6, _loop("c2", columns, update, point), kind))


@pytest.mark.parametrize(
    "columns, kind, point, form",
    [
        (8, "accumulate", "simd", "vector"),  # a whole vector of float32 per point row
        (5, "accumulate", "simd", "outer"),  # not a multiple of the vector: an array
        (5, "accumulate+simd_reduction", "unroll", "dot"),
    ],
)
def test_the_tile_form_follows_the_nest(columns: int, kind: str, point: str, form: str) -> None:
    _, _, _, facts = _kernel(MATMUL, {"M": 4, "K": 6, "N": columns})
    tree = _matmul_nest(columns, kind, point)
    (tile,) = _of(plan_reductions(tree, facts), ir.RegisterTile)
    assert tile.form == form and tile.name == "tc_r0" and tile.statement == "S0"
    assert tile.lanes == {"vector": 8, "outer": 1, "dot": 8}[form]  # 32-byte vectors of float32
    assert ir.runs(tile.loops[0]) == ir.runs(tree.body)  # the nest it replaces, unchanged


def test_a_tile_that_holds_whole_sums_starts_from_zero_and_folds_the_initialisation() -> None:
    _, _, _, facts = _kernel(MATMUL, {"M": 4, "K": 6, "N": 8}, foldable=frozenset({"S0"}))
    init = _loop("c0", 4, _loop("c1", 8, _run("S0_init", "c0", "c1")))
    tree = ir.Block((init, _matmul_nest(8)))
    planned = plan_reductions(tree, facts)
    (tile,) = _of(planned, ir.RegisterTile)
    assert tile.start == ()
    folded = folded_initialisations(planned, frozenset({"S0_init"}))
    assert folded == ("S0_init",)
    assert ir.runs(without_runs(tree, frozenset(folded))) == ir.runs(_matmul_nest(8))


def test_an_initialisation_stays_where_an_update_runs_outside_tiles() -> None:
    _, _, _, facts = _kernel(MATMUL, {"M": 4, "K": 6, "N": 8}, foldable=frozenset({"S0"}))
    plain = _loop("c0", 4, _loop("c1", 6, _loop("c2", 8, _run("S0", "c0", "c2", "c1"))))
    planned = plan_reductions(ir.Block((_matmul_nest(8), plain)), facts)
    assert folded_initialisations(planned, frozenset({"S0_init"})) == ()


def test_partial_tiles_get_a_copy_with_constant_bounds() -> None:
    _, _, _, facts = _kernel(MATMUL, {"M": 4, "K": 6, "N": 13}, foldable=frozenset())
    # columns 8 * c0' .. min(7, 12 - 8 * c3): full tiles of 8, then one of 5
    bound = ir.Op("min", (ir.Int(7), ir.Op("-", (ir.Int(12), ir.Op("*", (ir.Int(8), ir.Var("c3")))))))
    point = ir.For("c2", ir.Int(0), ir.Op("<=", (ir.Var("c2"), bound)), 1, None, kinds={ir.LoopKind.UNROLL})
    update = ir.Run(
        "S0", (ir.Var("c0"), ir.Op("+", (ir.Op("*", (ir.Int(8), ir.Var("c3"))), ir.Var("c2"))), ir.Var("c1"))
    )
    nest = _loop("c3", 2, _loop("c1", 6, replace(point, body=update), "accumulate"))
    (split,) = _of(plan_reductions(_loop("c0", 4, nest), facts), ir.FullTiles)
    assert split.conds == (
        ir.Op(">=", (ir.Op("-", (ir.Int(12), ir.Op("*", (ir.Int(8), ir.Var("c3"))))), ir.Int(7))),
    )
    assert split.full.points[0].cond == ir.Op("<=", (ir.Var("c2"), ir.Int(7)))
    assert split.full.name == split.rolled.name == "tc_r0"
    assert ir.LoopKind.UNROLL not in split.rolled.points[0].kinds


def test_a_tile_too_large_for_registers_is_left_as_written() -> None:
    _, _, _, facts = _kernel(MATMUL, {"M": 4, "K": 6, "N": 1024})
    tree = _matmul_nest(1024, point="unroll")
    assert plan_reductions(tree, facts) == tree


def test_the_ir_stage_shows_the_decisions() -> None:
    """``tcjit show --stage ir`` prints the planned IR: the tile, its form, lanes and start."""
    _, _, _, facts = _kernel(MATMUL, {"M": 4, "K": 6, "N": 8}, foldable=frozenset({"S0"}))
    text = render(plan_reductions(_matmul_nest(8), facts))
    assert "register tile tc_r0 (vector, 8 lanes) of S0 across c1:" in text, text
    assert "point tc_v = 0; (tc_v <= 0)  # unroll" in text, text
    assert "sums start from zero (each execution holds whole sums)" in text, text
