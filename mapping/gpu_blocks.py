"""Blocks of the GPU mapping, and the launch bounds: which members go to ``blockIdx``, how many
blocks and threads a launch has.

The leading coincident members of a kernel's outermost band (at most 3, at most as many as
``map_to_blocks`` gives) go to ``blockIdx.x, .y, .z``, outermost to x, as a filter ``member mod
grid_i = b_i`` (with more tiles than blocks, isl's AST walks them in a grid-stride loop); a
block reduction's loop may join them (:meth:`~.gpu_reductions.ReductionMapping.spread_reduction`).
:func:`tighten` then gives the grid and block sizes as the largest ids that run an instance, plus
one, and :func:`launch_context` the context the launch's AST is built in. The filter partitions
the band's instances over the blocks; the sizes leave out only ids that run nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import islpy as isl

from ..polyhedral.errors import TCInternalError
from ..polyhedral.schedule import node_at, node_path
from . import ir
from .gpu_ids import constant_ids, id_filter, ids_function
from .gpu_ir import BLOCK_IDS, THREAD_IDS
from .gpu_reductions import ReductionMapping
from .ir_isl import expr_from_isl
from .tree_queries import leading_coincident
from .tree_queries import statements_of as _names

__all__ = ["BlockMapping", "launch_context", "launch_grid", "tighten"]


def _is(node: isl.ScheduleNode, kind) -> bool:
    return node.get_type() == kind


def _first_band(node: isl.ScheduleNode) -> isl.ScheduleNode | None:
    """The first band at or below ``node`` along single-child nodes (None at a branch or leaf)."""
    while not _is(node, isl.schedule_node_type.band):
        if node.n_children() != 1:
            return None
        node = node.child(0)
    return node


class BlockMapping(ReductionMapping):
    """The block mapping of the GPU mapper (see the module's docstring)."""

    def map_blocks(self, sched, path, grid_opt) -> tuple[isl.Schedule, list[int], list[int] | None]:
        """Map the kernel at ``path``'s outermost band to blocks; the new tree, the per-id option
        sizes used, and the path of the band (None if the kernel has no band)."""
        band = _first_band(node_at(sched, path))
        self.spread = False
        if band is None:
            self.blocks = constant_ids(node_at(sched, path).get_domain())
            self.decisions.append(f"blocks: none (no band) for {_names(node_at(sched, path))}")
            return sched, [], None
        n = min(leading_coincident(band), len(grid_opt), 3)
        self.spread = self.spread_reduction(band, n, grid_opt)
        if self.spread:
            n += 1
        self.blocks = ids_function(band, range(n), grid_opt)
        if n == 0:
            self.decisions.append(f"blocks: none (no coincident outer member) for {_names(band)}")
            return sched, [], node_path(band)
        filt = band.get_domain()
        for i in range(n):
            filt = filt.intersect(id_filter(band, i, grid_opt[i], BLOCK_IDS[i]))
        self.decisions.append(
            f"blocks: members 0..{n - 1} of the band over {_names(band)} -> "
            + ", ".join(f"{'xyz'[i]} ({grid_opt[i]})" for i in range(n))
            + (f" (member {n - 1}: a reduction, its blocks' results added atomically)" if self.spread else "")
        )
        band_path = node_path(band)
        node = band.insert_filter(filt)  # the band is now this filter's child
        return node.get_schedule(), list(grid_opt[:n]), [*band_path, 0]


def launch_context(fixed: isl.Set, grid: Sequence[int], block: Sequence[int]) -> isl.Set:
    """The context a launch's AST is built in: the parameters' values ``fixed`` and
    ``0 <= b_i < grid_i``, ``0 <= t_i < block_i``."""
    names = [*BLOCK_IDS, *THREAD_IDS]
    bounds = [*grid, *block]
    cons = " and ".join(f"0 <= {n} < {b}" for n, b in zip(names, bounds))
    ids = isl.Set.read_from_str(fixed.get_ctx(), f"[{', '.join(names)}] -> {{ : {cons} }}")
    return fixed.align_params(ids.get_space()).intersect(ids.align_params(fixed.get_space()))


def _padded(sizes: Sequence[int]) -> list[int]:
    return [*sizes, *[1] * (3 - len(sizes))]


def tighten(sched, domain, fixed, grid_used, block_used) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The largest block and thread ids that run an instance of ``domain``, plus one, per dim."""
    ids = launch_context(fixed, _padded(grid_used), _padded(block_used))
    smap = sched.get_map().intersect_domain(domain).intersect_params(ids)
    params = smap.domain().params()
    if params.is_empty():
        return (1, 1, 1), (1, 1, 1)
    out = []
    for names, used in ((BLOCK_IDS, grid_used), (THREAD_IDS, block_used)):
        dims = []
        for i, name in enumerate(names):
            if i >= len(used):
                dims.append(1)
                continue
            pos = params.find_dim_by_name(isl.dim_type.param, name)
            if pos < 0:
                dims.append(1)
                continue
            s = params.move_dims(isl.dim_type.set, 0, isl.dim_type.param, pos, 1)
            top = s.dim_max_val(0)
            if not top.is_int():
                raise TCInternalError(f"unbounded {name} in a GPU mapping")
            dims.append(int(top.to_python()) + 1)
        out.append(tuple(dims))
    return out[0], out[1]


def launch_grid(sched, domain, fixed, grid_used, block_used, params) -> tuple[ir.Expr | None, ...]:
    """Per grid dimension (x, y, z), the number of blocks that run an instance of ``domain`` as an
    IR expression of the sizes where it depends on a symbolic one (isl's parametric maximum of the
    block id, plus one, and at least 1), else None: what a launch of a kernel with symbolic sizes
    evaluates at its call's sizes. ``fixed`` leaves the symbolic sizes free; ``params`` names each
    size's value or C variable (:func:`~tcjit.mapping.ir_isl.expr_from_isl`)."""
    ids = launch_context(fixed, _padded(grid_used), _padded(block_used))
    found = sched.get_map().intersect_domain(domain).intersect_params(ids).domain().params()
    ctx = fixed.get_ctx()
    one = isl.PwAff.val_on_domain(fixed, isl.Val.int_from_si(ctx, 1))
    out: list[ir.Expr | None] = []
    for i, name in enumerate(BLOCK_IDS):
        pos = found.find_dim_by_name(isl.dim_type.param, name)
        if i >= len(grid_used) or pos < 0:
            out.append(None)
            continue
        s = found.move_dims(isl.dim_type.set, 0, isl.dim_type.param, pos, 1)
        for other in (*BLOCK_IDS, *THREAD_IDS):  # the block count of this dimension alone
            at = s.find_dim_by_name(isl.dim_type.param, other)
            if at >= 0:
                s = s.project_out(isl.dim_type.param, at, 1)
        top = s.dim_max(0)
        count = top.add(isl.PwAff.val_on_domain(top.domain(), isl.Val.int_from_si(ctx, 1)))
        count = count.union_max(one).gist_params(fixed)
        if count.n_piece() == 1 and count.is_cst():  # (is_cst: every piece constant)
            out.append(None)
            continue
        build = isl.AstBuild.from_context(fixed)
        out.append(expr_from_isl(build.expr_from_pw_aff(count), params))
    return tuple(out)
