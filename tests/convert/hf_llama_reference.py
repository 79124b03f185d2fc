"""A numpy statement of Hugging Face transformers' Llama forward pass (LlamaForCausalLM, eval mode),
the independent reference for `megatron convert --load-hf / --save-hf` of Llama models
(tests/convert/hf_llama_test.cpp drives it; it is not a CTest entry of its own). Run by Debian's
python3 with numpy:

  hf_llama_reference.py make DIR VARIANT [VOCAB]
      writes DIR/hf_in: config.json and the weights of a random Llama in HF's own layout, written
      here with numpy (never by our writer). VARIANT:
        llama3  Llama 3 style: 4 heads in 2 key/value groups (GQA), head_dim 16 != hidden / heads,
                rope_theta 500000 with rope_scaling {"rope_type": "llama3", "factor": 8, ...},
                untied lm_head, bos/eos ids (eos a list), weights sharded in two files with
                model.safetensors.index.json;
        llama2  Llama 2 style: multi-head attention, rope_theta 10000, rope_scaling null, untied,
                one model.safetensors with the rotary inv_freq buffers older transformers saved
                (the importer must skip them), rms_norm_eps 1e-6;
        v5      a transformers 5 config.json: rope_parameters {"rope_type": "linear", "factor": 4,
                "rope_theta": 10000} (no top-level rope_theta), "dtype", one key/value head (MQA),
                attention_bias and mlp_bias true, tie_word_embeddings true with a lm_head.weight
                equal to embed_tokens (skipped by the importer);
        stop    the llama2 shape with eos_token_id [5] whose greedy continuation is always 5: the
                layers' weights are zero (the residual stream is the embedding), every embedding
                has a positive first element, and only lm_head's first column is non-zero (+1 for
                id 5, -1 for the others), so id 5 has the largest logit after any context
                (tests/cli/checkpoint_tokenizer_test.cpp's stop test).
      VOCAB (default 48) sets vocab_size, e.g. to a SentencePiece model's.
      Weights are O(0.3), so activations are O(1) and each mapping shows in the logits.
  hf_llama_reference.py check DIR
      reads DIR/hf_out (our export of the imported checkpoint) and DIR/ours.safetensors (our CPU
      model's tokens, labels, logits, loss; the KV-cache generator's last logits and its greedy
      continuation of batch 0), then
        1. every tensor of hf_out equals hf_in bit for bit (import -> export is the identity;
           the skipped buffers and the tied lm_head aside) and hf_out/config.json states the same
           model as hf_in/config.json;
        2. the reference forward on hf_in's config.json + weights, in float64, gives our logits,
           loss and generator logits within the tolerance below;
        3. the reference's greedy continuation equals ours token for token.
      Exit status 1 on any failure, with the worst errors printed.
  hf_llama_reference.py check-dump HF_DIR DUMP
      the same forward on HF_DIR against `megatron generate --dump-logits DUMP --temperature 0`
      (tests/cli/convert_command_llama_test.cpp): each prompt's logits after every token (prompt
      and continuation) within the tolerance, and each generated token the reference's argmax.

The forward, as transformers' modeling_llama (eval: dropout off):
  x = embed_tokens[ids]
  per layer: a = rms(x) * input_layernorm.w
    q, k, v = a @ q_proj.w^T (+ b), a @ k_proj.w^T, a @ v_proj.w^T; heads of head_dim d
    q, k = q cos + rotate_half(q) sin, the same for k; rotate_half(x) = (-x2, x1) for x = (x1, x2)
      halves; cos, sin = cos(p inv_freq), sin(p inv_freq), each repeated for both halves
    k, v = repeat_kv: query head j uses key/value head j // (heads / kv_heads)
    o = softmax(q k^T / sqrt(d) + causal mask) v, heads merged; x += o @ o_proj.w^T (+ b)
    m = rms(x) * post_attention_layernorm.w; x += (silu(m gate^T) * (m up^T)) @ down^T (+ biases)
  logits = (rms(x) * norm.w) @ lm_head.w^T (embed_tokens with tie_word_embeddings)
rms(x) = x / sqrt(mean(x^2) + rms_norm_eps). inv_freq = 1 / theta^(2i / d) (i < d / 2); rope_type
linear divides it by factor; llama3 (transformers' _compute_llama3_parameters): wavelen = 2 pi /
inv_freq; wavelen < C / high_freq_factor: kept; wavelen > C / low_freq_factor: / factor; between:
(1 - s) f / factor + s f with s = (C / wavelen - low) / (high - low), C =
original_max_position_embeddings.

Tolerance: ours runs in fp32 (unit roundoff u = 6e-8), the reference in float64. Each logit is two
layers deep: dot products of length <= 96 whose rounding error grows like sqrt(n) u |terms| (the
terms here sum to ~40: O(1) activations times embeddings of std 1), RMS norms that divide by fp32
norms, SwiGLU products, rotary angles p inv_freq computed in fp32 (our inv_freq follows Megatron's
fp32 operations, within an ulp of the float64 values), and logits up to ~14. The observed error is
1e-5 to 1.8e-5 absolute (~1.5e-6 relative to the largest logit); we allow
|ours - ref| <= 5e-5 * (1 + |ref|) (the observed error uses at most 27% of it), and the same bound on
the loss. Mistakes of the kind this test is for are far above it with these weight scales (measured
on these models when the test was written, largest logit change): q/k rows permuted as
convert_llama_weights_to_hf.py's permute does, 12 to 17 (~1e5 times the bound); gate and up
swapped, 12 to 14; key/value heads tiled instead of repeated (GQA), 17; the llama3 scaling left
out, 0.07 (~660 times the bound; it changes only the lower frequencies at these positions); the
linear scaling left out, 14.
"""
import json
import math
import os
import struct
import sys

import numpy as np

TOL = 5e-5  # see the tolerance above
DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        if info["dtype"] == "BF16":
            raw = np.frombuffer(data[begin:end], dtype=np.uint16).astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(data[begin:end], dtype=DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    return out


def write_safetensors(path, tensors):
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        code = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[arr.dtype]
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        chunks.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def read_hf_weights(d):
    """model.safetensors, or the shards model.safetensors.index.json names."""
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        index = json.load(f)
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        part = read_safetensors(os.path.join(d, shard))
        for name in part:
            assert index["weight_map"][name] == shard, name
        out.update(part)
    assert sorted(out) == sorted(index["weight_map"]), "the index lists other tensors than the shards hold"
    return out


VARIANTS = {
    "llama3": dict(H=4, G=2, d=16, eps=1e-5, tied=False, bias=False,
                   rope={"rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
                                                                   "high_freq_factor": 4.0,
                                                                   "original_max_position_embeddings": 8192,
                                                                   "rope_type": "llama3"}},
                   extra={"bos_token_id": 45, "eos_token_id": [46, 47]}, shards=2),
    "llama2": dict(H=4, G=4, d=12, eps=1e-6, tied=False, bias=False,
                   rope={"rope_theta": 10000.0, "rope_scaling": None},
                   extra={"bos_token_id": 1, "eos_token_id": 2, "pretraining_tp": 1}, shards=1),
    "v5": dict(H=4, G=1, d=12, eps=1e-5, tied=True, bias=True,
               rope={"rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}},
               extra={"dtype": "float32"}, shards=1),
    "stop": dict(H=4, G=4, d=12, eps=1e-6, tied=False, bias=False,
                 rope={"rope_theta": 10000.0, "rope_scaling": None},
                 extra={"bos_token_id": 1, "eos_token_id": [5]}, shards=1),
}
STOP_ID = 5


def make(root, variant, vocab=48):
    v = VARIANTS[variant]
    rng = np.random.RandomState(4321)
    E, L, F, P, V = 48, 2, 96, 64, vocab
    H, G, d = v["H"], v["G"], v["d"]
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": E, "intermediate_size": F,
           "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": G, "head_dim": d,
           "max_position_embeddings": P, "rms_norm_eps": v["eps"], "vocab_size": V, "hidden_act": "silu",
           "attention_bias": v["bias"], "mlp_bias": v["bias"], "tie_word_embeddings": v["tied"],
           "initializer_range": 0.02, "attention_dropout": 0.0, "use_cache": True}
    cfg.update(v["rope"])
    cfg.update(v["extra"])

    def rand(*shape, std=0.3):
        return (rng.randn(*shape) * std).astype(np.float32)

    # The tied model's output layer is its embedding: 0.5 keeps its logits O(10) as the others'.
    t = {"model.embed_tokens.weight": rand(V, E, std=0.5 if v["tied"] else 1.0)}
    for l in range(L):
        p = "model.layers.%d." % l
        t[p + "self_attn.q_proj.weight"] = rand(H * d, E)
        t[p + "self_attn.k_proj.weight"] = rand(G * d, E)
        t[p + "self_attn.v_proj.weight"] = rand(G * d, E)
        t[p + "self_attn.o_proj.weight"] = rand(E, H * d)
        t[p + "mlp.gate_proj.weight"] = rand(F, E)
        t[p + "mlp.up_proj.weight"] = rand(F, E)
        t[p + "mlp.down_proj.weight"] = rand(E, F, std=0.15)
        if v["bias"]:
            for name, n in (("self_attn.q_proj", H * d), ("self_attn.k_proj", G * d), ("self_attn.v_proj", G * d),
                            ("self_attn.o_proj", E), ("mlp.gate_proj", F), ("mlp.up_proj", F), ("mlp.down_proj", E)):
                t[p + name + ".bias"] = rand(n, std=0.1)
        t[p + "input_layernorm.weight"] = (1 + rand(E, std=0.1)).astype(np.float32)
        t[p + "post_attention_layernorm.weight"] = (1 + rand(E, std=0.1)).astype(np.float32)
        if variant == "llama2":
            t[p + "self_attn.rotary_emb.inv_freq"] = (1.0 / 10000.0 ** (np.arange(0, d, 2) / d)).astype(np.float32)
    t["model.norm.weight"] = (1 + rand(E, std=0.1)).astype(np.float32)
    t["lm_head.weight"] = t["model.embed_tokens.weight"].copy() if v["tied"] else rand(V, E, std=0.5)
    if variant == "stop":
        for name in t:
            if name.startswith("model.layers.") and "layernorm" not in name:
                t[name][...] = 0
        t["model.embed_tokens.weight"][:, 0] = 1.0 + np.abs(t["model.embed_tokens.weight"][:, 0])
        t["lm_head.weight"][...] = 0
        t["lm_head.weight"][:, 0] = -1.0
        t["lm_head.weight"][STOP_ID, 0] = 1.0

    out = os.path.join(root, "hf_in")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if v["shards"] == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), t)
        return
    names = list(t)
    cut = len(names) // 2
    weight_map = {}
    for i, part in enumerate((names[:cut], names[cut:])):
        shard = "model-%05d-of-00002.safetensors" % (i + 1)
        write_safetensors(os.path.join(out, shard), {n: t[n] for n in part})
        weight_map.update({n: shard for n in part})
    total = sum(a.nbytes for a in t.values())
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def rope_settings(cfg):
    """(theta, rope dict or None) from either spelling."""
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    theta = cfg.get("rope_theta", 10000.0)
    if rope and "rope_theta" in rope:
        theta = rope["rope_theta"]
    return theta, rope


def inv_freq(cfg, d):
    theta, rope = rope_settings(cfg)
    f = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    kind = (rope or {}).get("rope_type", (rope or {}).get("type", "default"))
    if kind == "linear":
        f = f / rope["factor"]
    elif kind == "llama3":
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        C = rope["original_max_position_embeddings"]
        wavelen = 2 * math.pi / f
        scaled = np.where(wavelen > C / low, f / factor, f)
        s = (C / wavelen - low) / (high - low)
        smoothed = (1 - s) * scaled / factor + s * scaled
        medium = ~(wavelen < C / high) & ~(wavelen > C / low)
        f = np.where(medium, smoothed, scaled)
    elif kind != "default":
        raise SystemExit("unknown rope_type " + kind)
    return f


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def forward(cfg, w, ids):
    """logits [B, S, V] in float64."""
    g = lambda name: w[name].astype(np.float64)
    E, H, G, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    d = cfg.get("head_dim") or E // H
    bias = cfg.get("attention_bias", False)
    B, S = ids.shape
    freqs = np.arange(S, dtype=np.float64)[:, None] * inv_freq(cfg, d)[None]  # [S, d/2]
    cos = np.cos(np.concatenate([freqs, freqs], -1))[None, None]
    sin = np.sin(np.concatenate([freqs, freqs], -1))[None, None]

    def rotate_half(x):
        return np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)

    def linear(x, name):
        y = x @ g(name + ".weight").T
        return y + g(name + ".bias") if bias else y

    x = g("model.embed_tokens.weight")[ids]
    mask = np.triu(np.ones((S, S), dtype=bool), 1)
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        a = rms(x, g(p + "input_layernorm.weight"), eps)
        q = linear(a, p + "self_attn.q_proj").reshape(B, S, H, d).transpose(0, 2, 1, 3)
        k = linear(a, p + "self_attn.k_proj").reshape(B, S, G, d).transpose(0, 2, 1, 3)
        v = linear(a, p + "self_attn.v_proj").reshape(B, S, G, d).transpose(0, 2, 1, 3)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, H // G, axis=1)  # repeat_kv: head j uses key head j // (H / G)
        v = np.repeat(v, H // G, axis=1)
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
        scores = np.where(mask, -np.inf, scores)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        o = (probs @ v).transpose(0, 2, 1, 3).reshape(B, S, H * d)
        x = x + linear(o, p + "self_attn.o_proj")
        m = rms(x, g(p + "post_attention_layernorm.weight"), eps)
        gate = linear(m, p + "mlp.gate_proj")
        x = x + linear(gate / (1 + np.exp(-gate)) * linear(m, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms(x, g("model.norm.weight"), eps)
    head = g("model.embed_tokens.weight") if cfg.get("tie_word_embeddings") else g("lm_head.weight")
    return x @ head.T


def model_fields(cfg):
    """What config.json says about the model, in one spelling."""
    theta, rope = rope_settings(cfg)
    rope = dict(rope or {})
    rope.pop("rope_theta", None)
    kind = rope.pop("rope_type", rope.pop("type", "default"))
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "max_position_embeddings", "rms_norm_eps", "vocab_size", "attention_bias", "mlp_bias",
            "tie_word_embeddings", "bos_token_id", "eos_token_id")
    out = {k: cfg.get(k) for k in keys}
    out.update(theta=float(theta), rope_type=kind if kind != "default" else None,
               rope={k: float(x) for k, x in rope.items()} if kind != "default" else {})
    return out


def check(root):
    failures = []
    with open(os.path.join(root, "hf_in", "config.json")) as f:
        cfg = json.load(f)
    hf_in = read_hf_weights(os.path.join(root, "hf_in"))
    out_dir = os.path.join(root, "hf_out")
    hf_out = read_hf_weights(out_dir)
    expected = {k: a for k, a in hf_in.items() if not k.endswith("rotary_emb.inv_freq")}
    if cfg.get("tie_word_embeddings"):
        expected.pop("lm_head.weight", None)
    if sorted(expected) != sorted(hf_out):
        failures.append("tensor names differ: %s vs %s" % (sorted(expected), sorted(hf_out)))
    for name, arr in expected.items():
        got = hf_out.get(name)
        if got is None or got.shape != arr.shape or got.dtype != arr.dtype or got.tobytes() != arr.tobytes():
            failures.append("tensor %s is not bit-identical after import -> export" % name)
    with open(os.path.join(out_dir, "config.json")) as f:
        cfg_out = json.load(f)
    a, b = model_fields(cfg), model_fields(cfg_out)
    for k in a:
        if a[k] != b[k]:
            failures.append("config.json %s: %r in, %r out" % (k, a[k], b[k]))

    ours = read_safetensors(os.path.join(root, "ours.safetensors"))
    ids, labels = ours["tokens"].astype(np.int64), ours["labels"].astype(np.int64)
    ref = forward(cfg, hf_in, ids)
    got = ours["logits"].astype(np.float64)
    bound = TOL * (1.0 + np.abs(ref))
    err = np.abs(got - ref)
    print("logits: max |ours - ref| = %.3g, max |ref| = %.3g, %.1f%% of the tolerance used"
          % (err.max(), np.abs(ref).max(), 100.0 * (err / bound).max()))
    if not (err <= bound).all():
        failures.append("logits differ beyond %g * (1 + |ref|)" % TOL)

    lse = np.log(np.exp(ref - ref.max(-1, keepdims=True)).sum(-1)) + ref.max(-1)
    picked = np.take_along_axis(ref, labels[..., None], -1)[..., 0]
    ref_loss = float((lse - picked).mean())
    our_loss = float(ours["loss"][0])
    print("loss: ours %.9g, reference %.9g" % (our_loss, ref_loss))
    if abs(our_loss - ref_loss) > TOL * (1.0 + abs(ref_loss)):
        failures.append("loss differs beyond %g * (1 + |ref|)" % TOL)

    V = cfg["vocab_size"]
    gen = ours["generator_logits"].astype(np.float64)[:V]
    gen_err = np.abs(gen - ref[0, -1])
    print("generator logits (batch 0, last position): max |ours - ref| = %.3g" % gen_err.max())
    if not (gen_err <= TOL * (1.0 + np.abs(ref[0, -1]))).all():
        failures.append("generator logits differ beyond %g * (1 + |ref|)" % TOL)

    # Greedy continuation of batch 0's tokens, one full forward per step.
    seq = list(ids[0])
    want, margins = [], []
    for _ in range(len(ours["greedy"])):
        last = forward(cfg, hf_in, np.array([seq]))[0, -1]
        top = np.sort(last)[-2:]
        margins.append(top[1] - top[0])
        want.append(int(np.argmax(last)))
        seq.append(want[-1])
    greedy = [int(t) for t in ours["greedy"]]
    print("greedy: ours %s, reference %s (smallest top-2 margin %.3g)" % (greedy, want, min(margins)))
    if greedy != want:
        failures.append("greedy continuations differ")

    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    return 1 if failures else 0


def check_dump(hf_dir, dump):
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    w = read_hf_weights(hf_dir)
    d = read_safetensors(dump)
    failures, worst = [], 0.0
    for p in range(len([k for k in d if k.endswith(".tokens")])):
        prompt, generated = list(d["prompt.%d.tokens" % p]), list(d["prompt.%d.generated" % p])
        ref = forward(cfg, w, np.array([prompt + generated]))[0]
        got = d["prompt.%d.logits" % p].astype(np.float64)
        err = np.abs(got - ref)
        worst = max(worst, float(err.max()))
        if not (err <= TOL * (1.0 + np.abs(ref))).all():
            failures.append("prompt %d: logits differ beyond %g * (1 + |ref|)" % (p, TOL))
        want = [int(np.argmax(ref[len(prompt) - 1 + i])) for i in range(len(generated))]
        if [int(t) for t in generated] != want:
            failures.append("prompt %d: greedy tokens %s, reference %s" % (p, generated, want))
    print("dump: %d prompts, max |ours - ref| = %.3g" % (p + 1, worst))
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) in (4, 5) and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:]))
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "check-dump":
        sys.exit(check_dump(sys.argv[2], sys.argv[3]))
    else:
        raise SystemExit("usage: hf_llama_reference.py make DIR VARIANT [VOCAB] | check DIR | check-dump HF_DIR DUMP")
