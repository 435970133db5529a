"""Train a tiny llama2.c Transformer (llama2.c's own model.py) on TinyStories for a few
hundred CPU steps and write it with llama2.c's own export.py:

  OUT_DIR/tiny_v1.bin       version1_export (magic "ak42"), shared classifier (model.py ties
                            output.weight and tok_embeddings.weight)
  OUT_DIR/tiny_legacy.bin   legacy_export (v0), UNTIED classifier: output.weight replaced by
                            its own Parameter = embedding + 0.02 * randn (fixed seed), so the
                            header's vocab_size is -512
  WORK_DIR/tiny_v1_as_legacy.bin
                            legacy_export of exactly the tiny_v1.bin weights (tied, vocab +512).
                            run.c at this commit only reads legacy files, so this scratch file is
                            what run.c runs for the "tiny_v1" outputs. Not a fixture.
  WORK_DIR/tiny_state.pt    both models' state dicts, for verify_torch.py. Not a fixture.

usage: python3 train_tiny.py LLAMA2C_DIR TINYSTORIES_TXT TOK_MODEL OUT_DIR WORK_DIR
"""
import math
import os
import struct
import sys
import time

import numpy as np
import torch

llama2c_dir, stories_txt, tok_model, out_dir, work = sys.argv[1:6]
sys.path.insert(0, llama2c_dir)
from model import ModelArgs, Transformer  # llama2.c's model.py
from export import legacy_export, version1_export  # llama2.c's export.py
from tokenizer import Tokenizer  # llama2.c's tokenizer.py

torch.set_num_threads(1)
torch.manual_seed(1337)

STEPS = 500
BATCH = 32
SEQ = 128
LR, MIN_LR, WARMUP = 3e-3, 3e-4, 30

# ---- data: each story as [BOS] + ids, as llama2.c's pretokenize (process_shard) does ----
enc = Tokenizer(tok_model)
with open(stories_txt, "r", encoding="utf-8") as f:
    docs = f.read().split("\n<|endoftext|>\n")
all_tokens = []
for text in docs:
    text = text.strip()
    if not text or text == "<|endoftext|>":
        continue
    all_tokens.extend(enc.encode(text, bos=True, eos=False))
data = torch.from_numpy(np.array(all_tokens, dtype=np.int64))
print(f"{len(all_tokens)} tokens, {int((data == 1).sum())} stories")

# ---- model ----
args = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=512,
                 multiple_of=32, max_seq_len=SEQ, norm_eps=1e-5, dropout=0.0)
model = Transformer(args)
print(f"{sum(p.numel() for p in model.parameters())} parameters")
opt = model.configure_optimizers(weight_decay=0.1, learning_rate=LR, betas=(0.9, 0.95),
                                 device_type="cpu")
gen = torch.Generator().manual_seed(42)


def lr_at(it):
    if it < WARMUP:
        return LR * (it + 1) / WARMUP
    r = (it - WARMUP) / (STEPS - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * r)) * (LR - MIN_LR)


model.train()
t0 = time.time()
for it in range(STEPS):
    ix = torch.randint(len(data) - SEQ - 1, (BATCH,), generator=gen)
    x = torch.stack([data[i:i + SEQ] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + SEQ] for i in ix])
    for g in opt.param_groups:
        g["lr"] = lr_at(it)
    model(x, y)
    loss = model.last_loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if it % 50 == 0 or it == STEPS - 1:
        print(f"step {it} loss {loss.item():.4f} lr {lr_at(it):.2e} {time.time() - t0:.0f}s",
              flush=True)
model.eval()

# ---- export ----
os.makedirs(out_dir, exist_ok=True)
assert model.output.weight is model.tok_embeddings.weight
version1_export(model, os.path.join(out_dir, "tiny_v1.bin"))
legacy_export(model, os.path.join(work, "tiny_v1_as_legacy.bin"))  # tied: vocab stays +512
assert model.params.vocab_size == 512
tied_state = {k: v.clone() for k, v in model.state_dict().items()}

pert = torch.Generator().manual_seed(7)
with torch.no_grad():
    w = model.tok_embeddings.weight.detach().clone()
    w += 0.02 * torch.randn(w.shape, generator=pert)
model.output.weight = torch.nn.Parameter(w)
assert not torch.equal(model.output.weight, model.tok_embeddings.weight)
legacy_export(model, os.path.join(out_dir, "tiny_legacy.bin"))  # negates params.vocab_size
untied_state = {k: v.clone() for k, v in model.state_dict().items()}
torch.save({"tiny_v1": tied_state, "tiny_legacy": untied_state,
            "args": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=512,
                         multiple_of=32, max_seq_len=SEQ, norm_eps=1e-5, dropout=0.0)},
           os.path.join(work, "tiny_state.pt"))

with open(os.path.join(out_dir, "tiny_legacy.bin"), "rb") as f:
    hdr = struct.unpack("7i", f.read(28))
print("tiny_legacy.bin header", hdr)
assert hdr[5] == -512, hdr
with open(os.path.join(out_dir, "tiny_v1.bin"), "rb") as f:
    h = f.read(37)
print("tiny_v1.bin header", hex(struct.unpack("I", h[:4])[0]), struct.unpack("8i", h[4:36]), h[36])

# ---- a quick greedy sample in PyTorch, just to eyeball the text ----
model.load_state_dict(tied_state)
ids = torch.tensor([enc.encode("Once upon a time", bos=True, eos=False)])
with torch.no_grad():
    out = model.generate(ids, 60, temperature=0.0)
print("torch greedy (tiny_v1):", repr(enc.decode(out[0].tolist())))
