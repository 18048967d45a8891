"""Sanitizer builds of generated C (``TCJIT_SANITIZE``, scripts/sanitize.sh).

The setting is part of the cache key, an AddressSanitizer build is refused (not loaded, which would
end the process) where the ASan runtime was not preloaded, a planted out-of-bounds write and a
signed overflow are reported, and a sample of compiled programs runs clean under both sanitizers
(the full tier runs every compiled test module under them).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tcjit import TCError
from tcjit.cpu_runtime import compile_flags, sanitizers, toolchain_identity

ROOT = Path(__file__).resolve().parents[2]


def _asan_runtime() -> str | None:
    try:
        path = subprocess.run(
            [os.environ.get("CC", "cc"), "-print-file-name=libasan.so"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return path if os.path.isabs(path) and os.path.exists(path) else None


needs_asan = pytest.mark.skipif(
    _asan_runtime() is None, reason="the C compiler has no AddressSanitizer runtime"
)


def _run(code: str, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("TCJIT_SANITIZE", "LD_PRELOAD")} | env
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
    )


def test_the_setting_is_read_checked_and_keyed(monkeypatch) -> None:
    monkeypatch.delenv("TCJIT_SANITIZE", raising=False)
    plain = toolchain_identity()
    assert sanitizers() == () and "-fsanitize" not in " ".join(compile_flags())
    monkeypatch.setenv("TCJIT_SANITIZE", "undefined")
    assert sanitizers() == ("undefined",)
    assert "-fsanitize=undefined" in compile_flags()
    assert toolchain_identity() != plain
    monkeypatch.setenv("TCJIT_SANITIZE", "thread")
    with pytest.raises(TCError, match="unknown sanitizer 'thread'"):
        sanitizers()


def test_an_address_build_is_refused_without_the_runtime(tmp_path) -> None:
    """Loading an ASan-built kernel into a plain process would end it; tcjit refuses first."""
    proc = _run(
        """
        import torch, tcjit
        k = tcjit.define("def f(float(N) X) -> (Y) { Y(i) = X(i) + 1 }")
        try:
            k(torch.ones(3))
        except tcjit.TCError as e:
            print(type(e).__name__, "|", e)
        """,
        {"TCJIT_SANITIZE": "address", "TCJIT_CACHE_DIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TCOptionsError" in proc.stdout and "AddressSanitizer runtime" in proc.stdout, proc.stdout


@needs_asan
@pytest.mark.parametrize(
    ("body", "report"),
    [
        ("p[n] = 1.0f;", "heap-buffer-overflow"),  # one past the end of a torch tensor
        ("int x = (int)n + 2147483647; p[0] = (float)x;", "signed integer overflow"),
    ],
    ids=["out-of-bounds", "signed-overflow"],
)
def test_the_sanitizers_report_a_planted_defect(body: str, report: str) -> None:
    proc = _run(
        f"""
        import ctypes, torch
        from tcjit.cpu_runtime import compile_c, load
        blob = compile_c('''
            #include <stdint.h>
            void planted(float *p, int64_t n) {{ {body} }}
        ''', name="planted")
        fn = load(blob, name="planted").planted
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        x = torch.zeros(16)
        fn(x.data_ptr(), 16)
        print("not reported")
        """,
        {
            "TCJIT_SANITIZE": "all",
            "LD_PRELOAD": _asan_runtime() or "",
            "ASAN_OPTIONS": "detect_leaks=0",
            "UBSAN_OPTIONS": "halt_on_error=1",
        },
    )
    assert proc.returncode != 0 and report in proc.stderr, (proc.returncode, proc.stdout, proc.stderr[-3000:])


def _run_sanitize(*args: str, timeout: int, tier: str | None = None) -> subprocess.CompletedProcess:
    """scripts/sanitize.sh with ``args``, in this test run's tier unless ``tier`` names one (the
    tests it runs read ``TCJIT_TEST_TIER``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    if tier is not None:
        env["TCJIT_TEST_TIER"] = tier
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "sanitize.sh"), "-q", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
    )


def _sanitize(*args: str, timeout: int, request=None, tier: str | None = None) -> str:
    """scripts/sanitize.sh with ``args``; checked; its output. With ``request``, the run's summary
    line (how many kernels were compiled sanitized) is written to the terminal, even under -q: a
    closing note needs the figure of the full tier's run."""
    proc = _run_sanitize(*args, timeout=timeout, tier=tier)
    assert proc.returncode == 0, f"sanitized run failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    assert " kernels compiled with them" in proc.stdout, proc.stdout[-2000:]
    plugins = request.config.pluginmanager if request else None
    reporter = plugins.get_plugin("terminalreporter") if plugins else None
    if reporter is not None:
        # the terminal writes into pytest's capture while a test runs: around it, as pytest's own
        # reports do (written plainly, the lines were lost: the full tier's log had none)
        with plugins.get_plugin("capturemanager").global_and_fixture_disabled():
            for line in proc.stdout.splitlines():
                if " kernels compiled with them" in line or (line.startswith("=") and " passed" in line):
                    reporter.write_line(f"\n{' '.join(args) or 'sanitize.sh'}: {line.strip()}")
    return proc.stdout


PLANTED_TEST = """
import ctypes, torch
from tcjit.cpu_runtime import compile_c, load

def test_planted():
    source = "#include <stdint.h>\\nvoid planted(float *p, int64_t n) { p[n] = 1.0f; }"
    blob = compile_c(source, name="planted")
    fn = load(blob, name="planted").planted
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    x = torch.zeros(16)
    fn(x.data_ptr(), 16)
"""


@needs_asan
def test_a_sanitized_run_shows_the_report_that_ended_it(tmp_path) -> None:
    """pytest captures the process's stderr; the report of a sanitizer that halts it must still be
    printed, and the run must fail."""
    test = tmp_path / "test_planted.py"
    test.write_text(PLANTED_TEST)
    proc = _run_sanitize(str(test), timeout=300)
    assert proc.returncode != 0
    assert "sanitize: the sanitizers reported" in proc.stderr and "heap-buffer-overflow" in proc.stderr, (
        proc.stdout[-2000:],
        proc.stderr[-2000:],
    )


@needs_asan
def test_a_sample_of_compiled_programs_runs_clean_under_the_sanitizers(request) -> None:
    """The default tier's sample: the widened fuzzer's examples, the crash reproducer, the
    prelude's special values (where the first sanitized run found a signed overflow in exp) and
    the promoted bool outputs (where the first full run found copies in of uninitialised memory),
    and a guarded read's copy (where the second found one before its tensor). At the default
    tier's example counts in either tier: the full tier runs the fuzzers sanitized at its own
    counts below, and at them the sample took 647 s of its 600 s on 2 cores."""
    _sanitize(
        "tests/gpu/test_gpu_promotion.py::test_a_group_copies_in_only_what_it_reads_before_writing",
        "tests/gpu/test_gpu_promotion.py::test_a_guarded_read_outside_the_tensor_is_not_copied_in",
        "tests/backends/test_compiled_programs.py::test_vector_lane_reductions_and_exp_keep_special_values",
        "tests/backends/test_compiled_fuzz_nests.py::test_random_nests_match_the_oracle",
        "tests/backends/test_crash_regressions.py::test_masked_convolution_runs_with_the_default_options[B=2,C=5,H=6,W=7,F=3,K=3]",
        timeout=600,
        request=request,
        tier="default",
    )


@needs_asan
@pytest.mark.full
def test_every_compiled_test_module_runs_clean_under_the_sanitizers(request) -> None:
    """scripts/sanitize.sh with no arguments (every module that compiles programs, at their default
    sizes), then both fuzzers with the full tier's example counts; each run's count of sanitized
    kernels is written to the terminal."""
    _sanitize(timeout=6 * 3600, request=request)
    _sanitize(
        "--tier=full",
        "tests/backends/test_compiled_fuzz.py",
        "tests/backends/test_compiled_fuzz_nests.py",
        timeout=6 * 3600,
        request=request,
    )
