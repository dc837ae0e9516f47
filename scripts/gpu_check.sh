#!/usr/bin/env bash
# gpu_check.sh: the prepared check of the CUDA build on a machine with ONE GPU,
# everything printed to stdout, in about 4-6 minutes (hard limit ~8):
#   1. build ./train_gpt ./test_gpt and the dev/cuda kernel checks (make -f cuda.mk)
#   2. kernel checks: every dev/cuda program against its CPU reference
#   3. reference files (dev/reference.py, PyTorch on the CPU) if data/ref lacks them
#   4. ./test_gpt for ZeRO stages 0-3 on data/ref/small_* and data/ref/odd_*
#      (mpirun -np 1: NCCL cannot put two ranks on one GPU), plus stage 3 with
#      --reshard-after-forward 0 with grad accumulation, and with --prefetch 2
#   5. GPT-2 124M (-e d12, T=1024, B=$B) for about a minute on data/brown
#      (bash dev/data/prepare.sh; a synthetic token shard if node is missing):
#      tokens/s, MFU, peak device memory, the memory ledger and the traffic
# Usage: bash scripts/gpu_check.sh        env: B (micro-batch, default 16),
#        TRAIN_SECONDS (default 60), SKIP_BUILD=1, JOBS (make -j, default nproc)
# Exit status: 0 if every step passed, 1 otherwise (the summary lists them).
set -u
cd "$(dirname "$0")/.."
exec 2>&1
T0=$(date +%s)
B=${B:-16}
TRAIN_SECONDS=${TRAIN_SECONDS:-60}
JOBS=${JOBS:-$(nproc)}
MPIRUN="mpirun --allow-run-as-root --oversubscribe -np 1"
PY=/usr/bin/python3
results=()
failures=0
note() { echo; echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
record() { # name rc
  if [ "$2" -eq 0 ]; then results+=("PASS  $1"); else results+=("FAIL  $1 (exit $2)"); failures=$((failures + 1)); fi
}

note "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "nvidia-smi not available"
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
nvcc --version | tail -2

# ---------------------------------------------------------------- 1. build
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  note "build (make -f cuda.mk cuda cuda-dev, -j$JOBS)"
  t=$(date +%s)
  make -j"$JOBS" -f cuda.mk cuda cuda-dev
  rc=$?
  echo "build: exit $rc in $(( $(date +%s) - t )) s"
  record "build" $rc
  [ $rc -ne 0 ] && { echo "build failed; stopping"; printf '%s\n' "${results[@]}"; exit 1; }
fi

# ---------------------------------------------------------------- 2. kernels
for k in adamw encoder layernorm matmul attention fused_classifier; do
  note "kernel check dev/cuda/$k"
  if [ -x dev/cuda/$k ]; then timeout 120 ./dev/cuda/$k; record "kernel $k" $?; else record "kernel $k (not built)" 1; fi
done

# ---------------------------------------------------------------- 3. references
need_ref=0
for c in small odd; do
  for f in data/ref/${c}_model.bin data/ref/${c}_debug_state.bin; do [ -f "$f" ] || need_ref=1; done
done
if [ $need_ref = 1 ]; then
  note "reference files: $PY dev/reference.py --config all --out data/ref"
  mkdir -p data/ref
  timeout 240 $PY dev/reference.py --config all --out data/ref
  record "reference files" $?
else
  note "reference files present in data/ref"
fi

# ---------------------------------------------------------------- 4. test_gpt
for c in small odd; do
  if [ ! -f data/ref/${c}_debug_state.bin ]; then record "test_gpt $c (no reference files)" 1; continue; fi
  for z in 0 1 2 3; do
    note "test_gpt $c, zero_stage $z"
    timeout 120 $MPIRUN ./test_gpt -e data/ref/${c}_model.bin -s data/ref/${c}_debug_state.bin -z $z
    record "test_gpt $c -z $z" $?
  done
  note "test_gpt $c, zero_stage 3, reshard_after_forward 0, 2 micro-steps"
  timeout 120 $MPIRUN ./test_gpt -e data/ref/${c}_model.bin -s data/ref/${c}_debug_state.bin -z 3 \
    --reshard-after-forward 0 --accum 2
  record "test_gpt $c -z 3 reshard 0 accum 2" $?
  note "test_gpt $c, zero_stage 3, prefetch 2"
  timeout 120 $MPIRUN ./test_gpt -e data/ref/${c}_model.bin -s data/ref/${c}_debug_state.bin -z 3 --prefetch 2
  record "test_gpt $c -z 3 prefetch 2" $?
done

# ---------------------------------------------------------------- 5. GPT-2 124M speed
note "training data"
if ! ls data/brown/brown_train_*.bin >/dev/null 2>&1; then
  if command -v node >/dev/null 2>&1; then bash dev/data/prepare.sh; fi
fi
TRAIN_PAT="data/brown/brown_train_*.bin"
if ! ls data/brown/brown_train_*.bin >/dev/null 2>&1; then
  echo "no data/brown shards (node missing?): writing a synthetic llm.c shard of random tokens (speed only)"
  mkdir -p data/synthetic
  $PY - <<'EOF'
import struct, random
n = 4 * 1024 * 1024
random.seed(0)
hdr = [20240520, 1, n] + [0] * 253
with open("data/synthetic/synthetic_train_000000.bin", "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(struct.pack("<%dH" % n, *[random.randrange(50257) for _ in range(n)]))
EOF
  TRAIN_PAT="data/synthetic/synthetic_train_*.bin"
fi
run_train() { # steps logfile
  timeout 300 $MPIRUN ./train_gpt -e d12 -i "$TRAIN_PAT" -b "$B" -t 1024 -x "$1" -v 0 -s 0 -u 10 -l 6e-4 2>&1 | tee "$2"
  return ${PIPESTATUS[0]}
}
note "GPT-2 124M calibration: 12 steps, B=$B T=1024"
mkdir -p build
run_train 12 build/gpu_check_calib.log
rc=$?
record "train d12 calibration" $rc
avg_ms=$(grep -o "average [0-9.]* ms" build/gpu_check_calib.log | awk '{print $2}')
if [ $rc -eq 0 ] && [ -n "$avg_ms" ]; then
  steps=$(awk -v ms="$avg_ms" -v s="$TRAIN_SECONDS" 'BEGIN { n = int(1000 * s / ms); if (n < 20) n = 20; if (n > 3000) n = 3000; print n }')
  note "GPT-2 124M: $steps steps (~${TRAIN_SECONDS} s at $avg_ms ms/step), B=$B T=1024"
  run_train "$steps" build/gpu_check_train.log
  rc=$?
  record "train d12 $steps steps" $rc
  log=build/gpu_check_train.log
else
  log=build/gpu_check_calib.log
fi

note "GPT-2 124M figures"
$PY - "$log" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"model: L=(\d+) NH=(\d+) C=(\d+) .*?, (\d+) parameters", text)
tps = re.findall(r"average ([0-9.]+) ms per optimizer step .*?, ([0-9.]+) tokens/s", text)
peak = re.findall(r"peak: .*", text)
if not m or not tps:
    print("could not parse the training log"); sys.exit(0)
L, NH, C, N = map(int, m.groups()); T = 1024
ms, tok = map(float, tps[-1])
flops_tok = 6 * N + 12 * L * C * T   # 6N (fwd+bwd matmuls) + attention QK^T and AV, fwd+bwd (PaLM, non-causal count)
peak_flops = 989e12                  # H100/H200 SXM bf16 dense
print(f"parameters {N}, flops per token {flops_tok / 1e6:.1f} MFLOP (6N {6 * N / 1e6:.1f} + attention {12 * L * C * T / 1e6:.1f})")
print(f"throughput {tok:,.0f} tokens/s, {ms:.1f} ms per step")
print(f"MFU {100 * tok * flops_tok / peak_flops:.1f}% of {peak_flops / 1e12:.0f} TFLOP/s (bf16 dense peak)")
for p in peak: print(p)
EOF
nvidia-smi --query-gpu=memory.used,memory.total --format=csv 2>/dev/null

note "summary ($(( $(date +%s) - T0 )) s)"
printf '%s\n' "${results[@]}"
echo "$(( ${#results[@]} - failures )) passed, $failures failed"
[ $failures -eq 0 ]
