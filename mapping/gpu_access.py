"""What each warp of a GPU launch asks of memory, read off the kernel IR: the first layer of the
static GPU profile (issue 32), exact for the warp it follows and free of any device constant.

For every launch of the ``cuda`` target's lowering (:func:`~tcjit.mapping.lower_gpu.lower_gpu`,
its statements' bodies redirected as the printers see them), :func:`access_profile` follows the
first warp of block ``(0, 0, 0)``: lane ``l`` is thread ``(l % bx, l // bx % by, l // (bx * by))``
of a block of ``bx x by x bz`` threads. Walking the launch's IR with each lane's own values of the
thread ids and loop variables, it counts, per thread, how often each statement runs (the trip
counts of its enclosing loops, each taken in the first active lane at the loop's first iteration
of the loops around it: exact for the rectangular tiles the mapping makes, a model for the rest),
and for each access of each statement instance the addresses the warp's active lanes touch in
their first iteration:

- a **global** access (a tensor's element, :class:`~tcjit.mapping.ir_values.Ref`): its stride
  along ``threadIdx.x`` in elements (the address of lane 1 minus lane 0's, where the two differ
  in ``t0`` alone), and the distinct 32-byte sectors and 128-byte lines of the request; a
  subscript that depends on loaded data (a gather) has no stride and is counted as one line per
  active lane;
- a **shared** access (a promoted buffer in shared memory): its bank conflict, the most distinct
  4-byte words the request asks of one of the 32 banks (1: none; one word asked by many lanes is a
  broadcast and costs once);
- a **private** access (registers or local memory) is listed without a cost.

It also counts the barriers each thread passes and the atomic additions a block reduction's
combine makes. :func:`access_profile` is a pure function of the lowering; the device model that
turns these counts into time (bandwidths, wavefront costs, occupancy) is separate.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.lang.types import ScalarType
from . import ir
from . import ir_values as V
from .gpu_ir import BLOCK_IDS, THREAD_IDS, CopyElement, FirstThread, ReductionStep, WarpSteps
from .layout import contiguous_strides

__all__ = [
    "AccessProfile",
    "LaunchAccesses",
    "access_profile",
    "evaluate",
    "float_instructions",
    "trip_count",
]

WARP = 32
SECTOR = 32
LINE = 128
BANKS = 32
BANK_BYTES = 4


@dataclass(frozen=True)
class AccessProfile:
    """One access of one statement (or copy, or reduction step) as a warp makes it.

    :ivar what: the statement, copy or reduction step. :ivar tensor: the tensor, or the buffer.
    :ivar kind: ``read`` or ``write``. :ivar space: ``global``, ``shared`` or ``private``.
    :ivar stride: elements between lanes 0 and 1 along ``threadIdx.x`` (None: not affine in the
        thread ids, or the block has one thread along x).
    :ivar sectors: distinct 32-byte sectors of one warp request (global).
    :ivar lines: distinct 128-byte lines of one warp request (global).
    :ivar conflict: the most distinct words one bank serves for one request (shared; 1: none).
    :ivar lanes: the warp's lanes that make the access.
    :ivar requests: warp requests per thread (how often a thread makes it).
    :ivar element_bytes: the bytes of one element.
    :ivar shared_by_warps: the block's second warp asks for the same sectors as its first (a
        global access whose address does not depend on ``threadIdx.y`` or ``.z``): L1 serves the
        block's other warps what the first brought in.
    """

    what: str
    tensor: str
    kind: str
    space: str
    stride: int | None
    sectors: int
    lines: int
    conflict: int
    lanes: int
    requests: int
    element_bytes: int
    shared_by_warps: bool = False


@dataclass(frozen=True)
class LaunchAccesses:
    """One launch: its grid and block, per-thread executions of each statement, its accesses,
    and the barriers and atomic additions per thread."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    executions: Mapping[str, int]
    accesses: tuple[AccessProfile, ...]
    barriers: int
    atomics: int

    @property
    def blocks(self) -> int:
        return math.prod(self.grid)

    @property
    def threads(self) -> int:
        """Threads per block."""
        return math.prod(self.block)

    @property
    def warps(self) -> int:
        """Warps per block (the last one maybe partly idle)."""
        return -(-self.threads // WARP)


# ------------------------------------------------------------------------------------ evaluation
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


def trip_count(loop: ir.For, env: Mapping[str, int]) -> int:
    """How many iterations ``loop`` makes with the enclosing variables of ``env`` (its condition
    taken as an upper bound: once false, false for every later value)."""
    first = evaluate(loop.init, env)

    def runs(k: int) -> bool:
        return bool(evaluate(loop.cond, {**env, loop.var: first + k * loop.step}))

    if loop.degenerate:
        return 1
    if not runs(0):
        return 0
    hi = 1
    while runs(hi):
        hi *= 2
        if hi > 1 << 62:
            raise TCInternalError(f"loop {loop.var} does not end")
    lo = hi // 2  # runs(lo) is true, runs(hi) false
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if runs(mid) else (lo, mid)
    return lo + 1


def _subscript(s: V.Subscript, env: Mapping[str, int]) -> int | None:
    """A subscript's value in ``env`` (the statement's dimensions bound); None where it depends on
    loaded data."""
    if isinstance(s, V.SubConst):
        return s.value
    if isinstance(s, V.SubVar):
        return env[s.name]
    if isinstance(s, V.SubNeg):
        x = _subscript(s.arg, env)
        return None if x is None else -x
    if isinstance(s, V.SubArith):
        a, b = _subscript(s.lhs, env), _subscript(s.rhs, env)
        if a is None or b is None:
            return None
        if s.op in ("/", "%") and b == 0:
            return 0
        return {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b else 0, "%": a % b if b else 0}[s.op]
    if isinstance(s, V.SubValue):
        value = s.value
        while isinstance(value, V.Convert):
            value = value.arg
        if isinstance(value, V.IndexVar):
            return env[value.name]
        return None
    raise TCInternalError(f"cannot evaluate subscript {s!r}")


def _loads(v: V.Value | None):
    """Every load of value ``v`` (those in subscripts included), in pre-order."""
    if v is None:
        return
    if isinstance(v, V.Load):
        yield v
        if isinstance(v.ref, (V.Ref, V.BufferRef)):
            for s in v.ref.subscripts:
                yield from _subscript_loads(s)
        return
    for x in V.operands(v):
        yield from _loads(x)


def _subscript_loads(s: V.Subscript):
    if isinstance(s, V.SubValue):
        yield from _loads(s.value)
    elif isinstance(s, V.SubNeg):
        yield from _subscript_loads(s.arg)
    elif isinstance(s, V.SubArith):
        yield from _subscript_loads(s.lhs)
        yield from _subscript_loads(s.rhs)


def float_instructions(body: V.Body) -> int:
    """Float arithmetic instructions of one instance of ``body``: each float ``+ - * /`` of its
    value, and an update's combine, a multiply that feeds a ``+=`` update fused with it (FMA)."""
    count = 0

    def walk(v: V.Value) -> None:
        nonlocal count
        if isinstance(v, V.Arith) and v.dtype.is_float:
            count += 1
        for x in V.operands(v):
            walk(x)

    if body.rhs is None:
        return 0
    walk(body.rhs)
    if body.kind == "update" and body.value_type.is_float:
        top = body.rhs
        fused = body.op == "+=" and isinstance(top, V.Arith) and top.op == "*"
        count += 0 if fused else 1
    return count


# ------------------------------------------------------------------------------------- the walk
class _Walk:
    """One launch's walk (see the module docstring)."""

    def __init__(
        self,
        cdef: CheckedDef,
        bodies: Mapping[str, V.Body],
        strides: Mapping[str, tuple[int, ...]],
        element_bytes: Mapping[str, int],
        buffers: Mapping[str, ir.Buffer],
        block: tuple[int, int, int],
        params: Mapping[str, int],
        warp: int = 0,
    ):
        self.cdef, self.bodies, self.strides, self.bytes = cdef, bodies, strides, element_bytes
        self.buffers, self.block = buffers, block
        bx, by, _ = block
        lanes = range(WARP * warp, min(WARP * (warp + 1), math.prod(block)))
        self.lanes = [
            {
                **params,
                **dict(zip(BLOCK_IDS, (0, 0, 0))),
                **dict(zip(THREAD_IDS, (lane % bx, lane // bx % by, lane // (bx * by)))),
            }
            for lane in lanes
        ]
        self.sectors: dict[tuple, frozenset] = {}  # each global access's first request
        self.executions: dict[str, int] = {}
        self.found: dict[tuple, AccessProfile] = {}
        self.barriers = 0
        self.atomics = 0

    def node(self, n: ir.Node | None, envs: list[dict], trips: int) -> None:
        envs = [e for e in envs if e is not None]
        if n is None or not envs or trips == 0:
            return
        if isinstance(n, ir.Block):
            for c in n.children:
                self.node(c, envs, trips)
        elif isinstance(n, ir.For):
            count = trip_count(n, envs[0])
            inner = [{**e, n.var: evaluate(n.init, e)} for e in envs]
            self.node(n.body, [e for e in inner if evaluate(n.cond, e) or n.degenerate], trips * count)
        elif isinstance(n, ir.If):
            self.node(n.then, [e for e in envs if evaluate(n.cond, e)], trips)
            self.node(n.other, [e for e in envs if not evaluate(n.cond, e)], trips)
        elif isinstance(n, ir.Mark):
            self.node(n.body, envs, trips)
            if n.name == ir.SYNC_MARK:
                self.barriers += trips
        elif isinstance(n, (WarpSteps,)):
            self.node(n.body, envs, trips)
        elif isinstance(n, FirstThread):
            self.node(n.body, [e for e in envs if all(e[t] == 0 for t in THREAD_IDS)], trips)
        elif isinstance(n, ir.Run):
            self.run(n, envs, trips)
        elif isinstance(n, CopyElement):
            self.copy(n, envs, trips)
        elif isinstance(n, ReductionStep):
            self.reduction_step(n, envs, trips)
        else:
            raise TCInternalError(f"unexpected {type(n).__name__} in a launch's IR")

    # ------------------------------------------------------------------------------ statements
    def run(self, n: ir.Run, envs: list[dict], trips: int) -> None:
        b = self.bodies[n.statement]
        self.executions[n.statement] = self.executions.get(n.statement, 0) + trips
        bound = [{**e, **{d: evaluate(a, e) for d, a in zip(b.dims, n.args)}} for e in envs]
        for load in _loads(b.value):
            self.access(n.statement, load.ref, "read", bound, trips)
        if isinstance(b.target, (V.Ref, V.BufferRef)):
            for s in b.target.subscripts:
                for load in _subscript_loads(s):
                    self.access(n.statement, load.ref, "read", bound, trips)
        if b.kind == "update":
            self.access(n.statement, b.target, "read", bound, trips)
        self.access(n.statement, b.target, "write", bound, trips)

    def copy(self, n: CopyElement, envs: list[dict], trips: int) -> None:
        c = n.copy
        self.executions[c.statement] = self.executions.get(c.statement, 0) + trips
        element = n.args[c.prefix :]
        outer = {f"s{k}": a for k, a in enumerate(n.args[: c.prefix])}
        subscripts = tuple(V.SubVar(f"tc_a{k}") for k in range(len(element)))
        bound = []
        for e in envs:
            env = {**e, **{f"tc_a{k}": evaluate(a, e) for k, a in enumerate(element)}}
            for k, off in enumerate(c.offsets):
                env[f"tc_o{k}"] = evaluate(ir.substitute(off, outer), e)
            bound.append(env)
        tensor_ref = V.Ref(c.tensor, subscripts, (False,) * len(subscripts), (0, 0, 0, 0), c.write_back, 0)
        offsets = tuple(ir.Var(f"tc_o{k}") for k in range(len(element)))
        buffer_ref = V.BufferRef(c.buffer, c.tensor, subscripts, offsets, c.strides)
        first, second = (buffer_ref, tensor_ref) if c.write_back else (tensor_ref, buffer_ref)
        self.access(c.statement, first, "read", bound, trips)
        self.access(c.statement, second, "write", bound, trips)

    def reduction_step(self, n: ReductionStep, envs: list[dict], trips: int) -> None:
        red = n.reduction
        what = f"block reduction {red.number} {n.role}"
        self.executions[what] = self.executions.get(what, 0) + trips
        if n.role == "combine":
            if red.atomic:
                self.atomics += trips
            return
        # init and store touch the thread's partial result and its slot of the shared tree; a step
        # reads two slots and writes one ([bz][by][bx] by the thread's ids: no conflict)
        part = red.part
        x = [e[THREAD_IDS[0]] for e in envs]
        words = [
            (e[THREAD_IDS[2]] * part.shape[1] + e[THREAD_IDS[1]]) * part.shape[2] + t for e, t in zip(envs, x)
        ]
        if n.role in ("store", "step"):
            self.shared(what, part.name, "write", words, trips, len(envs), self.bytes.get(red.tensor, 4))

    # --------------------------------------------------------------------------------- accesses
    def access(self, what: str, ref: V.Target, kind: str, envs: list[dict], trips: int) -> None:
        if isinstance(ref, V.PartialRef):
            self.record(AccessProfile(what, ref.buffer, kind, "private", None, 0, 0, 1, len(envs), trips, 0))
            return
        if isinstance(ref, V.BufferRef):
            buf = self.buffers[ref.buffer]
            item = self.bytes.get(ref.tensor, 4)
            if buf.space != "shared":
                self.record(
                    AccessProfile(what, ref.buffer, kind, "private", None, 0, 0, 1, len(envs), trips, item)
                )
                return
            flat = [self._buffer_index(ref, buf, e) for e in envs]
            self.shared(what, ref.buffer, kind, flat, trips, len(envs), item)
            return
        item = self.bytes.get(ref.tensor, 4)
        strides = self.strides[ref.tensor]
        addresses = []
        for e in envs:
            subs = [_subscript(s, e) for s in ref.subscripts]
            addresses.append(None if None in subs else sum(s * n for s, n in zip(subs, strides)))
        known = [a for a in addresses if a is not None]
        if len(known) < len(addresses):  # a gather: a line per lane
            sectors = lines = len(addresses)
            stride = None
        else:
            sectors = len({a * item // SECTOR for a in known})
            lines = len({a * item // LINE for a in known})
            stride = self._stride(addresses, envs)
        self.sectors.setdefault((what, ref.tensor, kind, "global"), frozenset(addresses))
        self.record(
            AccessProfile(what, ref.tensor, kind, "global", stride, sectors, lines, 1, len(envs), trips, item)
        )

    def shared(
        self, what: str, buffer: str, kind: str, flat: list[int], trips: int, lanes: int, item: int
    ) -> None:
        words_per_bank: dict[int, set[int]] = {}
        for f in flat:
            word = f * item // BANK_BYTES
            words_per_bank.setdefault(word % BANKS, set()).add(word)
        conflict = max((len(w) for w in words_per_bank.values()), default=1)
        stride = flat[1] - flat[0] if len(flat) > 1 and self.block[0] > 1 else None
        self.record(AccessProfile(what, buffer, kind, "shared", stride, 0, 0, conflict, lanes, trips, item))

    @staticmethod
    def _buffer_index(ref: V.BufferRef, buf: ir.Buffer, env: Mapping[str, int]) -> int:
        flat, step = 0, 1
        local = []
        for s, off, stride in zip(ref.subscripts, ref.offsets, ref.strides):
            v = _subscript(s, env)
            o = evaluate(off, {**env, **{f"i_{k}": x for k, x in env.items()}})
            local.append(((v or 0) - o) // stride)
        for i, n in reversed(list(zip(local, buf.shape))):
            flat += i * step
            step *= n
        return flat

    def _stride(self, addresses: list[int | None], envs: list[dict]) -> int | None:
        if len(envs) < 2 or self.block[0] < 2:
            return None
        a, b = envs[0], envs[1]
        if b[THREAD_IDS[0]] != a[THREAD_IDS[0]] + 1:
            return None
        return addresses[1] - addresses[0]

    def record(self, a: AccessProfile) -> None:
        key = (a.what, a.tensor, a.kind, a.space)
        old = self.found.get(key)
        if old is None:
            self.found[key] = a
        else:  # the same access at another place of the IR (a tile's two copies): more requests
            self.found[key] = AccessProfile(
                a.what,
                a.tensor,
                a.kind,
                a.space,
                old.stride,
                max(old.sectors, a.sectors),
                max(old.lines, a.lines),
                max(old.conflict, a.conflict),
                max(old.lanes, a.lanes),
                old.requests + a.requests,
                a.element_bytes,
            )


def access_profile(
    cdef: CheckedDef,
    launches,
    bodies: Mapping[str, V.Body],
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    wide: Mapping[str, ScalarType],
) -> tuple[LaunchAccesses, ...]:
    """The accesses of every launch (module docstring).

    :arg launches: ``(plan, body)`` per launch (:attr:`~tcjit.mapping.lower_gpu.GpuLowering.launches`).
    :arg bodies: the statements' bodies as the printers see them
        (:func:`~tcjit.mapping.lower_gpu.gpu_bodies`).
    :arg strides: each tensor's element strides; ``wide``: the tensors summed in a wider type
        (held in a contiguous buffer of that type).
    """
    held = {}
    element_bytes = {}
    for t in cdef.tensor_infos:
        shape = tuple(int(s.evaluate(sizes)) for s in t.shape)
        held[t.name] = contiguous_strides(shape) if t.name in wide else tuple(strides[t.name])
        element_bytes[t.name] = max(1, (wide.get(t.name) or t.dtype).bits // 8)
    out = []
    for plan, body in launches:
        buffers = {b.name: b for b in plan.buffers}
        walk = _Walk(cdef, bodies, held, element_bytes, buffers, plan.block, dict(sizes))
        walk.node(body, list(walk.lanes), 1)
        accesses = tuple(walk.found.values())
        if math.prod(plan.block) > WARP:  # does the block's second warp ask for the same sectors?
            second = _Walk(cdef, bodies, held, element_bytes, buffers, plan.block, dict(sizes), warp=1)
            second.node(body, list(second.lanes), 1)
            accesses = tuple(
                replace(
                    a, shared_by_warps=key in walk.sectors and walk.sectors[key] == second.sectors.get(key)
                )
                for key, a in walk.found.items()
            )
        out.append(
            LaunchAccesses(
                plan.grid, plan.block, dict(walk.executions), accesses, walk.barriers, walk.atomics
            )
        )
    return tuple(out)
