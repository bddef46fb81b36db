"""Stage `open_set` (Figures 5 and 9, Table 8's Unique@n): distinct answers to open questions as samples accumulate.

Each model of `open_set.models` names an item of an open category (a city, a food, ...) ``n`` times per question
(`gapo.repro.experiments.open_set`). Its metrics document carries each model's whole experiment summary, so keys the
experiment adds flow through, plus ``mean_unique``: the paper's Unique@n over the paper's questions only (what the
uniformity stage's Table 8 reads).

Valid-unique@n (issue 14) counts only answers that belong to the category. Of the paper's ten questions only "city"
has a lexicon, so `checked_categories` adds open categories that have one (`gapo.tasks.open_ended.LEXICON_SOURCES`:
countries, chemical elements, colours, ...), asked with their own first question; ``mean_valid_unique_at_n`` is the
mean over every checked question asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gapo.repro import prompts as ep
from gapo.repro.experiments import open_set
from gapo.repro.samplers import Samplers, evaluate_models
from gapo.repro.stages.common import StageResult, labels_of, split_categories, stack
from gapo.tasks.open_ended import open_eval_prompts

FILES = {
    "curves": "results/open_set_curves.csv",
    "per_prompt": "results/open_set_per_prompt.csv",
    "metrics": "metrics/open_set.json",
}


def asked_questions(num_prompts: int | None, checked_categories: list[str]) -> dict[str, str]:
    """The paper's first `num_prompts` open questions, then one question per extra lexicon-checked category."""
    if num_prompts is not None and num_prompts <= 0:
        raise ValueError(f"open_set.num_prompts must be positive, got {num_prompts}")
    paper = dict(list(ep.OPEN_SET_PROMPTS.items())[:num_prompts])
    extra = open_eval_prompts(checked_categories) if checked_categories else {}
    clash = sorted(set(paper) & set(extra))
    if clash:
        raise ValueError(f"open_set.checked_categories {clash} are already among the paper's questions")
    return {**paper, **extra}


def paper_unique(result: Any, num_prompts: int | None) -> float:
    """Mean Unique@n over the paper's questions only (the extra checked categories are not the paper's)."""
    paper = list(ep.OPEN_SET_PROMPTS)[:num_prompts]
    per_prompt = result.tables["per_prompt"]
    return float(per_prompt[per_prompt["category"].isin(paper)]["unique_at_n"].mean())


def run(P: Mapping[str, Any], raw_dir: str | Path | None = "outputs/raw/open_set") -> StageResult:
    """Unique@n of every model; `P` is `stage_params("open_set", ...)`, raw samples go to ``raw_dir/<model>.json``.

    Tables: ``curves`` (distinct answers after k samples), ``per_prompt`` (one row per model and question).
    Figure: ``fig5_categories`` (Figure 5's panels), ``other_categories`` (Figure 9's), ``models`` (those drawn).
    """
    cfg = P["open_set"]
    samplers = Samplers(
        cfg["models"], P["models"], P["sampling"], seed=cfg["seed"], max_new_tokens=cfg["max_new_tokens"]
    )
    questions = asked_questions(cfg["num_prompts"], cfg.get("checked_categories") or [])
    results = evaluate_models(
        samplers,
        lambda sampler, out: open_set(sampler, n=cfg["n"], prompts=questions, seed=cfg["seed"], out=out),
        raw_dir,
        lambda name, r: f"{name}: mean distinct answers in {cfg['n']} samples = {r.summary['mean_unique_at_n']:.1f}",
    )
    curves, per_prompt = stack(results, "curves", model_first=False), stack(results, "per_prompt", model_first=False)
    metrics = {
        "models": {
            name: {**r.summary, "mean_unique": paper_unique(r, cfg["num_prompts"])} for name, r in results.items()
        },
        "profile": P["profile"],
        "settings": {"n": cfg["n"], "questions": int(per_prompt["category"].nunique())},
    }
    fig5, others = split_categories(per_prompt, cfg["fig5_categories"])
    figure = {"fig5_categories": fig5, "other_categories": others, "models": list(cfg["figure_models"])}
    names = list(results)
    return StageResult(
        {"curves": curves, "per_prompt": per_prompt}, metrics, names, labels_of(names, P["models"]), results, figure,
        files=FILES,
    )  # fmt: skip
