"""What memory promotion takes and hands on: tensors' shapes, and what a promotion pass did.

:class:`TensorInfo` is what promotion needs of a tensor; :class:`Promotion` is what a pass did: the
buffers per kernel, the references redirected to them (:class:`~tcjit.mapping.gpu_ir.Promoted`),
the copy statements (:class:`~tcjit.mapping.gpu_ir.Copy`, named by :func:`copy_name`) and the
grafts that add them. The printers read the first three from :mod:`.gpu_ir`; all are values,
built once by :mod:`.promotion` and never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import ir
from .gpu_ir import Copy, Promoted
from .grafts import Graft

__all__ = ["COPY_IN", "COPY_OUT", "Promotion", "TensorInfo", "copy_name"]

#: Statement name prefixes of the copies (followed by the buffer's name).
COPY_IN = "tc_copy_in_"
COPY_OUT = "tc_copy_out_"


@dataclass(frozen=True)
class TensorInfo:
    """What promotion needs of a tensor: its shape and the bytes of one element as the kernel
    holds it (a sum accumulated wider than its type: the wide type's)."""

    shape: tuple[int, ...]
    bytes: int


@dataclass(frozen=True)
class Promotion:
    """What promotion did: the buffers of each kernel (in launch order), the redirected
    references by ``(statement, reference id)``, the copy statements by name, the copies and
    barriers still to graft into the tree, and readable decisions."""

    buffers: tuple[tuple[ir.Buffer, ...], ...]
    accesses: Mapping[tuple[str, str], Promoted]
    copies: Mapping[str, Copy]
    grafts: tuple[Graft, ...]
    decisions: tuple[str, ...]


def copy_name(prefix: str, buffer: str) -> str:
    """``tc_copy_in_shared_A`` for the copy into buffer ``tc_shared_A``."""
    return prefix + buffer.removeprefix("tc_")
