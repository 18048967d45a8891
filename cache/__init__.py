"""tcjit.cache: the on-disk kernel store and the tuned-options database (SQLite).

Not written yet. May import tcjit.polyhedral (errors), tcjit.mapping (the options type) and the
standard library.
"""
