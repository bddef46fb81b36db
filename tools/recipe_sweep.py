"""A small recipe sweep on the embedded model (issues 14 and 19): train a few GAPO variants, score each the same way.

Every variant starts from the embedded profile's `train` section as the pipeline resolves it (no pre-fill: the model
writes ``<answer>...</answer>`` itself), changes one thing, and trains on the same number of rollouts: `--steps`
steps at the embedded batch, proportionally fewer at a larger one. Each is scored on the paper's unseen lists without
pre-fill (`gapo.repro.experiments.uniformity`): mean JSD from uniform, invalid rate, and the distribution apart from
the format: JSD among valid answers, the top item's share, the share of the list's first item. The base model is
scored once. Writes the numbers and each run's training curves (issue 19's diagnosis: `advantage/*`,
`diversity/freq_spread`, `diversity/first_item_share`) as JSON, a figure, and a markdown table:

    python tools/recipe_sweep.py --steps 30 --n 50         # CPU, 2 cores: about 8 minutes a variant
    python tools/recipe_sweep.py --only base,lr_1e-4       # a subset
    python tools/recipe_sweep.py --only embedded --steps 300 --evals 4   # a learning curve: 4 adapters scored
    python tools/recipe_sweep.py --only base,embedded,split_format,g32_1prompt,4prompts --steps 40 \
        --out results/diagnosis                             # issue 19's diagnosis (docs/uniformity_diagnosis.md)
    python tools/recipe_sweep.py --only base,gpu_h100_recipe --steps 1200 --evals 8 --n 100   # a GPU (7 min, H200)

Why a tool and not a pipeline stage: it chooses the pipeline's recipe; the pipeline then runs the chosen one.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from gapo.checkpoints import checkpoint_step
from gapo.defaults import LORA_TARGET_MODULES
from gapo.io import write_text_atomic
from gapo.repro import profiles
from gapo.repro.experiments import uniformity
from gapo.repro.sampling import make_sampler
from gapo.repro.stages.train_gapo import LOG_COLUMNS
from gapo.train import configs, read_metrics, train

#: Every attention and MLP projection: the paper's LoRA targets (gapo.defaults), which the embedded recipe narrows.
ALL_LINEAR = list(LORA_TARGET_MODULES.value)

#: name -> (what changes, `train` settings (gapo.train.configs) on top of the embedded `train` section).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "committed": ("the embedded recipe as committed (lr 3e-4, LoRA r16 on attention, beta 0)", {}),
    "lr_1e-4": ("learning rate 1e-4", {"learning_rate": 1e-4}),
    "all_linear": (
        "LoRA r16 on every linear layer (attention + MLP)",
        {"lora_target_modules": ALL_LINEAR},
    ),
    "kl_0.04": ("a KL term to the reference, beta 0.04", {"beta": 0.04}),
    # issue 19's hypotheses, each on the embedded recipe of params.yaml, at the same number of rollouts
    "embedded": ("the embedded recipe of params.yaml", {}),
    "paper_reward": ("the paper's single reward (-1 for an invalid answer)", {"split_format_reward": False}),
    "split_format": ("format and frequency normalised apart (split_format_reward)", {"split_format_reward": True}),
    "g32_1prompt": ("G=32, one prompt a step (same rollouts a step)", {"num_generations": 32}),
    "g16_2prompts": ("G=16, two prompts a step (same rollouts a step)", {"num_generations": 16}),
    "g8_4prompts": ("G=8, four prompts a step (same rollouts a step)", {"num_generations": 8}),
    "4prompts": ("4 prompts a step, G=16 (half the steps)", {"num_generations": 16, "per_device_train_batch_size": 64}),
    # issue 34's step-size levers, each on the embedded recipe at the same rollouts (docs/training.md has them all)
    "constant_warmup": (
        "a constant learning rate after a 5% linear warmup (not linear decay to 0)",
        {"lr_scheduler_type": "constant_with_warmup", "warmup_steps": 0.05},
    ),
    "iterations_2": ("two optimizer steps per batch of rollouts (num_iterations 2)", {"num_iterations": 2}),
    "iterations_4": ("four optimizer steps per batch of rollouts (num_iterations 4)", {"num_iterations": 4}),
    "rslora": ("rsLoRA: the adapter scaled by alpha/sqrt(r) = 8 instead of alpha/r = 2", {"use_rslora": True}),
    "format_weight_0.3": (
        "the format reward weighted 0.3 beside the frequency reward's 1",
        {"reward_weights": [0.3, 1.0]},
    ),
    # the H100 recipe of issue 19 (8 prompts, lr 2e-4, LoRA on every linear layer) at what 2 cores can afford
    "4prompts_lr2e-4_all_linear": (
        "4 prompts a step, G=16, lr 2e-4, LoRA r16 on every linear layer",
        {
            "num_generations": 16,
            "per_device_train_batch_size": 64,
            "learning_rate": 2e-4,
            "lora_target_modules": ALL_LINEAR,
        },
    ),
    # issue 19's H100 run at full size, for a GPU (`--steps 1200`: 150 steps of 256 rollouts): the paper's G=32, LoRA
    # r64/alpha 32/dropout 0.1 and reward, 8 prompts a step, lr 2e-4, every linear layer; the CUDA defaults for
    # the prompt forward (gapo.trainer)
    "gpu_h100_recipe": (
        "G=32, 8 prompts a step, lr 2e-4, LoRA r64 on every linear layer, the paper's reward",
        {
            "num_generations": 32,
            "per_device_train_batch_size": 256,
            "learning_rate": 2e-4,
            "lora_r": 64,
            "lora_alpha": 32,
            "lora_dropout": 0.1,
            "lora_target_modules": ALL_LINEAR,
            "split_format_reward": False,
            "shared_prompt_forward": None,
        },
    ),
}

#: Logged per step and kept as curves: the training stage's columns (results/train_gapo.csv) that are metrics.
CURVE_KEYS = tuple(k for k in LOG_COLUMNS if k not in ("policy", "step", "loss", "rollouts", "step_time"))


def checkpoint_steps(steps: int, evals: int) -> int:
    """`save_steps` that gives `evals` evenly spaced adapters over a run of `steps` (the last is the final adapter)."""
    if evals < 1:
        raise ValueError(f"--evals must be at least 1, got {evals}")
    return max(1, -(-steps // evals))


def saved_adapters(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every adapter a run saved: its `checkpoint-N` folders, then `adapter` at the last step."""
    found = []
    for path in run_dir.glob("checkpoint-*"):
        step = checkpoint_step(path)
        if step is not None and (path / "adapter_config.json").is_file():
            found.append((step, path))
    found.sort()
    last = max((s for s, _ in found), default=0)
    if (run_dir / "adapter" / "adapter_config.json").is_file():
        found = [(s, p) for s, p in found if s != last] + [(last, run_dir / "adapter")]
    return found


def scoring_order(adapters: list[tuple[int, Path]]) -> list[tuple[int, Path]]:
    """The final adapter first, then the rest in step order: a sweep stopped by a time limit (a GPU lease, say)
    keeps the end of the curve and its first point, not its middle."""
    return adapters[-1:] + adapters[:-1]


def train_variant(name: str, overrides: dict[str, Any], steps: int, root: Path, evals: int = 1) -> dict[str, Any]:
    """Train one variant from the embedded `train` section; returns its summary and per-step curves. With `evals` > 1
    it keeps `evals` evenly spaced checkpoints, to be scored as a learning curve (issue 19's hypothesis 4)."""
    section = dict(profiles.stage_params("train_gapo", "embedded")["train"])
    batch = section["per_device_train_batch_size"] * section["gradient_accumulation_steps"]
    section.update(overrides)
    # the same rollouts for every variant: fewer steps at a larger batch
    variant_batch = section["per_device_train_batch_size"] * section["gradient_accumulation_steps"]
    steps = max(1, round(steps * batch / variant_batch))
    save_steps = checkpoint_steps(steps, evals)
    section.update(max_steps=steps, save_steps=save_steps, save_total_limit=evals + 1, output_dir=str(root / name))
    started = time.perf_counter()
    summary = train(*configs(section))
    seconds = time.perf_counter() - started
    rows = read_metrics(root / name / "metrics.jsonl")
    curves = {k: [r.get(k) for r in rows] for k in CURVE_KEYS}
    return {
        "train_seconds": round(seconds, 1),
        "final": summary.get("last", {}),
        "curves": curves,
        "settings": section,
        "rollouts_per_step": variant_batch,
    }


def score(adapter: Path | None, n: int, num_lists: int, seed: int) -> dict[str, float]:
    """Mean JSD from uniform and invalid rate on the unseen lists, no pre-fill, the evaluation's own sampling."""
    P = profiles.stage_params("uniformity", "embedded")
    sampling = {k: v for k, v in P["sampling"].items() if k not in ("backend",)}
    sampler = make_sampler(
        "embedded", adapter=str(adapter) if adapter else None, max_new_tokens=P["uniformity"]["max_new_tokens"],
        **sampling,
    )  # fmt: skip
    result = uniformity(sampler, n=n, num_lists=num_lists, seed=seed)
    per_list = result.tables["per_list"]
    scores = {k: round(float(v), 4) for k, v in result.summary.items() if k.startswith("mean_") and "_ci_" not in k}
    limit = 2 / per_list["num_items"] + 0.05  # issue 19's collapse line: top share above 2/L + 0.05
    scores["lists_collapsed"] = int((per_list["top_share"] > limit).sum())
    scores["per_list"] = per_list.set_index("category")[["jsd", "jsd_valid", "top_share", "first_item_share"]].to_dict(
        "index"
    )
    return scores


def write_report(document: dict[str, Any], out: Path) -> None:
    """results JSON, the curves figure and the markdown table (docs/recipe_sweep.md)."""
    write_text_atomic(out / "recipe_sweep.json", json.dumps(document, indent=2) + "\n")
    runs = {k: v for k, v in document["runs"].items() if "curves" in v}
    keys = [k for k in CURVE_KEYS if any(any(v is not None for v in r["curves"].get(k, [])) for r in runs.values())]
    if keys:
        _curves_figure(runs, keys, out / "recipe_sweep.png")
    s = document["settings"]
    lines = [
        "| variant | what changes | mean JSD | invalid | JSD among valid | top share | first-item share "
        f"| lists collapsed | train s ({s['steps']} steps' rollouts) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, run in document["runs"].items():
        ev = run["eval"]
        invalid = ev.get("mean_invalid", ev.get("mean_invalid_rate"))  # the issue-14 sweep's results keep the old key
        lines.append(
            f"| {name} | {run['what']} | {ev['mean_jsd']:.3f} | {invalid:.3f} | "
            f"{ev.get('mean_jsd_valid', float('nan')):.3f} | {ev.get('mean_top_share', float('nan')):.3f} | "
            f"{ev.get('mean_first_item_share', float('nan')):.3f} | {ev.get('lists_collapsed', '-')} | "
            f"{run.get('train_seconds', '-')} |"
        )
    lines += settings_lines(document["runs"])
    curves = {k: v for k, v in document["runs"].items() if len(v.get("curve", [])) > 1}
    if curves:
        lines += [
            "",
            "Learning curves (each saved adapter scored the same way):",
            "",
            "| variant | step | rollouts | mean JSD | invalid | JSD among valid | top share | lists collapsed |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, run in curves.items():
            for point in run["curve"]:
                lines.append(
                    f"| {name} | {point['step']} | {point['rollouts']} | {point['mean_jsd']:.3f} | "
                    f"{point['mean_invalid']:.3f} | {point['mean_jsd_valid']:.3f} | {point['mean_top_share']:.3f} | "
                    f"{point['lists_collapsed']} |"
                )
    write_text_atomic(out / "recipe_sweep.md", "\n".join(lines) + "\n")


#: Run bookkeeping that `train_variant` sets per run, not recipe settings.
BOOKKEEPING = ("output_dir", "save_steps", "save_total_limit")


def settings_lines(runs: dict[str, Any]) -> list[str]:
    """Every trained variant's full `train` settings as markdown (the scheduler, warmup, iterations, LoRA scale and
    reward weights included): what a reader needs to rerun a row, not only what it changed."""
    lines = [
        "",
        "Each variant's full `train` settings (gapo.train.configs resolves them; run bookkeeping left out):",
        "",
    ]
    for name, run in runs.items():
        if "settings" in run:
            kept = {k: v for k, v in sorted(run["settings"].items()) if k not in BOOKKEEPING}
            lines.append(f"- {name}: " + ", ".join(f"`{k}={v}`" for k, v in kept.items()))
    return lines if len(lines) > 3 else []


def _curves_figure(runs: dict[str, Any], keys: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys), figsize=(3.3 * len(keys), 3.4), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        for name, run in runs.items():
            values = [np.nan if v is None else v for v in run["curves"].get(key, [])]
            ax.plot(range(1, len(values) + 1), values, label=name)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--n", type=int, default=50, help="samples per unseen list")
    parser.add_argument("--num-lists", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None, help="comma-separated subset of: base," + ",".join(VARIANTS))
    parser.add_argument("--runs-dir", type=Path, default=Path("outputs/sweep"))
    parser.add_argument("--out", type=Path, default=Path("results/sweep"))
    parser.add_argument(
        "--evals", type=int, default=1, help="score this many evenly spaced checkpoints of each run (a learning curve)"
    )
    args = parser.parse_args(argv)
    chosen = args.only.split(",") if args.only else ["base", *VARIANTS]
    unknown = [c for c in chosen if c != "base" and c not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from base, {', '.join(VARIANTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {"steps": args.steps, "n": args.n, "num_lists": args.num_lists, "seed": args.seed}
    checkpoint_steps(args.steps, args.evals)  # a bad --evals is one line before anything loads
    if args.evals != 1:
        settings["evals"] = args.evals
    document: dict[str, Any] = {"settings": settings, "runs": {}}
    previous = args.out / "recipe_sweep.json"
    if previous.exists() and json.loads(previous.read_text())["settings"] == settings:
        document = json.loads(previous.read_text())  # a rerun with the same settings keeps what it measured
    for name in chosen:
        if name in document["runs"]:
            print(f"{name}: kept from {previous}", flush=True)
            continue
        if name == "base":
            document["runs"]["base"] = {
                "what": "the base model, untrained",
                "eval": score(None, args.n, args.num_lists, args.seed),
            }
            write_report(document, args.out)
        else:
            what, overrides = VARIANTS[name]
            run = train_variant(name, overrides, args.steps, args.runs_dir, args.evals)
            run["what"] = what
            run["curve"] = []
            document["runs"][name] = run
            for step, adapter in scoring_order(saved_adapters(args.runs_dir / name)):
                scores = score(adapter, args.n, args.num_lists, args.seed)
                run["curve"].append({"step": step, "rollouts": step * run["rollouts_per_step"], **scores})
                run["curve"].sort(key=lambda point: point["step"])
                run["eval"] = run["curve"][-1]
                print(f"{name} step {step}: {scores}", flush=True)
                write_report(document, args.out)  # after every curve point: a stopped sweep keeps its numbers
        print(f"{name}: {document['runs'][name]['eval']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
