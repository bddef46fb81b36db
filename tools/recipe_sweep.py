"""A small recipe sweep on the embedded model (issue 14 item 1): train a few GAPO variants, score each the same way.

Every variant starts from the embedded profile's `train` section as the pipeline resolves it (no pre-fill: the model
writes ``<answer>...</answer>`` itself), changes one thing, trains `--steps` steps, and is scored on the paper's
unseen lists without pre-fill (`gapo.repro.experiments.uniformity`: mean JSD from uniform, invalid rate). The base
model is scored once. Writes the numbers and each run's training curves as JSON, a figure, and a markdown table:

    python tools/recipe_sweep.py --steps 30 --n 50         # CPU, 2 cores: about 8 minutes a variant
    python tools/recipe_sweep.py --only base,lr_1e-4       # a subset

Why a tool and not a pipeline stage: it chooses the pipeline's recipe; the pipeline then runs the chosen one.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

#: name -> (what changes, TrainConfig overrides on top of the embedded `train` section).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "committed": ("the embedded recipe as committed (lr 3e-4, LoRA r16 on attention, beta 0)", {}),
    "lr_1e-4": ("learning rate 1e-4", {"learning_rate": 1e-4}),
    "all_linear": (
        "LoRA r16 on every linear layer (attention + MLP)",
        {"lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]},
    ),
    "kl_0.04": ("a KL term to the reference, beta 0.04", {"beta": 0.04}),
}


def train_variant(name: str, overrides: dict[str, Any], steps: int, root: Path) -> dict[str, Any]:
    """Train one variant from the embedded `train` section; returns its summary and per-step curves."""
    from gapo.repro import pipeline
    from gapo.train import TrainConfig, read_metrics, train

    section = dict(pipeline.stage_params("train_gapo", "embedded")["train"])
    section.update(overrides, max_steps=steps, save_steps=steps, output_dir=str(root / name))
    started = time.perf_counter()
    summary = train(TrainConfig(**section))
    seconds = time.perf_counter() - started
    keys = ("reward", "diversity/valid_fraction", "diversity/group_jsd", "train/frac_zero_std_groups")
    rows = read_metrics(root / name / "metrics.jsonl")
    curves = {k: [r.get(k) for r in rows] for k in keys}
    return {
        "train_seconds": round(seconds, 1),
        "final": summary.get("last", {}),
        "curves": curves,
        "settings": section,
    }


def score(adapter: Path | None, n: int, num_lists: int, seed: int) -> dict[str, float]:
    """Mean JSD from uniform and invalid rate on the unseen lists, no pre-fill, the evaluation's own sampling."""
    from gapo.repro import pipeline
    from gapo.repro.experiments import uniformity
    from gapo.sampling import make_sampler

    P = pipeline.stage_params("uniformity", "embedded")
    sampling = {k: v for k, v in P["sampling"].items() if k not in ("backend",)}
    sampler = make_sampler(
        "embedded", adapter=str(adapter) if adapter else None, max_new_tokens=P["uniformity"]["max_new_tokens"],
        **sampling,
    )  # fmt: skip
    result = uniformity(sampler, n=n, num_lists=num_lists, seed=seed)
    keys = {"mean_jsd": "mean_jsd", "mean_invalid_rate": "mean_invalid", "mean_coverage": "mean_coverage"}
    return {k: round(float(result.summary[v]), 4) for k, v in keys.items()}  # the sweep's results keep their keys


def write_report(document: dict[str, Any], out: Path) -> None:
    """results JSON, the curves figure and the markdown table (docs/recipe_sweep.md)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gapo.io import write_text_atomic

    write_text_atomic(out / "recipe_sweep.json", json.dumps(document, indent=2) + "\n")
    runs = {k: v for k, v in document["runs"].items() if "curves" in v}
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, key in zip(axes, ("reward", "diversity/group_jsd", "train/frac_zero_std_groups"), strict=True):
        for name, run in runs.items():
            ax.plot(range(1, len(run["curves"][key]) + 1), run["curves"][key], label=name)
        ax.set_title(key)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "recipe_sweep.png", dpi=120)
    plt.close(fig)
    s = document["settings"]
    lines = [
        f"| variant | what changes | mean JSD (unseen lists, no pre-fill) | invalid | train s ({s['steps']} steps) |",
        "|---|---|---|---|---|",
    ]
    for name, run in document["runs"].items():
        ev = run["eval"]
        lines.append(
            f"| {name} | {run['what']} | {ev['mean_jsd']:.3f} | {ev['mean_invalid_rate']:.3f} | "
            f"{run.get('train_seconds', '-')} |"
        )
    write_text_atomic(out / "recipe_sweep.md", "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--n", type=int, default=50, help="samples per unseen list")
    parser.add_argument("--num-lists", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None, help="comma-separated subset of: base," + ",".join(VARIANTS))
    parser.add_argument("--runs-dir", type=Path, default=Path("outputs/sweep"))
    parser.add_argument("--out", type=Path, default=Path("results/sweep"))
    args = parser.parse_args(argv)
    chosen = args.only.split(",") if args.only else ["base", *VARIANTS]
    unknown = [c for c in chosen if c != "base" and c not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from base, {', '.join(VARIANTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {
        "settings": {"steps": args.steps, "n": args.n, "num_lists": args.num_lists, "seed": args.seed},
        "runs": {},
    }
    for name in chosen:
        if name == "base":
            document["runs"]["base"] = {
                "what": "the base model, untrained",
                "eval": score(None, args.n, args.num_lists, args.seed),
            }
        else:
            what, overrides = VARIANTS[name]
            run = train_variant(name, overrides, args.steps, args.runs_dir)
            run["what"] = what
            run["eval"] = score(args.runs_dir / name / "adapter", args.n, args.num_lists, args.seed)
            document["runs"][name] = run
        print(f"{name}: {document['runs'][name]['eval']}", flush=True)
        write_report(document, args.out)  # after every run: an interrupted sweep keeps what it measured
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
