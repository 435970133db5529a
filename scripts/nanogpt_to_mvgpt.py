#!/usr/bin/python3
"""nanoGPT's ckpt.pt -> an mvgpt checkpoint folder (config.json + model.safetensors).

    /usr/bin/python3 scripts/nanogpt_to_mvgpt.py out/ckpt.pt checkpoints/nanogpt
    build/apps/evaluate --ckpt checkpoints/nanogpt --tokens data/valid.bin

ckpt.pt is a pickle, so PyTorch reads it (Debian: apt-get install python3-torch), and only tensors,
their storages, dicts, lists and numbers are built from it: any other class the file names is
refused, so it runs no code from the file. That is torch.load(weights_only=True); PyTorch 1.13
(Debian 12's) cannot read a float that way and its torch.load ignores a pickle_module, so there the
zip archive is read by PyTorch's reader with an unpickler of our own that allows the same classes. What is taken: ckpt["model"] (the state dict; "_orig_mod." from torch.compile is dropped
from every name) and ckpt["model_args"] (n_layer, n_head, n_embd, block_size, bias, vocab_size).
nanoGPT's names are ours, so each tensor is copied unchanged (float32; F16/BF16 widened exactly);
the causal-mask buffer "attn.bias" of nanoGPT without flash attention is dropped, and "lm_head.weight"
too when it equals wte (nanoGPT ties them; an untied head is kept, with "tie_embeddings": false).

One difference remains, and the script prints it: nanoGPT's MLP uses the exact GELU (erf), ours the
tanh approximation (GPT-2's), so the converted model's logits differ from nanoGPT's by about 1e-3
(tests/python/test_nanogpt.py measures it); fine-tune a few steps to remove it. The folder has no
tokenizer: nanoGPT's GPT-2 BPE (tiktoken) is not ours, so encode text with it and pass token files.

The output folder is written as "<out>.tmp.<pid>" and renamed into place; an existing non-empty
folder is refused.
"""
import argparse
import json
import os
import pickle
import shutil
import sys
import types

try:
    import torch
except ImportError:
    sys.exit("nanogpt_to_mvgpt: PyTorch is needed to read ckpt.pt (a pickle): apt-get install python3-torch "
             "(or pip install torch)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hand_safetensors import write_safetensors  # noqa: E402

PREFIX = "_orig_mod."
ARGS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size")


class _SafeUnpickler(pickle.Unpickler):
    """Builds tensors (torch._utils._rebuild_*, torch.*Storage), OrderedDicts and plain data only."""

    def find_class(self, module, name):
        if (module == "collections" and name == "OrderedDict") or \
           (module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_parameter")) or \
           (module == "torch" and (name.endswith("Storage") or isinstance(getattr(torch, name, None), torch.dtype))):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which a checkpoint of tensors and numbers does not need")


_SAFE_PICKLE = types.SimpleNamespace(Unpickler=_SafeUnpickler, load=pickle.load, __name__="nanogpt_safe_pickle")


def load_safely(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        if int(torch.__version__.split(".")[0]) >= 2:
            raise
    with open(path, "rb") as f, torch.serialization._open_zipfile_reader(f) as archive:
        return torch.serialization._load(archive, "cpu", _SAFE_PICKLE, encoding="utf-8")


def fail(path, message):
    sys.exit(f"nanogpt_to_mvgpt: {path}: {message}")


def convert(ckpt_path):
    """Returns (config dict, [(name, float32 tensor)]) in mvgpt's names and order."""
    try:
        ckpt = load_safely(ckpt_path)
    except Exception as e:  # noqa: BLE001  (a pickle can fail in many ways; each is one line)
        fail(ckpt_path, f"not a checkpoint of tensors that can be read safely ({type(e).__name__}: {str(e)[:200]})")
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        found = sorted(ckpt)[:8] if isinstance(ckpt, dict) else type(ckpt).__name__
        fail(ckpt_path, f"expected nanoGPT's checkpoint, a dict with 'model' and 'model_args'; found {found}")
    args = ckpt["model_args"]
    missing = [k for k in ARGS if k not in args]
    if missing:
        fail(ckpt_path, f"model_args lacks {missing}; it holds {sorted(args)}")
    sd = {(k[len(PREFIX):] if k.startswith(PREFIX) else k): v for k, v in ckpt["model"].items()}
    for name, t in sd.items():
        if not torch.is_tensor(t) or not t.is_floating_point():
            fail(ckpt_path, f"model tensor {name!r} is {getattr(t, 'dtype', type(t).__name__)}, expected a float tensor")
        if not torch.isfinite(t).all():
            fail(ckpt_path, f"model tensor {name!r} holds NaN or infinity; the weights are unusable")
    # nanoGPT without flash attention registers its causal mask (1, 1, T, T) as a buffer.
    sd = {k: v for k, v in sd.items() if not (k.endswith(".attn.bias") and v.dim() == 4)}
    wte = sd.get("transformer.wte.weight")
    if wte is None:
        fail(ckpt_path, "the state dict has no transformer.wte.weight: not a nanoGPT GPT")
    tied = "lm_head.weight" not in sd or torch.equal(sd["lm_head.weight"], wte)
    if tied:
        sd.pop("lm_head.weight", None)
    config = {"vocab_size": int(args["vocab_size"]), "block_size": int(args["block_size"]),
              "n_layer": int(args["n_layer"]), "n_head": int(args["n_head"]), "n_embd": int(args["n_embd"]),
              "rope": False, "bias": bool(args["bias"]), "tie_embeddings": tied, "norm_eps": 1e-5, "dropout": 0.0,
              "gelu_approximate": "none"}  # nanoGPT's MLP is nn.GELU(): the exact x Phi(x)
    expected = ["transformer.wte.weight", "transformer.wpe.weight"]
    for i in range(config["n_layer"]):
        for part in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"):
            expected.append(f"transformer.h.{i}.{part}.weight")
            if config["bias"]:
                expected.append(f"transformer.h.{i}.{part}.bias")
    expected += ["transformer.ln_f.weight"] + (["transformer.ln_f.bias"] if config["bias"] else [])
    expected += [] if tied else ["lm_head.weight"]
    extra, absent = sorted(set(sd) - set(expected)), [n for n in expected if n not in sd]
    if extra or absent:
        fail(ckpt_path, f"the state dict does not fit model_args {dict((k, args[k]) for k in ARGS)}: "
                        f"missing {absent[:5]}, unexpected {extra[:5]}")
    return config, [(n, sd[n].detach().to(torch.float32).contiguous()) for n in expected], ckpt.get("iter_num")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt", help="nanoGPT's ckpt.pt (out/ckpt.pt after train.py)")
    ap.add_argument("out", help="the mvgpt checkpoint folder to write (new, or empty)")
    a = ap.parse_args()
    out = os.path.normpath(a.out)
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        sys.exit(f"nanogpt_to_mvgpt: {out} already exists and is not empty; name a new folder for the checkpoint")
    config, tensors, iter_num = convert(a.ckpt)
    tmp = f"{out}.tmp.{os.getpid()}"
    os.makedirs(tmp)
    try:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            f.write(json.dumps(config, indent=2) + "\n")
        meta = {"format": "pt", "converted_from": os.path.abspath(a.ckpt)}
        if iter_num is not None:
            meta["step"] = str(int(iter_num))
        write_safetensors(os.path.join(tmp, "model.safetensors"), tensors, meta)
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked above)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    n = sum(t.numel() for _, t in tensors)
    print(f"wrote {out}: {len(tensors)} tensors, {n:,} parameters, config {json.dumps(config)}")
    print("note: nanoGPT's MLP uses the exact GELU, mvgpt the tanh approximation: logits differ by up to about 1e-3")


if __name__ == "__main__":
    main()
