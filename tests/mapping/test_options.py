"""MappingOptions: setters, presets, serialisation, per-target validation and the tuner's search space.

Oracles: TC's preset values (tc/core/cuda/cuda_mapping_options.cc), CUDA's documented launch limits
(written out below, independently of the module's constants), a brute-force enumeration of the
valid block shapes, and round trips (JSON, repr, genome) that must be exact.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
import pickle
import random

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from tcjit.mapping import (
    FIELD_TARGETS,
    FUSION_STRATEGIES,
    PRESETS,
    TARGETS,
    MappingOptions,
    OptionValues,
    Parameter,
    SearchSpace,
    search_space,
)
from tcjit.mapping.option_values import MAX_UNROLL
from tcjit.mapping.options import FORMAT
from tcjit.mapping.search_space import BLOCK_CHOICES, GRID_CHOICES, REGISTER_TILE_CHOICES, UNROLL_CHOICES
from tcjit.polyhedral.errors import TCError, TCOptionsError

N = examples(60, 1000)

# CUDA's limits as the programming guide states them (compute capability >= 3.0).
GRID_LIMITS = (2**31 - 1, 65535, 65535)
BLOCK_LIMITS = (1024, 1024, 64)
THREADS_PER_BLOCK = 1024


def _raises(fn, *args, name: str, **kwargs) -> TCOptionsError:
    with pytest.raises(TCOptionsError) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, TCError)
    assert name in str(info.value), f"{name!r} not named in: {info.value}"
    return info.value


# --- setters -------------------------------------------------------------------------------------

VALID = [
    ("outer_schedule_fusion_strategy", ("max",), "Max"),
    ("outer_schedule_fusion_strategy", ("PRESERVE3COINCIDENT",), "Preserve3Coincident"),
    ("intra_tile_schedule_fusion_strategy", ("Min",), "Min"),
    ("intra_tile_schedule_fusion_strategy", ("mAx",), "Max"),
    ("fix_parameters_before_scheduling", (True,), True),
    ("tile", (32, 0, 16), (32, 0, 16)),
    ("tile", ([8, 8],), (8, 8)),
    ("tile", ((4,),), (4,)),
    ("tile", (), ()),
    ("tile", (np.int64(64), 2**40), (64, 2**40)),
    ("tile_imperfectly_nested", (True,), True),
    ("unroll", (1,), 1),
    ("unroll", (MAX_UNROLL,), MAX_UNROLL),
    ("vector_width", (4,), 4),
    ("vector_width", (np.int64(16),), 16),
    ("unroll", (np.int32(8),), 8),
    ("map_to_blocks", (7,), (7,)),
    ("map_to_blocks", GRID_LIMITS, GRID_LIMITS),
    ("map_to_blocks", ([256, 256],), (256, 256)),
    ("map_to_threads", (1024,), (1024,)),
    ("map_to_threads", (1, 1024), (1, 1024)),
    ("map_to_threads", (1, 1, 64), (1, 1, 64)),
    ("map_to_threads", (16, 8, 8), (16, 8, 8)),
    ("map_to_threads", ((32, 8),), (32, 8)),
    ("use_shared_memory", (True,), True),
    ("use_private_memory", (True,), True),
    ("unroll_copy_shared", (True,), True),
    ("max_shared_memory", (0,), 0),
    ("max_shared_memory", (48 * 1024,), 48 * 1024),
    ("max_shared_memory", (None,), None),
    ("use_readonly_cache", (True,), True),
    ("match_library_calls", (True,), True),
    ("shared_depth", (0,), 0),
    ("shared_depth", (None,), None),
    ("private_depth", (5,), 5),
    ("parallelize", (False,), False),
    ("vectorize", (True,), True),
    ("register_tile", (4, 4), (4, 4)),
    ("register_tile", ([2],), (2,)),
    ("register_tile", (), ()),
]

BOOLEAN_OPTIONS = [f.name for f in dataclasses.fields(OptionValues) if type(f.default) is bool]
INVALID = [
    ("outer_schedule_fusion_strategy", ("Maximum",)),
    ("outer_schedule_fusion_strategy", (1,)),
    ("intra_tile_schedule_fusion_strategy", (None,)),
    ("intra_tile_schedule_fusion_strategy", (" Max",)),
    ("tile", (-1,)),
    ("tile", (32, 1.5)),
    ("tile", (True,)),
    ("tile", ("32",)),
    ("tile", ([[32]],)),
    ("tile", (None,)),
    ("vector_width", (0,)),
    ("vector_width", (3,)),
    ("vector_width", (32,)),
    ("vector_width", (True,)),
    ("unroll", (0,)),
    ("unroll", (-2,)),
    ("unroll", (2.0,)),
    ("unroll", (True,)),
    ("unroll", ("4",)),
    ("unroll", (MAX_UNROLL + 1,)),
    ("map_to_blocks", ()),
    ("map_to_blocks", (1, 1, 1, 1)),
    ("map_to_blocks", (0,)),
    ("map_to_blocks", (2**31,)),
    ("map_to_blocks", (1, 65536)),
    ("map_to_blocks", (1, 1, 65536)),
    ("map_to_blocks", (8.0,)),
    ("map_to_threads", ()),
    ("map_to_threads", (0,)),
    ("map_to_threads", (1025,)),
    ("map_to_threads", (1, 1025)),
    ("map_to_threads", (1, 1, 65)),
    ("map_to_threads", (64, 32)),
    ("map_to_threads", (8, 8, 32)),
    ("map_to_threads", (1, 2, 3, 4)),
    ("max_shared_memory", (-1,)),
    ("max_shared_memory", (1.0,)),
    ("max_shared_memory", ("48K",)),
    ("shared_depth", (-1,)),
    ("private_depth", (1.5,)),
    ("register_tile", (0,)),
    ("register_tile", (4, -1)),
    ("register_tile", ("4",)),
    *[(name, (value,)) for name in BOOLEAN_OPTIONS for value in (0, 1, "true", None)],
]


@pytest.mark.parametrize(("setter", "args", "stored"), VALID)
def test_setter_accepts_and_canonicalises(setter, args, stored):
    options = getattr(MappingOptions(), setter)(*args)
    value = options.get(setter)
    assert value == stored and type(value) is type(stored)
    assert getattr(options.values, setter) == stored
    if isinstance(value, tuple):
        assert all(type(v) is int for v in value)  # numpy ints become ints: JSON and hashing stay exact


@pytest.mark.parametrize(("setter", "args"), INVALID)
def test_setter_refuses_and_names_the_option(setter, args):
    _raises(getattr(MappingOptions(), setter), *args, name=setter)


def test_block_product_is_named():
    error = _raises(MappingOptions().map_to_threads, 64, 32, name="map_to_threads")
    assert "2048" in str(error) and "1024" in str(error)


def test_schedule_fusion_strategy_sets_both():
    options = MappingOptions().schedule_fusion_strategy("min")
    assert options.values.outer_schedule_fusion_strategy == "Min"
    assert options.values.intra_tile_schedule_fusion_strategy == "Min"
    _raises(MappingOptions().schedule_fusion_strategy, "none", name="schedule_fusion_strategy")


def test_every_field_has_a_documented_setter():
    doc = OptionValues.__doc__
    for name in FIELD_TARGETS:
        assert f":ivar {name}:" in doc
        setter = getattr(MappingOptions, name)
        assert "Example" in setter.__doc__, name
    assert [f.name for f in dataclasses.fields(OptionValues)] == list(FIELD_TARGETS)
    assert set().union(*FIELD_TARGETS.values()) == set(TARGETS)


def test_setters_do_not_change_the_original():
    original = MappingOptions.conv()
    before = original.to_json()
    for setter, args, _ in VALID:
        changed = getattr(original, setter)(*args)
        assert changed is not original
    assert original.to_json() == before and original == MappingOptions.conv()


def test_options_are_immutable():
    options = MappingOptions()
    with pytest.raises(AttributeError):
        options.tile = (1,)
    with pytest.raises(AttributeError):
        options._values = OptionValues()
    with pytest.raises(AttributeError):
        del options._values
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.values.unroll = 4
    assert options == MappingOptions.naive()


def test_get_replace_and_values():
    options = MappingOptions().replace(tile=[16, 16], unroll=4, outer_schedule_fusion_strategy="max")
    assert options == MappingOptions().tile(16, 16).unroll(4).outer_schedule_fusion_strategy("Max")
    assert options.get("tile") == (16, 16) and isinstance(options.values, OptionValues)
    _raises(options.get, "tiles", name="tiles")
    _raises(options.replace, name="blocks", blocks=(1,))
    _raises(options.replace, name="unroll", unroll=0)
    assert MappingOptions.from_values(OptionValues(tile=[8])) == MappingOptions().tile(8)
    _raises(OptionValues, name="map_to_threads", map_to_threads=(2048,))
    _raises(MappingOptions.from_values, {"tile": (1,)}, name="values")


# --- presets -------------------------------------------------------------------------------------

# (tile, map_to_threads, map_to_blocks, unroll, outer fusion) from TC's make*MappingOptions.
TC_PRESETS = {
    "naive": ((32, 32, 32), (32, 8), (256, 256), 1, "Preserve3Coincident"),
    "single_thread": ((1,), (1,), (1,), 1, "Preserve3Coincident"),
    "pointwise": ((32, 32, 32), (32, 4, 4), (100, 100, 100), 128, "Preserve3Coincident"),
    "mlp": ((1,), (128,), (128,), 1, "Max"),
    "conv": ((4, 8, 8, 8), (4, 16, 4), (256, 256, 256), 1, "Preserve3Coincident"),
    "group_conv": ((1, 1), (4, 16, 4), (256, 256), 1, "Preserve3Coincident"),
}


@pytest.mark.parametrize("name", sorted(TC_PRESETS))
def test_presets_follow_tensor_comprehensions(name):
    options = MappingOptions.preset(name)
    assert options == MappingOptions(name) == getattr(MappingOptions, name)() == MappingOptions(name.upper())
    v = options.values
    actual = (v.tile, v.map_to_threads, v.map_to_blocks, v.unroll, v.outer_schedule_fusion_strategy)
    assert actual == TC_PRESETS[name]
    # What TC's makeUnmappedMappingOptions fixes for every preset.
    assert v.intra_tile_schedule_fusion_strategy == "Preserve3Coincident"
    assert not (v.use_shared_memory or v.use_private_memory or v.unroll_copy_shared or v.match_library_calls)
    assert not (v.fix_parameters_before_scheduling or v.tile_imperfectly_nested)
    for target in TARGETS:
        assert options.validate(target) is options


def test_default_is_naive_and_presets_are_distinct():
    assert MappingOptions() == MappingOptions.naive() and repr(MappingOptions()) == "MappingOptions()"
    assert set(PRESETS) == set(TC_PRESETS)
    assert len({MappingOptions.preset(p) for p in PRESETS}) == len(PRESETS)
    assert not MappingOptions.single_thread().values.parallelize


@pytest.mark.parametrize("bad", ["fast", "", None, 3, "naive "])
def test_unknown_preset_lists_the_presets(bad):
    error = _raises(MappingOptions, bad, name="preset")
    assert all(p in str(error) for p in PRESETS)
    _raises(MappingOptions.preset, bad, name="preset")


# --- random valid options ------------------------------------------------------------------------


@st.composite
def _blocks(draw) -> tuple[int, ...]:
    dims, budget = [], THREADS_PER_BLOCK
    for limit in BLOCK_LIMITS[: draw(st.integers(1, 3))]:
        dims.append(draw(st.integers(1, min(limit, budget))))
        budget //= dims[-1]
    return tuple(dims)


def _up_to(limit: int) -> st.SearchStrategy[int]:
    return st.integers(1, limit)


_strategies = st.sampled_from(FUSION_STRATEGIES).flatmap(lambda s: st.sampled_from([s, s.lower(), s.upper()]))
_depth = st.none() | st.integers(0, 12)
FIELDS = {
    "outer_schedule_fusion_strategy": _strategies,
    "intra_tile_schedule_fusion_strategy": _strategies,
    "fix_parameters_before_scheduling": st.booleans(),
    "tile": st.lists(st.integers(0, 2**40), max_size=6),
    "tile_imperfectly_nested": st.booleans(),
    "unroll": st.integers(1, MAX_UNROLL),
    "map_to_blocks": st.integers(1, 3).flatmap(lambda n: st.tuples(*map(_up_to, GRID_LIMITS[:n]))),
    "map_to_threads": _blocks(),
    "use_shared_memory": st.booleans(),
    "use_private_memory": st.booleans(),
    "unroll_copy_shared": st.booleans(),
    "max_shared_memory": st.none() | st.integers(0, 2**40),
    "use_readonly_cache": st.booleans(),
    "match_library_calls": st.booleans(),
    "shared_depth": _depth,
    "private_depth": _depth,
    "parallelize": st.booleans(),
    "vectorize": st.booleans(),
    "register_tile": st.lists(st.integers(1, 2**20), max_size=4).map(tuple),
    "pack_operands": st.booleans(),
    "vector_width": st.sampled_from([1, 2, 4, 8, 16]),
}
OPTIONS = st.fixed_dictionaries(FIELDS).map(lambda d: MappingOptions().replace(**d))


def test_the_strategy_covers_every_field():
    assert set(FIELDS) == set(FIELD_TARGETS)


# --- serialisation -------------------------------------------------------------------------------


@settings(max_examples=N, deadline=None)
@given(OPTIONS)
def test_json_round_trip_is_exact_and_canonical(options):
    text = options.to_json()
    again = MappingOptions.from_json(text)
    assert again == options and hash(again) == hash(options)
    assert again.to_json() == text
    data = json.loads(text)
    assert data == options.to_dict() and data["format"] == FORMAT
    assert text == json.dumps(data, sort_keys=True, separators=(",", ":"))
    assert MappingOptions.from_dict(options.to_dict()) == options
    assert MappingOptions.from_json(text.encode()) == options


@settings(max_examples=N, deadline=None)
@given(OPTIONS)
def test_repr_rebuilds_the_options(options):
    assert eval(repr(options), {"MappingOptions": MappingOptions}) == options
    assert str(options) == repr(options)


def test_repr_is_the_fluent_chain():
    options = MappingOptions().tile(32, 32).map_to_threads(32, 8)
    assert repr(options) == "MappingOptions().tile(32, 32)"  # (32, 8) is naive's block already
    options = MappingOptions().tile([32, 32]).map_to_threads(16, 16).outer_schedule_fusion_strategy("max")
    assert repr(options) == (
        "MappingOptions().outer_schedule_fusion_strategy('Max').tile(32, 32).map_to_threads(16, 16)"
    )
    untiled = MappingOptions().tile().max_shared_memory(0)
    assert repr(untiled) == "MappingOptions().tile().max_shared_memory(0)"
    for name in PRESETS:
        assert eval(repr(MappingOptions(name)), {"MappingOptions": MappingOptions}) == MappingOptions(name)


def test_equal_options_serialise_identically():
    a = MappingOptions().tile(8, 8).outer_schedule_fusion_strategy("max").unroll(np.int64(4))
    b = MappingOptions().unroll(4).outer_schedule_fusion_strategy("Max").tile([8, 8])
    assert a == b and hash(a) == hash(b) and a.to_json() == b.to_json()
    assert " " not in a.to_json() and list(json.loads(a.to_json())) == sorted(json.loads(a.to_json()))


def _edited(**changes) -> str:
    data = MappingOptions.conv().to_dict()
    for key, value in changes.items():
        if value is _DELETE:
            del data[key]
        else:
            data[key] = value
    return json.dumps(data)


_DELETE = object()
BAD_JSON = [
    (_edited(tile_size=3), "tile_size"),
    (_edited(unroll=_DELETE), "unroll"),
    (_edited(unroll="4"), "unroll"),
    (_edited(unroll=4.0), "unroll"),
    (_edited(unroll=True), "unroll"),
    (_edited(unroll=None), "unroll"),
    (_edited(tile="32"), "tile"),
    (_edited(tile=[32, None]), "tile"),
    (_edited(tile={"0": 32}), "tile"),
    (_edited(use_shared_memory=1), "use_shared_memory"),
    (_edited(use_shared_memory="true"), "use_shared_memory"),
    (_edited(max_shared_memory=-1), "max_shared_memory"),
    (_edited(map_to_threads=[64, 32]), "map_to_threads"),
    (_edited(map_to_blocks=[]), "map_to_blocks"),
    (_edited(outer_schedule_fusion_strategy="Fastest"), "outer_schedule_fusion_strategy"),
    (_edited(format=_DELETE), "format"),
    (_edited(format=FORMAT + 1), "format"),
    (_edited(format="1"), "format"),
    (_edited(format=True), "format"),
    (_edited(format=1.0), "format"),
    ('{"format": 1, "unroll": 1, "unroll": 2}', "unroll"),
    (MappingOptions().to_json().replace('"unroll":1', '"unroll":NaN'), "NaN"),
    ("{", "JSON"),
    ("[]", "options"),
    ("null", "options"),
    ('"naive"', "options"),
    ("", "JSON"),
    ("[" * 100_000, "JSON"),
    ("1" * 5000, "JSON"),
    (b"\xff\xfe", "JSON"),
]


@pytest.mark.parametrize(("text", "name"), BAD_JSON, ids=range(len(BAD_JSON)))
def test_from_json_is_strict(text, name):
    _raises(MappingOptions.from_json, text, name=name)


def test_from_json_and_from_dict_refuse_non_text():
    _raises(MappingOptions.from_json, MappingOptions().to_dict(), name="options")
    _raises(MappingOptions.from_dict, MappingOptions().to_json(), name="options")


def test_pickle_copy_equality_and_hash():
    options = MappingOptions.pointwise().use_shared_memory(True)
    for clone in (pickle.loads(pickle.dumps(options)), copy.copy(options), copy.deepcopy(options)):
        assert clone == options and hash(clone) == hash(options) and type(clone) is MappingOptions
    assert len({options, MappingOptions.from_json(options.to_json()), MappingOptions.pointwise()}) == 2
    assert options != MappingOptions.pointwise() and options != options.to_dict() and options != None  # noqa: E711
    assert {options: 1}[MappingOptions.from_dict(options.to_dict())] == 1


# --- validation per target -----------------------------------------------------------------------


def test_validate_cuda_limits():
    big = MappingOptions().max_shared_memory(229 * 1024)
    for target in ("cuda", "cuda-emulated"):
        _raises(big.validate, target, name="max_shared_memory")
        MappingOptions().max_shared_memory(228 * 1024).validate(target)
        _raises(MappingOptions().shared_depth(3).private_depth(2).validate, target, name="private_depth")
        MappingOptions().shared_depth(2).private_depth(2).validate(target)
    assert big.validate("cpu") is big  # a CPU kernel never reads it
    MappingOptions().shared_depth(3).private_depth(2).validate("cpu")


def test_validate_cpu_register_tile():
    MappingOptions().register_tile(64, 16).validate("cpu")
    _raises(MappingOptions().register_tile(65).validate, "cpu", name="register_tile")
    error = _raises(MappingOptions().register_tile(64, 32).validate, "cpu", name="register_tile")
    assert "2048" in str(error)
    MappingOptions().register_tile(65).validate("cuda")  # CUDA ignores it


@pytest.mark.parametrize("target", ["gpu", "CPU", "", None, "cuda_emulated"])
def test_validate_unknown_target(target):
    _raises(MappingOptions().validate, target, name="target")


# --- the search space ----------------------------------------------------------------------------

SPACES = [
    ("cpu", None),
    ("cuda", None),
    ("cuda-emulated", (1,)),
    ("cuda", (100, 7, 3000)),
    ("cpu", ()),
    ("cpu", (64, 64, 64, 64)),
    ("cuda-emulated", (1 << 20, 3)),
]


@pytest.mark.parametrize(("target", "extents"), SPACES)
@settings(max_examples=N, deadline=None)
@given(data=st.data())
def test_every_point_of_the_space_is_valid_and_round_trips(target, extents, data):
    space = search_space(target, extents)
    genome = data.draw(st.tuples(*(st.integers(0, len(p.choices) - 1) for p in space.parameters)))
    options = space.decode(genome)
    assert options.validate(target) is options
    assert space.encode(options) == genome
    assert space.encode(options, nearest=True) == genome
    assert MappingOptions.from_json(options.to_json()) == options
    v = options.values
    if target == "cpu":
        assert all(r <= 64 for r in v.register_tile)
    else:  # the CUDA limits, checked against the documented numbers rather than the module's
        assert math.prod(v.map_to_threads) <= THREADS_PER_BLOCK
        assert all(b <= limit for b, limit in zip(v.map_to_threads, BLOCK_LIMITS))
        assert all(g <= limit for g, limit in zip(v.map_to_blocks, GRID_LIMITS))
    if extents is not None:
        assert len(v.tile) == len(extents)
        assert all(t == 0 or _power_of_two_or_ceil_divisor(t, e) for t, e in zip(v.tile, extents))


def _power_of_two_or_ceil_divisor(t: int, e: int) -> bool:
    """TC's powers2andCeilDivisors, written out: a power of two <= e, or ceil(e / 2**k)."""
    return 1 <= t <= e and (t & (t - 1) == 0 or any(-(-e // 2**k) == t for k in range(64)))


def test_space_contents():
    space = search_space("cuda", (100, 7))
    by_name = {p.name: p for p in space.parameters}
    # 0, the powers of two <= 100 and ceil(100 / 2**k) = 100, 50, 25, 13, 7, 4, 2, 1
    assert by_name["tile[0]"].choices == (0, 1, 2, 4, 7, 8, 13, 16, 25, 32, 50, 64, 100)
    assert by_name["tile[1]"].choices == (0, 1, 2, 4, 7)  # 7, ceil(7/2) = 4, ceil(7/4) = 2, 1
    assert by_name["unroll"].choices == (1, 2, 4, 8, 16, 32) == UNROLL_CHOICES
    assert set(by_name["outer_schedule_fusion_strategy"].choices) == set(FUSION_STRATEGIES)
    assert by_name["use_shared_memory"].choices == (False, True)
    for p in space.parameters:
        assert p.targets == FIELD_TARGETS[p.name.split("[")[0]] and "cuda" in p.targets
    assert not {"parallelize", "vectorize", "register_tile", "pack_operands"} & set(space.names)
    cpu = search_space("cpu")
    assert {"parallelize", "vectorize", "register_tile", "pack_operands"} <= set(cpu.names)
    assert not {"map_to_threads", "map_to_blocks", "use_shared_memory"} & set(cpu.names)
    assert [n for n in cpu.names if n.startswith("tile[")] == ["tile[0]", "tile[1]", "tile[2]"]


def test_block_and_grid_choices_are_every_valid_power_of_two_shape():
    powers = [2**k for k in range(11)]
    expected = set()
    for rank in (1, 2, 3):
        for shape in itertools.product(powers, repeat=rank):
            if math.prod(shape) <= THREADS_PER_BLOCK and all(s <= m for s, m in zip(shape, BLOCK_LIMITS)):
                expected.add(shape)
    assert set(BLOCK_CHOICES) == expected and len(BLOCK_CHOICES) == len(expected)
    assert len(set(GRID_CHOICES)) == len(GRID_CHOICES) == 11 + 11**2 + 11**3
    assert () in REGISTER_TILE_CHOICES and all(len(r) <= 2 for r in REGISTER_TILE_CHOICES)


@pytest.mark.parametrize("extent", [1, 2, 3, 7, 20, 64, 100, 1000, 4097])
def test_tile_choices_are_tcs_powers_of_two_and_ceil_divisors(extent):
    choices = search_space("cpu", (extent,)).parameters[0].choices
    expected = {t for t in range(1, extent + 1) if _power_of_two_or_ceil_divisor(t, extent)}
    assert choices == (0, *sorted(expected))
    assert extent in choices and -(-extent // 2) in choices  # the whole extent, and its half


def test_size_counts_points():
    space = search_space("cpu", (1,))
    # tile[0] in {0, 1}; 2 strategies x 3; 2 booleans; unroll 6; parallelize, vectorize; register_tile
    assert space.size() == 2 * 3 * 3 * 2 * 2 * 6 * 2 * 2 * len(REGISTER_TILE_CHOICES) * 2
    assert search_space("cuda").size() == math.prod(len(p.choices) for p in search_space("cuda").parameters)
    assert search_space("cuda", (2**40,) * 8).size() > 2**64  # a Python int, never an overflow


def test_sample_is_deterministic_per_seed():
    space = search_space("cuda", (512, 512, 64))
    first = [space.sample(random.Random(7)) for _ in range(2)]
    assert first[0] == first[1]
    assert len({space.sample(random.Random(seed)) for seed in range(20)}) > 1


def test_base_fills_the_options_not_searched():
    base = MappingOptions().vectorize(True).max_shared_memory(4096)
    space = search_space("cuda", base=base)
    options = space.sample(random.Random(0))
    assert options.values.vectorize and options.values.max_shared_memory == 4096
    _raises(search_space, "cuda", base=MappingOptions().max_shared_memory(1 << 20), name="max_shared_memory")


def test_encode_exact_names_what_is_outside_the_space():
    space = search_space("cuda", (64, 64, 64))
    _raises(space.encode, MappingOptions.pointwise(), name="unroll")  # unroll 128 is not a choice
    _raises(space.encode, MappingOptions().vectorize(True), name="vectorize")  # not searched, differs
    _raises(space.encode, MappingOptions().tile(32, 32), name="tile")  # 2 sizes, the space has 3
    _raises(space.encode, MappingOptions().map_to_threads(96), name="map_to_threads")
    _raises(space.encode, "naive", name="options")


def test_encode_nearest_seeds_from_presets_and_other_sizes():
    space = search_space("cuda", (20, 1000, 1000))
    for name in PRESETS:
        space.decode(space.encode(MappingOptions(name), nearest=True)).validate("cuda")
    seeded = space.decode(space.encode(MappingOptions.pointwise().tile(32), nearest=True))
    assert seeded.values.tile == (20, 0, 0)  # 32 > extent 20 -> the extent; missing members untiled
    assert seeded.values.unroll == 32 and seeded.values.map_to_blocks == (128, 128, 128)
    assert seeded.values.map_to_threads == (32, 4, 4)
    longer = space.decode(space.encode(MappingOptions().tile(8, 8, 8, 8), nearest=True))
    assert longer.values.tile == (8, 8, 8)


@pytest.mark.parametrize("genome", [(), (0,) * 100, "abc", 5, None, "tile"])
def test_decode_refuses_malformed_genomes(genome):
    _raises(search_space("cpu").decode, genome, name="genome")


def test_decode_refuses_bad_genes():
    space = search_space("cpu", (8,))
    ok = [0] * len(space.parameters)
    for gene in (-1, len(space.parameters[0].choices), True, 0.0, "0"):
        _raises(space.decode, [gene, *ok[1:]], name="genome")
    assert space.decode(ok) == space.decode(tuple(ok))


@pytest.mark.parametrize("extents", [(0,), (-4,), (2.5,), "ab", 7, (True,)])
def test_search_space_refuses_bad_extents(extents):
    _raises(search_space, "cpu", extents, name="loop_extents")


def test_search_space_refuses_bad_targets_and_parameters():
    _raises(search_space, "gpu", name="target")
    _raises(Parameter, "unroll", (), frozenset(TARGETS), name="unroll")
    _raises(Parameter, "unroll", (1, 1), frozenset(TARGETS), name="unroll")
    unroll = Parameter("unroll", (1, 2), frozenset(TARGETS))
    _raises(SearchSpace, "cpu", (Parameter("unrolling", (1,), frozenset()),), name="unrolling")
    _raises(SearchSpace, "cpu", (Parameter("tile[1]", (1,), frozenset()),), name="tile")
    _raises(SearchSpace, "cpu", (unroll, unroll), name="unroll")
    custom = SearchSpace("cpu", (unroll,), MappingOptions.mlp())
    assert custom.size() == 2 and custom.decode((1,)) == MappingOptions.mlp().unroll(2)
    assert custom.encode(MappingOptions.mlp().unroll(2)) == (1,)
