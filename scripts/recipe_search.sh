#!/usr/bin/env bash
# One row of a recipe search (docs/apps.md, "Recipes"): trains the series' model for a few minutes
# with the given pretrain flags and measures held-out loss on stories held out of train.txt, so the
# search never sees valid.bin and the final figures on it stay honest.
#
#   scripts/recipe_search.sh [--minutes M] NAME [pretrain flags...]
#   scripts/recipe_search.sh --minutes 2 muon --rope --optimizer muon
#
# The split (made once, in runs/search/, git-ignored): the last 5% of train.txt's stories (240 of
# 4,812) are the search's held-out set, the rest its training text, both encoded with data/'s
# tokenizer (prepare runs first when data/ is missing; that tokenizer has seen all of train.txt,
# held-out stories included: its merges, not the model). --precision auto, --data, --out and
# --overwrite are the script's: a row cannot pass them again. Each row goes to runs/search/results.tsv:
# name, steps, tokens, held-out loss (all of the search's held-out windows), flags.
# Run it alone on the machine: the clock decides how many steps a row gets.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=2
if [[ "${1:-}" == "--minutes" ]]; then minutes=$2; shift 2; fi
[[ $# -ge 1 ]] || { echo "usage: scripts/recipe_search.sh [--minutes M] NAME [pretrain flags...]" >&2; exit 2; }
name=$1; shift
[[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "recipe_search: name '$name' must be letters, digits, . _ or -" >&2; exit 2; }
bin=${MVGPT_BUILD_DIR:-build}/apps
stories=${MVGPT_DATA_DIR:-../shared/data/tinystories}
search=runs/search

[[ -f data/tokenizer.json ]] || "$bin/prepare" --data-dir "$stories"
if [[ ! -f $search/data/valid.bin ]]; then
  mkdir -p "$search/text"
  # Stories end with an <|endoftext|> line; the last 5% of them are held out.
  python3 - "$stories/train.txt" "$search/text" <<'EOF'
import sys
text = open(sys.argv[1], encoding="utf-8").read()
stories = [s.strip("\n") for s in text.split("<|endoftext|>") if s.strip()]
cut = len(stories) - len(stories) // 20
for name, part in (("train.txt", stories[:cut]), ("valid.txt", stories[cut:])):
    with open(f"{sys.argv[2]}/{name}", "w", encoding="utf-8") as f:
        f.write("".join(story + "\n<|endoftext|>\n" for story in part))
print(f"search split: {cut} stories to train on, {len(stories) - cut} held out")
EOF
  "$bin/prepare" --train "$search/text/train.txt" --valid "$search/text/valid.txt" --tokenizer data/tokenizer.json \
    --out "$search/data"
fi

out=$search/runs/$name
log=$search/logs/$name.log
mkdir -p "$search/logs"
if ! "$bin/pretrain" --minutes "$minutes" --data "$search/data" --out "$out" --overwrite --precision auto "$@" >"$log" 2>&1; then
  tail -3 "$log" >&2
  echo "recipe_search: pretrain failed for '$name' (its log: $log)" >&2
  exit 1
fi
steps=$(grep -oE '^step +[0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo "?")
tokens=$(python3 -c "import json; print(json.load(open('$out/last/state.json'))['tokens_seen'])" 2>/dev/null || echo "?")
loss=$("$bin/evaluate" --ckpt "$out/last" --tokens "$search/data/valid.bin" --json |
  python3 -c "import json, sys; print('%.4f' % json.load(sys.stdin)[0]['loss'])")
printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$steps" "$tokens" "$loss" "$*" | tee -a "$search/results.tsv"
