"""Dependencies point down (STYLE §1): config imports no other layer, models knows no metrics (and sits
below the index that uses it), retrieval takes tensors not models, the engine (pipeline) knows neither
the jobs that run it nor their torchrun sharding, nothing in a subpackage imports the front doors
above every layer (the command line, the Python face), code imports other subpackages' public names
only, and no module imports itself back through others. No file is excepted."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hpengine"

# subpackage -> subpackages it must not import
FORBIDDEN = {
    "config": {"graph", "sparse", "retrieval", "models", "pipeline", "eval", "jobs", "distributed"},
    "graph": {"retrieval", "pipeline", "eval", "jobs", "distributed", "nn"},  # the index: facts, store, lookups
    "models": {"graph", "eval", "pipeline", "retrieval", "jobs", "distributed"},  # graph builds on models' names
    "retrieval": {"models", "pipeline", "eval", "jobs", "distributed"},
    "sparse": {"graph", "retrieval", "models", "pipeline", "eval", "jobs", "distributed"},
    "eval": {"pipeline", "models", "retrieval", "jobs", "distributed"},
    "nn": {"models", "pipeline", "eval", "jobs", "distributed"},  # modules over tensors: no text models, no engine
    "pipeline": {"jobs", "distributed"},  # the engine and its methods, not what runs them
    "jobs": {"distributed", "retrieval", "sparse", "nn"},  # jobs compose pipeline, graph, models, eval, config
    "distributed": {"models", "eval", "retrieval", "sparse", "nn"},  # shards the jobs (and the engine) over ranks
    "testing": {"pipeline", "jobs", "distributed"},  # test helpers: devices, tiny graphs, reference twins
}

#: the front doors: top-level modules above every layer, which no subpackage imports
FRONT_DOORS = {"hpengine.cli", "hpengine._api", "hpengine.__main__"}


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


def test_every_subpackage_has_its_rule():
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert subpackages == set(FORBIDDEN)


def _lazy_exports(face: Path) -> dict:
    """``name -> module`` of a package face whose exports load on first use (its ``_EXPORTS`` table)."""
    for node in ast.parse(face.read_text()).body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets) and node.value is not None:
            return ast.literal_eval(node.value)
    return {}


def _is_front_door(module: str) -> bool:
    return any(module == door or module.startswith(door + ".") for door in FRONT_DOORS)


def test_no_subpackage_imports_a_front_door():
    top = _lazy_exports(PACKAGE / "__init__.py")
    bad = []
    for path in _files(PACKAGE):
        if path.parent == PACKAGE:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from hpengine import NAME``: the submodule NAME, or what the face loads NAME from
                modules = [node.module] if node.module != "hpengine" else [
                    top.get(a.name, f"hpengine.{a.name}") for a in node.names]
            else:
                continue
            bad += [f"{path.relative_to(ROOT)} imports {m}" for m in modules if _is_front_door(m)]
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


def _faces_entered(path: Path, module: str):
    """The ``__init__.py`` of each package that importing ``module`` from ``path`` runs and ``path``
    does not already sit in (its own packages' faces have started before ``path`` runs)."""
    own = path.parent.relative_to(ROOT).parts
    parts = module.split(".")
    for i in range(2, len(parts) + 1):
        face = ROOT.joinpath(*parts[:i], "__init__.py")
        if face.is_file() and tuple(parts[:i]) != own[:i]:
            yield face


def _import_edges(path: Path):
    """Files ``path`` imports, inside functions too; ``from PKG import NAME`` through a package's
    ``__init__.py`` counts as an import of the file that defines NAME (a face hands names on), a
    face's lazy ``_EXPORTS`` table as imports of the files it names, and an import from another
    package as an import of that package's face too (Python runs it first)."""
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
            yield from _faces_entered(path, module)
            yield from _resolve(module, name, set())
    if path.name == "__init__.py":  # a lazy face imports what its table names on first use
        for name, module in _lazy_exports(path).items():
            yield from _resolve(module, name, set())


def _face_statements(tree: ast.Module):
    """A package face's top-level statements, with those of its ``if TYPE_CHECKING:`` blocks (a face
    whose exports load on first use declares there which module defines each name)."""
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            yield from node.body
        else:
            yield node


def _resolve(module: str, name, seen: set):
    if name is not None and _module_file(f"{module}.{name}") is not None:
        yield _module_file(f"{module}.{name}")
        return
    target = _module_file(module)
    if target is None or target in seen:
        return
    if target.name == "__init__.py" and name is not None:
        seen.add(target)
        for node in _face_statements(ast.parse(target.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and any(a.name == name for a in node.names):
                yield from _resolve(node.module, name, seen)
                return
    yield target


def _import_graph():
    import networkx as nx

    graph = nx.DiGraph()
    for path in _files(PACKAGE):
        for target in _import_edges(path):
            if target != path:
                graph.add_edge(path.relative_to(ROOT).as_posix(), target.relative_to(ROOT).as_posix())
    return graph


def test_the_import_graph_sees_lazy_faces_and_imports_inside_functions():
    graph = _import_graph()
    assert graph.has_edge("hpengine/__init__.py", "hpengine/graph/_hypergraph.py")  # the top face's lazy table
    assert graph.has_edge("hpengine/pipeline/__init__.py", "hpengine/pipeline/_engine.py")
    assert graph.has_edge("hpengine/pipeline/_engine.py", "hpengine/models/_factory.py")  # inside __init__
    assert graph.has_edge("hpengine/jobs/_eval.py", "hpengine/pipeline/__init__.py")  # a face entered


def test_no_import_cycles():
    import networkx as nx

    graph = _import_graph()
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not cycles, "import cycles (imports inside functions count):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_repository_root_shadows_no_installed_package():
    """Run from the repository root (``python -m pytest``), a top-level folder that is a regular
    package wins over site-packages: ``kernels/__init__.py`` once shadowed the Hugging Face
    ``kernels`` distribution that transformers imports, and every model import failed."""
    import importlib.metadata

    installed = set(importlib.metadata.packages_distributions())
    installed |= {d.metadata["Name"].lower().replace("-", "_") for d in importlib.metadata.distributions()}
    assert "kernels" in installed  # transformers needs it; else this test would check nothing
    packages = [p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    shadowing = sorted(name for name in packages if name != "hpengine" and name in installed)
    assert not shadowing, (f"{shadowing} are regular packages at the repository root and shadow installed "
                           "distributions of the same name: keep them plain folders")
