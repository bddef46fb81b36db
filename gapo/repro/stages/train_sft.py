"""Stage `train_sft`: the SFT baseline of Appendix G (LoRA, the summed NLL of every valid answer per prompt).

Trains on the same `data/train.jsonl` as GAPO (`gapo.repro.sft.train_sft`); the adapter goes to ``sft.output_dir``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import datasets
import pandas as pd

from gapo.io import read_jsonl
from gapo.repro.sft import SFTConfig, train_sft
from gapo.repro.stages.common import StageResult

FILES = {"losses": "results/train_sft.csv"}


def run(P: Mapping[str, Any]) -> StageResult:
    """Train the SFT adapter; `P` is `stage_params("train_sft", ...)`. Table ``losses``: step, loss."""
    config = SFTConfig(**P["sft"])
    dataset = datasets.Dataset.from_list(read_jsonl(P["data"]["out"]))
    result = train_sft(config, dataset=dataset)
    losses = pd.DataFrame({"step": range(1, len(result.losses) + 1), "loss": result.losses})
    print(f"{config.steps} steps, {config.batch_size} prompts a step -> {result.output_dir}")
    metrics = {"steps": len(result.losses), "output_dir": str(result.output_dir), "profile": P["profile"]}
    return StageResult({"losses": losses}, metrics, files=FILES)
