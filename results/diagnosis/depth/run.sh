#!/usr/bin/env bash
# Issue 34: breadth against depth at the pipeline's budget. params.yaml's `train` recipe, its 300 steps of G=32, on
# the first K rows of data/train.jsonl, so each of K lists is seen about 300/K times (the pipeline: 300 of the 512
# rows, once each). The adapter is then scored as the uniformity stage scores GAPO: the paper's 10 unseen lists and
# the 10 held-in lists, n=100, 16 new tokens, seed 0.
#   bash results/diagnosis/depth/run.sh OUT K [gapo train flags, e.g. --seed 1]
set -eu
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
O=$1; K=$2; shift 2
rm -rf "$O/gapo" "$O/eval"; mkdir -p "$O"
head -n "$K" data/train.jsonl > "$O/train.jsonl"
.venv/bin/gapo train --dataset "$O/train.jsonl" --save-steps 100 "$@" --output-dir "$O/gapo" > "$O/train.log" 2>&1
.venv/bin/gapo eval --model embedded --adapter "$O/gapo/adapter" --suite lists --heldin -n 100 --max-new-tokens 16 \
  --seed 0 --no-progress --out "$O/eval"
