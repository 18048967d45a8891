"""``tcjit.gpu_profile``, the static GPU profile: why a kernel is slow on a GPU, answered without one.

The static profile (:mod:`tcjit.mapping.gpu_profile`) of the ``cuda`` target's lowering, its
registers read from the cubin NVRTC (or nvcc) compiles for the device's architecture. No GPU is
needed, only a CUDA compiler (``pip install nvidia-cuda-nvrtc``, or nvcc on PATH).
"""

from __future__ import annotations

from collections.abc import Mapping

from .mapping.gpu_model import DEVICES, Device
from .mapping.gpu_profile import GpuProfile, LaunchResources, profile_lowering
from .mapping.layout import contiguous_layout
from .polyhedral.errors import TCCallError
from .polyhedral.lang.checked import CheckedDef

__all__ = ["device_named", "gpu_profile", "predicted_seconds", "profile_at"]

#: The architecture each device's code is compiled for.
ARCH = {"h100": "sm_90", "h200": "sm_90"}


def device_named(name: str) -> str:
    """The key of :data:`~tcjit.mapping.gpu_model.DEVICES` for a GPU named ``name`` as
    ``torch.cuda.get_device_name`` says it (``"NVIDIA H200"`` -> ``"h200"``); ``"h100"`` for a
    device the table lacks (the profile's numbers are then the H100's)."""
    lowered = name.lower()
    return next((key for key in DEVICES if key in lowered), "h100")


def _device(gpu: str | Device) -> tuple[Device, str]:
    if isinstance(gpu, Device):
        return gpu, "sm_90"
    if gpu not in DEVICES:
        raise TCCallError(f"no GPU {gpu!r} in the profile's table; it has {', '.join(DEVICES)}")
    return DEVICES[gpu], ARCH[gpu]


def profile_at(
    cdef: CheckedDef,
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]] | None,
    options,
    gpu: str | Device = "h100",
    *,
    using: str | None = None,
) -> GpuProfile:
    """The profile of ``cdef`` at ``sizes`` with ``options`` (:class:`~tcjit.MappingOptions`, or its
    validated values) for tensors of element ``strides`` (None: contiguous) on ``gpu`` (a key of
    :data:`~tcjit.mapping.gpu_model.DEVICES` or a :class:`~tcjit.mapping.gpu_model.Device`).

    :arg using: ``"nvrtc"`` or ``"nvcc"`` to pick the compiler whose cubin gives the registers.
    :raises TCInternalError: no CUDA compiler is available, or the source does not compile.
    """
    from . import nvrtc
    from .mapping.lower_gpu import lower_cuda, lower_gpu

    device, arch = _device(gpu)
    values = options.validate("cuda").values if hasattr(options, "validate") else options
    sizes = {k: int(v) for k, v in sizes.items()}
    if strides is None:
        strides = contiguous_layout(cdef, sizes)
    low = lower_gpu(cdef, sizes, values)
    source = lower_cuda(cdef, sizes, strides, values, low=low)
    cubin = nvrtc.compile_cubin(source.source, name=f"tc_{cdef.name}.cu", arch=arch, using=using)
    resources = {}
    for k in cubin.kernels:
        spills = (k.spill_store_bytes or 0) + (k.spill_load_bytes or 0)
        resources[k.name] = LaunchResources(k.registers or 0, spills, k.stack_frame_bytes or 0)
    version = ".".join(map(str, cubin.version)) if cubin.version else "unknown"
    return profile_lowering(
        cdef,
        sizes,
        strides,
        low,
        resources,
        device,
        checks=bool(source.checks),
        symbol=source.symbol,
        resources_from=f"ptxas of {cubin.compiler} {version}, {arch}",
    )


def predicted_seconds(cdef: CheckedDef, sizes, strides, options, gpu: str | Device = "h100") -> float:
    """The predicted time of a call of ``cdef`` with ``options`` (:func:`profile_at`): what the
    tuner ranks candidates by on a GPU."""
    return profile_at(cdef, sizes, strides, options, gpu).seconds


def gpu_profile(
    kernel, *inputs, gpu: str | Device = "h100", options=None, using: str | None = None
) -> GpuProfile:
    """The static GPU profile of ``kernel`` (from :func:`tcjit.define`) called on ``inputs``: for
    each launch its grid, block, occupancy and limiter, its registers (from the compiled cubin),
    what each warp asks of global and shared memory, a predicted time, the resource that bounds
    it and a diagnosis in words; see :mod:`tcjit.mapping.gpu_profile`.

    Runs nothing and needs no GPU: ``inputs`` may be tensors on any device, ``meta`` tensors
    included (only their shapes, dtypes and strides are read), and the kernel's scalars.

    :arg gpu: the device predicted for, a key of :data:`tcjit.mapping.gpu_model.DEVICES`
        (``"h100"``, ``"h200"``) or a :class:`~tcjit.mapping.gpu_model.Device`.
    :arg options: the :class:`~tcjit.MappingOptions` to profile; default: those a call on the GPU
        would use (tuned ones where the options database has them, else the defaults).
    :returns: a :class:`~tcjit.mapping.gpu_profile.GpuProfile`; ``str(profile)`` is its text,
        ``profile.to_json()`` its JSON.
    :raises TCCallError: the inputs do not fit the kernel, or ``gpu`` is unknown.
    """
    from .binding import bind
    from .kernel import Kernel
    from .pipeline import call_strides

    if not isinstance(kernel, Kernel):
        raise TCCallError(f"gpu_profile takes a Kernel (from tcjit.define), got {type(kernel).__name__}")
    _device(gpu)
    kernel = kernel.variant_for(*inputs)
    binding = bind(kernel.definition, inputs)
    if options is None:
        options = kernel.options_for(*inputs, target="cuda")
    cdef = kernel.definition
    return profile_at(cdef, binding.sizes, call_strides(cdef, binding, None), options, gpu, using=using)
