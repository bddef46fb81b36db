"""Stage `train_gapo`: GRPO with the frequency-aware group reward and LoRA, one run per `policies` entry.

Each run (adapter name -> base model) uses the `train` section's settings on `data/train.jsonl` (the `generate`
stage's file: the data is built once), trains in ``<runs_dir>/gapo-<name>`` (an interrupted run resumes from its last
complete checkpoint) and its adapter is copied to ``<adapters_dir>/<name>`` (the `models` section's ``gapo`` entry
points there).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import datasets
import pandas as pd

from gapo.io import read_jsonl
from gapo.repro.stages.common import StageResult
from gapo.repro.stages.training import train_adapter, training_log
from gapo.train import configs

FILES = {"train": "results/train_gapo.csv"}

#: The per-step columns results/train_gapo.csv keeps (those the run logged), in this order.
LOG_COLUMNS = (
    "policy",
    "step",
    "loss",
    "reward",
    "rewards/mean",
    "rewards/std",
    "diversity/valid_fraction",
    "diversity/group_jsd",
    "diversity/freq_spread",
    "diversity/first_item_share",
    "advantage/invalid",
    "advantage/valid_shift",
    "advantage/valid_spread",
    "train/frac_zero_std_groups",
    "rollouts",
    "step_time",
)


def run(
    P: Mapping[str, Any], runs_dir: str | Path = "outputs/runs", adapters_dir: str | Path = "models/gapo"
) -> StageResult:
    """Train every policy of `P["policies"]`; `P` is `stage_params("train_gapo", ...)`.

    Tables: ``train`` (every run's per-step metrics, `LOG_COLUMNS`, with a ``policy`` column), ``summary`` (per
    policy: steps, minutes, first and last step's metrics). Metrics: each run's summary, by policy.
    """
    dataset = datasets.Dataset.from_list(read_jsonl(P["data"]["out"]))  # the generate stage's file, as DVC tracks it
    summaries, logs = {}, []
    for name, base_model in P["policies"].items():
        config = configs({**P["train"], "model": base_model, "output_dir": str(Path(runs_dir) / f"gapo-{name}")})
        summaries[name] = train_adapter(config, Path(adapters_dir) / name, title=name, dataset=dataset)
        logs.append(training_log(config).assign(policy=name))
    log = pd.concat(logs, ignore_index=True)
    log = log[[c for c in LOG_COLUMNS if c in log]]
    tables = {"train": log, "summary": summary_table(summaries)}
    return StageResult(tables, {"policies": summaries, "profile": P["profile"]}, list(summaries), files=FILES)


def summary_table(summaries: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One column per policy: steps, minutes, and the first and last step's metrics (``first x``, ``last x``)."""
    return pd.DataFrame(
        {
            name: {
                "steps": s["steps"],
                "minutes": s["train_seconds"] / 60,
                **{f"first {k}": v for k, v in s["first"].items()},
                **{f"last {k}": v for k, v in s["last"].items()},
            }
            for name, s in summaries.items()
        }
    )
