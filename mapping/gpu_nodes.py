"""The GPU mapping's own statements and marks as explicit kernel IR nodes (:mod:`.gpu_ir`).

The mapping adds statements to the schedule that are not TC statements (the copies into and out of
promoted buffers, a block reduction's identity, store, tree steps and combine) and marks (the steps
a warp may do with shuffles, the code thread 0 runs alone). isl's AST names them; :func:`explicit`
replaces each by a node that carries what it does (:class:`~.gpu_ir.CopyElement`,
:class:`~.gpu_ir.ReductionStep`, :class:`~.gpu_ir.WarpSteps`, :class:`~.gpu_ir.FirstThread`), so
that the printers print nodes and look nothing up by name. Every other node, and the order of
everything, is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..polyhedral.errors import TCInternalError
from . import ir
from .gpu_ir import THREAD0_MARK, BlockReduction, Copy, CopyElement, FirstThread, ReductionStep, WarpSteps

__all__ = ["explicit"]


def explicit(node: ir.Node | None, copies: Mapping[str, Copy], reductions: Mapping[str, BlockReduction]):
    """``node`` (one launch's IR: loops, conditions, blocks, marks and statement instances) with the
    mapping's statements and marks as nodes; ``copies`` by statement name, ``reductions`` by the
    name of each of their statements and marks."""
    roles = {
        getattr(red, role): (red, role)
        for red in reductions.values()
        for role in ("init", "store", "step", "combine")
    }
    warps = {red.warp: red for red in reductions.values()}

    def visit(n: ir.Node | None) -> ir.Node | None:
        if n is None:
            return None
        if isinstance(n, ir.Run):
            if n.statement in copies:
                return CopyElement(copies[n.statement], n.args)
            if n.statement in roles:
                red, role = roles[n.statement]
                return ReductionStep(red, role, n.args)
            red = reductions.get(n.statement)
            if red is not None and n.statement != red.update:
                raise TCInternalError(
                    f"statement {n.statement} of block reduction {red.number} left in the IR"
                )
            return n
        if isinstance(n, ir.Block):
            return ir.Block(tuple(visit(c) for c in n.children))
        if isinstance(n, ir.For):
            return ir.For(n.var, n.init, n.cond, n.step, visit(n.body), n.kinds, n.degenerate)
        if isinstance(n, ir.If):
            return ir.If(n.cond, visit(n.then), visit(n.other))
        if isinstance(n, ir.Mark):
            if n.name in warps:
                return WarpSteps(warps[n.name], visit(n.body))
            if n.name == THREAD0_MARK:
                return FirstThread(visit(n.body))
            return ir.Mark(n.name, visit(n.body))
        raise TCInternalError(f"unexpected {type(n).__name__} in a launch's IR")

    return visit(node)
