#!/usr/bin/env bash
# The fit check's details (issue 40; llmc/fit.h, llmc/gpt_fit.h, train_gpt.cu):
#  1. the flags check hashes every byte of argv: two ranks whose arguments
#     differ only after their first 1000 characters are refused with one
#     error line naming the argument (its length and hash) and the rank;
#  2. -z auto's link probe is bounded and counted in the prediction, and its
#     candidate list is sized to the count (no stage dropped);
#  3. the refusal names the rank whose budget is the smallest and that
#     rank's source (not rank 0's source beside another rank's number).
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s train_gpt_cpu >/dev/null 2>&1 || { bad "make train_gpt_cpu"; summary; exit 1; }
BIN=./train_gpt_cpu
DATA="-i data/brown/brown_train_*.bin -j data/brown/brown_val_*.bin"

# --- 1. every byte of argv
long=$(printf 'a%.0s' $(seq 1100))
A="$tmp/${long}A"; B="$tmp/${long}B"
out=$(timeout 120 $MPIRUN -np 1 $BIN --estimate -e d2 -o "$A" : -np 1 $BIN --estimate -e d2 -o "$B" 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c '^error' <<<"$out")" = 1 ] &&
   grep -q "^error: the ranks would run different flags: rank 1 has argv\[5\] = (${#A}-chars,fnv1a:[0-9a-f]\{16\})$tmp/a* where rank 0 has argv\[5\] = (${#A}-chars,fnv1a:[0-9a-f]\{16\})" <<<"$out"; then
  ok "argv differing in the last character of a ${#A}-character -o: refused, one error naming argv[5] with its length and hash, rank 1"
else bad "argv differing after character 1000: rc $rc: $(grep -m1 '^error' <<<"$out" | cut -c1-200)"; fi
out=$(timeout 120 $MPIRUN -np 2 $BIN --estimate -e d2 -o "$A" 2>&1); rc=$?
[ $rc = 0 ] && ok "the same ${#A}-character argument on both ranks: accepted" || bad "the same long argument: rc $rc: $(grep -m1 '^error' <<<"$out" | cut -c1-200)"
# more arguments than the text has room for: the rest are hashed together
many=""; for i in $(seq 40); do many="$many -o $tmp/${long}"; done
out=$(timeout 120 $MPIRUN -np 1 $BIN --estimate -e d2 $many -o "$A" : -np 1 $BIN --estimate -e d2 $many -o "$B" 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "^error: the ranks would run different flags: rank 1 has argv\[[0-9]*\.\.85\] = fnv1a:[0-9a-f]\{16\} where rank 0 has argv\[[0-9]*\.\.85\] = fnv1a:" <<<"$out"; then
  ok "85 arguments, the last one differing past the text's room: refused, the rest hashed together"
else bad "85 arguments differing in the last: rc $rc: $(grep -m1 '^error' <<<"$out" | cut -c1-200)"; fi

# --- 2. -z auto's link probe: bounded, counted (tests/unit/test_fit_choose.c has the bounds, the peak and the list's size)
out=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 -e d2 -b 2 -t 64 -x 1 -r 0 -z auto 2>&1); rc=$?
# 2 ranks on one node: all-gathers of 4 MiB per rank, a send and a 2-rank receive buffer: 3 x 4 MiB = 12.58 MB
if [ $rc = 0 ] && grep -q "^-z auto: .*(measured, the slowest rank's; the probe's buffers 12.58 MB per rank).*counted in every peak: the decision's buffers 12.58 MB per rank before the model (the link probe's, the [0-9]* candidates' list)" <<<"$out" &&
   grep -q "^memory: predicted peak .*; before the model, -z auto's own buffers (the link probe's, the candidates' list) 0.01258 GB: a smaller phase than the model's" <<<"$out"; then
  ok "-z auto on 2 ranks: the probe's 3 x 4 MiB = 12.58 MB per rank counted in every candidate's peak, named on the memory line"
else bad "-z auto's probe: rc $rc: $(grep -m1 '^-z auto: [0-9]' <<<"$out" | cut -c1-300)"; fi
out=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 -e d2 -b 2 -t 64 -x 1 -r 0 -z auto --link-gbps 10 2>&1); rc=$?
if [ $rc = 0 ] && ! grep -q "the probe's buffers" <<<"$out" && grep -q "the decision's buffers 0.0[0-9]* MB per rank before the model" <<<"$out"; then
  ok "-z auto --link-gbps 10: no probe, the decision's buffers are the candidates' list alone ($(sed -n "s/.*the decision's buffers \([0-9.]*\) MB.*/\1/p" <<<"$out") MB)"
else bad "-z auto --link-gbps: rc $rc: $(grep -m1 '^-z auto: [0-9]' <<<"$out" | cut -c1-300)"; fi

# --- 3. the smallest budget over the ranks is named by its rank and that rank's source
# (each rank reads its own fake cgroup v2 tree: LLMC_CGROUP_ROOT, LLMC_PROC_SELF_CGROUP)
for r in a b; do mkdir -p "$tmp/cg$r/fs/lim"; echo "0::/lim" > "$tmp/cg$r/self"; done
echo 2000000000 > "$tmp/cga/fs/lim/memory.max"; echo 900000000 > "$tmp/cgb/fs/lim/memory.max"
R="-e d12 -b 2 -t 256 -x 1 -v 0 -s 0 -z 0 -i data/brown/brown_train_*.bin"
out=$(timeout 120 $MPIRUN -np 1 -x LLMC_CGROUP_ROOT="$tmp/cga/fs" -x LLMC_PROC_SELF_CGROUP="$tmp/cga/self" $BIN $R : \
                          -np 1 -x LLMC_CGROUP_ROOT="$tmp/cgb/fs" -x LLMC_PROC_SELF_CGROUP="$tmp/cgb/self" $BIN $R 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c '^error' <<<"$out")" = 1 ] &&
   grep -q "^error: -e d12 .* the budget is 0.45 GB per rank (rank 1 on node [^,]*, the smallest over the 2 ranks: cgroup v2 $tmp/cgb/fs/lim/memory.max: 0.9 GB, less 0 GB held by other processes of the cgroup, / 2 ranks of the node)" <<<"$out"; then
  ok "ranks with budgets of 1.0 and 0.45 GB: the refusal names rank 1 and its own cgroup file (0.9 GB / 2 ranks)"
else bad "the smallest budget's rank: rc $rc: $(grep -m1 '^error' <<<"$out" | cut -c1-400)"; fi
out=$(timeout 120 $MPIRUN -np 1 -x LLMC_CGROUP_ROOT="$tmp/cgb/fs" -x LLMC_PROC_SELF_CGROUP="$tmp/cgb/self" $BIN $R : \
                          -np 1 -x LLMC_CGROUP_ROOT="$tmp/cga/fs" -x LLMC_PROC_SELF_CGROUP="$tmp/cga/self" $BIN $R 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "^error: -e d12 .* the budget is 0.45 GB per rank (rank 0 on node [^,]*, the smallest over the 2 ranks: cgroup v2 $tmp/cgb/fs/lim/memory.max" <<<"$out"; then
  ok "the same budgets the other way round: rank 0 and its file"
else bad "the smallest budget on rank 0: rc $rc: $(grep -m1 '^error' <<<"$out" | cut -c1-400)"; fi

summary
