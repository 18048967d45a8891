"""Kernel IR: the loop program isl's AST generator builds, as plain immutable Python values.

The printers (C for CPU kernels, CUDA) never touch isl: :func:`.ir_isl.from_isl_ast` walks an
``isl.AstNode`` once and returns these values. Loop iterators and statement arguments are integer
expressions over the iterators; statement instances are :class:`Run` nodes naming the Scop statement
(``S0``, ``S0_init``) and giving an expression for each of its dimensions.

Expressions (all int64):

* :class:`Int`, :class:`Var`;
* :class:`Op` with ``op`` one of ``+ - * neg min max floordiv div mod < <= > >= == && || select``:
  ``floordiv`` rounds down (isl's ``fdiv_q``), ``div`` is a division known to be exact or to have a
  non-negative dividend and divisor (``pdiv_q``/``div``), ``mod`` a remainder with a non-negative
  dividend (``pdiv_r``/``zdiv_r``), ``select`` is ``a ? b : c``.

Statements: :class:`For` (``kinds``: how the target runs it, :class:`LoopKind` s from the marks
``kind@depth`` the CPU mapping puts above one-member bands, none for a serial loop: a mark applies
to the loop ``c{depth}`` right below it and to no other),
:class:`If`, :class:`Block`, :class:`Run` and :class:`Mark` (a mark that no loop absorbed: its band
had a single iteration).

The target's passes record their decisions as nodes of their own, which the printers print as
they are: the emulated target's :class:`Blocks` and :class:`Threads` (:mod:`.emulation`); the CPU
target's :class:`Team` and :class:`Fetching` (:mod:`.openmp_teams`), :class:`RegisterTile` and
:class:`FullTiles` (:mod:`.tile_forms`), :class:`ParallelReduction` and :class:`Accumulation`
(:mod:`.reduction_forms`). :mod:`.ir_text` prints any of it as indented text.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Union

__all__ = [
    "SYNC_MARK",
    "TILE_FORMS",
    "Accumulation",
    "Block",
    "Blocks",
    "Buffer",
    "Expr",
    "Fetch",
    "Fetching",
    "For",
    "FullTiles",
    "If",
    "Int",
    "LoopKind",
    "Mark",
    "Node",
    "Op",
    "ParallelReduction",
    "PartFill",
    "RegisterTile",
    "Run",
    "Site",
    "Team",
    "TeamMember",
    "Threads",
    "Var",
    "canonical",
    "free_vars",
    "loop_kinds",
    "loops",
    "nodes",
    "opens_parallel",
    "runs",
    "substitute",
]


# ---------------------------------------------------------------------------------------- expressions
@dataclass(frozen=True)
class Int:
    value: int


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Op:
    op: str
    args: tuple[Expr, ...]


Expr = Union[Int, Var, Op]  # noqa: UP007 (a runtime alias: `|` needs the classes' __or__)


# ----------------------------------------------------------------------------------------- statements
class LoopKind(enum.StrEnum):
    """How the target runs a loop (a loop of none runs serially, as written)."""

    PARALLEL = "parallel"  #: by threads (OpenMP)
    PARALLEL_REDUCTION = "parallel_reduction"  #: a reduction by threads, partial results in order
    SIMD = "simd"  #: in vector lanes
    SIMD_REDUCTION = "simd_reduction"  #: a reduction in vector lanes
    REDUCTION = "reduction"  #: a reduction into a register
    UNROLL = "unroll"  #: unrolled (a register tile's point loop)
    ACCUMULATE = "accumulate"  #: the reduction loop a register tile keeps its sums across


@dataclass(frozen=True)
class For:
    """``for (var = init; cond; var += step) body``; ``kinds`` says how the target runs it."""

    var: str
    init: Expr
    cond: Expr
    step: int
    body: Node
    kinds: frozenset[LoopKind] = frozenset()
    degenerate: bool = False  # exactly one iteration: ``var = init`` then body

    @property
    def kind_text(self) -> str:
        """The kinds as text, ``+``-joined in order (``serial`` for none)."""
        return "+".join(sorted(self.kinds)) or "serial"


@dataclass(frozen=True)
class If:
    cond: Expr
    then: Node
    other: Node | None


@dataclass(frozen=True)
class Block:
    children: tuple[Node, ...]


@dataclass(frozen=True)
class Run:
    """One instance of Scop statement ``statement``; ``args[i]`` is the value of its dimension ``i``."""

    statement: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Mark:
    """``body`` marked ``name``: :data:`SYNC_MARK`, or a mark of the mapper's own."""

    name: str
    body: Node


#: The mark of a barrier: the printers turn it into ``__syncthreads()`` after the marked subtree
#: (the emulation into a change of barrier phase).
SYNC_MARK = "sync"


@dataclass(frozen=True)
class Buffer:
    """A promoted part of a tensor (GPU mapping): ``shape`` elements (declared sizes, padding
    included) of ``tensor``'s type in ``space``: ``"shared"`` (one per block, CUDA's shared
    memory) or ``"private"`` (one per thread: registers or local memory)."""

    name: str
    tensor: str
    space: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Blocks:
    """The emulated target only (:mod:`.emulation`): one CUDA kernel's launch, ``body`` run once
    per block of ``grid`` (x, y, z) in the call's order, with ``b0, b1, b2`` bound and
    ``buffers`` declared (each block has its own)."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    body: Node
    buffers: tuple[Buffer, ...] = ()


@dataclass(frozen=True)
class Threads:
    """The emulated target only: ``body`` (free of barriers) run once per thread of ``block``
    in the call's order, with ``t0, t1, t2`` bound; its end is a barrier."""

    block: tuple[int, int, int]
    body: Node


# -------------------------------------------------------------- decisions of the CPU target's passes
@dataclass(frozen=True)
class Fetch:
    """An input's box that a loop's iterations fetch into cache, a slice at a time, for a later
    loop (:mod:`.prefetch` decides).

    :ivar tensor: the input. :ivar box: per dimension, the first and last index fetched.
    :ivar shared: the fetching parallel loop's variable, first index and iteration count: each
        thread fetches the whole box, shared out over the iterations it runs (the later loop's
        iterations may read any of it: a weight gradient's sum over the batch reads all of it).
    :ivar loops: the variables of the serial loops below it (outermost first, each with its first
        index and iteration count) over whose iterations each iteration's share is spread, a few
        lines at the top of each.
    """

    tensor: str
    box: tuple[tuple[int, int], ...]
    shared: tuple[str, int, int]
    loops: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class Site:
    """Where a part of a packed input is filled (:func:`.parts.place_parts` decides): the body of
    the loop that the mark ``name`` wraps; ``origin`` is the part's first element (one expression
    over the enclosing loops' variables per dimension).

    :ivar ahead: the first element of the part the loop's next iteration fills, where the part
        moves with the loop and the input has a unit-stride dimension (else empty): the printer
        asks for its lines to be brought into cache while this iteration computes
        (:mod:`.c_panels`). :ivar more: whether there is a next
        iteration (the loop's condition for it; None without ``ahead``).
    :ivar sizes: the variables of the symbolic sizes the input's extents read (the fill clamps
        the part to them), passed to the fill after the origin.
    """

    tensor: str
    origin: tuple[Expr, ...]
    ahead: tuple[Expr, ...] = ()
    more: Expr | None = None
    sizes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PartFill(Mark):
    """A mark whose ``body`` reads a part of a packed input that is filled first, at ``site``
    (:func:`.parts.place_parts` places it). Passes that see through marks see through it; a pass
    that rebuilds a mark keeps its type (``dataclasses.replace``)."""

    site: Site | None = None


@dataclass(frozen=True)
class Fetching:
    """``body``, a top-level parallel loop, whose iterations also fetch ``fetches`` for later
    loops (:mod:`.openmp_teams` places it)."""

    fetches: tuple[Fetch, ...]
    body: Node


@dataclass(frozen=True)
class TeamMember:
    """A member of a :class:`Team`: a parallel loop the team shares out (``shared``; ``nowait``:
    no barrier after it), or code that one thread of the team runs."""

    body: Node
    shared: bool
    nowait: bool = False


@dataclass(frozen=True)
class Team:
    """Consecutive top-level code run by one team of threads (OpenMP's ``parallel`` region):
    ``members`` in order (:mod:`.openmp_teams` decides)."""

    members: tuple[TeamMember, ...]


#: The forms of a register tile (:mod:`.tile_forms` says what each is).
TILE_FORMS = ("outer", "vector", "dot", "chain_vector", "chain_array")


@dataclass(frozen=True)
class RegisterTile:
    """A register tile (:mod:`.tile_forms` decides it): the elements that the instances
    ``runs`` of update ``statement`` update at each point of the point loops ``points`` live in
    registers (an array or vectors named ``name``, of ``dims`` per output, times ``lanes`` partial
    sums in the dot-product forms) across the reduction loops ``loops`` (the first is the marked
    loop; the others lie between it and ``vloop`` or the point loops). ``body``: what runs at
    each point.

    By form (:data:`TILE_FORMS`): ``compute`` is the reduction loop with the point loops inside
    (``outer``), or the strip-mined ``vloop`` (``dot``, ``chain_array``: its whole strips, then
    the rest). The vector forms (``vector``, ``chain_vector``) hold sums of type ``vector`` along
    dimension ``vdim`` and load the accesses ``vector_loads`` (their numbers in the statement's
    body, :mod:`.ir_values`) as vectors; ``vector``: ``var`` is the ``simd`` point loop's
    variable, made a chunk loop ``tc_v`` of the point loops; ``vector`` and ``outer``: ``start``
    says how the sums start (None: loaded; ``()``: from zero; else pairs ``(loop, first value)``:
    from zero where those enclosing loops are at their first values,
    :func:`~tcjit.mapping.tile_forms.tile_start`);
    ``chain_vector``: ``block`` of ``loops`` lie outside the float32 partial sums of a long sum.
    """

    form: str
    name: str
    statement: str
    runs: tuple[Run, ...]
    loops: tuple[For, ...]
    points: tuple[For, ...]
    dims: tuple[int, ...]
    lanes: int
    body: Node
    vloop: For | None = None
    compute: Node | None = None
    vector: object = None  # a ScalarType
    vdim: str = ""
    var: str = ""
    start: tuple[tuple[str, int], ...] | None = None
    block: int = 0
    vector_loads: frozenset[int] = frozenset()


@dataclass(frozen=True)
class FullTiles:
    """A register tile whose point loops have bounds that are not constants (partial tiles at
    the ends): ``full`` where every condition of ``conds`` holds (each point loop runs its whole
    extent, with constant bounds), else ``rolled``."""

    conds: tuple[Expr, ...]
    full: RegisterTile
    rolled: RegisterTile


@dataclass(frozen=True)
class ParallelReduction:
    """``loop`` run by threads, each iteration reducing the instances below it, which all
    update the element ``first`` updates, into a partial result of its own; the ``count``
    partial results are combined into the element in iteration order after the loop
    (:mod:`.reduction_forms` decides). ``chunked``: the loop's trip count is symbolic, and
    its iterations are shared out in ``count`` runs of consecutive ones (some perhaps empty),
    each reduced into a partial result, combined in order."""

    loop: For
    first: Run
    count: int
    chunked: bool = False


@dataclass(frozen=True)
class Accumulation:
    """``loop``, whose body is one instance of an update of one element the loop does not move:
    the element is held in a register across the loop (``vector``: a vector reduction of
    ``lanes`` lanes) (:mod:`.reduction_forms` decides)."""

    loop: For
    vector: bool
    lanes: int


Node = Union[  # noqa: UP007
    For,
    If,
    Block,
    Run,
    Mark,
    Blocks,
    Threads,
    Fetching,
    Team,
    RegisterTile,
    FullTiles,
    ParallelReduction,
    Accumulation,
]


# ------------------------------------------------------------------------------------------ queries
def free_vars(e: Expr) -> frozenset[str]:
    """The variables ``e`` mentions."""
    if isinstance(e, Var):
        return frozenset((e.name,))
    if isinstance(e, Op):
        out: frozenset[str] = frozenset()
        for a in e.args:
            out |= free_vars(a)
        return out
    return frozenset()


def substitute(e: Expr, values: dict[str, Expr]) -> Expr:
    """``e`` with the variables in ``values`` replaced."""
    if isinstance(e, Var):
        return values.get(e.name, e)
    if isinstance(e, Op):
        return Op(e.op, tuple(substitute(a, values) for a in e.args))
    return e


def map_runs(node: Node, fn: Callable[[Run], Node]) -> Node:
    """``node`` with each statement instance ``r`` replaced by ``fn(r)`` (loops, conditions,
    blocks and marks rebuilt around them)."""
    if isinstance(node, Run):
        return fn(node)
    if isinstance(node, Block):
        return Block(tuple(map_runs(c, fn) for c in node.children))
    if isinstance(node, For):
        return For(
            node.var, node.init, node.cond, node.step, map_runs(node.body, fn), node.kinds, node.degenerate
        )
    if isinstance(node, If):
        return If(
            node.cond, map_runs(node.then, fn), None if node.other is None else map_runs(node.other, fn)
        )
    if isinstance(node, Mark):
        return replace(node, body=map_runs(node.body, fn))
    return node


def nodes(node: Node | None):
    """Every statement node of ``node`` (``node`` first), in pre-order; below a register tile,
    the nest it replaces (once per copy of a split tile)."""
    if node is None:
        return
    yield node
    if isinstance(node, If):
        yield from nodes(node.then)
        yield from nodes(node.other)
    elif isinstance(node, Block):
        for c in node.children:
            yield from nodes(c)
    elif isinstance(node, (For, Mark, Blocks, Threads, Fetching)):
        yield from nodes(node.body)
    elif isinstance(node, Team):
        for m in node.members:
            yield from nodes(m.body)
    elif isinstance(node, RegisterTile):  # the nest it replaces, as written
        yield from nodes(node.loops[0])
    elif isinstance(node, FullTiles):  # both copies
        yield from nodes(node.full)
        yield from nodes(node.rolled)
    elif isinstance(node, (ParallelReduction, Accumulation)):
        yield from nodes(node.loop)
    elif hasattr(node, "body"):  # another target's node around a body (:mod:`.gpu_ir`)
        yield from nodes(node.body)


def loops(node: Node) -> list[For]:
    """Every loop of ``node``, in pre-order."""
    return [n for n in nodes(node) if isinstance(n, For)]


def runs(node: Node | None) -> list[Run]:
    """Every statement instance in ``node``, in order: loops, guards and launches included."""
    return [n for n in nodes(node) if isinstance(n, Run)]


def opens_parallel(node: Node | None) -> bool:
    """Whether ``node`` holds a loop run by threads (a ``parallel`` or ``parallel_reduction``
    kind); a GPU launch counts as one."""
    if node is None or isinstance(node, Run):
        return False
    if isinstance(node, For):
        return bool({LoopKind.PARALLEL, LoopKind.PARALLEL_REDUCTION} & node.kinds) or opens_parallel(
            node.body
        )
    if isinstance(node, Block):
        return any(opens_parallel(c) for c in node.children)
    if isinstance(node, (Mark, Fetching)):
        return opens_parallel(node.body)
    if isinstance(node, (RegisterTile, FullTiles, Accumulation)):
        return False
    if isinstance(node, If):
        return opens_parallel(node.then) or opens_parallel(node.other)
    return True


def canonical(loop: For) -> bool:
    """Whether ``loop``'s condition is ``var < e`` or ``var <= e`` with ``e`` free of ``var``:
    the loops the CPU target may run in other ways than as written (its kind applies)."""
    c = loop.cond
    return (
        isinstance(c, Op)
        and c.op in ("<", "<=")
        and c.args[0] == Var(loop.var)
        and loop.var not in free_vars(c.args[1])
    )


def loop_kinds(loop: For) -> frozenset[LoopKind]:
    """How the target runs ``loop``: its kinds, or none (serially) where it is not
    :func:`canonical`."""
    return loop.kinds if canonical(loop) else frozenset()
