"""Memory promotion for the GPU mapping: tensor footprints copied to shared memory per block.

TC's ``promoteToSharedAtDepth`` and PPCG's ``gpu_group`` (notes/polyhedral.md 2(e)), on the tree
:func:`~tcjit.mapping.gpu.map_gpu` has mapped to blocks and threads:

* **Scope.** The subtree below schedule depth ``shared_depth`` (band members from the root;
  default and minimum: the block-mapped members). A band that crosses the depth is split so that
  the depth ends it; a branch reaching the thread mapping (or thread-0 code) first is promoted
  just above it, never below; a sequence or set before the depth promotes each child's subtree
  on its own (never the sequence's children themselves).
* **Groups.** The references of one tensor inside a scope, joined while two of them, one a
  write, touch a common element in one iteration of the scope.
* **Footprint.** Per group, the elements one iteration of the scope (one block's tile) touches,
  as a box: per tensor dimension an offset, an affine function of the outer schedule (the
  lexicographic minimum), a constant stride (``get_range_stride_info``) and a constant size (the
  largest spread, divided by the stride, plus one). A buffer element is ``(index - offset) /
  stride``.
* **Decision.** Groups with more references first; a group is promoted when every reference is
  affine (never a gather), its buffer fits what is left of ``max_shared_memory`` in the kernel,
  and it is reused inside the scope (an element touched by two statement instances or two
  references) or not coalesced (consecutive threads along x do not touch consecutive elements
  of the last dimension).
* **Copies.** Statements of their own, grafted as extension nodes before and after the scope
  (as the mapper's barriers are): ``tc_copy_in_<buffer>`` reads the box clipped to the tensor
  (a group that writes reads exactly the elements it reads, so that no block reads what
  another writes), ``tc_copy_out_<buffer>`` writes back exactly the elements written. Their
  loops run over the tensor's elements, the innermost dimension on ``threadIdx.x`` (coalesced),
  the next ones on y and z, and are unrolled with ``unroll_copy_shared`` up to ``unroll``
  iterations per thread.
* **Barriers.** Between the copies in and the scope, between the scope and the write-backs,
  before the copies in where something ran earlier in the kernel, and after the scope (or its
  write-backs) where it runs again in the block or something follows: no thread overwrites a
  tile another still reads.
* **Buffers.** The innermost dimension of a buffer of rank 2 or more is padded to an odd length
  (shared-memory banks); the printers declare the buffers (``__shared__`` in CUDA, per block and
  filled with NaN in the emulation) and redirect the promoted references to them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import islpy as isl

from ..polyhedral.errors import TCInternalError
from ..polyhedral.names import isl_name
from ..polyhedral.schedule import node_at, node_path
from ..polyhedral.scop import Access, Scop, instance_text
from . import ir

__all__ = [
    "COPY_IN",
    "COPY_OUT",
    "Copy",
    "Graft",
    "Promoted",
    "Promotion",
    "TensorInfo",
    "aff_expr",
    "apply_grafts",
    "promote_private",
    "promote_shared",
]

#: Statement name prefixes of the copies (followed by the buffer's name).
COPY_IN = "tc_copy_in_"
COPY_OUT = "tc_copy_out_"

#: The barriers promotion adds (turned into ``sync`` marks like the mapper's, whose prefix it has).
_SYNC = "tc_sync_p"

#: The default budget of shared memory per block (bytes), as TC's, and the most static
#: ``__shared__`` arrays may take (more needs dynamic shared memory, which the printers lack).
DEFAULT_MAX_SHARED_MEMORY = 48 * 1024


@dataclass(frozen=True)
class TensorInfo:
    """What promotion needs of a tensor: its shape and the bytes of one element as the kernel
    holds it (a sum accumulated wider than its type: the wide type's)."""

    shape: tuple[int, ...]
    bytes: int


@dataclass(frozen=True)
class Promoted:
    """A reference redirected to a buffer: element ``k`` of the buffer is ``(subscript_k -
    offsets[k]) / strides[k]``, ``offsets`` over the statement's dimensions (``Var("i_<dim>")``)."""

    buffer: str
    offsets: tuple[ir.Expr, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class Copy:
    """A copy statement: its instance ``[s_0 .. s_{d-1}, a_0 .. a_{r-1}]`` copies element ``a`` of
    ``tensor`` in the scope iteration ``s`` to (``write_back`` False) or from the buffer, at
    ``(a_k - offsets[k]) / strides[k]``, ``offsets`` over ``Var("s<k>")``."""

    statement: str
    buffer: str
    tensor: str
    write_back: bool
    prefix: int
    offsets: tuple[ir.Expr, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class Promotion:
    """What promotion did: the buffers of each kernel (in launch order), the redirected
    references by ``(statement, reference id)``, the copy statements by name, the copies and
    barriers still to graft into the tree, and readable decisions."""

    buffers: tuple[tuple[ir.Buffer, ...], ...]
    accesses: Mapping[tuple[str, str], Promoted]
    copies: Mapping[str, Copy]
    grafts: tuple[Graft, ...]
    decisions: tuple[str, ...]


@dataclass(frozen=True)
class Graft:
    """Extension trees to graft before and after the node at ``path`` of a schedule tree (copies
    and barriers). Grafts are decided on the tree without them and applied together by
    :func:`apply_grafts`: isl gives no node's domain below an extension node. ``rank`` orders
    grafts at one node: the higher is grafted first, so the lower ends up nearer the node."""

    path: tuple[int, ...]
    before: tuple[isl.ScheduleNode, ...]
    after: tuple[isl.ScheduleNode, ...]
    rank: int = 0


def apply_grafts(sched: isl.Schedule, grafts: Sequence[Graft]) -> isl.Schedule:
    """``sched`` with ``grafts`` applied, deepest and latest paths first so that the paths of the
    others stay valid (a graft only inserts nodes above the node at its path)."""
    for g in sorted(grafts, key=lambda g: (g.path, g.rank), reverse=True):
        node = node_at(sched, g.path)
        for tree in g.before:
            node = node.graft_before(tree)
        for tree in reversed(g.after):
            node = node.graft_after(tree)
        sched = node.get_schedule()
    return sched


# ------------------------------------------------------------------------------------ isl helpers
def _is(node: isl.ScheduleNode, kind) -> bool:
    return node.get_type() == kind


def _maps(um: isl.UnionMap) -> list[isl.Map]:
    lst = um.get_map_list()
    return [lst.get_at(i) for i in range(lst.n_map())]


def _mentions(s: isl.UnionSet, names: Sequence[str]) -> bool:
    space = s.get_space()
    return any(space.find_dim_by_name(isl.dim_type.param, n) >= 0 for n in names)


def _copy_name(prefix: str, buffer: str) -> str:
    """``tc_copy_in_shared_A`` for the copy into buffer ``tc_shared_A``."""
    return prefix + buffer.removeprefix("tc_")


def _val(v: isl.Val) -> tuple[int, int]:
    """A rational ``Val`` as (numerator, denominator)."""
    return int(v.get_num_si()), int(v.get_den_val().to_python())


def aff_expr(aff: isl.Aff, names: Sequence[ir.Expr], params: Mapping[str, int]) -> ir.Expr:
    """Kernel IR for the quasi-affine ``aff``: its input dimensions are ``names``, its parameters
    take their values in ``params`` (by isl name); integer divisions are floors (``floordiv``)."""
    terms: list[tuple[int, int, ir.Expr]] = []  # (numerator, denominator, what it multiplies)
    for i in range(aff.dim(isl.dim_type.in_)):
        terms.append((*_val(aff.get_coefficient_val(isl.dim_type.in_, i)), names[i]))
    for i in range(aff.dim(isl.dim_type.param)):
        name = aff.get_dim_name(isl.dim_type.param, i)
        if name not in params:
            raise TCInternalError(f"parameter {name} has no value in {aff}")
        terms.append((*_val(aff.get_coefficient_val(isl.dim_type.param, i)), ir.Int(params[name])))
    for i in range(aff.dim(isl.dim_type.div)):
        coefficient = _val(aff.get_coefficient_val(isl.dim_type.div, i))
        if coefficient[0]:  # a div is the floor of a rational affine form of the earlier ones
            terms.append((*coefficient, aff_expr(aff.get_div(i), names, params)))
    num, den = _val(aff.get_constant_val())
    common = math.lcm(den, *(d for _, d, _ in terms))
    out: ir.Expr = ir.Int(num * (common // den))
    for n, d, e in terms:
        c = n * (common // d)
        if c == 0:
            continue
        term = e if c == 1 else ir.Op("*", (ir.Int(c), e))
        out = term if out == ir.Int(0) else ir.Op("+", (out, term))
    return out if common == 1 else ir.Op("floordiv", (out, ir.Int(common)))


def _isl_text(e: ir.Expr) -> str:
    """An expression :func:`aff_expr` built, in isl's syntax."""
    if isinstance(e, ir.Int):
        return str(e.value)
    if isinstance(e, ir.Var):
        return e.name
    a, b = (_isl_text(x) for x in e.args)
    if e.op == "floordiv":
        return f"floor(({a}) / {b})"
    if e.op == "+":
        return f"({a}) + ({b})"
    if e.op == "*":  # aff_expr puts the constant first
        return f"{a} * ({b})"
    raise TCInternalError(f"not a quasi-affine form: {e}")


def _single_aff(pa: isl.PwAff) -> isl.Aff | None:
    pieces = pa.coalesce().get_pieces()
    return pieces[0][1] if len(pieces) == 1 else None


# ------------------------------------------------------------------------------------- footprints
@dataclass(frozen=True)
class _Box:
    offsets: tuple[isl.Aff, ...]  # on the scope's space
    strides: tuple[int, ...]
    sizes: tuple[int, ...]


def _box(footprint: isl.Map) -> _Box | str:
    """The rectangular box of ``footprint`` (scope point -> elements), or why there is none.

    Per dimension, the offset is the lexicographic minimum when it is affine; where it is not
    (a last tile clipped at the tensor's start), any of its pieces that bounds it from below
    everywhere, the one giving the smallest size. The size spans every element from the offset.
    """
    offsets, strides, sizes = [], [], []
    n = footprint.dim(isl.dim_type.out)
    for i in range(n):
        mi = footprint.project_out(isl.dim_type.out, i + 1, n - i - 1).project_out(isl.dim_type.out, 0, i)
        stride = footprint.get_range_stride_info(i).get_stride()
        if not stride.is_int() or stride.is_zero():
            return "no constant stride"
        step = int(stride.to_python())
        lo = mi.lexmin_pw_multi_aff().get_pw_aff(0).coalesce()
        pieces = lo.get_pieces()
        best = None
        for _, aff in pieces:
            whole = isl.PwAff.from_aff(aff).intersect_domain(lo.domain())
            if len(pieces) > 1 and (step > 1 or not lo.domain().is_subset(lo.ge_set(whole))):
                continue  # a strided offset must be the minimum itself (the lattice)
            top = _largest(mi, aff)
            if top is not None and (best is None or top < best[1]):
                best = (aff, top)
        if best is None:
            return f"the offset of dimension {i} is not affine in the outer schedule"
        offsets.append(best[0])
        strides.append(step)
        sizes.append(best[1] // step + 1)
    return _Box(tuple(offsets), tuple(strides), tuple(sizes))


def _largest(mi: isl.Map, offset: isl.Aff) -> int | None:
    """The largest ``a - offset(s)`` over ``mi`` (``s -> [a]``); None if unbounded."""
    space = mi.get_space()
    rel = (
        isl.MultiAff.range_map(space)
        .get_aff(0)
        .sub(offset.pullback_multi_aff(isl.MultiAff.domain_map(space)))
    )
    top = mi.wrap().max_val(rel)
    return int(top.to_python()) if top.is_int() else None


def _in_box(footprint_space: isl.Space, box: _Box) -> isl.Map:
    """The elements of the box of each scope point: ``{ s -> T[a] : 0 <= (a_k - offset_k(s)) /
    stride_k < size_k, exactly }``."""
    to_scope = isl.MultiAff.domain_map(footprint_space)
    to_element = isl.MultiAff.range_map(footprint_space)
    ctx = footprint_space.get_ctx()
    cond = isl.Set.universe(footprint_space.wrap())
    for k, (off, stride, size) in enumerate(zip(box.offsets, box.strides, box.sizes)):
        rel = to_element.get_aff(k).sub(off.pullback_multi_aff(to_scope))
        zero = isl.Aff.val_on_domain_space(rel.get_domain_space(), isl.Val.int_from_si(ctx, 0))
        top = isl.Aff.val_on_domain_space(
            rel.get_domain_space(), isl.Val.int_from_si(ctx, stride * (size - 1))
        )
        cond = cond.intersect(rel.ge_set(zero)).intersect(rel.le_set(top))
        if stride > 1:
            cond = cond.intersect(
                isl.Set.from_basic_set(rel.mod_val(isl.Val.int_from_si(ctx, stride)).zero_basic_set())
            )
    return cond.unwrap()


def _tensor_bounds(tensor: str, shape: Sequence[int], ctx: isl.Context) -> isl.Set:
    """The elements of ``tensor`` (what the copies of a box are clipped to)."""
    names = [f"a{i}" for i in range(len(shape))]
    cons = " and ".join(f"0 <= {a} < {n}" for a, n in zip(names, shape))
    return isl.Set.read_from_str(ctx, f"{{ {isl_name(tensor)}[{', '.join(names)}] : {cons} }}")


def _clipped(copies: Sequence[isl.Map | None], outer: isl.UnionSet, bounds: isl.Set) -> list[isl.Map | None]:
    """The copies (``s -> T[a]``, or None) at the scope's points ``outer``, clipped to the tensor.

    A read's access relation is not: a read under a guard (``i >= 1 ? T(i - 1) : 0``) reaches
    ``T[-1]`` in it though the program never evaluates it there (the bounds check of such a read
    runs as the kernel does). Its element is then in no copy, and its buffer element never read;
    copied in, it was read from outside the tensor (AddressSanitizer's heap-buffer-overflow in a
    fuzzed emulated kernel). A copy left empty is None: nothing to copy."""
    outer_set = isl.Set.from_union_set(outer)
    clipped = [None if c is None else c.intersect_domain(outer_set).intersect_range(bounds) for c in copies]
    return [None if c is None or c.is_empty() else c for c in clipped]


# ------------------------------------------------------------------------------------------ scopes
def _scopes(sched: isl.Schedule, start: Sequence[int], depth: int, thread_ids: Sequence[str], thread0: str):
    """The promotion scopes at or below ``start`` (paths), splitting bands so that ``depth`` ends
    one; the new tree and the paths, in depth-first order."""
    found: list[list[int]] = []
    stack = [list(start)]
    while stack:
        path = stack.pop()
        node = node_at(sched, path)
        d = node.get_schedule_depth()
        if _is(node, isl.schedule_node_type.band):
            n = node.band_n_member()
            if d >= depth:
                found.append(path)
            elif d + n >= depth:
                if d + n > depth:
                    sched = node.band_split(depth - d).get_schedule()
                found.append([*path, 0])
            else:
                stack.append([*path, 0])
        elif (
            _is(node, isl.schedule_node_type.filter) and _mentions(node.filter_get_filter(), thread_ids)
        ) or (_is(node, isl.schedule_node_type.mark) and node.mark_get_id().get_name() == thread0):
            found.append(path)  # never below the thread mapping
        elif _is(node, isl.schedule_node_type.sequence) or _is(node, isl.schedule_node_type.set):
            if d >= depth:
                found.append(path)
            else:  # each child on its own: below its filter, never the filter itself
                stack.extend([*path, i, 0] for i in reversed(range(node.n_children())))
        elif node.n_children() == 0:
            found.append(path)
        else:
            stack.append([*path, 0])
    return sched, found


def _earlier(node: isl.ScheduleNode, stop: int) -> tuple[bool, bool]:
    """Whether something runs before and after ``node`` in its kernel (whose root is ``stop``
    nodes deep): a sequence or set above it, below the root, where it is not the first or last."""
    before = after = False
    while node.has_parent() and len(node_path(node)) > stop:
        parent = node.parent()
        if _is(parent, isl.schedule_node_type.sequence) or _is(parent, isl.schedule_node_type.set):
            pos = node.get_child_position()
            before |= pos > 0
            after |= pos < parent.n_children() - 1
        node = parent
    return before, after


def _once_per_block(outer: isl.UnionSet, block_ids: Sequence[str]) -> bool:
    """Whether each block runs at most one point of ``outer`` (the scope's outer schedule, with
    the block ids as parameters)."""
    s = isl.Set.from_union_set(outer)
    moved = 0
    for name in block_ids:
        pos = s.find_dim_by_name(isl.dim_type.param, name)
        if pos >= 0:
            s = s.move_dims(isl.dim_type.set, 0, isl.dim_type.param, pos, 1)
            moved += 1
    m = isl.Map.from_range(s).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, moved)
    return (
        m.project_out_all_params().is_single_valued() if moved else s.project_out_all_params().is_singleton()
    )


# ------------------------------------------------------------------------------------------ groups
@dataclass(frozen=True)
class _Ref:
    access: Access
    tagged: isl.UnionMap  # [S[i] -> R[]] -> T[a], the instances inside the scope
    footprint: isl.UnionMap  # scope point -> T[a]


@dataclass(frozen=True)
class _Group:
    tensor: str
    refs: tuple[_Ref, ...]

    @property
    def writes(self) -> bool:
        return any(r.access.write for r in self.refs)

    def footprint(self, which: Sequence[_Ref] | None = None) -> isl.UnionMap:
        refs = self.refs if which is None else which
        out = refs[0].footprint
        for r in refs[1:]:
            out = out.union(r.footprint)
        return out


def _groups(refs: Sequence[_Ref]) -> list[_Group]:
    """Per tensor, one group per reference, joined while two groups, one of them writing, touch a
    common element in one scope iteration."""
    groups = [_Group(r.access.tensor, (r,)) for r in refs]
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
                groups[i] = _Group(a.tensor, a.refs + b.refs)
                del groups[j]
                merged = True
                break
            if merged:
                break
    return groups


@dataclass(frozen=True)
class _Decision:
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
class _Scope:
    path: tuple[int, ...]
    kernel: int
    outer: isl.UnionSet  # the scope's outer schedule points, per block
    before: bool  # something earlier in the kernel
    again: bool  # it runs again in the block, or something follows it
    promoted: tuple[_Decision, ...]


def _live_in(g: _Group, scoped: isl.UnionMap, order: isl.UnionMap) -> isl.Map | None:
    """What a group that writes must copy in: per scope point, the elements it reads before (or
    without) writing them in that scope iteration (PPCG's live-in reads), or None.

    Flow analysis with each access tagged by its scope point (``instance -> [s -> T[a]]``): a
    write in another scope iteration is to another datum and cannot be a read's source, so the
    reads with no source are exactly those whose value comes from outside the iteration.
    ``order`` is the schedule of the scope's instances (the scope points, then the subtree)."""

    def tagged(refs: Sequence[_Ref]) -> isl.UnionMap:
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


def _scope_schedule(node: isl.ScheduleNode, scoped: isl.UnionMap) -> isl.UnionMap:
    """The order of the instances in the scope at ``node``: its point, then its subtree."""
    return scoped.flat_range_product(node.get_subtree_schedule_union_map().project_out_all_params())


def _next_along(space: isl.Space, dim: int) -> isl.Map:
    """``{ [..., v_dim, ...] -> [..., v_dim + 1, ...] }`` on the set space ``space``."""
    ident = isl.MultiAff.identity(space.map_from_set())
    one = isl.Val.int_from_si(space.get_ctx(), 1)
    return isl.Map.from_multi_aff(ident.set_aff(dim, ident.get_aff(dim).add_constant_val(one)))


class _Promoter:
    """Shared-memory promotion of the kernels of one mapped tree (see the module's docstring)."""

    def __init__(self, scop: Scop, fixed: isl.Set, options, tensors: Mapping[str, TensorInfo], ids):
        self.ctx = scop.ctx
        self.options = options
        self.tensors = tensors
        self.block_ids, self.thread_ids, self.thread0 = ids
        self.params = {
            fixed.get_dim_name(isl.dim_type.param, i): int(
                fixed.plain_get_val_if_fixed(isl.dim_type.param, i).to_python()
            )
            for i in range(fixed.dim(isl.dim_type.param))
        }
        self.dims = {s.name: s.dims for s in scop.statements}
        instances = {s.name: instance_text(s) for s in scop.statements}
        self.refs: list[tuple[Access, isl.UnionMap]] = []
        for acc in scop.accesses:
            rel = (scop.writes if acc.write else scop.reads).intersect_params(fixed)
            tag = isl.UnionSet.read_from_str(self.ctx, f"{{ [{instances[acc.statement]} -> {acc.ref}[]] }}")
            self.refs.append((acc, rel.intersect_domain(tag)))
        self.decisions: list[str] = []
        self.named: dict[str, int] = {}
        self.syncs = 0

    # ------------------------------------------------------------------------------- analysis
    def analyse(
        self, node: isl.ScheduleNode, kernel: int, depth: int, block, budget: list[int], keep=frozenset()
    ) -> _Scope:
        outer, scoped, order = self._scope_groups(node)  # scoped: instance -> scope point, every block
        schedule = _scope_schedule(node, scoped)
        before, after = _earlier(node, 2)
        again = after or not _once_per_block(outer, self.block_ids)
        bands = self._thread_bands(node)
        promoted = []
        for g in order:
            if g.tensor in keep:
                self.decisions.append(f"shared: {g.tensor} left alone (a block reduction's output)")
                continue
            d = self._decide(g, scoped, schedule, outer, bands, depth, block, budget)
            if d is not None:
                promoted.append(d)
        return _Scope(tuple(node_path(node)), kernel, outer, before, again, tuple(promoted))

    def _scope_groups(self, node: isl.ScheduleNode) -> tuple[isl.UnionSet, isl.UnionMap, list[_Group]]:
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
            refs.append(_Ref(acc, inside, scoped.reverse().apply_range(inside.domain_factor_domain())))
        order = sorted(_groups(refs), key=lambda g: (-len(g.refs), g.tensor, g.refs[0].access.ref))
        return prefix.range(), scoped, order

    def _decide(self, g: _Group, scoped, schedule, outer, bands, depth, block, budget) -> _Decision | None:
        stmts = sorted({r.access.statement for r in g.refs})
        where = f"{g.tensor} at depth {depth} over {stmts}"

        def refuse(why: str) -> None:
            self.decisions.append(f"shared: {where} not promoted ({why})")

        if not all(r.access.exact for r in g.refs):
            return refuse("a gather: its subscripts depend on data")
        shape = self.tensors[g.tensor].shape
        if not shape:
            return refuse("a scalar")
        footprint = isl.Map.from_union_map(g.footprint())
        box = _box(footprint)
        if isinstance(box, str):
            return refuse(box)
        declared = list(box.sizes)
        if len(declared) >= 2 and declared[-1] % 2 == 0:
            declared[-1] += 1  # an odd row length: a column of the tile spans every bank
        size = math.prod(declared) * self.tensors[g.tensor].bytes
        if size > budget[0]:
            return refuse(f"{size} bytes, {budget[0]} left of the shared memory budget")
        reuse = self._reuse(g, scoped)
        uncoalesced = [r.access.ref for r in g.refs if not self._coalesced(r, bands)]
        if not reuse and not uncoalesced:
            return refuse("no reuse, coalesced")
        named = self._buffer(g, box, footprint, scoped, "shared")
        if isinstance(named, str):
            return refuse(named)
        name, offsets, accesses = named
        budget[0] -= size
        reads = [r for r in g.refs if not r.access.write]
        writes = [r for r in g.refs if r.access.write]
        bounds = _tensor_bounds(g.tensor, shape, self.ctx)
        copy_in = None
        if reads and not writes:  # the whole box, clipped to the tensor: regular copy loops
            copy_in = _in_box(footprint.get_space(), box).intersect_range(bounds)
        elif reads:  # only what it reads before writing: another block may write the rest
            copy_in = _live_in(g, scoped, schedule)
        copy_out = isl.Map.from_union_map(g.footprint(writes)) if writes else None
        copy_in, copy_out = _clipped((copy_in, copy_out), outer, bounds)
        why = ["reuse"] if reuse else []
        if uncoalesced:
            why.append(f"uncoalesced {', '.join(uncoalesced)}")
        copies = [w for w, c in (("copy in", copy_in), ("write back", copy_out)) if c is not None]
        dims = "".join(f"[{n}]" for n in declared)
        self.decisions.append(
            f"shared: {g.tensor}{dims} at depth {depth} over {stmts} as {name}, "
            f"{size} bytes ({', '.join(copies)}; {', '.join(why)})"
        )
        buf = ir.Buffer(name, g.tensor, "shared", tuple(declared))
        return _Decision(buf, accesses, copy_in, copy_out, offsets, box.strides, box.sizes)

    def _buffer(self, g: _Group, box: _Box, footprint: isl.Map, scoped: isl.UnionMap, kind: str):
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

    def _redirected(self, g: _Group, box: _Box, scoped: isl.UnionMap, name: str) -> dict | str:
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
                aff = _single_aff(isl.PwAff.from_aff(off).pullback_pw_multi_aff(at))
                if aff is None:
                    return f"its offset is not affine in the dimensions of {sname}"
                exprs.append(aff_expr(aff, local, self.params))
            accesses[(sname, r.access.ref)] = Promoted(name, tuple(exprs), box.strides)
        return accesses

    def _reuse(self, g: _Group, scoped: isl.UnionMap) -> bool:
        """Whether two statement instances, or two references of one, touch one element in one
        scope iteration: (tagged instance -> (scope point, element)) is not injective."""
        tagged = g.refs[0].tagged
        for r in g.refs[1:]:
            tagged = tagged.union(r.tagged)
        to_scope = tagged.domain().unwrap().domain_map().apply_range(scoped)
        return not to_scope.range_product(tagged).is_injective()

    def _thread_bands(self, node: isl.ScheduleNode) -> list[tuple[isl.UnionMap, isl.UnionMap]]:
        """Per thread-mapped band below ``node``: (instance -> schedule down to its leaves, the map
        from a schedule point to the one whose thread-x member is one more)."""
        out = []

        def visit(n: isl.ScheduleNode) -> None:
            if _is(n, isl.schedule_node_type.filter) and _mentions(n.filter_get_filter(), self.thread_ids):
                below = n.child(0).child(0)  # the thread-mapped band's child
                prefix = below.get_prefix_schedule_union_map().project_out_all_params()
                full = prefix.flat_range_product(
                    below.get_subtree_schedule_union_map().project_out_all_params()
                )
                x = _maps(prefix)[0].dim(isl.dim_type.out) - 1  # innermost member: threadIdx.x
                nxt = None
                for m in _maps(full):
                    step = _next_along(m.get_space().range(), x)
                    nxt = (
                        isl.UnionMap.from_map(step) if nxt is None else nxt.union(isl.UnionMap.from_map(step))
                    )
                out.append((full, nxt))
                return
            for i in range(n.n_children()):
                visit(n.child(i))

        visit(node)
        return out

    def _coalesced(self, r: _Ref, bands) -> bool:
        """Whether threads next to each other along x touch the same element or the next one of
        the last dimension (references outside thread-mapped code count as coalesced)."""
        access = r.tagged.domain_factor_domain()
        for full, nxt in bands:
            at = access.apply_domain(full)  # schedule point -> element
            if at.is_empty():
                continue
            pairs = at.reverse().apply_range(nxt).apply_range(at)
            space = isl.Map.from_union_map(access).get_space().range()
            fine = isl.UnionMap.from_map(
                _next_along(space, space.dim(isl.dim_type.set) - 1).union(
                    isl.Map.identity(space.map_from_set())
                )
            )
            if not pairs.is_subset(fine):
                return False
        return True

    # ----------------------------------------------------------------------------------- edits
    def sync(self, outer: isl.UnionSet) -> isl.ScheduleNode:
        """A barrier statement run once per point of ``outer`` (an extension tree)."""
        name = f"{_SYNC}{self.syncs}"
        self.syncs += 1
        stmt = isl.UnionSet.from_set(isl.Set.read_from_str(self.ctx, f"{{ {name}[] }}"))
        return isl.ScheduleNode.from_extension(isl.UnionMap.from_domain_and_range(outer, stmt))

    def _copy_band(self, what: isl.Map, name: str) -> tuple[isl.ScheduleNode, int, str]:
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

    def copy(self, what: isl.Map, name: str, d: _Decision, block: Sequence[int]) -> isl.ScheduleNode:
        """The extension tree of copy statement ``name`` over ``what`` (scope point -> elements):
        instances ``name[s, a]``, a loop per tensor dimension, the innermost on threadIdx.x
        (element ``offset + k`` of the box on thread ``k`` modulo the block)."""
        tree, rank, tup = self._copy_band(what, name)
        cons = []
        for j, (t, n) in enumerate(zip(self.thread_ids, block)):
            k = rank - 1 - j  # innermost dimension on x
            if k >= 0:
                local = f"(a{k} - ({_isl_text(d.offsets[k])}))"
                if d.strides[k] > 1:
                    local = f"floor({local} / {d.strides[k]})"
                cons.append(f"{local} mod {n} = {t}" if n > 1 else f"{t} = 0")
            elif n > 1:
                cons.append(f"{t} = 0")  # one copy of each element: the other threads wait
        filt = isl.UnionSet.read_from_str(
            self.ctx, f"[{', '.join(self.thread_ids)}] -> {{ {tup} : {' and '.join(cons) or '0 = 0'} }}"
        )
        if self.options.unroll_copy_shared and self.options.unroll > 1:
            tree = self._unroll(tree, d.sizes, block)
        return tree.insert_filter(filt).root()

    def _unroll(self, band: isl.ScheduleNode, sizes: Sequence[int], block: Sequence[int]) -> isl.ScheduleNode:
        """Unroll the innermost copy loops while each thread runs at most ``unroll`` iterations of
        them together (TC's ``unroll_copy_shared``)."""
        rank = len(sizes)
        total = 1
        for k in reversed(range(rank)):
            j = rank - 1 - k  # the thread dimension of tensor dimension k
            count = -(-sizes[k] // block[j]) if j < len(block) else sizes[k]
            if total * count > self.options.unroll:
                break
            total *= count
            band = band.band_member_set_ast_loop_type(k, isl.ast_loop_type.unroll)
        return band

    def graft(self, scope: _Scope, block: Sequence[int]) -> Graft:
        """The copies and barriers around ``scope``."""
        ins = [d for d in scope.promoted if d.copy_in is not None]
        outs = [d for d in scope.promoted if d.copy_out is not None]
        before = []
        if ins and scope.before:  # what ran earlier may have written what is copied in
            before.append(self.sync(scope.outer))
        before += [self.copy(d.copy_in, _copy_name(COPY_IN, d.buffer.name), d, block) for d in ins]
        if ins:
            before.append(self.sync(scope.outer))
        after = []
        if outs:
            after.append(self.sync(scope.outer))
        after += [self.copy(d.copy_out, _copy_name(COPY_OUT, d.buffer.name), d, block) for d in outs]
        if scope.again:
            after.append(self.sync(scope.outer))
        return Graft(scope.path, tuple(before), tuple(after))


# ------------------------------------------------------------------------------------------- the pass
def promote_shared(
    sched: isl.Schedule,
    kernels: Sequence[tuple[Sequence[int], int, Sequence[int]]],
    scop: Scop,
    fixed: isl.Set,
    options,
    tensors: Mapping[str, TensorInfo],
    ids: tuple[Sequence[str], Sequence[str], str],
    *,
    keep: Sequence[frozenset[str]] = (),
    reserved: Sequence[int] = (),
) -> tuple[isl.Schedule, Promotion]:
    """Promote to shared memory in every kernel of the mapped tree ``sched`` (module docstring).

    :arg kernels: per kernel, in launch order: the path of its block-mapped band (or of its root
        when it has none), the number of block-mapped members, and its (tightened) block size.
    :arg options: the :class:`~tcjit.mapping.option_values.OptionValues` (``shared_depth``,
        ``max_shared_memory``, ``unroll_copy_shared``, ``unroll``).
    :arg tensors: shape and element size of every tensor.
    :arg ids: the block ids' and thread ids' parameter names and the thread-0 mark's name.
    :arg keep: per kernel, tensors left alone (a block reduction's output).
    :arg reserved: per kernel, shared memory bytes already spent (a block reduction's tree).
    :returns: the tree with the promotion scopes' bands split, and what was promoted (with the
        grafts that add the copies and barriers).
    """
    p = _Promoter(scop, fixed, options, tensors, ids)
    if (options.max_shared_memory or 0) > DEFAULT_MAX_SHARED_MEMORY:
        p.decisions.append(
            f"shared: budget {options.max_shared_memory} bytes capped at {DEFAULT_MAX_SHARED_MEMORY}"
            " (static __shared__ arrays)"
        )
    scopes: list[_Scope] = []
    for i, (start, n_block, block) in enumerate(kernels):
        depth = n_block if options.shared_depth is None else max(options.shared_depth, n_block)
        if options.shared_depth is not None and options.shared_depth < n_block:
            p.decisions.append(
                f"shared: depth {options.shared_depth} raised to {n_block} (the block mapping) in kernel {i}"
            )
        node = node_at(sched, start)
        if _is(node, isl.schedule_node_type.filter) and (
            _is(node.parent(), isl.schedule_node_type.sequence)
            or _is(node.parent(), isl.schedule_node_type.set)
        ):
            start = [*start, 0]  # below a kernel's filter, never the filter itself
        sched, paths = _scopes(sched, start, depth, p.thread_ids, p.thread0)
        budget = [min(DEFAULT_MAX_SHARED_MEMORY, options.max_shared_memory or DEFAULT_MAX_SHARED_MEMORY)]
        budget[0] -= reserved[i] if i < len(reserved) else 0
        for path in paths:
            left = keep[i] if i < len(keep) else frozenset()
            scopes.append(p.analyse(node_at(sched, path), i, depth, block, budget, left))
    grafts = [p.graft(scope, kernels[scope.kernel][2]) for scope in scopes if scope.promoted]
    return sched, _promotion(len(kernels), scopes, grafts, p.decisions)


def _promotion(n_kernels: int, scopes: Sequence[_Scope], grafts, decisions) -> Promotion:
    """What a pass promoted: the buffers per kernel, the redirected references and the copies."""
    buffers: list[list[ir.Buffer]] = [[] for _ in range(n_kernels)]
    accesses: dict[tuple[str, str], Promoted] = {}
    copies: dict[str, Copy] = {}
    for scope in scopes:
        for d in scope.promoted:
            buffers[scope.kernel].append(d.buffer)
            accesses.update(d.accesses)
            for prefix, what, back in ((COPY_IN, d.copy_in, False), (COPY_OUT, d.copy_out, True)):
                if what is not None:
                    stmt = _copy_name(prefix, d.buffer.name)
                    n = what.dim(isl.dim_type.in_)
                    copies[stmt] = Copy(stmt, d.buffer.name, d.buffer.tensor, back, n, d.offsets, d.strides)
    return Promotion(tuple(tuple(b) for b in buffers), accesses, copies, tuple(grafts), tuple(decisions))


# ======================================================================== private (registers)
#: The most elements a private buffer may have (registers are few; a larger one would spill).
MAX_PRIVATE_ELEMENTS = 64


def _thread_filters(node: isl.ScheduleNode, thread_ids: Sequence[str]) -> list[list[int]]:
    """The paths of the thread-mapping filters at or below ``node``."""
    out: list[list[int]] = []

    def visit(n: isl.ScheduleNode) -> None:
        if _is(n, isl.schedule_node_type.filter) and _mentions(n.filter_get_filter(), thread_ids):
            out.append(node_path(n))
            return
        for i in range(n.n_children()):
            visit(n.child(i))

    visit(node)
    return out


def _unrolled_members(node: isl.ScheduleNode) -> list[isl.UnionPwAff]:
    """The partial schedules of the band members at or below ``node`` that isl's AST unrolls."""
    out = []

    def visit(n: isl.ScheduleNode) -> None:
        if _is(n, isl.schedule_node_type.band):
            sched = n.band_get_partial_schedule()
            for j in range(n.band_n_member()):
                if n.band_member_get_ast_loop_type(j) == isl.ast_loop_type.unroll:
                    out.append(sched.get_union_pw_aff(j).intersect_domain(n.get_domain()))
        for i in range(n.n_children()):
            visit(n.child(i))

    visit(node)
    return out


class _PrivatePromoter(_Promoter):
    """Private promotion (notes/polyhedral.md 2(f)): per thread, below the thread mapping."""

    def analyse_private(self, node: isl.ScheduleNode, kernel: int, depth: int, threads, shared):
        """The private decisions of the scope at ``node``; ``threads`` maps an instance to (the
        block's schedule above the thread-mapped band, the band's point: its thread)."""
        outer, scoped, order = self._scope_groups(node)  # scoped: instance -> one thread's iteration
        schedule = _scope_schedule(node, scoped)
        unrolled = _unrolled_members(node)
        promoted = []
        for g in order:
            d = self._decide_private(g, scoped, schedule, outer, threads, unrolled, depth, shared)
            if d is not None:
                promoted.append(d)
        return _Scope(tuple(node_path(node)), kernel, outer, False, False, tuple(promoted))

    def _decide_private(
        self, g: _Group, scoped, schedule, outer, threads, unrolled, depth, shared
    ) -> _Decision | None:
        stmts = sorted({r.access.statement for r in g.refs})
        where = f"{g.tensor} at depth {depth} over {stmts}"

        def refuse(why: str) -> None:
            self.decisions.append(f"private: {where} not promoted ({why})")

        if g.tensor in shared:
            return refuse("in shared memory already")
        if not all(r.access.exact for r in g.refs):
            return refuse("a gather: its subscripts depend on data")
        if not self.tensors[g.tensor].shape:
            return refuse("a scalar")
        for r in g.refs:  # subscripts: functions of the scope point and the unrolled loops only
            access = r.tagged.domain_factor_domain()
            key = scoped.intersect_domain(access.domain())
            for upa in unrolled:
                part = (
                    isl.UnionMap.from_union_pw_aff(upa)
                    .project_out_all_params()
                    .intersect_domain(access.domain())
                )
                if not part.domain().is_empty():
                    if not access.domain().is_subset(part.domain()):
                        return refuse(f"{r.access.ref} is only partly below an unrolled loop")
                    key = key.flat_range_product(part)
            if not key.reverse().apply_range(access).is_single_valued():
                return refuse(f"{r.access.ref} depends on a loop that is not unrolled")
        tagged = g.refs[0].tagged.domain_factor_domain()
        for r in g.refs[1:]:
            tagged = tagged.union(r.tagged.domain_factor_domain())
        # one thread per element in each iteration of the block's schedule above the threads
        above, point = threads
        here = above.intersect_domain(tagged.domain())
        owner = here.range_product(tagged).reverse().apply_range(point.intersect_domain(tagged.domain()))
        if not owner.is_single_valued():
            return refuse("an element is touched by two threads")
        if not self._reuse(g, scoped):
            return refuse("no reuse within a thread")
        footprint = isl.Map.from_union_map(g.footprint())
        box = _box(footprint)
        if isinstance(box, str):
            return refuse(box)
        if math.prod(box.sizes) > MAX_PRIVATE_ELEMENTS:
            return refuse(f"{math.prod(box.sizes)} elements, more than {MAX_PRIVATE_ELEMENTS}")
        named = self._buffer(g, box, footprint, scoped, "private")
        if isinstance(named, str):
            return refuse(named)
        name, offsets, accesses = named
        reads = [r for r in g.refs if not r.access.write]
        writes = [r for r in g.refs if r.access.write]
        # exactly the elements read before being written (in) and written (out)
        copy_in = None
        if reads:
            copy_in = _live_in(g, scoped, schedule) if writes else isl.Map.from_union_map(g.footprint(reads))
        copy_out = isl.Map.from_union_map(g.footprint(writes)) if writes else None
        bounds = _tensor_bounds(g.tensor, self.tensors[g.tensor].shape, self.ctx)
        copy_in, copy_out = _clipped((copy_in, copy_out), outer, bounds)
        copies = [w for w, c in (("copy in", copy_in), ("write back", copy_out)) if c is not None]
        dims = "".join(f"[{n}]" for n in box.sizes)
        self.decisions.append(
            f"private: {g.tensor}{dims} at depth {depth} over {stmts} as {name} ({', '.join(copies)}; reuse)"
        )
        buf = ir.Buffer(name, g.tensor, "private", tuple(box.sizes))
        return _Decision(buf, accesses, copy_in, copy_out, offsets, box.strides, box.sizes)

    def private_copy(self, what: isl.Map, name: str) -> isl.ScheduleNode:
        """The extension tree of private copy ``name`` over ``what`` (scope point -> elements): run
        by the owning thread alone, a loop per tensor dimension, every one unrolled (register
        indices are then constants)."""
        tree, rank, _ = self._copy_band(what, name)
        for k in range(rank):
            tree = tree.band_member_set_ast_loop_type(k, isl.ast_loop_type.unroll)
        return tree.root()

    def private_graft(self, scope: _Scope) -> Graft:
        """The copies around ``scope``: no barriers, only the owning thread touches its elements."""
        before = tuple(
            self.private_copy(d.copy_in, _copy_name(COPY_IN, d.buffer.name))
            for d in scope.promoted
            if d.copy_in is not None
        )
        after = tuple(
            self.private_copy(d.copy_out, _copy_name(COPY_OUT, d.buffer.name))
            for d in scope.promoted
            if d.copy_out is not None
        )
        return Graft(scope.path, before, after)


def promote_private(
    sched: isl.Schedule,
    kernels: Sequence[tuple[Sequence[int], int, Sequence[int]]],
    scop: Scop,
    fixed: isl.Set,
    options,
    tensors: Mapping[str, TensorInfo],
    ids: tuple[Sequence[str], Sequence[str], str],
    shared: Sequence[Sequence[ir.Buffer]] = (),
) -> tuple[isl.Schedule, Promotion]:
    """Promote per-thread footprints to private buffers (registers) in every kernel of ``sched``
    (after shared promotion, whose tensors ``shared`` per kernel it leaves alone).

    Scopes: below each thread-mapped band, at ``private_depth`` (default and minimum: just below
    the band; a private scope is never above the thread mapping, so it needs no barrier). A group
    is promoted when its references are affine, its subscripts depend only on the scope's
    schedule (the block and thread mapping, outer loops) and on loops isl unrolls, no two threads
    touch one element in one iteration of the block's schedule, one thread reuses an element, and
    its box has at most :data:`MAX_PRIVATE_ELEMENTS` elements. The owning thread copies in what the
    group reads and writes back what it writes, around the scope (loops unrolled)."""
    p = _PrivatePromoter(scop, fixed, options, tensors, ids)
    scopes: list[_Scope] = []
    for i, (start, _, _) in enumerate(kernels):
        in_shared = {b.tensor for b in shared[i]} if i < len(shared) else set()
        for fpath in _thread_filters(node_at(sched, start), p.thread_ids):
            band = node_at(sched, fpath).child(0)  # the thread-mapped band
            below = band.get_schedule_depth() + band.band_n_member()
            depth = below if options.private_depth is None else max(options.private_depth, below)
            if options.private_depth is not None and options.private_depth < below:
                p.decisions.append(
                    f"private: depth {options.private_depth} raised to {below} (below the thread mapping)"
                )
            threads = (
                band.get_prefix_schedule_union_map().project_out_all_params(),
                band.child(0).get_prefix_schedule_union_map().project_out_all_params(),
            )
            sched, paths = _scopes(sched, [*fpath, 0, 0], depth, p.thread_ids, p.thread0)
            for path in paths:
                scopes.append(p.analyse_private(node_at(sched, path), i, depth, threads, in_shared))
    grafts = [p.private_graft(scope) for scope in scopes if scope.promoted]
    return sched, _promotion(len(kernels), scopes, grafts, p.decisions)
