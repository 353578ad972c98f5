#!/bin/bash
# LLM-mode runs (decomposer + reader), N questions per dataset, one JSON and one log per
# dataset/retriever. A killed run resumes where it stopped: finished files are skipped, and the
# run in progress continues from its last finished batch (OUT_DIR/checkpoints/, eval.checkpoint).
# RETRIEVERS picks the methods (default: hyperprove dense).
#
#   bash benchmarks/e2e/run_llm100.sh DATA_ROOT INDEX_ROOT LLM_DIR OUT_DIR [N=100] [extra bench_qa.py args]
#   RETRIEVERS=ppr bash benchmarks/e2e/run_llm100.sh ...
#
# e.g. bash benchmarks/e2e/run_llm100.sh ../shared/data IDX ~/.cache/hpengine/models/qwen2.5-coder-1.5b llm100
set -u
data=$1 idx=$2 llm=$3 out=$4 n=${5:-100}
shift $(( $# < 5 ? $# : 5 ))
root=$(cd "$(dirname "$0")/../.." && pwd)  # the repository: the benchmarks package is imported from it
mkdir -p "$out"
for d in 2wikimultihopqa musique hotpotqa; do
  for r in ${RETRIEVERS:-hyperprove dense}; do
    [ -f "$out/${d}_${r}.json" ] && continue
    HF_HUB_OFFLINE=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" python -m benchmarks.e2e.bench_qa --data-root "$data" --index-root "$idx" --datasets "$d" \
      --retrievers "$r" --llm "$llm" --max-questions "$n" --batch-size 16 --out "$out/${d}_${r}.json" \
      --checkpoint-dir "$out/checkpoints" "$@" \
      > "$out/${d}_${r}.log" 2>&1 || echo "failed: $d $r (see $out/${d}_${r}.log)"
  done
done
