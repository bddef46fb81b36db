"""Backend speed: a GAPO step through each LoRA backend (`peft`, `unsloth`) with the defaults a user of each gets.

Why: `backend: auto` means PEFT. Unsloth's kernels would be the natural default on CUDA, but under Unsloth GAPOConfig
turns PEFT's static-cache generation off (Unsloth generates with its own), and that generation is what took a GAPO step
at the 7B shape from 2.42 to 1.27 s on an H100 (docs/performance.md). Which is faster is a measurement, not a guess.

How it measures
- Each backend runs `gapo train` (gapo.train.train) in a process of its own, because Unsloth patches transformers,
  peft and trl on import: the two cannot share one. Same model, data (list prompts), reward, G, LoRA and seed; each
  backend keeps GAPOConfig's device defaults (on CUDA: bf16, gradient checkpointing; PEFT: static-cache generation).
- `--model_config` builds a randomly initialised model with that architecture once (speed needs no trained weights)
  and saves it, with the embedded Qwen tokenizer, to `--model_dir`; random weights never sample EOS, so every
  completion is `--max_completion_length` tokens on both backends. `--model` takes a gapo.models name instead.
- The time per step is `step_time` from the run's metrics.jsonl (the whole optimizer step, generation included); the
  figure is the median over the steps after `--warmup`. Each backend's process time (model load, Unsloth's patching
  and compilation included) is reported too, and its stderr kept in `backend_speed.<backend>.log` beside
  `--json_out` (else in the temp folder), so a run cut short still shows where its time went.

    python -m perf.backend_speed --model_config gapo/resources/qwen2.5-0.5b-instruct-config.json --backends peft,unsloth
    python -m perf.backend_speed --model tiny-random --backends peft --steps 2 --warmup 1   # CPU: the harness only

The last line printed is `unsloth_vs_peft=X.XX` (PEFT's median step time over Unsloth's) when both ran.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_random_model(config_path: str, target: Path, seed: int) -> None:
    """A randomly initialised model of `config_path`'s architecture, in bf16, with the embedded tokenizer, in
    `target` (kept: a second run reuses it)."""
    import torch

    from gapo.models import load_tokenizer
    from perf.step_speed import random_model  # imports trl's neighbours: the driver only, never a backend's process

    if (target / "config.json").is_file():
        return
    tokenizer = load_tokenizer("tiny-random")  # the embedded Qwen2.5 tokenizer
    model = random_model(config_path, tokenizer, torch.bfloat16, seed, "cpu")
    staging = target.with_name(target.name + ".tmp")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(target)


def train_flags(args: argparse.Namespace, model: str, backend: str, output_dir: str) -> list[str]:
    """`gapo train`'s flags for one timed run (one prompt, a group of G, per optimizer step; LoRA on every linear
    layer and dropout 0.1, as in the paper)."""
    g, steps = str(args.num_generations), args.warmup + args.steps
    return [
        "--no-params", "--model", model, "--backend", backend, "--output-dir", output_dir,
        "--num-generations", g, "--per-device-train-batch-size", g, "--max-steps", str(steps),
        "--num-prompts", str(steps), "--max-completion-length", str(args.max_completion_length),
        "--lora-r", str(args.lora_r), "--lora-alpha", str(args.lora_alpha), "--lora-dropout", "0.1",
        "--learning-rate", "1e-5", "--save-steps", str(steps + 1), "--seed", str(args.seed),
    ]  # fmt: skip


def run_one(args: argparse.Namespace, backend: str, model: str) -> dict[str, object]:
    """Train in this process through `backend` (called in a fresh process: `--one`); the step times."""
    from gapo.cli import main
    from gapo.io import read_jsonl

    with tempfile.TemporaryDirectory(prefix=f"backend_speed.{backend}.") as out:
        code = main(["train", *train_flags(args, model, backend, out)])
        if code:
            raise SystemExit(f"gapo train through {backend} exited {code}")
        rows = read_jsonl(Path(out) / "metrics.jsonl")
        config = json.loads((Path(out) / "config.json").read_text())
    times = [float(row["step_time"]) for row in rows if "step_time" in row]
    timed = times[args.warmup :]
    return {
        "backend": backend,
        "step_times": times,
        "median_step_s": statistics.median(timed) if timed else None,
        "device": _device_name(),
        "static_cache_generation": config.get("static_cache_generation"),
    }


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="a gapo.models name or directory (no --model_config)")
    parser.add_argument("--model_config", help="a config.json: time a randomly initialised model of its architecture")
    parser.add_argument("--model_dir", default=os.path.join(tempfile.gettempdir(), "gapo-backend-speed-model"))
    parser.add_argument("--backends", default="peft,unsloth", help="comma-separated: peft, unsloth")
    parser.add_argument("--num_generations", type=int, default=32)
    parser.add_argument("--max_completion_length", type=int, default=64)
    parser.add_argument("--lora_r", type=int, default=64)
    parser.add_argument("--lora_alpha", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per backend")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation, caches)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json_out")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one backend in this process (the driver's child)
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or any(b not in ("peft", "unsloth") for b in backends):
        parser.error(f"--backends takes peft and/or unsloth, got {args.backends!r}")
    model = args.model
    if args.model_config:
        model = str(Path(args.model_dir).resolve())
    if args.one:
        print(json.dumps(run_one(args, args.one, model)))
        return 0
    if args.model_config:
        build_random_model(args.model_config, Path(model), args.seed)
    results = {}
    child_argv = list(argv if argv is not None else sys.argv[1:])
    log_dir = Path(args.json_out).resolve().parent if args.json_out else Path(tempfile.gettempdir())
    for backend in backends:
        child = [sys.executable, "-m", "perf.backend_speed", *child_argv, "--one", backend]
        log = log_dir / f"backend_speed.{backend}.log"  # the child's stderr as it runs: where a slow run spends time
        start = time.monotonic()
        with log.open("w") as stderr:
            proc = subprocess.run(child, stdout=subprocess.PIPE, stderr=stderr, text=True)
        wall = time.monotonic() - start
        if proc.returncode:
            lines = log.read_text(errors="replace").strip().splitlines() or ["no output"]
            why = next((line for line in reversed(lines) if line.startswith("gapo: error:")), lines[-1])
            print(f"backend_speed: {backend} failed ({proc.returncode}): {why}", file=sys.stderr)
            return 2
        results[backend] = {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_wall_s": wall}
        r = results[backend]
        print(
            f"{backend:8s} median step {r['median_step_s']:.3f} s over {args.steps} steps on {r['device']} "
            f"({wall:.0f} s for the whole process, {log})",
            flush=True,
        )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    if {"peft", "unsloth"} <= set(results):
        print(f"unsloth_vs_peft={results['peft']['median_step_s'] / results['unsloth']['median_step_s']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
