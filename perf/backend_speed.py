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
  figure is the median over the steps after `--warmup`, with rollouts per second (G completions per median step),
  peak GPU memory (`torch.cuda.max_memory_allocated`; None on CPU) and the reward of every step (equal results are
  part of the comparison). Each backend's process time (model load, Unsloth's patching and compilation included) is
  reported too.
- Where a process spends its time is in its log, `backend_speed.<backend>.log` beside `--json_out` (else in the temp
  folder), written as it runs: a timestamped phase marker (`[backend_speed HH:MM:SS +S.Ss] phase`, seconds since the
  driver started the process) at the process start, imports done (the backend activated: Unsloth patches trl here),
  model load start and end, trainer built, each step's start and end, and training done. Why: on an H200 Unsloth's
  process did not finish in a 420 s call and nobody could tell whether it hung, compiled or was slow.
- `--timeout S` stops a backend's process after S seconds: every thread's stack goes into its log first
  (faulthandler, SIGUSR1), then its process group is killed, and the run goes on with the next backend; the result
  names the last phase reached. A failed or stopped backend makes the exit status 2, after every backend has run.
  Stopped itself (SIGTERM: an outer `timeout`), the driver does the same for the backend in hand and writes
  `--json_out` before it exits.

    python -m perf.backend_speed --model_config gapo/resources/qwen2.5-0.5b-instruct-config.json --backends peft,unsloth
    python -m perf.backend_speed --model embedded --max_completion_length 16 --steps 18 --timeout 270   # issue 35
    python -m perf.backend_speed --model tiny-random --backends peft --steps 2 --warmup 1   # CPU: the harness only

The last line printed is `unsloth_vs_peft=X.XX` (PEFT's median step time over Unsloth's) when both finished.
"""

from __future__ import annotations

import argparse
import faulthandler
import functools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: The driver's wall-clock time when it started a backend's process: the phase markers count from it.
T0_ENV = "BACKEND_SPEED_T0"
_START = time.time()  # this process's start, where no driver set T0_ENV
#: A marker, anywhere in a line (a progress bar redrawn with a carriage return may precede it).
PHASE = re.compile(r"\[backend_speed \d\d:\d\d:\d\d \+(?P<t>[\d.]+)s\] (?P<phase>.+)$")


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


# --------------------------------------------------------------------------------------------------------------------
# A backend's process (`--one`): phase markers in its log, one timed `gapo train`
# --------------------------------------------------------------------------------------------------------------------


def phase(what: str) -> None:
    """One timestamped marker on stderr (the backend's log), flushed at once: a killed process keeps its last."""
    t = time.time() - float(os.environ.get(T0_ENV) or _START)
    print(f"[backend_speed {time.strftime('%H:%M:%S')} +{t:.1f}s] {what}", file=sys.stderr, flush=True)


def _mark_model_load() -> None:
    """Markers around `gapo.backends.load_policy` (the weights, and Unsloth's LoRA), which `gapo.train.train` calls
    through its module: wrapped here, in this process only, so the log tells loading from building the trainer."""
    from gapo import backends

    load = backends.load_policy

    @functools.wraps(load)
    def marked(*args: object, **kwargs: object) -> object:
        phase("model load start")
        loaded = load(*args, **kwargs)
        phase("model loaded")
        return loaded

    backends.load_policy = marked


def phase_callback() -> object:
    """A TrainerCallback marking the trainer built, each optimizer step's start and end, and training done (made
    after the backend is active: Unsloth must patch transformers before it is imported)."""
    from transformers import TrainerCallback

    class PhaseMarkers(TrainerCallback):
        def on_init_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            phase("trainer built")

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            self.started = time.monotonic()
            phase(f"step {state.global_step + 1} start")

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            phase(f"step {state.global_step} end ({time.monotonic() - self.started:.3f} s)")

        def on_train_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            phase("training done")

    return PhaseMarkers()


def run_one(args: argparse.Namespace, backend: str, model: str) -> dict[str, object]:
    """Train in this process through `backend` (called in a fresh process: `--one`); the step times, rewards, peak GPU
    memory. A refused setting is `gapo train`'s one line (`gapo: error: ...`) and exit status 1."""
    import logging

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the driver's timeout: every stack into the log
    phase(f"process start ({backend})")
    from gapo import train as gapo_train
    from gapo.cli import USER_ERRORS
    from gapo.io import read_jsonl
    from gapo.models import ModelLoadError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix=f"backend_speed.{backend}.") as out:
        try:
            script, train_args = gapo_train.parse_args(train_flags(args, model, backend, out))
            phase("imports done (backend active, trl and gapo.trainer imported)")
            _mark_model_load()
            gapo_train.train(script, train_args, callbacks=[phase_callback()])
        except (*USER_ERRORS, ModelLoadError) as err:
            message = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
            print(f"gapo: error: {message.splitlines()[0] if message else type(err).__name__}", file=sys.stderr)
            raise SystemExit(f"gapo train through {backend} exited 2") from None
        phase("adapter saved")
        rows = read_jsonl(Path(out) / "metrics.jsonl")
        config = json.loads((Path(out) / "config.json").read_text())
    times = [float(row["step_time"]) for row in rows if "step_time" in row]
    timed = times[args.warmup :]
    median = statistics.median(timed) if timed else None
    return {
        "backend": backend,
        "step_times": times,
        "median_step_s": median,
        "rollouts_per_s": args.num_generations / median if median else None,  # one prompt's G completions a step
        "peak_gpu_memory_gib": _peak_memory_gib(),
        "rewards": [row["reward"] for row in rows if "reward" in row],
        "device": _device_name(),
        "static_cache_generation": config.get("static_cache_generation"),
    }


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def _peak_memory_gib() -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None


# --------------------------------------------------------------------------------------------------------------------
# The driver: one process per backend, each under its timeout
# --------------------------------------------------------------------------------------------------------------------


def phases(log: Path) -> list[tuple[float, str]]:
    """The (seconds since start, phase) markers of a backend's log, in order."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    return [(float(m["t"]), m["phase"]) for m in map(PHASE.search, text.splitlines()) if m]


def _stop(proc: subprocess.Popen) -> None:
    """Every thread's stack into the log (the child's faulthandler), then kill its process group."""
    try:
        proc.send_signal(signal.SIGUSR1)
        proc.wait(timeout=3)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own group: compile workers go too
    except ProcessLookupError:
        pass
    proc.wait()


def run_backend(child: list[str], log: Path, timeout: float | None) -> tuple[int | None, str, float]:
    """Run one backend's process with its stderr in `log`: (exit status, None when stopped at `timeout`; stdout;
    seconds). Its own process group (not a session: the device kills what a command leaves) goes on any exit."""
    start = time.monotonic()
    env = {**os.environ, T0_ENV: repr(time.time())}
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    with log.open("w") as stderr:
        proc = subprocess.Popen(child, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, **group)
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            return None, "", time.monotonic() - start
        finally:
            if proc.poll() is None:  # the driver itself stopped (SIGTERM from `timeout`, Ctrl-C)
                _stop(proc)
    return proc.returncode, stdout, time.monotonic() - start


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # run `finally`: the backend's process group is killed, not orphaned


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
    parser.add_argument("--timeout", type=float, help="seconds per backend's process; then its phase is reported")
    parser.add_argument("--json_out")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one backend in this process (the driver's child)
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or any(b not in ("peft", "unsloth") for b in backends):
        parser.error(f"--backends takes peft and/or unsloth, got {args.backends!r}")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout}")
    model = args.model
    if args.model_config:
        model = str(Path(args.model_dir).resolve())
    if args.one:
        print(json.dumps(run_one(args, args.one, model)))
        return 0
    signal.signal(signal.SIGTERM, _terminate)
    if args.model_config:
        build_random_model(args.model_config, Path(model), args.seed)
    results: dict[str, dict[str, object]] = {}
    child_argv = list(argv if argv is not None else sys.argv[1:])
    log_dir = Path(args.json_out).resolve().parent if args.json_out else Path(tempfile.gettempdir())
    log_dir.mkdir(parents=True, exist_ok=True)
    failed = False
    for backend in backends:
        child = [sys.executable, "-m", "perf.backend_speed", *child_argv, "--one", backend]
        log = log_dir / f"backend_speed.{backend}.log"  # the child's stderr as it runs: where a slow run spends time
        try:
            code, stdout, wall = run_backend(child, log, args.timeout)
        except SystemExit:  # the driver was stopped (an outer `timeout`): keep the phase this backend reached
            marks = phases(log)
            results[backend] = {"backend": backend, "stopped": True, "phases": marks}
            results[backend]["phase"] = marks[-1][1] if marks else "not started"
            _write_json(args, results)
            raise
        marks = phases(log)
        reached = marks[-1] if marks else (0.0, "not started")
        if code is None:
            failed = True
            results[backend] = {"backend": backend, "timed_out": True, "phase": reached[1], "phases": marks}
            print(
                f"backend_speed: {backend} stopped at its {args.timeout:.0f} s timeout in phase "
                f"'{reached[1]}' (+{reached[0]:.1f} s); stacks in {log}",
                file=sys.stderr,
                flush=True,
            )
        elif code:
            failed = True
            lines = log.read_text(errors="replace").strip().splitlines() or ["no output"]
            why = next((line for line in reversed(lines) if line.startswith("gapo: error:")), lines[-1])
            results[backend] = {"backend": backend, "failed": code, "error": why, "phase": reached[1], "phases": marks}
            print(f"backend_speed: {backend} failed ({code}): {why}", file=sys.stderr, flush=True)
        else:
            results[backend] = {**json.loads(stdout.strip().splitlines()[-1]), "phases": marks}
            r = results[backend]
            print(
                f"{backend:8s} median step {r['median_step_s']:.3f} s over {args.steps} steps on {r['device']}, "
                f"{r['rollouts_per_s']:.1f} rollouts/s, peak GPU memory {_gib(r['peak_gpu_memory_gib'])} "
                f"({wall:.0f} s for the whole process, {log})",
                flush=True,
            )
        results[backend]["process_wall_s"] = wall
        _write_json(args, results)  # after every backend: a call stopped later keeps what finished
    done = [b for b in ("peft", "unsloth") if b in results and results[b].get("median_step_s")]
    if len(done) == 2:
        print(f"unsloth_vs_peft={results['peft']['median_step_s'] / results['unsloth']['median_step_s']:.2f}")
    return 2 if failed else 0


def _write_json(args: argparse.Namespace, results: dict[str, dict[str, object]]) -> None:
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))


def _gib(value: object) -> str:
    return "n/a (no CUDA)" if value is None else f"{value:.2f} GiB"


if __name__ == "__main__":
    raise SystemExit(main())
