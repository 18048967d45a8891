"""The targets a kernel compiles for, one backend object each: ``cpu``, ``cuda-emulated`` and
``cuda`` (:data:`TARGETS`, by name; the names are :data:`tcjit.mapping.option_values.TARGETS`).

A backend knows the devices its tensors live on, how it identifies itself in the cache key
(toolchain and architecture), how the mapping lowers a definition for it (``mapping/``: the CPU's
C, the emulated CUDA mapping's C, the CUDA source), how the result is built into what the kernel
store keeps, and how a stored or fresh build is loaded into a callable specialisation. Adding a
target means one module per layer (its printer in ``mapping/``, its build and load in ``tcjit/``)
and one backend here; :mod:`tcjit.pipeline` composes them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

from .binding import Binding
from .polyhedral.errors import TCCallError
from .polyhedral.lang.checked import CheckedDef
from .polyhedral.names import bounded
from .runtime import Compiled

__all__ = ["TARGETS", "Target"]

#: Reads a file of a build by name (a stored entry's, or the fresh build's).
Read = Callable[[str], bytes]


class Target:
    """One target: what the pipeline asks of it.

    :ivar name: the target's name (``target=`` of a call).
    :ivar device: the device type its tensors live on.
    :ivar checked: the file of a build that the store checks and :meth:`load` loads, and the key of
        its sha256 in the stored metadata.
    """

    name: str = ""
    device: str = "cpu"
    checked: tuple[str, str] = ("", "")

    def check_device(self, binding: Binding) -> None:
        """Refuse a call whose tensors are not on this target's device."""
        if binding.device.type != self.device:
            raise TCCallError(
                f"target {self.name!r} runs CPU tensors; these are on {binding.device}",
                hint="target='cuda' (or None) for CUDA tensors",
            )

    def identity(self, binding: Binding) -> str:
        """The target as the cache key names it (with its architecture where builds depend on it)."""
        return self.name

    def lower(
        self,
        cdef: CheckedDef,
        sizes: Mapping[str, int],
        strides: Mapping[str, tuple[int, ...]],
        values,
        symbolic: frozenset[str] = frozenset(),
    ):
        """The mapping's lowering for this target: the kernel source with its ``stages``.

        ``symbolic``: sizes the kernel must serve at every admissible value, 1 to 2**31 - 1
        (``mapping/symbolic.py``);
        ``sizes`` then holds the representative values its choices are made at, and ``strides``
        the strides at those sizes (tensors whose shape depends on a symbolic size are contiguous).
        """
        raise NotImplementedError

    def build(self, cdef: CheckedDef, lowered) -> tuple[dict[str, bytes], dict]:
        """What the store keeps of a lowered kernel: its files and its metadata."""
        raise NotImplementedError

    def load(
        self,
        cdef: CheckedDef,
        binding: Binding,
        data: bytes,
        metadata: Mapping,
        read: Read,
        *,
        layouts: tuple,
        stages: Mapping[str, str] | None = None,
        from_disk: bool = False,
    ) -> Compiled:
        """The specialisation of a build: ``data`` is the checked file (:attr:`checked`), ``read``
        gives the others."""
        raise NotImplementedError


class CpuTarget(Target):
    """C for the CPU, compiled by the system C compiler with OpenMP, loaded with ctypes."""

    name = "cpu"
    checked = ("kernel.so", "so_sha256")

    def lower(self, cdef, sizes, strides, values, symbolic=frozenset()):
        from .cpu_runtime import vector_bytes
        from .mapping.lower_cpu import lower_cpu

        return lower_cpu(cdef, dict(sizes), strides, values, vector_bytes=vector_bytes(), symbolic=symbolic)

    def build(self, cdef, lowered):
        from .cpu_runtime import compile_c

        blob = compile_c(lowered.source, name=bounded(cdef.name))
        files = {"kernel.so": blob, "kernel.c": lowered.source.encode("utf-8")}
        return files, {"kernel": lowered.to_json(), "so_sha256": hashlib.sha256(blob).hexdigest()}

    def load(self, cdef, binding, data, metadata, read, *, layouts, stages=None, from_disk=False):
        from .cpu_specialization import CpuKernelMeta, Specialization

        meta = CpuKernelMeta.from_json(metadata["kernel"])
        source = read("kernel.c").decode("utf-8")
        return Specialization(
            cdef, binding, meta, data, source, layouts=layouts, stages=stages, from_disk=from_disk
        )


class EmulatedTarget(CpuTarget):
    """The CUDA mapping printed as C that runs blocks and threads on the CPU, in an order the call
    chooses, with race and bounds checks (``mapping/emulation.py``)."""

    name = "cuda-emulated"

    def lower(self, cdef, sizes, strides, values, symbolic=frozenset()):
        from .mapping.lower_gpu import lower_emulated

        return lower_emulated(cdef, dict(sizes), strides, values, symbolic=symbolic)


class CudaTarget(Target):
    """CUDA source for NVIDIA GPUs, compiled by NVRTC through CuPy when loaded."""

    name = "cuda"
    device = "cuda"
    checked = ("kernel.cu", "cu_sha256")

    def check_device(self, binding):
        if binding.device.type != "cuda":
            raise TCCallError(
                f"target 'cuda' needs CUDA tensors; these are on {binding.device}",
                hint="move the tensors to a GPU, or target='cuda-emulated' runs the CUDA mapping on the CPU",
            )

    def identity(self, binding):
        import torch

        from .cuda_runtime import cupy_module

        major, minor = torch.cuda.get_device_capability(binding.device)
        return f"cuda:sm_{major}{minor}:cupy-{cupy_module().__version__}"

    def lower(self, cdef, sizes, strides, values, symbolic=frozenset()):
        from .mapping.lower_gpu import lower_cuda

        return lower_cuda(cdef, dict(sizes), strides, values, symbolic=symbolic)

    def build(self, cdef, lowered):
        source = lowered.source.encode("utf-8")
        return {"kernel.cu": source}, {
            "cuda": lowered.to_json(),
            "cu_sha256": hashlib.sha256(source).hexdigest(),
        }

    def load(self, cdef, binding, data, metadata, read, *, layouts, stages=None, from_disk=False):
        from .cuda_runtime import CudaSpecialization
        from .mapping.cuda_printer import CudaKernelSource

        lowered = CudaKernelSource.from_json(metadata["cuda"], data.decode("utf-8"))
        return CudaSpecialization(cdef, binding, lowered, layouts=layouts, stages=stages, from_disk=from_disk)


#: Every target, by name.
TARGETS: Mapping[str, Target] = {t.name: t for t in (CpuTarget(), EmulatedTarget(), CudaTarget())}
