"""tcjit.mapping: MappingOptions, the CPU and GPU mappers, kernel IR and its printers.

:class:`MappingOptions` (one type for every target: presets, fluent setters, validation per target,
JSON) and the search space the tuner reads are here; the mappers and printers come next. May import
tcjit.polyhedral and islpy; never torch.
"""

from __future__ import annotations

from .option_values import FIELD_TARGETS, FUSION_STRATEGIES, TARGETS, OptionValues
from .options import PRESETS, MappingOptions
from .search_space import Parameter, SearchSpace, search_space

__all__ = [
    "FIELD_TARGETS",
    "FUSION_STRATEGIES",
    "PRESETS",
    "TARGETS",
    "MappingOptions",
    "OptionValues",
    "Parameter",
    "SearchSpace",
    "search_space",
]
