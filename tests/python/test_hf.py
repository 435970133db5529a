"""Hugging Face out and back in: `export --format hf` folders load in transformers
(AutoModelForCausalLM: GPT2LMHeadModel, GPTNeoXForCausalLM, LlamaForCausalLM) with no missing or
unexpected weight, their logits on held-out text equal ours to 1e-4; the tokenizer.json loads in
`tokenizers` and PreTrainedTokenizerFast and encodes every held-out story to our ids (prepare's
valid.bin) and decodes back; `import` reads the folder, and transformers' own save_pretrained of it,
back to bit-identical weights and the same tokenizer.

The held-out stories are ../shared/data/tinystories/valid.txt beside the repository when it is there
(the tokenizer trained on the first MB of train.txt), otherwise small generated ones."""
import json
import os
import struct
import sys

import numpy

from mvgpt_test import SOURCE_DIR, app, build_dir, check, prepare_held_out, require, run, scratch

torch, transformers, tokenizers = require("torch", "transformers", "tokenizers")
sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts"))
from hand_safetensors import read_safetensors, write_safetensors  # noqa: E402

TOOL = os.path.join(build_dir(), "tests", "mvgpt_tool")
cwd = scratch("hf")
source = prepare_held_out(cwd)
with open(os.path.join(cwd, "data", "tokenizer.json")) as f:
    ours_tokenizer = json.load(f)
vocab = ours_tokenizer["vocab_size"]
eot = vocab - 1

# prepare's held-out tokens: llm.c's header (256 int32: magic, version, count), then uint16 ids.
with open(os.path.join(cwd, "data", "valid.bin"), "rb") as f:
    header = struct.unpack("<256i", f.read(1024))
    valid_ids = numpy.frombuffer(f.read(), dtype="<u2").astype(numpy.int64)
check(header[0] == 20240520 and header[2] == len(valid_ids), f"valid.bin header {header[:3]}")

VARIANTS = {
    "learned": ("GPT2LMHeadModel", dict(rope=False)),
    "rope": ("GPTNeoXForCausalLM", dict(rope=True, rope_base=500.0)),
    # The exact GELU (nanoGPT's) goes out as transformers' "gelu" (GELUActivation, erf).
    "learned-exact-gelu": ("GPT2LMHeadModel", dict(rope=False, gelu_approximate="none")),
    "rope-exact-gelu": ("GPTNeoXForCausalLM", dict(rope=True, gelu_approximate="none")),
    "llama": ("LlamaForCausalLM", dict(rope=True, rope_base=500.0, norm="rmsnorm", mlp="swiglu", n_head=4, n_kv_head=2,
                                       bias=False, tie_embeddings=False, norm_eps=1e-6)),
}
B, T = 4, 32


def safetensors_bits(path):
    """name -> the tensor's bytes (bit-for-bit comparison)."""
    tensors, _ = read_safetensors(path)
    return {k: v.contiguous().numpy().tobytes() for k, v in tensors.items()}


# A batch of held-out windows, as ids and as the text they stand for.
batch = torch.tensor(valid_ids[:B * T].reshape(B, T))
write_safetensors(os.path.join(cwd, "tokens.safetensors"), [("tokens", batch.to(torch.int32))])
results = []
for name, (cls, fields) in VARIANTS.items():
    config = dict(dict(vocab_size=vocab, block_size=T, n_layer=2, n_head=2, n_embd=64), **fields)
    with open(os.path.join(cwd, name + ".json"), "w") as f:
        json.dump(config, f)
    ckpt, hf = os.path.join(cwd, "ckpt-" + name), os.path.join(cwd, "hf-" + name)
    run([TOOL, "random", name + ".json", "7", "0.3", ckpt, os.path.join("data", "tokenizer.json")], cwd)
    print(run([app("export"), "--ckpt", ckpt, "--format", "hf", "--out", hf], cwd).strip())

    model, info = transformers.AutoModelForCausalLM.from_pretrained(hf, output_loading_info=True)
    model.eval()
    check(type(model).__name__ == cls, f"{name}: transformers built {type(model).__name__}, expected {cls}")
    check(not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")),
          f"{name}: loading info {info}")
    with torch.no_grad():
        theirs = model(batch).logits.double()
    run([TOOL, "logits", ckpt, "tokens.safetensors", "logits.safetensors"], cwd)
    ours = read_safetensors(os.path.join(cwd, "logits.safetensors"))[0]["logits"].double()
    err = (theirs - ours).abs().max().item()
    results.append(f"{name} ({cls}): max |transformers - mvgpt| = {err:.3g} over logits {tuple(ours.shape)} "
                   f"in [{ours.min().item():.1f}, {ours.max().item():.1f}]")
    print(results[-1])
    check(err <= 1e-4, f"{name}: logits differ by {err}")
    # Our loader reads the exported folder as it is, to the same logits.
    run([TOOL, "logits", hf, "tokens.safetensors", "logits-hf.safetensors"], cwd)
    check(torch.equal(read_safetensors(os.path.join(cwd, "logits-hf.safetensors"))[0]["logits"].double(), ours),
          f"{name}: the HF folder loaded by mvgpt gives other logits")

    # Back in: import of our folder and of transformers' own save, bit for bit.
    original = safetensors_bits(os.path.join(ckpt, "model.safetensors"))
    saved = os.path.join(cwd, "saved-" + name)
    model.save_pretrained(saved, safe_serialization=True)
    for folder in (hf, saved):
        back = os.path.join(cwd, "back-" + os.path.basename(folder))
        run([app("import"), "--from", folder, "--out", back], cwd)
        check(safetensors_bits(os.path.join(back, "model.safetensors")) == original,
              f"{name}: import of {os.path.basename(folder)} is not bit-identical")
    with open(os.path.join(cwd, "back-hf-" + name, "tokenizer.json")) as f:
        check(json.load(f)["merges"] == ours_tokenizer["merges"], f"{name}: the tokenizer came back different")

# The tokenizer: tokenizers itself and transformers' fast tokenizer, story by story.
transformers.logging.set_verbosity_error()  # the whole file is longer than model_max_length: not an error here
fast = transformers.AutoTokenizer.from_pretrained(os.path.join(cwd, "hf-learned"))
raw = tokenizers.Tokenizer.from_file(os.path.join(cwd, "hf-learned", "tokenizer.json"))
check(type(fast).__name__ == "PreTrainedTokenizerFast", f"AutoTokenizer built {type(fast).__name__}")
check(fast.eos_token_id == eot and fast.convert_tokens_to_ids("<|endoftext|>") == eot, "<|endoftext|> is not the last id")
with open(os.path.join(cwd, "stories", "valid.txt")) as f:
    text = f.read()
# prepare's rule: "<|endoftext|>" is the end-of-text id, everything else (the newline after it too)
# ordinary text; the Hugging Face tokenizer splits on its special token the same way.
expected = fast.encode(text, add_special_tokens=False)
check(expected == raw.encode(text, add_special_tokens=False).ids, "tokenizers and transformers encode differently")
check(len(expected) == len(valid_ids) and numpy.array_equal(numpy.array(expected), valid_ids),
      f"the held-out ids differ: first at {next((i for i, (a, b) in enumerate(zip(expected, valid_ids)) if a != b), None)}"
      f" ({len(expected)} vs {len(valid_ids)} ids)")
check(fast.decode(expected) == text, "the held-out text does not decode back")
stories = text.count("<|endoftext|>")
print(f"tokenizer: {stories} held-out stories from {source}, {len(valid_ids)} ids, the same as ours")
print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, torch {torch.__version__}: OK")
