"""The architecture in DESIGN.md, enforced: which layer may import which, no import cycles, no
private names taken from another module, and a light `import tcjit`."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

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


# ================================================================ the import graph of every module
#: Every code folder and the package it installs as.
FOLDERS = {"tcjit": "tcjit", **{folder: package for folder, (package, _, _) in LAYERS.items()}}


def _modules() -> dict[str, Path]:
    """Module name -> file, for every module of the code folders (a package is its __init__)."""
    out = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [package, *path.relative_to(ROOT / folder).with_suffix("").parts]
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _graph(modules: Mapping[str, Path] | None = None) -> tuple[dict[str, set[str]], list[str]]:
    """The import graph of ``modules`` (module name -> file; default: :func:`_modules`), with
    module-level and function-level imports alike, TYPE_CHECKING ones too, and every ``_name``
    imported from another module (``path:line module.name``)."""
    modules = _modules() if modules is None else modules
    edges: dict[str, set[str]] = {m: set() for m in modules}
    private = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                edges[name] |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom):
                mod = _imports_from(node, package)
                for alias in node.names:
                    if f"{mod}.{alias.name}" in modules:  # from . import ir: the module ir
                        edges[name].add(f"{mod}.{alias.name}")
                    elif mod in modules:
                        edges[name].add(mod)
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            private.append(f"{_shown(path)}:{node.lineno} {mod}.{alias.name}")
        edges[name].discard(name)
    return edges, private


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def _imports_from(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _cycles(edges: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle() -> None:
    edges, _ = _graph()
    cycles = [sorted(c) for c in _cycles(edges)]
    assert not cycles, (
        f"import cycles (DESIGN.md allows none, not even through imports inside functions): {cycles}"
    )


def test_the_cycle_finder_finds_a_cycle_and_only_cycles() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(edges) == [frozenset({"a", "b", "c"})]
    assert _cycles({"x": {"y"}, "y": set()}) == []


def test_the_graph_sees_hidden_imports_and_private_names(tmp_path: Path) -> None:
    # A guard for the cycle and private-name tests: an import inside a function or under
    # TYPE_CHECKING is an edge, and a ``_name`` taken from another module is reported.
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("def f():\n    from .b import _hidden, shown\n")
    (tmp_path / "b.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from . import a\n"
    )
    modules = {"pkg": tmp_path / "__init__.py", "pkg.a": tmp_path / "a.py", "pkg.b": tmp_path / "b.py"}
    edges, private = _graph(modules)
    assert _cycles(edges) == [frozenset({"pkg.a", "pkg.b"})]
    assert [entry.split(" ")[1] for entry in private] == ["pkg.b._hidden"]


def test_no_private_import() -> None:
    """A ``_name`` is its module's own; another module that needs it needs a public name."""
    _, private = _graph()
    assert not private, "private names imported from another module:\n" + "\n".join(private)


# ======================================================================== printers that only print
#: The printers: the C printer (CPU target), and the GPU printers (CUDA, emulated CUDA) built on it.
#: Each takes the kernel IR (the passes' decisions in it) and a target description, and prints; it
#: may import nothing of mapping/ that plans.
PRINTERS = {
    f"tcjit.mapping.{m}"
    for m in (
        "c_exprs",
        "c_tiles",
        "c_regions",
        "c_printer",
        "c_panels",
        "c_kernel",
        "gpu_printer",
        "cuda_printer",
        "emulation",
    )
}

#: What a printer may import from mapping/ besides the printers: the IR (loops and statement
#: bodies), the GPU mapping's decisions as values, element layouts and the preludes.
PRINTED_FROM = PRINTERS | {
    f"tcjit.mapping.{m}" for m in ("ir", "ir_values", "gpu_ir", "layout", "c_prelude", "cuda_prelude")
}


def test_the_printers_import_no_planning_module() -> None:
    edges, _ = _graph()
    assert PRINTERS <= set(edges), sorted(PRINTERS - set(edges))
    planning = {
        module: sorted(m for m in edges[module] if m.startswith("tcjit.mapping.") and m not in PRINTED_FROM)
        for module in sorted(PRINTERS)
    }
    assert not any(planning.values()), planning


def test_the_printers_read_statement_bodies_not_tc_statements() -> None:
    """The printers print the kernel IR's statement bodies (mapping/ir_values.py), lowered once by
    mapping/bodies.py: none imports the TC syntax tree or the Scop's statements."""
    edges, _ = _graph()
    tc = ("tcjit.polyhedral.lang.ast", "tcjit.polyhedral.scop")
    reading = {module: sorted(m for m in edges[module] if m in tc) for module in sorted(PRINTERS)}
    assert not any(reading.values()), reading
