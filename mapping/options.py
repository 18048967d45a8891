"""MappingOptions: how one TC kernel is scheduled, tiled and mapped, as one immutable value for every target.

The names mirror Tensor Comprehensions' options in snake_case (``tile``, ``map_to_threads``,
``use_shared_memory``, ...); setters return a new value, so options read as a chain::

    opts = MappingOptions().tile(32, 32).map_to_threads(32, 8).unroll(4)

Every field always holds a valid value (each is checked where it is set, whatever the route:
setter, :meth:`MappingOptions.replace`, :class:`OptionValues`, JSON). Combinations a target cannot
run are refused by :meth:`MappingOptions.validate` once the target is known. Fields that a target
does not read are ignored by it: a CPU kernel ignores ``map_to_threads``, a CUDA kernel ``vectorize``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, NoReturn

from ..polyhedral.errors import TCOptionsError
from .option_values import (
    CPU_MAX_REGISTER_TILE,
    CPU_MAX_REGISTER_TILE_PRODUCT,
    CUDA_MAX_SHARED_MEMORY,
    CUDA_TARGETS,
    FIELD_TARGETS,
    OptionValues,
    canonical_strategy,
    check_target,
    option_error,
)

__all__ = ["FORMAT", "PRESETS", "MappingOptions"]

FORMAT = 3  # version of to_dict()/to_json(); bump it (and read the old one) when a field changes

#: Fields each older format lacks, with the value that reproduces what that version did (format 1
#: had no operand packing, format 2 no vector groups).
_ADDED_SINCE: dict[int, dict[str, Any]] = {1: {"pack_operands": False}, 2: {"vector_width": 1}}

_NAIVE = OptionValues()

# The CUDA and common values of TC's make*MappingOptions (tc/core/mapping_options.cc and
# tc/core/cuda/cuda_mapping_options.cc): no promotion, Preserve3Coincident fusion, no parameter
# fixing. TC had no CPU presets: parallelize/vectorize are tcjit's choice (serial for single_thread,
# SIMD wherever TC's preset targets a known loop shape; naive stays scalar).
_PRESETS: dict[str, dict[str, Any]] = {
    "naive": {},
    "single_thread": {"tile": (1,), "map_to_threads": (1,), "map_to_blocks": (1,), "parallelize": False},
    "pointwise": {
        "tile": (32, 32, 32),
        "map_to_threads": (32, 4, 4),
        "map_to_blocks": (100, 100, 100),
        "unroll": 128,
        "vectorize": True,
    },
    "mlp": {
        "outer_schedule_fusion_strategy": "Max",
        "tile": (1,),
        "map_to_threads": (128,),
        "map_to_blocks": (128,),
        "vectorize": True,
    },
    "conv": {
        "tile": (4, 8, 8, 8),
        "map_to_threads": (4, 16, 4),
        "map_to_blocks": (256, 256, 256),
        "vectorize": True,
    },
    "group_conv": {
        "tile": (1, 1),
        "map_to_threads": (4, 16, 4),
        "map_to_blocks": (256, 256),
        "vectorize": True,
    },
}
PRESETS = tuple(_PRESETS)


def _preset_values(name: object) -> OptionValues:
    key = name.casefold() if isinstance(name, str) else None
    if key not in _PRESETS:
        raise option_error("preset", f"expected one of {', '.join(PRESETS)}", name)
    return replace(_NAIVE, **_PRESETS[key])


def _varargs(args: tuple[Any, ...]) -> Any:
    """``f(1, 2)`` and ``f([1, 2])`` mean the same."""
    return args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args


def _from_values(values: OptionValues) -> MappingOptions:
    return MappingOptions.from_values(values)


class MappingOptions:
    """How to schedule and map one TC kernel, for any target; an immutable, hashable value.

    ``MappingOptions()`` is the ``naive`` preset; ``MappingOptions("mlp")`` or
    ``MappingOptions.mlp()`` another preset (see ``PRESETS``). Setters return new options::

        >>> MappingOptions().tile(32, 32).map_to_threads(16, 16).unroll(4)
        MappingOptions().tile(32, 32).unroll(4).map_to_threads(16, 16)

    ``repr`` is the chain of setters that rebuilds the options from the naive preset, in field order.

    The values are in :attr:`values` (an :class:`OptionValues`, whose docstring documents every
    field); ``options.get("tile")`` reads one by name.
    """

    __slots__ = ("_values",)
    _values: OptionValues

    def __init__(self, preset: str = "naive") -> None:
        object.__setattr__(self, "_values", _preset_values(preset))

    @classmethod
    def from_values(cls, values: OptionValues) -> MappingOptions:
        """Options holding ``values`` (already checked by :class:`OptionValues`)."""
        if not isinstance(values, OptionValues):
            raise option_error("values", "expected an OptionValues", values)
        options = object.__new__(cls)
        object.__setattr__(options, "_values", values)
        return options

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"MappingOptions are immutable: use .{name}(...) to get new options")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("MappingOptions are immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_from_values, (self._values,))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MappingOptions):
            return NotImplemented
        return self._values == other._values

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        # The fluent calls that rebuild these options from the naive preset, in field order.
        calls = []
        for name in FIELD_TARGETS:
            value = getattr(self._values, name)
            if value != getattr(_NAIVE, name):
                args = ", ".join(map(repr, value)) if isinstance(value, tuple) else repr(value)
                calls.append(f".{name}({args})")
        return "MappingOptions()" + "".join(calls)

    __str__ = __repr__

    # --- reading --------------------------------------------------------------------------

    @property
    def values(self) -> OptionValues:
        """All values, as a frozen :class:`OptionValues`."""
        return self._values

    def get(self, name: str) -> Any:
        """The value of the option ``name``, e.g. ``get("tile") == (32, 32, 32)`` for the naive preset."""
        if name not in FIELD_TARGETS:
            raise TCOptionsError(f"no option named {name!r}; the options are {', '.join(FIELD_TARGETS)}")
        return getattr(self._values, name)

    def replace(self, **changes: Any) -> MappingOptions:
        """New options with the given fields changed, each checked as its setter checks it.

        Example: ``MappingOptions().replace(tile=(16, 16), unroll=4)``.
        """
        for name in changes:
            if name not in FIELD_TARGETS:
                raise TCOptionsError(f"no option named {name!r}; the options are {', '.join(FIELD_TARGETS)}")
        return type(self).from_values(replace(self._values, **changes))

    # --- presets ----------------------------------------------------------------------------

    @classmethod
    def preset(cls, name: str) -> MappingOptions:
        """The preset called ``name`` (one of ``PRESETS``), e.g. ``MappingOptions.preset("mlp")``."""
        return cls.from_values(_preset_values(name))

    @classmethod
    def naive(cls) -> MappingOptions:
        """TC's naive options: tile 32x32x32, 256x256 blocks of 32x8 threads, no unrolling."""
        return cls.preset("naive")

    @classmethod
    def single_thread(cls) -> MappingOptions:
        """One block of one thread (CUDA), one serial thread (CPU), tile 1: for debugging."""
        return cls.preset("single_thread")

    @classmethod
    def pointwise(cls) -> MappingOptions:
        """TC's pointwise options: tile 32x32x32, 100x100x100 blocks of 32x4x4 threads, unroll 128."""
        return cls.preset("pointwise")

    @classmethod
    def mlp(cls) -> MappingOptions:
        """TC's MLP options: maximal outer fusion, tile 1, 128 blocks of 128 threads."""
        return cls.preset("mlp")

    @classmethod
    def conv(cls) -> MappingOptions:
        """TC's convolution options: tile 4x8x8x8, 256x256x256 blocks of 4x16x4 threads."""
        return cls.preset("conv")

    @classmethod
    def group_conv(cls) -> MappingOptions:
        """TC's group-convolution options: tile 1x1, 256x256 blocks of 4x16x4 threads."""
        return cls.preset("group_conv")

    # --- setters common to all targets ------------------------------------------------------

    def outer_schedule_fusion_strategy(self, strategy: str) -> MappingOptions:
        """Fusion before tiling: ``"Max"``, ``"Preserve3Coincident"`` or ``"Min"`` (any case).

        Example: ``MappingOptions().outer_schedule_fusion_strategy("Max")``.
        """
        return self.replace(outer_schedule_fusion_strategy=strategy)

    def intra_tile_schedule_fusion_strategy(self, strategy: str) -> MappingOptions:
        """Fusion when re-scheduling inside tiles: ``"Max"``, ``"Preserve3Coincident"``, ``"Min"``.

        Example: ``MappingOptions().intra_tile_schedule_fusion_strategy("min")``.
        """
        return self.replace(intra_tile_schedule_fusion_strategy=strategy)

    def schedule_fusion_strategy(self, strategy: str) -> MappingOptions:
        """Both fusion strategies at once (TC's ``scheduleFusionStrategy``).

        Example: ``MappingOptions().schedule_fusion_strategy("Max")``.
        """
        strategy = canonical_strategy("schedule_fusion_strategy", strategy)
        return self.replace(
            outer_schedule_fusion_strategy=strategy, intra_tile_schedule_fusion_strategy=strategy
        )

    def fix_parameters_before_scheduling(self, fix: bool) -> MappingOptions:
        """Schedule with the concrete sizes in the context (more fusion, slower scheduling).

        Example: ``MappingOptions().fix_parameters_before_scheduling(True)``.
        """
        return self.replace(fix_parameters_before_scheduling=fix)

    def tile(self, *sizes: int) -> MappingOptions:
        """Tile the outermost band: one size in iterations per member, outermost first; 0 = untiled.

        Example: ``MappingOptions().tile(32, 32)`` or ``.tile([32, 32])``; ``.tile()`` does not tile.
        """
        return self.replace(tile=_varargs(sizes))

    def tile_imperfectly_nested(self, tile: bool) -> MappingOptions:
        """Also tile imperfectly nested loops, with the same sizes.

        Example: ``MappingOptions().tile_imperfectly_nested(True)``.
        """
        return self.replace(tile_imperfectly_nested=tile)

    def unroll(self, factor: int) -> MappingOptions:
        """Fully unroll innermost loops of at most ``factor`` instances in all (1 to ``MAX_UNROLL``;
        1 = no unrolling).

        Example: ``MappingOptions().unroll(8)``.
        """
        return self.replace(unroll=factor)

    # --- CUDA setters ---------------------------------------------------------------------

    def map_to_blocks(self, *grid: int) -> MappingOptions:
        """Grid size, x first: 1 to 3 block counts (x <= 2**31 - 1, y, z <= 65535).

        Example: ``MappingOptions().map_to_blocks(256, 256)``.
        """
        return self.replace(map_to_blocks=_varargs(grid))

    def map_to_threads(self, *block: int) -> MappingOptions:
        """Block size, x first: 1 to 3 thread counts (x, y <= 1024, z <= 64, product <= 1024).

        Example: ``MappingOptions().map_to_threads(32, 8)``.
        """
        return self.replace(map_to_threads=_varargs(block))

    def use_shared_memory(self, use: bool) -> MappingOptions:
        """Promote reused or uncoalesced footprints to shared memory.

        Example: ``MappingOptions().use_shared_memory(True)``.
        """
        return self.replace(use_shared_memory=use)

    def use_private_memory(self, use: bool) -> MappingOptions:
        """Promote per-thread footprints to registers.

        Example: ``MappingOptions().use_private_memory(True)``.
        """
        return self.replace(use_private_memory=use)

    def unroll_copy_shared(self, unroll: bool) -> MappingOptions:
        """Unroll the copies to and from shared memory.

        Example: ``MappingOptions().unroll_copy_shared(True)``.
        """
        return self.replace(unroll_copy_shared=unroll)

    def max_shared_memory(self, size: int | None) -> MappingOptions:
        """Shared memory budget per block, in bytes (``None``: all the device has).

        Example: ``MappingOptions().max_shared_memory(48 * 1024)``.
        """
        return self.replace(max_shared_memory=size)

    def use_readonly_cache(self, use: bool) -> MappingOptions:
        """Read tensors the kernel never writes through the read-only cache (``__ldg``).

        Example: ``MappingOptions().use_readonly_cache(True)``.
        """
        return self.replace(use_readonly_cache=use)

    def match_library_calls(self, match: bool) -> MappingOptions:
        """Block reductions: a band holding one reduction update maps its reduction loop to
        threadIdx.x, and the threads' partial results are combined by a tree in shared memory
        (warp shuffles for its last steps); a sum whose outputs give too few blocks also spreads
        its reduction over blocks, which add their results atomically (mapping/reduction.py).

        Example: ``MappingOptions().match_library_calls(True)``.
        """
        return self.replace(match_library_calls=match)

    def shared_depth(self, depth: int | None) -> MappingOptions:
        """Schedule depth (band members from the root) of shared-memory promotion; ``None``: TC's.

        Example: ``MappingOptions().shared_depth(2)``.
        """
        return self.replace(shared_depth=depth)

    def private_depth(self, depth: int | None) -> MappingOptions:
        """Schedule depth (band members from the root) of register promotion; ``None``: TC's.

        Example: ``MappingOptions().private_depth(4)``.
        """
        return self.replace(private_depth=depth)

    def vector_width(self, width: int) -> MappingOptions:
        """Consecutive iterations of the ``threadIdx.x`` loop per thread (a power of two up to
        16), so that a thread's loads and stores of them can be one 16-byte access.

        Example: ``MappingOptions().vector_width(4)``.
        """
        return self.replace(vector_width=width)

    # --- CPU setters ----------------------------------------------------------------------

    def parallelize(self, parallel: bool) -> MappingOptions:
        """Run the outermost coincident tile loop as an OpenMP ``parallel for``.

        Example: ``MappingOptions().parallelize(False)``.
        """
        return self.replace(parallelize=parallel)

    def vectorize(self, vector: bool) -> MappingOptions:
        """Mark the innermost stride-1 coincident loop for SIMD (``omp simd``).

        Example: ``MappingOptions().vectorize(True)``.
        """
        return self.replace(vectorize=vector)

    def register_tile(self, *sizes: int) -> MappingOptions:
        """Register-tile sizes of the innermost parallel loops, outermost first (each >= 1).

        Where the innermost band carries a reduction and some operand is shared by neighbouring
        outputs, its parallel members are tiled by these sizes (the innermost ones first) and the
        tile's outputs stay in registers across the reduction (unroll-and-jam with scalar
        replacement; see docs/cpu-backend.md). CPU only.

        Example: ``MappingOptions().register_tile(4, 4)``; ``.register_tile()`` does nothing.
        """
        return self.replace(register_tile=_varargs(sizes))

    def pack_operands(self, pack: bool) -> MappingOptions:
        """Copy inputs that a contraction reads across its output's last index with a stride into
        transposed panels once per call (``B`` of ``C(m, n) +=! A(m, k) * B(n, k)``), so that the
        vector loop reads them whole. CPU only; see :mod:`tcjit.mapping.packing`.

        Example: ``MappingOptions().pack_operands(True)``.
        """
        return self.replace(pack_operands=pack)

    # --- targets ----------------------------------------------------------------------------

    def validate(self, target: str) -> MappingOptions:
        """Check that ``target`` (``"cpu"``, ``"cuda"`` or ``"cuda-emulated"``) can run these options.

        Returns ``self``; raises :class:`TCOptionsError` naming the option otherwise. Emulated CUDA
        obeys the CUDA limits, so that what it accepts runs on a GPU.
        """
        v = self._values
        if check_target(target) in CUDA_TARGETS:
            # OptionValues already holds per-dimension and product limits for the grid and block.
            if v.max_shared_memory is not None and v.max_shared_memory > CUDA_MAX_SHARED_MEMORY:
                raise option_error(
                    "max_shared_memory",
                    f"exceeds the {CUDA_MAX_SHARED_MEMORY} bytes (228 KiB) of shared memory a GPU has",
                    v.max_shared_memory,
                    hint="use None for all the device has",
                )
            depths = (v.shared_depth, v.private_depth)
            if None not in depths and v.private_depth < v.shared_depth:
                raise option_error(
                    "private_depth",
                    f"registers are promoted below shared memory, so it must be >= shared_depth "
                    f"({v.shared_depth})",
                    v.private_depth,
                )
        else:
            for size in v.register_tile:
                if size > CPU_MAX_REGISTER_TILE:
                    raise option_error(
                        "register_tile", f"sizes must be <= {CPU_MAX_REGISTER_TILE}", v.register_tile
                    )
            copies = math.prod(v.register_tile)
            if copies > CPU_MAX_REGISTER_TILE_PRODUCT:
                raise option_error(
                    "register_tile",
                    f"{copies} copies of the loop body (the product) exceed {CPU_MAX_REGISTER_TILE_PRODUCT}",
                    v.register_tile,
                )
        return self

    # --- serialisation ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: ``{"format": 1, "tile": [32, 32, 32], ...}``, every field present."""
        out: dict[str, Any] = {"format": FORMAT}
        for name in FIELD_TARGETS:
            value = getattr(self._values, name)
            out[name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MappingOptions:
        """The inverse of :meth:`to_dict`. Strict: every field and ``"format"`` must be present,
        with its type; unknown keys are refused. Older formats are read too: the fields they lack
        take the values that behave as that version did."""
        if not isinstance(data, Mapping):
            raise option_error(
                "options", "expected a JSON object (a mapping of option names to values)", data
            )
        if "format" not in data:
            raise TCOptionsError(f"option format: missing (this tcjit reads format {FORMAT})")
        version = data["format"]
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= FORMAT:
            raise option_error("format", f"unknown version (this tcjit reads formats 1 to {FORMAT})", version)
        if version < FORMAT:
            data = dict(data)
            for old in range(version, FORMAT):
                for name, value in _ADDED_SINCE[old].items():
                    if name in data:
                        raise TCOptionsError(
                            f"option {name}: unknown option in format {version} (added in format {old + 1})"
                        )
                    data[name] = value
        for key in data:
            if key != "format" and key not in FIELD_TARGETS:
                raise TCOptionsError(
                    f"option {key}: unknown option; the options are {', '.join(FIELD_TARGETS)}",
                    hint="options written by a newer tcjit need that version",
                )
        missing = [name for name in FIELD_TARGETS if name not in data]
        if missing:
            raise TCOptionsError(
                f"option {missing[0]}: missing (every option must be given: {', '.join(missing)})"
            )
        return cls.from_values(OptionValues(**{name: data[name] for name in FIELD_TARGETS}))

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no spaces): equal options give equal text (cache keys)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> MappingOptions:
        """Options from :meth:`to_json` text; strict like :meth:`from_dict`, and duplicate keys,
        NaN and malformed JSON are refused."""
        if not isinstance(text, (str, bytes, bytearray)):
            raise option_error("options", "expected JSON text", text)
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
        except (ValueError, RecursionError) as error:  # JSONDecodeError is a ValueError
            raise TCOptionsError(f"options JSON: cannot be read: {error}") from None
        return cls.from_dict(data)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise option_error(key, "appears twice in the JSON", value)
        out[key] = value
    return out


def _no_constant(name: str) -> NoReturn:
    raise TCOptionsError(f"options JSON: {name} is not a valid option value")
