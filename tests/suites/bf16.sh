#!/usr/bin/env bash
# The bf16 CPU program (./test_gpt_cpu_bf16: bf16 params, grads and
# activations, fp32 master weights and Adam moments, oneDNN bf16 matmuls)
# against the PyTorch float64 reference, with the bf16 tolerances of
# test_gpt.cu (derivation and measured errors there): logits, loss, every
# gradient, 10 AdamW losses, ledger == plan and traffic == plan, for the
# three reference configs on 1 rank and on 2 ranks (stages 0-3 for odd,
# 0 and 3 for small and tiny). Every run must also print the mixed-precision
# ledger "p=2 g=2 k=12" (bf16 params and grads, 12 optimizer bytes).
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
[ -x ./test_gpt_cpu_bf16 ] || { echo "FAIL ./test_gpt_cpu_bf16 is missing (make test_gpt_cpu_bf16)"; echo "0 passed, 1 failed"; exit 1; }

run() { # name N args...
  local name=$1 n=$2; shift 2
  if timeout 300 $MPIRUN -np "$n" ./test_gpt_cpu_bf16 "$@" > "$tmp/out" 2>&1 && grep -q " 0 failed" "$tmp/out"; then
    pass=$((pass+1)); echo "ok   $name: $(tail -1 "$tmp/out"); $(grep -E "^.... (logits|all gradient|losses of)" "$tmp/out" | awk '{printf "%s %s; ", $2, $(NF-2)}')"
  else
    fail=$((fail+1)); echo "FAIL $name"; grep -E "FAIL|error|ERROR" "$tmp/out" | head -10
  fi
  if grep -q "p=2 g=2 k=12 bytes/param" "$tmp/out"; then pass=$((pass+1))
  else fail=$((fail+1)); echo "FAIL $name: the ledger does not read p=2 g=2 k=12"; fi
}

for c in small odd tiny; do
  ARGS="-e data/ref/${c}_model.bin -s data/ref/${c}_debug_state.bin"
  run "$c N=1 z0" 1 $ARGS -z 0
  stages="0 3"; [ $c = odd ] && stages="0 1 2 3"
  for z in $stages; do run "$c N=2 z$z" 2 $ARGS -z $z; done
done
summary
