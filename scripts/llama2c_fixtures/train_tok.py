"""Train a 512-token sentencepiece BPE tokenizer the way llama2.c's `tinystories.py
train_vocab` does, then convert it with llama2.c's own tokenizer.py (Tokenizer.export()).

usage: python3 train_tok.py LLAMA2C_DIR TINYSTORIES_TXT WORK_DIR

Differences from tinystories.py train_vocab (documented in the fixture README):
  * input: stories from TinyStories train.txt (documents separated by lines holding only
    "<|endoftext|>") instead of the first 10 json shards; each story is .strip()ped and
    written followed by "\n", exactly as train_vocab writes tiny.txt;
  * num_threads=1 instead of os.cpu_count() (shared 2-core machine).
Every other SentencePieceTrainer option is copied from tinystories.py.
"""
import os
import sys

import sentencepiece as spm

llama2c_dir, stories_txt, work = sys.argv[1:4]
sys.path.insert(0, llama2c_dir)
from tokenizer import Tokenizer  # llama2.c's tokenizer.py

vocab_size = 512
os.makedirs(work, exist_ok=True)
prefix = os.path.join(work, f"tok{vocab_size}")
tiny_file = os.path.join(work, "tiny.txt")

with open(stories_txt, "r", encoding="utf-8") as f:
    docs = f.read().split("\n<|endoftext|>\n")
n = 0
with open(tiny_file, "w", encoding="utf-8") as of:
    for text in docs:
        text = text.strip()
        if not text or text == "<|endoftext|>":
            continue
        assert "<|endoftext|>" not in text
        of.write(text + "\n")
        n += 1
print(f"wrote {tiny_file}: {n} stories, {os.path.getsize(tiny_file) / 1024 / 1024:.2f} MB")

spm.SentencePieceTrainer.train(input=tiny_file,
                               model_prefix=prefix,
                               model_type="bpe",
                               vocab_size=vocab_size,
                               self_test_sample_size=0,
                               input_format="text",
                               character_coverage=1.0,
                               num_threads=1,
                               split_digits=True,
                               allow_whitespace_only_pieces=True,
                               byte_fallback=True,
                               unk_surface=r" \342\201\207 ",
                               normalization_rule_name="identity")

Tokenizer(prefix + ".model").export()  # writes prefix + ".bin"
print(f"wrote {prefix}.model and {prefix}.bin")
