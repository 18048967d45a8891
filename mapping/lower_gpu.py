"""Lowering one definition, at concrete sizes and strides, for the GPU: its mapping, and the
source of the two targets that print it, CUDA (:func:`lower_cuda`) and the emulated CUDA target
that runs it on the CPU (:func:`lower_emulated`).

:func:`lower_gpu` runs :func:`~tcjit.mapping.prepare.prepare`, the GPU mapping
(:func:`~tcjit.mapping.gpu.map_gpu`: blocks, threads, promotion, block reductions) and builds
one kernel IR per launch; each target then checks that every thread of a block reaches each
barrier (:func:`~tcjit.mapping.fission.fission`) and prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.names import entry_symbol
from ..polyhedral.scop import Scop
from . import ir
from .accumulation import wide_accumulators
from .bodies import access_numbers, lower_bodies, redirect
from .c_exprs import CParam, c_compute_type, expr
from .c_kernel import print_kernel
from .cuda_printer import CudaKernelSource, CudaLaunch, CudaPrinter, print_cuda
from .emulation import EmulatedPrinter
from .fission import fission
from .gpu import GpuKernelPlan, GpuPlan, folds_initialisations, launch_bodies, map_gpu
from .gpu_nodes import explicit
from .gpu_vectors import mark_groups
from .layout import size_var, symbolic_in
from .lower_cpu import CpuKernelSource
from .prepare import Prepared, kernel_header, kernel_params, kernel_stages, prepare
from .promotion import TensorInfo
from .reduction_forms import plan_reductions
from .symbolic import check_symbolic, generic_strides
from .tile_forms import TilingFacts

__all__ = ["GpuLowering", "gpu_bodies", "lower_cuda", "lower_emulated", "lower_gpu", "printer_inputs"]


@dataclass(frozen=True)
class GpuLowering:
    """The GPU mapping of one definition, ready to print (:func:`lower_gpu`): the prepared model,
    the mapping plan and each launch's kernel IR (barriers as ``sync`` marks, the mapping's own
    statements and marks as :mod:`.gpu_ir` nodes: :func:`~tcjit.mapping.gpu_nodes.explicit`);
    ``symbolic``: the sizes it serves at every value (:mod:`.symbolic`)."""

    prepared: Prepared
    plan: GpuPlan
    launches: tuple[tuple[GpuKernelPlan, ir.Node], ...]
    symbolic: frozenset[str] = frozenset()


def lower_gpu(
    cdef: CheckedDef, sizes: Mapping[str, int], options, *, symbolic: frozenset[str] = frozenset()
) -> GpuLowering:
    """:func:`prepare`, :func:`~tcjit.mapping.gpu.map_gpu`, then one kernel IR per launch: what the
    CUDA printer and the emulated target print.

    With ``symbolic`` sizes (:mod:`.symbolic`) the mapping serves every admissible value of each, as
    the CPU's does (:func:`~tcjit.mapping.lower_cpu.lower_cpu`): the options' choices are made
    at ``sizes``, the proofs and loop bounds hold for every value, thread blocks are as large as
    any value needs, a grid that depends on a symbolic size is computed per launch
    (:attr:`~tcjit.mapping.gpu.GpuKernelPlan.grid_exprs`), and tensors whose shape depends on one
    are not promoted to shared or private memory."""
    symbolic = check_symbolic(cdef, sizes, symbolic)
    prepared = prepare(
        cdef,
        sizes,
        options,
        fold=folds_initialisations(options),
        distribute=options.match_library_calls,
        symbolic=symbolic,
    )
    wide = wide_accumulators(cdef, sizes)
    tensors = {
        t.name: TensorInfo(
            tuple(s.evaluate(sizes) for s in t.shape), max(1, (wide.get(t.name) or t.dtype).bits // 8)
        )
        for t in cdef.tensor_infos
    }
    plan = map_gpu(
        prepared.deps,
        prepared.sched,
        options,
        prepared.fixed,
        scop=prepared.scop,
        tensors=tensors,
        sizes=sizes,
        symbolic=symbolic,
        unpromoted=_varying(cdef, symbolic),
    )
    params = {p: size_var(p) if p in symbolic else sizes[p] for p in prepared.scop.params}
    launches = tuple(
        (k, explicit(body, plan.copies, plan.reductions)) for k, body in launch_bodies(plan, params)
    )
    return GpuLowering(prepared, plan, launches, symbolic)


def _varying(cdef: CheckedDef, symbolic: frozenset[str]) -> frozenset[str]:
    """The tensors whose shape depends on a symbolic size."""
    return frozenset(t.name for t in cdef.tensor_infos if any(symbolic_in(d, symbolic) for d in t.shape))


def _choice_inputs(cdef: CheckedDef, sizes, strides, symbolic) -> tuple[dict, dict]:
    """What the IR passes' choices and proofs read (as on the CPU): the fixed sizes alone, and
    strides with every symbolic size at a generic value (:func:`~.symbolic.generic_strides`)."""
    fixed = {s: v for s, v in sizes.items() if s not in symbolic}
    return fixed, {**strides, **generic_strides(cdef, sizes, symbolic)}


def lower_emulated(
    cdef: CheckedDef,
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    options,
    *,
    symbol: str | None = None,
    symbolic: frozenset[str] = frozenset(),
) -> CpuKernelSource:
    """The C source of ``cdef``'s GPU mapping at ``sizes``, emulated (see the module's docstring).

    Its first parameter after ``nthreads`` and ``tc_errors`` is the scalar ``tc_order``. With
    ``symbolic`` sizes (:func:`lower_gpu`) it takes them after its other parameters, as a CPU
    kernel does (:attr:`~tcjit.mapping.lower_cpu.CpuKernelSource.sizes`), and runs each launch's
    blocks as its grid at those values says.
    """
    low = lower_gpu(cdef, sizes, options, symbolic=symbolic)
    symbolic = low.symbolic
    scop, _, _, sched, checked, zero = low.prepared
    launches = [
        ir.Blocks(_emulated_grid(k), k.block, fission(body, k.block), k.buffers) for k, body in low.launches
    ]
    params = [CParam("tc_order", "scalar", "int64_t"), *kernel_params(cdef)]
    symbol = symbol or entry_symbol(cdef.name) + "_emulated"
    # long float32 sums and half-precision sums accumulate wide, as on the CPU (the language's
    # semantics); the CUDA printer keeps such buffers in global memory the runtime allocates
    wide = wide_accumulators(cdef, sizes)
    header = kernel_header(cdef, f"emulated CUDA target, options: {options!r}")
    statements = {s.name: s for s in scop.statements}
    fixed_sizes, chosen = _choice_inputs(cdef, sizes, strides, symbolic)
    facts = TilingFacts(cdef, statements, fixed_sizes, chosen, checked, wide, vector_bytes=32, emulated=True)
    bodies = gpu_bodies(low.plan, scop, cdef, sizes, wide, checked, symbolic)
    body = plan_reductions(ir.Block(tuple(launches)), facts)
    body = mark_groups(body, options.vector_width, bodies, chosen, wide)
    text, checks = print_kernel(
        cdef,
        body,
        bodies,
        symbol=symbol,
        params=params,
        sizes=sizes,
        strides=strides,
        wide=wide,
        copy_in=frozenset(zero) & frozenset(wide),
        header=header,
        printer=EmulatedPrinter.factory(**printer_inputs(low.plan)),
        symbolic=symbolic,
    )
    stages = kernel_stages(sched, low.plan.schedule, low.plan.decisions, body)
    shared = tuple(b.name for k in low.plan.kernels for b in k.buffers if b.space == "shared")
    return CpuKernelSource(
        text,
        symbol,
        tuple(params),
        zero,
        checks,
        tuple(wide),
        stages,
        buffers=shared,
        kernel_ir=body,
        sizes=tuple(sorted(symbolic)),
    )


def _emulated_grid(k: GpuKernelPlan) -> tuple[int | str, ...]:
    """The emulation's grid of launch ``k``: each dimension a number, or C text of the kernel's
    size arguments where it is computed per call."""
    if not k.grid_exprs:
        return k.grid
    return tuple(g if e is None else expr(e) for g, e in zip(k.grid, k.grid_exprs))


# ----------------------------------------------------------------------------------------- lowering
def lower_cuda(
    cdef: CheckedDef,
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    options,
    *,
    symbol: str | None = None,
    low: GpuLowering | None = None,
    symbolic: frozenset[str] = frozenset(),
) -> CudaKernelSource:
    """The CUDA source of ``cdef``'s GPU mapping at ``sizes`` for tensors with element ``strides``.

    :arg options: :class:`~tcjit.mapping.option_values.OptionValues` (validated for "cuda").
    :arg symbol: the kernels' name prefix (default ``tc_entry_<name>``); launch ``i`` is ``<symbol>_k<i>``.
    :arg low: ``lower_gpu(cdef, sizes, options, symbolic=symbolic)`` where the caller has it
        already (the static GPU profile reads it too).
    :arg symbolic: sizes the kernels serve at every value (:func:`lower_gpu`): each kernel takes
        them as ``int64_t`` after its other parameters (:attr:`CudaKernelSource.sizes`), and a
        launch whose grid depends on one carries its expression (:attr:`CudaLaunch.grid_exprs`).
    :raises TCInternalError: the mapping put a barrier under control flow that depends on the
        thread ids (not every thread of the block would reach it).
    """
    low = low or lower_gpu(cdef, sizes, options, symbolic=symbolic)
    symbolic = low.symbolic
    scop, _, _, sched, checked, zero = low.prepared
    symbol = symbol or entry_symbol(cdef.name)
    launches = []
    for i, (k, body) in enumerate(low.launches):
        fission(body, k.block)  # checks that every thread of a block reaches each barrier
        launches.append((CudaLaunch(f"{symbol}_k{i}", k.grid, k.block, k.grid_exprs), body))
    params = kernel_params(cdef)
    # Sums the language accumulates wider than their type (float16 sums, long float32 sums) live in
    # a contiguous buffer of the wide type the runtime allocates, fills from the tensor and rounds
    # back into it after the last launch (the CPU kernel does the same with malloc).
    wide = wide_accumulators(cdef, sizes)
    for name, wt in wide.items():
        params.append(CParam(name, "wide", f"{c_compute_type(wt)} *restrict"))
    header = kernel_header(cdef, f"CUDA target, options: {options!r}")
    bodies = gpu_bodies(low.plan, scop, cdef, sizes, wide, checked, symbolic)
    chosen = _choice_inputs(cdef, sizes, strides, symbolic)[1]
    launches = [
        (launch, mark_groups(body, options.vector_width, bodies, chosen, wide)) for launch, body in launches
    ]
    text, checks = print_cuda(
        cdef,
        launches,
        bodies,
        params=params,
        sizes=sizes,
        strides=strides,
        header=header,
        wide=wide,
        printer=CudaPrinter.factory(**printer_inputs(low.plan), readonly=options.use_readonly_cache),
        buffers=[k.buffers for k, _ in low.launches],
        symbolic=symbolic,
    )
    body = ir.Block(
        tuple(ir.Blocks(k.grid, k.block, b, k.buffers) for (k, _), (_, b) in zip(low.launches, launches))
    )
    stages = kernel_stages(sched, low.plan.schedule, low.plan.decisions, body)
    kernels = tuple(k for k, _ in launches)
    return CudaKernelSource(
        text, symbol, kernels, tuple(params), zero, checks, stages, sizes=tuple(sorted(symbolic))
    )


def printer_inputs(plan: GpuPlan) -> dict:
    """What the GPU printers read of ``plan`` besides the kernel IR and the statements' bodies
    (:meth:`~tcjit.mapping.gpu_printer.GpuPrinter.factory`): its buffers by name."""
    return {"buffers": {b.name: b for k in plan.kernels for b in k.buffers}}


def gpu_bodies(
    plan: GpuPlan, scop: Scop, cdef: CheckedDef, sizes, wide, checked, symbolic=frozenset()
) -> dict:
    """The statements' bodies (:func:`~tcjit.mapping.bodies.lower_bodies`) with ``plan``'s promoted
    references and block reductions redirected to their buffers
    (:func:`~tcjit.mapping.bodies.redirect`); ``symbolic``: sizes read from the kernel's size
    arguments."""
    statements = {s.name: s for s in scop.statements}
    numbers = {name: access_numbers(s.source) for name, s in statements.items()}
    promoted = {}
    for acc in scop.accesses:
        p = plan.accesses.get((acc.statement, acc.ref))
        if p is not None:
            promoted[(acc.statement, numbers[acc.statement][id(acc.node)])] = p
    return redirect(lower_bodies(cdef, statements, sizes, wide, checked, symbolic), promoted, plan.reductions)
