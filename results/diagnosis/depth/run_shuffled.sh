#!/usr/bin/env bash
# Issue 34: run.sh's "64 lists seen about 4.7 times" with each visit after a list's first in a fresh item order.
# The rows: tools/list_transfer.py's `run_dataset(first K rows of data/train.jsonl, STEPS, shuffle_seed=SEED)` (what
# its `--shuffle-items` trains on): STEPS rows cycling through the K lists, every row of a list but its first with the
# items reordered, in the row's own phrasing. params.yaml's `train` recipe then sees each row once (STEPS = its
# max_steps, 300), and the adapter is scored as run.sh scores it (the paper's 10 unseen lists and the 10 held-in lists,
# n=100, 16 new tokens, seed 0).
#   bash results/diagnosis/depth/run_shuffled.sh OUT K SEED [gapo train flags]     # the seed: training and reorders
set -eu
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
O=$1; K=$2; S=$3; shift 3
STEPS=300
rm -rf "$O/gapo" "$O/eval"; mkdir -p "$O"
.venv/bin/python - "$O/train.jsonl" "$K" "$S" "$STEPS" <<'EOF'
import json
import sys

sys.path.insert(0, "tools")
from list_transfer import run_dataset  # noqa: E402

out, k, seed, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with open("data/train.jsonl", encoding="utf-8") as f:
    rows = [json.loads(line) for line in f][:k]
with open(out, "w", encoding="utf-8") as f:
    for row in run_dataset(rows, steps, shuffle_seed=seed):
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
EOF
.venv/bin/gapo train --dataset "$O/train.jsonl" --save-steps 100 --seed "$S" "$@" --output-dir "$O/gapo" \
  > "$O/train.log" 2>&1
.venv/bin/gapo eval --model embedded --adapter "$O/gapo/adapter" --suite lists --heldin -n 100 --max-new-tokens 16 \
  --seed 0 --no-progress --out "$O/eval"
