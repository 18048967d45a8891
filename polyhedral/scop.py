"""The Scop of a checked definition: statement domains, tagged accesses, reductions, dependences.

One isl statement per TC statement (``S3`` for the fourth) and one more for the initialisation of a
``!`` reduction (``S3_init``), which writes the identity to the elements the statement reduces into.
Domains are the statement's ranges intersected with its ``where`` conditions, over the size
symbols as parameters, or over concrete sizes when the Scop is specialised (products of sizes are
not affine, so a definition with such ranges is always specialised). Every access carries a
reference id (``[S0[m, n, k] -> R2[]] -> A[m, k]``) so later passes can tell two accesses of one
tensor apart. A gather (a subscript that is not affine) may touch any element of its dimension.

A gather on the left-hand side of an accumulation (``dW(I(b), d) += dO(b, d)``, a scatter) is
therefore a may-write of a whole dimension: any two instances of the update may hit one element,
so the dependences order them all along the iterations that feed the gathered subscript and no
mapping runs those in parallel (``Reduction.reduction_dims`` is empty: there is nothing to
relax). Its ``!`` initialisation writes the whole tensor, every element the scatter might reach.
The tensors a left-hand side's subscripts read are read accesses of the statement like any other.

Each Scop owns its isl context: scheduling options are context settings, so compilations never
disturb each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import islpy as isl

from .errors import TCInternalError
from .lang import ast as A
from .lang.checked import CheckedDef, CheckedStatement
from .lang.ranges import affine_form
from .lang.sizes import SizeExpr
from .names import isl_name, tc_names_in

__all__ = [
    "Access",
    "Dependences",
    "Reduction",
    "Scop",
    "ScopStatement",
    "build_scop",
    "compute_dependences",
    "instance_text",
]


@dataclass(frozen=True)
class ScopStatement:
    """One isl statement.

    :ivar name: the isl tuple name (``S0``, ``S0_init``).
    :ivar source: the checked TC statement it comes from.
    :ivar kind: ``"init"`` (a ``!`` reduction's identity), ``"update"`` (a reduction step) or
        ``"assign"`` (an ``=`` statement).
    :ivar dims: the names of its iteration dimensions, in order.
    """

    name: str
    source: CheckedStatement
    kind: str
    dims: tuple[str, ...]


@dataclass(frozen=True)
class Access:
    """One reference to a tensor by a statement: ``ref`` is its id, ``exact`` is False for gathers."""

    ref: str
    statement: str
    tensor: str
    write: bool
    exact: bool
    node: object  # the AST node, for messages and code generation


@dataclass(frozen=True)
class Reduction:
    """A reduction update statement: its operator and which of its dimensions are reduced."""

    statement: str
    op: str
    reduction_dims: tuple[int, ...]


@dataclass(frozen=True)
class Scop:
    """The polyhedral model of one definition.

    :ivar ctx: the isl context owning every isl object here.
    :ivar params: the size symbols that remain parameters (empty when specialised).
    :ivar sizes: the concrete sizes when specialised, else ``None``.
    :ivar context: constraints on the parameters (every size >= 1).
    :ivar domain: all statement instances.
    :ivar reads, writes: tagged access relations ``[S[i] -> R[]] -> T[e]``.
    :ivar program_order: the schedule of the TC text (statements in order, loops as written).

    Names here are TC names; in isl objects and text, sizes, indices and tensors have their isl
    names (:func:`~tcjit.polyhedral.names.isl_name`), and :func:`instance_text` writes a
    statement's instances.
    """

    cdef: CheckedDef
    ctx: isl.Context
    params: tuple[str, ...]
    sizes: Mapping[str, int] | None
    context: isl.Set
    domain: isl.UnionSet
    reads: isl.UnionMap
    writes: isl.UnionMap
    statements: tuple[ScopStatement, ...]
    accesses: tuple[Access, ...]
    reductions: tuple[Reduction, ...]
    program_order: isl.UnionMap

    def statement(self, name: str) -> ScopStatement:
        return next(s for s in self.statements if s.name == name)

    @property
    def untagged_reads(self) -> isl.UnionMap:
        return self.reads.domain_factor_domain()

    @property
    def untagged_writes(self) -> isl.UnionMap:
        return self.writes.domain_factor_domain()

    def describe(self) -> str:
        """A readable listing: domains and accesses per statement (``tcjit show --stage scop``)."""
        lines = [f"params: {', '.join(self.params) or '(specialised: ' + _fmt(self.sizes) + ')'}"]
        for st in self.statements:
            dom = self.domain.extract_set(_space_of(self, st.name)).gist_params(self.context)
            lines.append(f"{st.name} ({st.kind}, line {st.source.line}): {tc_names_in(str(dom))}")
            for acc in self.accesses:
                if acc.statement == st.name:
                    rel = (self.writes if acc.write else self.reads).intersect_domain(
                        isl.UnionSet.read_from_str(self.ctx, f"{{ [{instance_text(st)} -> {acc.ref}[]] }}")
                    )
                    arrow = "writes" if acc.write else "reads "
                    rel = rel.domain_factor_domain().gist_params(self.context)
                    lines.append(
                        f"    {acc.ref} {arrow} {tc_names_in(str(rel))}{'' if acc.exact else ' (gather)'}"
                    )
        return "\n".join(lines)


def instance_text(st: ScopStatement) -> str:
    """``S0[i, j]``: the instances of ``st`` in isl syntax, its dimensions by their isl names."""
    return f"{st.name}[{', '.join(isl_name(d) for d in st.dims)}]"


def _fmt(sizes) -> str:
    return ", ".join(f"{k}={v}" for k, v in (sizes or {}).items())


def _space_of(scop: Scop, name: str) -> isl.Space:
    lst = scop.domain.get_set_list()
    for i in range(lst.n_set()):
        s = lst.get_at(i)
        if s.get_tuple_name() == name:
            return s.get_space()
    raise TCInternalError(f"no statement {name} in the Scop")


# ------------------------------------------------------------------------------------------ building
class _Builder:
    def __init__(self, cdef: CheckedDef, sizes: Mapping[str, int] | None):
        self.cdef = cdef
        self.sizes = dict(sizes) if sizes is not None else None
        self.ctx = isl.Context()
        self.refs = 0

    def size(self, e: SizeExpr) -> str:
        """A size expression in isl syntax: an integer when specialised."""
        return str(e.evaluate(self.sizes)) if self.sizes is not None else f"({e.to_isl()})"

    def affine(self, e: A.Expr, dims: set[str]) -> str | None:
        aff = affine_form(e, dims, lambda n: n in self.cdef.sizes, lambda t, k: self.cdef.tensor(t).shape[k])
        if aff is None:
            return None
        terms = [f"{c}*{isl_name(v)}" for v, c in aff.coeffs]
        terms.append(self.size(aff.rest))
        return " + ".join(terms)

    def condition(self, e: A.Expr, dims: set[str]) -> str:
        if isinstance(e, A.Binary) and e.op == "&&":
            return f"({self.condition(e.lhs, dims)}) and ({self.condition(e.rhs, dims)})"
        assert isinstance(e, A.Binary) and e.op in ("<", "<=", ">", ">=", "==")
        lhs, rhs = self.affine(e.lhs, dims), self.affine(e.rhs, dims)
        if lhs is None or rhs is None:  # the checker only admits affine conditions
            raise TCInternalError("a where condition is not affine")
        return f"{lhs} {'=' if e.op == '==' else e.op} {rhs}"

    def ref(self) -> str:
        self.refs += 1
        return f"R{self.refs - 1}"

    def gathers(self, args, dims: set[str]) -> bool:
        """Whether some subscript in ``args`` is not affine (a gather)."""
        return any(self.affine(arg, dims) is None for arg in args)

    def subscripts(self, args, dims: set[str], tensor: str) -> tuple[list[str], list[str], bool]:
        """(names of the tensor's index dims, constraints, exact) for one access."""
        shape = self.cdef.tensor(tensor).shape
        names, cons, exact = [], [], True
        for k, (arg, n) in enumerate(zip(args, shape)):
            name = f"a{k}"
            names.append(name)
            sub = self.affine(arg, dims)
            if sub is None:
                exact = False
                cons.append(f"0 <= {name} < {self.size(n)}")
            else:
                cons.append(f"{name} = {sub}")
        return names, cons, exact


def build_scop(cdef: CheckedDef, sizes: Mapping[str, int] | None = None) -> Scop:
    """Build the Scop of ``cdef``; specialised to ``sizes`` when given.

    A definition whose ranges or shapes are not affine in the sizes (products of sizes) needs
    ``sizes``.
    """
    b = _Builder(cdef, sizes)
    if sizes is None:
        for st in cdef.statements:
            for r in st.ranges:
                for e in (r.lo, r.hi):
                    if "*" in e.to_isl():
                        raise TCInternalError(
                            f"{cdef.name}: the range {r} is not affine in the sizes; give the sizes"
                        )
    params = () if sizes is not None else cdef.sizes
    head = f"[{', '.join(map(isl_name, params))}] -> " if params else ""
    ctx = b.ctx
    positive = " and ".join(f"{isl_name(p)} >= 1" for p in params)
    context = isl.Set.read_from_str(ctx, f"{head}{{ : {positive} }}" if params else "{ : }")

    domains, reads, writes, order = [], [], [], []
    statements: list[ScopStatement] = []
    accesses: list[Access] = []
    reductions: list[Reduction] = []
    width = 1 + max((len(st.vars) for st in cdef.statements), default=0)

    def add(name: str, st: CheckedStatement, kind: str, dims: tuple[str, ...], constraints: list[str]):
        tup = f"{name}[{', '.join(map(isl_name, dims))}]"
        domains.append(f"{tup} : {' and '.join(constraints) or '0 = 0'}")
        pad = [*map(isl_name, dims), *(["0"] * (width - 1 - len(dims)))]
        order.append(
            f"{tup} -> [{len(statements)}, {', '.join(pad)}]" if pad else f"{tup} -> [{len(statements)}]"
        )
        statements.append(ScopStatement(name, st, kind, dims))
        return tup

    def access(stmt: str, tup: str, dims: set[str], tensor: str, args, write: bool, node) -> None:
        names, cons, exact = b.subscripts(args, dims, tensor)
        ref = b.ref()
        rel = (
            f"[{tup} -> {ref}[]] -> {isl_name(tensor)}[{', '.join(names)}] : {' and '.join(cons) or '0 = 0'}"
        )
        (writes if write else reads).append(rel)
        accesses.append(Access(ref, stmt, tensor, write, exact, node))

    for k, st in enumerate(cdef.statements):
        name = f"S{k}"
        ranges = [f"{b.size(r.lo)} <= {isl_name(r.var)} < {b.size(r.hi)}" for r in st.ranges]
        dims = set(st.vars)
        conds = [b.condition(c, dims) for c in st.conditions]
        if st.init and st.is_reduction:
            if st.plain_lhs:
                lhs_dims = set(st.lhs_vars)
                lhs_only = [b.condition(c, lhs_dims) for c in st.lhs_conditions]
                tup = add(f"{name}_init", st, "init", st.lhs_vars, ranges[: len(st.lhs_vars)] + lhs_only)
                access(f"{name}_init", tup, lhs_dims, st.tensor, st.lhs, True, st.source)
            else:
                # An affine left-hand side: the elements it reaches, computed below with isl. A
                # gathered one may reach any element: the whole tensor.
                edims = tuple(f"e{i}" for i in range(len(st.lhs)))
                box = []
                if b.gathers(st.lhs, dims):
                    shape = cdef.tensor(st.tensor).shape
                    box = [f"0 <= {isl_name(e)} < {b.size(n)}" for e, n in zip(edims, shape)]
                tup = add(f"{name}_init", st, "init", edims, box)
                idents = tuple(A.Ident(e, kind="index") for e in edims)
                access(f"{name}_init", tup, set(edims), st.tensor, idents, True, st.source)
        tup = add(name, st, "update" if st.is_reduction else "assign", st.vars, ranges + conds)
        access(name, tup, dims, st.tensor, st.lhs, True, st.source)
        if st.is_reduction:  # an update reads what it accumulates into
            access(name, tup, dims, st.tensor, st.lhs, False, st.source)
            reductions.append(
                Reduction(name, st.op, tuple(range(len(st.lhs_vars), len(st.vars))) if st.plain_lhs else ())
            )
        for root in (*st.lhs, st.rhs):  # a gathered left-hand side reads its subscripts' tensors
            for node in A.walk(root):
                if isinstance(node, A.Access):
                    access(name, tup, dims, node.tensor, node.args, False, node)

    domain = isl.UnionSet.read_from_str(ctx, head + "{ " + "; ".join(domains) + " }")
    write_map = isl.UnionMap.read_from_str(ctx, head + "{ " + "; ".join(writes) + " }")
    if reads:
        read_map = isl.UnionMap.read_from_str(ctx, head + "{ " + "; ".join(reads) + " }")
    else:
        read_map = isl.UnionMap.empty(write_map.get_space())
    domain = domain.intersect_params(context)
    gathered = {a.statement for a in accesses if a.write and not a.exact}
    domain = _affine_init_domains(ctx, domain, write_map, statements, gathered)
    write_map = write_map.intersect_domain(_tagged(domain, write_map))
    read_map = read_map.intersect_domain(_tagged(domain, read_map))
    order_map = isl.UnionMap.read_from_str(ctx, head + "{ " + "; ".join(order) + " }").intersect_domain(
        domain
    )
    return Scop(
        cdef=cdef,
        ctx=ctx,
        params=tuple(params),
        sizes=b.sizes,
        context=context,
        domain=domain,
        reads=read_map,
        writes=write_map,
        statements=tuple(statements),
        accesses=tuple(accesses),
        reductions=tuple(reductions),
        program_order=order_map,
    )


def _tagged(domain: isl.UnionSet, tagged: isl.UnionMap) -> isl.UnionSet:
    """The tagged instances ``[S[i] -> R[]]`` of ``tagged`` whose statement instance is in ``domain``."""
    wrapped = tagged.domain().unwrap()  # S[i] -> R[]
    return wrapped.intersect_domain(domain).wrap()


def _affine_init_domains(
    ctx, domain: isl.UnionSet, writes: isl.UnionMap, statements, gathered: set[str]
) -> isl.UnionSet:
    """Give each affine ``!`` initialisation the elements its update reaches; it writes them.
    (A gathered left-hand side's initialisation already has the whole tensor.)"""
    for st in statements:
        update = st.name[: -len("_init")]
        if st.kind != "init" or st.source.plain_lhs or update in gathered:
            continue
        upd = (
            writes.domain_factor_domain()
            .intersect_domain(domain)
            .extract_map(_map_space(writes.domain_factor_domain(), update))
        )
        reached = upd.range().set_tuple_name(st.name)
        domain = domain.subtract(domain.extract_set(reached.get_space())).union(reached)
    return domain


def _map_space(um: isl.UnionMap, stmt: str) -> isl.Space:
    lst = um.get_map_list()
    for i in range(lst.n_map()):
        m = lst.get_at(i)
        if m.get_tuple_name(isl.dim_type.in_) == stmt:
            return m.get_space()
    raise TCInternalError(f"no access of {stmt}")


# ---------------------------------------------------------------------------------------- dependences
@dataclass(frozen=True)
class Dependences:
    """Memory-based dependences between statement instances (TC's recipe).

    :ivar flow: read-after-write. :ivar false: write-after-read and write-after-write.
    :ivar all: their union: what every schedule must respect.
    :ivar reduction: the self-dependences of reduction updates through the reduced element, which a
        mapping may relax when it emits a real parallel reduction.
    """

    flow: isl.UnionMap
    false: isl.UnionMap
    all: isl.UnionMap
    reduction: isl.UnionMap


def compute_dependences(scop: Scop) -> Dependences:
    """Dependences of ``scop`` under its program order."""
    reads, writes = scop.untagged_reads, scop.untagged_writes

    def dep(sources: isl.UnionMap, sinks: isl.UnionMap) -> isl.UnionMap:
        return (
            isl.UnionAccessInfo.from_sink(sinks)
            .set_may_source(sources)
            .set_schedule_map(scop.program_order)
            .compute_flow()
            .get_may_dependence()
        )

    flow = dep(writes, reads)
    false = dep(writes.union(reads), writes)
    everything = flow.union(false).coalesce()
    reduction = isl.UnionMap.empty(everything.get_space())
    for red in scop.reductions:
        sel = isl.UnionSet.read_from_str(scop.ctx, f"{{ {instance_text(scop.statement(red.statement))} }}")
        reduction = reduction.union(everything.intersect_domain(sel).intersect_range(sel))
    return Dependences(flow.coalesce(), false.coalesce(), everything, reduction.coalesce())
