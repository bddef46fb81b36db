"""What every stage function shares: the `StageResult` it returns (and writes), model specs, samplers, training runs.

Why one home: each stage module (`gapo.repro.stages.<stage>`, named as in dvc.yaml) is `run(P) -> StageResult`, where
`P` is `gapo.repro.pipeline.stage_params(<stage>, ...)`. `run` writes what DVC caches as it goes (data, adapters, raw
samples under outputs/), and returns the committed results (results/, metrics/, figures/ CSV and JSON) without writing
them; the notebook plots from the result and calls `StageResult.write`, and tests call `run` on tiny-random and inspect
the result. So the numbers a figure shows and the files a stage commits come from the same tested function.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gapo.repro import pipeline

#: The name under `StageResult.files` that stands for the metrics document.
METRICS = "metrics"


@dataclass
class StageResult:
    """What a stage produced: tidy tables, its metrics document, and what its figure needs.

    ``files`` maps a table name, a document name or ``"metrics"`` to the path (relative to the repository root) that
    `write` gives it: tables as CSV, documents and metrics as JSON. Tables not named there (e.g. a stage's sample
    rows) are for the notebook to show. ``figure`` holds the figure's arguments that are not tables (e.g. which
    categories go in which panel); ``results`` the `ExperimentResult` of each model, by name.
    """

    tables: dict[str, pd.DataFrame]
    metrics: dict[str, Any] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    figure: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [name for name in self.files if name != METRICS and name not in {**self.tables, **self.documents}]
        if unknown:
            raise KeyError(f"StageResult.files names {unknown}, which are neither tables, documents nor 'metrics'")

    def write(self, root: str | Path = ".") -> list[Path]:
        """Write every file of `files` under `root` (atomically, so a kill never leaves half a file); the paths."""
        written = []
        for name, relative in self.files.items():
            path = Path(root) / relative
            if name in self.tables:
                written.append(pipeline.write_csv(path, self.tables[name]))
            else:
                written.append(pipeline.write_json(path, self.metrics if name == METRICS else self.documents[name]))
        return written


# --------------------------------------------------------------------------------------------------------------------
# Models and samplers
# --------------------------------------------------------------------------------------------------------------------


def model_spec(models: Mapping[str, Mapping[str, Any]], name: str, key: str) -> dict[str, Any]:
    """The `models` entry `name` that setting `key` names; one line naming the defined ones when it is not there."""
    if name not in models:
        raise pipeline.PipelineError(
            f"{key} names model {name!r}, not one of the `models` section: {', '.join(models)}"
        )
    return dict(models[name])


def labels_of(names: Sequence[str], models: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Each model's display label (its `label`, else its name), as `pipeline.Samplers.label` gives it."""
    return {name: str(models[name].get("label") or name) for name in names}


def require_adapter(spec: Mapping[str, Any], name: str, stage: str = "train_gapo") -> None:
    """Stop before anything runs when a model's LoRA adapter (a training stage's output) is missing."""
    adapter = spec.get("adapter")
    if not adapter or not (Path(adapter) / "adapter_config.json").is_file():
        raise FileNotFoundError(f"models.{name} has no LoRA adapter at {adapter}: run stage {stage} first")


def evaluate_models(
    samplers: pipeline.Samplers,
    evaluate: Callable[[Any, Path | None], Any],
    raw_dir: str | Path | None,
    headline: Callable[[str, Any], str] | None = None,
) -> dict[str, Any]:
    """``{name: evaluate(sampler, raw_file)}`` model by model (one model in memory), then release the last one.

    ``raw_file`` is ``raw_dir/<name>.json`` (None when `raw_dir` is None); `headline(name, result)` is printed.
    """
    results = {}
    for name in samplers:
        out = Path(raw_dir) / f"{name}.json" if raw_dir is not None else None
        results[name] = evaluate(samplers[name], out)
        if headline is not None:
            print(headline(name, results[name]))
    samplers.release()
    return results


def stack(results: Mapping[str, Any], table: str, model_first: bool = True) -> pd.DataFrame:
    """One table of every model's `table` (``results[name].tables[table]``) with a ``model`` column, first or last
    (the paper-figure stages have always written it last; their CSV columns stay as they were)."""
    frames = [r.tables[table].assign(model=name) for name, r in results.items()]
    stacked = pd.concat(frames, ignore_index=True)
    return stacked[["model", *[c for c in stacked.columns if c != "model"]]] if model_first else stacked


def split_categories(table: pd.DataFrame, first: Sequence[str]) -> tuple[list[str], list[str]]:
    """The categories of `table` (in order of appearance) split into the `first` figure's (in `first`'s order, only
    those present) and the rest (the appendix figure's)."""
    present = list(dict.fromkeys(table["category"]))
    chosen = [c for c in first if c in present]
    return chosen, [c for c in present if c not in chosen]


# --------------------------------------------------------------------------------------------------------------------
# Training runs
# --------------------------------------------------------------------------------------------------------------------


def trained_spec(base: Mapping[str, Any], adapter: str, label: str) -> dict[str, Any]:
    """A `models` entry for the adapter a stage trains on `base`'s model."""
    return {"model": base["model"], "adapter": adapter, "label": label}


def train_config(
    train: Mapping[str, Any], section: Mapping[str, Any], keys: Sequence[str], model: str, task: str
) -> Any:
    """The TrainConfig of a stage's own run: the `train` section, the stage's `keys` on top, its model, task and
    run dir (``section["output_dir"]``). Built, and so checked, before anything trains: a bad value is one line."""
    from gapo.train import TrainConfig

    changes = {k: section[k] for k in keys if k in section}
    return TrainConfig(**{**train, **changes, "model": model, "task": task, "output_dir": section["output_dir"]})


def train_adapter(config: Any, adapter: str | Path, title: str | None = None) -> dict[str, Any]:
    """Train `config` (a `gapo.train.TrainConfig`) in its run dir and copy the adapter to `adapter`; the run's summary.

    The task's data and reward are checked first (`task_data`), so a bad setting leaves the run dir as it was. An
    interrupted run of the same config is resumed (`pipeline.prepare_run_dir`): a killed `dvc repro` loses at most one
    save interval. The summary is also written next to the adapter (``train_summary.json``).
    """
    from gapo.train import task_data, train

    task_data(config)
    config.resume = pipeline.prepare_run_dir(config.output_dir, dataclasses.asdict(config))
    print(
        f"{title or config.task}: {config.model}, {config.max_steps} steps, G={config.num_generations}, "
        f"resume={config.resume}"
    )
    summary = train(config)
    pipeline.copy_dir(Path(config.output_dir) / "adapter", adapter)
    pipeline.write_json(Path(adapter) / "train_summary.json", summary)
    return summary


def training_log(config: Any) -> pd.DataFrame:
    """The run's per-step metrics (its metrics.jsonl) as a table."""
    return pd.DataFrame(pipeline.read_jsonl(Path(config.output_dir) / "metrics.jsonl"))


def train_metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a run's summary a metrics document keeps: steps, minutes and the last step's metrics."""
    return {"steps": summary["steps"], "minutes": summary["train_seconds"] / 60, "last": summary["last"]}
