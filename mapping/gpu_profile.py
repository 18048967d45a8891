"""The static GPU profile of a kernel (issue 32): for every launch of the ``cuda`` target's lowering,
what its warps ask of memory (:mod:`.gpu_access`), what the compiled code holds per thread, the
time the device model (:mod:`.gpu_model`) predicts, the resource that bounds it, and a diagnosis
in words; with the steps the runtime adds around the launches on every call (zeroing outputs,
wide accumulators), and the host's cost of a call.

:func:`profile_lowering` is pure: it takes the lowering, the registers of each launch's compiled
code (ptxas's report, which the caller gets from :func:`tcjit.nvrtc.compile_cubin`: this layer
compiles nothing) and a :class:`~tcjit.mapping.gpu_model.Device`. :func:`tcjit.gpu_profile`
builds one from a kernel and example tensors, and ``tcjit show --stage gpu-profile`` prints it.

The diagnosis names, launch by launch, what keeps it from the device's speed, most important
first: the bound (``dram``: it moves its bytes at the copy bandwidth, the best a launch that
must move them can do), then each pathology the counts show: blocks fewer than SMs, threads
fewer than a warp's lanes, ``threadIdx.x`` along a strided access (more lines per request than a
coalesced one), shared-memory bank conflicts, a serial chain of atomic additions, a barrier
between every load, the occupancy's limiter, register spills.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.names import entry_symbol
from .accumulation import wide_accumulators
from .gpu_access import LINE, WARP, AccessProfile, LaunchAccesses, access_profile, float_instructions
from .gpu_model import Device, LaunchPrediction, access_cycles, predict_launch
from .lower_gpu import GpuLowering, gpu_bodies

__all__ = [
    "BOUNDS",
    "HOST",
    "GpuProfile",
    "HostCost",
    "LaunchProfile",
    "LaunchResources",
    "RuntimeStep",
    "profile_json",
    "profile_lowering",
    "profile_text",
]

#: What each bound of :func:`~tcjit.mapping.gpu_model.predict_launch` means, in words.
BOUNDS: Mapping[str, str] = {
    "issue": "the SMs' load/store and FMA issue slots",
    "latency": "memory latency: too few loads in flight to cover it",
    "dram": "DRAM bandwidth",
    "dispatch": "starting blocks: many blocks, little work each",
}


@dataclass(frozen=True)
class LaunchResources:
    """What the compiled code of one launch uses per thread (ptxas's report).

    :ivar registers: registers per thread. :ivar spill_bytes: bytes of register spills stored and
    loaded per thread. :ivar stack_bytes: the stack frame (local memory) per thread.
    """

    registers: int
    spill_bytes: int = 0
    stack_bytes: int = 0


@dataclass(frozen=True)
class HostCost:
    """The host's time for a call of a compiled GPU kernel: ``call`` seconds for the wrapper
    (binding the tensors, allocating the outputs) and ``launch`` seconds for each launch, its
    runtime steps' included. Launches are asynchronous: a call takes the longer of its host time
    and its device time, both when calls follow each other and when a call waits for the device
    (a kernel with run-time bounds checks reads their result back: then the two add)."""

    call: float
    launch: float


#: The H100 machine's host (``bench/results/gpu_suite_small_nvidia_h100_80gb_hbm3.json``: a call of
#: every suite kernel on 1-element tensors, 2026-11-27; ``launch`` is CuPy's launch cost of
#: ``bench/results/gpu_micro_nvidia_h100_80gb_hbm3.md``, 5.1 us, and ``call`` the least squares
#: fit of the rest, ``bench/gpu_predict.py``).
HOST = HostCost(call=14e-6, launch=5.1e-6)


@dataclass(frozen=True)
class RuntimeStep:
    """Work the runtime does on the device around the launches of every call: ``what`` (in
    words), the bytes it writes and reads, and its predicted seconds (a launch at the copy
    bandwidth)."""

    what: str
    bytes: int
    seconds: float


@dataclass(frozen=True)
class LaunchProfile:
    """One launch's profile.

    :ivar name: the kernel's symbol (``tc_entry_<name>_k<i>``).
    :ivar accesses: what its warps ask of memory (:class:`~tcjit.mapping.gpu_access.LaunchAccesses`).
    :ivar resources: its compiled code's per-thread resources.
    :ivar shared_bytes: static shared memory per block.
    :ivar flops: float instructions per instance of each statement.
    :ivar tensor_bytes: the bytes of each global tensor it touches.
    :ivar requested_bytes: per tensor, the bytes of the 32-byte sectors all its warps request
        (the block's other warps not counted where they ask for the first's sectors).
    :ivar prediction: its predicted time, bound, terms and occupancy.
    :ivar diagnosis: what keeps it from the device's speed, most important first (module docstring).
    """

    name: str
    accesses: LaunchAccesses
    resources: LaunchResources
    shared_bytes: int
    flops: Mapping[str, int]
    tensor_bytes: Mapping[str, int]
    requested_bytes: Mapping[str, int]
    prediction: LaunchPrediction
    diagnosis: tuple[str, ...]

    @property
    def compulsory_bytes(self) -> int:
        """The bytes of the tensors it touches, each once."""
        return sum(self.tensor_bytes.values())

    @property
    def passes(self) -> Mapping[str, float]:
        """Per tensor, requested bytes over its size: how often its warps sweep it."""
        return {t: self.requested_bytes[t] / b for t, b in self.tensor_bytes.items() if b}


@dataclass(frozen=True)
class GpuProfile:
    """The static GPU profile of one kernel at fixed sizes (module docstring).

    :ivar kernel: the definition's name. :ivar sizes: the size of each size parameter.
    :ivar device: the device predicted for. :ivar launches: each launch's profile, in order.
    :ivar runtime: the runtime's steps of every call (zeroing, wide accumulators).
    :ivar waits: a call reads the bounds checks' result back, waiting for the device.
    :ivar host: the host's cost model. :ivar resources_from: where the registers come from
        (``ptxas 13.0 (nvrtc), sm_90``, or the caller's words).
    """

    kernel: str
    sizes: Mapping[str, int]
    device: Device
    launches: tuple[LaunchProfile, ...]
    runtime: tuple[RuntimeStep, ...]
    waits: bool
    host: HostCost = HOST
    resources_from: str = field(default="given")

    @property
    def device_seconds(self) -> float:
        """Predicted device time of a call: every launch and runtime step, one after another."""
        return sum(p.prediction.seconds for p in self.launches) + sum(s.seconds for s in self.runtime)

    @property
    def host_seconds(self) -> float:
        """Predicted host time of a call (:class:`HostCost`)."""
        return self.host.call + self.host.launch * (len(self.launches) + len(self.runtime))

    @property
    def seconds(self) -> float:
        """Predicted time of a call in a loop of calls: the longer of the host's and the device's
        time, or their sum where a call waits for the device."""
        if self.waits:
            return self.host_seconds + self.device_seconds
        return max(self.host_seconds, self.device_seconds)

    def __str__(self) -> str:
        return profile_text(self)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready values (:func:`profile_json`)."""
        return profile_json(self)

    @property
    def bound(self) -> str:
        """``host`` where the host's time decides :attr:`seconds`, else the slowest launch's bound."""
        if not self.launches or (not self.waits and self.host_seconds >= self.device_seconds):
            return "host"
        return max(self.launches, key=lambda p: p.prediction.seconds).prediction.bound


def _lines_coalesced(a: AccessProfile) -> int:
    """The 128-byte lines a request of ``a``'s lanes would touch were they contiguous."""
    return max(1, -(-a.lanes * a.element_bytes // LINE))


def diagnose(
    la: LaunchAccesses,
    prediction: LaunchPrediction,
    resources: LaunchResources,
    flops: Mapping[str, int],
    device: Device,
) -> tuple[str, ...]:
    """What keeps launch ``la`` from the device's speed, in words, most important first
    (``flops``: float instructions per instance of each statement)."""
    out = [f"bound by {BOUNDS[prediction.bound]} ({prediction.bound})"]
    if prediction.bound == "issue":  # the statement that takes most of the issue slots, and why
        lanes = WARP / device.fma_lanes
        costs = {s: n * flops.get(s, 0) * lanes for s, n in la.executions.items()}
        for a in la.accesses:
            costs[a.what] = costs.get(a.what, 0.0) + access_cycles(a, device)
        what = max(costs, key=costs.__getitem__)
        mine = [a for a in la.accesses if a.what == what and a.space != "private"]
        runs = la.executions.get(what, 0)
        asks = ", ".join(f"{a.kind} {a.tensor}" + " in shared memory" * (a.space == "shared") for a in mine)
        out.append(
            f"{costs[what] / max(sum(costs.values()), 1e-30):.0%} of the issue slots go to {what} "
            f"(x{runs} per thread): {len(mine)} memory requests ({asks or 'none'}) "
            f"for {flops.get(what, 0)} float operations each"
        )
    updated = {(a.what, a.tensor) for a in la.accesses if a.space == "global" and a.kind == "write"}
    for a in la.accesses:
        if a.kind == "read" and (a.what, a.tensor) in updated and la.executions.get(a.what, 0) > 1:
            out.append(
                f"{a.what} reads and writes {a.tensor} in global memory on each of its "
                f"{la.executions[a.what]} runs per thread: the sum is not held in a register"
            )
    if la.blocks < device.sms:
        idle = device.sms - la.blocks
        out.append(f"{la.blocks} block{'s' * (la.blocks > 1)} for {device.sms} SMs: {idle} SMs idle")
    if la.threads < WARP:
        out.append(f"{la.threads} threads per block: {WARP - la.threads} of each warp's {WARP} lanes idle")
    worst: dict[tuple[str, str], AccessProfile] = {}
    for a in la.accesses:
        if a.space == "global" and a.lines > max(2, 2 * _lines_coalesced(a)):
            key = (a.tensor, a.kind)
            if key not in worst or a.lines * a.requests > worst[key].lines * worst[key].requests:
                worst[key] = a
    for a in sorted(worst.values(), key=lambda a: -a.lines * a.requests):
        if a.stride is None:
            why = "its lanes run along threadIdx.y" if la.block[0] == 1 else "not affine in threadIdx.x"
            out.append(
                f"{a.what} {'reads' if a.kind == 'read' else 'writes'} {a.tensor} in {a.lines} lines "
                f"per request ({why}), {_lines_coalesced(a)} if coalesced"
            )
        else:
            out.append(
                f"threadIdx.x runs along a stride-{a.stride} access of {a.tensor} ({a.what}, {a.kind}): "
                f"{a.lines} lines per request, {_lines_coalesced(a)} if coalesced"
            )
    for a in la.accesses:
        if a.space == "shared" and a.conflict > 1:
            out.append(
                f"{a.what} {'reads' if a.kind == 'read' else 'writes'} shared buffer {a.tensor} "
                f"with a {a.conflict}-way bank conflict"
            )
    if la.atomics > 1:
        out.append(f"{la.atomics} atomic additions per thread, one after another: a serial chain")
    reads = sum(a.requests for a in la.accesses if a.space == "global" and a.kind == "read")
    if la.barriers and la.barriers >= reads > 0:
        out.append(f"a barrier between every load ({la.barriers} per thread): one load in flight per warp")
    occ = prediction.occupancy
    if occ.warps < device.max_warps // 2 and la.blocks >= device.sms:
        out.append(f"{occ.warps} of {device.max_warps} warps resident per SM, limited by {occ.limiter}")
    if resources.spill_bytes:
        out.append(f"{resources.spill_bytes} bytes of register spills per thread (local memory)")
    return tuple(out)


def _tensor_bytes(cdef: CheckedDef, sizes: Mapping[str, int]) -> dict[str, int]:
    return {
        t.name: math.prod(int(s.evaluate(sizes)) for s in t.shape) * max(1, t.dtype.bits // 8)
        for t in cdef.tensor_infos
    }


def _requested(la: LaunchAccesses) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in la.accesses:
        if a.space == "global":
            warps = 1 if a.shared_by_warps else la.warps
            out[a.tensor] = out.get(a.tensor, 0) + a.requests * a.sectors * 32 * warps * la.blocks
    return out


def runtime_steps(
    cdef: CheckedDef, sizes: Mapping[str, int], zero: frozenset[str], checks: bool, device: Device
) -> tuple[RuntimeStep, ...]:
    """The runtime's device work on every call (``tcjit/cuda_runtime.py``): each output or temporary
    the kernels need zeroed is zeroed; each sum accumulated wide is copied into a buffer of the
    wide type and rounded back after the last launch; the bounds checks' error slots are zeroed."""
    nbytes = _tensor_bytes(cdef, sizes)
    wide = wide_accumulators(cdef, sizes)
    steps = []

    def step(what: str, moved: int) -> None:
        steps.append(RuntimeStep(what, moved, device.launch_floor + moved / device.dram_bytes_per_s))

    for t in cdef.tensor_infos:
        if t.name in wide:
            count = nbytes[t.name] // max(1, t.dtype.bits // 8)
            held = count * (wide[t.name].bits // 8)
            step(f"copy {t.name} into its {wide[t.name].name} accumulator", nbytes[t.name] + held)
            step(f"round {t.name} back", nbytes[t.name] + held)
        elif t.name in zero:
            step(f"zero {t.name}", nbytes[t.name])
    if checks:
        step("zero the bounds checks' error slots", 16)
    return tuple(steps)


def profile_lowering(
    cdef: CheckedDef,
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    low: GpuLowering,
    resources: Mapping[str, LaunchResources],
    device: Device,
    *,
    checks: bool = False,
    symbol: str | None = None,
    host: HostCost = HOST,
    resources_from: str = "given",
) -> GpuProfile:
    """The profile of ``low`` (:func:`~tcjit.mapping.lower_gpu.lower_gpu` of ``cdef`` at ``sizes``)
    on ``device``.

    :arg strides: each tensor's element strides. :arg resources: each launch's, by its symbol
        (``<symbol>_k<i>``, ``symbol`` defaulting to ``tc_entry_<name>`` as for
        :func:`~tcjit.mapping.lower_gpu.lower_cuda`).
    :arg checks: the source has run-time bounds checks (a call waits for their result).
    """
    symbol = symbol or entry_symbol(cdef.name)
    wide = wide_accumulators(cdef, sizes)
    bodies = gpu_bodies(low.plan, low.prepared.scop, cdef, sizes, wide, low.prepared.checked)
    flops = {name: float_instructions(b) for name, b in bodies.items()}
    held = {t.name: max(1, (wide.get(t.name) or t.dtype).bits // 8) for t in cdef.tensor_infos}
    nbytes = _tensor_bytes(cdef, sizes)
    out = []
    for i, (la, (plan, _)) in enumerate(
        zip(access_profile(cdef, low.launches, bodies, sizes, strides, wide), low.launches)
    ):
        name = f"{symbol}_k{i}"
        res = resources[name]
        shared = sum(math.prod(b.shape) * held[b.tensor] for b in plan.buffers if b.space == "shared")
        touched = {a.tensor: nbytes[a.tensor] for a in la.accesses if a.space == "global"}
        prediction = predict_launch(
            la,
            device,
            registers=res.registers,
            shared_bytes=shared,
            fmas=flops,
            compulsory_bytes=sum(touched.values()),
        )
        out.append(
            LaunchProfile(
                name,
                la,
                res,
                shared,
                {s: flops.get(s, 0) for s in la.executions},
                touched,
                _requested(la),
                prediction,
                diagnose(la, prediction, res, flops, device),
            )
        )
    zero = frozenset(low.prepared.zero)
    return GpuProfile(
        cdef.name,
        dict(sizes),
        device,
        tuple(out),
        runtime_steps(cdef, sizes, zero, checks, device),
        checks,
        host,
        resources_from,
    )


# ------------------------------------------------------------------------------------- printing
def _time(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 'es' if noun.endswith('ch') else 's'}"


def _dims(d) -> str:
    return "x".join(str(v) for v in d)


def waves(p: LaunchProfile, sms: int) -> float:
    """Rounds of resident blocks the launch needs over the SMs (its blocks over what all SMs hold)."""
    return p.accesses.blocks / (sms * max(1, p.prediction.occupancy.blocks))


def _launch_lines(i: int, p: LaunchProfile, profile: GpuProfile) -> list[str]:
    la, pr, dev = p.accesses, p.prediction, profile.device
    occ = pr.occupancy
    lines = [
        f"launch {i}  {p.name}  grid {_dims(la.grid)} ({_n(la.blocks, 'block')})  "
        f"block {_dims(la.block)} ({_n(la.threads, 'thread')}, {_n(la.warps, 'warp')})",
        f"  occupancy: {occ.blocks} blocks an SM, limited by {occ.limiter}: {occ.warps} of "
        f"{dev.max_warps} warps; {waves(p, dev.sms):.3g} waves over {dev.sms} SMs",
        f"  resources per thread: {p.resources.registers} registers, {p.resources.spill_bytes} B spilled, "
        f"{p.resources.stack_bytes} B stack; {p.shared_bytes} B shared memory a block",
        f"  predicted {_time(pr.seconds)}, bound by {pr.bound}: "
        + ", ".join(f"{k} {_time(v)}" for k, v in pr.terms.items()),
        "  per thread: "
        + (", ".join(f"{s} x{n} ({p.flops.get(s, 0)} flops)" for s, n in la.executions.items()) or "nothing")
        + f"; {la.barriers} barriers, {la.atomics} atomics",
        "  accesses, per warp request (x requests per thread):",
    ]
    for a in la.accesses:
        where = f"{a.what}: {a.kind} {a.tensor} ({a.space})"
        if a.space == "global":
            stride = "not affine" if a.stride is None else f"stride {a.stride}"
            shared = ", other warps hit L1" if a.shared_by_warps else ""
            facts = (
                f"{stride}, {_n(a.sectors, 'sector')} in {_n(a.lines, 'line')}, {_n(a.lanes, 'lane')}{shared}"
            )
        elif a.space == "shared":
            facts = (
                f"{a.conflict}-way bank conflict, {a.lanes} lanes" if a.conflict > 1 else f"{a.lanes} lanes"
            )
        else:
            facts = "registers"
        lines.append(f"    {where}: {facts} x{a.requests}")
    if p.tensor_bytes:
        lines.append(
            "  traffic: "
            + ", ".join(
                f"{t} {_bytes(p.requested_bytes.get(t, 0))} requested of {_bytes(b)} "
                f"({p.passes.get(t, 0):.3g} passes)"
                for t, b in p.tensor_bytes.items()
            )
        )
    lines.append("  diagnosis:")
    lines += [f"    {d}" for d in p.diagnosis]
    return lines


def profile_text(profile: GpuProfile) -> str:
    """``profile`` as text, one launch after another, ended by a newline."""
    sizes = " ".join(f"{k}={v}" for k, v in profile.sizes.items())
    dev = profile.device
    compulsory = sum({t: b for p in profile.launches for t, b in p.tensor_bytes.items()}.values())
    bound = BOUNDS.get(profile.bound, "the host: the wrapper and its launches take longer than the device")
    lines = [
        f"{profile.kernel} at {sizes} on {dev.name} (registers: {profile.resources_from})",
        f"predicted {_time(profile.seconds)} a call: device {_time(profile.device_seconds)}, "
        f"host {_time(profile.host_seconds)}{' (a call waits for the device)' if profile.waits else ''}; "
        f"bound by {bound}",
        f"{_n(len(profile.launches), 'launch')}; the tensors, each once: {_bytes(compulsory)}, "
        f"{_time(compulsory / dev.dram_bytes_per_s)} at the copy bandwidth",
    ]
    for s in profile.runtime:
        lines.append(f"runtime step: {s.what}, {_bytes(s.bytes)}, {_time(s.seconds)}")
    for i, p in enumerate(profile.launches):
        lines.append("")
        lines += _launch_lines(i, p, profile)
    return "\n".join(lines) + "\n"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def profile_json(profile: GpuProfile) -> dict[str, Any]:
    """``profile`` as JSON-ready values (times in seconds, sizes in bytes)."""
    launches = []
    for p in profile.launches:
        la, pr = p.accesses, p.prediction
        launches.append(
            {
                "name": p.name,
                "grid": list(la.grid),
                "block": list(la.block),
                "blocks_per_sm": pr.occupancy.blocks,
                "warps_per_sm": pr.occupancy.warps,
                "occupancy_limiter": pr.occupancy.limiter,
                "waves": waves(p, profile.device.sms),
                "registers": p.resources.registers,
                "spill_bytes": p.resources.spill_bytes,
                "stack_bytes": p.resources.stack_bytes,
                "shared_bytes": p.shared_bytes,
                "predicted_s": pr.seconds,
                "bound": pr.bound,
                "terms_s": {k: _finite(v) for k, v in pr.terms.items()},
                "executions": dict(la.executions),
                "flops": dict(p.flops),
                "barriers": la.barriers,
                "atomics": la.atomics,
                "accesses": [
                    {
                        "what": a.what,
                        "tensor": a.tensor,
                        "kind": a.kind,
                        "space": a.space,
                        "stride": a.stride,
                        "sectors": a.sectors,
                        "lines": a.lines,
                        "conflict": a.conflict,
                        "lanes": a.lanes,
                        "requests": a.requests,
                        "element_bytes": a.element_bytes,
                        "shared_by_warps": a.shared_by_warps,
                    }
                    for a in la.accesses
                ],
                "tensor_bytes": dict(p.tensor_bytes),
                "requested_bytes": dict(p.requested_bytes),
                "diagnosis": list(p.diagnosis),
            }
        )
    return {
        "kernel": profile.kernel,
        "sizes": dict(profile.sizes),
        "device": profile.device.name,
        "resources_from": profile.resources_from,
        "predicted_s": profile.seconds,
        "device_s": profile.device_seconds,
        "host_s": profile.host_seconds,
        "waits": profile.waits,
        "bound": profile.bound,
        "runtime": [{"what": s.what, "bytes": s.bytes, "predicted_s": s.seconds} for s in profile.runtime],
        "launches": launches,
    }
