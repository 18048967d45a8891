"""The tcjit command line's cache commands: list, show, export/import and clear, for the tuned
options and the compiled kernels apart (the other commands are in test_cli.py, whose fixtures
these tests share)."""

from __future__ import annotations

import collections
import json
import os
import re

import pytest
from test_cli import FC_SIZES, FCRELU, _run, _tuned_db

from tcjit.cache import USE_DEFAULTS


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Every test compiles into its own kernel cache, never the user's (as in test_cli)."""
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))


@pytest.fixture
def fcrelu_file(tmp_path) -> str:
    (tmp_path / "fcrelu.tc").write_text(FCRELU)
    return str(tmp_path / "fcrelu.tc")


def _cache_key(shape, entry="fcrelu"):
    from tcjit.cache import TuningKey

    layout = json.dumps([["float32", list(shape), [shape[1], 1]], ["float32", [40, 48], [48, 1]], "scalar"])
    return TuningKey("def fcrelu...", entry, layout, "cpu", "x86_64-test", "0.1.0")


def test_cache_list_empty_then_records(capsys):
    code, out, _ = _run(capsys, "cache", "list", "--options")
    path = os.environ["TCJIT_OPTIONS_DB"]
    assert code == 0 and out.splitlines() == [f"tuned options in {path}", f"no tuned options in {path}"]
    db = _tuned_db()
    key = _cache_key((64, 48))
    db.put(key, '{"tile":[32,32]}', 25e-6, baseline=100e-6, evaluations=321, low=3.9, high=4.1, rounds=5)
    db.put(_cache_key((8, 48), entry="other"), USE_DEFAULTS, 2.5e-3, baseline=2.5e-3, rounds=5)
    code, out, _ = _run(capsys, "cache", "list")
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"tuned options in {path}"
    header = ["id", "entry", "target", "inputs", "uses", "best", "speedup", "evaluations", "date"]
    assert lines[1].split() == header
    mine = next(line for line in lines if line.startswith(key.digest[:12]))
    for word in ("fcrelu", "cpu", "64x48,40x48,scalar", " tuned ", "25.0 µs", "4.00x (3.90-4.10x)", "321"):
        assert word in mine
    other = next(line for line in lines if " other " in line)
    assert " defaults " in other and "2.50 ms" in other


def test_cache_show_and_ambiguous_or_unknown_ids(capsys):
    from tcjit.cache import Measured

    db = _tuned_db()
    key = _cache_key((64, 48))
    options = '{"tile":[32,32],"unroll":4}'
    db.put(key, options, 25e-6, baseline=50e-6, evaluations=3, low=1.9, high=2.1, rounds=5)
    db.record(key, [Measured("a", 1.0, "ok"), Measured("b", None, "crashed"), Measured("c", 2.0, "ok")])
    code, out, _ = _run(capsys, "cache", "show", key.digest[:8])
    assert code == 0
    assert f"id           {key.digest}" in out and "entry        fcrelu" in out
    assert '"unroll": 4' in out and "calls use    the tuned options below" in out
    assert "speedup      2.00x (1.90-2.10x), measured in 5 interleaved rounds of one run" in out
    assert "3 candidates: 1 crashed, 2 ok" in out and "def fcrelu..." in out
    defaults = _cache_key((2, 48))
    db.put(defaults, USE_DEFAULTS, 9e-6, baseline=9.1e-6, low=0.98, high=1.04, rounds=3)
    code, out, _ = _run(capsys, "cache", "show", defaults.digest[:12])
    assert "calls use    the default options" in out and "use the defaults (tuning found nothing" in out
    code, _, err = _run(capsys, "cache", "show", "zzzz")
    assert code == 2 and err.startswith("tcjit: TCCacheError: no tuned options with an id starting 'zzzz'")
    for n in range(40):  # enough records that some share a first hex digit
        db.put(_cache_key((n + 1, 48)), "{}", 1.0)
    first = collections.Counter(r.key.digest[0] for r in db.records()).most_common(1)[0][0]
    code, _, err = _run(capsys, "cache", "show", first)
    assert code == 2 and "give more of it" in err


def test_cache_disabled_database_is_an_error(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TCJIT_OPTIONS_DB", "")
    code, _, err = _run(capsys, "cache", "list")
    assert code == 2 and "TCCacheError: the tuned-options database is disabled" in err
    monkeypatch.setenv("TCJIT_OPTIONS_DB", str(tmp_path))  # a folder: the message says so, once
    code, _, err = _run(capsys, "cache", "list")
    assert code == 2 and err.splitlines()[0] == (
        f"tcjit: TCCacheError: the tuned-options database is disabled (cannot use {tmp_path} as the "
        "options database: it is a directory)"
    )


def test_cache_export_import_round_trip(capsys, tmp_path, monkeypatch):
    db = _tuned_db()
    db.put(_cache_key((64, 48)), "{}", 1e-4, evaluations=2)
    db.put(_cache_key((32, 48)), "{}", 2e-4, evaluations=2)
    code, out, _ = _run(capsys, "cache", "export")
    assert code == 0 and len(json.loads(out)) == 2
    file = tmp_path / "tuned.json"
    assert _run(capsys, "cache", "export", str(file))[0] == 0
    assert json.loads(file.read_text()) == json.loads(out)
    monkeypatch.setenv("TCJIT_OPTIONS_DB", str(tmp_path / "elsewhere.sqlite3"))
    code, out, _ = _run(capsys, "cache", "import", str(file))
    assert code == 0 and "merged 2 records" in out and "2 new or faster" in out
    assert _run(capsys, "cache", "import", str(file))[1].endswith("0 new or faster\n")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"schema": 1}]')
    code, _, err = _run(capsys, "cache", "import", str(bad))
    assert code == 2 and "TCCacheError" in err and "record 0" in err
    bad.write_text("[{")
    assert _run(capsys, "cache", "import", str(bad))[0] == 2


def test_cache_clear_needs_confirmation(capsys, monkeypatch, tmp_path):
    import io

    db = _tuned_db()
    db.put(_cache_key((64, 48)), "{}", 1e-4)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal
    code, _, err = _run(capsys, "cache", "clear", "--options")
    assert code == 2 and "--yes" in err and len(db.records()) == 1

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdin", Tty("n\n"))
    assert _run(capsys, "cache", "clear", "--options")[0] == 1 and len(db.records()) == 1
    monkeypatch.setattr("sys.stdin", Tty("y\n"))
    code, out, _ = _run(capsys, "cache", "clear", "--options")
    assert code == 0 and "removed 1 tuned options" in out and db.records() == []


def test_cache_clear_kernels_and_options_separately(capsys, fcrelu_file):
    """--kernels empties the kernel store and keeps the tuning records, --options the reverse;
    neither flag removes nothing and says what to choose."""
    from tcjit.kernel_cache import kernel_store

    db = _tuned_db()
    db.put(_cache_key((64, 48)), "{}", 1e-4)
    assert _run(capsys, "run", fcrelu_file, "--sizes", FC_SIZES, "--budget", "0")[0] == 0
    store = kernel_store()
    assert store.total_bytes() > 0
    code, out, err = _run(capsys, "cache", "clear", "--yes")
    assert (
        code == 2
        and out == ""
        and err
        == (
            "tcjit: cache clear needs --options (every tuned-options record: hours of tuning), --kernels "
            "(every compiled kernel: rebuilt when next needed) or both\n"
        )
    )
    assert store.total_bytes() > 0 and len(db.records()) == 1
    code, out, _ = _run(capsys, "cache", "clear", "--yes", "--kernels")
    assert code == 0 and out == f"removed 1 compiled kernel from {store.root}\n"
    assert store.total_bytes() == 0 and len(db.records()) == 1
    assert _run(capsys, "run", fcrelu_file, "--sizes", FC_SIZES, "--budget", "0")[0] == 0
    code, out, _ = _run(capsys, "cache", "clear", "--yes", "--options")
    assert code == 0 and out.startswith("removed 1 tuned options")
    assert store.total_bytes() > 0 and db.records() == []
    code, out, _ = _run(capsys, "cache", "clear", "--yes", "--options", "--kernels")
    assert code == 0 and "removed 0 tuned options" in out and "removed 1 compiled kernel" in out
    assert store.total_bytes() == 0


def test_cache_list_kernels_with_sizes_and_ages(capsys, fcrelu_file, tmp_path, monkeypatch):
    """One line per compiled kernel (entry, target, inputs, size, ages); entries a call would not
    use are listed as such, and listing neither follows links, nor reads a folder another user
    owns, nor removes anything."""
    from tcjit.cache import trust
    from tcjit.kernel_cache import kernel_store

    code, out, _ = _run(capsys, "cache", "list", "--kernels")
    root = os.environ["TCJIT_CACHE_DIR"]
    assert (
        code == 0
        and out == f"compiled kernels in {root}: 0 entries, 0 B (cap 2.1 GB: TCJIT_CACHE_MAX_BYTES)\n"
    )
    assert _run(capsys, "run", fcrelu_file, "--sizes", FC_SIZES, "--budget", "0")[0] == 0
    store = kernel_store()
    (entry,) = store.entries()
    total = store.total_bytes()
    code, out, _ = _run(capsys, "cache", "list", "--kernels")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith(f"compiled kernels in {root}: 1 entry, {total / 1000:.1f} kB")
    assert lines[1].split() == ["id", "entry", "target", "inputs", "size", "stored", "last", "used"]
    assert lines[2].split()[:5] == [
        entry.directory.name[:12],
        "fcrelu",
        "cpu",
        "64x48,40x48,40",
        f"{total / 1000:.1f}",
    ]
    assert re.search(r"kB +\d+ s ago +\d+ s ago$", lines[2])
    # a link to a valid-looking entry elsewhere, a foreign entry, an entry another user owns
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "manifest.json").write_text("{}")
    prefix = entry.directory.parent
    (prefix / "linked").symlink_to(elsewhere)
    foreign = prefix / ("0" * 64)
    foreign.mkdir(mode=0o700)
    (foreign / "manifest.json").write_text((entry.directory / "manifest.json").read_text())
    foreign.chmod(0o700)
    (foreign / "manifest.json").chmod(0o600)
    owned = prefix / ("f" * 64)
    owned.mkdir(mode=0o700)
    (owned / "manifest.json").write_text("{}")
    st = os.lstat(owned)
    real = trust.owner_and_mode

    def pretending(found):
        owner, mode = real(found)
        return (owner + 1, mode) if (found.st_dev, found.st_ino) == (st.st_dev, st.st_ino) else (owner, mode)

    monkeypatch.setattr(trust, "owner_and_mode", pretending)
    code, out, _ = _run(capsys, "cache", "list", "--kernels")
    assert code == 0
    problems = {
        line.split()[0]: line.split("not used: ")[1] for line in out.splitlines() if "not used: " in line
    }
    assert problems["linked"] in ("linked is a symbolic link", "Not a directory")
    assert problems["0" * 12] == "foreign entry: its manifest names another key"
    assert problems["f" * 12].startswith(f"{'f' * 64}: it is owned by uid")
    assert out.splitlines()[2].split()[1] == "fcrelu" and "1 entry," in out.splitlines()[0]
    assert all(p.exists() for p in (prefix / "linked", foreign, owned, entry.directory))  # nothing removed
