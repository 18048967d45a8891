"""Test tiers, and the folders test modules import each other from.

The default tier covers every feature at small sizes and must finish well inside CI's budget on
2 cores. ``--tier=full`` (or ``TCJIT_TEST_TIER=full``) also runs tests marked ``@pytest.mark.full``:
wide option matrices, more sizes, more hypothesis examples. Run it before resolving an issue.

Folders. The test modules are in one folder per stage of the compiler (``frontend/``,
``polyhedral/``, ``mapping/``, ``backends/``, ``gpu/``, ``runtime/``, ``tuning/``) and
``architecture/``; the modules they share that are not tests are in ``helpers/``. None of these
folders is a package. Test modules import the helpers, and each other, by bare module name
(``import compiled_helpers as H``, ``import test_reference_programs as TRP``): importing this file,
which pytest does before it collects any test below ``tests/``, puts every folder of ``tests/``
that holds Python files on ``sys.path``. Scripts that import test modules outside pytest
(scripts/replay.py) import this file for the same effect. ``from conftest import examples`` works
because pytest has already imported this file as ``conftest``. Module names must therefore be
unique across all these folders (pytest's default import mode, ``prepend``, needs that as well).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

for _folder in sorted(p for p in TESTS.iterdir() if p.is_dir() and any(p.glob("*.py"))):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))


def pytest_addoption(parser):
    parser.addoption(
        "--tier",
        choices=("default", "full"),
        default=os.environ.get("TCJIT_TEST_TIER", "default"),
        help="test tier: 'default' (fast, what CI runs) or 'full' (wide matrices, large sizes)",
    )


def pytest_configure(config):
    config.full_tier = config.getoption("--tier") == "full"
    # Test modules read the tier at import (hypothesis example counts): collection comes later.
    os.environ["TCJIT_TEST_TIER"] = config.getoption("--tier")


def pytest_collection_modifyitems(config, items):
    if config.full_tier:
        return
    skip = pytest.mark.skip(reason="full tier only (run with --tier=full)")
    for item in items:
        if "full" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _private_options_db(tmp_path_factory, monkeypatch):
    """No test reads or writes the user's tuned-options database: each gets its own, not yet created
    (outside ``tmp_path``, which some tests expect empty). Child processes inherit it."""
    monkeypatch.setenv("TCJIT_OPTIONS_DB", str(tmp_path_factory.mktemp("options-db") / "options.sqlite3"))


@pytest.fixture
def db(tmp_path, monkeypatch):
    """A private options database and kernel store for the test (the tuner's tests)."""
    path = tmp_path / "options.sqlite3"
    monkeypatch.setenv("TCJIT_OPTIONS_DB", str(path))
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    return path


@pytest.fixture
def shared_place():
    """A folder below /tmp that every user can reach (pytest's tmp_path is private to root), for
    tests that act as another user (tests/helpers/other_users.py)."""
    place = Path(tempfile.mkdtemp(prefix="tcjit-shared-test-", dir="/tmp"))
    place.chmod(0o755)
    yield place
    shutil.rmtree(place, ignore_errors=True)


@pytest.fixture(scope="session")
def full_tier(request) -> bool:
    """Whether the full tier runs: use it to widen parametrisations inside a test."""
    return request.config.full_tier


@pytest.fixture(scope="session")
def ray_module(request):
    """The ``ray`` module, for tests of distributed tuning. Those tests are full-tier: there a
    missing Ray fails the test (``scripts/test.sh --tier=full`` installs the ``ray`` extra), so that
    the Ray path never passes by being skipped; in the default tier they are skipped anyway."""
    try:
        import ray
    except ImportError:
        pytest.fail("the full tier tunes through Ray, which is not installed: `bash scripts/setup.sh ray`")
    return ray


def examples(default: int, full: int) -> int:
    """Hypothesis example counts per tier (read from the environment at import time)."""
    return full if os.environ.get("TCJIT_TEST_TIER", "default") == "full" else default


_SANITIZED_BUILDS = [0]


def pytest_sessionstart(session):
    """Under ``TCJIT_SANITIZE`` (scripts/sanitize.sh), count the kernels this process compiles, so
    the run can say how many programs and option points ran sanitized."""
    if not os.environ.get("TCJIT_SANITIZE"):
        return
    from tcjit import cpu_runtime

    compile_c = cpu_runtime.compile_c

    def counted(*args, **kwargs):
        _SANITIZED_BUILDS[0] += 1
        return compile_c(*args, **kwargs)

    cpu_runtime.compile_c = counted


def pytest_terminal_summary(terminalreporter):
    if os.environ.get("TCJIT_SANITIZE"):
        terminalreporter.write_line(
            f"sanitizers {os.environ['TCJIT_SANITIZE']}: {_SANITIZED_BUILDS[0]} kernels compiled with them "
            "and run in this process"
        )
