"""Fixtures of the tuner's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def db(tmp_path, monkeypatch):
    """A private options database and kernel store for the test."""
    path = tmp_path / "options.sqlite3"
    monkeypatch.setenv("TCJIT_OPTIONS_DB", str(path))
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    return path
