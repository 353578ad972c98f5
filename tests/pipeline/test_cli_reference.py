"""docs/reference/cli.md and config.md are what docs/reference/generate.py writes from the config
dataclasses now: a key, doc or default changed without regenerating them fails here."""
from pathlib import Path

import pytest

from hpengine._commands import reference_pages

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"


@pytest.mark.parametrize("name", sorted(reference_pages()))
def test_committed_reference_page_is_the_generated_one(name):
    committed = (REFERENCE / name).read_text(encoding="utf-8")
    assert committed == reference_pages()[name], (f"docs/reference/{name} is stale: run "
                                                  "python docs/reference/generate.py")


def test_the_config_reference_covers_every_method_and_group():
    from hpengine.config import method_configs

    text = reference_pages()["config.md"]
    for name in method_configs():
        assert f"### `retriever={name}`" in text, name
    for group in ("extractor", "encoder", "graph", "grag", "retrieval", "model", "eval"):
        assert f"## `{group}.*`" in text, group
