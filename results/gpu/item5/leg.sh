#!/usr/bin/env bash
# Issue 34 item 5, one leg a GPU session: two GAPO runs side by side on one GPU, the recipe item 4 chose (the constant
# schedule after 10 warmup steps, the format reward at 0.3 beside the frequency reward at 1; seeds 0 and 1), at the
# paper's G=32 and 8 prompts a step on 512 training lists, each scored on its training, held-in and unseen lists every
# 25 steps (n=200, 5 lists a set), trained for TL seconds (--time-limit), then packed for the next leg.
#
# `python tools/gpu_session.py plan --issue 34` lays out a session: the training payload's loads (`prepare
# --training-only`) and, when an earlier session returned one, the state in runs/item5_state (`receive-state` calls:
# into /tmp/gapo/item5_state), then `TL=290 bash results/gpu/item5/leg.sh` and a warm leg; `collect FILES_AT` puts each
# returned state in runs/item5_state again. On a bare machine a leg unpacks the staged state, if any, and resumes the
# runs from it (`list_transfer.py --resume`: the newest checkpoint, optimizer included, the curve up to it, the leg
# logged in summary.json), or starts them; on a warm machine its /tmp/item5 is newer than any staged state and is
# resumed as it is. A finished run is left as it is.
#
# Returns in $OUT: state/ (the runs as parts of at most 16 MiB and state.json: checkpoints without tokenizer files,
# curve.csv, summary.json, curve.png, logs) and device.txt. Read the curves here with
#   python tools/gpu_session.py unpack-state runs/item5_state --into runs    # -> runs/item5/<run>/curve.csv
#
# LEG_FLAGS, LEG_SEEDS, STATE and PY replace the recipe, the seeds, the carried state and the Python for the CPU check
# in tests/test_gpu_session.py (tiny-random, two short legs).
set -u
TL=${TL:-290}
PY=${PY:-python3}
STATE=${STATE:-/tmp/gapo/item5_state}
SEEDS=${LEG_SEEDS:-0 1}
. "$(dirname "$0")/env.sh"
R=${ITEM5_DIR:-/tmp/item5}
read -r -a FLAGS <<< "${LEG_FLAGS:---lists 512 --steps 1000 --eval-every 25 -n 200 --score-lists 5 \
--set num_generations=32 --set per_device_train_batch_size=256 --set lr_scheduler_type=constant_with_warmup \
--set warmup_steps=10 --set reward_weights=[0.3,1.0]}"
# a bare machine only: on a warm one, $R holds the runs past the staged state
if [ ! -d "$R" ] && [ -f "$STATE/state.json" ]; then
  $PY tools/gpu_session.py unpack-state "$STATE" --into "$(dirname "$R")" || exit 1
fi
mkdir -p "$R"
SMI=
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 >> "$R/gpu_usage.csv" &
  SMI=$!
fi
PIDS=()
for seed in $SEEDS; do
  name=format0.3_s$seed
  if grep -q '"finished": true' "$R/$name/summary.json" 2> /dev/null; then continue; fi
  RESUME=()
  [ -f "$R/$name/summary.json" ] && RESUME=(--resume)
  # a hard stop past the time limit: the GGUF's conversion and the last scoring come on top of TL
  timeout $((${TL%.*} + 240)) $PY tools/list_transfer.py "${FLAGS[@]}" --time-limit "$TL" --seed "$seed" \
    "${RESUME[@]}" --out "$R/$name" >> "$R/$name.log" 2>&1 &
  PIDS+=($!)
done
[ ${#PIDS[@]} -gt 0 ] && wait "${PIDS[@]}"
[ -n "$SMI" ] && kill "$SMI"
$PY tools/gpu_session.py pack-state "$R" --out "$OUT/state" && $PY tools/gpu_session.py stamp "$OUT"
for f in "$R"/*/summary.json; do
  [ -f "$f" ] && $PY -c "import json,sys; s=json.load(open(sys.argv[1])); print(sys.argv[1], s.get('steps_run'), s.get('finished'))" "$f"
done
