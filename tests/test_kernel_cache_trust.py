"""The kernel cache end to end against what someone else wrote into it: tampered metadata. Each
test runs the real compiler and loads real shared objects; a fresh ``tcjit.define`` stands for a
fresh process (it has no specialisation yet, so it goes to the disk)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import tcjit
import tcjit.compiler
from tcjit.cache.entry import entry_location

FCRELU = """
def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}
"""
# Another kernel with the same entry name and signature: its code would run if loaded by mistake.
FCRELU_DOUBLE_BIAS = FCRELU.replace("+ bias(n)", "+ 2 * bias(n)")
NOBODY = 65534


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
    return tcjit.compiler.cache_key(kernel.canonical_source, kernel.name, inputs, None, "cpu", opts.to_json())


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
