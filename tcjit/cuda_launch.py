"""Kernel launches through the driver's ``cuLaunchKernel``, with argument buffers prepared at load.

CuPy's generic launch (``RawKernel.__call__``) converts every argument by its Python type on every
launch: it boxes each value in a holder object of the matching width, gathers the holders'
addresses, then calls ``cuLaunchKernel``. A tcjit kernel's parameters and their C types are known
when it is loaded (:attr:`~tcjit.mapping.cuda_printer.CudaKernelSource.params`), so the conversion
can be done once:

* :class:`PreparedArguments` holds one ctypes slot per parameter, of exactly its C type (a device
  pointer in a ``c_uint64``), and the array of the slots' addresses that ``cuLaunchKernel`` takes
  as ``kernelParams``. A call writes its values into the slots.
* :class:`DriverLaunches` launches a specialisation's kernels in order with
  ``cupy.cuda.driver.launchKernel``, CuPy's thin wrapper of ``cuLaunchKernel``, on a raw stream
  handle (torch's current stream), with the functions' handles taken once at load.

``cuLaunchKernel`` copies the parameter values when it is called, so the slots may be rewritten as
soon as it returns; a lock per specialisation keeps two threads calling it at once from
interleaving their writes and launches. Nothing here imports CuPy: the caller passes the module.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

from .cpu_runtime import SCALAR_CTYPES
from .polyhedral.errors import TCCallError

__all__ = ["DriverLaunches", "PreparedArguments", "slot_type"]


def slot_type(ctype: str) -> type:
    """The ctypes type of a kernel parameter of C type ``ctype``: ``c_uint64`` for a pointer
    (``"const float *restrict"``, ``"int64_t *"``: a device address), else the scalar's own
    (``"int32_t"`` -> ``c_int32``, ``"float"`` -> ``c_float``, ``"bool"`` -> ``c_bool``).

    :raises ValueError: ``ctype`` is neither a pointer nor a scalar type kernels take."""
    if "*" in ctype:
        return ctypes.c_uint64
    try:
        return SCALAR_CTYPES[ctype.strip()]
    except KeyError:
        raise ValueError(f"no kernel parameter has the C type {ctype!r}") from None


_SIGNED = (ctypes.c_int8, ctypes.c_int16, ctypes.c_int32, ctypes.c_int64)


def _bounds(slot: type) -> tuple[int, int] | None:
    """The values an integer slot holds without wrapping; ``None`` for float and bool slots."""
    if slot in (ctypes.c_float, ctypes.c_double, ctypes.c_bool):
        return None
    bits = 8 * ctypes.sizeof(slot)
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if slot in _SIGNED else (0, (1 << bits) - 1)


class PreparedArguments:
    """The argument buffer of a kernel: one slot per parameter and their addresses, made once.

    ``PreparedArguments(("int64_t *", "const float *restrict", "int32_t"))`` has a ``c_uint64``,
    a ``c_uint64`` and a ``c_int32`` slot; :attr:`kernel_params` is the address of a ``void *[3]``
    holding their addresses, as ``cuLaunchKernel`` takes it. :meth:`write` stores a call's values.

    An integer value that does not fit its slot (a pointer outside ``[0, 2**64)``, ``2**31`` for an
    ``int32_t``) raises :class:`OverflowError` instead of wrapping. A float slot takes any number
    and rounds it as a C conversion does (to infinity beyond the type's range); a bool slot takes
    a value's truth.

    :ivar ctypes: the parameters' C types, in order. :ivar names: their names, for messages.
    :ivar slots: the ctypes objects, in order. :ivar kernel_params: the address of the array of
        the slots' addresses (an int: ``kernelParams`` of ``cuLaunchKernel``).
    """

    def __init__(self, ctypes_: Sequence[str], *, names: Sequence[str] | None = None) -> None:
        self.ctypes = tuple(ctypes_)
        self.names = tuple(names) if names is not None else tuple(f"#{i}" for i in range(len(self.ctypes)))
        if len(self.names) != len(self.ctypes):
            raise ValueError(f"{len(self.names)} names for {len(self.ctypes)} parameters")
        types = [slot_type(c) for c in self.ctypes]
        self.slots = tuple(t() for t in types)
        self._bounds = tuple(_bounds(t) for t in types)
        # The array holds the slots' addresses; self.slots keeps the slots alive as long as it.
        self._array = (ctypes.c_void_p * len(self.slots))(*(ctypes.addressof(s) for s in self.slots))
        self.kernel_params = ctypes.addressof(self._array)

    def __len__(self) -> int:
        return len(self.slots)

    def write(self, values: Sequence[Any]) -> None:
        """Store ``values`` (one per parameter, in order: ints for pointers and integers, numbers
        for floats) into the slots. Not thread-safe: :class:`DriverLaunches` holds a lock."""
        if len(values) != len(self.slots):
            raise ValueError(f"{len(values)} values for {len(self.slots)} kernel parameters")
        for slot, bounds, value in zip(self.slots, self._bounds, values):
            if bounds is not None and not bounds[0] <= value <= bounds[1]:
                i = self.slots.index(slot)
                raise OverflowError(
                    f"kernel parameter {self.names[i]} ({self.ctypes[i]}) cannot hold {value!r}"
                )
            slot.value = value


#: Per thread, the devices whose context this thread has made current (see DriverLaunches).
_THREAD = threading.local()


class DriverLaunches:
    """A loaded specialisation's kernels, launched in order with one :class:`PreparedArguments`.

    :arg cupy: the CuPy module (imported by the caller: this module never imports it).
    :arg kernels: CuPy ``Function`` objects (``RawModule.get_function(name).kernel``, taken while
        ``device`` was current), one per launch; they keep their module loaded.
    :arg launches: the launches, in order: each has ``name``, ``grid`` and ``block`` (3 ints each).
    :arg arguments: every kernel's parameters (the kernels of one specialisation share them).
    :arg device: the CUDA device index the kernels were loaded on.
    """

    def __init__(
        self, cupy, kernels: Sequence[Any], launches: Sequence[Any], arguments: PreparedArguments, device: int
    ) -> None:
        self._driver = cupy.cuda.driver
        self._runtime = cupy.cuda.runtime
        self._device_scope = cupy.cuda.Device
        self._kernels = tuple(kernels)
        self._table = tuple(
            (k.ptr, *launch.grid, *launch.block, launch.name)
            for k, launch in zip(self._kernels, launches, strict=True)
        )
        self.arguments = arguments
        self.device = device
        self._lock = threading.Lock()

    def __call__(
        self, values: Sequence[Any], stream: int, grids: Sequence[Sequence[int]] | None = None
    ) -> None:
        """Write ``values`` (:meth:`PreparedArguments.write`) and launch every kernel on the raw
        stream handle ``stream`` (0: the legacy default stream), on :attr:`device`; ``grids``:
        each launch's grid for this call (a kernel with symbolic sizes), else the launches' own.

        :raises TCCallError: the driver refused a launch (its message and the kernel's name)."""
        table = self._table
        if grids is not None:
            table = tuple(
                (f, *grid, bx, by, bz, name) for (f, _, _, _, bx, by, bz, name), grid in zip(table, grids)
            )
        with self._lock:
            self.arguments.write(values)
            if self._runtime.getDevice() == self.device:
                self._launch(stream, table)
            else:  # the kernels run in their device's context: make it current for the launches
                with self._device_scope(self.device):
                    self._launch(stream, table)

    def _launch(self, stream: int, table: tuple) -> None:
        ready = getattr(_THREAD, "devices", None)
        if ready is None:
            ready = _THREAD.devices = set()
        if self.device not in ready:
            # cuLaunchKernel needs a context current on the calling thread; the runtime API makes
            # the device's primary context current on a thread's first call that needs one
            # (CuPy's own launches do the same), and a thread that only ran torch code may not
            # have made that call yet.
            self._runtime.memGetInfo()
            ready.add(self.device)
        params = self.arguments.kernel_params
        launch = self._driver.launchKernel
        for f, gx, gy, gz, bx, by, bz, name in table:
            try:
                launch(f, gx, gy, gz, bx, by, bz, 0, stream, params, 0)
            except self._driver.CUDADriverError as e:
                raise TCCallError(
                    f"CUDA could not launch kernel {name} (grid {gx} x {gy} x {gz}, block "
                    f"{bx} x {by} x {bz}): {e}",
                    hint="the launch's block may need more registers or threads than the device "
                    "has: try smaller map_to_threads, or report it if the options are the defaults",
                ) from e
