"""A kernel compiled in parts (tcjit/cpu_runtime.py, ``compile_c``; c_kernel.py, ``TC_PART_OF``).

The printer guards each function of a kernel (the entry point 0, parallel regions from 1) with
``#if TC_PART_OF(number)``; the runtime compiles big kernels in several compiler processes at once
and links the objects. The parts must cover every function exactly once, small kernels must stay
in one piece, and a kernel built in parts must compute exactly what the one-piece build computes.
"""

from __future__ import annotations

import functools
import re

import compiled_helpers as H
import pytest
import torch

import tcjit
from tcjit import cpu_runtime, suite
from tcjit.pipeline import lowered
from tcjit.polyhedral.lang.check import check_source

MLP3 = suite.get("mlp3").source
SIZES = {"B": 40, "M": 72, "N": 48, "P": 24, "Q": 16}  # enough work for threads: regions
ADD = "def add(float(N) A, float(N) B) -> (C) { C(n) = A(n) + B(n) }"


def _source(src: str, sizes: dict) -> str:
    return lowered(check_source(src).entry(), sizes).source


def _mlp3_inputs(name: str):
    g = torch.Generator().manual_seed(3)
    s = SIZES
    shapes = [(s["B"], s["M"]), (s["N"], s["M"]), (s["N"],), (s["P"], s["N"]), (s["P"],)]
    shapes += [(s["Q"], s["P"]), (s["Q"],)]
    return tuple(torch.randn(*shape, generator=g) for shape in shapes)


def test_every_function_is_guarded_once() -> None:
    source = _source(MLP3, SIZES)
    numbers = [int(n) for n in re.findall(r"^#if TC_PART_OF\((\d+)\)$", source, re.MULTILINE)]
    assert sorted(numbers) == list(range(len(numbers))) and len(numbers) > 3
    assert source.count("TC_REGION void") == 2 * (len(numbers) - 1)  # prototype and definition


@pytest.mark.parametrize("jobs", [2, 3, 8])
def test_parts_cover_every_function_once(jobs: int) -> None:
    source = _source(MLP3, SIZES)
    parts = cpu_runtime.split_parts(source, jobs)
    numbers = sorted(n for part in parts for n in part)
    assert numbers == sorted(int(n) for n in re.findall(r"^#if TC_PART_OF\((\d+)\)$", source, re.MULTILINE))
    assert 2 <= len(parts) <= jobs  # three register tiles: worth splitting


def test_small_kernels_and_one_job_stay_whole() -> None:
    small = _source(ADD, {"N": 1000})
    assert len(cpu_runtime.split_parts(small, 8)) == 1
    assert len(cpu_runtime.split_parts(_source(MLP3, SIZES), 1)) == 1
    assert cpu_runtime.split_parts("int f(void) { return 0; }", 8) == []


def test_a_kernel_built_in_parts_computes_what_the_whole_one_does(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path))  # compile, whatever earlier runs stored
    seen = []
    original = cpu_runtime.compile_c

    def counting(source, *, name="kernel", jobs=None):
        seen.append((name, len(cpu_runtime.split_parts(source, jobs))))
        return original(source, name=name, jobs=jobs)

    results = {}
    for jobs in (1, 2):
        monkeypatch.setattr(cpu_runtime, "compile_c", functools.partial(counting, jobs=jobs))
        name = f"mlp3_jobs{jobs}"  # a kernel of its own: no cache hit across the two builds
        results[jobs] = H.as_tuple(tcjit.define(MLP3.replace("mlp3", name, 1))(*_mlp3_inputs(name)))
    assert [n for _, n in seen] == [1, 2], seen
    for whole, split in zip(results[1], results[2]):
        assert torch.equal(whole, split)
    H.check_against_oracle(MLP3, None, _mlp3_inputs("mlp3"), reduction_length=SIZES["M"])


def test_a_compiler_error_in_one_part_is_reported() -> None:
    source = _source(MLP3, SIZES).replace("#if TC_PART_OF(2)", "#if TC_PART_OF(2)\n#error broken part", 1)
    with pytest.raises(tcjit.TCInternalError, match="broken part"):
        cpu_runtime.compile_c(source, name="broken", jobs=2)
