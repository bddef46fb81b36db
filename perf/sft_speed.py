"""Step time of the Appendix G SFT (`gapo.repro.sft`): each prompt encoded once against once a row.

Why: the SFT's loss sums the NLL of every item of a list, so one prompt becomes L rows that share their prompt tokens.
Encoding every row's prompt made an SFT step cost about as much as a GAPO step on the embedded model, and
`tools/list_transfer.py --sft-steps` pays for its SFT out of GAPO's budget. `gapo.repro.sft.per_row_nll` now encodes
each distinct prompt once (`gapo.prefix.shared_prompt_logps`); the plain forward (`plain_completion_logps`) stays as
its fallback, which `per_row_nll(..., shared=False)` takes on purpose. This measures both on the same batches.

How it measures: the model and LoRA of params.yaml's `sft` section (r, alpha, dropout, targets, learning rate, batch
size; `--batch-size` overrides), batches of the pipeline's list prompts (`make_list_selection_dataset` with the `data`
section's settings) in the order `train_sft` takes them in its first pass over the prompts (later
passes reshuffle there; here they repeat). Each timed step is a whole SFT step (loss, backward, clipping,
AdamW) on the same batch for both paths, the two alternating pair by pair (the first of a pair alternates too), after
`--warmup` untimed pairs. Each path has its own copy of the LoRA weights and optimizer state, so both train as they
would alone. Prints the median step of each, `shared_vs_plain=X.XX` (plain's median over shared's) and the largest
per-row NLL difference between the two paths on the first batch (float rounding: they compute the same loss).

    OMP_NUM_THREADS=2 .venv/bin/python perf/sft_speed.py --model embedded --steps 8 --warmup 1 --out /tmp/sft_speed.json
    .venv/bin/python perf/sft_speed.py --model tiny-random --steps 2 --warmup 1      # the harness only: seconds
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import random
import statistics
import time
from pathlib import Path

import torch

from gapo.config import config_from_cli
from gapo.models import load_model_and_tokenizer
from gapo.repro.sft import SFTConfig, build_item_batch, lora_model, per_row_nll
from gapo.tasks.lists import make_list_selection_dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--steps", type=int, default=8, help="timed steps of each path")
    parser.add_argument("--warmup", type=int, default=1, help="untimed pairs first")
    parser.add_argument("--batch-size", type=int, default=None, help="prompts a step (default: params.yaml's sft)")
    parser.add_argument("--out", default=None, help="JSON with every step time")
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be at least 1 and --warmup at least 0")

    flags = ["--params", args.params, "--model", args.model]
    if args.batch_size is not None:
        flags += ["--batch-size", str(args.batch_size)]
    (config,) = config_from_cli([SFTConfig], flags, "perf/sft_speed.py", "sft", "")
    model, tokenizer = load_model_and_tokenizer(config.model)
    data = make_list_selection_dataset(
        config.num_prompts, config.seed, config.min_items, config.max_items, config.categories, config.response_prefix
    )
    order = list(range(len(data)))
    random.Random(config.seed).shuffle(order)
    pairs = args.warmup + args.steps
    picks = [[order[(i * config.batch_size + j) % len(order)] for j in range(config.batch_size)] for i in range(pairs)]
    batches = [
        build_item_batch(tokenizer, [data[k]["prompt"] for k in pick], [data[k]["items"] for k in pick])
        for pick in picks
    ]

    shared_model = lora_model(model, config)
    plain_model = copy.deepcopy(shared_model)
    paths = {
        "shared": (shared_model, per_row_nll),
        "plain": (plain_model, functools.partial(per_row_nll, shared=False)),
    }
    optimizers = {
        name: torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=config.learning_rate)
        for name, (m, _) in paths.items()
    }
    with torch.no_grad():
        first = {name: nll(m, batches[0]) for name, (m, nll) in paths.items()}
    nll_diff = float((first["shared"] - first["plain"]).abs().max())

    def step(name: str, batch) -> float:  # noqa: ANN001
        m, nll = paths[name]
        start = time.perf_counter()
        loss = nll(m, batch).sum() / batch.num_prompts
        optimizers[name].zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in m.parameters() if p.requires_grad], config.max_grad_norm)
        optimizers[name].step()
        return time.perf_counter() - start

    times: dict[str, list[float]] = {"shared": [], "plain": []}
    for i, batch in enumerate(batches):
        for name in ("shared", "plain") if i % 2 == 0 else ("plain", "shared"):
            seconds = step(name, batch)
            if i >= args.warmup:
                times[name].append(seconds)
    median = {name: statistics.median(t) for name, t in times.items()}
    rows = [int(b.input_ids.size(0)) for b in batches]
    print(f"model {config.model}, {config.batch_size} prompt(s) a step, {statistics.mean(rows):.1f} rows a step")
    for name in ("shared", "plain"):
        print(f"{name:>7}: median step {median[name]:.3f} s over {len(times[name])} steps")
    print(f"largest per-row NLL difference (first batch): {nll_diff:.2e} nats")
    ratio = median["plain"] / median["shared"]
    print(f"shared_vs_plain={ratio:.2f}")
    if args.out:
        report = {
            "model": config.model,
            "batch_size": config.batch_size,
            "threads": torch.get_num_threads(),
            "rows": rows,
            "times": times,
            "median": median,
            "shared_vs_plain": ratio,
            "nll_max_abs_diff": nll_diff,
        }
        Path(args.out).write_text(json.dumps(report, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
