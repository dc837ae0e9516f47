#!/usr/bin/env bash
# tests/suites/offload.sh: the optimizer offloaded to disk (--offload-optimizer
# disk:DIR, llmc/offload.h and the offload part of llmc/zero.h) changes where
# master, m and v live, never a number.
#  1. bitwise: for N = 1..4 ranks and zero_stage 1, 2, 3 (N=2: 2 micro-steps
#     of grad accumulation), the same 4 training steps with and without
#     offload print the same losses, lr and grad norms, and write
#     byte-identical checkpoints and training states at steps 2 and 4 (md5);
#     every offloaded run's ledger (backend memory and disk tier, the disk
#     total equal to the scratch file's fstat size), collective traffic and
#     bytes between tiers (2 x 8 Psi/N per step in fp32: m and v read and
#     written once) match the plan (the trainer exits 2 otherwise); the
#     scratch directory is empty afterwards (the files are unlinked at once).
#  2. the PyTorch reference (test_gpt_cpu, odd config): with offload on 3 ranks
#     at stage 1 and 2 ranks at stage 3 with 2 micro-steps, every check passes
#     and the 10 AdamW losses are identical to the run without offload.
#  3. resume across offload on/off (N=2 stage 3, N=3 stage 1): the step-2
#     files of the offloaded run resumed without offload, and those of the
#     plain run resumed with offload, give the uninterrupted plain run's step-4
#     checkpoint and state byte for byte, and its losses of steps 3-4.
#  4. faults, each ONE "error:" line and exit 1 on every rank before any
#     step: stage 0 with offload, bad flag values ('host' on the CPU build,
#     'disk:' without DIR, 'ram'), DIR missing, DIR a regular file; where
#     mount(2) is allowed: a 256 KiB tmpfs (names DIR and the bytes needed), a
#     tmpfs with room for one rank's file but not for the two ranks' (names
#     their total), a read-only tmpfs; and a tmpfs of 2.2 x one file where
#     2 ranks train, bitwise as in memory.
#  5. a rank killed: LLMC_TEST_DIE_IN_SAVE=4 makes rank 1 die while writing
#     state_00000004.bin.tmp of an offloaded run: the step-2 checkpoint stays
#     complete, no state_00000004.bin appears, DIR holds no scratch file, and
#     -y 1 with offload resumes from step 2 to the same step-4 files as the
#     uninterrupted run; kill -9 of rank 0 during offloaded training leaves
#     DIR empty.
# Tiny runs (2 layers, 64 channels, vocabulary 1001 in 8 chunks of 128 rows,
# so 11 units stream through the double buffer), OMP_NUM_THREADS=1.
# Usage: bash tests/suites/offload.sh   (TRAIN_GPT / TEST_GPT: other binaries;
# KEEP=1 keeps the temporary directory). Last line: "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
TRAIN=${TRAIN_GPT:-./train_gpt_cpu}
TEST=${TEST_GPT:-./test_gpt_cpu}
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
cleanup() { for m in "$tmp"/mnt*; do umount "$m" 2>/dev/null; done; rm -rf "$tmp"; }
[ -n "${KEEP:-}" ] && echo "keeping $tmp" || trap cleanup EXIT
for f in "$TRAIN" "$TEST" data/brown/brown_train_000000.bin data/ref/odd_model.bin; do
  [ -e "$f" ] || { echo "missing $f (make all; make data ref)"; echo "0 passed, 1 failed"; exit 1; }
done

# token ids < 1001 from the Brown train shard
/usr/bin/python3 - "$tmp/ids.bin" <<'PY'
import sys, numpy as np
src = np.fromfile("data/brown/brown_train_000000.bin", dtype="<u2", offset=1024)[:40000]
h = np.zeros(256, "<i4"); h[0] = 20240520; h[1] = 1; h[2] = len(src)
open(sys.argv[1], "wb").write(h.tobytes() + (src % 1001).astype("<u2").tobytes())
PY
SCR=$tmp/scratch; mkdir -p "$SCR"
COMMON="-i $tmp/ids.bin -e d2 --channels 64 --heads 2 --max-seq-len 64 --vocab 1001 --vocab-chunk 128 -t 32 -v 0 -s 0 -l 3e-3 -u 2 -n 2"

run() { # name np args... (output in $tmp/name.out, -o $tmp/name)
  local name=$1 np=$2; shift 2
  timeout 120 $MPIRUN -np "$np" "$TRAIN" $COMMON -o "$tmp/$name" "$@" > "$tmp/$name.out" 2>&1
}
steps() { grep "^step" "$1" | cut -d'|' -f1-4; }   # step, loss, lr, norm (not the timings)
same_files() { # dirA dirB files...: md5 equal
  local a=$1 b=$2 f; shift 2
  for f in "$@"; do
    [ -f "$a/$f" ] && [ -f "$b/$f" ] && [ "$(md5sum < "$a/$f")" = "$(md5sum < "$b/$f")" ] || return 1
  done
}
FILES="model_00000002.bin state_00000002.bin model_00000004.bin state_00000004.bin"

# 1. bitwise, N = 1..4, stages 1-3
for n in 1 2 3 4; do
  for z in 1 2 3; do
    batch="-b 2"; [ $n = 2 ] && batch="-b 1 -d 128"   # N=2: 2 micro-steps
    name=n${n}z$z
    run $name $n $batch -z $z -x 4; rc1=$?
    run ${name}off $n $batch -z $z -x 4 --offload-optimizer "disk:$SCR"; rc2=$?
    left=$(ls -A "$SCR")
    if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -n "$(steps "$tmp/$name.out")" ] && [ "$(steps "$tmp/$name.out")" = "$(steps "$tmp/${name}off.out")" ] \
       && same_files "$tmp/$name" "$tmp/${name}off" $FILES && grep -q "ledger: OK (allocated == predicted in every category and tier)" "$tmp/${name}off.out" \
       && grep -q "offload traffic: OK" "$tmp/${name}off.out" && [ -z "$left" ]; then
      io=$(grep -m1 "disk -> memory" "$tmp/${name}off.out" | awk '{print $7}')
      ok "N=$n stage $z: offloaded = in memory, bit for bit (4 losses, checkpoints and states md5); ledger, traffic and $io B/step read+written per way match the plan"
    else
      bad "N=$n stage $z: exit $rc1/$rc2, scratch left: '$left'"; diff <(steps "$tmp/$name.out") <(steps "$tmp/${name}off.out") | head -4
      grep -E "ERROR|error" "$tmp/${name}off.out" | head -4
    fi
  done
done
# the per-step disk bytes are 4 x 2 arrays x the own shard (fp32: m, v), from the plan's padded shard
psi_shard=$(grep -m1 "memory ledger" "$tmp/n3z2off.out" | sed -n 's/.*padded, \([0-9]*\) per shard.*/\1/p')
per=$(grep -m1 "disk -> memory" "$tmp/n3z2off.out" | awk '{print $7}')
if [ -n "$psi_shard" ] && [ "$per" = $((8 * psi_shard)) ]; then ok "N=3 stage 2: disk read per step = 8 x $psi_shard own elements = $per B"
else bad "N=3 stage 2: disk read per step $per, expected 8 x '$psi_shard'"; fi

# 2. the PyTorch reference with offload
ref() { # name np args...
  local name=$1 np=$2; shift 2
  timeout 120 $MPIRUN -np "$np" "$TEST" -e data/ref/odd_model.bin -s data/ref/odd_debug_state.bin --losses-out "$tmp/$name.losses" "$@" > "$tmp/$name.ref" 2>&1
}
for cfg in "3 -z 1" "2 -z 3 --accum 2"; do
  np=${cfg%% *}; args=${cfg#* }
  ref plain $np $args; rc1=$?
  ref off $np $args --offload-optimizer "disk:$SCR"; rc2=$?
  if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && grep -q "OK   offload traffic" "$tmp/off.ref" && grep -q " 0 failed" "$tmp/off.ref" \
     && cmp -s "$tmp/plain.losses" "$tmp/off.losses"; then
    ok "test_gpt_cpu -np $np $args with offload: $(tail -1 "$tmp/off.ref"), the 10 AdamW losses equal the run without offload"
  else bad "test_gpt_cpu -np $np $args with offload: exit $rc1/$rc2"; grep -E "FAIL|error" "$tmp/off.ref" | head -5; fi
done

# 3. resume across offload on/off
resume() { # name np src_dir flags...: copy the step-2 files of src_dir, -y 1 to step 4
  local name=$1 np=$2 src=$3; shift 3
  mkdir -p "$tmp/$name"; cp "$src/model_00000002.bin" "$src/state_00000002.bin" "$tmp/$name/"
  run $name $np -x 4 -y 1 "$@"
}
for cfg in "2 3 n2z3" "3 1 n3z1"; do
  set -- $cfg; np=$1; z=$2; base=$3
  batch="-b 2"; [ $np = 2 ] && batch="-b 1 -d 128"
  for dir in off_to_plain plain_to_off; do
    if [ $dir = off_to_plain ]; then resume r_${base}_$dir $np "$tmp/${base}off" $batch -z $z; rc=$?
    else resume r_${base}_$dir $np "$tmp/$base" $batch -z $z --offload-optimizer "disk:$SCR"; rc=$?; fi
    want=$(steps "$tmp/$base.out" | grep -E "^step +[34]/")
    if [ $rc -eq 0 ] && grep -q "^resumed from step 2" "$tmp/r_${base}_$dir.out" && [ -n "$want" ] && [ "$(steps "$tmp/r_${base}_$dir.out")" = "$want" ] \
       && same_files "$tmp/$base" "$tmp/r_${base}_$dir" model_00000004.bin state_00000004.bin; then
      ok "N=$np stage $z, ${dir//_/ }: resumed at step 2, steps 3-4 and the step-4 files equal the uninterrupted plain run"
    else bad "N=$np stage $z ${dir//_/ }: exit $rc"; diff <(echo "$want") <(steps "$tmp/r_${base}_$dir.out") | head -4; fi
  done
done

# 4. faults before training: one error line, exit 1, no step
expect_error() { # description np pattern args...
  local what=$1 np=$2 pat=$3; shift 3
  timeout 60 $MPIRUN -np "$np" "$TRAIN" $COMMON -b 2 -x 2 -o "$tmp/fault" "$@" > "$tmp/fault.out" 2> "$tmp/fault.err"
  local rc=$? n line
  n=$(grep -c "^error" "$tmp/fault.err"); line=$(grep "^error" "$tmp/fault.err" | head -1)
  if [ $rc -eq 1 ] && [ "$n" = 1 ] && echo "$line" | grep -q -- "$pat" && ! grep -q "^step " "$tmp/fault.out"; then ok "$what (np $np): $line"
  else bad "$what (np $np): exit $rc, $n error lines: $(head -c 300 "$tmp/fault.err")"; fi
}
expect_error "stage 0 refused" 2 "needs -z 1, 2 or 3" -z 0 --offload-optimizer "disk:$SCR"
expect_error "'host' on the CPU build" 1 "'host' is for the CUDA build" -z 1 --offload-optimizer host
expect_error "disk: without DIR" 1 "must be none, disk:DIR" -z 1 --offload-optimizer disk:
expect_error "unknown value" 1 "must be none, disk:DIR" -z 1 --offload-optimizer ram
expect_error "DIR missing" 2 "disk:$tmp/no/such/dir: No such file or directory" -z 2 --offload-optimizer "disk:$tmp/no/such/dir"
echo x > "$tmp/afile"
expect_error "DIR a regular file" 2 "disk:$tmp/afile: not a directory" -z 2 --offload-optimizer "disk:$tmp/afile"
ls -A "$tmp/fault" 2>/dev/null | grep -q . && bad "a refused run wrote into -o: $(ls "$tmp/fault")"

# per-rank disk bytes of the fault config at stage 1 on 2 ranks (from a run that works)
need=$(grep -m1 "fstat size" "$tmp/n2z1off.out" | sed -n 's/.*fstat size \([0-9]*\) B.*/\1/p')
mkdir -p "$tmp/mnt1"
if [ -n "$need" ] && mount -t tmpfs -o size=256k tmpfs "$tmp/mnt1" 2>/dev/null; then
  expect_error "tmpfs of 256 KiB" 2 "disk:$tmp/mnt1: the optimizer states need $((2 * need)) bytes there (2 rank(s) on this node x $need bytes" \
    -z 1 -b 1 -d 128 --offload-optimizer "disk:$tmp/mnt1"
  umount "$tmp/mnt1"
  # room for one rank's file but not for two
  kb=$(( (need * 3 / 2 + 4095) / 4096 * 4 ))
  mount -t tmpfs -o size=${kb}k tmpfs "$tmp/mnt1"
  expect_error "tmpfs of $kb KiB (one file fits, two do not)" 2 "x $need bytes" -z 1 -b 1 -d 128 --offload-optimizer "disk:$tmp/mnt1"
  umount "$tmp/mnt1"
  kb=$(( (need * 11 / 5 + 4095) / 4096 * 4 ))   # 2.2 x need: both files fit
  mount -t tmpfs -o size=${kb}k tmpfs "$tmp/mnt1"
  if run two_ranks 2 -b 1 -d 128 -z 1 -x 4 --offload-optimizer "disk:$tmp/mnt1" && same_files "$tmp/n2z1" "$tmp/two_ranks" $FILES; then
    ok "a tmpfs of $kb KiB holds both ranks' files: 2 ranks train on it, bitwise as in memory"
  else bad "2 ranks on the $kb KiB tmpfs: exit $?, $(grep "^error" "$tmp/two_ranks.out")"; fi
  umount "$tmp/mnt1"
  mount -t tmpfs -o size=64m,ro tmpfs "$tmp/mnt1"
  expect_error "read-only tmpfs" 2 "disk:$tmp/mnt1: cannot create the scratch file $tmp/mnt1/optim_rank[01].bin (Read-only file system)" \
    -z 3 --offload-optimizer "disk:$tmp/mnt1"
  umount "$tmp/mnt1"
else
  echo "note: mount(2) not permitted here (or no size measured); the tmpfs cases are skipped"
fi

# 5. a rank dies: in the middle of a save, and by kill -9 during training
D=$tmp/die
LLMC_TEST_DIE_IN_SAVE=4 run die 2 -b 1 -d 128 -z 3 -x 4 --offload-optimizer "disk:$SCR"; rc=$?
left=$(ls -A "$SCR")
if [ $rc -ne 0 ] && grep -q "rank 1 exits while writing .*state_00000004.bin.tmp" "$tmp/die.out" && [ -z "$left" ] \
   && same_files "$tmp/n2z3" "$D" model_00000002.bin state_00000002.bin && [ ! -e "$D/state_00000004.bin" ]; then
  ok "rank 1 died writing state_00000004.bin.tmp of an offloaded run: exit $rc, step-2 files intact (md5 = uninterrupted run), no scratch file left"
else bad "die in save with offload: exit $rc, scratch left '$left', files: $(ls "$D" 2>/dev/null | tr '\n' ' ')"; fi
timeout 120 $MPIRUN -np 2 "$TRAIN" $COMMON -o "$D" -b 1 -d 128 -z 3 -x 4 -y 1 --offload-optimizer "disk:$SCR" > "$tmp/die2.out" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "^resumed from step 2" "$tmp/die2.out" && same_files "$tmp/n2z3" "$D" model_00000004.bin state_00000004.bin; then
  ok "-y 1 with offload after the death resumed from step 2; the step-4 files equal the uninterrupted run's"
else bad "-y 1 after the death in save: exit $rc: $(grep -E "^error|^resum" "$tmp/die2.out")"; fi

descendants() { local p; for p in $(pgrep -P "$1"); do echo $p; descendants $p; done; }
rank_pid() { local p; for p in $(descendants "$1"); do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo $p; return; }; done; }
$MPIRUN -np 2 "$TRAIN" $COMMON -b 2 -z 2 -x 100000 -n 0 --offload-optimizer "disk:$SCR" > "$tmp/kill.out" 2>&1 &
mp=$!; t=0
while ! grep -q "^step    3/" "$tmp/kill.out" 2>/dev/null && [ $t -lt 600 ] && kill -0 $mp 2>/dev/null; do sleep 0.1; t=$((t+1)); done
during=$(ls -A "$SCR"); fds=$(ls -l /proc/$(rank_pid $mp 0)/fd 2>/dev/null | grep -c "optim_rank0.bin (deleted)")
vp=$(rank_pid $mp 0)
if [ -n "$vp" ]; then kill -9 "$vp"; fi
w=0; while kill -0 $mp 2>/dev/null && [ $w -lt 300 ]; do sleep 0.1; w=$((w+1)); done
kill -0 $mp 2>/dev/null && { kill -9 $mp; bad "kill -9 of rank 0: mpirun still running after 30 s"; }
wait $mp; rc=$?
if [ -n "$vp" ] && [ $rc -ne 0 ] && [ -z "$during" ] && [ "$fds" = 1 ] && [ -z "$(ls -A "$SCR")" ]; then
  ok "kill -9 of rank 0 during offloaded training: exit $rc; DIR was empty while training (rank 0 held optim_rank0.bin open, deleted) and is empty after"
else bad "kill -9 during offloaded training: pid '$vp', exit $rc, DIR during '$during' after '$(ls -A "$SCR")', open deleted files $fds"; fi

summary
