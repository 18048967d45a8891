"""The static GPU profile (:mod:`tcjit.mapping.gpu_profile`, :func:`tcjit.gpu_profile`, ``tcjit show
--stage gpu-profile``): it flags the pathological mappings it exists for (one block, two threads a
block, ``threadIdx.x`` along a strided access, bank-conflicted shared memory, a serial chain of
atomics, a sum kept in global memory), counts the bytes requested against hand-worked values, adds
the runtime's steps, and reads registers from the cubin."""

from __future__ import annotations

import json

import pytest
import test_gpu_access as TGA
import torch

import tcjit
from tcjit import nvrtc, suite
from tcjit.cli import main
from tcjit.mapping.defaults import row_reduction_options
from tcjit.mapping.gpu_model import H100, predict_launch
from tcjit.mapping.gpu_profile import LaunchResources, diagnose, profile_lowering
from tcjit.mapping.layout import contiguous_layout
from tcjit.mapping.lower_gpu import lower_gpu
from tcjit.mapping.options import MappingOptions
from tcjit.pipeline import default_options

COPY = "def c(float(N,M) I) -> (O) { O(i, j) = I(i, j) }"
TRANSPOSE = "def t(float(N,M) I) -> (O) { O(j, i) = I(i, j) }"
MATMUL = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"
need_compiler = pytest.mark.skipif(
    not nvrtc.available(), reason="no CUDA compiler: neither NVRTC (pip install nvidia-cuda-nvrtc) nor nvcc"
)


def _profile(src: str, sizes: dict, options: MappingOptions | None = None, entry: str | None = None):
    """The profile at ``sizes`` with 32 registers a launch (no compiler needed)."""
    cdef = tcjit.define(src, name=entry).definition
    options = options or default_options(cdef, sizes, "cuda")
    low = lower_gpu(cdef, sizes, options.validate("cuda").values)
    strides = contiguous_layout(cdef, sizes)
    names = [f"tc_entry_{cdef.name}_k{i}" for i in range(len(low.launches))]
    return profile_lowering(cdef, sizes, strides, low, dict.fromkeys(names, LaunchResources(32)), H100)


def _naive(*threads: int, blocks=(2, 2), tile=(32, 32)) -> MappingOptions:
    return MappingOptions("naive").tile(*tile).map_to_blocks(*blocks).map_to_threads(*threads)


def _says(launch, *words: str) -> str:
    (line,) = [d for d in launch.diagnosis if all(w in d for w in words)]
    return line


def test_a_coalesced_copy_requests_each_byte_once_and_is_dram_bound() -> None:
    sizes = {"N": 4096, "M": 4096}
    (k,) = _profile(COPY, sizes, _naive(32, 8, blocks=(128, 128))).launches
    assert k.requested_bytes == {"I": 4096 * 4096 * 4, "O": 4096 * 4096 * 4}
    assert k.passes == {"I": 1.0, "O": 1.0}
    assert k.prediction.bound == "dram" and k.diagnosis == ("bound by DRAM bandwidth (dram)",)


def test_thread_x_along_a_stride_is_named_with_its_lines_and_eight_passes() -> None:
    # threads along j of O(j, i) = I(i, j): lane l writes O[.][l] (stride 1) but reads I[l][.],
    # 64 elements apart: 32 lines per request, 8 sectors of 4-byte elements for each one used
    (k,) = _profile(TRANSPOSE, {"N": 64, "M": 64}, _naive(32, 8)).launches
    line = _says(k, "threadIdx.x runs along a stride-64 access of I")
    assert line.endswith("32 lines per request, 1 if coalesced")
    assert k.requested_bytes["I"] == 8 * 64 * 64 * 4 and k.passes == {"I": 8.0, "O": 1.0}
    assert not [d for d in k.diagnosis if "of O" in d]
    # a block of 1 x 32 threads: the lanes run along threadIdx.y, down the columns of O
    (k,) = _profile(TRANSPOSE, {"N": 64, "M": 64}, _naive(1, 32)).launches
    assert _says(k, "S0 writes O in 32 lines per request (its lanes run along threadIdx.y)")


def test_one_block_of_two_threads_is_flagged_twice() -> None:
    profile = _profile(COPY, {"N": 64, "M": 64}, _naive(2, blocks=(1, 1), tile=(64, 64)))
    (k,) = profile.launches
    assert _says(k, "1 block for 132 SMs") == "1 block for 132 SMs: 131 SMs idle"
    assert _says(k, "threads per block") == "2 threads per block: 30 of each warp's 32 lanes idle"
    assert k.prediction.bound == "latency"


def test_a_sum_held_in_global_memory_is_named() -> None:
    # 32 x 32 tiles of C, 32 x 8 threads: 4 outputs a thread, each a sum of 256 products
    (update,) = _profile(MATMUL, {"M": 256, "K": 256, "N": 256}, _naive(32, 8, blocks=(8, 32))).launches
    assert (
        "S0 reads and writes C in global memory on each of its 1024 runs per thread: "
        "its accumulator is not held in a register"
    ) in update.diagnosis


def test_a_conflicted_shared_buffer_and_its_share_of_the_issue_slots() -> None:
    la = TGA.column_reads(grid=(132 * 64, 1, 1))
    kw = {"registers": 32, "shared_bytes": 4096, "fmas": {}, "compulsory_bytes": 4096}
    prediction = predict_launch(la, H100, **kw)
    said = diagnose(la, prediction, LaunchResources(32, spill_bytes=8), {}, H100)
    assert said[0] == "bound by the SMs' load/store and FMA issue slots (issue)"
    assert said[2] == (
        "100% of the issue slots go to S0 (x32 per thread): 2 memory requests "
        "(read sh in shared memory, write O) for 0 float operations each"
    )
    assert said[1] == "S0 reads shared buffer sh with a 32-way bank conflict"
    assert said[-1] == "8 bytes of register spills per thread (local memory)"


def test_a_serial_chain_of_atomics() -> None:
    k = suite.get("bn_reduce")
    sizes = {"N": 4, "C": 8, "H": 8, "W": 8}
    # eight channels to a block, the images spread over blocks: a tree and an atomic per channel
    profile = _profile(k.source, sizes, row_reduction_options(tiles=(8, 1)), entry=k.entry)
    (chained,) = [la for la in profile.launches if la.accesses.atomics > 1]
    atomics = chained.accesses.atomics
    assert f"{atomics} atomic additions per thread, one after another: a serial chain" in chained.diagnosis


def test_runtime_steps_zero_and_wide_sums_and_the_call_model() -> None:
    profile = _profile("def s(float16(M,N) X) -> (S) { S(m) +=! X(m, r_n) }", {"M": 4, "N": 64})
    steps = [s.what for s in profile.runtime]
    assert steps[:2] == ["copy S into its float32 accumulator", "round S back"]
    assert profile.device_seconds == pytest.approx(
        sum(p.prediction.seconds for p in profile.launches) + sum(s.seconds for s in profile.runtime)
    )
    host = profile.host.call + profile.host.launch * (len(profile.launches) + len(profile.runtime))
    assert profile.host_seconds == pytest.approx(host)
    assert profile.seconds == max(host, profile.device_seconds) and profile.bound == "host"


@need_compiler
def test_the_python_function_reads_registers_from_the_cubin_and_takes_meta_tensors() -> None:
    kernel = tcjit.define(MATMUL)
    a = torch.empty(128, 64, device="meta")
    b = torch.empty(64, 96, device="meta")
    profile = tcjit.gpu_profile(kernel, a, b, gpu="h200")
    assert profile.device.name == "NVIDIA H200" and profile.resources_from.startswith("ptxas of ")
    source = tcjit.pipeline.lowered(kernel.definition, {"M": 128, "K": 64, "N": 96}, None, "cuda").source
    cubin = nvrtc.compile_cubin(source, name="mm.cu")
    assert [p.resources.registers for p in profile.launches] == [
        cubin.resources(p.name).registers for p in profile.launches
    ]
    text = str(profile)
    assert text.startswith("mm at M=128 K=64 N=96 on NVIDIA H200") and "diagnosis:" in text
    assert json.loads(json.dumps(profile.to_json()))["launches"][0]["name"] == "tc_entry_mm_k0"
    # a transposed view of B: its strides, not a contiguous layout's, decide the sectors
    bt = torch.empty(96, 64, device="meta").t()
    strided = tcjit.gpu_profile(kernel, a, bt)
    reads = [x for x in strided.launches[-1].accesses.accesses if x.tensor == "B"]
    assert reads[0].stride == 64 and reads[0].lines == 32
    with pytest.raises(tcjit.TCCallError, match="no GPU 'a100'"):
        tcjit.gpu_profile(kernel, a, b, gpu="a100")
    with pytest.raises(tcjit.TCCallError, match="sizes contradict"):
        tcjit.gpu_profile(kernel, a, torch.empty(63, 96, device="meta"))


@need_compiler
def test_show_gpu_profile_as_text_and_json(capsys, tmp_path) -> None:
    path = tmp_path / "mm.tc"
    path.write_text(MATMUL)
    sizes = "M=64,K=64,N=64"
    assert (
        main(
            ["show", str(path), "--stage", "gpu-profile", "--sizes", sizes, "--threads", "2", "--blocks", "1"]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "2 threads per block: 30 of each warp's 32 lanes idle" in text and "H100" in text
    assert (
        main(
            [
                "show",
                str(path),
                "--stage",
                "gpu-profile",
                "--sizes",
                sizes,
                "--format",
                "json",
                "--gpu",
                "h200",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["device"] == "NVIDIA H200" and data["launches"][0]["block"] == [32, 8, 1]
    # the defaults' rule, with the figures it went by, beside a profile of the defaults
    assert data["default_rule"].startswith("everything else: the innermost output variables of C")
    path.with_name("bn.tc").write_text(suite.get("bn_reduce").source)
    bn = ["show", str(path.with_name("bn.tc")), "--stage", "gpu-profile", "--sizes", "N=64,C=256,H=56,W=56"]
    assert main(bn) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("default options: row reduction split over the grid: 256 outputs"), first
    assert main([*bn[:3], "options", *bn[4:], "--target", "cuda-emulated"]) == 0
    assert "  rule: row reduction split over the grid" in capsys.readouterr().out
    assert main(["show", str(path), "--stage", "cuda", "--sizes", sizes, "--format", "json"]) == 2
    assert "--format goes with --stage gpu-profile" in capsys.readouterr().err
    assert main(["show", str(path), "--stage", "gpu-profile", "--sizes", sizes, "--gpu", "a100"]) == 2
    assert "the profile knows h100, h200" in capsys.readouterr().err
    assert main(["show", str(path), "--stage", "gpu-profile", "--sizes", sizes, "--target", "cpu"]) == 2
    assert main(["show", str(path), "--stage", "gpu-profile"]) == 2
