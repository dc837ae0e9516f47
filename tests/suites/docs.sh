#!/usr/bin/env bash
# The documentation says what the programs do:
#   - docs/flags.md is what the flag table generates (./train_gpt_cpu
#     --help-markdown); a stale copy fails with the command that renews it;
#   - README.md stays short (under 250 lines: the detail is in docs/);
#   - every relative link in README.md and docs/*.md points at a file that
#     exists (anchors are not checked);
#   - the project speaks of itself alone: no words of a workplace's tools;
#   - the design is docs/design.md: nothing cites a DESIGN.md outside the
#     repository, and the code's "docs/design.md section N" citations exist;
#   - design.md section 13 gives --invariant 1's column tiles as the code
#     has them: cpu_inv_cols(OC) (ceil(OC / D) tiles) in the fp32 program,
#     CPU_INV_COLS in the bf16 one (llmc/cpu/common.h).
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
[ -x ./train_gpt_cpu ] || { bad "./train_gpt_cpu is missing (make train_gpt_cpu)"; summary; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ./train_gpt_cpu --help-markdown > "$tmp/flags.md" 2>&1 && cmp -s "$tmp/flags.md" docs/flags.md; then
  ok "docs/flags.md equals ./train_gpt_cpu --help-markdown ($(grep -c '^| `' docs/flags.md) flags)"
else
  bad "docs/flags.md is stale: run make docs ($(diff "$tmp/flags.md" docs/flags.md 2>&1 | head -3 | tr '\n' ' '))"
fi
# every flag of -h is in docs/flags.md
missing=$(./train_gpt_cpu -h | awk '/^  -/ {print $1}' | sed 's/,$//' | while read -r f; do
  [ "$f" = -h ] && continue; grep -q "^| \`$f\`" docs/flags.md || echo "$f"; done)
[ -z "$missing" ] && ok "every flag of -h has a row in docs/flags.md" || bad "flags of -h missing in docs/flags.md: $missing"
n=$(wc -l < README.md)
[ "$n" -lt 250 ] && ok "README.md is $n lines (< 250)" || bad "README.md is $n lines (the detail belongs in docs/)"
broken=""
for f in README.md docs/*.md; do
  dir=$(dirname "$f")
  for link in $(grep -o '](\([^)#]*\)' "$f" | sed 's/^](//' | grep -v '^https\?:' | grep -v '^mailto:' | sort -u); do
    [ -n "$link" ] || continue
    [ -e "$dir/$link" ] || broken="$broken $f->$link"
  done
done
[ -z "$broken" ] && ok "every relative link in README.md and docs/*.md resolves" || bad "broken links:$broken"
# the design is in the repository: nothing cites a DESIGN.md outside it, and every
# "docs/design.md section N" citation in the code names a section that exists
cites=$(grep -rln --exclude=docs.sh "DESIGN\.md" README.md docs llmc tests dev scripts train_gpt.cu test_gpt.cu Makefile cuda.mk 2>/dev/null | tr '\n' ' ')
[ -z "$cites" ] && ok "no file cites a DESIGN.md outside the repository (docs/design.md is the design)" || bad "files cite DESIGN.md, which the repository does not hold: $cites"
badsec=""
for n in $(grep -rhoE "docs/design\.md section [0-9]+" llmc tests dev scripts train_gpt.cu test_gpt.cu 2>/dev/null | awk '{print $3}' | sort -u); do
  grep -qE "^## $n\. " docs/design.md || badsec="$badsec $n"
done
[ -f docs/design.md ] && [ -z "$badsec" ] && ok "every 'docs/design.md section N' citation names a section of docs/design.md" || bad "docs/design.md lacks cited sections:$badsec"
# section 13's column tiles against llmc/cpu/common.h
cols=$(sed -n 's/^#define CPU_INV_COLS \([0-9]*\).*/\1/p' llmc/cpu/common.h)
div=$(sed -n '/cpu_inv_cols(int OC)/,/^}/p' llmc/cpu/common.h | sed -n 's/.*int nt = (OC + [0-9]*) \/ \([0-9]*\).*/\1/p')
par=$(awk '/^## 13\./ {f = 1; next} /^## / {f = 0} f' docs/design.md | awk '/^\*\*Kernels whose rows/ {f = 1} f && /^$/ {exit} f' | tr '\n' ' ')
if [ -n "$cols" ] && [ -n "$div" ] && grep -q '`cpu_inv_cols(OC)` columns in the fp32 program' <<<"$par" && grep -qF "ceil(OC / $div)" <<<"$par" \
   && grep -qF "\`CPU_INV_COLS\` = $cols columns in the bf16" <<<"$par" && ! grep -qE "rows x [0-9]+ columns" <<<"$par"; then
  ok "design.md section 13: the products' column tiles as llmc/cpu/common.h has them (fp32 cpu_inv_cols(OC), ceil(OC / $div) tiles; bf16 CPU_INV_COLS = $cols)"
else bad "design.md section 13's 'Kernels whose rows' paragraph does not give the column tiles of llmc/cpu/common.h (fp32: cpu_inv_cols(OC), ceil(OC / ${div:-?}); bf16: CPU_INV_COLS = ${cols:-?}): $(cut -c1-200 <<<"$par")"; fi
w=$(grep -rniwE "lent (machine|gpu)|device tool|lease|leased" README.md docs/ scripts/ 2>/dev/null | head -3)
[ -z "$w" ] && ok "no words of a workplace's tools in README.md, docs/, scripts/" || bad "workplace words: $w"
summary
