#!/usr/bin/env bash
# cluster_bench.sh (make cluster-bench): what each ZeRO stage costs on a
# network whose rate we set. Runs the CPU trainer on a simulated cluster
# (scripts/cluster.sh: 2 nodes, each with its own share of the cpus and a
# link limited by tc tbf) for every layout x configuration x link rate, and
# prints per run:
#   ms/step     mean step time of steps 2..STEPS (the trainer's "average")
#   link MB     bytes that crossed the link per step: the sum over nodes of
#               the bytes the bridge delivered into the node (Ethernet
#               frames, headers included; the bridge-side veth counters,
#               read before launch and after exit), as (bytes of a STEPS-step
#               run - bytes of a 1-step run) / (STEPS-1): start-up, step 1
#               and the end cancel, no timing race
#   max MB      the busiest node's link direction per step (max over nodes
#               of bytes in and bytes out); link MB / max MB shows how much
#               of the traffic runs in both directions at once
#   wire MB     the trainer's own traffic table: ring wire bytes per rank
#               per step, summed over its collectives (rank 0's table)
#   comp ms     step time of the same layout and configuration with no link
#               limit ("compute", including unlimited communication)
#   pred ms     a simple model: comp ms + link MB / rate (the collectives'
#               phases run one after another, so their bytes add up, even
#               those that use opposite directions)
# A benchmark, not a test: take figures on an otherwise idle machine. The
# default run (make train's d2 model, 2 nodes x 2 ranks, 16 configurations
# x 4 rates, 3 steps) takes about 15 minutes on 2 cores, most of it at
# 100 Mbit/s (a d2 step moves 57-116 MB across the link; 7 of the
# configurations took 10 minutes); narrow it with LAYOUTS, RATES, ONLY,
# STEPS.
#
# Environment (all optional):
#   STEPS=3                         optimizer steps per run (>= 2; step 1 is not timed)
#   LAYOUTS="2x2"                   NODESxRANKS_PER_NODE (e.g. "2x2 2x1")
#   RATES="100mbit 1gbit 10gbit"    link rates (tc syntax); each layout x config also runs once unlimited
#   MODEL="-e d2 -b 4 -t 128"       model and per-rank batch (the trainer's flags; make train's)
#   PROG=./train_gpt_cpu_bf16       the program (./train_gpt_cpu for fp32)
#   ONLY=REGEX                      run only configurations whose label matches
#   OUT=build/cluster_bench         logs of every run, results.tsv, results.md
# Needs root (network namespaces). The cluster ("bench") is removed at exit.
set -u
cd "$(dirname "$0")/.." || exit 1

# The configurations: "label | trainer flags". One line per row of the table;
# add a line to add a row (e.g. HSDP: "z3 hsdp G=2 | -z 3 --shard-group 2").
CONFIGS=(
  "z0 | -z 0"
  "z1 | -z 1"
  "z2 | -z 2"
  "z3 | -z 3"
  "z3 reshard 0 | -z 3 --reshard-after-forward 0"
  "z3 hsdp | -z 3 --shard-group RPN"
  "z3 keep emb | -z 3 --reshard-embedding 0"
  "z2 no overlap | -z 2 --overlap 0"
  "z3 no overlap | -z 3 --overlap 0"
  "z3 prefetch 0 | -z 3 --prefetch 0"
  "z3 prefetch 2 | -z 3 --prefetch 2"
  "z3 qwZ | -z 3 --quantize-weights int8"
  "z3 qgZ int8 | -z 3 --quantize-grads int8"
  "z3 qgZ int4 | -z 3 --quantize-grads int4"
  "z3 hpZ | -z 3 --secondary-shard node"
  "z3 zero++ | -z 3 --quantize-weights int8 --quantize-grads int4 --secondary-shard node"
)
# (RPN in the flags becomes the ranks per node of the layout: HSDP with one
# shard group per node)
# Columns of the trainer's traffic table summed over its collectives, per
# rank and step (add a column name here to print it too).
TRAFFIC_COLUMNS=("ring wire B")

STEPS=${STEPS:-3}
LAYOUTS=${LAYOUTS:-"2x2"}
RATES=${RATES:-"100mbit 1gbit 10gbit"}
MODEL=${MODEL:-"-e d2 -b 4 -t 128"}
ONLY=${ONLY:-.}
OUT=${OUT:-build/cluster_bench}
CL="scripts/cluster.sh --name bench"

die() { echo "error: dev/cluster_bench.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (the simulated cluster needs network namespaces)"
[[ "$STEPS" =~ ^[0-9]+$ ]] && [ "$STEPS" -ge 2 ] || die "STEPS=$STEPS: must be at least 2 (step 1 is not timed)"
PROG=${PROG:-./train_gpt_cpu_bf16}
[ -x "$PROG" ] || die "$PROG not built (make all)"
mkdir -p "$OUT"
trap '$CL down >/dev/null 2>&1' EXIT
trap 'exit 130' INT TERM

rate_bps() { # tc rate -> bits/s
  local r=${1,,}
  [[ "$r" =~ ^([0-9.]+)(bit|kbit|mbit|gbit)$ ]] || return 1
  awk -v n="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[2]}" 'BEGIN { m = u == "kbit" ? 1e3 : u == "mbit" ? 1e6 : u == "gbit" ? 1e9 : 1; printf "%.0f\n", n * m }'
}
for l in $LAYOUTS; do [[ "$l" =~ ^[1-9][0-9]*x[1-9][0-9]*$ ]] || die "LAYOUTS: '$l' must be NODESxRANKS, e.g. 2x2"; done
for r in $RATES; do rate_bps "$r" >/dev/null || die "RATES: '$r' is not a tc rate such as 100mbit or 1gbit"; done

# mean over steps 2.. of the trainer's "comm X ms, waited Y ms" (rank 0):
# the time the collectives took and the part the compute thread waited
comm_cols() { # log
  awk '/^step +[0-9]+\//{ split($2, s, "/"); if (s[1] >= 2 && match($0, /comm [0-9.]+ ms, waited [0-9.]+ ms/)) {
         split(substr($0, RSTART, RLENGTH), f, " "); c += f[2]; w += f[5]; n++ } }
       END { if (n) printf "%.1f %.0f\n", c / n, (c > 0 ? 100 * (1 - w / c) : 0); else print "- -" }' "$1"
}

# sum of named columns of rank 0's traffic table, per step (one value per column)
traffic_cols() { # log steps columns...
  /usr/bin/python3 - "$@" <<'PY'
import re, sys
log, steps, cols = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
lines = open(log, errors="replace").read().splitlines()
head = next((i for i, l in enumerate(lines) if l.startswith("traffic, rank 0 ")), None)
sums = [None] * len(cols)
if head is not None and head + 1 < len(lines):
    names = re.split(r"\s{2,}", lines[head + 1].strip())
    idx = [names.index(c) if c in names else -1 for c in cols]
    sums = [0.0 if i >= 0 else None for i in idx]
    for l in lines[head + 2:]:
        f = re.split(r"\s{2,}", l.strip())
        if len(f) != len(names) or not all(re.fullmatch(r"[0-9.]+", x) for x in f[1:]):
            break
        for k, i in enumerate(idx):
            if i >= 0: sums[k] += float(f[i])
print(" ".join("-" if s is None else "%.3f" % (s / steps / 1e6) for s in sums))
PY
}

counters() { $CL counters; } # node bytes_in bytes_out

# deltas of two `counters` outputs: "node bytes_in bytes_out" per node
delta() { paste <(echo "$1") <(echo "$2") | awk '{ print $1, $5 - $2, $6 - $3 }'; }

# run_one LAYOUT LABEL FLAGS RATE STEPS -> R_MS (mean ms of steps 2..STEPS,
# "" for 1 step) and R_BYTES (delta of the node counters over the whole run,
# launch to exit); returns 1 on failure
run_one() {
  local layout=$1 label=$2 flags=$3 rate=$4 steps=$5
  local K=${layout%x*} R=${layout#*x}
  local log="$OUT/${layout}_${label// /_}_${rate}_x$steps.log"
  $CL rate "$rate" >/dev/null || return 1
  local c0 c1
  c0=$(counters)
  $CL run -np $((K * R)) --map-by "ppr:$R:node" -- $PROG $MODEL ${flags//RPN/$R} -x "$steps" -v 0 -s 0 > "$log" 2>&1
  local rc=$?
  c1=$(counters)
  if [ $rc != 0 ]; then
    echo "  run failed (exit $rc): $log" >&2; tail -5 "$log" | sed 's/^/    /' >&2; return 1
  fi
  R_MS=$(sed -n 's/^average \([0-9.]*\) ms per optimizer step.*/\1/p' "$log")
  R_BYTES=$(delta "$c0" "$c1")
  R_LOG=$log
}
label_of() { echo "${1%%|*}" | sed 's/^ *//; s/ *$//'; }
ncfg=0; for c in "${CONFIGS[@]}"; do [[ "$(label_of "$c")" =~ $ONLY ]] && ncfg=$((ncfg + 1)); done
[ $ncfg -gt 0 ] || die "ONLY=$ONLY: matches no configuration label"
$CL down >/dev/null 2>&1
$CL up 2 --cpus split >/dev/null || die "cannot bring the simulated cluster up (scripts/cluster.sh up 2)"
nlay=$(echo $LAYOUTS | wc -w); nrat=$(echo $RATES | wc -w)
echo "cluster bench: $nlay layouts x $ncfg configurations x ($nrat rates + unlimited), $STEPS steps each, model: $MODEL"
echo "  $($CL status | head -1)"
echo "  (cpus: each node its own share; OpenMP threads per rank: the trainer's default, node cpus / ranks on the node)"
hdr=$(printf '%-6s %-16s %-8s %10s %10s %10s' layout config rate "ms/step" "link MB" "max MB")
for c in "${TRAFFIC_COLUMNS[@]}"; do hdr+=$(printf ' %14s' "${c% B} MB"); done
hdr+=$(printf ' %10s %10s %9s %9s %7s' "comp ms" "pred ms" "meas/pred" "comm ms" "hidden")
echo "$hdr"
tsv="$OUT/results.tsv"; md="$OUT/results.md"
printf 'layout\tconfig\trate\tms_per_step\tlink_MB_per_step\tmax_node_MB_per_step' > "$tsv"
for c in "${TRAFFIC_COLUMNS[@]}"; do printf '\ttrainer_%s_MB_per_rank_step' "${c// /_}" >> "$tsv"; done
printf '\tcompute_ms\tpredicted_ms\tcomm_ms\thidden_pct\n' >> "$tsv"
{ printf '| nodes x ranks | config | link rate | ms / step | across the link, MB / step | busiest node direction, MB / step |'
  for c in "${TRAFFIC_COLUMNS[@]}"; do printf ' trainer %s, MB / rank / step |' "${c% B}"; done
  printf ' compute ms (no limit) | predicted ms | measured / predicted | comm ms / step | comm hidden |\n|'
  for ((i = 0; i < 11 + ${#TRAFFIC_COLUMNS[@]}; i++)); do printf -- '---|'; done; echo; } > "$md"

failed=0
for layout in $LAYOUTS; do
  K=${layout%x*}
  if [ "$K" != "$(grep -c . "$($CL hostfile)")" ]; then $CL down >/dev/null; $CL up "$K" --cpus split >/dev/null || die "cluster up $K failed"; fi
  for c in "${CONFIGS[@]}"; do
    label=$(label_of "$c"); flags=${c#*|}
    [[ "$label" =~ $ONLY ]] || continue
    # one 1-step run: the traffic of everything but steps 2..STEPS (start-up,
    # step 1, the end), subtracted from each STEPS-step run below
    if ! run_one "$layout" "$label" "$flags" none 1; then failed=$((failed + 1)); continue; fi
    base=$R_BYTES; comp=""
    for rate in none $RATES; do
      if ! run_one "$layout" "$label" "$flags" "$rate" "$STEPS"; then failed=$((failed + 1)); continue; fi
      [ "$rate" = none ] && comp=$R_MS
      read -r R_LINK R_MAX < <(paste <(echo "$R_BYTES") <(echo "$base") | awk -v n=$((STEPS - 1)) '
        { din = $2 - $5; dout = $3 - $6; sum += din; if (din > mx) mx = din; if (dout > mx) mx = dout }
        END { printf "%.3f %.3f\n", sum / n / 1e6, mx / n / 1e6 }')
      R_WIRE=$(traffic_cols "$R_LOG" "$STEPS" "${TRAFFIC_COLUMNS[@]}")
      read -r R_COMM R_HID < <(comm_cols "$R_LOG")
      pred="-"; ratio="-"
      if [ "$rate" != none ] && [ -n "$comp" ]; then
        bps=$(rate_bps "$rate")
        pred=$(awk -v c="$comp" -v b="$R_LINK" -v r="$bps" 'BEGIN { printf "%.1f", c + b * 1e6 * 8 / r * 1000 }')
        ratio=$(awk -v m="$R_MS" -v p="$pred" 'BEGIN { printf "%.2f", m / p }')
      fi
      line=$(printf '%-6s %-16s %-8s %10s %10s %10s' "$layout" "$label" "$rate" "$R_MS" "$R_LINK" "$R_MAX")
      for w in $R_WIRE; do line+=$(printf ' %14s' "$w"); done
      line+=$(printf ' %10s %10s %9s %9s %6s%%' "${comp:--}" "$pred" "$ratio" "$R_COMM" "$R_HID")
      echo "$line"
      printf '%s\t%s\t%s\t%s\t%s\t%s' "$layout" "$label" "$rate" "$R_MS" "$R_LINK" "$R_MAX" >> "$tsv"
      for w in $R_WIRE; do printf '\t%s' "$w" >> "$tsv"; done
      printf '\t%s\t%s\t%s\t%s\n' "${comp:--}" "$pred" "$R_COMM" "$R_HID" >> "$tsv"
      { printf '| %s | %s | %s | %s | %s | %s |' "${layout/x/ x }" "$label" "$rate" "$R_MS" "$R_LINK" "$R_MAX"
        for w in $R_WIRE; do printf ' %s |' "$w"; done
        printf ' %s | %s | %s | %s | %s%% |\n' "${comp:--}" "$pred" "$ratio" "$R_COMM" "$R_HID"; } >> "$md"
    done
  done
done
echo "results: $tsv, $md (logs of every run in $OUT/)"
[ $failed = 0 ] || { echo "$failed runs failed"; exit 1; }
