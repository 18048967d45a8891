"""Microbenchmarks of one CUDA GPU: the constants of a static model of tcjit's GPU kernels.

Each figure is measured with kernels compiled the way tcjit compiles its own (NVRTC through CuPy,
``--std=c++17``, the device's architecture) and timed with CUDA events: the median of several runs
after a warm-up. The SM clock is measured too (``clock64()`` cycles over event time, on a kernel
that keeps every SM busy), so per-SM costs are given both in nanoseconds and in cycles.

- ``copy``: device-to-device bandwidth, bytes read plus written, by ``torch.Tensor.copy_`` and by a
  kernel of 16-byte loads and stores (1 GiB);
- ``fma``: float32 FMA rate (8 independent chains per thread, every SM full);
- ``launch``: host time per launch of an empty kernel through CuPy (back to back, then with a
  synchronisation after each), and the device time per launch of a chain of empty kernels;
- ``load_cycles``: SM cycles per warp load request by the stride between lanes (0: every lane reads
  one address; 1: 32 consecutive floats; 32: each lane its own 128-byte line), from a footprint that
  stays in L1 and from one that stays in L2;
- ``shared_cycles``: SM cycles per warp shared-memory load by the stride between lanes (bank
  conflicts);
- ``atomics``: float atomicAdd throughput to one address, to one address per warp and to one per
  thread, and double atomicAdd to one address;
- ``barrier``: SM cycles per ``__syncthreads()`` in blocks of 256 threads, 8 blocks per SM;
- ``latency``: dependent-load latency (a pointer chase by one thread) in L1, L2 and DRAM;
- ``block_dispatch``: the cost of starting a block, the model's ``Device.block_dispatch``: the device
  time of one launch of an empty kernel with 64, 256, 1024 and 4096 blocks per SM, of 32 and of 256
  threads, and the least-squares slope of that time against the blocks per SM (seconds an SM takes
  per block it starts) with its intercept (the launch's fixed cost);
- ``loads_in_flight``: the memory latency under load, the model's ``Device.memory_latency``, by
  Little's law: ``stream_loads_<K>`` kernels read 512 MiB of a 1 GiB array with K = 1, 2, 4, 8
  independent 128-byte warp requests in flight per warp (the next requests' addresses depend on
  the last ones' values), at 8, 16, 32 and 64 resident warps per SM; the achieved bandwidth B
  gives the latency ``SMs x warps x K x 128 B / B``. Where B is well below the DRAM bandwidth the
  latency is the loaded one; as B nears it the latency grows with queueing, which is what the
  model's ``loads_in_flight`` and ``memory_latency`` together stand for.

    python bench/gpu_micro.py [--out bench/results/gpu_micro_<GPU name>]

writes ``<out>.json`` and ``<out>.md``, again after each measurement (marked ``"complete": false``
until the last), so that a run cut short keeps what it measured. Without a usable GPU it exits
with status 2. The kernels (:data:`SOURCE`, :data:`KERNELS`) compile without a GPU; a test compiles
them for sm_90.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _harness import (
    RESULTS,
    cuda_unusable,
    describe_error,
    machine_info,
    machine_markdown,
    slug,
    write_results,
)

SOURCE = r"""
extern "C" __global__ void copy16(const float4 *__restrict__ a, float4 *__restrict__ b, long long n) {
    long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step)
        b[i] = a[i];
}

extern "C" __global__ void fma_chains(float *out, int iters, float x, float y) {
    float a0 = threadIdx.x, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3;
    float a4 = a0 + 4, a5 = a0 + 5, a6 = a0 + 6, a7 = a0 + 7;
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int j = 0; j < 16; j++) {
            a0 = fmaf(a0, x, y); a1 = fmaf(a1, x, y); a2 = fmaf(a2, x, y); a3 = fmaf(a3, x, y);
            a4 = fmaf(a4, x, y); a5 = fmaf(a5, x, y); a6 = fmaf(a6, x, y); a7 = fmaf(a7, x, y);
        }
    }
    float s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    if (s == 1234.5f) out[0] = s;  /* never true: keeps the chains alive */
}

extern "C" __global__ void empty(float *a, float *b, float *c, int n) {}

/* Each warp issues `iters` loads; lane l reads element (l * stride + i * step) & mask. The clock of
   thread 0 of each block is recorded so that cycles per request can be read off. */
extern "C" __global__ void strided_loads(const float *__restrict__ a, float *out, long long *cycles,
                                         int stride, int step, int mask, int iters) {
    int lane = threadIdx.x & 31, warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int base = (warp * 4096) & mask;
    float s = 0.0f;
    __syncthreads();
    long long t0 = clock64();
    for (int i = 0; i < iters; i++)
        s += a[(base + lane * stride + i * step) & mask];
    __syncthreads();
    long long t1 = clock64();
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
    if (s == 1234.5f) out[0] = s;
}

extern "C" __global__ void shared_loads(float *out, long long *cycles, int stride, int iters) {
    __shared__ float buf[32 * 33 * 2];
    volatile float *vbuf = buf;  /* every load is made: the values never change */
    for (int i = threadIdx.x; i < 32 * 33 * 2; i += blockDim.x) buf[i] = i;
    __syncthreads();
    int lane = threadIdx.x & 31;
    float s = 0.0f;
    long long t0 = clock64();
    for (int i = 0; i < iters; i++)
        s += vbuf[(lane * stride + (i & 7)) % (32 * 33 * 2)];
    __syncthreads();
    long long t1 = clock64();
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
    if (s == 1234.5f) out[0] = s;
}

extern "C" __global__ void atomics_f32(float *target, int spread, int iters) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int where = spread == 0 ? 0 : spread == 1 ? (t >> 5) : t;
    for (int i = 0; i < iters; i++) atomicAdd(target + where, 1.0f);
}

extern "C" __global__ void atomics_f64(double *target, int iters) {
    for (int i = 0; i < iters; i++) atomicAdd(target, 1.0);
}

extern "C" __global__ void barriers(float *out, long long *cycles, int iters) {
    float s = threadIdx.x;
    long long t0 = clock64();
    for (int i = 0; i < iters; i++) { s = s * 0.999f + 1.0f; __syncthreads(); }
    long long t1 = clock64();
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
    if (s == 1234.5f) out[0] = s;
}

extern "C" __global__ void chase(const long long *__restrict__ next, long long *out, int steps) {
    long long p = 0;
    for (int i = 0; i < steps; i++) p = next[p];
    out[0] = p;
}

/* K independent loads in flight per thread, each a warp request of 32 consecutive floats (one
   128-byte line), streaming through `a` (mask + 1 floats, far beyond L2). The next iteration's
   addresses depend on this one's values (t * 0.0f is not folded: it is NaN for an infinite t), so
   a warp never has more than K requests in flight. __launch_bounds__(256, 8): at most 32 registers,
   so that 8 blocks of 256 threads (64 warps) fit an SM. */
template <int K>
__device__ __forceinline__ void stream_loads(const float *__restrict__ a, float *out, unsigned mask,
                                             int iters) {
    unsigned stride = gridDim.x * blockDim.x;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.0f;
#pragma unroll 1
    for (int it = 0; it < iters; it++) {
        float t = 0.0f;
#pragma unroll
        for (int j = 0; j < K; j++) t += a[(i + j * stride) & mask];
        s += t;
        i = (i + K * stride + (unsigned)(int)(t * 0.0f)) & mask;
    }
    if (s == 1234.5f) out[0] = s;
}

#define STREAM_LOADS(K)                                                                             \
    extern "C" __global__ void __launch_bounds__(256, 8)                                            \
        stream_loads_##K(const float *__restrict__ a, float *out, unsigned mask, int iters) {       \
        stream_loads<K>(a, out, mask, iters);                                                       \
    }
STREAM_LOADS(1)
STREAM_LOADS(2)
STREAM_LOADS(4)
STREAM_LOADS(8)
"""

IN_FLIGHT = (1, 2, 4, 8)
"""The loads a thread keeps in flight in the ``stream_loads_<K>`` kernels."""

KERNELS = (
    "copy16",
    "fma_chains",
    "empty",
    "strided_loads",
    "shared_loads",
    "atomics_f32",
    "atomics_f64",
    "barriers",
    "chase",
    *(f"stream_loads_{k}" for k in IN_FLIGHT),
)
"""The ``__global__`` functions of :data:`SOURCE` that the measurements launch."""

OPTIONS = ("--std=c++17",)
"""NVRTC's options for :data:`SOURCE`, as tcjit compiles its own kernels (``tcjit.nvrtc``)."""


def event_time(cupy, launch: Callable[[], object], repeat: int = 7) -> float:
    """Median seconds of ``launch()`` by CUDA events, after one warm-up."""
    launch()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return statistics.median(times)


def launcher(fn, grid: tuple, block: tuple, args: tuple) -> Callable[[], object]:
    """A call of the CuPy kernel ``fn`` with its arguments bound now."""
    return lambda: fn(grid, block, args)


def measure(
    fns: dict[str, Callable[[], Any]], checkpoint: Callable[[dict[str, Any]], object] | None = None
) -> dict[str, Any]:
    """Run each measurement; one that raises is recorded with its error and the others go on.
    ``checkpoint`` is called with the results so far after each."""
    out: dict[str, Any] = {}
    for name, fn in fns.items():
        try:
            out[name] = fn()
        except Exception as e:  # a microbenchmark that fails must not lose the others
            out[name] = {"error": describe_error(e)}
        print(f"{name}: {out[name]}", file=sys.stderr, flush=True)
        if checkpoint is not None:
            checkpoint(out)
    return out


def run(cupy, torch, checkpoint: Callable[[dict[str, Any]], object] | None = None) -> dict[str, Any]:
    """Every measurement of the module docstring on the current CUDA device; ``checkpoint`` is
    called with the results so far after each (a run cut short keeps them)."""
    mod = cupy.RawModule(code=SOURCE, options=OPTIONS)
    k = {name: mod.get_function(name) for name in KERNELS}
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    sink = cupy.zeros(1, dtype=cupy.float32)
    i32, f32, i64 = cupy.int32, cupy.float32, cupy.int64
    facts: dict[str, Any] = {"sms": sms}

    def clock() -> dict[str, float]:
        iters = 1 << 14
        blocks, threads = sms, 256  # one block per SM: all run at once, so cycles / time is the clock
        cycles = cupy.zeros(blocks, dtype=i64)
        t = event_time(cupy, lambda: k["barriers"]((blocks,), (threads,), (sink, cycles, i32(iters))))
        c = float(cupy.median(cycles))
        facts["clock_hz"] = c / t
        return {"clock_ghz": c / t / 1e9, "cycles": c, "seconds": t}

    def copy() -> dict[str, float]:
        n = 1 << 28  # floats: 1 GiB
        a, b = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
        t_torch = event_time(cupy, lambda: b.copy_(a))
        ca, cb = cupy.asarray(a), cupy.asarray(b)
        blocks = sms * 16
        t_kernel = event_time(cupy, lambda: k["copy16"]((blocks,), (256,), (ca, cb, i64(n // 4))))
        return {"torch_copy_GBps": 2 * 4 * n / t_torch / 1e9, "kernel_16B_GBps": 2 * 4 * n / t_kernel / 1e9}

    def fma() -> dict[str, float]:
        iters, blocks, threads = 4096, sms * 16, 256
        t = event_time(
            cupy, lambda: k["fma_chains"]((blocks,), (threads,), (sink, i32(iters), f32(0.999), f32(0.5)))
        )
        fmas = blocks * threads * iters * 16 * 8
        return {
            "fma_per_s": fmas / t,
            "gflops": 2 * fmas / t / 1e9,
            "fma_per_sm_cycle": fmas / t / sms / facts["clock_hz"],
        }

    def launch() -> dict[str, float]:
        import time

        a = cupy.zeros(4, dtype=f32)
        args = (a, a, a, i32(1))
        for _ in range(100):
            k["empty"]((1,), (32,), args)
        cupy.cuda.Device().synchronize()
        n = 2000
        t0 = time.perf_counter()
        for _ in range(n):
            k["empty"]((1,), (32,), args)
        cupy.cuda.Device().synchronize()
        back_to_back = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for _ in range(n // 4):
            k["empty"]((1,), (32,), args)
            cupy.cuda.Device().synchronize()
        synced = (time.perf_counter() - t0) / (n // 4)
        x = torch.zeros(1, device="cuda")
        t0 = time.perf_counter()
        for _ in range(n):
            x.add_(1.0)
        torch.cuda.synchronize()
        torch_add = (time.perf_counter() - t0) / n
        device = event_time(cupy, lambda: [k["empty"]((1,), (32,), args) for _ in range(200)]) / 200
        return {
            "cupy_host_us": back_to_back * 1e6,
            "cupy_synced_us": synced * 1e6,
            "torch_add_1_host_us": torch_add * 1e6,
            "device_per_launch_us": device * 1e6,
        }

    def loads() -> dict[str, Any]:
        out: dict[str, Any] = {}
        iters, threads = 4096, 256
        for where, floats in (("l1", 1 << 12), ("l2", 1 << 22)):  # footprints of 16 KiB and 16 MiB
            a = cupy.random.standard_normal(floats, dtype=f32)
            for stride in (0, 1, 2, 4, 8, 16, 32):
                for blocks_per_sm in (1, 8):
                    blocks = sms * blocks_per_sm
                    cycles = cupy.zeros(blocks, dtype=i64)
                    step = 32 * max(stride, 1)
                    args = (a, sink, cycles, i32(stride), i32(step), i32(floats - 1), i32(iters))
                    t = event_time(cupy, launcher(k["strided_loads"], (blocks,), (threads,), args))
                    requests_per_sm = blocks_per_sm * threads // 32 * iters
                    out[f"{where} stride {stride} warps/SM {blocks_per_sm * threads // 32}"] = {
                        "sm_cycles_per_request": t * facts["clock_hz"] / requests_per_sm,
                        "block_cycles_per_request": float(cupy.median(cycles)) / (iters * threads // 32),
                    }
        return out

    def shared() -> dict[str, Any]:
        out = {}
        iters, threads, blocks = 4096, 256, sms * 8
        for stride in (0, 1, 2, 4, 8, 16, 32, 33):
            cycles = cupy.zeros(blocks, dtype=i64)
            args = (sink, cycles, i32(stride), i32(iters))
            t = event_time(cupy, launcher(k["shared_loads"], (blocks,), (threads,), args))
            out[f"stride {stride}"] = t * facts["clock_hz"] / (8 * threads // 32 * iters)
        return out

    def atomics() -> dict[str, Any]:
        out = {}
        iters, threads, blocks = 64, 256, sms * 8
        n = blocks * threads * iters
        target = cupy.zeros(blocks * threads, dtype=f32)
        for spread, name in ((0, "one address"), (1, "one per warp"), (2, "one per thread")):
            args = (target, i32(spread), i32(iters))
            t = event_time(cupy, launcher(k["atomics_f32"], (blocks,), (threads,), args))
            out[f"f32 {name} per_s"] = n / t
        d = cupy.zeros(1, dtype=cupy.float64)
        t = event_time(cupy, lambda: k["atomics_f64"]((blocks,), (threads,), (d, i32(iters))))
        out["f64 one address per_s"] = n / t
        return out

    def barrier() -> dict[str, float]:
        iters, threads, blocks = 1 << 14, 256, sms * 8
        cycles = cupy.zeros(blocks, dtype=i64)
        t = event_time(cupy, lambda: k["barriers"]((blocks,), (threads,), (sink, cycles, i32(iters))))
        return {
            "block_cycles_per_barrier": float(cupy.median(cycles)) / iters,
            "ns_per_barrier_per_block": t / iters * 1e9,
        }

    def latency() -> dict[str, float]:
        out = {}
        for where, n in (("l1", 1 << 10), ("l2", 1 << 20), ("dram", 1 << 27)):  # elements of 8 bytes
            perm = torch.randperm(n, device="cuda")
            nxt = torch.empty(n, dtype=torch.int64, device="cuda")
            nxt[perm] = torch.roll(perm, -1)  # one cycle through every element, in random order
            steps = 1 << 14
            o = cupy.zeros(1, dtype=i64)
            t = event_time(
                cupy, launcher(k["chase"], (1,), (1,), (cupy.asarray(nxt), o, i32(steps))), repeat=3
            )
            out[f"{where}_ns"] = t / steps * 1e9
        return out

    def dispatch() -> dict[str, float]:
        out: dict[str, float] = {}
        a = cupy.zeros(4, dtype=f32)
        args = (a, a, a, i32(1))
        per_sm = (64, 256, 1024, 4096)
        for threads in (32, 256):
            times = [event_time(cupy, launcher(k["empty"], (sms * n,), (threads,), args)) for n in per_sm]
            for n, t in zip(per_sm, times):
                out[f"{threads} threads, {n} blocks/SM: us"] = t * 1e6
            slope, intercept = statistics.linear_regression(per_sm, times)
            out[f"{threads} threads: ns per block per SM"] = slope * 1e9
            out[f"{threads} threads: intercept us"] = intercept * 1e6
        return out

    def in_flight() -> dict[str, Any]:
        out: dict[str, Any] = {}
        n = 1 << 28  # floats: 1 GiB, 20 times the L2
        a = cupy.random.standard_normal(n, dtype=f32)
        threads, target = 256, 1 << 29  # about 512 MiB read by each launch
        for blocks_per_sm in (1, 2, 4, 8):
            warps = blocks_per_sm * threads // 32
            blocks = sms * blocks_per_sm
            for loads in IN_FLIGHT:
                per_iteration = blocks * threads * loads * 4
                iters = max(1, target // per_iteration)
                args = (a, sink, cupy.uint32(n - 1), i32(iters))
                t = event_time(cupy, launcher(k[f"stream_loads_{loads}"], (blocks,), (threads,), args))
                bandwidth = per_iteration * iters / t
                in_flight_bytes = sms * warps * loads * 128  # a 128-byte line per warp request
                out[f"{loads} loads, {warps} warps/SM"] = {
                    "GBps": bandwidth / 1e9,
                    "latency_ns": in_flight_bytes / bandwidth * 1e9,  # Little's law
                }
        return out

    results = measure(
        {
            "clock": clock,
            "copy": copy,
            "fma": fma,
            "launch": launch,
            "load_cycles": loads,
            "shared_cycles": shared,
            "atomics": atomics,
            "barrier": barrier,
            "latency": latency,
            "block_dispatch": dispatch,
            "loads_in_flight": in_flight,
        },
        checkpoint=None if checkpoint is None else lambda out: checkpoint({**out, "facts": facts}),
    )
    results["facts"] = facts
    return results


def render(doc: dict[str, Any]) -> str:
    """The measurements as a markdown table (a run cut short says so)."""
    lines = [
        "# GPU microbenchmarks",
        "",
        machine_markdown(doc["machine"]),
        *(
            ["- **incomplete**: the run stopped before its last measurement"]
            if doc.get("complete") is False
            else []
        ),
        "",
        "| measure | value |",
        "| --- | --- |",
    ]
    for group, values in doc["results"].items():
        if isinstance(values, dict):
            for name, v in values.items():
                shown = (
                    ", ".join(f"{a} {b:.4g}" for a, b in v.items())
                    if isinstance(v, dict)
                    else (f"{v:.4g}" if isinstance(v, float) else str(v))
                )
                lines.append(f"| {group}: {name} | {shown} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Microbenchmarks of one CUDA GPU for the static GPU model.")
    p.add_argument("--out", type=Path, default=None, help="writes <out>.json and .md")
    args = p.parse_args(argv)
    why = cuda_unusable()
    if why:
        print(why, file=sys.stderr)
        return 2
    import cupy
    import torch

    machine = machine_info("cuda")
    out = args.out or RESULTS / f"gpu_micro_{slug(machine['gpu_name'])}"

    def write(results: dict[str, Any], complete: bool = False) -> tuple[Path, Path]:
        doc = {"benchmark": "gpu_micro", "machine": machine, "results": results, "complete": complete}
        return write_results(out, doc, render(doc))

    results = run(cupy, torch, checkpoint=write)  # a run cut short keeps the measurements it made
    json_path, md_path = write(results, complete=True)
    print(md_path.read_text(), end="")
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
