"""llama.cpp runs what `export --format gguf` writes, and agrees with us: for each model kind (learned
positions as llama.cpp's gpt2, RoPE as gptneox, the Llama style as llama, and llama2.c's tiny model with
its SentencePiece tokenizer as llama), a small model trained here for a few seconds (or llama2.c's
fixture) goes out as F32 GGUF and is loaded by llama.cpp's own code (llama-cpp-python, which builds
llama.cpp from the source it vendors; see docs/checkpoints.md for the pinned version). Then:
  - llama.cpp's tokenization of the held-out stories equals ours (prepare's valid.bin, or our
    SentencePiece encoding of each story) token for token;
  - its logits on held-out windows equal ours within LOGIT_TOL (F32 weights and KV cache; ggml's GELU
    reads a float16 table, which is most of the difference);
  - its greedy continuation of a few prompts (llama.cpp's greedy sampler, stopping at its
    end-of-generation token) equals ours (gpt::generate at temperature 0, stopping after the end of the
    story) token for token, and `generate --temperature 0 --stop-at-end` prints the same text;
  - F16, BF16 and Q8_0 files load too and pick the same next token almost everywhere (figures printed);
  - `import --format gguf` gives back the F32 weights and the tokenizer bit for bit, and a BF16 file
    read back and written again holds the same values.
The figures are printed for docs/checkpoints.md."""
import json
import os
import struct
import sys

import numpy

from mvgpt_test import SOURCE_DIR, app, build_dir, check, prepare_held_out, require, run, scratch

llama_cpp, torch = require("llama_cpp", "torch")
# llama.cpp's plain CPU kernels, without its "extra buffer types" (weights repacked for its AMX and
# other per-CPU kernels): on the 2-core Intel Xeon with AMX (family 6 model 167) llama.cpp of
# llama-cpp-python 0.3.36 crashed in ggml::cpu::amx::tensor_traits::compute_forward on these files.
# What is checked is our file, read by llama.cpp's loader and run by its reference kernels, the same
# on every CPU.
_default_model_params = llama_cpp.llama_cpp.llama_model_default_params


def _plain_cpu_model_params():
    params = _default_model_params()
    params.use_extra_bufts = False
    return params


llama_cpp.llama_cpp.llama_model_default_params = _plain_cpu_model_params
sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts"))
from hand_safetensors import read_safetensors, write_safetensors  # noqa: E402

TOOL = os.path.join(build_dir(), "tests", "mvgpt_tool")
LOGIT_TOL = 5e-3
GGML_TYPE_F32 = 0
cwd = scratch("gguf")

source = prepare_held_out(cwd)
with open(os.path.join(cwd, "stories", "valid.txt")) as f:
    valid = f.read()
with open(os.path.join(cwd, "data", "valid.bin"), "rb") as f:
    header = struct.unpack("<256i", f.read(1024))
    valid_ids = numpy.frombuffer(f.read(), dtype="<u2").astype(numpy.int64).tolist()
vocab = json.load(open(os.path.join(cwd, "data", "tokenizer.json")))["vocab_size"]
stories = [s.strip() for s in valid.split("<|endoftext|>") if s.strip()]
PROMPTS = ["Once upon a time", "Lily and Tom went to the", "The little dog said, \"", ""]
T = 128
KINDS = {
    "learned": ("gpt2", dict(rope=False)),
    "rope": ("gptneox", dict(rope=True)),
    "llama": ("llama", dict(rope=True, norm="rmsnorm", mlp="swiglu", n_kv_head=2, bias=False, tie_embeddings=False)),
}


def llama(path, n_ctx=T):
    # F32 KV cache and no flash attention: the model's own arithmetic, not a cache's rounding.
    return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, n_threads=2, verbose=False,
                           type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, flash_attn=False)


def llama_logits(llm, ids):
    llm.reset()
    llm.eval(ids)
    return numpy.array(llm.scores[:len(ids)], dtype=numpy.float64)


def our_logits(ckpt, windows):
    tokens = os.path.join(cwd, "tokens.safetensors")
    write_safetensors(tokens, [("tokens", torch.tensor(windows, dtype=torch.int32))])
    out = os.path.join(cwd, "logits.safetensors")
    run([TOOL, "logits", ckpt, tokens, out], cwd)
    return read_safetensors(out)[0]["logits"].double().numpy()


def logit_agreement(llm, windows, mine):
    """(max abs difference, share of positions with the same top-1 token) of llama.cpp's logits against ours."""
    worst, top1 = 0.0, 0
    for b, w in enumerate(windows):
        theirs = llama_logits(llm, w)
        worst = max(worst, float(numpy.abs(theirs - mine[b]).max()))
        top1 += int((theirs.argmax(-1) == mine[b].argmax(-1)).sum())
    return worst, top1 / (len(windows) * len(windows[0]))


def llama_greedy(llm, prompt, n):
    """llama.cpp's greedy sampler from the prompt ids, up to n tokens, stopping after its end of generation."""
    llm.reset()
    out = []
    for token in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
        out.append(token)
        if llm.token_eos() == token or len(out) == n or llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
            break
    return prompt + out


def compare(name, path, ckpt, windows, prompts, tokenizer_ids):
    """Tokenization, logits and greedy agreement of one GGUF file against the checkpoint; returns figures (with
    llama.cpp's architecture and our logits on `windows`)."""
    llm = llama(path)
    figures = {"kind": name, "arch": llm.metadata["general.architecture"]}
    # Tokenization of the held-out stories.
    theirs, ours = tokenizer_ids(llm)
    differ = [i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b]
    check(len(theirs) == len(ours) and not differ,
          f"{name}: llama.cpp tokenizes the held-out stories into {len(theirs)} ids, ours {len(ours)}; first difference at "
          f"{differ[:1]}")
    figures["tokens"] = len(ours)
    # Logits on held-out windows.
    figures["logits"] = our_logits(ckpt, windows)
    worst, figures["top1"] = logit_agreement(llm, windows, figures["logits"])
    figures["max_logit_diff"] = worst
    # Greedy continuations.
    with open(os.path.join(cwd, "prompts.json"), "w") as f:
        json.dump(prompts, f)
    greedy = json.loads(run([TOOL, "greedy", ckpt, "prompts.json", str(T - 40)], cwd))
    agreed = 0
    for p, g in zip(prompts, greedy):
        prompt = g["ids"][:g["prompt"]]
        theirs_g = llama_greedy(llm, prompt, T - 40)
        check(theirs_g == g["ids"], f"{name}: greedy from {p!r}: llama.cpp {theirs_g[len(prompt):][:20]}..., "
                                    f"ours {g['ids'][len(prompt):][:20]}... (first difference at new token "
                                    f"{next((i for i, (a, b) in enumerate(zip(theirs_g, g['ids'])) if a != b), -1) - len(prompt)})")
        agreed += len(g["ids"]) - len(prompt)
        # The app prints the same story as llama.cpp spells its tokens.
        printed = run([app("generate"), "--ckpt", ckpt, "--prompt", p, "--temperature", "0", "--max-new-tokens",
                       str(T - 40), "--stop-at-end"], cwd)
        spelled = llm.detokenize(theirs_g).decode("utf-8", "replace")
        check(printed.rstrip("\n") == spelled.rstrip("\n"),
              f"{name}: generate printed {printed[:80]!r}, llama.cpp's tokens spell {spelled[:80]!r}")
    figures["greedy_tokens"] = agreed
    del llm
    check(worst < LOGIT_TOL, f"{name}: logits differ by {worst:.2e} (tolerance {LOGIT_TOL})")
    return figures


def bpe_tokenizer_ids(llm):
    theirs = llm.tokenize(valid.encode("utf-8"), add_bos=False, special=True)
    return theirs, valid_ids


def held_out_windows():
    return [valid_ids[i * T:(i + 1) * T] for i in range(4)]


def weights(ckpt):
    return {k: v.numpy().tobytes() for k, v in read_safetensors(os.path.join(ckpt, "model.safetensors"))[0].items()}


results = []
for name, (arch, fields) in KINDS.items():
    config = dict(dict(vocab_size=vocab, block_size=T, n_layer=2, n_head=4, n_embd=64), **fields)
    with open(os.path.join(cwd, name + ".json"), "w") as f:
        json.dump(config, f)
    run([app("pretrain"), "--config", name + ".json", "--steps", "200", "--lr", "3e-3", "--eval-interval", "200",
         "--out", "run-" + name], cwd)
    ckpt = os.path.join(cwd, "run-" + name, "last")
    path = os.path.join(cwd, name + ".gguf")
    print(run([app("export"), "--ckpt", ckpt, "--format", "gguf", "--out", path], cwd).strip())
    figures = compare(name, path, ckpt, held_out_windows(), PROMPTS, bpe_tokenizer_ids)
    check(figures["arch"] == arch, f"{name}: llama.cpp's {figures['arch']}, not {arch}")

    # Back in, bit for bit: the F32 weights and the tokenizer.
    back = os.path.join(cwd, "back-" + name)
    print(run([app("import"), "--format", "gguf", "--from", path, "--out", back], cwd).strip())
    check(weights(back) == weights(ckpt), f"{name}: import --format gguf changed the weights")
    check(json.load(open(os.path.join(back, "tokenizer.json"))) == json.load(open(os.path.join(ckpt, "tokenizer.json"))),
          f"{name}: import --format gguf changed the tokenizer")

    # The smaller types: llama.cpp loads them; how often it picks our next token.
    for outtype in ("f16", "bf16", "q8_0"):
        typed = os.path.join(cwd, f"{name}-{outtype}.gguf")
        run([app("export"), "--ckpt", ckpt, "--format", "gguf", "--outtype", outtype, "--out", typed], cwd)
        llm = llama(typed)
        figures[outtype] = logit_agreement(llm, held_out_windows(), figures["logits"])
        check(figures[outtype][1] > 0.9,
              f"{name} {outtype}: llama.cpp picks our next token at only {100 * figures[outtype][1]:.1f}% of positions")
        del llm
    # A BF16 file read back and written again holds the same values.
    bf16_back = os.path.join(cwd, f"back-{name}-bf16")
    run([app("import"), "--format", "gguf", "--from", os.path.join(cwd, f"{name}-bf16.gguf"), "--out", bf16_back], cwd)
    again = os.path.join(cwd, f"{name}-bf16-again.gguf")
    run([app("export"), "--ckpt", bf16_back, "--format", "gguf", "--outtype", "bf16", "--out", again], cwd)
    run([app("import"), "--format", "gguf", "--from", again, "--out", bf16_back + "-again"], cwd)
    check(weights(bf16_back) == weights(bf16_back + "-again"), f"{name}: a BF16 round trip changed the values")
    results.append(figures)

# llama2.c's tiny model with its 512-piece SentencePiece tokenizer: llama.cpp's llama with model "llama".
fixtures = os.path.join(SOURCE_DIR, "tests", "fixtures", "llama2c")
run([app("import"), "--format", "llama2c", "--from", os.path.join(fixtures, "tiny_v1.bin"), "--tokenizer",
     os.path.join(fixtures, "tok512.bin"), "--out", "tiny"], cwd)
tiny = os.path.join(cwd, "tiny")
print(run([app("export"), "--ckpt", tiny, "--format", "gguf", "--out", "tiny.gguf"], cwd).strip())
with open(os.path.join(cwd, "stories.json"), "w") as f:
    json.dump(stories, f)
sp_ids = json.loads(run([TOOL, "encode", os.path.join(tiny, "tokenizer.json"), "stories.json"], cwd))


def sp_tokenizer_ids(llm):
    theirs, ours = [], []
    for s, ids in zip(stories, sp_ids):
        theirs += llm.tokenize(s.encode("utf-8"), add_bos=True, special=False)
        ours += ids
    return theirs, ours


flat = [i for ids in sp_ids for i in ids]
results.append(compare("llama2.c", os.path.join(cwd, "tiny.gguf"), tiny, [flat[i * T:(i + 1) * T] for i in range(4)],
                       PROMPTS, sp_tokenizer_ids))
run([app("import"), "--format", "gguf", "--from", "tiny.gguf", "--out", "back-tiny"], cwd)
check(weights(tiny) == weights(os.path.join(cwd, "back-tiny")), "llama2.c: import --format gguf changed the weights")
check(json.load(open(os.path.join(cwd, "back-tiny", "tokenizer.json"))) == json.load(open(os.path.join(tiny, "tokenizer.json"))),
      "llama2.c: import --format gguf changed the tokenizer")

print(f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) against mvgpt on {source}:")
for r in results:
    typed = "".join(f", {t} max |diff| {r[t][0]:.2e} top-1 {100 * r[t][1]:.1f}%" for t in ("f16", "bf16", "q8_0") if t in r)
    print(f"  {r['kind']}: {r['tokens']} held-out tokens identical; F32 logits max |diff| {r['max_logit_diff']:.2e}, "
          f"top-1 {100 * r['top1']:.1f}%; {r['greedy_tokens']} greedy tokens identical{typed}")
print("ok")
