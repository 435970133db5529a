"""llama2.c in: model files in both of llama2.c's float32 formats (legacy: 7 int32 and a negative
vocab_size for an unshared classifier; export.py version 1: "ak42" and a 256-byte header), written
here by hand from random weights, go through `import --format llama2c`; our logits equal a PyTorch
forward written the way run.c computes (interleaved rotary pairs, RMSNorm eps 1e-5, SwiGLU, grouped
KV heads) to 1e-4, and so do transformers' logits for the same model exported with `export --format hf`
(its rotary rows reordered for split halves). Bad files are refused in one line."""
import os
import struct
import subprocess

from mvgpt_test import SOURCE_DIR, app, build_dir, check, require, run, scratch

torch = require("torch")
try:
    import transformers  # optional: the export leg runs where it is installed
except ImportError:
    transformers = None
    print("skipped the export leg: transformers not installed")
import sys  # noqa: E402
sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts"))
from hand_safetensors import read_safetensors, write_safetensors  # noqa: E402

TOOL = os.path.join(build_dir(), "tests", "mvgpt_tool")
cwd = scratch("llama2c")


def random_weights(C, F, L, H, K, V, shared, seed):
    g = torch.Generator().manual_seed(seed)
    D = C // H
    r = lambda *shape: torch.randn(shape, generator=g) * 0.4  # noqa: E731
    w = {"emb": r(V, C), "att_norm": [1 + r(C) for _ in range(L)], "ffn_norm": [1 + r(C) for _ in range(L)],
         "wq": [r(C, C) for _ in range(L)], "wk": [r(K * D, C) for _ in range(L)], "wv": [r(K * D, C) for _ in range(L)],
         "wo": [r(C, C) for _ in range(L)], "w1": [r(F, C) for _ in range(L)], "w2": [r(C, F) for _ in range(L)],
         "w3": [r(F, C) for _ in range(L)], "final": 1 + r(C)}
    w["cls"] = w["emb"] if shared else r(V, C)
    return w


def floats(*tensors):
    return b"".join(t.contiguous().to(torch.float32).numpy().astype("<f4").tobytes() for t in tensors)


def write_legacy(path, w, C, F, L, H, K, V, S, shared):
    D = C // H
    pos = torch.arange(S, dtype=torch.float32)[:, None] * (1.0 / 10000 ** (torch.arange(0, D, 2).float() / D))[None]
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", C, F, L, H, K, V if shared else -V, S))
        f.write(floats(w["emb"], *w["att_norm"], *w["wq"], *w["wk"], *w["wv"], *w["wo"], *w["ffn_norm"], *w["w1"],
                       *w["w2"], *w["w3"], w["final"], torch.cos(pos), torch.sin(pos)))
        if not shared:
            f.write(floats(w["cls"]))


def write_v1(path, w, C, F, L, H, K, V, S, shared):
    header = struct.pack("<Ii7iB", 0x616b3432, 1, C, F, L, H, K, V, S, int(shared))
    with open(path, "wb") as f:
        f.write(header + b"\0" * (256 - len(header)))
        f.write(floats(*w["att_norm"], *w["ffn_norm"], w["final"], w["emb"], *w["wq"], *w["wk"], *w["wv"], *w["wo"],
                       *w["w1"], *w["w2"], *w["w3"]))
        if not shared:
            f.write(floats(w["cls"]))


def run_c_forward(w, tokens, C, L, H, K):
    """The function run.c computes, all positions at once, in float64."""
    d = {k: ([t.double() for t in v] if isinstance(v, list) else v.double()) for k, v in w.items()}
    B, T = tokens.shape
    D = C // H
    rms = lambda x, g: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * g  # noqa: E731
    ang = torch.arange(T, dtype=torch.float64)[:, None] * (1.0 / 10000 ** (torch.arange(0, D, 2).double() / D))[None]
    cos, sin = torch.cos(ang), torch.sin(ang)  # (T, D/2)

    def rotate(x):  # (B, T, heads, D): channels (2j, 2j + 1) turn together
        x0, x1 = x[..., 0::2], x[..., 1::2]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).flatten(-2)

    x = d["emb"][tokens]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(L):
        h = rms(x, d["att_norm"][i])
        q = rotate((h @ d["wq"][i].T).view(B, T, H, D)).transpose(1, 2)
        k = rotate((h @ d["wk"][i].T).view(B, T, K, D)).transpose(1, 2).repeat_interleave(H // K, 1)
        v = (h @ d["wv"][i].T).view(B, T, K, D).transpose(1, 2).repeat_interleave(H // K, 1)
        att = (q @ k.transpose(-2, -1) / D ** 0.5).masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, C) @ d["wo"][i].T
        h = rms(x, d["ffn_norm"][i])
        x = x + (torch.nn.functional.silu(h @ d["w1"][i].T) * (h @ d["w3"][i].T)) @ d["w2"][i].T
    return rms(x, d["final"]) @ d["cls"].T


C, F, L, V, S = 32, 48, 2, 40, 16
tokens = torch.randint(0, V, (2, S), generator=torch.Generator().manual_seed(3))
write_safetensors(os.path.join(cwd, "tokens.safetensors"), [("tokens", tokens.to(torch.int32))])
for fmt, write in (("legacy", write_legacy), ("v1", write_v1)):
    for H, K, shared in ((4, 4, True), (4, 2, False)):
        name = f"{fmt}-h{H}k{K}-{'shared' if shared else 'unshared'}"
        w = random_weights(C, F, L, H, K, V, shared, seed=len(name))
        write(os.path.join(cwd, name + ".bin"), w, C, F, L, H, K, V, S, shared)
        print(run([app("import"), "--format", "llama2c", "--from", name + ".bin", "--out", name], cwd).strip())
        run([TOOL, "logits", name, "tokens.safetensors", "logits.safetensors"], cwd)
        ours = read_safetensors(os.path.join(cwd, "logits.safetensors"))[0]["logits"].double()
        ref = run_c_forward(w, tokens, C, L, H, K)
        err = (ours - ref).abs().max().item()
        print(f"{name}: logits in [{ref.min().item():.1f}, {ref.max().item():.1f}], max |mvgpt - run.c's function| = {err:.3g}")
        check(err <= 1e-4, f"{name}: logits differ by {err}")
        if transformers is not None:
            # The imported model rotates interleaved pairs; exported for transformers (which rotates
            # split halves) its q and k rows are reordered, and it must still compute run.c's function.
            run([app("export"), "--format", "hf", "--ckpt", name, "--out", name + "-hf"], cwd)
            hf = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(cwd, name + "-hf")).eval()
            with torch.no_grad():
                theirs = hf(tokens.long()).logits.double()
            err = (theirs - ref).abs().max().item()
            print(f"{name}: transformers {transformers.__version__} on the exported folder: max |difference| = {err:.3g}")
            check(err <= 1e-4, f"{name}: exported logits differ by {err}")

# The two small models that llama2.c's own export.py wrote (tests/fixtures/llama2c/README.md), imported
# with their tokenizer.bin and exported for transformers: run.c's logits from generate.jsonl.
FIXTURES = os.path.join(SOURCE_DIR, "tests", "fixtures", "llama2c")
if transformers is not None:
    import json  # noqa: E402
    for model in ("tiny_legacy", "tiny_v1"):
        out = run([app("import"), "--format", "llama2c", "--from", os.path.join(FIXTURES, model + ".bin"), "--tokenizer",
                   os.path.join(FIXTURES, "tok512.bin"), "--out", model], cwd)
        check("with its tokenizer" in out, out)
        out = run([app("export"), "--format", "hf", "--ckpt", model, "--out", model + "-hf"], cwd)
        check("no tokenizer.json" in out and "SentencePiece" in out, out)
        hf = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(cwd, model + "-hf")).eval()
        worst = 0.0
        with open(os.path.join(FIXTURES, "generate.jsonl")) as f:
            for line in f:
                g = json.loads(line)
                if g["model"] != model + ".bin":
                    continue
                ids = torch.tensor(g["ids"][:g["n_forward"]])[None]
                with torch.no_grad():
                    logits = hf(ids).logits[0].double()
                for pos, want in g["logits"].items():
                    worst = max(worst, (logits[int(pos)] - torch.tensor(want, dtype=torch.float64)).abs().max().item())
        print(f"{model}.bin (llama2.c's export.py) in transformers {transformers.__version__}: "
              f"max |logits - run.c's| = {worst:.3g}")
        check(worst <= 1e-4, f"{model}: transformers' logits differ from run.c's by {worst}")
        # And back in: the folder imports as a split-half model (its rows as transformers has them),
        # computing the same function as the interleaved import.
        run([app("import"), "--from", model + "-hf", "--out", model + "-back"], cwd)
        with open(os.path.join(cwd, model + "-back", "config.json")) as f:
            check("rope_layout" not in json.load(f), f"{model}: the folder came back interleaved")
        for ckpt in (model, model + "-back"):
            run([TOOL, "logits", ckpt, "tokens.safetensors", ckpt + ".logits.safetensors"], cwd)
        a, b = (read_safetensors(os.path.join(cwd, c + ".logits.safetensors"))[0]["logits"] for c in (model, model + "-back"))
        err = (a - b).abs().max().item()
        check(err <= 1e-5, f"{model}: imported back from transformers, the logits moved by {err}")

# Bad files: truncated, export.py's int8 version 2, a header that is no model.
with open(os.path.join(cwd, "v1-h4k4-shared.bin"), "rb") as f:
    good = f.read()
bad = {"truncated.bin": (good[:-4], "bytes, but its header describes"),
       "v2.bin": (struct.pack("<Ii", 0x616b3432, 2) + good[8:], "export.py version 2"),
       "text.bin": (b"this is not a model file at all, just text\n" * 4, "is not a model")}
for file, (data, needle) in bad.items():
    with open(os.path.join(cwd, file), "wb") as f:
        f.write(data)
    r = subprocess.run([app("import"), "--format", "llama2c", "--from", file, "--out", "bad"], cwd=cwd,
                       capture_output=True, text=True)
    check(r.returncode == 1 and r.stderr.startswith("import: error: ") and r.stderr.count("\n") == 1 and needle in r.stderr,
          f"{file}: {r.returncode} {r.stderr!r}")
check(not os.path.exists(os.path.join(cwd, "bad")), "a failed import left a folder")
print("OK")
