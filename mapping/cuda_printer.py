"""The CUDA printer: CUDA C++ for the GPU mapping, from the same kernel IR as the C printer.

:func:`print_cuda` prints each launch of the GPU mapping (:func:`~tcjit.mapping.lower_gpu.lower_cuda`:
the tiled schedule, the mapping of :mod:`.gpu`, one kernel IR per launch over the block and thread
ids ``b0..b2``, ``t0..t2``) as a kernel of its own::

    /* launch 0 of 1: grid 4 x 5 x 1 blocks of 32 x 8 x 1 threads */
    extern "C" __global__ void __launch_bounds__(256)
    tc_matmul_k0(int64_t *__restrict__ tc_errors, const float *__restrict__ t_A, ...)
    {
      const int64_t b0 = blockIdx.x, b1 = blockIdx.y, b2 = blockIdx.z;
      const int64_t t0 = threadIdx.x, t1 = threadIdx.y, t2 = threadIdx.z;
      ...
        /* S1, line 2: C(m, n) +=! A(m, r_k) * B(r_k, n) */
        { const int64_t i_m = ...; const int64_t i_n = ...; const int64_t i_r_k = ...;
          t_C[i_m * 9 + i_n] = t_C[i_m * 9 + i_n] + (t_A[...] * t_B[...]); }

Statements, their value semantics and the bounds checks of gathers are printed by the C printer's
code (:class:`~tcjit.mapping.c_printer.CPrinter`), so both targets compute the same values; the
helpers they call come from :data:`~tcjit.mapping.cuda_prelude.CUDA_PRELUDE`. What differs:

* a ``sync`` mark is ``__syncthreads()`` after its subtree; a block reduction's last steps
  (:class:`~tcjit.mapping.gpu_ir.WarpSteps`) are warp shuffles where the type has them;
* pointers are ``__restrict__`` (inputs ``const``: the read-only data path);
* a sum accumulated wider than its type lives in a buffer parameter ``w_<name>`` (kind ``wide``)
  the runtime allocates, fills and rounds back; no OpenMP, no register tiles (the GPU mapping
  marks no loop);
* a failed bounds check stores its number and subscript into ``tc_errors`` (two int64 slots, zero
  before the first launch) once: the first failing thread to claim slot 0 (``atomicCAS``) writes
  slot 1, so the pair always belongs to one access; other failures are ignored.

The launches of one call run in order on one stream; each takes ``tc_errors`` then the parameters
in :attr:`CudaKernelSource.params` order (tensors as device pointers, scalars by value; half
scalars are ``float``).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.lang.types import ScalarType
from . import ir
from . import ir_values as V
from .c_exprs import BoundsCheck, CParam, c_compute_type, c_float_literal, combine_update
from .cuda_prelude import CUDA_PRELUDE
from .gpu_ir import BLOCK_IDS, SHUFFLED_TYPES, THREAD_IDS, BlockReduction, WarpSteps, evaluate
from .gpu_printer import GpuPrinter
from .layout import size_var

__all__ = [
    "CudaKernelSource",
    "CudaLaunch",
    "CudaPrinter",
    "cuda_type",
    "expr_from_json",
    "expr_json",
    "print_cuda",
]


@dataclass(frozen=True)
class CudaLaunch:
    """One kernel launch: the ``__global__`` function ``name`` on ``grid`` blocks of ``block``
    threads (x, y, z).

    :ivar grid_exprs: a kernel with symbolic sizes: per grid dimension whose block count depends
        on one, that count as an IR expression of the sizes' C names (``tc_z_B``), else None;
        ``grid`` then holds the counts at the representative sizes. Empty: the grid is fixed.
        :meth:`grid_at` gives a call's grid.
    """

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    grid_exprs: tuple[ir.Expr | None, ...] = ()

    @property
    def threads(self) -> int:
        """Threads per block (the kernel's ``__launch_bounds__``)."""
        return math.prod(self.block)

    def grid_at(self, sizes: Mapping[str, int]) -> tuple[int, int, int]:
        """The grid of a call whose sizes are ``sizes`` (by TC name; only the symbolic ones are
        read): ``grid`` where it is fixed. ``CudaLaunch("k", (1, 1, 1), (32, 1, 1),
        (ir.Op("div", (ir.Op("+", (ir.Var("tc_z_B"), ir.Int(31))), ir.Int(32))), None,
        None)).grid_at({"B": 100})`` is ``(4, 1, 1)``."""
        if not self.grid_exprs:
            return self.grid
        env = {size_var(name): value for name, value in sizes.items()}
        x, y, z = (g if e is None else evaluate(e, env) for g, e in zip(self.grid, self.grid_exprs))
        return (x, y, z)

    def to_json(self) -> list:
        """``[name, grid, block]``, and the grid's expressions (:func:`expr_json`) where it has them."""
        out: list = [self.name, list(self.grid), list(self.block)]
        if self.grid_exprs:
            out.append([None if e is None else expr_json(e) for e in self.grid_exprs])
        return out

    @classmethod
    def from_json(cls, data: Sequence) -> CudaLaunch:
        """The launch whose :meth:`to_json` is ``data``."""
        name, grid, block, *rest = data
        exprs = tuple(None if e is None else expr_from_json(e) for e in rest[0]) if rest else ()
        return cls(name, _dims(grid), _dims(block), exprs)


def expr_json(e: ir.Expr) -> object:
    """IR expression ``e`` as a JSON value: an int, a variable's name, or ``[op, *args]``."""
    if isinstance(e, ir.Int):
        return e.value
    if isinstance(e, ir.Var):
        return e.name
    return [e.op, *(expr_json(a) for a in e.args)]


def expr_from_json(v: object) -> ir.Expr:
    """The IR expression whose :func:`expr_json` is ``v``."""
    if isinstance(v, bool) or not isinstance(v, (int, str, list)) or (isinstance(v, list) and not v):
        raise TCInternalError(f"not an IR expression: {v!r}")
    if isinstance(v, int):
        return ir.Int(v)
    if isinstance(v, str):
        return ir.Var(v)
    return ir.Op(str(v[0]), tuple(expr_from_json(a) for a in v[1:]))


@dataclass(frozen=True)
class CudaKernelSource:
    """A CUDA program ready to compile: the kernels of one TC definition at fixed sizes.

    :ivar source: the CUDA C++ text (one translation unit, including nothing).
    :ivar symbol: the common prefix of the kernels' names.
    :ivar kernels: the launches, in the order they must run.
    :ivar params: the parameters after ``tc_errors``, in order, with C spellings (``*restrict``) as in
        :class:`~tcjit.mapping.lower_cpu.CpuKernelSource`.
    :ivar zero_init: outputs and temporaries the runtime must zero before the first launch.
    :ivar checks: the run-time bounds checks, by number - 1.
    :ivar stages: readable intermediate forms (``schedule``, ``tree``, ``decisions``, ``ir``).
    :ivar sizes: the symbolic sizes (:mod:`.symbolic`), which every kernel takes as ``int64_t``
        after ``params``, in this order; a call passes its values of them and launches the
        grids they give (:meth:`CudaLaunch.grid_at`).
    """

    source: str
    symbol: str
    kernels: tuple[CudaLaunch, ...]
    params: tuple[CParam, ...]
    zero_init: tuple[str, ...]
    checks: tuple[BoundsCheck, ...]
    stages: Mapping[str, str] = field(default_factory=dict, compare=False)
    sizes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        """Everything but the source and the stages, as JSON values (:meth:`from_json` reads it)."""
        out = {
            "symbol": self.symbol,
            "kernels": [k.to_json() for k in self.kernels],
            "params": [[p.name, p.kind, p.ctype] for p in self.params],
            "zero_init": list(self.zero_init),
            "checks": [[c.tensor, c.dim, c.size, list(c.span), c.verb] for c in self.checks],
        }
        if self.sizes:
            out["sizes"] = list(self.sizes)
        return out

    @classmethod
    def from_json(cls, data: Mapping, source: str) -> CudaKernelSource:
        """The kernel source whose :meth:`to_json` is ``data`` and whose text is ``source``."""
        return cls(
            source,
            data["symbol"],
            tuple(CudaLaunch.from_json(k) for k in data["kernels"]),
            tuple(CParam(*p) for p in data["params"]),
            tuple(data["zero_init"]),
            tuple(BoundsCheck(t, d, n, tuple(span), verb) for t, d, n, span, verb in data["checks"]),
            sizes=tuple(data.get("sizes", ())),
        )


#: Parameter names: ``t_`` for tensors, ``w_`` for the wide accumulation buffer of a tensor.
_PREFIX = {"tensor": "t", "wide": "w"}


def _dims(v: Sequence[int]) -> tuple[int, int, int]:
    x, y, z = (int(n) for n in v)
    return (x, y, z)


def cuda_type(ctype: str) -> str:
    """A :class:`CParam` C type in CUDA spelling: ``restrict`` becomes ``__restrict__``."""
    return re.sub(r"\brestrict\b", "__restrict__", ctype)


# ------------------------------------------------------------------------------------------ printer
class CudaPrinter(GpuPrinter):
    """The C printer with CUDA's barriers and buffers (``__shared__`` arrays, private arrays as
    local ones); loops are plain (the GPU mapping marks none). With ``readonly``, inputs are
    read through the read-only data cache (``__ldg``)."""

    readonly = False

    def global_read(self, tensor: str, addr: str) -> str:
        text = super().global_read(tensor, addr)
        if self.readonly and tensor in self.cdef.params and self.cdef.tensor(tensor).dtype.kind != "bool":
            return f"__ldg(&{text})"  # no __ldg overload for bool
        return text

    def declarations(self, buffers, indent: str) -> list[str]:
        """A launch's buffers: ``__shared__`` arrays for shared ones, local arrays for private."""
        out = []
        for b in buffers:
            space = "__shared__ " if b.space == "shared" else ""
            out.append(f"{indent}{space}{self.buffer_type(b)} {b.name}{''.join(f'[{n}]' for n in b.shape)};")
        return out

    @staticmethod
    def float_literal(value: float, t: ScalarType) -> str:
        """The C printer's literal, with the value first rounded to ``float`` where ``t`` computes
        in float: the same value the C compiler gives the C printer's longer literal (to nearest),
        without the CUDA compilers' warning about digits the type cannot hold."""
        if c_compute_type(t) == "float" and math.isfinite(value):
            try:
                value = struct.unpack("<f", struct.pack("<f", value))[0]
            except OverflowError:  # rounds past the largest float
                value = math.copysign(math.inf, value)
        text = c_float_literal(value, t)  # no trailing zero digits: 0x1.8p+1, 0x1p-1
        return re.sub(r"^(-?0x[0-9a-f])(?:\.0*|(\.[0-9a-f]*?)0*)p", r"\1\2p", text)

    def node(self, n: ir.Node | None, indent: str) -> None:
        if isinstance(n, ir.Mark) and n.name == ir.SYNC_MARK:
            self.node(n.body, indent)
            self.lines.append(f"{indent}__syncthreads();")
        elif isinstance(n, WarpSteps):
            self.warp_steps(n.reduction, n, indent)
        elif isinstance(n, (ir.Blocks, ir.Threads)):
            raise TCInternalError("the CUDA printer takes one launch's IR, not the emulation's loops")
        else:
            super().node(n, indent)

    def warp_steps(self, red: BlockReduction, n: WarpSteps, indent: str) -> None:
        """The steps of ``red``'s tree below 32 (``n``): one warp per thread row (the
        block's x size is a multiple of 32) adds its 32 partial results with register shuffles,
        where the type has them; else the steps as they are (shared memory and barriers)."""
        et = self.element_type(red.tensor).compute
        ct = c_compute_type(et)
        if ct not in SHUFFLED_TYPES:
            self.node(n.body, indent)
            return
        mine = ["t2", "t1", "t0"]
        self.lines.append(
            f"{indent}if (t0 < 32) {{ /* block reduction {red.number}: the last warp's steps */"
        )
        self.lines.append(f"{indent}  {ct} tc_v = {self.buffer_load(red.part, red.tensor, mine, et)};")
        for s in (16, 8, 4, 2, 1):
            other = f"__shfl_down_sync(0xffffffffu, tc_v, {s})"
            self.lines.append(f"{indent}  tc_v = {combine_update(red.op, 'tc_v', other, et)};")
        store = self.buffer_store(red.part, red.tensor, ["t2", "t1", "0"], "tc_v")
        self.lines.append(f"{indent}  if (t0 == 0) {{ {store} }}")
        self.lines.append(f"{indent}}}")

    def combine_store(self, red: BlockReduction, addr: str, value: str, et: ScalarType) -> str:
        if not red.atomic:
            return super().combine_store(red, addr, value, et)
        lvalue = self.held_lvalue(red.tensor, addr)
        native = _ATOMIC_INTEGERS.get(c_compute_type(et))
        if native is not None:
            return f"atomicAdd(({native} *)&{lvalue}, ({native})({value}));"
        return f"atomicAdd(&{lvalue}, {value});"

    def vector_type(self, name: str, ctype: str, width: int, size: int) -> str:
        """A union of the ``width`` elements with CUDA's built-in type of ``size`` bytes
        (``uint4`` for 16), which the group is read and written through, with the load and store
        intrinsics (``__ldg`` or ``__ldca``, ``__stwb``: default caching): each one instruction
        (``ld.global.nc.v4.u32``, ``st.global.wb.v4.u32``). A plain store of the built-in type
        may be split into its elements by the compiler."""
        return f"union {name}_t {{ {_RAW[size]} raw; {ctype} v[{width}]; }}"

    def vector_read(self, name: str, tensor: str, addr: str, width: int) -> str:
        # inputs through the read-only cache (the kernel never writes them); the rest as usual
        load = "__ldg" if tensor in self.cdef.params else "__ldca"
        return f"{name}.raw = {load}((const {self._raw(tensor, width)} *)&{self.held_lvalue(tensor, addr)});"

    def vector_write(self, name: str, tensor: str, addr: str, width: int) -> str:
        return f"__stwb(({self._raw(tensor, width)} *)&{self.held_lvalue(tensor, addr)}, {name}.raw);"

    def _raw(self, tensor: str, width: int) -> str:
        return _RAW[width * self.cdef.tensor(tensor).dtype.bits // 8]

    def loop(self, n: ir.For, indent: str) -> None:
        if n.degenerate or not n.kinds:
            super().loop(n, indent)
            return
        # No OpenMP, vector or register-tile code on the GPU: any other loop kind runs serially in
        # each thread (unrolled where the mapping asked for it).
        if ir.LoopKind.UNROLL in n.kinds:
            self.lines.append(f"{indent}#pragma unroll")
        self.lines.append(f"{indent}{self.loop_header(n)} {{")
        self.enclosing.append(n.var)
        self.node(n.body, indent + "  ")
        self.enclosing.pop()
        self.lines.append(f"{indent}}}")


#: CUDA's built-in types a vector group of each size in bytes is read and written as.
_RAW = {2: "unsigned short", 4: "unsigned int", 8: "uint2", 16: "uint4"}

#: The integer types ``atomicAdd`` takes for each C compute type (a signed 64-bit sum is added as
#: an unsigned one: two's complement).
_ATOMIC_INTEGERS = {
    "int32_t": "int",
    "uint32_t": "unsigned int",
    "int64_t": "unsigned long long",
    "uint64_t": "unsigned long long",
}

#: ``tc_checked`` for CUDA: the first failing check (by atomicCAS on slot 0) also writes slot 1.
_CHECKED = (
    "/* A subscript checked at run time: outside [0, n), the first failure (the thread that claims",
    " * slot 0) records its check number and the subscript in tc_errors, and element 0 is used. */",
    "static __device__ __forceinline__ int64_t tc_checked(int64_t i, int64_t n, int64_t check,"
    " int64_t *tc_errors) {",
    "  if (i < 0 || i >= n) {",
    "    unsigned long long *slots = (unsigned long long *)tc_errors;",
    "    if (atomicCAS(&slots[0], 0ull, (unsigned long long)check) == 0ull)",
    "      atomicExch(&slots[1], (unsigned long long)i);",
    "    return 0;",
    "  }",
    "  return i;",
    "}",
)


def print_cuda(
    cdef: CheckedDef,
    launches: Sequence[tuple[CudaLaunch, ir.Node]],
    bodies: Mapping[str, V.Body],
    *,
    params: Sequence[CParam],
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    header: str = "",
    wide: Mapping[str, ScalarType] | None = None,
    printer: Callable[..., CudaPrinter] | None = None,
    buffers: Sequence[Sequence[ir.Buffer]] | None = None,
    symbolic: frozenset[str] = frozenset(),
) -> tuple[str, tuple[BoundsCheck, ...]]:
    """The CUDA source of ``launches`` (each a launch and its kernel IR, with block and thread ids
        ``b0..b2``, ``t0..t2`` free and barriers as ``sync`` marks), whose statements' ``bodies`` (their
    references to promoted buffers redirected, :func:`~tcjit.mapping.bodies.redirect`) it prints, and
    its run-time bounds checks.

        Each launch is ``extern "C" __global__ void __launch_bounds__(threads) name(int64_t
        *tc_errors, <params>)``; check numbers run through the whole source (one ``tc_errors``).
        ``printer`` makes the printer (:meth:`GpuPrinter.factory`: promoted buffers), ``buffers``
        lists each launch's buffers, declared at its top. ``symbolic``: sizes every kernel takes
        as ``int64_t`` after ``params`` (sorted, named :func:`~tcjit.mapping.layout.size_var`).
    """
    p = (printer or CudaPrinter)(cdef, bodies, sizes, strides, dict(wide or {}))
    p.symbolic = frozenset(symbolic)
    decl = ", ".join(
        [
            "int64_t *__restrict__ tc_errors",
            *(
                f"{cuda_type(q.ctype)} {_PREFIX[q.kind]}_{q.name}"
                if q.kind != "scalar"
                else f"{q.ctype} s_{q.name}"
                for q in params
            ),
            *(f"int64_t {size_var(name)}" for name in sorted(symbolic)),
        ]
    )
    text: list[str] = []
    for i, (launch, body) in enumerate(launches):
        p.symbol = launch.name
        p.lines = []
        p.node(body, "  ")
        grid = " x ".join(map(str, launch.grid))
        if launch.grid_exprs:
            grid += " at the representative sizes, computed per call"
        block = " x ".join(map(str, launch.block))
        bids = ", ".join(f"{b} = blockIdx.{a}" for b, a in zip(BLOCK_IDS, "xyz"))
        tids = ", ".join(f"{t} = threadIdx.{a}" for t, a in zip(THREAD_IDS, "xyz"))
        sized = (size_var(name) for name in sorted(symbolic))
        unused = " ".join(f"(void){v};" for v in ("tc_errors", *BLOCK_IDS, *THREAD_IDS, *sized))
        text += [
            f"/* launch {i} of {len(launches)}: grid {grid} blocks of {block} threads */",
            f'extern "C" __global__ void __launch_bounds__({launch.threads})',
            f"{launch.name}({decl})",
            "{",
            f"  const int64_t {bids};",
            f"  const int64_t {tids};",
            f"  {unused}",
            *p.declarations(buffers[i] if buffers else (), "  "),
            *p.lines,
            "}",
            "",
        ]
    helper = (*_CHECKED, "") if p.checks else ()  # no unused helper (NVRTC would warn)
    source = "\n".join(["/* Generated by tcjit. */", header.rstrip(), CUDA_PRELUDE, *helper, *text])
    return source, tuple(p.checks)
