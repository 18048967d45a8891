"""The search space the tuner reads: an explicit list of parameters over :class:`MappingOptions`.

A *genome* is a tuple of choice indices, one per parameter, in the order of
:attr:`SearchSpace.parameters`; every choice is categorical (its position carries no meaning).
The spaces built here hold only valid points -- a block of more than 1024 threads is simply not a
choice -- so every genome decodes to options that pass ``validate(target)``, with no repair step,
and :meth:`SearchSpace.decode` and :meth:`SearchSpace.encode` are exact inverses::

    space = search_space("cuda", loop_extents=(512, 512, 256))
    options = space.sample(random.Random(0))
    assert space.decode(space.encode(options)) == options
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..polyhedral.errors import TCOptionsError
from .option_values import (
    CUDA_MAX_BLOCK,
    CUDA_MAX_THREADS_PER_BLOCK,
    FIELD_TARGETS,
    FUSION_STRATEGIES,
    check_target,
)
from .options import MappingOptions

__all__ = [
    "BLOCK_CHOICES",
    "DEFAULT_TILE_CHOICES",
    "GRID_CHOICES",
    "REGISTER_TILE_CHOICES",
    "UNROLL_CHOICES",
    "VECTOR_WIDTH_CHOICES",
    "Parameter",
    "SearchSpace",
    "search_space",
    "tile_choices",
]

BOOLEANS = (False, True)
UNROLL_CHOICES = (1, 2, 4, 8, 16, 32)
#: Consecutive elements per thread along x (CUDA): 16 bytes of float32 at most.
VECTOR_WIDTH_CHOICES = (1, 2, 4)
#: Tile sizes per band member when the loop extents are unknown: untiled, or a power of two <= 256.
DEFAULT_TILE_CHOICES = (0, *(2**k for k in range(9)))
DEFAULT_TILE_MEMBERS = 3


def _shapes(highs: Sequence[int], max_product: int | None = None) -> tuple[tuple[int, ...], ...]:
    """Every tuple of 1 to 3 powers of two within ``highs`` (x first), shortest first."""
    out = []
    for rank in (1, 2, 3):
        axes = [[2**k for k in range(highs[d].bit_length())] for d in range(rank)]
        out += [s for s in itertools.product(*axes) if max_product is None or math.prod(s) <= max_product]
    return tuple(out)


#: Grid sizes: 1 to 3 dimensions, each a power of two up to 1024 blocks (1463 choices).
GRID_CHOICES = _shapes((1024, 1024, 1024))
#: Block sizes: 1 to 3 dimensions of powers of two within CUDA's limits, at most 1024 threads (343).
BLOCK_CHOICES = _shapes(CUDA_MAX_BLOCK, CUDA_MAX_THREADS_PER_BLOCK)
#: Register tiles (CPU): none, or 1 or 2 unroll-and-jam factors from 1 to 8 (21 choices).
REGISTER_TILE_CHOICES = ((), *(s for s in _shapes((8, 8, 8)) if len(s) <= 2))

_INDEXED = re.compile(r"(?P<field>[a-z_]+)\[(?P<index>\d+)\]\Z")
_PAD = {"tile": 0}  # what a missing tile size means (untiled); other sequences pad with 1


def _split(name: str) -> tuple[str, int | None]:
    """``"tile[2]"`` -> ``("tile", 2)``; ``"unroll"`` -> ``("unroll", None)``."""
    match = _INDEXED.match(name)
    return (match["field"], int(match["index"])) if match else (name, None)


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b  # True == 1, but a flag is never a size


def _distance(a: object, b: object) -> float | None:
    """How far apart two option values are (log2 scale for sizes); ``None``: incomparable."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        n = max(len(a), len(b))
        parts = [_distance(x, y) for x, y in zip(a + (1,) * (n - len(a)), b + (1,) * (n - len(b)))]
        return None if None in parts else sum(parts)
    if type(a) is int and type(b) is int and a != b:
        return abs(math.log2(a) - math.log2(b)) if a > 0 and b > 0 else None  # 0 (untiled) is apart
    return 0.0 if _same(a, b) else None


@dataclass(frozen=True)
class Parameter:
    """One gene of the tuner's genome.

    :ivar name: the option it sets: a field of :class:`OptionValues` (``"unroll"``), or one member of
        a sequence field (``"tile[0]"``, the outermost tile size).
    :ivar choices: the values it may take, in a fixed order; a gene is an index into them.
        Example: ``(1, 2, 4, 8, 16, 32)``.
    :ivar targets: the targets whose mapping reads this option. Example: ``frozenset({"cpu"})``.
    """

    name: str
    choices: tuple[Any, ...]
    targets: frozenset[str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "choices", tuple(self.choices))
        object.__setattr__(self, "targets", frozenset(self.targets))
        if not self.choices:
            raise TCOptionsError(f"search space: parameter {self.name} has no choices")
        if len({(type(c), c) for c in self.choices}) != len(self.choices):
            raise TCOptionsError(f"search space: parameter {self.name} lists a choice twice")

    def index(self, value: object, *, nearest: bool = False) -> int:
        """The gene for ``value``: its position in :attr:`choices`; with ``nearest``, the position
        of the closest choice (sizes compared on a log2 scale, ties to the earlier choice)."""
        for i, choice in enumerate(self.choices):
            if _same(choice, value):
                return i
        if nearest:
            scored = [(d, i) for i, c in enumerate(self.choices) if (d := _distance(c, value)) is not None]
            if scored:
                return min(scored)[1]
        raise TCOptionsError(
            f"option {self.name}: {value!r} is not a choice of the search space",
            hint="encode(options, nearest=True) picks the closest choice",
        )


@dataclass(frozen=True)
class SearchSpace:
    """The options the tuner may try for one target, as a list of :class:`Parameter`.

    Options not searched keep their value in :attr:`base`.

    :ivar target: ``"cpu"``, ``"cuda"`` or ``"cuda-emulated"``; every decoded point validates for it.
    :ivar parameters: the genes, in genome order.
    :ivar base: the options decoded points start from. Example: ``MappingOptions()``.
    """

    target: str
    parameters: tuple[Parameter, ...]
    base: MappingOptions = field(default_factory=MappingOptions)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", tuple(self.parameters))
        check_target(self.target)
        if not isinstance(self.base, MappingOptions):
            raise TCOptionsError(f"search space: base must be MappingOptions, got {self.base!r}")
        seen: dict[str, list[int | None]] = {}
        for p in self.parameters:
            name, index = _split(p.name)
            if name not in FIELD_TARGETS:
                raise TCOptionsError(f"search space: parameter {p.name} sets no option")
            seen.setdefault(name, []).append(index)
        for name, indices in seen.items():
            if indices != [None] and indices != list(range(len(indices))):
                raise TCOptionsError(
                    f"search space: {name} must be one parameter, or {name}[0], {name}[1], ... in order"
                )
        self.decode((0,) * len(self.parameters))  # the base fits the target

    @property
    def names(self) -> tuple[str, ...]:
        """The parameter names, in genome order."""
        return tuple(p.name for p in self.parameters)

    def size(self) -> int:
        """The number of points (genomes) in the space; can be astronomically large."""
        return math.prod(len(p.choices) for p in self.parameters)

    def decode(self, genome: Sequence[int]) -> MappingOptions:
        """The options of ``genome`` (one choice index per parameter); they pass ``validate(target)``."""
        if isinstance(genome, (str, bytes)) or not isinstance(genome, Sequence):
            raise TCOptionsError(f"option genome: expected a sequence of choice indices, got {genome!r}")
        if len(genome) != len(self.parameters):
            raise TCOptionsError(
                f"option genome: expected {len(self.parameters)} genes (one per parameter), got {len(genome)}"
            )
        whole: dict[str, Any] = {}
        members: dict[str, list[Any]] = {}
        for p, gene in zip(self.parameters, genome):
            if isinstance(gene, bool) or not isinstance(gene, int) or not 0 <= gene < len(p.choices):
                raise TCOptionsError(
                    f"option genome: the gene of {p.name} must be in [0, {len(p.choices) - 1}], got {gene!r}"
                )
            name, index = _split(p.name)
            if index is None:
                whole[name] = p.choices[gene]
            else:
                members.setdefault(name, []).append(p.choices[gene])
        whole.update((name, tuple(values)) for name, values in members.items())
        return self.base.replace(**whole).validate(self.target)

    def encode(self, options: MappingOptions, *, nearest: bool = False) -> tuple[int, ...]:
        """The genome of ``options``.

        Exact by default: ``options`` must be a point of the space (TCOptionsError naming the first
        option that is not). With ``nearest=True``, each option maps to its closest choice, missing
        tile sizes count as 0 (untiled) and extra ones are dropped: how options tuned for other
        sizes, or a preset, seed a new search.
        """
        if not isinstance(options, MappingOptions):
            raise TCOptionsError(f"option options: expected MappingOptions, got {options!r}")
        counts: dict[str, int] = {}
        for name, index in map(_split, self.names):
            if index is not None:
                counts[name] = index + 1
        for name, count in counts.items():
            if not nearest and len(options.get(name)) != count:
                raise TCOptionsError(
                    f"option {name}: the search space has {count} sizes, got {options.get(name)!r}",
                    hint="encode(options, nearest=True) pads or truncates",
                )
        genome = []
        for p in self.parameters:
            name, index = _split(p.name)
            value = options.get(name)
            if index is not None:
                value = value[index] if index < len(value) else _PAD.get(name, 1)
            genome.append(p.index(value, nearest=nearest))
        if not nearest:
            decoded = self.decode(genome)
            for name in FIELD_TARGETS:
                if decoded.get(name) != options.get(name):
                    raise TCOptionsError(
                        f"option {name}: not searched by this space, and {options.get(name)!r} differs "
                        f"from the base's {decoded.get(name)!r}"
                    )
        return tuple(genome)

    def random_genome(self, rng: random.Random) -> tuple[int, ...]:
        """A uniformly random genome."""
        return tuple(rng.randrange(len(p.choices)) for p in self.parameters)

    def sample(self, rng: random.Random) -> MappingOptions:
        """Uniformly random options of the space, e.g. ``space.sample(random.Random(0))``."""
        return self.decode(self.random_genome(rng))


def tile_choices(extent: int) -> tuple[int, ...]:
    """The tile sizes searched for a band member of ``extent`` iterations: 0 (untiled), then in
    ascending order the powers of two up to ``extent`` and its ceiling divisors
    ``ceil(extent / 2**k)`` -- Tensor Comprehensions' ``powers2andCeilDivisors``. The divisors add
    the extent itself and tiles that split it into 2, 4, ... nearly equal parts, which powers of two
    miss when the extent is not one. Example: ``tile_choices(100) == (0, 1, 2, 4, 7, 8, 13, 16, 25,
    32, 50, 64, 100)``.
    """
    if isinstance(extent, bool) or not isinstance(extent, int) or extent < 1:
        raise TCOptionsError(f"option loop_extents: extents must be integers >= 1, got {extent!r}")
    powers = {2**k for k in range(extent.bit_length())}
    divisors = {-(-extent // 2**k) for k in range(extent.bit_length())}
    return (0, *sorted(powers | divisors))


def _tile_choices(loop_extents: Sequence[int] | None) -> list[tuple[int, ...]]:
    if loop_extents is None:
        return [DEFAULT_TILE_CHOICES] * DEFAULT_TILE_MEMBERS
    if isinstance(loop_extents, (str, bytes)) or not isinstance(loop_extents, Sequence):
        raise TCOptionsError(f"option loop_extents: expected a sequence of integers, got {loop_extents!r}")
    return [tile_choices(extent) for extent in loop_extents]


def search_space(
    target: str, loop_extents: Sequence[int] | None = None, *, base: MappingOptions | None = None
) -> SearchSpace:
    """The tuner's search space for ``target``.

    :arg target: ``"cpu"``, ``"cuda"`` or ``"cuda-emulated"``.
    :arg loop_extents: iterations of each member of the outermost band, outermost first (one tile
        parameter per member, choices :func:`tile_choices`: 0, the powers of two up to the extent
        and ``ceil(extent / 2**k)``); ``None``: three members, 0 or a power of two up to 256.
    :arg base: values of the options not searched (default: the naive preset).

    Searched for every target: tile sizes, both fusion strategies, parameter fixing, tiling of
    imperfect nests, unroll in {1, 2, ..., 32}. CUDA: grid and block (:data:`GRID_CHOICES`,
    :data:`BLOCK_CHOICES`), shared and private promotion, unrolled copies, read-only cache, block
    reductions, vector width (:data:`VECTOR_WIDTH_CHOICES`). CPU: ``parallelize``, ``vectorize``,
    ``register_tile``, ``pack_operands``.
    """
    check_target(target)
    tiles = _tile_choices(loop_extents)
    base = MappingOptions() if base is None else base
    if loop_extents is not None and not tiles:
        base = base.tile()  # no loops: nothing to tile, and every point says so
    params = [Parameter(f"tile[{i}]", c, FIELD_TARGETS["tile"]) for i, c in enumerate(tiles)]
    choices: dict[str, tuple[Any, ...]] = {
        "outer_schedule_fusion_strategy": FUSION_STRATEGIES,
        "intra_tile_schedule_fusion_strategy": FUSION_STRATEGIES,
        "fix_parameters_before_scheduling": BOOLEANS,
        "tile_imperfectly_nested": BOOLEANS,
        "unroll": UNROLL_CHOICES,
    }
    if target == "cpu":
        choices |= {
            "parallelize": BOOLEANS,
            "vectorize": BOOLEANS,
            "register_tile": REGISTER_TILE_CHOICES,
            "pack_operands": BOOLEANS,
        }
    else:
        choices |= {
            "map_to_blocks": GRID_CHOICES,
            "map_to_threads": BLOCK_CHOICES,
            "use_shared_memory": BOOLEANS,
            "use_private_memory": BOOLEANS,
            "unroll_copy_shared": BOOLEANS,
            "use_readonly_cache": BOOLEANS,
            "match_library_calls": BOOLEANS,
            "vector_width": VECTOR_WIDTH_CHOICES,
        }
    params += [Parameter(name, c, FIELD_TARGETS[name]) for name, c in choices.items()]
    return SearchSpace(target, tuple(params), base)
