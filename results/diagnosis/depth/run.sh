#!/usr/bin/env bash
# Issue 34: breadth against depth at the pipeline's budget. params.yaml's `train` recipe, its 300 steps of G=32, on
# the first K rows of data/train.jsonl, so each of K lists is seen about 300/K times (the pipeline: 300 of the 512
# rows, once each). The adapter is then scored as the uniformity stage scores GAPO: the paper's 10 unseen lists and
# the 10 held-in lists, n=100, 16 new tokens, seed 0.
# With SHUFFLE_SEED=S, each visit after a list's first asks it in a fresh item order: the rows are tools/
# list_transfer.py's `run_dataset(first K rows, 300, shuffle_seed=S)` (what its `--shuffle-items` trains on), 300 rows
# cycling through the K lists, each row seen once.
#   bash results/diagnosis/depth/run.sh OUT K [gapo train flags, e.g. --seed 1]
#   SHUFFLE_SEED=S bash results/diagnosis/depth/run.sh OUT K --seed S
set -eu
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
O=$1; K=$2; shift 2
rm -rf "$O/gapo" "$O/eval"; mkdir -p "$O"
if [ -z "${SHUFFLE_SEED:-}" ]; then
  head -n "$K" data/train.jsonl > "$O/train.jsonl"
else
  .venv/bin/python - "$O/train.jsonl" "$K" "$SHUFFLE_SEED" <<'PY'
import json
import sys

sys.path.insert(0, "tools")
from list_transfer import run_dataset  # noqa: E402

out, k, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open("data/train.jsonl", encoding="utf-8") as f:
    rows = [json.loads(line) for line in f][:k]
with open(out, "w", encoding="utf-8") as f:
    for row in run_dataset(rows, 300, shuffle_seed=seed):
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
PY
fi
.venv/bin/gapo train --dataset "$O/train.jsonl" --save-steps 100 "$@" --output-dir "$O/gapo" > "$O/train.log" 2>&1
.venv/bin/gapo eval --model embedded --adapter "$O/gapo/adapter" --suite lists --heldin -n 100 --max-new-tokens 16 \
  --seed 0 --no-progress --out "$O/eval"
