"""`gapo data`: write the synthetic list-selection training set to JSONL (the pipeline's `generate` stage).

gapo data --num-prompts 512 --seed 0 --out data/train.jsonl
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gapo import defaults
from gapo.config import config_from_cli
from gapo.io import read_jsonl, write_jsonl_atomic
from gapo.repro.stages.common import StageResult
from gapo.tasks.lists import list_selection_rows


@dataclass
class DataConfig:
    """The synthetic list-selection dataset; params.yaml's `data` section mirrors it, and its settings are also the
    `train` and `sft` sections' (gapo.config.with_data_settings). Defaults: `gapo.defaults`."""

    out: str = field(default="data/train.jsonl", metadata={"help": "output JSONL path"})
    num_prompts: int = defaults.NUM_PROMPTS.field()
    seed: int = defaults.SEED.field("the same seed gives the same file")
    min_items: int = defaults.MIN_ITEMS.field()
    max_items: int = defaults.MAX_ITEMS.field()
    categories: list[str] | None = defaults.CATEGORIES.field()
    response_prefix: str | None = defaults.RESPONSE_PREFIX.field()


def write_dataset(cfg: DataConfig) -> dict[str, int]:
    """Write the rows atomically; returns the number of rows per category."""
    rows = list_selection_rows(
        cfg.num_prompts, cfg.seed, cfg.min_items, cfg.max_items, cfg.categories, cfg.response_prefix
    )
    out = Path(cfg.out)
    if out.is_dir():
        raise FileExistsError(f"--out {out} is a directory; pass a file path such as {out / 'train.jsonl'}")
    write_jsonl_atomic(out, rows)
    return dict(Counter(r["category"] for r in rows))


#: What `run`'s result writes (`StageResult.write`); data/train.jsonl itself is written by `run` (a DVC-cached out).
FILES = {"summary": "results/data_summary.csv"}


def run(P: Mapping[str, Any]) -> StageResult:
    """Stage `generate`: write `P["data"]` 's dataset (`write_dataset`) and summarise it per category.

    Tables: ``summary`` (prompts and list lengths per category), ``rows`` (the written rows, with ``num_items``).
    """
    config = DataConfig(**P["data"])
    write_dataset(config)
    rows = pd.DataFrame(read_jsonl(config.out))
    rows["num_items"] = rows["items"].map(len)
    print(f"{len(rows)} prompts -> {config.out}")
    return StageResult({"summary": data_summary(rows), "rows": rows}, {"profile": P["profile"]}, files=FILES)


def data_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per category: the number of prompts and the mean, smallest and largest list length (``rows`` has
    ``category``, ``items`` and ``num_items`` columns)."""
    return (
        rows.groupby("category")
        .agg(
            prompts=("items", "size"),
            mean_items=("num_items", "mean"),
            min_items=("num_items", "min"),
            max_items=("num_items", "max"),
        )
        .reset_index()
    )


def cli(argv: list[str] | None = None) -> int:
    (cfg,) = config_from_cli([DataConfig], argv, "gapo data", "data", "Write the synthetic list-selection dataset.")
    counts = write_dataset(cfg)
    print(json.dumps({"out": cfg.out, "rows": sum(counts.values()), "per_category": counts}))
    return 0
