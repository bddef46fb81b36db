#!/usr/bin/env bash
# Issue 34's goal "one list stays learned": params.yaml's `train` recipe on 64 copies of the planets evaluation prompt
# (asked as `gapo eval` asks it), 60 steps of G=32, then the base model and the adapter on planets, n=200.
#   bash results/diagnosis/planets/run.sh runs/planets                                          # params.yaml's schedule
#   bash results/diagnosis/planets/run.sh runs/planets_linear --lr-scheduler-type linear --warmup-steps 0
#   add --seed 1 for the second seed (2026-11-27, 2 cores: results/diagnosis/planets/{constant,linear,constant_format0.3}_s{0,1}/eval.json;
#   about 3.5 min to train, 40 s to score)
set -eu
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
O=$1; shift
rm -rf "$O/gapo" "$O/eval"; mkdir -p "$O"
.venv/bin/python -c "
import yaml
from gapo.io import write_jsonl_atomic, write_text_atomic
from gapo.repro import prompts as ep
from gapo.repro.first_try import training_rows
write_jsonl_atomic('$O/train.jsonl', training_rows(('planets',), 64))
write_text_atomic('$O/lists.yaml', yaml.safe_dump({'planets': list(ep.UNIFORMITY_LISTS['planets'])}))"
.venv/bin/gapo train --model embedded --dataset "$O/train.jsonl" --max-steps 60 --save-steps 60 "$@" \
  --output-dir "$O/gapo" > "$O/train.log" 2>&1
.venv/bin/gapo eval --model embedded --compare "embedded:$O/gapo/adapter" --suite lists --lists "$O/lists.yaml" -n 200 \
  --no-heldin --no-progress --out "$O/eval"
