"""Produce the encode / generate / run.c fixtures with the harness and run.c, and check
them against each other.

usage: python3 run_fixtures.py LLAMA2C_DIR WORK_DIR FIXTURE_DIR
  WORK_DIR holds the built `harness` and `run`, tok512.model, tiny_v1_as_legacy.bin;
  FIXTURE_DIR holds tokenizer.bin, tok512.bin, tiny_v1.bin, tiny_legacy.bin.

Writes FIXTURE_DIR/{llama2_encode,tok512_encode,generate}.jsonl and
FIXTURE_DIR/run_c_output/{<model>_<n>.txt,index.jsonl}.

Besides the fields the harness prints, each encode line gets "sp_ids": what the
sentencepiece .model itself gives ([1] + sp.encode(text)), or null when the prompt is not
valid UTF-8. It is informational: run.c's encoder differs from sentencepiece on purpose or
by accident in places (see the README).
"""
import json
import os
import struct
import subprocess
import sys

import sentencepiece as spm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prompts import ENCODE_PROMPTS, GENERATE_CASES  # noqa: E402

llama2c_dir, work, fx = sys.argv[1:4]
harness = os.path.join(work, "harness")
run_c = os.path.join(work, "run")


def sh(args):
    return subprocess.run(["nice", "-n", "10", *args], check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE).stdout


# ---------------------------------------------------------------- encode
prompts_file = os.path.join(work, "encode_prompts.hex")
with open(prompts_file, "w") as f:
    for p in ENCODE_PROMPTS:
        f.write(p.hex() + "\n")

for name, tok_bin, vocab, sp_model in [
    ("llama2_encode.jsonl", "tokenizer.bin", 32000, os.path.join(llama2c_dir, "tokenizer.model")),
    ("tok512_encode.jsonl", "tok512.bin", 512, os.path.join(work, "tok512.model")),
]:
    sp = spm.SentencePieceProcessor(model_file=sp_model)
    out = sh([harness, "encode", os.path.join(fx, tok_bin), str(vocab), prompts_file])
    lines = out.decode("ascii").splitlines()
    assert len(lines) == len(ENCODE_PROMPTS)
    n_diff = 0
    with open(os.path.join(fx, name), "w") as f:
        for p, line in zip(ENCODE_PROMPTS, lines):
            obj = json.loads(line)
            assert bytes.fromhex(obj["prompt_hex"]) == p
            try:
                text = p.decode("utf-8")
                obj["sp_ids"] = [1] + sp.encode(text)
            except UnicodeDecodeError:
                obj["sp_ids"] = None
            if obj["sp_ids"] is not None and obj["sp_ids"] != obj["ids"]:
                n_diff += 1
                print(f"  {name}: run.c encode != sentencepiece for {p!r}")
            dec = bytes.fromhex(obj["decoded_hex"])
            prn = bytes.fromhex(obj["printed_hex"])
            if dec != p:
                print(f"  {name}: decode(encode(p)) != p for {p!r}: {dec!r}")
            if prn != dec:
                print(f"  {name}: safe_printf drops bytes for {p!r}: printed {prn!r}")
            f.write(json.dumps(obj, ensure_ascii=True) + "\n")
    print(f"wrote {name}: {len(lines)} prompts, {n_diff} differ from sentencepiece")

# ---------------------------------------------------------------- generate + run.c
models = [  # (fixture name, file the harness reads, file run.c reads)
    ("tiny_v1.bin", os.path.join(fx, "tiny_v1.bin"), os.path.join(work, "tiny_v1_as_legacy.bin")),
    ("tiny_legacy.bin", os.path.join(fx, "tiny_legacy.bin"), os.path.join(fx, "tiny_legacy.bin")),
]
rc_dir = os.path.join(fx, "run_c_output")
os.makedirs(rc_dir, exist_ok=True)
gen_lines, index = [], []
for model_name, harness_file, run_file in models:
    stem = model_name[:-4]
    for n, (steps, prompt) in enumerate(GENERATE_CASES):
        obj = json.loads(sh([harness, "generate", harness_file, os.path.join(fx, "tok512.bin"),
                             str(steps), prompt.hex()]))
        assert obj["model"] == os.path.basename(harness_file)
        obj["model"] = model_name
        if harness_file != run_file:  # same weights through run.c's own legacy reader
            alt = json.loads(sh([harness, "generate", run_file, os.path.join(fx, "tok512.bin"),
                                 str(steps), prompt.hex()]))
            assert alt["ids"] == obj["ids"] and alt["logits"] == obj["logits"], model_name
        gen_lines.append(json.dumps(obj, ensure_ascii=True))

        stdout = sh([run_c, run_file, "-z", os.path.join(fx, "tok512.bin"), "-t", "0",
                     "-n", str(steps), "-i", prompt])
        fname = f"{stem}_{n}.txt"
        with open(os.path.join(rc_dir, fname), "wb") as f:
            f.write(stdout)
        assert stdout == bytes.fromhex(obj["printed_hex"]), (model_name, prompt)
        text = bytes.fromhex(obj["text_hex"])
        if text + b"\n" != stdout:
            print(f"  {fname}: safe_printf dropped bytes: text {text!r}")
        index.append({"file": fname, "model": model_name,
                      "run_c_read": os.path.basename(run_file),
                      "prompt_hex": prompt.hex(), "steps": steps,
                      "command": f"./run {os.path.basename(run_file)} -z tok512.bin -t 0 "
                                 f"-n {steps} -i <prompt>"})
        print(f"  {model_name} case {n}: {len(obj['ids'])} ids, stop={obj['stop']}, "
              f"n_forward={obj['n_forward']}, logits at {list(obj['logits'])}")

with open(os.path.join(fx, "generate.jsonl"), "w") as f:
    f.write("\n".join(gen_lines) + "\n")
with open(os.path.join(rc_dir, "index.jsonl"), "w") as f:
    for e in index:
        f.write(json.dumps(e, ensure_ascii=True) + "\n")
print(f"wrote generate.jsonl ({len(gen_lines)} lines) and run_c_output/ ({len(index)} files); "
      f"run.c stdout == harness printed_hex for all")

# ---------------------------------------------------------------- tokenizer.bin duplicates
for tok_bin, vocab in [("tokenizer.bin", 32000), ("tok512.bin", 512)]:
    with open(os.path.join(fx, tok_bin), "rb") as f:
        buf = f.read()
    (max_len,) = struct.unpack_from("I", buf, 0)
    off, seen, dups = 4, {}, []
    for i in range(vocab):
        score, n = struct.unpack_from("fI", buf, off)
        s = buf[off + 8: off + 8 + n]
        off += 8 + n
        if s in seen:
            dups.append((s, seen[s], i))
        else:
            seen[s] = i
    assert off == len(buf), (tok_bin, off, len(buf))
    print(f"{tok_bin}: max_token_length {max_len}, {len(dups)} duplicated strings: "
          + ", ".join(f"{s!r} ids {a} and {b}" for s, a, b in dups))
