#!/usr/bin/env bash
# Issue 34: can the embedded model learn the pipeline's held-in lists at all when it trains on them? A ceiling for the
# held-in goal (JSD <= 0.10 on gapo.repro.prompts.HELDIN_LISTS), not a recipe: these lists are held out everywhere else.
# params.yaml's `train` recipe on the named held-in lists (asked as `gapo eval` asks them; rows repeated to >= 64),
# STEPS steps of G=32, then the adapter (and the base model, with --base) scored on those lists with the pipeline's
# settings (16 new tokens, seed 0) at n=N.
#   bash results/diagnosis/oracle/run.sh OUT STEPS N "Countries 1" [--base] [gapo train flags, e.g. --seed 1]
#   bash results/diagnosis/oracle/run.sh OUT 150 100 all             # the 10 lists, scored as the pipeline scores them
set -eu
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
O=$1; STEPS=$2; N=$3; NAMES=$4; shift 4
BASE=0; if [ "${1:-}" = "--base" ]; then BASE=1; shift; fi
rm -rf "$O/gapo" "$O/eval"; mkdir -p "$O"
.venv/bin/python - "$O" "$NAMES" <<'PY'
import sys

import yaml

from gapo.io import write_jsonl_atomic, write_text_atomic
from gapo.repro import prompts as ep
from gapo.repro.first_try import training_rows

out, names = sys.argv[1], sys.argv[2]
chosen = list(ep.HELDIN_LISTS) if names == "all" else [n.strip() for n in names.split(",")]
unknown = [n for n in chosen if n not in ep.HELDIN_LISTS]
if unknown:
    sys.exit(f"run.sh: not a held-in list: {', '.join(unknown)} (one of {', '.join(ep.HELDIN_LISTS)})")
rows = training_rows(chosen, 1, ep.HELDIN_LISTS) * -(-64 // len(chosen))  # each list once a round, to >= 64 rows
write_jsonl_atomic(f"{out}/train.jsonl", rows)
write_text_atomic(f"{out}/lists.yaml", yaml.safe_dump({n: list(ep.HELDIN_LISTS[n]) for n in chosen}, sort_keys=False))
PY
.venv/bin/gapo train --model embedded --dataset "$O/train.jsonl" --max-steps "$STEPS" --save-steps "$STEPS" "$@" \
  --output-dir "$O/gapo" > "$O/train.log" 2>&1
COMPARE=(); MODEL=("--model" "embedded" "--adapter" "$O/gapo/adapter")
if [ "$BASE" = 1 ]; then COMPARE=("--compare" "embedded:$O/gapo/adapter"); MODEL=("--model" "embedded"); fi
.venv/bin/gapo eval "${MODEL[@]}" "${COMPARE[@]}" --suite lists --lists "$O/lists.yaml" -n "$N" --no-heldin \
  --max-new-tokens 16 --seed 0 --no-progress --out "$O/eval"
