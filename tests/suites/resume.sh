#!/usr/bin/env bash
# tests/suites/resume.sh: stop anywhere, resume exactly, with any rank count and
# ZeRO stage (llmc/state.h, flag -y 1).
#
# Data: three small train shards cut from the Brown train shard, of 577, 769
# and 385 tokens (3, 4 and 2 steps of 192 tokens plus the final target), so
# ten steps cross two shard boundaries and wrap to shard 0, and every split
# of the 192-token step used below (global micro-batches of 64 or 96 tokens)
# ends each shard at the same place.
#  1. reference: 2 ranks, zero_stage 3, B=2 T=16, 3 micro-steps per step,
#     -n 5 -x 10, uninterrupted; it writes model_ and state_00000005/10.
#  2. the step-5 files copied alone into a fresh -o dir, -y 1 -x 10 with the
#     same N and stage: the train losses of steps 6-10 in main.log equal the
#     reference's as printed strings, and the final model_00000010.bin and the
#     m, v of state_00000010.bin are byte-identical to the reference's.
#  3. the same with N=1 zero_stage 0 (B=4, 3 micro-steps), N=3 zero_stage 1
#     (B=2, 2 micro-steps) and N=2 zero_stage 0 (B=6; every rank reads all of
#     m, v, not only its shard), from the step-5 state with the master weights
#     added (the layout LLMC_STATE_MASTER=1 writes): losses of steps 6-10
#     within 1e-5 relative.
#  4. data positions (LLMC_LOG_POSITIONS=1): the (shuffled) reference reads
#     every 16-token sequence of every shard once in epoch 0, not in file
#     order, and epoch 1 in another order; each resumed run's steps 6-10
#     (resumed mid-epoch) read exactly the sequences the reference read at
#     steps 6-10, in its order. With --shuffle 0 a reference reads them in
#     file order (no gap, no overlap) and a resume on 3 ranks continues so.
#  5. -y 1 with no checkpoint starts fresh (one line says so), from -e FILE
#     if given; -y 1 without -e or size flags takes the model's sizes from
#     the checkpoint and continues bit for bit; -y 1 without -o, -y 1 -e FILE
#     with a checkpoint in -o (-e would be ignored), a checkpoint whose sizes
#     differ from the flags' (the fields named with both values), and
#     resuming from a bad or mismatched state (config, magic, size, NaN in
#     m, other train data, step beyond -x) end with exit 1 and one "error:"
#     line on stderr.
#  7. what a resume changes is said: -x 12 after a run of -x 10 prints the
#     recomputed schedule with both lrs of the next step (checked against
#     the cosine computed here); -d 384 prints the changed global batch; a
#     resume with the same flags prints no note.
#  8. the state holds nothing of the stage or the rank count: runs at
#     stages 0 and 3 on 2 ranks (one micro-step per step, where the stages
#     sum in the same order) write byte-identical model and state files,
#     and 2 and 3 ranks with the same global batch write the same header.
#  6. --checkpoint-dtype bf16: the same losses; the version-5 model file is
#     the master weights rounded to nearest even (torch's rounding), the
#     state beside it holds them exactly, and a resume from step 5 is
#     bitwise the uninterrupted run (losses, final model and state files).
# Usage: bash tests/suites/resume.sh   (TRAIN_GPT=path to test another binary;
# for the bf16 program the bound of part 3 is how far its uninterrupted
# reference lies from the fp32 program's: another split only reorders bf16
# roundings; same N and stage stays bitwise)
# Last line: "N passed, M failed"; exit 1 if any failed.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
ROOT=$PWD
TRAIN=${TRAIN_GPT:-./train_gpt_cpu}
PY=/usr/bin/python3
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); [ -n "${KEEP:-}" ] && echo "keeping $tmp" || trap 'rm -rf "$tmp"' EXIT
for f in "$TRAIN" data/brown/brown_train_000000.bin; do
  [ -e "$f" ] || { echo "missing $f (make all; bash dev/data/prepare.sh)"; echo "0 passed, 1 failed"; exit 1; }
done

$PY - "$tmp" <<'PY'
import sys, numpy as np
src = np.fromfile("data/brown/brown_train_000000.bin", dtype="<u2", offset=1024)
off = 0
for i, n in enumerate([577, 769, 385]):
    h = np.zeros(256, dtype="<i4"); h[0], h[1], h[2] = 20240520, 1, n
    with open(f"{sys.argv[1]}/shard_{i}.bin", "wb") as f:
        f.write(h.tobytes()); f.write(src[off:off + n].tobytes())
    off += n
PY
set -f  # the -i pattern below is a glob for the trainer, not for the shell
DATA="$tmp/shard_*.bin"
COMMON="-i $DATA -e d2 --channels 64 --heads 2 --max-seq-len 64 -t 16 -d 192 -v 0 -s 0 -l 3e-3 -u 2 -n 5"

train() { # name np args... ; output in $tmp/name.out
  local name=$1 np=$2; shift 2
  LLMC_LOG_POSITIONS=1 timeout 300 $MPIRUN -np "$np" "$TRAIN" $COMMON "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
  local rc=$?
  [ $rc -eq 0 ] || { echo "     $name exited $rc:"; tail -n 3 "$tmp/$name.err"; tail -n 3 "$tmp/$name.out"; }
  return $rc
}

# 1. the reference
if LLMC_STATE_MASTER=0 train ref 2 -b 2 -z 3 -x 10 -o "$tmp/ref"; then ok "reference run: 2 ranks, zero_stage 3, 10 steps"
else bad "reference run"; summary; exit 1; fi
for f in model_00000005 state_00000005 model_00000010 state_00000010; do
  [ -f "$tmp/ref/$f.bin" ] || bad "the reference run did not write $f.bin"
done

# a state file at step 5 that also stores the master weights (the same m, v)
$PY - "$tmp/ref/state_00000005.bin" "$tmp/state5_master.bin" "$tmp/ref/model_00000005.bin" <<'PY'
import sys, numpy as np
raw = open(sys.argv[1], "rb").read()
h = np.frombuffer(raw[:1024], dtype="<i8").copy()
assert h[0] == 20240612 and h[1] == 1 and h[17] == 0, h[:18]
psi = int(h[3]); assert len(raw) == 1024 + 8 * psi
h[17] = 1
w = open(sys.argv[3], "rb").read()[1024:]
assert len(w) == 4 * psi
open(sys.argv[2], "wb").write(h.tobytes() + raw[1024:] + w)
PY

resume_dir() { # name [state file]: a fresh -o dir holding only the step-5 checkpoint
  mkdir -p "$tmp/$1"; cp "$tmp/ref/model_00000005.bin" "$tmp/$1/"
  cp "${2:-$tmp/ref/state_00000005.bin}" "$tmp/$1/state_00000005.bin"
}

# 2. same N and stage
resume_dir same
if train same 2 -b 2 -z 3 -x 10 -o "$tmp/same" -y 1 && grep -q "^resumed from step 5" "$tmp/same.out"; then
  a=$(grep -E "^step (6|7|8|9|10) train_loss" "$tmp/ref/main.log" | awk '{print $1, $2, $3, $4}')
  b=$(grep -E "^step [0-9]+ train_loss" "$tmp/same/main.log" | awk '{print $1, $2, $3, $4}')
  if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "same N=2 zero_stage 3: train losses of steps 6-10 identical ($(echo $b | awk '{print $4}') .. $(echo "$b" | tail -1 | awk '{print $4}'))"
  else bad "same N and stage: losses differ"; diff <(echo "$a") <(echo "$b") | head; fi
  if grep -q "^average .* (steps 7..10, 4 timed)" "$tmp/same.out" && grep -q "^average .* (steps 2..10, 9 timed)" "$tmp/ref.out"
  then ok "the average line names the steps timed: 7..10 after the resume at 5 (the first step warms up), 2..10 for the uninterrupted run"
  else bad "average line: $(grep "^average" "$tmp/same.out") / $(grep "^average" "$tmp/ref.out")"; fi
  if cmp -s "$tmp/ref/model_00000010.bin" "$tmp/same/model_00000010.bin" && cmp -s "$tmp/ref/state_00000010.bin" "$tmp/same/state_00000010.bin"
  then ok "same N and stage: model_00000010.bin and state_00000010.bin byte-identical to the uninterrupted run's"
  else bad "same N and stage: final checkpoint or state differs from the uninterrupted run's"; fi
else bad "resume with the same N and stage did not run or did not say 'resumed from step 5'"; fi

# 3. other N and stage, from the state with master weights
TOL=1e-5
if [ "$TRAIN" != ./train_gpt_cpu ]; then
  if TRAIN=./train_gpt_cpu LLMC_STATE_MASTER=0 train ref32 2 -b 2 -z 3 -x 10 -o "$tmp/ref32"; then
    TOL=$($PY - "$tmp/ref/main.log" "$tmp/ref32/main.log" <<'PY'
import sys
def L(p):
    return {int(f[1]): float(f[3]) for f in (l.split() for l in open(p)) if len(f) > 3 and f[2] == "train_loss"}
a, b = L(sys.argv[1]), L(sys.argv[2])
print("%.3e" % max(abs(a[s] - b[s]) / abs(b[s]) for s in range(6, 11)))
PY
)
    echo "     bound: the reference differs from the fp32 program's by $TOL (relative) at steps 6-10"
  fi
fi
for cfg in "n1z0 1 -b 4 -z 0" "n3z1 3 -b 2 -z 1" "n2z0 2 -b 6 -z 0"; do
  set -- $cfg; name=$1; np=$2; shift 2
  resume_dir "$name" "$tmp/state5_master.bin"
  wm=0; [ $name = n3z1 ] && wm=1   # this run also writes its states with the master weights
  if LLMC_STATE_MASTER=$wm train "$name" "$np" "$@" -x 10 -o "$tmp/$name" -y 1 && grep -q "^resumed from step 5.*with master weights" "$tmp/$name.out"; then
    if $PY - "$tmp/ref/main.log" "$tmp/$name/main.log" "$TOL" <<'PY'
import sys
def L(p):
    return {int(f[1]): float(f[3]) for f in (l.split() for l in open(p)) if len(f) > 3 and f[2] == "train_loss"}
a, b = L(sys.argv[1]), L(sys.argv[2])
assert sorted(b) == [6, 7, 8, 9, 10], sorted(b)
rel = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
print(f"     max relative difference of the losses of steps 6-10: {rel:.2e} (bound {float(sys.argv[3]):.2e})")
sys.exit(0 if rel <= float(sys.argv[3]) else 1)
PY
    then ok "saved N=2 zero_stage 3, resumed $name ($*): losses within $TOL"; else bad "resumed $name: losses differ by more than $TOL"; fi
  else bad "resume $name did not run or did not load the master weights"; fi
done

# the master section that 3 ranks at stage 1 wrote equals the weights of the model file beside it
if $PY - "$tmp/n3z1/state_00000010.bin" "$tmp/n3z1/model_00000010.bin" <<'PY'
import sys, numpy as np
s = open(sys.argv[1], "rb").read(); w = open(sys.argv[2], "rb").read()[1024:]
h = np.frombuffer(s[:1024], dtype="<i8"); psi = int(h[3])
ok = h[17] == 1 and h[15] == 0 and h[16] == 0 and list(h[20:22]) == [10, 2] and list(h[24:26]) == [192, 16] \
     and len(s) == 1024 + 12 * psi and s[1024 + 8 * psi:] == w
print(f"     state_00000010.bin of n3z1: has_master {h[17]}, words 15-16 (no stage, no rank count) {h[15]} {h[16]}, "
      f"run record -x {h[20]} -u {h[21]} tokens/step {h[24]} T {h[25]}, master == model weights: {ok}")
sys.exit(0 if ok else 1)
PY
then ok "LLMC_STATE_MASTER=1 on 3 ranks at stage 1 writes master weights equal to the model checkpoint's"; else bad "master section written by n3z1"; fi

# whether the state holds the masters is one decision: LLMC_STATE_MASTER=1 on one rank only
# writes the same file as on every rank (before, rank 0 alone sized the file and set the flag)
timeout 300 $MPIRUN -np 2 -x LLMC_STATE_MASTER=1 "$TRAIN" $COMMON -b 2 -z 1 -x 2 -n 2 -o "$tmp/wm_all" > /dev/null 2>&1
timeout 300 $MPIRUN -np 2 bash -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && export LLMC_STATE_MASTER=1 || export LLMC_STATE_MASTER=0; exec "$@"' _ \
  "$TRAIN" $COMMON -b 2 -z 1 -x 2 -n 2 -o "$tmp/wm_one" > /dev/null 2>&1
if [ -s "$tmp/wm_all/state_00000002.bin" ] && cmp -s "$tmp/wm_all/state_00000002.bin" "$tmp/wm_one/state_00000002.bin"; then
  ok "LLMC_STATE_MASTER=1 on rank 1 only: the same state file as on every rank ($(stat -c %s "$tmp/wm_one/state_00000002.bin") bytes, with masters)"
else bad "LLMC_STATE_MASTER=1 on rank 1 only: $(cmp "$tmp/wm_all/state_00000002.bin" "$tmp/wm_one/state_00000002.bin" 2>&1 | head -1)"; fi

# 4. data positions
# the in-order reader (--shuffle 0) as well: a reference and a resume on 3 ranks
if train ord 2 -b 2 -z 3 -x 10 -o "$tmp/ord" --shuffle 0; then
  mkdir -p "$tmp/ordres"; cp "$tmp/ord/model_00000005.bin" "$tmp/ord/state_00000005.bin" "$tmp/ordres/"
  train ordres 3 -b 2 -z 1 -x 10 -o "$tmp/ordres" -y 1 --shuffle 0 || bad "resume of the --shuffle 0 run"
else bad "--shuffle 0 reference run"; fi
if $PY - "$tmp" <<'PY'
import sys, re
tmp = sys.argv[1]
ntok = [577, 769, 385]
T = 16
def seqs(run):
    """step -> [(epoch, shard, first token of the sequence)] in the order read"""
    out = {}
    for l in open(f"{tmp}/{run}.out"):
        m = re.match(r"data position: step (\d+) micro (\d+) shard (\d+) start (\d+) tokens (\d+)", l)
        if m:  # in file order
            s, k, sh, st, n = map(int, m.groups())
            out.setdefault(s, []).extend((None, sh, st + i) for i in range(0, n, T))
        m = re.match(r"data position: step (\d+) micro (\d+) epoch (\d+) shard (\d+) starts ([\d,]+) T (\d+)", l)
        if m:  # shuffled
            s, k, e, sh = map(int, m.groups()[:4])
            out.setdefault(s, []).extend((e, sh, int(p)) for p in m.group(5).split(","))
    return out
allseq = sorted((sh, p) for sh in range(3) for p in range(0, ntok[sh] - 1, T))  # 36 + 48 + 24 = 108, all used (multiples of 12)
bad = 0
def report(ok, text):
    global bad
    bad += not ok
    print(f"     {text}: {'yes' if ok else 'NO'}")
# in file order: every shard sequence by sequence, then wrap
ordr = seqs("ord")
flat = [q[1:] for s in range(1, 11) for q in ordr.get(s, [])]
expect = [(sh, p) for sh in range(3) for p in range(0, ntok[sh] - 1, T)]
expect = (expect * 2)[:120]
report(sorted(ordr) == list(range(1, 11)) and flat == expect, "--shuffle 0: 120 sequences of 16 tokens, shards 0,1,2 then 0 again, in order, no gap, no overlap")
r = seqs("ordres")
got = [q[1:] for s in sorted(r) for q in r[s]]
report(sorted(r) == [6, 7, 8, 9, 10] and [q[1:] for s in range(1, 6) for q in ordr[s]] + got == expect,
       "--shuffle 0: resumed on 3 ranks at step 5, steps 6-10 continue in order")
# shuffled (the default): epoch 0 reads each of the 108 sequences once, not in file order, epoch 1 in another order
ref = seqs("ref")
flat = [q for s in range(1, 11) for q in ref.get(s, [])]
e0 = [q[1:] for q in flat if q[0] == 0]
e1 = [q[1:] for q in flat if q[0] == 1]
report(sorted(ref) == list(range(1, 11)) and len(flat) == 120 and sorted(e0) == allseq and len(e1) == 12 and len(set(e1)) == 12,
       "shuffled reference: epoch 0 = the 108 sequences once each, then 12 of epoch 1")
report(e0 != sorted(e0) and e1 != e0[:12], "shuffled reference: not in file order, epoch 1 in another order than epoch 0")
for run in ["same", "n1z0", "n3z1", "n2z0"]:
    r = seqs(run)
    got = [q for s in sorted(r) for q in r[s]]
    report(sorted(r) == [6, 7, 8, 9, 10] and [q for s in range(1, 6) for q in ref[s]] + got == flat,
           f"{run}: resumed at step 5 (mid-epoch), steps 6-10 read the sequences of the uninterrupted run, in its order")
sys.exit(1 if bad else 0)
PY
then ok "data: the same order after a resume (shuffled, for every N and stage; in file order with --shuffle 0), every sequence once per epoch"; else bad "data positions after resume"; fi

# 6. bf16 model files (--checkpoint-dtype bf16, llm.c version 5): training
# is the same run; the file holds the master weights rounded to nearest even
# (checked against torch's own rounding) and the state beside it the exact
# fp32 master weights, so a resume from step 5 is bitwise the uninterrupted run
if LLMC_STATE_MASTER=0 train bf 2 -b 2 -z 3 -x 10 -o "$tmp/bf" --checkpoint-dtype bf16; then
  a=$(grep -E "^step [0-9]+ train_loss" "$tmp/ref/main.log" | awk '{print $4}')
  b=$(grep -E "^step [0-9]+ train_loss" "$tmp/bf/main.log" | awk '{print $4}')
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "--checkpoint-dtype bf16: the same 10 losses as the fp32-checkpoint run" || bad "--checkpoint-dtype bf16 changed the losses"
  if $PY - "$tmp/bf/model_00000005.bin" "$tmp/bf/state_00000005.bin" <<'PY'
import sys, numpy as np, torch
m = open(sys.argv[1], "rb").read(); s = open(sys.argv[2], "rb").read()
hm = np.frombuffer(m[:1024], "<i4"); hs = np.frombuffer(s[:1024], "<i8"); psi = int(hs[3])
assert hm[0] == 20240326 and hm[1] == 5, hm[:2]
assert len(m) == 1024 + 2 * psi, (len(m), psi)
assert hs[17] == 1 and len(s) == 1024 + 12 * psi, "the state beside a bf16 model must hold the master weights"
master = torch.from_numpy(np.frombuffer(s[1024 + 8 * psi:], "<f4").copy())
want = master.to(torch.bfloat16).view(torch.int16).numpy().view("<u2")
got = np.frombuffer(m[1024:], "<u2")
assert np.array_equal(got, want), f"{np.sum(got != want)} of {psi} values differ from torch's bf16 rounding"
print(f"     model_00000005.bin: version 5, {psi} bf16 values == torch.bfloat16(master weights of the state); state has_master 1")
PY
  then ok "version-5 model file: round to nearest even of the master weights, stored exactly in the state beside it"; else bad "version-5 model file or its state"; fi
  mkdir -p "$tmp/bfres"; cp "$tmp/bf/model_00000005.bin" "$tmp/bf/state_00000005.bin" "$tmp/bfres/"
  if LLMC_STATE_MASTER=0 train bfres 2 -b 2 -z 3 -x 10 -o "$tmp/bfres" -y 1 --checkpoint-dtype bf16 && grep -q "^resumed from step 5.*with master weights" "$tmp/bfres.out"; then
    a=$(grep -E "^step (6|7|8|9|10) train_loss" "$tmp/bf/main.log" | awk '{print $1, $2, $3, $4}')
    b=$(grep -E "^step [0-9]+ train_loss" "$tmp/bfres/main.log" | awk '{print $1, $2, $3, $4}')
    if [ -n "$a" ] && [ "$a" = "$b" ] && cmp -s "$tmp/bf/model_00000010.bin" "$tmp/bfres/model_00000010.bin" && cmp -s "$tmp/bf/state_00000010.bin" "$tmp/bfres/state_00000010.bin"
    then ok "resume from a bf16 (version 5) checkpoint: losses of steps 6-10, model_00000010.bin and state_00000010.bin bitwise equal to the uninterrupted run's"
    else bad "resume from a bf16 checkpoint differs from the uninterrupted run"; diff <(echo "$a") <(echo "$b") | head -4; fi
  else bad "resume from a bf16 checkpoint did not run or did not load the master weights"; fi
else bad "training with --checkpoint-dtype bf16"; fi

# 7. what changes on a resume is said (after the program's banner)
b=$(grep -n "^train_gpt (" "$tmp/same.out" | head -1 | cut -d: -f1); r=$(grep -n "^resumed from step" "$tmp/same.out" | head -1 | cut -d: -f1)
if [ -n "$b" ] && [ -n "$r" ] && [ "$r" -gt "$b" ]; then ok "the 'resumed from step' line comes after the banner (line $r, banner at line $b)"
else bad "'resumed from step' at line '$r', the banner at line '$b'"; fi
if ! grep -q "^note: resume" "$tmp/same.out"; then ok "a resume with the saved run's flags prints no note"
else bad "a resume with the same flags printed: $(grep "^note: resume" "$tmp/same.out")"; fi
resume_dir horizon
if train horizon 2 -b 2 -z 3 -x 12 -o "$tmp/horizon" -y 1; then
  line=$(grep "^note: resume: the lr schedule changes" "$tmp/horizon.out")
  # the cosine of llmc/schedulers.h: warmup 2, then lr 3e-3 down to 0.1 x lr at the last step
  want=$($PY - <<'PY'
import math
def lr(step, warm, total, peak=3e-3, frac=0.1):
    if step < warm: return peak * (step + 1) / warm
    d = (step - warm) / max(1, total - warm)
    return peak * (frac + (1 - frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, d))))
print("step 6 gets lr %.2e (the saved run's schedule would give %.2e)" % (lr(5, 2, 12), lr(5, 2, 10)))
PY
)
  if echo "$line" | grep -q -- "-x 10 -u 2 -l 0.003 -q 0.1, this one has -x 12" && echo "$line" | grep -qF "$want"; then ok "-x 12 after -x 10: $line"
  else bad "-x 12 after -x 10: '$line' (want '... $want')"; fi
else bad "resume with -x 12 did not run"; fi
resume_dir batch
if train batch 2 -b 2 -z 3 -x 10 -d 384 -o "$tmp/batch" -y 1 &&
   grep -q "^note: resume: the global batch changes from 192 tokens per step (12 sequences of T=16) to 384 (24 sequences of T=16: 2 ranks x B=2 x 6 micro-steps)" "$tmp/batch.out"
then ok "-d 384 after -d 192: $(grep "^note: resume: the global batch" "$tmp/batch.out" | cut -c1-110)..."
else bad "-d 384 after -d 192: $(grep "^note" "$tmp/batch.out")"; fi

# 8. the state's bytes do not depend on the stage or the rank count
if train st0 2 -b 2 -d 64 -z 0 -x 5 -o "$tmp/st0" && train st3 2 -b 2 -d 64 -z 3 -x 5 -o "$tmp/st3" &&
   train st3a 2 -b 2 -z 3 -x 5 -o "$tmp/st3a" && train st3r 3 -b 2 -z 3 -x 5 -o "$tmp/st3r"; then
  if cmp -s "$tmp/st0/state_00000005.bin" "$tmp/st3/state_00000005.bin" && cmp -s "$tmp/st0/model_00000005.bin" "$tmp/st3/model_00000005.bin"
  then ok "stages 0 and 3 on 2 ranks: model_00000005.bin and state_00000005.bin byte-identical"
  else bad "stages 0 and 3 on 2 ranks: $(cmp "$tmp/st0/state_00000005.bin" "$tmp/st3/state_00000005.bin" 2>&1 | head -1)"; fi
  if cmp -s -n 1024 "$tmp/st3a/state_00000005.bin" "$tmp/st3r/state_00000005.bin"
  then ok "2 and 3 ranks with the same global batch: the same 1024-byte state header (m, v differ only in the sums' last bits)"
  else bad "2 and 3 ranks: state headers differ: $(cmp -n 1024 "$tmp/st3a/state_00000005.bin" "$tmp/st3r/state_00000005.bin" 2>&1)"; fi
else bad "the stage-independence runs did not run"; fi

# 5. fresh start, and errors
mkdir -p "$tmp/empty"
if train fresh 1 -b 4 -x 1 -o "$tmp/empty" -y 1 && grep -q "^resume: no complete checkpoint .* starting fresh" "$tmp/fresh.out" \
   && [ "$(grep -c "^resume" "$tmp/fresh.out")" = 1 ]; then ok "-y 1 with an empty -o dir starts fresh, saying so on one line"
else bad "-y 1 with an empty -o dir"; fi

# -y 1 without -e and the size flags: the sizes come from the checkpoint it
# resumes, and the run is the one with them, bit for bit; -e FILE with a
# fresh -o is the init, as without -y 1 (a requeued job's first start)
resume_dir noe
NOMODEL=${COMMON/-e d2 --channels 64 --heads 2 --max-seq-len 64 /}
if [ "$NOMODEL" != "$COMMON" ] && LLMC_LOG_POSITIONS=0 timeout 300 $MPIRUN -np 2 "$TRAIN" $NOMODEL -b 2 -z 3 -x 10 -o "$tmp/noe" -y 1 > "$tmp/noe.out" 2>&1 \
   && grep -q "^model: L=2 NH=2 C=64 maxT=64 .*init from the resumed checkpoint" "$tmp/noe.out" && cmp -s "$tmp/ref/model_00000010.bin" "$tmp/noe/model_00000010.bin" \
   && cmp -s "$tmp/ref/state_00000010.bin" "$tmp/noe/state_00000010.bin"; then ok "-y 1 without -e or size flags: the model's sizes from model_00000005.bin, model and state at step 10 byte-identical to the uninterrupted run's"
else bad "-y 1 without -e: $(grep -E '^(error|model)' "$tmp/noe.out" | head -2)"; fi
mkdir -p "$tmp/efresh"
if train efresh 2 -b 2 -z 3 -x 6 -o "$tmp/efresh" -y 1 -e "$tmp/ref/model_00000005.bin" && grep -q "^resume: no complete checkpoint .* starting fresh" "$tmp/efresh.out" \
   && grep -q "^model: .*init $tmp/ref/model_00000005.bin" "$tmp/efresh.out"; then ok "-y 1 -e FILE with no checkpoint in -o yet: starts from FILE (a requeued job's first start)"
else bad "-y 1 -e FILE with an empty -o: $(grep -E '^(error|model|resume)' "$tmp/efresh.out" "$tmp/efresh.err" | head -3)"; fi

err_case() { # name np expect-regex setup-python args...
  local name=$1 np=$2 re=$3 setup=$4; shift 4
  resume_dir "e_$name"
  [ -n "$setup" ] && $PY -c "import numpy as np; p='$tmp/e_$name/state_00000005.bin'; raw=bytearray(open(p,'rb').read()); $setup; open(p,'wb').write(raw)"
  LLMC_LOG_POSITIONS=0 timeout 120 $MPIRUN -np "$np" "$TRAIN" $COMMON -b 2 -o "$tmp/e_$name" -y 1 "$@" > "$tmp/e_$name.out" 2> "$tmp/e_$name.err"
  local rc=$? n=$(grep -c "^error" "$tmp/e_$name.err") line=$(grep "^error" "$tmp/e_$name.err" | head -1)
  if [ $rc -eq 1 ] && [ "$n" = 1 ] && echo "$line" | grep -Eq "$re" && ! grep -q "^step " "$tmp/e_$name.out"; then ok "$name: exit 1, one line: $line"
  else bad "$name: exit $rc, $n error lines (want 1 matching /$re/): $(head -c 300 "$tmp/e_$name.err")"; fi
}
err_case magic 2 "state .*state_00000005.bin: bad magic" "raw[0:8]=(7).to_bytes(8,'little')" -x 10
err_case truncated 2 "state .*: [0-9]+ bytes, but its header .* implies" "del raw[-4:]" -x 10
err_case config 2 "state .*: model config does not match the model: V=50256 in the state, 50257 in the model$" "raw[40:48]=(50256).to_bytes(8,'little')" -x 10
err_case ckpt_config 2 "^error: -y 1: .*/model_00000005.bin does not match the model: C=64 in the checkpoint, 128 in this run's model; leave out -e and the size flags" "" -x 10 --channels 128
err_case e_file 2 "^error: -y 1 -e .*/ref/model_00000005.bin: -o .*/e_e_file holds the checkpoint .*/e_e_file/model_00000005.bin, which -y 1 continues from .*so -e would be ignored: leave out -e to resume it" "" -x 10 -e "$tmp/ref/model_00000005.bin"
err_case nan 2 "state .*: adam m of tensor .* is nan" "raw[1024+40:1024+44]=np.float32('nan').tobytes()" -x 10
err_case version 1 "unsupported version" "raw[8:16]=(9).to_bytes(8,'little')" -x 10 -b 4
err_case beyond 2 "step 5, beyond -x 3" "" -x 3
err_case otherdata 2 "saved for train data of 1731 tokens in 3 shard" "" -x 10 -i data/brown/brown_train_000000.bin
timeout 60 $MPIRUN -np 2 "$TRAIN" -y 1 -x 1 -s 0 -v 0 > "$tmp/noo.out" 2> "$tmp/noo.err"
if [ $? -eq 1 ] && [ "$(grep -c "^error" "$tmp/noo.err")" = 1 ] && grep -q "^error: -y 1: resuming needs -o" "$tmp/noo.err"; then ok "-y 1 without -o: exit 1, one line"
else bad "-y 1 without -o: $(cat "$tmp/noo.err" | head -3)"; fi

summary
