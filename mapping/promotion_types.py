"""What memory promotion takes and hands on: tensors' shapes, redirected references, copy statements.

:class:`TensorInfo` is what promotion needs of a tensor; :class:`Promotion` is what a pass did: the
buffers per kernel, the references redirected to them (:class:`Promoted`), the copy statements
(:class:`Copy`, named by :func:`copy_name`) and the grafts that add them. The printers read these;
they are values, built once by :mod:`.promotion` and never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import ir
from .grafts import Graft

__all__ = ["COPY_IN", "COPY_OUT", "Copy", "Promoted", "Promotion", "TensorInfo", "copy_name"]

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
class Promoted:
    """A reference redirected to a buffer: element ``k`` of the buffer is ``(subscript_k -
    offsets[k]) / strides[k]``, ``offsets`` over the statement's dimensions (``Var("i_<dim>")``)."""

    buffer: str
    offsets: tuple[ir.Expr, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class Copy:
    """A copy statement: its instance ``[s_0 .. s_{d-1}, a_0 .. a_{r-1}]`` copies element ``a`` of
    ``tensor`` in the scope iteration ``s`` to (``write_back`` False) or from the buffer, at
    ``(a_k - offsets[k]) / strides[k]``, ``offsets`` over ``Var("s<k>")``."""

    statement: str
    buffer: str
    tensor: str
    write_back: bool
    prefix: int
    offsets: tuple[ir.Expr, ...]
    strides: tuple[int, ...]


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
