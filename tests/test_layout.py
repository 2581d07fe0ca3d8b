"""The tree shows the architecture: plugins' subpackages import downwards only, no import circle, no product
file points at the developers' ../shared folder (a user does not have it)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "plugins"
# lower layers first: a module may import its own layer or a lower one, never a higher one
LAYERS = ["adapters", "runtimes", "cross_silo", "cross_device", "fedml_plugin", "bench", "cli"]


def _layer(module: str) -> str:
    return module.split(".")[1]


def _imports(path: Path) -> set[str]:
    """fedml_fes_plugins modules a file imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fedml_fes_plugins."):
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import; plugins use absolute imports")
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("fedml_fes_plugins.")}
    return found


def test_plugin_layers_import_downwards_only():
    wrong = []
    for path in PLUGINS.rglob("*.py"):
        rel = path.relative_to(PLUGINS).with_suffix("")
        if rel.name == "__init__" and len(rel.parts) == 1:
            continue
        own = rel.parts[0]
        assert own in LAYERS, f"{path}: {own} is not a known layer ({LAYERS}); place it in one"
        for target in _imports(path):
            if LAYERS.index(_layer(target)) > LAYERS.index(own):
                wrong.append(f"{rel} ({own}) imports {target}")
    assert not wrong, wrong


def test_no_product_file_reads_shared():
    product = [
        p
        for d in ("fedml_fes", "plugins", "run_configs", "mpi")
        for p in (REPO / d).rglob("*")
        if p.is_file() and p.suffix in (".py", ".yaml", ".yml", ".sh", ".cfg")
    ]
    assert product
    hits = [str(p.relative_to(REPO)) for p in product if "../shared" in p.read_text() or "/shared/" in p.read_text()]
    assert not hits, hits


def test_one_fedml_trainer_and_aggregator_for_every_runtime():
    """The round logic sits behind one ClientTrainer and one ServerAggregator class, which the
    FedMLRunner script, the in-process runtime, the MPI managers and the cross-silo processes
    all drive (no runtime keeps its own pair)."""
    bases: dict[str, list[str]] = {"ClientTrainer": [], "ServerAggregator": []}
    for path in PLUGINS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
                    if name in bases:
                        bases[name].append(f"{path.relative_to(PLUGINS)}:{node.name}")
    assert bases == {
        "ClientTrainer": ["adapters/trainer.py:FesTrainer"],
        "ServerAggregator": ["adapters/aggregator.py:FesAggregator"],
    }
    users = {
        "runtimes/inprocess.py",
        "runtimes/mpi_managers.py",
        "cross_silo/server.py",
        "cross_silo/client.py",
        "fedml_plugin.py",
    }
    for rel in users:
        text = (PLUGINS / rel).read_text()
        assert "adapters.trainer import FesTrainer" in text or "adapters.aggregator import FesAggregator" in text, rel


def _module_names() -> dict[str, Path]:
    """Every product module by its import name (fedml_fes.x.y, fedml_fes_plugins.x.y)."""
    names = {}
    for package, folder in (("fedml_fes", REPO / "fedml_fes"), ("fedml_fes_plugins", PLUGINS)):
        for path in folder.rglob("*.py"):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        named = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = module.split(".")[: None if path.name == "__init__.py" else -1]
            here = here[: len(here) - node.level + 1]
            base = ".".join(here + ([node.module] if node.module else []))
        named = [base] + [f"{base}.{a.name}" for a in node.names]
    return {n for n in named if n in known and n != module and not module.startswith(n + ".")}


def test_no_import_circle():
    """No product module imports, directly or through others, a module that imports it (lazy
    imports inside functions count: a circle is one job split in two places)."""
    known = _module_names()
    edges = {
        m: set().union(
            *(
                _targets(m, p, n, known)
                for n in ast.walk(ast.parse(p.read_text()))
                if isinstance(n, ast.Import | ast.ImportFrom)
            )
        )
        for m, p in known.items()
    }
    circles = []
    for start in edges:  # a path from a module's imports back to itself
        seen, todo = set(), list(edges[start])
        while todo:
            m = todo.pop()
            if m == start:
                circles.append(start)
                break
            if m not in seen:
                seen.add(m)
                todo += edges[m]
    assert not circles, f"modules on an import circle: {sorted(circles)}"
