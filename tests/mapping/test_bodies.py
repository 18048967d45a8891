"""Statement bodies in the kernel IR (:mod:`tcjit.mapping.ir_values`): lowered once from the checked
TC statements by :func:`tcjit.mapping.bodies.lower_bodies`, and redirected to the GPU mapping's
buffers by :func:`tcjit.mapping.bodies.redirect`. The printers print these bodies; what they print
is checked by the replay (scripts/replay.py) and the tests against the oracle."""

from __future__ import annotations

from tcjit.mapping import ir
from tcjit.mapping import ir_values as V
from tcjit.mapping.bodies import access_numbers, lower_bodies, read_accesses, redirect
from tcjit.mapping.gpu_ir import BlockReduction, Promoted
from tcjit.polyhedral.lang import ast as A
from tcjit.polyhedral.lang.check import check_source
from tcjit.polyhedral.lang.types import SCALAR_TYPES
from tcjit.polyhedral.scop import build_scop

F32, F64, I32, I64 = (SCALAR_TYPES[t] for t in ("float32", "float64", "int32", "int64"))


def _bodies(src: str, sizes: dict, *, wide=None, checked=frozenset()):
    cdef = check_source(src).entry()
    statements = {s.name: s for s in build_scop(cdef, sizes).statements}
    return cdef, statements, lower_bodies(cdef, statements, sizes, wide or {}, checked)


def test_every_conversion_is_explicit_and_sizes_are_constants() -> None:
    _, _, bodies = _bodies("def f(float(N) A, int32(N) K) -> (O) { O(i) = A(i) * 2 + K(i) + N }", {"N": 5})
    (b,) = bodies.values()
    assert (b.kind, b.op, b.tensor, b.dims, b.lhs_vars, b.line) == ("assign", "=", "O", ("i",), ("i",), 1)
    assert b.value == V.Convert(V.Convert(b.rhs, F32, F32), F32, F32)
    outer = b.rhs
    assert isinstance(outer, V.Arith) and (outer.op, outer.dtype) == ("+", F32)
    assert outer.rhs == V.Convert(V.Literal(5.0, F32), F32, F32)  # the size N, at the call's value
    inner = outer.lhs.arg
    assert isinstance(inner, V.Arith) and inner.op == "+"
    a_times_2, k = inner.lhs.arg, inner.rhs
    assert a_times_2.rhs == V.Convert(V.Literal(2.0, F32), F32, F32)
    a = a_times_2.lhs.arg
    assert isinstance(a, V.Load) and a.dtype == F32 and a.ref.tensor == "A"
    assert a.ref.subscripts == (V.SubVar("i"),) and a.ref.checked == (False,) and not a.ref.writes
    assert isinstance(k, V.Convert) and (k.src, k.dst) == (I32, F32)  # the int32 element, converted
    assert isinstance(k.arg, V.Load) and k.arg.dtype == I32


def test_a_long_sum_is_held_wide_and_its_initialisation_has_no_value() -> None:
    _, _, bodies = _bodies(
        "def s(float(M,K) A) -> (O) { O(m) +=! A(m, r_k) }", {"M": 3, "K": 4}, wide={"O": F64}
    )
    init, update = bodies["S0_init"], bodies["S0"]
    assert (init.kind, init.rhs, init.value, init.op) == ("init", None, None, "+=")
    assert init.target.subscripts == (V.SubVar("m"),) and init.target.writes
    assert update.kind == "update" and update.value == V.Convert(V.Convert(update.rhs, F32, F32), F32, F64)


def test_accesses_are_numbered_in_pre_order_and_checked_subscripts_are_marked() -> None:
    src = "def g(float(N) A, int64(N) I, float(N) B) -> (O) { O(i) = A(I(i)) + B(i) }"
    cdef = check_source(src).entry()
    st = cdef.statements[0]
    reads = read_accesses(st)
    assert [a.tensor for a in reads] == ["A", "I", "B"]  # the gather's index after the access it indexes
    numbers = access_numbers(st)
    assert numbers[id(st.source)] == 0 and [numbers[id(a)] for a in reads] == [1, 2, 3]
    gather = reads[0].args[0]
    statements = {s.name: s for s in build_scop(cdef, {"N": 6}).statements}
    (b,) = lower_bodies(cdef, statements, {"N": 6}, {}, frozenset({id(gather)})).values()
    a_load = b.rhs.lhs.arg
    assert a_load.ref.access == 1 and a_load.ref.checked == (True,)
    (sub,) = a_load.ref.subscripts
    assert isinstance(sub, V.SubValue) and sub.value.ref.tensor == "I" and sub.value.ref.access == 2
    assert b.rhs.rhs.arg.ref.access == 3
    assert (b.target.access, b.target.span[2]) == (0, 1)


def test_an_initialisation_of_a_scatter_writes_every_element_of_its_dimensions() -> None:
    src = "def sc(float(N) V, int64(N) I, float(M) Z) -> (float(M) O) { O(I(i)) +=! V(i) }"
    cdef = check_source(src).entry()
    statements = {s.name: s for s in build_scop(cdef, {"N": 4, "M": 3}).statements}
    bodies = lower_bodies(cdef, statements, {"N": 4, "M": 3}, {}, frozenset())
    init = bodies["S0_init"]
    assert init.target.subscripts == tuple(V.SubVar(d) for d in init.dims)
    (index,) = bodies["S0"].target.subscripts
    assert isinstance(index, V.SubValue) and index.value.ref.tensor == "I"
    assert index.value.ref.access == 2  # after the right-hand side's V(i)


def test_redirect_moves_promoted_references_and_a_block_reductions_update() -> None:
    src = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"
    _, _, bodies = _bodies(src, {"M": 4, "K": 8, "N": 4})
    promoted = {("S0", 1): Promoted("sh_A", (ir.Var("i_m"), ir.Int(0)), (1, 1))}
    moved = redirect(bodies, promoted, {})
    a, b = moved["S0"].rhs.lhs.arg, moved["S0"].rhs.rhs.arg
    assert a.ref == V.BufferRef(
        "sh_A", "A", (V.SubVar("m"), V.SubVar("r_k")), promoted[("S0", 1)].offsets, (1, 1)
    )
    assert b == bodies["S0"].rhs.rhs.arg  # not promoted: unchanged
    assert moved["S0"].value.arg.arg.lhs.arg == a  # the converted value is redirected alike
    assert moved["S0"].target == bodies["S0"].target and moved["S0_init"] == bodies["S0_init"]
    acc, part = ir.Buffer("tc_acc_0", "C", "private", (1,)), ir.Buffer("tc_part_0", "C", "shared", (1, 1, 32))
    red = BlockReduction(0, "S0", "C", "+=", acc, part)
    reduced = redirect(bodies, {}, {"S0": red})
    assert reduced["S0"].target == V.PartialRef(acc.name, "C")
    assert reduced["S0"].rhs == bodies["S0"].rhs


def test_tc_nodes_stay_out_of_the_ir() -> None:
    src = "def f(float(N) A) -> (O) { O(i) = exp(-A(i)) > 0.5 ? 1.0 : 0.0 }"
    _, _, bodies = _bodies(src, {"N": 3})

    def values(v):
        yield v
        for f in getattr(v, "__dataclass_fields__", {}):
            x = getattr(v, f)
            for y in x if isinstance(x, tuple) else (x,):
                if hasattr(y, "__dataclass_fields__"):
                    yield from values(y)

    found = list(values(bodies["S0"]))
    assert not any(type(x).__module__ == A.__name__ for x in found)
    assert {type(x).__name__ for x in found} >= {"Select", "Compare", "Call", "Negate", "Load", "Literal"}
