"""Process replay: the generated source of a fixed corpus, to show that a restructuring changed none.

The corpus: every suite kernel at its first two small sizes and its large size, under the default
options and each preset; and every program the oracle's tests (tests/runtime/test_reference_programs.py)
run, at the sizes they run it, under the default options. Each is lowered for ``cpu`` at vector
widths of 32 and 64 bytes (the generated C and the CPU defaults depend on the host's width, so both
are fixed here), for ``cuda`` and for ``cuda-emulated``, with contiguous tensors; nothing is
compiled. An item whose lowering raises records the error's class and message instead.

A handful of items are also kept whole, their prelude left out, as generated-code snapshots in
tests/data/snapshots/ (:data:`SNAPSHOTS`): a change to them shows as a diff in review, and
tests/runtime/test_replay.py checks them. ``--update`` rewrites them with the digests.

Each item's source has a digest; scripts/replay_digests.txt holds them, headed by the digest of the
whole corpus, so that the file is the same on every machine at the same commit::

    python scripts/replay.py              # compare with the committed digests: exit 1 if any differ
    python scripts/replay.py --update     # rewrite them and the snapshots (say in the commit
                                          # message which kernels changed and why)
    python scripts/replay.py --dump DIR   # every source into DIR, to diff two commits' dumps
    python scripts/replay.py -k matmul    # only the items whose name contains "matmul"
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import sys
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIGESTS = ROOT / "scripts" / "replay_digests.txt"
TARGETS = (("cpu", 32), ("cpu", 64), ("cuda", 0), ("cuda-emulated", 0))
SNAPSHOT_DIR = ROOT / "tests" / "data" / "snapshots"

#: The items kept whole (suite kernel, its small size number, target, vector bytes): a register
#: tile and a fused epilogue (fcrelu), row reductions (softmax), a team of parallel loops with the
#: barriers between layers (mlp3) and a convolution's chain of reductions (conv2d), for each target.
SNAPSHOTS = tuple(
    (kernel, 1, target, width)
    for kernel in ("fcrelu", "softmax", "mlp3", "conv2d")
    for target, width in (("cpu", 32), ("cuda", 0), ("cuda-emulated", 0))
)


@dataclass(frozen=True)
class Item:
    """One program of the corpus at one size, under one option set: ``options`` is ``default``
    or a preset's name."""

    name: str
    source: str
    entry: str | None
    sizes: tuple[tuple[str, int], ...]
    options: str

    def label(self, target: str, width: int) -> str:
        sizes = ",".join(f"{k}={v}" for k, v in self.sizes)
        where = f"{target}@{width}" if width else target
        return f"{self.name} [{sizes}] {self.options} {where}"


def suite_items() -> Iterator[Item]:
    from tcjit import suite
    from tcjit.mapping.options import PRESETS

    for k in suite.SUITE.values():
        for sizes in [*k.small_sizes[:2], k.large_size]:
            for options in ("default", *PRESETS):
                yield Item(f"suite/{k.name}", k.source, k.entry, tuple(sorted(sizes.items())), options)


def program_items() -> Iterator[Item]:
    """The programs the oracle's tests run, recorded by running them with a stand-in for the
    oracle that notes each program and the sizes its inputs bind, then evaluates it."""
    sys.path.insert(0, str(ROOT / "tests"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import conftest  # noqa: F401  (puts tests/'s folders on sys.path, as under pytest)
        import test_compiled_programs as TCP
        import test_reference_programs as TRP

    from tcjit import TCError, reference
    from tcjit.binding import bind
    from tcjit.polyhedral.lang.check import check_source

    seen: dict[tuple, Item] = {}

    class Recorder:
        def evaluate(self, source, entry=None, *inputs, outputs=None, **kwargs):
            try:
                program = check_source(source)
                cdef = program.entry(entry)
                sizes = bind(cdef, inputs, outputs).sizes
            except TCError:
                sizes = None
            if sizes is not None:
                key = (source, entry, tuple(sorted(sizes.items())))
                tag = hashlib.sha256(f"{source}\0{entry}".encode()).hexdigest()[:6]
                seen.setdefault(key, Item(f"program/{cdef.name}-{tag}", source, entry, key[2], "default"))
            return reference.evaluate(source, entry, *inputs, outputs=outputs, **kwargs)

    TRP.reference = Recorder()
    try:
        for name, kwargs, _, _ in TCP.PROGRAM_CASES:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    getattr(TRP, name)(**kwargs)
                except Exception:  # a test's own failure is not the corpus's business
                    pass
    finally:
        TRP.reference = reference
    yield from seen.values()


def generate(item: Item, target: str, width: int) -> str:
    """The generated source of ``item`` for ``target`` (``width``: the CPU's vector bytes, given
    to the pipeline as ``TCJIT_VECTOR_BYTES``), or the error its lowering raises."""
    from tcjit.mapping.options import MappingOptions
    from tcjit.pipeline import lowered
    from tcjit.polyhedral.lang.check import check_source

    options = None if item.options == "default" else MappingOptions(item.options)
    host = os.environ.get("TCJIT_VECTOR_BYTES")
    os.environ["TCJIT_VECTOR_BYTES"] = str(width or 32)  # the width the CPU plans for, not the host's
    try:
        cdef = check_source(item.source).entry(item.entry)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return lowered(cdef, dict(item.sizes), options, target).source
    except Exception as e:  # an error is part of what is replayed
        return f"error: {type(e).__name__}: {e}"
    finally:
        if host is None:
            del os.environ["TCJIT_VECTOR_BYTES"]
        else:
            os.environ["TCJIT_VECTOR_BYTES"] = host


def snapshot_items() -> list[tuple[Item, str, int, Path]]:
    """The snapshots' items, targets, widths and files."""
    from tcjit import suite

    out = []
    for kernel, n, target, width in SNAPSHOTS:
        k = suite.SUITE[kernel]
        item = Item(f"suite/{k.name}", k.source, k.entry, tuple(sorted(k.small_sizes[n].items())), "default")
        suffix = ".cu" if target == "cuda" else ".c"
        out.append((item, target, width, SNAPSHOT_DIR / f"{kernel}-{target}{suffix}"))
    return out


def snapshot(item: Item, target: str, width: int) -> str:
    """The snapshot of an item: its generated source, the prelude left out, headed by its label."""
    from tcjit.mapping.c_prelude import without_prelude

    text = without_prelude(generate(item, target, width), "scripts/replay.py snapshots")
    return f"/* {item.label(target, width)} */\n{text}"


def write_snapshots() -> int:
    SNAPSHOT_DIR.mkdir(parents=True, exist_ok=True)
    for item, target, width, path in snapshot_items():
        path.write_text(snapshot(item, target, width), encoding="utf-8")
    return len(SNAPSHOTS)


def _one(job: tuple[Item, str, int]) -> tuple[str, str]:
    item, target, width = job
    return item.label(target, width), generate(item, target, width)


def corpus(only: str = "") -> list[Item]:
    """The corpus; ``only`` starting with ``suite/`` leaves out the programs (recording them runs
    the oracle's tests)."""
    return [*suite_items(), *(program_items() if not only.startswith("suite/") else ())]


def digests(jobs, processes: int, dump: Path | None) -> dict[str, str]:
    out = {}

    def record(results) -> None:
        for label, text in results:
            out[label] = hashlib.sha256(text.encode()).hexdigest()[:16]
            if dump is not None:
                safe = "".join(c if c.isalnum() or c in "=,.@-" else "_" for c in label)
                (dump / f"{safe}.txt").write_text(text)

    if processes <= 1:
        record(map(_one, jobs))
    else:
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            record(pool.imap(_one, jobs, chunksize=4))
    return out


def render(found: Mapping[str, str]) -> str:
    lines = [f"{d} {label}" for label, d in sorted(found.items())]
    whole = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return f"# corpus {whole} ({len(lines)} items; scripts/replay.py)\n" + "\n".join(lines) + "\n"


def read_digests(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            digest, label = line.split(" ", 1)
            out[label] = digest
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="rewrite scripts/replay_digests.txt")
    ap.add_argument("--dump", type=Path, help="write every generated source into this folder")
    ap.add_argument("-k", default="", help="only the items whose label contains this")
    ap.add_argument("-j", type=int, default=max(1, multiprocessing.cpu_count()), help="processes")
    args = ap.parse_args(argv)
    if args.update and args.k:
        ap.error("--update replays the whole corpus: leave out -k")
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
    jobs = [(i, t, w) for i in corpus(args.k) for t, w in TARGETS if args.k in i.label(t, w)]
    found = digests(jobs, args.j, args.dump)
    if args.update:
        DIGESTS.write_text(render(found))
        print(f"replay: {len(found)} items written to {DIGESTS.relative_to(ROOT)}")
        print(f"replay: {write_snapshots()} snapshots written to {SNAPSHOT_DIR.relative_to(ROOT)}")
        return 0
    want = read_digests(DIGESTS)
    if not args.k:
        missing = sorted(set(want) - set(found))
        for label in missing:
            print(f"gone:    {label}")
    else:
        missing = []
    changed = sorted(label for label in found if want.get(label) != found[label])
    for label in changed:
        print(f"{'changed' if label in want else 'new'}: {label}")
    print(f"replay: {len(found)} items, {len(changed)} changed or new, {len(missing)} gone")
    return 1 if changed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
