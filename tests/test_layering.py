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
