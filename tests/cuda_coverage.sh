#!/usr/bin/env bash
# tests/cuda_coverage.sh: gcov line coverage of the CUDA code run on the
# emulated device (issue 47 item 8): llmc/cuda/*.cuh and the CUDA-only lines
# of train_gpt.cu (those inside `#ifdef LLMC_CUDA` / `#if defined(LLMC_CUDA)`
# branches, or the #else of `#ifndef LLMC_CUDA`). Builds --coverage -O0
# copies of ./test_gpt_emu and ./train_gpt_emu in a temp directory (the
# tree's programs are not touched), runs the runs of tests/suites/cuda_emu.sh
# that exercise them (test_gpt tiny N=1 and N=2 at stages 0 and 3, NCCL and
# host-staged, N=4 HSDP, --prefetch 2 --keep-logits 0 --reshard-after-forward 0
# --accum 2, --offload-optimizer host; train_gpt N=2 stage 3, 2 steps; not odd: -O0 with gcov makes it minutes), then prints
#   coverage: llmc/cuda NN.N% (a/b lines), train_gpt.cu CUDA-only NN.N% (c/d), all NN.N%
# and, with COVERAGE_LIST=FILE, every line not run ("file:line: source").
# Called by tests/suites/cuda_emu.sh (it does not fail on the percentage:
# docs/testing.md lists what is not covered and why); or alone.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MPIRUN=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}
export OMP_NUM_THREADS=1
# -O0 with gcov on a loaded machine: a rank may wait minutes for its peer's GPU work
export LLMC_GPU_TIMEOUT=${LLMC_GPU_TIMEOUT:-900}
cov=$(mktemp -d); trap 'rm -rf "$cov"' EXIT
tar cf - llmc tests/cuda_emu train_gpt.cu test_gpt.cu | tar xf - -C "$cov"
ln -s "$PWD/data" "$cov/data"
flags="-std=c++17 -O0 --coverage -x c++ -DLLMC_CUDA=1 -DLLMC_CUDA_EMU=1 -DOMPI_SKIP_MPICXX -Itests/cuda_emu -I. -w -pthread"
build() { (cd "$cov" && nice g++ $flags $(mpicc -showme:compile) "$1.cu" -o "$1_emu" $(mpicc -showme:link) -lboost_context -pthread); }
build test_gpt > "$cov/b1.log" 2>&1 & p1=$!
build train_gpt > "$cov/b2.log" 2>&1; r2=$?
wait $p1; r1=$?
if [ $r1 -ne 0 ] || [ $r2 -ne 0 ]; then echo "coverage: the --coverage build failed"; tail -5 "$cov"/b*.log; exit 1; fi
T="-e data/ref/tiny_model.bin -s data/ref/tiny_debug_state.bin"
(
  cd "$cov"
  set -e
  $MPIRUN -np 1 ./test_gpt_emu $T -z 0
  for z in 0 3; do LLMC_COLLECTIVES=nccl $MPIRUN -x LLMC_COLLECTIVES -x LLMC_GPU_TIMEOUT -np 2 ./test_gpt_emu $T -z $z; done
  LLMC_COLLECTIVES=host $MPIRUN -x LLMC_COLLECTIVES -x LLMC_GPU_TIMEOUT -np 2 ./test_gpt_emu $T -z 3
  export LLMC_COLLECTIVES=nccl
  $MPIRUN -x LLMC_COLLECTIVES -x LLMC_GPU_TIMEOUT -np 4 ./test_gpt_emu $T -z 3 --shard-group 2
  $MPIRUN -x LLMC_COLLECTIVES -x LLMC_GPU_TIMEOUT -np 2 ./test_gpt_emu $T -z 3 --prefetch 2 --keep-logits 0 --reshard-after-forward 0 --accum 2
  $MPIRUN -x LLMC_COLLECTIVES -x LLMC_GPU_TIMEOUT -np 2 ./test_gpt_emu $T -z 2 --offload-optimizer host
  LLMC_COLLECTIVES=nccl $MPIRUN -x LLMC_COLLECTIVES -x LLMC_GPU_TIMEOUT -np 2 ./train_gpt_emu -e d2 --channels 64 --heads 2 --max-seq-len 64 \
    -b 2 -t 32 -x 2 -v 1 -m 2 -s 0 -z 3 --collective-timeout 0 -o "$cov/out"
) < /dev/null > "$cov/runs.log" 2>&1 || { echo "coverage: a run failed (the suite's own checks say which); coverage of what ran:"; grep -E "error|FAIL" "$cov/runs.log" | head -5; }
(cd "$cov" && gcov --json-format --stdout test_gpt_emu-test_gpt.gcda train_gpt_emu-train_gpt.gcda 2>/dev/null ||
              gcov --json-format --stdout *.gcda) > "$cov/gcov.json" 2> "$cov/gcov.err"
python3 - "$cov/gcov.json" "$cov" "${COVERAGE_LIST:-}" <<'EOF'
import json, sys, os, re
path, root, listfile = sys.argv[1], sys.argv[2], sys.argv[3]
hit = {}   # (file, line) -> count, union over both programs
for doc in open(path).read().splitlines():
    doc = doc.strip()
    if not doc: continue
    try: d = json.loads(doc)
    except Exception: continue
    for f in d.get("files", []):
        name = os.path.normpath(f["file"])
        for l in f.get("lines", []):
            k = (name, l["line_number"])
            hit[k] = max(hit.get(k, 0), l["count"])
def cuda_only_lines(src):
    """lines of src inside LLMC_CUDA-positive preprocessor branches"""
    out, stack = set(), []   # stack of booleans: branch is CUDA-positive
    for i, line in enumerate(open(src), 1):
        t = line.strip()
        m = re.match(r'#\s*(ifdef|ifndef|if|elif|else|endif)\b(.*)', t)
        if m:
            kw, cond = m.group(1), m.group(2)
            if kw == 'ifdef': stack.append(('pos', cond.strip() == 'LLMC_CUDA'))
            elif kw == 'ifndef': stack.append(('neg', cond.strip() == 'LLMC_CUDA'))
            elif kw == 'if':
                pos = bool(re.search(r'(?<!!)defined\s*\(?\s*LLMC_CUDA\b', cond)) and '!defined(LLMC_CUDA)' not in cond.replace(' ', '')
                neg = '!defined(LLMC_CUDA)' in cond.replace(' ', '')
                stack.append(('pos', pos) if pos else ('neg', neg))
            elif kw == 'elif' and stack: stack[-1] = ('pos', False)
            elif kw == 'else' and stack:
                kind, v = stack[-1]
                stack[-1] = ('pos', v) if kind == 'neg' else ('pos', False)
            elif kw == 'endif' and stack: stack.pop()
            continue
        if any(k == 'pos' and v for k, v in stack): out.add(i)
    return out
cuda_train = cuda_only_lines(os.path.join(root, 'train_gpt.cu'))
groups = {'llmc/cuda': [], 'train_gpt.cu CUDA-only': []}
for (f, ln), c in hit.items():
    if f.startswith('llmc/cuda/'): groups['llmc/cuda'].append((f, ln, c))
    elif f == 'train_gpt.cu' and ln in cuda_train: groups['train_gpt.cu CUDA-only'].append((f, ln, c))
parts, tot_h, tot_n, missed = [], 0, 0, []
for g, rows in groups.items():
    h = sum(1 for r in rows if r[2] > 0); n = len(rows)
    tot_h += h; tot_n += n
    parts.append("%s %.1f%% (%d/%d lines)" % (g, 100.0 * h / max(n, 1), h, n))
    missed += [r for r in rows if r[2] == 0]
print("coverage: " + ", ".join(parts) + ", all %.1f%% (%d/%d)" % (100.0 * tot_h / max(tot_n, 1), tot_h, tot_n))
if listfile:
    src = {}
    with open(listfile, 'w') as o:
        for f, ln, c in sorted(missed):
            if f not in src: src[f] = open(os.path.join(root, f)).read().splitlines()
            o.write("%s:%d: %s\n" % (f, ln, src[f][ln - 1].strip()))
EOF
