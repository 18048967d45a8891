"""The on-disk cache of compiled kernels as the pipeline uses it: the process's
:class:`~tcjit.cache.KernelStore` (under ``TCJIT_CACHE_DIR``; the empty string disables it), the
key every specialisation is stored under (DESIGN.md, "Cache key"), and loading and saving an
entry. A store that cannot be written costs a warning, never the call; an entry whose checked
file is not what was stored is discarded and rebuilt.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import warnings
from collections.abc import Mapping, Sequence

import torch

from .polyhedral.errors import TCError, TCWarning
from .version import __version__

__all__ = ["BUILD_LOCK", "cache_key", "code_identity", "kernel_store", "load_stored", "save_stored"]

_STORE_LOCK = threading.Lock()
_STORES: dict[str, object] = {}
BUILD_LOCK = threading.Lock()


def kernel_store():
    """The process's :class:`~tcjit.cache.KernelStore` (``None`` when disabled by TCJIT_CACHE_DIR="")."""
    root = os.environ.get("TCJIT_CACHE_DIR")
    if root is None:
        import platformdirs

        root = os.path.join(platformdirs.user_cache_dir("tcjit"), "kernels")
    if root == "":
        return None
    with _STORE_LOCK:
        store = _STORES.get(root)
        if store is None:
            from .cache import KernelStore

            try:
                max_bytes = int(os.environ.get("TCJIT_CACHE_MAX_BYTES", 2 << 30))
                store = KernelStore(root, max_bytes=max_bytes)
            except (TCError, ValueError) as e:
                warnings.warn(f"tcjit: kernel cache disabled: {e}", TCWarning, stacklevel=3)
                store = False
            _STORES[root] = store
        return store or None


def _layout(t: torch.Tensor) -> list:
    return [str(t.dtype).removeprefix("torch."), list(t.shape), list(t.stride())]


def cache_key(
    canonical_source: str,
    entry: str,
    inputs: Sequence[object],
    outputs: Sequence[torch.Tensor] | None,
    target: str,
    options_json: str,
    *,
    symbolic: Mapping | None = None,
) -> str:
    """The text every cache of compiled kernels is keyed by (see DESIGN.md, "Cache key").

    ``symbolic``: for a kernel with symbolic sizes, :func:`tcjit.dynamic.key_part` of its family.
    The key then holds it under ``"symbolic"`` (the symbolic sizes, their admissible values
    ``"1..2147483647"``, the sums on the long side of 16384 terms and the other sizes' values), and each
    tensor whose shape mentions a symbolic size as ``[dtype, dimensions, "contiguous"]``, its
    dimensions numbers or expressions of the sizes
    (``["B", 64]``): no symbolic size's value is in the key. Nor are the representative sizes the
    code was mapped at (:mod:`tcjit.dynamic`): two processes may store different code under one
    key, each correct for every admissible size, and the store keeps the first.
    """
    from .cache import FORMAT_VERSION
    from .cpu_runtime import toolchain_identity

    def layouts(tensors, dims) -> list:
        return [
            ("scalar" if not isinstance(x, torch.Tensor) else _layout(x))
            if d is None
            else [str(x.dtype).removeprefix("torch."), d, "contiguous"]
            for x, d in zip(tensors, dims or [None] * len(tensors))
        ]

    key = {
        "source": canonical_source,
        "entry": entry,
        "inputs": layouts(inputs, symbolic and symbolic["inputs"]),
        "outputs": None if outputs is None else layouts(outputs, symbolic and symbolic["outputs"]),
        "target": target,
        "toolchain": toolchain_identity(),
        "options": json.loads(options_json),
        "tcjit": __version__,
        "code": code_identity(),
        "format": FORMAT_VERSION,
    }
    if symbolic is not None:
        key["symbolic"] = {k: v for k, v in symbolic.items() if k not in ("inputs", "outputs")}
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=1)
def code_identity() -> str:
    """A digest of the compiler's own source files (``tcjit``, ``tcjit.mapping`` with its C
    prelude's files, ``tcjit.polyhedral``, each with its subpackages): a kernel compiled by other
    code, an edited checkout or an upgrade without a new version number, is never taken from the
    disk cache. Reads files; imports nothing (a few ms, once per process)."""
    import importlib.util

    digest = hashlib.sha256()
    for package in ("tcjit", "tcjit.mapping", "tcjit.polyhedral"):
        spec = importlib.util.find_spec(package)
        for directory in (spec.submodule_search_locations or []) if spec else []:
            for folder, subfolders, names in sorted(os.walk(directory)):
                subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
                suffixes = (".h", ".cuh") if os.path.basename(folder) == "prelude" else (".py",)
                for name in sorted(names):
                    if name.endswith(suffixes):
                        path = os.path.join(folder, name)
                        digest.update(os.path.relpath(path, directory).encode())
                        with open(path, "rb") as f:
                            digest.update(f.read())
    return digest.hexdigest()[:16]


def _discard(store, key: str) -> None:
    try:
        store.discard(key)
    except TCError as e:
        warnings.warn(f"tcjit: could not remove an unusable cache entry: {e}", TCWarning, stacklevel=4)


def load_stored(store, key: str, checked: tuple[str, str], build):
    """``build(entry, data)`` for the store's entry under ``key``, where ``data`` is the file
    ``checked[0]`` whose sha256 the entry's metadata records under ``checked[1]``; None if there is
    no store or entry, or the entry is unusable (one whose file is not what was stored is
    discarded). ``data`` is the content the store checked (:meth:`~tcjit.cache.Entry.read`), never
    the file read again: what runs is what was checked."""
    entry = store.get(key) if store is not None else None
    if entry is None:
        return None
    filename, field = checked
    try:
        data = entry.read(filename)
        if hashlib.sha256(data).hexdigest() == entry.metadata.get(field):
            return build(entry, data)
        _discard(store, key)  # consistent with its manifest, yet not what we stored
    except (OSError, KeyError, ValueError, TypeError, AttributeError):
        pass  # evicted or unusable under us: rebuild
    return None


def save_stored(store, key: str, files: Mapping[str, bytes], metadata: Mapping) -> None:
    """Put a compiled kernel in the store (if any); a failure to store is a warning, not an error."""
    if store is None:
        return
    try:
        store.put(key, files, metadata)
    except TCError as e:
        warnings.warn(f"tcjit: could not store the compiled kernel: {e}", TCWarning, stacklevel=4)
