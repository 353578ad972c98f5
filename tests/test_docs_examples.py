"""Every ```python block of README.md and docs/ runs as pasted: the blocks of one file in order, in one
namespace, in a fresh working directory that is removed afterwards. A block that needs a GPU, torchrun,
an LLM or the real data sets is written as ```bash or ```text instead, so it is not run here."""
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))  # README.md runs in test_readme_runs_and_its_method_answers
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def python_blocks(path: Path) -> list:
    """``[(line, code)]``: each ```python block of ``path`` with the line it starts on."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _BLOCK.finditer(text)]


@pytest.fixture(scope="module")
def demo_build():
    """One real build of the demo corpus at the defaults, for the whole module (removed after it)."""
    import hpengine

    with tempfile.TemporaryDirectory(prefix="hpengine_docs_demo_") as folder:
        hpengine.build_index(hpengine.demo_corpus(), os.path.join(folder, "index"))
        yield os.path.join(folder, "index")


def _serving_builds(demo):
    """``hpengine.build_index`` that copies ``demo`` (a finished build of the demo corpus at the
    defaults) for that same call, and builds anything else: the guides each build the demo index,
    and one real build serves them all (README.md and the doctests build for real)."""
    import hpengine

    real = hpengine.build_index

    def build_index(corpus, out, **settings):
        if demo and not settings and not os.path.exists(out) and corpus == hpengine.demo_corpus():
            shutil.copytree(demo, out)
            return hpengine.open_index(out)
        return real(corpus, out, **settings)

    return real, build_index


def run_blocks(path: Path, demo: str | None = None) -> dict:
    """Run ``path``'s blocks in order in one namespace, in a temporary working directory; returns the
    namespace. ``demo``: a build of the demo corpus that serves the blocks' identical builds.
    Registered retrievers are removed again (a file's method must not leak into the next). Fails
    when a block leaves something in the temporary directory (it is redirected into one of the
    test's own, and must be empty at the end)."""
    import hpengine
    from hpengine.pipeline import available_retrievers
    from hpengine.pipeline.retrievers import _base  # the registry, to undo a block's registration

    before = set(available_retrievers())
    real_build, hpengine.build_index = _serving_builds(demo)
    namespace = {"__name__": "__main__"}
    old_cwd, old_tempdir = os.getcwd(), tempfile.tempdir
    with tempfile.TemporaryDirectory(prefix="hpengine_docs_") as work:
        scratch = Path(work, "tmp")
        scratch.mkdir()
        os.chdir(work)
        tempfile.tempdir = str(scratch)
        try:
            for line, code in python_blocks(path):
                exec(compile(code, f"{path.relative_to(ROOT)}:{line}", "exec"), namespace)
            # torch's own compile cache (torchinductor_<user>), made once when torch._dynamo is first
            # imported and reused by every later run, is not the examples' leftover
            left = sorted(p.name for p in scratch.iterdir() if not p.name.startswith("torchinductor_"))
        finally:
            os.chdir(old_cwd)
            tempfile.tempdir = old_tempdir
            hpengine.build_index = real_build
            for name in set(available_retrievers()) - before:
                del _base._REGISTRY[name]
    assert not left, f"{path.name}'s examples left {left} in the temporary directory"
    return namespace


@pytest.mark.parametrize("path", [p for p in DOCS if python_blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(path, demo_build):
    run_blocks(path, demo_build)


def test_readme_runs_and_its_method_answers():
    """README.md's blocks run; its "a method of your own", pasted after the ten-line program, answers
    through the engine."""
    namespace = run_blocks(README)
    answers = namespace["answers"]
    assert namespace["BestFact"].name == "best_fact"
    assert answers and answers[0].passages, "the method returned no passages"
    assert all(p.title and p.text for p in answers[0].passages)
    assert answers[0].passages[0].title == "The Salt Lanterns"
    assert namespace["result"]["num_questions"] == len(namespace["hpengine"].demo_questions())


def test_readme_examples_are_python_blocks():
    """README.md has its ten-line program and its method as Python blocks (fenced otherwise, they
    would silently go untested)."""
    blocks = [code for _, code in python_blocks(README)]
    assert any("hpengine.build_index" in b and "hpengine.evaluate" in b for b in blocks)
    assert any("register_retriever" in b for b in blocks)


def _configuration_rows(page: Path):
    """``(key, written default)`` of each single-key table row in ``page``'s configuration section."""
    text = page.read_text(encoding="utf-8")
    start = re.search(r"^## (Shared )?[Cc]onfiguration$", text, re.M)
    if start is None:
        return []
    section = text[start.end():]
    end = re.search(r"^## ", section, re.M)
    section = section[: end.start()] if end else section
    return re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \|", section, re.M)


def _written(value: str):
    """A default as a method page writes it (`unset`, `true`, `[a, b]`, `1,000`, `"text"`), as a value."""
    text = value.strip().strip("`").strip()
    if text in ("unset", "none", "null"):
        return None
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("[") and text.endswith("]"):
        return [_written(v) for v in text[1:-1].split(",") if v.strip()]
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return text.strip("\"'")


def _same(written, default) -> bool:
    if isinstance(default, (list, tuple)):
        return isinstance(written, list) and len(written) == len(default) and all(map(_same, written, default))
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        return isinstance(written, float) and written == default
    return written == default


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "methods").glob("*.md")), ids=lambda p: p.name)
def test_method_pages_state_the_code_defaults(page):
    """The method pages' configuration tables, written by hand, say what the dataclasses say (the
    generated docs/reference/config.md is the full list)."""
    import dataclasses

    from hpengine import config

    classes = [config.RetrievalConfig, config.GraphConfig, config.EncoderConfig, config.GragBuildConfig,
               *config.method_configs().values()]
    defaults = {}  # field name -> its defaults in the classes that have it
    for cls in classes:
        for f in dataclasses.fields(cls):
            value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            defaults.setdefault(f.name, []).append(value)
    for key, written in _configuration_rows(page):
        assert key in defaults, f"{page.name}: `{key}` is no configuration field"
        assert any(_same(_written(written), d) for d in defaults[key]), \
            f"{page.name}: `{key}` is written {written.strip()!r}, the code's default is {defaults[key]}"
