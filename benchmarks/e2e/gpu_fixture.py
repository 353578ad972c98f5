"""Prepare, on a CPU machine with the full install, what ``gpu_checks.sh`` needs to run every method
end to end on a GPU machine that has neither spaCy nor the packaged models: a random 2-layer BERT
encoder on the MiniLM vocabulary, and the built-in corpus indexed with it (fast extractor, GRAG
parts included), the spaCy mentions of its questions (the GPU machine serves them in place of
spaCy to the methods that link question mentions), and a ranker for the learned method trained on
that index (no ranker ships for the random encoder).

    python -m benchmarks e2e gpu_fixture DIR      # writes DIR/encoder, DIR/index, DIR/mentions.json and
                                                  # DIR/ranker.safetensors

Give DIR as a path relative to the repository root: the index records its encoder by that path,
so a copy of the repository that holds DIR finds it there too.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path


def build_encoder(folder: Path) -> None:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from hpengine.models import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("minilm"), local_files_only=True)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128, max_position_embeddings=512)
    BertModel(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="output folder, relative to the repository root")
    args = ap.parse_args()
    out = Path(args.dir)
    if out.is_absolute():
        ap.error(f"give the folder relative to the repository root (got {args.dir})")
    build_encoder(out / "encoder")
    index = out / "index"
    from hpengine.graph import builtin_corpus_path, builtin_questions_path

    cli = [sys.executable, "-m", "hpengine"]
    subprocess.run(cli + ["index", f"corpus={builtin_corpus_path()}", f"out={index}", f"encoder.name_or_path={out / 'encoder'}",
                          "encoder.dtype=float32"], check=True)
    subprocess.run(cli + ["grag-build", str(index)], check=True)
    subprocess.run([sys.executable, "benchmarks/analysis/dump_records.py", "--index", str(index),
                    "--questions", str(builtin_questions_path()), "--methods", "dense",
                    "--save-mentions", str(out / "mentions.json"), "--out", str(out / "records_cpu.json")],
                   check=True)
    subprocess.run(cli + ["train", str(index), f"questions={builtin_questions_path()}",
                          f"out={out / 'ranker.safetensors'}", "epochs=50", "hidden=4"], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
