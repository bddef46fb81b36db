#!/bin/bash
# The committed pipeline's train_gapo run (params.yaml `train` at 300 steps, data/train.jsonl), continued to 512
# steps: every row of the data once. warmup_steps 15 is the pipeline's 5% of 300, so steps 1-300 repeat its run
# (bit for bit on 2 CPU cores: loss and group JSD equal the pipeline's results/train_gapo.csv at every step).
# Each adapter is then scored as the uniformity stage scores GAPO: the 10 unseen and 10 held-in lists, n=100.
# Usage: bash results/diagnosis/pipe512/run.sh DIR   (DIR from the repository root; 2026-11-28, 2 cores: about 55
# minutes of training and 4 minutes a scoring)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
out=${1:?usage: run.sh DIR}
.venv/bin/gapo train --dataset data/train.jsonl --max_steps 512 --warmup_steps 15 --save_steps 100 --save_total_limit 10 \
    --output_dir "$out/run"
for adapter in "$out/run/checkpoint-300" "$out/run/checkpoint-400" "$out/run/adapter"; do
  .venv/bin/gapo eval --model embedded --adapter "$adapter" --suite lists --heldin -n 100 --max-new-tokens 16 \
      --out "$out/eval_$(basename "$adapter")"
done
