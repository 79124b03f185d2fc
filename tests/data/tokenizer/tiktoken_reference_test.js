// --tokenizer-type TikTokenizer (src/data/tokenizer/tiktoken_tokenizer.*) against tiktoken
// itself (the npm package's WebAssembly build of the Rust library), set up as Megatron's
// TikTokenTokenizer does: mergeable ranks = file rank + num_special_tokens, special tokens
// "<unk>" "<s>" "</s>" "<mask>" "<pad>" "<cls>" "<sep>" "<SPECIAL_7>"... at ids 0..N-1, the v1 or
// v2 pattern, encode(text, allowed_special="all").
// The vocabulary file (Megatron's JSON list of {rank, token_bytes, token_str}, the 256 bytes
// first) is built here from tiktoken's cl100k_base ranks: the 256 single bytes in byte order,
// then cl100k's longer tokens in their rank order.
// Configurations: v2 with 1000 special tokens and the whole vocabulary; v1 with 10 special
// tokens and --vocab-size 30000 (Megatron keeps the first 29990 entries). Texts: the Brown
// Corpus and tokenizer_cases.py's hard cases ("</s>" or "<SPECIAL_12>" in a document is the
// special id). Also: eod 2 at the end of each preprocessed document, 1 vs 3 workers identical,
// train's padded-vocab line, decode round trip.
// env: MT_BIN, MT_SOURCE_DIR, MT_DATA_DIR.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');

const bin = process.env.MT_BIN;
const source = process.env.MT_SOURCE_DIR;
const dataDir = process.env.MT_DATA_DIR || path.join(source || '.', 'data');
if (!bin || !source) {
  console.error('MT_BIN and MT_SOURCE_DIR must be set');
  process.exit(2);
}
const npm = path.join(source, '.deps', 'npm', 'node_modules');
const { Tiktoken } = require(path.join(npm, 'tiktoken', 'lite', 'tiktoken.cjs'));
const hard = JSON.parse(spawnSync('/usr/bin/python3', ['-c',
  'import sys, json; sys.path.insert(0, sys.argv[1]); import tokenizer_cases as t; print(json.dumps(t.TEXTS_HARD))',
  __dirname]).stdout.toString());

// Megatron's _PATTERN_TIKTOKEN_V1 / _V2.
const PATTERNS = {
  v1: String.raw`[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`,
  v2: String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
};
const NAMED = ['<unk>', '<s>', '</s>', '<mask>', '<pad>', '<cls>', '<sep>'];

let failures = 0;
function fail(msg) {
  failures++;
  if (failures <= 20) console.error('FAIL: ' + msg);
}

function runOurs(args, input) {
  const r = spawnSync(bin, args, { input, maxBuffer: 1 << 30 });
  if (r.status !== 0) {
    console.error(`megatron ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
    process.exit(1);
  }
  return r.stdout;
}

// cl100k_base's ranks (tiktoken's "! offset b64 b64 ..." form) -> token byte strings by rank.
function cl100kTokens() {
  const enc = JSON.parse(fs.readFileSync(path.join(npm, 'tiktoken', 'encoders', 'cl100k_base.json'), 'utf-8'));
  const words = enc.bpe_ranks.split(/\s+/).filter((w) => w);
  const byRank = [];
  for (let i = 0; i < words.length; i++) {
    if (words[i] === '!') {
      let rank = Number(words[++i]);
      while (i + 1 < words.length && words[i + 1] !== '!') byRank[rank++] = Buffer.from(words[++i], 'base64');
    }
  }
  return byRank.filter((b) => b);
}

function main() {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'mt_tik_ref_'));
  const tokens = cl100kTokens();
  const vocab = [];
  for (let b = 0; b < 256; b++) vocab.push(Buffer.from([b]));
  for (const t of tokens) if (t.length > 1) vocab.push(t);
  const file = path.join(work, 'tiktoken_vocab.json');
  fs.writeFileSync(file, JSON.stringify(vocab.map((t, i) => ({
    rank: i, token_bytes: t.toString('base64'), token_str: t.toString('latin1') }))));

  const brown = fs.readFileSync(path.join(dataDir, 'brown', 'brown.jsonl'), 'utf-8').split('\n')
    .filter((l) => l).slice(0, 200).map((l) => JSON.parse(l).text);
  const texts = [...brown, ...hard, 'a </s> b <SPECIAL_12> c <SPECIAL_999> <SPECIAL_1000> <SPECIAL_07> <<s>>'];

  const configs = [
    { pattern: 'v2', special: 1000, size: 1000 + vocab.length },
    { pattern: 'v1', special: 10, size: 30000 },
  ];
  for (const c of configs) {
    const kept = vocab.slice(0, c.size - c.special);
    let bfe = `! ${c.special}`;
    for (const t of kept) bfe += ' ' + t.toString('base64');
    const specials = {};
    for (let i = 0; i < c.special; i++) specials[i < NAMED.length ? NAMED[i] : `<SPECIAL_${i}>`] = i;
    const ref = new Tiktoken(bfe, specials, PATTERNS[c.pattern]);
    const flags = ['--tokenizer-type', 'TikTokenizer', '--tokenizer-model', file, '--tiktoken-pattern', c.pattern,
                   '--tiktoken-num-special-tokens', String(c.special), '--vocab-size', String(c.size)];
    const input = Buffer.concat(texts.map((t) => Buffer.from(t + '\0', 'utf-8')));
    const lines = runOurs(['tokenize', '--null-data', ...flags], input).toString('utf-8').split('\n').slice(0, -1);
    let same = 0;
    texts.forEach((t, i) => {
      const want = Array.from(ref.encode(t, 'all'));
      const got = lines[i] === '' ? [] : lines[i].split(' ').map(Number);
      if (want.length === got.length && want.every((v, k) => v === got[k])) {
        same++;
      } else {
        const at = want.findIndex((v, k) => v !== got[k]);
        fail(`${c.pattern}/${c.special} text ${i} ${JSON.stringify(t.slice(0, 80))}: first difference at ${at}: ` +
             `expected ${want.slice(Math.max(0, at - 3), at + 5)} got ${got.slice(Math.max(0, at - 3), at + 5)}`);
      }
    });
    console.log(`${c.pattern}, ${c.special} special tokens, vocab ${c.size}: ${same}/${texts.length} texts identical`);

    const back = runOurs(['tokenize', '--decode', '--null-data', ...flags],
                         Buffer.from(lines.slice(-12).join('\n') + '\n')).toString('utf-8').split('\0').slice(0, -1);
    back.forEach((b, i) => { if (b !== texts[texts.length - 12 + i]) fail(`${c.pattern}: decode of text ${i}: ${JSON.stringify(b)}`); });

    const padded = Math.ceil(c.size / 128) * 128;
    const tr = spawnSync(bin, ['train', '--dry-run', '--num-layers', '2', '--hidden-size', '64',
      '--num-attention-heads', '4', '--seq-length', '32', '--max-position-embeddings', '32', '--micro-batch-size', '1',
      '--train-iters', '1', '--lr', '1e-4', '--mock-data', ...flags]);
    const line = ` > padded vocab (size: ${c.size}) with ${padded - c.size} dummy tokens (new size: ${padded})`;
    if (!(tr.stdout.toString() + tr.stderr.toString()).includes(line)) fail(`${c.pattern}: train lacks '${line}': ${tr.stderr}`);

    if (c.pattern === 'v2') {
      const jsonl = path.join(work, 'in.jsonl');
      const docs = brown.slice(0, 60).concat(hard.filter((t) => t));
      fs.writeFileSync(jsonl, docs.map((t) => JSON.stringify({ text: t }) + '\n').join(''));
      const outs = [1, 3].map((w) => {
        const prefix = path.join(work, `tik_w${w}`);
        runOurs(['preprocess', '--input', jsonl, '--output-prefix', prefix, ...flags, '--append-eod',
                 '--workers', String(w), '--log-interval', '100000'], Buffer.alloc(0));
        return prefix + '_text_document';
      });
      for (const ext of ['.bin', '.idx']) {
        if (!fs.readFileSync(outs[0] + ext).equals(fs.readFileSync(outs[1] + ext))) fail(`preprocess ${ext}: 1 and 3 workers differ`);
      }
      const ids = new Int32Array(fs.readFileSync(outs[0] + '.bin').buffer.slice(0));
      const want = [].concat(...docs.map((t) => { const e = Array.from(ref.encode(t, 'all')); return e.length ? [...e, 2] : []; }));
      if (ids.length !== want.length || ids.some((v, i) => v !== want[i])) fail('preprocess: tokens differ from encode(text) + [2]');
    }
    ref.free();
  }
  fs.rmSync(work, { recursive: true, force: true });
  if (failures) {
    console.error(`${failures} failure(s)`);
    process.exit(1);
  }
  console.log('tiktoken reference: all identical');
}

main();
