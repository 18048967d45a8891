"""Symbolic sizes (issue 34; DESIGN.md "Shapes"; tcjit/dynamic.py): which sizes a kernel's calls
leave symbolic after which calls (``dynamic=None``, ``True``, ``False``, names), sizes 0 and 1,
layouts a symbolic specialisation serves, the representative sizes, options, and dispatch: a
size seen again is a dict lookup, a new size compiles nothing, aliases stay bounded, forward and
derived backward alike.

The compiler is replaced by a stand-in (``fake_specialize``) that records what
:func:`tcjit.pipeline.specialize` is asked for and returns zeros of the right shapes: these tests
check the dispatch and the policy, not code. End-to-end runs of symbolic kernels are in
tests/runtime/test_dynamic_training.py.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import pytest
import torch

import tcjit
import tcjit.pipeline
from tcjit.binding import bind, torch_dtype
from tcjit.dynamic import family_of
from tcjit.mapping.layout import MAX_SYMBOLIC_SIZE
from tcjit.memory import ALIASES_PER_CACHE
from tcjit.runtime import Compiled

REAL_SPECIALIZE = tcjit.pipeline.specialize

FCRELU = """
def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}
"""


def fc(b: int, m: int = 16, n: int = 4, grad: bool = False):
    x, w, bias = torch.randn(b, m), torch.randn(n, m), torch.randn(n)
    if grad:
        x.requires_grad_()
        w.requires_grad_()
    return x, w, bias


@dataclass
class Made:
    """One specialisation the pipeline was asked for."""

    kernel: str
    symbolic: frozenset
    representative: dict | None
    options: object


class FakeSpec(Compiled):
    """A specialisation that computes zeros of the right shapes and dtypes."""

    def __init__(self, kernel, family):
        self.cdef = kernel.definition
        self.sizes = tuple(sorted(family.symbolic)) if family is not None else ()
        self.layouts = family

    def run(self, inputs, outputs):
        shapes = bind(self.cdef, inputs).output_shapes
        return tuple(
            torch.zeros(shapes[o], dtype=torch_dtype(self.cdef.tensor(o).dtype)) for o in self.cdef.outputs
        )


@pytest.fixture
def made(monkeypatch) -> list[Made]:
    """What tcjit.pipeline.specialize is asked for (and a FakeSpec in return)."""
    asked: list[Made] = []

    def fake(kernel, binding, inputs, outputs, options, target, *, family=None, representative=None):
        symbolic = frozenset() if family is None else family.symbolic
        asked.append(Made(kernel.name, symbolic, representative and dict(representative), options))
        return FakeSpec(kernel, family)

    monkeypatch.setattr(tcjit.pipeline, "specialize", fake)
    return asked


# ---------------------------------------------------------------------------------- the policy
def test_the_second_value_of_a_size_makes_it_symbolic_and_later_values_compile_nothing(made):
    k = tcjit.define(FCRELU)
    k(*fc(32))
    assert [m.symbolic for m in made] == [frozenset()], "the first call specialises"
    k(*fc(17))
    assert [m.symbolic for m in made] == [frozenset(), {"B"}], "a second value: B symbolic"
    assert made[1].representative == {"B": 32, "M": 16, "N": 4}, "the largest call seen"
    assert k.symbolic_sizes == {"B"}
    for b in (32, 5, 1, 17, 1, 64):
        k(*fc(b))
    assert len(made) == 2, "sizes seen again and new sizes (1 included) compile nothing"
    k(*fc(5, m=24))  # M too: one more kernel, with B and M symbolic
    assert made[2].symbolic == {"B", "M"} and k.symbolic_sizes == {"B", "M"}
    assert made[2].representative == {"B": 64, "M": 16, "N": 4}, "the largest call with N = 4"
    k(*fc(9, m=8))
    assert len(made) == 3


def test_a_size_seen_again_is_a_dict_lookup_of_the_same_specialisation(made):
    k = tcjit.define(FCRELU)
    k(*fc(32))
    k(*fc(17))
    (family,) = k._families.values()
    for b in (5, 17, 5):
        k(*fc(b))
    aliases = [s for s in k._specializations.values() if s is family]
    assert len(aliases) == 2 and len(k._specializations) == 3, "32 (concrete), 17 and 5 (aliases)"
    assert k._specializations.aliases == 2


def test_new_sizes_do_not_accumulate_entries(made):
    k = tcjit.define(FCRELU)
    for b in range(1, 3 * ALIASES_PER_CACHE):
        k(*fc(b, m=2, n=2))
    assert len(made) == 2 and len(k._families) == 1
    assert len(k._specializations) <= ALIASES_PER_CACHE + 1


def test_dynamic_true_false_and_names(made):
    k = tcjit.define(FCRELU, dynamic=True)
    k(*fc(32))
    assert made[-1].symbolic == {"B", "M", "N"} and made[-1].representative == {"B": 32, "M": 16, "N": 4}
    k(*fc(3, m=5, n=7))
    assert len(made) == 1, "every size symbolic from the first call"

    k = tcjit.define(FCRELU, dynamic=False)
    for b in (32, 17, 5):
        k(*fc(b))
    assert [m.symbolic for m in made[1:]] == [frozenset()] * 3 and k.symbolic_sizes == frozenset()

    k = tcjit.define(FCRELU, dynamic={"N"})
    k(*fc(32))
    assert made[-1].symbolic == {"N"}, "named: symbolic from the first call"
    k(*fc(17))
    assert made[-1].symbolic == {"B", "N"}, "the others automatic"
    k(*fc(17, n=9))
    assert len(made) == 6


def test_size_zero_gets_its_own_specialisation_and_is_not_a_value_seen(made):
    k = tcjit.define(FCRELU)
    k(*fc(8))
    k(*fc(0))
    k(*fc(8))
    assert [m.symbolic for m in made] == [frozenset(), frozenset()], "0 is not a second value"
    assert k.symbolic_sizes == frozenset()
    k(*fc(3))
    assert made[-1].symbolic == {"B"}
    k(*fc(0))  # B symbolic, yet 0 is concrete: empty tensors
    assert len(made) == 3, "the earlier B=0 specialisation serves it"
    k(*fc(1))
    assert len(made) == 3, "1 is served by the symbolic kernel"
    k = tcjit.define(FCRELU)
    k(*fc(0))
    k(*fc(8))
    assert [m.symbolic for m in made[3:]] == [frozenset(), frozenset()], "nor a first value"


def test_a_size_of_2_31_or_more_gets_concrete_sizes():
    """A symbolic kernel serves 1..2**31 - 1 (MAX_SYMBOLIC_SIZE: a CUDA grid's blocks along x, so
    its kernels need no grid-stride loop there): a call beyond belongs to no family and gets a
    specialisation with concrete sizes, as a size of 0 does. Meta tensors: 2**31 rows of real
    floats would not fit this machine."""
    cdef = tcjit.define(FCRELU).definition

    def family(b: int):
        x, w, bias = (torch.empty(s, device="meta") for s in ((b, 16), (4, 16), (4,)))
        return family_of(cdef, {"B": b, "M": 16, "N": 4}, (x, w, bias), None, {"B"})

    assert MAX_SYMBOLIC_SIZE == 2**31 - 1
    assert family(1) == family(MAX_SYMBOLIC_SIZE) is not None
    assert family(MAX_SYMBOLIC_SIZE + 1) is None and family(0) is None


def test_a_non_contiguous_tensor_with_a_symbolic_size_gets_a_concrete_specialisation(made):
    k = tcjit.define(FCRELU)
    k(*fc(32))
    k(*fc(17))
    x, w, bias = fc(24)
    k(x.T.contiguous().T, w, bias)  # B symbolic, and I not contiguous
    assert made[-1].symbolic == frozenset() and len(made) == 3
    k(x, w.T.contiguous().T, bias)  # W's shape has no symbolic size: its strides join the family
    assert made[-1].symbolic == {"B"} and len(made) == 4
    k(torch.randn(6, 16), w.T.contiguous().T, bias)
    assert len(made) == 4


def test_cuda_targets_have_symbolic_families_too(made):
    """Every target lowers symbolic sizes (the CUDA mapping computes its grids per call): a call
    on ``cuda`` or ``cuda-emulated`` belongs to the same kind of family as on the CPU."""
    k = tcjit.define(FCRELU, dynamic=True)
    inputs = fc(8)
    b = bind(k.definition, inputs)
    for target in ("cpu", "cuda", "cuda-emulated"):
        family = k._family(b, inputs, None, target, observe=True)
        assert family is not None and family.symbolic == {"B", "M", "N"}, target


# ------------------------------------------------------------------ gradients, variants, records
def test_forward_and_derived_backward_become_symbolic_together(made):
    k = tcjit.define(FCRELU)
    for b in (32, 17):
        k(*fc(b, grad=True)).sum().backward()  # out.sum(): an expanded output gradient
    first, second = made[:2], made[2:]
    assert [m.symbolic for m in first] == [frozenset()] * 2, "forward and backward at B = 32"
    assert [m.symbolic for m in second] == [{"B"}] * 2, "both symbolic at the second size"
    assert {m.kernel for m in second} == {m.kernel for m in first}
    for b in (32, 5, 1, 17, 64):
        x, w, bias = fc(b, grad=True)
        k(x, w, bias).square().mean().backward()  # a dense output gradient
        assert x.grad.shape == x.shape and w.grad.shape == w.shape
    assert len(made) == 4, "a third size compiles nothing, forward or backward"
    with torch.no_grad():
        k(*fc(100))
    assert made[-1] == Made("fcrelu", frozenset({"B"}), {"B": 100, "M": 16, "N": 4}, made[-1].options), (
        "evaluation calls share the record of sizes: symbolic from their first call"
    )


def test_retyped_variants_share_the_record_of_sizes(made):
    k = tcjit.define(FCRELU)
    k(*fc(32))
    k(*(t.double() for t in fc(17)))
    assert made[-1].symbolic == {"B"}, "the float64 variant's first call is B's second value"


def test_a_compiled_family_serves_its_layouts_and_refuses_others(made):
    k = tcjit.define(FCRELU, dynamic={"B"})
    spec = tcjit.compile(k, *(t.to("meta") for t in fc(8)))
    assert isinstance(spec, FakeSpec) and spec.sizes == ("B",)
    assert spec(*fc(3)).shape == (3, 4)
    with pytest.raises(tcjit.TCCallError, match="layouts this specialisation serves"):
        spec(*fc(3, n=5))  # N is not symbolic
    x, w, bias = fc(6)
    with pytest.raises(tcjit.TCCallError, match="layouts this specialisation serves"):
        spec(x.T.contiguous().T, w, bias)
    with pytest.raises(tcjit.TCCallError, match="sizes contradict"):
        spec(x, torch.randn(4, 3), bias)  # checked as a call


def test_forgetting_default_specialisations_forgets_families(made):
    k = tcjit.define(FCRELU)
    for b in (32, 17, 5):
        k(*fc(b))
    k._forget_default_specializations()
    assert len(k._families) == 0 and len(k._specializations) == 0
    k(*fc(5))
    assert len(made) == 3 and made[-1].symbolic == {"B"}, "built again, still symbolic"


def test_tuned_options_serve_every_size_of_the_family(made):
    from tcjit.tuned import options_database, tuning_key

    k = tcjit.define(FCRELU)
    tuned = tcjit.MappingOptions().tile(4, 4).validate("cpu")
    options_database().put(tuning_key(k, fc(17), "cpu"), tuned.to_json(), 1e-4, baseline=2e-4)
    k(*fc(32))
    assert made[-1].options != tuned, "tuned for 17, not 32: the defaults"
    k(*fc(9))
    assert made[-1].symbolic == {"B"} and made[-1].options != tuned, "17 not seen yet"
    k._forget_default_specializations()
    k(*fc(17))
    assert made[-1].options == tuned, "tuned for a call of the family seen"
    assert k.options_for(*fc(250)) == tuned, "and for every size of it"
    assert k.options_for(*fc(250, n=3)) != tuned, "not for another family"


# ---------------------------------------------------------------------------------- define()
TWO = """
def fc(float(B,M) I, float(N,M) W) -> (O) { O(b, n) +=! I(b, r_m) * W(n, r_m) }
def scale(float(K) X) -> (Y) { Y(k) = 2 * X(k) }
"""


def test_dynamic_names_are_checked_at_define():
    with pytest.raises(tcjit.TCNameError, match="'Q', which is not a size parameter of 'fcrelu'") as err:
        tcjit.define(FCRELU, dynamic={"B", "Q"})
    text = str(err.value)
    assert "fcrelu:2:5:" in text and "2 | def fcrelu(" in text and "^~~~~~" in text, text
    assert "B, M, N" in text
    with pytest.raises(tcjit.TCCallError, match="got the string 'B'"):
        tcjit.define(FCRELU, dynamic="B")
    with pytest.raises(tcjit.TCCallError, match="collection of size names, got 3"):
        tcjit.define(FCRELU, dynamic=3)
    both = tcjit.define(TWO, dynamic={"K", "B"})
    assert both.fc.dynamic == {"K", "B"} and both.scale.dynamic == {"K", "B"}
    with pytest.raises(tcjit.TCNameError, match="not a size parameter of any entry"):
        tcjit.define(TWO, dynamic={"Z"})
    with pytest.raises(tcjit.TCNameError, match="of 'scale'"):
        tcjit.define(TWO, "scale", dynamic={"B"})


def test_dynamic_is_pickled_with_the_kernel():
    k = tcjit.define(FCRELU, dynamic={"B"})
    again = pickle.loads(pickle.dumps(k))
    assert again.dynamic == frozenset({"B"}) and again.symbolic_sizes == {"B"}
    assert pickle.loads(pickle.dumps(tcjit.define(FCRELU, dynamic=False))).dynamic is False
    mm = tcjit.define(
        "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }", dynamic=True
    )
    mm_grad = tcjit.define(
        """def mm_grad(float(M,K) A, float(K,N) B, float(M,N) dC) -> (dA, dB) {
            dA(m, k) +=! dC(m, r_n) * B(k, r_n)
            dB(k, n) +=! dC(r_m, n) * A(r_m, k)
        }"""
    )
    assert tcjit.make_autograd(mm, mm_grad).dynamic is True
