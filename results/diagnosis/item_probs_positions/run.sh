#!/usr/bin/env bash
# Issue 34: where in a list the pipeline's models answer, apart from which item (tools/item_probs.py --rotations).
# The uniformity stage's 10 held-in and 10 unseen lists, each asked in rotations 0, 1, 4 and 5 of its items (every
# item in four places, every place holding four items of a list: the places linked, so `position_fit` separates a
# place's factor from an item's), for the base model and the committed GAPO adapter, then the committed SFT's adapter
# (the base model is the first run's). Rotation 0 is the order the stage asks; its rows equal
# results/diagnosis/item_probs_pipeline/*_gapo/items.csv. About 45 and 21 minutes on 2 cores. The tool writes
# places.csv (`place_jsd`) itself since 1046131; the committed runs predate it, so their places.csv are `place_jsd`
# on their items.csv and positions.csv (what the tool computes in memory, to the CSVs' 6 digits).
#   bash results/diagnosis/item_probs_positions/run.sh
set -eu
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
D=results/diagnosis/item_probs_positions; O=runs/item_probs_positions
.venv/bin/python tools/item_probs.py --suite heldin unseen --rotations 0,1,4,5 \
    --adapter models/gapo/qwen2.5-coder-0.5b --out "$O/gapo"
.venv/bin/python tools/item_probs.py --suite heldin unseen --rotations 0,1,4,5 --adapter models/sft --no-base \
    --out "$O/sft"
for t in gapo sft; do
  mkdir -p "$D/$t"
  for f in items.csv lists.csv positions.csv places.csv summary.json; do cp "$O/$t/$f" "$D/$t/"; done
done
