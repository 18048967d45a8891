"""tcjit.cache: the on-disk kernel store and the tuned-options database (SQLite).

* :class:`KernelStore` (:mod:`.store`, :mod:`.entry`): compiled kernels, one directory per cache key;
  :mod:`.trust` decides which of its folders and files may be loaded (none another user could write).
* :class:`OptionsDatabase` (:mod:`.options_db`): the best mapping options tuning found per
  :class:`TuningKey`, the candidates each run measured, shared safely by concurrent processes.

May import tcjit.polyhedral (errors), tcjit.mapping (the options type) and the standard library.
"""

from .options_db import SCHEMA_VERSION, Measured, OptionsDatabase, TunedOptions, TuningKey
from .store import FORMAT_VERSION, Entry, KernelStore, StoredEntry
from .tuning_records import USE_DEFAULTS, parse_range_layout

__all__ = [
    "FORMAT_VERSION",
    "SCHEMA_VERSION",
    "USE_DEFAULTS",
    "Entry",
    "KernelStore",
    "Measured",
    "OptionsDatabase",
    "StoredEntry",
    "TunedOptions",
    "TuningKey",
    "parse_range_layout",
]
