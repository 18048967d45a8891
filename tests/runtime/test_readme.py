"""The README's example runs as written, and its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_example_runs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert tuple(scope["y"].shape) == (128, 32)
    assert scope["fcrelu"].signature.startswith("fcrelu(float32(B, M) I")


def test_readme_commands_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for script in re.findall(r"bash (scripts/\w+\.sh)", text):
        assert (ROOT / script).is_file(), script
    assert "scripts/test.sh" in (ROOT / ".ci/run").read_text()
