#!/usr/bin/python3
"""Golden fixtures for the GPT, from an independent PyTorch implementation.

    /usr/bin/python3 scripts/make_gpt_golden.py              # writes tests/fixtures/gpt/<variant>/
    /usr/bin/python3 scripts/make_gpt_golden.py --verify DIR  # checks a checkpoint mvgpt wrote

For each variant (learned positions, RoPE, Llama-style) it draws seeded random weights, writes them
as an mvgpt checkpoint folder (<variant>/checkpoint/config.json + model.safetensors), and writes
<variant>/expected.safetensors with what our C++ model must reproduce (tests/mvgpt/golden_test.cpp):

    tokens          I32 (2, 17)   inputs are tokens[:, :16], targets tokens[:, 1:]
    logits          F32 (2, 16, V)
    loss            F32 ()        mean cross-entropy
    grad.<name>     F32           d loss / d parameter, for every parameter (the tied head is wte)
    gen.prompt      I32 (P)       a prompt for greedy generation
    gen.tokens      I32 (N)       the greedy continuation, past the context window
    gen.logits      F32 (N, V)    the logits each of those tokens was picked from

The model is written here from scratch in plain torch code (nanoGPT's structure and names); it
shares nothing with the C++ code but the checkpoint format. The reference runs in float64 on the
float32 weights, so what the fixture holds is the exact answer rounded once to float32.

Greedy generation follows mvgpt's generate(): the prompt is cut to the window; with RoPE the KV
cache slides (once it holds block_size tokens the oldest is dropped before the next goes in, and
positions keep counting); with learned positions each token past the window re-runs the last window.

--autocast writes <variant>/expected_autocast.safetensors beside each variant (and leaves the rest
alone): the same tokens through the same model in float32 under torch.autocast("cpu",
dtype=torch.bfloat16), PyTorch's own bf16 mixed precision, for mvgpt's --precision bf16 to be
compared with (tests/mvgpt/golden_test.cpp, GoldenGPT.Bf16...): logits (2, 16, V), loss () and every
grad.<name>, all F32.

--verify DIR loads a checkpoint folder written by save_checkpoint, rebuilds the model from its
config.json, and compares its logits with the "expected.safetensors" the C++ side put next to it.
The safetensors package is not needed: the format is read and written by hand (hand_safetensors.py).
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

from hand_safetensors import read_safetensors, write_safetensors

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "gpt")

# The three variants; fields not given keep GPTConfig's defaults (mvgpt/gpt/config.h).
VARIANTS = {
    "learned": dict(vocab_size=67, block_size=16, n_layer=2, n_head=4, n_embd=24, rope=False),
    "rope": dict(vocab_size=67, block_size=16, n_layer=2, n_head=2, n_embd=24, rope=True, rope_base=10000.0),
    # Llama-style: RMSNorm (eps from the config), SwiGLU, 2 KV heads for 4 query heads, no biases,
    # an untied output head, and a smaller RoPE base so the slow pairs turn visibly within 40 tokens.
    "llama": dict(vocab_size=67, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=24, rope=True,
                  rope_base=500.0, norm="rmsnorm", mlp="swiglu", bias=False, tie_embeddings=False, norm_eps=1e-6),
}

DEFAULTS = dict(vocab_size=10000, block_size=256, n_layer=6, n_head=6, n_embd=384, rope=False, rope_base=10000.0,
                norm="layernorm", mlp="gelu", n_kv_head=0, mlp_hidden=0, bias=True, tie_embeddings=True,
                norm_eps=1e-5, dropout=0.0, gelu_approximate="tanh")


def full_config(fields):
    c = dict(DEFAULTS)
    for k, v in fields.items():
        if k not in DEFAULTS:
            raise ValueError(f"unknown config field {k!r}")
        c[k] = v
    return c


def kv_heads(c):
    return c["n_kv_head"] if c["n_kv_head"] > 0 else c["n_head"]


def hidden_size(c):
    if c["mlp_hidden"] > 0:
        return c["mlp_hidden"]
    if c["mlp"] == "gelu":
        return 4 * c["n_embd"]
    h = 8 * c["n_embd"] // 3  # Llama's rule: 2/3 of 4C, rounded up to a multiple of 64
    return (h + 63) // 64 * 64


# --- the model, in plain torch -------------------------------------------------------------------

def parameter_shapes(c):
    """nanoGPT's names and shapes, in the order mvgpt registers them."""
    C, V, H, K, F_ = c["n_embd"], c["vocab_size"], c["n_head"], kv_heads(c), hidden_size(c)
    D = C // H
    bias, layernorm = c["bias"], c["norm"] == "layernorm"
    shapes = [("transformer.wte.weight", (V, C))]
    if not c["rope"]:
        shapes.append(("transformer.wpe.weight", (c["block_size"], C)))

    def norm(prefix):
        shapes.append((prefix + ".weight", (C,)))
        if layernorm and bias:
            shapes.append((prefix + ".bias", (C,)))

    def linear(prefix, out_f, in_f):
        shapes.append((prefix + ".weight", (out_f, in_f)))
        if bias:
            shapes.append((prefix + ".bias", (out_f,)))

    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        norm(p + "ln_1")
        linear(p + "attn.c_attn", (H + 2 * K) * D, C)
        linear(p + "attn.c_proj", C, C)
        norm(p + "ln_2")
        if c["mlp"] == "gelu":
            linear(p + "mlp.c_fc", F_, C)
            linear(p + "mlp.c_proj", C, F_)
        else:
            linear(p + "mlp.w1", F_, C)
            linear(p + "mlp.w3", F_, C)
            linear(p + "mlp.w2", C, F_)
    norm("transformer.ln_f")
    if not c["tie_embeddings"]:
        shapes.append(("lm_head.weight", (V, C)))
    return shapes


def random_weights(c, seed):
    """Weights larger than GPT-2's init (std 0.02), so every nonlinearity is exercised."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in parameter_shapes(c):
        if name.endswith(".bias"):
            t = 0.1 * torch.randn(shape, generator=g)
        elif len(shape) == 1:  # norm gains around 1
            t = 1.0 + 0.2 * torch.randn(shape, generator=g)
        elif "wte" in name or "wpe" in name:
            t = 0.5 * torch.randn(shape, generator=g)
        else:
            t = torch.randn(shape, generator=g) / math.sqrt(shape[1]) * 1.5
        out[name] = t.float()
    return out


def rope_tables(start, T, D, base):
    """cos, sin (T, D/2) for positions start..start+T-1; theta_i = base^(-2i/D)."""
    i = torch.arange(D // 2, dtype=torch.float64)
    theta = base ** (-2.0 * i / D)
    angles = torch.arange(start, start + T, dtype=torch.float64)[:, None] * theta[None, :]
    return torch.cos(angles), torch.sin(angles)


def rotate(x, cos, sin):
    """Split-half: channel i pairs with i + D/2. x (B, n, T, D)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    # Tables in x's precision, at least float32 (float64 for the reference, float32 under autocast).
    cos, sin = (t.to(torch.promote_types(x.dtype, torch.float32)) for t in (cos, sin))
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Model:
    """Functional GPT over a dict of float64 parameters. forward() takes an optional cache: a list of
    per-layer [k, v] (B, Hkv, L, D) with rotated keys, and the absolute position of the first token."""

    def __init__(self, config, params):
        self.c = config
        self.p = params

    def norm(self, prefix, x):
        w = self.p[prefix + ".weight"]
        if self.c["norm"] == "layernorm":
            return F.layer_norm(x, (x.shape[-1],), w, self.p.get(prefix + ".bias"), self.c["norm_eps"])
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.c["norm_eps"]) * w

    def linear(self, prefix, x):
        return F.linear(x, self.p[prefix + ".weight"], self.p.get(prefix + ".bias"))

    def attention(self, prefix, x, start, cache):
        c = self.c
        B, T, C = x.shape
        H, K = c["n_head"], kv_heads(c)
        D = C // H
        q, k, v = self.linear(prefix + ".c_attn", x).split([H * D, K * D, K * D], dim=-1)
        q = q.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, K, D).transpose(1, 2)  # (B, K, T, D)
        v = v.view(B, T, K, D).transpose(1, 2)
        if c["rope"]:
            cos, sin = rope_tables(start, T, D, c["rope_base"])
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache is not None:
            if cache[0] is not None:
                k = torch.cat([cache[0], k], dim=2)
                v = torch.cat([cache[1], v], dim=2)
            cache[0], cache[1] = k, v
        L = k.shape[2]
        # Query head h reads kv head h // (H / K).
        k = k.repeat_interleave(H // K, dim=1)
        v = v.repeat_interleave(H // K, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, L)
        # Query i sits at key position L - T + i and sees keys up to it.
        hidden = torch.arange(L)[None, :] > (L - T + torch.arange(T))[:, None]
        scores = scores.masked_fill(hidden, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v  # (B, H, T, D)
        return self.linear(prefix + ".c_proj", y.transpose(1, 2).reshape(B, T, C))

    def mlp(self, prefix, x):
        if self.c["mlp"] == "gelu":
            return self.linear(prefix + ".c_proj",
                               F.gelu(self.linear(prefix + ".c_fc", x), approximate=self.c["gelu_approximate"]))
        return self.linear(prefix + ".w2", F.silu(self.linear(prefix + ".w1", x)) * self.linear(prefix + ".w3", x))

    def forward(self, idx, start=0, cache=None):
        c = self.c
        T = idx.shape[1]
        x = self.p["transformer.wte.weight"][idx]  # (B, T, C)
        if not c["rope"]:
            assert start + T <= c["block_size"]
            x = x + self.p["transformer.wpe.weight"][start:start + T]
        for i in range(c["n_layer"]):
            p = f"transformer.h.{i}"
            x = x + self.attention(p + ".attn", self.norm(p + ".ln_1", x), start, cache[i] if cache else None)
            x = x + self.mlp(p + ".mlp", self.norm(p + ".ln_2", x))
        x = self.norm("transformer.ln_f", x)
        head = self.p["transformer.wte.weight" if c["tie_embeddings"] else "lm_head.weight"]
        return x @ head.T  # (B, T, V)


def greedy_generate(model, prompt, n_new):
    """mvgpt's generate() at temperature 0; returns (tokens, logits per token, smallest top-2 gap)."""
    c = model.c
    W = c["block_size"]
    story = list(prompt[-W:])
    tokens, logits_out, gap = [], [], float("inf")
    cache = [[None, None] for _ in range(c["n_layer"])] if c["rope"] else None
    position = 0
    if c["rope"]:
        logits = model.forward(torch.tensor([story]), 0, cache)[0, -1]
        position = len(story)
    else:
        logits = model.forward(torch.tensor([story[-W:]]))[0, -1]
    for i in range(n_new):
        top2 = torch.topk(logits, 2).values
        gap = min(gap, float(top2[0] - top2[1]))
        token = int(torch.argmax(logits))
        tokens.append(token)
        logits_out.append(logits)
        story.append(token)
        if i + 1 == n_new:
            break
        if c["rope"]:
            if cache[0][0].shape[2] >= W:  # slide: keep the newest W - 1 tokens
                for layer in cache:
                    layer[0], layer[1] = layer[0][:, :, -(W - 1):], layer[1][:, :, -(W - 1):]
            logits = model.forward(torch.tensor([[token]]), position, cache)[0, -1]
            position += 1
        else:
            logits = model.forward(torch.tensor([story[-W:]]))[0, -1]
    return tokens, torch.stack(logits_out), gap


def config_json(c):
    """The config.json mvgpt writes (GPTConfig::to_json), with n_kv_head and mlp_hidden resolved."""
    out = dict(c)
    out["n_kv_head"] = kv_heads(c)
    out["mlp_hidden"] = hidden_size(c)
    return json.dumps(out, indent=2) + "\n"


def make_variant(name, fields, seed):
    c = full_config(fields)
    weights = random_weights(c, seed)
    folder = os.path.join(FIXTURES, name)
    ckpt = os.path.join(folder, "checkpoint")
    os.makedirs(ckpt, exist_ok=True)
    with open(os.path.join(ckpt, "config.json"), "w") as f:
        f.write(config_json(c))
    write_safetensors(os.path.join(ckpt, "model.safetensors"), list(weights.items()),
                      {"format": "pt", "written_by": "scripts/make_gpt_golden.py"})

    # The reference in float64 on exactly the stored float32 values.
    params = {k: v.double().requires_grad_(True) for k, v in weights.items()}
    model = Model(c, params)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, c["vocab_size"], (2, c["block_size"] + 1), generator=g)
    idx, targets = tokens[:, :-1], tokens[:, 1:]
    logits = model.forward(idx)
    loss = F.cross_entropy(logits.reshape(-1, c["vocab_size"]), targets.reshape(-1))
    loss.backward()

    with torch.no_grad():
        # A prompt of 6 tokens and 30 new ones: 36 in all, past the window of 16 twice over. Redraw the
        # prompt until no step is close to a tie, so float32 rounding cannot flip an argmax.
        for attempt in range(100):
            prompt = torch.randint(0, c["vocab_size"], (6,), generator=g).tolist()
            gen_tokens, gen_logits, gap = greedy_generate(model, prompt, 30)
            if gap > 1e-3:
                break
        else:
            raise RuntimeError(f"{name}: every prompt had a near tie")

    expected = [("tokens", tokens.int()), ("logits", logits.detach().float()), ("loss", loss.detach().float())]
    expected += [("grad." + k, params[k].grad.float()) for k in weights]
    expected += [("gen.prompt", torch.tensor(prompt, dtype=torch.int32)),
                 ("gen.tokens", torch.tensor(gen_tokens, dtype=torch.int32)),
                 ("gen.logits", gen_logits.float())]
    write_safetensors(os.path.join(folder, "expected.safetensors"), expected,
                      {"written_by": "scripts/make_gpt_golden.py", "seed": str(seed)})
    n_params = sum(w.numel() for w in weights.values())
    print(f"{name}: {n_params} parameters, loss {loss.item():.6f}, logits in [{logits.min().item():.2f}, "
          f"{logits.max().item():.2f}], smallest greedy gap {gap:.4f} (prompt attempt {attempt + 1})")


def make_autocast(name):
    """PyTorch's bf16 autocast on the variant's checkpoint and tokens (expected_autocast.safetensors)."""
    folder = os.path.join(FIXTURES, name)
    with open(os.path.join(folder, "checkpoint", "config.json")) as f:
        c = full_config(json.load(f))
    weights, _ = read_safetensors(os.path.join(folder, "checkpoint", "model.safetensors"))
    expected, _ = read_safetensors(os.path.join(folder, "expected.safetensors"))
    params = {k: v.float().requires_grad_(True) for k, v in weights.items()}
    model = Model(c, params)
    tokens = expected["tokens"].long()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model.forward(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, c["vocab_size"]), tokens[:, 1:].reshape(-1))
    loss.backward()
    out = [("logits", logits.detach().float()), ("loss", loss.detach().float())]
    out += [("grad." + k, params[k].grad.float()) for k in weights]
    write_safetensors(os.path.join(folder, "expected_autocast.safetensors"), out,
                      {"written_by": "scripts/make_gpt_golden.py --autocast", "torch": torch.__version__})
    err = (logits.double() - expected["logits"].double()).abs().max().item()
    print(f"{name}: autocast loss {loss.item():.6f} (float64: {expected['loss'].item():.6f}), "
          f"max |logits - float64 logits| {err:.4f}")


def verify(folder):
    """Checks a checkpoint written by mvgpt's save_checkpoint against the logits it wrote next to it."""
    with open(os.path.join(folder, "config.json")) as f:
        c = full_config(json.load(f))
    weights, metadata = read_safetensors(os.path.join(folder, "model.safetensors"))
    expected_names = [n for n, _ in parameter_shapes(c)]
    if sorted(weights) != sorted(expected_names):
        raise SystemExit(f"names differ: extra {sorted(set(weights) - set(expected_names))}, "
                         f"missing {sorted(set(expected_names) - set(weights))}")
    for name, shape in parameter_shapes(c):
        if tuple(weights[name].shape) != shape or weights[name].dtype != torch.float32:
            raise SystemExit(f"{name}: expected float32 {shape}, found {weights[name].dtype} {tuple(weights[name].shape)}")
    expected, _ = read_safetensors(os.path.join(folder, "expected.safetensors"))
    model = Model(c, {k: v.double() for k, v in weights.items()})
    with torch.no_grad():
        logits = model.forward(expected["tokens"].long())
    err = (logits - expected["logits"].double()).abs().max().item()
    print(f"{folder}: config {json.dumps(c)}")
    print(f"metadata {metadata}; {len(weights)} tensors, {sum(w.numel() for w in weights.values())} parameters")
    print(f"logits {tuple(logits.shape)}: max |torch - mvgpt| = {err:.3g}")
    if err > 1e-5:
        raise SystemExit("MISMATCH")
    print("OK")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--verify", metavar="DIR", help="check a checkpoint folder written by mvgpt")
    ap.add_argument("--autocast", action="store_true", help="write expected_autocast.safetensors for each variant")
    args = ap.parse_args()
    if args.verify:
        verify(args.verify)
        return
    if args.autocast:
        for name in VARIANTS:
            make_autocast(name)
        return
    for i, (name, fields) in enumerate(VARIANTS.items()):
        make_variant(name, fields, seed=1000 + i)


if __name__ == "__main__":
    sys.exit(main())
