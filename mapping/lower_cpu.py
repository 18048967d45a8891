"""Lowering one definition, at concrete sizes and strides, to a CPU kernel's C source.

:func:`lower_cpu` runs the pipeline of DESIGN.md for the CPU target:

1. :func:`~tcjit.mapping.prepare.prepare`: the Scop and its dependences, the fused and tiled
   schedule, and the proofs (legality, affine accesses inside their tensors);
2. the CPU mapping (:func:`~tcjit.mapping.cpu.map_cpu`), checked for legality once more;
3. isl's AST, turned into kernel IR (:mod:`.ir`), packed operands' parts placed (:mod:`.parts`);
4. the IR passes: teams of threads (:mod:`.openmp_teams`), then reduction forms and register tiles
   (:mod:`.reduction_forms`), the initialisations they make dead left out;
5. the C printer (:func:`~tcjit.mapping.c_kernel.print_kernel`).

The result is plain data (:class:`CpuKernelSource`, JSON-serialisable) so a kernel found on disk
loads without isl.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import islpy as isl

from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.names import entry_symbol
from ..polyhedral.schedule import check_legality
from . import ir
from .accumulation import wide_accumulators
from .bodies import lower_bodies
from .c_exprs import BoundsCheck, CParam
from .c_kernel import print_kernel
from .cpu import map_cpu
from .ir_isl import from_isl_ast
from .layout import Pack, size_text, size_var, spanned_elements, symbolic_in
from .openmp_teams import plan_teams
from .packing import packed_operands
from .parts import place_parts
from .prepare import covered_initialisations, kernel_header, kernel_params, kernel_stages, prepare
from .reduction_forms import folded_initialisations, plan_reductions, without_runs
from .symbolic import check_symbolic, generic_strides
from .tile_forms import TilingFacts

__all__ = ["INIT_WINDOW", "CpuKernelSource", "lower_cpu"]


@dataclass(frozen=True)
class CpuKernelSource:
    """A CPU kernel ready to compile.

    :ivar source: the C text. :ivar symbol: the kernel function's name.
    :ivar params: the parameters after ``nthreads`` and ``tc_errors``, in order: the inputs, the
        outputs and, on the emulated CUDA target, the temporaries (a CPU kernel holds its
        temporaries in its own workspace).
    :ivar zero_init: outputs and temporaries among ``params`` the runtime must zero before the
        call (tcjit allocates them): elements the kernel may read before writing, or never writes.
    :ivar checks: the run-time bounds checks, by number - 1.
    :ivar wide: tensors the kernel accumulates in a wider type (:func:`wide_accumulators`); it
        allocates their buffers and reports a failed allocation as error -1.
    :ivar stages: readable intermediate forms (``schedule``, ``tree``, ``decisions``, ``ir``).
    :ivar buffers: the emulated target: its race-checked shared buffers, after the outputs and
        temporaries in the numbering of race reports.
    :ivar kernel_ir: the kernel IR the source was printed from, the passes' decisions in it (not
        stored with the source: a kernel loaded from the cache has none).
    :ivar sizes: the symbolic sizes (:mod:`.symbolic`), which the C function takes as ``int64_t``
        after ``params``, in this order; a call passes its values of them.
    """

    source: str
    symbol: str
    params: tuple[CParam, ...]
    zero_init: tuple[str, ...]
    checks: tuple[BoundsCheck, ...]
    wide: tuple[str, ...] = ()
    stages: Mapping[str, str] = field(default_factory=dict, compare=False)
    buffers: tuple[str, ...] = ()
    kernel_ir: ir.Node | None = field(default=None, compare=False, repr=False)
    sizes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        out = {
            "symbol": self.symbol,
            "params": [[p.name, p.kind, p.ctype] for p in self.params],
            "zero_init": list(self.zero_init),
            "checks": [[c.tensor, c.dim, c.size, list(c.span), c.verb] for c in self.checks],
            "wide": list(self.wide),
        }
        if self.buffers:
            out["buffers"] = list(self.buffers)
        if self.sizes:
            out["sizes"] = list(self.sizes)
        return out


#: The CPU target keeps a ``!`` initialisation in the band of its update when the reduction takes
#: at most this many points per output (:func:`~tcjit.mapping.cpu.hoist_initialisations`).
INIT_WINDOW = 16


def lower_cpu(
    cdef: CheckedDef,
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    options,
    *,
    symbol: str | None = None,
    vector_bytes: int = 32,
    symbolic: frozenset[str] = frozenset(),
    unpacked: frozenset[str] = frozenset(),
) -> CpuKernelSource:
    """The C source of ``cdef`` at ``sizes`` for tensors with element ``strides`` (every tensor).

    :arg options: :class:`~tcjit.mapping.option_values.OptionValues` (already validated for "cpu").
    :arg vector_bytes: the width of the target's vector registers (a register tile's partial sums).

    With ``options.pack_operands`` the inputs :func:`~tcjit.mapping.packing.packed_operands` picks
    are read from transposed panels: the mapper and the printer see the panels' strides, and the
    printed kernel fills the panels first.

    With ``symbolic`` sizes (:mod:`.symbolic`) the kernel serves every admissible value of each: its
    C function takes them after the other parameters (:attr:`CpuKernelSource.sizes`); choices are
    made at ``sizes``, every proof for all values, and tensors whose shape depends on a symbolic
    size are neither fetched ahead nor held in the kernel's workspace. Such a tensor is packed
    only where its strides depend on no symbolic size and the loops fill its panel a part at a
    time (:mod:`.parts`: a part buffer of one size for every call); where they do not, the kernel
    is lowered again with it among the ``unpacked`` inputs.
    """
    symbolic = check_symbolic(cdef, sizes, symbolic)
    varying = frozenset(t.name for t in cdef.tensor_infos if any(symbolic_in(d, symbolic) for d in t.shape))
    # what the proofs of the IR passes may rely on: the fixed sizes only
    fixed_sizes = {s: v for s, v in sizes.items() if s not in symbolic}
    # the passes' choices read strides; one that depends on a symbolic size must not look like
    # 1 (or equal another) because the representative sizes make it so (symbolic.generic_strides)
    strides = {**strides, **generic_strides(cdef, sizes, symbolic)}
    packs = packed_operands(cdef, sizes, strides) if options.pack_operands else {}
    packs = {
        name: _with_extents(cdef, pack, sizes, symbolic) if name in varying else pack
        for name, pack in packs.items()
        if name not in unpacked and (name not in varying or _fixed_strides(cdef, pack, symbolic))
    }
    strides = {**strides, **{name: pack.strides for name, pack in packs.items()}}
    scop, deps, fixed, sched, checked, zero = prepare(
        cdef, sizes, options, window=INIT_WINDOW, packed=frozenset(packs), symbolic=symbolic
    )
    legal_sizes = {p: sizes[p] for p in scop.params if p not in symbolic} or None
    work = sum(
        math.prod(max(0, r.hi.evaluate(sizes) - r.lo.evaluate(sizes)) for r in st.ranges)
        for st in cdef.statements
    )
    plan = map_cpu(scop, deps, sched, options, sizes, strides, work, symbolic)
    if not symbolic:
        # Checked once more. Not for a symbolic kernel: the CPU mapping only permutes and tiles
        # permutable bands of the tiled schedule that prepare() proved legal for every value (its
        # chain and window forms are checked as it makes them), and isl's proof over the mapped
        # schedule's nested floor divisions can take hours, even at concrete values of sizes
        # left symbolic in it (a backward kernel's d_W with every size symbolic). The concrete
        # kernels of the same mapping keep this check.
        check_legality(plan.schedule, deps, sizes=legal_sizes)

    build = isl.AstBuild.from_context(fixed)
    ast = build.node_from_schedule(plan.schedule)
    body = from_isl_ast(ast, params={p: size_var(p) if p in symbolic else sizes[p] for p in scop.params})
    statements = {s.name: s for s in scop.statements}
    items = {name: max(1, cdef.tensor(name).dtype.bits // 8) for name in packs}
    body, parts = place_parts(
        body, statements, packs, fixed_sizes, items, representative={size_var(z): sizes[z] for z in symbolic}
    )
    whole = frozenset(name for name in packs if name in varying and name not in parts)
    if whole:  # a panel of every call's size would be filled whole: read the tensor instead
        return lower_cpu(
            cdef,
            sizes,
            strides,
            options,
            symbol=symbol,
            vector_bytes=vector_bytes,
            symbolic=symbolic,
            unpacked=unpacked | whole,
        )
    strides = {**strides, **{name: part.strides for name, part in parts.items()}}

    params = kernel_params(cdef)
    # Temporaries live in the kernel's workspace, kept between calls: no tensor to allocate per
    # call, and memory the last call left in cache.
    # (A temporary whose shape depends on a symbolic size is a parameter, allocated per call.)
    held = {
        name: spanned_elements([s.evaluate(sizes) for s in cdef.tensor(name).shape], strides[name])
        for name in cdef.temporaries
        if name not in varying
    }
    symbol = symbol or entry_symbol(cdef.name)
    wide = wide_accumulators(cdef, sizes)
    header = kernel_header(cdef, f"options: {options!r}")
    facts = TilingFacts(
        cdef,
        statements,
        fixed_sizes,
        strides,
        checked,
        wide,
        vector_bytes,
        foldable=frozenset(name.removesuffix("_init") for name in covered_initialisations(scop, fixed)),
        size_vars=frozenset(size_var(z) for z in symbolic),
    )

    def planned(tree: ir.Node) -> ir.Node:
        return plan_reductions(
            plan_teams(tree, cdef, statements, fixed_sizes, strides, frozenset(packs)), facts
        )

    kernel = planned(body)
    # An initialisation is left out when every register tile of its update starts from zero and
    # the update writes every element it would have written.
    folded = folded_initialisations(kernel, frozenset(f"{name}_init" for name in facts.foldable))
    if folded:
        kernel = planned(without_runs(body, frozenset(folded)))
    text, checks = print_kernel(
        cdef,
        kernel,
        lower_bodies(cdef, statements, sizes, wide, checked, symbolic),
        symbol=symbol,
        params=params,
        sizes=sizes,
        symbolic=symbolic,
        strides=strides,
        wide=wide,
        copy_in=frozenset(zero) & frozenset(wide),
        header=header,
        packs=packs,
        parallel=options.parallelize,
        folded=folded,
        parts=parts,
        held=held,
        zeroed=frozenset(zero) & frozenset(held),
    )
    stages = kernel_stages(sched, plan.schedule, plan.decisions, kernel)
    return CpuKernelSource(
        text,
        symbol,
        tuple(q for q in params if q.name not in held),
        tuple(name for name in zero if name not in held),
        checks,
        tuple(wide),
        stages,
        kernel_ir=kernel,
        sizes=tuple(sorted(symbolic)),
    )


def _fixed_strides(cdef: CheckedDef, pack: Pack, symbolic: frozenset[str]) -> bool:
    """Whether only the outermost dimension of ``pack``'s tensor, in its order and in the panel's
    (:attr:`~.layout.Pack.order`), has an extent that depends on a symbolic size (a batch
    dimension): every stride, the tensor's and the panel's, is a product of the extents inside
    it, so none then depends on a symbolic size."""
    varying = {d for d, extent in enumerate(cdef.tensor(pack.tensor).shape) if symbolic_in(extent, symbolic)}
    return varying <= {0} and varying <= {pack.order[0]}


def _with_extents(cdef: CheckedDef, pack: Pack, sizes: Mapping[str, int], symbolic: frozenset[str]) -> Pack:
    """``pack`` with the extents the kernel reads (:attr:`~.layout.Pack.extents`)."""
    shape = cdef.tensor(pack.tensor).shape
    extents = tuple(size_text(d, sizes, symbolic) for d in shape)
    read = sorted(set().union(*(d.symbols() for d in shape)) & symbolic)
    return replace(pack, extents=extents, sizes=tuple(size_var(z) for z in read))
