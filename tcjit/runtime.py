"""What every compiled specialisation shares, whatever its target: the call with a check of the
arguments' layout, the outputs and temporaries it allocates, the aliasing check of ``outputs=``,
and the error of a failed run-time bounds check.

The CPU's :class:`~tcjit.cpu_specialization.Specialization` and the GPU's
:class:`~tcjit.cuda_runtime.CudaSpecialization` derive from :class:`Compiled`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import torch

from .binding import Binding, torch_dtype
from .mapping.layout import contiguous_strides
from .polyhedral.errors import Span, TCBoundsError, TCCallError
from .polyhedral.lang.checked import CheckedDef
from .polyhedral.lang.sizes import SizeExpr, sym

__all__ = [
    "Compiled",
    "allocate",
    "bounds_error",
    "buffer_specs",
    "call_layout",
    "check_aliasing",
    "out_layouts",
    "size_sources",
    "sized_buffers",
    "sized_specs",
]


class Compiled:
    """What every compiled specialisation shares: the call with a check of the arguments' layout.

    A subclass sets :attr:`cdef` and :attr:`layouts` (the inputs' and the outputs' layouts it was
    compiled for: :func:`call_layout`, :func:`out_layouts`; for symbolic sizes, the
    :class:`~tcjit.dynamic.Family` it serves) and :attr:`sizes`, and implements :meth:`run`.

    :ivar sizes: the symbolic sizes, in the order the kernel takes their values (empty: every
        size is fixed).
    """

    cdef: CheckedDef
    layouts: tuple
    sizes: tuple[str, ...] = ()

    def __call__(self, *inputs, outputs: Sequence[torch.Tensor] | None = None):
        if self.sizes:
            self._check_family(inputs, outputs)
        else:
            layouts = tuple(call_layout(x) for x in inputs)
            if layouts != self.layouts[0] or out_layouts(outputs) != self.layouts[1]:
                raise TCCallError(
                    f"{self.cdef.name}: these arguments do not have the shapes, dtypes and strides "
                    "this specialisation was compiled for",
                    hint="call the Kernel itself: it compiles one specialisation per layout",
                )
        outs = self.run(inputs, outputs)
        return outs[0] if len(outs) == 1 else outs

    def _check_family(self, inputs, outputs) -> None:
        """Refuse a call that the family of this specialisation with symbolic sizes does not
        hold (:mod:`tcjit.dynamic`), after checking it as a kernel call does (:func:`bind`)."""
        from .binding import bind
        from .dynamic import family_of

        b = bind(self.cdef, inputs, outputs)
        if family_of(self.cdef, b.sizes, inputs, outputs, self.layouts.symbolic) != self.layouts:
            raise TCCallError(
                f"{self.cdef.name}: these arguments are not of the layouts this specialisation serves "
                f"(sizes {', '.join(sorted(self.sizes))} from 1 to 2**31 - 1 and the tensors they shape "
                "contiguous; the other sizes, shapes, strides and the dtypes as compiled)",
                hint="call the Kernel itself: it finds or compiles the specialisation a call needs",
            )

    def run(
        self, inputs: Sequence[object], outputs: Sequence[torch.Tensor] | None
    ) -> tuple[torch.Tensor, ...]:
        """Run on ``inputs`` whose layout matched (``outputs`` checked likewise). Always a tuple."""
        raise NotImplementedError

    def __copy__(self):
        """The specialisation itself: loaded code is immutable, so copies share it."""
        return self

    def __deepcopy__(self, memo):
        """The specialisation itself (a deep copy of a model holding one shares it)."""
        return self

    def __reduce__(self):
        """Refused plainly: a specialisation is code loaded into this process."""
        raise TCCallError(
            f"{self.cdef.name}: a compiled specialisation (tcjit.compile) cannot be pickled: it is "
            "code loaded into this process",
            hint="pickle the Kernel that tcjit.define returned; it compiles (or loads from the "
            "kernel cache) again where it is unpickled",
        )


def buffer_specs(
    cdef: CheckedDef, binding: Binding, names: Sequence[str], zero_init: Collection[str]
) -> tuple[tuple[tuple[int, ...], tuple[int, ...], torch.dtype, bool], ...]:
    """What :func:`allocate` takes for the outputs or temporaries ``names`` of a call: each one's
    shape, contiguous strides, dtype and whether the kernel needs it zeroed."""
    return tuple(
        (
            tuple(binding.output_shapes[n]),
            contiguous_strides(binding.output_shapes[n]),
            torch_dtype(cdef.tensor(n).dtype),
            n in zero_init,
        )
        for n in names
    )


def allocate(specs: Sequence[tuple], device: torch.device | None = None) -> list[torch.Tensor]:
    """Contiguous tensors for :func:`buffer_specs` (outputs, temporaries) on ``device`` (``None``:
    the CPU). ``torch.empty_strided`` with the strides worked out once: a third cheaper per tensor
    than ``torch.empty`` of a shape, which counts in calls of small kernels."""
    return [
        torch.empty_strided(shape, strides, dtype=dt, device=device).zero_()
        if zero
        else torch.empty_strided(shape, strides, dtype=dt, device=device)
        for shape, strides, dt, zero in specs
    ]


def bounds_error(cdef, check, value: int, sizes: Mapping[str, int] | None = None) -> TCBoundsError:
    """The error of a failed run-time bounds check: ``check`` is ``(tensor, dim, size, span, verb)``
    (a stored check, or the printer's ``BoundsCheck`` as a tuple); ``value`` is the subscript's value.
    A ``size`` of -1 is a dimension of symbolic size: its size is the tensor's at the call's
    ``sizes`` (every size of ``cdef``)."""
    tensor, dim, size, span, verb = check
    if size == -1:
        size = cdef.tensor(tensor).shape[dim].evaluate(sizes) if sizes is not None else "?"
    return TCBoundsError(
        f"subscript {dim} of '{tensor}' {verb} element {value}, outside [0, {size}) "
        f"(dimension {dim} has size {size})",
        source=cdef.source,
        span=Span(*span),
        where=cdef.name,
    )


def call_layout(x) -> tuple:
    """What a compiled specialisation requires of an argument: a tensor's dtype, shape, strides and
    device type (a meta tensor stands for a CPU one), or a scalar's Python type."""
    if isinstance(x, torch.Tensor):  # meta tensors stand for CPU ones (tcjit.compile)
        return (x.dtype, tuple(x.shape), x.stride(), "cpu" if x.device.type == "meta" else x.device.type)
    return (type(x),)


def out_layouts(outputs) -> tuple | None:
    """:func:`call_layout` of each ``outputs=`` tensor, or None without them."""
    if outputs is None:
        return None
    return tuple(call_layout(t) for t in outputs)


def _span(t: torch.Tensor) -> tuple[int, int]:
    if t.numel() == 0:
        return (0, 0)
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    start = t.data_ptr()
    return (start, start + (last + 1) * t.element_size())


def _self_overlapping(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` share memory (an expanded or overlapping view)."""
    dims = sorted((s, n) for n, s in zip(t.shape, t.stride()) if n > 1)
    reach = 0  # offset of the farthest element spanned by the smaller-stride dimensions
    for s, n in dims:
        if s <= reach:
            return True
        reach += (n - 1) * s
    return False


def check_aliasing(cdef: CheckedDef, inputs: Sequence[object], outputs: Sequence[torch.Tensor]) -> None:
    """outputs= tensors must not overlap each other or any input, nor themselves."""
    for name, t in zip(cdef.outputs, outputs):
        if t.numel() > 1 and _self_overlapping(t):
            raise TCCallError(
                f"output '{name}' has elements that share memory (an expanded or overlapping view)",
                hint="pass a tensor with distinct elements, e.g. a fresh torch.empty(...)",
            )
    spans = [(n, _span(t)) for n, t in zip(cdef.outputs, outputs)]
    others = spans + [(p, _span(x)) for p, x in zip(cdef.params, inputs) if isinstance(x, torch.Tensor)]
    for i, (name, (a0, a1)) in enumerate(spans):
        for other, (b0, b1) in others[i + 1 :]:
            if a0 < b1 and b0 < a1:
                raise TCCallError(
                    f"output '{name}' shares memory with '{other}': kernels need outputs that alias nothing",
                    hint="pass a separate output tensor, or copy the input first",
                )


def size_sources(cdef: CheckedDef) -> tuple[tuple[int, int], ...]:
    """``(input, dimension)`` for every size of ``cdef``, in order: the first input dimension
    written as that size, which a call's binding read it from (:func:`tcjit.binding.bind`)."""
    out: dict[str, tuple[int, int]] = {}
    for i, p in enumerate(cdef.ast.params):
        for d, dim in enumerate(p.dims or ()):
            if isinstance(dim.value, str) and dim.value not in out:
                out[dim.value] = (i, d)
    return tuple(out[name] for name in cdef.sizes)


def _dimension(e: SizeExpr, names: tuple[str, ...]) -> int | SizeExpr:
    """A dimension as :func:`sized_specs` reads it: its value if constant (>= 0),
    ``-1 - k`` for size ``names[k]`` itself, else the expression."""
    if e.is_const:
        return e.const
    (name,) = e.symbols() if len(e.symbols()) == 1 else (None,)
    return -1 - names.index(name) if name is not None and e == sym(name) else e


def sized_buffers(cdef: CheckedDef, names: Sequence[str], zero_init: Collection[str]) -> tuple:
    """The outputs or temporaries ``names`` of a kernel with symbolic sizes, as
    :func:`sized_specs` takes them: each one's dimensions (values, ``-1 - k`` for size ``k``
    itself, or expressions), dtype and whether the kernel needs it zeroed."""
    tensors = cdef.tensors
    return tuple(
        (
            tuple(_dimension(e, cdef.sizes) for e in tensors[n].shape),
            torch_dtype(tensors[n].dtype),
            n in zero_init,
        )
        for n in names
    )


def sized_specs(cdef: CheckedDef, buffers: Sequence[tuple], values: Sequence[int]) -> list[tuple]:
    """What :func:`allocate` takes for ``buffers`` (:func:`sized_buffers`) at a call whose sizes
    have ``values`` (in ``cdef.sizes`` order)."""
    sizes = dict(zip(cdef.sizes, values))
    specs = []
    for dims, dt, zero in buffers:
        shape = tuple(
            (d if d >= 0 else values[-1 - d]) if d.__class__ is int else d.evaluate(sizes) for d in dims
        )
        specs.append((shape, contiguous_strides(shape), dt, zero))
    return specs
