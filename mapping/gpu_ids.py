"""The filters that assign schedule members to the GPU mapping's ids (named in :mod:`.gpu_ir`).

Blocks are the parameters ``b0, b1, b2`` (``blockIdx.x, .y, .z``), threads ``t0, t1, t2``
(``threadIdx.x, .y, .z``); a member maps to an id through a filter ``member mod size = id``
(:func:`id_filter`), statements off the thread mapping run on thread 0 (:func:`constant_ids`,
:data:`~tcjit.mapping.gpu_ir.THREAD0_MARK`). The functions here build sets and maps from a band;
none edits a tree.
"""

from __future__ import annotations

import islpy as isl

from .gpu_ir import THREAD_IDS

__all__ = [
    "constant_ids",
    "id_filter",
    "id_function",
    "ids_function",
    "mentions_threads",
    "set_names",
    "unused_threads_zero",
]


def id_filter(band: isl.ScheduleNode, member: int, size: int, name: str) -> isl.UnionSet:
    """The instances below ``band`` whose ``member`` is ``name`` modulo ``size``."""
    eq = isl.Set.read_from_str(band.get_ctx(), f"[{name}] -> {{ [v] : v = {name} }}")
    rel = id_function(band, member, size).intersect_range(isl.UnionSet.from_set(eq))
    return rel.domain().intersect(band.get_domain())


def id_function(band: isl.ScheduleNode, member: int, size: int) -> isl.UnionMap:
    """Instance -> ``member`` modulo ``size`` (the id it is mapped to)."""
    upa = band.band_get_partial_schedule().get_union_pw_aff(member)
    upa = upa.mod_val(isl.Val.int_from_si(band.get_ctx(), size))
    return isl.UnionMap.from_union_pw_aff(upa).intersect_domain(band.get_domain())


def ids_function(band: isl.ScheduleNode, members, sizes) -> isl.UnionMap:
    """Instance -> ``(x, y, z)`` ids: ``members[k]`` of ``band`` modulo ``sizes[k]`` for the ids
    the members give, 0 for the others."""
    fn = None
    for k in range(3):
        part = (
            id_function(band, members[k], sizes[k])
            if k < len(members)
            else constant_ids(band.get_domain(), 1)
        )
        fn = part if fn is None else fn.flat_range_product(part)
    return fn


def unused_threads_zero(filt: isl.UnionSet, n: int) -> isl.UnionSet:
    """``filt`` (a thread filter over the first ``n`` thread ids) with the other ids 0: in a kernel
    whose block has more dimensions than this band uses, one thread of each such line runs it."""
    if n >= 3:
        return filt
    cons = " and ".join(f"{t} = 0" for t in THREAD_IDS[n:])
    zero = isl.Set.read_from_str(filt.get_ctx(), f"[{', '.join(THREAD_IDS[n:])}] -> {{ : {cons} }}")
    return filt.intersect_params(zero)


def constant_ids(domain: isl.UnionSet, n: int = 3) -> isl.UnionMap:
    """Instance -> ``n`` zeros (thread 0)."""
    zeros = isl.Set.read_from_str(domain.get_ctx(), f"{{ [{', '.join(['0'] * n)}] }}")
    return isl.UnionMap.from_domain_and_range(domain, isl.UnionSet.from_set(zeros))


def mentions_threads(s: isl.UnionSet) -> bool:
    space = s.get_space()
    return any(space.find_dim_by_name(isl.dim_type.param, t) >= 0 for t in THREAD_IDS)


def set_names(domain: isl.UnionSet) -> list[str]:
    """The names of the statements of ``domain``, sorted."""
    lst = domain.get_set_list()
    return sorted({lst.get_at(i).get_tuple_name() for i in range(lst.n_set())})
