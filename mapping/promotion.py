"""Memory promotion for the GPU mapping: tensor footprints copied to shared memory per block.

TC's ``promoteToSharedAtDepth`` and PPCG's ``gpu_group`` (notes/polyhedral.md 2(e)), on the tree
:func:`~tcjit.mapping.gpu.map_gpu` has mapped to blocks and threads:

* **Scope.** The subtree below schedule depth ``shared_depth`` (band members from the root;
  default and minimum: the block-mapped members). A band that crosses the depth is split so that
  the depth ends it; a branch reaching the thread mapping (or thread-0 code) first is promoted
  just above it, never below; a sequence or set before the depth promotes each child's subtree
  on its own (never the sequence's children themselves).
* **Groups.** The references of one tensor inside a scope, joined while two of them, one a
  write, touch a common element in one iteration of the scope.
* **Footprint.** Per group, the elements one iteration of the scope (one block's tile) touches,
  as a box: per tensor dimension an offset, an affine function of the outer schedule (the
  lexicographic minimum), a constant stride (``get_range_stride_info``) and a constant size (the
  largest spread, divided by the stride, plus one). A buffer element is ``(index - offset) /
  stride``.
* **Decision.** Groups with more references first; a group is promoted when every reference is
  affine (never a gather), its buffer fits what is left of ``max_shared_memory`` in the kernel,
  and it is reused inside the scope (an element touched by two statement instances or two
  references) or not coalesced (consecutive threads along x do not touch consecutive elements
  of the last dimension).
* **Copies.** Statements of their own, grafted as extension nodes before and after the scope
  (as the mapper's barriers are): ``tc_copy_in_<buffer>`` reads the box clipped to the tensor
  (a group that writes reads exactly the elements it reads, so that no block reads what
  another writes), ``tc_copy_out_<buffer>`` writes back exactly the elements written. Their
  loops run over the tensor's elements, the innermost dimension on ``threadIdx.x`` (coalesced),
  the next ones on y and z, and are unrolled with ``unroll_copy_shared`` up to ``unroll``
  iterations per thread.
* **Barriers.** Between the copies in and the scope, between the scope and the write-backs,
  before the copies in where something ran earlier in the kernel, and after the scope (or its
  write-backs) where it runs again in the block or something follows: no thread overwrites a
  tile another still reads.
* **Buffers.** The innermost dimension of a buffer of rank 2 or more is padded to an odd length
  (shared-memory banks); the printers declare the buffers (``__shared__`` in CUDA, per block and
  filled with NaN in the emulation) and redirect the promoted references to them.

Private promotion (:func:`promote_private`) follows shared promotion, below the thread mapping.
Where each part lives: the two passes here; scopes in :mod:`.promotion_scopes`; groups, buffers and
what both promotions share in :mod:`.promotion_groups`; boxes and clipping in
:mod:`.promotion_footprints`; the shared-memory decisions, copies and barriers in
:mod:`.promotion_shared`; the private ones in :mod:`.promotion_private`; the values handed on in
:mod:`.promotion_types`; grafting in :mod:`.grafts`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import islpy as isl

from ..polyhedral.schedule import node_at
from ..polyhedral.scop import Scop
from . import ir
from .gpu_ir import Copy, Promoted
from .grafts import Graft, apply_grafts
from .promotion_footprints import aff_expr
from .promotion_groups import Scope
from .promotion_private import PrivatePromoter, thread_filters
from .promotion_scopes import find_scopes
from .promotion_shared import SharedPromoter
from .promotion_types import COPY_IN, COPY_OUT, Promotion, TensorInfo, copy_name

__all__ = [
    "COPY_IN",
    "COPY_OUT",
    "Copy",
    "Graft",
    "Promoted",
    "Promotion",
    "TensorInfo",
    "aff_expr",
    "apply_grafts",
    "promote_private",
    "promote_shared",
]

#: The default budget of shared memory per block (bytes), as TC's, and the most static
#: ``__shared__`` arrays may take (more needs dynamic shared memory, which the printers lack).
DEFAULT_MAX_SHARED_MEMORY = 48 * 1024


def _is(node: isl.ScheduleNode, kind) -> bool:
    return node.get_type() == kind


# ------------------------------------------------------------------------------------------- the pass
def promote_shared(
    sched: isl.Schedule,
    kernels: Sequence[tuple[Sequence[int], int, Sequence[int]]],
    scop: Scop,
    fixed: isl.Set,
    options,
    tensors: Mapping[str, TensorInfo],
    ids: tuple[Sequence[str], Sequence[str], str],
    *,
    keep: Sequence[frozenset[str]] = (),
    reserved: Sequence[int] = (),
    unpromoted: frozenset[str] = frozenset(),
) -> tuple[isl.Schedule, Promotion]:
    """Promote to shared memory in every kernel of the mapped tree ``sched`` (module docstring).

    :arg kernels: per kernel, in launch order: the path of its block-mapped band (or of its root
        when it has none), the number of block-mapped members, and its (tightened) block size.
    :arg options: the :class:`~tcjit.mapping.option_values.OptionValues` (``shared_depth``,
        ``max_shared_memory``, ``unroll_copy_shared``, ``unroll``).
    :arg tensors: shape and element size of every tensor.
    :arg ids: the block ids' and thread ids' parameter names and the thread-0 mark's name.
    :arg keep: per kernel, tensors left alone (a block reduction's output).
    :arg reserved: per kernel, shared memory bytes already spent (a block reduction's tree).
    :arg unpromoted: tensors left alone in every kernel (their shape depends on a symbolic size).
    :returns: the tree with the promotion scopes' bands split, and what was promoted (with the
        grafts that add the copies and barriers).
    """
    p = SharedPromoter(scop, fixed, options, tensors, ids)
    p.unpromoted = frozenset(unpromoted)
    if (options.max_shared_memory or 0) > DEFAULT_MAX_SHARED_MEMORY:
        p.decisions.append(
            f"shared: budget {options.max_shared_memory} bytes capped at {DEFAULT_MAX_SHARED_MEMORY}"
            " (static __shared__ arrays)"
        )
    scopes: list[Scope] = []
    for i, (start, n_block, block) in enumerate(kernels):
        depth = n_block if options.shared_depth is None else max(options.shared_depth, n_block)
        if options.shared_depth is not None and options.shared_depth < n_block:
            p.decisions.append(
                f"shared: depth {options.shared_depth} raised to {n_block} (the block mapping) in kernel {i}"
            )
        node = node_at(sched, start)
        if _is(node, isl.schedule_node_type.filter) and (
            _is(node.parent(), isl.schedule_node_type.sequence)
            or _is(node.parent(), isl.schedule_node_type.set)
        ):
            start = [*start, 0]  # below a kernel's filter, never the filter itself
        sched, paths = find_scopes(sched, start, depth, p.thread_ids, p.thread0)
        budget = [min(DEFAULT_MAX_SHARED_MEMORY, options.max_shared_memory or DEFAULT_MAX_SHARED_MEMORY)]
        budget[0] -= reserved[i] if i < len(reserved) else 0
        for path in paths:
            left = keep[i] if i < len(keep) else frozenset()
            scopes.append(p.analyse(node_at(sched, path), i, depth, block, budget, left))
    grafts = [p.graft(scope, kernels[scope.kernel][2]) for scope in scopes if scope.promoted]
    return sched, _promotion(len(kernels), scopes, grafts, p.decisions)


def _promotion(n_kernels: int, scopes: Sequence[Scope], grafts, decisions) -> Promotion:
    """What a pass promoted: the buffers per kernel, the redirected references and the copies."""
    buffers: list[list[ir.Buffer]] = [[] for _ in range(n_kernels)]
    accesses: dict[tuple[str, str], Promoted] = {}
    copies: dict[str, Copy] = {}
    for scope in scopes:
        for d in scope.promoted:
            buffers[scope.kernel].append(d.buffer)
            accesses.update(d.accesses)
            for prefix, what, back in ((COPY_IN, d.copy_in, False), (COPY_OUT, d.copy_out, True)):
                if what is not None:
                    stmt = copy_name(prefix, d.buffer.name)
                    n = what.dim(isl.dim_type.in_)
                    copies[stmt] = Copy(stmt, d.buffer.name, d.buffer.tensor, back, n, d.offsets, d.strides)
    return Promotion(tuple(tuple(b) for b in buffers), accesses, copies, tuple(grafts), tuple(decisions))


# ======================================================================== private (registers)


def promote_private(
    sched: isl.Schedule,
    kernels: Sequence[tuple[Sequence[int], int, Sequence[int]]],
    scop: Scop,
    fixed: isl.Set,
    options,
    tensors: Mapping[str, TensorInfo],
    ids: tuple[Sequence[str], Sequence[str], str],
    shared: Sequence[Sequence[ir.Buffer]] = (),
    unpromoted: frozenset[str] = frozenset(),
) -> tuple[isl.Schedule, Promotion]:
    """Promote per-thread footprints to private buffers (registers) in every kernel of ``sched``
    (after shared promotion, whose tensors ``shared`` per kernel it leaves alone).

    Scopes: below each thread-mapped band, at ``private_depth`` (default and minimum: just below
    the band; a private scope is never above the thread mapping, so it needs no barrier). A group
    is promoted when its references are affine, its subscripts depend only on the scope's
    schedule (the block and thread mapping, outer loops) and on loops isl unrolls, no two threads
    touch one element in one iteration of the block's schedule, one thread reuses an element, and
    its box has at most :data:`~.promotion_private.MAX_PRIVATE_ELEMENTS` elements. The owning
    thread copies in what the group reads and writes back what it writes, around the scope (loops
    unrolled). Tensors in ``unpromoted`` (their shape depends on a symbolic size) are left alone."""
    p = PrivatePromoter(scop, fixed, options, tensors, ids)
    p.unpromoted = frozenset(unpromoted)
    scopes: list[Scope] = []
    for i, (start, _, _) in enumerate(kernels):
        in_shared = {b.tensor for b in shared[i]} if i < len(shared) else set()
        for fpath in thread_filters(node_at(sched, start), p.thread_ids):
            band = node_at(sched, fpath).child(0)  # the thread-mapped band
            below = band.get_schedule_depth() + band.band_n_member()
            depth = below if options.private_depth is None else max(options.private_depth, below)
            if options.private_depth is not None and options.private_depth < below:
                p.decisions.append(
                    f"private: depth {options.private_depth} raised to {below} (below the thread mapping)"
                )
            threads = (
                band.get_prefix_schedule_union_map().project_out_all_params(),
                band.child(0).get_prefix_schedule_union_map().project_out_all_params(),
            )
            sched, paths = find_scopes(sched, [*fpath, 0, 0], depth, p.thread_ids, p.thread0)
            for path in paths:
                scopes.append(p.analyse_private(node_at(sched, path), i, depth, threads, in_shared))
    grafts = [p.private_graft(scope) for scope in scopes if scope.promoted]
    return sched, _promotion(len(kernels), scopes, grafts, p.decisions)
