#!/usr/bin/env bash
# Issue 34: which items the 8-list, 30-visit runs (results/diagnosis/transfer/k8_committed240_sS) never say. Each
# seed's step-240 adapter and the base model sample the 5 scored training lists of each seed (train_sS.jsonl, from
# summary.json's scored_lists; the base model both files at once) as the evaluation asks them, n=200, 16 new tokens,
# seed 0.
#   bash results/diagnosis/transfer/k8_committed240_coverage/run.sh RUNS   (RUNS: the runs/visits folder of the runs)
set -eu
cd "$(dirname "$0")/../../../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
R=$1; D=results/diagnosis/transfer/k8_committed240_coverage; mkdir -p "$R/coverage"
for S in 0 1; do
  .venv/bin/gapo eval --model embedded --adapter "$R/k8_committed240_s$S/run/adapter" --suite lists --no-heldin \
    --lists "$D/train_s$S.jsonl" -n 200 --max-new-tokens 16 --seed 0 --no-progress --out "$R/coverage/adapter_s$S"
done
cat "$D/train_s0.jsonl" "$D/train_s1.jsonl" > "$R/coverage/train_both.jsonl"
.venv/bin/gapo eval --model embedded --suite lists --no-heldin --lists "$R/coverage/train_both.jsonl" -n 200 \
  --max-new-tokens 16 --seed 0 --no-progress --out "$R/coverage/base"
for t in adapter_s0 adapter_s1 base; do
  cp "$R/coverage/$t/eval.json" "$D/$t.json"; gzip -9 -n -c "$R/coverage/$t/samples.jsonl" > "$D/${t}_samples.jsonl.gz"
done
