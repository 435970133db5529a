"""The series' model in PyTorch, timed like bench/bench_model.cpp: the reference side of bench/compare.

Run with Debian's torch (1.13): /usr/bin/python3 bench/torch_reference_model.py train --rope 1
Cases (one per run, so that bench/compare can alternate them with mvgpt's):
  train    one AdamW training step at batch 16 x 256 (lr 6e-4, weight decay 0.1 on matrices), tokens/s
  cache    decoding one token with the sliding KV cache (255 kept, RoPE), ms/token
  window   re-running the 256-token window for each new token (last position's logits), ms/token
  peak     the GEMM rate of a 3072^3 product through torch.mm (PyTorch's own threads), GFLOP/s
Prints one JSON object per run on stdout: the mean over the timed runs (as Google Benchmark reports)
and the fastest. fp32, or with --autocast in PyTorch's bf16 mixed precision (oneDNN underneath):
torch.autocast("cpu", dtype=torch.bfloat16) around each training step's forward and loss (as its
documentation does: the weights' cast copies are dropped when the context ends, so each step casts
its updated weights anew), and around the whole timed loop when decoding (the weights do not change,
so every token reuses the cast copies); peak then times a bf16 torch.mm. --threads threads (default
2). Nothing here is needed by the tests.

--modern (PyTorch 2.x) writes the model as its users write it today, as nanoGPT does:
F.scaled_dot_product_attention (is_causal over a whole window), the fused AdamW (fused=True), and
for training torch.compile of the model (Inductor; the compilation happens in the warm-up step,
outside the timing). Decoding stays eager (a cache's growing lengths would recompile). --eager
leaves torch.compile out.

--device cuda runs on the GPU (bench/compare --device cuda: --modern --eager --autocast, PyTorch
eager bf16 with SDPA and the fused AdamW), synchronising before each time is taken, and counts the
GPU kernels one step or token launches (torch.profiler's CUDA kernel events, copies and memsets
left out) as launches_per_step / launches_per_token.

The model is the one of mvgpt/gpt/model.cpp (GPTConfig defaults): 6 blocks of width 384, 6 heads of 64,
context 256, vocab 10,000, pre-norm LayerNorm with bias, tanh-GELU MLP of 1536, learned positions
or split-half rotary embeddings (base 10,000), head tied to the token embedding. Without --modern,
attention is written out (q k^T, causal mask, softmax, @ v): torch 1.13 has no fused
scaled_dot_product_attention.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, BLOCK, LAYERS, HEADS, EMBD = 10000, 256, 6, 6, 384
SDPA = False  # --modern: attention through F.scaled_dot_product_attention


def rope_tables(positions, head_dim, base=10000.0):
    # Angles in float64 before the cast, as mvgpt's kernel.
    inv = base ** (-torch.arange(0, head_dim // 2, dtype=torch.float64) * 2.0 / head_dim)
    ang = positions.to(torch.float64)[:, None] * inv[None, :]  # (T, D/2)
    return ang.cos().float(), ang.sin().float()


def rope(x, cos, sin):
    # x (B, H, T, D), channel i paired with i + D/2.
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Block(nn.Module):
    def __init__(self, use_rope):
        super().__init__()
        self.use_rope = use_rope
        self.ln_1 = nn.LayerNorm(EMBD)
        self.c_attn = nn.Linear(EMBD, 3 * EMBD)
        self.c_proj = nn.Linear(EMBD, EMBD)
        self.ln_2 = nn.LayerNorm(EMBD)
        self.c_fc = nn.Linear(EMBD, 4 * EMBD)
        self.mlp_proj = nn.Linear(4 * EMBD, EMBD)

    def attn(self, x, cos, sin, cache):
        B, T, C = x.shape
        D = C // HEADS
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, HEADS, D).transpose(1, 2) for t in (q, k, v))
        if self.use_rope:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        if cache is not None:
            k, v = cache.append(k, v)
        Tk = k.shape[2]
        if SDPA:
            if T == 1 or Tk == T:  # one new token sees every key; a whole window is causal
                y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
            else:
                mask = torch.ones(T, Tk, dtype=torch.bool, device=q.device).tril(diagonal=Tk - T)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        if T > 1:
            mask = torch.ones(T, Tk, dtype=torch.bool, device=q.device).tril(diagonal=Tk - T)
            s = s.masked_fill(~mask, float("-inf"))
        y = F.softmax(s, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x, cos, sin, cache=None):
        x = x + self.attn(self.ln_1(x), cos, sin, cache)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class LayerCache:
    """A preallocated (1, H, capacity, D) buffer per layer; slide() keeps the last n entries."""

    def __init__(self, capacity=2 * BLOCK, device="cpu"):
        D = EMBD // HEADS
        self.k = torch.zeros(1, HEADS, capacity, D, device=device)
        self.v = torch.zeros(1, HEADS, capacity, D, device=device)
        self.start = self.length = 0

    def append(self, k, v):
        t = k.shape[2]
        if self.start + self.length + t > self.k.shape[2]:  # move the window down to 0
            w = slice(self.start, self.start + self.length)
            self.k[:, :, : self.length] = self.k[:, :, w].clone()
            self.v[:, :, : self.length] = self.v[:, :, w].clone()
            self.start = 0
        end = self.start + self.length
        self.k[:, :, end : end + t] = k
        self.v[:, :, end : end + t] = v
        self.length += t
        w = slice(self.start, self.start + self.length)
        return self.k[:, :, w], self.v[:, :, w]

    def slide(self, keep):
        if self.length > keep:
            self.start += self.length - keep
            self.length = keep


class GPT(nn.Module):
    def __init__(self, use_rope):
        super().__init__()
        self.use_rope = use_rope
        self.wte = nn.Embedding(VOCAB, EMBD)
        self.wpe = None if use_rope else nn.Embedding(BLOCK, EMBD)
        self.h = nn.ModuleList([Block(use_rope) for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(EMBD)
        # The rotary tables of positions [0, 4 T), kept as a model keeps them (buffers: they follow .to()).
        cos, sin = rope_tables(torch.arange(4 * BLOCK), EMBD // HEADS)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        for name, p in self.named_parameters():  # GPT-2 initialisation
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * LAYERS) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, caches=None, start=0, last_only=False):
        B, T = idx.shape
        x = self.wte(idx)
        cos = sin = None
        if self.use_rope:
            if start + T > self.rope_cos.shape[0]:  # decoding's positions keep counting: grow (eager only)
                cos, sin = rope_tables(torch.arange(2 * (start + T)), EMBD // HEADS)
                self.rope_cos, self.rope_sin = cos.to(idx.device), sin.to(idx.device)
            cos, sin = self.rope_cos[start:start + T], self.rope_sin[start:start + T]
        else:
            x = x + self.wpe.weight[start : start + T]
        for i, block in enumerate(self.h):
            x = block(x, cos, sin, caches[i] if caches is not None else None)
        x = self.ln_f(x)
        if last_only:
            x = x[:, -1:]
        return x @ self.wte.weight.t()


def tokens(B, T, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (B, T), generator=g)


def gpu_kernels(fn):
    """The CUDA kernels one call of fn launches (torch.profiler; copies and memsets left out), or None
    where the profiler cannot see the GPU."""
    from torch.profiler import ProfilerActivity, profile
    try:
        # CPU as well: with CUDA alone some versions drop kernel events.
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        count = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                    and not getattr(e, "is_user_annotation", False)
                    and not e.name.startswith(("Memcpy", "Memset")))
    except Exception as e:  # the profiler cannot see the GPU: the count is left out, the times stand
        print(f"torch_reference_model: no kernel count ({e})", file=sys.stderr)
        return None
    if count == 0:  # no CUPTI: the profiler saw no kernel at all
        print("torch_reference_model: the profiler saw no CUDA kernel (no CUPTI?)", file=sys.stderr)
        return None
    return count


def timed(fn, min_time, min_iters):
    fn()  # warm-up: allocations, first-touch
    times, total = [], 0.0
    while total < min_time or len(times) < min_iters:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        times.append(dt)
        total += dt
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", choices=["train", "cache", "window", "peak"])
    ap.add_argument("--rope", type=int, default=1, help="1: rotary positions (default), 0: learned table")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=5.0, help="seconds of timed runs (after one warm-up)")
    ap.add_argument("--autocast", action="store_true", help="bf16 mixed precision (peak: a bf16 torch.mm)")
    ap.add_argument("--modern", action="store_true", help="PyTorch 2.x: SDPA, fused AdamW, torch.compile for training")
    ap.add_argument("--eager", action="store_true", help="with --modern: no torch.compile")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device cuda: this PyTorch ({torch.__version__}) sees no CUDA GPU")
    device = torch.device(args.device)
    compiled = args.modern and not args.eager

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    if args.modern and int(torch.__version__.split(".")[0]) < 2:
        raise SystemExit(f"--modern needs PyTorch 2.x; this is {torch.__version__}")
    global SDPA
    SDPA = args.modern
    torch.set_num_threads(args.threads)
    torch.manual_seed(1337)
    result = {"case": args.case, "rope": args.rope, "threads": torch.get_num_threads(), "torch": torch.__version__,
              "autocast": args.autocast, "mode": "compile" if compiled and args.case == "train" else "eager",
              "sdpa": args.modern, "device": args.device}
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name()

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.autocast)

    if args.case == "peak":
        n = 3072
        a = torch.randn(n, n, dtype=torch.bfloat16 if args.autocast else torch.float32, device=device)
        b = torch.randn(n, n, dtype=a.dtype, device=device)
        times = timed(lambda: (torch.mm(a, b), sync()), args.min_time / 2, 3)
        result.update(gflops=2 * n**3 / min(times) * 1e-9, mean_gflops=2 * n**3 / (sum(times) / len(times)) * 1e-9)
        print(json.dumps(result))
        return
    model = GPT(bool(args.rope)).to(device)

    if args.case == "train":
        decay = [p for p in model.parameters() if p.dim() >= 2]
        plain = [p for p in model.parameters() if p.dim() < 2]
        # 1.13's fastest CPU AdamW is the per-tensor loop; 2.x has a fused one for the CPU.
        fused = {"fused": True} if args.modern else {"foreach": False}
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": plain, "weight_decay": 0.0}],
                                lr=6e-4, **fused)
        x, y = tokens(args.batch, BLOCK, 1).to(device), tokens(args.batch, BLOCK, 2).to(device)
        forward = torch.compile(model) if compiled else model

        def step():
            opt.zero_grad(set_to_none=True)
            with autocast():
                logits = forward(x)
                loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
            loss.backward()
            opt.step()
            return loss.item()

        t0 = time.perf_counter()
        step()  # the compilation, when --modern, and the first allocations
        result.update(warmup_seconds=time.perf_counter() - t0)
        times = timed(step, args.min_time, 2)  # loss.item() waits for the step's kernels
        per = sum(times) / len(times)
        result.update(seconds_per_step=per, min_seconds_per_step=min(times), tokens_per_s=args.batch * BLOCK / per,
                      steps=len(times))
        if device.type == "cuda":
            result.update(launches_per_step=gpu_kernels(step))
    else:
        model.eval()
        with torch.no_grad(), autocast():
            if args.case == "cache":
                if not args.rope:
                    raise SystemExit("the sliding cache needs rotary positions (--rope 1)")
                caches = [LayerCache(device=device) for _ in range(LAYERS)]
                state = {"pos": 0}
                model(tokens(1, BLOCK, 1).to(device), caches, 0, last_only=True)
                state["pos"] = BLOCK
                one = tokens(1, 1, 2).to(device)

                def token():
                    for c in caches:
                        c.slide(BLOCK - 1)
                    model(one, caches, state["pos"], last_only=True)
                    state["pos"] += 1
                    sync()
            else:
                window = tokens(1, BLOCK, 1).to(device)

                def token():
                    model(window, None, 0, last_only=True)
                    sync()

            times = timed(token, args.min_time, 10)
            per = sum(times) / len(times)
            result.update(ms_per_token=per * 1e3, min_ms_per_token=min(times) * 1e3, tokens=len(times))
            if device.type == "cuda":
                result.update(launches_per_token=gpu_kernels(token))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
