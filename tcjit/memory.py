"""The process's memory budget for loaded CPU specialisations: their code and their workspaces.

Every CPU specialisation loaded in the process (:class:`tcjit.cpu_specialization.Specialization`) is
*admitted* to one budget, least recently used first out, in bytes: its library's size plus
:data:`LIBRARY_OVERHEAD`, plus what its workspaces keep between calls (temporaries, packed
panels: up to 64 MB each, ``tc_kept_bytes`` of the library). The limit is
``TCJIT_MEMORY_BUDGET`` (bytes; default :data:`DEFAULT_BUDGET`), read when a specialisation is
admitted. When admitting one takes the total over the limit, the least recently used others are
*evicted* until it fits (the one admitted stays, whatever its size):

* each cache that keeps the specialisation (:class:`SpecializationCache`: a kernel's per-layout
  cache, its differentiable calls, a call's backward specialisations) forgets it, so the next call
  of that layout loads it again from the kernel store on disk (nothing is compiled again while the
  store keeps it);
* its workspaces are freed (``release``).

Eviction never unloads code: a specialisation that something else still references (an autograd
graph, a ``tcjit.compile`` result, a call in flight) keeps working, and is admitted again (counted,
and its workspace kept) when it next runs. A library is unloaded when its last reference goes
(:class:`tcjit.cpu_runtime.CpuKernel`). CUDA specialisations are not in the budget: their modules
may be captured in CUDA graphs and are never unloaded implicitly.

Calls touch their specialisation (:meth:`Budget.touch`): one ``OrderedDict.move_to_end``.

A specialisation with symbolic sizes serves calls of many layouts; a cache keeps it under each
layout seen as an *alias* (:meth:`SpecializationCache.keep_alias`), so that a repeated layout
stays a dict lookup. It is counted once whatever the number of aliases, and a cache keeps at most
:data:`ALIASES_PER_CACHE` aliases, dropping the oldest (the next call of that layout finds the
specialisation again without compiling): new sizes do not accumulate entries.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

from .polyhedral.errors import TCWarning

__all__ = [
    "ALIASES_PER_CACHE",
    "BUDGET",
    "DEFAULT_BUDGET",
    "LIBRARY_OVERHEAD",
    "Budget",
    "SpecializationCache",
    "budget_limit",
]

#: The budget when ``TCJIT_MEMORY_BUDGET`` is unset: 256 MiB, four of the largest workspaces a
#: kernel keeps (64 MB) or thousands of small kernels.
DEFAULT_BUDGET = 256 << 20

#: Bytes counted per loaded library besides its file: the loader's and ctypes' bookkeeping, the
#: specialisation's Python objects and generated source (about 20 KB per small kernel, measured
#: with bench/memory.py), rounded up.
LIBRARY_OVERHEAD = 32 << 10

#: The aliases a :class:`SpecializationCache` keeps (layouts served by a specialisation with
#: symbolic sizes), most recently added last; older ones are dropped.
ALIASES_PER_CACHE = 64

_warned: set[str] = set()


def budget_limit() -> int:
    """The budget in bytes: ``TCJIT_MEMORY_BUDGET`` (a non-negative integer), else
    :data:`DEFAULT_BUDGET` (also, with a :class:`~tcjit.TCWarning` once, for a value that is not
    one)."""
    text = os.environ.get("TCJIT_MEMORY_BUDGET")
    if text is None:
        return DEFAULT_BUDGET
    try:
        limit = int(text)
        if limit < 0:
            raise ValueError(text)
    except ValueError:
        if text not in _warned:
            _warned.add(text)
            warnings.warn(
                f"tcjit: TCJIT_MEMORY_BUDGET={text!r} is not a number of bytes; using the default "
                f"({DEFAULT_BUDGET})",
                TCWarning,
                stacklevel=4,
            )
        return DEFAULT_BUDGET
    return limit


@dataclass(eq=False)
class _Entry:
    """A specialisation in the budget: a weak reference to it, its bytes, and the caches that
    keep it: ``(id(cache), key) -> weak reference to the cache`` (:class:`SpecializationCache`),
    pruned of collected caches as it grows (``prune_at``)."""

    ref: weakref.ref
    nbytes: int
    holders: dict = field(default_factory=dict)
    prune_at: int = 16


class SpecializationCache(dict):
    """A dict whose entries the budget drops when it evicts the specialisation they depend on.

    Lookups are plain ``dict`` lookups; entries are added with :meth:`keep` or
    :meth:`keep_alias`, removed with :meth:`drop`.
    """

    __slots__ = ("__weakref__", "_aliases")

    def __init__(self) -> None:
        super().__init__()
        self._aliases: OrderedDict = OrderedDict()  # alias key -> the specialisation it depends on

    def keep(self, key, value, spec=None):
        """``self[key] = value``, dropped when ``spec`` (default: ``value``, a specialisation) is
        evicted. Returns ``value``."""
        replaced = self._aliases.pop(key, None)
        if replaced is not None:
            BUDGET.unhold(replaced, self, key)
        self[key] = value
        BUDGET.hold(value if spec is None else spec, self, key)
        return value

    def keep_alias(self, key, value, spec=None):
        """:meth:`keep`, for a key among many that share ``spec`` (a specialisation with symbolic
        sizes): the cache keeps the :data:`ALIASES_PER_CACHE` most recently added aliases and
        drops the oldest. Returns ``value``."""
        spec = value if spec is None else spec
        with BUDGET.lock:
            self[key] = value
            BUDGET.hold(spec, self, key)
            self._aliases[key] = spec
            self._aliases.move_to_end(key)
            while len(self._aliases) > ALIASES_PER_CACHE:
                old, old_spec = self._aliases.popitem(last=False)
                if old in self:
                    del self[old]
                BUDGET.unhold(old_spec, self, old)
        return value

    @property
    def aliases(self) -> int:
        """How many entries are aliases (:meth:`keep_alias`)."""
        return len(self._aliases)

    def drop(self, key) -> None:
        """Remove ``key`` (if present), alias or not."""
        self.pop(key, None)
        self._aliases.pop(key, None)


class Budget:
    """Least-recently-used accounting of specialisations, in bytes (see the module docstring).

    A specialisation takes part when it has ``memory_bytes`` (an int) and ``release()``.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()  # reentrant: a weakref callback may fire while it is held
        #: the budget's lock (reentrant), for callers that update a cache and the budget together
        self.lock = self._lock
        self._recent: OrderedDict[int, _Entry] = OrderedDict()  # id(spec) -> entry, oldest first
        self.used = 0
        #: ``move_to_end(id(spec))``: marks a specialisation in the budget as just used (a
        #: ``KeyError`` if it is not in it: :meth:`admit` it again).
        self.touch = self._recent.move_to_end

    def __len__(self) -> int:
        return len(self._recent)

    def __contains__(self, spec) -> bool:
        entry = self._recent.get(id(spec))
        return entry is not None and entry.ref() is spec

    def admit(self, spec) -> None:
        """Count ``spec`` as the most recently used (again, if it was evicted), then evict the
        least recently used others while the total is over :func:`budget_limit`."""
        nbytes = getattr(spec, "memory_bytes", None)
        if nbytes is None:
            return
        with self._lock:
            token = id(spec)
            entry = self._recent.get(token)
            if entry is not None and entry.ref() is spec:
                self._recent.move_to_end(token)
                return
            ref = weakref.ref(spec, lambda r, token=token: self._forget(token, r))
            self._recent[token] = _Entry(ref, nbytes)
            self.used += nbytes
            self._trim(budget_limit())

    def hold(self, spec, cache: SpecializationCache, key) -> None:
        """Record that ``cache[key]`` depends on ``spec``: evicting ``spec`` removes it."""
        if getattr(spec, "memory_bytes", None) is None:
            return
        with self._lock:
            entry = self._recent.get(id(spec))
            if entry is None or entry.ref() is not spec:
                self.admit(spec)
                entry = self._recent[id(spec)]
            entry.holders[(id(cache), key)] = weakref.ref(cache)
            if len(entry.holders) > entry.prune_at:  # caches collected since (a dropped GradCall's)
                entry.holders = {h: r for h, r in entry.holders.items() if r() is not None}
                entry.prune_at = max(16, 2 * len(entry.holders))

    def unhold(self, spec, cache: SpecializationCache, key) -> None:
        """Undo :meth:`hold` (``cache[key]`` no longer depends on ``spec``)."""
        with self._lock:
            entry = self._recent.get(id(spec))
            if entry is not None and entry.ref() is spec:
                entry.holders.pop((id(cache), key), None)

    def holders(self, spec) -> int:
        """How many cache entries depend on ``spec`` (0 when it is not in the budget)."""
        with self._lock:
            entry = self._recent.get(id(spec))
            if entry is None or entry.ref() is not spec:
                return 0
            return sum(1 for r in entry.holders.values() if r() is not None)

    def trim(self, limit: int | None = None) -> int:
        """Evict least recently used specialisations until at most ``limit`` bytes (default:
        :func:`budget_limit`) are used, the most recent one excepted; the bytes used after."""
        with self._lock:
            self._trim(budget_limit() if limit is None else limit)
            return self.used

    def _trim(self, limit: int) -> None:
        while self.used > limit and len(self._recent) > 1:
            _, entry = self._recent.popitem(last=False)
            self.used -= entry.nbytes
            spec = entry.ref()
            for (_, key), cache_ref in entry.holders.items():
                cache = cache_ref()
                if cache is not None:
                    cache.drop(key)
            if spec is not None:
                spec.release()
            del spec  # the last reference may go here: the library is unloaded

    def _forget(self, token: int, ref: weakref.ref) -> None:
        """A specialisation in the budget was collected (its library is being unloaded)."""
        with self._lock:
            entry = self._recent.get(token)
            if entry is not None and entry.ref is ref:
                del self._recent[token]
                self.used -= entry.nbytes


#: The process's budget.
BUDGET = Budget()
