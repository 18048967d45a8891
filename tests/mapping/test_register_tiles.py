"""Register tiles (mapping/cpu_register_tiles.py, ``register_tile``; mapping/tile_forms.py;
printed by c_tiles.py, ``register_tile``).

Each form is recognised where it should be (the mapping's decision and the kernel IR's
:class:`~tcjit.mapping.ir.RegisterTile` nodes say so), refused where
it must not apply, and computes what the oracle computes at sizes with full tiles, partial tiles
and (dot-product form) a strip-mining tail. The outer-product form keeps every element's updates
in schedule order, so its results are bit-identical to the same kernel without register tiles.
"""

from __future__ import annotations

import compiled_helpers as H
import pytest
import torch

import tcjit
from tcjit.cpu_runtime import vector_bytes
from tcjit.mapping import ir
from tcjit.mapping.layout import contiguous_strides
from tcjit.mapping.lower_cpu import lower_cpu
from tcjit.mapping.options import MappingOptions
from tcjit.pipeline import lowered
from tcjit.polyhedral.lang.check import check_source

MATMUL = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"
TMM = "def tmm(float(M,K) A, float(N,K) B) -> (C) { C(m, n) +=! A(m, r_k) * B(n, r_k) }"
CONV = """def conv(float(N,C,H,W) I, float(F,C,KH,KW) W1) -> (O) {
    O(n, f, h, w) +=! I(n, r_c, h + r_kh, w + r_kw) * W1(f, r_c, r_kh, r_kw)
}"""
GCONV = """def gconv(float(N,G,C,H,W) I, float(G,F,C,KH,KW) W1) -> (O) {
    O(n, g, f, h, w) +=! I(n, g, r_c, h + r_kh, w + r_kw) * W1(g, f, r_c, r_kh, r_kw)
}"""
ROWSUM = "def rowsum(float(M,K) A) -> (S) { S(m) +=! A(m, r_k) }"

OPTS = MappingOptions("naive").vectorize(True).tile(64, 256, 512).register_tile(4, 16)


#: The vector width the source-level checks below assume: AVX2's 32 bytes (8 floats), whatever this
#: machine has (an AVX-512 host compiles with 64), so that their figures hold on every CI machine.
VECTOR_BYTES = 32

#: How many times wider than :data:`VECTOR_BYTES` this machine's vectors are (2 with AVX-512): the
#: compiled checks scale their column counts by it, so "whole vectors" and "a partial tile" stay so.
WIDTH = max(1, vector_bytes() // VECTOR_BYTES)


def _lowered(src: str, sizes: dict, options=OPTS):
    """The lowered CPU kernel at :data:`VECTOR_BYTES`-wide vectors (not this machine's width)."""
    cdef = check_source(src).entry()
    strides = {
        t.name: contiguous_strides(tuple(int(s.evaluate(sizes)) for s in t.shape)) for t in cdef.tensor_infos
    }
    return lower_cpu(cdef, dict(sizes), strides, options.validate("cpu").values, vector_bytes=VECTOR_BYTES)


def _tiles(low) -> list[ir.RegisterTile]:
    """The register tiles of a lowered kernel's IR (both copies of a split one)."""
    return [n for n in ir.nodes(low.kernel_ir) if isinstance(n, ir.RegisterTile)]


#: The tile forms (:data:`tcjit.mapping.ir.TILE_FORMS`) of each form the mapping decides.
FORMS = {"outer-product form": {"outer", "vector"}, "dot-product form": {"dot"}}


def _inputs(shapes, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*s, generator=g, dtype=dtype) for s in shapes)


@pytest.mark.parametrize(
    "src, sizes, form",
    [
        (MATMUL, {"M": 16, "K": 20, "N": 40}, "outer-product form"),
        (TMM, {"M": 9, "K": 35, "N": 7}, "dot-product form"),
        (CONV, {"N": 1, "C": 3, "H": 10, "W": 21, "F": 2, "KH": 3, "KW": 3}, "outer-product form"),
        (GCONV, {"N": 1, "G": 2, "C": 4, "H": 8, "W": 19, "F": 3, "KH": 3, "KW": 3}, "outer-product form"),
    ],
    ids=["matmul", "tmm", "conv", "gconv"],
)
def test_forms_are_recognised(src: str, sizes: dict, form: str) -> None:
    low = _lowered(src, sizes)
    assert "register tile" in low.stages["decisions"], low.stages["decisions"]
    assert {t.form for t in _tiles(low)} <= FORMS[form] and _tiles(low)


def test_no_tile_without_shared_operands() -> None:
    """A row sum shares nothing between rows: no register tile (it would only add passes)."""
    low = _lowered(ROWSUM, {"M": 64, "K": 100})
    assert "register tile" not in low.stages["decisions"]
    assert not _tiles(low)


@pytest.mark.parametrize(
    "M, K, N",
    [(1, 1, 1), (3, 8, 3), (4, 16, 16), (7, 13, 33), (12, 37, 48), (5, 64, 17)],
)
@pytest.mark.parametrize("src", [MATMUL, TMM], ids=["matmul", "tmm"])
def test_contractions_match_the_oracle(src: str, M: int, K: int, N: int) -> None:
    """Full tiles, partial tiles, K below, at and above the lane count (the tail loop)."""
    b_shape = (K, N) if src is MATMUL else (N, K)
    A, B = _inputs([(M, K), b_shape])
    H.check_against_oracle(src, None, (A, B), options=OPTS, reduction_length=K)


@pytest.mark.parametrize("op", ["max=!", "min=!", "*=!", "+=!"])
def test_dot_product_form_with_every_reduction(op: str) -> None:
    """Lanes start at the operator's identity and are combined with it after the loop."""
    src = f"def d(float(M,K) A, float(N,K) B) -> (C) {{ C(m, n) {op} A(m, r_k) * B(n, r_k) }}"
    A, B = _inputs([(7, 29), (5, 29)])
    if op == "*=!":
        A, B = 1 + 0.01 * A, 1 + 0.01 * B
    low = _lowered(src, {"M": 7, "K": 29, "N": 5})
    assert {t.form for t in _tiles(low)} == {"dot"}
    H.check_against_oracle(src, None, (A, B), options=OPTS, reduction_length=29)


def test_float64_and_half_dot_products() -> None:
    for dtype in (torch.float64, torch.float16):
        t = "double" if dtype == torch.float64 else "half"
        src = f"def d({t}(M,K) A, {t}(N,K) B) -> (C) {{ C(m, n) +=! A(m, r_k) * B(n, r_k) }}"
        A, B = _inputs([(6, 21), (4, 21)], dtype=torch.float32)
        H.check_against_oracle(src, None, (A.to(dtype), B.to(dtype)), options=OPTS, reduction_length=21)


@pytest.mark.parametrize("src, shapes", [
    (MATMUL, [(13, 11), (11, 37)]),
    (CONV, [(2, 3, 9, 23), (4, 3, 3, 3)]),
    (GCONV, [(1, 2, 4, 7, 20), (2, 3, 4, 3, 3)]),
])  # fmt: skip
def test_outer_product_form_is_bit_identical_to_no_tiles(src: str, shapes) -> None:
    inputs = _inputs(shapes)
    kernel = tcjit.define(src)
    tiled = H.as_tuple(kernel(*inputs, options=OPTS))
    plain = H.as_tuple(kernel(*inputs, options=OPTS.register_tile()))
    assert all(torch.equal(a, b) for a, b in zip(tiled, plain))
    H.check_against_oracle(src, None, inputs, options=OPTS, reduction_length=64)


@pytest.mark.parametrize(
    "sizes, tile, copies",
    [
        ({"M": 128, "K": 64, "N": 256}, (4, 2, 1), 1),  # 3 divides neither 64 (the tile) nor 256
        ({"M": 48, "K": 64, "N": 48}, (3, 3, 1), 1),  # 3 divides both (and 4, but 3x3 is larger)
        ({"M": 7, "K": 29, "N": 5}, (3, 3, 1), 2),  # nothing divides a prime: the largest tile
    ],
)
def test_tile_sizes_that_leave_no_partial_tiles_come_first(sizes: dict, tile: tuple, copies: int) -> None:
    """Partial tiles cost a second copy of the tile's code (the C compiler's time, not speed)."""
    low = _lowered(TMM, sizes)
    assert f"register tile {tile} (dot-product form)" in low.stages["decisions"], low.stages["decisions"]
    assert [t.form for t in _tiles(low)] == ["dot"] * copies
    assert low.source.count("register tile (dot-product form") == copies
    A, B = _inputs([(sizes["M"], sizes["K"]), (sizes["N"], sizes["K"])])
    H.check_against_oracle(TMM, None, (A, B), options=OPTS, reduction_length=sizes["K"])


def test_partial_tiles_are_not_unrolled() -> None:
    """The partial copy's point loops have variable bounds: they are not unrolled (and the C has no
    unroll pragma on them); the full copy's have constant bounds."""
    low = _lowered(TMM, {"M": 7, "K": 29, "N": 5})
    (split,) = [n for n in ir.nodes(low.kernel_ir) if isinstance(n, ir.FullTiles)]
    assert all(ir.LoopKind.UNROLL not in p.kinds for p in split.rolled.points)
    assert all(isinstance(p.cond.args[1], ir.Int) for p in split.full.points if not p.degenerate)
    src = low.source
    partial = src[src.index("} else {") :]
    assert "tc_min_i64(" in partial
    for line, following in zip(partial.splitlines(), partial.splitlines()[1:]):
        if "tc_min_i64(" in following and following.lstrip().startswith("for"):
            assert "GCC unroll" not in line, (line, following)


# ------------------------------------------------------------------------- vector register tiles
SCALED = """def scaled(float(M,K) A, float(K,N) B, float s) -> (C) {
    C(m, n) +=! (A(m, r_k) - s) * B(r_k, n) * 2.0 + -B(r_k, n)
}"""
SHIFTED = """def conv1d(float(M,K) A, float(N) X, float(K,R) W) -> (O) {
    O(m, n) +=! A(m, r_k) * X(n + r_r) * W(r_k, r_r) where n in 0:N-R+1
}"""


@pytest.mark.parametrize(
    "src, shapes, scalars",
    [
        # Column counts for 8-float vectors, times WIDTH on wider machines.
        (MATMUL, [(13, 11), (11, 48 * WIDTH)], ()),  # 48 columns: 16-wide tiles of 2 vectors
        (MATMUL, [(8, 5), (5, 40 * WIDTH)], ()),  # 40 = 2 x 16 + 8: full tiles and a partial one
        (CONV, [(2, 3, 9, 32 * WIDTH + 2), (4, 3, 3, 3)], ()),  # 32 output columns, w + r_kw subscripts
        (SCALED, [(9, 7), (7, 32 * WIDTH)], (1.5,)),  # scalars, literals, - and unary minus
        (SHIFTED, [(6, 5), (32 * WIDTH + 4,), (5, 5)], ()),  # n + r_r, a where-bounded range
    ],
    ids=["matmul", "matmul-partial", "conv", "scaled", "shifted"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_vector_tiles_are_bit_identical_to_no_tiles(src: str, shapes, scalars, dtype) -> None:
    """The outer-product form in vector registers (GCC vector types: a micro-kernel) is used where
    the vector loop holds whole vectors, and keeps every element's updates in schedule order."""
    inputs = (*(x.to(dtype) for x in _inputs(shapes)), *scalars)
    if dtype == torch.float64:
        src = src.replace("float(", "double(").replace("float s", "double s")
    kernel = tcjit.define(src)
    opts = OPTS.register_tile(4, 16 * WIDTH)
    source = tcjit.compile(kernel, *inputs, options=opts).source
    assert "register tile (outer-product form, vectors of" in source
    tiled = H.as_tuple(kernel(*inputs, options=opts))
    plain = H.as_tuple(kernel(*inputs, options=opts.register_tile()))
    assert all(torch.equal(a, b) for a, b in zip(tiled, plain))
    H.check_against_oracle(src, None, inputs, options=opts, reduction_length=64)


def test_vector_tiles_need_unit_strides() -> None:
    """A column-major B moves by a whole column along the vector loop: no outer-product vectors
    (the mapper may pick the dot-product form). A column-major A is only broadcast: the vector
    form is kept. Both match the oracle."""
    A, B = _inputs([(12, 9), (32, 9)])
    kernel = tcjit.define(MATMUL)
    for inputs in ((A, B.t()), (A.t().contiguous().t(), B.t().contiguous())):
        source = tcjit.compile(kernel, *inputs, options=OPTS).source
        vector = "outer-product form, vectors of" in source
        assert vector == inputs[1].is_contiguous(), (vector, [x.stride() for x in inputs])
        H.check_against_oracle(MATMUL, None, inputs, options=OPTS, reduction_length=9)


def test_expanded_operands_are_broadcast_in_vector_tiles() -> None:
    """A column scale passed expanded (one element, stride 0) does not move along the vector
    loop: it is broadcast and the vector form is kept, where it fell back to scalar code."""
    src = (
        "def mmd(float(M,K) A, float(K,N) B, float(N) D) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) * D(n) }"
    )
    A, B = _inputs([(12, 9), (9, 16 * WIDTH)])
    D = torch.full((), 1.5).expand(16 * WIDTH)
    source = tcjit.compile(tcjit.define(src), A, B, D, options=OPTS).source
    assert "outer-product form, vectors of" in source
    H.check_against_oracle(src, None, (A, B, D), options=OPTS, reduction_length=9)


# ------------------------------------------------------- whole sums from zero, folded initialisations
#: A reduction where some outputs have no points at all: S(0) is the initialisation's zero alone.
TRIANGLE = """def tri(float(M,K) A) -> (S) {
    S(m) +=! A(m, r_k) where r_k in 0:K, r_k < m
}"""


def _folded(source: str) -> str:
    note = "left out, as register tiles start their sums from zero"
    line = next((x for x in source.splitlines() if note in x), "")
    return line.split(":", 1)[1].strip(" */") if line else ""


@pytest.mark.parametrize(
    "K, tile, start",
    [
        (20, (64, 256, 512), "whole"),  # the reduction in one tile
        (24, (64, 256, 8), "chunks"),  # in three whole chunks of a serial loop around the tile
        (20, (64, 256, 8), "loads"),  # in chunks of 8, 8 and 4: the last one's bounds vary
    ],
    ids=["whole-reduction", "reduction-in-whole-chunks", "reduction-in-uneven-chunks"],
)
def test_sums_start_from_zero_where_no_update_came_before(K: int, tile: tuple, start: str) -> None:
    """A vector tile that runs every reduction point of its outputs starts them from zero; one
    whose reduction an enclosing serial loop splits into whole chunks starts from zero in the
    first chunk (the loop's first iteration, where no update came before) and loads what it
    stored in the others. Either way the ``!`` initialisation, then dead, is left out of the
    kernel (its loops and parallel region with it). Where the chunks' bounds vary, the tile loads
    the sums and the initialisation stays. The results are bit-identical to the kernel without
    register tiles (0 + x is x), and to the oracle's tolerance."""
    A, B = _inputs([(16, K), (K, 32 * WIDTH)])  # whole tiles of 4 rows and 2 vectors
    kernel = tcjit.define(MATMUL)
    opts = OPTS.tile(*tile).register_tile(4, 16 * WIDTH)
    low = lowered(kernel.definition, {"M": 16, "K": K, "N": 32 * WIDTH}, opts)
    starts = {t.start for t in _tiles(low)}
    assert {t.form for t in _tiles(low)} == {"vector"}
    if start == "chunks":  # from zero where the chunk loop is at its first value
        ((pair,),) = starts
        assert pair[1] == 0
    else:
        assert starts == {() if start == "whole" else None}
    statements = {r.statement for r in ir.runs(low.kernel_ir)}
    assert ("S0_init" in statements) == (start == "loads")
    source = low.source
    assert ("whole sums from zero" in source) == (start == "whole")
    first = [x for x in source.splitlines() if "from zero where" in x]
    assert bool(first) == (start == "chunks"), first
    if first:  # the chunk loop's first value, then the loads of the later chunks
        loop = first[0].split("from zero where ")[1].split(" == ")[0]
        assert f"if ({loop} == 0) {{" in source and "} else {" in source
    assert _folded(source) == ("" if start == "loads" else "S0_init")
    assert ("(initialisation)" in source) == (start == "loads")
    tiled = kernel(A, B, options=opts)
    assert torch.equal(tiled, kernel(A, B, options=opts.register_tile()))
    H.check_against_oracle(MATMUL, None, (A, B), options=opts, reduction_length=K)


def test_partial_tiles_start_from_zero_too() -> None:
    """13 rows: three whole tiles of 4 rows and a partial one, printed in the scalar (outer) form,
    which starts its sums from zero as the whole tiles do: the initialisation is left out (a kernel
    with symbolic sizes always has partial tiles, and kept its initialisations before)."""
    A, B = _inputs([(13, 20), (20, 32 * WIDTH)])
    kernel = tcjit.define(MATMUL)
    opts = OPTS.register_tile(4, 16 * WIDTH)
    low = lowered(kernel.definition, {"M": 13, "K": 20, "N": 32 * WIDTH}, opts)
    tiles = _tiles(low)
    assert {(t.form, t.start) for t in tiles} == {("vector", ()), ("outer", ())}
    assert "S0_init" not in {r.statement for r in ir.runs(low.kernel_ir)}
    source = low.source
    assert source.count("whole sums from zero") == 2
    assert "S0_init (initialisation)" not in source
    assert _folded(source) == "S0_init"
    assert torch.equal(kernel(A, B, options=opts), kernel(A, B, options=opts.register_tile()))
    H.check_against_oracle(MATMUL, None, (A, B), options=opts, reduction_length=20)


def test_initialisations_of_empty_sums_are_covered_or_kept() -> None:
    """:func:`covered_initialisations`: a matmul's update writes every element its
    initialisation writes; a triangular sum's does not (row 0 has no points), so its
    initialisation may never be left out, and row 0 is the zero it stores."""
    from tcjit.mapping.prepare import _fixed, covered_initialisations
    from tcjit.polyhedral.scop import build_scop

    cases = ((MATMUL, {"M": 4, "K": 3, "N": 5}, {"S0_init"}), (TRIANGLE, {"M": 6, "K": 8}, set()))
    for src, sizes, covered in cases:
        scop = build_scop(check_source(src).entry())
        assert covered_initialisations(scop, _fixed(scop, sizes)) == covered, src
    (A,) = _inputs([(6, 8)])
    out = tcjit.define(TRIANGLE)(A, options=OPTS)
    assert out[0].item() == 0.0
    H.check_against_oracle(TRIANGLE, None, (A,), options=OPTS, reduction_length=8)


# -------------------------------------------------------------------- one team for the whole kernel
MLP2 = """def mlp2(float(B,M) I, float(N,M) W1, float(N) B1, float(P,N) W2) -> (O1, O2) {
    O1(b, n) +=! I(b, r_m) * W1(n, r_m)
    O1(b, n)  = fmax(O1(b, n) + B1(n), 0)
    O2(b, p) +=! O1(b, r_n) * W2(p, r_n)
}"""


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parallel_loops_share_one_team(threads: int) -> None:
    """Consecutive top-level parallel loops run in one ``omp parallel`` region, each shared out
    by an ``omp for`` (no barrier between them where each thread touches only its own rows of the
    batch, :func:`test_barriers_stay_where_a_loop_reads_what_other_threads_wrote`): the results
    match the oracle for any number of threads and are the same for all."""
    shapes = [(40, 24), (32, 24), (32,), (16, 32)]
    inputs = _inputs(shapes)
    kernel = tcjit.define(MLP2)
    opts = MappingOptions("naive").vectorize(True).tile(8, 16, 8)
    kernel_ir = lowered(kernel.definition, {"B": 40, "M": 24, "N": 32, "P": 16}, opts).kernel_ir
    (team,) = [n for n in kernel_ir.children if isinstance(n, ir.Team)]
    assert sum(m.shared for m in team.members) >= 3, team
    assert not any(ir.opens_parallel(n) for n in kernel_ir.children if not isinstance(n, ir.Team))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        got = kernel(*inputs, options=opts)
        torch.set_num_threads(1)
        one = kernel(*inputs, options=opts)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(got, one))
    H.check_against_oracle(MLP2, None, inputs, options=opts, reduction_length=32)


#: The product reads every row of O1, which the threads wrote between them.
MIX = """def mix(float(B,N) I, float(B,B) W) -> (O1, O2) {
    O1(b, n) = fmax(I(b, n), 0)
    O2(b, n) +=! W(b, r_c) * O1(r_c, n)
}"""


def _omp_fors(source: str, name: str) -> list[str]:
    entry = source[source.index(f"void tc_entry_{name}(") :]
    return [x.strip() for x in entry.splitlines() if "#pragma omp for" in x]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_barriers_stay_where_a_loop_reads_what_other_threads_wrote(threads: int) -> None:
    """:mod:`tcjit.mapping.barriers`: a team's ``omp for`` loops of as many iterations share them
    out to threads alike, so the barrier between two goes (``nowait``) where no iteration of the
    second touches what another iteration of the first wrote, or writes what it read. mlp2's
    loops each work on their own rows of the batch: none keeps its barrier (the last one's is the
    team's end). mix's product reads every row of ``O1``: the barrier before it stays, while its
    initialisation, which touches ``O2`` alone, needs none after the ``fmax``. The results match
    the oracle for any number of threads (1 and 3 split the iterations differently from 2)."""
    opts = MappingOptions("naive").vectorize(True).tile(8, 16, 8)
    cases = (
        (MLP2, {"B": 40, "M": 24, "N": 32, "P": 16}, [(40, 24), (32, 24), (32,), (16, 32)], 32, None),
        (MIX, {"B": 40, "N": 32}, [(40, 32), (40, 40)], 40, 1),
    )
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        for src, sizes, shapes, n, kept in cases:
            inputs = _inputs(shapes)
            low = lowered(check_source(src).entry(), sizes, opts)
            (team,) = [t for t in ir.nodes(low.kernel_ir) if isinstance(t, ir.Team)]
            shared = [m for m in team.members if m.shared]
            assert len(shared) >= 3, team
            waits = [k for k, m in enumerate(shared) if not m.nowait]
            assert waits == ([] if kept is None else [kept]), team
            fors = _omp_fors(low.source, low.symbol.removeprefix("tc_entry_"))
            assert [not x.endswith(" nowait") for x in fors] == [not m.nowait for m in shared], fors
            H.check_against_oracle(src, None, inputs, options=opts, reduction_length=n)
    finally:
        torch.set_num_threads(before)


def test_loops_are_counted_only_where_their_bounds_are_exact() -> None:
    """The barriers go only between loops of as many iterations, so those must be counted, not
    bounded: isl may leave ``min(5, 3)`` in a bound once sizes are substituted, whose interval is
    [3, 5]. Such a loop is not counted (it keeps its barrier); ``6 - 1`` is 5."""
    from tcjit.mapping import ir
    from tcjit.mapping.parts import constant_range

    c = ir.Var("c0")

    def loop(bound):
        return ir.For("c0", ir.Int(0), ir.Op("<=", (c, bound)), 1, ir.Block(()))

    assert constant_range(loop(ir.Op("-", (ir.Int(6), ir.Int(1))))) == range(0, 6)
    assert constant_range(loop(ir.Op("min", (ir.Int(5), ir.Int(3))))) is None
    assert constant_range(loop(ir.Op("+", (c, ir.Int(1))))) is None


@pytest.mark.parametrize("W, tile", [(34, (1, 1, 4, 1, 16)), (58, (1, 1, 8, 1, 8))])
def test_convolution_tiles_double_rows_where_columns_halve(W: int, tile: tuple) -> None:
    """The outer-product tile of a convolution is rows (h) x columns (w): neighbouring rows share
    input rows across the window, which the compiler loads once (filters x columns was tried and
    measured 20% slower on conv2d). Where 16 does not divide the columns (56 of them), 8-wide
    tiles take 8 rows instead of 4: as many sums, and no partial tiles."""
    sizes = {"N": 1, "C": 3, "H": 10, "W": W, "F": 8, "KH": 3, "KW": 3}
    low = _lowered(CONV, sizes)
    assert f"register tile {tile} (outer-product form)" in low.stages["decisions"], low.stages["decisions"]
    assert "vectors of 8" in low.source
    inputs = _inputs([(1, 3, 10, W), (8, 3, 3, 3)])
    H.check_against_oracle(CONV, None, inputs, options=OPTS, reduction_length=27)


# ------------------------------------------------------------- chains of reductions (weight gradients)
#: The weight gradient of a grouped convolution, as tcjit derives it: every weight sums over n, h
#: and w, which the scheduler puts in three bands below the free (g, f, c, kh, kw) members.
GBWD = """def gbwd(float(N,G,C,H,W) I, float(N,G,F,OH,OW) d_O, float(KH) kh, float(KW) kw) -> (d_W1) {
    d_W1(g, f, r_c, r_kh, r_kw) +=! d_O(n, g, f, h, w) * I(n, g, r_c, h + r_kh, w + r_kw)
        where n in 0:N, h in 0:OH, w in 0:OW, r_kh in 0:KH, r_kw in 0:KW
}"""
#: Two reductions and nothing shared between outputs: no register tile.
ROWSUM2 = "def rowsum2(float(M,R,K) A) -> (S) { S(m) +=! A(m, r_r, r_k) }"
#: A stride-2 convolution's weight gradient: I moves by two elements along w.
STRIDED = """def sbwd(float(N,C,H,W) I, float(N,F,OH,OW) d_O, float(KH) kh, float(KW) kw) -> (d_W1) {
    d_W1(f, r_c, r_kh, r_kw) +=! d_O(n, f, h, w) * I(n, r_c, 2 * h + r_kh, 2 * w + r_kw)
        where n in 0:N, h in 0:OH, w in 0:OW, r_kh in 0:KH, r_kw in 0:KW
}"""


def _gbwd_inputs(N, G, C, F, OH, OW, K=3, dtype=torch.float32, seed=0):
    I, d_O = _inputs([(N, G, C, OH + K - 1, OW + K - 1), (N, G, F, OH, OW)], seed=seed)
    return I.to(dtype), d_O.to(dtype), torch.zeros(K, dtype=dtype), torch.zeros(K, dtype=dtype)


def _gbwd_sizes(N, G, C, F, OH, OW, K=3):
    return {
        "N": N,
        "G": G,
        "C": C,
        "H": OH + K - 1,
        "W": OW + K - 1,
        "F": F,
        "OH": OH,
        "OW": OW,
        "KH": K,
        "KW": K,
    }


def _chain_comment(source: str) -> str:
    start = source.index("register tile (dot-product form over a chain of reductions")
    return source[start : source.index("*/", start)]


@pytest.mark.parametrize(
    "sizes, tile, wide, hoisted",
    [
        (_gbwd_sizes(2, 2, 4, 8, 5, 21), (1, 4, 2, 1, 1), False, False),  # f x c: d_O shared by c, I by f
        (_gbwd_sizes(8, 1, 4, 8, 46, 46), (4, 2, 1, 1), True, True),  # 8 * 46 * 46 >= LONG_SUM terms
    ],
)
def test_chain_form_is_chosen_for_weight_gradients(
    sizes: dict, tile: tuple, wide: bool, hoisted: bool
) -> None:
    """The reductions n, h and w sit in three bands: the chain form tiles f x c and keeps a vector
    of partial sums per weight across the chain. Where h x w alone sums HOIST_CHAIN_TERMS terms or
    more, n moves above the tile loops (below g, which stays outermost; with G = 1 the threads
    split n and add their partial sums), so one image's d_O and I stay in cache for every tile,
    and the sums go into the outputs once per image: a long sum is then blocked in float32 per
    h x w plane (2116 terms, below LONG_SUM) added into float64."""
    low = _lowered(GBWD, sizes)
    decisions = low.stages["decisions"]
    assert f"register tile {tile} over a chain of reductions" in decisions, decisions
    assert ("above the tile loops" in decisions) == hoisted, decisions
    comment = _chain_comment(low.source)
    assert "vectors of 8" in comment, comment
    loops = comment.split("across loops ")[1].split(", ")
    assert len(loops) == (2 if hoisted else 3), comment  # h, w (and n when it is not hoisted)
    assert ("float32 partial sums per tile added into float64" in comment) == wide, comment


def test_float32_blocks_stay_below_long_sum() -> None:
    """Where one n's plane holds LONG_SUM terms or more, the float32 partials sum one row (n is
    above the tile loops: the chain is h, w)."""
    low = _lowered(GBWD, _gbwd_sizes(2, 1, 2, 4, 130, 130))
    comment = _chain_comment(low.source)
    loops = comment.split("across loops ")[1].split(", ")
    assert len(loops) == 2 and f"per iteration of {loops[0]} " in comment, comment


@pytest.mark.parametrize(
    "shape, dtype",
    [
        ((2, 2, 4, 8, 5, 8 * WIDTH + 5), torch.float32),  # full tiles, a remainder of w
        ((2, 1, 5, 7, 4, 8 * WIDTH + 3), torch.float32),  # partial tiles (5 x 7)
        ((6, 1, 3, 5, 44, 8 * WIDTH * 5 + 4), torch.float32),  # wide: >= LONG_SUM terms, float32 blocks
        ((2, 2, 4, 6, 5, 8 * WIDTH + 3), torch.float64),
        ((1, 1, 3, 5, 70, 8 * WIDTH * 30 + 1), torch.float32),  # h x w >= LONG_SUM: blocks of one row
    ],
    ids=["whole-tiles", "partial-tiles", "wide", "f64", "wide-rows"],
)
def test_chain_form_matches_the_oracle(shape: tuple, dtype: torch.dtype) -> None:
    N, G, C, F, OH, OW = shape
    inputs = _gbwd_inputs(N, G, C, F, OH, OW, dtype=dtype)
    src = GBWD if dtype == torch.float32 else GBWD.replace("float(", "double(")
    source = tcjit.compile(tcjit.define(src), *inputs, options=OPTS).source
    assert "over a chain of reductions, vectors of" in source
    H.check_against_oracle(src, None, inputs, options=OPTS, reduction_length=N * OH * OW)


def test_chain_form_reads_an_expanded_gradient_as_a_broadcast() -> None:
    """``loss = O.sum()`` hands the backward an expanded gradient (every stride 0): the chain form
    keeps its vectors and multiplies them by that one element (gconv's weight gradient ran 1.6
    times slower in 8-lane arrays of float64 before)."""
    I, _, kh, kw = _gbwd_inputs(2, 2, 4, 8, 5, 8 * WIDTH + 5)
    d_O = torch.full((), 0.75).expand(2, 2, 8, 5, 8 * WIDTH + 5)
    source = tcjit.compile(tcjit.define(GBWD), I, d_O, kh, kw, options=OPTS).source
    assert "over a chain of reductions, vectors of" in source
    terms = 2 * 5 * (8 * WIDTH + 5)
    H.check_against_oracle(GBWD, None, (I, d_O, kh, kw), options=OPTS, reduction_length=terms)


def test_wide_chain_sums_are_exact_where_float32_is_not() -> None:
    """115200 terms of 1 + 2**-12 per weight: a float32 lane that sums 7200 of them loses the
    2**-12 parts past 4096 (its ulp is then 2**-11); float32 blocks of one n (240 terms per lane,
    exact) added into float64 give the exact 115228.125."""
    N, OH = 32, 60
    I = torch.full((N, 1, 2, OH + 2, OH + 2), 1 + 2**-12)
    d_O = torch.ones(N, 1, 2, OH, OH)
    k = torch.zeros(3)
    kernel = tcjit.define(GBWD)
    assert "over a chain of reductions" in tcjit.compile(kernel, I, d_O, k, k, options=OPTS).source
    got = kernel(I, d_O, k, k, options=OPTS)
    assert torch.equal(got, torch.full_like(got, N * OH * OH * (1 + 2**-12)))
    assert N * OH * OH * (1 + 2**-12) == 115228.125


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["call", "half"])
def test_chain_form_without_vector_types(dtype: torch.dtype) -> None:
    """A call (no vector arithmetic for it) or half operands: per weight an array of lanes,
    an omp simd loop over them; same results as the oracle."""
    src = GBWD.replace("d_O(n, g, f, h, w) *", "exp(d_O(n, g, f, h, w)) *")
    if dtype == torch.float16:
        src = GBWD.replace("float(", "half(")
    inputs = _gbwd_inputs(2, 1, 4, 8, 5, 8 * WIDTH + 3, dtype=dtype)
    source = tcjit.compile(tcjit.define(src), *inputs, options=OPTS).source
    assert "over a chain of reductions" in source and "lanes):" in source
    H.check_against_oracle(src, None, inputs, options=OPTS, reduction_length=2 * 5 * (8 * WIDTH + 3))


@pytest.mark.parametrize(
    "src, sizes, shapes",
    [
        (ROWSUM2, {"M": 8, "R": 5, "K": 40}, [(8, 5, 40)]),  # nothing shared by two outputs
        (
            STRIDED,
            {"N": 2, "C": 4, "H": 13, "W": 41, "F": 4, "OH": 6, "OW": 20, "KH": 2, "KW": 2},
            [(2, 4, 13, 41), (2, 4, 6, 20), (2,), (2,)],
        ),  # I moves by 2 along w: no vector loads
    ],
    ids=["rowsum", "strided"],
)
def test_chain_form_is_refused(src: str, sizes: dict, shapes) -> None:
    low = _lowered(src, sizes)
    assert "over a chain of reductions" not in low.stages["decisions"], low.stages["decisions"]
    assert "over a chain of reductions" not in low.source
    H.check_against_oracle(src, None, _inputs(shapes), options=OPTS, reduction_length=200)


def test_chain_form_with_runs_shorter_than_a_vector() -> None:
    """w runs over OW - h values (a triangle): the runs shorter than a vector update single lanes,
    the longer ones end with an overlapping, masked vector."""
    src = GBWD.replace("r_kw in 0:KW", "r_kw in 0:KW, w < OW - h")
    inputs = _gbwd_inputs(2, 1, 4, 8, 30, 8 * WIDTH * 3 + 5)
    source = tcjit.compile(tcjit.define(src), *inputs, options=OPTS).source
    assert "over a chain of reductions, vectors of" in source
    H.check_against_oracle(src, None, inputs, options=OPTS, reduction_length=2 * 30 * (8 * WIDTH * 3 + 5))
