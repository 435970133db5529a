"""nanoGPT in: a ckpt.pt that PyTorch wrote (nanoGPT's layout: "model" with torch.compile's "_orig_mod."
prefix and the causal-mask buffers, "model_args", "iter_num", ...) goes through
scripts/nanogpt_to_mvgpt.py; every tensor arrives bit for bit, the C++ loader loads the folder, and our
logits equal an independent PyTorch forward (scripts/make_gpt_golden.py's Model: nanoGPT's structure
with GPT-2's tanh GELU) to 1e-4. Also measured: how far nanoGPT's exact GELU moves the logits."""
import os
import subprocess
import sys

from mvgpt_test import SOURCE_DIR, build_dir, check, require, run, scratch

torch = require("torch")
sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts"))
from hand_safetensors import read_safetensors, write_safetensors  # noqa: E402
from make_gpt_golden import Model, full_config  # noqa: E402

CONVERTER = os.path.join(SOURCE_DIR, "scripts", "nanogpt_to_mvgpt.py")
TOOL = os.path.join(build_dir(), "tests", "mvgpt_tool")
cwd = scratch("nanogpt")


def nanogpt_state_dict(args, seed, prefix, mask_buffers):
    """Random weights under nanoGPT's names, as GPT.state_dict() returns them (lm_head is wte)."""
    g = torch.Generator().manual_seed(seed)
    C, V, T = args["n_embd"], args["vocab_size"], args["block_size"]
    shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C)}
    for i in range(args["n_layer"]):
        p = f"transformer.h.{i}."
        for name, (out, inp) in (("attn.c_attn", (3 * C, C)), ("attn.c_proj", (C, C)), ("mlp.c_fc", (4 * C, C)),
                                 ("mlp.c_proj", (C, 4 * C))):
            shapes[p + name + ".weight"] = (out, inp)
            if args["bias"]:
                shapes[p + name + ".bias"] = (out,)
        for ln in ("ln_1", "ln_2"):
            shapes[p + ln + ".weight"] = (C,)
            if args["bias"]:
                shapes[p + ln + ".bias"] = (C,)
    shapes["transformer.ln_f.weight"] = (C,)
    if args["bias"]:
        shapes["transformer.ln_f.bias"] = (C,)
    sd = {}
    for name, shape in shapes.items():
        scale = 0.5 if len(shape) == 2 else 0.2
        sd[name] = torch.randn(shape, generator=g) * scale + (1.0 if name.endswith("ln_1.weight") else 0.0)
        if mask_buffers and name.endswith("attn.c_attn.weight"):
            sd[name.replace("c_attn.weight", "bias")] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    sd["lm_head.weight"] = sd["transformer.wte.weight"]  # nanoGPT ties them: one tensor, two names
    return {prefix + k: v for k, v in sd.items()}


def check_variant(name, args, prefix, mask_buffers):
    sd = nanogpt_state_dict(args, seed=len(name), prefix=prefix, mask_buffers=mask_buffers)
    ckpt = os.path.join(cwd, name + ".pt")
    torch.save({"model": sd, "optimizer": {"state": {}}, "model_args": dict(args, dropout=0.0), "iter_num": 250,
                "best_val_loss": torch.tensor(1.5), "config": {"dataset": "shakespeare_char", "learning_rate": 1e-3}}, ckpt)
    out = os.path.join(cwd, name)
    print(run([sys.executable, CONVERTER, ckpt, out], cwd).strip())

    # Every weight bit for bit, under nanoGPT's name without the prefix; no mask, no second head.
    weights, meta = read_safetensors(os.path.join(out, "model.safetensors"))
    original = {k[len(prefix):]: v for k, v in sd.items()}
    want = {k for k, v in original.items() if not (k.endswith(".attn.bias") and v.dim() == 4) and k != "lm_head.weight"}
    check(set(weights) == want, f"{name}: names {sorted(set(weights) ^ want)} differ")
    for k, w in weights.items():
        check(w.dtype == torch.float32 and torch.equal(w, original[k]), f"{name}: {k} is not bit-identical")
    check(meta.get("step") == "250", f"{name}: metadata {meta}")

    # The C++ loader's logits against the PyTorch forward of the same function, in float64.
    tokens = torch.randint(0, args["vocab_size"], (2, args["block_size"]), generator=torch.Generator().manual_seed(7))
    write_safetensors(os.path.join(cwd, "tokens.safetensors"), [("tokens", tokens.to(torch.int32))])
    run([TOOL, "logits", out, "tokens.safetensors", "logits.safetensors"], cwd)
    ours = read_safetensors(os.path.join(cwd, "logits.safetensors"))[0]["logits"].double()
    import json
    with open(os.path.join(out, "config.json")) as f:
        config = full_config(json.load(f))
    check(config["gelu_approximate"] == "none", f"{name}: nanoGPT's nn.GELU() is the exact GELU, config says {config}")
    model = Model(config, {k: v.double() for k, v in weights.items()})
    with torch.no_grad():
        ref = model.forward(tokens)  # nanoGPT's function: nn.GELU(), the exact (erf) GELU
        err = (ours - ref).abs().max().item()
        tanh = Model(dict(config, gelu_approximate="tanh"), model.p)
        gelu_gap = (tanh.forward(tokens) - ref).abs().max().item()
    print(f"{name}: logits {tuple(ours.shape)} in [{ref.min().item():.2f}, {ref.max().item():.2f}], "
          f"max |mvgpt - torch| = {err:.3g} (the tanh GELU would be {gelu_gap:.3g} away)")
    check(err <= 1e-5, f"{name}: logits differ by {err}")
    check(gelu_gap > 10 * err, f"{name}: the test cannot tell the two GELUs apart ({gelu_gap} vs {err})")


torch.manual_seed(0)
check_variant("compiled", dict(n_layer=2, n_head=2, n_embd=32, block_size=16, bias=True, vocab_size=65), "_orig_mod.",
              mask_buffers=True)
check_variant("plain", dict(n_layer=1, n_head=4, n_embd=32, block_size=8, bias=False, vocab_size=50), "",
              mask_buffers=False)

# Bad inputs: one line naming the file and what to do, nothing written; a pickle that would run code
# is refused before it runs.
class RunsCode:
    def __reduce__(self):
        return (os.system, ("touch " + os.path.join(cwd, "pwned"),))


torch.save({"state_dict": {}}, os.path.join(cwd, "not_nanogpt.pt"))
torch.save({"model": {}, "model_args": {}, "payload": RunsCode()}, os.path.join(cwd, "hostile.pt"))
for args, needle in (([os.path.join(cwd, "not_nanogpt.pt"), os.path.join(cwd, "bad")], "expected nanoGPT's checkpoint"),
                     ([os.path.join(cwd, "hostile.pt"), os.path.join(cwd, "bad")], "it names posix.system"),
                     ([os.path.join(cwd, "compiled.pt"), os.path.join(cwd, "compiled")], "already exists")):
    r = subprocess.run([sys.executable, CONVERTER] + args, capture_output=True, text=True)
    check(r.returncode != 0 and needle in r.stderr and r.stderr.count("\n") == 1, f"{args}: {r.returncode} {r.stderr!r}")
check(not os.path.exists(os.path.join(cwd, "bad")), "a failed conversion left a folder")
check(not os.path.exists(os.path.join(cwd, "pwned")), "the hostile pickle ran code")
print(f"torch {torch.__version__}: OK")
