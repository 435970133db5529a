"""llama2.c's tokenizer against SentencePiece itself: `prepare --tokenizer tok512.bin` (llama2.c's
export of tests/fixtures/llama2c/tok512.model, read by mvgpt's run.c-style encoder) encodes every
held-out story to the ids SentencePiece's own encoder gives with the .model, BOS first, as
llama2.c's pretokenization does; and decoding gives the stories back.

The stories are ../shared/data/tinystories/valid.txt beside the repository when it is there,
otherwise small generated ones. (run.c's encoder and SentencePiece part only on runs of spaces,
which this tokenizer's model collapses and run.c does not: README.md beside the fixtures.)"""
import os
import struct

from mvgpt_test import SOURCE_DIR, app, check, require, run, scratch, tiny_stories

spm = require("sentencepiece")

cwd = scratch("sentencepiece")
fixtures = os.path.join(SOURCE_DIR, "tests", "fixtures", "llama2c")
valid = os.path.join(SOURCE_DIR, "..", "shared", "data", "tinystories", "valid.txt")
if not os.path.isfile(valid):
    valid = os.path.join(cwd, "valid.txt")
    with open(valid, "w") as f:
        f.write(tiny_stories(50, 3))
# The held-out file is what is compared; the training file (which prepare requires to differ) is a
# few stories of its own.
train = os.path.join(cwd, "train.txt")
with open(train, "w") as f:
    f.write(tiny_stories(5, 4))
run([app("prepare"), "--train", train, "--valid", valid, "--tokenizer", os.path.join(fixtures, "tok512.bin"),
     "--out", "data"], cwd)
with open(os.path.join(cwd, "data", "valid.bin"), "rb") as f:
    header = struct.unpack("<256i", f.read(1024))
    data = f.read()
ours = list(struct.unpack(f"<{len(data) // 2}H", data))
check(header[2] == len(ours), f"valid.bin header {header[:3]}")

sp = spm.SentencePieceProcessor(model_file=os.path.join(fixtures, "tok512.model"))
with open(valid, encoding="utf-8") as f:
    stories = [s.strip() for s in f.read().split("<|endoftext|>")]
stories = [s for s in stories if s]
theirs = []
for story in stories:
    theirs += [sp.bos_id()] + sp.encode(story)
first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
check(ours == theirs, f"{len(ours)} ids against SentencePiece's {len(theirs)}; first difference at {first}")
# SentencePiece decodes our ids, story by story, back to the stories.
bos = [i for i, t in enumerate(ours) if t == sp.bos_id()] + [len(ours)]
decoded = [sp.decode(ours[a + 1:b]) for a, b in zip(bos, bos[1:])]
check(decoded == stories, "SentencePiece decodes our ids to other text")
print(f"{len(stories)} stories from {os.path.normpath(valid)}: {len(ours)} ids, the same as SentencePiece "
      f"{spm.__version__} gives with tok512.model")
print("OK")
