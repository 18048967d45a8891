"""Symbolic sizes: which size parameters a kernel's calls leave symbolic, and which calls one
symbolic specialisation serves (DESIGN.md, "Shapes").

**When a size is symbolic** (``tcjit.define(..., dynamic=...)``):

* ``None`` (the default, as torch.compile's automatic dynamic shapes): the first call
  specialises every size to its value; once a size parameter has been seen with a second value
  (>= 1), the next specialisation made leaves it symbolic, and every later value is served by
  that kernel. Specialisations made before stay, for the layouts they were made for.
* ``True``: every size symbolic from the first call. ``False``: never (one specialisation per
  layout). A collection of size names: those symbolic from the first call, the others automatic.

A kernel, its retyped variants and the forward and backward kernels derived from it share one
record of the values seen (:class:`SizePolicy`): a batch size seen in training counts for
evaluation calls too.

**Sizes 0 and 1.** A symbolic kernel serves every value >= 1 of its symbolic sizes, 1 included,
up to 2**31 - 1 (:data:`~tcjit.mapping.layout.MAX_SYMBOLIC_SIZE`, the most blocks a CUDA grid
has along x: a GPU kernel then needs no grid-stride loop there). A call where a symbolic size is
0 (an empty tensor) gets a specialisation with concrete sizes of its own, and a 0 is never
counted as a value seen; so does a call where it exceeds 2**31 - 1 (a dimension of 2**31
elements or more).

**Families.** One symbolic specialisation serves the calls of one :class:`Family`: the same
options, target, dtypes and devices; sums whose length depends on a symbolic size on the same
side of 16384 terms, from which float32 sums accumulate in float64 (``long_sums``: so a kernel
accumulates every call's sums in the type a kernel specialised to its sizes would, and a size
gets at most two symbolic kernels); every tensor whose shape mentions a symbolic size
contiguous (the kernel computes its strides from the sizes; torch's ``is_contiguous``, which
ignores the strides of dimensions of size 1); every other tensor with the same shape and
strides; the same value of every size that is not symbolic. A call with a non-contiguous tensor
whose shape mentions a symbolic size (a transposed batch, an expanded view) gets a specialisation
with concrete sizes instead, as with ``dynamic=False``. Every target has symbolic kernels
(:data:`SYMBOLIC_TARGETS`); on ``cuda`` and ``cuda-emulated`` a launch's grid is computed from the
call's sizes, its thread block is fixed (mapping/lower_gpu.py).

**Representative sizes.** The mapping's choices (tiles, parallel and vector loops, wide
accumulators) are made at one value of each symbolic size, the *representative*: when a family's
kernel is built, the sizes of the largest call (total elements of its inputs and outputs) among
the last :data:`RECENT` distinct calls seen that belong to the family (with ``dynamic=True`` or
names forced from the start: the first call's). They are not in the cache key: two processes may
store different code, equally correct for every admissible size, under one key.

**Options.** A family's options are chosen when its kernel is built: the call's ``options=``,
else those given to ``define``, else those of a tune over a range of sizes
(``autotune(..., size_ranges=...)``, :mod:`tcjit.tuning_range`) that holds every call of the
family seen (the narrowest; :func:`tcjit.tuned.lookup_range_options`), the kernel then mapped at
the range's upper bounds instead of the representative above; else options tuned for exactly the
layout of one of the family's calls seen (the representative first, then the others, largest
first), else the defaults at the representative sizes. Options tuned for one size thus serve
every size of the family (docs/tuning.md, "Tuning for a range of sizes").

**Proofs.** A symbolic kernel's schedule is proven legal for every value of its sizes. isl's proof
is bounded (``PROOF_OPERATIONS`` of its operations, polyhedral/schedule.py): where a definition's
proof would take longer (a backward kernel with every size symbolic can take hours), the call
gets a specialisation with concrete sizes, a :class:`TCWarning` says so once, and the definition
keeps concrete sizes from then on (:meth:`SizePolicy.refuse`): every new size compiles, as with
``dynamic=False``.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from .mapping.accumulation import long_sums
from .mapping.layout import MAX_SYMBOLIC_SIZE, admissible
from .polyhedral.errors import TCCallError, TCNameError, TCWarning
from .polyhedral.lang.checked import CheckedDef, CheckedProgram

__all__ = [
    "RECENT",
    "SYMBOLIC_TARGETS",
    "Family",
    "SizePolicy",
    "check_dynamic",
    "elements",
    "family_inputs",
    "family_of",
    "key_part",
    "mentions",
    "normalise_dynamic",
]

#: The targets whose kernels may have symbolic sizes: every one.
SYMBOLIC_TARGETS = frozenset({"cpu", "cuda-emulated", "cuda"})

#: How many distinct calls (their sizes) a :class:`SizePolicy` remembers to pick a representative.
RECENT = 16

#: What ``dynamic=`` holds once normalised: None, True, False or the names forced symbolic.
Dynamic = bool | frozenset[str] | None


def normalise_dynamic(dynamic: object) -> Dynamic:
    """``dynamic=`` of :func:`tcjit.define` as kept: ``None``, ``True``, ``False``, or a frozenset
    of size names (from any collection of strings).

    :raises TCCallError: anything else (a single string among them: write ``{"B"}``).
    """
    if dynamic is None or isinstance(dynamic, bool):
        return dynamic
    if isinstance(dynamic, str):
        raise TCCallError(
            f"dynamic= takes None, True, False or a collection of size names, got the string {dynamic!r}",
            hint=f"dynamic={{{dynamic!r}}} makes that size symbolic",
        )
    if isinstance(dynamic, Collection) and all(isinstance(n, str) for n in dynamic):
        return frozenset(dynamic)
    raise TCCallError(
        f"dynamic= takes None, True, False or a collection of size names, got {dynamic!r}",
        hint="e.g. dynamic={'B'} for a symbolic batch size",
    )


def check_dynamic(program: CheckedProgram, entries: Sequence[CheckedDef], dynamic: Dynamic) -> None:
    """Refuse names in ``dynamic`` that are no size parameter of any of ``entries`` (the kernels
    ``define`` returns): a :class:`TCNameError` with the caret at the first entry's name."""
    if not isinstance(dynamic, frozenset):
        return
    known = {n for d in entries for n in d.sizes}
    unknown = sorted(dynamic - known)
    if unknown:
        first = entries[0]
        what = f"'{first.name}'" if len(entries) == 1 else "any entry"
        listed = ", ".join(sorted(known)) or "none"
        raise TCNameError(
            f"dynamic= names {', '.join(repr(n) for n in unknown)}, which is not a size parameter of "
            f"{what}; its size parameters are {listed}",
            source=program.source,
            span=first.ast.name_span,
            where=first.name,
            hint="name sizes as the signature writes them (float(B, M) I has sizes B and M)",
        )


def mentions(cdef: CheckedDef, name: str, symbolic: Collection[str]) -> bool:
    """Whether the shape of tensor ``name`` of ``cdef`` depends on a size in ``symbolic``."""
    return any(not e.symbols().isdisjoint(symbolic) for e in cdef.tensor(name).shape)


def elements(cdef: CheckedDef, sizes: Mapping[str, int]) -> int:
    """The total elements of ``cdef``'s inputs and outputs at ``sizes``: what "largest call" means."""
    total = 0
    for t in cdef.tensor_infos:
        if t.role != "temporary":
            n = 1
            for e in t.shape:
                n *= max(0, e.evaluate(sizes))
            total += n
    return total


@dataclass(frozen=True)
class Family:
    """The calls one specialisation with symbolic sizes serves (see the module docstring).

    :ivar symbolic: the symbolic size names.
    :ivar fixed: ``(name, value)`` of every other size, in the definition's order.
    :ivar inputs: per argument: ``(dtype, device)`` for a contiguous tensor whose shape mentions a
        symbolic size, ``(dtype, shape, strides, device)`` for another tensor, the Python type of
        a number.
    :ivar outputs: the same for ``outputs=`` tensors, or None without them.
    :ivar long_sums: the tensors whose sums depend on a symbolic size and have 16384 terms or more
        (:func:`~tcjit.mapping.accumulation.long_sums`): the kernel accumulates them in float64,
        the others in their own type, as a kernel specialised to the call's sizes would; calls
        on the other side of that length belong to another family.
    """

    symbolic: frozenset[str]
    fixed: tuple[tuple[str, int], ...]
    inputs: tuple
    outputs: tuple | None
    long_sums: frozenset[str] = frozenset()


def _pattern(cdef: CheckedDef, name: str, x, symbolic: frozenset[str]):
    """One argument's part of a :class:`Family`; None for a non-contiguous tensor that mentions a
    symbolic size (no family serves it)."""
    import torch

    if not isinstance(x, torch.Tensor):
        return type(x)
    device = torch.device("cpu") if x.device.type == "meta" else x.device  # meta: tcjit.compile
    if mentions(cdef, name, symbolic):
        return (x.dtype, device) if x.is_contiguous() else None
    return (x.dtype, tuple(x.shape), x.stride(), device)


def family_of(
    cdef: CheckedDef,
    sizes: Mapping[str, int],
    inputs: Sequence[object],
    outputs: Sequence[object] | None,
    symbolic: Collection[str],
) -> Family | None:
    """The family of a call of ``cdef`` (bound to ``sizes``) with the sizes ``symbolic`` left
    symbolic, or None when the call needs concrete sizes: nothing symbolic, a symbolic size that is
    not admissible (below 1, above :data:`~tcjit.mapping.layout.MAX_SYMBOLIC_SIZE`), or a
    non-contiguous tensor whose shape mentions a symbolic size."""
    symbolic = frozenset(n for n in symbolic if n in sizes)
    if not symbolic or not all(admissible(sizes[n]) for n in symbolic):
        return None
    ins = tuple(_pattern(cdef, p, x, symbolic) for p, x in zip(cdef.params, inputs))
    if None in ins:
        return None
    outs = None
    if outputs is not None:
        outs = tuple(_pattern(cdef, o, t, symbolic) for o, t in zip(cdef.outputs, outputs))
        if None in outs:
            return None
    fixed = tuple((n, sizes[n]) for n in cdef.sizes if n not in symbolic)
    return Family(symbolic, fixed, ins, outs, long_sums(cdef, sizes, symbolic))


def key_part(cdef: CheckedDef, family: Family) -> dict:
    """What the cache key (:func:`tcjit.kernel_cache.cache_key`) records of a family: the symbolic
    sizes and their admissible values, the other sizes' values, and for each tensor whose shape
    mentions a symbolic size its dimensions (a number, or the expression of the sizes) in place of
    its shape and strides, which the key then gives as ``"contiguous"``. Never a symbolic size's
    value."""
    fixed = dict(family.fixed)

    def dims(name: str) -> list | None:
        if not mentions(cdef, name, family.symbolic):
            return None
        return [
            str(e) if not e.symbols() <= fixed.keys() else e.evaluate(fixed) for e in cdef.tensor(name).shape
        ]

    return {
        "sizes": sorted(family.symbolic),
        "admissible": f"1..{MAX_SYMBOLIC_SIZE}",
        "long_sums": sorted(family.long_sums),
        "fixed": fixed,
        "inputs": [None if p in cdef.scalars else dims(p) for p in cdef.params],
        "outputs": None if family.outputs is None else [dims(o) for o in cdef.outputs],
    }


def family_inputs(
    cdef: CheckedDef, family: Family, sizes: Mapping[str, int], inputs: Sequence[object]
) -> tuple:
    """Arguments of the family's layout at ``sizes`` (a call seen): ``meta`` tensors with the
    dtypes, shapes and strides a call at those sizes has (contiguous where the shape mentions a
    symbolic size), and ``inputs``' numbers; what the tuned options are looked up by."""
    import torch

    from .mapping.layout import contiguous_strides

    out = []
    for p, pattern, x in zip(cdef.params, family.inputs, inputs):
        if isinstance(pattern, type):
            out.append(x)
        elif len(pattern) == 2:
            shape = tuple(e.evaluate(sizes) for e in cdef.tensor(p).shape)
            out.append(torch.empty_strided(shape, contiguous_strides(shape), dtype=pattern[0], device="meta"))
        else:
            out.append(torch.empty_strided(pattern[1], pattern[2], dtype=pattern[0], device="meta"))
    return tuple(out)


class SizePolicy:
    """The record of the sizes a kernel's calls had, and the sizes it makes symbolic (the rule of
    the module docstring). Shared by a kernel, its variants and its derived kernels; thread-safe.

    :ivar dynamic: ``dynamic=`` as normalised (:func:`normalise_dynamic`).
    """

    def __init__(self, dynamic: Dynamic = None) -> None:
        self.dynamic = dynamic
        self._lock = threading.Lock()
        self._first: dict[str, int] = {}  # the first value >= 1 seen of each size
        self._auto: set[str] = set()  # the sizes seen with a second value
        self._recent: OrderedDict[tuple[tuple[str, int], ...], None] = OrderedDict()
        self._refused: set[str] = set()  # definitions whose symbolic kernels could not be proven

    def refuse(self, name: str, why: Exception) -> None:
        """Keep definition ``name``'s sizes concrete from now on: the legality proof of its kernel
        with symbolic sizes stopped at its budget (``why``); warns once."""
        with self._lock:
            first = name not in self._refused
            self._refused.add(name)
        if first:
            warnings.warn(
                f"{name}: its sizes stay concrete, every new size compiles a specialisation: proving"
                f" its kernel with symbolic sizes legal takes isl too long ({why})",
                TCWarning,
                stacklevel=2,
            )

    def refused(self, name: str) -> bool:
        """Whether definition ``name`` keeps concrete sizes (:meth:`refuse`)."""
        return name in self._refused

    def _forced(self, names: Collection[str]) -> set[str]:
        if self.dynamic is True:
            return set(names)
        if isinstance(self.dynamic, frozenset):
            return self.dynamic & set(names)
        return set()

    def observe(self, sizes: Mapping[str, int]) -> frozenset[str]:
        """Record a call's ``sizes``; the names among them its specialisation leaves symbolic."""
        if self.dynamic is False:
            return frozenset()
        with self._lock:
            for n, v in sizes.items():
                if v >= 1 and n not in self._auto and self._first.setdefault(n, v) != v:
                    self._auto.add(n)
            seen = tuple(sorted(sizes.items()))
            self._recent[seen] = None
            self._recent.move_to_end(seen)
            while len(self._recent) > RECENT:
                self._recent.popitem(last=False)
            auto = {n for n in sizes if n in self._auto}
        return frozenset(auto | self._forced(sizes))

    def symbolic(self, names: Collection[str]) -> frozenset[str]:
        """The sizes among ``names`` that are symbolic now (nothing recorded)."""
        if self.dynamic is False:
            return frozenset()
        with self._lock:
            auto = {n for n in names if n in self._auto}
        return frozenset(auto | self._forced(names))

    def seen(self, cdef: CheckedDef, family: Family, sizes: Mapping[str, int]) -> list[dict[str, int]]:
        """The calls recorded that belong to ``family`` (``sizes``, the call at hand, included),
        largest first (:func:`elements`); the first is the representative."""
        names = set(cdef.sizes)
        fixed = dict(family.fixed)
        with self._lock:
            recorded = [dict(s) for s in self._recent]
        calls = []
        for s in [*recorded, dict(sizes)]:
            if set(s) == names and all(s[n] == v for n, v in fixed.items()):
                if (
                    all(admissible(s[n]) for n in family.symbolic)
                    and long_sums(cdef, s, family.symbolic) == family.long_sums
                    and s not in calls
                ):
                    calls.append(s)
        calls.sort(key=lambda s: elements(cdef, s), reverse=True)  # stable: ties keep the earliest
        return calls
