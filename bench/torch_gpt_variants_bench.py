# The PyTorch reference for `megatron bench ... --normalization RMSNorm --swiglu`: the GPT of
# bench/torch_gpt_bench.py (torch.compile, bf16 autocast, SDPA flash attention, fused
# AdamW, tied embeddings, learned positions, biases) with its two Llama-style pieces swapped in:
# torch.nn.RMSNorm for every LayerNorm and a SwiGLU MLP whose fc1 gives [gate | up] of
# f = int(8h/3/64)*64 each (Megatron's default --ffn-hidden-size under --swiglu), silu(gate) * up.
# Prints one JSON line per model: ms per iteration, tokens/s, TFLOP/s per GPU by Megatron's formula
# with SwiGLU's 3 MLP GEMMs (docs/megatron-formats.md, "FLOPs for the TFLOP/s figure"), MFU
# against PEAK_TFLOPS.
#
#   python3 bench/torch_gpt_variants_bench.py gpt3-1.3B [more presets]
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PEAK = float(os.environ.get("PEAK_TFLOPS", "989"))  # H100/H200 SXM dense bf16
VOCAB = 50304


def swiglu_ffn(h):
    return h * 8 // 3 // 64 * 64


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        f = swiglu_ffn(h)
        self.norm1, self.norm2 = nn.RMSNorm(h, eps=1e-5), nn.RMSNorm(h, eps=1e-5)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, 2 * f), nn.Linear(f, h)
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        gate, up = self.fc1(self.norm2(x)).chunk(2, dim=-1)
        return x + self.fc2(F.silu(gate) * up)


class GPT(nn.Module):
    def __init__(self, layers, h, heads, seq):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, h), nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.norm_f = nn.RMSNorm(h, eps=1e-5)
        self.head = nn.Linear(h, VOCAB, bias=False)
        self.head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.norm_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1))


def flops_per_iter(b, s, layers, h, v):
    # Megatron's per-layer terms with q = k = h: attention GEMMs 4h^2 (QKV 3, proj 1) x 6,
    # SwiGLU's MLP 3 h f x 6, attention scores 6 s h (causal halving not applied, as Megatron).
    f = swiglu_ffn(h)
    return 6 * b * s * (layers * (4 * h * h + 3 * h * f) + h * v) + 6 * b * s * s * layers * h


def run(name, layers, h, heads, seq, b, steps=20, warm=6):
    torch.manual_seed(0)
    model = GPT(layers, h, heads, seq).cuda()
    n = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    compiled = torch.compile(model)
    idx = torch.randint(0, 50257, (b, seq), device="cuda")
    tgt = torch.randint(0, 50257, (b, seq), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    for i in range(warm + steps):
        if i == warm:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / steps
    tf = flops_per_iter(b, seq, layers, h, VOCAB) / dt / 1e12
    r = dict(name=name + "+rmsnorm+swiglu", params_M=round(n / 1e6, 1), B=b, T=seq, ms_per_iter=round(dt * 1e3, 2),
             tokens_per_s=round(b * seq / dt), tflops=round(tf, 1), mfu_pct=round(100 * tf / PEAK, 1),
             peak_mem_GiB=round(torch.cuda.max_memory_allocated() / 2**30, 2), loss=round(loss.item(), 3))
    print(json.dumps(r), flush=True)
    del model, compiled, opt
    torch.cuda.empty_cache()
    return r


if __name__ == "__main__":
    torch.backends.cuda.matmul.allow_tf32 = True
    presets = {
        "gpt2-350M": (24, 1024, 16, 1024, 16),
        "gpt3-1.3B": (24, 2048, 16, 2048, 4),
        "gpt3-2.7B": (32, 2560, 32, 2048, 4),
    }
    for key in sys.argv[1:] or list(presets):
        try:
            run(key, *presets[key])
        except Exception as e:  # noqa: BLE001 - one line per failed preset, keep going
            print(json.dumps(dict(name=key, error=str(e)[:300])), flush=True)
