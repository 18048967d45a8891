"""The GPU mapping's own statements and marks as IR nodes (:func:`tcjit.mapping.gpu_nodes.explicit`),
on hand-built launch IR: what each becomes, that nothing else changes, and that barrier fission
(:func:`tcjit.mapping.fission.fission`) and the ``ir`` stage's text keep them."""

from __future__ import annotations

import pytest

from tcjit.mapping import ir
from tcjit.mapping.fission import fission
from tcjit.mapping.gpu_ir import (
    THREAD0_MARK,
    BlockReduction,
    Copy,
    CopyElement,
    FirstThread,
    ReductionStep,
    WarpSteps,
)
from tcjit.mapping.gpu_nodes import explicit
from tcjit.mapping.ir_text import render
from tcjit.polyhedral.errors import TCInternalError

COPY = Copy("tc_copy_in_shared_A", "tc_shared_A", "A", False, 1, (ir.Var("s0"),), (1,))
RED = BlockReduction(
    0,
    "S0",
    "O",
    "+=",
    ir.Buffer("tc_private_red0", "O", "private", (1,)),
    ir.Buffer("p", "O", "shared", (1, 1, 32)),
)
REDUCTIONS = {name: RED for name in (RED.update, RED.warp, *RED.statements())}


def _run(name: str, *args: int) -> ir.Run:
    return ir.Run(name, tuple(ir.Int(a) for a in args))


def _sync() -> ir.Mark:
    return ir.Mark(ir.SYNC_MARK, ir.Block(()))


def _launch() -> ir.Node:
    loop = ir.For(
        "c0", ir.Int(0), ir.Op("<", (ir.Var("c0"), ir.Int(4))), 1, _run("tc_copy_in_shared_A", 0, 1)
    )
    steps = ir.Block((_run(RED.step, 2), _sync(), _run(RED.step, 1), _sync()))
    return ir.Block(
        (
            loop,
            _sync(),
            _run(RED.init),
            _run("S0", 1, 2),
            _run(RED.store),
            _sync(),
            ir.Mark(RED.warp, steps),
            ir.Mark(THREAD0_MARK, _run(RED.combine, 0, 0, 0, 3)),
            _run("S1", 5),
        )
    )


def test_the_mappings_statements_and_marks_become_nodes_and_nothing_else_changes() -> None:
    out = explicit(_launch(), {COPY.statement: COPY}, REDUCTIONS)
    loop, sync, init, update, store, sync2, warp, first, other = out.children
    assert loop.body == CopyElement(COPY, (ir.Int(0), ir.Int(1)))
    assert (sync, sync2) == (_sync(), _sync())
    assert init == ReductionStep(RED, "init", ()) and store == ReductionStep(RED, "store", ())
    assert (update, other) == (_run("S0", 1, 2), _run("S1", 5))  # the TC statements stay instances
    assert isinstance(warp, WarpSteps) and warp.reduction == RED
    assert [n.role for n in warp.body.children if isinstance(n, ReductionStep)] == ["step", "step"]
    assert warp.body.children[0].args == (ir.Int(2),)
    assert first == FirstThread(ReductionStep(RED, "combine", tuple(ir.Int(a) for a in (0, 0, 0, 3))))
    assert not [n for n in ir.nodes(out) if isinstance(n, ir.Run) and n.statement.startswith("tc_")]


def test_a_tree_left_unexpanded_is_an_internal_error() -> None:
    with pytest.raises(TCInternalError, match="tc_red_tree_0"):
        explicit(_run(RED.tree), {}, REDUCTIONS)


def test_fission_and_the_ir_text_keep_the_nodes() -> None:
    out = explicit(_launch(), {COPY.statement: COPY}, REDUCTIONS)
    split = fission(out, (32, 1, 1))
    kinds = [type(n).__name__ for n in ir.nodes(split)]
    assert kinds.count("WarpSteps") == 1 and kinds.count("FirstThread") == 1
    assert kinds.count("CopyElement") == 1 and kinds.count("ReductionStep") == 5
    text = render(out)
    assert "copy 'A' into tc_shared_A(0, 1)  # tc_copy_in_shared_A" in text
    assert "last warp's steps of block reduction 0" in text and "block reduction 0 into 'O': step(2)" in text
    assert "thread (0, 0, 0) of each block alone:" in text
