"""Write the generated reference pages, docs/reference/cli.md and config.md, from the config
dataclasses (their fields' ``#:`` docs and defaults) and the command table of the command line:

    python docs/reference/generate.py

tests/pipeline/test_cli_reference.py fails when the committed pages differ from what this writes now.
"""
from pathlib import Path

from hpengine._commands import reference_pages

HERE = Path(__file__).resolve().parent


def main() -> None:
    for name, text in reference_pages().items():
        (HERE / name).write_text(text, encoding="utf-8")
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main()
