#!/bin/bash
# test_estimator.sh: end-to-end checks of the ZeRO memory estimator of the
# real program, `./train_gpt_cpu --estimate ...` (zero_estimate_print in
# llmc/zero.h): the ZeRO paper's figures (70B on 64 ranks: 1120 / 293.1 /
# 155.3 / 17.5 GB per rank for stages 0-3), the smallest rank count that fits
# a device, the offloaded-optimizer rows (70B on 8 ranks: 35 GB on the
# device at stage 3, 105 GB per rank on the host or disk, 4 ranks minimum),
# the GPT-2 124M count from -e d12 without any data, --params with suffixes
# (124M, 1.5B, 70B), the model-specific traffic of a known model equal to
# what a training run counts (stages 0-3, 2 ranks), the activations added to
# the fit check with -e, -b, -t (equal to the run's ledger), llm.c's -e dN
# shapes, and one clear error line with exit 1 for bad flags.
#
#   bash tests/suites/estimator.sh          (from the repository root; builds
#                                        train_gpt_cpu with make if needed)
# Environment: LAUNCH="mpirun --allow-run-as-root -np 1" to launch through
# mpirun (default: run the binary directly, MPI singleton init);
# SKIP_BUILD=1 to use the existing binary as is; BIN=path to test another binary.
# Last line: "N passed, M failed"; exit 1 if any check failed.

cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
REPO=$(pwd)
BIN=${BIN:-"$REPO/train_gpt_cpu"}
LAUNCH=${LAUNCH:-}

check() { # check "description" command...
    local what=$1; shift
    if "$@"; then ok "$what"; else bad "$what"; fi
}

if [ -z "${SKIP_BUILD:-}" ]; then
    if ! make -s train_gpt_cpu >/tmp/test_estimator_build.$$ 2>&1; then
        cat /tmp/test_estimator_build.$$
        rm -f /tmp/test_estimator_build.$$
        echo "make train_gpt_cpu failed"
        echo "0 passed, 1 failed"
        exit 1
    fi
    rm -f /tmp/test_estimator_build.$$
fi
if [ ! -x "$BIN" ]; then
    echo "$BIN not found (make train_gpt_cpu)"
    echo "0 passed, 1 failed"
    exit 1
fi

# Run from an empty directory, so that nothing can be read from data/.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
OUT=""
RC=0
est() { # est args...: sets OUT (stdout+stderr) and RC
    OUT=$(cd "$WORK" && $LAUNCH "$BIN" "$@" 2>&1)
    RC=$?
}

# Field of the row of stage s, counted from the end of the line:
#   stage  formula...  GB  peak  traffic  Psi  fits  min-ranks
#   NF-5 = GB per rank (model states), NF-4 = the full peak ("-" unless
#   -e, -b, -t and a memory size are given), NF-3 = traffic, NF-1 = fits,
#   NF = min ranks; the offloaded table: NF-5 device GB, NF-4 peak,
#   NF-3 offloaded GB, NF-2 disk GB per step
row_field() { # row_field stage offset_from_end
    printf '%s\n' "$OUT" | awk -v s="$1" -v k="$2" '$1 == s && NF >= 7 { print $(NF - k); exit }'
}
starts_with() { # starts_with value prefix...: value begins with one of the prefixes
    local v=$1; shift
    for p in "$@"; do [ -n "$v" ] && [ "${v#"$p"}" != "$v" ] && return 0; done
    return 1
}
check_gb() { # check_gb stage prefix...
    local s=$1; shift
    local v; v=$(row_field "$s" 5)
    check "stage $s: $v GB per rank (expected $*)" starts_with "$v" "$@"
}
check_field() { # check_field stage offset_from_end expected name
    local v; v=$(row_field "$1" "$2")
    check "stage $1: $4 '$v' (expected '$3')" test "$v" = "$3"
}

echo "--estimate --params 70e9 --dtype bf16 --ranks 64 --gpu-mem 80 (ZeRO paper, figure 1)"
est --estimate --params 70e9 --dtype bf16 --ranks 64 --gpu-mem 80
check "exit status 0 (got $RC)" test "$RC" -eq 0
check_gb 0 1120.0
check_gb 1 293.1
check_gb 2 155.3
check_gb 3 17.5
for s in 0 1 2; do check_field $s 3 2.000 "traffic (Psi)"; done
check_field 3 3 3.000 "traffic (Psi)"
for s in 0 1 2; do check_field $s 1 no "fits in 80 GB"; done
check_field 3 1 yes "fits in 80 GB"
check_field 2 0 never "min ranks (p Psi = 140 GB alone exceeds 80 GB)"
check_field 3 0 14 "min ranks (1120 GB / 80 GB)"
check "header names 2+2+12 = 16 bytes/param" grep -q "2+2+12 = 16" <<<"$OUT"
check "says the traffic is the paper's (no model given)" grep -q "^traffic (first table): the ZeRO paper's 2 Psi" <<<"$OUT"
check "says the fit check ignores activations" grep -q "^fit check: a lower bound: model states only, activations ignored" <<<"$OUT"
T70=$OUT
est --estimate --params 70B --dtype bf16 --ranks 64 --gpu-mem 80
check "--params 70B prints the same as 70e9" test "$OUT" = "$T70"
for c in 124M:124000000 1.5B:1500000000 350k:350000 2T:2000000000000 1.5e9:1500000000; do
    est --estimate --params "${c%%:*}" --ranks 4
    check "--params ${c%%:*}: Psi = ${c#*:}" grep -q "Psi = ${c#*:} parameters" <<<"$OUT"
done

echo "--estimate --params 30e9 --ranks 32 --gpu-mem 80 (default dtype bf16)"
est --estimate --params 30e9 --ranks 32 --gpu-mem 80
check "exit status 0 (got $RC)" test "$RC" -eq 0
check_gb 1 131.2 131.3
check_gb 2 73.1
check_field 2 0 21 "min ranks (14*30 / (80 - 2*30))"
check_field 3 0 6 "min ranks (480 GB / 80 GB)"

echo "--estimate --params 13e9 --dtype fp32 --ranks 8 (4+4+8 = 16 bytes/param)"
est --estimate --params 13e9 --dtype fp32 --ranks 8
check "exit status 0 (got $RC)" test "$RC" -eq 0
check_gb 0 208.0
check "header names 4+4+8 = 16 bytes/param" grep -q "4+4+8 = 16" <<<"$OUT"
check "no fit columns without --gpu-mem" test "$(row_field 0 0)" = "-"

echo "-e d12 --estimate --ranks 8 (GPT-2 124M, no data needed)"
est -e d12 --estimate --ranks 8
check "exit status 0 (got $RC)" test "$RC" -eq 0
# Psi = Vp*C + maxT*C + 2C + L*(12C^2 + 13C), Vp = 50304, maxT = 1024, C = 768, L = 12
PSI=$(( 50304*768 + 1024*768 + 2*768 + 12*(12*768*768 + 13*768) ))
check "Psi = $PSI printed in full" grep -q "$PSI" <<<"$OUT"
check_gb 0 1.99      # 16 * 124475904 / 1e9 = 1.9916
check_gb 3 0.24      # / 8 = 0.24895
check "N = 8 ranks" grep -q "N = 8 ranks" <<<"$OUT"

echo "a known model (-e): the traffic of its own shard plan, equal to what a run counts"
# a tiny model on 2 ranks: the estimator's figure per stage equals the volume
# line of a 1-step training run at that stage (both from the same plan; the
# run's from the bytes it counted on the collectives)
TINY="-e d2 --channels 64 --heads 2 --max-seq-len 64"
# (the same B x T: the embedding-gradient rows are all-gathered per micro-step)
est $TINY --estimate --ranks 2 --dtype fp32 -b 1 -t 16
check "exit status 0 (got $RC)" test "$RC" -eq 0
check "says the traffic is model-specific" grep -q "^traffic (first table): model-specific, from the shard plan of -e d2 (L=2 NH=2 C=64 Vp=50304) on 2 ranks, B=1 T=16" <<<"$OUT"
EST=$OUT
est $TINY --estimate --ranks 2 --dtype fp32 -b 1 -t 16 --reshard-after-forward 0
EST_R0=$OUT
for mode in 0 1 2 3 "3 --reshard-after-forward 0"; do
    s=${mode%% *}
    run=$(OMP_NUM_THREADS=1 timeout 120 $MPIRUN -np 2 "$BIN" $TINY -i "$REPO/data/brown/brown_train_*.bin" -b 1 -t 16 -x 1 -v 0 -s 0 -z $mode 2>&1)
    measured=$(sed -n 's/.*volume per optimizer step: \([0-9.]*\) Psi.*/\1/p' <<<"$run")
    if [ "$mode" = "$s" ]; then OUT=$EST; else OUT=$EST_R0; fi
    predicted=$(row_field "$s" 3)
    check "-z $mode: estimator $predicted Psi == measured $measured Psi" test -n "$measured" -a "$predicted" = "$measured"
done
OUT=$EST
check "stage 3 of the tiny model is not the paper's 3 Psi (the root is gathered once)" test "$(row_field 3 3)" != 3.000

echo "activations: added to the fit check when -e, -b and -t are given"
est $TINY --estimate -b 2 -t 16 --ranks 1 --gpu-mem 1
ACT=$(sed -n 's/^activations: \([0-9]*\) bytes.*/\1/p' <<<"$OUT")
LEDGER=$(cd "$REPO" && OMP_NUM_THREADS=1 timeout 120 "$BIN" $TINY -b 2 -t 16 -x 1 -v 0 -s 0 --keep-logits 0 2>&1 | awk '$1 == "activations" {print $2; exit}')
check "activation bytes $ACT == the run's ledger ($LEDGER)" test -n "$ACT" -a "$ACT" = "$LEDGER"
check "says the fit check adds them" grep -q "^fit check: a lower bound: model states + activations" <<<"$OUT"
check "--dtype bf16 on the fp32 build: says the full peak needs the bf16 program" grep -q "^note: --dtype bf16 is not this build's precision" <<<"$OUT"
echo "the full per-rank peak when --dtype is this build's precision (llmc/gpt_fit.h, the run's own fit check)"
est $TINY --estimate -b 2 -t 16 --ranks 1 --gpu-mem 1 --dtype fp32
EP=$(sed -n 's/^fit check: the full per-rank peak.*peaks at N = 1: 0: \([0-9.e+-]*\) GB.*/\1/p' <<<"$OUT")
RUNP=$(cd "$REPO" && OMP_NUM_THREADS=1 timeout 120 "$BIN" $TINY -b 2 -t 16 -x 1 -v 0 -s 0 -z 0 --keep-logits 0 2>&1 | sed -n 's/^memory: predicted peak \([0-9.e+-]*\) GB.*/\1/p')
check "stage-0 peak $EP GB == the run's predicted peak $RUNP GB within 5% (the run adds its data loaders, baselines differ by process)" \
    awk -v a="$EP" -v b="$RUNP" 'BEGIN { exit !(a > 0 && b > 0 && a / b > 0.95 && a / b < 1.05) }'
check "at N = 1 the stage-3 peak is not below the stage-0 peak (one rank shards nothing; stage 3 adds its gathered units)" \
    bash -c 'sed -n "s/.*peaks at N = 1: 0: \([0-9.e+-]*\) GB, 1: [0-9.e+-]* GB, 2: [0-9.e+-]* GB, 3: \([0-9.e+-]*\) GB.*/\1 \2/p" <<<"$0" | awk "{ exit !(\$2 >= \$1) }"' "$OUT"
# the table shows the full peak that "fits" compares (beside the model states), and "-" when it is not known
PKS=$(sed -n 's/.*peaks at N = 1: 0: \([^ ]*\) GB, 1: \([^ ]*\) GB, 2: \([^ ]*\) GB, 3: \([^ ]*\) GB;.*/\1 \2 \3 \4/p' <<<"$OUT")
for s in 0 1 2 3; do
  PK=$(awk -v i=$((s + 1)) '{print $i}' <<<"$PKS")
  check "stage $s: the peak column $(row_field $s 4) GB is the fit check's peak $PK GB, and fits '$(row_field $s 1)' says peak <= 1 GB" \
    awk -v c="$(row_field $s 4)" -v p="$PK" -v f="$(row_field $s 1)" 'BEGIN { exit !(p != "" && c == sprintf("%.3f", p) && (f == "yes") == (p <= 1)) }'
done
est $TINY --estimate --ranks 1 --gpu-mem 1
check "no -b/-t: the peak column says '-' (the fit is the lower bound of the closed forms)" test "$(row_field 3 4)" = "-"
# GPT-2 124M, B=8, T=1024 on 8 ranks in 10 GB: the model states fit at every
# stage (1.99 GB at stage 0), the fp32 activations (13.55 GB) do not
est -e d12 --estimate --ranks 8 --gpu-mem 10
check "d12 in 10 GB without -b/-t: stage 0 fits" test "$(row_field 0 1)" = yes
est -e d12 --estimate -b 8 -t 1024 --ranks 8 --gpu-mem 10
check "d12 -b 8 -t 1024 in 10 GB: stage 3 does not fit" test "$(row_field 3 1)" = no
check "d12 -b 8 -t 1024 in 10 GB: no rank count helps (activations alone exceed it)" test "$(row_field 3 0)" = never
est -e d12 --estimate -b 1 -t 1024 --ranks 8 --gpu-mem 3
A1=$(sed -n 's/^activations: \([0-9]*\) bytes.*/\1/p' <<<"$OUT")
# smallest N with 16 Psi / N + activations <= 3e9 bytes (integer arithmetic)
PSI12=124475904
WANT=$(( (16 * PSI12 + (3000000000 - A1) - 1) / (3000000000 - A1) ))
check "d12 -b 1 -t 1024 in 3 GB: stage 3 min ranks $(row_field 3 0) == ceil(16 Psi / (3 GB - activations)) = $WANT" test "$(row_field 3 0)" = "$WANT"
# the same with the full peak (--dtype fp32 on this fp32 build): at least
# the closed forms' answer, and self-consistent: the peak fits at that N and
# not at one rank fewer
est -e d12 --estimate -b 1 -t 1024 --ranks 8 --gpu-mem 3 --dtype fp32
A4=$(sed -n 's/^activations: \([0-9]*\) bytes.*/\1/p' <<<"$OUT")
LB=$(( (16 * PSI12 + (3000000000 - A4) - 1) / (3000000000 - A4) ))
M=$(row_field 3 0)
check "fp32 d12 -b 1 -t 1024 in 3 GB: stage 3 min ranks $M (full peak) >= $LB (16 Psi / N + activations)" test -n "$M" -a "$M" -ge "$LB" 2>/dev/null
peak3() { est -e d12 --estimate -b 1 -t 1024 --ranks "$1" --gpu-mem 3 --dtype fp32; sed -n 's/.*peaks at N = [0-9]*: .* 3: \([0-9.e+-]*\) GB; offloaded.*/\1/p' <<<"$OUT"; }
P_AT=$(peak3 "$M"); P_BELOW=$(peak3 $((M - 1)))
check "stage 3 peak at N=$M ($P_AT GB) <= 3 GB < peak at N=$((M - 1)) ($P_BELOW GB)" \
    awk -v a="$P_AT" -v b="$P_BELOW" 'BEGIN { exit !(a != "" && b != "" && a <= 3 && b > 3) }'

echo "-e dN: llm.c's shapes for d12, d24, d36, d48; N layers, N heads, 64N channels otherwise"
for c in "d12 12 12 768" "d24 24 16 1024" "d36 36 20 1280" "d48 48 25 1600" "d6 6 6 384" "d20 20 20 1280"; do
    set -- $c
    est -e "$1" --estimate --ranks 8
    # Psi = Vp*C + maxT*C + 2C + L*(12C^2 + 13C), Vp = 50304, maxT = 1024
    P=$(( 50304*$4 + 1024*$4 + 2*$4 + $2*(12*$4*$4 + 13*$4) ))
    check "-e $1: L=$2 NH=$3 C=$4, Psi = $P" bash -c 'grep -q "(L=$1 NH=$2 C=$3 Vp=50304)" <<<"$5" && grep -q "Psi = $4 parameters" <<<"$5"' _ "$2" "$3" "$4" "$P" "$OUT"
done
check "-h documents the rule" bash -c '"$0" -h | grep -q "d24 (24, 16, 1024)" && "$0" -h | grep -q "any other N: N layers, N heads, 64\*N channels"' "$BIN"

echo "--estimate --params 70e9 --ranks 8 --gpu-mem 80: the optimizer offloaded (rows 1+off .. 3+off)"
est --estimate --params 70e9 --ranks 8 --gpu-mem 80
check "exit status 0 (got $RC)" test "$RC" -eq 0
# offload rows, from the end: NF-4 device GB, NF-3 offloaded GB, NF-2 disk GB per step, NF-1 fits, NF min ranks
check_gb 1+off 280.0          # (2+2) x 70
check_gb 2+off 157.5          # 2 x 70 + 2 x 70/8
check_gb 3+off 35.0           # (2+2) x 70/8
for s in 1 2 3; do check_field ${s}+off 3 105.000 "offloaded GB per rank (12 x 70/8)"; done
check_field 3+off 2 210.000 "disk GB read + written per step (2 x 105)"
check_field 3+off 1 yes "3+off fits in 80 GB"
check_field 3+off 0 4 "3+off min ranks (ceil(4 x 70 / 80))"
check_field 2+off 0 never "2+off min ranks (p Psi = 140 GB alone)"
check_field 3 0 14 "stage 3 without offload still needs 14"
check "header names 12 Psi/N offloaded" grep -q "k Psi/N = 12 Psi/N per rank off the device" <<<"$OUT"

echo "--estimate --params 70e9 --dtype fp32 --ranks 64 --gpu-mem 80 and --params 30e9 --ranks 32: offload rows"
est --estimate --params 70e9 --dtype fp32 --ranks 64 --gpu-mem 80
check_gb 3+off 8.75           # (4+4) x 70/64
check_field 3+off 3 8.750 "fp32: offloaded GB per rank (8 x 70/64)"
check_field 3+off 0 7 "fp32 3+off min ranks (ceil(8 x 70 / 80))"
est --estimate --params 30e9 --ranks 32 --gpu-mem 80
check_gb 2+off 61.875         # 2 x 30 + 2 x 30/32
check_field 2+off 0 3 "30B 2+off min ranks (60 + 60/N <= 80)"

echo "bad flags: exit 1 and one line naming the flag"
bad_flag() { # bad_flag flag value
    est --estimate "$1" "$2"
    local lines errl
    errl=$(printf '%s\n' "$OUT" | grep -c '^error:')
    check "$1 $2: exit status 1 (got $RC)" test "$RC" -eq 1
    check "$1 $2: one error line naming $1" bash -c '[ "$0" -eq 1 ] && grep "^error:" <<<"$1" | grep -q -- "$2"' "$errl" "$OUT" "$1"
    if [ -z "$LAUNCH" ]; then
        lines=$(printf '%s\n' "$OUT" | grep -c .)
        check "$1 $2: nothing else printed ($lines lines)" test "$lines" -eq 1
    fi
    printf '    %s\n' "$(printf '%s\n' "$OUT" | grep '^error:' | head -1)"
}
bad_flag --params abc
bad_flag --params 70X
bad_flag --params M
bad_flag --dtype fp8
bad_flag --ranks 0

summary
