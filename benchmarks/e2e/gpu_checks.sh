#!/bin/bash
# The CUDA checks in one run, sized for a short lease of one GPU (about 6-8 minutes):
#   1. every test parametrised over devices (CUDA equals CPU) in the op, module and synonym tests;
#   2. the PPR and hop benchmarks on cuda, beside our op on the same machine's CPU (ratios).
# Needs torch with CUDA, numpy, safetensors, tqdm, networkx, scipy, pytest and hypothesis; hpengine
# runs from the working tree (no install). Results go to OUT_DIR (logs and benchmark JSON) and the
# benchmark JSON to benchmarks/results/gpu_checks_*.json.
#
#   bash benchmarks/e2e/gpu_checks.sh OUT_DIR
#
# Each step has its own time limit, so one slow step does not cost the others.
set -u
out=${1:-gpu_checks_out}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
py=${PYTHON:-python3}

$py - <<'EOF' 2>&1 | tee "$out/env.txt"
import sys
import torch
if not torch.cuda.is_available():
    sys.exit(f"gpu_checks: torch {torch.__version__} sees no CUDA device; run this on a machine with a GPU")
print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0))
EOF
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 2

# 1. CUDA equals CPU: the parametrised tests whose id names the cuda device
timeout 240 $py -m pytest -q -p no:cacheprovider -o addopts="" -m "not slow" -k "cuda" \
  tests/retrieval tests/sparse tests/nn tests/graph/test_synonyms.py tests/eval/test_metrics.py \
  tests/models/test_sampling_devices.py \
  2>&1 | tee "$out/tests_cuda.log"
echo "tests rc=${PIPESTATUS[0]}" | tee -a "$out/env.txt"

# 2. the op benchmarks on cuda, then our op on CPU at the same sizes (no peers: they are CPU
#    libraries measured on this project's machine, benchmarks/README.md)
for dev in cuda cpu; do
  timeout 150 $py benchmarks/ops/bench_ppr.py --device "$dev" --sizes 100000 1000000 --queries 1 64 1024 \
    --no-baselines --label "gpu_checks_ppr_$dev" 2>&1 | tee "$out/bench_ppr_$dev.log"
  timeout 150 $py benchmarks/ops/bench_hop.py --device "$dev" --sizes 100000 1000000 --queries 1 64 1024 \
    --no-baselines --label "gpu_checks_hop_$dev" 2>&1 | tee "$out/bench_hop_$dev.log"
done
cp benchmarks/results/gpu_checks_*.json "$out/" 2>/dev/null
ls -la "$out"
