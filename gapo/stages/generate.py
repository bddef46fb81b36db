"""`gapo data`: write the synthetic list-selection training set to JSONL (the pipeline's `generate` stage).

gapo data --num-prompts 512 --seed 0 --out data/train.jsonl
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gapo.io import write_jsonl_atomic


@dataclass
class DataConfig:
    """The synthetic list-selection dataset; params.yaml's `data` section mirrors it."""

    out: str = field(default="data/train.jsonl", metadata={"help": "output JSONL path"})
    num_prompts: int = field(default=512, metadata={"help": "number of prompts"})
    seed: int = field(default=0, metadata={"help": "the same seed gives the same file"})
    min_items: int = field(default=4, metadata={"help": "shortest list"})
    max_items: int = field(default=12, metadata={"help": "longest list"})
    categories: list[str] | None = field(default=None, metadata={"help": "comma-separated subset of categories"})
    response_prefix: str | None = field(default=None, metadata={"help": "pre-filled answer start, e.g. '<answer>'"})


def write_dataset(cfg: DataConfig) -> dict[str, int]:
    """Write the rows atomically; returns the number of rows per category."""
    from gapo.tasks.lists import list_selection_rows

    rows = list_selection_rows(
        cfg.num_prompts, cfg.seed, cfg.min_items, cfg.max_items, cfg.categories, cfg.response_prefix
    )
    out = Path(cfg.out)
    if out.is_dir():
        raise FileExistsError(f"--out {out} is a directory; pass a file path such as {out / 'train.jsonl'}")
    write_jsonl_atomic(out, rows)
    return dict(Counter(r["category"] for r in rows))


def cli(argv: list[str] | None = None) -> int:
    from gapo.config import config_from_cli

    cfg = config_from_cli(DataConfig, argv, "gapo data", "data", "Write the synthetic list-selection dataset.")
    counts = write_dataset(cfg)
    print(json.dumps({"out": cfg.out, "rows": sum(counts.values()), "per_category": counts}))
    return 0
