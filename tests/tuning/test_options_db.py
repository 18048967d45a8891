"""The tuned-options database: real SQLite files, real processes.

What must hold: put keeps the faster options and sums evaluations; concurrent processes lose no
write; a damaged file is reported, kept aside and replaced; a newer schema is never touched; export
and import round-trip; the tcjit side (tuning_key, stored_options) never makes a call fail.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from tcjit import TCCacheError, TCWarning
from tcjit.cache import SCHEMA_VERSION, USE_DEFAULTS, Measured, OptionsDatabase, TunedOptions, TuningKey

ROOT = Path(__file__).resolve().parents[2]


def _key(shape=(64, 32), *, source="def f(float(M,N) A) -> (B) { B(m, n) = A(m, n) }", dtype="float32", **kw):
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    fields = {"entry": "f", "target": "cpu", "arch": "x86_64-test", "version": "0.1.0"} | kw
    return TuningKey(source=source, layout=json.dumps([[dtype, list(shape), strides]]), **fields)


def _asides(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.iterdir() if p.name.startswith(path.name + ".corrupt-"))


@pytest.fixture
def db(tmp_path):
    d = OptionsDatabase(tmp_path / "options.sqlite3")
    yield d
    d.close()


# --------------------------------------------------------------------------------- basic semantics
def test_round_trip_and_lazy_creation(tmp_path):
    path = tmp_path / "deep" / "er" / "options.sqlite3"
    db = OptionsDatabase(path)
    key = _key()
    assert db.get(key) is None and db.records() == [] and not path.parent.exists()  # reads create nothing
    stored = db.put(key, '{"tile":[32]}', 2e-4, baseline=5e-4, evaluations=10)
    assert path.exists() and (path.parent.stat().st_mode & 0o777) == 0o700
    got = db.get(key)
    assert got == stored and got.options == '{"tile":[32]}' and got.time == 2e-4 and got.evaluations == 10
    assert got.speedup == pytest.approx(2.5)
    assert OptionsDatabase(path).get(key) == stored  # another object (process) reads it back
    assert db.get(_key((64, 33))) is None
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_put_keeps_the_greater_speed_up_measured_within_one_run_and_sums_evaluations(db):
    """Records compare by baseline / time of one run, never by absolute times: B's 1.0 s is the
    fastest time ever stored, but its run (another machine, a busier hour) gained only 1.1x."""
    key = _key()
    db.put(key, "A", 3.0, baseline=4.0, evaluations=5, low=1.2, high=1.4, rounds=5)
    kept = db.put(key, "B", 1.0, baseline=1.1, evaluations=7, low=1.05, high=1.15, rounds=5)
    assert (kept.options, kept.time, kept.baseline, kept.evaluations) == ("A", 3.0, 4.0, 12)
    assert (kept.low, kept.high, kept.rounds) == (1.2, 1.4, 5)
    better = db.put(key, "C", 2.0, baseline=6.0, evaluations=1, low=2.9, high=3.1, rounds=3)
    assert (better.options, better.time, better.baseline, better.evaluations) == ("C", 2.0, 6.0, 13)
    assert (better.low, better.high, better.rounds) == (2.9, 3.1, 3)
    nothing = db.put(key, USE_DEFAULTS, 2.0, baseline=2.0, low=0.95, high=1.05, rounds=5)
    assert nothing.options == "C" and nothing.time == 2.0 and nothing.evaluations == 13
    assert db.get(key) == nothing


def test_use_the_defaults_is_a_marker_that_options_faster_beyond_the_noise_replace(db):
    key = _key()
    first = db.put(key, USE_DEFAULTS, 1.9, baseline=2.0, low=0.97, high=1.1, rounds=5)
    assert first.uses_defaults and first.gain == 1.0 and first.speedup == pytest.approx(2.0 / 1.9)
    again = db.put(key, USE_DEFAULTS, 2.1, baseline=2.0, low=0.9, high=1.0, rounds=5)
    assert again.uses_defaults and again.time == 2.1  # the newer of two equal gains
    found = db.put(key, '{"tile":[8]}', 1.0, baseline=2.0, low=1.9, high=2.1, rounds=5)
    assert not found.uses_defaults and found.gain == pytest.approx(2.0)


def test_a_record_of_schema_1_gives_way_to_one_measured_in_rounds(db):
    key = _key()
    db.put(key, "old", 1.0, baseline=9.0)  # rounds 0: time and baseline from different runs
    assert db.put(key, "new", 1.0, baseline=1.2, rounds=3).options == "new"
    assert db.put(key, "older", 1.0, baseline=50.0).options == "new"


def test_a_database_of_schema_1_is_migrated_in_place(tmp_path):
    path = tmp_path / "options.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE tuned (digest TEXT PRIMARY KEY, family TEXT NOT NULL, source TEXT NOT NULL,
            entry TEXT NOT NULL, layout TEXT NOT NULL, target TEXT NOT NULL, arch TEXT NOT NULL,
            version TEXT NOT NULL, options TEXT NOT NULL, time REAL NOT NULL, baseline REAL,
            evaluations INTEGER NOT NULL, date TEXT NOT NULL);
        CREATE INDEX tuned_family ON tuned(family);
        CREATE TABLE measured (id INTEGER PRIMARY KEY, digest TEXT NOT NULL, options TEXT NOT NULL,
            time REAL, status TEXT NOT NULL, date TEXT NOT NULL);
        CREATE INDEX measured_digest ON measured(digest, id);
        PRAGMA user_version = 1;
        """
    )
    key = _key()
    conn.execute(
        "INSERT INTO tuned VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            *(key.digest, key.family, key.source, key.entry, key.layout, key.target, key.arch),
            *(key.version, '{"tile":[4]}', 1e-3, 2e-3, 40, "2026-01-01T00:00:00+00:00"),
        ),
    )
    conn.commit()
    conn.close()
    db = OptionsDatabase(path)
    old = db.get(key)
    assert (old.options, old.time, old.baseline, old.evaluations, old.rounds) == (
        '{"tile":[4]}',
        1e-3,
        2e-3,
        40,
        0,
    )
    assert (old.low, old.high) == (None, None)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.put(key, USE_DEFAULTS, 1e-3, baseline=1e-3, rounds=5).uses_defaults


@pytest.mark.parametrize(
    "bad", [{"time": -1.0}, {"time": math.nan}, {"baseline": math.inf}, {"evaluations": -1}]
)
def test_put_refuses_nonsense(db, bad):
    args = {"time": 1.0, "baseline": None, "evaluations": 0} | bad
    with pytest.raises(ValueError):
        db.put(_key(), "A", args.pop("time"), **args)


def test_measured_candidates_in_order(db):
    key = _key()
    db.record(key, [Measured("A", 1.0, "ok"), Measured("B", None, "crashed")])
    db.record(key, [Measured("C", None, "timeout")])
    db.record(_key((8, 8)), [Measured("D", 2.0, "ok")])
    assert db.measured(key) == [
        Measured("A", 1.0, "ok"),
        Measured("B", None, "crashed"),
        Measured("C", None, "timeout"),
    ]
    assert db.get(key) is None  # a run may record before it stores a result


def test_nearest_orders_by_size_excludes_self_and_other_kernels(db):
    me = _key((64, 32))
    db.put(me, "self", 1.0)
    db.put(_key((64, 64)), "one doubling", 1.0)
    db.put(_key((256, 32)), "two doublings", 1.0)
    db.put(_key((64, 32), version="0.0.9"), "same sizes, older tcjit", 1.0)
    db.put(_key((64, 32), dtype="float64"), "other dtype", 1.0)
    db.put(_key((64, 32, 2)), "other rank", 1.0)
    db.put(_key((64, 32), source="def g..."), "other kernel", 1.0)
    db.put(_key((64, 32), target="cuda-emulated"), "other target", 1.0)
    got = [r.options for r in db.nearest(me, limit=10)]
    assert got[:3] == ["same sizes, older tcjit", "one doubling", "two doublings"]
    assert sorted(got[3:]) == ["other dtype", "other rank"]
    assert [r.options for r in db.nearest(me, limit=2)] == got[:2]


def test_records_find_remove_clear(db):
    keys = [_key((n, 4)) for n in (1, 2, 3)]
    for i, key in enumerate(keys):
        db.put(key, str(i), 1.0)
        db.record(key, [Measured(str(i), 1.0, "ok")])
    assert {r.key for r in db.records()} == set(keys)
    assert db.find(keys[0].digest[:10]) == [db.get(keys[0])]
    assert db.find(keys[0].digest.upper()) == [db.get(keys[0])]
    assert db.find("not hex") == [] and len(db.find("")) == 3
    assert db.remove([keys[0].digest, "0" * 64]) == 1
    assert db.get(keys[0]) is None and db.measured(keys[0]) == []
    assert db.clear() == 2
    assert db.records() == [] and db.measured(keys[1]) == []


def test_threads_share_one_object(db):
    key = _key()

    def work(t):
        for i in range(40):
            db.put(key, f"{t}-{i}", 1.0, baseline=1.0 + t + i / 100, evaluations=1, rounds=1)
            db.put(_key((t + 1, i + 1)), "x", 1.0)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert db.get(key).evaluations == 160 and db.get(key).options == "3-39"
    assert len(db.records()) == 161


# ------------------------------------------------------------------------------------- processes
_WORKER = """
import os, sys, time, warnings
from tcjit.cache import Measured, OptionsDatabase, TuningKey
warnings.simplefilter("error")  # a write that fails must fail the worker
path, worker, n, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def key(name):
    return TuningKey("src", "f", name, "cpu", "arch", "0")
db = OptionsDatabase(path)
open(f"{go}-ready-{worker}", "w").close()
while not os.path.exists(go):
    time.sleep(0.001)
for i in range(n):
    db.put(key(f"w{worker}-{i}"), f"w{worker}-{i}", 1.0, evaluations=1)
    gain = 10.0 + ((worker * 7919 + i * 104729) % 997) / 997
    db.put(key("shared"), f"w{worker}-{i}", 1.0, baseline=gain, evaluations=1, rounds=1)
    db.record(key("shared"), [Measured(f"w{worker}-{i}", 1.0, "ok")])
"""


def _shared_gain(worker: int, i: int) -> float:
    return 10.0 + ((worker * 7919 + i * 104729) % 997) / 997


def test_concurrent_processes_lose_nothing(tmp_path, full_tier):
    # Fails without BEGIN IMMEDIATE (a deferred transaction cannot upgrade to a write while another
    # process writes: "database is locked") and without the busy timeout.
    path, go = tmp_path / "options.sqlite3", tmp_path / "go"
    workers, n = (4, 400) if full_tier else (3, 60)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(path), str(w), str(n), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for w in range(workers)
    ]
    deadline = time.monotonic() + 60
    while not all(Path(f"{go}-ready-{w}").exists() for w in range(workers)) and time.monotonic() < deadline:
        time.sleep(0.01)  # all start together, on a file none has created yet
    go.touch()
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * workers, outputs
    db = OptionsDatabase(path)
    shared = db.get(TuningKey("src", "f", "shared", "cpu", "arch", "0"))
    best = max(_shared_gain(w, i) for w in range(workers) for i in range(n))
    fastest = {f"w{w}-{i}" for w in range(workers) for i in range(n) if _shared_gain(w, i) == best}
    assert shared.baseline == best and shared.options in fastest
    assert shared.evaluations == workers * n
    assert len(db.measured(shared.key)) == workers * n
    own = {r.options for r in db.records() if r.key.layout != "shared"}
    assert own == {f"w{w}-{i}" for w in range(workers) for i in range(n)}


def _put_in_child() -> None:
    db = _DB_FOR_FORK
    assert db is not None
    db.put(_key((7, 7)), "child", 1.0)
    db.close()


_DB_FOR_FORK: OptionsDatabase | None = None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_reopens(tmp_path):
    global _DB_FOR_FORK
    db = _DB_FOR_FORK = OptionsDatabase(tmp_path / "options.sqlite3")
    db.put(_key(), "parent", 1.0)  # the parent's connection is open when it forks
    child = multiprocessing.get_context("fork").Process(target=_put_in_child)
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert db.get(_key((7, 7))).options == "child"
    db.put(_key((8, 8)), "parent again", 1.0)
    assert len(db.records()) == 3
    _DB_FOR_FORK = None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_child_writes_survive_the_parent_closing(tmp_path):
    # A child that kept its inherited connection open would share SQLite's lock record with its own
    # new connection; the parent's close would then delete the WAL under the child and lose "late".
    db = OptionsDatabase(tmp_path / "options.sqlite3")
    db.put(_key(), "parent", 1.0)
    ready, proceed = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery, exit code only
        code = 1
        try:
            db.put(_key((1, 1)), "early", 1.0)
            os.write(ready[1], b"x")
            os.read(proceed[0], 1)
            db.put(_key((2, 2)), "late", 1.0)
            code = 0
        finally:
            os._exit(code)
    os.read(ready[0], 1)
    db.close()
    os.write(proceed[1], b"x")
    assert os.waitpid(pid, 0)[1] == 0
    assert sorted(r.options for r in OptionsDatabase(db.path).records()) == ["early", "late", "parent"]


# ----------------------------------------------------------------------------------------- damage
def _full_database(path: Path, rows: int = 400) -> None:
    db = OptionsDatabase(path)
    db.put(_key((1, 3)), "x" * 200, 1.0)
    item = db.export()[0]
    many = []
    for i in range(rows):  # one transaction: fast
        key = _key((i + 1, 3))
        many.append({**item, "digest": key.digest, "key": {**item["key"], "layout": key.layout}})
    db.import_records(many)
    db.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "bad page"])
def test_damaged_file_is_reported_kept_aside_and_rebuilt(tmp_path, damage):
    path = tmp_path / "options.sqlite3"
    if damage == "garbage":
        path.write_bytes(b"tuned options? no: just some bytes\n" * 200)
    else:
        _full_database(path)
        data = path.read_bytes()
        if damage == "truncated":
            data = data[: len(data) // 2]
        else:  # page 3 onwards overwritten: the header still says SQLite
            data = data[:8192] + b"\xa5" * 4096 + data[12288:]
        path.write_bytes(data)
    damaged = path.read_bytes()
    db = OptionsDatabase(path)
    with pytest.warns(TCWarning, match=r"options\.sqlite3 is damaged .*moved to .*\.corrupt-") as caught:
        assert db.get(_key((1, 3))) is None
    (aside,) = _asides(path)
    assert aside.read_bytes() == damaged
    assert str(path) in str(caught[0].message) and str(aside) in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        db.put(_key(), "new", 1.0)
        assert db.get(_key()).options == "new"
        assert OptionsDatabase(path).get(_key()).options == "new"


def test_empty_file_is_a_new_database(tmp_path):
    path = tmp_path / "options.sqlite3"
    path.touch()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        db = OptionsDatabase(path)
        assert db.get(_key()) is None
        db.put(_key(), "A", 1.0)
        assert db.get(_key()).options == "A"
    assert _asides(path) == []


def test_file_damaged_while_open_is_noticed(tmp_path):
    path = tmp_path / "options.sqlite3"
    db = OptionsDatabase(path)
    db.put(_key(), "A", 1.0)
    for suffix in ("-wal", "-shm", ""):  # moved away under our open connection, as recovery does
        os.rename(f"{path}{suffix}", tmp_path / f"elsewhere{suffix}")
    path.write_bytes(b"\0garbage" * 1000)
    with pytest.warns(TCWarning, match="is damaged"):
        db.put(_key(), "B", 1.0)
    assert db.get(_key()).options == "B" and len(_asides(path)) == 1


_OPEN_DAMAGED = """
import os, sys, time, warnings
from tcjit.cache import OptionsDatabase, TuningKey
path, name, go = sys.argv[1], sys.argv[2], sys.argv[3]
while not os.path.exists(go):
    time.sleep(0.001)
with warnings.catch_warnings(record=True):
    warnings.simplefilter("always")
    OptionsDatabase(path).put(TuningKey("s", "f", name, "cpu", "a", "0"), name, 1.0)
"""


def test_two_processes_finding_damage_move_it_once(tmp_path):
    path, go = tmp_path / "options.sqlite3", tmp_path / "go"
    path.write_bytes(b"not a database" * 500)
    procs = [
        subprocess.Popen([sys.executable, "-c", _OPEN_DAMAGED, str(path), name, str(go)])
        for name in ("a", "b")
    ]
    time.sleep(0.3)
    go.touch()
    assert [p.wait(60) for p in procs] == [0, 0]
    assert len(_asides(path)) == 1
    assert sorted(r.options for r in OptionsDatabase(path).records()) == ["a", "b"]


@pytest.mark.parametrize("kind", ["newer schema", "someone else's database"])
def test_foreign_file_is_never_modified(tmp_path, kind):
    path = tmp_path / "options.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE tuned (x)")
    conn.execute("INSERT INTO tuned VALUES (42)")
    if kind == "newer schema":
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()

    def state():  # <path>.lock may appear: it is ours
        return (
            path.read_bytes(),
            path.stat().st_mtime_ns,
            sorted(set(os.listdir(tmp_path)) - {f"{path.name}.lock"}),
        )

    before = state()
    db = OptionsDatabase(path)
    with pytest.warns(TCWarning, match="left untouched"):
        assert db.get(_key()) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once already
        assert db.records() == [] and db.export() == []
        stored = db.put(_key(), "A", 1.0)
    assert isinstance(stored, TunedOptions) and stored.options == "A"
    assert db.clear() == 0 and db.import_records([]) == 0
    assert state() == before


def test_damage_that_cannot_be_moved_aside_warns_and_never_raises(tmp_path, monkeypatch):
    path = tmp_path / "options.sqlite3"
    path.write_bytes(b"garbage" * 1000)

    def refuse(*args):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "rename", refuse)
    db = OptionsDatabase(path)
    with pytest.warns(
        TCWarning, match=r"cannot read .*: it is damaged \(file is not a database\) and cannot be moved"
    ):
        assert db.get(_key()) is None
    with pytest.warns(
        TCWarning, match="could not store tuned options .*cannot be moved aside: Permission denied"
    ):
        db.put(_key(), "A", 1.0)
    assert path.read_bytes() == b"garbage" * 1000 and _asides(path) == []


def test_unwritable_place_warns_and_reads_nothing(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    db = OptionsDatabase(blocker / "options.sqlite3")
    assert db.get(_key()) is None
    with pytest.warns(TCWarning, match="could not store tuned options"):
        stored = db.put(_key(), "A", 1.0)
    assert stored.options == "A"
    with pytest.raises(TCCacheError, match="is a directory"):
        OptionsDatabase(tmp_path)


# ----------------------------------------------------------------------------------- import/export
def test_export_import_round_trip_and_merge(tmp_path):
    one = OptionsDatabase(tmp_path / "one.sqlite3")
    one.put(_key((1, 1)), "A", 2.0, baseline=3.0, evaluations=4, low=1.4, high=1.6, rounds=5)
    one.record(_key((1, 1)), [Measured("A", 2.0, "ok"), Measured("Z", None, "wrong")])
    one.put(_key((2, 2)), "B", 1.0, baseline=1.5, rounds=5)
    data = json.loads(json.dumps(one.export()))
    assert all(item["schema"] == SCHEMA_VERSION for item in data)
    two = OptionsDatabase(tmp_path / "two.sqlite3")
    # slower in absolute time (another machine), but a greater speed-up within its run
    two.put(_key((2, 2)), "better B", 5.0, baseline=10.0, evaluations=9, rounds=5)
    assert two.import_records(data) == 1  # (1,1) is new; two's (2,2) gained more
    assert two.get(_key((1, 1))) == one.get(_key((1, 1)))
    assert two.measured(_key((1, 1))) == one.measured(_key((1, 1)))
    assert two.get(_key((2, 2))).options == "better B" and two.get(_key((2, 2))).evaluations == 9
    assert two.import_records(data) == 0  # idempotent: no new candidates, evaluations not doubled
    assert two.get(_key((1, 1))).evaluations == 4 and len(two.measured(_key((1, 1)))) == 2
    three = OptionsDatabase(tmp_path / "three.sqlite3")
    three.import_records(data)
    assert three.export() == data
    # an export of schema 1 (no rounds) imports as records measured across runs
    legacy = [{k: v for k, v in item.items() if k not in ("low", "high", "rounds")} for item in data]
    four = OptionsDatabase(tmp_path / "four.sqlite3")
    assert four.import_records([{**item, "schema": 1} for item in legacy]) == 2
    assert [r.rounds for r in four.records()] == [0, 0]
    assert four.import_records(data) == 2  # measured in rounds: replaces both


def test_cache_error_is_a_tcerror_that_pickles():
    import pickle

    from tcjit import TCError

    err = TCCacheError("record 0: bad", hint="h")
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, TCError) and type(back) is TCCacheError and str(back) == str(err)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: {"records": d}, "must be a JSON list"),
        (lambda d: [*d, 3], "record 1: expected an object"),
        (lambda d: [{**d[0], "schema": 99}], "record 0: schema 99"),
        (lambda d: [{**d[0], "key": {**d[0]["key"], "entry": 5}}], "key field 'entry'"),
        (lambda d: [{**d[0], "digest": "00"}], "does not match its key"),
        (lambda d: [{**d[0], "time": "fast"}], "time must be a finite number"),
        (lambda d: [{**d[0], "key": {**d[0]["key"], "layout": "[64"}}], "layout must be JSON"),
        (lambda d: [{**d[0], "measured": [{"options": "A", "status": "ok", "time": -1}]}], "measured 0"),
    ],
)
def test_malformed_import_is_refused_naming_the_problem(db, change, words):
    db.put(_key(), "A", 1.0)
    data = change(db.export())
    target = OptionsDatabase(db.path.with_name("target.sqlite3"))
    with pytest.raises(TCCacheError, match=words):
        target.import_records(data)
    assert target.records() == []


# ------------------------------------------------------------------------------------ tcjit side
MATMUL = "def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"


def test_tuning_key_follows_layout_and_target():
    import torch

    import tcjit
    from tcjit.tuned import tuning_key

    k = tcjit.define(MATMUL)
    a, b = torch.randn(8, 4), torch.randn(4, 6)
    key = tuning_key(k, (a, b), "cpu")
    assert key == tuning_key(k, (torch.zeros(8, 4), torch.ones(4, 6)), "cpu")  # contents do not count
    assert json.loads(key.layout) == [["float32", [8, 4], [4, 1]], ["float32", [4, 6], [6, 1]]]
    assert key.entry == "matmul" and key.version == tcjit.__version__ and key.source == k.canonical_source
    assert key.digest != tuning_key(k, (a.t().contiguous().t(), b), "cpu").digest  # transposed strides
    emulated = tuning_key(k, (a, b), "cuda-emulated")
    assert emulated.digest != key.digest and emulated.family != key.family and emulated.arch == key.arch
    assert tuning_key(k, (a, torch.randn(4, 7)), "cpu").family == key.family
    with pytest.raises(tcjit.TCCallError, match="target"):
        tuning_key(k, (a, b), "gpu")
    scale = tcjit.define("def scale(float(N) X, float s) -> (Y) { Y(i) = s * X(i) }")
    assert json.loads(tuning_key(scale, (a[0], 2.0), "cpu").layout)[1] == "scalar"


def test_stored_options_round_trip_and_bad_records(monkeypatch):
    import torch

    import tcjit
    from tcjit.tuned import options_database, stored_options, tuning_key

    k = tcjit.define(MATMUL)
    a, b = torch.randn(8, 4), torch.randn(4, 6)
    db = options_database()
    assert db is options_database() and str(db.path) == os.environ["TCJIT_OPTIONS_DB"]
    assert stored_options(k, (a, b), "cpu") is None
    tuned = tcjit.MappingOptions.naive().tile(4, 2)
    db.put(tuning_key(k, (a, b), "cpu"), tuned.to_json(), 1e-5)
    assert stored_options(k, (a, b), "cpu") == tuned
    assert stored_options(k, (a, b), "cuda-emulated") is None
    db.put(tuning_key(k, (a, a.t()), "cpu"), "{not json", 1e-5)
    with pytest.warns(TCWarning, match="not usable any more"):
        assert stored_options(k, (a, a.t()), "cpu") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per record and process
        assert stored_options(k, (a, a.t()), "cpu") is None
    monkeypatch.setenv("TCJIT_OPTIONS_DB", "")
    assert options_database() is None and stored_options(k, (a, b), "cpu") is None
