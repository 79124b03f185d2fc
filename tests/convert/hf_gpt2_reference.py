"""A numpy statement of Hugging Face transformers' GPT-2 forward pass (GPT2LMHeadModel, eval mode),
the independent reference for `megatron convert --load-hf / --save-hf` (tests/convert/hf_gpt2_test.cpp
drives it; it is not a CTest entry of its own). Run by Debian's python3 with numpy:

  hf_gpt2_reference.py make DIR [ACTIVATION]
      writes DIR/hf_in/{config.json,model.safetensors}: a random GPT-2 in HF's own layout, written
      here with numpy (never by our writer): "transformer." names as GPT2LMHeadModel saves them
      (for ACTIVATION gelu_new; for gelu the hub's bare GPT2Model names), Conv1D weights [in, out],
      c_attn columns [q | k | v], an old-style causal-mask buffer h.0.attn.bias and a tied
      lm_head.weight (both must be skipped by the importer). Weights are O(0.3), so activations
      are O(1) and the GELU variants differ visibly in the logits.
  hf_gpt2_reference.py check DIR
      reads DIR/hf_out (our export of the imported checkpoint) and DIR/ours.safetensors (our
      CPU model's tokens, labels, logits, loss, and the KV-cache generator's last logits), then
        1. every tensor of hf_out equals hf_in bit for bit (import -> export is the identity);
        2. the reference forward on hf_out's config.json + model.safetensors, in float64, gives
           our logits and loss within the tolerance below.
      Exit status 1 on any failure, with the worst errors printed.

The forward, as transformers' modeling_gpt2 (eval: dropout off):
  x = wte[ids] + wpe[pos]
  per block: a = ln_1(x); qkv = a @ c_attn.w + c_attn.b; q|k|v split on the last axis, heads of
    d = n_embd / n_head; p = softmax(q k^T / sqrt(d) + causal mask); x += (p v merged) @ c_proj.w + b
    m = ln_2(x); x += act(m @ c_fc.w + c_fc.b) @ mlp.c_proj.w + b
  logits = ln_f(x) @ wte^T;  loss = mean cross-entropy of logits[b, s] against labels[b, s]
LayerNorm: (x - mean) / sqrt(biased var + layer_norm_epsilon) * w + b.
gelu_new / gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); gelu: x Phi(x).

Tolerance: ours runs in fp32 (unit roundoff u = 6e-8), the reference in float64. Each logit is
two transformer blocks deep: dot products of length <= 128 (FFN) whose rounding error grows
like sqrt(n) u |terms|, LayerNorms that divide by a standard deviation computed in fp32, and an
output layer whose logits reach ~9; the observed error is ~6e-6 absolute (< 1e-6 relative to the
largest logits). We allow |ours - ref| <= 2e-5 * (1 + |ref|) (the observed error uses ~20% of
it), and the same bound on the loss. Mistakes of the kind this test is for are far above it
with these weight scales (measured on this model when the test was written): the other GELU
moves logits by 2e-3 (44x the bound), reading c_attn in Megatron's per-head order or leaving a
Conv1D weight untransposed by ~10.
"""
import json
import math
import os
import struct
import sys

import numpy as np

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
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def make(root, activation):
    rng = np.random.RandomState(1234)
    E, L, H, P, V = 32, 2, 4, 16, 48
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V, "n_positions": P,
           "n_embd": E, "n_layer": L, "n_head": H, "n_inner": None, "activation_function": activation,
           "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
           "initializer_range": 0.02, "scale_attn_weights": True, "tie_word_embeddings": True}

    def rand(*shape, std=0.3):
        return (rng.randn(*shape) * std).astype(np.float32)

    t = {"transformer.wte.weight": rand(V, E, std=0.5), "transformer.wpe.weight": rand(P, E, std=0.5)}
    for l in range(L):
        p = "transformer.h.%d." % l
        t[p + "ln_1.weight"] = (1 + rand(E, std=0.1)).astype(np.float32)
        t[p + "ln_1.bias"] = rand(E, std=0.1)
        t[p + "attn.c_attn.weight"] = rand(E, 3 * E)
        t[p + "attn.c_attn.bias"] = rand(3 * E, std=0.1)
        t[p + "attn.c_proj.weight"] = rand(E, E)
        t[p + "attn.c_proj.bias"] = rand(E, std=0.1)
        t[p + "ln_2.weight"] = (1 + rand(E, std=0.1)).astype(np.float32)
        t[p + "ln_2.bias"] = rand(E, std=0.1)
        t[p + "mlp.c_fc.weight"] = rand(E, 4 * E)
        t[p + "mlp.c_fc.bias"] = rand(4 * E, std=0.1)
        t[p + "mlp.c_proj.weight"] = rand(4 * E, E, std=0.15)
        t[p + "mlp.c_proj.bias"] = rand(E, std=0.1)
    t["transformer.ln_f.weight"] = (1 + rand(E, std=0.1)).astype(np.float32)
    t["transformer.ln_f.bias"] = rand(E, std=0.1)
    t["transformer.h.0.attn.bias"] = np.tril(np.ones((P, P), dtype=np.float32)).reshape(1, 1, P, P)
    t["lm_head.weight"] = t["transformer.wte.weight"].copy()
    if activation == "gelu":  # the hub's gpt2 files: GPT2Model names, no lm_head
        del t["lm_head.weight"]
        t = {k[len("transformer."):]: v for k, v in t.items()}
    out = os.path.join(root, "hf_in")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(out, "model.safetensors"), t)


def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def activation(name):
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "gelu":
        erf = np.vectorize(math.erf)
        return lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    raise SystemExit("unknown activation_function " + name)


def forward(cfg, w, ids):
    """logits [B, S, V] in float64."""
    g = lambda name: w["transformer." + name].astype(np.float64)
    E, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    d = E // H
    act = activation(cfg.get("activation_function", "gelu_new"))
    B, S = ids.shape
    x = g("wte.weight")[ids] + g("wpe.weight")[np.arange(S)][None]
    mask = np.triu(np.ones((S, S), dtype=bool), 1)
    for l in range(cfg["n_layer"]):
        p = "h.%d." % l
        a = layernorm(x, g(p + "ln_1.weight"), g(p + "ln_1.bias"), eps)
        qkv = a @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")
        q, k, v = (qkv[..., i * E:(i + 1) * E].reshape(B, S, H, d).transpose(0, 2, 1, 3) for i in range(3))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
        scores = np.where(mask, -np.inf, scores)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        o = (probs @ v).transpose(0, 2, 1, 3).reshape(B, S, E)
        x = x + o @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        m = layernorm(x, g(p + "ln_2.weight"), g(p + "ln_2.bias"), eps)
        m = act(m @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias"))
        x = x + m @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    x = layernorm(x, g("ln_f.weight"), g("ln_f.bias"), eps)
    return x @ g("wte.weight").T


def check(root):
    failures = []
    hf_in = read_safetensors(os.path.join(root, "hf_in", "model.safetensors"))
    out_dir = os.path.join(root, "hf_out")
    hf_out = read_safetensors(os.path.join(out_dir, "model.safetensors"))
    expected = {("transformer." + k if not k.startswith(("transformer.", "lm_head.")) else k): v
                for k, v in hf_in.items()}
    expected = {k: v for k, v in expected.items() if k not in ("lm_head.weight", "transformer.h.0.attn.bias")}
    if sorted(expected) != sorted(hf_out):
        failures.append("tensor names differ: %s vs %s" % (sorted(expected), sorted(hf_out)))
    for name, arr in expected.items():
        got = hf_out.get(name)
        if got is None or got.shape != arr.shape or got.dtype != arr.dtype or got.tobytes() != arr.tobytes():
            failures.append("tensor %s is not bit-identical after import -> export" % name)

    with open(os.path.join(out_dir, "config.json")) as f:
        cfg = json.load(f)
    ours = read_safetensors(os.path.join(root, "ours.safetensors"))
    ids, labels = ours["tokens"].astype(np.int64), ours["labels"].astype(np.int64)
    ref = forward(cfg, hf_out, ids)
    V = cfg["vocab_size"]
    got = ours["logits"].astype(np.float64)
    bound = 2e-5 * (1.0 + np.abs(ref))
    err = np.abs(got - ref)
    print("logits: max |ours - ref| = %.3g, max |ref| = %.3g, %.1f%% of the tolerance used"
          % (err.max(), np.abs(ref).max(), 100.0 * (err / bound).max()))
    if not (err <= bound).all():
        failures.append("logits differ beyond 2e-5 * (1 + |ref|)")

    lse = np.log(np.exp(ref - ref.max(-1, keepdims=True)).sum(-1)) + ref.max(-1)
    picked = np.take_along_axis(ref, labels[..., None], -1)[..., 0]
    ref_loss = float((lse - picked).mean())
    our_loss = float(ours["loss"][0])
    print("loss: ours %.9g, reference %.9g" % (our_loss, ref_loss))
    if abs(our_loss - ref_loss) > 2e-5 * (1.0 + abs(ref_loss)):
        failures.append("loss differs beyond 2e-5 * (1 + |ref|)")

    gen = ours["generator_logits"].astype(np.float64)[:V]
    gen_err = np.abs(gen - ref[0, -1]).max()
    print("generator logits (batch 0, last position): max |ours - ref| = %.3g" % gen_err)
    if not (np.abs(gen - ref[0, -1]) <= 2e-5 * (1.0 + np.abs(ref[0, -1]))).all():
        failures.append("generator logits differ beyond 2e-5 * (1 + |ref|)")

    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "gelu_new")
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    else:
        raise SystemExit("usage: hf_gpt2_reference.py make DIR [ACTIVATION] | check DIR")
