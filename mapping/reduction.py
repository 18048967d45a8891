"""Block reductions (GPU): a reduction loop on threadIdx.x, combined by a tree in shared memory.

TC's ``detectReductions`` and CUB's ``BlockReduce`` (notes/polyhedral.md 2(d)), written as
statements of our own so that the emulated target runs and race-checks them like any other:

With ``match_library_calls``, a thread-mapped band that holds one reduction update ``U`` only
(``O(o) op= f(o, r)``, ``op`` one of ``+= *= max= min=``, the right-hand side not reading ``O``)
and has a member after its leading coincident ones is mapped differently from :mod:`.gpu`'s
rule: its innermost member (a reduction loop, along which inputs are usually contiguous) goes to
``threadIdx.x``, the innermost coincident members to ``y`` and ``z``. Above the band, a band of
the coincident members (those on ``y``, ``z`` divided by the block size) makes each thread row
``(t1, t2)`` own one output element per iteration; isl checks that it does, and that no two rows
own the same element (else the band is mapped as usual). Around the thread-mapped band, run by
every thread of the block::

    tc_red_init_<k>      acc = identity                  (a register: the private buffer)
    <the band>           acc = acc op f(o, r)            (U's update, redirected to acc)
    tc_red_store_<k>     part[t2][t1][t0] = acc          (the shared buffer)
    tc_red_tree_<k>      barrier; step(2^m); barrier; ... step(1); barrier
    tc_red_combine_<k>   O(o) = O(o) op part[t2][t1][0]  (thread x 0 of the row owning o)

with ``step(s)``: ``if (t0 < s && t0 + s < bx) part[t0] = part[t0] op part[t0 + s]``, ``2^m`` the
largest power of two below ``bx``. The tree is a statement until the kernel IR is built
(:func:`expand_trees`), then explicit steps and barriers: the emulation fissions and race-checks
them; the CUDA printer prints the steps below 32 of a block whose x size is a multiple of 32 as
warp shuffles (``__shfl_down_sync``) instead, where the type has them.

Summation order changes (a tree instead of one loop), as in any parallel reduction: results
agree with the oracle to its reduction tolerance, and are the same in every thread order.

Where bands above the thread-mapped one hold only the update and loop over reduction variables
alone (their prefix still gives each thread row one output: bn_reduce's ``r_n`` and ``r_h``
around the ``r_w`` on threads), the init goes above them and the store, tree and combine after
them: each thread keeps one private accumulator across its whole share, and a block runs one
tree per output it owns (:meth:`~.gpu_reductions.ReductionMapping.accumulation_top`); no barrier
is needed between those loops' iterations, as the update touches the thread's register only.
Otherwise the reduction loop's tiles (the tile loop around the band) are combined one after the
other into ``O`` by the same thread; a reduction with few outputs and a long range wants a long
tile along it (the default options' business). A reduction too large for one block (a sum whose outputs
give fewer blocks than the device has multiprocessors) has its tile loop mapped to blocks as
well, and each block adds its result atomically (``atomicAdd``; the emulation adds plainly, its
blocks run one after the other, and a float sum then depends on the blocks' order, as on a GPU).
"""

from __future__ import annotations

from collections.abc import Mapping

import islpy as isl

from . import ir
from .gpu_ir import BlockReduction

__all__ = ["REDUCE_MARK", "expand_trees"]

#: The mark above a reduction's thread-mapped band (``tc_reduce`` followed by its number).
REDUCE_MARK = "tc_reduce"


def tree_steps(width: int) -> list[int]:
    """The distances of the tree's steps over ``width`` partial results, largest first."""
    out, s = [], 1
    while s < width:
        out.append(s)
        s *= 2
    return out[::-1]


def expand_trees(node: ir.Node, reductions: Mapping[str, BlockReduction]) -> ir.Node:
    """Kernel IR ``node`` with each tree statement (by name in ``reductions``) replaced by its
    steps, a barrier (``sync`` mark) before each; when the width is a multiple of 32, the steps
    below 32 are inside a mark :attr:`BlockReduction.warp` (one warp's work)."""

    def sync() -> ir.Node:
        return ir.Mark(ir.SYNC_MARK, ir.Block(()))

    def tree(red: BlockReduction) -> ir.Node:
        head: list[ir.Node] = []
        warp: list[ir.Node] = []
        for s in tree_steps(red.width):
            if red.width % 32 == 0 and s < 32:
                # the barrier before the warp's first step stays outside its mark
                (warp if warp else head).append(sync())
                warp.append(ir.Run(red.step, (ir.Int(s),)))
            else:
                head += [sync(), ir.Run(red.step, (ir.Int(s),))]
        # a barrier after the last step: the next store must not overwrite what another thread
        # still reads (the warp's shuffles read registers: inside its mark)
        if warp:
            head.append(ir.Mark(red.warp, ir.Block((*warp, sync()))))
        elif head:
            head.append(sync())
        return ir.Block(tuple(head))

    def replace(r: ir.Run) -> ir.Node:
        red = reductions.get(r.statement)
        return tree(red) if red is not None and r.statement == red.tree else r

    return ir.map_runs(node, replace)


# ----------------------------------------------------------------------------------- isl helpers
def single_owner(prefix: isl.UnionMap, rows: isl.UnionMap, out: isl.UnionMap) -> bool:
    """Whether, for every point of the schedule ``prefix``, each thread row (``rows``: instance ->
    ``[t1, t2]``) updates at most one element (``out``: instance -> element) and no element is
    updated by two rows."""
    owner = prefix.flat_range_product(rows).reverse().apply_range(prefix.flat_range_product(out))
    return owner.is_single_valued() and owner.is_injective()


def combine_extension(prefix: isl.UnionMap, rows: isl.UnionMap, out: isl.UnionMap, name: str, ctx):
    """The extension tree of the combine statement ``name``: instances ``name[p.., o..]`` for the
    elements ``o`` updated at schedule point ``p``, a loop over ``o``, on thread ``(0, t1, t2)``
    of the row that owns ``o``."""
    what = isl.Map.from_union_map(prefix.reverse().apply_range(out))
    ext = what.domain_map().reverse().flatten_range().set_tuple_name(isl.dim_type.out, name)
    n_p, rank = what.dim(isl.dim_type.in_), what.dim(isl.dim_type.out)
    dims = [f"p{k}" for k in range(n_p)] + [f"o{k}" for k in range(rank)]
    tup = f"{name}[{', '.join(dims)}]"
    tree = isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext)).child(0)
    if rank:
        band = isl.MultiUnionPwAff.read_from_str(
            ctx, "[" + ", ".join(f"{{ {tup} -> [(o{k})] }}" for k in range(rank)) + "]"
        )
        tree = tree.insert_partial_schedule(band)
    owner = isl.Map.from_union_map(prefix.flat_range_product(out).reverse().apply_range(rows)).set_tuple_name(
        isl.dim_type.in_, name
    )
    eq = isl.Set.read_from_str(ctx, "[t1, t2] -> { [v1, v2] : v1 = t1 and v2 = t2 }")
    owned = owner.intersect_range(eq.align_params(owner.get_space().params())).domain()
    zero = isl.Set.read_from_str(ctx, "[t0] -> { : t0 = 0 }")
    filt = owned.align_params(zero.get_space()).intersect_params(zero.align_params(owned.get_space()))
    return tree.insert_filter(isl.UnionSet.from_set(filt)).root()


def extension(outer: isl.UnionSet, name: str, ctx) -> isl.ScheduleNode:
    """The extension tree of statement ``name[]`` run once per point of ``outer`` by every
    thread."""
    stmt = isl.UnionSet.from_set(isl.Set.read_from_str(ctx, f"{{ {name}[] }}"))
    return isl.ScheduleNode.from_extension(isl.UnionMap.from_domain_and_range(outer, stmt))
