#!/usr/bin/env bash
# The trainer end to end on the Brown corpus shards (data/brown):
#  1. the same 8 sequences per step seen as 1 rank x B=8, 1 rank x B=4 x 2
#     micro-steps, 2 ranks x B=2 x 2 micro-steps at stages 0-3: the logged
#     train losses agree within 1e-5 relative, and every run's ledger and
#     traffic match the plan (the trainer exits 2 otherwise); the stage-3
#     traffic names how the blocks were gathered (reshard_after_forward 1 or 0);
#  2. the checkpoints these runs write agree, and are valid llm.c files
#     (header, exact size, read back by an independent Python reader);
#  3. a checkpoint loaded with -e reproduces the val loss it was saved with,
#     bit for bit, at the same rank count and stage;
#  4. a val split smaller than -m x B sequences is read once per evaluation
#     (the loss equals the one over its distinct sequences), and the run
#     says so;
#  5. --reshard-after-forward / --prefetch / --reshard-embedding given at
#     stages 0-2 warn, once each;
#  6. -o is locked: a second run into the -o of a live run is refused with
#     one line naming the holder's pid and host, before it writes anything;
#     after the holder is SIGKILLed the lock is gone (-y 1 resumes there);
#     --keep-checkpoints 2 with -n 1: only the newest two pairs stay, each
#     removal said; the checkpoint lines give their write times;
#  7. (issue 49) flock answering ENOSYS (Lustre noflock, an LD_PRELOAD shim:
#     tests/shims/fs_faults.c) runs unlocked with one note; a lock held by a
#     run on a lost host is refused naming the host, taken over with
#     --lock-takeover HOST (one line), and a lock from this host's earlier
#     boot is taken over unasked; a run that opened the lock file just
#     before its holder ended (and unlinked it) is refused by the run that
#     locked the new file, not let in beside it; --keep-checkpoints counts
#     complete model+state pairs only.
#  8. (issue 49 item 13) a fresh run (no -y 1) into an -o that holds
#     checkpoints is refused on 1 and 2 ranks with one line (exit 1, no step,
#     the old files and main.log unchanged); --overwrite 1 moves them (md5
#     equal) and main.log into -o/earlier_run_<date> with one line, and a
#     later -y 1 resumes the new run; --overwrite 1 with -y 1 is refused.
#  9. (issue 49 item 10) the start-up lines say how many tokens of each
#     shard an epoch skips (a step never crosses a shard) and count the
#     epochs over the tokens read, checked against the formula for shards of
#     1400, 1000 and 700 tokens at -d 512, in file order and shuffled.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
COMMON="-e d2 --channels 64 --heads 2 --max-seq-len 64 -t 32 -d 256 -x 6 -v 6 -m 2 -s 0 -l 3e-3 -u 2"

# 7. (issue 49) the lock where flock answers ENOSYS, after a lost node, against
# a run that opened the lock file just before its holder ended; --keep-checkpoints
# counts complete pairs only. TRAIN_GPT=path tests another binary here; ONLY=7
# runs only this section.
sec7() {
  local T=${TRAIN_GPT:-./train_gpt_cpu}
  local K=("$T" -i "data/brown/brown_train_*.bin" -v 0 -s 0 -e d2 --channels 64 --heads 2 --max-seq-len 64 -b 1 -t 32 --collective-timeout 240)
  gcc -shared -fPIC -O2 tests/shims/fs_faults.c -o "$tmp/fs_faults.so" -ldl || { bad "cannot build tests/shims/fs_faults.c"; return; }
  local out rc n
  # 7a. flock answers ENOSYS (Lustre mounted noflock): unlocked, with one note, on 2 ranks
  out=$(timeout 120 $MPIRUN -np 2 -x LD_PRELOAD="$tmp/fs_faults.so" -x LLMC_SHIM_FLOCK=ENOSYS "${K[@]}" -x 2 -o "$tmp/nosys" 2>&1); rc=$?
  n=$(grep -c "^note: -o $tmp/nosys: this file system does not lock files (Function not implemented): a second run into it would not be refused$" <<<"$out")
  if [ $rc = 0 ] && [ "$n" = 1 ] && [ -s "$tmp/nosys/model_00000002.bin" ] && [ -s "$tmp/nosys/state_00000002.bin" ]; then
    ok "flock answers ENOSYS: the run goes on unlocked with one note: $(grep "^note: -o" <<<"$out" | cut -c1-110)..."
  else bad "flock answers ENOSYS (exit $rc, $n notes): $(grep -m2 -E "^error|^note" <<<"$out")"; fi
  # 7b. a lock held by a run on a lost node (a shared file system keeps it): refused, naming the host;
  # --lock-takeover with that host takes it over with one line; a lock from this host's earlier boot is taken over unasked
  local D=$tmp/lost hold=
  hold_lock() { # dir line: a process that holds the flock of dir/.llmc.lock with that line in it, as a dead client's expiring lock does
    mkdir -p "$1"; printf '%s\n' "$2" > "$1/.llmc.lock"; rm -f "$tmp/held"
    /usr/bin/python3 -c 'import fcntl, sys, time; f = open(sys.argv[1], "a"); fcntl.flock(f, fcntl.LOCK_EX); open(sys.argv[2], "w").close(); time.sleep(600)' \
      "$1/.llmc.lock" "$tmp/held" & hold=$!
    for ((n = 0; n < 100; n++)); do [ -e "$tmp/held" ] && break; sleep 0.1; done
  }
  hold_lock "$D" "pid 4242 host lostnode7 boot 6c1b0c5e-0000-4000-8000-000000000000 since $(date +%s)"
  out=$(timeout 120 "${K[@]}" -x 2 -o "$D" 2>&1); rc=$?
  n=$(grep -c "^error: -o $D: another run is using it (pid 4242 on host lostnode7, since [-0-9: ]*): wait for it to end, stop it, or give another -o (a holder on a lost node: --lock-takeover that host)$" <<<"$out")
  if [ $rc = 1 ] && [ "$n" = 1 ] && [ ! -e "$D/main.log" ]; then ok "a lock held on host lostnode7: refused with one line naming it and --lock-takeover"
  else bad "a lock held on a lost host (exit $rc): $(grep -m2 -E "^error|^step" <<<"$out")"; fi
  out=$(timeout 120 "${K[@]}" -x 2 -o "$D" --lock-takeover node1,node2 2>&1); rc=$?
  [ $rc = 1 ] && grep -q "^error: -o $D: another run is using it (pid 4242 on host lostnode7" <<<"$out" && ok "--lock-takeover node1,node2 (not the holder's host): still refused" ||
    bad "--lock-takeover of other hosts (exit $rc): $(grep -m2 -E "^error|^-o|^step" <<<"$out")"
  out=$(timeout 120 "${K[@]}" -x 2 -o "$D" --lock-takeover node1,lostnode7 2>&1); rc=$?
  n=$(grep -c "^-o $D: its lock is held by pid 4242 on host lostnode7, a host given to --lock-takeover as gone: taking the lock over (the old lock file is removed)$" <<<"$out")
  if [ $rc = 0 ] && [ "$n" = 1 ] && [ -s "$D/state_00000002.bin" ] && [ ! -e "$D/.llmc.lock" ]; then ok "--lock-takeover node1,lostnode7: taken over with one line, trained 2 steps"
  else bad "--lock-takeover lostnode7 (exit $rc, $n lines): $(grep -m2 -E "^error|^-o" <<<"$out")"; fi
  kill $hold; wait $hold 2>/dev/null
  hold_lock "$tmp/reboot" "pid 4242 host $(hostname) boot 6c1b0c5e-0000-4000-8000-000000000000 since $(date +%s)"
  out=$(timeout 120 "${K[@]}" -x 2 -o "$tmp/reboot" 2>&1); rc=$?
  n=$(grep -c "^-o $tmp/reboot: its lock is held by pid 4242 on host $(hostname), this host before its last boot: taking the lock over (the old lock file is removed)$" <<<"$out")
  [ $rc = 0 ] && [ "$n" = 1 ] && ok "a lock of this host's earlier boot (another boot id): taken over with one line" ||
    bad "a lock from an earlier boot (exit $rc, $n lines): $(grep -m2 -E "^error|^-o" <<<"$out")"
  kill $hold; wait $hold 2>/dev/null
  # 7c. run B opens the lock file of a live run A, A ends (unlinking it), run C locks a new file, then B's
  # flock (held back by the shim) succeeds on A's unlinked file: B must find the path replaced and be refused by C
  D=$tmp/race
  "${K[@]}" -x 100000 -o "$D" > "$tmp/raceA.out" 2>&1 & local A=$!
  for ((n = 0; n < 1200; n++)); do grep -qE "^step +2/" "$tmp/raceA.out" 2>/dev/null && break; sleep 0.1; done
  LD_PRELOAD="$tmp/fs_faults.so" LLMC_SHIM_FLOCK_WAIT="$tmp/go" "${K[@]}" -x 100000 -y 1 -o "$D" > "$tmp/raceB.out" 2>&1 & local B=$!
  for ((n = 0; n < 1200; n++)); do [ -e "$tmp/go.waiting" ] && break; sleep 0.1; done
  kill -TERM $A; wait $A; local rcA=$? gone=yes
  [ -e "$D/.llmc.lock" ] && gone=no
  "${K[@]}" -x 100000 -y 1 -o "$D" > "$tmp/raceC.out" 2>&1 & local C=$!
  for ((n = 0; n < 1200; n++)); do grep -qE "^step +[0-9]+/" "$tmp/raceC.out" 2>/dev/null && break; sleep 0.1; done
  touch "$tmp/go"
  for ((n = 0; n < 600; n++)); do kill -0 $B 2>/dev/null || break; sleep 0.1; done
  local rcB=running
  if kill -0 $B 2>/dev/null; then kill -TERM $B; wait $B; else wait $B; rcB=$?; fi
  kill -TERM $C; wait $C
  local pidC=$(grep -o "^error: -o $D: another run is using it (pid [0-9]*" "$tmp/raceB.out" | grep -o "[0-9]*$")
  if [ "$gone" = yes ] && [ "$rcB" = 1 ] && [ "$pidC" = "$C" ] && ! grep -qE "^step +[0-9]+/" "$tmp/raceB.out"; then
    ok "a run that opened the lock file before its holder ended (exit $rcA, file unlinked) is refused by the run that locked the new file (pid $pidC)"
  else bad "lock race: A exit $rcA, its file unlinked: $gone; B: exit $rcB, steps $(grep -cE "^step +[0-9]+/" "$tmp/raceB.out"), $(grep -m1 "^error" "$tmp/raceB.out"); C pid $C"; fi
  # 7d. --keep-checkpoints 2 counts complete pairs only: lone files below the newest step (a SIGKILL between
  # the two writes, a removal cut short) are not among the 2
  D=$tmp/keep7
  out=$(timeout 120 $MPIRUN -np 2 "${K[@]}" -x 3 -n 1 -o "$D" 2>&1) || bad "keep7: the first run failed"
  cp "$D/state_00000003.bin" "$D/state_00000005.bin"; cp "$D/model_00000003.bin" "$D/model_00000004.bin"   # lone state 5, lone model 4
  out=$(timeout 120 $MPIRUN -np 2 "${K[@]}" -x 6 -n 3 --keep-checkpoints 2 -y 1 -o "$D" 2>&1); rc=$?
  local left=$(cd "$D" && ls model_* state_* | tr '\n' ' ')
  if [ $rc = 0 ] && [ "$left" = "model_00000003.bin model_00000004.bin model_00000006.bin state_00000003.bin state_00000005.bin state_00000006.bin " ] \
     && grep -q "^removed the checkpoints of steps 2, 1 (--keep-checkpoints 2: the newest 2 stay)$" <<<"$out"; then
    ok "--keep-checkpoints 2 with a lone model at step 4 and a lone state at 5: pairs 6 and 3 stay (2 resumable), steps 2, 1 removed"
  else bad "--keep-checkpoints counting lone files (exit $rc): left '$left'"; grep -E "^removed|^error|^resumed" <<<"$out"; fi
}
[ "${ONLY:-}" = 7 ] && { sec7; summary; exit $?; }

# 8. (issue 49 item 13) a fresh run into a used -o. ONLY=8 runs only this section; TRAIN_GPT=path tests another binary.
sec8() {
  local K=("${TRAIN_GPT:-./train_gpt_cpu}" -i "data/brown/brown_train_*.bin" -v 0 -s 0 -e d2 --channels 64 --heads 2 --max-seq-len 64 -b 1 -t 32 --collective-timeout 240)
  local D=$tmp/used out rc n np md5 md5log
  out=$(timeout 120 $MPIRUN -np 2 "${K[@]}" -x 3 -n 1 -o "$D" 2>&1) || { bad "used -o: the first run failed: $(grep -m1 error <<<"$out")"; return; }
  md5=$(cd "$D" && cat model_* state_* | md5sum); md5log=$(md5sum < "$D/main.log")
  for np in 1 2; do
    out=$(timeout 120 $MPIRUN -np $np "${K[@]}" -x 2 -o "$D" 2>&1); rc=$?
    n=$(grep -c "^error: -o $D holds checkpoints of an earlier run (6 files, steps 1 to 3): resume it with -y 1, give another -o, or start over with --overwrite 1 (moves them into a subfolder earlier_run_<date>)$" <<<"$out")
    if [ $rc = 1 ] && [ "$n" = 1 ] && [ "$(grep -c "^error" <<<"$out")" = 1 ] && ! grep -qE "^step +[0-9]+/" <<<"$out" \
       && [ "$(cd "$D" && cat model_* state_* | md5sum)" = "$md5" ] && [ "$(md5sum < "$D/main.log")" = "$md5log" ]; then
      ok "np $np: a fresh run into an -o holding checkpoints 1-3 is refused with one line, nothing changed: $(grep "^error" <<<"$out" | cut -c1-100)..."
    else bad "np $np: a fresh run into a used -o (exit $rc, $n lines): $(grep -m2 -E "^error|^step" <<<"$out")"; fi
  done
  out=$(timeout 120 "${K[@]}" -x 2 -y 1 --overwrite 1 -o "$D" 2>&1); rc=$?
  [ $rc = 1 ] && grep -q "^error: --overwrite 1 with -y 1: -y 1 resumes the checkpoints in -o, --overwrite 1 starts over without them: give one$" <<<"$out" &&
    ok "--overwrite 1 with -y 1: refused with one line" || bad "--overwrite 1 with -y 1 (exit $rc): $(grep -m1 error <<<"$out")"
  out=$(timeout 120 $MPIRUN -np 2 "${K[@]}" -x 2 -n 1 --overwrite 1 -o "$D" 2>&1); rc=$?
  local sub=$(ls -d "$D"/earlier_run_* 2>/dev/null)
  n=$(grep -c "^-o $D: --overwrite 1: moved the checkpoints of an earlier run (6 files, steps 1 to 3) and its main.log into $D/earlier_run_[0-9]\{8\}-[0-9]\{6\}$" <<<"$out")
  if [ $rc = 0 ] && [ "$n" = 1 ] && [ -n "$sub" ] && [ "$(cd "$sub" && cat model_* state_* | md5sum)" = "$md5" ] && [ "$(md5sum < "$sub/main.log")" = "$md5log" ] \
     && [ "$(cd "$D" && ls model_* state_* | tr '\n' ' ')" = "model_00000001.bin model_00000002.bin state_00000001.bin state_00000002.bin " ] \
     && [ -s "$D/main.log" ]; then
    ok "--overwrite 1: the 6 old files (md5 equal) and main.log moved into ${sub#$tmp/}, one line; the new run wrote steps 1-2"
  else bad "--overwrite 1 (exit $rc, $n lines, subfolder '$sub'): $(grep -m2 -E "^error|^-o" <<<"$out")"; fi
  out=$(timeout 120 $MPIRUN -np 2 "${K[@]}" -x 3 -n 1 -y 1 -o "$D" 2>&1); rc=$?
  [ $rc = 0 ] && grep -q "^resumed from step 2" <<<"$out" && ok "-y 1 after --overwrite 1 resumes the new run (step 2), not the old run's step 3" ||
    bad "-y 1 after --overwrite 1 (exit $rc): $(grep -m2 -E "^error|^resum" <<<"$out")"
}
[ "${ONLY:-}" = 8 ] && { sec8; summary; exit $?; }

# 9. (issue 49 item 10) a step never crosses a shard, so each epoch skips every shard's tail: the start-up
# lines say how much, per shard, and count the epochs over what is read. Shards of 1400, 1000 and 700
# tokens at -d 512 (T=64): shard s reads floor((n_s-1)/512)*512 tokens as inputs in file order,
# floor(floor((n_s-1)/64)/8)*512 shuffled, and the next one as the last target; the other n_s-1-read are skipped. ONLY=9 runs only this section; TRAIN_GPT=path tests another binary.
sec9() {
  local T9=${TRAIN_GPT:-./train_gpt_cpu} sh=$tmp/tail9 out sf want1 want2 n
  mkdir -p "$sh"
  /usr/bin/python3 -c "
import numpy as np
v = np.fromfile('data/brown/brown_train_000000.bin', dtype='<u2', offset=1024)
for s, n in enumerate([1400, 1000, 700]):
    h = np.zeros(256, '<i4'); h[0] = 20240520; h[1] = 1; h[2] = n
    open('$sh/tr_%06d.bin' % s, 'wb').write(h.tobytes() + v[s * 1400:s * 1400 + n].tobytes())" || { bad "tail: cannot write the shards"; return; }
  for sf in 0 1; do
    out=$(timeout 120 "$T9" -e d2 --channels 64 --heads 2 --max-seq-len 64 -i "$sh/tr_*.bin" -b 2 -t 64 -d 512 -x 3 -v 0 -s 0 --shuffle $sf 2>&1)
    local rd=() sk=() tot=0 skt=0 i
    for n in 1400 1000 700; do
      if [ $sf = 0 ]; then i=$(( (n - 1) / 512 * 512 )); else i=$(( (n - 1) / 64 / 8 * 512 )); fi
      rd+=($i); sk+=($((n - 1 - i))); tot=$((tot + i)); skt=$((skt + n - 1 - i))
    done
    want1="-x 3 steps x 512 tokens = $(awk -v r=$tot 'BEGIN {printf "%.4g", 3 * 512 / r}') epochs of the $tot tokens an epoch reads"
    want2="^data: each epoch skips $skt of the 3100 train tokens ($(awk -v k=$skt 'BEGIN {printf "%.3g", 100 * k / 3100}')%; a step of 512 tokens never crosses a shard), .*: ${sk[0]} of shard 0's 1400, ${sk[1]} of shard 1's 1000, ${sk[2]} of shard 2's 700$"
    if grep -qF -- "$want1" <<<"$out" && grep -q -- "$want2" <<<"$out" && [ "$(grep -c "^data: each epoch skips" <<<"$out")" = 1 ]; then
      ok "--shuffle $sf: the banner says each epoch skips $skt tokens (${sk[*]} of 1400 1000 700) and counts epochs over the $tot read: $(grep -m1 "^data: each" <<<"$out" | cut -c1-90)..."
    else bad "--shuffle $sf: want '$want1' and '$want2'; got: $(grep "^data" <<<"$out")"; fi
  done
  # a shard that ends exactly at a step (n - 1 = 2 x 512): nothing skipped, no line
  /usr/bin/python3 -c "
import numpy as np
v = np.fromfile('data/brown/brown_train_000000.bin', dtype='<u2', offset=1024)
h = np.zeros(256, '<i4'); h[0] = 20240520; h[1] = 1; h[2] = 1025
open('$sh/exact_000000.bin', 'wb').write(h.tobytes() + v[:1025].tobytes())"
  out=$(timeout 120 "$T9" -e d2 --channels 64 --heads 2 --max-seq-len 64 -i "$sh/exact_*.bin" -b 2 -t 64 -d 512 -x 3 -v 0 -s 0 --shuffle 0 2>&1)
  if grep -qF -- "-x 3 steps x 512 tokens = 1.5 epochs of the 1024 tokens an epoch reads" <<<"$out" && ! grep -q "^data: each epoch skips" <<<"$out"; then
    ok "a shard of 2 x 512 + 1 tokens: 1.5 epochs of the 1024 read, no skip line"
  else bad "a shard of 1025 tokens: $(grep "^data" <<<"$out")"; fi
}
[ "${ONLY:-}" = 9 ] && { sec9; summary; exit $?; }

train() { # name np args...
  local name=$1 np=$2; shift 2
  if timeout 300 $MPIRUN -np "$np" ./train_gpt_cpu $COMMON "$@" > "$tmp/$name.out" 2>&1; then ok "train $name (ledger and traffic match the plan)"
  else bad "train $name: exit $?"; tail -5 "$tmp/$name.out"; fi
}
train b8 1 -b 8 -z 0 -o "$tmp/b8"
train b4a2 1 -b 4 -z 0 -o "$tmp/b4a2"
for z in 0 1 2 3; do train n2z$z 2 -b 2 -z $z -o "$tmp/n2z$z"; done
train n2z3r0 2 -b 2 -z 3 --reshard-after-forward 0 -o "$tmp/n2z3r0"

if /usr/bin/python3 - "$tmp" <<'PY'
import sys, os, struct
import numpy as np
tmp = sys.argv[1]
def losses(run):
    out = []
    for line in open(os.path.join(tmp, run, "main.log")):
        f = line.split()
        if f[2] == "train_loss": out.append(float(f[3]))
    return np.array(out)
def ckpt(run):
    path = os.path.join(tmp, run, "model_00000006.bin")
    raw = open(path, "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    assert h[0] == 20240326 and h[1] == 3, h[:2]
    maxT, V, L, NH, C, Vp = h[2:8]
    n = Vp*C + maxT*C + L*(12*C*C + 13*C) + 2*C
    assert len(raw) == 1024 + 4*n, (len(raw), 1024 + 4*n)
    w = np.frombuffer(raw[1024:], dtype="<f4")
    assert np.all(np.isfinite(w))
    assert np.all(w[V*C:Vp*C] == 0), "padded vocab rows must stay zero"
    return w
base = losses("b8"); wb = ckpt("b8")
assert len(base) == 6, base
bad = 0
for run in ["b4a2", "n2z0", "n2z1", "n2z2", "n2z3", "n2z3r0"]:
    l = losses(run); w = ckpt(run)
    rel = np.max(np.abs(l - base) / np.abs(base))
    werr = np.max(np.abs(w - wb))
    ok = rel <= 1e-5 and werr <= 1e-4
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {run}: losses max rel diff {rel:.2e}, checkpoint max abs diff {werr:.2e} vs 1 rank B=8")
print(f"losses fell from {base[0]:.4f} to {base[-1]:.4f}")
sys.exit(1 if bad or not base[-1] < base[0] else 0)
PY
then ok "same losses and checkpoints for every split of the batch"; else bad "losses or checkpoints differ between splits"; fi

# the stage-3 traffic says what the run did with the blocks: 2 micro-steps,
# gathered before each use (forward and backward: 2 x 2 = 4 times per step,
# reshard 1) or kept from forward to backward (2 times, reshard 0)
for c in "n2z3 4 gathered before every use" "n2z3r0 2 kept from forward to backward"; do
  set -- $c; run=$1; times=$2; shift 2
  if grep -q "stage-3 all-gathers by unit class.*; blocks [0-9.]* Psi ($times x [0-9.]*% of Psi: $*)" "$tmp/$run.out"; then
    ok "$run: the traffic table says the blocks were gathered $times times per step ($*)"
  else bad "$run: blocks line: $(grep 'stage-3 all-gathers' "$tmp/$run.out")"; fi
done

# a val split of 6 distinct sequences of T=32 (219 tokens) and -m 20
# sequences: the evaluation reads the 6 once, says so once, and its
# val loss equals the one of -m 6 bit for bit
/usr/bin/python3 -c "
import numpy as np
v = np.fromfile('data/brown/brown_val_000000.bin', dtype='<u2', offset=1024)[:219]
h = np.zeros(256, '<i4'); h[0] = 20240520; h[1] = 1; h[2] = len(v)
open('$tmp/val3.bin', 'wb').write(h.tobytes() + v.tobytes())"
for m in 20 6; do
  timeout 120 ./train_gpt_cpu -e d2 --channels 64 --heads 2 --max-seq-len 64 -b 2 -t 32 -x 1 -v 1 -m $m -s 0 -j "$tmp/val3.bin" > "$tmp/val_m$m.out" 2>&1
done
v10=$(awk '/^val loss .* at step 0/{print $3}' "$tmp/val_m20.out"); v3=$(awk '/^val loss .* at step 0/{print $3}' "$tmp/val_m6.out")
if [ -n "$v10" ] && [ "$v10" = "$v3" ] && [ "$(grep -c '^note: -m 20 sequences: the val split holds only 6 distinct sequences of T=32 (192 tokens)' "$tmp/val_m20.out")" = 1 ] \
   && grep -q "each evaluation reads its first 6 sequences of T=32 = 192 tokens (all it holds, fewer than -m 20)" "$tmp/val_m20.out" \
   && grep -q "^val loss $v10 at step 0 (192 tokens)" "$tmp/val_m20.out" && ! grep -q "^note: -m" "$tmp/val_m6.out"; then
  ok "val split of 6 sequences with -m 20: 192 tokens, said once, val loss $v10 = the one of -m 6"
else bad "small val split: -m 20 gives '$v10', -m 6 gives '$v3'"; grep -E "^(data|note|val)" "$tmp/val_m20.out"; fi

# the val set is -m sequences whatever -b and the rank count: -np 1 -b 6,
# -np 2 -b 3 and -np 3 -b 2 evaluate the same 18 sequences (576 tokens) and
# print the same val loss (before, -m counted batches of B sequences: -m 3
# read 18 sequences at B=6 and 9 at B=3, one global batch)
vals=""
for nb in "1 6" "2 3" "3 2"; do
  set -- $nb
  v=$(timeout 300 $MPIRUN -np $1 ./train_gpt_cpu -e d2 --channels 64 --heads 2 --max-seq-len 64 -t 32 -b $2 -x 0 -v 1 -m 18 -s 0 2>&1 \
      | sed -n 's/^val loss \([0-9.]*\) .*(576 tokens.*/\1/p' | head -1)
  vals="$vals ${v:-none}"
done
set -- $vals
if [ "$1" != none ] && [ "$1" = "$2" ] && [ "$1" = "$3" ]; then ok "-m 18: val loss $1 over 576 tokens on 1 rank x B=6, 2 x B=3 and 3 x B=2"
else bad "-m 18 at 1 x 6, 2 x 3, 3 x 2: val losses$vals (each must be over 576 tokens, all equal)"; fi

# what the start-up lines say: the epochs a run covers (-x x tokens per step
# / train tokens), -g above T-1 (a note, and the sample has T-1 tokens), one
# val batch in the singular
out=$(timeout 120 ./train_gpt_cpu -e d2 --channels 64 --heads 2 --max-seq-len 64 -b 2 -t 32 -x 2 -v 1 -m 10 -s 2 -g 100 -j "$tmp/val3.bin" 2>&1)
ntrain=$(echo "$out" | sed -n 's/^data: train \([0-9]*\) tokens.*/\1/p')
# (issue 49 item 10) an epoch reads whole steps of 64 tokens (2 sequences of 32, shuffled): floor(floor((n-1)/32)/2)*64 tokens
nread=$(awk -v n="$ntrain" 'BEGIN {printf "%d", int(int((n - 1) / 32) / 2) * 64}')
want=$(awk -v n="$nread" 'BEGIN {printf "%.4g", 2 * 64 / n}')
if [ -n "$ntrain" ] && echo "$out" | grep -q "^data: .*-x 2 steps x 64 tokens = $want epochs of the $nread tokens an epoch reads"; then ok "the data line says the run covers $want epochs (2 x 64 / the $nread of $ntrain tokens an epoch reads)"
else bad "epochs: $(echo "$out" | grep '^data:' | cut -c1-200) (want $want epochs of $nread)"; fi
if echo "$out" | grep -q "^note: -g 100: a sample is at most T-1 = 31 tokens" && [ "$(echo "$out" | grep -c '^sample at step 2')" = 1 ]; then ok "-g 100 above T-1: a note says each sample generates 31"
else bad "-g above T-1: $(echo "$out" | grep -E '^note|^sample' | head -3)"; fi
/usr/bin/python3 -c "
import numpy as np
v = np.fromfile('data/brown/brown_val_000000.bin', dtype='<u2', offset=1024)[:40]
h = np.zeros(256, '<i4'); h[0] = 20240520; h[1] = 1; h[2] = len(v)
open('$tmp/val1.bin', 'wb').write(h.tobytes() + v.tobytes())"
out=$(timeout 120 ./train_gpt_cpu -e d2 --channels 64 --heads 2 --max-seq-len 64 -b 1 -t 32 -x 1 -v 1 -m 10 -s 0 -j "$tmp/val1.bin" 2>&1)
if echo "$out" | grep -q "^note: -m 10 sequences: the val split holds only 1 distinct sequence of T=32 (32 tokens); each evaluation reads that one once"; then ok "one val sequence: the note is in the singular"
else bad "one val sequence: $(echo "$out" | grep '^note: -m')"; fi

# --reshard-after-forward, --prefetch, --reshard-embedding at stages 0-2: one warning line each
# (naming the flag) when given, none when not given or at stage 3
warnrun() { timeout 120 ./train_gpt_cpu -e d2 --channels 64 --heads 2 --max-seq-len 64 -b 1 -t 16 -x 1 -v 0 -s 0 "$@" 2>&1 >/dev/null | grep -c "^warning:"; }
w1=$(warnrun -z 1 --prefetch 2 --reshard-after-forward 0 --reshard-embedding 0)
w1p=$(timeout 120 ./train_gpt_cpu -e d2 --channels 64 --heads 2 --max-seq-len 64 -b 1 -t 16 -x 1 -v 0 -s 0 -z 2 --prefetch 2 2>&1 >/dev/null)
w0=$(warnrun -z 1); w3=$(warnrun -z 3 --prefetch 2 --reshard-after-forward 0 --reshard-embedding 0)
if [ "$w1" = 3 ] && [ "$w0" = 0 ] && [ "$w3" = 0 ] && [ "$w1p" = "warning: --prefetch 2 has no effect at zero_stage 2 (stage 3 only)" ]; then
  ok "stage-3 flags at stages 0-2: one warning per flag given ($w1 for three), none without them or at stage 3"
else bad "stage-3 flag warnings: $w1 / $w0 / $w3 lines, '$w1p'"; fi

# one -z default: the trainer's (no -z given) is make train's ZERO, and -h says it
mk=$(sed -n 's/^ZERO ?= *//p' Makefile)
dz=$(timeout 60 ./train_gpt_cpu -e d2 --channels 64 --heads 2 --max-seq-len 64 -b 1 -t 16 -x 1 -v 0 -s 0 2>&1 | sed -n 's/^train_gpt .*zero_stage \([0-3]\).*/\1/p')
if [ -n "$mk" ] && [ "$dz" = "$mk" ] && ./train_gpt_cpu -h | sed -n "/^  -z /,/default/p" | grep -q "($mk is make train's ZERO too)  default $mk$"; then
  ok "-z default $dz == make train's ZERO $mk, and -h says so"
else bad "-z default: trainer '$dz', Makefile ZERO '$mk'"; fi

# --ledger all: every rank's tables, gathered to rank 0, in rank order and
# never interleaved (4 ranks, the traffic table also after step 1)
timeout 120 $MPIRUN -np 4 ./train_gpt_cpu -e d2 --channels 64 --heads 2 --max-seq-len 64 -b 1 -t 16 -x 2 -v 0 -s 0 -z 3 \
  --ledger all --ledger-every 1 > "$tmp/ledger_all.out" 2>&1
if /usr/bin/python3 - "$tmp/ledger_all.out" <<'PY'
import sys, re
seq, cur = [], None
for line in open(sys.argv[1]):
    m = re.match(r"(memory ledger|traffic), rank (\d+) of 4", line)
    if m:
        assert cur is None, f"table of {cur} not closed before {line.strip()}"
        cur = (m.group(1), int(m.group(2))); seq.append(cur); continue
    if re.match(r"  (ledger|traffic): OK", line):
        assert cur is not None, "a closing line outside a table"
        cur = None
want = [("memory ledger", r) for r in range(4)] + [("traffic", r) for r in range(4)] * 2
assert seq == want and cur is None, seq
PY
then ok "--ledger all on 4 ranks: ledger and traffic tables of ranks 0-3 in rank order, each whole"
else bad "--ledger all: tables out of order or interleaved"; grep -E "^(memory ledger|traffic)" "$tmp/ledger_all.out"; fi

# out/ and runs/ (trainer output dirs made inside the repository) are ignored by git
ignored() { if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then git check-ignore -q "$1"; else grep -qx "/${1%%/*}/" .gitignore; fi; }
if ignored out/model_00000001.bin && ignored runs/d4/main.log; then ok "out/ and runs/ are ignored by git"
else bad "out/ or runs/ not ignored by git"; fi

# make train with the data already prepared: no preparation line, the run itself
timeout 300 make --no-print-directory train NP=1 STEPS=1 ARGS="-e d2 --channels 64 --heads 2 --max-seq-len 64 -b 1 -t 16 -v 0 -s 0" > "$tmp/make_train.out" 2>&1
rc=$?
if [ $rc = 0 ] && ! grep -qE "^brown:|prepare.sh" "$tmp/make_train.out" && grep -q "^step    1/1" "$tmp/make_train.out"; then
  ok "make train with prepared data: no Brown preparation line, trained 1 step"
else bad "make train (exit $rc): $(grep -E "^brown:|prepare" "$tmp/make_train.out" | head -2)"; fi

# make help names every target of the Makefile and cuda.mk and every
# variable make train / zero-table take; make zero-table runs dev/zero_table.sh
help=$(make --no-print-directory help)
missing=""
for t in $(sed -n 's/^\.PHONY: *//p' Makefile cuda.mk) NP ZERO STEPS ARGS TABLE_STEPS TABLE_MODEL FUZZ_SECONDS; do
  [ "${t#_}" != "$t" ] && continue   # internal targets (_name) are not for users
  grep -qw -- "$t" <<<"$help" || missing="$missing $t"
done
zt=$(make --no-print-directory -n zero-table TABLE_STEPS=3 TABLE_MODEL="-e d2" 2>&1 | grep "zero_table.sh")
if [ -z "$missing" ] && [ "$zt" = 'PROG=./train_gpt_cpu_bf16 MODEL="-e d2" bash dev/zero_table.sh 3' ]; then ok "make help lists every target and variable; make zero-table runs '$zt'"
else bad "make help misses:$missing; zero-table runs '$zt'"; fi

# round trip: val loss of the saved model reproduced by loading it
for run in b8 n2z3; do
  np=1; [ $run = n2z3 ] && np=2
  z=0; [ $run = n2z3 ] && z=3
  b=8; [ $run = n2z3 ] && b=2
  saved=$(grep "val loss .* at step 6" "$tmp/$run.out" | awk '{print $3}')
  timeout 300 $MPIRUN -np $np ./train_gpt_cpu -e "$tmp/$run/model_00000006.bin" -b $b -t 32 -d 256 -x 1 -v 1 -m 2 -s 0 -z $z > "$tmp/reload.out" 2>&1
  again=$(grep "val loss .* at step 0" "$tmp/reload.out" | awk '{print $3}')
  if [ -n "$saved" ] && [ "$saved" = "$again" ]; then ok "checkpoint of $run reloads to the same val loss $saved"
  else bad "checkpoint of $run: val loss $saved at save, '$again' after reload"; tail -3 "$tmp/reload.out"; fi
done
# -x 0: load, evaluate, sample, print the ledger, exit: the same val loss as at
# the save, no training step, no checkpoint, and no train data needed
saved=$(grep "val loss .* at step 6" "$tmp/b8.out" | awk '{print $3}')
timeout 120 ./train_gpt_cpu -e "$tmp/b8/model_00000006.bin" -i "$tmp/no_such_train_*.bin" -b 8 -t 32 -x 0 -v 1 -m 2 -s 1 -g 8 -o "$tmp/x0" > "$tmp/x0.out" 2>&1
rc=$?
again=$(grep "val loss .* of the model .*-x 0: evaluated, not trained" "$tmp/x0.out" | awk '{print $3}')
if [ $rc = 0 ] && [ -n "$saved" ] && [ "$saved" = "$again" ] && grep -q "^sample at step 0: " "$tmp/x0.out" && grep -q "^  ledger: OK" "$tmp/x0.out" \
   && ! grep -q "^step " "$tmp/x0.out" && ! ls "$tmp/x0" | grep -q "_000"; then
  ok "-x 0: val loss $again as saved, a sample, the ledger, no step, no checkpoint, no train data"
else bad "-x 0 (exit $rc): val loss '$again' vs saved '$saved'"; tail -3 "$tmp/x0.out"; fi
# bf16 checkpoints (llm.c version 5): loading one and saving it again with a
# zero learning rate (AdamW then changes nothing) must give, in version 3,
# exactly the bf16 values widened to fp32
/usr/bin/python3 -c "
import numpy as np
h = np.zeros(256, '<i4'); h[0] = 20240520; h[1] = 1; h[2] = 4096
open('$tmp/small_ids.bin', 'wb').write(h.tobytes() + (np.arange(4096) % 1001).astype('<u2').tobytes())"
timeout 120 ./train_gpt_cpu -e data/ref/odd_model_bf16.bin -i "$tmp/small_ids.bin" -b 2 -t 32 -x 1 -l 0 -v 0 -s 0 -o "$tmp/bf16" > "$tmp/bf16.out" 2>&1
if /usr/bin/python3 - "$tmp/bf16/model_00000001.bin" data/ref/odd_model_bf16.bin <<'PY2'
import sys, numpy as np
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
ha = np.frombuffer(a[:1024], "<i4"); hb = np.frombuffer(b[:1024], "<i4")
assert ha[1] == 3 and hb[1] == 5 and (ha[2:8] == hb[2:8]).all(), (ha[:8], hb[:8])
wa = np.frombuffer(a[1024:], "<f4")
wb = (np.frombuffer(b[1024:], "<u2").astype(np.uint32) << 16).view(np.float32)
assert wa.shape == wb.shape and np.array_equal(wa, wb), "values differ"
PY2
then ok "bf16 (version 5) checkpoint loads exactly and saves as version 3"; else bad "bf16 checkpoint round trip"; tail -3 "$tmp/bf16.out"; fi

# 6. the lock of -o, --keep-checkpoints
L=(./train_gpt_cpu -i "data/brown/brown_train_*.bin" -v 0 -s 0 -e d2 -b 1 -t 32 --collective-timeout 240)   # (a loaded machine: load average 28 seen)
$MPIRUN -np 2 "${L[@]}" -x 400 -o "$tmp/lock" > "$tmp/lock1.out" 2>&1 &
job=$!
for ((i = 0; i < 600; i++)); do grep -qE "^step +2/" "$tmp/lock1.out" 2>/dev/null && break; sleep 0.1; done
holder=$(pgrep -P $job -n train_gpt_cpu); holder0=$(pgrep -P $job -o train_gpt_cpu)
out=$(timeout 120 $MPIRUN -np 2 "${L[@]}" -x 3 -o "$tmp/lock" 2>&1); rc=$?
n=$(grep -c "^error: -o $tmp/lock: another run is using it (pid [0-9]* on host $(hostname), since [-0-9: ]*): wait for it to end, stop it, or give another -o$" <<<"$out")
pid=$(grep -o "^error: -o .*: another run is using it (pid [0-9]*" <<<"$out" | grep -o "[0-9]*$")
if [ $rc = 1 ] && [ "$n" = 1 ] && { [ "$pid" = "$holder" ] || [ "$pid" = "$holder0" ]; } && ! grep -q "^step" <<<"$out" && [ "$(grep -c "^step" "$tmp/lock/main.log")" -ge 2 ]; then
  ok "a second run into a live -o: refused, one line naming the holder (pid $pid, rank 0 of the first run): $(grep "^error" <<<"$out" | cut -c1-120)..."
else bad "a second run into a live -o (exit $rc, pid '$pid', ranks '$holder0 $holder'): $(grep -m2 -E "^error|^step" <<<"$out")"; fi
kill -9 $(pgrep -P $job) 2>/dev/null; wait $job 2>/dev/null
out=$(timeout 120 $MPIRUN -np 2 "${L[@]}" -x 2 -n 1 -o "$tmp/lock2" 2>&1) && cp "$tmp/lock2"/*_00000001.bin "$tmp/lock/" &&
  out=$(timeout 120 $MPIRUN -np 2 "${L[@]}" -x 2 -n 1 -y 1 -o "$tmp/lock" 2>&1); rc=$?
[ $rc = 0 ] && grep -q "^resumed from step 1" <<<"$out" && ok "after the holder was SIGKILLed, -y 1 into its -o runs (the lock is not stale)" ||
  bad "-y 1 after the holder's SIGKILL (exit $rc): $(grep -m2 -E "^error|^resum" <<<"$out")"
out=$(timeout 120 $MPIRUN -np 2 "${L[@]}" -x 5 -n 1 --keep-checkpoints 2 -o "$tmp/keep" 2>&1); rc=$?
left=$(cd "$tmp/keep" && ls model_* state_* | tr '\n' ' ')
if [ $rc = 0 ] && [ "$left" = "model_00000004.bin model_00000005.bin state_00000004.bin state_00000005.bin " ] \
   && [ "$(grep -c "^removed the checkpoint of step [123] (--keep-checkpoints 2: the newest 2 stay)$" <<<"$out")" = 3 ] \
   && grep -qE "^wrote checkpoint .*model_00000005.bin \(llm.c version 3, fp32\) in [0-9]+\.[0-9]{2} s$" <<<"$out" \
   && grep -qE "^wrote state .*state_00000005.bin in [0-9]+\.[0-9]{2} s \(the checkpoint with its state: [0-9]+\.[0-9]{2} s\)$" <<<"$out"; then
  ok "--keep-checkpoints 2 with -n 1, 5 steps: $left left, 3 removals said; the lines give write times"
else bad "--keep-checkpoints 2 (exit $rc): left '$left'"; grep -E "^wrote|^removed|error" <<<"$out"; fi
sec7
sec8
sec9
summary
