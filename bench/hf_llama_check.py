#!/usr/bin/env python3
"""Hugging Face Llama conversion against transformers itself (issue 39), on the GPU machine
(transformers 5 and torch installed; no hub access needed):

  python3 bench/hf_llama_check.py --megatron build/megatron --out /tmp/hf_llama_check \\
      [--device auto|cpu|cuda] [--torch-device cuda|cpu] [--train-iters 200] [--tolerance 1e-4]

Two configurations each way: "llama3" (8 heads in 2 key/value groups, head_dim 32, rope_theta
500000 with rope_scaling llama3 factor 8, 131072 positions, untied lm_head) and "llama2" (multi-head
attention, rope_theta 10000, no scaling).
  (a) HF -> ours: a random transformers LlamaForCausalLM (weights of std 1/sqrt(fan_in), so that
      logits are O(1) and greedy choices are clear) saved in shards with save_pretrained, imported
      with `megatron convert --load-hf`; `megatron generate --token-ids --temperature 0
      --dump-logits` on a batch of prompts (3 to 100 random ids); our logits after every token
      (prompt and continuation) against transformers' forward on the same ids, and our greedy
      continuations against model.generate(do_sample=False), token for token.
  (b) ours -> HF: a Llama trained here (`megatron train --mock-data`: Megatron-Core's mock
      sequences 1, 2, 3, ..., so the model learns to count and its greedy choices are clear;
      llama3 style untied, llama2 style with tied embeddings) exported with `--save-hf` in 4 MB
      shards and loaded with LlamaForCausalLM.from_pretrained, with the same comparison.
  (c) round trips: (a)'s HF files -> ours -> HF hold the same tensors bit for bit and transformers
      reads the same model from both config.json files (AutoConfig: shapes, rope parameters, ties,
      biases); (b)'s export -> import -> export gives byte-identical files.
Tolerance: both sides in fp32 (TF32 off in torch; our CUDA GEMMs are true fp32; attention "eager"),
|ours - transformers| <= tol * (1 + |transformers|) for every logit, tol = 1e-4 by default: fp32
rounding in 4 layers of width 256-688 with O(1) activations stays near 1e-5. A greedy mismatch is a
failure unless transformers' own top-2 margin at that step is within the tolerance (a tie; reported).
Prints a markdown table. Without torch/transformers (e.g. on a CPU-only build machine) the parts
that need them are reported as skipped and the rest (training, export, round trips) still runs.
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys

ROWS = []  # (check, model, result, worst, greedy)


def row(check, model, result, worst="", greedy=""):
    if result.startswith("FAIL: "):  # the whole error on stderr, its last line in the table
        print(result, file=sys.stderr)
        lines = [l for l in result.splitlines() if l.strip()]
        result = "FAIL: " + (lines[-1] if len(lines) > 1 else lines[0][6:])[:200]
    ROWS.append((check, model, result.replace("|", "/"), worst, greedy))
    print(f"  {check} {model}: {result} {worst} {greedy}", file=sys.stderr, flush=True)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


# ---- safetensors without numpy ----------------------------------------------------------------

def read_safetensors(path):
    """{name: (dtype, shape, bytes)}."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def read_hf_tensors(d):
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for s in shards:
        out.update(read_safetensors(os.path.join(d, s)))
    return out


def model_fields(transformers, d):
    """The model d's config.json states, as transformers reads it (its defaults and spellings)."""
    c = transformers.AutoConfig.from_pretrained(d)
    keys = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "vocab_size", "tie_word_embeddings",
            "attention_bias", "mlp_bias", "hidden_act")
    out = {k: getattr(c, k, None) for k in keys}
    out["head_dim"] = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    rope = getattr(c, "rope_parameters", None)  # transformers 5
    if not rope:
        rope = dict(getattr(c, "rope_scaling", None) or {}, rope_theta=getattr(c, "rope_theta", None))
    rope = dict(rope)
    rope.setdefault("rope_type", rope.pop("type", "default"))
    out["rope"] = {k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v) for k, v in rope.items()}
    return out


# ---- the configurations -----------------------------------------------------------------------

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}
HF_CONFIGS = {
    "llama3": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
                   num_key_value_heads=2, head_dim=32, max_position_embeddings=131072, rms_norm_eps=1e-5,
                   vocab_size=1000, tie_word_embeddings=False, theta=500000.0, scaling=LLAMA3_SCALING),
    "llama2": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                   num_key_value_heads=8, max_position_embeddings=4096, rms_norm_eps=1e-6, vocab_size=1000,
                   tie_word_embeddings=False, theta=10000.0, scaling=None),
}
TRAIN_COMMON = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "8", "--seq-length", "64",
                "--micro-batch-size", "8", "--global-batch-size", "8", "--lr", "3e-3", "--min-lr", "3e-4",
                "--lr-decay-style", "cosine", "--log-interval", "50", "--eval-iters", "1",
                "--eval-interval", "100000", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
                "--split", "99,1,0", "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
                "--disable-bias-linear", "--attention-dropout", "0", "--hidden-dropout", "0"]
TRAIN_CONFIGS = {
    "llama3": ["--ffn-hidden-size", "512", "--group-query-attention", "--num-query-groups", "2", "--kv-channels", "32",
               "--max-position-embeddings", "131072", "--rotary-base", "500000", "--use-rope-scaling",
               "--rope-scaling-factor", "8", "--untie-embeddings-and-output-weights"],
    "llama2": ["--ffn-hidden-size", "688", "--max-position-embeddings", "4096", "--rotary-base", "10000"],
}


def hf_llama(torch, transformers, name, seed):
    c = dict(HF_CONFIGS[name])
    theta, scaling = c.pop("theta"), c.pop("scaling")
    if int(transformers.__version__.split(".")[0]) >= 5:  # rope_parameters, rope_theta inside
        config = transformers.LlamaConfig(**c, rope_parameters=dict(scaling or {"rope_type": "default"}, rope_theta=theta))
    else:
        config = transformers.LlamaConfig(**c, rope_theta=theta, rope_scaling=scaling)
    try:
        config._attn_implementation = "eager"  # plain softmax(QK^T)V, as ours
    except Exception:  # noqa: BLE001 - a read-only attribute in some version: sdpa is fp32-exact enough
        pass
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.ndim == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
            else:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    return model


def load_hf(torch, transformers, d, device):
    dtype = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": torch.float32}
    m = transformers.LlamaForCausalLM.from_pretrained(d, attn_implementation="eager", **dtype)
    return m.to(device).eval()


def prompts_for(vocab, counting):
    rng = random.Random(7)
    lengths = [3, 7, 16, 31, 64, 100, 5, 12]
    if counting:  # where the trained models learned to count
        return [list(range(s, s + n)) for s, n in zip([10, 200, 1000, 50, 300, 2000, 7, 3000], lengths)]
    return [[rng.randrange(vocab) for _ in range(n)] for n in lengths]


def ours_generate(args, ck, prompts, work, max_new):
    pf = os.path.join(work, "prompts.txt")
    with open(pf, "w") as f:
        for p in prompts:
            f.write(" ".join(map(str, p)) + "\n")
    dump = os.path.join(work, "dump.safetensors")
    out = run([args.megatron, "generate", "--load", ck, "--token-ids", "--prompt-file", pf, "--max-new-tokens",
               str(max_new), "--temperature", "0", "--dump-logits", dump, "--device", args.device])
    continuations = [[int(t) for t in line.split()][len(p):] for line, p in zip(out.splitlines(), prompts)]
    return continuations, read_safetensors(dump)


def compare(torch, model, prompts, continuations, dump, tol, max_new, device, eos):
    """(ok, worst abs diff, greedy summary)."""
    ok, worst, same, ties, total = True, 0.0, 0, 0, 0
    notes = []
    for i, (prompt, ours) in enumerate(zip(prompts, continuations)):
        _, shape, raw = dump[f"prompt.{i}.logits"]
        got = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(shape)
        _, _, graw = dump[f"prompt.{i}.generated"]
        generated = list(struct.unpack(f"<{len(graw) // 4}i", graw))
        ids = torch.tensor([prompt + generated], device=device)
        with torch.no_grad():
            ref = model(ids).logits[0, :, :got.shape[1]].double().cpu()
        err = (got.double() - ref).abs()
        worst = max(worst, float(err.max()))
        if not bool((err <= tol * (1 + ref.abs())).all()):
            ok = False
            notes.append(f"prompt {i}: logits beyond the tolerance")
        with torch.no_grad():
            hf = model.generate(torch.tensor([prompt], device=device), attention_mask=torch.ones(1, len(prompt),
                                dtype=torch.long, device=device), max_new_tokens=max_new, do_sample=False,
                                eos_token_id=eos, pad_token_id=eos if eos is not None else 0)[0, len(prompt):].tolist()
        if eos is not None and eos in hf:
            hf = hf[:hf.index(eos)]
        total += 1
        if hf == ours:
            same += 1
            continue
        k = next((j for j, (a, b) in enumerate(zip(hf, ours)) if a != b), min(len(hf), len(ours)))
        with torch.no_grad():
            step = model(torch.tensor([prompt + hf[:k]], device=device)).logits[0, -1].double().cpu()
        top = torch.topk(step, 2).values
        margin = float(top[0] - top[1])
        if margin <= tol * (1 + float(top[0].abs())):
            ties += 1
            notes.append(f"prompt {i}: a tie at token {k} (margin {margin:.2g})")
        else:
            ok = False
            notes.append(f"prompt {i}: greedy differs at token {k} (margin {margin:.2g})")
    greedy = f"{same}/{total} prompts identical" + (f", {ties} ties" if ties else "")
    if notes:
        print("    " + "; ".join(notes), file=sys.stderr)
    return ok, worst, greedy


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto", help="our generate's --device")
    ap.add_argument("--torch-device", default=None, help="transformers' device (default cuda when available)")
    ap.add_argument("--train-iters", type=int, default=200)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    args = ap.parse_args()
    args.megatron = os.path.abspath(args.megatron)
    os.makedirs(args.out, exist_ok=True)
    tol = args.tolerance
    try:
        import torch
        import transformers
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        tdev = args.torch_device or ("cuda" if torch.cuda.is_available() else "cpu")
        have_torch = f"torch {torch.__version__}, transformers {transformers.__version__} on {tdev}"
    except Exception as e:  # noqa: BLE001 - any import failure means: skip those parts
        torch = transformers = None
        have_torch = None
        why = f"skipped: torch/transformers not importable ({type(e).__name__}: {e})"
    print(f"megatron: {args.megatron}; {have_torch or why}", file=sys.stderr)

    for name in ("llama3", "llama2"):
        work = os.path.join(args.out, name)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        # (a) and (c): a transformers-made model.
        if torch is None:
            row("(a) HF -> ours", name, why)
            row("(c) HF -> ours -> HF", name, why)
        else:
            try:
                model = hf_llama(torch, transformers, name, seed=11)
                hf = os.path.join(work, "hf_made")
                model.save_pretrained(hf, max_shard_size="4MB")
                model = model.to(tdev)
                ck = os.path.join(work, "ck_from_hf")
                run([args.megatron, "convert", "--load-hf", hf, "--save", ck, "--make-vocab-size-divisible-by", "8"])
                prompts = prompts_for(HF_CONFIGS[name]["vocab_size"], counting=False)
                cont, dump = ours_generate(args, ck, prompts, work, args.max_new_tokens)
                eos = model.generation_config.eos_token_id
                eos = eos[0] if isinstance(eos, list) else eos
                ok, worst, greedy = compare(torch, model, prompts, cont, dump, tol, args.max_new_tokens, tdev, eos)
                row("(a) HF -> ours", name, "pass" if ok else "FAIL", f"{worst:.3g}", greedy)
                back = os.path.join(work, "hf_back")
                run([args.megatron, "convert", "--load", ck, "--save-hf", back])
                a, b = read_hf_tensors(hf), read_hf_tensors(back)
                a = {k: v for k, v in a.items() if not k.endswith("rotary_emb.inv_freq")}
                same = sorted(a) == sorted(b) and all(a[k] == b[k] for k in a)
                fields_in, fields_back = model_fields(transformers, hf), model_fields(transformers, back)
                same_cfg = fields_in == fields_back
                if not same_cfg:
                    print(f"    config.json: {fields_in} in, {fields_back} back", file=sys.stderr)
                row("(c) HF -> ours -> HF", name, "pass" if same and same_cfg else "FAIL",
                    "", f"{len(a)} tensors bit-identical" if same else "tensors differ" +
                    ("" if same_cfg else "; config.json states another model"))
            except Exception as e:  # noqa: BLE001
                row("(a) HF -> ours", name, f"FAIL: {e}")

        # (b) and (c): a model trained here.
        ck = os.path.join(work, "ck_trained")
        try:
            flags = TRAIN_COMMON + TRAIN_CONFIGS[name] + ["--train-iters", str(args.train_iters), "--lr-warmup-iters",
                                                         str(args.train_iters // 10), "--save", ck,
                                                         "--save-interval", str(args.train_iters), "--device",
                                                         args.device]
            log = run([args.megatron, "train"] + flags)
            last = [l for l in log.splitlines() if "elapsed time per iteration" in l][-1:]
            print("    " + (last[0].strip() if last else "(no iteration line)"), file=sys.stderr)
            hf1, ck2, hf2 = (os.path.join(work, n) for n in ("hf_exported", "ck_reimported", "hf_exported_again"))
            # Sharded (4 MB of 17-18), so that transformers also reads our model.safetensors.index.json.
            run([args.megatron, "convert", "--load", ck, "--save-hf", hf1, "--max-shard-size", "4MB"])
            run([args.megatron, "convert", "--load-hf", hf1, "--save", ck2])
            run([args.megatron, "convert", "--load", ck2, "--save-hf", hf2, "--max-shard-size", "4MB"])
            files = sorted(os.listdir(hf1))
            identical = files == sorted(os.listdir(hf2)) and all(
                open(os.path.join(hf1, f), "rb").read() == open(os.path.join(hf2, f), "rb").read() for f in files)
            row("(c) ours -> HF -> ours -> HF", name, "pass" if identical else "FAIL", "",
                f"{len(files)} files byte-identical" if identical else "files differ")
            if torch is None:
                row("(b) ours -> HF", name, why)
            else:
                model = load_hf(torch, transformers, hf1, tdev)
                prompts = prompts_for(4097, counting=True)
                cont, dump = ours_generate(args, ck, prompts, work, args.max_new_tokens)
                ok, worst, greedy = compare(torch, model, prompts, cont, dump, tol, args.max_new_tokens, tdev, None)
                row("(b) ours -> HF", name, "pass" if ok else "FAIL", f"{worst:.3g}", greedy)
        except Exception as e:  # noqa: BLE001
            row("(b) ours -> HF", name, f"FAIL: {e}")

    print(f"\n### Hugging Face Llama conversion check ({have_torch or 'no torch'}; our --device {args.device})\n")
    print(f"Tolerance: |ours - transformers| <= {tol:g} * (1 + |transformers|) per logit, fp32 both sides.\n")
    print("| check | model | result | worst abs logit diff | greedy / files |")
    print("| --- | --- | --- | --- | --- |")
    for r in ROWS:
        print("| " + " | ".join(r) + " |")
    return 1 if any(r[2].startswith("FAIL") for r in ROWS) else 0


if __name__ == "__main__":
    sys.exit(main())
