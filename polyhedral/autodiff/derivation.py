"""The derivation of one definition: its statements differentiated in reverse program order
(with the seeds of ``max=``/``min=`` and ``*=`` reductions), and the TC text of the augmented
forward and of the backward; :func:`derive` is the entry point."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import TCInternalError
from ..lang import ast as A
from ..lang.checked import CheckedDef
from .adjoint import Poison
from .gathers import Gathers, Seed
from .text import decl, param_text, paren, rename, sel, statement_ranges, where_clause
from .versions import writes_every_element

__all__ = ["Derivation", "derive"]


@dataclass(frozen=True)
class Derivation:
    """The derived programs of one forward definition (see :mod:`tcjit.polyhedral.autodiff`).

    :ivar forward: TC text of the augmented forward definition.
    :ivar forward_name: its entry name.
    :ivar saved: the intermediates it returns after the forward's outputs, in order.
    :ivar backward: TC text of the backward definition.
    :ivar backward_name: its entry name.
    :ivar wanted: the forward inputs whose gradients the backward returns, in order.
    :ivar poisoned: inputs left out of ``wanted`` (when deriving for every input) because their
        gradient would flow through a statement without a derivative, with the error naming it.
    :ivar absent: the outputs whose gradient the backward does not take (known to be zero).
    """

    forward: str
    forward_name: str
    saved: tuple[str, ...]
    backward: str
    backward_name: str
    wanted: tuple[str, ...]
    poisoned: dict = field(default_factory=dict, compare=False)
    absent: frozenset[str] = frozenset()


class _Deriver(Gathers):
    """Differentiates the statements in reverse program order and writes the augmented forward
    and the backward (:meth:`run`)."""

    # ------------------------------------------------------------------------ statements
    def differentiate(self, index: int) -> None:
        step = self.steps[index]
        v = step.version
        if v not in self.active or (v not in self.adjoint and v not in self.output_grads):
            return
        if v in self.poison:
            for r in self.sources(step):
                if r in self.active:
                    self.poison.setdefault(r, self.poison[v])
            return
        g_name = self.adjoint_name(v) if v in self.adjoint else self.output_grads[v]
        if step.stmt is None:  # a copy: the whole adjoint flows to the copied version
            vs, ranges = self.full_ranges(v)
            if step.prev in self.active:
                self.emit(step.prev, vs, f"{g_name}({', '.join(vs)})", ranges, [], True, False)
            return
        st = step.stmt
        reads = step.reads
        lhs = [rename(e, reads, self.cdef) for e in st.lhs]
        g = f"{g_name}({', '.join(lhs)})"
        ranges, bounds = statement_ranges(st)
        conditions = bounds + [rename(c, reads, self.cdef) for c in st.conditions]
        f = rename(st.rhs, reads, self.cdef)
        here = f"{v}({', '.join(lhs)})"
        if st.op in ("max=", "min="):
            seed = self.extremum_seed(v, f, g, here, lhs)
        elif st.op == "*=":
            seed = self.product_seed(v, f, g, lhs)
        else:
            seed = g
        # A contribution written in full over the statement's variables (d_O_0(b, n) = d_O(b, n) *
        # relu'(...)) is read back by the statement's later contributions with the same value
        # (d_bias(n) +=! d_O_0(b, n)) instead of computing it again.
        materialized: dict[str, tuple[str, str]] = {}  # contribution text -> (adjoint, its access)
        # The seed as a plain access of the adjoint of the statement's value: what a gather's
        # contribution may read from a zero-padded copy instead (see :meth:`padded_gather`).
        seed_access = Seed(g, g_name, tuple(lhs), v) if seed == g else None
        pads: dict[tuple, str] = {}  # the zero-padded copies of the seed made for this statement
        for read, contrib in self.chain(st.rhs, seed, reads, st):
            target = reads.get(read.tensor, read.tensor) if isinstance(read, A.Access) else read.name
            if target not in self.active:
                continue
            if isinstance(contrib, Poison):
                self.poison.setdefault(target, contrib.error)
                continue
            name = self.adjoint_name(target)
            materialized = {k: m for k, m in materialized.items() if m[0] != name}  # it changes now
            text = contrib
            if contrib in materialized:
                text = materialized[contrib][1]
            op, args = self.contribute(st, target, read, text, reads, ranges, conditions, seed_access, pads)
            if op == "=" and args == list(st.vars) and text == contrib:
                materialized[contrib] = (name, f"{name}({', '.join(args)})")

    def extremum_seed(self, v: str, f: str, g: str, here: str, lhs: list[str]) -> str:
        """``max=`` / ``min=``: the count of arg-extrema (shared evenly), computed once per version."""
        cnt = self.counts.get(v)
        if cnt is None:
            cnt = self.counts[v] = self.names.fresh(f"n_{v}")
            first = True
            for k in self.versions[v].steps:
                s = self.steps[k]
                sl = [rename(e, s.reads, self.cdef) for e in s.stmt.lhs]
                sf = rename(s.stmt.rhs, s.reads, self.cdef)
                sh = f"{v}({', '.join(sl)})"
                op = "+=!" if first and writes_every_element(self.cdef, s.stmt) else "+="
                if first and op == "+=":
                    vs, full = self.full_ranges(v)
                    self.lines.append(f"{cnt}({', '.join(vs)}) = 0.0{where_clause(full, [])}")
                first = False
                sr, bounds = statement_ranges(s.stmt)
                conds = bounds + [rename(c, s.reads, self.cdef) for c in s.stmt.conditions]
                self.lines.append(
                    f"{cnt}({', '.join(sl)}) {op} ({paren(sf)} == {sh}) ? 1.0 : 0.0{where_clause(sr, conds)}"
                )
        return sel(f"{paren(f)} == {here}", f"{paren(g)} / {cnt}({', '.join(lhs)})", "0.0")

    def product_seed(self, v: str, f: str, g: str, lhs: list[str]) -> str:
        """``*=``: the product of the other factors, exact with zeros."""
        names = self.products.get(v)
        if names is None:
            nz, pz = self.names.fresh(f"z_{v}"), self.names.fresh(f"p_{v}")
            names = self.products[v] = (nz, pz)
            first = True
            for k in self.versions[v].steps:
                s = self.steps[k]
                sl = ", ".join(rename(e, s.reads, self.cdef) for e in s.stmt.lhs)
                sf = paren(rename(s.stmt.rhs, s.reads, self.cdef))
                sr, bounds = statement_ranges(s.stmt)
                conds = bounds + [rename(c, s.reads, self.cdef) for c in s.stmt.conditions]
                where = where_clause(sr, conds)
                covers = first and writes_every_element(self.cdef, s.stmt)
                if first and not covers:
                    vs, full = self.full_ranges(v)
                    self.lines.append(f"{nz}({', '.join(vs)}) = 0.0{where_clause(full, [])}")
                    self.lines.append(f"{pz}({', '.join(vs)}) = 1.0{where_clause(full, [])}")
                bang = "!" if covers else ""
                self.lines.append(f"{nz}({sl}) +={bang} ({sf} == 0.0) ? 1.0 : 0.0{where}")
                self.lines.append(f"{pz}({sl}) *={bang} ({sf} == 0.0) ? 1.0 : {sf}{where}")
                first = False
        nz, pz = names
        at = ", ".join(lhs)
        fp = paren(f)
        return (
            f"({nz}({at}) == 0.0) ? {paren(g)} * {pz}({at}) / {fp} : "
            f"((({nz}({at}) == 1.0) && ({fp} == 0.0)) ? {paren(g)} * {pz}({at}) : 0.0)"
        )

    # ------------------------------------------------------------------------------ driver
    def run(self, keep: tuple[str, ...] | None, strict: bool, absent: frozenset[str]) -> Derivation:
        cdef = self.cdef
        self.counts: dict[str, str] = {}
        self.products: dict[str, tuple[str, str]] = {}
        # The outputs' gradients: parameters, seeds of their final versions. An absent output's
        # final version has no seed: its adjoint is a temporary's (started by its first
        # contribution, never written when no later statement reads the output).
        self.output_grads = {}
        grad_params = []
        for o in cdef.outputs:
            if o in absent:
                continue
            gname = self.names.fresh(f"d_{o}")
            grad_params.append(decl(cdef, o, gname))
            if cdef.tensor(o).dtype.is_float:
                self.output_grads[self.final[o]] = gname
        for index in reversed(range(len(self.steps))):
            self.differentiate(index)
        # the gradients returned
        returns = []
        poisoned = {}
        for x in self.wanted:
            if x in self.poison:
                if strict:
                    raise self.poison[x]
                poisoned[x] = self.poison[x]
                continue
            name = self.adjoint_name(x)
            if x in cdef.scalars:
                returns.append(f"{cdef.scalars[x].dtype}() {name}")
            else:
                returns.append(decl(cdef, x, name))
            if x not in self.started:
                self.start(x)
        # forward values the backward reads: inputs, outputs, saved intermediates
        text = "\n".join(self.lines)
        saved = []
        for value in self.versions:
            if value in cdef.outputs or value in self.inputs:
                continue
            if _mentions(text, value):
                saved.append(value)
        if keep is not None:
            missing = set(saved) - set(keep)
            if missing:
                raise TCInternalError(
                    f"{cdef.name}: a backward reads {', '.join(sorted(missing))}, which the forward "
                    "does not save"
                )
            saved = list(keep)
        fwd_name = self.names.fresh(f"{cdef.name}__fwd")
        bwd_name = self.names.fresh(f"{cdef.name}__bwd")
        params = [param_text(cdef, p) for p in cdef.ast.params]
        outs = [decl(cdef, o, o) for o in cdef.outputs]
        saved_decls = [decl(cdef, self.tensor_of(s), s) for s in saved]
        forward = self.forward_text(fwd_name, params, outs + saved_decls)
        backward = (
            f"def {bwd_name}({', '.join(params + outs + saved_decls + grad_params)}) -> "
            f"({', '.join(returns)}) {{\n" + "".join(f"    {line}\n" for line in self.lines) + "}\n"
        )
        wanted = tuple(x for x in self.wanted if x not in poisoned)
        return Derivation(forward, fwd_name, tuple(saved), backward, bwd_name, wanted, poisoned, absent)

    def forward_text(self, name: str, params: list[str], returns: list[str]) -> str:
        lines = []
        for step in self.steps:
            if step.stmt is None:
                vs, ranges = self.full_ranges(step.version)
                idx = ", ".join(vs)
                lines.append(f"{step.version}({idx}) = {step.prev}({idx}){where_clause(ranges, [])}")
                continue
            st = step.stmt
            lhs = ", ".join(rename(e, step.reads, self.cdef) for e in st.lhs)
            rhs = rename(st.rhs, step.reads, self.cdef)
            sr, bounds = statement_ranges(st)
            conds = bounds + [rename(c, step.reads, self.cdef) for c in st.conditions]
            op = st.op + ("!" if st.init else "")
            lines.append(f"{step.version}({lhs}) {op} {rhs}{where_clause(sr, conds)}")
        body = "".join(f"    {line}\n" for line in lines)
        return f"def {name}({', '.join(params)}) -> ({', '.join(returns)}) {{\n{body}}}\n"


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\(", text) is not None


def derive(
    cdef: CheckedDef,
    wanted: tuple[str, ...] | None = None,
    saved: tuple[str, ...] | None = None,
    absent: frozenset[str] = frozenset(),
) -> Derivation:
    """The augmented forward and the backward of ``cdef`` (see :mod:`tcjit.polyhedral.autodiff`).

    :arg wanted: the inputs (tensors or rank-0 arguments of a float type) whose gradients the
        backward returns; ``None``: every such input whose gradient can be derived (the others are
        listed in :attr:`Derivation.poisoned`).
    :arg saved: the intermediates the backward takes as parameters (those the forward derived for
        every input saves, when deriving for fewer); ``None``: exactly those it reads.
    :arg absent: outputs whose gradient is known to be zero: the backward takes no ``d_<O>`` for
        them (its parameters are the others' gradients, in output order), their adjoints start
        from their first contribution, and contributions that would only flow from their
        gradients are left out. A wanted input that no contribution then reaches gets zeros.
    :raises TCDerivativeError: a statement cannot be differentiated (the error names it): a
        builtin without a derivative on the way to a wanted gradient, a partial overwrite, an
        accumulation onto a value of another operator.
    """
    absent = frozenset(absent)
    unknown = absent - set(cdef.outputs)
    if unknown:
        raise TCInternalError(f"{cdef.name}: {', '.join(sorted(unknown))}: absent gradients of non-outputs")
    strict = wanted is not None
    if wanted is None:
        wanted = tuple(
            p
            for p in cdef.params
            if (cdef.scalars[p].dtype if p in cdef.scalars else cdef.tensor(p).dtype).is_float
        )
    return _Deriver(cdef, tuple(wanted)).run(saved, strict, absent)
