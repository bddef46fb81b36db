"""How fast a GAPO step could be on this machine: its linear layers alone, timed at their own sizes (a floor).

Why: issue 19 asks for 260 rollouts a minute on 2 CPU cores and a step 5x faster than stock TRL. Whether that is an
implementation gap or the machine's limit is a question of arithmetic plus one measurement. Every token a step
touches passes through the model's linear layers (q, k, v, o, gate, up, down in each decoder layer, and the LM head
wherever logits are needed), and in float32 these dominate the step's FLOPs. This script times exactly those matrix
products with torch on this machine, at the row counts a real step uses, and adds them up; attention, norms, LoRA,
sampling, the loss, the optimizer and Python are taken as free. No implementation in float32 torch can make a step
faster than that sum, so `60 * rollouts / floor` bounds the rollouts a minute from above.

What a step of GAPOTrainer runs through the linear layers (the shared-prompt paths of gapo.prefix, docs/performance.md):
- generation: the U distinct prompts prefilled once (P prompt tokens in all; the LM head at each prompt's last
  position), then one decoding call per new token: at most S calls (S = the longest completion), C - B tokens in all
  (B rows, C completion tokens: a row's first token comes from the prefill);
- log-prob forward: P + C tokens through the layers once (the prompt shared), the LM head at the C completion tokens;
- backward: the gradient with respect to every frozen layer's input, one product of the same size per forward
  product (no weight gradients: the base is frozen; LoRA's are rank r, taken as free).

The weights are random matrices of the model's shapes in `--dtype` (float32 by default; bfloat16 is what
GAPOConfig's `policy_dtype` picks on a CPU with bf16 units): speed needs no trained values. All 24 layers are distinct,
so that decoding reads all the weights in every call, as the real model does.

    .venv/bin/python -m perf.roofline --log outputs/runs/gapo-qwen2.5-coder-0.5b/metrics.jsonl --num-generations 16
    .venv/bin/python -m perf.roofline --prompt-tokens 86 --rows 16 --completion-tokens 160 --max-length 12 \
        --trl-step 31.04      # perf.step_speed --quick's step: 1 prompt, G=16, its TRL step time

The last lines printed are `floor_s=X`, `ceiling_rollouts_per_min=X` and, with `--trl-step`, `max_speedup_vs_trl=X`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

CONFIG = Path(__file__).resolve().parents[1] / "gapo" / "resources" / "qwen2.5-0.5b-instruct-config.json"


@dataclass(frozen=True)
class StepShape:
    """The token counts of one training step that decide its linear-layer work."""

    prompts: int  # U distinct prompts
    prompt_tokens: int  # P: their tokens, each prompt counted once
    rows: int  # B rollouts
    completion_tokens: int  # C: over all rows
    max_length: int  # S: the longest completion (decoding calls)


def layer_shapes(config: dict) -> list[tuple[int, int]]:
    """(out, in) of each linear layer of one decoder layer (Qwen2/Llama layout: grouped-query attention, SwiGLU MLP)."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    kv = config["num_key_value_heads"] * hidden // config["num_attention_heads"]
    return [
        (hidden, hidden),
        (kv, hidden),
        (kv, hidden),
        (hidden, hidden),
        (inter, hidden),
        (inter, hidden),
        (hidden, inter),
    ]


def passes(shape: StepShape) -> dict[str, list[tuple[str, int, int]]]:
    """The step's linear work as (what, rows per call, calls): `layers` is every decoder layer, `head` the LM head."""
    decode_calls = max(shape.max_length - 1, 0)
    decode_rows = round((shape.completion_tokens - shape.rows) / decode_calls) if decode_calls else 0
    tokens = shape.prompt_tokens + shape.completion_tokens
    return {
        "generation": [
            ("layers", shape.prompt_tokens, 1),
            ("head", shape.prompts, 1),
            ("layers", decode_rows, decode_calls),
            ("head", decode_rows, decode_calls),
        ],
        "log-prob forward": [("layers", tokens, 1), ("head", shape.completion_tokens, 1)],
        "backward": [("layers", tokens, 1), ("head", shape.completion_tokens, 1)],
    }


def step_flops(shape: StepShape, config: dict) -> float:
    """Multiply-adds x 2 of `passes(shape)`: the FLOPs the floor is made of (decoding rounded to whole rows)."""
    per_row = {
        "layers": 2 * config["num_hidden_layers"] * sum(o * i for o, i in layer_shapes(config)),
        "head": 2 * config["vocab_size"] * config["hidden_size"],
    }
    return float(sum(per_row[what] * rows * calls for part in passes(shape).values() for what, rows, calls in part))


class Weights:
    """Random weights of the model's linear layers in `dtype`, every layer its own (so nothing stays in cache)."""

    def __init__(self, config: dict, dtype: torch.dtype = torch.float32, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.layers = [
            [(torch.randn(o, i, generator=g) * 0.02).to(dtype) for o, i in layer_shapes(config)]
            for _ in range(config["num_hidden_layers"])
        ]
        self.head = (torch.randn(config["vocab_size"], config["hidden_size"], generator=g) * 0.02).to(dtype)
        self.dtype = dtype

    @torch.inference_mode()
    def seconds(self, what: str, rows: int, backward: bool = False, repeats: int = 3) -> float:
        """Fastest of `repeats` timings of one pass of `rows` rows through all layers or the head.

        Forward is `x @ W.T` for each W; backward is the input gradient `dy @ W`, the same multiply-adds."""
        if rows == 0:
            return 0.0
        mats = [w for layer in self.layers for w in layer] if what == "layers" else [self.head]
        inputs = {m.shape: torch.randn(rows, m.shape[0] if backward else m.shape[1], dtype=self.dtype) for m in mats}
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for m in mats:
                x = inputs[m.shape]
                _ = x @ m if backward else F.linear(x, m)
            best = min(best, time.perf_counter() - start)
        return best


#: Row counts timed; others are interpolated linearly (a step has hundreds of distinct row counts).
GRID = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


class Timings:
    """`Weights.seconds` on GRID for the layers and the head, forward and backward, read back at any row count."""

    def __init__(self, weights: Weights, grid: tuple[int, ...] = GRID) -> None:
        self.grid = grid
        self.table = {
            (what, backward): [weights.seconds(what, m, backward, repeats=3 if m < 256 else 2) for m in grid]
            for what in ("layers", "head")
            for backward in (False, True)
        }

    def __call__(self, what: str, rows: int, backward: bool) -> float:
        if rows <= 0:
            return 0.0
        if rows > self.grid[-1]:
            raise SystemExit(f"{rows} rows in one pass: more than the {self.grid[-1]} timed")
        ys = self.table[(what, backward)]
        for i in range(1, len(self.grid)):
            if rows <= self.grid[i]:
                m0, m1, y0, y1 = self.grid[i - 1], self.grid[i], ys[i - 1], ys[i]
                return y0 + (y1 - y0) * (rows - m0) / (m1 - m0)
        return ys[0]  # rows == grid[0]


def floor_seconds(shape: StepShape, timings: Timings) -> dict[str, float]:
    """Seconds of each part of `passes(shape)` when only its linear layers cost time."""
    return {
        part: sum(timings(what, rows, part == "backward") * calls for what, rows, calls in items)
        for part, items in passes(shape).items()
    }


def shapes_from_log(path: Path, num_generations: int) -> tuple[list[StepShape], list[float]]:
    """Each logged step's shape and `step_time`, from a GAPO run's metrics.jsonl (TRL's cumulative `num_tokens`
    counts each row's prompt and completion tokens, so the distinct prompts' tokens are its increase minus the
    completion tokens, divided by G)."""
    shapes, times, seen = [], [], 0.0
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if "step_time" not in row or "num_tokens" not in row:
            continue
        rows = int(row["rollouts"])
        completion = round(row["completions/mean_length"] * rows)
        prompt_rows = row["num_tokens"] - seen - completion
        seen = row["num_tokens"]
        shapes.append(
            StepShape(
                prompts=rows // num_generations,
                prompt_tokens=round(prompt_rows / num_generations),
                rows=rows,
                completion_tokens=completion,
                max_length=int(row["completions/max_length"]),
            )
        )
        times.append(float(row["step_time"]))
    if not shapes:
        raise SystemExit(f"{path}: no logged step with step_time, num_tokens and rollouts")
    return shapes, times


def logged_dtype(log: Path) -> str | None:
    """The policy dtype a logged run trained in: `policy_dtype` of the config.json `gapo train` writes beside its
    metrics.jsonl; None when there is none. Why: a floor is only the run's own floor in the run's precision."""
    try:
        return json.loads((log.parent / "config.json").read_text()).get("policy_dtype")
    except (OSError, ValueError, AttributeError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, help="a GAPO run's metrics.jsonl: every step's shape, and its step_time")
    parser.add_argument("--num-generations", type=int, default=16, help="G of the logged run")
    parser.add_argument("--prompts", type=int, default=1)
    parser.add_argument("--prompt-tokens", type=int, help="P, each distinct prompt once (instead of --log)")
    parser.add_argument("--rows", type=int)
    parser.add_argument("--completion-tokens", type=int)
    parser.add_argument("--max-length", type=int)
    parser.add_argument("--trl-step", type=float, help="stock TRL's step seconds at the same shape")
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="the weights' dtype")
    args = parser.parse_args(argv)
    given = [args.prompt_tokens, args.rows, args.completion_tokens, args.max_length]
    if (args.log is None and None in given) or (args.log is not None and any(v is not None for v in given)):
        parser.error("give --log, or all of --prompt-tokens, --rows, --completion-tokens and --max-length")
    if args.log is not None and not args.log.is_file():
        parser.error(f"--log {args.log}: no such file")
    config = json.loads(args.config.read_text())
    if args.log is not None:
        shapes, measured = shapes_from_log(args.log, args.num_generations)
    else:
        shapes = [StepShape(args.prompts, args.prompt_tokens, args.rows, args.completion_tokens, args.max_length)]
        measured = []
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.dtype}, {len(shapes)} step shapes")
    need = max(rows for s in shapes for part in passes(s).values() for _, rows, _ in part)
    if need > GRID[-1]:
        parser.error(f"a pass of {need} rows: more than the {GRID[-1]} this times")
    grid = GRID[: next(i for i, m in enumerate(GRID) if m >= need) + 1]  # time only up to the largest pass
    timings = Timings(Weights(config, getattr(torch, args.dtype)), grid)
    floors = [floor_seconds(s, timings) for s in shapes]
    totals = [sum(f.values()) for f in floors]
    i = totals.index(statistics.median_low(totals))
    shape, parts = shapes[i], floors[i]
    flops = step_flops(shape, config)
    print(f"median step: {shape}")
    for part, seconds in parts.items():
        print(f"  {part}: {seconds:.2f} s")
    floor, rollouts = sum(parts.values()), sum(s.rows for s in shapes) / len(shapes)
    print(f"linear FLOPs {flops / 1e9:.0f} G in {floor:.2f} s: {flops / floor / 1e9:.1f} GFLOP/s")
    if measured:
        total_floor = sum(totals)
        print(
            f"logged: {len(shapes)} steps, step_time sum {sum(measured):.1f} s"
            f" (median {statistics.median(measured):.2f}), {args.dtype} floor sum {total_floor:.1f} s:"
            f" the steps took {sum(measured) / total_floor:.2f}x that floor"
        )
        trained = logged_dtype(args.log)
        if trained is not None and trained != args.dtype:
            print(f"note: the run trained in {trained}, so this is not its own floor (--dtype {trained} is)")
        print(f"measured_rollouts_per_min={60 * sum(s.rows for s in shapes) / sum(measured):.1f}")
        floor = total_floor / len(shapes)
    print(f"floor_s={floor:.4g}")
    print(f"ceiling_rollouts_per_min={60 * rollouts / floor:.1f}")
    if args.trl_step is not None:
        print(f"max_speedup_vs_trl={args.trl_step / floor:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
