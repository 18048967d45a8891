"""Tuned options for calls: the process's options database and the key a call's options are stored under.

* :func:`options_database` opens the :class:`~tcjit.cache.OptionsDatabase` named by
  ``TCJIT_OPTIONS_DB`` (default ``<user data dir>/tcjit/options.sqlite3``: tuning results take hours
  to make, so they live with data, not in the cache directory; ``""`` disables the database).
* :func:`tuning_key` is the :class:`~tcjit.cache.TuningKey` of a kernel called on some inputs.
* :func:`stored_options` finds the options tuned for exactly that key, for a call to use;
  :func:`lookup_options` finds them with the record they come from (what ``tcjit run`` reports). A
  call never fails because of the database: problems cost a :class:`~tcjit.TCWarning` and ``None``.
* :func:`range_key` is the key of options tuned for a range of sizes (``autotune(...,
  size_ranges=...)``): the sizes left symbolic with their bounds in place of their values;
  :func:`lookup_range_options` finds, for a kernel with symbolic sizes, the record of such a run
  whose ranges hold every call of its family seen.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .cache import OptionsDatabase, TuningKey, parse_range_layout
from .dynamic import Family, key_part
from .mapping.option_values import TARGETS
from .polyhedral.errors import TCCallError, TCError, TCWarning

__all__ = [
    "StoredOptions",
    "device_arch",
    "lookup_options",
    "lookup_range_options",
    "options_database",
    "range_key",
    "range_representative",
    "stored_options",
    "tuning_key",
]

_LOCK = threading.Lock()
_DATABASES: dict[str, OptionsDatabase | None] = {}
_WARNED: set[tuple[str, str]] = set()  # (database path, digest) already warned about


def options_database() -> OptionsDatabase | None:
    """The process's options database (one object per path), or ``None`` when disabled or unusable.

    ``TCJIT_OPTIONS_DB`` names the file; ``""`` disables the database; unset, it is
    ``platformdirs.user_data_dir("tcjit")/options.sqlite3`` (e.g. ``~/.local/share/tcjit/...``).
    A path that cannot be a database (a directory) warns once and gives ``None``.
    """
    path = os.environ.get("TCJIT_OPTIONS_DB")
    if path is None:
        import platformdirs

        path = os.path.join(platformdirs.user_data_dir("tcjit"), "options.sqlite3")
    if path == "":
        return None
    with _LOCK:
        if path not in _DATABASES:
            try:
                _DATABASES[path] = OptionsDatabase(path)
            except (TCError, OSError, ValueError) as err:
                warnings.warn(f"tcjit: tuned-options database disabled: {err}", TCWarning, stacklevel=2)
                _DATABASES[path] = None
        return _DATABASES[path]


def _layout(x: object) -> list | str:
    """One input's layout as in the compiled-kernel cache key: dtype, shape, strides, or "scalar"."""
    import torch

    if isinstance(x, torch.Tensor):
        return [str(x.dtype).removeprefix("torch."), list(x.shape), list(x.stride())]
    return "scalar"


def device_arch(inputs: Sequence[object], target: str) -> str:
    """The architecture part of a tuning key: ``"sm_<major><minor>"`` of the inputs' CUDA device
    (the current device when no input is on one), or the host's ISA identity for the CPU targets.

    >>> device_arch((), "cpu")
    'x86_64-3f9c0e1a2b4d5e6f'
    """
    if target != "cuda":
        from .cpu_runtime import host_isa

        return host_isa()
    import torch

    device = next((x.device for x in inputs if isinstance(x, torch.Tensor) and x.device.type == "cuda"), None)
    if device is None:
        if not torch.cuda.is_available():
            raise TCCallError("target 'cuda' needs a CUDA device, and torch sees none")
        device = torch.device("cuda", torch.cuda.current_device())
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def tuning_key(kernel, inputs: Sequence[object], target: str) -> TuningKey:
    """The key options tuned for ``kernel`` called on ``inputs`` with ``target`` are stored under.

    :arg kernel: a :class:`~tcjit.Kernel` (its canonical source and entry name are used).
    :arg inputs: the call's arguments: torch tensors (dtype, shape and strides count; contents do
        not) or Python numbers.
    :arg target: ``"cpu"``, ``"cuda"`` or ``"cuda-emulated"``.
    :raises TCCallError: an unknown target, or ``"cuda"`` without a CUDA device.

    >>> tuning_key(matmul, (a, b), "cpu").layout
    '[["float32",[64,32],[32,1]],["float32",[32,16],[16,1]]]'
    """
    from .version import __version__

    if target not in TARGETS:
        raise TCCallError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    layout = json.dumps([_layout(x) for x in inputs], separators=(",", ":"))
    return TuningKey(
        source=kernel.canonical_source,
        entry=kernel.name,
        layout=layout,
        target=target,
        arch=device_arch(inputs, target),
        version=__version__,
    )


@dataclass(frozen=True)
class StoredOptions:
    """Options tuned for a call, as :func:`lookup_options` finds them.

    :ivar options: the :class:`~tcjit.MappingOptions`, validated for the call's target; ``None``
        for a record that says "use the defaults" (tuning found nothing faster beyond the noise:
        the running version's defaults are used, :data:`~tcjit.cache.USE_DEFAULTS`).
    :ivar key: the record's :class:`~tcjit.cache.TuningKey`; ``key.digest[:12]`` is its id in
        ``tcjit cache list``.
    :ivar database: the path of the database that holds the record.
    :ivar ranges: for a record tuned for a range of sizes (:func:`lookup_range_options`), its
        inclusive bounds per symbolic size, ``{"B": (1, 64)}``; ``None`` for an exact match.
    """

    options: object
    key: TuningKey
    database: str
    ranges: Mapping[str, tuple[int, int]] | None = None


def stored_options(kernel, inputs: Sequence[object], target: str):
    """The :class:`~tcjit.MappingOptions` tuned for exactly this call, or ``None`` for the defaults
    (:func:`lookup_options`, without the record: also for a record that says "use the defaults")."""
    found = lookup_options(kernel, inputs, target)
    return None if found is None else found.options


def lookup_options(kernel, inputs: Sequence[object], target: str) -> StoredOptions | None:
    """The options tuned for exactly this call and the record they come from, or ``None``.

    ``None`` also when the database is disabled or cannot be read, and when the stored options no
    longer parse or validate for ``target`` (a :class:`~tcjit.TCWarning`, once per record and
    process, says so: tune again, or remove the record with ``tcjit cache``). Every call without
    ``options=`` goes through here (:func:`stored_options`), so what it returns is what a call uses.
    """
    db = options_database()
    if db is None:
        return None
    try:
        key = tuning_key(kernel, inputs, target)
    except TCError:
        return None  # the call itself reports what is wrong with it
    try:
        record = db.get(key)
    except (TCError, OSError, sqlite3.Error) as err:  # get() should not raise; a call must not fail
        _warn_once(db, key, f"tcjit: tuned options not read from {db.path}: {err}")
        return None
    if record is None:
        return None
    if record.uses_defaults:
        return StoredOptions(None, key, str(db.path))
    from .mapping.options import MappingOptions

    try:
        options = MappingOptions.from_json(record.options).validate(target)
        return StoredOptions(options, key, str(db.path))
    except TCError as err:
        _warn_once(
            db,
            key,
            f"tcjit: the tuned options stored for {kernel.name} ({key.digest[:12]} in {db.path}) are not "
            f"usable any more, defaults are used instead: {err}. Tune again, or remove them with "
            f"'tcjit cache clear --options'",
        )
        return None


def _warn_once(db: OptionsDatabase, key: TuningKey, message: str) -> None:
    with _LOCK:
        if (str(db.path), key.digest) in _WARNED:
            return
        _WARNED.add((str(db.path), key.digest))
    warnings.warn(message, TCWarning, stacklevel=3)


# ------------------------------------------------------------------------- ranges of sizes
def _range_fields(cdef, family: Family) -> dict:
    """The parts of a range layout (:func:`~tcjit.cache.parse_range_layout`) that a family fixes:
    the other sizes' values and each input's dtype and dimensions (or shape and strides)."""
    dims = key_part(cdef, family)["inputs"]
    inputs: list = []
    for pattern, shape in zip(family.inputs, dims):
        if isinstance(pattern, type):
            inputs.append("scalar")
            continue
        dtype = str(pattern[0]).removeprefix("torch.")
        if len(pattern) == 2:  # contiguous, its shape mentions a symbolic size
            inputs.append([dtype, shape, "contiguous"])
        else:
            inputs.append([dtype, list(pattern[1]), list(pattern[2])])
    return {"fixed": dict(family.fixed), "inputs": inputs}


def range_key(
    kernel, family: Family, ranges: Mapping[str, tuple[int, int]], target: str, inputs: Sequence[object]
) -> TuningKey:
    """The key options tuned for ``kernel`` over a range of sizes are stored under: its layout
    holds the family's symbolic sizes with their inclusive ``ranges`` (``{"B": (1, 64)}``, one
    per symbolic size), the other sizes' values, and per input its dtype and dimensions (see
    :func:`~tcjit.cache.parse_range_layout`); never a symbolic size's value.

    :arg family: the :class:`~tcjit.dynamic.Family` of the calls tuned for (any call in range).
    :arg inputs: a call's arguments (for the device's architecture).

    >>> range_key(fcrelu, family, {"B": (1, 64)}, "cpu", (x, w, b)).layout
    '{"fixed":{"M":128,"N":64},"inputs":[["float32",["B",128],"contiguous"],...],"ranges":{"B":[1,64]}}'
    """
    from .version import __version__

    if set(ranges) != set(family.symbolic):
        raise TCCallError(
            f"ranges {sorted(ranges)} do not name the family's symbolic sizes {sorted(family.symbolic)}"
        )
    fields = _range_fields(kernel.definition, family)
    fields["ranges"] = {n: [int(lo), int(hi)] for n, (lo, hi) in ranges.items()}
    return TuningKey(
        source=kernel.canonical_source,
        entry=kernel.name,
        layout=json.dumps(fields, sort_keys=True, separators=(",", ":")),
        target=target,
        arch=device_arch(inputs, target),
        version=__version__,
    )


def lookup_range_options(
    kernel, family: Family, calls: Sequence[Mapping[str, int]], inputs: Sequence[object], target: str
) -> StoredOptions | None:
    """The options of a range tune of ``kernel`` (:func:`range_key`) that holds every call in
    ``calls``, for the kernel of ``family``; ``None`` when there is none (or no database).

    A record holds a call when it was stored by this tcjit version for this kind of device and
    target, each size with a range lies in it, each other size has the record's value, and each
    input has the record's dtype and strides (contiguous where the record says so). A size may be
    symbolic in the family and fixed in the record (``dynamic=True`` makes every size symbolic),
    or the reverse. Among the records that hold every call, the narrowest wins (least sum over
    its ranges of ``log2(hi / lo)``; the newest at a tie). A record that says "use the defaults"
    is returned as such (``options`` ``None``); one whose options no longer validate is skipped
    with a :class:`~tcjit.TCWarning`. The family's kernel is then mapped at
    :func:`range_representative`.

    :arg calls: the sizes of the family's calls seen (:meth:`tcjit.dynamic.SizePolicy.seen`).
    :arg inputs: the call at hand's arguments.
    """
    db = options_database()
    if db is None:
        return None
    from .dynamic import family_inputs
    from .mapping.accumulation import long_sums
    from .version import __version__

    cdef = kernel.definition
    try:
        arch = device_arch(inputs, target)
        probe = TuningKey(kernel.canonical_source, kernel.name, "", target, arch, __version__)
        records = db.nearest(probe, limit=sys.maxsize)  # every record of the kernel here (the probe is none)
        layouts = [[_layout(x) for x in family_inputs(cdef, family, c, inputs)] for c in calls]
    except (TCError, OSError, sqlite3.Error):
        return None
    covering = []
    for record in records:
        theirs = parse_range_layout(record.key.layout)
        if (
            theirs is None
            or record.key.version != __version__
            or set(theirs["ranges"]) | set(theirs["fixed"]) != set(cdef.sizes)
        ):
            continue
        bounds = {n: (lo, hi) for n, (lo, hi) in theirs["ranges"].items()}
        if all(
            all(lo <= call[n] <= hi for n, (lo, hi) in bounds.items())
            and all(call[n] == v for n, v in theirs["fixed"].items())
            and _range_layout_at(cdef, theirs, call) == layout
            for call, layout in zip(calls, layouts)
        ):
            rep = range_representative(family, calls, bounds)
            if long_sums(cdef, rep, family.symbolic) == family.long_sums:
                covering.append((sum(math.log2(hi / lo) for lo, hi in bounds.values()), record, bounds))
    covering.sort(key=lambda t: t[0])  # stable: records come newest first
    from .mapping.options import MappingOptions

    for _, record, bounds in covering:
        if record.uses_defaults:
            return StoredOptions(None, record.key, str(db.path), bounds)
        try:
            options = MappingOptions.from_json(record.options).validate(target)
        except TCError as err:
            _warn_once(
                db,
                record.key,
                f"tcjit: the options tuned for {kernel.name} over {_describe(bounds)} "
                f"({record.key.digest[:12]} in {db.path}) are not usable any more: {err}. Tune again, "
                f"or remove them with 'tcjit cache clear --options'",
            )
            continue
        return StoredOptions(options, record.key, str(db.path), bounds)
    return None


def range_representative(
    family: Family, calls: Sequence[Mapping[str, int]], ranges: Mapping[str, tuple[int, int]]
) -> dict[str, int]:
    """The sizes the kernel of ``family`` is mapped at when it uses options tuned over
    ``ranges``: as the range tune mapped its candidates, each of the family's symbolic sizes that
    has a range at its upper bound; the other sizes as in the largest call seen (``calls[0]``)."""
    return {**calls[0], **{n: hi for n, (_, hi) in ranges.items() if n in family.symbolic}}


def _range_layout_at(cdef, theirs: dict, sizes: Mapping[str, int]) -> list:
    """The layout (as :func:`tuning_key` writes it) that the range layout ``theirs`` gives a call
    at ``sizes``."""
    from .mapping.layout import contiguous_strides

    out: list = []
    for p, item in zip(cdef.params, theirs["inputs"]):
        if item == "scalar":
            out.append(item)
            continue
        shape = [e.evaluate(sizes) for e in cdef.tensor(p).shape]
        strides = list(contiguous_strides(shape)) if item[2] == "contiguous" else item[2]
        out.append([item[0], shape, strides])
    return out


def _describe(ranges: Mapping[str, tuple[int, int]]) -> str:
    """``B=1..64, T=8..512``."""
    return ", ".join(f"{n}={lo}..{hi}" for n, (lo, hi) in sorted(ranges.items()))
