#!/usr/bin/env bash
# Issue 34: each item's exact probability as the answer (tools/item_probs.py), for the base model and the step-120
# adapters of the 8-list runs results/diagnosis/transfer/k8_asked120_sS (their 8 training lists, 5 held-in, 5 unseen);
# then the base model on the four English training lists of those runs in each of their 8 rotations (rotations.jsonl,
# rebuilt here from the coverage run's lists): how an item's probability moves with its place in the list; then the
# step-120 adapters of the --shuffle-items runs (results/diagnosis/transfer/k8_shuffled120_sS: the same lists, seeds
# and base model, so --no-base); then those of the entropy-bonus runs (k8_ent0.05_sS, k8_ent0.01_s0; --no-base) and of
# the runs whose rollouts were sampled at temperature 1.5 (k8_temp1.5_sS; scored at 1, as the evaluation samples),
# and of the runs with LoRA dropout 0.1 (k8_drop0.1_sS).
#   bash results/diagnosis/item_probs/run.sh RUNS   (RUNS: the runs/visits folder of k8_asked120_sS, k8_shuffled120_sS,
#   k8_ent0.05_sS, k8_ent0.01_s0, k8_temp1.5_sS and k8_drop0.1_sS)
set -eu
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
R=$1; D=results/diagnosis/item_probs; O=runs/item_probs
for S in 0 1; do
  .venv/bin/python tools/item_probs.py --run "$R/k8_asked120_s$S" --out "$O/k8_asked120_s$S"
done
.venv/bin/python - <<'PY' > "$O/rotations.jsonl"
import json
for seed in (0, 1):
    for line in open(f"results/diagnosis/transfer/k8_committed240_coverage/train_s{seed}.jsonl"):
        row = json.loads(line)
        if row["name"].endswith(":English"):
            items = row["items"]
            for r in range(len(items)):
                print(json.dumps({"name": f"{row['name']} rot{r}", "items": items[r:] + items[:r]}))
PY
cmp "$O/rotations.jsonl" "$D/rotations.jsonl"
.venv/bin/python tools/item_probs.py --lists "$D/rotations.jsonl" --out "$O/rotations_base"
LATER="k8_shuffled120_s0 k8_shuffled120_s1 k8_ent0.05_s0 k8_ent0.05_s1 k8_ent0.01_s0 k8_temp1.5_s0 k8_temp1.5_s1 k8_drop0.1_s0 k8_drop0.1_s1"
# (the base model is k8_asked120's)
for t in $LATER; do
  .venv/bin/python tools/item_probs.py --run "$R/$t" --no-base --out "$O/$t"
done
for t in k8_asked120_s0 k8_asked120_s1 rotations_base $LATER; do
  mkdir -p "$D/$t"; cp "$O/$t/items.csv" "$O/$t/lists.csv" "$O/$t/summary.json" "$D/$t/"
done
