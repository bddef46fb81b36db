"""Stage `benchmarks` (Table 2): GSM8K, MATH, HumanEval and MMLU-Pro subsets, ``runs`` completions per problem.

Scored as lm-eval scores them (`gapo.repro.benchmarks`); a benchmark whose data is not available offline is reported
as skipped, with the reason. Table 2 lists our models, then the paper's rows; results/benchmarks_details.json holds
the per-run scores, data sources, skipped benchmarks and settings; metrics/benchmarks.json the scores.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from gapo.repro.benchmarks import (
    BenchmarkSettings,
    benchmarks_metrics,
    evaluate_model,
    table2_rows,
    write_records,
)
from gapo.repro.samplers import Samplers
from gapo.repro.stages.common import StageResult, labels_of

FILES = {
    "table2": "figures/table2_benchmarks.csv",
    "details": "results/benchmarks_details.json",
    "metrics": "metrics/benchmarks.json",
}


def settings_of(cfg: Mapping[str, Any]) -> Any:
    """The `BenchmarkSettings` of the `benchmarks` section."""
    return BenchmarkSettings(
        benchmarks=tuple(cfg["benchmarks"]),
        sizes=dict(cfg["sizes"]),
        runs=cfg["runs"],
        temperature=cfg["temperature"],
        seed=cfg["seed"],
        max_new_tokens=dict(cfg["max_new_tokens"]),
        source=cfg["source"],
    )


def run(P: Mapping[str, Any], raw_dir: str | Path | None = "outputs/raw") -> StageResult:
    """Table 2 for every model; `P` is `stage_params("benchmarks", ...)`. Every sample and its score goes to
    ``raw_dir/benchmarks_samples.jsonl`` (None: not written).

    Tables: ``table2`` (our models, then the paper's rows). Documents: ``details`` (`benchmarks_metrics`). Results:
    `evaluate_model`'s summary per model. Metrics: the scores per model and benchmark.
    """
    cfg = P["benchmarks"]
    settings = settings_of(cfg)
    samplers = Samplers(cfg["models"], P["models"], P["sampling"], seed=cfg["seed"])
    results, records = {}, []
    for name in samplers:
        model_records: list[dict[str, Any]] = []
        results[name] = evaluate_model(samplers[name], settings, records=model_records)
        records += [{"model": name, **r} for r in model_records]
    samplers.release()
    if raw_dir is not None:
        write_records(records, Path(raw_dir) / "benchmarks_samples.jsonl")
    details = benchmarks_metrics(results, settings)
    metrics = {"models": details["models"], "profile": P["profile"]}
    names = list(results)
    return StageResult(
        {"table2": pd.DataFrame(table2_rows(results))}, metrics, names, labels_of(names, P["models"]), results,
        files=FILES, documents={"details": details},
    )  # fmt: skip


def skipped(result: StageResult) -> pd.Series:
    """The benchmarks that did not run, and why, as ``<model>/<benchmark> -> reason``."""
    return pd.Series(
        {f"{m}/{b}": s["skipped"] for m, r in result.results.items() for b, s in r.items() if "skipped" in s}, dtype=str
    )
