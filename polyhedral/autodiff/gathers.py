"""The accumulation of one read's adjoint contribution: a gather where a shifted subscript can be
solved for one of its variables (a convolution's input gradient), over a zero-padded copy of the
seed where that makes it a plain convolution; an affine or data-dependent scatter otherwise."""

from __future__ import annotations

import re
from typing import NamedTuple

from ..lang import ast as A
from ..lang.ranges import Affine, affine_form
from ..lang.sizes import SizeExpr
from .adjoint import Adjoints
from .text import bound_conditions, paren, rename, where_clause


class Seed(NamedTuple):
    """A statement's seed when it is a plain access of the adjoint of its value: ``d_O(n, h)``, the
    adjoint's name, the access's subscripts (text) and the value."""

    access: str
    adjoint: str
    subscripts: tuple[str, ...]
    value: str


class Gathers(Adjoints):
    """Adjoints that write each read's contribution (:meth:`contribute`), as a gather where they can."""

    def contribute(
        self, st, target, read, contrib, reads, ranges, conditions, seed: Seed | None, pads: dict
    ) -> tuple[str, list[str]]:
        """``d_target(read's subscripts) += contrib`` over ``st``'s iterations, as a gather where a
        shifted subscript can be solved for one of its variables; the operator written and the
        left-hand side's subscripts (empty for a gather)."""
        if isinstance(read, A.Ident):  # a rank-0 argument: a full reduction
            return self.emit(target, [], contrib, ranges, conditions, covers=True, reduces=bool(st.vars)), []
        shape = self.shape_of(target)
        index_set = set(st.vars)
        args: list[str] = []
        lets: list[str] = []
        extra = list(conditions)
        ranges = list(ranges)
        affines: list[Affine | None] = [self.affine(a, index_set) for a in read.args]
        # (eliminated variable, the new one, the rest of the subscript, the coefficient, the new one's extent)
        solutions: list[tuple[str, str, Affine, int, SizeExpr]] = []
        eliminated: set[str] = set()
        solved_vars: list[tuple[str, set[str]]] = []  # eliminated variable -> the variables it is made of
        plain: list[str] = []
        for k, (a, aff) in enumerate(zip(read.args, affines)):
            fresh = a.name not in plain and a.name not in eliminated if isinstance(a, A.Ident) else False
            if isinstance(a, A.Ident) and a.name in index_set and fresh:
                plain.append(a.name)
                args.append(a.name)
                continue
            var = None if aff is None else self.solvable(aff, k, affines, st, plain, eliminated)
            if var is None:
                args.append(rename(a, reads, self.cdef))
                continue
            c = aff.coeff(var)
            rest = Affine.of({u: cu for u, cu in aff.coeffs if u != var}, aff.rest)
            y = self.names.fresh(f"y{k}")
            solved = f"{y} - {paren(_affine_text(rest))}" if c == 1 else f"{paren(_affine_text(rest))} - {y}"
            lets.append(f"{var} = {solved}")
            extra += bound_conditions(var, st.range_of(var))
            ranges = [t for t in ranges if t[0] != var]
            ranges.append((y, "0", shape[k].to_tc()))
            eliminated.add(var)
            solved_vars.append((var, {y} | set(rest.vars)))
            solutions.append((var, y, rest, c, shape[k]))
            args.append(y)
        if solutions and seed is not None:
            padded = self.padded_gather(st, contrib, solutions, conditions, seed, pads)
            if padded is not None:  # no let-bindings, no bound conditions: a plain convolution
                contrib, lets, extra = padded, [], list(conditions)
                solved_vars = []
        # Does the accumulation write every element of the adjoint? Its subscripts must be
        # distinct variables ranging over whole dimensions, and no condition may restrict them
        # alone (conditions that also involve a reduced variable do not hide an element).
        covers = len(plain) + len(eliminated) == len(args)
        if covers:
            lo_hi = {t[0]: (t[1], t[2]) for t in ranges}
            whole = all(lo_hi[a] == ("0", dim.to_tc()) for a, dim in zip(args, shape))
            bounded = any(
                len(st.range_of(a).lo.alternatives("max")) > 1
                or len(st.range_of(a).hi.alternatives("min")) > 1
                for a in plain
            )
            covers = whole and not bounded
        if covers:
            deps = dict(solved_vars)
            lhs_vars = set(args)
            for c in st.conditions:
                used = set()
                for u in A.index_vars(c):
                    used |= deps.get(u, {u})
                if used <= lhs_vars:
                    covers = False
        reduces = any(t[0] not in args for t in ranges)
        op = self.emit(target, args, contrib, ranges, lets + extra, covers, reduces)
        return op, (args if not lets else [])

    def padded_gather(self, st, contrib: str, solutions, conditions, seed: Seed, pads: dict) -> str | None:
        """``contrib`` of a gather, reading the statement's seed from a zero-padded copy instead of
        behind let-bindings and bound conditions; ``None`` where that does not apply.

        A convolution's input gradient ``d_I(y) += d_O(h) * W(r)`` with ``h = y - r`` needs
        ``0 <= h < OH``: as conditions, they split every loop of the kernel into pieces. Written
        ``d_I(y) += d_O_pad(y - r + KH - 1) * W(r)`` over a copy of ``d_O`` with ``KH - 1`` zeros
        on each side (``d_O_pad(p) = (KH - 1 <= p < OH + KH - 1) ? d_O(p - KH + 1) : 0.0``), it is
        a plain convolution, mapped as the forward is. It applies where the seed (the adjoint of
        the statement's value) is a plain access in which each eliminated variable is a whole
        subscript, every eliminated variable was solved with coefficient 1 (``h = y - rest``) and
        appears nowhere else in the contribution or in a condition, and no range has ``min``/``max``
        bounds. The out-of-range terms then read zeros and add nothing (their other factor is
        finite where the weights are).
        """
        seed, g_name, lhs, value = seed
        if seed not in contrib or any(s[3] != 1 for s in solutions):
            return None
        gone = {s[0] for s in solutions}
        token = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, gone)) + r")(?![\w(])")
        if token.search(contrib.replace(seed, "")) or any(token.search(c) for c in conditions):
            return None
        positions = {}
        for j, a in enumerate(lhs):
            if a in gone:
                positions[a] = j
            elif token.search(a):
                return None
        if set(positions) != gone:
            return None

        def bounds_of(u: str):
            r = st.range_of(u)
            if len(r.lo.alternatives("max")) > 1 or len(r.hi.alternatives("min")) > 1:
                return None
            return r.lo, r.hi - 1

        shape = self.shape_of(value)
        offsets: dict[int, tuple] = {}  # position -> (offset, extent, lo, hi of the variable)
        access = list(lhs)
        for v, y, rest, _, target_extent in solutions:
            most, least = rest.rest, rest.rest  # max and min of rest over its variables' box
            for u, c in rest.coeffs:
                b = bounds_of(u)
                if b is None:
                    return None
                lo, hi = b
                most, least = (most + hi * c, least + lo * c) if c > 0 else (most + lo * c, least + hi * c)
            vb = bounds_of(v)
            if vb is None:
                return None
            k = positions[v]
            offset = most  # y - rest + offset >= 0
            extent = target_extent + most - least
            offsets[k] = (offset, extent, vb[0], vb[1] + 1)
            access[k] = _affine_text(Affine.of({y: 1, **{u: -c for u, c in rest.coeffs}}, offset - rest.rest))
        key = (g_name, tuple(sorted((k, o[0].to_tc(), o[1].to_tc()) for k, o in offsets.items())))
        pad = pads.get(key)
        if pad is None:
            pad = pads[key] = self.names.fresh(f"{g_name}_pad")
            idx = [self.names.fresh(f"p{j}") for j in range(len(lhs))]
            inner, conds, ranges = [], [], []
            for j, i in enumerate(idx):
                if j in offsets:
                    offset, extent, lo, hi = offsets[j]
                    inner.append(_affine_text(Affine.of({i: 1}, -offset)))
                    conds += [
                        f"{i} >= {paren((lo + offset).to_tc())}",
                        f"{i} < {paren((hi + offset).to_tc())}",
                    ]
                    ranges.append((i, "0", extent.to_tc()))
                else:
                    inner.append(i)
                    ranges.append((i, "0", shape[j].to_tc()))
            read = f"{g_name}({', '.join(inner)})"
            self.lines.append(
                f"{pad}({', '.join(idx)}) = ({' && '.join(conds)}) ? {read} : 0.0{where_clause(ranges, [])}"
            )
        return contrib.replace(seed, f"{pad}({', '.join(access)})")

    def affine(self, e: A.Expr, index_set) -> Affine | None:
        if any(isinstance(n, A.Access) for n in A.walk(e)):
            return None
        return affine_form(
            e, index_set, lambda n: n in self.cdef.sizes, lambda t, k: self.cdef.tensor(t).shape[k]
        )

    def solvable(self, aff: Affine, k: int, affines, st, plain, eliminated) -> str | None:
        """A variable of coefficient +-1 in ``aff`` alone among the subscripts, to solve for:
        preferably one of the forward statement's left-hand side variables."""
        others = set()
        for j, b in enumerate(affines):
            if j != k and b is not None:
                others |= b.vars
        candidates = [
            v
            for v, c in aff.coeffs
            if abs(c) == 1 and v not in others and v not in plain and v not in eliminated
        ]
        if not candidates:
            return None
        candidates.sort(key=lambda v: (v not in st.lhs_vars, st.vars.index(v)))
        return candidates[0]


def _affine_text(a: Affine) -> str:
    parts = [v if c == 1 else f"-{v}" if c == -1 else f"{c} * {v}" for v, c in a.coeffs]
    rest = a.rest.to_tc()
    if rest != "0" or not parts:
        parts.append(rest)
    return " + ".join(parts).replace("+ -", "- ")
