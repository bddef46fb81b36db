"""Stage `coherence` (Figure 7): creativity against coherence across sampling temperatures.

For each model and temperature, coherence is MATH accuracy (`gapo.repro.benchmarks`, Table 2's MATH set) and
creativity the mean pairwise embedding distance on the creative prompts (Table 1's metric), `figure7_data`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from gapo.repro.benchmarks import BenchmarkSettings, figure7_data
from gapo.repro.samplers import Samplers
from gapo.repro.stages.common import StageResult, labels_of

FILES = {"figure7": "results/fig7_creativity_coherence.csv"}


def run(P: Mapping[str, Any]) -> StageResult:
    """Figure 7's rows (model, temperature, MATH accuracy with intervals, creativity); `P` is
    `stage_params("coherence", ...)`. Table: ``figure7``."""
    cfg = P["coherence"]
    settings = BenchmarkSettings(
        benchmarks=("math",),
        sizes={"math": cfg["math_size"]},
        runs=cfg["runs"],
        seed=cfg["seed"],
        max_new_tokens={"math": cfg["math_max_new_tokens"]},
        source=cfg["source"],
    )
    samplers = Samplers(cfg["models"], P["models"], P["sampling"], seed=cfg["seed"])
    rows = figure7_data(
        samplers,
        settings,
        temperatures=cfg["temperatures"],
        n=cfg["creativity_n"],
        num_prompts=cfg["creativity_num_prompts"],
        max_new_tokens=cfg["creativity_max_new_tokens"],
        encoder=cfg["encoder"],
        seed=cfg["seed"],
    )
    samplers.release()
    names = list(cfg["models"])
    return StageResult(
        {"figure7": pd.DataFrame(rows)}, {"profile": P["profile"]}, names, labels_of(names, P["models"]), files=FILES
    )
