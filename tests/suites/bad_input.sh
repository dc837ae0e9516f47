#!/usr/bin/env bash
# tests/suites/bad_input.sh: bad input must end cleanly (docs/design.md section 7, the error contract).
#
# Crafts bad token shards, checkpoints, tokenizer files, debug states and
# impossible flags in a temporary directory (tests/badinput/make_inputs.py) and
# runs ./train_gpt_cpu and ./test_gpt_cpu on each, with 1 rank (the plain
# program, an MPI singleton) and with 2 ranks (mpirun -np 2); a few cases need
# another rank count (-np 5). For every run of a bad case it asserts:
#   - exit code 1 (the program's, or mpirun's),
#   - stderr holds exactly ONE line starting with "error" and it starts with
#     "error:", names the file or flag (a fixed string) and says which rule
#     was broken (an extended regex, case-insensitive),
#   - no crash: no "Segmentation", "core dumped", signal or glibc abort text,
#   - it ends within 30 s (each run is killed after 60 s: a hang),
#   - no partial output: no checkpoint (*.bin) or *.tmp in the -o dir.
# Cases of kind "rank1" run with 2 ranks where only rank 1 reads the bad
# file (a file one node cannot read): both ranks get the same flags (the
# trainer refuses ranks started with different ones), with the file's path
# relative, and each rank its own working directory (mpirun -wdir): rank 1's
# holds the bad file, rank 0's a good one under the same name; rank 0 must
# learn of rank 1's error.
# In a case's arguments @NP@ stands for the rank count of the run.
# Two control cases (a good 1-step training run, test_gpt on the odd
# reference) must pass, so a failure is the bad input's and not the harness's.
# Runs that pass but let MPI_Abort print its banner are marked "warn".
#
# Needs: make all; bash dev/data/prepare.sh; /usr/bin/python3 dev/reference.py
# --config all --out data/ref (the odd reference model and its debug state).
# Usage: bash tests/suites/bad_input.sh [-k] [-j JOBS] [-f REGEX]
#   -k keep the temp dir, -j parallel runs (default 4), -f only cases whose
#   name matches REGEX. Last line: "N passed, M failed"; exit 1 if any failed.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
ROOT=$PWD
KEEP=0
JOBS=${BADINPUT_JOBS:-4}
FILTER=""
while [ $# -gt 0 ]; do
    case "$1" in
        -k) KEEP=1; shift ;;
        -j) JOBS=$2; shift 2 ;;
        -f) FILTER=$2; shift 2 ;;
        *) echo "usage: $0 [-k] [-j JOBS] [-f REGEX]" >&2; exit 2 ;;
    esac
done
PY=/usr/bin/python3
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
ODD=$ROOT/data/ref/odd_model.bin            # maxT=48 V=1001 L=3 NH=3 C=96
ODD_STATE=$ROOT/data/ref/odd_debug_state.bin # B=12 T=48
SMALL=$ROOT/data/ref/small_model.bin
for f in ./train_gpt_cpu ./test_gpt_cpu "$ODD" "$ODD_STATE" "$SMALL" data/gpt2_tokenizer.bin data/ref/odd_model_bf16.bin; do
    if [ ! -e "$f" ]; then
        echo "test_bad_input: missing $f (run make all, bash dev/data/prepare.sh and $PY dev/reference.py --config all --out data/ref)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done

# rank counts / accumulations that do not divide the debug state's batch B
STATE_B=$(od -An -t d4 -j 8 -N 4 "$ODD_STATE" | tr -d ' ')
NP_BAD=5; while [ $((STATE_B % NP_BAD)) = 0 ]; do NP_BAD=$((NP_BAD + 2)); done
ACC_BAD=5; while [ $((STATE_B % ACC_BAD)) = 0 ]; do ACC_BAD=$((ACC_BAD + 2)); done

START=$(date +%s%N)
W=$(mktemp -d /tmp/badinput.XXXXXX)
if [ "$KEEP" = 1 ]; then echo "temp dir: $W (kept)"; else trap 'rm -rf "$W"' EXIT; fi
D=$W/in
mkdir -p "$W/out" "$W/res" "$W/log"
if ! $PY tests/badinput/make_inputs.py "$D" "$ROOT"; then
    echo "test_bad_input: tests/badinput/make_inputs.py failed"
    echo "0 passed, 1 failed"
    exit 1
fi
export OMP_NUM_THREADS=1
ulimit -c 0  # a crash must show as a failure here, not as a core file

# Every train_gpt run gets these first (tiny and fast), then -o <its own dir>,
# then the case's arguments, which override them (the last flag wins).
TRAIN_BASE=(-e "$ODD" -b 1 -t 16 -x 1 -v 0 -s 0 -i "$D/good_train.bin" -j "$D/good_val.bin" -m 1)

# ---------------------------------------------------------------- registry
NC=0
declare -a C_NAME C_NPS C_KIND C_NEEDLE C_RULE C_PROG C_ARGS
# bad NAME NPS NEEDLE RULE PROG ARGS... ; PROG: train (base flags + -o), test (as given)
# or rank1 (train, 2 ranks, only rank 1 gets ARGS)
bad() {
    C_NAME[NC]=$1; C_NPS[NC]=$2; C_KIND[NC]=bad; C_NEEDLE[NC]=$3; C_RULE[NC]=$4; C_PROG[NC]=$5
    shift 5
    C_ARGS[NC]=""
    [ $# -eq 0 ] || C_ARGS[NC]=$(printf '%q ' "$@")
    NC=$((NC + 1))
}
# good NAME NPS PROG ARGS... : a control that must exit 0 (train: and write its checkpoint)
good() {
    C_NAME[NC]=$1; C_NPS[NC]=$2; C_KIND[NC]=good; C_NEEDLE[NC]=""; C_RULE[NC]=""; C_PROG[NC]=$3
    shift 3
    C_ARGS[NC]=""
    [ $# -eq 0 ] || C_ARGS[NC]=$(printf '%q ' "$@")
    NC=$((NC + 1))
}

# controls
good control_train_one_step "1 2" train
good control_test_gpt_odd "1 2" test -e "$ODD" -s "$ODD_STATE"

# token shards
bad train_glob_no_match "1 2" "$D/nonexistent/*.bin" "no file matches" train -i "$D/nonexistent/*.bin"
bad train_file_missing "1 2" "$D/missing_train.bin" "no file|cannot open|no such|does not exist" train -i "$D/missing_train.bin"
bad train_empty_pattern "1 2" "-i" "empty" train -i ""
bad shard_bad_magic "1 2" "$D/shard_bad_magic.bin" "magic" train -i "$D/shard_bad_magic.bin"
bad shard_bad_version "1 2" "$D/shard_bad_version.bin" "version" train -i "$D/shard_bad_version.bin"
bad shard_truncated "1 2" "$D/shard_truncated.bin" "truncated" train -i "$D/shard_truncated.bin"
bad shard_trailing_bytes "1 2" "$D/shard_trailing.bin" "too long|trailing" train -i "$D/shard_trailing.bin"
bad shard_short_header "1 2" "$D/shard_short_header.bin" "header" train -i "$D/shard_short_header.bin"
bad shard_empty_file "1 2" "$D/shard_empty.bin" "header|empty" train -i "$D/shard_empty.bin"
bad shard_negative_count "1 2" "$D/shard_negative_count.bin" "negative" train -i "$D/shard_negative_count.bin"
bad shard_token_oob "1 2" "$D/shard_token_oob.bin" "vocab" train -i "$D/shard_token_oob.bin"
bad shard_token_eq_vocab "1 2" "$D/shard_token_eq_vocab.bin" "vocab" train -i "$D/shard_token_eq_vocab.bin"
bad shard_token_oob_vocab_flag "1 2" "$D/shard_token_oob.bin" "vocab" train -e d1 --vocab 1000 -i "$D/shard_token_oob.bin"
bad val_token_oob "1 2" "$D/val_token_oob.bin" "vocab" train -v 1 -j "$D/val_token_oob.bin"
bad shard_too_small "1 2" "$D/shard_too_small.bin" "too small" train -i "$D/shard_too_small.bin"
bad shard_too_small_for_2_ranks "2" "$D/shard_20tok.bin" "too small" train -i "$D/shard_20tok.bin"
bad shard_smaller_than_step "1 2" "$D/shard_50tok.bin" "fewer than one optimizer step \\(-d\\) of 4 sequences of T=16 plus the last target = 65" train -i "$D/shard_50tok.bin" -d 64
bad vocab_above_uint16 "1 2" "vocab" "65536|uint16" train -e d1 --vocab 70000
bad glob_second_shard_bad "1 2" "$D/two_shards/part_001.bin" "magic" train -i "$D/two_shards/*.bin"
bad shard_is_directory "1 2" "$D/shard_is_dir.bin" "regular file|directory" train -i "$D/shard_is_dir.bin"
bad val_glob_no_match "1 2" "$D/nonexistent_val/*.bin" "no file matches" train -v 1 -j "$D/nonexistent_val/*.bin"
bad val_shard_too_small "1 2" "$D/shard_too_small.bin" "too small" train -v 1 -j "$D/shard_too_small.bin"
bad text_as_train "1 2" "$D/text.txt" "has magic 543516756, expected 20240520: it looks like text, not llm.c tokens; tokenize it first: node dev/data/tokenize.mjs --input .*text.txt --out data/NAME/NAME" train -i "$D/text.txt"
bad text_as_val "1 2" "$D/text.txt" "looks like text, not llm.c tokens; tokenize it first: node dev/data/tokenize.mjs --input .*text.txt --out" train -v 1 -j "$D/text.txt"
bad text_short_as_train "1 2" "$D/text_short.txt" "is 173 bytes of text, not llm.c tokens; tokenize it first: node dev/data/tokenize.mjs --input" train -i "$D/text_short.txt"

# model checkpoints
bad ckpt_missing "1 2" "$D/missing_model.bin" "cannot open|no such" train -e "$D/missing_model.bin"
bad ckpt_bad_magic "1 2" "$D/ck_bad_magic.bin" "magic" train -e "$D/ck_bad_magic.bin"
bad ckpt_version4 "1 2" "$D/ck_version4.bin" "version" train -e "$D/ck_version4.bin"
bad ckpt_truncated "1 2" "$D/ck_truncated.bin" "truncated|implies|too short" train -e "$D/ck_truncated.bin"
bad ckpt_bf16_truncated "1 2" "$D/ck_bf16_truncated.bin" "truncated|implies|too short" train -e "$D/ck_bf16_truncated.bin"
bad ckpt_trailing_bytes "1 2" "$D/ck_trailing.bin" "trailing|implies|too long" train -e "$D/ck_trailing.bin"
bad ckpt_short_header "1 2" "$D/ck_short.bin" "header" train -e "$D/ck_short.bin"
bad ckpt_empty_file "1 2" "$D/ck_empty.bin" "header|empty" train -e "$D/ck_empty.bin"
bad ckpt_zero_layers "1 2" "$D/ck_zero_layers.bin" "positive" train -e "$D/ck_zero_layers.bin"
bad ckpt_negative_channels "1 2" "$D/ck_negative_channels.bin" "positive" train -e "$D/ck_negative_channels.bin"
bad ckpt_zero_vocab "1 2" "$D/ck_zero_vocab.bin" "positive" train -e "$D/ck_zero_vocab.bin"
bad ckpt_negative_maxT "1 2" "$D/ck_negative_maxT.bin" "positive" train -e "$D/ck_negative_maxT.bin"
bad ckpt_negative_heads "1 2" "$D/ck_negative_heads.bin" "positive" train -e "$D/ck_negative_heads.bin"
bad ckpt_heads_indivisible "1 2" "$D/ck_heads_indivisible.bin" "divisible" train -e "$D/ck_heads_indivisible.bin"
bad ckpt_padded_vocab_small "1 2" "$D/ck_padded_small.bin" "padded" train -e "$D/ck_padded_small.bin"
bad ckpt_huge_dims "1 2" "$D/ck_huge_dims.bin" "implies|implausible" train -e "$D/ck_huge_dims.bin"
bad ckpt_huge_maxT "1 2" "$D/ck_huge_maxT.bin" "implies|implausible" train -e "$D/ck_huge_maxT.bin"
bad ckpt_nan_weight "1 2" "$D/ck_nan.bin" "non-finite|nan" train -e "$D/ck_nan.bin"
bad ckpt_is_directory "1 2" "$D/shard_is_dir.bin" "regular file|directory" train -e "$D/shard_is_dir.bin"
bad ckpt_layers_vs_flag "1 2" "layers" "3.*5|5.*3" train --layers 5
bad ckpt_vocab_vs_flag "1 2" "vocab" "1001.*2000|2000.*1001" train --vocab 2000
bad ckpt_heads_vs_flag "1 2" "heads" "3.*4|4.*3" train --heads 4
bad ckpt_maxT_vs_flag "1 2" "max-seq-len" "48.*64|64.*48" train --max-seq-len 64
bad t_above_maxT "1 2" "-t 64" "max_seq_len|48" train -t 64

# flags
bad d_not_multiple "1 2" "-d 17" "multiple" train -d 17
bad d_zero "1 2" "-d" "positive" train -d 0
bad d_not_multiple_of_ranks "2" "-d 48" "multiple" train -d 48
bad d_accum_overflows_int "1 2" "-d" "accum|too large|overflow|at most" train -d 137438953536
bad z_5 "1 2" "-z" "0\.\.3|0, 1, 2 or 3" train -z 5
bad z_abc "1 2" "-z" "integer" train -z abc
bad b_0 "1 2" "-b" "1\.\.|>= ?1|positive" train -b 0
bad b_negative "1 2" "-b" "1\.\.|>= ?1|positive" train -b -3
bad b_overflow "1 2" "-b" "integer|range|1\.\." train -b 99999999999999999999
bad t_0 "1 2" "-t" "1\.\.|>= ?1|positive" train -t 0
bad t_junk "1 2" "-t" "integer" train -t 16x
bad l_notanumber "1 2" "-l" "number" train -l notanumber
bad l_inf "1 2" "-l" "number" train -l inf
bad l_negative "1 2" "-l" "0\.\.|>= ?0|number" train -l -1
bad x_negative "1 2" "-x" "0\.\.|>= ?0|non-negative" train -x -1
bad g_0 "1 2" "-g" "1\.\.|>= ?1|positive" train -g 0
bad seed_negative "1 2" "--seed" "non-negative" train --seed -1
bad reshard_2 "1 2" "--reshard-after-forward" "0\.\.1|0 or 1" train --reshard-after-forward 2
bad prefetch_negative "1 2" "--prefetch" "0\.\.|>= ?0" train --prefetch -1
bad unknown_flag "1 2" "--bogus" "unknown" train --bogus 1
bad unknown_flag_last "1 2" "--bogus" "unknown" train --bogus
bad flag_without_value "1 2" "-x" "needs a value" train -x
bad o_without_value "1 2" "-o" "needs a value" train -o
bad ledger_bogus "1 2" "--ledger" "rank0 or all" train --ledger bogus
bad checkpoint_dtype_fp16 "1 2" "--checkpoint-dtype" "fp32 or bf16" train --checkpoint-dtype fp16
bad descriptor_d0 "1 2" "d0" "dN|descriptor" train -e d0
bad descriptor_heads_indivisible "1 2" "heads" "divisible" train -e d1 --heads 3
bad descriptor_too_many_layers "1 2" "--layers" "1\.\.1000" train -e d1 --layers 1001
bad descriptor_d200_memory "1 2" "d200" "memory" train -e d200
bad batch_absurd_memory "1 2" "-b" "memory|too small" train -e d1 -b 1048576 -t 1024
bad estimate_bad_dtype "1 2" "--dtype" "bf16 or fp32" train --estimate --dtype fp16
bad estimate_bad_params "1 2" "--params" "positive" train --estimate --params -5
bad estimate_bad_ckpt "1 2" "$D/ck_bad_magic.bin" "magic" train --estimate -e "$D/ck_bad_magic.bin"

# output dir
bad o_in_proc "1 2" "/proc/forbidden" "cannot|denied|no such" train -o /proc/forbidden
bad o_under_a_file "1 2" "$D/a_file/out" "cannot|not a directory" train -o "$D/a_file/out"
bad o_is_a_file "1 2" "$D/a_file" "cannot|not a directory" train -o "$D/a_file"
bad ckpt_tmp_name_blocked "1 2" "model_00000001.bin.tmp" "cannot|directory" train -o "$D/out_tmp_blocked_@NP@"
bad ckpt_final_name_is_dir "1 2" "model_00000001.bin" "cannot|directory" train -o "$D/out_target_dir_@NP@"

# only rank 1 sees the bad input
bad rank1_only_bad_shard "2" "shard_bad_magic.bin" "magic" rank1 -i "$D/shard_bad_magic.bin"
bad rank1_only_token_oob "2" "shard_token_oob.bin" "vocab" rank1 -i "$D/shard_token_oob.bin"
bad rank1_only_missing_ckpt "2" "missing_model.bin" "cannot open|no such" rank1 -e "$D/missing_model.bin"

# tokenizer (-s 1 loads it)
bad tok_missing "1 2" "$D/missing_tok.bin" "cannot open|no such" train -s 1 --tokenizer "$D/missing_tok.bin"
bad tok_bad_magic "1 2" "$D/tok_bad_magic.bin" "magic" train -s 1 --tokenizer "$D/tok_bad_magic.bin"
bad tok_bad_version "1 2" "$D/tok_bad_version.bin" "version" train -s 1 --tokenizer "$D/tok_bad_version.bin"
bad tok_truncated "1 2" "$D/tok_truncated.bin" "truncated" train -s 1 --tokenizer "$D/tok_truncated.bin"
bad tok_short "1 2" "$D/tok_short.bin" "header" train -s 1 --tokenizer "$D/tok_short.bin"
bad tok_trailing "1 2" "$D/tok_trailing.bin" "trailing" train -s 1 --tokenizer "$D/tok_trailing.bin"
bad tok_eot_out_of_range "1 2" "$D/tok_eot_out_of_range.bin" "eot" train -s 1 --tokenizer "$D/tok_eot_out_of_range.bin"

# test_gpt
bad tg_batch_not_divisible_np$NP_BAD "$NP_BAD" "odd_debug_state.bin" "divisible" test -e "$ODD" -s "$ODD_STATE"
bad tg_accum_not_divisible "1 2" "odd_debug_state.bin" "divisible" test -e "$ODD" -s "$ODD_STATE" --accum "$ACC_BAD"
bad tg_state_bad_magic "1 2" "$D/ds_bad_magic.bin" "magic" test -e "$ODD" -s "$D/ds_bad_magic.bin"
bad tg_state_bad_version "1 2" "$D/ds_bad_version.bin" "version" test -e "$ODD" -s "$D/ds_bad_version.bin"
bad tg_state_truncated "1 2" "$D/ds_truncated.bin" "truncated" test -e "$ODD" -s "$D/ds_truncated.bin"
bad tg_state_grads_cut "1 2" "$D/ds_grads_cut10.bin" "truncated in the gradients section.*10 bytes missing" test -e "$ODD" -s "$D/ds_grads_cut10.bin"
bad tg_state_trailer_cut "1 2" "$D/ds_trailer_cut5.bin" "truncated in the trailer.*5 bytes missing" test -e "$ODD" -s "$D/ds_trailer_cut5.bin"
bad tg_state_trailing "1 2" "$D/ds_trailing3.bin" "3 trailing bytes" test -e "$ODD" -s "$D/ds_trailing3.bin"
bad tg_state_short "1 2" "$D/ds_short.bin" "header|shorter|truncated" test -e "$ODD" -s "$D/ds_short.bin"
bad tg_state_missing "1 2" "$D/missing_state.bin" "cannot open|no such" test -e "$ODD" -s "$D/missing_state.bin"
bad tg_state_zero_batch "1 2" "$D/ds_zero_batch.bin" "batch|positive|>= ?1" test -e "$ODD" -s "$D/ds_zero_batch.bin"
bad tg_state_negative_T "1 2" "$D/ds_negative_T.bin" "positive|>= ?1|sequence|T=" test -e "$ODD" -s "$D/ds_negative_T.bin"
bad tg_state_T_above_maxT "1 2" "$D/ds_T_too_long.bin" "max_seq_len|48" test -e "$ODD" -s "$D/ds_T_too_long.bin"
bad tg_state_model_mismatch "1 2" "odd_debug_state.bin" "match" test -e "$SMALL" -s "$ODD_STATE"
bad tg_model_missing "1 2" "$D/missing_model.bin" "cannot open|no such" test -e "$D/missing_model.bin" -s "$ODD_STATE"
bad tg_model_bad_magic "1 2" "$D/ck_bad_magic.bin" "magic" test -e "$D/ck_bad_magic.bin" -s "$ODD_STATE"
bad tg_unknown_flag "1 2" "--bogus" "unknown" test -e "$ODD" -s "$ODD_STATE" --bogus 1
bad tg_z_5 "1 2" "-z" "0\.\.3|0, 1, 2 or 3" test -e "$ODD" -s "$ODD_STATE" -z 5
bad tg_z_abc "1 2" "-z" "integer" test -e "$ODD" -s "$ODD_STATE" -z abc
bad tg_flag_without_value "1 2" "-s" "needs a value" test -e "$ODD" -s
bad tg_no_arguments "1 2" "-e" "usage" test

# ---------------------------------------------------------------- one run
# run_one I NP: runs case I with NP ranks; writes $W/res/I.NP: "PASS|FAIL|WARN line".
run_one() {
    local i=$1 np=$2
    local name=${C_NAME[i]} kind=${C_KIND[i]} needle=${C_NEEDLE[i]} rule=${C_RULE[i]} prog=${C_PROG[i]}
    local out=$W/out/$i.$np log=$W/log/$i.$np res=$W/res/$i.$np
    local -a args cmd outdirs
    eval "args=(${C_ARGS[i]})"
    args=("${args[@]//@NP@/$np}")
    local -a cmd0=(./train_gpt_cpu "${TRAIN_BASE[@]}" -o "$out")
    if [ "$prog" = test ]; then
        cmd=(./test_gpt_cpu "${args[@]}")
    else
        cmd=(./train_gpt_cpu "${TRAIN_BASE[@]}" -o "$out" "${args[@]}")
    fi
    # every -o the command line names (the last one wins in the trainer)
    outdirs=()
    local k
    for ((k = 0; k < ${#cmd[@]}; k++)); do
        if [ "${cmd[k]}" = -o ] && [ $((k + 1)) -lt ${#cmd[@]} ]; then outdirs+=("${cmd[k + 1]}"); fi
    done
    local t0 t1 rc
    t0=$(date +%s%N)
    if [ "$prog" = rank1 ]; then
        # args: FLAG PATH; the same relative name for both ranks, a good file behind it in rank 0's directory
        local flag=${args[0]} bad=${args[1]} base good
        base=$(basename "$bad")
        case "$flag" in -e) good=$ODD ;; *) good=$D/good_train.bin ;; esac
        mkdir -p "$W/wdir0.$i"; ln -sf "$good" "$W/wdir0.$i/$base"
        local -a rcmd=("$PWD/train_gpt_cpu" "${TRAIN_BASE[@]}" -o "$out" "$flag" "$base")
        timeout -k 5 60 "${MPIRUN[@]}" -np 1 -wdir "$W/wdir0.$i" "${rcmd[@]}" : -np 1 -wdir "$(dirname "$bad")" "${rcmd[@]}" \
            >"$log.out" 2>"$log.err" </dev/null
    elif [ "$np" = 1 ]; then
        timeout -k 5 60 "${cmd[@]}" >"$log.out" 2>"$log.err" </dev/null
    else
        timeout -k 5 60 "${MPIRUN[@]}" -np "$np" "${cmd[@]}" >"$log.out" 2>"$log.err" </dev/null
    fi
    rc=$?
    t1=$(date +%s%N)
    local ms=$(((t1 - t0) / 1000000))
    local secs
    secs=$(printf '%d.%01d' $((ms / 1000)) $(((ms % 1000) / 100)))
    local -a why=()
    local warn=""
    local errlines nerr first
    errlines=$(grep -a '^error' "$log.err")
    nerr=$(printf '%s' "$errlines" | grep -c '^error')
    first=$(printf '%s\n' "$errlines" | head -n 1)
    if grep -aEiq 'segmentation|core dumped|signal [0-9]|sigsegv|sigabrt|sigbus|bus error|stack smashing|double free|free\(\)|malloc\(\)|munmap_chunk|corrupted' "$log.out" "$log.err"; then
        why+=("crash: $(grep -aEi -m1 'segmentation|core dumped|signal [0-9]|sigsegv|sigabrt|sigbus|bus error|stack smashing|double free|free\(\)|malloc\(\)|munmap_chunk|corrupted' "$log.out" "$log.err" | head -n 1 | cut -c1-160)")
    fi
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        why+=("HANG: killed by timeout after 60 s (rc $rc)")
    elif [ "$ms" -gt 30000 ]; then
        why+=("slow: took $secs s (> 30 s)")
    fi
    if [ "$kind" = good ]; then
        [ "$rc" = 0 ] || why+=("exit code $rc, expected 0")
        [ "$nerr" = 0 ] || why+=("stderr has $nerr error line(s): $first")
        if [ "$prog" = train ] && [ ! -f "$out/model_00000001.bin" ]; then why+=("no checkpoint $out/model_00000001.bin written"); fi
        if [ "$prog" = test ] && ! grep -q ' 0 failed$' "$log.out"; then why+=("test_gpt did not report 0 failed"); fi
    else
        if [ "$rc" != 1 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ]; then why+=("exit code $rc, expected 1"); fi
        if [ "$nerr" != 1 ]; then
            why+=("stderr has $nerr lines starting with 'error', expected exactly 1: $(printf '%s' "$errlines" | tr '\n' '|' | cut -c1-300)")
        fi
        if [ "$nerr" -ge 1 ]; then
            case "$first" in
                error:*) ;;
                *) why+=("the error line does not start with 'error:'") ;;
            esac
            if ! printf '%s' "$first" | grep -qF -- "$needle"; then why+=("the error line does not name '$needle'"); fi
            if ! printf '%s' "$first" | grep -qEi -- "$rule"; then why+=("the error line does not say the rule (/$rule/)"); fi
        fi
        local d partial
        for d in "${outdirs[@]}"; do
            [ -d "$d" ] || continue
            partial=$(find "$d" -maxdepth 1 -type f \( -name '*.bin' -o -name '*.tmp' \) 2>/dev/null | head -n 3 | tr '\n' ' ')
            [ -z "$partial" ] || why+=("partial output left: $partial")
        done
        if grep -aq 'MPI_ABORT was invoked' "$log.err" "$log.out"; then warn="MPI_Abort banner instead of a clean collective exit"; fi
    fi
    local tag="$name [np=$np] (${secs}s, rc $rc)"
    if [ ${#why[@]} -eq 0 ]; then
        if [ -n "$warn" ]; then echo "PASS $tag  warn: $warn" >"$res"; else echo "PASS $tag" >"$res"; fi
    else
        {
            echo "FAIL $tag"
            local w
            for w in "${why[@]}"; do echo "       - $w"; done
        } >"$res"
    fi
}

# ---------------------------------------------------------------- run all
declare -a ORDER=()
for ((i = 0; i < NC; i++)); do
    if [ -n "$FILTER" ] && ! [[ ${C_NAME[i]} =~ $FILTER ]]; then continue; fi
    for np in ${C_NPS[i]}; do ORDER+=("$i.$np"); done
done
for job in "${ORDER[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    run_one "${job%.*}" "${job#*.}" &
done
wait

for job in "${ORDER[@]}"; do
    if [ -f "$W/res/$job" ]; then
        cat "$W/res/$job"
        if head -n 1 "$W/res/$job" | grep -q '^PASS'; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
    else
        echo "FAIL ${C_NAME[${job%.*}]} [np=${job#*.}]: no result (harness error)"
        fail=$((fail + 1))
    fi
done
END=$(date +%s%N)
echo "test_bad_input: ${#ORDER[@]} runs of $NC cases in $(((END - START) / 1000000000)) s ($JOBS in parallel)"
summary
