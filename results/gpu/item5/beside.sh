#!/usr/bin/env bash
# Issue 35 item 3 beside issue 34's legs: Table 2 greedy at the paper's full sizes (GSM8K 200, MATH 210, HumanEval 164;
# the base model and a GAPO adapter; `gpu_session.py stage benchmarks --decoding greedy`) in the background of a
# session's legs on the same GPU. Item 5's two runs used 29.7 GiB of the H200's 139 and 54% of its time on 2026-12-04
# (results/gpu/item5/h200_2026-12-04/gpu_usage.csv): Table 2's accuracy does not depend on what else runs, so it rides
# along instead of taking a session of its own. `plan --issue 34 --table2 --adapter DIR` lays the calls out:
#
#   bash results/gpu/item5/beside.sh receive DIR   # a call that carries the adapter: copied to /tmp, out of the tree
#   ... && bash results/gpu/item5/beside.sh start && TL=... bash results/gpu/item5/leg.sh   # after the assembly
#   ...; bash results/gpu/item5/beside.sh collect SECONDS   # the session's last call: waits at most SECONDS
#
# `start` runs the stage in a process of its own session (setsid): it outlives the call that started it, while the
# machine stays warm, and reads a snapshot of the working tree taken then. `collect` puts what the issue 35 plan's
# Table 2 call returns into $OUT (benchmarks_greedy.json, benchmarks_greedy/, the samples, the log) and names the
# device; if the stage is still running after SECONDS it returns the log so far and says so (collect again later).
#
# BESIDE_FLAGS, BESIDE_DIR and PY replace the stage's sizes, the folder and the Python for the CPU check in
# tests/test_gpu_session.py (tiny-random, one problem a benchmark).
set -u
PY=${PY:-python3}
B=${BESIDE_DIR:-/tmp/gapo/beside}
. "$(dirname "$0")/env.sh"
case "${1:-}" in
  receive)
    [ -f "${2:-}/adapter_config.json" ] || { echo "beside.sh: no LoRA adapter at ${2:-(none given)}" >&2; exit 2; }
    rm -rf "$B" && mkdir -p "$B" && cp -r "$2" "$B/adapter" && echo "beside.sh: adapter $2 in $B/adapter"
    ;;
  start)
    [ -f "$B/adapter/adapter_config.json" ] || { echo "beside.sh: no adapter in $B; run receive first" >&2; exit 2; }
    [ -e "$B/tree" ] && { echo "beside.sh: already started in $B" >&2; exit 2; }
    mkdir -p "$B/tree" "$B/out"
    # the stage reads gapo/ and data/ for minutes: from a copy, whatever later calls do to the working tree
    tar --exclude=./runs --exclude=./.venv --exclude=./.git --exclude=./.dvc --exclude=./outputs --exclude=./models \
      -cf - . | tar -xf - -C "$B/tree" || exit 1
    read -r -a FLAGS <<< "${BESIDE_FLAGS:-}"
    cd "$B/tree" && PYTHONPATH=$PWD:/tmp/gapo/site setsid nohup bash -c \
      '"$0" tools/gpu_session.py stage benchmarks --adapter "$1/adapter" --decoding greedy --out "$1/out" "${@:2}" \
        > "$1/log" 2>&1; echo $? > "$1/rc"' "$PY" "$B" "${FLAGS[@]}" < /dev/null > /dev/null 2>&1 &
    echo "beside.sh: Table 2 greedy started in $B"
    ;;
  collect)
    [ -e "$B/tree" ] || { echo "beside.sh: nothing started in $B" >&2; exit 2; }
    deadline=$((SECONDS + ${2:-0}))
    while [ ! -f "$B/rc" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 2; done
    if [ -f "$B/rc" ]; then
      cp -r "$B/out/." "$OUT/"
      echo "beside.sh: Table 2 greedy finished with exit status $(cat "$B/rc")"
    else
      echo "beside.sh: Table 2 greedy still running after ${2:-0} s; collect again"
    fi
    tail -c 100000 "$B/log" > "$OUT/benchmarks_greedy.log" 2> /dev/null
    $PY tools/gpu_session.py stamp "$OUT"
    ;;
  *)
    echo "usage: beside.sh receive ADAPTER | start | collect SECONDS" >&2
    exit 2
    ;;
esac
