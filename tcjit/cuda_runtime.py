"""The CUDA runtime: kernels for CUDA tensors, compiled with NVRTC through CuPy, launched on torch's
current stream.

A GPU is rarely at hand: every CI machine compiles the CUDA source to PTX
(``tests/gpu/test_cuda_compile.py``) and runs the mapping through the emulated target, and the tests
that launch real kernels (``tests/gpu/test_cuda_runtime.py``) skip without a GPU. Where they have run,
and the suite's GPU results, are in bench/results (HISTORY.md, gpu_suite_*.md).

* The pipeline (:mod:`tcjit.pipeline`, the ``cuda`` backend of :mod:`tcjit.targets`) lowers a
  definition with :func:`~tcjit.mapping.lower_gpu.lower_cuda`; :class:`CudaSpecialization`
  loads it with ``cupy.RawModule(code=...)``: CuPy runs NVRTC for the device's architecture
  and keeps the binary in its own kernel cache (``CUPY_CACHE_DIR``), keyed by the source, the
  options and the architecture. tcjit's store keeps the source and the launch table under a key
  that holds the compute capability and CuPy's version, so a new process that finds the kernel
  neither imports isl nor runs NVRTC.
* :class:`CudaSpecialization` launches the kernels in order on ``torch.cuda.current_stream()``,
  with tensors' data pointers; outputs are allocated by torch on the inputs' device. Nothing
  synchronises with the host, so launches can be captured in CUDA graphs, except for kernels with
  run-time bounds checks (gathers), which read the error slots after the launches to raise
  :class:`~tcjit.TCBoundsError`.
* The launches skip CuPy's generic path (``RawKernel.__call__``), which converts every argument by
  its Python type on every launch: a call of a small kernel is mostly host time, and that
  conversion is a part of it that the kernel's parameter list makes unnecessary. At load, the
  kernels' function handles are taken once and :class:`~tcjit.cuda_launch.PreparedArguments`
  makes one ctypes slot per parameter, of its C type; a call writes its pointers and scalars into
  the slots and calls ``cuLaunchKernel`` (``cupy.cuda.driver.launchKernel``) for each kernel on
  torch's raw stream handle (:class:`~tcjit.cuda_launch.DriverLaunches`: one lock per
  specialisation for threads calling it at once; the tensors' device made current only when it is
  not already).
* Sums the language accumulates wider than their type (float16 sums, float32 sums of 16384 terms
  or more) run in a contiguous buffer of the wide type, a copy of the tensor made by torch on the
  stream, rounded back into the tensor after the last launch.
* A kernel with symbolic sizes (:mod:`tcjit.dynamic`) takes their values after its other
  parameters; each call reads them from its inputs' shapes, allocates outputs and temporaries of
  the shapes they give and launches the grids they give
  (:meth:`~tcjit.mapping.cuda_printer.CudaLaunch.grid_at`; the thread blocks are fixed). The
  last call's shapes and grids are kept, so a repeated size computes nothing again.
* Calls never fall back to the CPU: without CuPy, a call on CUDA tensors raises
  :class:`~tcjit.TCCallError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple

import torch

from .binding import Binding, scalar_value
from .cuda_launch import DriverLaunches, PreparedArguments
from .polyhedral.errors import TCCallError
from .runtime import (
    Compiled,
    allocate,
    bounds_error,
    buffer_specs,
    check_aliasing,
    size_sources,
    sized_buffers,
    sized_specs,
)

__all__ = ["NVRTC_OPTIONS", "CudaSpecialization", "cupy_module"]

#: Options CuPy passes to NVRTC (never fast math: NaN, infinities and signed zeros keep their meaning).
NVRTC_OPTIONS = ("--std=c++17",)

_WIDE = {"float": torch.float32, "double": torch.float64}


def cupy_module():
    """CuPy, imported; without it, the :class:`~tcjit.TCCallError` a call on CUDA tensors raises."""
    try:
        import cupy
    except ImportError:
        raise TCCallError(
            "CUDA tensors need CuPy, which is not installed",
            hint="pip install 'tcjit[cuda]' (cupy-cuda12x), or move the tensors to the CPU",
        ) from None
    return cupy


class CudaSpecialization(Compiled):
    """One definition compiled for CUDA at fixed shapes, dtypes, strides and options.

    Calling it launches the kernels: ``spec(*inputs, outputs=None)``.

    :ivar source: the CUDA source. :ivar stages: readable intermediate forms when this process
        lowered it. :ivar from_disk: whether it came from the kernel store.
    """

    def __init__(self, cdef, binding: Binding, lowered, *, layouts: tuple, stages=None, from_disk=False):
        cupy = cupy_module()
        self.cdef = cdef
        self.lowered = lowered
        self.source = lowered.source
        self.stages = dict(stages or {})
        self.from_disk = from_disk
        self.layouts = layouts
        self.device = binding.device
        index = self.device.index or 0
        with cupy.cuda.Device(index):  # the functions are the device's: take them while it is current
            module = cupy.RawModule(code=lowered.source, options=NVRTC_OPTIONS)
            functions = tuple(module.get_function(k.name).kernel for k in lowered.kernels)
        self._module = module
        self.sizes = tuple(lowered.sizes)
        arguments = PreparedArguments(
            ("int64_t *", *(p.ctype for p in lowered.params), *("int64_t" for _ in self.sizes)),
            names=("tc_errors", *(p.name for p in lowered.params), *self.sizes),
        )
        self._launches = DriverLaunches(cupy, functions, lowered.kernels, arguments, index)
        if self.sizes:  # shapes and grids per call, from the sizes its inputs give
            self._size_at = size_sources(cdef)
            self._passed = tuple(cdef.sizes.index(name) for name in self.sizes)  # the kernels' order
            self._buffers = sized_buffers(cdef, (*cdef.outputs, *cdef.temporaries), lowered.zero_init)
            self._last: tuple = (None, (), (), None)  # the last call's sizes, buffer specs and grids
        else:
            self._outputs = buffer_specs(cdef, binding, cdef.outputs, lowered.zero_init)
            self._temporaries = buffer_specs(cdef, binding, cdef.temporaries, lowered.zero_init)
        position = {name: i for i, name in enumerate(cdef.params)}
        plan = []
        for p in lowered.params:
            if p.kind == "wide":  # the wide accumulation buffer of an output or temporary
                where = (
                    ("o", cdef.outputs.index(p.name))
                    if p.name in cdef.outputs
                    else ("t", cdef.temporaries.index(p.name))
                )
                plan.append(("w", where, p.ctype.split()[0]))  # "double *restrict": the element type
            elif p.name in position:
                plan.append(("s" if p.kind == "scalar" else "i", position[p.name], p.ctype))
            elif p.name in cdef.outputs:
                plan.append(("o", cdef.outputs.index(p.name), p.ctype))
            else:
                plan.append(("t", cdef.temporaries.index(p.name), p.ctype))
        self._plan = tuple(plan)

    def run(
        self, inputs: Sequence[object], outputs: Sequence[torch.Tensor] | None
    ) -> tuple[torch.Tensor, ...]:
        """Launch on ``inputs`` whose layout matched; ``outputs`` already checked. Always a tuple."""
        device = self.device
        if self.sizes:
            sizes = [inputs[i].shape[d] for i, d in self._size_at]
            memo = self._last  # one attribute read: another thread may replace it
            if memo[0] != sizes:
                memo = self._last = (sizes, *self._sized(sizes))
            out_specs, temp_specs, grids = memo[1], memo[2], memo[3]
        else:
            sizes, out_specs, temp_specs, grids = None, self._outputs, self._temporaries, None
        if outputs is None:
            outs = allocate(out_specs, device)
        else:
            outs = list(outputs)
            check_aliasing(self.cdef, inputs, outs)
        temps = allocate(temp_specs, device)
        # The error slots are written by bounds checks alone: without checks the kernels get null.
        errors = torch.zeros(2, dtype=torch.int64, device=device) if self.lowered.checks else None
        # The values in the kernels' parameter order (self._plan's, after tc_errors).
        values: list[object] = [0 if errors is None else errors.data_ptr()]
        rounded: list[tuple[torch.Tensor, torch.Tensor]] = []
        for kind, i, ctype in self._plan:
            if kind == "w":  # wide sums: accumulate in a contiguous copy, round back once at the end
                target = outs[i[1]] if i[0] == "o" else temps[i[1]]
                buffer = target.to(dtype=_WIDE[ctype], memory_format=torch.contiguous_format, copy=True)
                rounded.append((target, buffer))
                values.append(buffer.data_ptr())
            elif kind == "i":
                values.append(inputs[i].data_ptr())
            elif kind == "o":
                values.append(outs[i].data_ptr())
            elif kind == "t":
                values.append(temps[i].data_ptr())
            else:
                name = self.cdef.params[i]
                values.append(scalar_value(self.cdef, name, inputs[i], self.cdef.scalars[name].dtype))
        if sizes is not None:
            values += [sizes[k] for k in self._passed]
        self._launches(values, torch.cuda.current_stream(device).cuda_stream, grids)
        for target, buffer in rounded:  # torch's conversion rounds to nearest, as the CPU kernel does
            target.copy_(buffer)
        if errors is not None:  # gathers: the one place a call waits for the device
            number, value = errors.tolist()
            if number:
                at = None if sizes is None else dict(zip(self.cdef.sizes, sizes))
                raise bounds_error(self.cdef, astuple(self.lowered.checks[number - 1]), value, at)
        return tuple(outs)

    def _sized(self, sizes: list[int]) -> tuple:
        """The output and temporary buffers' specs and the launches' grids of a call whose sizes
        have these values (in ``cdef.sizes`` order)."""
        specs = sized_specs(self.cdef, self._buffers, sizes)
        n_out = len(self.cdef.outputs)
        by_name = dict(zip(self.cdef.sizes, sizes))
        grids = tuple(k.grid_at(by_name) for k in self.lowered.kernels)
        return tuple(specs[:n_out]), tuple(specs[n_out:]), grids
