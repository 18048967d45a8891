"""Every notebook under notebooks/ runs top to bottom without an error, and is stored without outputs.

The notebooks run in a fresh kernel of this interpreter (a ``python3`` kernelspec written to a
temporary ``JUPYTER_PATH``, which Jupyter searches first), from the notebooks folder, with a private
kernel cache (``TCJIT_CACHE_DIR``) and options database (``TCJIT_OPTIONS_DB``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))


@pytest.fixture
def this_interpreter_kernel(tmp_path, monkeypatch) -> str:
    """A ``python3`` kernelspec that runs ``sys.executable`` (never another Python's kernel)."""
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager

    root = tmp_path / "jupyter"
    write_kernel_spec(str(root / "kernels" / "python3"))
    monkeypatch.setenv("JUPYTER_PATH", str(root))
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert Path(spec.argv[0]) == Path(sys.executable), spec.argv
    return "python3"


def test_there_are_notebooks():
    assert [p.name for p in PATHS][:1] == ["01-quickstart.ipynb"]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, (
                f"{path.name}: clear the outputs before committing (cell {cell.source[:40]!r})"
            )


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch, this_interpreter_kernel):
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setenv("TCJIT_OPTIONS_DB", str(tmp_path / "options.sqlite3"))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=120,
        kernel_name=this_interpreter_kernel,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on any error
    elapsed = time.perf_counter() - start
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert elapsed < 120, f"{path.name} took {elapsed:.0f} s"
    if path.name == "01-quickstart.ipynb":
        text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
        assert "fcrelu(float32(B, M) I" in text
        assert "same result" in text and "#pragma omp" in text and "domain:" in text
        assert "TCNameError" in text and "^" in text and "TCCallError" in text
    if path.name == "02-autotune.ipynb":
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
        text = "".join(o.get("text", "") for o in outputs)
        assert "torch eager" in text and "final rounds (" in text and "0 failed" in text
        assert any("image/png" in o.get("data", {}) for o in outputs), "the plot is missing"
        assert str(tmp_path / "options.sqlite3") in text  # `tcjit cache list` shows the database
