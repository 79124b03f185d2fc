// Helper of llama2_sentencepiece_test.py: reads JSON {"vocab": bool, "texts": [...]} on stdin and
// prints llama-tokenizer-js's vocabulary (Llama 1/2's 32000 pieces by id, and its merges in
// priority order, Hugging Face's tokenizer.json order) and its ids of each
// text (encode(text, add_bos_token=false, add_preceding_space=true): SentencePiece's
// add_dummy_prefix, no BOS, as Megatron's Llama2Tokenizer).
import fs from 'node:fs';
import path from 'node:path';

const npm = process.argv[2];
const { LlamaTokenizer } = await import(path.join(npm, 'llama-tokenizer-js', 'llama-tokenizer.js'));
const tok = new LlamaTokenizer();
const req = JSON.parse(fs.readFileSync(0, 'utf-8'));
const out = {};
if (req.vocab) {
  out.vocab = tok.vocabById;
  out.merges = [...tok.merges.entries()].sort((a, b) => a[1] - b[1]).map(([m]) => m);  // priority order
}
out.ids = (req.texts || []).map((t) => tok.encode(t, false, true));
process.stdout.write(JSON.stringify(out));
