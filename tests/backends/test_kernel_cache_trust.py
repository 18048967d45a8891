"""The kernel cache end to end against what someone else wrote into it: tampered metadata, a kernel
planted by another user, a cache folder others can write. Each runs the real compiler and loads real
shared objects; a fresh ``tcjit.define`` stands for a fresh process (it has no specialisation yet, so
it goes to the disk)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from other_users import NOBODY, as_nobody

import tcjit
import tcjit.kernel_cache
from tcjit.cache import FORMAT_VERSION
from tcjit.cache.entry import entry_location, write_entry

FCRELU = """
def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}
"""
# Another kernel with the same entry name and signature: its code would run if loaded by mistake.
FCRELU_DOUBLE_BIAS = FCRELU.replace("+ bias(n)", "+ 2 * bias(n)")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "kernels"
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(root))
    monkeypatch.delenv("TCJIT_CACHE_MAX_BYTES", raising=False)
    return root


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(24, 40, generator=g), torch.randn(12, 40, generator=g), torch.randn(12, generator=g)


def _oracle(x, w, bias):
    return torch.relu(x @ w.T + bias)


def _key(kernel, *inputs) -> str:
    from tcjit.binding import bind

    opts = kernel._resolve_options(None, bind(kernel.definition, inputs).sizes, "cpu")
    return tcjit.kernel_cache.cache_key(
        kernel.canonical_source, kernel.name, inputs, None, "cpu", opts.to_json()
    )


# --------------------------------------------------------------------------------- the metadata
TAMPER_CHILD = """
import json, sys
from pathlib import Path
import torch, tcjit
manifest_path, variant = Path(sys.argv[1]), sys.argv[2]
g = torch.Generator().manual_seed(0)
x, w, b = torch.randn(24, 40, generator=g), torch.randn(12, 40, generator=g), torch.randn(12, generator=g)
before = [t.clone() for t in (x, w, b)]
m = json.loads(manifest_path.read_text())
kernel = m["metadata"]["kernel"]
if variant == "reversed":
    kernel["params"] = kernel["params"][::-1]
elif variant == "symbol":
    kernel["symbol"] = "abort"
elif variant == "shortened":
    kernel["params"] = kernel["params"][:1]
manifest_path.write_text(json.dumps(m, sort_keys=True))  # the files still match the manifest
k = tcjit.define(SOURCE)
spec = tcjit.compile(k, x, w, b)
y = k(x, w, b)
print(json.dumps({
    "from_disk": spec.from_disk,
    "right": bool(torch.allclose(y, torch.relu(x @ w.T + b), rtol=1e-5, atol=1e-5)),
    "inputs_kept": all(torch.equal(t, u) for t, u in zip((x, w, b), before)),
}))
"""


@pytest.mark.parametrize("variant", ["reversed", "symbol", "shortened"])
def test_tampered_metadata_is_caught_before_anything_is_loaded(cache_dir, variant):
    """The manifest's metadata says how to call the code (parameter order, symbol): it is covered
    by the entry's digest, so an edit makes the entry corrupt: it is rebuilt, never called. In a
    child process: loading it would write into the caller's inputs, abort or crash."""
    x, w, b = _inputs()
    k = tcjit.define(FCRELU)
    tcjit.compile(k, x, w, b)
    directory = entry_location(cache_dir, _key(k, x, w, b))
    code = f"SOURCE = {FCRELU!r}\n" + textwrap.dedent(TAMPER_CHILD)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(directory / "manifest.json"), variant],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"the child died ({proc.returncode}):\n{proc.stderr[-3000:]}"
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"from_disk": False, "right": True, "inputs_kept": True}


# ------------------------------------------------------------------------- the cache folder itself
@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o775], ids=oct)
def test_a_cache_folder_others_can_write_runs_uncached_and_keeps_its_mode(tmp_path, monkeypatch, mode):
    shared = tmp_path / "shared"  # as TCJIT_CACHE_DIR=/tmp
    shared.mkdir()
    shared.chmod(mode)
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(shared))
    x, w, b = _inputs()
    with pytest.warns(tcjit.TCWarning, match="kernel cache disabled.*group or others can write it"):
        y = tcjit.define(FCRELU)(x, w, b)
    torch.testing.assert_close(y, _oracle(x, w, b), rtol=1e-5, atol=1e-5)
    assert stat.S_IMODE(shared.stat().st_mode) == mode, "tcjit changed the mode of a folder it did not create"
    assert list(shared.iterdir()) == []


# ------------------------------------------------------------------------- another user, for real
@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
def test_a_kernel_planted_by_another_user_is_not_run(shared_place, monkeypatch):
    """Another user who can write the cache folder plants, under the key of our next call, a
    complete entry (a real shared object, with a manifest consistent with it) of another kernel:
    it must not run."""
    root = shared_place / "kernels"
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(root))
    x, w, b = _inputs()
    donor_kernel = tcjit.define(FCRELU_DOUBLE_BIAS)
    tcjit.compile(donor_kernel, x, w, b)
    donor = tcjit.kernel_cache.kernel_store().get(_key(donor_kernel, x, w, b))
    files = {name: donor.path(name).read_bytes() for name in donor.files}
    metadata = json.loads(json.dumps(dict(donor.metadata)))
    victim_key = _key(tcjit.define(FCRELU), x, w, b)
    target = entry_location(root, victim_key)
    root.chmod(0o777)  # the mistake the other user exploits

    def plant() -> None:
        level = root / f"v{FORMAT_VERSION}"
        os.rename(level, root / "moved-away")  # ours, renamed by them: the folder has no sticky bit
        staging = root / "staging"
        staging.mkdir()
        write_entry(staging, victim_key, files, metadata)
        target.parent.mkdir(parents=True)
        staging.rename(target)

    as_nobody(plant)
    assert os.stat(target / "kernel.so").st_uid == NOBODY
    fresh = tcjit.define(FCRELU)
    with pytest.warns(tcjit.TCWarning, match="not used: group or others can write it"):
        spec = tcjit.compile(fresh, x, w, b)
    assert spec.from_disk is False
    torch.testing.assert_close(fresh(x, w, b), _oracle(x, w, b), rtol=1e-5, atol=1e-5)
    assert stat.S_IMODE(root.stat().st_mode) == 0o777


def test_a_repeated_call_touches_nothing_on_disk(monkeypatch):
    """The checks are per load from disk: a call of a specialisation already in the process
    neither asks the store nor examines a file."""
    import tcjit.cache.trust as trust
    from tcjit.cache import KernelStore

    k = tcjit.define(FCRELU)
    x, w, b = _inputs()
    k(x, w, b)

    def forbidden(*args, **kwargs):
        raise AssertionError("a repeated call went to the disk")

    monkeypatch.setattr(trust, "owner_and_mode", forbidden)
    monkeypatch.setattr(KernelStore, "get", forbidden)
    torch.testing.assert_close(k(x, w, b), _oracle(x, w, b), rtol=1e-5, atol=1e-5)
