"""Dependencies point down (STYLE §1): config imports no other layer, models knows no metrics,
retrieval takes tensors not models, and code imports other subpackages' public names only."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hpengine"

# subpackage -> subpackages it must not import
FORBIDDEN = {
    "config": {"graph", "sparse", "retrieval", "models", "pipeline", "eval"},
    "models": {"eval", "pipeline", "retrieval"},
    "retrieval": {"models", "pipeline", "eval"},
    "sparse": {"graph", "retrieval", "models", "pipeline", "eval"},
    "eval": {"pipeline", "models", "retrieval"},
    "nn": {"models", "pipeline", "eval"},  # modules over tensors: no text models, no engine
}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def _files(folder: Path):
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_does_not_import_upward(layer):
    bad = []
    for path in _files(PACKAGE / layer):
        for module in _imports(path):
            parts = module.split(".")
            if parts[0] == "hpengine" and len(parts) > 1 and parts[1] in FORBIDDEN[layer]:
                bad.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not bad, "\n".join(bad)


def test_no_private_imports_across_subpackages():
    bad = []
    for folder in (PACKAGE, ROOT / "benchmarks"):
        for path in _files(folder):
            rel = path.relative_to(ROOT).parts
            own = rel[1] if rel[0] == "hpengine" and len(rel) > 2 else None
            for module in _imports(path):
                parts = module.split(".")
                if parts[0] != "hpengine" or len(parts) < 3:
                    continue
                private = any(p.startswith("_") for p in parts[2:])
                if private and parts[1] != own and parts[1] != "testing":
                    bad.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not bad, "\n".join(bad)


def _module_file(module: str) -> Path | None:
    parts = module.split(".")
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _import_edges(path: Path):
    """Files ``path`` imports, inside functions too; ``from PKG import NAME`` through a package's
    ``__init__.py`` counts as an import of the file that defines NAME (a face hands names on)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = path.parent if path.name != "__init__.py" else path.parent
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.parent
                prefix = ".".join(anchor.relative_to(ROOT).parts)
                module = f"{prefix}.{node.module}" if node.module else prefix
            else:
                module = node.module or ""
            targets = [(module, a.name) for a in node.names]
        else:
            continue
        for module, name in targets:
            if not module.startswith("hpengine"):
                continue
            yield from _resolve(module, name, set())


def _resolve(module: str, name, seen: set):
    if name is not None and _module_file(f"{module}.{name}") is not None:
        yield _module_file(f"{module}.{name}")
        return
    target = _module_file(module)
    if target is None or target in seen:
        return
    if target.name == "__init__.py" and name is not None:
        seen.add(target)
        for node in ast.parse(target.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and any(a.name == name for a in node.names):
                yield from _resolve(node.module, name, seen)
                return
    yield target


def test_no_import_cycles():
    import networkx as nx

    graph = nx.DiGraph()
    for path in _files(PACKAGE):
        for target in _import_edges(path):
            if target != path:
                graph.add_edge(path.relative_to(ROOT).as_posix(), target.relative_to(ROOT).as_posix())
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not cycles, "import cycles (imports inside functions count):\n" + "\n".join(" <-> ".join(c) for c in cycles)
