"""Stage `open_ended` (issue 13): train GAPO on open prompts, then valid-unique@n on held-out open categories.

The run trains on open prompts ("Name a country.") of the training categories with the `train` section's settings
(LoRA, G, learning rate, prefix) and this stage's sizes on top, in its own ``output_dir`` (resumed after an
interruption); its adapter is copied to ``open_ended.adapter`` (a DVC output). Then the base model, list-trained GAPO
(stage `train_gapo`) and the new adapter each name an item of the held-out categories ``n`` times. Headline:
``ratio_open_to_list``, open-ended GAPO's mean valid-unique@n over list-trained GAPO's (goal >= 1.3 at n = 500).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gapo.repro.experiments import ExperimentResult, valid_unique
from gapo.repro.profiles import PipelineError
from gapo.repro.samplers import Samplers, evaluate_models, require_adapter
from gapo.repro.stages.common import StageResult, labels_of, model_spec, stack
from gapo.repro.stages.training import RUN_KEYS, train_adapter, train_config, train_metrics, trained_spec, training_log

#: The `models`-style name and label of the model this stage trains.
OPEN_GAPO = "gapo_open"
LABEL = "+ open-ended GAPO"

#: The stage's keys that override the `train` section for its run: the shared RUN_KEYS and its task's own.
TRAIN_KEYS = (*RUN_KEYS, "max_completion_length", "equivalence")

FILES = {
    "curves": "results/open_ended_curves.csv",
    "per_category": "results/open_ended_per_category.csv",
    "train": "results/train_open_ended.csv",
    "metrics": "metrics/open_ended.json",
}


def run(P: Mapping[str, Any], raw_dir: str | Path | None = "outputs/raw/open_ended") -> StageResult:
    """Train open-ended GAPO, then valid-unique@n on the held-out open categories for base, list GAPO and it.

    `P` is `stage_params("open_ended", ...)`; raw samples go to ``raw_dir/<model>.json`` (None: not written).
    Tables: ``curves``, ``per_category`` (one row per model and category), ``train`` (the run's per-step log).
    """
    cfg, models = P["open_ended"], P["models"]
    base = model_spec(models, cfg["base"], "open_ended.base")
    listed = model_spec(models, cfg["list_gapo"], "open_ended.list_gapo")
    if listed["model"] != base["model"]:
        raise PipelineError(
            f"open_ended: list_gapo ({listed['model']}) and base ({base['model']}) must share the base model"
        )
    require_adapter(listed, cfg["list_gapo"])
    config = train_config(P["train"], cfg, TRAIN_KEYS, base["model"], "open")
    summary = train_adapter(config, cfg["adapter"])
    compared = {cfg["base"]: base, cfg["list_gapo"]: listed, OPEN_GAPO: trained_spec(base, cfg["adapter"], LABEL)}
    samplers = Samplers(list(compared), compared, P["sampling"], seed=cfg["seed"], max_new_tokens=cfg["max_new_tokens"])
    results = evaluate_models(
        samplers,
        lambda sampler, out: valid_unique(
            sampler,
            n=cfg["n"],
            categories=cfg["categories"],
            equivalence=cfg["equivalence"],
            seed=cfg["seed"],
            out=out,
        ),  # fmt: skip
        raw_dir,
        lambda name, r: f"{name}: mean valid-unique@{cfg['n']} = {r.summary['mean_valid_unique_at_n']:.1f}",
    )
    metrics = open_ended_metrics(results, cfg, list_name=cfg["list_gapo"])
    metrics.update(profile=P["profile"], train=train_metrics(summary))
    tables = {
        "curves": stack(results, "curves"),
        "per_category": stack(results, "per_category"),
        "train": training_log(config),
    }
    return StageResult(tables, metrics, list(compared), labels_of(list(compared), compared), results, files=FILES)


def open_ended_metrics(
    results: Mapping[str, ExperimentResult], cfg: Mapping[str, Any], list_name: str
) -> dict[str, Any]:
    """metrics/open_ended.json: per model the mean and per-category valid-unique@n, the rule of each category, and
    the headline ratio (open-ended over list-trained GAPO; None when the latter is 0)."""
    models = {}
    for name, result in results.items():
        table = result.tables["per_category"]
        models[name] = {
            "mean_valid_unique": result.summary["mean_valid_unique_at_n"],
            "mean_unique": result.summary["mean_unique_at_n"],
            "mean_valid_rate": result.summary["mean_valid_rate"],
            "valid_unique": dict(zip(table["category"], table["valid_unique_at_n"].astype(int), strict=True)),
        }
    listed, opened = models[list_name]["mean_valid_unique"], models[OPEN_GAPO]["mean_valid_unique"]
    first = next(iter(results.values())).tables["per_category"]
    return {
        "models": models,
        "ratio_open_to_list": opened / listed if listed > 0 else None,
        "goal_ratio": 1.3,
        "rules": dict(zip(first["category"], first["rule"], strict=True)),
        "settings": {"n": cfg["n"], "categories": list(cfg["categories"]), "equivalence": cfg["equivalence"]},
    }
