"""The kernel caches end to end: real processes, the real C compiler, real files.

* on disk: a second process loads the kernel without importing isl or running the compiler; corrupt,
  truncated, tampered, incomplete and foreign entries are rebuilt; processes compiling the same
  kernel at once agree on one entry; the size cap evicts the least recently used entries; an
  unusable cache directory costs a warning, never the call; ``TCJIT_CACHE_DIR=""`` stays off disk;
* in process: a repeated layout costs a lookup, any change of shape, stride or options compiles
  anew; the disk key follows options, strides, dtypes, sizes and the kernel text, not its layout.

Every test has its own ``TCJIT_CACHE_DIR``. A child process pays about 2 s for ``import torch``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import tcjit
import tcjit.kernel_cache
import tcjit.pipeline
from tcjit.cache import FORMAT_VERSION, KernelStore
from tcjit.cache.entry import entry_location, verify_entry

FCRELU = """
def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}
"""
# The same definition with other layout and comments: the same canonical text, the same entry.
FCRELU_RESTYLED = """
# a fully connected layer with a ReLU
def fcrelu(float(B,M) I,float(N,M) W,float(N) bias)->(O){
  O(b,n) +=! I(b,r_m)*W(n,r_m)   # the matrix product
  O(b,n) = fmax(O(b,n)+bias(n), 0)
}
"""
MV = "def mv(float(N,M) A, float(M) x) -> (y) { y(n) +=! A(n, r_m) * x(r_m) }"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A private kernel store for the test (and its children), with the default size cap."""
    root = tmp_path / "kernels"
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(root))
    monkeypatch.delenv("TCJIT_CACHE_MAX_BYTES", raising=False)
    return root


def _fc_inputs(b=24, m=40, n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, m, generator=g), torch.randn(n, m, generator=g), torch.randn(n, generator=g)


def _fc_torch(x, w, bias):
    return torch.relu(x @ w.T + bias)


def _entries(root: Path) -> list[Path]:
    return sorted(root.glob(f"v{FORMAT_VERSION}/*/*"))


def _key(kernel, *inputs, options=None) -> str:
    """The disk key a call of ``kernel`` on ``inputs`` uses (as :func:`tcjit.pipeline.specialize`)."""
    from tcjit.binding import bind

    opts = kernel._resolve_options(options, bind(kernel.definition, inputs).sizes, "cpu")
    return tcjit.kernel_cache.cache_key(
        kernel.canonical_source, kernel.name, inputs, None, "cpu", opts.to_json()
    )


# ------------------------------------------------------------------------------------ processes
CHILD = """
import hashlib, json, os, sys, time
import torch, tcjit
barrier = os.environ.get("BARRIER")
if barrier:  # meet the other child after the slow imports, then compile at the same moment
    open(barrier + "." + os.environ["CHILD"], "w").close()
    deadline = time.time() + 60
    while len([p for p in os.listdir(os.path.dirname(barrier)) if p.startswith("go.")]) < 2:
        if time.time() > deadline:
            sys.exit("barrier timed out")
        time.sleep(0.005)
k = tcjit.define(SOURCE)
g = torch.Generator().manual_seed(0)
x, w, b = torch.randn(24, 40, generator=g), torch.randn(12, 40, generator=g), torch.randn(12, generator=g)
spec = tcjit.compile(k, x, w, b)
y = k(x, w, b)
print(json.dumps({
    "sha": hashlib.sha256(y.numpy().tobytes()).hexdigest(),
    "sum": float(y.double().sum()),
    "from_disk": spec.from_disk,
    "islpy": "islpy" in sys.modules,
}))
"""


def _child_env(extra: dict[str, str] | None = None, path_prefix: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CC", None)  # the compiler is "cc" on PATH
    env.pop("TCJIT_TEST_CC_FAIL", None)
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra or {})
    return env


def _start_child(env: dict[str, str], source: str = FCRELU) -> subprocess.Popen:
    code = f"SOURCE = {source!r}\n" + textwrap.dedent(CHILD)
    return subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def recording_cc(tmp_path) -> tuple[Path, Path]:
    """A ``cc`` (first on PATH) that logs every run, then runs the real compiler or, with
    TCJIT_TEST_CC_FAIL set, fails. The same file in both processes: the compiler's identity is part
    of the cache key, so the second process must see the compiler the first one used."""
    real = shutil.which(os.environ.get("CC", "cc"))
    if real is None:
        pytest.skip("no C compiler")
    bin_dir, log = tmp_path / "bin", tmp_path / "cc.log"
    bin_dir.mkdir()
    cc = bin_dir / "cc"
    cc.write_text(
        "#!/bin/sh\n"
        f'echo "$$ $*" >> "{log}"\n'
        'if [ -n "$TCJIT_TEST_CC_FAIL" ]; then echo "fake cc: compiling is forbidden here" >&2; exit 1; fi\n'
        f'exec "{real}" "$@"\n'
    )
    cc.chmod(0o755)
    return bin_dir, log


def test_a_second_process_loads_the_kernel_from_disk(cache_dir, recording_cc):
    bin_dir, log = recording_cc
    first = _result(_start_child(_child_env(path_prefix=bin_dir)))
    assert first["from_disk"] is False and first["islpy"] is True
    runs = log.read_text().splitlines()
    assert len(runs) == 1 and "-shared" in runs[0]
    assert len(_entries(cache_dir)) == 1

    log.unlink()
    second = _result(_start_child(_child_env({"TCJIT_TEST_CC_FAIL": "1"}, path_prefix=bin_dir)))
    assert second["from_disk"] is True
    assert second["islpy"] is False, "a disk hit must not import isl"
    assert not log.exists(), f"a disk hit must not run the C compiler: {log.read_text()}"
    assert second["sha"] == first["sha"]
    want = float(_fc_torch(*_fc_inputs()).double().sum())
    assert second["sum"] == pytest.approx(want, rel=1e-5, abs=1e-3)


def test_processes_compiling_the_same_kernel_at_once_share_one_entry(cache_dir, tmp_path):
    meet = tmp_path / "meet"
    meet.mkdir()
    env = {"BARRIER": str(meet / "go")}
    procs = [_start_child(_child_env({**env, "CHILD": str(i)})) for i in range(2)]
    results = [_result(p) for p in procs]
    assert results[0]["sha"] == results[1]["sha"]
    want = float(_fc_torch(*_fc_inputs()).double().sum())
    assert all(r["sum"] == pytest.approx(want, rel=1e-5, abs=1e-3) for r in results)
    entries = _entries(cache_dir)
    assert len(entries) == 1
    key = json.loads((entries[0] / "manifest.json").read_text())["key"]
    assert isinstance(verify_entry(entries[0], key), tcjit.cache.Entry)
    assert not [p for p in (cache_dir / "tmp").iterdir() if p.name.startswith("put-")]


# ------------------------------------------------------------------------------------ corruption
def _truncate_so(d: Path) -> None:
    so = d / "kernel.so"
    so.write_bytes(so.read_bytes()[: so.stat().st_size // 2])


def _flip_so_byte(d: Path) -> None:
    data = bytearray((d / "kernel.so").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (d / "kernel.so").write_bytes(bytes(data))


def _tamper_c(d: Path) -> None:
    text = (d / "kernel.c").read_text()
    (d / "kernel.c").write_text(text.replace("#pragma omp", "#pragma  omp", 1))


def _delete_so(d: Path) -> None:
    (d / "kernel.so").unlink()


def _delete_c(d: Path) -> None:
    (d / "kernel.c").unlink()


def _foreign_manifest(d: Path) -> None:
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["key"] = manifest["key"].replace('"entry":"fcrelu"', '"entry":"other"')
    assert manifest["key"] != json.loads((d / "manifest.json").read_text())["key"]
    (d / "manifest.json").write_text(json.dumps(manifest, sort_keys=True))


def _garbage_manifest(d: Path) -> None:
    (d / "manifest.json").write_bytes(b"\x00not json")


@pytest.mark.parametrize(
    "damage",
    [_truncate_so, _flip_so_byte, _tamper_c, _delete_so, _delete_c, _foreign_manifest, _garbage_manifest],
    ids=lambda f: f.__name__.strip("_"),
)
def test_a_damaged_entry_is_detected_and_rebuilt(cache_dir, damage):
    inputs = _fc_inputs()
    want = _fc_torch(*inputs)
    first = tcjit.define(FCRELU)
    assert tcjit.compile(first, *inputs).from_disk is False
    key = _key(first, *inputs)
    (directory,) = _entries(cache_dir)
    assert directory == entry_location(cache_dir, key)
    damage(directory)

    again = tcjit.define(FCRELU)  # a fresh kernel: no in-process specialisation, as in a new process
    spec = tcjit.compile(again, *inputs)
    assert spec.from_disk is False, "a damaged entry must be rebuilt, not loaded"
    torch.testing.assert_close(again(*inputs), want, rtol=1e-5, atol=1e-5)
    entry = verify_entry(directory, key)
    assert isinstance(entry, tcjit.cache.Entry), f"the rebuilt entry is not valid: {entry}"
    assert entry.metadata["so_sha256"] == hashlib.sha256(entry.path("kernel.so").read_bytes()).hexdigest()
    assert _entries(cache_dir) == [directory]

    third = tcjit.define(FCRELU)
    assert tcjit.compile(third, *inputs).from_disk is True
    torch.testing.assert_close(third(*inputs), want, rtol=1e-5, atol=1e-5)


def test_a_shared_object_that_disagrees_with_the_metadata_is_not_loaded(cache_dir):
    """An entry whose manifest vouches for another kernel.so than the one compiled (a consistent
    rewrite) fails the runtime's own so_sha256 check: it is not run."""
    inputs = _fc_inputs()
    k = tcjit.define(FCRELU)
    tcjit.compile(k, *inputs)
    (directory,) = _entries(cache_dir)
    other = tcjit.define(MV)
    tcjit.compile(other, torch.randn(3, 4), torch.randn(4))
    (other_dir,) = [d for d in _entries(cache_dir) if d != directory]
    # put mv's shared object in fcrelu's entry, with a manifest that matches it
    blob = (other_dir / "kernel.so").read_bytes()
    (directory / "kernel.so").write_bytes(blob)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["files"]["kernel.so"] = {"size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    (directory / "manifest.json").write_text(json.dumps(manifest, sort_keys=True))

    fresh = tcjit.define(FCRELU)
    spec = tcjit.compile(fresh, *inputs)
    assert spec.from_disk is False
    torch.testing.assert_close(fresh(*inputs), _fc_torch(*inputs), rtol=1e-5, atol=1e-5)


def test_an_entry_failing_the_runtime_check_is_replaced(cache_dir):
    inputs = _fc_inputs()
    tcjit.compile(tcjit.define(FCRELU), *inputs)
    (directory,) = _entries(cache_dir)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["metadata"]["so_sha256"] = "0" * 64  # a manifest consistent with its files, wrong metadata
    (directory / "manifest.json").write_text(json.dumps(manifest, sort_keys=True))
    assert tcjit.compile(tcjit.define(FCRELU), *inputs).from_disk is False
    assert tcjit.compile(tcjit.define(FCRELU), *inputs).from_disk is True


# ------------------------------------------------------------------------------------ in process
@pytest.fixture
def count_specialize(monkeypatch) -> list:
    calls: list = []
    real = tcjit.pipeline.specialize

    def counting(kernel, binding, inputs, outputs, options, target, **symbolic):
        spec = real(kernel, binding, inputs, outputs, options, target, **symbolic)
        calls.append(spec)
        return spec

    monkeypatch.setattr(tcjit.pipeline, "specialize", counting)
    return calls


def test_a_repeated_layout_is_a_lookup(count_specialize):
    k = tcjit.define(FCRELU)
    x, w, b = _fc_inputs()
    y1 = k(x, w, b)
    y2 = k(x.clone(), w.clone(), b.clone())  # other tensors, same layout
    assert len(count_specialize) == 1
    torch.testing.assert_close(y1, y2, rtol=0, atol=0)
    spec = tcjit.compile(k, torch.empty_like(x, device="meta"), w.to("meta"), b.to("meta"))
    k(x, w, b)
    assert len(count_specialize) == 1  # compile finds the call's specialisation; the call then reuses it
    assert count_specialize[-1] is spec


def test_a_new_shape_stride_or_options_is_a_new_specialization(count_specialize):
    k = tcjit.define(FCRELU, dynamic=False)  # with symbolic sizes: tests/runtime/test_dynamic_shapes.py
    x, w, b = _fc_inputs()
    k(x, w, b)
    seen = 1
    cases = {
        "shape": (_fc_inputs(b=7), {}),
        "stride": ((x, w.T.contiguous().T, b), {}),  # W transposed in memory
        "options": ((x, w, b), {"options": tcjit.MappingOptions().tile(4, 4).parallelize(False)}),
        "other options": ((x, w, b), {"options": tcjit.MappingOptions("single_thread")}),
    }
    for name, (args, kwargs) in cases.items():
        y = k(*args, **kwargs)
        seen += 1
        assert len(count_specialize) == seen, name
        torch.testing.assert_close(y, _fc_torch(*args), rtol=1e-5, atol=1e-5)
        k(*args, **kwargs)
        assert len(count_specialize) == seen, f"{name}: the second call must be a lookup"
    # equal options are the same options
    k(x, w, b, options=tcjit.MappingOptions().tile(4, 4).parallelize(False))
    assert len(count_specialize) == seen
    assert len({s.source for s in count_specialize}) == len(count_specialize)


def test_compile_counts_count_builds_and_disk_hits(monkeypatch):
    x, w, b = _fc_inputs(b=5)
    before = tcjit.compile_counts()
    k = tcjit.define(FCRELU)
    k(x, w, b)
    assert tcjit.compile_counts() == {"compiled": before["compiled"] + 1, "loaded": before["loaded"]}
    k(x, w, b)
    snapshot = tcjit.compile_counts()
    assert snapshot == {"compiled": before["compiled"] + 1, "loaded": before["loaded"]}, "a lookup"
    tcjit.define(FCRELU)(x, w, b)  # a new kernel object: found in the store
    assert tcjit.compile_counts() == {"compiled": before["compiled"] + 1, "loaded": before["loaded"] + 1}
    monkeypatch.setenv("TCJIT_CACHE_DIR", "")
    tcjit.define(FCRELU)(x, w, b)  # no store: built again
    assert tcjit.compile_counts() == {"compiled": before["compiled"] + 2, "loaded": before["loaded"] + 1}
    assert snapshot["compiled"] == before["compiled"] + 1, "a snapshot does not change"


def test_a_wrong_dtype_is_refused_before_compiling(count_specialize):
    """Inputs declared with one float type must share one dtype per call ([ext]: a dtype shared by
    all of them retypes the kernel, tests/backends/test_call_dtypes.py): a mix is an error, not a
    specialisation (the disk key still records dtypes: see the next test)."""
    k = tcjit.define(FCRELU)
    x, w, b = _fc_inputs()
    with pytest.raises(tcjit.TCCallError, match="different dtypes"):
        k(x.double(), w, b)
    assert count_specialize == []
    k(x, w, b)
    assert len(count_specialize) == 1


def test_the_disk_key_follows_everything_that_changes_the_code():
    k = tcjit.define(FCRELU)
    x, w, b = _fc_inputs()
    base = _key(k, x, w, b)
    other_text = tcjit.define(FCRELU.replace("fmax(O(b, n) + bias(n), 0)", "fmax(O(b, n) - bias(n), 0)"))
    changed = {
        "options": _key(k, x, w, b, options=tcjit.MappingOptions().tile(8)),
        "strides": _key(k, x, w.T.contiguous().T, b),
        "sizes": _key(k, *_fc_inputs(b=25)),
        "dtype": tcjit.kernel_cache.cache_key(
            k.canonical_source, "fcrelu", (x.double(), w, b), None, "cpu", tcjit.MappingOptions().to_json()
        ),
        "text": _key(other_text, x, w, b),
    }
    for name, key in changed.items():
        assert key != base, name
    assert len(set(changed.values())) == len(changed)
    restyled = tcjit.define(FCRELU_RESTYLED)
    assert restyled.source != k.source
    assert _key(restyled, x, w, b) == base


def test_restyled_source_finds_the_stored_kernel(cache_dir):
    inputs = _fc_inputs()
    assert tcjit.compile(tcjit.define(FCRELU), *inputs).from_disk is False
    restyled = tcjit.define(FCRELU_RESTYLED)
    assert tcjit.compile(restyled, *inputs).from_disk is True
    torch.testing.assert_close(restyled(*inputs), _fc_torch(*inputs), rtol=1e-5, atol=1e-5)
    assert len(_entries(cache_dir)) == 1


# ------------------------------------------------------------------------------ the directory
def test_the_default_directory_is_the_user_cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("TCJIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    k = tcjit.define(MV)
    a, v = torch.randn(5, 3), torch.randn(3)
    torch.testing.assert_close(k(a, v), a @ v)
    root = tcjit.kernel_cache.kernel_store().root
    assert root.is_relative_to(tmp_path) and len(_entries(root)) == 1


@pytest.mark.parametrize("where", ["under a file", "a file"])
def test_an_unusable_cache_dir_warns_and_still_runs(tmp_path, monkeypatch, where):
    plain = tmp_path / "plain-file"
    plain.write_text("not a directory")
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(plain / "kernels" if where == "under a file" else plain))
    k = tcjit.define(MV)
    a, v = torch.randn(6, 4), torch.randn(4)
    with pytest.warns(tcjit.TCWarning, match="kernel cache"):
        y = k(a, v)
    torch.testing.assert_close(y, a @ v)
    assert plain.read_text() == "not a directory"
    torch.testing.assert_close(tcjit.define(MV)(a, v), a @ v)  # later kernels run too


def test_an_empty_cache_dir_keeps_everything_off_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("TCJIT_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))

    def forbidden(*args, **kwargs):
        raise AssertionError("the kernel store must not be used with TCJIT_CACHE_DIR=''")

    monkeypatch.setattr(KernelStore, "get", forbidden)
    monkeypatch.setattr(KernelStore, "put", forbidden)
    assert tcjit.kernel_cache.kernel_store() is None
    a, v = torch.randn(6, 4), torch.randn(4)
    for _ in range(2):  # a fresh kernel each time: both compile
        k = tcjit.define(MV)
        spec = tcjit.compile(k, a, v)
        assert spec.from_disk is False
        torch.testing.assert_close(k(a, v), a @ v)
    assert not (tmp_path / "xdg").exists()


# ------------------------------------------------------------------------------------ size cap
def _compile_mv(n: int) -> None:
    k = tcjit.define(MV)
    a, v = torch.randn(n, 9), torch.randn(9)
    torch.testing.assert_close(k(a, v), a @ v, rtol=1e-5, atol=1e-5)


def test_the_size_cap_evicts_the_least_recently_used(tmp_path, monkeypatch, cache_dir):
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "probe"))
    _compile_mv(7)  # the largest entry below: the unrolled reduction's code grows with n
    one = tcjit.kernel_cache.kernel_store().total_bytes()
    cap = int(2.5 * one)  # room for two entries, never three
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(cache_dir))
    monkeypatch.setenv("TCJIT_CACHE_MAX_BYTES", str(cap))
    store = tcjit.kernel_cache.kernel_store()
    assert store.max_bytes == cap

    order = []

    def compile_new(n: int) -> Path:
        before = set(_entries(cache_dir))
        _compile_mv(n)
        new = set(_entries(cache_dir)) - before
        assert len(new) == 1 and store.total_bytes() <= cap
        order.append(n)
        return new.pop()

    e1, e2 = compile_new(4), compile_new(5)
    time.sleep(0.01)
    _compile_mv(4)  # a fresh kernel loads e1 from disk: e1 is now more recent than e2
    e3 = compile_new(6)
    assert e2 not in _entries(cache_dir), "the least recently used entry goes first"
    assert set(_entries(cache_dir)) == {e1, e3}
    e4 = compile_new(7)
    assert set(_entries(cache_dir)) == {e3, e4}
    for n in (4, 5, 6, 7, 8):  # everything still computes right, whatever was evicted
        _compile_mv(n)
        assert store.total_bytes() <= cap
    assert len(_entries(cache_dir)) == 2


# ------------------------------------------------------------------------------ full tier
@pytest.mark.full
def test_many_processes_and_kernels_under_a_tiny_cap(cache_dir, tmp_path):
    """Four processes, two kernels each way, a cap of about two entries: all right, cap held."""
    script = f"SOURCE = {MV!r}\n" + textwrap.dedent(
        """
        import sys, torch, tcjit
        for n in (int(a) for a in sys.argv[1:]):
            k = tcjit.define(SOURCE)
            a, v = torch.randn(n, 9), torch.randn(9)
            torch.testing.assert_close(k(a, v), a @ v, rtol=1e-5, atol=1e-5)
        print("ok")
        """
    )
    env = _child_env({"TCJIT_CACHE_MAX_BYTES": "120000"})
    sets = [("3", "4", "5"), ("5", "4", "3"), ("4", "6", "3"), ("6", "5", "4")]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, *s],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in sets
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "ok", err[-3000:]
    store = KernelStore(cache_dir, max_bytes=120000)
    assert store.total_bytes() <= 120000 + 2 * 60000  # other processes' puts may overshoot until a rescan
    for d in _entries(cache_dir):
        key = json.loads((d / "manifest.json").read_text())["key"]
        assert isinstance(verify_entry(d, key), tcjit.cache.Entry)


@pytest.mark.full
def test_a_damaged_entry_is_rebuilt_by_another_process(cache_dir, recording_cc):
    bin_dir, log = recording_cc
    first = _result(_start_child(_child_env(path_prefix=bin_dir)))
    (directory,) = _entries(cache_dir)
    _flip_so_byte(directory)
    second = _result(_start_child(_child_env(path_prefix=bin_dir)))
    assert second["from_disk"] is False and second["sha"] == first["sha"]
    assert len(log.read_text().splitlines()) == 2
    third = _result(_start_child(_child_env({"TCJIT_TEST_CC_FAIL": "1"}, path_prefix=bin_dir)))
    assert third["from_disk"] is True and third["sha"] == first["sha"]


def test_the_key_holds_a_digest_of_the_compiler_sources(tmp_path, monkeypatch) -> None:
    """An edited checkout (same version number) must not load what the old code generator made."""
    import importlib.util
    import types

    from tcjit import kernel_cache

    key = json.loads(kernel_cache.cache_key("def f() {}", "f", [], None, "cpu", "{}"))
    assert key["code"] == kernel_cache.code_identity() and len(key["code"]) == 16
    (tmp_path / "printer.py").write_text("A = 1\n")
    fake = types.SimpleNamespace(submodule_search_locations=[str(tmp_path)])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: fake)
    kernel_cache.code_identity.cache_clear()

    def changed_by(path, old: str, new: str) -> bool:
        """Whether rewriting ``path`` from ``old`` to ``new`` changes the code identity."""
        path.parent.mkdir(exist_ok=True)
        path.write_text(old)
        kernel_cache.code_identity.cache_clear()
        before = kernel_cache.code_identity()
        path.write_text(new)
        kernel_cache.code_identity.cache_clear()
        return kernel_cache.code_identity() != before

    try:
        assert changed_by(tmp_path / "printer.py", "A = 1\n", "A = 2\n")
        assert changed_by(tmp_path / "prelude" / "half.h", "/* one */\n", "/* two */\n")  # the C prelude
        assert changed_by(tmp_path / "autodiff" / "rules.py", "B = 1\n", "B = 2\n")  # subpackages' modules
    finally:
        monkeypatch.undo()
        kernel_cache.code_identity.cache_clear()
