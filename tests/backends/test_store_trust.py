"""The kernel store against other local users: whatever another user could have written is never
loaded, and the store's clean-up never follows a link out of its root.

Most tests pretend that a file belongs to another user or is writable by others through
:func:`tcjit.cache.trust.owner_and_mode`, the store's one source of owners and modes, so they need
no root; those marked so act as user ``nobody`` for real.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
import warnings
from pathlib import Path

import pytest
from other_users import NOBODY, as_nobody

import tcjit.cache.entry as entry_module
from tcjit.cache import FORMAT_VERSION, Entry, KernelStore
from tcjit.polyhedral.errors import TCError, TCWarning

KEY = "def f(float(N) A) -> (B) { B(i) = A(i) }|N=8|float32|cpu|x86-64-v3|cc -O3|{}|0.1.0|trust"
FILES = {"kernel.so": b"\x7fELF" + bytes(range(256)) * 4, "kernel.c": b"void f(float *A, float *B) {}\n"}


def _assert_valid(entry: Entry | None, key: str, files: dict[str, bytes]) -> None:
    assert entry is not None and entry.key == key
    assert {name: entry.read(name) for name in entry.files} == files
    assert {name: entry.path(name).read_bytes() for name in entry.files} == files


def _corrupt_tamper(d: Path) -> None:
    p = d / "kernel.so"
    data = bytearray(p.read_bytes())
    data[100] ^= 0x01
    p.write_bytes(bytes(data))


# ------------------------------------------------------------------------------ the root and above
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o720, 0o702, 0o1777], ids=oct)
def test_a_root_others_can_write_is_neither_used_nor_changed(tmp_path, mode):
    root = tmp_path / "cache"
    store = KernelStore(root)
    entry = store.put(KEY, FILES)
    root.chmod(mode)  # as TCJIT_CACHE_DIR=/tmp would be (1777), or a careless chmod
    with pytest.raises(TCError, match="group or others can write it"):
        KernelStore(root)
    # a store made before the change checks again on every read: a warning, once, and a miss
    with pytest.warns(TCWarning, match=r"kernel cache .* is not used: group or others can write it"):
        assert store.get(KEY) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.get(KEY) is None
    with pytest.raises(TCError, match="group or others can write it"):
        store.put(KEY + "2", FILES)
    for act in (store.clear, store.evict):
        with pytest.raises(TCError, match="group or others can write it"):
            act()
    assert stat.S_IMODE(root.stat().st_mode) == mode
    assert entry.directory.is_dir() and not (root / f"v{FORMAT_VERSION}" / "2").exists()


@pytest.mark.parametrize(
    "mode, usable",
    [(0o777, False), (0o722, False), (0o1777, True), (0o755, True)],
    ids=["0o777", "0o722", "0o1777-sticky", "0o755"],
)
def test_the_folders_above_the_root_must_be_safe_from_others(tmp_path, mode, usable):
    # as OpenSSH's StrictModes: others must not be able to rename the root away, unless sticky
    parent = tmp_path / "parent"
    root = parent / "deeper" / "cache"
    entry = KernelStore(root).put(KEY, FILES)
    parent.chmod(mode)
    try:
        if usable:
            _assert_valid(KernelStore(root).get(KEY), KEY, FILES)
            return
        with pytest.raises(TCError, match=r"folder .*parent above it can be written by group or others"):
            KernelStore(root)
        linked = tmp_path / "link"  # reached through a link: the real place is checked
        linked.symlink_to(root)
        with pytest.raises(TCError, match="above it can be written"):
            KernelStore(linked)
        assert entry.directory.is_dir()
    finally:
        parent.chmod(0o700)


def _pretend(monkeypatch, path: Path, *, uid: int | None = None, writable: bool = False) -> None:
    """Make ``path`` look owned by ``uid`` or writable by others to the store's checks, through
    their one source of owners and modes (no root needed)."""
    from tcjit.cache import trust

    st = os.lstat(path)
    real = trust.owner_and_mode

    def pretending(found: os.stat_result) -> tuple[int, int]:
        owner, mode = real(found)
        if (found.st_dev, found.st_ino) == (st.st_dev, st.st_ino):
            return (owner if uid is None else uid), (mode | stat.S_IWOTH if writable else mode)
        return owner, mode

    monkeypatch.setattr(trust, "owner_and_mode", pretending)


_INSIDE = {
    "version": lambda e: e.directory.parent.parent,
    "prefix": lambda e: e.directory.parent,
    "entry": lambda e: e.directory,
    "manifest": lambda e: e.directory / "manifest.json",
    "kernel.so": lambda e: e.directory / "kernel.so",
}


@pytest.mark.parametrize("how", ["owned by another user", "writable by others"])
@pytest.mark.parametrize("where", list(_INSIDE))
def test_anything_inside_the_root_another_user_could_write_is_not_trusted(tmp_path, monkeypatch, where, how):
    store = KernelStore(tmp_path / "cache")
    entry = store.put(KEY, FILES)
    component = _INSIDE[where](entry)
    _pretend(
        monkeypatch, component, uid=4242 if how.startswith("owned") else None, writable="writable" in how
    )
    assert store.get(KEY) is None
    assert not component.exists(), "an untrusted part of the store is removed, never used again"
    monkeypatch.undo()  # (a new folder may reuse the inode number the pretence matches)
    _assert_valid(store.put(KEY, FILES), KEY, FILES)  # rebuilt in folders of our own
    _assert_valid(store.get(KEY), KEY, FILES)


@pytest.mark.parametrize("what", ["entry", "kernel.so", "manifest"])
def test_a_component_others_can_really_write_is_not_trusted(tmp_path, what):
    # The same check with real modes (root ignores permissions, not modes).
    store = KernelStore(tmp_path / "cache")
    entry = store.put(KEY, FILES)
    _INSIDE[what](entry).chmod(0o722 if what == "entry" else 0o622)
    assert store.get(KEY) is None
    assert not entry.directory.exists()


@pytest.mark.parametrize("where", ["root", "parent", "grandparent"])
def test_a_root_or_a_folder_above_owned_by_another_user_is_not_used(tmp_path, monkeypatch, where):
    root = tmp_path / "a" / "b" / "cache"
    store = KernelStore(root)
    entry = store.put(KEY, FILES)
    target = {"root": root, "parent": root.parent, "grandparent": root.parent.parent}[where]
    _pretend(monkeypatch, target, uid=4242)
    with pytest.raises(TCError, match="owned by uid 4242"):
        KernelStore(root)
    with pytest.warns(TCWarning, match="owned by uid 4242"):
        assert store.get(KEY) is None
    assert entry.directory.is_dir(), "nothing is removed from a store that is not ours"


def test_clean_up_never_follows_a_linked_tmp(tmp_path):
    root = tmp_path / "cache"
    store = KernelStore(root)
    entry = store.put(KEY, FILES)
    elsewhere = tmp_path / "elsewhere"
    precious = elsewhere / "put-precious"  # looks like a dead writer's temporary, two hours old
    precious.mkdir(parents=True)
    (precious / "data").write_text("keep me")
    (elsewhere / "del-also-precious").mkdir()
    two_hours_ago = time.time() - 7200
    os.utime(precious, (two_hours_ago, two_hours_ago))
    (root / "tmp").rmdir()
    (root / "tmp").symlink_to(elsewhere)
    _corrupt_tamper(entry.directory)
    assert store.get(KEY) is None  # the corrupt entry cannot be moved into tmp: left alone
    for act in (store.evict, store.clear, lambda: store.put(KEY + "2", FILES), lambda: store.discard(KEY)):
        with contextlib.suppress(TCError):
            act()
    assert (precious / "data").read_text() == "keep me"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["del-also-precious", "put-precious"]
    assert (root / "tmp").is_symlink()


# ------------------------------------------------------------------------- another user, for real
FORGED = {"kernel.so": b"\x7fELF forged by another user", "kernel.c": b"/* not what was compiled */\n"}


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
@pytest.mark.parametrize("opening", ["root writable by all", "folder inside owned by them"])
def test_an_entry_planted_by_another_user_is_not_loaded(shared_place, opening):
    root = shared_place / "cache"
    store = KernelStore(root)
    entry = store.put(KEY, FILES)
    level = root / f"v{FORMAT_VERSION}"
    if opening == "root writable by all":
        root.chmod(0o777)
        swap_in = root  # they move our version folder away and put theirs in its place
    else:
        root.chmod(0o711)  # others may pass through (the user made it so); only we write it
        os.chown(level, NOBODY, NOBODY)  # say, left behind from when the root was theirs to write
        swap_in = level  # they swap the prefix folder inside the folder they own

    def plant() -> None:
        os.umask(0o022)
        target = entry.directory.relative_to(swap_in).parts[0]
        os.rename(swap_in / target, swap_in / f"{target}.moved")
        forged_parent = entry.directory.parent
        forged_parent.mkdir(parents=True)
        staging = forged_parent / "staging"
        staging.mkdir()
        entry_module.write_entry(staging, KEY, dict(FORGED), {"symbol": "f_kernel"})
        staging.rename(entry.directory)  # a manifest consistent with the forged files

    as_nobody(plant)
    assert os.stat(entry.directory / "kernel.so").st_uid == NOBODY
    if opening == "root writable by all":
        with pytest.raises(TCError, match="group or others can write it"):
            KernelStore(root)
        with pytest.warns(TCWarning, match="is not used"):
            assert store.get(KEY) is None
    else:
        found = KernelStore(root).get(KEY)
        assert found is None
        _assert_valid(store.put(KEY, FILES), KEY, FILES)  # a store of our own again
        assert os.stat(store.get(KEY).directory).st_uid == 0
