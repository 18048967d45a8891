"""The reference evaluator: the independent answer compiled kernels are compared with.

``evaluate(source, entry, *inputs)`` computes the outputs of any checked TC program with torch tensor
operations: each statement's iteration space is laid out as a broadcast grid of index tensors, the
right-hand side is evaluated on it elementwise, and reductions are torch reductions over the
reduction axes (or scatter-reductions for affine and gathered left-hand sides). Nothing here uses
polyhedral code. It is slow on purpose-less Python glue and that is fine.

Value semantics (the language's, see docs/language.md) are honoured exactly for integers and as
closely as IEEE arithmetic allows for floats:

* integer arithmetic wraps at the declared width; ``/`` and ``%`` truncate toward zero; division or
  remainder by zero gives 0 and ``INT_MIN / -1`` wraps (no trap); unsigned types are carried in a
  wider signed type (``uint64`` as its two's-complement bit pattern) and wrapped after every step;
* float16 and bfloat16 are loaded as float32, computed in float32 and rounded once when stored;
* float reductions accumulate in float64 (at least as accurate as any kernel's order);
* ``min``/``max`` and ``min=``/``max=`` on floats ignore NaN operands, like ``fmin``/``fmax``;
* ``c ? a : b``, ``&&`` and ``||`` evaluate only the branch taken (a gather in the other branch
  may be out of bounds);
* elements of an output that no statement writes are zero; ``!`` sets the elements a statement
  writes to the identity of its operator before reducing (with a gathered left-hand side, which
  may write anywhere, the whole tensor).

Memory stays bounded: a statement's iteration space is cut into boxes of at most ``max_points``
points (about 1 GiB of temporaries at the default), whatever its size.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .binding import bind, torch_dtype
from .polyhedral.errors import TCBoundsError, TCCallError
from .polyhedral.lang import ast as A
from .polyhedral.lang.builtins import LANGUAGE_FUNCTIONS
from .polyhedral.lang.check import check_source
from .polyhedral.lang.checked import CheckedDef, CheckedProgram, CheckedStatement
from .polyhedral.lang.ranges import affine_form
from .polyhedral.lang.types import SCALAR_TYPES, ScalarType, common_type

__all__ = ["DEFAULT_MAX_POINTS", "evaluate", "evaluate_def"]

#: Points of an iteration space evaluated at once. A handful of live temporaries of 8 bytes per
#: point keeps the evaluator near 1 GiB.
DEFAULT_MAX_POINTS = 1 << 23

_INT64_MIN = -(1 << 63)


# ----------------------------------------------------------------------------------- representations
def _repr_dtype(t: ScalarType) -> torch.dtype:
    """The torch dtype values of TC type ``t`` are carried in during evaluation."""
    if t.is_half:
        return torch.float32
    return {"uint16": torch.int32, "uint32": torch.int64, "uint64": torch.int64}.get(t.name) or torch_dtype(t)


def _acc_dtype(t: ScalarType) -> torch.dtype:
    """Reductions accumulate floats in float64 and integers in int64 (wrapping)."""
    return torch.float64 if t.is_float else torch.int64


def _wrap(x: torch.Tensor, t: ScalarType) -> torch.Tensor:
    """Bring an integer value carried wider back into the range of ``t`` (two's-complement wrap)."""
    if t.name == "uint16":
        return x & 0xFFFF
    if t.name == "uint32":
        return x & 0xFFFFFFFF
    if t.kind == "bool":
        return x != 0
    return x


def _is_u64(t: ScalarType) -> bool:
    return t.name == "uint64"


def _u64_key(x: torch.Tensor) -> torch.Tensor:
    """An int64 whose signed order is the unsigned order of the uint64 bit pattern ``x``."""
    return x ^ _INT64_MIN


def convert(x: torch.Tensor, src: ScalarType, dst: ScalarType) -> torch.Tensor:
    """Convert a carried value of type ``src`` to type ``dst`` with C's conversion rules."""
    if src == dst:
        return x.to(_repr_dtype(dst)) if x.dtype != _repr_dtype(dst) else x
    if dst.kind == "bool":
        return x != 0
    if dst.is_float:
        if _is_u64(src):
            y = x.to(torch.float64) + (x < 0).to(torch.float64) * 2.0**64
        else:
            y = x.to(torch.float64) if x.dtype == torch.int64 else x
        if dst.is_half:
            return y.to(torch_dtype(dst)).to(torch.float32)
        return y.to(_repr_dtype(dst))
    # to an integer type
    if src.is_float:
        x = torch.trunc(x.to(torch.float64))
        if _is_u64(dst):
            big = x >= 2.0**63
            x = torch.where(big, x - 2.0**64, x)
        x = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
        x = x.clamp(-(2.0**63), 2.0**63 - 1024).to(torch.int64)
    else:
        x = x.to(torch.int64)
    if dst.name in ("uint16", "uint32"):
        return _wrap(x, dst).to(_repr_dtype(dst))
    if _is_u64(dst):
        return x
    return x.to(torch_dtype(dst))  # int64 -> narrower keeps the low bits: wraps


def _load(t: torch.Tensor, dtype: ScalarType) -> torch.Tensor:
    """A user tensor in its carried representation."""
    if _is_u64(dtype):
        return t.contiguous().view(torch.int64)
    return t.to(_repr_dtype(dtype))


def _store(x: torch.Tensor, dtype: ScalarType) -> torch.Tensor:
    """A carried tensor back in the dtype the user sees."""
    if _is_u64(dtype):
        return x.contiguous().view(torch.uint64)
    return x.to(torch_dtype(dtype))


# ---------------------------------------------------------------------------------------- evaluation
@dataclass
class _Chunk:
    """One box of a statement's iteration space: a broadcastable grid per index variable."""

    grids: dict[str, torch.Tensor]
    shape: tuple[int, ...]


class _Evaluator:
    def __init__(self, cdef: CheckedDef, sizes, scalars, work: dict[str, torch.Tensor], device):
        self.cdef = cdef
        self.sizes = sizes
        self.scalars = scalars
        self.work = work  # carried representation of every tensor
        self.device = device

    def const(self, value, t: ScalarType) -> torch.Tensor:
        if _is_u64(t) and isinstance(value, int) and value >= 1 << 63:
            value -= 1 << 64
        if t.kind == "uint" and not _is_u64(t) and isinstance(value, int):
            value &= (1 << t.bits) - 1
        return torch.tensor(value, dtype=_repr_dtype(t), device=self.device)

    # ------------------------------------------------------------------------------------ values
    def value(self, e: A.Expr, ch: _Chunk, active: torch.Tensor | None) -> torch.Tensor:
        """``e`` evaluated at the points of ``ch``, carried as ``e.dtype``; only ``active`` points matter."""
        t = e.dtype
        if isinstance(e, A.IntLit):
            return self.const(e.value, t) if t.is_integral else self.const(float(e.value), t)
        if isinstance(e, A.FloatLit):
            return self.const(e.value, t)
        if isinstance(e, A.Ident):
            if e.kind == "index":
                return convert(ch.grids[e.name], SCALAR_TYPES["int64"], t)
            if e.kind == "size":
                return (
                    self.const(self.sizes[e.name], t)
                    if t.is_integral
                    else self.const(float(self.sizes[e.name]), t)
                )
            src = self.cdef.scalars[e.name].dtype
            return convert(self.const(self.scalars[e.name], src), src, t)
        if isinstance(e, A.DimSize):
            n = self.cdef.tensor(e.tensor).shape[e.dim].evaluate(self.sizes)
            return self.const(n, t) if t.is_integral else self.const(float(n), t)
        if isinstance(e, A.Access):
            return self.gather(e, ch, active)
        if isinstance(e, A.Cast):
            return convert(self.value(e.arg, ch, active), e.arg.dtype, t)
        if isinstance(e, A.Unary):
            x = self.value(e.arg, ch, active)
            if e.op == "!":
                return torch.logical_not(x)
            x = convert(x, e.arg.dtype, t)
            if t.is_float:
                return -x
            return _wrap(torch.zeros_like(x) - x, t)
        if isinstance(e, A.Binary):
            return self.binary(e, ch, active)
        if isinstance(e, A.Select):
            c = self.value(e.cond, ch, active)
            a_act = c if active is None else active & c
            b_act = ~c if active is None else active & ~c
            a = convert(self.value(e.then, ch, a_act), e.then.dtype, t)
            b = convert(self.value(e.other, ch, b_act), e.other.dtype, t)
            return torch.where(c, a, b)
        if isinstance(e, A.Call):
            args = [convert(self.value(a, ch, active), a.dtype, t) for a in e.args]
            if e.func in LANGUAGE_FUNCTIONS:
                return self.minmax(e.func, args[0], args[1], t)
            from . import refmath  # the builtins' torch implementations

            return refmath.apply(e.func, *args)
        raise AssertionError(f"cannot evaluate {e!r}")

    def minmax(self, op: str, a: torch.Tensor, b: torch.Tensor, t: ScalarType) -> torch.Tensor:
        if t.is_float:
            return torch.fmin(a, b) if op == "min" else torch.fmax(a, b)
        if _is_u64(t):
            ka, kb = _u64_key(a), _u64_key(b)
            return _u64_key(torch.minimum(ka, kb) if op == "min" else torch.maximum(ka, kb))
        return torch.minimum(a, b) if op == "min" else torch.maximum(a, b)

    def binary(self, e: A.Binary, ch: _Chunk, active) -> torch.Tensor:
        op = e.op
        if op in ("&&", "||"):
            l = self.value(e.lhs, ch, active)
            sub = l if op == "&&" else ~l
            r = self.value(e.rhs, ch, sub if active is None else active & sub)
            return (l & r) if op == "&&" else (l | r)
        if op in ("==", "!=", "<", "<=", ">", ">="):
            lt, rt = e.lhs.dtype, e.rhs.dtype
            t = lt if lt == rt else common_type(lt, rt)
            l = convert(self.value(e.lhs, ch, active), lt, t)
            r = convert(self.value(e.rhs, ch, active), rt, t)
            if _is_u64(t):
                l, r = _u64_key(l), _u64_key(r)
            return {
                "==": torch.eq,
                "!=": torch.ne,
                "<": torch.lt,
                "<=": torch.le,
                ">": torch.gt,
                ">=": torch.ge,
            }[op](l, r)
        t = e.dtype
        l = convert(self.value(e.lhs, ch, active), e.lhs.dtype, t)
        r = convert(self.value(e.rhs, ch, active), e.rhs.dtype, t)
        if op == "+":
            return _wrap(l + r, t) if t.is_integral else l + r
        if op == "-":
            return _wrap(l - r, t) if t.is_integral else l - r
        if op == "*":
            return _wrap(l * r, t) if t.is_integral else l * r
        if t.is_float:
            return l / r  # '%' on floats is rejected by the checker
        return _int_divmod(op, l, r, t)

    # ----------------------------------------------------------------------------------- indices
    def index(self, e: A.Expr, ch: _Chunk, active) -> torch.Tensor:
        """A subscript as int64, with index semantics: ``/`` and ``%`` floor."""
        if isinstance(e, A.IntLit):
            return torch.tensor(e.value, dtype=torch.int64, device=self.device)
        if isinstance(e, A.Ident) and e.kind == "index":
            return ch.grids[e.name]
        if isinstance(e, A.Unary) and e.op == "-":
            return -self.index(e.arg, ch, active)
        if isinstance(e, A.Binary) and e.op in ("+", "-", "*", "/", "%") and e.dtype.is_integral:
            l, r = self.index(e.lhs, ch, active), self.index(e.rhs, ch, active)
            if e.op == "+":
                return l + r
            if e.op == "-":
                return l - r
            if e.op == "*":
                return l * r
            safe = torch.where(r == 0, torch.ones_like(r), r)
            q = torch.div(l, safe, rounding_mode="floor") if e.op == "/" else torch.remainder(l, safe)
            return torch.where(r == 0, torch.zeros_like(q), q)
        v = self.value(e, ch, active)
        if _is_u64(e.dtype):
            return v  # bit pattern; values >= 2**63 are out of bounds anyway (negative)
        return v.to(torch.int64)

    def gather(self, e: A.Access, ch: _Chunk, active) -> torch.Tensor:
        src = self.work[e.tensor]
        if not e.args:
            return src
        idx = [self.index(a, ch, active) for a in e.args]
        idx = self.checked(idx, src.shape, e, active, "reads")
        return src[tuple(idx)]

    def checked(self, idx, shape, node, active, verb: str, span=None) -> list[torch.Tensor]:
        """Bounds-check subscripts at the active points; inactive points are redirected to 0.
        Errors point at ``span``, by default ``node``'s."""
        out = []
        for k, (ix, n) in enumerate(zip(idx, shape)):
            bad = (ix < 0) | (ix >= n)
            if active is not None:
                bad = bad & active
            if bool(bad.any()):
                value = int(ix.expand(bad.shape)[bad][0]) if bad.dim() else int(ix)
                raise TCBoundsError(
                    f"subscript {k} of '{getattr(node, 'tensor', '?')}' {verb} element {value}, outside "
                    f"[0, {n}) (dimension {k} has size {n})",
                    source=self.cdef.source,
                    span=span or node.span,
                    where=self.cdef.name,
                )
            if active is not None:
                ix = torch.where(active, ix, torch.zeros_like(ix))
            out.append(ix)
        return out


def _int_divmod(op: str, l: torch.Tensor, r: torch.Tensor, t: ScalarType) -> torch.Tensor:
    """C integer ``/`` and ``%``: truncation; by zero gives 0; ``MIN / -1`` wraps."""
    l, r = torch.broadcast_tensors(l, r)
    if _is_u64(t):  # unsigned 64-bit: no wider signed type, use numpy's uint64
        import numpy as np

        ln = l.cpu().numpy().view(np.uint64)
        rn = r.cpu().numpy().view(np.uint64)
        safe = np.where(rn == 0, np.uint64(1), rn)
        q = (ln // safe) if op == "/" else (ln % safe)
        q = np.where(rn == 0, np.uint64(0), q)
        return torch.from_numpy(np.ascontiguousarray(q).view(np.int64)).to(l.device)
    zero = r == 0
    minus_one = r == -1 if t.is_signed else torch.zeros_like(zero)
    safe = torch.where(zero | minus_one, torch.ones_like(r), r)
    if op == "/":
        q = torch.div(l, safe, rounding_mode="trunc")
        q = torch.where(minus_one, _wrap(torch.zeros_like(l) - l, t), q)  # x / -1 = -x, wrapping
    else:
        q = torch.fmod(l, safe)
        q = torch.where(minus_one, torch.zeros_like(q), q)
    return torch.where(zero, torch.zeros_like(q), q)


# ----------------------------------------------------------------------------------------- statements
def _identity(op: str, t: ScalarType):
    if op == "+=":
        return 0
    if op == "*=":
        return 1
    if t.is_float:
        return math.inf if op == "min=" else -math.inf
    if _is_u64(t):
        return -1 if op == "min=" else 0  # bit patterns of 2**64 - 1 and 0
    return t.max_value if op == "min=" else t.min_value


def _boxes(extents: Sequence[int], max_points: int):
    """Cut a box of ``extents`` into sub-boxes of at most ``max_points`` points (outer dims first)."""
    chunk = [1] * len(extents)
    inner = 1
    for d in reversed(range(len(extents))):
        chunk[d] = max(1, min(extents[d], max_points // inner))
        inner *= chunk[d]
    starts = [range(0, n, c) for n, c in zip(extents, chunk)]
    for origin in itertools.product(*starts):
        yield tuple((o, min(o + c, n)) for o, c, n in zip(origin, chunk, extents))


def _run_statement(ev: _Evaluator, st: CheckedStatement, max_points: int) -> None:
    cdef, sizes, device = ev.cdef, ev.sizes, ev.device
    info = cdef.tensor(st.tensor)
    target = ev.work[st.tensor]
    bounds = [(r.lo.evaluate(sizes), r.hi.evaluate(sizes)) for r in st.ranges]
    names = st.vars
    n_lhs = len(st.lhs_vars)

    def chunk(box) -> _Chunk:
        grids = {}
        shape = tuple(b - a for a, b in box)
        for k, (name, (a, b)) in enumerate(zip(names, box)):
            view = [1] * len(box)
            view[k] = b - a
            lo = bounds[k][0]
            grids[name] = torch.arange(lo + a, lo + b, dtype=torch.int64, device=device).view(view)
        return _Chunk(grids, shape)

    def mask(ch: _Chunk, conditions) -> torch.Tensor | None:
        m = None
        for c in conditions:
            v = ev.value(c, ch, m)
            m = v if m is None else m & v
        return None if m is None else m.expand(ch.shape) if ch.shape else m

    def lhs_index(ch: _Chunk, active):
        idx = [ev.index(e, ch, active) for e in st.lhs]
        return ev.checked(idx, target.shape, st.source, active, "writes", span=st.source.lhs_span)

    # A gathered (data-dependent) subscript on the left-hand side may reach any element.
    gathered = any(
        affine_form(e, set(names), lambda n: n in cdef.sizes, lambda t, k: cdef.tensor(t).shape[k]) is None
        for e in st.lhs
    )

    extents = [max(0, b - a) for a, b in bounds]

    if st.init and st.is_reduction:
        # `!`: the identity at every element the left-hand side denotes. For a plain left-hand side
        # that is its variables' box (under the conditions on them alone), so an element whose
        # reduction is empty still gets the identity; an affine one denotes what it reaches, a
        # gathered one the whole tensor.
        ident = ev.const(_identity(st.op, info.dtype), info.dtype)
        if gathered:
            target.fill_(ident)
        init_dims, init_conditions = (
            (n_lhs, st.lhs_conditions) if st.plain_lhs else (len(names), st.conditions)
        )
        for box in _boxes(extents[:init_dims], max_points) if not gathered else ():
            ch = chunk(box)
            active = mask(ch, init_conditions)
            idx = lhs_index(ch, active)
            if st.lhs:
                full = [ix.expand(ch.shape) for ix in idx]
                if active is not None:
                    full = [ix[active] for ix in full]
                target.index_put_(tuple(full), ident)
            else:
                target.fill_(ident)

    if not st.is_reduction:
        for box in _boxes(extents, max_points):
            ch = chunk(box)
            active = mask(ch, st.conditions)
            val = convert(ev.value(st.rhs, ch, active), st.value_type, info.dtype)
            idx = lhs_index(ch, active)
            if not st.lhs:
                target.copy_(val.reshape(()))
                continue
            full = [ix.expand(ch.shape) for ix in idx]
            val = val.expand(ch.shape)
            if active is not None:
                full, val = [ix[active] for ix in full], val[active]
            target.index_put_(tuple(full), val.to(target.dtype))
        return

    u64_order = _is_u64(info.dtype) and st.op in ("min=", "max=")
    acc = target.to(_acc_dtype(info.dtype))
    if u64_order:
        acc = _u64_key(acc)
    ident = _identity(st.op, info.dtype)
    if u64_order:
        ident = (1 << 63) - 1 if st.op == "min=" else _INT64_MIN
    # fmin/fmax semantics: NaN contributions are ignored; an element with no valid contribution
    # keeps its value (even NaN), which is what folding fmax over the sequence does.
    nan_ignored = info.dtype.is_float and st.op in ("min=", "max=")
    red_axes = tuple(range(n_lhs, len(names)))
    for box in _boxes(extents, max_points):
        ch = chunk(box)
        active = mask(ch, st.conditions)
        val = convert(ev.value(st.rhs, ch, active), st.value_type, info.dtype).to(acc.dtype)
        if u64_order:
            val = _u64_key(val)
        val = val.expand(ch.shape) if ch.shape else val
        valid = active
        if nan_ignored:
            valid = ~torch.isnan(val) if valid is None else valid & ~torch.isnan(val)
        if valid is not None:
            val = torch.where(valid, val, torch.full_like(val, ident))
        lhs_box = [(bounds[k][0] + a, bounds[k][0] + b) for k, (a, b) in enumerate(box[:n_lhs])]
        inside = all(0 <= a and b <= n for (a, b), n in zip(lhs_box, target.shape))
        if st.plain_lhs and inside:
            # The subscripts are the left-hand side variables themselves, in order: a region update.
            part = _reduce(st.op, val, red_axes) if red_axes else val
            if nan_ignored and valid is not None:
                any_valid = valid.any(dim=red_axes) if red_axes else valid
                part = torch.where(any_valid, part, torch.full_like(part, math.nan))
            region = tuple(slice(a, b) for a, b in lhs_box)
            acc[region] = _combine(st.op, acc[region], part)
            continue
        idx = lhs_index(ch, active)
        full = [ix.expand(ch.shape) for ix in idx]
        if valid is not None:
            full, val = [ix[valid] for ix in full], val[valid]
        else:
            full, val = [ix.reshape(-1) for ix in full], val.reshape(-1)
        if not st.lhs:
            if val.numel():
                acc = _combine(st.op, acc, _reduce(st.op, val, (0,)))
            continue
        flat = torch.zeros_like(full[0])
        for ix, n in zip(full, target.shape):
            flat = flat * n + ix
        red = {"+=": "sum", "*=": "prod", "min=": "amin", "max=": "amax"}[st.op]
        if nan_ignored:  # fmax(NaN, x) is x: a NaN element that gets a contribution takes it
            hit = torch.zeros(acc.numel(), dtype=torch.bool, device=acc.device)
            hit[flat] = True
            flat_acc = acc.view(-1)
            flat_acc[hit & torch.isnan(flat_acc)] = ident
        acc.view(-1).scatter_reduce_(0, flat, val, reduce=red, include_self=True)
    if u64_order:
        acc = _u64_key(acc)
    target.copy_(_from_acc(acc, info.dtype))


def _reduce(op: str, val: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
    if op == "+=":
        return val.sum(dim=axes)
    if op == "*=":
        out = val
        for ax in sorted(axes, reverse=True):
            out = out.prod(dim=ax)
        return out
    return val.amin(dim=axes) if op == "min=" else val.amax(dim=axes)


def _combine(op: str, acc: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
    if op == "+=":
        return acc + part
    if op == "*=":
        return acc * part
    if acc.is_floating_point():
        return torch.fmin(acc, part) if op == "min=" else torch.fmax(acc, part)
    return torch.minimum(acc, part) if op == "min=" else torch.maximum(acc, part)


def _from_acc(acc: torch.Tensor, t: ScalarType) -> torch.Tensor:
    if t.is_float:
        return acc.to(torch_dtype(t)).to(_repr_dtype(t)) if t.is_half else acc.to(_repr_dtype(t))
    if t.kind == "bool":
        return acc != 0
    if _is_u64(t):
        return acc
    return _wrap(acc, t).to(_repr_dtype(t))


# ------------------------------------------------------------------------------------------------ API
def evaluate_def(
    cdef: CheckedDef,
    *inputs,
    outputs: Sequence[torch.Tensor] | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
) -> tuple[torch.Tensor, ...]:
    """Evaluate a checked definition; returns every output, in order (always a tuple)."""
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    b = bind(cdef, inputs, outputs)
    for name, t in b.tensors.items():
        if t.device.type == "meta":
            raise TCCallError(
                f"input '{name}' is a meta tensor: it has a shape but no data to compute with",
                source=cdef.source,
                span=cdef.param(name).span,
                where=cdef.name,
                hint="use Kernel.output_shapes() for shapes alone",
            )
    work: dict[str, torch.Tensor] = {}
    for name, t in b.tensors.items():
        work[name] = _load(t, cdef.tensor(name).dtype)
    given = dict(zip(cdef.outputs, outputs)) if outputs is not None else {}
    for name, shape in b.output_shapes.items():
        info = cdef.tensor(name)
        if name in given:
            work[name] = _load(given[name], info.dtype).clone()
        else:
            work[name] = torch.zeros(shape, dtype=_repr_dtype(info.dtype), device=b.device)
    ev = _Evaluator(cdef, b.sizes, b.scalars, work, b.device)
    with torch.no_grad():
        for st in cdef.statements:
            _run_statement(ev, st, max_points)
    results = []
    for name in cdef.outputs:
        out = _store(work[name], cdef.tensor(name).dtype)
        if name in given:
            given[name].copy_(out)
            out = given[name]
        results.append(out)
    return tuple(results)


def evaluate(
    program: str | CheckedProgram,
    entry: str | None = None,
    *inputs,
    outputs: Sequence[torch.Tensor] | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
):
    """Compute the outputs of ``entry`` of a TC program on ``inputs``, with torch; the oracle.

    :arg program: TC source text or an already checked program.
    :arg entry: the definition to run; may be ``None`` when the source has exactly one.
    :arg inputs: torch tensors in the order of the parameters (rank-0 arguments may be numbers).
    :arg outputs: optional output tensors; accumulations without ``!`` start from their contents,
        and they are returned (filled) instead of new tensors.
    :arg max_points: the most iteration points evaluated at once (bounds memory).
    :returns: the output tensor, or a tuple of them when the entry has several.

    >>> import torch
    >>> evaluate("def f(float(N) A) -> (B) { B(i) = 2 * A(i) }", "f", torch.ones(3))
    tensor([2., 2., 2.])
    """
    cp = check_source(program) if isinstance(program, str) else program
    cdef = cp.entry(entry)
    outs = evaluate_def(cdef, *inputs, outputs=outputs, max_points=max_points)
    return outs[0] if len(outs) == 1 else outs
