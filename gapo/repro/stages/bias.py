"""Stage `bias` (Figure 2): item and position bias of the base model, on a list of countries.

`gapo.repro.experiments.bias_case_study` on the `bias.model` entry: the same list under two instructions, ``n``
samples each, and ``n`` prompts whose list is reshuffled every time, one sample each.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gapo.repro.experiments import bias_case_study
from gapo.repro.samplers import Samplers
from gapo.repro.stages.common import StageResult, labels_of

FILES = {"items": "results/fig2_bias_items.csv", "positions": "results/fig2_bias_positions.csv"}


def run(P: Mapping[str, Any], raw_dir: str | Path | None = "outputs/raw") -> StageResult:
    """The bias case study of `P["bias"]["model"]`; raw samples go to ``raw_dir/bias.json`` (None: not written).

    Tables: ``items`` (count and share per part, variant and item, NV included), ``positions`` (the shuffled part's
    position shares), ``top`` (the two most chosen items per part and variant), ``samples``.
    """
    cfg = P["bias"]
    name = cfg["model"]
    samplers = Samplers([name], P["models"], P["sampling"], seed=cfg["seed"], max_new_tokens=cfg["max_new_tokens"])
    out = Path(raw_dir) / "bias.json" if raw_dir is not None else None
    result = bias_case_study(samplers[name], n=cfg["n"], seed=cfg["seed"], out=out)
    samplers.release()
    metrics = {"models": {name: result.summary}, "profile": P["profile"]}
    return StageResult(
        dict(result.tables), metrics, [name], labels_of([name], P["models"]), {name: result}, files=FILES
    )
