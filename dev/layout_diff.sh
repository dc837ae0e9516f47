#!/usr/bin/env bash
# dev/layout_diff.sh: what a resume on another rank count changes, without a
# layout-invariant mode: the differences of train loss and grad norm from the
# uninterrupted run (docs/resume.md's table).
#   PROG=./train_gpt_cpu_bf16 bash dev/layout_diff.sh [OUT]
# A 4-rank run (-z 1 -b 2 -t 64 -d 512, make train's d2 model, the Brown
# split) of STEPS=30 steps writes checkpoint AT=10; copies of it are resumed
# with -y 1 to STEPS on 2 ranks (-b 2, 2 micro-steps) and on 1 rank (-b 2,
# 4 micro-steps): the same global batch and data, the sums in another order.
# Prints, per resume, the largest |loss difference| and relative grad-norm
# difference over the resumed steps, at the first resumed step and at the
# last, from main.log (6 decimals). EXTRA adds trainer flags to every run.
set -u
cd "$(dirname "$0")/.."
PROG=${PROG:-./train_gpt_cpu}
STEPS=${STEPS:-30}; AT=${AT:-10}
OUT=${1:-$(mktemp -d)}
MPIRUN=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
A=(-e d2 -z 1 -t 64 -d 512 -i "data/brown/brown_train_*.bin" -v 0 -s 0 -x "$STEPS" --collective-timeout 0 ${EXTRA:-})
mkdir -p "$OUT"
[ -f "$OUT/ref/model_$(printf %08d "$STEPS").bin" ] || $MPIRUN -np 4 "$PROG" "${A[@]}" -b 2 -n "$AT" -o "$OUT/ref" > "$OUT/ref.txt" 2>&1 \
  || { echo "layout_diff: the 4-rank run failed: $(grep -m1 error "$OUT/ref.txt")" >&2; exit 1; }
for np in 2 1; do
  d=$OUT/to$np; rm -rf "$d"; mkdir -p "$d"
  cp "$OUT/ref/model_$(printf %08d "$AT").bin" "$OUT/ref/state_$(printf %08d "$AT").bin" "$d/"
  $MPIRUN -np $np "$PROG" "${A[@]}" -b 2 -o "$d" -y 1 > "$OUT/to$np.txt" 2>&1 \
    || { echo "layout_diff: the resume on $np ranks failed: $(grep -m1 error "$OUT/to$np.txt")" >&2; exit 1; }
done
/usr/bin/python3 - "$OUT" "$PROG" "$AT" "$STEPS" <<'PY'
import sys, os
out, prog, at, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def log(d):
    r = {}
    for line in open(os.path.join(out, d, "main.log")):
        f = line.split()
        if len(f) > 7 and f[2] == "train_loss":
            r[int(f[1])] = (float(f[3]), float(f[7]))
    return r
ref = log("ref")
for np_ in (2, 1):
    run = log("to%d" % np_)
    ks = [k for k in sorted(run) if k > at and k in ref]
    dl = [abs(run[k][0] - ref[k][0]) for k in ks]
    dn = [abs(run[k][1] - ref[k][1]) / ref[k][1] for k in ks]
    print("%s, 4 ranks -> %d ranks at step %d, steps %d..%d: loss |diff| first %.1e, last %.1e, max %.1e; grad norm rel diff first %.1e, last %.1e, max %.1e"
          % (prog, np_, at, ks[0], ks[-1], dl[0], dl[-1], max(dl), dn[0], dn[-1], max(dn)))
PY
