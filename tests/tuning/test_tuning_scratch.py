"""Tuning runs' scratch folders: a run killed with SIGKILL leaves its folder (with the pickled
context) behind, and the next run removes it; a live run's folder, another user's and a link are
left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch

import tcjit
from tcjit.tuning_scratch import PREFIX, remove_dead_scratch

MATMUL = """
def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, r_k) * B(r_k, n)
}
"""

TUNER = f"""
import torch, tcjit
k = tcjit.define({MATMUL!r})
a, b = torch.randn(16, 8), torch.randn(8, 12)
tcjit.autotune(k, a, b, generations=200, population=8, seed=0, workers=1)
"""

HOLDER = """
import sys, time
from tcjit.tuning_scratch import scratch_folder
with scratch_folder() as scratch:
    print(scratch, flush=True)
    time.sleep(600)
"""


def _env(tmpdir: Path, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TMPDIR": str(tmpdir),
        "TCJIT_OPTIONS_DB": "",
        "TCJIT_CACHE_DIR": str(tmp_path / "kernels"),
    }


def _scratch(tmpdir: Path) -> list[Path]:
    return sorted(tmpdir.glob(f"{PREFIX}*"))


def test_a_killed_tuners_scratch_folder_is_removed_by_the_next_run(tmp_path, monkeypatch):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    tuner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(TUNER)],
        env=_env(tmpdir, tmp_path),
        start_new_session=True,  # its process group: the tuner and its workers
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 240
        while not any((d / "context.pt").exists() for d in _scratch(tmpdir)):
            assert tuner.poll() is None, f"the tuner ended early:\n{tuner.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "the tuner never wrote its context"
            time.sleep(0.1)
        time.sleep(0.5)  # let it measure a little
    finally:
        os.killpg(tuner.pid, signal.SIGKILL)
        tuner.wait()
        tuner.stderr.close()
    (left,) = _scratch(tmpdir)
    assert (left / "context.pt").exists()  # what SIGKILL leaves behind

    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    monkeypatch.setenv("TCJIT_OPTIONS_DB", "")
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    a, b = torch.randn(16, 8), torch.randn(8, 12)
    best = tcjit.autotune(tcjit.define(MATMUL), a, b, generations=1, population=3, seed=0, workers=1)
    torch.testing.assert_close(tcjit.define(MATMUL)(a, b, options=best), a @ b, rtol=1e-5, atol=1e-5)
    assert _scratch(tmpdir) == [], "the next run removes what the killed one left (and its own)"


def test_a_live_runs_folder_is_kept_and_removed_once_its_run_dies(tmp_path):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLDER)],
        env=_env(tmpdir, tmp_path),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        live = Path(holder.stdout.readline().strip())
        assert live.parent == tmpdir
        assert remove_dead_scratch(str(tmpdir)) == []
        assert live.is_dir()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    assert remove_dead_scratch(str(tmpdir)) == [live.name]
    assert not live.exists()


def test_folders_without_a_lock_go_after_an_hour_and_others_stay(tmp_path):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    old, young = tmpdir / f"{PREFIX}old", tmpdir / f"{PREFIX}young"  # a run killed before its lock
    for d in (old, young):
        d.mkdir()
        (d / "context.pt").write_bytes(b"pickled")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    elsewhere = tmp_path / "elsewhere"  # a link with the scratch name: never followed
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("keep me")
    (tmpdir / f"{PREFIX}link").symlink_to(elsewhere)
    os.utime(tmpdir / f"{PREFIX}link", (two_hours_ago, two_hours_ago), follow_symlinks=False)
    assert remove_dead_scratch(str(tmpdir)) == [old.name]
    assert sorted(p.name for p in _scratch(tmpdir)) == [f"{PREFIX}link", f"{PREFIX}young"]
    assert (elsewhere / "keep").read_text() == "keep me"


@pytest.mark.skipif(os.geteuid() != 0, reason="a folder of another user needs root")
def test_another_users_folder_stays(tmp_path):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    theirs = tmpdir / f"{PREFIX}theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    two_hours_ago = time.time() - 7200
    os.utime(theirs, (two_hours_ago, two_hours_ago))
    assert remove_dead_scratch(str(tmpdir)) == []
    assert theirs.is_dir()
