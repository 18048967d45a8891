"""Vector groups: a thread's loads and stores of consecutive elements as single wide accesses.

With ``vector_width`` V > 1 the thread mapping gives each thread V consecutive iterations of the
member on ``threadIdx.x`` (:meth:`~.gpu_threads.ThreadMapping.map_threads`), in a loop of its own
below everything else (the *group loop*). Where that loop runs one statement instance from ``0``
to ``V - 1``, :func:`vector_group` decides whether it is a group, from the affine forms of the
element offsets in the loop's variable ``v``:

* a reference is a **vector access** where its element offset is ``base + v`` (coefficient 1)
  and ``base`` is a multiple of V for every value of the other variables (every coefficient and
  the constant are): the group's elements are consecutive and its first is V-aligned relative to
  the tensor's start;
* the statement's reads of the tensor it writes are of the element it writes, and the write is a
  vector access (then the group reads the V elements first and writes them last), or the
  statement reads no tensor it writes (then the reads alone are grouped): no instance of the
  group reads what another writes, so reading before and writing after the loop keeps its
  meaning.

:func:`mark_groups` replaces each such loop of a launch's kernel IR by a
:class:`~.gpu_ir.VectorGroup` node, which the printers print
(:meth:`~.gpu_printer.GpuPrinter.vector_group`): a test, once per group, that each grouped tensor's
array starts on a multiple of the group's bytes (``V * sizeof(element)``, at most 16); each vector
access read as one value (the CUDA printer: CUDA's built-in type of that size, ``ld.global.v4``
for float32 and V = 4), the V instances unrolled on the values' elements, the written value
stored as one; otherwise (a view that starts mid-vector) the loop as it is. The emulated target
prints the same group with element-by-element copies (race-checked), so that the group's
addresses and its unrolling are tested on every CI machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from . import ir
from . import ir_values as V
from .gpu_ir import WRITTEN, FirstThread, VectorGroup, WarpSteps

__all__ = ["linear", "mark_groups", "vector_group"]

Linear = dict[str, int]  # variable -> coefficient, "" -> the constant; no zeros


def linear(e: ir.Expr) -> Linear | None:
    """The affine form of an IR expression (``+``, ``-``, negation, products with a constant), or
    None where it is not affine (divisions, ``min``, ``max``, conditions)."""
    if isinstance(e, ir.Int):
        return {"": e.value}
    if isinstance(e, ir.Var):
        return {e.name: 1}
    if isinstance(e, ir.Op):
        args = [linear(a) for a in e.args]
        if any(a is None for a in args):
            return None
        if e.op == "+" and len(args) == 2:
            return _add(args[0], args[1], 1)
        if e.op == "-" and len(args) == 2:
            return _add(args[0], args[1], -1)
        if e.op == "neg" and len(args) == 1:
            return _scale(args[0], -1)
        if e.op == "*" and len(args) == 2:
            return _product(args[0], args[1])
    return None


def _add(a: Linear, b: Linear, sign: int) -> Linear:
    out = dict(a)
    for k, c in b.items():
        out[k] = out.get(k, 0) + sign * c
    return {k: c for k, c in out.items() if c}


def _scale(a: Linear, factor: int) -> Linear:
    return {k: c * factor for k, c in a.items() if c * factor}


def _product(a: Linear, b: Linear) -> Linear | None:
    if set(a) <= {""}:
        return _scale(b, a.get("", 0))
    if set(b) <= {""}:
        return _scale(a, b.get("", 0))
    return None


def _subscript(s: V.Subscript, dims: Mapping[str, Linear | None]) -> Linear | None:
    """The affine form of a subscript in the loop variables, its index variables replaced by
    ``dims`` (their forms); None where it is not affine."""
    if isinstance(s, V.SubConst):
        return {"": s.value}
    if isinstance(s, V.SubVar):
        return dims.get(s.name)
    if isinstance(s, V.SubNeg):
        a = _subscript(s.arg, dims)
        return None if a is None else _scale(a, -1)
    if isinstance(s, V.SubArith) and s.op in ("+", "-", "*"):
        lhs, rhs = _subscript(s.lhs, dims), _subscript(s.rhs, dims)
        if lhs is None or rhs is None:
            return None
        return _product(lhs, rhs) if s.op == "*" else _add(lhs, rhs, 1 if s.op == "+" else -1)
    return None


def offset(ref: V.Ref, dims: Mapping[str, Linear | None], strides) -> Linear | None:
    """The affine form of the element offset ``ref`` names (``strides``: its array's), or None."""
    total: Linear = {"": 0}
    for sub, stride in zip(ref.subscripts, strides):
        form = _subscript(sub, dims)
        if form is None:
            return None
        total = _add(total, _scale(form, stride), 1)
    return total


def _group_loop(loop: ir.For, width: int) -> ir.Run | None:
    """The statement instance a loop ``for (v = 0; v <= width - 1; v += 1)`` runs alone."""
    if loop.degenerate or loop.kinds or loop.step != 1 or loop.init != ir.Int(0):
        return None
    if loop.cond != ir.Op("<=", (ir.Var(loop.var), ir.Int(width - 1))):
        return None
    body = loop.body
    while isinstance(body, ir.Block) and len(body.children) == 1:
        body = body.children[0]
    return body if isinstance(body, ir.Run) else None


def vector_group(
    loop: ir.For, width: int, body: V.Body, strides: Mapping[str, tuple[int, ...]], wide: Mapping
) -> VectorGroup | None:
    """The group ``loop`` makes with ``width`` iterations over ``body`` (the statement it runs;
    ``strides``: each tensor's array's; ``wide``: the tensors held in a wide buffer, left alone),
    or None where it makes none."""
    run = _group_loop(loop, width)
    if run is None or run.statement != body.statement:
        return None
    dims = {d: linear(a) for d, a in zip(body.dims, run.args)}
    v = loop.var

    def form(ref: V.Ref) -> tuple | None:
        """The element offset as a hashable form, where the reference is a vector access."""
        if ref.tensor in wide or any(ref.checked) or ref.tensor not in strides:
            return None
        f = offset(ref, dims, strides[ref.tensor])
        if f is None or f.get(v, 0) != 1 or any(c % width for k, c in f.items() if k != v):
            return None
        return (ref.tensor, tuple(sorted(f.items())))

    target = body.target if isinstance(body.target, V.Ref) else None
    written = form(target) if target is not None else None
    reads = [load.ref for load in V.loads(body.value) if isinstance(load.ref, V.Ref)]
    loads: dict[tuple, tuple[str, V.Ref]] = {}
    if written is not None and body.kind == "update":
        loads[written] = (WRITTEN, target)
    names: dict[V.Ref, str] = {}
    for ref in reads:
        f = form(ref)
        if ref.tensor == body.tensor and (f is None or f != written):
            return None  # it reads what the group writes, elsewhere: the loop as it is
        if f is None:
            continue
        if f not in loads:
            loads[f] = (WRITTEN if f == written else f"tc_vr{len(loads)}", ref)
        names[ref] = loads[f][0]
    if written is None and not names:
        return None
    return VectorGroup(loop, run, width, tuple(loads.values()), names, target if written else None)


def mark_groups(
    node: ir.Node | None,
    width: int,
    bodies: Mapping[str, V.Body],
    strides: Mapping[str, tuple[int, ...]],
    wide: Mapping,
) -> ir.Node | None:
    """``node`` (a launch's kernel IR, or the emulation's of every launch) with each loop that
    makes a group with ``width`` iterations (:func:`vector_group`) replaced by its
    :class:`~.gpu_ir.VectorGroup`; unchanged for ``width`` 1."""
    if width < 2:
        return node

    def visit(n):
        if isinstance(n, ir.For):
            run = _group_loop(n, width)
            if run is not None and run.statement in bodies:
                group = vector_group(n, width, bodies[run.statement], strides, wide)
                if group is not None:
                    return group
            return ir.For(n.var, n.init, n.cond, n.step, visit(n.body), n.kinds, n.degenerate)
        if isinstance(n, ir.Block):
            return ir.Block(tuple(visit(c) for c in n.children))
        if isinstance(n, ir.If):
            return ir.If(n.cond, visit(n.then), visit(n.other) if n.other is not None else None)
        if isinstance(n, (ir.Mark, WarpSteps, FirstThread, ir.Blocks, ir.Threads)):
            return dataclasses.replace(n, body=visit(n.body))
        return n  # statements, copies, reduction steps: nothing below to group

    return visit(node)
