#!/usr/bin/env bash
# tests/suites/faults.sh: failures end every rank cleanly and never cost the last
# good checkpoint (docs/design.md section 7, the error contract; llmc/state.h, llmc/checkpoint.h).
#  1. a rank killed: kill -9 of one rank's pid during training (rank 1 of 3,
#     rank 0 of 2) ends every rank within 30 s, mpirun exits non-zero and its
#     output names the rank that died.
#  2. a rank dying while writing a checkpoint (LLMC_TEST_DIE_IN_SAVE=10: rank
#     1 _exits in the middle of writing state_00000010.bin.tmp): every rank
#     ends, the output names rank 1, state_00000010.bin does not exist, the
#     step-5 checkpoint is untouched and -y 1 resumes from step 5 (ignoring
#     model_00000010.bin without its state, the partial .tmp, stray
#     *.tmp files and a state without its model) and reproduces the losses of
#     steps 6-10 that the dead run printed, bit for bit.
#  3. an unwritable -o (a regular file, a path under a regular file, a
#     directory that cannot be created) gives exit 1 and ONE "error:" line
#     naming -o before any training step, with 1 and 2 ranks.
#  4. a full disk at save time (ulimit -f in a subshell; the trainer ignores
#     SIGXFSZ, so the write fails with EFBIG): with a limit between the model
#     and the state file size the state write fails, with a smaller one the
#     model write fails; either way exit 1, one "error:" line saying "File too
#     large", no .tmp left, the step-5 files unchanged (md5), and -y 1 then
#     resumes from step 5; a failed state write removes the model of its
#     step, written just before (only whole pairs stay); ENOSPC in the
#     middle of the state's writes (tests/shims/fs_faults.c, an LD_PRELOAD
#     shim) the same. Where mount(2) is allowed, the same on a small
#     tmpfs that fills up (ENOSPC in the middle of the ranks' writes).
#  5. a collective timeout in a checkpoint write (rank 1 held in the write of
#     step 10 of a -y 1 run from step 5 by the test hook LLMC_TEST_SLOW=
#     checkpoint:12, then =state:12, --collective-timeout 4): rank 0's error names the write's completion
#     check, exit 1, and nothing half-written: no .tmp, no model_00000010.bin
#     without its state, the step-5 pair kept (docs/faults.md: exit 1 leaves
#     nothing half-written; before 2026-12-07 the .tmp stayed).
#  6. an MPI call that fails (test hook LLMC_TEST_MPI_ERROR=0:3: rank 0
#     sends to a rank that does not exist, MPI_ERR_RANK) ends as a failed
#     collective does (comm_mpi_error, llmc/comm_watch.h), not by Open MPI's
#     default handler (its message and the error code as the exit status:
#     exit 17, MPI_ERR_INTERN, came that way from a dead peer's socket under
#     load on 12-07): rank 0's one line names the call's error and the step,
#     mpirun exits 1, rank 0's flight record gives the reason "MPI error".
# Usage: bash tests/suites/faults.sh   (TRAIN_GPT=path to test another binary;
# KEEP=1 keeps the temporary directory). Last line: "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
TRAIN=${TRAIN_GPT:-./train_gpt_cpu}
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); [ -n "${KEEP:-}" ] && echo "keeping $tmp" || trap 'umount "$tmp/small" 2>/dev/null; rm -rf "$tmp"' EXIT
[ -e "$TRAIN" ] && [ -e data/brown/brown_train_000000.bin ] || { echo "missing $TRAIN or data (make all; bash dev/data/prepare.sh)"; echo "0 passed, 1 failed"; exit 1; }
TINY="-e d2 --channels 64 --heads 2 --max-seq-len 64 -b 2 -t 32 -v 0 -s 0 -l 3e-3 -u 2"

# the processes under mpirun $1 (children and theirs: Open MPI 5 puts prted between)
descendants() { local p; for p in $(pgrep -P "$1"); do echo $p; descendants $p; done; }
# the pid of rank r among them (Open MPI sets OMPI_COMM_WORLD_RANK in each rank's environment)
rank_pid() {
  local p
  for p in $(descendants "$1"); do
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo $p; return; }
  done
}

# 1. a rank killed during training
kill_case() { # np victim
  local np=$1 victim=$2 out=$tmp/kill_$1_$2.out
  $MPIRUN -np "$np" "$TRAIN" $TINY -x 100000 > "$out" 2>&1 &
  local mp=$! t=0
  while ! grep -q "^step    3/" "$out" 2>/dev/null; do
    sleep 0.2; t=$((t+1)); if [ $t -gt 600 ] || ! kill -0 $mp 2>/dev/null; then break; fi
  done
  local pids=$(descendants $mp | tr '\n' ' ') vp=$(rank_pid $mp "$victim")
  if [ -z "$vp" ]; then bad "kill: no rank $victim found under mpirun $mp"; kill $mp 2>/dev/null; wait $mp; return; fi
  local t0=$(date +%s%N)
  kill -9 "$vp"
  local waited=0
  while kill -0 $mp 2>/dev/null && [ $waited -lt 300 ]; do sleep 0.1; waited=$((waited+1)); done
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if kill -0 $mp 2>/dev/null; then bad "kill -9 of rank $victim of $np: mpirun still running after 30 s"; kill -9 $mp $pids 2>/dev/null; wait $mp; return; fi
  wait $mp; local rc=$?
  local left=""; for p in $pids; do kill -0 $p 2>/dev/null && [ "$(cat /proc/$p/stat 2>/dev/null | awk '{print $3}')" != Z ] && left="$left $p"; done
  if [ $rc -ne 0 ] && [ -z "$left" ] && grep -q "process rank $victim .*exited on signal 9" "$out"; then
    ok "kill -9 of rank $victim of $np during training: all ranks ended in $ms ms, exit $rc, output names it: $(grep -o "process rank $victim .*exited on signal 9[^.]*" "$out" | head -1)"
  else bad "kill -9 of rank $victim of $np: exit $rc, ranks left: '$left', $(grep -i "rank" "$out" | tail -2)"; fi
}
kill_case 3 1
kill_case 2 0

# 2. a rank dies while writing the state at step 10
D=$tmp/die
LLMC_TEST_DIE_IN_SAVE=10 timeout 300 $MPIRUN -np 2 "$TRAIN" $TINY -z 1 -n 5 -x 10 -o "$D" > "$tmp/die.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "rank 1 exits while writing .*state_00000010.bin.tmp" "$tmp/die.out" && grep -Eq "(rank 1|\[\[[0-9]+,1\],1\])" <(grep -v "test hook" "$tmp/die.out") \
   && [ -f "$D/model_00000005.bin" ] && [ -f "$D/state_00000005.bin" ] && [ -f "$D/model_00000010.bin" ] && [ ! -e "$D/state_00000010.bin" ]; then
  ok "rank 1 died writing state_00000010.bin.tmp: exit $rc, mpirun names it, only step 5 is complete ($(ls "$D" | tr '\n' ' '))"
else bad "die in save: exit $rc, files: $(ls "$D" 2>/dev/null | tr '\n' ' ')"; tail -n 5 "$tmp/die.out"; fi
md5_5=$(cat "$D/model_00000005.bin" "$D/state_00000005.bin" | md5sum)
head -c 5000 /dev/urandom > "$D/model_00000015.bin.tmp"; cp "$D/model_00000005.bin" "$D/state_00000020.bin.tmp"
cp "$D/state_00000005.bin" "$D/state_00000012.bin"   # a state without its model: ignored
timeout 300 $MPIRUN -np 2 "$TRAIN" $TINY -z 1 -n 5 -x 10 -o "$D" -y 1 > "$tmp/die2.out" 2>&1
rc=$?
a=$(grep -E "^step +(6|7|8|9|10)/10 " "$tmp/die.out" | awk '{print $2, $5}')
b=$(grep -E "^step +[0-9]+/10 " "$tmp/die2.out" | awk '{print $2, $5}')
if [ $rc -eq 0 ] && grep -q "^resumed from step 5" "$tmp/die2.out" && [ -n "$a" ] && [ "$a" = "$b" ] && [ -f "$D/state_00000010.bin" ] && [ ! -e "$D/state_00000010.bin.tmp" ]; then
  ok "-y 1 after the crash resumed from step 5 and reproduced the losses of steps 6-10 exactly"
else bad "-y 1 after the crash: exit $rc; $(grep -E "^resum|^error" "$tmp/die2.out")"; diff <(echo "$a") <(echo "$b") | head -6; fi

# 3. unwritable -o
echo "not a directory" > "$tmp/afile"
for np in 1 2; do
  for o in "$tmp/afile" "$tmp/afile/sub" "/proc/llmc_no_such_dir"; do
    timeout 60 $MPIRUN -np $np "$TRAIN" $TINY -x 2 -o "$o" > "$tmp/unw.out" 2> "$tmp/unw.err"
    rc=$?; n=$(grep -c "^error" "$tmp/unw.err"); line=$(grep "^error" "$tmp/unw.err" | head -1)
    if [ $rc -eq 1 ] && [ "$n" = 1 ] && echo "$line" | grep -q "^error: -o $o" && ! grep -q "^step " "$tmp/unw.out"; then ok "np $np -o $o: exit 1 before training: $line"
    else bad "np $np -o $o: exit $rc, $n error lines: $(head -c 300 "$tmp/unw.err")"; fi
  done
  # missing parents are created (mkdir -p), as a user expects
  o="$tmp/no$np/such/parent"
  timeout 60 $MPIRUN -np $np "$TRAIN" $TINY -x 2 -o "$o" > "$tmp/unw.out" 2> "$tmp/unw.err"
  rc=$?
  if [ $rc -eq 0 ] && [ -s "$o/model_00000002.bin" ]; then ok "np $np -o $o (missing parents): created, model_00000002.bin written"
  else bad "np $np -o $o: exit $rc: $(head -c 300 "$tmp/unw.err")"; fi
done

# 4. full disk at save time: the model file is 13.3 MB, the state 26.6 MB
F=$tmp/full
timeout 300 $MPIRUN -np 2 "$TRAIN" $TINY -z 2 -n 5 -x 5 -o "$F" > "$tmp/full0.out" 2>&1 || bad "full disk: the first run failed"
md5_5=$(cat "$F/model_00000005.bin" "$F/state_00000005.bin" | md5sum)
for lim in 20000 8000; do
  what=state; [ $lim = 8000 ] && what=model
  ( ulimit -f $lim; timeout 300 $MPIRUN -np 2 "$TRAIN" $TINY -z 2 -n 5 -x 6 -o "$F" -y 1 > "$tmp/full.out" 2> "$tmp/full.err" ); rc=$?
  n=$(grep -c "^error" "$tmp/full.err"); line=$(grep "^error" "$tmp/full.err" | head -1)
  stray=$(ls "$F" | grep -E "\.tmp$|state_00000006|model_00000006")   # a failed state write takes its model with it (issue 49 item 17)
  if [ $rc -eq 1 ] && [ "$n" = 1 ] && echo "$line" | grep -q "$what.*File too large" && grep -q "^step    6/6" "$tmp/full.out" \
     && [ -z "$stray" ] && [ "$(cat "$F/model_00000005.bin" "$F/state_00000005.bin" | md5sum)" = "$md5_5" ]; then
    ok "ulimit -f $lim KB: the $what write fails at step 6 with one line: $line; step 5 intact"
  else bad "ulimit -f $lim: exit $rc, $n error lines: $(head -c 400 "$tmp/full.err"); files: $(ls "$F" | tr '\n' ' ')"; fi
  rm -f "$F/model_00000006.bin"
done
# 4a. ENOSPC in the middle of the state's pwrites (tests/shims/fs_faults.c fails every write to
# state_00000006.bin.tmp): one line, and the model of step 6, written already, is removed with it
gcc -shared -fPIC -O2 tests/shims/fs_faults.c -o "$tmp/fs_faults.so" -ldl || bad "cannot build tests/shims/fs_faults.c"
timeout 300 $MPIRUN -np 2 -x LD_PRELOAD="$tmp/fs_faults.so" -x LLMC_SHIM_ENOSPC=state_00000006.bin.tmp "$TRAIN" $TINY -z 2 -n 5 -x 6 -o "$F" -y 1 \
  > "$tmp/nospc.out" 2> "$tmp/nospc.err"; rc=$?
n=$(grep -c "^error" "$tmp/nospc.err"); line=$(grep "^error" "$tmp/nospc.err" | head -1)
stray=$(ls "$F" | grep -E "\.tmp$|state_00000006|model_00000006")
if [ $rc -eq 1 ] && [ "$n" = 1 ] && echo "$line" | grep -q "^error: writing state .*state_00000006.bin.tmp failed on rank [01] (No space left on device)$" \
   && grep -q "^wrote checkpoint .*model_00000006.bin" "$tmp/nospc.out" && [ -z "$stray" ] && [ "$(cat "$F/model_00000005.bin" "$F/state_00000005.bin" | md5sum)" = "$md5_5" ]; then
  ok "ENOSPC writing state_00000006.bin: one line ($line); model_00000006.bin, written before, removed with it: only whole pairs stay"
else bad "ENOSPC in the state write: exit $rc, $n error lines: $(head -c 400 "$tmp/nospc.err"); left: $stray"; fi
timeout 300 $MPIRUN -np 2 "$TRAIN" $TINY -z 2 -n 5 -x 6 -o "$F" -y 1 > "$tmp/full2.out" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "^resumed from step 5" "$tmp/full2.out" && [ -f "$F/state_00000006.bin" ]; then ok "after the full disk, -y 1 resumed from step 5 and saved step 6"
else bad "resume after the full disk: exit $rc $(grep -E "^error|^resum" "$tmp/full2.out")"; fi

# 4b. a really full file system (ENOSPC in the middle of the ranks' pwrites,
# not at rank 0's ftruncate): a private tmpfs of 45 or 60 MiB holding the
# step-5 files (38 MiB); then the model (12.7 MiB) or the state (25.4 MiB)
# of step 6 does not fit. Needs mount(2) (root with CAP_SYS_ADMIN); skipped
# with a note otherwise.
S=$tmp/small
mkdir -p "$S"
if mount -t tmpfs -o size=45m tmpfs "$S" 2>/dev/null; then
  umount "$S"
  for size in 60 45; do
    what=state; [ $size = 45 ] && what=checkpoint
    mount -t tmpfs -o size=${size}m tmpfs "$S"
    cp "$F/model_00000005.bin" "$F/state_00000005.bin" "$S/"
    timeout 300 $MPIRUN -np 2 "$TRAIN" $TINY -z 2 -n 5 -x 6 -o "$S" -y 1 > "$tmp/enospc.out" 2> "$tmp/enospc.err"; rc=$?
    n=$(grep -c "^error" "$tmp/enospc.err"); line=$(grep "^error" "$tmp/enospc.err" | head -1)
    stray=$(ls -a "$S" | grep -E "\.tmp$|state_00000006|model_00000006")
    md5=$(cat "$S/model_00000005.bin" "$S/state_00000005.bin" | md5sum)
    timeout 120 $MPIRUN -np 2 "$TRAIN" $TINY -z 2 -n 5 -x 5 -o "$S" -y 1 > "$tmp/enospc2.out" 2>&1; rc2=$?
    if [ $rc -eq 1 ] && [ "$n" = 1 ] && echo "$line" | grep -q "$what.*No space left on device" && [ -z "$stray" ] && [ "$md5" = "$md5_5" ] \
       && [ $rc2 -eq 0 ] && grep -q "^resumed from step 5" "$tmp/enospc2.out"; then
      ok "tmpfs of $size MiB: the $what write at step 6 fails with one line: $line; no .tmp left, step 5 intact and resumable"
    else bad "tmpfs of $size MiB: exit $rc, $n error lines: $(head -c 300 "$tmp/enospc.err"); left: $stray; resume exit $rc2"; fi
    umount "$S"
  done
else
  echo "note: mount(2) not permitted here; the ENOSPC cases are skipped (the ulimit -f cases above still run)"
fi

# 5. a collective timeout in a checkpoint write: rank 0 removes what the write left
for ph in checkpoint state; do
  C="$tmp/cto_$ph"
  # the step-5 pair first, then -y 1 with rank 1 held in its next write (step 10; the hook holds every write)
  timeout 120 $MPIRUN -np 2 "$TRAIN" $TINY -z 3 -n 5 -x 5 -o "$C" > "$tmp/cto_$ph.0.out" 2>&1 || bad "the run to step 5 before case 5 ($ph): exit $?"
  A=("$TRAIN" $TINY -z 3 -n 5 -x 12 --collective-timeout 4 -o "$C" -y 1)
  timeout 120 $MPIRUN -np 1 "${A[@]}" : -np 1 -x LLMC_TEST_SLOW=$ph:12 "${A[@]}" > "$tmp/cto_$ph.out" 2>&1; rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "^error (rank 0, node [^)]*): the checkpoint write's completion check .*(step 10) did not complete in 4 s" "$tmp/cto_$ph.out" \
     && ! ls "$C"/*.tmp* > /dev/null 2>&1 && [ ! -e "$C/model_00000010.bin" ] && [ ! -e "$C/state_00000010.bin" ] \
     && [ -s "$C/model_00000005.bin" ] && [ -s "$C/state_00000005.bin" ]; then
    ok "a collective timeout in the $ph write of step 10 (rank 1 held there): rank 0 names the completion check, exit $rc, no .tmp, no model 10 without its state, the step-5 pair kept"
  else bad "a collective timeout in the $ph write of step 10: exit $rc; left: $(ls "$C" | tr '\n' ' ')"; grep -m2 "^error" "$tmp/cto_$ph.out" | cut -c1-200; fi
done


# 6. an MPI call's error: the trainer's line and exit 1, not Open MPI's abort
M="$tmp/mpierr"
LLMC_TEST_MPI_ERROR=0:3 timeout 120 $MPIRUN -np 2 -x LLMC_TEST_MPI_ERROR "$TRAIN" $TINY -z 1 -x 6 -o "$M" > "$tmp/mpierr.out" 2>&1; rc=$?
line=$(grep -m1 "^error (rank 0" "$tmp/mpierr.out")
if [ $rc -eq 1 ] && echo "$line" | grep -q "^error (rank 0, node [^)]*): an MPI call (step 3) failed: MPI_ERR_RANK: invalid rank (MPI error [0-9]*)" \
   && ! grep -q "MPI_ERRORS_ARE_FATAL" "$tmp/mpierr.out" && python3 dev/flight.py "$M" 2>/dev/null | grep -q "rank 0: MPI error"; then
  ok "an MPI call's error (rank 0, MPI_ERR_RANK in step 3): exit 1, the trainer's line: ${line:0:160}; rank 0's flight record says 'MPI error'"
else bad "an MPI call's error: exit $rc, line '${line:0:200}'; Open MPI's own handler: $(grep -c MPI_ERRORS_ARE_FATAL "$tmp/mpierr.out") lines; flight: $(python3 dev/flight.py "$M" 2>&1 | head -1)"; fi

summary
