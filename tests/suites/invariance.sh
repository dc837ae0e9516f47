#!/usr/bin/env bash
# --invariant 1 (docs/design.md section 13): training whose bits do not
# depend on the layout. For one model and global batch (-d 256 = 8
# sequences of 32 tokens), in both CPU programs:
#  1. the checkpoint (model_*.bin), the training state (state_*.bin) and
#     the printed losses and grad norms of N ranks x B sequences x A
#     micro-steps are those of 1 rank x 8 sequences, bit for bit (cmp), for
#     N = 1, 2, 4, B = 1..8, A = 1..4, every stage 0-3 (spread over the
#     layouts), with -r 3, --keep-logits 1 and --offload-optimizer disk on
#     some; the reference runs 2 OpenMP threads, the others 1 (the kernels'
#     rows do not depend on the thread count); the ledger and the traffic
#     counters agree with their predictions (the run exits 2 otherwise);
#  2. the control: without the flag, 1 rank x 8 and 4 ranks x 2 give
#     different checkpoints (what the flag is for; if this ever passes
#     without it, the test above proves nothing);
#  3. the start-up line says what the run is equal to; a run of 3 steps on
#     4 ranks at stage 3, resumed (-y 1) on 2 ranks at stage 1 to step 5,
#     ends bitwise where 1 rank at stage 0 ends after 5 steps (fp32);
#  4. the printed val loss is the same at 1 x 8, 2 x 4 and 4 x 1;
#  5. a layout it cannot make equal is refused with one line on every rank
#     (3 ranks, -b 3, --quantize-grads, --shard-group);
#  6. -z auto on 2 simulated nodes (UTS namespaces) with a slow link across
#     them takes HSDP without the flag, never with it, and then equals
#     1 rank x 8 bit for bit (issue 49 item 1).
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s train_gpt_cpu train_gpt_cpu_bf16 >/dev/null 2>&1 || { bad "make train_gpt_cpu train_gpt_cpu_bf16"; summary; exit 1; }
DATA="-i data/brown/brown_train_*.bin"
mkdir -p "$tmp/off"
BASE="-e d2 --channels 64 --heads 2 --max-seq-len 64 -t 32 -d 256 -v 0 -s 0 --seed 7 -x 3"

run() { # name np prog args...: a run into $tmp/name (OMP threads: $THREADS, default 1)
  local name=$1 np=$2 prog=$3; shift 3
  OUT=$(OMP_NUM_THREADS=${THREADS:-1} timeout 300 $MPIRUN -np "$np" ./$prog $DATA $BASE -o "$tmp/$name" "$@" 2>&1 </dev/null)
  local rc=$?
  echo "$OUT" > "$tmp/$name.log"
  [ $rc = 0 ] || { bad "$name: $prog -np $np $* exit $rc: $(grep -m1 error <<<"$OUT")"; return 1; }
  grep -q "ledger: OK" <<<"$OUT" || { bad "$name: no 'ledger: OK'"; return 1; }
}
steps() { grep '^step' "$tmp/$1.log" | awk -F'|' '{print $2, $4}'; }   # loss and norm of every step
same() { # ref name what
  if cmp -s "$tmp/$1/model_00000003.bin" "$tmp/$2/model_00000003.bin" && cmp -s "$tmp/$1/state_00000003.bin" "$tmp/$2/state_00000003.bin" &&
     [ "$(steps "$1")" = "$(steps "$2")" ] && [ -n "$(steps "$2")" ]; then
    ok "$3: model, state, losses and norms equal to 1 rank x 8 sequences"
  else
    bad "$3: differs from 1 rank x 8 sequences ($(cmp "$tmp/$1/model_00000003.bin" "$tmp/$2/model_00000003.bin" 2>&1 | head -1))"
  fi
}

for prog in train_gpt_cpu train_gpt_cpu_bf16; do
  p=${prog#train_gpt_cpu}; p=${p:-_fp32}; p=${p#_}
  THREADS=2 run "$p-ref" 1 $prog -b 8 -z 0 --invariant 1 || continue
  grep -q "^invariant: bitwise equal to any run of this model and global batch 8 x 32 tokens on N ranks x B sequences x A micro-steps, all powers of two: N = 1, 2, 4, 8, stages 0-3" "$tmp/$p-ref.log" &&
    ok "$p: the start-up line says what the run equals" || bad "$p: no or a wrong 'invariant:' line: $(grep -m1 '^invariant' "$tmp/$p-ref.log")"
  while read -r name np args; do
    run "$p-$name" "$np" $prog $args --invariant 1 && same "$p-ref" "$p-$name" "$p $name (-np $np $args)"
  done <<EOF
n2b4z1 2 -b 4 -z 1
n4b2z2 4 -b 2 -z 2
n4b2z3 4 -b 2 -z 3 --keep-logits 1
n1b2a4z1 1 -b 2 -z 1
n2b1a4z0 2 -b 1 -z 0
n4b1a2z3 4 -b 1 -z 3 -r 3
n2b2a2z2 2 -b 2 -z 2 --offload-optimizer disk:$tmp/off
EOF
  # the control: the same two layouts without the flag
  run "$p-plain1" 1 $prog -b 8 -z 0 && run "$p-plain4" 4 $prog -b 2 -z 0 &&
    { cmp -s "$tmp/$p-plain1/model_00000003.bin" "$tmp/$p-plain4/model_00000003.bin" &&
        bad "$p: without --invariant 1, 1 rank x 8 and 4 ranks x 2 are bitwise equal: the checks above prove nothing" ||
        ok "$p: without --invariant 1, 1 rank x 8 and 4 ranks x 2 differ (the control)"; }
done

# a resume on another rank count and stage
B5=$(echo "$BASE" | sed 's/-x 3/-x 5/')
if OMP_NUM_THREADS=1 timeout 300 $MPIRUN -np 4 ./train_gpt_cpu $DATA $BASE -b 2 -z 3 -n 3 --invariant 1 -o "$tmp/res" > "$tmp/res1.log" 2>&1 </dev/null &&
   OMP_NUM_THREADS=1 timeout 300 $MPIRUN -np 2 ./train_gpt_cpu $DATA $B5 -b 4 -z 1 -y 1 --invariant 1 -o "$tmp/res" > "$tmp/res2.log" 2>&1 </dev/null &&
   OMP_NUM_THREADS=1 timeout 300 $MPIRUN -np 1 ./train_gpt_cpu $DATA $B5 -b 8 -z 0 --invariant 1 -o "$tmp/res5" > "$tmp/res5.log" 2>&1 </dev/null; then
  cmp -s "$tmp/res/model_00000005.bin" "$tmp/res5/model_00000005.bin" && cmp -s "$tmp/res/state_00000005.bin" "$tmp/res5/state_00000005.bin" &&
    ok "4 ranks z3 for 3 steps, resumed on 2 ranks z1 to 5 = 1 rank z0 for 5 steps (model and state)" ||
    bad "the resumed run differs from the uninterrupted one: $(cmp "$tmp/res/model_00000005.bin" "$tmp/res5/model_00000005.bin" 2>&1)"
else bad "the resume runs failed: $(cat "$tmp"/res*.log | grep -m1 error)"; fi

# the val loss: the same val set at every layout, summed per sequence and in
# sequence order (train_gpt.cu evaluate): equal as printed. On this set the
# old sum (each rank's forward mean as a float, times B, then added) printed
# 10.826924 at step 1 on 1 rank x 8 and 10.826925 on 2 ranks x 4.
VAL="-j data/brown/brown_val_*.bin -v 1 -m 13"
vals() { grep '^val loss' "$tmp/$1.log"; }
for l in "v1 1 -b 8" "v2 2 -b 4" "v4 4 -b 1"; do
  set -- $l
  OMP_NUM_THREADS=1 timeout 300 $MPIRUN -np "$2" ./train_gpt_cpu $DATA $(echo "$BASE" | sed 's/-x 3/-x 2/; s/-v 0//') $VAL "$3" "$4" --invariant 1 > "$tmp/$1.log" 2>&1 </dev/null ||
    bad "val run $l: $(grep -m1 error "$tmp/$1.log")"
done
[ "$(vals v1 | wc -l)" = 3 ] && [ "$(vals v1)" = "$(vals v2)" ] && [ "$(vals v1)" = "$(vals v4)" ] &&
  ok "the val loss (13 sequences, steps 0-2) is printed the same on 1 x 8, 2 x 4 and 4 x 1" ||
  bad "val losses differ across layouts: $(vals v1 | tr '\n' ' ') / $(vals v2 | tr '\n' ' ') / $(vals v4 | tr '\n' ' ')"

# -z auto on 2 simulated nodes (each rank in its own UTS namespace with its
# node's hostname: the trainer's placement is read off the hosts' names),
# a slow link across them: without the flag -z auto takes HSDP
# (--shard-group 2, the control); with --invariant 1 it must not (HSDP's
# replica all-reduce is not the tree: before issue 49 it chose
# --shard-group 2, printed the invariant line, and its checkpoint differed
# from 1 rank x 8), and the run equals 1 rank x 8 bit for bit
if [ "$(id -u)" = 0 ] && unshare --uts true 2>/dev/null && [ -d "$tmp/fp32-ref" ]; then
  cat > "$tmp/simnode.sh" <<'EOS'
#!/bin/bash
exec unshare --uts sh -c 'hostname "simnode$((OMPI_COMM_WORLD_RANK / 2))" && exec "$@"' sh "$@"
EOS
  chmod +x "$tmp/simnode.sh"
  AUTO="-b 2 -z auto --link-gbps 100,0.01"
  o=$(OMP_NUM_THREADS=1 timeout 300 $MPIRUN -np 4 "$tmp/simnode.sh" ./train_gpt_cpu $DATA $(echo "$BASE" | sed 's/-x 3/-x 1/') $AUTO 2>&1 </dev/null)
  if grep -q "^-z auto: chose -z [123] --shard-group 2" <<<"$o" && grep -q "simnode1" <<<"$o"; then
    ok "-z auto, 2 simulated nodes, slow link, no --invariant: chooses HSDP (the control: $(grep -m1 -o '^-z auto: chose [^:]*' <<<"$o"))"
  else bad "-z auto, 2 simulated nodes without --invariant: did not choose --shard-group 2: $(grep -m1 -E '^-z auto: chose|^error' <<<"$o" | cut -c1-200)"; fi
  o=$(OMP_NUM_THREADS=1 timeout 300 $MPIRUN -np 4 "$tmp/simnode.sh" ./train_gpt_cpu $DATA $BASE $AUTO --invariant 1 -o "$tmp/auto-nodes" 2>&1 </dev/null); rc=$?
  echo "$o" > "$tmp/fp32-auto-nodes.log"
  if [ $rc = 0 ] && grep -q "^-z auto: chose -z [0-3]" <<<"$o" && ! grep -q "^-z auto: chose.*--shard-group" <<<"$o" &&
     cmp -s "$tmp/fp32-ref/model_00000003.bin" "$tmp/auto-nodes/model_00000003.bin" && cmp -s "$tmp/fp32-ref/state_00000003.bin" "$tmp/auto-nodes/state_00000003.bin" &&
     [ "$(steps fp32-ref)" = "$(steps fp32-auto-nodes)" ]; then
    ok "-z auto --invariant 1, 2 simulated nodes, slow link: no HSDP ($(grep -m1 -o '^-z auto: chose [^:]*' <<<"$o")), model, state and losses equal to 1 rank x 8"
  else bad "-z auto --invariant 1 on 2 simulated nodes: exit $rc, $(grep -m1 -E '^-z auto: chose|^error' <<<"$o" | cut -c1-200); $(cmp "$tmp/fp32-ref/model_00000003.bin" "$tmp/auto-nodes/model_00000003.bin" 2>&1)"; fi
else skip "-z auto --invariant 1 on simulated nodes: skipped (needs root and unshare --uts)"; fi

# refusals: one line, every rank, non-zero exit
refuse() { # np want args...
  local np=$1 want=$2; shift 2
  local o rc
  o=$(OMP_NUM_THREADS=1 timeout 120 $MPIRUN -np "$np" ./train_gpt_cpu $DATA $BASE --invariant 1 "$@" 2>&1 </dev/null); rc=$?
  if [ $rc != 0 ] && [ "$(grep -c "^error.*--invariant 1.*$want" <<<"$o")" -ge 1 ] && ! grep -q "^step" <<<"$o"; then
    ok "refused: -np $np $* ($want)"
  else
    bad "-np $np $*: exit $rc, wanted one error naming '$want': $(grep -m1 error <<<"$o")"
  fi
}
refuse 3 "power of two" -b 8 -d 768
refuse 1 "power of two" -b 3 -d 96
refuse 2 "quantize-grads" -b 4 -z 3 --quantize-grads int8
refuse 4 "shard-group" -b 2 -z 3 --shard-group 2
summary
