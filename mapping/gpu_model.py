"""A launch's predicted time on a GPU, from what its warps ask of memory (:mod:`.gpu_access`), its
resource usage and the device's constants: the model of the static GPU profile (issue 32).

Each launch is bounded by the largest of three times, plus the device's floor for a launch:

- **issue** (``lsu+fma``): the cycles each SM spends on the requests of its warps, every warp of
  every block it runs. A global request costs :attr:`Device.l1_cycles_per_line` for each 128-byte
  line it touches (one at least); a shared-memory request :attr:`Device.shared_cycles` times its
  bank conflict (at least :attr:`Device.shared_cycles_min`); a float multiply-add a quarter of a
  cycle per warp (128 lanes an SM).
- **memory latency** (Little's law): the compulsory bytes (each tensor the launch touches, once)
  at the bandwidth the requests in flight sustain, ``active SMs x resident warps x bytes per
  request x`` :attr:`Device.loads_in_flight` ``/`` :attr:`Device.memory_latency`, capped by the DRAM
  bandwidth; plus the barriers of each round of resident blocks.
- **DRAM**: the compulsory bytes at the measured copy bandwidth.
- **dispatch**: the blocks each SM starts, at :attr:`Device.block_dispatch` each.

Occupancy comes from the block's threads, the registers per thread (from the compiled code) and
the static shared memory: the resident blocks per SM and the resource that limits them.

Every constant is a measurement on the device (``bench/gpu_micro.py``,
``bench/results/gpu_micro_<device>.md``) or its datasheet, never a per-kernel term. Three (the
memory latency under load, the loads in flight per warp, the cost of starting a block) are fitted
on the calibration points (``bench/gpu_calibration.py``) and recorded with their fit;
``gpu_micro.py`` measures them directly (``block_dispatch``, ``loads_in_flight``) from its next
GPU run on, which checks the fit.

The model was frozen when issue 32 closed (``bench/results/gpu_calibration_<gpu>_frozen.json``): a
change to it comes with new GPU measurements, and its calibration shows the frozen predictions
beside the new ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .gpu_access import WARP, AccessProfile, LaunchAccesses

__all__ = [
    "DEVICES",
    "H100",
    "Device",
    "LaunchPrediction",
    "Occupancy",
    "access_cycles",
    "occupancy",
    "predict_launch",
]


@dataclass(frozen=True)
class Device:
    """One GPU's constants (sources in :data:`DEVICES`).

    :ivar sms: streaming multiprocessors. :ivar clock_hz: SM clock under load.
    :ivar dram_bytes_per_s: device-to-device copy bandwidth, bytes read plus written.
    :ivar l2_bytes: L2 cache. :ivar fma_lanes: float32 FMA lanes per SM.
    :ivar registers: 32-bit registers per SM. :ivar shared_bytes: shared memory per SM for blocks.
    :ivar max_warps, max_blocks: resident warps and blocks per SM.
    :ivar l1_cycles_per_line: SM cycles per 128-byte line of a global warp request.
    :ivar shared_cycles_min: SM cycles of a conflict-free shared-memory warp request.
    :ivar shared_cycles: SM cycles per word a bank serves in a conflicted one.
    :ivar barrier_cycles: cycles of a ``__syncthreads`` (8 blocks of 256 threads an SM).
    :ivar memory_latency: seconds a load from memory takes under load (fitted).
    :ivar loads_in_flight: independent loads a warp has in flight between barriers (fitted).
    :ivar block_dispatch: seconds an SM takes to start each block it runs (fitted).
    :ivar launch_floor: seconds of the shortest launch (an empty kernel's duration).
    """

    name: str
    sms: int
    clock_hz: float
    dram_bytes_per_s: float
    l2_bytes: int
    fma_lanes: int
    registers: int
    shared_bytes: int
    max_warps: int
    max_blocks: int
    l1_cycles_per_line: float
    shared_cycles_min: float
    shared_cycles: float
    barrier_cycles: float
    memory_latency: float
    loads_in_flight: float
    block_dispatch: float
    launch_floor: float


#: The devices the profile knows, by name. H100: ``bench/results/gpu_micro_nvidia_h100_80gb_hbm3.md``
#: (2026-11-27: SM clock 1.88 GHz under load, copy 2979 GB/s by ``copy_``, 132 FMA lanes' worth of
#: multiply-adds a cycle an SM (128 by the datasheet), 0.716 cycles per line of a warp load up to
#: 32 lines, shared loads 3.6 cycles and 0.95 per conflicting word, 96 cycles a barrier), the
#: datasheet (132 SMs, 50 MB L2, 64 K registers, 228 KB shared memory, 64 warps and 32 blocks an
#: SM), Nsight Compute's durations of one-block init kernels (2.3 us, ``gpu_ncu_...csv``). H200:
#: the same chip (its SM constants are the H100's), with its datasheet's 60 MB of L2 and the copy
#: bandwidth seen on it (4.3 TB/s, .library/device/KINDS.md, 2026-10-28). The memory latency and
#: loads in flight are fitted on the H100's calibration points (``bench/gpu_calibration.py``).
H100 = Device(
    name="NVIDIA H100 80GB HBM3",
    sms=132,
    clock_hz=1.88e9,
    dram_bytes_per_s=2.98e12,
    l2_bytes=50 * 2**20,
    fma_lanes=128,
    registers=65536,
    shared_bytes=228 * 1024,
    max_warps=64,
    max_blocks=32,
    l1_cycles_per_line=0.716,
    shared_cycles_min=0.95,
    shared_cycles=0.95,
    barrier_cycles=96.0,
    memory_latency=300e-9,
    loads_in_flight=8.0,
    block_dispatch=80e-9,
    launch_floor=2.3e-6,
)
DEVICES: Mapping[str, Device] = {
    "h100": H100,
    "h200": replace(H100, name="NVIDIA H200", dram_bytes_per_s=4.3e12, l2_bytes=60 * 2**20),
}


@dataclass(frozen=True)
class Occupancy:
    """Blocks resident per SM, and what limits them (``blocks``, ``warps``, ``registers`` or
    ``shared memory``); ``warps``: resident warps per SM."""

    blocks: int
    limiter: str
    warps: int


def occupancy(device: Device, threads: int, registers: int, shared_bytes: int) -> Occupancy:
    """How many blocks of ``threads`` threads, each thread using ``registers`` registers and each
    block ``shared_bytes`` of static shared memory, an SM holds at once (registers are allocated
    per warp in units of 256; each block's shared memory takes 1 KB more, the driver's)."""
    warps = -(-threads // WARP)
    per_warp = math.ceil(max(1, registers) * WARP / 256) * 256
    limits = {
        "blocks": device.max_blocks,
        "warps": device.max_warps // warps,
        "registers": device.registers // (per_warp * warps),
        "shared memory": device.shared_bytes // (shared_bytes + 1024) if shared_bytes else device.max_blocks,
    }
    limiter = min(limits, key=lambda k: (limits[k], k != "blocks"))
    blocks = max(0, limits[limiter])
    return Occupancy(blocks, limiter, blocks * warps)


def access_cycles(a: AccessProfile, device: Device) -> float:
    """The SM cycles a warp spends issuing access ``a``, all its requests (module docstring):
    0 for a private one."""
    if a.space == "global":
        return a.requests * device.l1_cycles_per_line * max(1, a.lines)
    if a.space == "shared":
        return a.requests * max(device.shared_cycles_min, device.shared_cycles * a.conflict)
    return 0.0


@dataclass(frozen=True)
class LaunchPrediction:
    """The predicted time of one launch, the term that bounds it, every term (seconds), and the
    occupancy it runs at."""

    seconds: float
    bound: str
    terms: Mapping[str, float]
    occupancy: Occupancy


def predict_launch(
    launch: LaunchAccesses,
    device: Device,
    *,
    registers: int,
    shared_bytes: int,
    fmas: Mapping[str, int],
    compulsory_bytes: int,
) -> LaunchPrediction:
    """The time ``launch`` takes on ``device`` (module docstring). ``registers``: per thread (the
    compiled code's); ``shared_bytes``: static shared memory per block; ``fmas``: float
    multiply-adds per instance of each statement; ``compulsory_bytes``: the bytes of the tensors
    the launch reads or writes, each once."""
    occ = occupancy(device, launch.threads, registers, shared_bytes)
    per_sm = -(-launch.blocks // device.sms)  # blocks each busy SM runs
    resident = max(1, min(occ.blocks, per_sm))
    rounds = -(-per_sm // resident)
    reads = [a for a in launch.accesses if a.space == "global"]
    cycles = sum(access_cycles(a, device) for a in launch.accesses)  # per warp
    cycles += sum(n * fmas.get(s, 0) for s, n in launch.executions.items()) * WARP / device.fma_lanes
    issue = per_sm * launch.warps * cycles / device.clock_hz
    requests = sum(a.requests for a in reads)
    request_bytes = sum(a.requests * a.sectors * 32 for a in reads) / requests if requests else 128
    # a warp whose loads are separated by barriers (a tree after every row) has one in flight
    ahead = 1.0 if launch.barriers >= requests > 0 else device.loads_in_flight
    in_flight = min(device.sms, launch.blocks) * resident * launch.warps * request_bytes * ahead
    bandwidth = min(device.dram_bytes_per_s, in_flight / device.memory_latency)
    latency = (
        compulsory_bytes / bandwidth + rounds * launch.barriers * device.barrier_cycles / device.clock_hz
    )
    terms = {
        "issue": issue,
        "latency": latency,
        "dram": compulsory_bytes / device.dram_bytes_per_s,
        "dispatch": per_sm * device.block_dispatch,
    }
    bound = max(terms, key=lambda k: (terms[k], k == "dram"))  # at the bandwidth: DRAM bound
    return LaunchPrediction(terms[bound] + device.launch_floor, bound, terms, occ)
