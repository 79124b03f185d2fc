// One-thread throughput of the npm reference tokenizers on a corpus, beside
// build/bench/tokenizer_bench's numbers for ours (bench/README.md, "Tokenizers"):
//   @huggingface/tokenizers  Tokenizer(tokenizer.json).encode(text)   (Llama 3's file)
//   tiktoken (WebAssembly)   Tiktoken(ranks, specials, v2).encode(text, "all") on Megatron's
//                            TikTokenizer setup over cl100k_base (the vocabulary file is
//                            written to OUT_DIR/tiktoken_vocab.json for our bench)
//   node bench/tokenizer_reference_bench.js CORPUS.jsonl OUT_DIR [REPEATS=3]
// MB/s = 10^6 bytes of UTF-8 text per second, best of REPEATS; one process, one thread.
'use strict';
const fs = require('fs');
const path = require('path');

const [corpus, outDir, repeatsArg] = process.argv.slice(2);
if (!corpus || !outDir) {
  console.error('usage: node bench/tokenizer_reference_bench.js CORPUS.jsonl OUT_DIR [REPEATS]');
  process.exit(2);
}
const repeats = Number(repeatsArg || 3);
const npm = path.join(__dirname, '..', '.deps', 'npm', 'node_modules');
const texts = fs.readFileSync(corpus, 'utf-8').split('\n').filter((l) => l).map((l) => JSON.parse(l).text);
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, 'utf-8'), 0);

function time(name, encode) {
  let best = Infinity;
  let tokens = 0;
  for (let r = 0; r < repeats; r++) {
    const t0 = process.hrtime.bigint();
    tokens = 0;
    for (const t of texts) tokens += encode(t).length;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(`${name}: ${(bytes / 1e6 / best).toFixed(2)} MB/s, ${tokens} tokens, ${texts.length} documents`);
}

async function main() {
  fs.mkdirSync(outDir, { recursive: true });
  const { Tokenizer } = await import(path.join(npm, '@huggingface', 'tokenizers', 'dist', 'tokenizers.mjs'));
  const l3 = path.join(npm, '@lenml', 'tokenizer-llama3', 'models');
  const hf = new Tokenizer(JSON.parse(fs.readFileSync(path.join(l3, 'tokenizer.json'), 'utf-8')),
                           JSON.parse(fs.readFileSync(path.join(l3, 'tokenizer_config.json'), 'utf-8')));
  time('@huggingface/tokenizers 0.2.0, Llama 3 tokenizer.json', (t) => hf.encode(t).ids);

  const { Tiktoken } = require(path.join(npm, 'tiktoken', 'lite', 'tiktoken.cjs'));
  const enc = JSON.parse(fs.readFileSync(path.join(npm, 'tiktoken', 'encoders', 'cl100k_base.json'), 'utf-8'));
  const words = enc.bpe_ranks.split(/\s+/).filter((w) => w);
  const byRank = [];
  for (let i = 0; i < words.length; i++) {
    if (words[i] !== '!') continue;
    let rank = Number(words[++i]);
    while (i + 1 < words.length && words[i + 1] !== '!') byRank[rank++] = Buffer.from(words[++i], 'base64');
  }
  const vocab = [];
  for (let b = 0; b < 256; b++) vocab.push(Buffer.from([b]));
  for (const t of byRank) if (t && t.length > 1) vocab.push(t);
  fs.writeFileSync(path.join(outDir, 'tiktoken_vocab.json'), JSON.stringify(vocab.map((t, i) => ({
    rank: i, token_bytes: t.toString('base64'), token_str: t.toString('latin1') }))));
  const specials = {};
  ['<unk>', '<s>', '</s>', '<mask>', '<pad>', '<cls>', '<sep>'].forEach((s, i) => { specials[s] = i; });
  for (let i = 7; i < 1000; i++) specials[`<SPECIAL_${i}>`] = i;
  const v2 = String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
  const tik = new Tiktoken('! 1000 ' + vocab.map((t) => t.toString('base64')).join(' '), specials, v2);
  time(`tiktoken 1.0.22 (wasm), Megatron TikTokenizer v2 over cl100k_base (vocab ${1000 + vocab.length})`,
       (t) => tik.encode(t, 'all'));
  console.log(`our bench: build/bench/tokenizer_bench --tokenizer-type TikTokenizer --tokenizer-model ` +
              `${path.join(outDir, 'tiktoken_vocab.json')} --vocab-size ${1000 + vocab.length} ${corpus} 1`);
}

main();
