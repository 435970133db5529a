"""Cross-check: llama2.c's PyTorch model.py, loaded with the exported weights, must give
(nearly) the same logits as run.c's forward() recorded in generate.jsonl.

usage: python3 verify_torch.py LLAMA2C_DIR WORK_DIR FIXTURE_DIR
"""
import json
import os
import sys

import torch

llama2c_dir, work, fx = sys.argv[1:4]
sys.path.insert(0, llama2c_dir)
from model import ModelArgs, Transformer  # llama2.c's model.py

torch.set_num_threads(1)
ck = torch.load(os.path.join(work, "tiny_state.pt"))
models = {}
for name in ("tiny_v1", "tiny_legacy"):
    m = Transformer(ModelArgs(**ck["args"]))
    if name == "tiny_legacy":
        m.output.weight = torch.nn.Parameter(torch.empty_like(m.output.weight))
    m.load_state_dict(ck[name])
    m.eval()
    models[name + ".bin"] = m

worst = 0.0
with open(os.path.join(fx, "generate.jsonl")) as f:
    for line in f:
        g = json.loads(line)
        m = models[g["model"]]
        ids = torch.tensor([g["ids"][: g["n_forward"]]])
        with torch.no_grad():
            h = m.tok_embeddings(ids)
            for layer in m.layers:
                h = layer(h, m.freqs_cos[: ids.shape[1]], m.freqs_sin[: ids.shape[1]])
            logits = m.output(m.norm(h))[0]
        for pos, ref in g["logits"].items():
            d = (logits[int(pos)] - torch.tensor(ref)).abs().max().item()
            worst = max(worst, d)
print(f"max |torch logits - run.c logits| over generate.jsonl: {worst:.3g}")
assert worst < 1e-3, worst
