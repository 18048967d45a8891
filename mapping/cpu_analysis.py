"""The CPU mapper's reading of a band, and the state every CPU pass shares.

:class:`CpuAnalysis` holds what the passes of :mod:`.cpu` (the innermost band),
:mod:`.cpu_register_tiles` and :mod:`.cpu_parallel` work on: the Scop, the sizes and the tensors'
strides, the dependences specialised to the sizes, the decisions taken so far. Its queries give the
address step of every access along a loop, score a member as the vector loop (unit-stride steps 2,
invariant accesses 1, anything else 0, weighted by each statement's share of the band's instances)
and tell a ``simd`` loop from a ``simd_reduction`` one. The queries edit nothing;
:meth:`CpuAnalysis.permute` reorders the members of a permutable band (its instances and its
legality unchanged: any order of a permutable band's members is legal), and :func:`loop_mark`
names the one loop a mark applies to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import islpy as isl

from ..polyhedral.lang import ast as A
from ..polyhedral.lang.ranges import affine_form
from ..polyhedral.scop import Dependences, Scop
from .symbolic import params_context
from .tree_queries import carries_dependence, member_dim, member_spread, statements_of

__all__ = ["CpuAnalysis", "loop_mark"]


class CpuAnalysis:
    """The CPU mapper's state and its queries on band members (see the module's docstring); the
    passes of the CPU mapping extend it."""

    def __init__(
        self,
        scop: Scop,
        deps: Dependences,
        sizes: Mapping[str, int],
        strides: Mapping[str, tuple[int, ...]],
        symbolic: frozenset[str] = frozenset(),
    ):
        self.scop = scop
        self.sizes = sizes
        self.strides = strides
        self.decisions: list[str] = []
        self.instances = {st.name: _count(scop, st.name, sizes) for st in scop.statements}
        self.legality_deps = deps
        # proofs ("carries no dependence", legality) hold for every value of a symbolic size
        self.legality_sizes = {p: sizes[p] for p in scop.params if p not in symbolic} or None
        if scop.params:
            self.deps = deps.all.intersect_params(params_context(scop.ctx, scop.params, sizes, symbolic))
        else:
            self.deps = deps.all
        # choices (which loop runs in threads, register tile sizes) count iterations at the
        # representative sizes; proofs and unrolling (a loop's exact values) count them for all
        self.representative = (
            params_context(scop.ctx, scop.params, sizes, frozenset()) if symbolic and scop.params else None
        )

    def spread(self, node: isl.ScheduleNode, member: int) -> int | None:
        """How many values band member ``member`` takes for fixed outer loops, at the sizes the
        choices are made at (the representative ones for a symbolic size; None if unbounded):
        what the cost-driven passes read, never what a proof or an unrolled loop rests on."""
        return member_spread(node, member, self.representative)

    # --------------------------------------------------------------------------------- scoring
    def access_steps(self, stmt: str, var: str) -> list[int | None]:
        """Address step of every access of ``stmt`` (write counted once) when ``var`` grows by 1."""
        st = self.scop.statement(stmt)
        cdef = self.scop.cdef
        dims = set(st.dims)
        steps: list[int | None] = []
        accesses: list[tuple[str, tuple[A.Expr, ...]]] = []
        if st.kind == "init" and not st.source.plain_lhs:
            accesses.append((st.source.tensor, tuple(A.Ident(d, kind="index") for d in st.dims)))
        else:
            accesses.append((st.source.tensor, st.source.lhs))
        if st.kind != "init":
            accesses += [(n.tensor, n.args) for n in A.walk(st.source.rhs) if isinstance(n, A.Access)]
        for tensor, args in accesses:
            strides = self.strides.get(tensor, ())
            step = 0
            for k, arg in enumerate(args):
                aff = affine_form(arg, dims, lambda n: n in cdef.sizes, lambda t, j: cdef.tensor(t).shape[j])
                if aff is None:
                    step = None
                    break
                step += aff.coeff(var) * (strides[k] if k < len(strides) else 0)
            steps.append(step)
        return steps

    def vector_score(self, node: isl.ScheduleNode, member: int) -> float:
        """How well the accesses walk memory if ``member`` is the vector loop, each statement
        weighted by its share of the band's instances (a bias add fused behind a contraction
        must not decide the contraction's vector loop)."""
        stmts = statements_of(node)
        weights = {s: self.instances.get(s, 1) for s in stmts}
        total = sum(weights.values()) or 1
        score = 0.0
        for stmt in stmts:
            st = self.scop.statement(stmt)
            k = member_dim(node, member, stmt, len(st.dims))
            if k is None:
                continue
            part = 0
            for step in self.access_steps(stmt, st.dims[k]):
                part += 0 if step is None else 1 if step == 0 else 2 if abs(step) == 1 else 0
            score += part * weights[stmt] / total
        return round(score, 3)

    # --------------------------------------------------------------------------------- editing
    @staticmethod
    def permute(node: isl.ScheduleNode, order: Sequence[int]) -> isl.ScheduleNode:
        """Band ``node`` with its members in ``order`` (member ``k`` of the new band is member
        ``order[k]``, its coincidence kept), permutable: legal for a permutable band."""
        mupa = node.band_get_partial_schedule()
        coincident = [node.band_member_get_coincident(j) for j in range(node.band_n_member())]
        um = None
        for j in order:
            part = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(j))
            um = part if um is None else um.flat_range_product(part)
        new = isl.MultiUnionPwAff.from_union_map(um)
        node = node.delete().insert_partial_schedule(new).band_set_permutable(1)
        for pos, j in enumerate(order):
            node = node.band_member_set_coincident(pos, coincident[j])
        return node

    def vector_kind(self, node: isl.ScheduleNode, member: int) -> str | None:
        """``simd`` if the loop carries no dependence; ``simd_reduction`` if it walks a reduction
        dimension of the band's update statements (the printer keeps the sum in a register only
        where the loop holds nothing but one such update whose element does not move, and whose
        right-hand side does not read the tensor it accumulates into: a plain loop otherwise)."""
        if not carries_dependence(node, member, self.deps):
            return "simd"
        found = False
        for name in statements_of(node):
            st = self.scop.statement(name)
            k = member_dim(node, member, name, len(st.dims))
            if k is None:
                continue  # constant along this member: not in the loop with the others
            if st.kind != "update" or not st.source.plain_lhs or st.dims[k] not in st.source.reduction_vars:
                return None
            found = True
        return "simd_reduction" if found else None


def _count(scop: Scop, name: str, sizes: Mapping[str, int]) -> int:
    """Instances of a statement, from its ranges (conditions ignored: a weight, not a count)."""
    st = scop.statement(name)
    ranges = st.source.ranges if st.kind != "init" else st.source.ranges[: len(st.source.lhs_vars)]
    n = 1
    for r in ranges:
        n *= max(0, r.hi.evaluate(sizes) - r.lo.evaluate(sizes))
    return n


def loop_mark(kind: str, band: isl.ScheduleNode) -> isl.Id:
    """The mark for the loop of a one-member ``band``: ``kind@depth``.

    isl names the loop of schedule dimension ``d`` ``c{d}``; the depth lets the IR builder apply the
    mark to that loop only. A band with one iteration produces no loop, and its mark then marks
    nothing (never the next loop down, which may carry dependences).
    """
    return isl.Id(f"{kind}@{band.get_schedule_depth()}", context=band.get_ctx())
