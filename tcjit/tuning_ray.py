"""Tuning on a Ray cluster: which workers may measure candidates for a key, and where each ran.

Options are stored under a key that names the architecture of the machine that tunes
(:func:`tcjit.tuned.device_arch`: the host's ISA identity on the CPU, ``sm_XX`` on a GPU). A time
measured on a worker of another kind says nothing about this kind of machine, so:

- before any candidate runs, every node able to run one is asked what it is
  (:func:`ray_measure`); a node of another architecture, or one that cannot run tcjit's tasks
  (tcjit or torch missing, another version), refuses the run with a :class:`~tcjit.TCCallError`
  naming the node;
- each task checks again on its worker (a node may join the cluster later) and measures nothing on
  another architecture (``"skipped"``: neither stored nor counted);
- each answer is a :class:`RayMeasurement`: which node measured it, and its architecture.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from .genetic import Measurement
from .genetic.evaluation import ray_evaluator
from .polyhedral.errors import TCCallError

__all__ = [
    "RayMeasurement",
    "WorkerIdentity",
    "check_nodes",
    "located",
    "ray_measure",
    "task_resources",
    "worker_identity",
]


@dataclass(frozen=True)
class RayMeasurement(Measurement):
    """A :class:`~tcjit.genetic.Measurement` taken on a Ray worker.

    :ivar node: the worker node's address, e.g. ``"10.0.0.12"``.
    :ivar arch: that worker's architecture as a tuning key names it, e.g.
        ``"x86_64-7a0258d54b25f5dc"`` or ``"sm_90"``.
    """

    node: str = ""
    arch: str = ""


@dataclass(frozen=True)
class WorkerIdentity:
    """Where a Ray task runs: :ivar node: its node's address; :ivar arch: its architecture."""

    node: str
    arch: str


def worker_identity(target: str) -> WorkerIdentity:
    """This process's node address (Ray's view of it) and architecture for ``target`` (on a
    worker with a GPU assigned, the compute capability of that GPU)."""
    import ray

    from .tuned import device_arch

    return WorkerIdentity(ray.util.get_node_ip_address(), device_arch((), target))


def located(m: Measurement, where: WorkerIdentity) -> RayMeasurement:
    """``m`` with the node and architecture that measured it."""
    return RayMeasurement(m.time, m.status, m.detail, node=where.node, arch=where.arch)


def task_resources(target: str, threads: int) -> dict:
    """What one candidate's task reserves on a node: a GPU for ``"cuda"``; for the CPU targets as
    many CPUs as the OpenMP threads its kernels run with, so that two tasks never time their kernels
    on the same cores (a CPU-only reservation of one core would let a node run ``cores`` timings
    at once, each with ``threads`` threads)."""
    if target == "cuda":
        return {"num_gpus": 1}
    return {"num_cpus": max(1, int(threads))}


def ray_measure(
    task_fn: Callable,
    *,
    address: str,
    arch: str,
    target: str,
    task_timeout: float,
):
    """The evaluator of a tuning run on the Ray cluster at ``address``, after checking its nodes.

    :arg task_fn: ``task_fn((options, best_time))``, run as one task per candidate; answers a
        :class:`RayMeasurement`.
    :arg arch: the tuning key's architecture: every node able to run a task must have it.
    :arg target: ``"cpu"``, ``"cuda"`` or ``"cuda-emulated"`` (what a task reserves:
        :func:`task_resources`).
    :arg task_timeout: seconds from a task's start to its answer.
    :raises TCCallError: no node can run a task, a node cannot run tcjit's tasks, or a node is of
        another architecture; Ray is shut down again if it was started here.
    """
    import torch

    # A worker's candidates run with the threads this process runs with (the run's context).
    resources = task_resources(target, torch.get_num_threads())
    measure = ray_evaluator(task_fn, address=address, task_timeout=task_timeout, task_options=resources)
    try:
        answers = measure.on_every_node(functools.partial(worker_identity, target))
        check_nodes(answers, arch, resources, address)
    except BaseException:
        measure.close()
        raise
    return measure


def check_nodes(answers: list, arch: str, resources: dict, address: str) -> None:
    """Refuse a tuning run on a cluster unless every node able to run a task (``answers``, from
    ``on_every_node(worker_identity)``) answered, with architecture ``arch``; :raises TCCallError:
    naming the first node that is not fit and what to do."""
    where = f"autotune(ray={address!r})"
    if not answers:
        raise TCCallError(
            f"{where}: no alive node of the Ray cluster has the resources one candidate needs ({resources})",
            hint="give the nodes that many CPUs (ray start --num-cpus) or a GPU (--num-gpus), or "
            "tune with fewer threads (torch.set_num_threads)",
        )
    broken = [a for a in answers if a.error]
    if broken:
        raise TCCallError(
            f"{where}: node {broken[0].node} cannot run tcjit's tasks: {broken[0].error}",
            hint="every node needs the same Python, tcjit (with its torch and islpy) and Ray versions "
            "as this process, and a C compiler; see docs/tuning.md",
        )
    foreign = [a for a in answers if a.value.arch != arch]
    if foreign:
        f = foreign[0]
        raise TCCallError(
            f"{where}: node {f.node} is {f.value.arch}, but this machine is {arch}: tuned options "
            f"are stored for this machine's architecture, so every node must be of the same kind "
            f"({len(foreign)} of {len(answers)} nodes are not)",
            hint="tune on a cluster of one machine type (same CPU model and flags, or the same GPU "
            "compute capability), from a machine of that type",
        )
