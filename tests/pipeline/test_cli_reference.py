"""docs/reference/cli.md and config.md are what docs/reference/generate.py writes from the config
dataclasses now: a key, doc or default changed without regenerating them fails here. The pages are
generated in a fresh process: a method another test defines (its config class stays a subclass of
EngineConfig in this process) is not the package's."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"
NAMES = ("cli.md", "config.md")


@pytest.fixture(scope="module")
def generated() -> dict:
    code = "import json; from hpengine._commands import reference_pages; print(json.dumps(reference_pages()))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


@pytest.mark.parametrize("name", NAMES)
def test_committed_reference_page_is_the_generated_one(generated, name):
    committed = (REFERENCE / name).read_text(encoding="utf-8")
    assert committed == generated[name], f"docs/reference/{name} is stale: run python docs/reference/generate.py"


def test_the_config_reference_covers_every_method_and_group(generated):
    text = generated["config.md"]
    for name in ("dense", "fusion", "grag", "hyperprove", "learned", "ppr"):
        assert f"### `retriever={name}`" in text, name
    for group in ("extractor", "encoder", "graph", "grag", "retrieval", "model", "eval"):
        assert f"## `{group}.*`" in text, group
    assert set(generated) == set(NAMES)
