"""The kernel IR as text: ``tcjit show --stage ir`` and the ``ir`` stage of every lowering."""

from __future__ import annotations

from ..polyhedral.errors import TCInternalError
from . import ir
from .gpu_ir import CopyElement, FirstThread, ReductionStep, VectorGroup, WarpSteps

__all__ = ["render", "render_expr"]

_INFIX = {"+", "-", "*", "<", "<=", ">", ">=", "==", "&&", "||"}


def render_expr(e: ir.Expr) -> str:
    """``e`` as text: infix operators parenthesised, the others as calls (``floordiv(i, 4)``)."""
    if isinstance(e, ir.Int):
        return str(e.value)
    if isinstance(e, ir.Var):
        return e.name
    args = [render_expr(a) for a in e.args]
    if e.op in _INFIX and len(args) == 2:
        return f"({args[0]} {e.op} {args[1]})"
    if e.op == "neg":
        return f"-{args[0]}"
    if e.op == "select":
        return f"({args[0]} ? {args[1]} : {args[2]})"
    return f"{e.op}({', '.join(args)})"


def render(node: ir.Node | None, indent: str = "") -> str:
    """Kernel IR ``node`` as indented text, one statement per line (``tcjit show --stage ir``):
    loops with their kind, conditions, marks, statement instances with their arguments, and the
    emulated target's launches, blocks and threads with their buffers."""
    lines: list[str] = []

    def visit(n: ir.Node | None, pad: str) -> None:
        if n is None:
            return
        if isinstance(n, ir.Block):
            for c in n.children:
                visit(c, pad)
        elif isinstance(n, ir.For):
            if n.degenerate:
                lines.append(f"{pad}let {n.var} = {render_expr(n.init)}  # {n.kind_text}, one iteration")
            else:
                head = f"for {n.var} = {render_expr(n.init)}; {render_expr(n.cond)}; {n.var} += {n.step}"
                lines.append(f"{pad}{head}  # {n.kind_text}")
            visit(n.body, pad + "  ")
        elif isinstance(n, ir.If):
            lines.append(f"{pad}if {render_expr(n.cond)}:")
            visit(n.then, pad + "  ")
            if n.other is not None:
                lines.append(f"{pad}else:")
                visit(n.other, pad + "  ")
        elif isinstance(n, ir.Run):
            lines.append(f"{pad}{n.statement}({', '.join(render_expr(a) for a in n.args)})")
        elif isinstance(n, ir.PartFill):
            origin = ", ".join(render_expr(o) for o in n.site.origin)
            ahead = " (the next one fetched ahead)" if n.site.ahead else ""
            lines.append(f"{pad}fill the part of {n.site.tensor!r} from ({origin}){ahead}, then:")
            visit(n.body, pad + "  ")
        elif isinstance(n, ir.Mark):
            lines.append(f"{pad}mark {n.name!r}:")
            visit(n.body, pad + "  ")
        elif isinstance(n, ir.Blocks):
            lines.append(f"{pad}blocks of grid {n.grid}, {n.block} threads each:")
            for b in n.buffers:
                lines.append(
                    f"{pad}  {b.space} {b.name}{''.join(f'[{d}]' for d in b.shape)}  # of {b.tensor}"
                )
            visit(n.body, pad + "  ")
        elif isinstance(n, ir.Threads):
            lines.append(f"{pad}threads {n.block}:")
            visit(n.body, pad + "  ")
        elif isinstance(n, ir.Team):
            lines.append(f"{pad}team of threads:")
            for m in n.members:
                how = "one thread"
                if m.shared:
                    how = "shared out, no barrier after it" if m.nowait else "shared out"
                lines.append(f"{pad}  member ({how}):")
                visit(m.body, pad + "    ")
        elif isinstance(n, ir.FullTiles):
            lines.append(f"{pad}if {' and '.join(render_expr(c) for c in n.conds)}:  # full tiles")
            visit(n.full, pad + "  ")
            lines.append(f"{pad}else:")
            visit(n.rolled, pad + "  ")
        elif isinstance(n, ir.RegisterTile):
            across = ", ".join([*(c.var for c in n.loops), *([n.vloop.var] if n.vloop else [])])
            lines.append(
                f"{pad}register tile {n.name} ({n.form}, {n.lanes} lanes) of {n.statement} across {across}:"
            )
            for p in n.points:
                lines.append(
                    f"{pad}  point {p.var} = {render_expr(p.init)}; {render_expr(p.cond)}  # {p.kind_text}"
                )
            if n.start == ():
                lines.append(f"{pad}  sums start from zero (each execution holds whole sums)")
            elif n.start is not None:
                where = " and ".join(f"{o} == {v}" for o, v in n.start)
                lines.append(f"{pad}  sums start from zero where {where}, else load")
            visit(n.compute if n.compute is not None else n.body, pad + "  ")
        elif isinstance(n, ir.ParallelReduction):
            chunks = " over chunks of the loop" if n.chunked else ""
            lines.append(
                f"{pad}parallel reduction of {n.first.statement}, {n.count} partial results{chunks}:"
            )
            visit(n.loop, pad + "  ")
        elif isinstance(n, ir.Accumulation):
            how = f"a vector reduction of {n.lanes} lanes" if n.vector else "a register"
            lines.append(f"{pad}accumulated in {how}:")
            visit(n.loop, pad + "  ")
        elif isinstance(n, ir.Fetching):
            for f in n.fetches:
                box = ", ".join(f"{lo}:{hi + 1}" for lo, hi in f.box)
                over = ", ".join(v for v, _, _ in f.loops)
                lines.append(f"{pad}fetch {f.tensor}[{box}] for later loops, over {over}")
            visit(n.body, pad)
        elif isinstance(n, CopyElement):
            c = n.copy
            what = (
                f"write back {c.tensor!r} from {c.buffer}"
                if c.write_back
                else f"copy {c.tensor!r} into {c.buffer}"
            )
            lines.append(f"{pad}{what}({', '.join(render_expr(a) for a in n.args)})  # {c.statement}")
        elif isinstance(n, ReductionStep):
            args = ", ".join(render_expr(a) for a in n.args)
            lines.append(
                f"{pad}block reduction {n.reduction.number} into {n.reduction.tensor!r}: {n.role}({args})"
            )
        elif isinstance(n, WarpSteps):
            lines.append(
                f"{pad}last warp's steps of block reduction {n.reduction.number} (shuffles where they fit):"
            )
            visit(n.body, pad + "  ")
        elif isinstance(n, VectorGroup):
            wide = sorted({ref.tensor for _, ref in n.loads} | ({n.write.tensor} if n.write else set()))
            lines.append(
                f"{pad}vector group of {n.width} ({', '.join(wide)} a wide access each, where aligned):"
            )
            visit(n.loop, pad + "  ")
        elif isinstance(n, FirstThread):
            lines.append(f"{pad}thread (0, 0, 0) of each block alone:")
            visit(n.body, pad + "  ")
        else:
            raise TCInternalError(f"no text for kernel IR node {type(n).__name__}")

    visit(node, indent)
    return "\n".join(lines)
