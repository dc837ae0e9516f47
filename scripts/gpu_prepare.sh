#!/usr/bin/env bash
# gpu_prepare.sh: run on a prepared machine (Debian 12, apt, network) before a
# GPU check on a machine that may have no MPI, no network and no project data
# (see scripts/gpu_check.sh). Writes build/gpu-carry/ (ignored by git), to be
# copied beside the working tree to the GPU machine:
#
#   debs/NAME.deb   Open MPI 4.1 (mpicc, mpirun, headers, libmpi) and every
#                   runtime library it loads that the GPU image cannot be
#                   assumed to have, fetched with `apt-get download`; the GPU
#                   check unpacks them with `dpkg -x` into a private prefix.
#                   Assumed present there (never carried): libc6, libgcc-s1,
#                   libstdc++6, zlib1g (any image with nvcc has them).
#   data/           the Brown corpus token shards (brown_{train,val}_000000.bin,
#                   2.5 MB) and the GPT-2 tokenizer, for the timed training run
#   ref/            the reference files that fit (configs odd and tiny, 9 MB;
#                   small's debug state is 90 MB: gpu_check.sh generates it
#                   there with that machine's python3)
#   MANIFEST        package versions, file sizes and sha256 of everything above
#
# It ends by measuring what must travel to the GPU machine: the working tree
# (tracked and untracked, not ignored) plus build/gpu-carry; it fails above
# 60 MiB (copies to a remote machine are often limited to 64 MiB).
#
# Usage: bash scripts/gpu_prepare.sh      env: GPU_CARRY (default build/gpu-carry)
# Then, on the GPU machine, in a copy of the working tree with
# build/gpu-carry: bash scripts/gpu_check.sh (see gpu_check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=${GPU_CARRY:-build/gpu-carry}

# Open MPI 4.1.4 (Debian 12) and the runtime closure of mpirun, mpicc, libmpi
# and every MCA component (found with ldd over the packages' ELF files).
# Not carried: libhwloc-plugins (hwloc works without them, and they pull
# libxml2 + libicu72, 10 MB), openssh-client (one node: OMPI_MCA_plm=isolated),
# the Fortran and Java bindings' dependencies.
PKGS=(openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libhwloc15
      libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1
      ibverbs-providers librdmacm1 libnl-3-200 libnl-route-3-200 libpsm2-2
      libpsm-infinipath1 libnuma1 libmunge2 libatomic1 libudev1 libuuid1)

mkdir -p "$CARRY"
rm -rf "$CARRY/debs.new"
mkdir -p "$CARRY/debs.new"
echo "gpu_prepare: apt-get download ${#PKGS[@]} packages into $CARRY/debs"
if ! (cd "$CARRY/debs.new" && apt-get download "${PKGS[@]}" >/dev/null 2>&1); then
  echo "apt-get download failed; running apt-get update once"
  apt-get update -qq >/dev/null 2>&1 || true
  (cd "$CARRY/debs.new" && apt-get download "${PKGS[@]}" >/dev/null) || {
    echo "error: apt-get download failed (no network or no Debian package index?)"; rm -rf "$CARRY/debs.new"; exit 1; }
fi
# plain file names (NAME.deb): version strings hold '+' and '~'
: > "$CARRY/debs.new/packages.txt"
for f in "$CARRY"/debs.new/*.deb; do
  name=$(dpkg-deb -f "$f" Package); ver=$(dpkg-deb -f "$f" Version)
  mv "$f" "$CARRY/debs.new/$name.deb"
  echo "$name $ver" >> "$CARRY/debs.new/packages.txt"
done
n=$(ls "$CARRY"/debs.new/*.deb | wc -l)
[ "$n" -eq ${#PKGS[@]} ] || { echo "error: got $n of ${#PKGS[@]} packages"; exit 1; }
rm -rf "$CARRY/debs"; mv "$CARRY/debs.new" "$CARRY/debs"

# data: token shards and tokenizer (made by `make data` / dev/data/prepare.sh)
mkdir -p "$CARRY/data/brown"
for f in data/brown/brown_train_000000.bin data/brown/brown_val_000000.bin data/gpt2_tokenizer.bin; do
  [ -f "$f" ] || { echo "error: $f missing: run 'make data' first"; exit 1; }
done
cp data/brown/brown_train_000000.bin data/brown/brown_val_000000.bin "$CARRY/data/brown/"
cp data/gpt2_tokenizer.bin "$CARRY/data/"

# reference files that fit: copied from data/ref when present, else generated
mkdir -p "$CARRY/ref"
for cfg in odd tiny; do
  if [ -f data/ref/${cfg}_debug_state.bin ] && [ -f data/ref/${cfg}_model.bin ]; then
    cp data/ref/${cfg}_model.bin data/ref/${cfg}_debug_state.bin "$CARRY/ref/"
  else
    /usr/bin/python3 dev/reference.py --config $cfg --out "$CARRY/ref" >/dev/null
    rm -f "$CARRY/ref/${cfg}_model_bf16.bin"
  fi
done

(cd "$CARRY" && find . -type f ! -name MANIFEST | sort | while read -r f; do
   printf '%s %10d %s\n' "$(sha256sum "$f" | cut -c1-16)" "$(stat -c %s "$f")" "$f"; done) > "$CARRY/MANIFEST"

# what travels: tracked + untracked-not-ignored files, and the carry
tree_b=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r stat -c %s 2>/dev/null | awk '{s+=$1} END {print s+0}')
carry_b=$(find "$CARRY" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
total=$((tree_b + carry_b))
printf 'gpu_prepare: %d packages (%.1f MiB), data %.1f MiB, ref %.1f MiB\n' "$n" \
  "$(du -sb "$CARRY/debs" | awk '{print $1/1048576}')" "$(du -sb "$CARRY/data" | awk '{print $1/1048576}')" \
  "$(du -sb "$CARRY/ref" | awk '{print $1/1048576}')"
printf 'travels: working tree %.2f MiB + %s %.2f MiB = %.2f MiB (limit 64 MiB)\n' \
  "$(awk -v b=$tree_b 'BEGIN{print b/1048576}')" "$CARRY" "$(awk -v b=$carry_b 'BEGIN{print b/1048576}')" \
  "$(awk -v b=$total 'BEGIN{print b/1048576}')"
if [ $total -gt $((60 * 1048576)) ]; then echo "error: more than 60 MiB would travel"; exit 1; fi
