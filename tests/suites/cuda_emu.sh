#!/usr/bin/env bash
# cuda emulation (issue 47, first part): the CUDA sources compiled with g++
# against tests/cuda_emu's stand-in headers (make emu) and run on the CPU.
#   - ./test_gpt_emu against the PyTorch reference (tiny; odd at 1 rank) with
#     the bf16 tolerances of test_gpt.cu, at N=1 and N=2 (stages 0 and 3),
#     emulated NCCL and LLMC_COLLECTIVES=host;
#   - the emulator's own unit checks (make emu-unit, build/test_emu);
#   - dev/cuda/test_backend_emu at -np 1 and 2 (streams, fences, NCCL);
#   - dev/cuda kernel checks adamw, encoder, fused_classifier, layernorm,
#     attention, matmul at their small emulated shapes;
#   - ./train_gpt_emu at N=2 stage 3 (d2, C=64, 4 steps): ledger and traffic
#     OK, losses within 1e-3 of ./train_gpt_cpu_bf16 from the same init and
#     data (measured: max difference 9.3e-5 over the 4 steps);
#   - ./train_gpt_emu at N=2 stage 0: its model checkpoint cmp-equal to stage
#     3's (docs/design.md: stages 0-3 at one N with one micro-step are
#     bitwise equal);
#   - the mutation checks of tests/cuda_mutations.sh (issue 47 item 7): the
#     mutated copies must fail naming their kernel/call (six of six in make
#     test; LLMC_EMU_MUTATIONS=all runs all six).
# Every check prints its cost in seconds.
# An emulator error (a divergent barrier, a bad warp mask, a memcpy kind, a
# cuBLASLt misuse, NCCL calls that differ between ranks) fails the run with
# one line that names the kernel or call and the seed (LLMC_EMU_SEED).
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
T0=$(date +%s); tc=$T0
# every check's line ends with its cost: seconds since the previous check
ok() { local n; n=$(date +%s); pass=$((pass + 1)); echo "ok   $* ($((n - tc)) s)"; tc=$n; }
bad() { local n; n=$(date +%s); fail=$((fail + 1)); echo "FAIL $* ($((n - tc)) s)"; tc=$n; }
if ! nice make -s emu > "$tmp/build" 2>&1; then
  bad "make emu"; tail -20 "$tmp/build"; summary; exit 1
fi
ok "make emu builds ./train_gpt_emu ./test_gpt_emu dev/cuda/*_emu"

run() { # name N args...
  local name=$1 n=$2; shift 2
  if timeout 300 $MPIRUN -x LLMC_COLLECTIVES -np "$n" ./test_gpt_emu "$@" > "$tmp/out" 2>&1 && grep -q " 0 failed" "$tmp/out"; then
    ok "$name: $(tail -1 "$tmp/out")"
  else
    bad "$name"; grep -E "FAIL|error|ERROR" "$tmp/out" | head -10
  fi
}
export LLMC_COLLECTIVES=nccl
T="-e data/ref/tiny_model.bin -s data/ref/tiny_debug_state.bin"
run "tiny N=1 z0" 1 $T -z 0
run "odd N=1 z0" 1 -e data/ref/odd_model.bin -s data/ref/odd_debug_state.bin -z 0
for z in 0 3; do run "tiny N=2 z$z NCCL" 2 $T -z $z; done
LLMC_COLLECTIVES=host run "tiny N=2 z3 host-staged" 2 $T -z 3

# the emulator's own checks (tests/unit/test_emu.cpp: barrier and warp rules, shuffles,
# atomics, streams and events, bf16 bit for bit against the toolkit's cuda_bf16.h, cuBLASLt
# against float64, launch and shared-memory limits, misaligned 128-bit access)
if nice make -s emu-unit > "$tmp/unit.build" 2>&1 && ./build/test_emu > "$tmp/unit" 2>&1 && tail -1 "$tmp/unit" | grep -q " 0 failed"; then
  ok "the emulator's unit checks: $(tail -1 "$tmp/unit")"
else bad "the emulator's unit checks"; grep -E "^FAIL|error" "$tmp/unit.build" "$tmp/unit" 2>/dev/null | head -10; fi
for np in 1 2; do
  if timeout 300 $MPIRUN -x LLMC_COLLECTIVES -np $np ./dev/cuda/test_backend_emu > "$tmp/tb" 2>&1 && grep -qE " 0 failed" "$tmp/tb"; then
    ok "dev/cuda/test_backend_emu -np $np: $(grep -E "passed" "$tmp/tb" | tail -1)"
  else bad "dev/cuda/test_backend_emu -np $np"; grep -E "FAIL|error" "$tmp/tb" | head -5; fi
done

# the dev/cuda kernel checks at their small emulated shapes (DEV_SHAPE in dev/cuda/common.h)
for p in adamw encoder fused_classifier layernorm attention matmul; do
  if timeout 300 ./dev/cuda/${p}_emu > "$tmp/dev" 2>&1; then ok "dev/cuda/$p: $(tail -1 "$tmp/dev")"
  else bad "dev/cuda/$p"; grep -E "FAIL|error" "$tmp/dev" | head -5; fi
done

M="-e d2 --channels 64 --heads 2 --max-seq-len 64 -b 2 -t 32 -x 4 -v 2 -m 2 -s 0 -z 3"
timeout 300 $MPIRUN -x LLMC_COLLECTIVES -np 2 ./train_gpt_emu $M -o "$tmp/emu" > "$tmp/emu.out" 2>&1; rc1=$?
timeout 300 $MPIRUN -np 2 ./train_gpt_cpu_bf16 $M -o "$tmp/cpu" > "$tmp/cpu.out" 2>&1; rc2=$?
if [ $rc1 -eq 0 ] && grep -q "ledger: OK" "$tmp/emu.out" && grep -q "traffic: OK" "$tmp/emu.out"; then
  ok "train_gpt_emu N=2 z3: ledger OK, traffic OK"
else bad "train_gpt_emu N=2 z3 (rc $rc1)"; grep -E "error|FAIL" "$tmp/emu.out" | head -5; fi
d=$(paste <(grep -E "^step" "$tmp/emu.out" | awk '{print $5}') <(grep -E "^step" "$tmp/cpu.out" | awk '{print $5}') |
    awk 'BEGIN{m=-1} NF==2{d=$1-$2; if(d<0)d=-d; if(d>m)m=d} END{print m}')
if [ $rc2 -eq 0 ] && [ "$(grep -c '^step' "$tmp/emu.out")" = 4 ] && awk -v d="$d" 'BEGIN{exit !(d>=0 && d<1e-3)}'; then
  ok "train_gpt_emu losses within 1e-3 of train_gpt_cpu_bf16 (max difference $d over 4 steps)"
else bad "train_gpt_emu losses against train_gpt_cpu_bf16: max difference $d (bound 1e-3)"; fi

# stages 0 and 3 at N=2, one micro-step: bitwise equal (docs/design.md, section 6)
timeout 300 $MPIRUN -x LLMC_COLLECTIVES -np 2 ./train_gpt_emu ${M/-z 3/-z 0} -o "$tmp/emu0" > "$tmp/emu0.out" 2>&1; rc0=$?
if [ $rc0 -eq 0 ] && grep -q "ledger: OK" "$tmp/emu0.out" && grep -q "traffic: OK" "$tmp/emu0.out" &&
   cmp "$tmp/emu0/model_00000004.bin" "$tmp/emu/model_00000004.bin"; then
  ok "train_gpt_emu N=2 z0: ledger OK, traffic OK, model after 4 steps cmp-equal to z3's"
else bad "train_gpt_emu N=2 z0 against z3 (rc $rc0)"; grep -E "error|FAIL" "$tmp/emu0.out" | head -5; fi

# the flags of stage 3 and the rank counts on test_gpt_emu (tiny reference: a few seconds each;
# every check of test_gpt: logits, loss, gradients, steps, ledger, traffic)
run "tiny N=4 z1 NCCL" 4 $T -z 1
LLMC_COLLECTIVES=host run "tiny N=4 z2 host-staged" 4 $T -z 2
run "tiny N=4 z3 NCCL" 4 $T -z 3
run "tiny N=2 z3 --prefetch 2" 2 $T -z 3 --prefetch 2
run "tiny N=2 z3 --reshard-after-forward 0 --accum 2" 2 $T -z 3 --reshard-after-forward 0 --accum 2
run "tiny N=2 z3 --keep-logits 0" 2 $T -z 3 --keep-logits 0
run "tiny N=2 z3 --keep-logits 1" 2 $T -z 3 --keep-logits 1
run "tiny N=4 z3 HSDP --shard-group 2 NCCL" 4 $T -z 3 --shard-group 2
LLMC_COLLECTIVES=host run "tiny N=4 z3 HSDP --shard-group 2 host-staged" 4 $T -z 3 --shard-group 2
mkdir -p "$tmp/off"
run "tiny N=2 z3 --offload-optimizer disk" 2 $T -z 3 --offload-optimizer "disk:$tmp/off"

# the emulated trainer's checkpoint read by the CPU program: its val loss within 1e-3 of the one
# train_gpt_emu printed at step 4 (the same 2 val sequences)
ve=$(awk '$1 == "step" && $2 == 4 && $3 == "val_loss" {print $4}' "$tmp/emu/main.log")
timeout 120 $MPIRUN -np 1 ./train_gpt_cpu_bf16 -e "$tmp/emu/model_00000004.bin" -t 32 -x 0 -v 1 -m 2 -b 2 > "$tmp/cpuval.out" 2>&1
vc=$(sed -n 's/^val loss \([0-9.]*\) of the model.*/\1/p' "$tmp/cpuval.out")
if [ -n "$ve" ] && [ -n "$vc" ] && awk -v a="$ve" -v b="$vc" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(d<1e-3)}'; then
  ok "train_gpt_emu's model_00000004.bin read by train_gpt_cpu_bf16: val loss $vc, train_gpt_emu printed $ve (bound 1e-3)"
else bad "train_gpt_emu's checkpoint in train_gpt_cpu_bf16: val loss '$vc' against '$ve'"; tail -3 "$tmp/cpuval.out"; fi

# SIGTERM to the ranks after step 1: the checkpoint of the last step, exit 143 (docs/faults.md);
# -y 1 resumes it, and the model after step 4 is cmp-equal to the uninterrupted run's
$MPIRUN -x LLMC_COLLECTIVES -np 2 ./train_gpt_emu $M -o "$tmp/int" > "$tmp/int.out" 2>&1 &
job=$!
for i in $(seq 600); do grep -qE "^step +1/" "$tmp/int.out" && break; sleep 0.1; done
kill -TERM $(pgrep -P $job) 2>/dev/null
wait $job; rcI=$?
K=$(sed -n 's/^interrupted at step \([0-9]*\): wrote checkpoint \1; resume with -y 1.*/\1/p' "$tmp/int.out" | head -1)
timeout 300 $MPIRUN -x LLMC_COLLECTIVES -np 2 ./train_gpt_emu $M -o "$tmp/int" -y 1 > "$tmp/res.out" 2>&1; rcR=$?
if [ $rcI = 143 ] && [ -n "$K" ] && [ "$K" -lt 4 ] && [ $rcR = 0 ] && cmp "$tmp/int/model_00000004.bin" "$tmp/emu/model_00000004.bin"; then
  ok "train_gpt_emu SIGTERM after step 1: exit 143, checkpoint $K; -y 1 resumes, model after step 4 cmp-equal to the uninterrupted run"
else bad "train_gpt_emu SIGTERM/resume: exit $rcI, checkpoint '${K:-none}', resume exit $rcR"; grep -E "error|interrupted" "$tmp/int.out" "$tmp/res.out" | head -5; fi

# a collective timeout: rank 1 stops at the start of step 2 (test hook LLMC_TEST_HANG); rank 0
# ends the run within the timeout naming rank 1 (its error check, an MPI all-reduce) or the NCCL
# call its GPU wait is stuck behind (nccl_poll_hook), exit 1 (docs/faults.md). 15 s: on a loaded
# 2-core machine an emulated rank can legitimately wait 5 s for its peer. (The hook cannot stop a
# rank between two NCCL calls; the mutation 'nccl' below checks that path by name.)
LLMC_TEST_HANG=1:2 timeout 180 $MPIRUN -x LLMC_COLLECTIVES -x LLMC_TEST_HANG -np 2 ./train_gpt_emu $M --collective-timeout 15 \
  > "$tmp/hang.out" 2>&1; rcH=$?
if [ $rcH = 1 ] && grep -qE "^error \(rank 0.*(\(step 2\) did not complete in 15 s: no data from rank 1|waited more than 15 s for the GPU at step 2 \(nccl)" "$tmp/hang.out"; then
  ok "train_gpt_emu collective timeout (rank 1 stops in step 2): exit 1, $(grep -m1 -oE "no data from rank 1|nccl[A-Za-z]+ #[0-9]+" "$tmp/hang.out")"
else bad "train_gpt_emu collective timeout: exit $rcH"; grep -E "error|waited|hook" "$tmp/hang.out" | head -5; fi

# mutation checks (issue 47 item 7): each mutated copy must fail naming its kernel or call
. tests/cuda_mutations.sh
tc=$(date +%s)
# make test runs all six (sync: the shared-memory race check, uninit: the
# never-written read check of tests/cuda_emu/emu_race.h; wait: the cross-stream
# race check of tests/cuda_emu/emu_streamrace.h)
# control: the unmutated program passes with the mutations' LLMC_POISON_ACTIVATIONS=1
if LLMC_POISON_ACTIVATIONS=1 timeout 300 ./test_gpt_emu $T -z 0 > "$tmp/poison" 2>&1 && grep -q " 0 failed" "$tmp/poison"; then
  ok "tiny N=1 z0 with LLMC_POISON_ACTIVATIONS=1 (the mutations' setting, unmutated): $(tail -1 "$tmp/poison")"
else bad "tiny N=1 z0 with LLMC_POISON_ACTIVATIONS=1"; grep -E "FAIL|error" "$tmp/poison" | head -5; fi
if [ "${LLMC_EMU_MUTATIONS:-named}" = all ]; then mutations_run
else
  mutations_run sync shfl bounds nccl wait uninit
fi
# gcov line coverage of llmc/cuda and train_gpt.cu's CUDA-only lines (issue 47 item 8): a
# --coverage build and the test_gpt/train_gpt runs again, ~4 min more on 2 loaded cores, so
# only with LLMC_EMU_COVERAGE=1 (docs/testing.md: the measured figure and what is not covered)
if [ "${LLMC_EMU_COVERAGE:-0}" = 1 ]; then
  line=$(bash tests/cuda_coverage.sh | tail -1)
  case "$line" in coverage:*) ok "$line";; *) bad "coverage: $line";; esac
else skip "gcov coverage of the CUDA code: skipped (LLMC_EMU_COVERAGE=1 runs it, ~4 min more)"; fi
echo "cuda emulation: $(( $(date +%s) - T0 )) s in all"
summary
