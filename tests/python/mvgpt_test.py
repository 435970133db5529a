"""Shared pieces of the Python checks (tests/python/test_*.py), which read what mvgpt writes with
other ecosystems' own code (TensorBoard, PyTorch, transformers, tokenizers).

CTest runs each as `python3 test_x.py BUILD_DIR` (tests/CMakeLists.txt); a missing package prints
"skipped: <package> not installed" and exits with SKIP (ctest's SKIP_RETURN_CODE), so the suite stays
green where the package is absent and the check runs where it is installed.
"""
import atexit
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def require(*modules):
    """Imports each module, or skips the whole check naming the first one missing."""
    loaded = []
    for name in modules:
        try:
            loaded.append(importlib.import_module(name))
        except ImportError:
            print(f"skipped: {name.split('.')[0]} not installed")
            sys.exit(SKIP)
    return loaded[0] if len(loaded) == 1 else loaded


def build_dir():
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} BUILD_DIR")
    return os.path.abspath(sys.argv[1])


def scratch(name):
    """A fresh folder for this check, removed when it ends (kept with MVGPT_KEEP_SCRATCH=1)."""
    d = tempfile.mkdtemp(prefix=f"mvgpt_{name}_")
    if not os.environ.get("MVGPT_KEEP_SCRATCH"):
        atexit.register(shutil.rmtree, d, True)
    else:
        print(f"scratch folder: {d}")
    return d


def run(args, cwd):
    """Runs a command; on failure prints its output and exits 1 (the check fails)."""
    r = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAILED ({r.returncode}): {' '.join(args)}\n{r.stdout}\n{r.stderr}")
        sys.exit(1)
    return r.stdout


def app(name):
    return os.path.join(build_dir(), "apps", name)


def tiny_stories(count, seed):
    """Stories in TinyStories' layout (separator lines "<|endoftext|>"), different for each seed."""
    names, animals = ["Lily", "Tom", "Ben", "Mia", "Sam"], ["cat", "dog", "bird", "frog"]
    places, verbs = ["park", "garden", "house", "forest"], ["play", "run", "jump", "sing"]
    x = seed * 2654435761 + 12345
    out = []
    for _ in range(count):
        picks = []
        for _ in range(4):
            x = (x * 1664525 + 1013904223) % 2**32
            picks.append(x >> 16)
        name, animal, place, verb = (names[picks[0] % 5], animals[picks[1] % 4], places[picks[2] % 4],
                                     verbs[picks[3] % 4])
        out.append(f"Once upon a time, there was a little {animal} named {name}. {name} liked to {verb} in the "
                   f"{place}.\nOne day, {name} said: \"Let's go!\" They had fun.\n<|endoftext|>\n")
    return "".join(out)


def prepare(cwd, vocab=300, train=None, valid=None):
    """stories/{train,valid}.txt (the given texts, or tiny stories) and data/ from prepare."""
    os.makedirs(os.path.join(cwd, "stories"), exist_ok=True)
    for name, text, seed in (("train", train, 1), ("valid", valid, 2)):
        with open(os.path.join(cwd, "stories", name + ".txt"), "w") as f:
            f.write(text if text is not None else tiny_stories(60 if name == "train" else 20, seed))
    run([app("prepare"), "--data-dir", "stories", "--vocab-size", str(vocab), "--out", "data"], cwd)


def check(condition, message):
    if not condition:
        print("FAILED: " + message)
        sys.exit(1)


def prepare_held_out(cwd):
    """prepare on the first MB of ../shared/data/tinystories/train.txt (vocabulary 1,000) with all of
    its valid.txt held out, when the data is beside the repository; otherwise tiny generated stories
    (vocabulary 300). Returns where the held-out stories came from, for the check's report."""
    shared = os.path.join(SOURCE_DIR, "..", "shared", "data", "tinystories")
    if not os.path.isfile(os.path.join(shared, "valid.txt")):
        prepare(cwd, vocab=300)
        return "generated stories"
    with open(os.path.join(shared, "train.txt")) as f:
        train = f.read(1 << 20)
    with open(os.path.join(shared, "valid.txt")) as f:
        valid = f.read()
    prepare(cwd, vocab=1000, train=train[:train.rfind("<|endoftext|>\n") + 14], valid=valid)
    return "../shared/data/tinystories/valid.txt"
