"""The on-disk kernel store: round trips, corruption, concurrency, eviction, permissions, versions."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import stat
import time
from pathlib import Path

import pytest

import tcjit.cache.entry as entry_module
from tcjit.cache import FORMAT_VERSION, Entry, KernelStore
from tcjit.polyhedral.errors import TCError

KEY = "def f(float(N) A) -> (B) { B(i) = A(i) }|N=8|float32|cpu|x86-64-v3|cc -O3|{}|0.1.0|1"
FILES = {"kernel.so": b"\x7fELF" + bytes(range(256)) * 4, "kernel.c": b"void f(float *A, float *B) {}\n"}


def _files_for(key: str) -> dict[str, bytes]:
    """Content derived from the key, so that a reader can tell a right entry from a wrong one."""
    seed = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return {"kernel.so": seed * 64, "kernel.c": key.encode("utf-8", "surrogatepass")}


def _assert_valid(entry: Entry, key: str, files: dict[str, bytes], metadata: dict | None = None) -> None:
    assert entry.key == key
    assert set(entry.files) == set(files)
    for name, data in files.items():
        assert entry.path(name).read_bytes() == data
    if metadata is not None:
        assert dict(entry.metadata) == metadata


def _entry_dir(root: Path, key: str) -> Path:
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return root / f"v{FORMAT_VERSION}" / digest[:2] / digest


# ---------------------------------------------------------------------------------------- round trip
def test_put_get_round_trip(tmp_path):
    store = KernelStore(tmp_path / "cache")
    meta = {"launch": {"grid": [4, 1, 1], "block": [128, 1, 1]}, "symbol": "f_kernel"}
    put = store.put(KEY, FILES, {**meta, "launch": {"grid": (4, 1, 1), "block": (128, 1, 1)}})  # JSON
    _assert_valid(put, KEY, FILES, meta)
    got = store.get(KEY)
    _assert_valid(got, KEY, FILES, meta)
    assert got.directory == put.directory == _entry_dir(tmp_path / "cache", KEY)
    manifest = json.loads((got.directory / "manifest.json").read_text())
    assert manifest["key"] == KEY and manifest["format"] == FORMAT_VERSION
    assert manifest["files"]["kernel.so"]["size"] == len(FILES["kernel.so"])
    assert manifest["files"]["kernel.so"]["sha256"] == hashlib.sha256(FILES["kernel.so"]).hexdigest()
    assert abs(manifest["created"] - time.time()) < 60
    with pytest.raises(KeyError, match=r"kernel\.ptx"):
        got.path("kernel.ptx")
    with pytest.raises(TypeError):
        got.files["kernel.ptx"] = got.directory / "kernel.ptx"  # type: ignore[index]
    assert store.total_bytes() == sum(p.stat().st_size for p in got.directory.iterdir())


def test_miss_on_empty_and_missing_root(tmp_path):
    assert KernelStore(tmp_path / "nowhere").get(KEY) is None
    assert not (tmp_path / "nowhere").exists()  # constructing and reading create nothing
    store = KernelStore(tmp_path / "cache")
    store.put(KEY, FILES)
    assert store.get(KEY + " ") is None


def test_put_keeps_an_existing_valid_entry(tmp_path):
    store = KernelStore(tmp_path)
    store.put(KEY, FILES, {"n": 1})
    again = store.put(KEY, {"other": b"x"}, {"n": 2})  # a key names one artefact: first one wins
    _assert_valid(again, KEY, FILES, {"n": 1})


@pytest.mark.parametrize(
    "key",
    [
        "",
        "ünïcødé ∑ 名前 🧮 \u200b\n\t\0",
        "lone surrogate \ud800 and \udfff",
        "def f(float(N) A) -> (B) { B(i) = A(i) }\n" * 50_000,  # ~2 MB of key text
    ],
    ids=["empty", "unicode", "surrogates", "long"],
)
def test_arbitrary_keys(tmp_path, key):
    store = KernelStore(tmp_path)
    store.put(key, _files_for(key), {"k": key[:100]})
    _assert_valid(store.get(key), key, _files_for(key), {"k": key[:100]})
    assert store.get(key + "x") is None


def test_invalid_arguments(tmp_path):
    store = KernelStore(tmp_path)
    for name in ["", "manifest.json", ".hidden", "a/b", "..", "x" * 256, "nul\0"]:
        with pytest.raises(ValueError):
            store.put(KEY, {name: b""})
    with pytest.raises(TypeError):
        store.put(KEY, {"a": "text, not bytes"})
    with pytest.raises(TypeError):
        store.put(KEY, {"a": 5})
    with pytest.raises(TypeError):
        store.put(KEY, {"a": b""}, {"x": object()})
    with pytest.raises(TypeError):
        store.get(b"bytes key")
    with pytest.raises(ValueError):
        KernelStore(tmp_path, max_bytes=-1)
    assert store.get(KEY) is None


# ---------------------------------------------------------------------------------------- corruption
def _corrupt_truncate(d: Path) -> None:
    p = d / "kernel.so"
    p.write_bytes(p.read_bytes()[:-1])


def _corrupt_tamper(d: Path) -> None:
    # Same size, one byte flipped: only the checksum can tell.
    p = d / "kernel.so"
    data = bytearray(p.read_bytes())
    data[100] ^= 0x01
    p.write_bytes(bytes(data))


def _corrupt_foreign(d: Path) -> None:
    m = json.loads((d / "manifest.json").read_text())
    m["key"] = "some other key"
    (d / "manifest.json").write_text(json.dumps(m))


def _corrupt_not_json(d: Path) -> None:
    (d / "manifest.json").write_bytes(b"{not json\xff")


def _corrupt_missing_file(d: Path) -> None:
    (d / "kernel.c").unlink()


def _corrupt_missing_manifest(d: Path) -> None:
    (d / "manifest.json").unlink()


def _corrupt_old_format(d: Path) -> None:
    m = json.loads((d / "manifest.json").read_text())
    m["format"] = FORMAT_VERSION - 1
    (d / "manifest.json").write_text(json.dumps(m))


def _corrupt_path_escape(d: Path) -> None:
    m = json.loads((d / "manifest.json").read_text())
    m["files"]["../../../escape"] = m["files"].pop("kernel.c")
    (d / "manifest.json").write_text(json.dumps(m))


def _corrupt_metadata(d: Path) -> None:
    # The files still match the manifest; what it says about them does not match its digest.
    m = json.loads((d / "manifest.json").read_text())
    m["metadata"]["symbol"] = "abort"
    (d / "manifest.json").write_text(json.dumps(m))


def _corrupt_fifo(d: Path) -> None:
    (d / "kernel.c").unlink()
    os.mkfifo(d / "kernel.c")  # opening it for reading must not wait for a writer


def _corrupt_deep_json(d: Path) -> None:
    (d / "manifest.json").write_text("[" * 100_000)


def _corrupt_symlink(d: Path) -> None:
    (d / "kernel.c").unlink()
    (d / "elsewhere").write_bytes(FILES["kernel.c"])
    (d / "kernel.c").symlink_to(d / "elsewhere")


@pytest.mark.parametrize(
    "corrupt",
    [
        _corrupt_truncate,
        _corrupt_tamper,
        _corrupt_foreign,
        _corrupt_not_json,
        _corrupt_missing_file,
        _corrupt_missing_manifest,
        _corrupt_old_format,
        _corrupt_path_escape,
        _corrupt_metadata,
        _corrupt_symlink,
        _corrupt_fifo,
        _corrupt_deep_json,
    ],
    ids=lambda f: f.__name__.removeprefix("_corrupt_"),
)
def test_corrupt_entry_is_a_miss_removed_and_rebuilt(tmp_path, corrupt):
    store = KernelStore(tmp_path)
    entry = store.put(KEY, FILES, {"symbol": "f_kernel"})
    corrupt(entry.directory)
    assert store.get(KEY) is None
    assert not entry.directory.exists()  # removed, not trusted again
    assert store.get(KEY) is None
    _assert_valid(store.put(KEY, FILES), KEY, FILES)
    _assert_valid(store.get(KEY), KEY, FILES)


def test_put_replaces_a_corrupt_entry(tmp_path):
    store = KernelStore(tmp_path)
    entry = store.put(KEY, FILES)
    _corrupt_tamper(entry.directory)
    _assert_valid(store.put(KEY, FILES, {"v": 2}), KEY, FILES, {"v": 2})


def test_entry_vanishing_during_get_is_a_miss(tmp_path, monkeypatch):
    store = KernelStore(tmp_path)
    entry = store.put(KEY, FILES)
    real = entry_module._checked_file

    def evicted_meanwhile(name, dir_fd, record):
        other = KernelStore(tmp_path, max_bytes=0)
        other.evict()  # another process evicts the entry between the manifest and its files
        return real(name, dir_fd, record)

    monkeypatch.setattr(entry_module, "_checked_file", evicted_meanwhile)
    assert store.get(KEY) is None
    assert not entry.directory.exists()


def test_entry_replaced_during_get_is_not_removed(tmp_path, monkeypatch):
    # get sees a corrupt entry, but before it takes the lock another process replaces it with a
    # valid one: the re-check under the lock must keep (and return) the new entry.
    store = KernelStore(tmp_path)
    entry = store.put(KEY, FILES)
    _corrupt_tamper(entry.directory)
    real = KernelStore._remove_if_corrupt

    def replaced_meanwhile(self, key, reason, component):
        if self is store:  # the other store's put below removes the corrupt entry the usual way
            KernelStore(tmp_path).put(key, FILES, {"by": "other"})
        return real(self, key, reason, component)

    monkeypatch.setattr(KernelStore, "_remove_if_corrupt", replaced_meanwhile)
    _assert_valid(store.get(KEY), KEY, FILES, {"by": "other"})
    monkeypatch.undo()
    _assert_valid(store.get(KEY), KEY, FILES, {"by": "other"})


def _crash_while_writing(root: str) -> None:
    def crash(path, data):
        if path.name == "manifest.json":
            os._exit(3)  # the process dies: no finally, no cleanup
        real(path, data)

    real, entry_module._write_file = entry_module._write_file, crash
    KernelStore(root).put(KEY, FILES)


def test_crashed_writer_leaves_nothing_visible(tmp_path):
    child = multiprocessing.get_context("spawn").Process(target=_crash_while_writing, args=(str(tmp_path),))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 3
    (leftover,) = (tmp_path / "tmp").iterdir()
    assert leftover.name.startswith("put-") and (leftover / "kernel.so").exists()
    store = KernelStore(tmp_path)
    assert store.get(KEY) is None and store.total_bytes() == 0
    _assert_valid(store.put(KEY, FILES), KEY, FILES)
    assert leftover.exists()  # too young to be a dead writer's: an hour must pass


def test_stale_temporaries_are_cleaned(tmp_path):
    store = KernelStore(tmp_path)
    store.put(KEY, FILES)
    old = tmp_path / "tmp" / "put-dead-writer"
    young = tmp_path / "tmp" / "put-live-writer"
    for d in (old, young):
        d.mkdir()
        (d / "kernel.so").write_bytes(b"half written")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    (tmp_path / "tmp" / "del-dead-remover").mkdir()
    store.put(KEY + "2", FILES)
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == ["put-live-writer"]
    assert store.get(KEY + "2") is not None  # a temporary is never an entry


# ---------------------------------------------------------------------------------------- concurrency
def _check_shared(entry: Entry, key: str, may_vanish: bool) -> None:
    """Like _assert_valid; with ``may_vanish``, another process may evict the entry meanwhile."""
    try:
        _assert_valid(entry, key, _files_for(key), {"key": key})
    except FileNotFoundError:
        if not may_vanish:
            raise


def _putter(root: str, keys: list[str], max_bytes: int, barrier, queue) -> None:
    store = KernelStore(root, max_bytes=max_bytes)
    barrier.wait()
    try:
        for key in keys:
            _check_shared(store.put(key, _files_for(key), {"key": key}), key, max_bytes < 2 << 30)
        queue.put(("ok", len(keys)))
    except BaseException as err:  # report it to the parent, which fails the test
        queue.put(("error", repr(err)))


def _getter(root: str, keys: list[str], may_vanish: bool, done, barrier, queue) -> None:
    store = KernelStore(root)
    barrier.wait()
    hits = misses = 0
    try:
        while not done.is_set():
            for key in keys:
                entry = store.get(key)
                if entry is None:
                    misses += 1
                else:
                    _check_shared(entry, key, may_vanish)
                    hits += 1
        queue.put(("ok", (hits, misses)))
    except BaseException as err:
        queue.put(("error", repr(err)))


@pytest.mark.parametrize("evicting", [False, True], ids=["no-cap", "evicting"])
def test_concurrent_puts_and_gets(tmp_path, evicting):
    # Two writers race to put the same keys in the same order while two readers get them all the
    # time; with a small cap the writers also evict under the readers' feet.
    keys = [f"{KEY}|{i}" for i in range(100)]
    one = sum(len(v) for v in _files_for(keys[0]).values()) + 2000  # an entry with its manifest, about
    max_bytes = 20 * one if evicting else 2 << 30
    ctx = multiprocessing.get_context("spawn")
    barrier, queue, done = ctx.Barrier(4), ctx.Queue(), ctx.Event()
    putters = [
        ctx.Process(target=_putter, args=(str(tmp_path), keys, max_bytes, barrier, queue)) for _ in "ab"
    ]
    getters = [
        ctx.Process(target=_getter, args=(str(tmp_path), keys, evicting, done, barrier, queue)) for _ in "ab"
    ]
    for p in putters + getters:
        p.start()
    results = [queue.get(timeout=60) for _ in putters]
    done.set()
    results += [queue.get(timeout=60) for _ in getters]
    for p in putters + getters:
        p.join(timeout=60)
    assert all(status == "ok" for status, _ in results), results
    assert all(p.exitcode == 0 for p in putters + getters)
    assert sum(hits for _, (hits, _) in results[2:]) > 0 and sum(m for _, (_, m) in results[2:]) > 0
    store = KernelStore(tmp_path, max_bytes=max_bytes)
    present = [key for key in keys if store.get(key) is not None]
    if evicting:  # which entries survive depends on the readers' accesses; the last put's does
        assert len(present) >= 10 and keys[-1] in present
        # Each writer counts only its own puts between rescans: the cap may be overshot by what the
        # other one wrote meanwhile (5 times the cap without eviction), until an evict.
        assert store.total_bytes() <= 2 * max_bytes
        store.evict()
        assert store.total_bytes() <= max_bytes
    else:
        assert present == keys
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == []  # no temporaries left behind


# ---------------------------------------------------------------------------------------- eviction
def _sized_store(tmp_path, n: int) -> tuple[KernelStore, list[str], int]:
    """A store holding ``n`` entries of equal size (returned), put in order keys[0], keys[1], ..."""
    store = KernelStore(tmp_path)
    keys = [f"{KEY}|lru|{i}" for i in range(n)]
    sizes = {store.total_bytes()}
    for key in keys:
        before = store.total_bytes()
        store.put(key, {"kernel.so": bytes(1000)})
        sizes.add(store.total_bytes() - before)
    (size,) = sizes - {0}
    return store, keys, size


def test_evict_removes_least_recently_used_first(tmp_path):
    store, keys, size = _sized_store(tmp_path, 6)
    for key in [keys[3], keys[0], keys[5], keys[1], keys[4], keys[2]]:  # the access order, oldest first
        assert store.get(key) is not None
    store.max_bytes = 3 * size
    assert store.evict() == 3 * size
    assert store.total_bytes() == 3 * size
    assert [k for k in keys if KernelStore(tmp_path).get(k) is not None] == [keys[1], keys[2], keys[4]]
    assert store.evict() == 0  # under the cap: nothing to do


def test_put_enforces_the_cap_and_keeps_the_new_entry(tmp_path):
    store, keys, size = _sized_store(tmp_path, 5)
    store.get(keys[0])  # keys[0] is now the most recently used
    store.max_bytes = 5 * size  # full
    store.put(KEY, {"kernel.so": bytes(1000)})
    assert store.total_bytes() <= store.max_bytes
    assert store.get(KEY) is not None and store.get(keys[0]) is not None
    assert store.get(keys[1]) is None  # the least recently used went


def test_an_entry_larger_than_the_cap_survives_its_own_put(tmp_path):
    store = KernelStore(tmp_path, max_bytes=100)
    _assert_valid(store.put(KEY, FILES), KEY, FILES)
    assert store.get(KEY) is not None
    assert store.evict() > 0 and store.get(KEY) is None  # an explicit evict enforces the cap


# ---------------------------------------------------------------------------------------- versions
def test_format_version_bump_ignores_old_entries(tmp_path, monkeypatch):
    store = KernelStore(tmp_path)
    old = store.put(KEY, FILES)
    monkeypatch.setattr(entry_module, "FORMAT_VERSION", FORMAT_VERSION + 1)
    assert store.get(KEY) is None
    assert old.directory.exists()  # ignored, not deleted: an older tcjit may still use it
    new = store.put(KEY, FILES)
    assert new.directory == tmp_path / f"v{FORMAT_VERSION + 1}" / old.directory.relative_to(
        tmp_path / f"v{FORMAT_VERSION}"
    )
    assert store.total_bytes() == 2 * sum(p.stat().st_size for p in old.directory.iterdir())
    store.clear()
    assert store.total_bytes() == 0 and not old.directory.exists() and not new.directory.exists()
    monkeypatch.undo()
    assert store.get(KEY) is None


def test_clear(tmp_path):
    store = KernelStore(tmp_path)
    for i in range(3):
        store.put(f"{KEY}{i}", FILES)
    store.clear()
    assert store.total_bytes() == 0
    assert all(store.get(f"{KEY}{i}") is None for i in range(3))
    _assert_valid(store.put(KEY, FILES), KEY, FILES)  # usable afterwards
    KernelStore(tmp_path / "never-created").clear()


# ---------------------------------------------------------------------------------------- permissions
@pytest.mark.parametrize("umask", [0o022, 0o277], ids=["umask-022", "umask-277"])
def test_directories_are_private(tmp_path, umask):
    # 022 would let others read what mkdir does not restrict; 277 would leave our own dirs unwritable.
    root = tmp_path / "cache"
    old = os.umask(umask)
    try:
        entry = KernelStore(root).put(KEY, FILES)
    finally:
        os.umask(old)
    for d in [root, root / "tmp", root / f"v{FORMAT_VERSION}", entry.directory.parent, entry.directory]:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for p in entry.directory.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, p


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o711], ids=oct)
def test_an_existing_root_keeps_its_mode(tmp_path, mode):
    # Others may read or search it: only writing makes it untrusted, and tcjit did not create it.
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(mode)
    store = KernelStore(root)
    _assert_valid(store.put(KEY, FILES), KEY, FILES)
    _assert_valid(store.get(KEY), KEY, FILES)
    assert stat.S_IMODE(root.stat().st_mode) == mode


def test_root_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(TCError, match="not a directory"):
        KernelStore(tmp_path / "file")
    with pytest.raises(TCError, match="Not a directory"):  # cannot be created below a file
        KernelStore(tmp_path / "file" / "cache")


def test_unwritable_root_raises_on_put(tmp_path):
    # Runs as root too (unlike the permission test below): the temporaries' folder is a file.
    store = KernelStore(tmp_path)
    store.put(KEY, FILES)
    (tmp_path / "tmp").rmdir()
    (tmp_path / "tmp").write_text("in the way")
    _assert_valid(store.get(KEY), KEY, FILES)
    with pytest.raises(TCError, match=r"cannot store an entry in the kernel cache .*: Not a directory"):
        store.put(KEY + "2", FILES)


def test_symlinked_root_of_your_own_is_accepted(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    KernelStore(tmp_path / "link").put(KEY, FILES)
    assert KernelStore(tmp_path / "real").get(KEY) is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file owned by another user needs root")
def test_root_owned_by_another_user_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    os.lchown(tmp_path / "link", 65534, 65534)
    with pytest.raises(TCError, match="symbolic link owned by uid 65534"):
        KernelStore(tmp_path / "link")
    (tmp_path / "theirs").mkdir()
    os.chown(tmp_path / "theirs", 65534, 65534)
    with pytest.raises(TCError, match="owned by uid 65534"):
        KernelStore(tmp_path / "theirs")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permissions")
def test_read_only_root_raises_on_put_and_still_serves_hits(tmp_path):
    store = KernelStore(tmp_path / "cache")
    store.put(KEY, FILES)
    for d in [tmp_path / "cache", *(tmp_path / "cache").rglob("*")]:
        if d.is_dir():
            d.chmod(0o500)
    try:
        _assert_valid(store.get(KEY), KEY, FILES)
        with pytest.raises(TCError, match=r"cannot store an entry.*Permission denied"):
            store.put(KEY + "2", FILES)
    finally:
        for d in [tmp_path / "cache", *(tmp_path / "cache").rglob("*")]:
            if d.is_dir():
                d.chmod(0o700)
