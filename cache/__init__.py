"""tcjit.cache: the on-disk kernel store and the tuned-options database (SQLite).

May import tcjit.polyhedral (errors), tcjit.mapping (the options type) and the standard library.
The options database is not written yet.
"""

from .store import FORMAT_VERSION, Entry, KernelStore

__all__ = ["FORMAT_VERSION", "Entry", "KernelStore"]
