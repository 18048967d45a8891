"""What each warp of a launch asks of memory (:mod:`tcjit.mapping.gpu_access`), on small kernels
whose counts can be worked out by hand, and on the pathological mappings the static GPU profile
exists to flag: one block, two threads per block, ``threadIdx.x`` along a strided access, a
shared buffer read with bank conflicts, a serial chain of atomic additions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import tcjit
from tcjit import suite
from tcjit.mapping import ir
from tcjit.mapping import ir_values as V
from tcjit.mapping.accumulation import wide_accumulators
from tcjit.mapping.defaults import row_reduction_options
from tcjit.mapping.gpu_access import access_profile, evaluate, trip_count
from tcjit.mapping.layout import contiguous_strides
from tcjit.mapping.lower_gpu import gpu_bodies, lower_gpu
from tcjit.mapping.options import MappingOptions
from tcjit.polyhedral.lang.types import SCALAR_TYPES

F32 = SCALAR_TYPES["float32"]
COPY = "def c(float(N,M) I) -> (O) { O(i, j) = I(i, j) }"
TRANSPOSE = "def t(float(N,M) I) -> (O) { O(j, i) = I(i, j) }"


def _profile(src: str, sizes: dict, options: MappingOptions, entry: str | None = None):
    cdef = tcjit.define(src, name=entry).definition
    low = lower_gpu(cdef, sizes, options.validate("cuda").values)
    wide = wide_accumulators(cdef, sizes)
    bodies = gpu_bodies(low.plan, low.prepared.scop, cdef, sizes, wide, low.prepared.checked)
    strides = {
        t.name: contiguous_strides(tuple(int(s.evaluate(sizes)) for s in t.shape)) for t in cdef.tensor_infos
    }
    return access_profile(cdef, low.launches, bodies, sizes, strides, wide)


def _access(launch, tensor: str, kind: str):
    (a,) = [a for a in launch.accesses if a.tensor == tensor and a.kind == kind]
    return a


def _options(*threads: int, blocks=(2, 2), tile=(32, 32)) -> MappingOptions:
    return MappingOptions("naive").tile(*tile).map_to_blocks(*blocks).map_to_threads(*threads)


def test_a_coalesced_copy_asks_four_sectors_of_one_line_per_request() -> None:
    (k,) = _profile(COPY, {"N": 64, "M": 64}, _options(32, 8))
    assert (k.grid, k.block, k.warps, k.barriers, k.atomics) == ((2, 2, 1), (32, 8, 1), 8, 0, 0)
    for kind, tensor in (("read", "I"), ("write", "O")):
        a = _access(k, tensor, kind)
        assert (a.space, a.stride, a.sectors, a.lines, a.lanes) == ("global", 1, 4, 1, 32)
        assert a.requests == 4 == k.executions["S0"]  # 32 x 32 tile, 32 x 8 threads: 4 rows each


def test_thread_x_along_a_strided_access_touches_a_line_per_lane() -> None:
    (k,) = _profile(TRANSPOSE, {"N": 64, "M": 64}, _options(32, 8))
    read = _access(k, "I", "read")
    assert (read.stride, read.sectors, read.lines) == (64, 32, 32)  # lanes 256 bytes apart
    assert _access(k, "O", "write").sectors == 4


def test_a_strided_access_of_two_elements_spans_two_lines() -> None:
    src = "def d(float(N,M) I) -> (O) { O(i, j) = I(i, 2 * j) }"
    (k,) = _profile(src, {"N": 8, "M": 128}, _options(32, tile=(1, 32), blocks=(8, 2)))
    read = _access(k, "I", "read")
    assert (read.stride, read.sectors, read.lines) == (2, 8, 2)  # 32 lanes x 8 bytes = 256 bytes


def test_the_transpose_through_shared_memory_is_coalesced_and_conflict_free() -> None:
    (k,) = _profile(TRANSPOSE, {"N": 64, "M": 64}, _options(32, 8).use_shared_memory(True))
    copy_in = [a for a in k.accesses if a.what.startswith("tc_copy_in") and a.space == "global"]
    assert [(a.stride, a.sectors) for a in copy_in] == [(1, 4)]
    shared = [a for a in k.accesses if a.what == "S0" and a.space == "shared"]
    assert len(shared) == 1 and shared[0].conflict == 1  # the buffer's rows are padded to 33
    assert k.barriers == 1


def test_one_block_of_two_threads_is_seen_as_such() -> None:
    (k,) = _profile(COPY, {"N": 64, "M": 64}, _options(2, blocks=(1, 1), tile=(64, 64)))
    assert (k.blocks, k.threads, k.warps) == (1, 2, 1)
    read = _access(k, "I", "read")
    assert (read.lanes, read.sectors, read.requests) == (2, 1, 64 * 64 // 2)


def test_a_block_reduction_with_atomics_is_a_serial_chain_per_thread() -> None:
    k = suite.get("bn_reduce")
    sizes = {"N": 4, "C": 8, "H": 8, "W": 8}
    # eight channels to a block, the images spread over blocks: the tree and the atomic addition
    # of each channel follow one another in each thread
    opts = row_reduction_options(tiles=(8, 1))
    launches = _profile(k.source, sizes, opts, k.entry)
    (la,) = [la for la in launches if la.atomics]
    combines = la.executions[next(w for w in la.executions if w.endswith("combine"))]
    assert la.atomics == combines > 1
    assert la.barriers > la.atomics  # a tree's steps between barriers, for every row


def column_reads(grid: tuple[int, int, int] = (1, 1, 1)):
    """A launch of ``grid`` blocks of 32 threads where thread x reads a column of an unpadded 32 x 32
    shared buffer (``sh[l][j]`` for lane ``l``: every word in one bank) and writes a row of O."""
    cdef = tcjit.define(TRANSPOSE).definition
    buf = ir.Buffer("sh", "I", "shared", (32, 32))
    ref = V.BufferRef("sh", "I", (V.SubVar("i"), V.SubVar("j")), (ir.Int(0), ir.Int(0)), (1, 1))
    target = V.Ref("O", (V.SubVar("j"), V.SubVar("i")), (False, False), (0, 0, 1, 1), True, 0)
    value = V.Load(ref, F32)
    body = V.Body("S0", "assign", "=", "O", target, value, F32, value, ("i", "j"), ("i", "j"), 1)
    run = ir.Run("S0", (ir.Var("t0"), ir.Var("c0")))
    loop = ir.For("c0", ir.Int(0), ir.Op("<", (ir.Var("c0"), ir.Int(32))), 1, run)
    plan = SimpleNamespace(grid=grid, block=(32, 1, 1), buffers=(buf,))
    sizes = {"N": 32, "M": 32}
    (k,) = access_profile(cdef, [(plan, loop)], {"S0": body}, sizes, {"I": (32, 1), "O": (32, 1)}, {})
    return k


def test_a_shared_buffer_read_down_a_column_conflicts_32_ways() -> None:
    k = column_reads()
    (read,) = [a for a in k.accesses if a.space == "shared"]
    assert (read.conflict, read.stride, read.requests) == (32, 32, 32)
    write = _access(k, "O", "write")
    assert (write.stride, write.sectors, write.lines) == (1, 4, 1)


@pytest.mark.parametrize(
    "cond, init, step, env, trips",
    [
        (ir.Op("<", (ir.Var("c"), ir.Int(10))), ir.Int(0), 1, {}, 10),
        (ir.Op("<=", (ir.Var("c"), ir.Int(255))), ir.Var("t0"), 32, {"t0": 0}, 8),
        (ir.Op("<=", (ir.Var("c"), ir.Int(255))), ir.Var("t0"), 32, {"t0": 31}, 8),
        (ir.Op("<=", (ir.Var("c"), ir.Op("min", (ir.Int(99), ir.Var("n"))))), ir.Int(0), 4, {"n": 9}, 3),
        (ir.Op("<", (ir.Var("c"), ir.Int(0))), ir.Int(0), 1, {}, 0),
    ],
)
def test_trip_counts(cond, init, step, env, trips) -> None:
    assert trip_count(ir.For("c", init, cond, step, ir.Block(())), env) == trips


def test_evaluate_follows_c_division() -> None:
    e = {"a": -7, "b": 2}
    a, b = ir.Var("a"), ir.Var("b")
    assert evaluate(ir.Op("div", (a, b)), e) == -3 and evaluate(ir.Op("mod", (a, b)), e) == -1
    assert evaluate(ir.Op("floordiv", (a, b)), e) == -4
    assert evaluate(ir.Op("select", (ir.Op("<", (a, b)), a, b)), e) == -7
