"""C for a CPU kernel's packed operands and prefetches: the functions that fill the transposed
panels and parts of packed inputs (:mod:`.packing`, :mod:`.parts`), the prologue that allocates
and fills the panels, and the helpers that fetch an input's lines into cache for a later loop
(:class:`~tcjit.mapping.ir.Fetching`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.lang.types import ScalarType
from . import ir
from .c_exprs import c_storage_type, stack_array
from .layout import Pack, Part

__all__ = ["PANEL_BLOCK", "PREFETCHING", "fetch_helper", "item_bytes", "padded_elements", "panel_code"]


#: Side of the square blocks in which a transposed panel is filled: a block is read into a local
#: array along the tensor's rows and written out along the panel's (a register transpose).
PANEL_BLOCK = 8


def _transposer(item_bytes: int) -> list[str]:
    """C of ``tc_transpose8_u<bits>``: an 8 x 8 block of ``item_bytes``-byte elements transposed in
    registers. Row ``x`` of the source starts ``x * ss`` elements after ``src`` and is read as one
    vector; row ``y`` of the destination starts ``y * ds`` elements after ``dst`` and is written as
    one; ``dst[y * ds + x] = src[x * ss + y]``. Three rounds of two-vector shuffles (24 in all)
    replace the 64 single-element loads of an element-wise copy, which made a panel's fill much
    slower (bench/results/HISTORY.md). Compilers without
    ``__builtin_shufflevector`` (gcc before 12) copy element by element."""
    bits = 8 * item_bytes
    u, v = f"uint{bits}_t", f"tc_v8u{bits}"

    def rounds(a: str, b: str, mask: tuple[int, ...]) -> str:
        return f"__builtin_shufflevector({a}, {b}, {', '.join(map(str, mask))})"

    lo1, hi1 = (0, 8, 1, 9, 4, 12, 5, 13), (2, 10, 3, 11, 6, 14, 7, 15)
    lo2, hi2 = (0, 1, 8, 9, 4, 5, 12, 13), (2, 3, 10, 11, 6, 7, 14, 15)
    lo3, hi3 = (0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15)
    # round 1: rows pairwise interleaved by element; round 2: by pairs; round 3: by halves
    one = [(f"t{2 * i}", f"r{2 * i}", f"r{2 * i + 1}", lo1) for i in range(4)]
    one += [(f"t{2 * i + 1}", f"r{2 * i}", f"r{2 * i + 1}", hi1) for i in range(4)]
    two = []
    for half in (0, 4):
        two += [
            (f"q{half}", f"t{half}", f"t{half + 2}", lo2),
            (f"q{half + 1}", f"t{half}", f"t{half + 2}", hi2),
            (f"q{half + 2}", f"t{half + 1}", f"t{half + 3}", lo2),
            (f"q{half + 3}", f"t{half + 1}", f"t{half + 3}", hi2),
        ]
    lines = [
        f"typedef {u} {v} __attribute__((vector_size({8 * item_bytes}), aligned({item_bytes}), may_alias));",
        f"static inline void tc_transpose8_u{bits}(const void *restrict src, int64_t ss,",
        "                                        void *restrict dst, int64_t ds)",
        "{",
        f"  const {u} *s = (const {u} *)src;",
        f"  {u} *d = ({u} *)dst;",
        "#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)",
        *(f"  const {v} r{x} = *(const {v} *)(s + {x} * ss);" for x in range(8)),
        *(f"  const {v} {n} = {rounds(a, b, m)};" for n, a, b, m in one + two),
        *(
            f"  *({v} *)(d + {y} * ds) = {rounds(f'q{y % 4}', f'q{y % 4 + 4}', lo3 if y < 4 else hi3)};"
            for y in range(8)
        ),
        "#else",
        "  for (int64_t y = 0; y < 8; y += 1)",
        "    for (int64_t x = 0; x < 8; x += 1)",
        "      d[y * ds + x] = s[x * ss + y];",
        "#endif",
        "}",
    ]
    return lines


#: Panels with fewer elements are filled by one thread (starting a parallel region costs more).
MIN_PARALLEL_PANEL = 1 << 15


#: Each thread fills a panel of its own when all the copies take at most this many bytes: a
#: panel one thread wrote and another reads crosses between the cores' caches on every call,
#: which costs more than copying it twice (bench/results/HISTORY.md). Above it (many threads,
#: large panels) the threads fill one shared panel, each a part.
PRIVATE_PANELS_BYTES = 4 << 20


def item_bytes(t: ScalarType) -> int:
    return max(1, t.bits // 8)


def padded_elements(shape: Sequence[int], dtype: ScalarType) -> int:
    """Elements between two threads' panels or part buffers of ``shape``: its elements, rounded
    up to 64 bytes (the buffers' alignment, which ``aligned_alloc`` needs the size to be a
    multiple of)."""
    per_line = max(1, 64 // item_bytes(dtype))
    return -(-math.prod(shape) // per_line) * per_line


def _block_copy(
    ct: str, rows: bool, item: int, src: str, src_strides: tuple[int, int], dst: str, dst_stride: int
) -> list[str]:
    """C that copies one full :data:`PANEL_BLOCK`-square block, transposed: ``src`` and ``dst`` are
    C for the offsets of its first element, ``src_strides`` the tensor's strides along the panel's
    last two dimensions (the first 1 when ``rows``: the block is transposed in registers),
    ``dst_stride`` the panel's along the first of them (along the second it is 1)."""
    blk = PANEL_BLOCK
    sa, sb = src_strides
    if rows:
        return [f"      tc_transpose8_u{8 * item}(src + {src}, {sb}, dst + {dst}, {dst_stride});"]
    return [
        f"      {stack_array(ct, f'tile[{blk}][{blk}]')}",
        f"      #pragma GCC unroll {blk}",
        f"      for (int64_t x = 0; x < {blk}; x += 1)",
        f"        #pragma GCC unroll {blk}",
        f"        for (int64_t y = 0; y < {blk}; y += 1)",
        f"          tile[x][y] = src[{src} + y * INT64_C({sa}) + x * INT64_C({sb})];",
        f"      #pragma GCC unroll {blk}",
        f"      for (int64_t y = 0; y < {blk}; y += 1)",
        f"        #pragma GCC unroll {blk}",
        f"        for (int64_t x = 0; x < {blk}; x += 1)",
        f"          dst[{dst} + y * INT64_C({dst_stride}) + x] = tile[x][y];",
    ]


def _part_bounds(pack: Pack, part: Part) -> list[str]:
    """C that clamps the part from element ``(o0, ...)`` on to the tensor: ``[l<d>, h<d>)`` per
    dimension ``d`` (:func:`_part_fill`, :func:`_part_ahead`)."""
    extents = pack.extents or pack.shape
    return [
        f"  const int64_t l{d} = o{d} > 0 ? o{d} : 0, "
        f"h{d} = o{d} + {part.shape[d]} < {extents[d]} ? o{d} + {part.shape[d]} : {extents[d]};"
        for d in range(len(pack.shape))
    ]


def _part_fill(name: str, pack: Pack, part: Part, ct: str, rows: bool, item: int) -> list[str]:
    """C of ``tc_part_X(src, dst, o0, ...)``: the part of ``X``'s panel whose first element is
    ``(o0, ...)``, of :attr:`Part.shape` clamped to the tensor, copied into ``dst`` with the part's
    strides, the panel's last two dimensions in :data:`PANEL_BLOCK`-square blocks."""
    blk = PANEL_BLOCK
    *outer, a, b = pack.order
    rank = len(pack.shape)
    lo = {d: f"l{d}" for d in range(rank)}
    hi = {d: f"h{d}" for d in range(rank)}

    def offset(strides, index, shift: bool) -> str:
        return " + ".join(
            f"({index[d]}{f' - o{d}' if shift else ''}) * INT64_C({strides[d]})" for d in pack.order
        )

    index = {**{d: f"e{d}" for d in outer}, a: "ga", b: "gb"}
    one = {**{d: f"e{d}" for d in outer}, a: "y", b: "x"}
    return [
        f"/* Fills the part of '{name}''s transposed panel from element (o0, ...) on (option",
        " * pack_operands: a part at a time, where the code reads it). */",
        f"static void __attribute__((unused)) tc_part_{name}(const {ct} *restrict src, {ct} *restrict dst, "
        + ", ".join([*(f"int64_t o{d}" for d in range(rank)), *(f"int64_t {z}" for z in pack.sizes)])
        + ")",
        "{",
        *_part_bounds(pack, part),
        *(f"  for (int64_t e{d} = {lo[d]}; e{d} < {hi[d]}; e{d} += 1)" for d in outer),
        f"  for (int64_t ga = {lo[a]}; ga < {hi[a]}; ga += {blk})",
        f"  for (int64_t gb = {lo[b]}; gb < {hi[b]}; gb += {blk}) {{",
        f"    if (ga + {blk} <= {hi[a]} && gb + {blk} <= {hi[b]}) {{",
        *_block_copy(
            ct,
            rows,
            item,
            offset(pack.source, index, False),
            (pack.source[a], pack.source[b]),
            offset(part.strides, index, True),
            part.strides[a],
        ),
        "    } else {",
        f"      for (int64_t y = ga; y < (ga + {blk} < {hi[a]} ? ga + {blk} : {hi[a]}); y += 1)",
        f"        for (int64_t x = gb; x < (gb + {blk} < {hi[b]} ? gb + {blk} : {hi[b]}); x += 1)",
        f"          dst[{offset(part.strides, one, True)}] = src[{offset(pack.source, one, False)}];",
        "    }",
        "  }",
        "}",
    ]


def fetch_helper(fn: str, f: ir.Fetch, strides: tuple[int, ...], dtype: ScalarType) -> tuple[list[str], int]:
    """C of ``fn(src, from, to)``, which asks for the cache lines ``[from, to)`` of ``f``'s box of
    its tensor, into L2, and how many lines (slots) the box has. The box is fetched a row (its
    extent along the last dimension, unit-stride) at a time; each row has a slot for one line
    more than its length (it may start mid-line), so that the callers share lines out, a few per
    call (mlp3's ``d_W1`` fetches 8 or 9 lines of ``O1`` per register tile)."""
    ct = c_storage_type(dtype)
    item = item_bytes(dtype)
    outer = f.box[:-1]
    rows = math.prod(hi - lo + 1 for lo, hi in outer)
    lo_last, hi_last = f.box[-1]
    length = hi_last - lo_last + 1
    slots = -(-length * item // CACHE_LINE) + 1
    span = " x ".join(f"{lo}:{hi + 1}" for lo, hi in f.box)
    body = [
        f"/* Brings the lines of '{f.tensor}' in {span} into cache for a later loop: slots [l, z) of"
        f" {rows * slots}, {slots} a row. */",
        f"static void {PREFETCHING} {fn}(const {ct} *restrict src, int64_t l, int64_t z)",
        "{",
        f"  for (int64_t row = l / {slots}, k = l % {slots}; l < z; row += 1, k = 0) {{",
        f"    int64_t q = row, at = INT64_C({lo_last});",
    ]
    for d in range(len(outer) - 1, -1, -1):
        lo, hi = outer[d]
        m = f"INT64_C({hi - lo + 1})"
        body.append(f"    at += (INT64_C({lo}) + q % {m}) * INT64_C({strides[d]}); q /= {m};")
    body += [
        f"    const char *a = (const char *)((uintptr_t)(src + at) & ~(uintptr_t){CACHE_LINE - 1})"
        f" + k * {CACHE_LINE};",
        f"    const char *end = (const char *)(src + at + {length});",
        f"    for (; k < {slots} && l < z; k += 1, l += 1, a += {CACHE_LINE})",
        "      if (a < end) __builtin_prefetch(a, 0, 2);",
        "  }",
        "}",
    ]
    return body, rows * slots


#: Bytes of a cache line: what one prefetch of :func:`_part_ahead` brings.
CACHE_LINE = 64


#: The attributes of a function that only prefetches (:func:`_part_ahead`, :func:`fetch_helper`).
#: GCC counts ``__builtin_prefetch`` as free of side effects and may delete such a function's
#: calls: gcc 12 compiled an earlier version of the fetches of mlp3's backward to nothing (while a
#: hand-written prefetch in the caller's loop stayed). ``noipa`` keeps every call (the function
#: stays out of line: one call per register tile). tests/mapping/test_prefetch.py checks the machine code.
PREFETCHING = "__attribute__((unused, noipa))"


def _part_ahead(name: str, pack: Pack, part: Part, ct: str) -> list[str]:
    """C of ``tc_ahead_X(src, o0, ...)``: asks for the lines of ``X`` that the part from element
    ``(o0, ...)`` on will copy to be brought into the L2 cache (``__builtin_prefetch``, locality
    2), each line of a row of the unit-stride dimension once. A site calls it with the next
    iteration's part after filling its own (:attr:`~tcjit.mapping.parts.Site.ahead`), so that the next fill
    reads the tensor from cache: mlp3's forward fills its first weight in four parts, each of
    which would otherwise be read from memory the other kernels of a training step had pushed out
    of cache (the fills' times with and without: bench/results/HISTORY.md)."""
    rank = len(pack.shape)
    unit = pack.source.index(1)
    order = sorted((d for d in range(rank) if d != unit), key=lambda d: -pack.source[d])
    row = " + ".join(f"e{d} * INT64_C({pack.source[d]})" for d in order) or "0"
    return [
        f"/* Brings the lines of '{name}' that the part from element (o0, ...) on copies into cache. */",
        f"static void {PREFETCHING} tc_ahead_{name}(const {ct} *restrict src, "
        + ", ".join([*(f"int64_t o{d}" for d in range(rank)), *(f"int64_t {z}" for z in pack.sizes)])
        + ")",
        "{",
        *_part_bounds(pack, part),
        *(f"  for (int64_t e{d} = l{d}; e{d} < h{d}; e{d} += 1) {{" for d in order),
        f"    const {ct} *r = src + {row};",
        f"    const char *a = (const char *)((uintptr_t)(r + l{unit}) & ~(uintptr_t){CACHE_LINE - 1});",
        f"    for (const char *z = (const char *)(r + h{unit}); a < z; a += {CACHE_LINE})",
        "      __builtin_prefetch(a, 0, 2);",
        *("  }" for _ in order),
        "}",
    ]


def panel_code(
    cdef: CheckedDef,
    sites: Sequence[ir.Site],
    packs: Mapping[str, Pack],
    parallel: bool,
    parts: Mapping[str, Part],
) -> tuple[list[str], list[str], list[str], list[str], list[str]]:
    """C for each packed input's transposed panel (:mod:`.packing`): the helpers every part of
    the source needs (the block transposers, the functions that fill the ``parts``), the
    functions that fill a range of a whole panel's blocks, the prologue that allocates the panels
    and fills the whole ones, the statements that free them, and statements that declare
    ``tc_bytes``, the panels' size in bytes on ``nthreads`` threads. The fill walks the panel's
    outer dimensions in order and its last two in :data:`PANEL_BLOCK`-square blocks (edges
    element by element). Each thread fills and reads a panel of its own (``pk_X +
    omp_get_thread_num() * size``) when they fit :data:`PRIVATE_PANELS_BYTES`; else one panel is
    filled by all the threads. Without ``parallel`` one thread fills one panel. An input of
    ``parts`` gets one part buffer per thread instead, which the code fills where it reads."""
    common: list[str] = []
    functions: list[str] = []
    prologue: list[str] = []
    counts: list[str] = []
    sizes: list[str] = []
    transposers: dict[int, list[str]] = {}
    blk = PANEL_BLOCK
    for name, pack in packs.items():
        dtype = cdef.tensor(name).dtype
        ct = c_storage_type(dtype)
        count = math.prod(pack.shape)
        elements = padded_elements(pack.shape, dtype)
        padded = elements * item_bytes(dtype)
        *outer, a, b = pack.order  # b: the dimension made innermost
        na, nb = pack.shape[a], pack.shape[b]
        lead = outer[0] if outer else a  # the loop the threads share
        # a source contiguous along the panel's rows: whole blocks are transposed in registers
        item = item_bytes(dtype)
        rows = pack.source[a] == 1 and blk == 8 and item in (1, 2, 4, 8)
        if rows and item not in transposers:
            transposers[item] = _transposer(item)
        step = 1 if outer else blk
        if name in parts:
            part = parts[name]
            padded = padded_elements(part.shape, dtype) * item
            common += _part_fill(name, pack, part, ct, rows, item)
            if any(site.tensor == name and site.ahead for site in sites):
                common += _part_ahead(name, pack, part, ct)
            prologue += [
                f"  /* '{name}' is read from transposed panels filled a part at a time, one part "
                "buffer per thread (option pack_operands) */",
                f"  {ct} *pk_{name} = ({ct} *)(tc_ws + tc_ws_at);",
                f"  tc_ws_at += pn_{name} * {padded};",
            ]
            threads = "nthreads > 1 ? nthreads : 1" if parallel else "1"
            counts.append(f"  const int64_t pn_{name} = {threads};  /* part buffers: one per thread */")
            sizes.append(f"pn_{name} * {padded}")
            continue

        if pack.extents:
            raise TCInternalError(f"'{name}' has a symbolic size: its panel is filled a part at a time only")

        def offset(strides, ia: str, ib: str, outer=outer, a=a, b=b, pack=pack) -> str:
            index = {**{d: f"e{d}" for d in outer}, a: ia, b: ib}
            return " + ".join(f"({index[d]}) * INT64_C({strides[d]})" for d in pack.order)

        loops = [
            f"for (int64_t e{d} = lo; e{d} < hi; e{d} += 1)"
            if d == lead
            else f"for (int64_t e{d} = 0; e{d} < {pack.shape[d]}; e{d} += 1)"
            for d in outer
        ]
        first_a = "lo" if not outer else "0"
        last_a = "hi" if not outer else str(na)
        loops += [
            f"for (int64_t ga = {first_a}; ga < {last_a}; ga += {blk})",
            f"for (int64_t gb = 0; gb < {nb}; gb += {blk}) {{",
        ]
        functions += [
            f"/* Fills blocks [lo, hi) of the leading loop of '{name}''s transposed panel. */",
            f"static void tc_fill_{name}(const {ct} *restrict src, {ct} *restrict dst,",
            "                           int64_t lo, int64_t hi)",
            "{",
            "  " + "\n  ".join(loops),
            f"    if (ga + {blk} <= {na} && gb + {blk} <= {nb}) {{",
            *_block_copy(
                ct,
                rows,
                item,
                offset(pack.source, "ga", "gb"),
                (pack.source[a], pack.source[b]),
                offset(pack.strides, "ga", "gb"),
                pack.strides[a],
            ),
            "    } else {",
            f"      for (int64_t y = ga; y < (ga + {blk} < {na} ? ga + {blk} : {na}); y += 1)",
            f"        for (int64_t x = gb; x < (gb + {blk} < {nb} ? gb + {blk} : {nb}); x += 1)",
            f"          dst[{offset(pack.strides, 'y', 'x')}] = src[{offset(pack.source, 'y', 'x')}];",
            "    }",
            "  }",
            "}",
        ]
        extent = pack.shape[lead]
        parts = f"(({extent} + {step - 1}) / {step})"
        prologue += [
            f"  /* '{name}' is read from a transposed panel, dimension {pack.dim} innermost "
            "(option pack_operands) */",
            f"  {ct} *pk_{name} = ({ct} *)(tc_ws + tc_ws_at);",
            f"  tc_ws_at += pn_{name} * {padded};",
        ]
        if parallel:
            prologue += [
                f"  if (pn_{name} > 1) {{",
                "    #pragma omp parallel num_threads(nthreads)",
                f"    for (int64_t k = omp_get_thread_num(); k < pn_{name}; k += omp_get_num_threads())",
                f"      tc_fill_{name}(p_{name}, pk_{name} + k * {elements}, 0, {extent});",
                "  } else {",
            ]
        else:
            prologue.append("  {")
        counts.append(
            f"  const int64_t pn_{name} = nthreads > 1 && (int64_t)nthreads * {padded} <= "
            f"{PRIVATE_PANELS_BYTES} ? nthreads : 1;  /* panels: one per thread, or one */"
            if parallel
            else f"  const int64_t pn_{name} = 1;  /* one panel (serial kernel) */"
        )
        sizes.append(f"pn_{name} * {padded}")
        if parallel and count >= MIN_PARALLEL_PANEL:
            prologue.append(
                "    #pragma omp parallel for num_threads(nthreads) if(nthreads > 1) schedule(static)"
            )
        prologue += [
            f"    for (int64_t part = 0; part < {parts}; part += 1)",
            f"      tc_fill_{name}(p_{name}, pk_{name}, part * {step}, "
            f"(part + 1) * {step} < {extent} ? (part + 1) * {step} : {extent});",
            "  }",
        ]
    if not packs:
        return [], [], [], [], []
    head = [
        *counts,
        f"  char *tc_ws = (char *)tc_take_workspace(&tc_kept_workspace, (size_t)({' + '.join(sizes)}));",
        "  if (!tc_ws) { tc_errors[0] = -1; return; }",
        "  int64_t tc_ws_at = 0;",
    ]
    helpers = [line for lines in transposers.values() for line in lines]
    return (
        [*helpers, *common],
        functions,
        [*head, *prologue],
        ["tc_give_workspace(&tc_kept_workspace, tc_ws);"],
        [*counts, f"  const size_t tc_bytes = (size_t)({' + '.join(sizes)});"],
    )
