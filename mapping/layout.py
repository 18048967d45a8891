"""Element layouts: the strides of contiguous tensors, the elements a strided tensor spans, and
the layouts of a packed input's transposed panel (:class:`Pack`) and of its part buffers
(:class:`Part`), which :mod:`.packing` and :mod:`.parts` decide and the C printer fills; and a
symbolic kernel's extents and strides as C text of its size arguments (:mod:`.symbolic`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from ..polyhedral.lang.sizes import SizeExpr

__all__ = [
    "MAX_SYMBOLIC_SIZE",
    "Pack",
    "Part",
    "admissible",
    "contiguous_layout",
    "contiguous_strides",
    "size_text",
    "size_var",
    "spanned_elements",
    "strides_text",
    "symbolic_in",
]

#: The largest value of a symbolic size a kernel serves (a call beyond gets concrete sizes,
#: :func:`tcjit.dynamic.family_of`): 2**31 - 1, the most blocks a CUDA grid has along x. Every
#: symbolic size lies in ``1..MAX_SYMBOLIC_SIZE`` in isl's context (:mod:`.symbolic`), so a band
#: member mapped to ``blockIdx.x`` has at most one tile per block and the kernel walks it with no
#: grid-stride loop (a loop whose trip count the compiler cannot see cost tensordot 32% and
#: matmul 12% on an H200, ``bench/results/symbolic_sizes_nvidia_h200.md``). Products of two such
#: sizes fit an ``int64_t``.
MAX_SYMBOLIC_SIZE = 2**31 - 1


def admissible(value: int) -> bool:
    """Whether a kernel with symbolic sizes serves ``value`` of one: ``1..MAX_SYMBOLIC_SIZE``."""
    return 1 <= value <= MAX_SYMBOLIC_SIZE


@dataclass(frozen=True)
class Pack:
    """One packed input.

    :ivar tensor: the input's name.
    :ivar dim: the dimension that becomes unit-stride (the one indexed by the output's last index).
    :ivar source: the input's element strides as passed (the copy reads with them).
    :ivar strides: the buffer's element strides, per dimension of the input in its order: dense,
        ``dim`` innermost and the other dimensions outside it in their order.
    :ivar shape: the input's shape.
    :ivar extents: in a kernel with symbolic sizes, the shape as the kernel reads it: an ``int``
        per dimension, C text (:func:`size_text`) where it depends on a symbolic size; empty
        otherwise. Only a tensor whose symbolic dimensions come first, in its own order and in
        the panel's, is packed then (its strides depend on no symbolic size), and only a part
        at a time (:mod:`.parts`).
    :ivar sizes: the variables of the symbolic sizes ``extents`` read (:func:`size_var`).
    """

    tensor: str
    dim: int
    source: tuple[int, ...]
    strides: tuple[int, ...]
    shape: tuple[int, ...]
    extents: tuple[int | str, ...] = ()
    sizes: tuple[str, ...] = ()

    @property
    def bounds(self) -> tuple[int | None, ...]:
        """Each dimension's extent where every call has the same, None where a symbolic size
        sets it."""
        if not self.extents:
            return self.shape
        return tuple(e if isinstance(e, int) else None for e in self.extents)

    @property
    def order(self) -> tuple[int, ...]:
        """The input's dimensions from the buffer's outermost to its innermost."""
        return (*(d for d in range(len(self.shape)) if d != self.dim), self.dim)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a contiguous tensor of ``shape`` (row-major; a zero extent counts as one)."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def contiguous_layout(cdef, sizes: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    """Each tensor of ``cdef`` (a checked definition) at ``sizes``, contiguous: its element strides
    by name, as tcjit allocates outputs and as the pipeline lowers without a call."""
    return {
        t.name: contiguous_strides(tuple(int(s.evaluate(sizes)) for s in t.shape)) for t in cdef.tensor_infos
    }


def spanned_elements(shape: Sequence[int], strides: Sequence[int]) -> int:
    """Elements from a tensor's first element to its last with these ``strides``, both included
    (0 when a dimension is empty): what a buffer holding it needs."""
    if not all(shape):
        return 0
    return 1 + sum((n - 1) * abs(st) for n, st in zip(shape, strides))


@dataclass(frozen=True)
class Part:
    """A packed input filled a part at a time inside the loops that read it (:func:`.parts.place_parts`).

    :ivar tensor: the input's name.
    :ivar shape: the part's extent along each dimension of the input (the largest site's).
    :ivar strides: the part buffer's element strides per dimension of the input: dense, in the
        panel's order (:attr:`Pack.order`), so the packed dimension stays unit-stride.
    """

    tensor: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]


# -------------------------------------------------------------------------------- symbolic sizes
def size_var(name: str) -> str:
    """The C name of symbolic size ``name`` in a kernel (an ``int64_t`` parameter)."""
    return f"tc_z_{name}"


def symbolic_in(expr: SizeExpr, symbolic: Collection[str]) -> bool:
    """Whether size expression ``expr`` depends on a symbolic size."""
    return not expr.symbols().isdisjoint(symbolic)


def size_text(expr: SizeExpr, sizes: Mapping[str, int], symbolic: Collection[str]) -> int | str:
    """``expr``'s value at ``sizes`` when it depends on no symbolic size, else C ``int64_t``
    arithmetic of the kernel's size arguments (:func:`size_var`), the fixed sizes substituted."""
    if not symbolic_in(expr, symbolic):
        return expr.evaluate(sizes)
    fixed = {s: v for s, v in sizes.items() if s not in symbolic}
    return expr.substitute(fixed).to_c(size_var)


def strides_text(info, sizes: Mapping[str, int], symbolic: Collection[str]) -> tuple[int | str, ...]:
    """The contiguous (row-major) element strides of tensor ``info`` (a
    :class:`~tcjit.polyhedral.lang.checked.TensorInfo`), each an ``int`` or, where it depends on
    a symbolic size, C text (:func:`size_text`)."""
    out: list[int | str] = []
    stride: SizeExpr | None = None
    for dim in reversed(info.shape):
        out.append(1 if stride is None else size_text(stride, sizes, symbolic))
        stride = dim if stride is None else stride * dim
    return tuple(reversed(out))
