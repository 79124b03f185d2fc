// Reference test of `megatron tokenize` (src/data/tokenizer/gpt2_bpe_tokenizer.*)
// against gpt-3-encoder's encode(), GPT-2's original algorithm ported to JavaScript.
// Cases: contractions, whitespace runs in all small combinations, numbers,
// punctuation, accents, many scripts, emoji, the "<|endoftext|>" literal, thousands of
// random strings from a pool of such characters, and the first ~1 MB of the Brown corpus.
//
// Known, deliberate difference: JavaScript's \s has U+FEFF and lacks U+0085; Megatron's
// Python `regex` has U+0085 and lacks U+FEFF. Texts with either code point are not
// compared with node; their Megatron ids (from a Python re-statement of Megatron's
// tokenizer with the `regex` module) are asserted instead.
//
// gpt-3-encoder is slow (its encode() concatenates arrays per token), so texts are
// encoded one by one in node, and in three batched calls of ours: line mode for texts
// without '\n', --null-data for the others, --whole once.
// env: MT_BIN (megatron binary), MT_SOURCE_DIR, MT_DATA_DIR.
'use strict';
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

const bin = process.env.MT_BIN;
const source = process.env.MT_SOURCE_DIR;
const dataDir = process.env.MT_DATA_DIR || path.join(source || '.', 'data');
if (!bin || !source) {
  console.error('MT_BIN and MT_SOURCE_DIR must be set');
  process.exit(2);
}
const encoder = require(path.join(source, '.deps', 'npm', 'node_modules', 'gpt-3-encoder'));
const vocab = path.join(dataDir, 'gpt2', 'vocab.json');
const merges = path.join(dataDir, 'gpt2', 'merges.txt');

function runOurs(flags, input) {
  const r = spawnSync(bin, ['tokenize', '--vocab-file', vocab, '--merge-file', merges, ...flags], {
    input: Buffer.from(input, 'utf-8'),
    maxBuffer: 1 << 30,
  });
  if (r.status !== 0) {
    console.error(`megatron tokenize ${flags.join(' ')} failed (${r.status}): ${r.stderr}`);
    process.exit(1);
  }
  const lines = r.stdout.toString('utf-8').split('\n');
  lines.pop();  // after the last '\n'
  return lines.map((l) => (l === '' ? [] : l.split(' ').map(Number)));
}

// Index of the first difference of two id lists, or -1.
function firstDifference(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

let failures = 0;
function report(name, text, expected, got) {
  failures++;
  if (failures > 10) return;
  const at = firstDifference(expected, got);
  const from = Math.max(0, at - 8);
  console.error(`MISMATCH ${name}: text ${JSON.stringify(text.length > 400 ? text.slice(0, 400) + '...' : text)}`);
  console.error(`  first difference at id index ${at}`);
  console.error(`  expected[${from}..] ${JSON.stringify(expected.slice(from, at + 8))}`);
  console.error(`  got     [${from}..] ${JSON.stringify(got.slice(from, at + 8))}`);
  if (at < expected.length) console.error(`  expected text there: ${JSON.stringify(encoder.decode(expected.slice(from, at + 8)))}`);
}

// The comparison must be able to fail: a changed id is caught.
if (firstDifference([1, 2, 3], [1, 2, 4]) !== 2 || firstDifference([1], [1, 5]) !== 1 || firstDifference([7], [7]) !== -1) {
  console.error('self-check of the comparison failed');
  process.exit(1);
}

// ---- cases ----
const curated = [
  'Hello world', ' hello', 'hello', 'HELLO', "don't", "Don't", "DON'T", "it's", "IT'S", "she'll", "we've", "they're",
  "I'm", "I'd", "he'D", "''s", "'''s", "'s", "'", "''", "x'", "'x", "'S", "rock'n'roll", "y'all'd've", " 's", "  's",
  "the dog's bone's", "'ll'll 're're", 'ain\'t isn\'t', '"quoted"', '\'single\'',
  '0', '12', '123', '1234', '12345678901234567890', '3.14159', '1,000,000', '-42', '+1e-10', '2024-01-01', '12:30pm',
  '١٢٣ ٤٥٦', '½ ¾ ² ³ Ⅻ', '0x1F 0b101',
  '!!!', '...', '?!?!', '---', '***', '@#$%^&*()', '(a)', '[[link]]', '{"k": [1, 2]}', '<tag attr="v"/>', ',,,', ', , ,',
  '.,;:', 'a,b,c', '.,,.', "!'s", '#', '$', '$$$ 100', '~~~', '||', '\\\\', '/usr/bin/env', 'C:\\Windows',
  'naïve café résumé', 'naïve', 'Zoë', 'e\u0301', 'cafe\u0301 na\u0308ive', 'A\u0300\u0301\u0302', ' \u0301',
  'Ångström', 'straße STRASSE', 'Ελληνικά', 'Русский текст', 'Українська', 'ქართული',
  '日本語のテキスト', '中文文本测试', '한국어 텍스트', 'カタカナ ひらがな', '漢字かな交じり文',
  'العربية نص', 'مرحبا بالعالم', 'עברית טקסט', 'שלום', 'हिन्दी पाठ', 'नमस्ते', 'ภาษาไทย', 'สวัสดีครับ',
  'tiếng Việt', 'Türkçe ğüşıöç', 'ꯃꯤꯇꯩ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', '𝟙𝟚𝟛',
  '😀', '😀😀😀', ' 😀', 'a😀b', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇺🇸🇫🇷', '❤️', '✔︎', '©®™', '→←↑↓', '∑∫√∞',
  'mixed English and 日本語 and العربية and 123', 'abc日本def', 'Ελληνικά123English', 'x²+y²=z²',
  '<|endoftext|>', 'a<|endoftext|>b', ' <|endoftext|> ', '<|endoftext|><|endoftext|>',
  '', ' ', '  ', '\t', '\u00a0', '\u3000', 'a\u00a0b', 'a\u3000b', ' \u00a0x', '\u2028', 'a\u2029b', '\u200b', 'a\u200bb',
  '\u180e', '\x1c\x1d\x1e\x1f', 'a\x1fb', '\x00', 'a\x00b', '\x7f', '\u0080\u0081', 'tab\tseparated\tvalues',
  'trailing space ', 'trailing spaces   ', ' leading', '   leading spaces', 'carriage\rreturn', 'vertical\u000btab\u000cfeed',
  'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
  'Supercalifragilisticexpialidocious', 'pneumonoultramicroscopicsilicovolcanoconiosis'.repeat(3),
  '日本語'.repeat(100), ' ' + '中文'.repeat(200), '1234567890'.repeat(30), '!?'.repeat(80), ' '.repeat(100) + 'x',
  'https://example.com/path?query=1&x=2#frag', 'user@example.com', 'snake_case_name camelCaseName', '#include <vector>',
  'for (int i = 0; i < n; ++i) { x += y[i]; }',
];
// Whitespace runs: every sequence of 1-3 from this alphabet, alone, between words, leading and trailing.
const wsAlphabet = [' ', '\t', '\n', '\r', '\u00a0', '\u3000', '\u2003'];
const wsRuns = [];
(function build(prefix) {
  if (prefix.length > 0) wsRuns.push(prefix);
  if (prefix.length === 3) return;
  for (const c of wsAlphabet) build(prefix + c);
})('');
for (const w of wsRuns) curated.push(w, 'a' + w + 'b', w + 'a', 'a' + w, '1' + w + '!', "x" + w + "'s", w + '日本');

// Random strings from a pool of interesting characters (deterministic LCG).
let seed = 12345;
function rand(n) {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed % n;
}
const pool = [
  'a', 'b', 'Z', 'é', 'ß', 'ñ', 'е', 'ж', 'α', 'ש', 'ق', 'अ', 'ि', 'ก', '日', '本', 'の', '한', 'e\u0301', '\u0308',
  '0', '7', '٣', '½', 'Ⅻ', '²', "'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", '"', '!', '?', '.', ',',
  '-', '_', '(', ')', '<', '>', '|', '#', '$', '€', '©', '→', '∑', '😀', '👍🏽', '👨‍👩‍👧', '🇺🇸', '\u200d', '\u200b',
  ' ', ' ', ' ', '  ', '\t', '\r', '\u00a0', '\u2003', '\u3000', '\u2028', '\x0b', '\x0c', '\x1f',
  '<|endoftext|>', 'the', ' the', 'ing', ' and',
];
const randomOneLine = [];
const randomMultiLine = [];
for (let i = 0; i < 6000; i++) {
  const n = 1 + rand(24);
  let s = '';
  for (let k = 0; k < n; k++) s += pool[rand(pool.length)];
  if (i % 3 === 0) {
    s = s.replace(/\r/g, '\n');  // a third of them span lines
    const cut = rand(s.length + 1);
    s = s.slice(0, cut) + '\n' + s.slice(cut);
  }
  (s.includes('\n') ? randomMultiLine : randomOneLine).push(s);
}

// The first ~1 MB of the Brown corpus, one text per document.
const brown = [];
let brownBytes = 0;
for (const line of fs.readFileSync(path.join(dataDir, 'brown', 'brown.jsonl'), 'utf-8').split('\n')) {
  if (line === '' || brownBytes > 1000000) continue;
  const text = JSON.parse(line).text;
  brown.push(text);
  brownBytes += Buffer.byteLength(text);
}

// ---- compare with node ----
const all = [...curated.map((t) => ['curated', t]), ...randomOneLine.map((t) => ['random', t]),
  ...randomMultiLine.map((t) => ['random multi-line', t]), ...brown.map((t) => ['brown', t])];
for (const [, t] of all) {
  if (t.includes('\u0085') || t.includes('\ufeff')) throw new Error('node cases must avoid U+0085 and U+FEFF');
}
const oneLine = all.filter(([, t]) => !t.includes('\n'));
const multiLine = all.filter(([, t]) => t.includes('\n'));
if (multiLine.some(([, t]) => t.includes('\0'))) throw new Error('--null-data cases must not contain NUL');

let compared = 0;
function compare(cases, got) {
  if (got.length !== cases.length) {
    console.error(`expected ${cases.length} output lines, got ${got.length}`);
    process.exit(1);
  }
  cases.forEach(([name, text], i) => {
    const expected = encoder.encode(text);
    compared++;
    if (firstDifference(expected, got[i]) >= 0) report(name, text, expected, got[i]);
  });
}
compare(oneLine, runOurs([], oneLine.map(([, t]) => t + '\n').join('')));
compare(multiLine, runOurs(['--null-data'], multiLine.map(([, t]) => t + '\0').join('')));
// --whole keeps newlines: one multi-line text with trailing whitespace.
const wholeText = 'first line\n\n  second  \n\tthird\n   ';
compare([['whole', wholeText]], runOurs(['--whole'], wholeText));

// ---- Megatron's whitespace, asserted (ids from Python `regex`, i.e. Megatron) ----
const megatronCases = [
  [' \u0085x', [220, 126, 227, 87]],
  ['\u0085x', [126, 227, 87]],
  ['x \u0085\u0085 y', [87, 1587, 227, 126, 227, 331]],
  ['a \ufeffb', [64, 27332, 119, 123, 65]],
  ['a\ufeff b', [64, 171, 119, 123, 275]],
];
const megatronGot = runOurs([], megatronCases.map(([t]) => t + '\n').join(''));
megatronCases.forEach(([text, expected], i) => {
  compared++;
  if (firstDifference(expected, megatronGot[i]) >= 0) report('megatron whitespace', text, expected, megatronGot[i]);
});

if (failures > 0) {
  console.error(`${failures} of ${compared} texts differ`);
  process.exit(1);
}
console.log(`all ${compared} texts match (${oneLine.length} one-line, ${multiLine.length} multi-line, ${brown.length} Brown documents, ${brownBytes} bytes)`);
