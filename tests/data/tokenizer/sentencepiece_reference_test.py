"""SentencePiece tokenizers (--tokenizer-type Llama2Tokenizer, SentencePieceTokenizer,
GPTSentencePieceTokenizer) against Debian's python3-sentencepiece, Megatron's own library.

Models are trained here on the Brown Corpus with Debian's spm_train: a BPE model with
byte_fallback (Llama's kind: characters outside the vocabulary become <0xNN> pieces) and a
unigram model without it (they become <unk>). For each model and type name:
  - ids of `megatron tokenize` == SentencePieceProcessor.encode(text) (Megatron's
    text_to_ids: no BOS, no EOS) on every Brown document and the hard cases of
    tokenizer_cases.py ("<s>" and "</s>" written in a text are plain text: control symbols are
    never matched in the input);
  - `--decode` == decode_ids;
  - preprocess --append-eod: each document is encode(text) + [eos_id], the .bin/.idx of
    --workers 1 and --workers 3 are byte-identical, and the dtype follows the vocabulary;
  - train --dry-run reports vocab_size = get_piece_size() and Megatron's padded-vocab line.
Run by Debian's python3; env MT_BIN, MT_DATA_DIR.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_cases as tc  # noqa: E402

import sentencepiece as spm  # noqa: E402

TYPES = ["Llama2Tokenizer", "SentencePieceTokenizer", "GPTSentencePieceTokenizer"]


def train_model(work, name, extra):
    corpus = os.path.join(work, "brown.txt")
    if not os.path.exists(corpus):
        with open(corpus, "w", encoding="utf-8") as f:
            for t in tc.brown_texts():
                f.write(t + "\n")
    subprocess.run(["spm_train", f"--input={corpus}", f"--model_prefix={work}/{name}", "--num_threads=2",
                    "--minloglevel=2", *extra], check=True, capture_output=True)
    return f"{work}/{name}.model"


def main():
    ch = tc.Checker()
    work = tempfile.mkdtemp(prefix="mt_sp_ref_")
    try:
        models = {
            "bpe_byte_fallback": train_model(work, "bpe", ["--model_type=bpe", "--vocab_size=4000",
                                                           "--byte_fallback=true", "--character_coverage=0.9995"]),
            "unigram": train_model(work, "unigram", ["--model_type=unigram", "--vocab_size=3000"]),
        }
        brown = tc.brown_texts()
        texts = brown + tc.TEXTS_HARD
        for name, model in models.items():
            sp = spm.SentencePieceProcessor(model_file=model)
            expected = [sp.encode(t) for t in texts]
            for ty in TYPES:
                got = tc.megatron_tokenize(["--tokenizer-type", ty, "--tokenizer-model", model], texts)
                ch.compare(f"{name}/{ty}", texts, expected, got)
            # Byte fallback really happened (and unk in the unigram model): the test covers it.
            rare = sp.encode(tc.TEXTS_HARD[13])
            if name == "bpe_byte_fallback":
                ch.check(any(sp.is_byte(i) for i in rare), f"{name}: no byte-fallback piece in the rare text")
            else:
                ch.check(sp.unk_id() in rare, f"{name}: no <unk> in the rare text")

            # decode: Megatron's detokenize is decode_ids.
            sample = [expected[0], expected[-20], expected[len(brown) + 3], [sp.bos_id(), 5, 6, sp.eos_id()]]
            r = subprocess.run([tc.MT_BIN, "tokenize", "--decode", "--tokenizer-type", "Llama2Tokenizer",
                                "--tokenizer-model", model],
                               input="".join(" ".join(map(str, s)) + "\n" for s in sample).encode(),
                               capture_output=True)
            ch.check(r.returncode == 0, f"{name}: decode failed: {r.stderr}")
            got_text = r.stdout.decode("utf-8").split("\n")[:-1]
            ch.check(got_text == [sp.decode(s) for s in sample], f"{name}: decode differs: {got_text[:1]}")

            # preprocess with --append-eod, 1 and 3 workers.
            jsonl = os.path.join(work, "in.jsonl")
            docs = brown[:150] + [t for t in tc.TEXTS_HARD if t]
            with open(jsonl, "w", encoding="utf-8") as f:
                for t in docs:
                    f.write(json.dumps({"text": t}) + "\n")
            outs = []
            for workers in (1, 3):
                prefix = os.path.join(work, f"{name}_w{workers}")
                tc.megatron(["preprocess", "--input", jsonl, "--output-prefix", prefix, "--tokenizer-type",
                             "Llama2Tokenizer", "--tokenizer-model", model, "--append-eod", "--workers",
                             str(workers), "--log-interval", "100000"])
                outs.append(prefix + "_text_document")
            for ext in (".bin", ".idx"):
                with open(outs[0] + ext, "rb") as a, open(outs[1] + ext, "rb") as b:
                    ch.check(a.read() == b.read(), f"{name}: {ext} differs between 1 and 3 workers")
            got_docs, dtype = tc.read_indexed(outs[0])
            want_docs = [sp.encode(t) + [sp.eos_id()] if sp.encode(t) else [] for t in docs]  # empty stays empty
            ch.check(len(got_docs) == len(want_docs), f"{name}: {len(got_docs)} documents, expected {len(want_docs)}")
            ch.compare(f"{name}/preprocess", docs, want_docs, got_docs)
            ch.check(dtype.__name__ == "uint16", f"{name}: dtype {dtype} for {sp.get_piece_size()} pieces")

            # train --dry-run: the vocabulary and the padded-vocab line.
            r = tc.megatron(["train", "--dry-run", "--num-layers", "2", "--hidden-size", "64",
                             "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
                             "--micro-batch-size", "1", "--train-iters", "1", "--lr", "1e-4", "--mock-data",
                             "--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", model,
                             "--make-vocab-size-divisible-by", "128", "--tensor-model-parallel-size", "1"],
                            check=False)
            n = sp.get_piece_size()
            padded = (n + 127) // 128 * 128
            line = f" > padded vocab (size: {n}) with {padded - n} dummy tokens (new size: {padded})"
            ch.check(line in r.stdout + r.stderr, f"{name}: train --dry-run lacks {line!r}: {r.stderr[-400:]}")

            # train on that data with the Llama 2 appendix's tokenizer flags: a few CPU iterations
            # that read the .bin/.idx through the tokenizer's vocabulary (the loss must be finite
            # and logged for every iteration).
            r = tc.megatron(["train", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                             "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "2",
                             "--global-batch-size", "2", "--train-iters", "3", "--lr", "1e-4", "--log-interval", "1",
                             "--eval-iters", "0", "--split", "100,0,0", "--data-path", outs[0],
                             "--data-cache-path", os.path.join(work, f"cache_{name}"), "--tokenizer-type",
                             "Llama2Tokenizer", "--tokenizer-model", model, "--position-embedding-type", "rope",
                             "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear",
                             "--untie-embeddings-and-output-weights", "--device", "cpu"], check=False)
            logged = [l for l in (r.stdout + r.stderr).splitlines() if " iteration " in l and "lm loss:" in l]
            ch.check(r.returncode == 0 and len(logged) == 3,
                     f"{name}: train on the Llama2Tokenizer data: rc {r.returncode}, {len(logged)} iteration lines: "
                     f"{r.stderr[-400:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ch.finish(f"sentencepiece reference: {len(TYPES)} types x 2 models on {len(tc.brown_texts())} Brown documents "
              f"and {len(tc.TEXTS_HARD)} hard cases identical")


if __name__ == "__main__":
    main()
