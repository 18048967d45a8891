"""The GPU mapping's decisions as values, and the kernel IR nodes of its own statements.

The GPU mapping (:mod:`.gpu`) decides the names of the block and thread ids, the references it
redirects to promoted buffers (:class:`Promoted`; :func:`~tcjit.mapping.bodies.redirect` applies
them to the statements' bodies), the copy statements it adds (:class:`Copy`) and its block
reductions (:class:`BlockReduction`). In each launch's kernel IR (:mod:`.ir`, with its
:class:`~tcjit.mapping.ir.Buffer` s) its statements and marks become the nodes at the end of this
module (:func:`~tcjit.mapping.gpu_nodes.explicit`), which the CUDA printer and the emulated target
print. All are values, built once and never changed; the printers import them from here and
nothing that plans.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass

from ..polyhedral.errors import TCInternalError
from . import ir
from . import ir_values as V

__all__ = [
    "BLOCK_IDS",
    "REDUCTION_ROLES",
    "SHUFFLED_TYPES",
    "THREAD0_MARK",
    "THREAD_IDS",
    "WRITTEN",
    "BlockReduction",
    "Copy",
    "CopyElement",
    "FirstThread",
    "Promoted",
    "ReductionStep",
    "VectorGroup",
    "WarpSteps",
    "evaluate",
]

BLOCK_IDS = ("b0", "b1", "b2")
THREAD_IDS = ("t0", "t1", "t2")

#: The mark above code that thread 0 of each block runs alone (printed as a condition on the
#: thread ids below any barrier).
THREAD0_MARK = "thread0"

#: The C compute types ``__shfl_down_sync`` moves (others reduce through shared memory to the end).
SHUFFLED_TYPES = frozenset({"float", "double", "int32_t", "uint32_t", "int64_t", "uint64_t"})


# ------------------------------------------------------------------------------------ evaluation
# The printers' evaluator (a launch's grid at a call's sizes). mapping/gpu_access.py keeps its own
# copy, word for word: the frozen GPU model's digest covers that file's text
# (bench/_prediction.MODEL_SOURCES), and a change to it waits for the GPU measurements a model
# change needs (tests/gpu/test_gpu_model.py); merge the two then.
_COMPARISONS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}


def evaluate(e: ir.Expr, env: Mapping[str, int]) -> int:
    """The value of integer IR expression ``e`` with the variables of ``env`` (C semantics:
    ``div`` and ``mod`` truncate, ``floordiv`` floors; comparisons and logic give 0 or 1)."""
    if isinstance(e, ir.Int):
        return e.value
    if isinstance(e, ir.Var):
        return env[e.name]
    a = [evaluate(x, env) for x in e.args]
    op = e.op
    if op == "neg":
        return -a[0]
    if op == "+":
        return a[0] + a[1]
    if op == "-":
        return a[0] - a[1]
    if op == "*":
        return a[0] * a[1]
    if op == "min":
        return min(a)
    if op == "max":
        return max(a)
    if op == "floordiv":
        return a[0] // a[1]
    if op == "div":
        q = abs(a[0]) // abs(a[1])
        return q if (a[0] >= 0) == (a[1] > 0) else -q
    if op == "mod":  # the sign of the dividend, as C's %
        r = abs(a[0]) % abs(a[1])
        return r if a[0] >= 0 else -r
    if op == "select":
        return a[1] if a[0] else a[2]
    if op in _COMPARISONS:
        return int(_COMPARISONS[op](a[0], a[1]))
    if op == "&&":
        return int(bool(a[0]) and bool(a[1]))
    if op == "||":
        return int(bool(a[0]) or bool(a[1]))
    raise TCInternalError(f"cannot evaluate IR operator {op!r}")


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
class BlockReduction:
    """One block reduction (:mod:`.reduction` says what it is and does).

    :ivar number: ``k`` in the statements' names. :ivar update: the update statement ``U``.
    :ivar tensor: the tensor it reduces into. :ivar op: its operator (``+=``, ...).
    :ivar acc: the private buffer (one element) holding a thread's partial result.
    :ivar part: the shared buffer ``[bz][by][bx]`` the tree combines.
    :ivar atomic: blocks share the reduction's outputs (its loop is on blocks too): the combine
        adds atomically (CUDA's ``atomicAdd``).
    :ivar initialises: the combine is the only one each output element receives, and it takes
        over the element's ``!`` initialisation (which no longer runs): it stores ``identity op
        result`` instead of reading the element (no initialisation launch).
    """

    number: int
    update: str
    tensor: str
    op: str
    acc: ir.Buffer
    part: ir.Buffer
    atomic: bool = False
    initialises: bool = False

    @property
    def init(self) -> str:
        """The statement setting the partial result to the identity."""
        return f"tc_red_init_{self.number}"

    @property
    def store(self) -> str:
        """The statement storing a thread's partial result into :attr:`part`."""
        return f"tc_red_store_{self.number}"

    @property
    def tree(self) -> str:
        """The statement that becomes the tree's steps and barriers
        (:func:`~tcjit.mapping.reduction.expand_trees`)."""
        return f"tc_red_tree_{self.number}"

    @property
    def step(self) -> str:
        """A step of the tree; its one argument is the distance ``s``."""
        return f"tc_red_step_{self.number}"

    @property
    def warp(self) -> str:
        """The mark around the steps the CUDA printer may print as warp shuffles."""
        return f"tc_red_warp_{self.number}"

    @property
    def combine(self) -> str:
        """The statement adding a row's result into the output element it owns."""
        return f"tc_red_combine_{self.number}"

    @property
    def width(self) -> int:
        """Threads along x: the partial results one tree combines."""
        return self.part.shape[-1]

    def statements(self) -> tuple[str, ...]:
        """The statements the reduction adds (the tree's own, :attr:`step`, included)."""
        return (self.init, self.store, self.tree, self.step, self.combine)


# ------------------------------------------------------------------------------ the mapping's nodes
@dataclass(frozen=True)
class CopyElement:
    """One instance of copy statement ``copy``: ``args`` are its dimensions (the scope's
    iteration, then the element copied)."""

    copy: Copy
    args: tuple[ir.Expr, ...]


#: What each of a block reduction's own statements does (:class:`ReductionStep`).
REDUCTION_ROLES = ("init", "store", "step", "combine")


@dataclass(frozen=True)
class ReductionStep:
    """One instance of one of ``reduction``'s own statements, by ``role``: ``init`` sets the
    thread's partial result to the identity, ``store`` puts it into the shared buffer, ``step``
    adds the partial result ``args[0]`` threads along x away, ``combine`` adds the row's result
    into the output element (``args``: the statement's dimensions, the element's last)."""

    reduction: BlockReduction
    role: str
    args: tuple[ir.Expr, ...]


@dataclass(frozen=True)
class WarpSteps:
    """The steps of ``reduction``'s tree below 32 partial results (``body``: steps and barriers),
    which the CUDA printer may print as warp shuffles."""

    reduction: BlockReduction
    body: ir.Node


@dataclass(frozen=True)
class FirstThread:
    """``body``, run by thread ``(0, 0, 0)`` of each block alone."""

    body: ir.Node


#: The name of a vector group's written value (:class:`VectorGroup`).
WRITTEN = "tc_vw"


@dataclass(frozen=True)
class VectorGroup:
    """A thread's loop over V consecutive elements printed as wide accesses (:mod:`.gpu_vectors`).

    :ivar loop: the loop. :ivar run: the statement instance it runs. :ivar width: its
        iterations (V).
    :ivar loads: the structs read before the loop: ``(name, reference)``, one per distinct
        element offset (the written one as :data:`WRITTEN` where the statement reads it).
    :ivar names: each grouped reference of the statement's right-hand side -> its struct.
    :ivar write: the written reference where it is grouped (stored from :data:`WRITTEN` after the
        loop), else None (the write runs element by element).
    """

    loop: ir.For
    run: ir.Run
    width: int
    loads: tuple[tuple[str, V.Ref], ...]
    names: Mapping[V.Ref, str]
    write: V.Ref | None

    @property
    def values(self) -> tuple[tuple[str, V.Ref], ...]:
        """Every wide value the group holds, ``(name, reference)``: its loads, and the written
        one where it is not loaded."""
        if self.write is None or any(name == WRITTEN for name, _ in self.loads):
            return self.loads
        return (*self.loads, (WRITTEN, self.write))
