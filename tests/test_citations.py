"""The repository cites only what it holds: code, configs and benchmarks point to docs/ for a
method's description, never to a specification or seed documents kept outside the repository."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(r"\bSPEC\b|SPEC\.md|\bseed\s+00\d|shared/seeds")


def test_no_citation_of_documents_outside_the_repository():
    found = []
    for folder in ("hpengine", "kernels", "conf", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".yaml", ".md") or "__pycache__" in path.parts:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if OUTSIDE.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_docs_cited_in_place_of_the_spec_exist():
    assert "## Fast extractor (`FastExtractor`, `kind: fast`)" in (ROOT / "docs/extraction.md").read_text()
    assert "### Facts and entities" in (ROOT / "docs/methods/index.md").read_text()
