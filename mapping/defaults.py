"""Default mapping options: what a call without ``options=`` and without tuned options uses.

The choice is made from the definition's structure and the target (the sizes are passed for rules
that need them). TC's ``naive`` preset was one choice for every kernel; here each rule below names
the shape it applies to and why (the figures behind each choice, and what it bought in
``bench/cpu_suite.py``, are in bench/results/HISTORY.md; the current results in
docs/performance.md). Rules are checked in order; the first that applies wins.

CPU:

* **GEMM-shaped contraction** (outer-product form): one ``+=`` statement ``C(i, j) += f(...)``
  whose output's last subscript ``j`` is the last subscript (plain ``j``) of every operand that
  mentions it, with exactly one reduction variable (``matmul``). The register tile is 8 x 16 (16
  vector partial sums), computed in vector registers by the printer, over cache tiles of 64 rows x
  512 columns x 128 steps of the reduction, so a tile's operand rows stay in L1 and the 128 x 512
  slab of the right operand in L2. The tile is 16 vector partial sums on every host: 8 x 32 where
  vectors are 64 bytes (AVX-512, where 8 x 16 was slower for matmul and tensordot). The same
  options go to a **chain of contractions** (:func:`is_contraction_chain`: every reduction a
  ``+=`` in the outer-product form over at most one reduction variable, one at least a
  contraction, the rest pointwise), which is what deriving the backward of linear layers gives
  (mlp3's derived backward keeps up with torch's with them). Convolutions keep the rule below (16
  columns; 32 are slower for conv2d on AVX-512). Both shapes are judged after **operand packing**
  (``pack_operands``, on in this rule): an input read across the output's last index
  (``W(n, r_m)`` in a linear layer, tmm's ``B(n, r_k)``) is read from a transposed panel
  (:mod:`.packing`), which gives it the outer-product form, so tmm, tbmm, fcrelu, mlp3 and
  kronecker3 take this rule. Where the packed panels are **filled a part at a time** inside the
  loops (:func:`filled_in_parts`: the output's rows that do not index the packed input span at
  most two tiles, as in a linear layer over a batch of 128), the columns are tiled by the register
  tile's width instead of 512: a part is then 128 steps of the reduction by one register tile of
  columns (16 KB with AVX-512), which stays in L1 while every row of the tile reads it, as BLIS
  keeps its ``kc x nr`` micro-panel, where a part 512 columns wide is read from L2 by each group
  of 8 rows; a batch of 64 also gets its column tiles on the threads. A panel filled whole (tmm
  at M >= 256) would be read across its rows by narrow tiles, which is slower, so those keep 512
  columns.
* **Everything else**: cache tiles of 64 x 256 x 512 on the outermost band, the outermost parallel
  loop on OpenMP threads, the best unit-stride loop on SIMD lanes and 4 x 16 register tiles where a
  band carries a reduction under a parallel vector loop (contractions in the dot-product form keep
  long reduction tiles: 128-step tiles are slower for tmm, fcrelu and mlp3).

CUDA (and its emulation); only the first rule has run on a GPU (docs/performance.md, "GPU
results"):

* **Row reductions** (:func:`has_row_reduction`): a reduction whose operands read along a plain
  reduction variable as their last subscript and each mention every output variable (no operand
  reused across outputs: memory-bound, ``softmax``, ``layernorm``, ``cosine``, ``bn_reduce``,
  ``abs_sum``). Block reductions (``match_library_calls``): the reduction loop on a warp of
  ``threadIdx.x`` (32: the tree's last steps are shuffles), 8 outputs on ``y``; tiles of 8 outputs
  by 1024 reduction steps, so that one tree combines 1024 terms (TC combines every tile), a block
  per tile (:func:`row_reduction_options`). A reduction with too few outputs to fill the GPU
  (fewer than twice its multiprocessors) and at least 8192 terms each is **split over the grid**
  (:func:`reduction_tiles`): a block per output and part of its reduction, about eight blocks a
  multiprocessor in all, each thread one private accumulator over its share, each block's tree
  added atomically (bn_reduce: 2048 blocks where 32 did the whole reduction). Unsplit, the
  outer schedule fusion is ``Max``: the statements that use a row's reductions share their band,
  which the mapping distributes (:mod:`.distribution`), so that a row's reductions and its
  normalisation are one kernel reading the row from DRAM once (softmax, layernorm).
* **Everything else** (:func:`gpu_options`): from the statement with the most instances, its
  innermost output variable on ``threadIdx.x`` (up to 32), the next on ``y`` (up to 256 threads a
  block), outer variables in tiles of 1, a block per tile, each thread reducing sequentially.
  A **streaming** statement (pointwise, or a short window, every operand read along the output's
  innermost variable: :func:`vector_width`) gives each thread 4 consecutive float32 outputs
  (``vector_width``: 16-byte loads and stores where the tensors are aligned).
  TC's naive options (32 x 32 x 32 tiles on at most 256 x 256 blocks) give gconv one block and
  maxpool2x2 eight at their GPU sizes; this rule has not run on a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

from ..polyhedral.lang import ast as A
from ..polyhedral.lang.checked import CheckedDef, CheckedStatement
from .options import MappingOptions
from .packing import PART_REFILLS, index_extent, packed_operands

__all__ = [
    "GEMM_TILE",
    "UNLIMITED_GRID",
    "default_choice",
    "default_options",
    "filled_in_parts",
    "gpu_options",
    "has_row_reduction",
    "is_contraction_chain",
    "is_gemm_shaped",
    "main_statement",
    "outer_product_shaped",
    "reduction_split",
    "reduction_tiles",
    "row_reduction_options",
]


#: The GEMM rule's cache tiles: 64 rows x 512 columns x 128 steps of the reduction (narrower
#: columns where packed panels are filled a part at a time: :func:`default_options`).
GEMM_TILE = (64, 512, 128)

#: Grid sizes that never limit: each tile its own block (the mapper tightens the grid to the tiles).
UNLIMITED_GRID = (2**31 - 1, 65535, 65535)


def default_options(
    cdef: CheckedDef, sizes: Mapping[str, int], target: str, *, vector_bytes: int = 32
) -> MappingOptions:
    """The options a call of ``cdef`` at ``sizes`` on ``target`` uses when none were given or tuned
    (the rules of this module's docstring). ``vector_bytes``: the CPU's vector width (the GEMM
    rule's register tile is as many vectors wide on every host: 16 float32 columns with AVX2's 32
    bytes, 32 with AVX-512's 64)."""
    return default_choice(cdef, sizes, target, vector_bytes=vector_bytes)[0]


def default_choice(
    cdef: CheckedDef, sizes: Mapping[str, int], target: str, *, vector_bytes: int = 32
) -> tuple[MappingOptions, str]:
    """:func:`default_options` and the rule that chose them, in words with the figures it went by
    (what ``tcjit show --stage options`` and ``--stage gpu-profile`` print beside the defaults)."""
    if target != "cpu":
        if has_row_reduction(cdef):
            split = reduction_split(cdef, sizes)
            if split:
                tiles, outputs, terms = split
                why = (
                    f"row reduction split over the grid: {outputs} outputs (fewer than {SPLIT_OUTPUTS})"
                    f" of {terms} terms (at least {SPLIT_LENGTH}), tiles {list(tiles)}: a block per"
                    f" output and part of its reduction, added atomically"
                )
                return row_reduction_options(tiles=tiles), why
            why = (
                "row reduction: block reductions on 32 lanes x 8 rows, tiles of 8 rows x 1024 terms,"
                " fusion Max (a row's statements in one kernel)"
            )
            return row_reduction_options(fusion="Max"), why
        vector = vector_width(cdef, sizes)
        opts = gpu_options(cdef, sizes, vector=vector)
        st, _ = main_statement(cdef, sizes)
        values = opts.validate(target).values
        why = (
            f"everything else: the innermost output variables of {st.tensor} (the most instances) on"
            f" threads {list(values.map_to_threads)}, tiles {list(values.tile)}, a block per tile"
        )
        if vector > 1:
            why += (
                f"; streaming ({st.tensor} and its operands read along its innermost variable):"
                f" {vector} consecutive outputs a thread, {VECTOR_BYTES}-byte accesses"
            )
        return opts, why
    base = MappingOptions("naive").vectorize(True)
    packed = frozenset(packed_operands(cdef, sizes))
    if is_gemm_shaped(cdef, packed) or is_contraction_chain(cdef, packed):
        columns = 16 * max(1, vector_bytes // 32)
        tiles = list(GEMM_TILE)
        if packed and filled_in_parts(cdef, sizes, packed, GEMM_TILE):
            position = len(main_statement(cdef, sizes)[0].lhs_vars) - 1
            tiles += [0] * (position + 1 - len(tiles))
            tiles[position] = columns
        why = f"GEMM-shaped contraction: tiles {tiles}, register tile 8 x {columns}" + (
            f", {', '.join(sorted(packed))} packed" if packed else ""
        )
        return base.tile(*tiles).register_tile(8, columns).pack_operands(True), why
    why = "everything else: tiles 64 x 256 x 512, register tile 4 x 16"
    return base.tile(64, 256, 512).register_tile(4, 16), why


def filled_in_parts(
    cdef: CheckedDef, sizes: Mapping[str, int], packed: Collection[str], tiles: Sequence[int]
) -> bool:
    """Whether every read of an input in ``packed`` is made by loops tiled by ``tiles`` that
    fill its panel at most :data:`~.packing.PART_REFILLS` times over, so that it is filled a part
    at a time inside them (:func:`.parts.place_parts`) rather than whole before them.

    A read's panel is filled again for every tile of the output variables the input does not
    mention (``b`` for ``W(n, r_m)`` in ``O(b, n) +=! I(b, r_m) * W(n, r_m)``), the statement's
    band assumed to hold its output variables in order (``tiles[k]`` tiles the ``k``-th; 0 or
    none: one tile)."""
    for st in cdef.statements:
        for a in A.walk(st.rhs):
            if not isinstance(a, A.Access) or a.tensor not in packed:
                continue
            mentioned = A.index_vars(a)
            refills = 1
            for k, v in enumerate(st.lhs_vars):
                if v in mentioned:
                    continue
                extent = index_extent(st, v, sizes)
                size = tiles[k] if k < len(tiles) and tiles[k] > 0 else max(1, extent)
                refills *= -(-extent // size)
            if refills > PART_REFILLS:
                return False
    return True


def is_gemm_shaped(cdef: CheckedDef, packed: Collection[str] = frozenset()) -> bool:
    """Whether ``cdef`` is one ``+=`` contraction over one reduction variable, of at least two
    operands, in the outer-product form (:func:`outer_product_shaped`, with the inputs in
    ``packed`` read from transposed panels)."""
    return len(cdef.statements) == 1 and _gemm_statement(cdef.statements[0], packed)


def is_contraction_chain(cdef: CheckedDef, packed: Collection[str] = frozenset()) -> bool:
    """Whether ``cdef`` has several statements, at least one a contraction as in
    :func:`is_gemm_shaped`, every other reduction a ``+=`` over at most one reduction variable in
    the outer-product form, and the rest pointwise: a derived backward of layers such as mlp3's
    (``d_W3(q, p) +=! d_O3_0(b, q) * O2(b, p)``, ``d_O2_1(b, p) += d_O3_0(b, q) * W3(q, p)``,
    ``d_B3(q) +=! d_O3_0(b, q)``, ``d_O3_0(b, q) = d_O3(b, q) * ...``)."""
    if len(cdef.statements) < 2 or not any(_gemm_statement(st, packed) for st in cdef.statements):
        return False
    for st in cdef.statements:
        if st.op == "=" and not st.reduction_vars:
            continue
        if st.op != "+=" or len(st.reduction_vars) > 1 or not outer_product_shaped(st, packed):
            return False
    return True


def _gemm_statement(st: CheckedStatement, packed: Collection[str] = frozenset()) -> bool:
    if st.op != "+=" or len(st.reduction_vars) != 1 or len(st.lhs_vars) < 2:
        return False
    accesses = [a for a in A.walk(st.rhs) if isinstance(a, A.Access)]
    (k,) = st.reduction_vars
    return (
        len(accesses) >= 2
        and outer_product_shaped(st, packed)
        and any(k in A.index_vars(a) for a in accesses)
    )


def outer_product_shaped(st: CheckedStatement, packed: Collection[str] = frozenset()) -> bool:
    """Whether the output's last subscript is a plain index ``j`` that every operand mentioning
    ``j`` has as its plain last subscript: the vector loop along ``j`` then reads whole vectors
    of every operand or broadcasts it (``C(m, n) += A(m, k) * B(k, n)``). Operands in ``packed``
    are read from transposed panels (:mod:`.packing`) whose innermost dimension is the one ``j``
    indexes: for them ``j`` may be the plain subscript of any one dimension."""
    if not st.lhs_vars or not st.plain_lhs:
        return False
    j = st.lhs_vars[-1]
    if not (isinstance(st.lhs[-1], A.Ident) and st.lhs[-1].name == j):
        return False
    for a in A.walk(st.rhs):
        if isinstance(a, A.Access):
            where = [k for k, e in enumerate(a.args) if j in A.index_vars(e)]
            if not where:
                continue
            last = [len(a.args) - 1] if a.tensor not in packed else where[:1]
            if len(where) != 1 or where != last or not isinstance(a.args[where[0]], A.Ident):
                return False
    return True


def has_row_reduction(cdef: CheckedDef) -> bool:
    """Whether some reduction of ``cdef`` reads each operand along a plain reduction variable (its
    last subscript) and no operand is shared by several outputs (every access mentioning a
    reduction variable mentions every output variable): ``sm(n) +=! exp(I(n, r_d) - mx(n))``,
    not ``C(m, n) +=! A(m, r_k) * B(n, r_k)``."""
    for st in cdef.statements:
        if st.op not in ("+=", "*=", "max=", "min=") or not st.reduction_vars:
            continue
        reduced = [
            a
            for a in A.walk(st.rhs)
            if isinstance(a, A.Access) and set(A.index_vars(a)) & set(st.reduction_vars)
        ]
        if reduced and all(
            isinstance(a.args[-1], A.Ident)
            and a.args[-1].name in st.reduction_vars
            and set(st.lhs_vars) <= set(A.index_vars(a))
            for a in reduced
        ):
            return True
    return False


def row_reduction_options(
    rows: int = 8,
    lanes: int = 32,
    steps: int = 1024,
    *,
    tiles: Sequence[int] | None = None,
    fusion: str = "Preserve3Coincident",
) -> MappingOptions:
    """GPU options for row reductions (:func:`has_row_reduction`): block reductions over ``lanes``
    threads along x, ``rows`` outputs per block along y, tiles of ``rows`` outputs by ``steps``
    reduction steps (or the outermost band's ``tiles``: :func:`reduction_tiles`), a block per
    tile; ``fusion``: the outer schedule fusion strategy (``Max`` puts the statements that use a
    row's reductions in their band, which the GPU mapping distributes into one kernel:
    :mod:`.distribution`)."""
    return (
        MappingOptions("naive")
        .outer_schedule_fusion_strategy(fusion)
        .tile(*(tiles or (rows, steps, steps)))
        .map_to_blocks(*UNLIMITED_GRID)
        .map_to_threads(lanes, rows)
        .match_library_calls(True)
    )


#: Multiprocessors the GPU defaults fill: an H100's 132 (an H200 has as many).
MULTIPROCESSORS = 132

#: A reduction with fewer outputs than this and at least :data:`SPLIT_LENGTH` terms each is split
#: over the grid (TorchInductor's rule: fewer outputs than twice the SMs, longer than 8192).
SPLIT_OUTPUTS = 2 * MULTIPROCESSORS
SPLIT_LENGTH = 8192

#: Blocks a split reduction aims at: eight to a multiprocessor, so that its warps keep enough
#: loads in flight to reach the DRAM's bandwidth.
SPLIT_BLOCKS = 8 * MULTIPROCESSORS


def reduction_tiles(cdef: CheckedDef, sizes: Mapping[str, int], steps: int = 1024) -> tuple[int, ...] | None:
    """The outermost band's tiles that split the main reduction of ``cdef`` at ``sizes`` over the
    grid, or None where it has enough outputs to fill the GPU (or too few terms to split): a
    tile of 1 on each output variable (a block per output), the first reduction variable in
    tiles that give about :data:`SPLIT_BLOCKS` blocks in all (a power of two), ``steps`` on the
    others. The blocks of one output add their results atomically
    (:meth:`~tcjit.mapping.gpu_reductions.ReductionMapping.spread_reduction`), and each thread
    keeps one private accumulator over its share (bn_reduce: 256 channels x 8 blocks of 8 images,
    56 x 56 pixels each).

    The one place that chooses a reduction's sizes from the problem's: a kernel for symbolic
    sizes can call it with representative ones."""
    split = reduction_split(cdef, sizes, steps)
    return split[0] if split else None


def reduction_split(
    cdef: CheckedDef, sizes: Mapping[str, int], steps: int = 1024
) -> tuple[tuple[int, ...], int, int] | None:
    """:func:`reduction_tiles` with the figures it went by: ``(tiles, outputs, terms)`` of the
    reduction with the most instances, or None where it is not split."""
    reductions = [st for st in cdef.statements if st.reduction_vars and st.op in ("+=", "*=", "max=", "min=")]
    if not reductions:
        return None
    extents = {
        id(st): [max(1, r.hi.evaluate(sizes) - r.lo.evaluate(sizes)) for r in st.ranges] for st in reductions
    }
    st = max(reductions, key=lambda st: math.prod(extents[id(st)]))
    outputs = math.prod(extents[id(st)][: len(st.lhs_vars)])
    reduced = extents[id(st)][len(st.lhs_vars) :]
    if outputs >= SPLIT_OUTPUTS or math.prod(reduced) < SPLIT_LENGTH or st.op != "+=":
        return None
    parts = -(-SPLIT_BLOCKS // outputs)  # blocks each output's reduction is split into
    tile = 1
    while tile * 2 * parts <= reduced[0]:
        tile *= 2
    return (1,) * len(st.lhs_vars) + (tile,) + (steps,) * (len(reduced) - 1), outputs, math.prod(reduced)


def main_statement(cdef: CheckedDef, sizes: Mapping[str, int]) -> tuple[CheckedStatement, tuple[int, ...]]:
    """The statement with the most instances (the last of equals) and its variables' extents at
    ``sizes``, ``lhs_vars`` first."""
    best, best_extents, most = cdef.statements[-1], (), -1
    for st in cdef.statements:
        extents = tuple(max(0, r.hi.evaluate(sizes) - r.lo.evaluate(sizes)) for r in st.ranges)
        n = math.prod(extents)
        if n >= most:
            best, best_extents, most = st, extents, n
    return best, best_extents


def gpu_options(
    cdef: CheckedDef,
    sizes: Mapping[str, int],
    *,
    threads: int = 256,
    per_thread: tuple[int, int] = (1, 1),
    reduction_tile: int = 0,
    shared: bool = False,
    private: bool = False,
    unroll: int = 1,
    vector: int = 1,
) -> MappingOptions:
    """The GPU rule for everything but row reductions, from the statement with the most instances
    (:func:`main_statement`), whose outermost band is assumed to hold its left-hand side variables
    in order: the innermost variable on ``threadIdx.x`` (up to 32, a power of two covering it),
    the next on ``y`` (the rest of ``threads``), ``per_thread`` outputs per thread along (y, x)
    (tiles of threads x per_thread), the outer variables in tiles of 1 (the outermost three are
    the grid; further ones loop in the block), a block per tile. ``reduction_tile`` > 0 also tiles
    the reduction variables; ``shared``, ``private`` and ``unroll`` are the options of the same names;
    ``vector`` consecutive outputs per thread along x (``vector_width``: x then covers
    ``ceil(extent / vector)``).
    """
    st, extents = main_statement(cdef, sizes)
    lhs = extents[: len(st.lhs_vars)]
    opts = MappingOptions("naive").map_to_blocks(*UNLIMITED_GRID)
    if not lhs:
        return opts.tile(1).map_to_threads(1)
    bx = min(32, _pow2_at_least(-(-lhs[-1] // vector)))
    by = min(max(1, threads // bx), _pow2_at_least(lhs[-2])) if len(lhs) > 1 else 1
    ry, rx = per_thread
    tiles = [1] * (len(lhs) - 2) + ([by * ry] if len(lhs) > 1 else []) + [bx * rx * vector]
    if reduction_tile > 0:
        tiles += [reduction_tile] * len(st.reduction_vars)
    opts = opts.tile(*tiles).map_to_threads(*((bx, by) if len(lhs) > 1 else (bx,)))
    opts = opts.use_shared_memory(shared).use_private_memory(private).unroll(unroll)
    return opts.vector_width(vector) if vector > 1 else opts


#: The longest reduction a streaming kernel may have (a pooling window's terms).
WINDOW_TERMS = 16
#: The bytes of a thread's widest access (``ld.global.v4``): the vector width's limit.
VECTOR_BYTES = 16
#: At least this many threads along x after the vector width divides the innermost extent.
VECTOR_LANES = 8


def vector_width(cdef: CheckedDef, sizes: Mapping[str, int]) -> int:
    """The default ``vector_width`` of :func:`gpu_options`: for a **streaming** main statement
    (:func:`main_statement`: no reduction, or a window of at most ``WINDOW_TERMS`` terms whose
    extents are constants (``where r_k in 0:3``), and every operand read
    along the output's innermost variable as its own plain last subscript, or not at all:
    :func:`outer_product_shaped`), as many consecutive outputs per thread as fill
    ``VECTOR_BYTES`` of the widest element, halved until they divide the innermost extent and
    leave ``VECTOR_LANES`` threads along x; 1 for everything else (a contraction, a strided read:
    maxpool2x2's input)."""
    st, extents = main_statement(cdef, sizes)
    lhs = extents[: len(st.lhs_vars)]
    window = all(st.range_of(r).extent.is_const for r in st.reduction_vars)  # not a size's (a contraction's)
    if not lhs or not window or math.prod(extents[len(st.lhs_vars) :]) > WINDOW_TERMS:
        return 1
    if not outer_product_shaped(st):
        return 1
    names = {st.tensor} | {a.tensor for a in A.walk(st.rhs) if isinstance(a, A.Access)}
    widest = max(cdef.tensor(n).dtype.bits // 8 for n in names)
    width = max(1, VECTOR_BYTES // max(1, widest))
    while width > 1 and (lhs[-1] % width or lhs[-1] // width < VECTOR_LANES):
        width //= 2
    return width


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p
