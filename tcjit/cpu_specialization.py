"""A definition compiled to C for the CPU (or the emulated CUDA target), loaded and callable: the
:class:`Specialization` the pipeline returns for CPU tensors. It counts in the process's memory
budget (:mod:`tcjit.memory`), allocates outputs and temporaries, passes each parameter, and turns
the kernel's error slots into exceptions: a failed bounds check, a failed allocation, and on the
emulated target a race or an access outside a tensor.
"""

from __future__ import annotations

import contextvars
import ctypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from .binding import Binding, scalar_value
from .memory import BUDGET, LIBRARY_OVERHEAD
from .polyhedral.errors import TCInternalError
from .polyhedral.lang.checked import CheckedDef
from .polyhedral.names import bounded
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

__all__ = ["EMULATION_ORDER", "CpuKernelMeta", "Specialization"]

#: The order the emulated CUDA target runs blocks and threads in (0 forward, 1 reversed, 2
#: shuffled); set with :func:`tcjit.testing.emulation_order`.
EMULATION_ORDER: contextvars.ContextVar[int] = contextvars.ContextVar("tcjit_emulation_order", default=0)


@dataclass(frozen=True)
class CpuKernelMeta:
    """What a loaded CPU kernel needs besides the code: its symbol, parameters, the buffers the
    runtime zeroes, its run-time bounds checks, its wide accumulators, (emulated target) its
    race-checked shared buffers and its symbolic sizes, whose values it takes after the other
    parameters, as ``int64_t``, in this order. JSON-round-trippable (the kernel store keeps it)."""

    symbol: str
    params: tuple[tuple[str, str, str], ...]
    zero_init: tuple[str, ...]
    checks: tuple[tuple, ...]
    wide: tuple[str, ...] = ()
    buffers: tuple[str, ...] = ()  # the emulated target's race-checked shared buffers
    sizes: tuple[str, ...] = ()  # symbolic sizes (tcjit.dynamic); empty: every size fixed

    @staticmethod
    def from_json(d: Mapping) -> CpuKernelMeta:
        """The meta data of a lowered kernel's ``to_json()``."""
        return CpuKernelMeta(
            d["symbol"],
            tuple(tuple(p) for p in d["params"]),
            tuple(d["zero_init"]),
            tuple(tuple(c) for c in d["checks"]),
            tuple(d.get("wide", ())),
            tuple(d.get("buffers", ())),
            tuple(d.get("sizes", ())),
        )


class Specialization(Compiled):
    """One definition compiled for fixed shapes, dtypes, strides, target and options, or for a
    family of layouts with symbolic sizes (``meta.sizes``; :mod:`tcjit.dynamic`).

    Calling it runs the kernel: ``spec(*inputs, outputs=None)``; the inputs must have the layout it
    was compiled for, or one of its family (a mismatch raises :class:`TCCallError`). With symbolic
    sizes, each call reads the sizes from its inputs' shapes, allocates outputs and temporaries
    of the shapes they give, and passes the symbolic sizes' values after the other arguments.

    :ivar source: the generated C. :ivar stages: readable intermediate forms when this process
        compiled it (empty after a disk hit). :ivar from_disk: whether it came from the kernel store.
    :ivar memory_bytes: what it counts in the process's memory budget (:mod:`tcjit.memory`): its
        library, :data:`~tcjit.memory.LIBRARY_OVERHEAD` and the workspaces it keeps between calls
        on ``torch.get_num_threads()`` threads. It is admitted to the budget when loaded, and
        again when it runs after an eviction.
    """

    def __init__(
        self,
        cdef: CheckedDef,
        binding: Binding,
        meta: CpuKernelMeta,
        blob: bytes,
        source: str,
        *,
        layouts: tuple,
        stages: Mapping[str, str] | None = None,
        from_disk: bool = False,
    ):
        from .cpu_runtime import CpuKernel, load

        self.cdef = cdef
        self.meta = meta
        self.source = source
        self.stages = dict(stages or {})
        self.from_disk = from_disk
        self.layouts = layouts
        self.sizes = meta.sizes
        params = meta.params + tuple((name, "scalar", "int64_t") for name in meta.sizes)
        self._kernel = CpuKernel(load(blob, name=bounded(cdef.name)), meta.symbol, params)
        self._fn = self._kernel.fn
        # the temporaries the kernel takes as parameters (a CPU kernel holds them itself)
        passed = {name for name, _, _ in meta.params}
        temporaries = [name for name in cdef.temporaries if name in passed]
        if meta.sizes:  # shapes per call: (input, dimension) each size is read from, in cdef.sizes order
            self._size_at = size_sources(cdef)
            self._passed = tuple(cdef.sizes.index(name) for name in meta.sizes)  # the C order
            self._last: tuple = (None, (), ())  # the last call's size values and buffer specs
            self._buffers = sized_buffers(cdef, (*cdef.outputs, *temporaries), meta.zero_init)
        else:
            self._outputs = buffer_specs(cdef, binding, cdef.outputs, meta.zero_init)
            self._temporaries = buffer_specs(cdef, binding, temporaries, meta.zero_init)
        index = {name: i for i, name in enumerate(cdef.params)}
        n_out = len(cdef.outputs)
        plan = []
        for name, kind, _ in meta.params:
            if name == "tc_order":  # the emulated CUDA target's block and thread order
                plan.append(("r", 0))
            elif name in index:
                plan.append(("s" if kind == "scalar" else "i", index[name]))
            elif name in cdef.outputs:
                plan.append(("o", cdef.outputs.index(name)))
            else:
                plan.append(("t", n_out + temporaries.index(name)))
        self._plan = tuple(plan)
        # Where each parameter's pointer comes from when all are tensors: (0 inputs, 1 outputs,
        # 2 temporaries; index), else None (scalars, the emulation's order: the general loop)
        pools = {"i": 0, "o": 1, "t": 2}
        self._pointers = (
            tuple((pools[kind], i - n_out if kind == "t" else i) for kind, i in plan)
            if all(kind in pools for kind, _ in plan)
            else None
        )
        self._scalar_types = {
            i: cdef.scalars[name].dtype for name, i in index.items() if name in cdef.scalars
        }
        self.memory_bytes = len(blob) + LIBRARY_OVERHEAD + self._kernel.kept_bytes(torch.get_num_threads())
        self._token = id(self)
        BUDGET.admit(self)

    def release(self) -> None:
        """Free the workspaces the kernel keeps between calls (the budget evicted it); a later
        call allocates them again."""
        self._kernel.release()

    def run(
        self, inputs: Sequence[object], outputs: Sequence[torch.Tensor] | None
    ) -> tuple[torch.Tensor, ...]:
        """Run on ``inputs`` whose layout matched; ``outputs`` already checked. Always a tuple."""
        try:
            _touch(self._token)  # the most recently used in the memory budget
        except KeyError:  # evicted, yet still called (a graph or a handle holds it): counted again
            BUDGET.admit(self)
        if self.sizes:
            values = [inputs[i].shape[d] for i, d in self._size_at]
            memo = self._last  # one attribute read: another thread may replace it
            if memo[0] != values:
                memo = self._last = (values, *self._buffer_specs(values))
            out_specs, temp_specs = memo[1], memo[2]
        else:
            values, out_specs, temp_specs = None, self._outputs, self._temporaries
        if outputs is None:
            outs = allocate(out_specs)
        else:
            outs = list(outputs)
            check_aliasing(self.cdef, inputs, outs)
        temps = allocate(temp_specs)
        if self._pointers is not None:
            pools = (inputs, outs, temps)
            args = [pools[p][i].data_ptr() for p, i in self._pointers]
        else:
            args = self._arguments(inputs, outs, temps)
        if values is not None:
            args += [values[k] for k in self._passed]
        # error slots: bounds checks, a failed allocation of the workspace, the emulation's races
        # (slot 2: the emulated access was outside the tensor)
        errors = (ctypes.c_int64 * 3)()
        self._fn(torch.get_num_threads(), errors, *args)
        if errors[0]:
            sizes = None if values is None else dict(zip(self.cdef.sizes, values))
            self._raise_errors(int(errors[0]), int(errors[1]), int(errors[2]), sizes)
        return tuple(outs)

    def _buffer_specs(self, values: list[int]) -> tuple[tuple, tuple]:
        """What :func:`~tcjit.runtime.allocate` takes for the outputs and the temporaries of a
        call whose sizes have ``values`` (in ``cdef.sizes`` order)."""
        specs = sized_specs(self.cdef, self._buffers, values)
        n_out = len(self.cdef.outputs)
        return tuple(specs[:n_out]), tuple(specs[n_out:])

    def _arguments(self, inputs, outs, temps) -> list:
        """The kernel's arguments after ``nthreads`` and ``errors``: pointers and scalar values."""
        args = []
        for kind, i in self._plan:
            if kind == "i":
                args.append(inputs[i].data_ptr())
            elif kind == "o":
                args.append(outs[i].data_ptr())
            elif kind == "t":
                args.append(temps[i - len(outs)].data_ptr())
            elif kind == "r":
                args.append(EMULATION_ORDER.get())
            else:
                name = self.cdef.params[i]
                args.append(scalar_value(self.cdef, name, inputs[i], self._scalar_types[i]))
        return args

    def _raise_errors(self, code: int, value: int, outside: int = 0, sizes=None) -> None:
        """The error the kernel reported in its error slots (``code`` non-zero; ``outside``: the
        emulated target's access at element offset ``value`` left tensor number ``outside - 1``,
        counting the written tensors, then the inputs; ``sizes``: the call's, with symbolic sizes)."""
        if code == -1:
            raise MemoryError(
                f"{self.cdef.name}: the kernel could not allocate its work buffers (wide accumulators, "
                "packed panels, temporaries)"
            )
        written = (*self.cdef.outputs, *self.cdef.temporaries)
        if outside:
            inputs = [n for n in self.cdef.params if n not in self.cdef.scalars]
            raise TCInternalError(
                f"{self.cdef.name}: the CUDA mapping touches element offset {value} of "
                f"'{(*written, *inputs)[outside - 1]}', outside the tensor (emulated target)"
            )
        if code < 0:  # the emulated target's race check
            index = -2 - code
            what = (
                f"'{written[index]}'"
                if index < len(written)
                else f"the shared-memory buffer '{self.meta.buffers[index - len(written)]}'"
            )
            raise TCInternalError(
                f"{self.cdef.name}: the CUDA mapping lets two threads or blocks touch element offset "
                f"{value} of {what} without a barrier between them (a race; emulated target)"
            )
        self._raise_bounds(code, value, sizes)

    def _raise_bounds(self, number: int, value: int, sizes=None) -> None:
        raise bounds_error(self.cdef, self.meta.checks[number - 1], value, sizes)


_touch = BUDGET.touch
