"""The on-disk format of one kernel-store entry: a directory of files and a manifest that vouches for them.

An entry for key ``k`` lives at ``root/v{FORMAT_VERSION}/ab/abcd…`` where ``abcd…`` is sha256(k) in
hex. Its ``manifest.json`` holds the full key text, the format version, the creation time (integer
seconds), the user metadata, the size and sha256 of every file, and ``digest``: the sha256 of the
canonical JSON of everything else in the manifest (:func:`manifest_digest`), so that the metadata,
which says how to call the loaded code, is checked like the files are. The directory's mtime is the
entry's last access (set explicitly: file-system atime is unreliable), which eviction orders by.

:func:`verify_entry` trusts nothing: a manifest that does not parse, names another key or another
version, does not match its digest, or lists a file that is missing, is a symbolic link or differs
in size or checksum makes the entry corrupt, and so does a directory or file that another user owns
or that group or others can write (:mod:`tcjit.cache.trust`). Each file is opened once, without
following links; the bytes hashed are the bytes the :class:`Entry` hands out
(:meth:`Entry.read`), so nothing can change between the check and the use. Checksums are verified
on every call: kernel files are small and the runtime keeps what it loaded in memory, so a process
reads each entry about once.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from .trust import UntrustedError, check_fd, open_checked

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST",
    "Entry",
    "StoredEntry",
    "describe_entry",
    "entry_location",
    "fsync_dir",
    "make_entry",
    "manifest_digest",
    "prepare_put",
    "read_entry",
    "record_access",
    "verify_entry",
    "write_entry",
]

FORMAT_VERSION: int = 2
"""Layout and manifest version. Bump it when either changes: entries of other versions are misses."""

MANIFEST = "manifest.json"
"""The manifest's file name in every entry; no stored file may take it."""


@dataclass(frozen=True)
class Entry:
    """A valid entry of the store, as :meth:`KernelStore.get` or :meth:`KernelStore.put` returns it.

    Another process may evict the entry after it was returned: open its files promptly and treat a
    missing file as a miss.

    :ivar key: the full cache-key text.
    :ivar directory: the entry's directory.
    :ivar files: file name -> path, for every file stored with the entry (read-only mapping).
    :ivar metadata: the user metadata, as read back from JSON (tuples come back as lists).
    :ivar contents: file name -> the bytes that were checked against the manifest (read-only).
    """

    key: str
    directory: Path
    files: Mapping[str, Path]
    metadata: Mapping[str, object]
    contents: Mapping[str, bytes]

    def path(self, name: str) -> Path:
        """The path of the file stored under ``name``; ``KeyError`` if the entry has no such file."""
        try:
            return self.files[name]
        except KeyError:
            raise KeyError(f"entry has no file {name!r} (it has {sorted(self.files)})") from None

    def read(self, name: str) -> bytes:
        """The content of the file stored under ``name``, exactly as checked against the manifest
        (prefer it to reading :meth:`path`: the file on disk may have changed or gone since).
        ``KeyError`` if the entry has no such file."""
        self.path(name)  # the KeyError with the file names
        return self.contents[name]


@dataclass(frozen=True)
class StoredEntry:
    """One entry of the store as a listing sees it (:meth:`KernelStore.entries`): nothing of it
    is loaded or removed.

    :ivar directory: the entry's directory.
    :ivar key: the full cache-key text, or ``None`` when the entry is not valid.
    :ivar bytes: bytes of file content (manifest included) of the files that could be examined.
    :ivar created: when it was stored (seconds since the epoch), or ``None`` when not valid.
    :ivar accessed: its last access (seconds since the epoch; the directory's mtime).
    :ivar problem: why a call would not use it (another format version, corrupt, untrusted), or
        ``None`` for a valid entry.
    """

    directory: Path
    key: str | None
    bytes: int
    created: float | None
    accessed: float
    problem: str | None


def describe_entry(dir_fd: int, directory: Path, root: Path) -> StoredEntry:
    """The :class:`StoredEntry` of the entry open (and checked) as ``dir_fd`` at ``directory`` under
    the store's ``root``: valid when :func:`read_entry` accepts it for the key its manifest names
    and that key belongs at ``directory``. Files are opened without following links; sizes are
    read from ``lstat``. Never raises on what it finds on disk."""
    accessed = os.fstat(dir_fd).st_mtime
    size = 0
    with contextlib.suppress(OSError):
        for name in os.listdir(dir_fd):
            with contextlib.suppress(OSError):
                size += os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size

    def invalid(problem: str) -> StoredEntry:
        return StoredEntry(directory, None, size, None, accessed, problem)

    try:
        manifest = json.loads(_read(MANIFEST, dir_fd))
    except FileNotFoundError:
        return invalid("no manifest")
    except (UntrustedError, OSError, ValueError, RecursionError) as err:
        return invalid(f"unreadable manifest: {getattr(err, 'strerror', None) or err}")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        return invalid("of another format version")
    key = manifest.get("key")
    if not isinstance(key, str) or entry_location(root, key) != directory:
        return invalid("foreign entry: its manifest names another key")
    found = read_entry(dir_fd, directory, key)
    if not isinstance(found, Entry):
        return invalid(found or "no manifest")
    created = manifest.get("created")
    return StoredEntry(
        directory, key, size, created if isinstance(created, (int, float)) else None, accessed, None
    )


def entry_location(root: Path, key: str) -> Path:
    """Where the entry for ``key`` lives under ``root`` (any ``str`` key, even with lone surrogates)."""
    if not isinstance(key, str):
        raise TypeError(f"a cache key is text, got {type(key).__name__}")
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return root / f"v{FORMAT_VERSION}" / digest[:2] / digest


def make_entry(
    key: str, directory: Path, contents: Mapping[str, bytes], metadata: dict[str, object]
) -> Entry:
    """The :class:`Entry` for files ``contents`` (name -> bytes) in ``directory``, with read-only mappings."""
    files = MappingProxyType({name: directory / name for name in sorted(contents)})
    return Entry(key, directory, files, MappingProxyType(metadata), MappingProxyType(dict(contents)))


def manifest_digest(manifest: Mapping[str, object]) -> str:
    """The sha256 (hex) of a manifest's canonical JSON, its ``digest`` field left out."""
    body = {name: value for name, value in manifest.items() if name != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# ------------------------------------------------------------------------------------- writing
def prepare_put(
    files: Mapping[str, bytes], metadata: Mapping[str, object] | None
) -> tuple[dict[str, bytes], dict[str, object]]:
    """Check what a put stores; return the file contents as bytes and the metadata as JSON reads it.

    :raises ValueError: a file name is empty, reserved (``manifest.json``, a leading ``.``), not a
        plain name or longer than 255 bytes.
    :raises TypeError: a content is not bytes-like, or the metadata is not JSON with string keys.
    """
    blobs = {}
    for name, data in files.items():
        problem = _name_problem(name)
        if problem:
            raise ValueError(problem)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"content of {name!r} must be bytes, got {type(data).__name__}")
        blobs[name] = bytes(data)
    try:
        text = json.dumps(dict(metadata or {}), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"kernel cache metadata must be JSON with string keys: {err}") from None
    return blobs, json.loads(text)


def write_entry(directory: Path, key: str, blobs: dict[str, bytes], metadata: dict[str, object]) -> int:
    """Write and fsync the files, then the manifest, into the empty ``directory``; return its bytes."""
    records = {}
    for name, data in blobs.items():
        _write_file(directory / name, data)
        records[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest = {
        "format": FORMAT_VERSION,
        "key": key,
        "created": int(time.time()),
        "files": records,
        "metadata": metadata,
    }
    manifest["digest"] = manifest_digest(manifest)
    text = json.dumps(manifest, sort_keys=True, allow_nan=False).encode("ascii")
    _write_file(directory / MANIFEST, text)
    record_access(directory)
    fsync_dir(directory)
    return len(text) + sum(len(data) for data in blobs.values())


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Make the names in directory ``path`` durable (after creating or renaming into it)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def record_access(directory: Path) -> None:
    """Set the entry's last access to now; silently nothing if it vanished or cannot be changed."""
    now = time.time_ns()
    with contextlib.suppress(OSError):
        os.utime(directory, ns=(now, now), follow_symlinks=False)


# ------------------------------------------------------------------------------------- reading
def verify_entry(directory: Path, key: str) -> Entry | str | None:
    """The entry at ``directory`` if valid for ``key``; why not if corrupt or foreign; ``None`` if absent.

    Checks the entry's directory and files, not the folders above it (the store checks those on
    its way down from the root). Never raises on what it finds on disk.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        return "not a directory" if err.errno in (errno.ENOTDIR, errno.ELOOP) else err.strerror
    try:
        check_fd(fd, directory.name, directory=True)
        return read_entry(fd, directory, key)
    except UntrustedError as err:
        return str(err)
    finally:
        os.close(fd)


def read_entry(dir_fd: int, directory: Path, key: str) -> Entry | str | None:
    """Like :func:`verify_entry`, for the entry directory open as ``dir_fd`` (already checked) at
    ``directory``: its manifest and files are opened relative to ``dir_fd``."""
    try:
        raw = _read(MANIFEST, dir_fd)
    except FileNotFoundError:
        return "no manifest"
    except UntrustedError as err:
        return str(err)
    except OSError as err:
        return f"unreadable manifest: {err.strerror}"
    try:
        manifest = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return "manifest is not JSON"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        return "manifest of another format"
    if manifest.get("key") != key:
        return "foreign entry: its manifest names another key"
    try:
        if manifest.get("digest") != manifest_digest(manifest):
            return "manifest does not match its digest"
    except (TypeError, ValueError):
        return "malformed manifest"
    records, metadata = manifest.get("files"), manifest.get("metadata")
    if not isinstance(records, dict) or not isinstance(metadata, dict):
        return "malformed manifest"
    contents = {}
    for name, record in records.items():
        problem = _name_problem(name)
        if problem:
            return problem
        data = _checked_file(name, dir_fd, record)
        if isinstance(data, str):
            return data
        contents[name] = data
    return make_entry(key, directory, contents, metadata)


def _checked_file(name: str, dir_fd: int, record: object) -> bytes | str:
    """The content of file ``name`` of the entry open as ``dir_fd`` if it matches its manifest
    ``record``; why not otherwise."""
    if not isinstance(record, dict) or not isinstance(record.get("size"), int):
        return f"malformed manifest record for {name}"
    try:
        data = _read(name, dir_fd)
    except UntrustedError as err:
        return str(err)
    except OSError as err:
        return f"{name}: {err.strerror}"
    if len(data) != record["size"]:
        return f"{name} has {len(data)} bytes, the manifest says {record['size']}"
    if hashlib.sha256(data).hexdigest() != record.get("sha256"):
        return f"{name} does not match its checksum"
    return data


def _read(name: str, dir_fd: int) -> bytes:
    """The content of the regular, trusted file ``name`` in ``dir_fd``, not following a link."""
    fd = open_checked(name, dir_fd, directory=False)
    with open(fd, "rb") as f:
        return f.read()


def _name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a file of an entry, or ``None`` if it can."""
    if not isinstance(name, str) or not name:
        return f"file name must be a non-empty string, got {name!r}"
    if name.startswith(".") or "/" in name or "\0" in name or name == MANIFEST:
        return f"file name {name!r} is reserved or not a plain name"
    try:
        if len(os.fsencode(name)) > 255:
            return f"file name {name[:20]!r}... is longer than 255 bytes"
    except UnicodeEncodeError:
        return f"file name {name!r} cannot be encoded for the file system"
    return None
