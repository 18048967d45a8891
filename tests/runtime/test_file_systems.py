"""tcjit on file systems that say no: a full ``TMPDIR``, a compiler that runs out of room. Each
failure is correct behaviour (a kernel already in the cache still loads) or a
:class:`tcjit.TCResourceError` with a hint, never a raw ``OSError`` nor "a tcjit bug".

A full or read-only file system is a small tmpfs mounted for the test (root only; skipped
elsewhere or where mounting is not allowed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import tcjit
from tcjit.cpu_runtime import compile_c

FCRELU = """
def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}
"""


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(24, 40, generator=g), torch.randn(12, 40, generator=g), torch.randn(12, generator=g)


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 256 KiB tmpfs (unmounted afterwards); skipped without root or where mounting fails."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    where = tmp_path / "tiny"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(where: Path, leave: int = 0) -> None:
    """Fill the file system of ``where`` until fewer than ``leave`` bytes are free (about)."""
    with open(where / "filler", "wb") as f:
        try:
            while True:
                free = os.statvfs(where).f_bavail * os.statvfs(where).f_frsize
                if free <= leave:
                    break
                f.write(b"\0" * min(4096, max(1, free - leave)))
                f.flush()
        except OSError:
            pass


# --------------------------------------------------------------------------------- a full TMPDIR
LOAD_CHILD = """
import json, torch, tcjit
g = torch.Generator().manual_seed(0)
x, w, b = torch.randn(24, 40, generator=g), torch.randn(12, 40, generator=g), torch.randn(12, generator=g)
k = tcjit.define(SOURCE)
spec = tcjit.compile(k, x, w, b)
y = k(x, w, b)
print(json.dumps({
    "from_disk": spec.from_disk,
    "right": bool(torch.allclose(y, torch.relu(x @ w.T + b), rtol=1e-5, atol=1e-5)),
}))
"""


def test_a_cached_kernel_loads_with_a_full_tmpdir(tmp_path, tiny_tmpfs, monkeypatch):
    cache = tmp_path / "kernels"
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(cache))
    tcjit.compile(tcjit.define(FCRELU), *_inputs())  # stored, with room
    # Nearly full: Python's probe of TMPDIR (a few bytes) passes, a shared object does not fit.
    _fill(tiny_tmpfs, leave=8192)
    env = {**os.environ, "TMPDIR": str(tiny_tmpfs), "TCJIT_CACHE_DIR": str(cache)}
    code = f"SOURCE = {FCRELU!r}\n" + textwrap.dedent(LOAD_CHILD)
    code += f"import tempfile; assert tempfile.gettempdir() == {str(tiny_tmpfs)!r}\n"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"the child failed:\n{proc.stderr[-3000:]}"
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"from_disk": True, "right": True}


def test_compiling_with_a_full_tmpdir_is_a_resource_error(tiny_tmpfs, monkeypatch):
    monkeypatch.setenv("TCJIT_CACHE_DIR", "")
    monkeypatch.setattr(tempfile, "tempdir", str(tiny_tmpfs))
    _fill(tiny_tmpfs)
    with pytest.raises(tcjit.TCResourceError, match=r"No space left on device[\s\S]*hint: free space in"):
        tcjit.define(FCRELU)(*_inputs())


def test_a_compiler_out_of_room_is_a_resource_error_not_a_bug(tiny_tmpfs, monkeypatch):
    # The source fits; the shared object (a 1 MiB initialised array) does not.
    monkeypatch.setattr(tempfile, "tempdir", str(tiny_tmpfs))
    source = "__attribute__((used)) static char big[1 << 20] = {1};\nint tc_probe(void) { return big[7]; }\n"
    with pytest.raises(tcjit.TCResourceError, match=r"ran out of room[\s\S]*hint: free space in") as caught:
        compile_c(source, name="big")
    assert "a tcjit bug" not in str(caught.value)
    assert os.listdir(tiny_tmpfs) == []  # its temporaries are gone


def test_a_compiler_reporting_a_full_disk_is_a_resource_error(tmp_path, monkeypatch):
    fake = tmp_path / "cc"
    fake.write_text(
        "#!/bin/sh\necho 'cc1: fatal error: cannot write kernel.s: No space left on device' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    with pytest.raises(tcjit.TCResourceError, match="ran out of room"):
        compile_c("int f(void) { return 0; }\n", name="f")
    fake.write_text("#!/bin/sh\necho 'kernel.c:1: error: expected ;' >&2\nexit 1\n")
    with pytest.raises(tcjit.TCInternalError, match="a tcjit bug"):  # a real rejection stays one
        compile_c("int f(void) { return 0; }\n", name="f")


# --------------------------------------------------------------------- a read-only file system
def _remount_read_only(where: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True, capture_output=True)


def test_the_options_database_on_a_read_only_file_system_reads_and_warns_on_writes(tiny_tmpfs):
    from tcjit.cache import Measured, OptionsDatabase, TuningKey

    layout = '[["float32", [8], [1]]]'
    key = TuningKey("def f(float(N) A) -> (B) { B(i) = A(i) }", "f", layout, "cpu", "x86_64-test", "0.1.0")
    other = TuningKey("def g(float(N) A) -> (B) { B(i) = A(i) }", "g", layout, "cpu", "x86_64-test", "0.1.0")
    path = tiny_tmpfs / "tcjit" / "options.sqlite3"
    writer = OptionsDatabase(path)
    stored = writer.put(key, '{"format": 1}', 1.5e-4, baseline=4.0e-4, evaluations=12)
    writer.record(key, [Measured('{"format": 1}', 1.5e-4, "ok")])
    writer.close()
    _remount_read_only(tiny_tmpfs)

    db = OptionsDatabase(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading warns about nothing
        assert db.get(key) == stored
        assert db.records() == [stored]
        assert db.measured(key) == [Measured('{"format": 1}', 1.5e-4, "ok")]
        assert db.get(other) is None
    with pytest.warns(tcjit.TCWarning, match="could not store tuned options .*Read-only file system"):
        offered = db.put(other, '{"format": 1}', 2.0e-4, evaluations=3)
    assert offered.time == 2.0e-4  # what it would have stored
    assert db.get(key) == stored and db.get(other) is None
    assert OptionsDatabase(tiny_tmpfs / "missing.sqlite3").get(key) is None
