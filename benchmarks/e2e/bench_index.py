"""Index build benchmark: wall time per stage, peak RSS, counts (fast extractor, CPU by default).

    python -m benchmarks e2e bench_index --corpus ../shared/data/2wikimultihopqa/corpus.json --out /tmp/idx_2wiki
    python -m benchmarks e2e bench_index --corpus ../shared/data/hotpotqa/corpus.json --out /tmp/idx_hotpot
    python -m benchmarks e2e bench_index --corpus ../shared/data/musique/corpus.json --out /tmp/idx_e5/musique --encoder e5-small
    python -m benchmarks e2e bench_index --corpus ../shared/data/musique/corpus.json --out /tmp/idx_g/musique --grag

Each run is one process (peak RSS is per process). Prints the report as JSON and, with
--label NAME, saves it to benchmarks/results/index_NAME.json.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--extractor", default="fast", choices=["fast", "llm"])
    ap.add_argument("--encoder", default="minilm", help="a preset of conf/encoder/ (minilm, e5-small) or a model folder")
    ap.add_argument("--encoder-dtype", default="auto",
                    help="auto (bfloat16 where the device has it natively, else float32) | float32 | bfloat16")
    ap.add_argument("--grag", action="store_true", help="also build GRAG-MH's parts (grag.build=true)")
    ap.add_argument("--label", default="", help="save the report as benchmarks/results/index_LABEL.json")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from hpengine.config import ExtractorConfig, GragBuildConfig, IndexConfig
    from hpengine.jobs import format_report, run_index

    from benchmarks._harness import result_path, write_json
    from benchmarks._presets import encoder_preset

    cfg = IndexConfig(corpus=args.corpus, out=args.out, device=args.device,
                      extractor=ExtractorConfig(kind=args.extractor, device=args.device),
                      encoder=encoder_preset(args.encoder, dtype=args.encoder_dtype, device=args.device),
                      grag=GragBuildConfig(build=args.grag, device=args.device))
    _, report = run_index(cfg, progress=False)
    report["out_bytes"] = sum(f.stat().st_size for f in Path(args.out).iterdir())
    print(format_report(report, args.out))
    print(json.dumps({k: v for k, v in report.items() if k not in ("corpus_report",)}, default=str))
    if args.label:
        print(f"saved {write_json(report, result_path(f'index_{args.label}'), default=str)}")


if __name__ == "__main__":
    main()
