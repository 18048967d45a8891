"""Tuning through Ray (``autotune(..., ray=ADDRESS)``), against a real local Ray instance.

The full tier starts one Ray head for this module (``bench/tuning_ray.py``'s ``local_ray_head``:
``ray start --head --block`` in its own session, a private temporary folder, free ports, stopped by
process group at the end) and tunes a suite kernel through it end to end. ``scripts/test.sh
--tier=full`` installs the ``ray`` extra; without it these tests fail in the full tier (the
``ray_module`` fixture), they are not skipped.

Time budget on a 2-core machine: :data:`BUDGET_S` for the module, enforced piecewise: the head
must start within ``HEAD_START_TIMEOUT`` (90 s), the end-to-end run is a subprocess killed after
:data:`RUN_TIMEOUT_S`, and the other runs are bounded by their task timeouts. Measured: about
40 s for the module (head 5 s, end-to-end run 15-20 s).

Which nodes may measure for a key (same architecture as this machine, able to run tcjit) is
checked on values in the default tier.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import tcjit
from tcjit import TCCallError
from tcjit.cpu_runtime import host_isa
from tcjit.genetic.evaluation import NodeAnswer
from tcjit.tuning_ray import WorkerIdentity, check_nodes, task_resources

BENCH = Path(__file__).resolve().parents[2] / "bench"
#: Seconds the whole module may take in the full tier (see the module docstring).
BUDGET_S = 240
#: Seconds the end-to-end tuning run (a subprocess) may take before it is killed.
RUN_TIMEOUT_S = 150
OTHER_ARCH = "x86_64-0000000000000000"  # no machine has this digest


# -- which nodes may measure (values, default tier) -------------------------------------------------
def test_a_cpu_candidate_reserves_the_cores_its_threads_run_on_and_a_cuda_one_a_gpu():
    assert task_resources("cpu", 4) == {"num_cpus": 4}
    assert task_resources("cuda-emulated", 2) == {"num_cpus": 2}
    assert task_resources("cpu", 0) == {"num_cpus": 1}
    assert task_resources("cuda", 8) == {"num_gpus": 1}


def test_a_cluster_with_a_node_unfit_for_the_key_is_refused_naming_the_node():
    here = host_isa()
    fit = NodeAnswer("10.0.0.1", WorkerIdentity("10.0.0.1", here))
    check_nodes([fit, fit], here, {"num_cpus": 2}, "head:6379")  # all fit: no error
    foreign = NodeAnswer("10.0.0.2", WorkerIdentity("10.0.0.2", OTHER_ARCH))
    with pytest.raises(TCCallError, match=f"node 10.0.0.2 is {OTHER_ARCH}, but this machine is {here}") as e:
        check_nodes([fit, foreign], here, {"num_cpus": 2}, "head:6379")
    assert "1 of 2 nodes" in str(e.value) and "one machine type" in e.value.hint
    broken = NodeAnswer("10.0.0.3", None, "ModuleNotFoundError: No module named 'tcjit'")
    with pytest.raises(TCCallError, match=r"node 10\.0\.0\.3 cannot run tcjit's tasks: ModuleNotFoundError"):
        check_nodes([fit, broken], here, {"num_cpus": 2}, "head:6379")
    with pytest.raises(TCCallError, match=r"no alive node .*\{'num_gpus': 1\}"):
        check_nodes([], "sm_90", {"num_gpus": 1}, "head:6379")


# -- a real local Ray instance (full tier) -----------------------------------------------------------
@pytest.fixture(scope="module")
def ray_head(ray_module, tmp_path_factory):
    """A local Ray head for the module; its address. Workers compile into a private kernel store."""
    sys.path.insert(0, str(BENCH))
    try:
        from tuning_ray import local_ray_head
    finally:
        sys.path.remove(str(BENCH))
    env = {"TCJIT_CACHE_DIR": str(tmp_path_factory.mktemp("ray-kernels")), "RAY_AUTH_MODE": "disabled"}
    start = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")  # a local instance: no token written to ~/.ray
        with local_ray_head(2, env) as address:
            yield address
    assert time.monotonic() - start < BUDGET_S, "the Ray tests overran their time budget"


@pytest.mark.full
def test_autotune_through_ray_measures_on_workers_and_stores_under_their_arch(ray_head, tmp_path):
    out = tmp_path / "tuning_ray"
    cmd = [sys.executable, str(BENCH / "tuning_ray.py"), "--address", ray_head, "--out", str(out)]
    cmd += ["--kernel", "matmul", "--generations", "2", "--population", "4", "--timeout", "60"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.with_suffix(".json").read_text())
    run = doc["run"]
    # Every candidate was measured by a Ray task, which says where it ran and on what.
    assert run["measured_as"] == ["RayMeasurement"]
    assert run["candidates"] >= 4 and run["statuses"].get("ok", 0) >= 1
    assert [n["arch"] for n in run["nodes"]] == [host_isa()] and run["nodes"][0]["node"]
    # The winner is stored under this machine's (= the workers') architecture, and a call uses it.
    assert run["key_arch"] == host_isa()
    assert run["stored"] and run["stored_options_used"]
    assert run["correct"] and run["best_time_s"] <= run["default_time_s"]
    assert "| node | architecture |" in out.with_suffix(".md").read_text()


@pytest.mark.full
def test_a_cluster_of_another_architecture_is_refused_before_any_candidate_runs(ray_head, ray_module):
    from tcjit.tuning_ray import ray_measure

    with pytest.raises(TCCallError, match=f"is {host_isa()}, but this machine is {OTHER_ARCH}"):
        ray_measure(int, address=ray_head, arch=OTHER_ARCH, target="cpu", task_timeout=30)
    assert not ray_module.is_initialized()  # the connection made for the run is closed again


@pytest.mark.full
def test_a_task_on_a_worker_of_another_architecture_measures_nothing(ray_head, ray_module):
    from tcjit.binding import bind
    from tcjit.genetic import ray_evaluator
    from tcjit.tuning_worker import context_blob, ray_task

    kernel = tcjit.define("def scale(float(N) X) -> (Y) { Y(n) = 2 * X(n) }")
    x = torch.randn(33)
    blob = context_blob(kernel, bind(kernel.definition, (x,)), (x,), "cpu")
    options = tcjit.MappingOptions.naive()
    foreign = functools.partial(ray_task, blob, OTHER_ARCH)
    evaluate = ray_evaluator(foreign, address=ray_head, task_timeout=60)
    try:
        (m,) = evaluate([options], None, None)
        same = ray_evaluator(functools.partial(ray_task, blob, host_isa()), task_timeout=60)
        (ok,) = same([options], None, None)
    finally:
        evaluate.close()
    assert (m.status, m.time, m.arch) == ("skipped", None, host_isa()), m
    assert f"this node is {host_isa()}, not {OTHER_ARCH}" in m.detail
    assert ok.status == "ok" and ok.arch == host_isa() and ok.node == m.node
