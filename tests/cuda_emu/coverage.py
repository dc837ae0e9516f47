#!/usr/bin/env python3
"""tests/cuda_emu/coverage.py: gcov line coverage of the CUDA code over the
runs of tests/suites/cuda_emu.sh (issue 47 item 8).

The suite builds the emulated programs with `make emu EMU_COVERAGE=1`
(g++ --coverage: a .gcno beside each program, named PROGRAM-SOURCE.gcno)
and runs them with GCOV_PREFIX=DIR, so each run's counts land in
DIR/<absolute object directory>/PROGRAM-SOURCE.gcda, outside the tree.
This script pairs every .gcno of the tree's emulated programs with its
.gcda under DIR, runs gcov on each pair (JSON intermediate format), takes
the union over programs (a line counts as run if any program ran it) and
prints one line:

  coverage: llmc/cuda NN.N% (a/b lines), CUDA-only lines outside llmc/cuda NN.N% (c/d), all NN.N% (e/f)

"CUDA-only lines outside llmc/cuda" are the lines of train_gpt.cu and of
the files it includes that sit inside an LLMC_CUDA-positive preprocessor
branch (`#ifdef LLMC_CUDA`, `#if defined(LLMC_CUDA)`, the `#else` of
`#ifndef LLMC_CUDA`). Programs run only as mutated copies are not counted
(their objects live elsewhere). A line gcov calls executable and no run
reached is "not run"; with a third argument FILE every such line is written
to FILE as "file:line: source".

Usage: coverage.py ROOT GCDA_PREFIX [LIST_FILE]
Exit status: 0 when the line was printed, 1 when no .gcda was found (no run
wrote counts: the programs were not built with EMU_COVERAGE=1).
"""
import glob, json, os, re, shutil, subprocess, sys, tempfile

root = os.path.abspath(sys.argv[1])
prefix = os.path.abspath(sys.argv[2])
listfile = sys.argv[3] if len(sys.argv) > 3 else ""

gcnos = []
for pat in ("*_emu-*.gcno", "dev/cuda/*_emu-*.gcno"):
    gcnos += glob.glob(os.path.join(root, pat))
hit = {}   # (file relative to root, line) -> largest count over programs
pairs = 0
work = tempfile.mkdtemp()
try:
    for gcno in sorted(gcnos):
        gcda = prefix + os.path.splitext(gcno)[0] + ".gcda"
        if not os.path.exists(gcda):
            continue
        pairs += 1
        base = os.path.basename(os.path.splitext(gcno)[0])
        shutil.copy(gcno, os.path.join(work, base + ".gcno"))
        shutil.copy(gcda, os.path.join(work, base + ".gcda"))
        out = subprocess.run(["gcov", "--json-format", "--stdout", base + ".gcda"], cwd=work,
                             capture_output=True, text=True).stdout
        for doc in out.splitlines():
            doc = doc.strip()
            if not doc:
                continue
            try:
                d = json.loads(doc)
            except ValueError:
                continue
            cwd = d.get("current_working_directory", root)
            for f in d.get("files", []):
                name = os.path.relpath(os.path.normpath(os.path.join(cwd, f["file"])), root)
                for l in f.get("lines", []):
                    k = (name, l["line_number"])
                    hit[k] = max(hit.get(k, 0), l["count"])
finally:
    shutil.rmtree(work, ignore_errors=True)
if pairs == 0:
    print("coverage: no .gcda under %s for the .gcno files of %s (build with make emu EMU_COVERAGE=1 and run with GCOV_PREFIX)" % (prefix, root))
    sys.exit(1)


def cuda_only_lines(src):
    """the line numbers of src inside LLMC_CUDA-positive preprocessor branches"""
    out, stack = set(), []   # per open #if: ('pos', v) v = branch is CUDA-positive; ('neg', v) v = the #else will be
    for i, line in enumerate(open(src), 1):
        t = line.strip()
        m = re.match(r'#\s*(ifdef|ifndef|if|elif|else|endif)\b(.*)', t)
        if m:
            kw, cond = m.group(1), m.group(2).replace(' ', '')
            if kw == 'ifdef':
                stack.append(('pos', cond == 'LLMC_CUDA'))
            elif kw == 'ifndef':
                stack.append(('neg', cond == 'LLMC_CUDA'))
            elif kw == 'if':
                neg = '!defined(LLMC_CUDA)' in cond
                pos = not neg and bool(re.search(r'defined\(?LLMC_CUDA\b', cond))
                stack.append(('pos', pos) if pos else ('neg', neg))
            elif kw == 'elif' and stack:
                stack[-1] = ('pos', False)
            elif kw == 'else' and stack:
                kind, v = stack[-1]
                stack[-1] = ('pos', v) if kind == 'neg' else ('pos', False)
            elif kw == 'endif' and stack:
                stack.pop()
            continue
        if any(k == 'pos' and v for k, v in stack):
            out.add(i)
    return out


outside = {}   # file -> its CUDA-only line numbers
for f in ["train_gpt.cu"] + sorted(glob.glob(os.path.join(root, "llmc", "**", "*.h"), recursive=True)):
    rel = os.path.relpath(os.path.join(root, f), root)
    if rel.startswith("llmc/cuda/"):
        continue
    lines = cuda_only_lines(os.path.join(root, rel))
    if lines:
        outside[rel] = lines
groups = {"llmc/cuda": [], "CUDA-only lines outside llmc/cuda": []}
for (f, ln), c in hit.items():
    if f.startswith("llmc/cuda/"):
        groups["llmc/cuda"].append((f, ln, c))
    elif ln in outside.get(f, ()):
        groups["CUDA-only lines outside llmc/cuda"].append((f, ln, c))
parts, tot_h, tot_n, missed = [], 0, 0, []
for g, rows in groups.items():
    h = sum(1 for r in rows if r[2] > 0)
    n = len(rows)
    tot_h += h
    tot_n += n
    parts.append("%s %.1f%% (%d/%d lines)" % (g, 100.0 * h / max(n, 1), h, n))
    missed += [r for r in rows if r[2] == 0]
print("coverage: " + ", ".join(parts) + ", all %.1f%% (%d/%d) over %d programs" % (100.0 * tot_h / max(tot_n, 1), tot_h, tot_n, pairs))
if listfile:
    src = {}
    with open(listfile, "w") as o:
        for f, ln, c in sorted(missed):
            if f not in src:
                src[f] = open(os.path.join(root, f)).read().splitlines()
            o.write("%s:%d: %s\n" % (f, ln, src[f][ln - 1].strip()))
