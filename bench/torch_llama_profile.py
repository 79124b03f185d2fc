# Where PyTorch's Llama step spends its GPU time: torch_llama_bench.py's model and step, a few
# steps under torch.profiler after the compile warm-up, kernels grouped into the same rows as
# `megatron bench --profile-ops` (GEMMs, attention forward / backward, optimizer, the rest) and
# the 25 kernels with the most time. Prints a markdown table per shape.
#   python3 torch_llama_profile.py llama3.2-1b llama3.2-3b
import os, re, sys
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_llama_bench import SHAPES, Llama  # noqa: E402

ROWS = [  # (row, pattern over the kernel name), first match wins
    ("attention backward", r"flash.*bwd|bwd.*flash|fmha.*bwd|attention.*backward|cudnn.*dgrad|sdpa.*bwd|dot_product_flash_attention_backward"),
    ("attention forward", r"flash.*fwd|fwd.*flash|fmha|flash_attn|sdpa|cudnn_generated_fort_native_sdpa"),
    ("optimizer", r"multi_tensor|adam|_fused_adam"),
    ("GEMMs", r"gemm|cutlass|sm90_xmma|nvjet|cublas|matmul"),
    ("triton (fused elementwise, norms, loss)", r"triton"),
]


def row_of(name):
    low = name.lower()
    for row, pat in ROWS:
        if re.search(pat, low):
            return row
    return "other"


def profile_shape(name, l, h, a, g, ffn, V, tied, base, T, B, steps=3, warm=6):
    torch.manual_seed(0)
    m = Llama(l, h, a, g, ffn, V, tied, base, T).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
    cm = torch.compile(m)
    idx = torch.randint(0, V, (B, T), device="cuda")
    tgt = torch.randint(0, V, (B, T), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cm(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = e.cuda_time_total
        if t > 0 and e.key not in ("", None):
            kernels[e.key] = kernels.get(e.key, 0.0) + t / 1e3 / steps  # ms per step
    total = sum(kernels.values())
    rows = {}
    for k, ms in kernels.items():
        rows[row_of(k)] = rows.get(row_of(k), 0.0) + ms
    print(f"\n### {name} (micro-batch {B} x {T}): {total:.2f} ms of kernels per step\n")
    print("| row | ms/step | share |\n| --- | ---: | ---: |")
    for r, ms in sorted(rows.items(), key=lambda kv: -kv[1]):
        print(f"| {r} | {ms:.2f} | {100 * ms / total:.1f}% |")
    print("\n| kernel | ms/step |\n| --- | ---: |")
    for k, ms in sorted(kernels.items(), key=lambda kv: -kv[1])[:25]:
        print(f"| `{k[:110]}` | {ms:.3f} |")
    sys.stdout.flush()
    del m, cm, opt
    torch.cuda.empty_cache()


if __name__ == "__main__":
    torch.backends.cuda.matmul.allow_tf32 = True
    for k in sys.argv[1:] or list(SHAPES):
        profile_shape(k, *SHAPES[k])
