"""Kernels lowered with symbolic sizes (mapping/symbolic.py): one compiled kernel, run at many
values of its symbolic sizes, must compute what torch computes at each; the concrete kernels are
unchanged (scripts/replay.py). The kernels here are run through ctypes directly, so that the
lowering is tested apart from the runtime's policy of when to make a size symbolic."""

from __future__ import annotations

import ctypes

import pytest
import torch

import tcjit as tc
from tcjit.cpu_runtime import compile_c, load, vector_bytes
from tcjit.mapping import ir
from tcjit.mapping.accumulation import LONG_SUM, long_sums
from tcjit.mapping.layout import contiguous_layout
from tcjit.mapping.lower_cpu import lower_cpu
from tcjit.mapping.options import MappingOptions
from tcjit.mapping.reduction_forms import CHUNKS
from tcjit.mapping.symbolic import check_symbolic, symbolic_candidates
from tcjit.pipeline import default_options
from tcjit.polyhedral.errors import TCInternalError
from tcjit.polyhedral.lang.sizes import smin, sym
from tcjit.suite import SUITE

DEFAULT_TIER = ("matmul", "fcrelu", "conv2d", "softmax", "bn_reduce", "maxpool2x2", "abs_sum")


def _compile(cdef, rep, symbolic, options=None):
    opts = (options or default_options(cdef, rep, "cpu")).validate("cpu")
    low = lower_cpu(
        cdef, rep, contiguous_layout(cdef, rep), opts.values, vector_bytes=vector_bytes(), symbolic=symbolic
    )
    assert low.sizes == tuple(sorted(symbolic))
    fn = getattr(load(compile_c(low.source, name=cdef.name), name=cdef.name), low.symbol)
    return low, fn


def _run(cdef, low, fn, inputs, sizes, threads=None):
    """The kernel's outputs on ``inputs`` at ``sizes`` (the runtime's work, by hand), on
    ``threads`` threads (default: torch's)."""
    shape = lambda name: tuple(d.evaluate(sizes) for d in cdef.tensor(name).shape)  # noqa: E731
    outs = [torch.zeros(shape(o), dtype=inputs[0].dtype) for o in cdef.outputs]
    kept, args = [], []
    for q in low.params:
        if q.name in cdef.params:
            t = inputs[cdef.params.index(q.name)]
        elif q.name in cdef.outputs:
            t = outs[cdef.outputs.index(q.name)]
        else:
            t = torch.zeros(shape(q.name))
            kept.append(t)
        args.append(ctypes.c_void_p(t.data_ptr()))
    args += [ctypes.c_int64(sizes[name]) for name in low.sizes]
    errors = (ctypes.c_int64 * 3)()
    fn(threads or torch.get_num_threads(), errors, *args)
    return outs, list(errors)


def _sweep(name, symbolic_of, options=None, rep_index=0):
    """The kernel lowered at small size ``rep_index`` (often every size 1: strides and extents
    that are 1 there only by accident), run at the others."""
    k = SUITE[name]
    cdef = k.checked
    rep = dict(k.small_sizes[rep_index])
    lead = cdef.sizes[0]
    symbolic = frozenset(symbolic_of(cdef))
    if symbolic == {lead}:
        points = [{**rep, lead: v} for v in sorted({1, 2, 7, rep[lead], rep[lead] + 5})]
    else:
        points = [dict(s) for s in k.small_sizes]
    low, fn = _compile(cdef, rep, symbolic, options)
    for sizes in points:
        inputs = k.make_inputs(sizes, seed=1)
        outs, errors = _run(cdef, low, fn, inputs, sizes)
        assert errors[0] == 0, (sizes, errors)
        tol = 1e-3 * max(1.0, k.reduction_length(sizes) ** 0.5 / 16)
        for got, want in zip(outs, k.torch_ref(*inputs)):
            torch.testing.assert_close(
                got, want, rtol=tol, atol=tol, msg=lambda m, at=sizes: f"{name} at {at}: {m}"
            )


@pytest.mark.parametrize("name", DEFAULT_TIER)
def test_a_kernel_with_a_symbolic_leading_size_computes_every_value(name) -> None:
    """The batch size (the first size) symbolic: values 1, 2, 7 and around the representative."""
    _sweep(name, lambda cdef: {cdef.sizes[0]})


@pytest.mark.parametrize("name", DEFAULT_TIER)
def test_a_kernel_with_every_size_symbolic_computes_the_small_sizes(name) -> None:
    _sweep(name, lambda cdef: cdef.sizes)


@pytest.mark.parametrize("name", ("fcrelu", "conv2d", "layernorm"))
def test_a_kernel_mapped_at_other_sizes_computes_every_value(name) -> None:
    """Every size symbolic, mapped at the second small size, run at all of them (sizes 1 too)."""
    _sweep(name, lambda cdef: cdef.sizes, rep_index=1)


@pytest.mark.full
@pytest.mark.parametrize("rep_index", (0, 1))
@pytest.mark.parametrize("options", ("default", "naive", "mlp", "single_thread"))
@pytest.mark.parametrize("which", ("lead", "all"))
@pytest.mark.parametrize("name", sorted(SUITE))
def test_every_suite_kernel_is_right_with_symbolic_sizes(name, which, options, rep_index) -> None:
    chosen = None if options == "default" else MappingOptions(options)
    _sweep(
        name,
        (lambda cdef: {cdef.sizes[0]}) if which == "lead" else (lambda cdef: cdef.sizes),
        chosen,
        rep_index=min(rep_index, len(SUITE[name].small_sizes) - 1),
    )


def _choices(name: str, symbolic) -> tuple[str, list[tuple[str, str]]]:
    """The CPU mapper's decisions for suite kernel ``name`` at its CPU sizes, and the variable and
    kinds of every loop that runs in threads."""
    k = SUITE[name]
    rep = dict(k.cpu_sizes)
    opts = default_options(k.checked, rep, "cpu").validate("cpu")
    low = lower_cpu(
        k.checked,
        rep,
        contiguous_layout(k.checked, rep),
        opts.values,
        vector_bytes=vector_bytes(),
        symbolic=symbolic,
    )
    threaded = {ir.LoopKind.PARALLEL, ir.LoopKind.PARALLEL_REDUCTION}
    loops = [
        (n.var, n.kind_text) for n in ir.nodes(low.kernel_ir) if isinstance(n, ir.For) and n.kinds & threaded
    ]
    return low.stages["decisions"], loops


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            n,
            marks=[] if n in ("conv2d", "bn_reduce", "maxpool2x2", "abs_sum", "tbmm") else [pytest.mark.full],
        )
        for n in sorted(SUITE)
    ],
)
def test_a_symbolic_kernel_makes_the_concrete_kernels_choices_at_its_representative_sizes(name) -> None:
    """The cost-driven choices (the parallel loop, register tiles) count a loop's iterations at
    the representative sizes: a tile loop over the batch that runs once there is not the
    parallel loop (maxpool2x2, conv2d and bn_reduce ran on one thread before); tbmm's ``Y(B, N,
    K)``, whose strides depend on no symbolic size, is packed a part at a time as in the concrete
    kernel. The CPU suite's sizes map as the concrete kernel does, with the batch size symbolic."""
    lead = SUITE[name].checked.sizes[0]
    assert _choices(name, frozenset({lead})) == _choices(name, frozenset())


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=[] if n in ("tmm", "fcrelu") else [pytest.mark.full]) for n in sorted(SUITE)],
)
def test_every_register_tile_a_symbolic_kernel_chooses_is_formed(name) -> None:
    """With every size symbolic at the CPU suite's sizes, the register tile's sizes are chosen by
    whether they tile the loops evenly *at the representative sizes* (no size tiles every value of
    a symbolic one evenly). tmm and fcrelu took a 3x3 tile that does not divide their 512-wide
    tiles; the point loops' bounds then depended on the tile loop, the printer could not form the
    tile, and the kernel ran as scalar code (6x slower than the 4x2 tile). Every tile the mapper
    decides must appear in the printed code; tmm's and fcrelu's are the concrete kernels' with
    their operands unpacked, as a symbolic kernel's are."""
    k = SUITE[name]
    cdef = k.checked
    rep = dict(k.cpu_sizes)
    opts = default_options(cdef, rep, "cpu")
    lower = lambda o, symbolic: lower_cpu(  # noqa: E731
        cdef, rep, contiguous_layout(cdef, rep), o.validate("cpu").values, vector_bytes=vector_bytes(),
        symbolic=symbolic,
    )  # fmt: skip
    low = lower(opts, frozenset(cdef.sizes))
    tiles = [line for line in low.stages["decisions"].splitlines() if line.startswith("register tile")]
    if tiles:
        assert "/* register tile (" in low.source, tiles
    if name in ("tmm", "fcrelu"):
        unpacked = lower(opts.replace(pack_operands=False), frozenset())
        assert tiles == [
            line for line in unpacked.stages["decisions"].splitlines() if line.startswith("register tile")
        ]


def test_an_input_with_a_symbolic_batch_size_is_packed_a_part_at_a_time() -> None:
    """tbmm's ``Y(B, N, K)`` is read along ``N`` by the outer-product register tile: packed,
    ``N`` innermost, in parts of 64 images (a tile of ``B``). Its strides and the panel's depend on
    no symbolic size, and each part buffer holds 64 images at every ``B``, the fill clamping to
    the call's ``B``: right below, at and past the representative (100), across tile edges."""
    k = SUITE["tbmm"]
    cdef = k.checked
    rep = {"B": 100, "M": 72, "N": 26, "K": 26}
    low, fn = _compile(cdef, rep, frozenset({"B"}))
    assert "tc_part_Y(u_Y, b_Y, (64 * c0), 0, 0, tc_z_B);" in low.source
    assert "o0 + 64 < (tc_z_B) ? o0 + 64 : (tc_z_B)" in low.source  # a part of 64, clamped per call
    for b in (1, 63, 64, 65, 100, 129, 300):
        sizes = {**rep, "B": b}
        inputs = k.make_inputs(sizes, seed=b)
        (z,), errors = _run(cdef, low, fn, inputs, sizes)
        assert errors == [0, 0, 0]
        torch.testing.assert_close(
            z, k.torch_ref(*inputs)[0], rtol=1e-4, atol=1e-4, msg=lambda m, b=b: f"B={b}: {m}"
        )


@pytest.mark.parametrize(
    "name", ["mlp3", "tbmm", *(pytest.param(n, marks=pytest.mark.full) for n in ("matmul", "tmm", "fcrelu"))]
)
def test_a_kernel_mapped_at_the_suites_sizes_with_every_size_symbolic_computes_the_small_ones(name) -> None:
    """Mapped at the CPU suite's sizes, where its operands are packed, then run at the small
    sizes: an operand whose strides would depend on a symbolic size (mlp3's ``W1(N, M)``) is
    not packed (its panel, laid out for the representative sizes, was read at others')."""
    k = SUITE[name]
    cdef = k.checked
    low, fn = _compile(cdef, dict(k.cpu_sizes), frozenset(cdef.sizes))
    for sizes in k.small_sizes:
        inputs = k.make_inputs(sizes, seed=1)
        outs, errors = _run(cdef, low, fn, inputs, sizes)
        assert errors[0] == 0, (sizes, errors)
        for got, want in zip(outs, k.torch_ref(*inputs)):
            torch.testing.assert_close(
                got, want, rtol=1e-3, atol=1e-3, msg=lambda m, at=sizes: f"{name} at {at}: {m}"
            )


def test_a_reduction_over_a_symbolic_trip_count_runs_in_threads_in_chunks() -> None:
    """abs_sum at M=512 sums 8 tiles of 64 rows as a parallel reduction; with M symbolic the
    tile loop's trip count is symbolic, and its iterations are shared out in CHUNKS runs of
    consecutive ones, each summed into a partial result, combined in order: right at every
    value (one row, a chunk boundary, more tiles than chunks), and the same bits on 1 and 2
    threads (the order of the sum depends on the sizes only)."""
    k = SUITE["abs_sum"]
    cdef = k.checked
    low, fn = _compile(cdef, {"M": 512, "N": 333}, frozenset({"M"}))
    reductions = [n for n in ir.nodes(low.kernel_ir) if isinstance(n, ir.ParallelReduction)]
    assert reductions and all(n.chunked and n.count == CHUNKS for n in reductions)
    for m in (1, 2, 63, 64, 65, 513, 64 * CHUNKS, 64 * CHUNKS + 1, 64 * 2 * CHUNKS + 67):
        sizes = {"M": m, "N": 333}
        (a,) = k.make_inputs(sizes, seed=m)
        (one,), errors = _run(cdef, low, fn, (a,), sizes, threads=1)
        (two,), errors2 = _run(cdef, low, fn, (a,), sizes, threads=2)
        assert errors == errors2 == [0, 0, 0]
        want = a.double().abs().sum().float()
        torch.testing.assert_close(one, want, rtol=1e-6, atol=0, msg=lambda msg, m=m: f"M={m}: {msg}")
        assert torch.equal(one, two), (m, one, two)


def test_sizes_read_in_a_statement_come_from_the_kernels_arguments() -> None:
    """A size used as a value (``/ N``) and as a subscript (``N - 1 - i``) of a symbolic kernel."""
    k = tc.define(
        """
def rev(float(N) X) -> (Y, Z) {
    Y(i) = X(N - 1 - i) / N
    Z(i) = X(i) * float(N)
}"""
    )
    cdef = k.definition
    low, fn = _compile(cdef, {"N": 8}, frozenset({"N"}))
    assert "tc_z_N" in low.source
    for n in (1, 3, 8, 33):
        x = torch.randn(n)
        (y, z), errors = _run(cdef, low, fn, (x,), {"N": n})
        assert errors[0] == 0
        torch.testing.assert_close(y, x.flip(0) / n)
        torch.testing.assert_close(z, x * n)


def test_a_symbolic_kernel_accumulates_as_at_its_representative_sizes() -> None:
    """float32 sums of LONG_SUM terms or more use a float64 accumulator. A symbolic kernel applies
    the rule at its representative sizes, and serves only sizes on the same side of LONG_SUM
    (long_sums tells the two apart; tests/runtime/test_dynamic_shapes.py: the dispatch)."""
    k = tc.define("def s(float(N, K) A) -> (S) { S(n) +=! A(n, r_k) }")
    cdef = k.definition
    short, long = {"N": 4, "K": 10}, {"N": 4, "K": LONG_SUM + 3}
    assert long_sums(cdef, short, frozenset({"K"})) == frozenset()
    assert long_sums(cdef, long, frozenset({"K"})) == {"S"}
    assert long_sums(cdef, long, frozenset({"N"})) == frozenset()  # its length depends on K only
    low, _ = _compile(cdef, short, frozenset({"K"}))
    assert low.wide == ()
    low, fn = _compile(cdef, long, frozenset({"K"}))
    assert low.wide == ("S",)
    a = torch.full((2, LONG_SUM + 40), 0.1)
    (s,), errors = _run(cdef, low, fn, (a,), {"N": 2, "K": LONG_SUM + 40})
    assert errors[0] == 0
    torch.testing.assert_close(s, a.double().sum(1).float(), rtol=1e-6, atol=0)


def test_an_access_inside_only_at_the_representative_is_checked_when_it_runs() -> None:
    """``W(n)`` with ``n < N`` reads inside ``W`` (size 8) at N = 8, not at every N: the
    symbolic kernel checks it as it runs, and a call past it reports the subscript."""
    k = tc.define("def f(float(N) X, float(8) W) -> (Y) { Y(n) = X(n) + W(n) where n in 0:N }")
    cdef = k.definition
    low, fn = _compile(cdef, {"N": 8}, frozenset({"N"}))
    assert [(c.tensor, c.dim, c.size) for c in low.checks] == [("W", 0, 8)]
    x, w = torch.randn(12), torch.randn(8)
    (y,), errors = _run(cdef, low, fn, (x[:5], w), {"N": 5})
    assert errors[0] == 0
    torch.testing.assert_close(y, x[:5] + w[:5])
    _, errors = _run(cdef, low, fn, (x, w), {"N": 12})
    assert errors[0] == 1 and 8 <= errors[1] < 12  # check 1: a subscript of W past its end


def test_which_sizes_may_be_symbolic() -> None:
    k = tc.define("def f(float(M, N) A) -> (B) { B(i, j) = A(i, j) }")
    assert symbolic_candidates(k.definition) == {"M", "N"}
    with pytest.raises(TCInternalError):
        check_symbolic(k.definition, {"M": 2, "N": 3}, {"K"})
    with pytest.raises(TCInternalError):  # empty tensors specialise
        check_symbolic(k.definition, {"M": 0, "N": 3}, {"N"})
    assert check_symbolic(k.definition, {"M": 2, "N": 3}, ["N"]) == frozenset({"N"})


def test_size_expressions_substitute_and_print_as_c() -> None:
    h, kh, w = sym("H"), sym("KH"), sym("W")
    e = (h - kh + 1) * w
    assert e.substitute({"KH": 3}) == (h - 2) * w
    assert e.substitute({"KH": 3, "H": 5, "W": 2}).const == 6
    name = lambda s: f"z_{s}"  # noqa: E731
    for expr, values in (
        (e, {"H": 9, "KH": 3, "W": 4}),
        ((h - kh).floordiv(2) + 1, {"H": 10, "KH": 3}),
        (smin(h, w + 3) * 2, {"H": 4, "W": 7}),
    ):
        text = expr.to_c(name)
        for s, v in values.items():
            text = text.replace(name(s), str(v))
        text = text.replace("tc_floordiv_i64", "fdiv").replace("tc_min_i64", "min")
        assert eval(text, {"fdiv": lambda a, b: a // b, "min": min}) == expr.evaluate(values), text
