"""The issue-13 pipeline stages as functions: train a GAPO variant, then evaluate it beside the base model.

Why a module of its own: notebooks 09_open_ended and 10_targets stay thin (a parameters cell, one call here, a plot),
and tests run the same functions end to end on `tiny-random` at smoke sizes. Each takes the output of
`gapo.pipeline.stage_params` for its stage and returns a `StageResult`; the notebook writes the files.

| function     | trains on (task)               | evaluates                                 | headline          |
|--------------|--------------------------------|-------------------------------------------|-------------------|
| `open_ended` | open prompts, train categories | valid-unique@n, held-out open categories  | open / list ratio |
| `targets`    | list prompts with a target p   | JSD to the target on unseen lists         | mean JSD (GAPO)   |

A run trains in its own ``output_dir`` (resumed after an interruption, `gapo.pipeline.prepare_run_dir`) with the
`train` section's settings (LoRA, G, learning rate, prefix) and the stage's own sizes on top, and its adapter is
copied to the stage's ``adapter`` path (a DVC output).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gapo import pipeline
from gapo.eval.experiments import ExperimentResult, target_jsd, valid_unique
from gapo.tasks.targets import unseen_target_rows

#: The `models`-style name and label of each stage's trained model (the list-trained one is `models.<list_gapo>`).
OPEN_GAPO = "gapo_open"
TARGET_GAPO = "gapo_targets"
LABELS = {OPEN_GAPO: "+ open-ended GAPO", TARGET_GAPO: "+ target GAPO"}

#: The stage's keys that override the `train` section for its run (everything else comes from `train`).
TRAIN_KEYS: dict[str, tuple[str, ...]] = {
    "open_ended": ("max_steps", "num_prompts", "save_steps", "max_completion_length", "equivalence"),
    "targets": ("max_steps", "num_prompts", "save_steps", "min_items", "max_items"),
}


@dataclass
class StageResult:
    """What a stage's notebook writes: tidy tables (CSV), the metrics document (JSON) and what the figure needs."""

    tables: dict[str, pd.DataFrame]
    metrics: dict[str, Any]
    models: list[str]
    labels: dict[str, str]
    results: dict[str, ExperimentResult] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------------------------
# Shared parts
# --------------------------------------------------------------------------------------------------------------------


def _spec(models: Mapping[str, Mapping[str, Any]], name: str, key: str) -> dict[str, Any]:
    if name not in models:
        raise pipeline.PipelineError(
            f"{key} names model {name!r}, not one of the `models` section: {', '.join(models)}"
        )
    return dict(models[name])


def trained_spec(base: Mapping[str, Any], adapter: str, name: str) -> dict[str, Any]:
    """A `models` entry for the adapter a stage trains on `base`'s model."""
    return {"model": base["model"], "adapter": adapter, "label": LABELS[name]}


def train_config(stage: str, train: Mapping[str, Any], section: Mapping[str, Any], model: str, task: str) -> Any:
    """The TrainConfig of a stage's run: the `train` section, the stage's sizes on top, its own model/task/run dir.

    Built (and so checked) before anything trains: a bad value stops here with one line.
    """
    from gapo.run import TrainConfig

    changes = {k: section[k] for k in TRAIN_KEYS[stage] if k in section}
    return TrainConfig(**{**train, **changes, "model": model, "task": task, "output_dir": section["output_dir"]})


def train_adapter(config: Any, adapter: str | Path) -> dict[str, Any]:
    """Train `config` in its run dir (resuming an interrupted run of the same config) and copy the adapter out.

    The task's data and reward are checked first (`task_data`), so a bad setting leaves the run dir as it was.
    """
    from gapo.run import task_data, train

    task_data(config)
    config.resume = pipeline.prepare_run_dir(config.output_dir, dataclasses.asdict(config))
    print(
        f"{config.task}: {config.model}, {config.max_steps} steps, G={config.num_generations}, resume={config.resume}"
    )
    summary = train(config)
    pipeline.copy_dir(Path(config.output_dir) / "adapter", adapter)
    pipeline.write_json(Path(adapter) / "train_summary.json", summary)
    return summary


def training_log(config: Any) -> pd.DataFrame:
    """The run's per-step metrics (metrics.jsonl) as a table."""
    return pd.DataFrame(pipeline.read_jsonl(Path(config.output_dir) / "metrics.jsonl"))


def _train_metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {"steps": summary["steps"], "minutes": summary["train_seconds"] / 60, "last": summary["last"]}


def _require_adapter(spec: Mapping[str, Any], name: str) -> None:
    adapter = spec.get("adapter")
    if not adapter or not (Path(adapter) / "adapter_config.json").is_file():
        raise FileNotFoundError(f"models.{name} has no LoRA adapter at {adapter}: run stage train_gapo first")


# --------------------------------------------------------------------------------------------------------------------
# Stage open_ended
# --------------------------------------------------------------------------------------------------------------------


def open_ended(P: Mapping[str, Any], raw_dir: str | Path | None = "outputs/raw/open_ended") -> StageResult:
    """Train open-ended GAPO, then valid-unique@n on the held-out open categories for base, list GAPO and it.

    `P` is `stage_params("open_ended", ...)`. Headline: ``ratio_open_to_list``, open-ended GAPO's mean
    valid-unique@n over list-trained GAPO's (issue 13's goal: >= 1.3 at n = 500; None when the latter is 0).
    """
    cfg, models = P["open_ended"], P["models"]
    base, listed = (
        _spec(models, cfg["base"], "open_ended.base"),
        _spec(models, cfg["list_gapo"], "open_ended.list_gapo"),
    )
    if listed["model"] != base["model"]:
        raise pipeline.PipelineError(
            f"open_ended: list_gapo ({listed['model']}) and base ({base['model']}) must share the base model"
        )
    _require_adapter(listed, cfg["list_gapo"])
    config = train_config("open_ended", P["train"], cfg, base["model"], "open")
    summary = train_adapter(config, cfg["adapter"])
    compared = {cfg["base"]: base, cfg["list_gapo"]: listed, OPEN_GAPO: trained_spec(base, cfg["adapter"], OPEN_GAPO)}
    samplers = pipeline.Samplers(
        list(compared), compared, P["sampling"], seed=cfg["seed"], max_new_tokens=cfg["max_new_tokens"]
    )
    results = {}
    for name in samplers:
        out = Path(raw_dir) / f"{name}.json" if raw_dir is not None else None
        results[name] = valid_unique(
            samplers[name], n=cfg["n"], categories=cfg["categories"], equivalence=cfg["equivalence"], seed=cfg["seed"],
            out=out,
        )  # fmt: skip
        print(f"{name}: mean valid-unique@{cfg['n']} = {results[name].summary['mean_valid_unique_at_n']:.1f}")
    samplers.release()
    per_category = _stack(results, "per_category")
    metrics = open_ended_metrics(results, cfg, list_name=cfg["list_gapo"])
    metrics.update(profile=P["profile"], train=_train_metrics(summary))
    tables = {"curves": _stack(results, "curves"), "per_category": per_category, "train": training_log(config)}
    labels = {name: samplers.label(name) for name in samplers}
    return StageResult(tables, metrics, list(compared), labels, results)


def open_ended_metrics(
    results: Mapping[str, ExperimentResult], cfg: Mapping[str, Any], list_name: str
) -> dict[str, Any]:
    """metrics/open_ended.json: per model the mean and per-category valid-unique@n, the rule of each category, and
    the headline ratio (open-ended over list-trained GAPO)."""
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


# --------------------------------------------------------------------------------------------------------------------
# Stage targets
# --------------------------------------------------------------------------------------------------------------------


def targets(P: Mapping[str, Any], raw_dir: str | Path | None = "outputs/raw/targets") -> StageResult:
    """Train GAPO on list prompts with a target distribution, then JSD to the target on unseen lists, against base.

    `P` is `stage_params("targets", ...)`. The unseen lists are `gapo.tasks.targets.unseen_target_rows` (the paper's
    evaluation lists, never trained on). Headline: the trained model's ``mean_jsd`` (issue 13's goal: < 0.1).
    """
    cfg, models = P["targets"], P["models"]
    base = _spec(models, cfg["base"], "targets.base")
    rows = unseen_target_rows(cfg["num_lists"], cfg["seed"], cfg["min_items"], cfg["max_items"])
    config = train_config("targets", P["train"], cfg, base["model"], "targets")
    summary = train_adapter(config, cfg["adapter"])
    compared = {cfg["base"]: base, TARGET_GAPO: trained_spec(base, cfg["adapter"], TARGET_GAPO)}
    samplers = pipeline.Samplers(
        list(compared), compared, P["sampling"], seed=cfg["seed"], max_new_tokens=cfg["max_new_tokens"]
    )
    results = {}
    for name in samplers:
        out = Path(raw_dir) / f"{name}.json" if raw_dir is not None else None
        results[name] = target_jsd(samplers[name], rows, n=cfg["n"], seed=cfg["seed"], out=out)
        print(f"{name}: mean JSD to the target = {results[name].summary['mean_jsd']:.3f}")
    samplers.release()
    metrics = {
        "models": {
            name: {"mean_jsd": r.summary["mean_jsd"], "mean_invalid_rate": r.summary["mean_invalid_rate"]}
            for name, r in results.items()
        },
        "goal_jsd": 0.1,
        "profile": P["profile"],
        "settings": {k: cfg[k] for k in ("n", "num_lists", "min_items", "max_items")},
        "train": _train_metrics(summary),
    }
    tables = {"per_list": _stack(results, "per_list"), "train": training_log(config)}
    labels = {name: samplers.label(name) for name in samplers}
    return StageResult(tables, metrics, list(compared), labels, results)


def _stack(results: Mapping[str, ExperimentResult], table: str) -> pd.DataFrame:
    """One table of every model's `table`, with a ``model`` column first."""
    frames = [r.tables[table].assign(model=name) for name, r in results.items()]
    stacked = pd.concat(frames, ignore_index=True)
    return stacked[["model", *[c for c in stacked.columns if c != "model"]]]
