#!/bin/bash
# test_estimator.sh: end-to-end checks of the ZeRO memory estimator of the
# real program, `./train_gpt_cpu --estimate ...` (zero_estimate_print in
# llmc/zero.h): the ZeRO paper's figures (70B on 64 ranks: 1120 / 293.1 /
# 155.3 / 17.5 GB per rank for stages 0-3), the smallest rank count that fits
# a device, the offloaded-optimizer rows (70B on 8 ranks: 35 GB on the
# device at stage 3, 105 GB per rank on the host or disk, 4 ranks minimum),
# the GPT-2 124M count from -e d12 without any data, and one clear error
# line with exit 1 for bad flags.
#
#   bash dev/test_estimator.sh          (from the repository root; builds
#                                        train_gpt_cpu with make if needed)
# Environment: LAUNCH="mpirun --allow-run-as-root -np 1" to launch through
# mpirun (default: run the binary directly, MPI singleton init);
# SKIP_BUILD=1 to use the existing binary as is; BIN=path to test another binary.
# Last line: "N passed, M failed"; exit 1 if any check failed.

cd "$(dirname "$0")/.." || exit 1
REPO=$(pwd)
BIN=${BIN:-"$REPO/train_gpt_cpu"}
LAUNCH=${LAUNCH:-}
pass=0
fail=0

ok()  { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }
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
#   stage  formula...  GB  traffic  Psi  fits  min-ranks
#   NF-4 = GB per rank, NF-3 = traffic, NF-1 = fits, NF = min ranks
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
    local v; v=$(row_field "$s" 4)
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
for s in 0 1 2; do check_field $s 3 2.0 "traffic (Psi)"; done
check_field 3 3 3.0 "traffic (Psi)"
for s in 0 1 2; do check_field $s 1 no "fits in 80 GB"; done
check_field 3 1 yes "fits in 80 GB"
check_field 2 0 never "min ranks (p Psi = 140 GB alone exceeds 80 GB)"
check_field 3 0 14 "min ranks (1120 GB / 80 GB)"
check "header names 2+2+12 = 16 bytes/param" grep -q "2+2+12 = 16" <<<"$OUT"

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
bad_flag --dtype fp8
bad_flag --ranks 0

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
