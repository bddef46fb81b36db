"""Stage `creativity` (Table 1, Figure 6): diversity of creative writing, and a t-SNE map of haikus.

Table 1: ``n`` outputs for each creative prompt per model, semantic (mean pairwise embedding distance) and lexical
(1 - Self-BLEU) diversity (`gapo.repro.experiments.creativity`), beside the paper's values
(`gapo.repro.paper.PAPER_TABLE1`). Figure 6: ``haiku_n`` haikus per model embedded together and mapped to 2-D
(`haiku_map`). The metrics document carries each model's whole experiment summary, plus its haiku numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from gapo.repro.experiments import creativity, haiku_map
from gapo.repro.paper import PAPER_TABLE1
from gapo.repro.samplers import Samplers
from gapo.repro.stages.common import StageResult, labels_of

FILES = {
    "table1": "figures/table1_creativity.csv",
    "points": "results/fig6_tsne_haiku.csv",
    "metrics": "metrics/creativity.json",
}

#: Table 1's metrics (columns ``<model>/<metric>``, ``paper_baseline/<metric>``, ``paper_gapo/<metric>``).
TABLE1_METRICS = ("embedding_distance", "one_minus_self_bleu")


def table1(per_prompt: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Table 1 from each model's per-prompt table (``task``, ``prompt`` and the metrics): one row per task, then the
    ``average`` row (the mean over tasks), with the paper's baseline and GAPO values where it reports the task."""
    frames = {name: frame.set_index("task") for name, frame in per_prompt.items()}
    first = next(iter(frames.values()))
    rows = []
    for task in [*first.index, "average"]:
        row: dict[str, Any] = {"task": task, "prompt": "" if task == "average" else first.loc[task, "prompt"]}
        for metric in TABLE1_METRICS:
            for name, frame in frames.items():
                row[f"{name}/{metric}"] = frame[metric].mean() if task == "average" else frame.loc[task, metric]
            paper = PAPER_TABLE1.get(task, {}).get(metric)
            row[f"paper_baseline/{metric}"], row[f"paper_gapo/{metric}"] = paper if paper else (None, None)
        rows.append(row)
    return pd.DataFrame(rows)


def run(P: Mapping[str, Any], raw_dir: str | Path | None = "outputs/raw/creativity") -> StageResult:
    """Table 1 and Figure 6's data for every model; `P` is `stage_params("creativity", ...)`.

    Raw samples go to ``raw_dir/<model>.json`` and ``raw_dir/haiku_map.json``. Tables: ``table1``, ``points`` (the
    haikus' t-SNE coordinates), ``per_prompt`` (one row per model and prompt).
    """
    cfg = P["creativity"]
    raw = Path(raw_dir) if raw_dir is not None else None
    samplers = Samplers(
        cfg["models"], P["models"], P["sampling"], seed=cfg["seed"], max_new_tokens=cfg["max_new_tokens"]
    )
    haikus = haiku_map(
        samplers,
        n=cfg["haiku_n"],
        encoder=cfg["encoder"],
        perplexity=cfg["perplexity"],
        max_new_tokens=cfg["haiku_max_new_tokens"],
        seed=cfg["seed"],
        out=raw / "haiku_map.json" if raw is not None else None,
    )
    results = {}
    for name in reversed(list(samplers)):  # start with the model haiku_map left loaded
        results[name] = creativity(
            samplers[name],
            n=cfg["n"],
            num_prompts=cfg["num_prompts"],
            encoder=cfg["encoder"],
            max_new_tokens=cfg["max_new_tokens"],
            seed=cfg["seed"],
            out=raw / f"{name}.json" if raw is not None else None,
        )
    samplers.release()
    results = {name: results[name] for name in samplers}
    per_prompt = {name: r.tables["per_prompt"] for name, r in results.items()}
    table = table1(per_prompt)
    metrics = {
        "models": {
            name: {
                **r.summary,
                "haiku_embedding_distance": haikus.summary.get(f"{name}/embedding_distance"),
                "haiku_distinct_texts": haikus.summary.get(f"{name}/distinct_texts"),
            }
            for name, r in results.items()
        },
        "profile": P["profile"],
        "settings": {
            "n": cfg["n"],
            "haiku_n": cfg["haiku_n"],
            "encoder": cfg["encoder"],
            "prompts": len(table) - 1,  # the task rows, not the average
        },
    }
    tables = {
        "table1": table,
        "points": haikus.tables["points"],
        "per_prompt": pd.concat([f.assign(model=m) for m, f in per_prompt.items()], ignore_index=True),
    }
    names = list(results)
    return StageResult(
        tables, metrics, names, labels_of(names, P["models"]), results, {"seed": cfg["seed"]}, files=FILES
    )
