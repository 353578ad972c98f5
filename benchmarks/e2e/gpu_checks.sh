#!/bin/bash
# The CUDA checks in one run, sized for a short lease of one GPU (at most about 8 minutes):
#   1. every test parametrised over devices (CUDA equals CPU) in the op, module and synonym tests;
#   2. every method end to end on CUDA against the same run on CPU: the built-in corpus indexed
#      with a random 2-layer BERT (benchmarks/e2e/gpu_fixture.py, prepared on a CPU machine with
#      the full install; the learned method with the fixture's ranker), no LLM and a tiny random
#      LLM, records compared with a float tolerance;
#   3. the PPR and hop benchmarks on cuda, beside our op on the same machine's CPU (ratios);
#   4. the Triton kernels (opt-in with HPENGINE_KERNELS=on): the CSR x dense product
#      (kernels/k_csr_addmm_triton.py) and the hop's local blocks and BFS rounds
#      (kernels/k_local_blocks_triton.py): their tests compiled on CUDA (the CPU's bits), then PPR and
#      the hop on cuda with them beside the PyTorch path in the same run (at most about 5 minutes;
#      skipped without triton).
#      Alone, after the environment check: bash benchmarks/e2e/gpu_checks.sh OUT_DIR FIXTURE_DIR triton
# Needs torch with CUDA, transformers, tokenizers, numpy, safetensors, tqdm, networkx, scipy, pytest,
# hypothesis, hydra-core and omegaconf; hpengine runs from the working tree (no install). Logs,
# records and benchmark JSON go to OUT_DIR (the benchmark JSON under OUT_DIR/ops_cuda and OUT_DIR/ops_cpu).
#
#   python -m benchmarks e2e gpu_fixture .gpu          # once, on the CPU machine
#   bash benchmarks/e2e/gpu_checks.sh OUT_DIR [FIXTURE_DIR]
#
# Each step has its own time limit, so one slow step does not cost the others.
set -u
out=${1:-gpu_checks_out}
fixture=${2:-.gpu}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
py=${PYTHON:-python3}

$py - <<'EOF' 2>&1 | tee "$out/env.txt"
import sys
import torch
if not torch.cuda.is_available():
    sys.exit(f"gpu_checks: torch {torch.__version__} sees no CUDA device; run this on a machine with a GPU")
print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0),
      "bf16", torch.cuda.is_bf16_supported())
EOF
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 2

# 4. (defined here so that it can run alone) the Triton kernels on CUDA
triton_checks() {
  if ! $py -c "import triton" 2>/dev/null; then
    echo "triton rc=skipped: no triton (torch's CUDA wheels install it; else pip install triton --no-deps)" | tee -a "$out/env.txt"
    return
  fi
  $py -c "import triton; print('triton', triton.__version__)" | tee -a "$out/env.txt"
  timeout 160 $py -m pytest -q -p no:cacheprovider -o addopts="" -rs tests/kernels/test_csr_addmm_triton.py \
    tests/kernels/test_local_blocks_triton.py 2>&1 | tee "$out/tests_triton.log"
  echo "triton tests rc=${PIPESTATUS[0]}" | tee -a "$out/env.txt"
  # HPENGINE_KERNELS=on: CUDA products, the hop's local blocks and its BFS rounds go to the Triton kernels;
  # *_torch and batched_torch switch them off
  # per call, so each line's ratio is on one machine in one run
  HPENGINE_KERNELS=on timeout 80 $py -m benchmarks ops bench_ppr device=cuda sizes=100000,1000000 queries=64,1024 \
    max_q_at_1m=1024 impls=chebyshev,chebyshev_torch baselines=false out="$out/ops_cuda_triton" \
    2>&1 | tee "$out/bench_ppr_cuda_triton.log"
  HPENGINE_KERNELS=on timeout 80 $py -m benchmarks ops bench_hop device=cuda sizes=100000,1000000 queries=64,1024 \
    torch_path=true baselines=false out="$out/ops_cuda_triton" 2>&1 | tee "$out/bench_hop_cuda_triton.log"
}
if [ "${3:-}" = "triton" ]; then
  triton_checks
  ls -la "$out"
  exit 0
fi

# 1. CUDA equals CPU: the parametrised tests whose id names the cuda device
timeout 170 $py -m pytest -q -p no:cacheprovider -o addopts="" -m "not slow" -k "cuda" \
  tests/retrieval tests/sparse tests/nn tests/graph/test_synonyms.py tests/eval/test_metrics.py \
  tests/models/test_sampling_devices.py \
  2>&1 | tee "$out/tests_cuda.log"
echo "tests rc=${PIPESTATUS[0]}" | tee -a "$out/env.txt"

# 2. every method end to end, CPU then CUDA, on the prepared index
if [ -d "$fixture/index" ]; then
  learned=""  # the learned method, where the fixture has its ranker (gpu_fixture.py trains one)
  if [ -f "$fixture/ranker.safetensors" ]; then
    learned="learned"
  else
    echo "no $fixture/ranker.safetensors: the learned method is skipped (rerun gpu_fixture)" | tee -a "$out/env.txt"
  fi
  for dev in cpu cuda; do
    timeout 60 $py benchmarks/analysis/dump_records.py --index "$fixture/index" \
      --questions hpengine/data/builtin_questions.json --methods dense hyperprove ppr grag fusion $learned \
      --ranker "$fixture/ranker.safetensors" --device "$dev" --threads 8 --mentions "$fixture/mentions.json" \
      --out "$out/records_$dev.json" 2>&1 | tee "$out/records_$dev.log"
  done
  $py benchmarks/analysis/dump_records.py --compare "$out/records_cpu.json" "$out/records_cuda.json" \
    --atol 1e-4 2>&1 | tee "$out/records_compare.txt"
else
  echo "no $fixture/index: run python -m benchmarks e2e gpu_fixture $fixture on a CPU machine first" | tee -a "$out/env.txt"
fi

# 3. the op benchmarks on cuda (100k and 1M facts), then our op on CPU at 100k (no peers: they are
#    CPU libraries measured on this project's machine, benchmarks/README.md)
for bench in ppr hop; do
  timeout 75 $py -m benchmarks ops bench_$bench device=cuda sizes=100000,1000000 queries=1,64,1024 \
    baselines=false out="$out/ops_cuda" 2>&1 | tee "$out/bench_${bench}_cuda.log"
  timeout 50 $py -m benchmarks ops bench_$bench device=cpu sizes=100000 queries=1,64,1024 \
    baselines=false out="$out/ops_cpu" 2>&1 | tee "$out/bench_${bench}_cpu.log"
done
triton_checks
ls -la "$out"
