"""The polyhedral core: Scops, dependences, fused and tiled schedules, and the legality check."""

from __future__ import annotations

import islpy as isl
import pytest

from tcjit.polyhedral.errors import TCInternalError
from tcjit.polyhedral.lang.check import check_source
from tcjit.polyhedral.schedule import FUSION_STRATEGIES, bands, check_legality, schedule, tile
from tcjit.polyhedral.scop import build_scop, compute_dependences
from tcjit.suite import SUITE

FCRELU = SUITE["fcrelu"].source


def _count(uset: isl.UnionSet) -> int:
    points = []
    uset.foreach_point(points.append)
    return len(points)


def _def(src: str, entry: str | None = None):
    return check_source(src).entry(entry)


def _scop(src: str, sizes=None, entry=None):
    return build_scop(_def(src, entry), sizes)


def test_statements_domains_and_tagged_accesses():
    scop = _scop(FCRELU)
    assert [(s.name, s.kind) for s in scop.statements] == [
        ("S0_init", "init"),
        ("S0", "update"),
        ("S1", "assign"),
    ]
    assert scop.params == ("B", "M", "N")
    text = scop.describe()
    assert "S0[b, n, r_m] : 0 <= b < B and 0 <= n < N and 0 <= r_m < M" in text
    assert "reads  [B, M, N] -> { S0[b, n, r_m] -> W[a0 = n, a1 = r_m] :" in text
    refs = [a.ref for a in scop.accesses]
    assert len(refs) == len(set(refs)), "every access has its own reference id"
    assert {a.tensor for a in scop.accesses if a.write} == {"O"}


def test_specialised_scop_has_no_parameters():
    scop = _scop(FCRELU, {"B": 3, "M": 5, "N": 2})
    assert scop.params == () and scop.sizes == {"B": 3, "M": 5, "N": 2}
    assert _count(scop.domain) == 3 * 2 + 3 * 2 * 5 + 3 * 2


def test_gathers_may_touch_their_whole_dimension():
    scop = _scop("def lut(float(V, D) T, int64(B) I) -> (O) { O(b, d) = T(I(b), d) }")
    gathers = [a for a in scop.accesses if not a.exact]
    assert [a.tensor for a in gathers] == ["T"]
    assert "0 <= a0 < V" in scop.describe()


def test_domain_conditions_restrict_domains():
    src = """def pad(float(H) I, float(K) W) -> (O) {
        O(h) +=! I(h + r_k - 1) * W(r_k) where r_k in 0:K, h in 0:H, h + r_k - 1 >= 0, h + r_k - 1 < H
    }"""
    scop = _scop(src, {"H": 5, "K": 3})
    # 5 * 3 points less the two that would read I(-1) and I(5)
    update = scop.domain.intersect(isl.UnionSet.read_from_str(scop.ctx, "{ S0[h, r_k] }"))
    assert _count(update) == 13


def test_affine_lhs_initialises_what_it_reaches():
    scop = _scop("def t(float(L) A, float(K) W) -> (O) { O(2 * i + k) +=! A(i) * W(k) }", {"L": 4, "K": 1})
    init = scop.domain.intersect(isl.UnionSet.read_from_str(scop.ctx, "{ S0_init[e] }"))
    assert _count(init) == 4  # elements 0, 2, 4, 6 only


def test_dependences_of_a_reduction():
    scop = _scop(SUITE["matmul"].source)
    deps = compute_dependences(scop)
    assert not deps.reduction.is_empty()
    # initialisation before update, element by element
    init_to_update = isl.UnionMap.read_from_str(
        scop.ctx, "[M, K, N] -> { S0_init[m, n] -> S0[m, n, k] : 0 <= m < M and 0 <= n < N and 0 <= k < K }"
    )
    assert init_to_update.is_subset(deps.flow.union(deps.false))


CASES = [(sk.name, fusion) for sk in SUITE.values() for fusion in FUSION_STRATEGIES]


@pytest.mark.parametrize(("name", "fusion"), CASES)
def test_every_schedule_and_every_tiling_is_legal(name, fusion, full_tier):
    """Scheduled over the sizes (checked inside schedule()), tiled, and checked at concrete sizes."""
    sk = SUITE[name]
    scop = build_scop(_def(sk.source, sk.entry))
    deps = compute_dependences(scop)
    s = schedule(scop, deps, fusion=fusion)
    assert s.get_domain().is_equal(scop.domain)
    for sizes in sk.small_sizes if full_tier else sk.small_sizes[1:2]:
        for tiles in [(4,), (32, 32), (3, 0, 5), (1, 1, 1, 1)]:
            check_legality(tile(s, tiles), deps, sizes=sizes)


@pytest.mark.full
@pytest.mark.parametrize("name", ["matmul", "fcrelu", "softmax", "maxpool2x2"])
def test_specialised_scops_schedule_legally(name):
    """fix_parameters_before_scheduling: the sizes are constants for isl's scheduler."""
    sk = SUITE[name]
    for fusion in FUSION_STRATEGIES:
        scop = build_scop(_def(sk.source, sk.entry), sk.small_sizes[1])
        deps = compute_dependences(scop)
        check_legality(tile(schedule(scop, deps, fusion=fusion), (4, 4)), deps)


def test_fusion_strategies_differ():
    cdef = _def(SUITE["mlp3"].source)
    widths = {}
    for fusion in FUSION_STRATEGIES:
        scop = build_scop(cdef, SUITE["mlp3"].small_sizes[1])
        s = schedule(scop, compute_dependences(scop), fusion=fusion)
        widths[fusion] = len(bands(s, outermost=True))
    assert widths["Max"] < widths["Preserve3Coincident"] < widths["Min"]


def test_legality_check_catches_a_broken_schedule():
    src = """def two(float(N) A) -> (C) {
        B(i) = A(i) * 2
        C(i) = B(N - 1 - i)
    }"""
    scop = _scop(src, {"N": 8})
    deps = compute_dependences(scop)
    check_legality(schedule(scop, deps), deps)
    # Fused into one loop, C(i) would read B(N - 1 - i) before it is written: illegal.
    fused = isl.Schedule.from_domain(scop.domain).insert_partial_schedule(
        isl.MultiUnionPwAff.read_from_str(scop.ctx, "[{ S0[i] -> [(i)]; S1[i] -> [(i)] }]")
    )
    with pytest.raises(TCInternalError, match="violates dependences"):
        check_legality(fused, deps)


def test_tile_sizes_and_untiled_members():
    scop = _scop(SUITE["matmul"].source, {"M": 64, "K": 16, "N": 64})
    s = schedule(scop, compute_dependences(scop), fusion="Max")
    outer = bands(tile(s, (32, 0, 8)), outermost=True)[0]
    text = str(outer.band_get_partial_schedule())
    assert "floor((m)/32)" in text and "floor((r_k)/8)" in text
    assert "floor((n)/1073741824)" in text  # untiled: one tile covers the whole range
    assert tile(s, ()) is s and tile(s, (0, 0)) is s
