"""Stage `targets` (issue 13): train GAPO on list prompts that state a target distribution, then the JSD between
each model's answers and the target on unseen lists.

The run trains with the `train` section's settings and this stage's sizes on top, in its own ``output_dir`` (resumed
after an interruption); its adapter is copied to ``targets.adapter`` (a DVC output). The unseen lists are
`gapo.repro.prompts.unseen_target_rows` (the paper's evaluation lists, never trained on). Headline: the trained
model's ``mean_jsd`` (goal < 0.1).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gapo.repro.experiments import target_jsd
from gapo.repro.prompts import unseen_target_rows
from gapo.repro.samplers import Samplers, evaluate_models
from gapo.repro.stages.common import StageResult, labels_of, model_spec, stack
from gapo.repro.stages.training import RUN_KEYS, train_adapter, train_config, train_metrics, trained_spec, training_log

#: The `models`-style name and label of the model this stage trains.
TARGET_GAPO = "gapo_targets"
LABEL = "+ target GAPO"

#: The stage's keys that override the `train` section for its run: the shared RUN_KEYS and its task's own.
TRAIN_KEYS = (*RUN_KEYS, "min_items", "max_items")

FILES = {
    "per_list": "results/targets_per_list.csv",
    "train": "results/train_targets.csv",
    "metrics": "metrics/targets.json",
}


def run(P: Mapping[str, Any], raw_dir: str | Path | None = "outputs/raw/targets") -> StageResult:
    """Train target-distribution GAPO, then JSD to the target on unseen lists, for it and the base model.

    `P` is `stage_params("targets", ...)`; raw samples go to ``raw_dir/<model>.json`` (None: not written).
    Tables: ``per_list`` (one row per model and list), ``train`` (the run's per-step log).
    """
    cfg, models = P["targets"], P["models"]
    base = model_spec(models, cfg["base"], "targets.base")
    rows = unseen_target_rows(cfg["num_lists"], cfg["seed"], cfg["min_items"], cfg["max_items"])
    config = train_config(P["train"], cfg, TRAIN_KEYS, base["model"], "targets")
    summary = train_adapter(config, cfg["adapter"])
    compared = {cfg["base"]: base, TARGET_GAPO: trained_spec(base, cfg["adapter"], LABEL)}
    samplers = Samplers(list(compared), compared, P["sampling"], seed=cfg["seed"], max_new_tokens=cfg["max_new_tokens"])
    results = evaluate_models(
        samplers,
        lambda sampler, out: target_jsd(sampler, rows, n=cfg["n"], seed=cfg["seed"], out=out),
        raw_dir,
        lambda name, r: f"{name}: mean JSD to the target = {r.summary['mean_jsd']:.3f}",
    )
    metrics = {
        "models": {
            name: {"mean_jsd": r.summary["mean_jsd"], "mean_invalid_rate": r.summary["mean_invalid_rate"]}
            for name, r in results.items()
        },
        "goal_jsd": 0.1,
        "profile": P["profile"],
        "settings": {k: cfg[k] for k in ("n", "num_lists", "min_items", "max_items")},
        "train": train_metrics(summary),
    }
    tables = {"per_list": stack(results, "per_list"), "train": training_log(config)}
    return StageResult(tables, metrics, list(compared), labels_of(list(compared), compared), results, files=FILES)
