#!/usr/bin/env bash
# Issue 34 item 5 on a lent GPU: three GAPO runs side by side on one GPU, each scored on its training, held-in and
# unseen lists every 25 steps (n=200, 5 lists a set), stopped by the clock (--time-limit) inside one device call.
# The paper's G=32 and 8 prompts a step, split_format_reward, 512 training lists, the constant schedule item 4 chose
# (10 warmup steps), LoRA as params.yaml's embedded recipe; seeds 0 and 1 at lr 1e-4, and seed 0 at lr 2e-4.
# Staged first by tools/gpu_session.py (prepare --training-only; receive load-01..08 in their own calls).
# Run from the repository root on the GPU machine: TL=400 bash results/gpu/item5/run.sh  (TL: seconds of training)
# As run on 2026-11-27 (H100) two lines differed: each run's hard timeout was TL+120 s, which the one-time GGUF
# conversion (~2 min) made fire before TL (all three runs were killed at steps 115-124, scored up to step 100), and
# `rm -rf $R/*/run` dropped metrics.jsonl (the per-step training metrics were read from the logs instead).
set -u
TL=${TL:-330}
python3 tools/gpu_session.py receive load-09 --payload runs/gpu_payload && python3 tools/gpu_session.py assemble \
  || exit 1
export PYTHONPATH=$PWD:/tmp/gapo/site GAPO_CACHE=/tmp/gapo/cache HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
R=/tmp/item5
mkdir -p $R
nvidia-smi -L > $R/device.txt
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 > $R/gpu_usage.csv &
SMI=$!
COMMON=(--lists 512 --steps 1000 --eval-every 25 -n 200 --score-lists 5 --time-limit "$TL"
  --set num_generations=32 --set per_device_train_batch_size=256 --set lr_scheduler_type=constant_with_warmup
  --set warmup_steps=10)
run() {  # name, extra flags...
  local name=$1; shift
  timeout $((TL + 300)) python3 tools/list_transfer.py "${COMMON[@]}" "$@" --out $R/$name > $R/$name.log 2>&1 &
  PIDS+=($!)
}
PIDS=()
run constant_s0 --seed 0
run constant_s1 --seed 1
run constant_lr2e-4_s0 --seed 0 --set learning_rate=2.0e-4
wait "${PIDS[@]}"
kill $SMI
for d in $R/*/run; do cp $d/metrics.jsonl $d/../ 2>/dev/null; rm -rf $d; done  # keep the training metrics only
tar czf $OUT/item5.tgz -C /tmp item5
ls -la $R $R/*
