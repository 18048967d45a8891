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
* :class:`CudaSpecialization` launches the kernels in order on ``torch.cuda.current_stream()``
  (through ``cupy.cuda.ExternalStream``), with tensors' data pointers; outputs are allocated by
  torch on the inputs' device. Nothing synchronises with the host, so launches can be captured in
  CUDA graphs, except for kernels with run-time bounds checks (gathers), which read the error
  slots after the launches to raise :class:`~tcjit.TCBoundsError`.
* Sums the language accumulates wider than their type (float16 sums, float32 sums of 16384 terms
  or more) run in a contiguous buffer of the wide type, a copy of the tensor made by torch on the
  stream, rounded back into the tensor after the last launch.
* Calls never fall back to the CPU: without CuPy, a call on CUDA tensors raises
  :class:`~tcjit.TCCallError`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import astuple

import numpy as np
import torch

from .binding import Binding, scalar_value
from .polyhedral.errors import TCCallError
from .runtime import Compiled, allocate, bounds_error, buffer_specs, check_aliasing

__all__ = ["NVRTC_OPTIONS", "CudaSpecialization", "cupy_module"]

#: Options CuPy passes to NVRTC (never fast math: NaN, infinities and signed zeros keep their meaning).
NVRTC_OPTIONS = ("--std=c++17",)

_WIDE = {"float": torch.float32, "double": torch.float64}

_NUMPY = {
    "bool": np.bool_,
    "uint8_t": np.uint8,
    "uint16_t": np.uint16,
    "uint32_t": np.uint32,
    "uint64_t": np.uint64,
    "int8_t": np.int8,
    "int16_t": np.int16,
    "int32_t": np.int32,
    "int64_t": np.int64,
    "float": np.float32,
    "double": np.float64,
}


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


_STREAMS: dict[tuple[int, int], object] = {}


def _cupy_stream(cupy, device: int, handle: int):
    """CuPy's view of the torch stream ``handle`` on ``device``, made once per stream and reused (a
    call's launches go on torch's current stream; making the view costs more than a launch)."""
    stream = _STREAMS.get((device, handle))
    if stream is None:
        with warnings.catch_warnings():  # CuPy 14 deprecates ExternalStream for Stream.from_external
            warnings.simplefilter("ignore", DeprecationWarning)
            stream = cupy.cuda.ExternalStream(handle, device)
        _STREAMS[(device, handle)] = stream
    return stream


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
        with cupy.cuda.Device(self.device.index or 0):
            module = cupy.RawModule(code=lowered.source, options=NVRTC_OPTIONS)
            self._functions = tuple(module.get_function(k.name) for k in lowered.kernels)
        self._module = module
        self._outputs = buffer_specs(cdef, binding, cdef.outputs, lowered.zero_init)
        self._temporaries = buffer_specs(cdef, binding, cdef.temporaries, lowered.zero_init)
        index = {name: i for i, name in enumerate(cdef.params)}
        plan = []
        for p in lowered.params:
            if p.kind == "wide":  # the wide accumulation buffer of an output or temporary
                where = (
                    ("o", cdef.outputs.index(p.name))
                    if p.name in cdef.outputs
                    else ("t", cdef.temporaries.index(p.name))
                )
                plan.append(("w", where, p.ctype.split()[0]))  # "double *restrict": the element type
            elif p.name in index:
                plan.append(("s" if p.kind == "scalar" else "i", index[p.name], p.ctype))
            elif p.name in cdef.outputs:
                plan.append(("o", cdef.outputs.index(p.name), p.ctype))
            else:
                plan.append(("t", cdef.temporaries.index(p.name), p.ctype))
        self._plan = tuple(plan)

    def run(
        self, inputs: Sequence[object], outputs: Sequence[torch.Tensor] | None
    ) -> tuple[torch.Tensor, ...]:
        """Launch on ``inputs`` whose layout matched; ``outputs`` already checked. Always a tuple."""
        cupy = cupy_module()
        device = self.device
        if outputs is None:
            outs = allocate(self._outputs, device)
        else:
            outs = list(outputs)
            check_aliasing(self.cdef, inputs, outs)
        temps = allocate(self._temporaries, device)
        # The error slots are written by bounds checks alone: without checks the kernels get null.
        errors = torch.zeros(2, dtype=torch.int64, device=device) if self.lowered.checks else None
        args: list[object] = [np.uint64(0 if errors is None else errors.data_ptr())]
        rounded: list[tuple[torch.Tensor, torch.Tensor]] = []
        for kind, i, ctype in self._plan:
            if kind == "w":  # wide sums: accumulate in a contiguous copy, round back once at the end
                target = outs[i[1]] if i[0] == "o" else temps[i[1]]
                buffer = target.to(dtype=_WIDE[ctype], memory_format=torch.contiguous_format, copy=True)
                rounded.append((target, buffer))
                args.append(np.uint64(buffer.data_ptr()))
            elif kind == "i":
                args.append(np.uint64(inputs[i].data_ptr()))
            elif kind == "o":
                args.append(np.uint64(outs[i].data_ptr()))
            elif kind == "t":
                args.append(np.uint64(temps[i].data_ptr()))
            else:
                name = self.cdef.params[i]
                value = scalar_value(self.cdef, name, inputs[i], self.cdef.scalars[name].dtype)
                args.append(_NUMPY[ctype](value))
        index = device.index or 0
        stream = _cupy_stream(cupy, index, torch.cuda.current_stream(device).cuda_stream)
        with cupy.cuda.Device(index), stream:
            for fn, launch in zip(self._functions, self.lowered.kernels):
                fn(launch.grid, launch.block, tuple(args))
        for target, buffer in rounded:  # torch's conversion rounds to nearest, as the CPU kernel does
            target.copy_(buffer)
        if errors is not None:  # gathers: the one place a call waits for the device
            number, value = errors.tolist()
            if number:
                raise bounds_error(self.cdef, astuple(self.lowered.checks[number - 1]), value)
        return tuple(outs)
