"""The architecture in DESIGN.md, enforced: which layer may import which, and a light `import tcjit`."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# folder -> (its package name, the tcjit.* layers it may import, the third-party modules it may import)
LAYERS = {
    "polyhedral": ("tcjit.polyhedral", set(), {"islpy", "numpy"}),
    "mapping": ("tcjit.mapping", {"tcjit.polyhedral"}, {"islpy", "numpy"}),
    "cache": ("tcjit.cache", {"tcjit.polyhedral", "tcjit.mapping"}, set()),
    "genetic": ("tcjit.genetic", {"tcjit.mapping", "tcjit.polyhedral"}, {"deap", "ray", "numpy"}),
}
STDLIB = set(sys.stdlib_module_names)


def _imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in ``path``, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parts = package.split(".")
    if path.name != "__init__.py":
        pass
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
    return out


def _module_package(folder: str, path: Path) -> str:
    """The package a module of ``folder`` lives in, as installed (tcjit.polyhedral.lang, ...)."""
    rel = path.relative_to(ROOT / folder).parent.parts
    return ".".join([LAYERS[folder][0], *rel])


@pytest.mark.parametrize("folder", sorted(LAYERS))
def test_layer_imports_only_what_design_allows(folder):
    own, allowed_layers, third_party = LAYERS[folder]
    problems = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for line, mod in _imports(path, _module_package(folder, path)):
            top = mod.split(".")[0]
            if mod == own or mod.startswith(own + "."):
                continue
            if any(mod == l or mod.startswith(l + ".") for l in allowed_layers):
                continue
            if top == "__future__" or top in STDLIB or top in third_party:
                continue
            problems.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
    assert not problems, "imports that break the layering of DESIGN.md:\n" + "\n".join(problems)


def test_layer_rules_see_relative_imports():
    # A guard for the test itself: the resolver must map `from ..errors import X` inside
    # polyhedral/lang/ onto tcjit.polyhedral.errors, or the rule above could not fail.
    mods = {m for _, m in _imports(ROOT / "polyhedral/lang/check.py", "tcjit.polyhedral.lang")}
    assert "tcjit.polyhedral.errors" in mods


def _loaded_after(statement: str) -> set[str]:
    code = (
        "import sys\n"
        f"{statement}\n"
        "print(','.join(m for m in ('torch', 'islpy', 'numpy', 'cupy', 'deap') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    return set(filter(None, out.stdout.strip().split(",")))


def test_import_tcjit_is_light():
    assert _loaded_after("import tcjit") == set()


def test_define_is_light():
    # Parsing and checking need neither torch nor isl: a kernel can be defined at import time.
    loaded = _loaded_after("import tcjit; tcjit.define('def f(float(N) A) -> (B) { B(i) = A(i) }')")
    assert loaded == set()


def test_compiler_layers_never_load_torch():
    loaded = _loaded_after("import tcjit.polyhedral.lang.check, tcjit.mapping, tcjit.cache, tcjit.genetic")
    assert "torch" not in loaded and "cupy" not in loaded
