"""What memory promotion groups and decides: the references of a scope, their groups, the buffers.

Groups join the references of one tensor inside a scope while two of them, one a write, touch a
common element in one scope iteration. :class:`Promoter` holds what shared and private promotion
share (:mod:`.promotion_shared`, :mod:`.promotion_private`): the Scop's references tagged with
their statement instances, the groups of a scope, the name of a group's buffer and the redirection
of its references, the reuse test, the band of a copy statement. :func:`live_in` gives what a group
that writes must copy in. Grouping only reads the tree; a redirected reference reads the element it
read before, from the buffer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import islpy as isl

from ..polyhedral.names import tc_name
from ..polyhedral.scop import Access, Scop, instance_text
from . import ir
from .gpu_ir import Promoted
from .layout import size_var
from .promotion_footprints import Box, aff_expr, single_aff
from .promotion_types import TensorInfo

__all__ = ["Decision", "Group", "Promoter", "Ref", "Scope", "live_in"]


@dataclass(frozen=True)
class Ref:
    """A reference inside a scope: its access, its tagged relation restricted to the scope's
    instances, and its footprint per scope point."""

    access: Access
    tagged: isl.UnionMap  # [S[i] -> R[]] -> T[a], the instances inside the scope
    footprint: isl.UnionMap  # scope point -> T[a]


@dataclass(frozen=True)
class Group:
    """The references to one tensor inside a scope that are promoted together (:func:`_groups`)."""

    tensor: str
    refs: tuple[Ref, ...]

    @property
    def writes(self) -> bool:
        return any(r.access.write for r in self.refs)

    def footprint(self, which: Sequence[Ref] | None = None) -> isl.UnionMap:
        refs = self.refs if which is None else which
        out = refs[0].footprint
        for r in refs[1:]:
            out = out.union(r.footprint)
        return out


def _groups(refs: Sequence[Ref]) -> list[Group]:
    """Per tensor, one group per reference, joined while two groups, one of them writing, touch a
    common element in one scope iteration."""
    groups = [Group(r.access.tensor, (r,)) for r in refs]
    merged = True
    while merged:
        merged = False
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                a, b = groups[i], groups[j]
                if a.tensor != b.tensor or not (a.writes or b.writes):
                    continue
                if a.footprint().intersect(b.footprint()).is_empty():
                    continue
                groups[i] = Group(a.tensor, a.refs + b.refs)
                del groups[j]
                merged = True
                break
            if merged:
                break
    return groups


@dataclass(frozen=True)
class Decision:
    """A promoted group: its buffer, where its references go, what to copy in and out per scope
    point (maps ``s -> T[a]`` with the block ids as parameters, or None)."""

    buffer: ir.Buffer
    accesses: Mapping[tuple[str, str], Promoted]
    copy_in: isl.Map | None
    copy_out: isl.Map | None
    offsets: tuple[ir.Expr, ...]  # over Var("s<k>")
    strides: tuple[int, ...]
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class Scope:
    """A promotion scope: the path of its node, its kernel, its outer schedule's points, whether
    something runs before it or after it (or it runs again) in the block, what it promoted."""

    path: tuple[int, ...]
    kernel: int
    outer: isl.UnionSet  # the scope's outer schedule points, per block
    before: bool  # something earlier in the kernel
    again: bool  # it runs again in the block, or something follows it
    promoted: tuple[Decision, ...]


def live_in(g: Group, scoped: isl.UnionMap, order: isl.UnionMap) -> isl.Map | None:
    """What a group that writes must copy in: per scope point, the elements it reads before (or
    without) writing them in that scope iteration (PPCG's live-in reads), or None.

    Flow analysis with each access tagged by its scope point (``instance -> [s -> T[a]]``): a
    write in another scope iteration is to another datum and cannot be a read's source, so the
    reads with no source are exactly those whose value comes from outside the iteration.
    ``order`` is the schedule of the scope's instances (the scope points, then the subtree)."""

    def tagged(refs: Sequence[Ref]) -> isl.UnionMap:
        out = refs[0].tagged.domain_factor_domain()
        for r in refs[1:]:
            out = out.union(r.tagged.domain_factor_domain())
        return scoped.range_product(out)

    reads = [r for r in g.refs if not r.access.write]
    writes = [r for r in g.refs if r.access.write]
    unsourced = (
        isl.UnionAccessInfo.from_sink(tagged(reads))
        .set_must_source(tagged(writes))
        .set_schedule_map(order)
        .compute_flow()
        .get_may_no_source()
    )
    if unsourced.is_empty():
        return None
    return isl.Map.from_union_map(unsourced.range().unwrap())


class Promoter:
    """The analysis shared and private promotion share, on the kernels of one mapped tree (see the
    module's docstring)."""

    def __init__(self, scop: Scop, fixed: isl.Set, options, tensors: Mapping[str, TensorInfo], ids):
        self.ctx = scop.ctx
        self.options = options
        self.tensors = tensors
        self.block_ids, self.thread_ids, self.thread0 = ids
        # each size's value, or a symbolic size's C variable (free in ``fixed``: mapping/symbolic.py)
        self.params: dict[str, int | str] = {}
        for i in range(fixed.dim(isl.dim_type.param)):
            name, value = (
                fixed.get_dim_name(isl.dim_type.param, i),
                fixed.plain_get_val_if_fixed(isl.dim_type.param, i),
            )
            self.params[name] = int(value.to_python()) if value.is_int() else size_var(tc_name(name))
        self.dims = {s.name: s.dims for s in scop.statements}
        instances = {s.name: instance_text(s) for s in scop.statements}
        self.refs: list[tuple[Access, isl.UnionMap]] = []
        for acc in scop.accesses:
            rel = (scop.writes if acc.write else scop.reads).intersect_params(fixed)
            tag = isl.UnionSet.read_from_str(self.ctx, f"{{ [{instances[acc.statement]} -> {acc.ref}[]] }}")
            self.refs.append((acc, rel.intersect_domain(tag)))
        self.decisions: list[str] = []
        self.unpromoted: frozenset[str] = frozenset()  # tensors left alone (symbolic shapes)
        self.named: dict[str, int] = {}
        self.syncs = 0

    def scope_groups(self, node: isl.ScheduleNode) -> tuple[isl.UnionSet, isl.UnionMap, list[Group]]:
        """The scope at ``node``: its outer schedule's points, the map from statement instances to
        them, and the groups of the references inside, those with more references first."""
        prefix = node.get_prefix_schedule_union_map()
        scoped = prefix.project_out_all_params()
        domain = scoped.domain()
        refs = []
        for acc, rel in self.refs:
            inside = rel.intersect_domain(rel.domain().unwrap().intersect_domain(domain).wrap())
            if inside.is_empty():
                continue
            refs.append(Ref(acc, inside, scoped.reverse().apply_range(inside.domain_factor_domain())))
        order = sorted(_groups(refs), key=lambda g: (-len(g.refs), g.tensor, g.refs[0].access.ref))
        return prefix.range(), scoped, order

    def buffer(self, g: Group, box: Box, footprint: isl.Map, scoped: isl.UnionMap, kind: str):
        """The buffer of ``kind`` (``"shared"``, ``"private"``) for group ``g``: its name (numbered
        per tensor), the box's offsets as functions of the scope's points ``s0, s1...``, and how
        each reference reads it; or why not."""
        k = self.named.get(g.tensor, 0)
        name = f"tc_{kind}_{g.tensor}" + (f"_{k}" if k else "")
        accesses = self._redirected(g, box, scoped, name)
        if isinstance(accesses, str):
            return accesses
        self.named[g.tensor] = k + 1
        names = [ir.Var(f"s{k}") for k in range(footprint.dim(isl.dim_type.in_))]
        return name, tuple(aff_expr(a, names, self.params) for a in box.offsets), accesses

    def _redirected(self, g: Group, box: Box, scoped: isl.UnionMap, name: str) -> dict | str:
        """How each reference of ``g`` reads buffer ``name``: its offsets as functions of its own
        statement's dimensions; or why not (an offset that is not affine in them)."""
        accesses = {}
        for r in g.refs:
            sname = r.access.statement
            local = [ir.Var(f"i_{d}") for d in self.dims[sname]]
            at = isl.PwMultiAff.from_map(
                isl.Map.from_union_map(scoped.intersect_domain(r.tagged.domain_factor_domain().domain()))
            )
            exprs = []
            for off in box.offsets:
                aff = single_aff(isl.PwAff.from_aff(off).pullback_pw_multi_aff(at))
                if aff is None:
                    return f"its offset is not affine in the dimensions of {sname}"
                exprs.append(aff_expr(aff, local, self.params))
            accesses[(sname, r.access.ref)] = Promoted(name, tuple(exprs), box.strides)
        return accesses

    def reuse(self, g: Group, scoped: isl.UnionMap) -> bool:
        """Whether two statement instances, or two references of one, touch one element in one
        scope iteration: (tagged instance -> (scope point, element)) is not injective."""
        tagged = g.refs[0].tagged
        for r in g.refs[1:]:
            tagged = tagged.union(r.tagged)
        to_scope = tagged.domain().unwrap().domain_map().apply_range(scoped)
        return not to_scope.range_product(tagged).is_injective()

    def copy_band(self, what: isl.Map, name: str) -> tuple[isl.ScheduleNode, int, str]:
        """The extension tree of copy statement ``name`` over ``what`` (scope point -> elements),
        at its band of one loop per tensor dimension; the rank and the instances' tuple
        ``name[s.., a..]`` (isl text)."""
        ext = what.domain_map().reverse().flatten_range().set_tuple_name(isl.dim_type.out, name)
        rank = what.dim(isl.dim_type.out)
        dims = [f"s{k}" for k in range(what.dim(isl.dim_type.in_))] + [f"a{k}" for k in range(rank)]
        tup = f"{name}[{', '.join(dims)}]"
        band = isl.MultiUnionPwAff.read_from_str(
            self.ctx, "[" + ", ".join(f"{{ {tup} -> [(a{k})] }}" for k in range(rank)) + "]"
        )
        tree = isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext)).child(0)
        return tree.insert_partial_schedule(band), rank, tup
