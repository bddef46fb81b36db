"""Run the coherence benchmarks (Table 2) and the creativity-coherence sweep (Figure 7) for any set of models.

A model enters as a `Generate` callable, so the runner does not care whether it is the base model, a GAPO adapter
or a stub in a test:

    generate(prompts, n, *, temperature, seed, max_new_tokens, response_prefix=None) -> list[list[str]]

`prompts` are chat message lists; the result holds `n` completions per prompt. A `gapo.sampling.Sampler` is such a
callable: `load_generate("embedded", adapter=...)` makes one (`make_sampler`), `sampling_generate(model, tokenizer)`
wraps a loaded model.

Runs: each benchmark draws `runs` completions per problem in one seeded call (temperature 0.7 by default); run r is
the r-th completion of every problem. Each run's accuracy is the mean over problems; a metric's value is the mean of
the run accuracies and its spread their sample standard deviation (ddof=1; 0 for one run), as the paper reports the
mean of five runs.

    results = {"baseline": evaluate_model(base_generate, settings), "gapo": evaluate_model(gapo_generate, settings)}
    write_benchmark_outputs(results, "figures/table2_benchmarks.csv", "metrics/benchmarks.json", settings)
"""

from __future__ import annotations

import csv
import json
import logging
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gapo.benchmarks.data import BENCHMARKS, PAPER_SIZES, SUBSET_SEED, BenchmarkData, BenchmarkDataError, load_benchmark
from gapo.benchmarks.prompts import LM_EVAL_FEWSHOT, LM_EVAL_MAX_NEW_TOKENS, build_prompt, gsm8k_fewshot, truncate
from gapo.benchmarks.sandbox import SandboxLimits
from gapo.benchmarks.scoring import METRICS, safe_score

logger = logging.getLogger(__name__)


class Generate(Protocol):
    """`n` completions per chat prompt; a prompt ending with an assistant message is continued from it. A
    `gapo.sampling.Sampler` is one (the keywords override its defaults)."""

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
    defaults; `embedded_settings()` gives the CPU profile."""

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
    """Few-shot examples per benchmark (lm-eval's defaults); lowered to what the data source has (offline GSM8K has
    no train split, so 0) and recorded in the results."""
    source: str = "auto"
    """Data source: auto (hub if reachable, else shipped/package data), hub, local."""
    skip_unavailable: bool = True
    """A benchmark whose data cannot be had is reported as skipped with the reason, instead of failing the run."""
    sandbox_timeout_s: float = 10.0
    """Wall-clock limit of one HumanEval program."""
    sandbox_workers: int = 2
    """HumanEval programs run in parallel."""

    def __post_init__(self) -> None:
        unknown = set(self.benchmarks) - set(BENCHMARKS)
        if unknown:
            raise ValueError(f"unknown benchmarks {sorted(unknown)}; choose from {', '.join(BENCHMARKS)}")
        if self.runs < 1:
            raise ValueError(f"runs must be >= 1, got {self.runs}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.source not in ("auto", "hub", "local"):
            raise ValueError(f"source must be auto, hub or local, got {self.source!r}")


#: CPU profile for the embedded 0.5B model: prefixes of the same seeded subsets and shorter generations. Measured on
#: the 2-core machine (shared with other jobs): 2.4 tok/s for one sequence, 9 tok/s for 20 in a batch, so one model's
#: gsm8k+math+humaneval at these sizes (5 runs) is on the order of an hour; MMLU-Pro is hub-only (skipped offline).
EMBEDDED_SIZES: dict[str, int] = {"gsm8k": 10, "math": 14, "humaneval": 10, "mmlu_pro": 14}
EMBEDDED_MAX_NEW_TOKENS: dict[str, int] = {"gsm8k": 256, "math": 320, "humaneval": 256, "mmlu_pro": 320}


def embedded_settings(**overrides: Any) -> BenchmarkSettings:
    """The embedded CPU profile: EMBEDDED_SIZES problems and EMBEDDED_MAX_NEW_TOKENS, otherwise the paper's settings
    (5 runs, temperature 0.7, lm-eval's few-shot counts)."""
    values: dict[str, Any] = {"sizes": dict(EMBEDDED_SIZES), "max_new_tokens": dict(EMBEDDED_MAX_NEW_TOKENS)}
    values.update(overrides)
    return BenchmarkSettings(**values)


# --------------------------------------------------------------------------------------------------------------------
# One benchmark
# --------------------------------------------------------------------------------------------------------------------


def _summary(per_run: list[float]) -> dict[str, Any]:
    return {
        "mean": statistics.fmean(per_run) if per_run else math.nan,
        "std": statistics.stdev(per_run) if len(per_run) > 1 else 0.0,
        "per_run": per_run,
    }


def _generate(generate: Generate, prompts: list[tuple[list[dict], str | None]], n: int, **kwargs: Any) -> list[list]:
    """One `generate` call for all prompts; the result is forced into shape (a missing completion becomes None, which
    scores 0) and a returned pre-filled reply prefix is removed, so each text is what the model wrote."""
    result = generate([messages for messages, _ in prompts], n, response_prefix=None, **kwargs)
    result = list(result) if isinstance(result, Sequence) else []
    out: list[list[Any]] = []
    for i, (_, prefix) in enumerate(prompts):
        row = result[i] if i < len(result) else []
        row = list(row) if isinstance(row, Sequence) and not isinstance(row, str) else []
        row = (row + [None] * n)[:n]
        if prefix:
            row = [c[len(prefix) :] if isinstance(c, str) and c.startswith(prefix) else c for c in row]
        out.append(row)
    return out


def evaluate_benchmark(
    generate: Generate, data: BenchmarkData, settings: BenchmarkSettings
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Score `settings.runs` completions of every problem. Returns (summary, per-sample records)."""
    name = data.name
    num_fewshot = settings.num_fewshot.get(name, 0)
    if name == "gsm8k" and num_fewshot and not data.fewshot:
        logger.warning("gsm8k: %s has no train split for few-shot examples; running 0-shot", data.source)
        num_fewshot = 0
    rng = random.Random(SUBSET_SEED)
    prompts = []
    for problem in data.problems:
        shots = gsm8k_fewshot(data.fewshot, num_fewshot, rng) if name == "gsm8k" else data.fewshot
        prompts.append(build_prompt(name, problem, num_fewshot=num_fewshot, fewshot=shots))
    completions = _generate(
        generate,
        prompts,
        settings.runs,
        temperature=settings.temperature,
        seed=settings.seed,
        max_new_tokens=settings.max_new_tokens.get(name, LM_EVAL_MAX_NEW_TOKENS[name]),
    )

    jobs = [
        (p, r, truncate(name, c)) for p, row in zip(data.problems, completions, strict=True) for r, c in enumerate(row)
    ]
    kwargs: dict[str, Any] = {}
    if name == "humaneval":
        kwargs["limits"] = SandboxLimits(timeout_s=settings.sandbox_timeout_s)
        with ThreadPoolExecutor(max_workers=max(1, settings.sandbox_workers)) as pool:
            scored = list(pool.map(lambda job: safe_score(name, job[2], job[0], **kwargs), jobs))
    else:
        scored = [safe_score(name, c, p) for p, _, c in jobs]

    records = []
    per_run = {m: [0.0] * settings.runs for m in METRICS[name]}
    malformed = 0
    for (problem, run, completion), (scores, ok) in zip(jobs, scored, strict=True):
        malformed += not ok
        for metric, value in scores.items():
            per_run[metric][run] += value / max(1, len(data.problems))
        records.append({"benchmark": name, "id": problem["id"], "run": run, "completion": completion, **scores})
    summary = {
        "metrics": {m: _summary(v) for m, v in per_run.items()},
        "n": len(data.problems),
        "runs": settings.runs,
        "num_fewshot": num_fewshot,
        "source": data.source,
        "note": data.note,
        "malformed": malformed,
    }
    return summary, records


def evaluate_model(
    generate: Generate, settings: BenchmarkSettings | None = None, *, records: list[dict] | None = None
) -> dict[str, Any]:
    """All of `settings.benchmarks` for one model: ``{benchmark: summary}``; a benchmark whose data is missing is
    ``{"skipped": reason}`` when `settings.skip_unavailable`. Per-sample records are appended to `records`."""
    settings = settings or BenchmarkSettings()
    out: dict[str, Any] = {}
    for name in settings.benchmarks:
        try:
            data = load_benchmark(name, settings.sizes.get(name), settings.source)  # type: ignore[arg-type]
        except BenchmarkDataError as err:
            if not settings.skip_unavailable:
                raise
            logger.warning("skipping %s: %s", name, err)
            out[name] = {"skipped": str(err)}
            continue
        summary, recs = evaluate_benchmark(generate, data, settings)
        out[name] = summary
        if records is not None:
            records.extend(recs)
    return out


# --------------------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------------------


def sampling_generate(model: Any, tokenizer: Any, **sampling_params: Any) -> Generate:
    """A `gapo.sampling.Sampler` over an already loaded model (batched, seeded); `sampling_params` are defaults."""
    from gapo.sampling import Sampler, SamplingParams, TransformersBackend

    return Sampler(TransformersBackend(model, tokenizer), SamplingParams(**sampling_params))


def load_generate(name: str, adapter: str | None = None, **sampling_params: Any) -> Generate:
    """Load a model ("embedded", a hub id or a directory; `adapter` = a PEFT adapter directory such as GAPO's) as a
    `gapo.sampling.Sampler` (`gapo.sampling.make_sampler`: transformers backend unless `backend=` says otherwise)."""
    from gapo.sampling import make_sampler

    return make_sampler(name, adapter=adapter, **sampling_params)


# --------------------------------------------------------------------------------------------------------------------
# Outputs: Table 2 and metrics/benchmarks.json
# --------------------------------------------------------------------------------------------------------------------

#: Table 2 of the paper (Qwen2.5-32B-Instruct, temperature 0.7, mean of 5 runs).
PAPER_TABLE2: dict[str, dict[str, float]] = {
    "paper_qwen2.5-32b_baseline": {
        "gsm8k/exact": 0.835, "gsm8k/flexible": 0.865, "math/verify": 0.484, "math/exact_match": 0.524,
        "humaneval/pass@1": 0.555, "mmlu_pro/exact_match": 0.675,
    },
    "paper_qwen2.5-32b_gapo": {
        "gsm8k/exact": 0.772, "gsm8k/flexible": 0.905, "math/verify": 0.499, "math/exact_match": 0.502,
        "humaneval/pass@1": 0.579, "mmlu_pro/exact_match": 0.656,
    },
}  # fmt: skip

#: Table 2's columns, in order.
TABLE2_COLUMNS: tuple[str, ...] = tuple(
    f"{b}/{m}" for b in ("gsm8k", "math", "humaneval", "mmlu_pro") for m in METRICS[b]
)


def table2_rows(results: Mapping[str, Mapping[str, Any]], include_paper: bool = True) -> list[dict[str, Any]]:
    """One row per model: ``model``, then ``<benchmark>/<metric>`` and ``..._std`` and ``<benchmark>/n``; blank
    where a benchmark was not run. The paper's rows (means only) follow when `include_paper`."""
    rows = []
    for model, benches in results.items():
        row: dict[str, Any] = {"model": model}
        for column in TABLE2_COLUMNS:
            bench, metric = column.split("/", 1)
            summary = benches.get(bench, {})
            value = summary.get("metrics", {}).get(metric)
            row[column] = "" if value is None else round(value["mean"], 4)
            row[f"{column}_std"] = "" if value is None else round(value["std"], 4)
        for bench in ("gsm8k", "math", "humaneval", "mmlu_pro"):
            row[f"{bench}/n"] = benches.get(bench, {}).get("n", "")
        rows.append(row)
    if include_paper:
        for model, values in PAPER_TABLE2.items():
            row = {"model": model}
            for column in TABLE2_COLUMNS:
                row[column], row[f"{column}_std"] = values[column], ""
            row.update({"gsm8k/n": 200, "math/n": 210, "humaneval/n": 164, "mmlu_pro/n": 196})
            rows.append(row)
    return rows


def benchmarks_metrics(results: Mapping[str, Mapping[str, Any]], settings: BenchmarkSettings | None = None) -> dict:
    """The metrics/benchmarks.json document:

        {"models": {"baseline": {"gsm8k": {"exact": .., "exact_std": .., "flexible": .., "flexible_std": .., "n": ..},
                                 "math": {...}, ...},
                    "gapo": {...}},
         "details": {model: {benchmark: {"per_run": {metric: [...]}, "source", "note", "num_fewshot", "malformed"}}},
         "settings": {...}}

    Only numbers under "models" (DVC reads it as metrics); skipped benchmarks appear under "details" with the reason.
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
                values[f"{metric}_std"] = stats["std"]
            values["n"] = summary["n"]
            models[model][bench] = values
            details[model][bench] = {
                "per_run": {m: s["per_run"] for m, s in summary["metrics"].items()},
                **{k: summary[k] for k in ("runs", "num_fewshot", "source", "note", "malformed")},
            }
    doc: dict[str, Any] = {"models": models, "details": details}
    if settings is not None:
        doc["settings"] = asdict(settings)
    return doc


def write_benchmark_outputs(
    results: Mapping[str, Mapping[str, Any]],
    csv_path: str | Path = "figures/table2_benchmarks.csv",
    json_path: str | Path = "metrics/benchmarks.json",
    settings: BenchmarkSettings | None = None,
    include_paper: bool = True,
) -> None:
    """Write Table 2 (CSV, our models then the paper's rows) and metrics/benchmarks.json for `results`
    (``{model: evaluate_model(...)}``, e.g. keys "baseline" and "gapo")."""
    rows = table2_rows(results, include_paper)
    csv_path, json_path = Path(csv_path), Path(json_path)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    fieldnames = ["model"] + [c for col in TABLE2_COLUMNS for c in (col, f"{col}_std")]
    fieldnames += ["gsm8k/n", "math/n", "humaneval/n", "mmlu_pro/n"]
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    json_path.write_text(json.dumps(benchmarks_metrics(results, settings), indent=2, default=str) + "\n")


def write_records(records: list[dict[str, Any]], path: str | Path) -> None:
    """Per-sample completions and scores as JSON lines (for reading what the models wrote)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


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
    """``creativity(model, temperature)`` = `gapo.experiments.creativity`'s mean pairwise embedding distance on the
    creative prompts (Table 1's metric), sampling that model at that temperature; kwargs go to it (n, num_prompts,
    max_new_tokens, seed, encoder)."""

    def creativity(model: str, temperature: float) -> float:
        from gapo.experiments import creativity as run_creativity

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
    """Figure 7's data: rows ``{model, temperature, math/verify, math/verify_std, math/exact_match,
    math/exact_match_std, math/n, math/source, creativity}`` for every model and temperature (0.5..1.3).

    MATH accuracy comes from this runner (the settings' size, runs, seed and few-shot; the temperature is swept);
    creativity is ``creativity(model, temperature)``, by default `experiments_creativity(generates,
    **creativity_kwargs)`: the mean pairwise embedding distance on the creative prompts. The MATH subset is loaded
    once.
    """
    settings = settings or BenchmarkSettings()
    creativity = creativity or experiments_creativity(generates, **creativity_kwargs)
    data = load_benchmark("math", settings.sizes.get("math"), settings.source)  # type: ignore[arg-type]
    rows = []
    for model, generate in generates.items():
        for temperature in temperatures:
            run_settings = BenchmarkSettings(**{**asdict(settings), "temperature": float(temperature)})
            summary, _ = evaluate_benchmark(generate, data, run_settings)
            row: dict[str, Any] = {"model": model, "temperature": float(temperature)}
            for metric, stats in summary["metrics"].items():
                row[f"math/{metric}"] = stats["mean"]
                row[f"math/{metric}_std"] = stats["std"]
            row["math/n"] = summary["n"]
            row["math/source"] = summary["source"]
            row["creativity"] = float(creativity(model, float(temperature)))
            rows.append(row)
    return rows


def write_figure7_data(rows: list[dict[str, Any]], path: str | Path = "figures/fig7_creativity_coherence.csv") -> None:
    """The data behind Figure 7, as CSV (or JSON when `path` ends in .json)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        path.write_text(json.dumps(rows, indent=2) + "\n")
        return
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["model", "temperature"])
        writer.writeheader()
        writer.writerows(rows)
