"""The values of MappingOptions: one table of fields, each with its check and the targets that read it.

Each check takes the option's name (for the message) and a raw value, and returns the value in
canonical form (ints as ``int``, sequences as tuples, fusion strategies spelled as TC spells them)
or raises :class:`TCOptionsError` naming the option. :class:`OptionValues` runs them all, so an
``OptionValues`` -- and hence a ``MappingOptions`` -- never holds an invalid value.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..polyhedral.errors import TCOptionsError

__all__ = [
    "CPU_MAX_REGISTER_TILE",
    "CPU_MAX_REGISTER_TILE_PRODUCT",
    "CUDA_MAX_BLOCK",
    "CUDA_MAX_GRID",
    "CUDA_MAX_SHARED_MEMORY",
    "CUDA_MAX_THREADS_PER_BLOCK",
    "CUDA_TARGETS",
    "FIELD_TARGETS",
    "FUSION_STRATEGIES",
    "MAX_UNROLL",
    "MAX_VECTOR_WIDTH",
    "TARGETS",
    "OptionValues",
    "canonical_strategy",
    "check_target",
    "option_error",
]

TARGETS = ("cpu", "cuda", "cuda-emulated")
FUSION_STRATEGIES = ("Max", "Preserve3Coincident", "Min")
MAX_UNROLL = 1024  # TC fully unrolls everything below the factor: beyond this, code size explodes
MAX_VECTOR_WIDTH = 16  # elements per thread along x: 16 bytes of int8, the widest access CUDA has
CUDA_MAX_GRID = (2**31 - 1, 65535, 65535)  # gridDim.x, .y, .z (every compute capability >= 3.0)
CUDA_MAX_BLOCK = (1024, 1024, 64)  # blockDim.x, .y, .z
CUDA_MAX_THREADS_PER_BLOCK = 1024
CUDA_MAX_SHARED_MEMORY = 228 * 1024  # bytes per SM on sm_90 (H100); a block may opt in to 227 KiB
CPU_MAX_REGISTER_TILE = 64  # per member: beyond this, registers spill anyway
CPU_MAX_REGISTER_TILE_PRODUCT = 1024  # copies of the loop body after unroll-and-jam

_ALL = frozenset(TARGETS)
CUDA_TARGETS = frozenset({"cuda", "cuda-emulated"})
_CPU = frozenset({"cpu"})
_DIMS = ("x", "y", "z")


def option_error(name: str, problem: str, value: object, hint: str | None = None) -> TCOptionsError:
    """The error for option ``name``: ``option tile: expected ..., got -1``."""
    return TCOptionsError(f"option {name}: {problem}, got {value!r}", hint=hint)


def _int(name: str, value: object, *, low: int, high: int | None = None, what: str = "") -> int:
    label = f"{what} " if what else ""
    expected = f"{label}an integer >= {low}" if high is None else f"{label}an integer in [{low}, {high}]"
    if isinstance(value, bool):  # True is an int to Python, never a size to us
        raise option_error(name, f"expected {expected}", value)
    try:
        number = operator.index(value)
    except TypeError:
        number = None
    if number is None or number < low or (high is not None and number > high):
        raise option_error(name, f"expected {expected}", value)
    return number


def _optional_int(name: str, value: object, *, low: int) -> int | None:
    return None if value is None else _int(name, value, low=low)


def _sizes(
    name: str,
    value: object,
    *,
    low: int,
    max_len: int | None = None,
    min_len: int = 0,
    highs: tuple[int, ...] | None = None,
) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise option_error(name, "expected a sequence of integers", value)
    if len(value) < min_len or (max_len is not None and len(value) > max_len):
        count = f"{min_len} to {max_len}" if max_len is not None else f"at least {min_len}"
        raise option_error(name, f"expected {count} sizes", tuple(value))
    out = []
    for i, item in enumerate(value):
        what = _DIMS[i] if max_len == 3 else f"size {i}"
        out.append(_int(name, item, low=low, high=highs[i] if highs else None, what=what))
    return tuple(out)


def _boolean(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise option_error(name, "expected True or False", value)
    return value


def canonical_strategy(name: str, value: object) -> str:
    """The fusion strategy ``value`` as TC spells it (``"max"`` -> ``"Max"``), else TCOptionsError."""
    if isinstance(value, str):
        for strategy in FUSION_STRATEGIES:
            if strategy.casefold() == value.casefold():
                return strategy
    raise option_error(name, f"expected one of {', '.join(FUSION_STRATEGIES)} (any capitalisation)", value)


def _grid(name: str, value: object) -> tuple[int, ...]:
    return _sizes(name, value, low=1, min_len=1, max_len=3, highs=CUDA_MAX_GRID)


def _block(name: str, value: object) -> tuple[int, ...]:
    sizes = _sizes(name, value, low=1, min_len=1, max_len=3, highs=CUDA_MAX_BLOCK)
    threads = math.prod(sizes)
    if threads > CUDA_MAX_THREADS_PER_BLOCK:
        raise TCOptionsError(
            f"option {name}: {threads} threads per block (the product of {sizes}) exceeds CUDA's "
            f"limit of {CUDA_MAX_THREADS_PER_BLOCK}",
            hint="make the block smaller, e.g. map_to_threads(32, 8)",
        )
    return sizes


def _power_of_two(name: str, value: object, *, high: int) -> int:
    number = _int(name, value, low=1, high=high, what="a power of two")
    if number & (number - 1):
        raise option_error(name, f"expected a power of two in [1, {high}]", value)
    return number


def _checker(check: Callable[..., Any], **bounds: Any) -> Callable[[str, object], Any]:
    return lambda name, value: check(name, value, **bounds)


# field -> (checker, targets that read it); this order is the order of repr() and of to_dict().
_FIELDS: dict[str, tuple[Callable[[str, object], Any], frozenset[str]]] = {
    "outer_schedule_fusion_strategy": (canonical_strategy, _ALL),
    "intra_tile_schedule_fusion_strategy": (canonical_strategy, _ALL),
    "fix_parameters_before_scheduling": (_boolean, _ALL),
    "tile": (_checker(_sizes, low=0), _ALL),
    "tile_imperfectly_nested": (_boolean, _ALL),
    "unroll": (_checker(_int, low=1, high=MAX_UNROLL), _ALL),
    "map_to_blocks": (_grid, CUDA_TARGETS),
    "map_to_threads": (_block, CUDA_TARGETS),
    "use_shared_memory": (_boolean, CUDA_TARGETS),
    "use_private_memory": (_boolean, CUDA_TARGETS),
    "unroll_copy_shared": (_boolean, CUDA_TARGETS),
    "max_shared_memory": (_checker(_optional_int, low=0), CUDA_TARGETS),
    "use_readonly_cache": (_boolean, CUDA_TARGETS),
    "match_library_calls": (_boolean, CUDA_TARGETS),
    "shared_depth": (_checker(_optional_int, low=0), CUDA_TARGETS),
    "private_depth": (_checker(_optional_int, low=0), CUDA_TARGETS),
    "vector_width": (_checker(_power_of_two, high=MAX_VECTOR_WIDTH), CUDA_TARGETS),
    "parallelize": (_boolean, _CPU),
    "vectorize": (_boolean, _CPU),
    "register_tile": (_checker(_sizes, low=1), _CPU),
    "pack_operands": (_boolean, _CPU),
}

#: Which targets read each field (the other targets ignore it).
FIELD_TARGETS: Mapping[str, frozenset[str]] = {name: targets for name, (_, targets) in _FIELDS.items()}


def check_target(target: object) -> str:
    """``target`` if it is one of ``TARGETS``, else TCOptionsError."""
    if target not in TARGETS:
        raise option_error("target", f"expected one of {', '.join(TARGETS)}", target)
    return target


@dataclass(frozen=True)
class OptionValues:
    """The values of one :class:`MappingOptions`; the defaults are the ``naive`` preset.

    Constructing one checks and canonicalises every field (``TCOptionsError`` naming the field).
    Flags take ``True`` or ``False`` only (not 0 or 1), e.g. ``OptionValues(use_shared_memory=True)``;
    sizes take Python or NumPy integers and are stored as ``int``. Common to all targets:

    :ivar outer_schedule_fusion_strategy: how the isl scheduler fuses statements before tiling:
        ``"Max"`` (fuse all that can legally be fused), ``"Preserve3Coincident"`` (fuse unless the
        fused band would keep fewer than 3, and fewer than before, leading coincident members) or
        ``"Min"`` (fuse only within a strongly connected component). Example: ``"Max"``.
    :ivar intra_tile_schedule_fusion_strategy: the same choice for re-scheduling the point loops
        inside each tile; no re-scheduling happens when it equals the outer one. Example: ``"Min"``.
    :ivar fix_parameters_before_scheduling: intersect the domain with the concrete sizes before
        scheduling (may fuse more, takes longer). Example: ``True``.
    :ivar tile: tile size per member of the outermost band, outermost first, in loop iterations;
        0 leaves that member untiled, and so does a missing size; sizes beyond the band's width are
        ignored; ``()`` does not tile. Example: ``(32, 32)``.
    :ivar tile_imperfectly_nested: also tile imperfectly nested loops, with the same sizes.
        Example: ``False``.
    :ivar unroll: unroll factor: innermost loops whose total number of instances is at most this
        are fully unrolled; 1 unrolls nothing. Instances, from 1 to ``MAX_UNROLL``. Example: ``4``.

    CUDA (and emulated CUDA):

    :ivar map_to_blocks: grid size, x first: number of thread blocks along each of the leading
        coincident tile loops (outermost -> x); more tiles than blocks give a grid-stride loop.
        1 to 3 blocks counts, x <= 2**31 - 1, y, z <= 65535. Example: ``(256, 256)``.
    :ivar map_to_threads: block size, x first: threads along the innermost coincident point loops
        (innermost -> x, for coalescing). 1 to 3 thread counts, x, y <= 1024, z <= 64, product
        <= 1024. Example: ``(32, 8)``.
    :ivar use_shared_memory: promote reused or uncoalesced tensor footprints to shared memory.
    :ivar use_private_memory: promote per-thread footprints to registers.
    :ivar unroll_copy_shared: unroll the loops copying to and from shared memory.
    :ivar max_shared_memory: shared memory budget per block, in bytes; ``None`` uses what the device
        has. Example: ``48 * 1024``.
    :ivar use_readonly_cache: read tensors that the kernel never writes through ``__ldg``.
    :ivar match_library_calls: map a reduction loop to threadIdx.x and reduce within the block.
    :ivar shared_depth: schedule depth (band members from the root) at which shared memory is
        promoted; ``None``: the depth of the block mapping, as TC does. Example: ``2``.
    :ivar private_depth: schedule depth at which registers are promoted; ``None``: below the
        thread mapping, as TC does. Example: ``4``.
    :ivar vector_width: consecutive iterations of the loop on ``threadIdx.x`` that each thread
        runs (a power of two, 1 to ``MAX_VECTOR_WIDTH``; 1: one per thread, as TC does), so that
        its loads and stores of consecutive elements can be single accesses of up to 16 bytes
        (``ld.global.v4.f32``). The kernel runs them as such where every tensor pointer is 16-byte
        aligned (checked in the kernel, once), one element at a time otherwise. Statements whose
        loop on ``x`` is a block reduction's are left alone. Example: ``4``.

    CPU (the options above that are common are read too):

    :ivar parallelize: run the outermost coincident tile loop as an OpenMP ``parallel for``.
    :ivar vectorize: mark the innermost stride-1 coincident loop ``omp simd``.
    :ivar register_tile: unroll-and-jam factors for the innermost parallel (dependence-free) loops
        of the innermost band, outermost first, in loop iterations (each >= 1; the last size goes to
        the innermost parallel loop, missing ones are 1; ``()``
        does nothing). The band is tiled once more by them, its reduction loops run inside the new
        tile loops and the copies are fully unrolled, so that a block of results stays in
        registers across a reduction. Example: ``(4, 32)``.
    :ivar pack_operands: copy each input that a contraction reads across its output's last index
        with a stride (``B(n, k)`` in ``C(m, n) +=! A(m, k) * B(n, k)``), once per call, into a
        buffer where that index is the unit-stride dimension (a transposed panel), so that the
        vector loop runs along it with whole-vector loads (:mod:`tcjit.mapping.packing`).
    """

    outer_schedule_fusion_strategy: str = "Preserve3Coincident"
    intra_tile_schedule_fusion_strategy: str = "Preserve3Coincident"
    fix_parameters_before_scheduling: bool = False
    tile: tuple[int, ...] = (32, 32, 32)
    tile_imperfectly_nested: bool = False
    unroll: int = 1
    map_to_blocks: tuple[int, ...] = (256, 256)
    map_to_threads: tuple[int, ...] = (32, 8)
    use_shared_memory: bool = False
    use_private_memory: bool = False
    unroll_copy_shared: bool = False
    max_shared_memory: int | None = None
    use_readonly_cache: bool = False
    match_library_calls: bool = False
    shared_depth: int | None = None
    private_depth: int | None = None
    vector_width: int = 1
    parallelize: bool = True
    vectorize: bool = False
    register_tile: tuple[int, ...] = ()
    pack_operands: bool = False

    def __post_init__(self) -> None:
        for name, (check, _) in _FIELDS.items():
            object.__setattr__(self, name, check(name, getattr(self, name)))


assert tuple(f.name for f in fields(OptionValues)) == tuple(_FIELDS)  # one table, one order
