"""scripts/setup.sh: one stamp per installed part, so that the demo's set-up (tcjit alone) never
leaves the tests without their extras.

The set-up runs for real, in a scratch environment (``TCJIT_VENV``) that sees this environment's
packages through a ``.pth`` file, so nothing is downloaded but tcjit is installed into it by pip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _setup(venv: Path, *parts: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TCJIT_VENV": str(venv)}
    return subprocess.run(
        ["bash", str(ROOT / "scripts/setup.sh"), *parts], env=env, capture_output=True, text=True, timeout=300
    )


def _stamps(venv: Path) -> set[str]:
    return {p.name.removeprefix(".tcjit-installed-") for p in venv.glob(".tcjit-installed-*")}


def test_an_unknown_extra_is_refused(tmp_path):
    proc = _setup(ROOT / ".venv", "no-such-extra")
    assert proc.returncode == 2
    assert "no extra named 'no-such-extra'" in proc.stderr


@pytest.mark.full
def test_the_demos_setup_leaves_the_tests_extras_to_the_tests_setup(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    base = _setup(venv, "base")
    assert base.returncode == 0, base.stderr
    assert "setup: installing tcjit\n" in base.stdout
    assert _stamps(venv) == {"base"}  # the demo's set-up does not claim the test extras

    test = _setup(venv, "test")
    assert test.returncode == 0, test.stderr
    assert "installing tcjit with [test]" in test.stdout
    assert _stamps(venv) == {"base", "test"}
    assert list(site.glob("tcjit-*.dist-info")), "tcjit was not installed into the scratch environment"
    probe = [str(venv / "bin/python"), "-c", "import pytest, hypothesis, tcjit; print(tcjit.__file__)"]
    assert subprocess.run(probe, capture_output=True, text=True, check=True).stdout.startswith(str(ROOT))

    again = _setup(venv, "test")
    assert again.returncode == 0 and "installing" not in again.stdout  # stamps fresh: nothing to do
    os.utime(venv / ".tcjit-installed-test", (0, 0))  # older than pyproject.toml
    stale = _setup(venv, "test")
    assert "installing tcjit with [test]" in stale.stdout
