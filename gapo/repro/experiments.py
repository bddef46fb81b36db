"""The paper's evaluations as functions: sample with any `Sampler`, reduce with `gapo.metrics`, return tidy tables.

Why this shape: notebooks (one per figure) and DVC stages call these with their parameters and plot the returned
DataFrames; producing numbers and plotting them stay separate. Every size (samples, lists, prompts) is a parameter,
so tests run the same code end to end on `tiny-random` with tiny N.

Each function returns an `ExperimentResult`: named tidy tables (one row per observation), a flat `summary` of
headline numbers and the `config` that produced them; `write_json` stores all three atomically.

| function            | paper                     | headline summary key          |
|---------------------|---------------------------|-------------------------------|
| `bias_case_study`   | section 2, Figure 2       | top_share/<part>/<variant>    |
| `uniformity`        | 6.1, Figures 4 and 8      | mean_jsd                      |
| `open_set`          | 6.2, Figures 5 and 9      | mean_unique_at_n, mean_valid_unique_at_n |
| `creativity`        | 6.3, Table 1              | mean_embedding_distance, mean_one_minus_self_bleu (+ CIs), encoder |
| `haiku_map`         | 6.3, Figure 6 (openTSNE)  | -                             |
| `valid_unique`      | issue 13, open categories | mean_valid_unique_at_n        |
| `target_jsd`        | issue 13, target lists    | mean_jsd                      |

Answers are matched to list items after `normalize_answer` (case, spacing, edge punctuation), so "mars." counts as
"Mars"; anything else, and a completion without ``<answer>...</answer>``, is invalid (the paper's NV). Small base
models often answer a bare "Mars" without the tags, so `uniformity` also reports ``*_lenient`` numbers
(`parse_item`), and `bias_case_study` takes ``lenient=True``. The ``score_*`` functions re-score saved samples.
"""

from __future__ import annotations

import json
import math
import random
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gapo.equivalence import Equivalence, equivalence_from_spec, match_item
from gapo.io import atomic_open
from gapo.metrics import (
    INVALID,
    coverage,
    first_item_share,
    jsd_from_uniform,
    jsd_to_target,
    jsd_valid_from_uniform,
    normalize_answer,
    top_share,
)
from gapo.repro import prompts as ep
from gapo.repro.sampling import Sampler
from gapo.repro.scores import (
    Interval,
    cosine_distance_to_others,
    mean_pairwise_cosine_distance,
    sentence_self_bleu,
    stratified_bootstrap,
    unique_curve,
)
from gapo.rewards import extract_answer
from gapo.tasks.open_ended import (
    OPEN_HELDOUT_CATEGORIES,
    OPEN_QUESTIONS,
    VALIDITY_UNCHECKED,
    LexiconValidity,
    UncheckedValidity,
    open_eval_prompts,
    open_validity,
)


@dataclass
class ExperimentResult:
    """Tables, headline numbers and the settings of one experiment run."""

    name: str
    tables: dict[str, pd.DataFrame]
    summary: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tables as lists of records (NaN becomes null)."""
        return {
            "name": self.name,
            "summary": self.summary,
            "config": self.config,
            "tables": {
                key: json.loads(df.to_json(orient="records", force_ascii=False)) for key, df in self.tables.items()
            },
        }

    def write_json(self, path: str | Path) -> Path:
        """Write `to_dict()` atomically (temp file + rename)."""
        with atomic_open(path) as f:
            json.dump(self.to_dict(), f, ensure_ascii=False, indent=1, default=_json_default)
        return Path(path)


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, (tuple, set)):
        return list(value)
    return str(value)


def _finish(result: ExperimentResult, out: str | Path | None) -> ExperimentResult:
    if out is not None:
        result.write_json(out)
    return result


def _overrides(seed: int, response_prefix: str | None, **extra: Any) -> dict[str, Any]:
    """Sampler overrides: the seed always; the prefix only when given (None keeps the sampler's own)."""
    overrides: dict[str, Any] = {"seed": seed, **extra}
    if response_prefix is not None:
        overrides["response_prefix"] = response_prefix
    return overrides


def _check_n(n: int) -> None:
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"the number of samples must be a positive integer, got {n!r}")


def _take(mapping: Mapping[str, Any], limit: int | None) -> dict[str, Any]:
    if limit is not None and limit <= 0:
        raise ValueError(f"the number of lists/prompts must be positive, got {limit}")
    if not mapping:
        raise ValueError("no lists/prompts given")
    return dict(list(mapping.items())[:limit])


def parse_item(text: str, items: Sequence[str], lenient: bool = False) -> str | None:
    """The list item a completion picks: its ``<answer>`` content matched with `match_item`.

    Strict (the default, like the training reward): no ``<answer>...</answer>``, no item. Lenient: a completion
    without the tags counts when the *whole* completion names an item ("Lily", "Earth."); "selected_item: Paris"
    still does not. Small base models often drop the tags, so we report both (``jsd`` and ``jsd_lenient``).
    """
    answer = extract_answer(text)
    if answer is None and lenient:
        answer = text
    return match_item(answer, items)


# --------------------------------------------------------------------------------------------------------------------
# Section 2: bias case study
# --------------------------------------------------------------------------------------------------------------------


def bias_case_study(
    sampler: Sampler,
    n: int = 100,
    items: Sequence[str] = ep.BIAS_ITEMS,
    variants: Mapping[str, str] = ep.BIAS_VARIANTS,
    shuffled_variant: str = "variant_2",
    lenient: bool = False,
    seed: int = 0,
    response_prefix: str | None = None,
    out: str | Path | None = None,
) -> ExperimentResult:
    """Figure 2: item and position bias when picking from a list of countries.

    (a) ``fixed``: the same list under each instruction variant, `n` samples each.
    (b) ``shuffled``: `n` prompts with the `shuffled_variant` instruction, the list reshuffled for each prompt
        (one sample each), recording the chosen item and its 1-based position in the list shown.

    Answers are parsed with `parse_item` (strict unless `lenient`).

    Tables: ``samples`` (one row per sample), ``items`` (count and share per part, variant, item incl. NV),
    ``positions`` (count and share per position in the shuffled part, incl. invalid as position 0), ``top``
    (largest and second-largest valid items per part and variant); see `score_bias`.
    """
    _check_n(n)
    items = list(items)
    if not items:
        raise ValueError("the bias case study needs a non-empty item list")
    if shuffled_variant not in variants:
        raise ValueError(f"shuffled_variant {shuffled_variant!r} is not one of {list(variants)}")
    rows: list[dict[str, Any]] = []
    fixed_prompts = [ep.user_message(ep.list_prompt(items, instruction)) for instruction in variants.values()]
    fixed = sampler(fixed_prompts, n, **_overrides(seed, response_prefix))
    for name, completions in zip(variants, fixed, strict=True):
        for i, text in enumerate(completions):
            rows.append(_bias_row("fixed", name, i, text, items, lenient))
    rng = random.Random(seed)
    orders = [rng.sample(items, len(items)) for _ in range(n)]
    shuffled_prompts = [ep.user_message(ep.list_prompt(order, variants[shuffled_variant])) for order in orders]
    shuffled = sampler(shuffled_prompts, 1, **_overrides(seed + 1, response_prefix))
    for i, (order, completions) in enumerate(zip(orders, shuffled, strict=True)):
        rows.append(_bias_row("shuffled", shuffled_variant, i, completions[0], order, lenient))
    tables, summary = score_bias(pd.DataFrame(rows), items)
    config = {
        "n": n,
        "items": items,
        "variants": dict(variants),
        "shuffled_variant": shuffled_variant,
        "lenient": lenient,
        "seed": seed,
        "response_prefix": response_prefix,
        "sampling": _params_of(sampler),
    }
    return _finish(ExperimentResult("bias_case_study", tables, summary, config), out)


def score_bias(samples: pd.DataFrame, items: Sequence[str]) -> tuple[dict[str, pd.DataFrame], dict[str, float]]:
    """Tables and summary of `bias_case_study` from its ``samples`` table.

    ``top`` holds, per part and variant, the most and second most chosen *valid* items with their shares (the
    bars Figure 2 annotates). Summary: ``top_share/<part>/<variant>`` (largest share of one valid item),
    ``invalid_share/<part>/<variant>`` and ``first_position_share/shuffled``.
    """
    items = list(items)
    item_table = _share_table(samples, ["part", "variant"], "item", [*items, INVALID])
    shuffled = samples[samples["part"] == "shuffled"]
    positions = _share_table(shuffled, ["part", "variant"], "position", list(range(len(items) + 1)))
    summary: dict[str, float] = {}
    top_rows = []
    for (part, variant), group in item_table.groupby(["part", "variant"], sort=False):
        ranked = group[group["item"] != INVALID].sort_values("count", ascending=False, kind="stable")
        first, second = ranked.iloc[0], ranked.iloc[1] if len(ranked) > 1 else None
        top_rows.append(
            {
                "part": part,
                "variant": variant,
                "top_item": first["item"],
                "top_share": float(first["share"]),
                "second_item": second["item"] if second is not None else None,
                "second_share": float(second["share"]) if second is not None else 0.0,
                "invalid_share": float(group.loc[group["item"] == INVALID, "share"].sum()),
            }
        )
        summary[f"top_share/{part}/{variant}"] = float(first["share"])
        summary[f"invalid_share/{part}/{variant}"] = top_rows[-1]["invalid_share"]
    first_position = positions.loc[positions["position"] == 1, "share"]
    summary["first_position_share/shuffled"] = float(first_position.iloc[0]) if len(first_position) else 0.0
    tables = {"samples": samples, "items": item_table, "positions": positions, "top": pd.DataFrame(top_rows)}
    return tables, summary


def _bias_row(part: str, variant: str, index: int, text: str, shown: Sequence[str], lenient: bool) -> dict[str, Any]:
    raw = extract_answer(text)
    item = parse_item(text, shown, lenient)
    return {
        "part": part,
        "variant": variant,
        "sample": index,
        "list": ", ".join(shown),
        "completion": text,
        "answer": raw,
        "item": item if item is not None else INVALID,
        "valid": item is not None,
        "position": shown.index(item) + 1 if item is not None else 0,  # 0 = invalid
    }


def _share_table(samples: pd.DataFrame, keys: list[str], column: str, levels: Sequence[Any]) -> pd.DataFrame:
    """Counts and shares of `column` per `keys` group, with every level present (zero counts included)."""
    rows = []
    for group_key, group in samples.groupby(keys, sort=False):
        counts = group[column].value_counts()
        total = len(group)
        for level in levels:
            count = int(counts.get(level, 0))
            rows.append(
                {
                    **dict(zip(keys, group_key, strict=True)),
                    column: level,
                    "count": count,
                    "share": count / total if total else 0.0,
                }
            )
    return pd.DataFrame(rows, columns=[*keys, column, "count", "share"])


def _params_of(sampler: Sampler) -> dict[str, Any]:
    params = getattr(sampler, "params", None)
    backend = getattr(getattr(sampler, "backend", None), "name", None)
    out = dict(vars(params)) if params is not None else {}
    out["backend"] = backend
    return out


# --------------------------------------------------------------------------------------------------------------------
# Section 6.1: uniformity over fixed lists
# --------------------------------------------------------------------------------------------------------------------


def uniformity(
    sampler: Sampler,
    n: int = 100,
    lists: Mapping[str, Sequence[str]] = ep.UNIFORMITY_LISTS,
    num_lists: int | None = None,
    instruction: str = ep.UNIFORMITY_INSTRUCTION,
    seed: int = 0,
    response_prefix: str | None = None,
    out: str | Path | None = None,
    resamples: int = 1000,
) -> ExperimentResult:
    """Figures 4 and 8: `n` samples per list; distribution incl. invalid (NV), format and distribution apart.

    Tables: ``samples``, ``distribution`` (category, item, count, share; NV last), ``per_list`` (one row per list:
    each metric of `LIST_METRICS` with its 95% bootstrap interval, ``jsd_lenient`` / ``invalid_lenient`` under
    `parse_item`'s lenient rule, ``num_items``, ``n``). Summary: ``mean_<metric>`` with ``_ci_low``/``_ci_high`` for
    each of `LIST_METRICS` (``mean_invalid``, ``mean_jsd``, ``mean_jsd_valid``, ``mean_coverage``,
    ``mean_top_share``), ``mean_jsd_lenient``, ``mean_invalid_lenient``. See `score_uniformity`.
    """
    _check_n(n)
    chosen = _take(lists, num_lists)
    for name, items in chosen.items():
        if len(items) == 0:
            raise ValueError(f"list {name!r} is empty")
    prompts = [ep.user_message(ep.list_prompt(list(items), instruction)) for items in chosen.values()]
    completions = sampler(prompts, n, **_overrides(seed, response_prefix))
    tables, summary = score_uniformity(chosen, completions, resamples=resamples, seed=seed)
    config = {
        "n": n,
        "lists": {k: list(v) for k, v in chosen.items()},
        "instruction": instruction,
        "seed": seed,
        "response_prefix": response_prefix,
        "bootstrap": _bootstrap_config(resamples, "list"),
        "sampling": _params_of(sampler),
    }
    return _finish(ExperimentResult("uniformity", tables, summary, config), out)


def invalid_share(answers: Sequence[str | None]) -> float:
    """Share of the answers that are not a list item (None): the format failures, the paper's NV bin."""
    if not answers:
        raise ValueError("no answers: the invalid share is undefined")
    return sum(a is None for a in answers) / len(answers)


#: The per-list metrics of `uniformity`, format and distribution apart (issue 19): each maps the matched answers
#: (None = invalid) and the list to a number. ``jsd`` mixes both (the invalid bin is part of its distribution);
#: ``invalid`` is the format alone; ``jsd_valid`` and ``top_share`` look at the valid answers' distribution.
LIST_METRICS: dict[str, Callable[[Sequence[str | None], Sequence[str]], float]] = {
    "invalid": lambda answers, items: invalid_share(answers),
    "jsd": jsd_from_uniform,
    "jsd_valid": jsd_valid_from_uniform,
    "coverage": coverage,
    "top_share": top_share,
    "first_item_share": first_item_share,
}
#: Where every one of `LIST_METRICS` lies (shares, and JSD in bits): their intervals are clipped to it.
LIST_METRIC_RANGE = (0.0, 1.0)


def score_uniformity(
    lists: Mapping[str, Sequence[str]],
    completions: Sequence[Sequence[str]],
    resamples: int = 1000,
    seed: int = 0,
) -> tuple[dict[str, pd.DataFrame], dict[str, float]]:
    """Tables and summary of `uniformity` from completions already drawn (``completions[i]`` for the i-th list).

    Strict parsing gives `LIST_METRICS` and the distribution; lenient parsing (`parse_item`) gives the
    ``*_lenient`` columns. The intervals resample each list's samples `resamples` times (`list_replicates`).
    """
    sample_rows, per_list_rows, dist_rows = [], [], []
    for (name, items), texts in zip(lists.items(), completions, strict=True):
        if len(texts) == 0:
            raise ValueError(f"no completions for list {name!r}")
        matched = [parse_item(t, items) for t in texts]
        lenient = [parse_item(t, items, lenient=True) for t in texts]
        for i, (text, item, loose) in enumerate(zip(texts, matched, lenient, strict=True)):
            sample_rows.append(
                {
                    "category": name,
                    "sample": i,
                    "completion": text,
                    "answer": extract_answer(text),
                    "item": item if item is not None else INVALID,
                    "valid": item is not None,
                    "item_lenient": loose if loose is not None else INVALID,
                }
            )
        per_list_rows.append(
            {
                "category": name,
                **{metric: f(matched, items) for metric, f in LIST_METRICS.items()},
                "jsd_lenient": jsd_from_uniform(lenient, items),
                "invalid_lenient": invalid_share(lenient),
                "num_items": len(dict.fromkeys(items)),
                "n": len(matched),
            }
        )
        for item in [*items, INVALID]:
            count = sum((m if m is not None else INVALID) == item for m in matched)
            dist_rows.append({"category": name, "item": item, "count": count, "share": count / len(matched)})
    samples = pd.DataFrame(sample_rows)
    per_list = pd.DataFrame(per_list_rows)
    summary: dict[str, float] = {}
    for metric, reps in list_replicates(samples, lists, resamples, seed).items():
        _add_intervals(per_list, summary, metric, reps, LIST_METRIC_RANGE)
    summary["mean_jsd_lenient"] = float(per_list["jsd_lenient"].mean())
    summary["mean_invalid_lenient"] = float(per_list["invalid_lenient"].mean())
    tables = {"samples": samples, "distribution": pd.DataFrame(dist_rows), "per_list": per_list}
    return tables, summary


def _matched_by_group(samples: pd.DataFrame, groups: Sequence[str], column: str = "category") -> list[list[Any]]:
    """Each group's matched answers (None where invalid), in sample order, from an experiment's ``samples`` table."""
    by_group = {name: group for name, group in samples.groupby(column, sort=False)}
    return [
        [item if valid else None for item, valid in zip(by_group[g]["item"], by_group[g]["valid"], strict=True)]
        for g in groups
    ]


def list_replicates(
    samples: pd.DataFrame, lists: Mapping[str, Sequence[str]], resamples: int, seed: int
) -> dict[str, np.ndarray]:
    """`LIST_METRICS` of every list on its samples as drawn and on `resamples` bootstrap resamples of them.

    Returns metric -> array (lists, 1 + resamples), column 0 the point estimate. The draws are those of
    `bootstrap_draws` (by list index), so two models sampled on the same lists with the same n share them.
    """
    matched = _matched_by_group(samples, list(lists))
    out: dict[str, np.ndarray] = {m: np.empty((len(lists), resamples + 1)) for m in LIST_METRICS}
    for index, (items, answers) in enumerate(zip(lists.values(), matched, strict=True)):
        for r, draw in enumerate(bootstrap_draws(len(answers), resamples, seed, index)):
            drawn = [answers[i] for i in draw]
            for metric, f in LIST_METRICS.items():
                out[metric][index, r] = f(drawn, items)
    return out


# --------------------------------------------------------------------------------------------------------------------
# Bootstrap over samples: per-group intervals and paired differences between two models
# --------------------------------------------------------------------------------------------------------------------

#: The level of every interval reported (95%).
LEVEL = 0.95


def _bootstrap_config(resamples: int, stratified_by: str) -> dict[str, Any]:
    return {"resamples": resamples, "level": LEVEL, "stratified_by": stratified_by, "draws": "bootstrap_draws"}


def bootstrap_draws(n: int, resamples: int, seed: int, group: int) -> np.ndarray:
    """Sample indices ``(1 + resamples, n)``: row 0 every sample once (the point estimate), then `resamples` draws
    with replacement, seeded by (`seed`, `group`).

    Why seeded by the group's index and not by the model: two models sampled on the same prompts with the same n and
    seed get the same draws, so the difference of their resampled statistics is a *paired* bootstrap (`compare`).
    """
    if resamples < 1:
        raise ValueError(f"resamples must be positive, got {resamples}")
    rng = np.random.default_rng([seed, group])
    return np.concatenate([np.arange(n)[None, :], rng.integers(0, n, size=(resamples, n))])


def interval(
    replicates: np.ndarray, level: float = LEVEL, bounds: tuple[float, float] = (-math.inf, math.inf)
) -> Interval:
    """Point estimate (column 0) and a `level` interval from the spread of the resampled statistic (columns 1:),
    centred on the estimate: ``[estimate - (median - q_low), estimate + (q_high - median)]``, clipped to `bounds`
    (the metric's range: centred, a JSD near 0 could get a lower end below 0; a paired difference has none).

    Why centred: JSD, coverage, top share and distinct counts of a resample are biased (a resample repeats some
    samples and drops others, so it covers fewer items and looks less uniform). The plain percentile interval then
    misses the estimate (coverage 0.80 with [0.74, 0.78]), and Efron's bias-corrected percentiles collapse to a point
    when every resample lies on one side. The centred interval says how much the metric moves with which samples were
    drawn. NaN resamples are left out (``jsd_valid`` of a resample without a valid answer).
    """
    estimate = float(replicates[0])
    rest = replicates[1:][~np.isnan(replicates[1:])]
    if len(rest) == 0 or math.isnan(estimate):
        return Interval(estimate, math.nan, math.nan)
    low, median, high = np.percentile(rest, [50.0 * (1.0 - level), 50.0, 50.0 * (1.0 + level)])
    floor, ceiling = bounds
    return Interval(
        estimate,
        float(min(max(estimate - (median - low), floor), ceiling)),
        float(max(min(estimate + (high - median), ceiling), floor)),
    )


def _group_mean(replicates: np.ndarray) -> np.ndarray:
    """The mean over groups (rows) of each resample, groups with NaN left out; (1 + R,)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample where every group is NaN gives NaN
        return np.nanmean(replicates, axis=0)


def _add_intervals(
    table: pd.DataFrame, summary: dict[str, Any], metric: str, replicates: np.ndarray, bounds: tuple[float, float]
) -> None:
    """``metric_ci_low/high`` columns in `table` (one row per group) and ``mean_metric`` with its interval, each
    clipped to the metric's `bounds`."""
    per_group = [interval(row, bounds=bounds) for row in replicates]
    table[f"{metric}_ci_low"] = [i.low for i in per_group]
    table[f"{metric}_ci_high"] = [i.high for i in per_group]
    overall = interval(_group_mean(replicates), bounds=bounds)
    summary[f"mean_{metric}"] = overall.estimate
    summary[f"mean_{metric}_ci_low"] = overall.low
    summary[f"mean_{metric}_ci_high"] = overall.high


# --------------------------------------------------------------------------------------------------------------------
# Section 6.2: open-set questions
# --------------------------------------------------------------------------------------------------------------------


def open_set(
    sampler: Sampler,
    n: int = 500,
    prompts: Mapping[str, str] = ep.OPEN_SET_PROMPTS,
    num_prompts: int | None = None,
    answer_format: bool = True,
    seed: int = 0,
    response_prefix: str | None = None,
    equivalence: Equivalence | str | None = None,
    out: str | Path | None = None,
) -> ExperimentResult:
    """Figures 5 and 9: `n` samples per open question; cumulative distinct answers, unique@n and valid-unique@n.

    Answers are the ``<answer>`` contents; classes are those of `equivalence` (default: normalised text), the
    partition the open-ended reward pays for. A completion without an answer adds nothing. Valid-unique counts only
    answers that belong to the category: the prompt's name is looked up in `gapo.tasks.open_ended.open_validity` (a
    lexicon from a well-kept package: cities, countries, chemical elements, colours, ...); a category without one
    is reported as "validity unchecked" and its valid-unique is NaN, never a count of unchecked answers.

    Tables: ``samples`` (answer, normalized, valid), ``curves`` (category, k, unique, valid_unique), ``per_prompt``
    (rule, unique_at_n, valid_unique_at_n, answer_rate, valid_rate). Summary: ``mean_unique_at_n`` (the paper's
    Unique@500 when n = 500), ``mean_answer_rate``, and over the checked categories only
    ``mean_valid_unique_at_n``, ``mean_valid_rate`` and ``checked_categories``.
    """
    _check_n(n)
    chosen = _take(prompts, num_prompts)
    same = equivalence_from_spec(equivalence)
    chat = [ep.user_message(ep.open_prompt(q, answer_format)) for q in chosen.values()]
    completions = sampler(chat, n, **_overrides(seed, response_prefix))
    sample_rows, curve_rows, per_prompt_rows = [], [], []
    for name, texts in zip(chosen, completions, strict=True):
        check = _category_validity(name)
        answers = [extract_answer(t) for t in texts]
        valid = [a is not None and check(a) if check.checked else None for a in answers]
        curve = unique_curve(answers, same)
        valid_curve = unique_curve(answers, same, check) if check.checked else [math.nan] * len(answers)
        sample_rows.extend(
            {"category": name, "sample": i, "completion": t, "answer": a, "normalized": normalize_answer(a), "valid": v}
            for i, (t, a, v) in enumerate(zip(texts, answers, valid, strict=True))
        )
        curve_rows.extend(
            {"category": name, "k": k + 1, "unique": u, "valid_unique": vu}
            for k, (u, vu) in enumerate(zip(curve, valid_curve, strict=True))
        )
        per_prompt_rows.append(
            {
                "category": name,
                "rule": check.source,
                "unique_at_n": curve[-1],
                "valid_unique_at_n": valid_curve[-1],
                "n": len(answers),
                "answer_rate": sum(normalize_answer(a) is not None for a in answers) / len(answers),
                "valid_rate": sum(valid) / len(answers) if check.checked else math.nan,
            }
        )
    per_prompt = pd.DataFrame(per_prompt_rows)
    checked = per_prompt[per_prompt["rule"] != VALIDITY_UNCHECKED]
    summary = {
        "mean_unique_at_n": float(per_prompt["unique_at_n"].mean()),
        "mean_answer_rate": float(per_prompt["answer_rate"].mean()),
        "mean_valid_unique_at_n": float(checked["valid_unique_at_n"].mean()) if len(checked) else math.nan,
        "mean_valid_rate": float(checked["valid_rate"].mean()) if len(checked) else math.nan,
        "checked_categories": list(checked["category"]),
    }
    config = {
        "n": n,
        "prompts": dict(chosen),
        "answer_format": answer_format,
        "equivalence": same.name,
        "seed": seed,
        "response_prefix": response_prefix,
        "sampling": _params_of(sampler),
    }
    tables = {"samples": pd.DataFrame(sample_rows), "curves": pd.DataFrame(curve_rows), "per_prompt": per_prompt}
    return _finish(ExperimentResult("open_set", tables, summary, config), out)


def _category_validity(name: str) -> LexiconValidity | UncheckedValidity:
    """The validity rule of an open-set prompt named after its category; "validity unchecked" without a lexicon."""
    return open_validity(name) if name in OPEN_QUESTIONS else UncheckedValidity(name)


# --------------------------------------------------------------------------------------------------------------------
# Section 6.3: creativity
# --------------------------------------------------------------------------------------------------------------------


def creativity(
    sampler: Sampler,
    n: int = 100,
    prompts: Mapping[str, str] = ep.CREATIVE_PROMPTS,
    num_prompts: int | None = None,
    encoder: str | None = None,
    max_new_tokens: int = 256,
    seed: int = 0,
    out: str | Path | None = None,
    resamples: int = 2000,
) -> ExperimentResult:
    """Table 1: `n` outputs per creative prompt; mean pairwise cosine distance of their embeddings (semantic) and
    1 - Self-BLEU (lexical), each with a 95% bootstrap interval. No answer prefix is pre-filled here, whatever the
    sampler's default. `encoder` defaults to MPNet, the paper's (`gapo.embeddings.CREATIVITY_ENCODER`).

    Each output gets its scores once: its mean cosine distance to the other outputs of its prompt, and 1 - its
    sentence BLEU against them; their means are the two metrics. The intervals resample outputs within each prompt
    `resamples` times (`gapo.repro.scores.stratified_bootstrap`, seeded by `seed`), for the mean over prompts and
    for each prompt.

    Tables: ``samples`` (with each output's two scores), ``per_prompt`` (embedding_distance, one_minus_self_bleu,
    each with ``_ci_low``/``_ci_high``, mean_words). Summary: ``mean_embedding_distance``,
    ``mean_one_minus_self_bleu``, each with ``_ci_low``/``_ci_high``, and ``encoder``. Needs n >= 2.
    """
    from gapo.embeddings import CREATIVITY_ENCODER, embed

    _check_n(n)
    if n < 2:
        raise ValueError("creativity metrics compare outputs pairwise: n must be at least 2")
    encoder = encoder or CREATIVITY_ENCODER
    chosen = _take(prompts, num_prompts)
    chat = [ep.user_message(q) for q in chosen.values()]
    completions = sampler(chat, n, seed=seed, response_prefix=None, max_new_tokens=max_new_tokens)
    scores: dict[str, list[list[float]]] = {"embedding_distance": [], "one_minus_self_bleu": []}
    sample_rows = []
    for (name, _), texts in zip(chosen.items(), completions, strict=True):
        distances = cosine_distance_to_others(embed(texts, name=encoder)).tolist()
        lexical = [1.0 - b for b in sentence_self_bleu(texts)]
        scores["embedding_distance"].append(distances)
        scores["one_minus_self_bleu"].append(lexical)
        sample_rows.extend(
            {"task": name, "sample": i, "completion": t, "embedding_distance": d, "one_minus_self_bleu": b}
            for i, (t, d, b) in enumerate(zip(texts, distances, lexical, strict=True))
        )
    per_prompt = pd.DataFrame(
        {
            "task": list(chosen),
            "prompt": list(chosen.values()),
            "mean_words": [float(np.mean([len(t.split()) for t in texts])) for texts in completions],
            "n": [len(texts) for texts in completions],
        }
    )
    summary: dict[str, Any] = {}
    for metric, groups in scores.items():
        overall, per_group = stratified_bootstrap(groups, resamples=resamples, seed=seed)
        for suffix, attr in (("", "estimate"), ("_ci_low", "low"), ("_ci_high", "high")):
            per_prompt[metric + suffix] = [getattr(interval, attr) for interval in per_group]
            summary[f"mean_{metric}{suffix}"] = getattr(overall, attr)
    metrics = [f"{m}{suffix}" for m in scores for suffix in ("", "_ci_low", "_ci_high")]
    per_prompt = per_prompt[["task", "prompt", *metrics, "mean_words", "n"]]
    summary["encoder"] = encoder
    config = {
        "n": n,
        "prompts": dict(chosen),
        "encoder": encoder,
        "max_new_tokens": max_new_tokens,
        "seed": seed,
        "bootstrap": {"resamples": resamples, "level": 0.95, "stratified_by": "prompt"},
        "sampling": _params_of(sampler),
    }
    tables = {"samples": pd.DataFrame(sample_rows), "per_prompt": per_prompt}
    return _finish(ExperimentResult("creativity", tables, summary, config), out)


def haiku_map(
    samplers: Mapping[str, Sampler],
    n: int = 1500,
    prompt: str = ep.HAIKU_PROMPT,
    encoder: str | None = None,
    perplexity: float = 30.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    out: str | Path | None = None,
) -> ExperimentResult:
    """Figure 6: `n` haikus per model, embedded and projected together to 2-D with openTSNE.

    Table ``points``: model, sample, completion, x, y, and ``text_id`` (identical texts share an id, for colouring
    duplicates as in the figure's bottom panel). Summary: per-model mean pairwise embedding distance and the
    number of distinct texts. openTSNE is in the ``notebooks`` extra; perplexity is capped for small n.
    """
    try:
        from openTSNE import TSNE
    except ImportError as err:
        raise ImportError("haiku_map needs openTSNE: pip install 'gapo[notebooks]'") from err
    from gapo.embeddings import DEFAULT_ENCODER, embed

    _check_n(n)
    if not samplers:
        raise ValueError("haiku_map needs at least one sampler")
    encoder = encoder or DEFAULT_ENCODER
    rows: list[dict[str, Any]] = []
    summary: dict[str, float] = {}
    vectors = []
    for name, sampler in samplers.items():
        texts = sampler([ep.user_message(prompt)], n, seed=seed, response_prefix=None, max_new_tokens=max_new_tokens)[0]
        v = embed(texts, name=encoder)
        vectors.append(v)
        if len(texts) >= 2:
            summary[f"{name}/embedding_distance"] = mean_pairwise_cosine_distance(v)
        summary[f"{name}/distinct_texts"] = float(len(set(texts)))
        rows.extend({"model": name, "sample": i, "completion": t} for i, t in enumerate(texts))
    points = pd.DataFrame(rows)
    all_vectors = np.concatenate(vectors).astype(np.float64)
    if len(all_vectors) >= 4:
        effective = float(min(perplexity, max(1.0, (len(all_vectors) - 1) / 3.0)))
        embedding = TSNE(
            n_components=2, perplexity=effective, metric="cosine", random_state=seed, n_jobs=1, verbose=False
        ).fit(all_vectors)
        xy = np.asarray(embedding)
    else:
        xy = np.zeros((len(all_vectors), 2))
    points["x"], points["y"] = xy[:, 0], xy[:, 1]
    points["text_id"] = points["completion"].map({t: i for i, t in enumerate(dict.fromkeys(points["completion"]))})
    config = {
        "n": n,
        "prompt": prompt,
        "encoder": encoder,
        "perplexity": perplexity,
        "seed": seed,
        "models": list(samplers),
    }
    return _finish(ExperimentResult("haiku_map", {"points": points}, summary, config), out)


# --------------------------------------------------------------------------------------------------------------------
# Issue 13: valid-unique@n on open categories, and JSD to a stated target distribution
# --------------------------------------------------------------------------------------------------------------------


def valid_unique(
    sampler: Sampler,
    n: int = 500,
    categories: Sequence[str] = OPEN_HELDOUT_CATEGORIES,
    equivalence: Equivalence | str | None = None,
    seed: int = 0,
    response_prefix: str | None = None,
    out: str | Path | None = None,
) -> ExperimentResult:
    """`open_set` on the open categories' own questions (`gapo.tasks.open_ended.open_eval_prompts`): valid-unique@n.

    Same tables and summary as `open_set` (``per_prompt`` is named ``per_category`` here), result name
    ``valid_unique``. Every category must be an open category; one without a lexicon reports NaN ("validity
    unchecked").
    """
    result = open_set(
        sampler,
        n,
        prompts=open_eval_prompts(categories),
        seed=seed,
        response_prefix=response_prefix,
        equivalence=equivalence,
    )
    tables = dict(result.tables)
    tables["per_category"] = tables.pop("per_prompt")
    curves = tables["curves"]
    tables["curves"] = curves[["category", "k", "valid_unique"]]
    return _finish(ExperimentResult("valid_unique", tables, result.summary, result.config), out)


def target_jsd(
    sampler: Sampler,
    rows: Sequence[Mapping[str, Any]],
    n: int = 100,
    seed: int = 0,
    response_prefix: str | None = None,
    out: str | Path | None = None,
) -> ExperimentResult:
    """JSD between each list's answer distribution and the target its prompt states (`gapo.metrics.jsd_to_target`).

    `rows` are target prompts (``prompt``, ``items``, ``category``, ``target``), e.g.
    `gapo.repro.prompts.unseen_target_rows`.
    Answers are matched strictly, as the training reward does (`parse_item`); an invalid answer lands in the NV bin,
    whose target is 0. Tables: ``samples``, ``per_list`` (items, target, share, jsd, invalid_rate). Summary:
    ``mean_jsd``, ``mean_invalid_rate``.
    """
    _check_n(n)
    if not rows:
        raise ValueError("target_jsd needs at least one target row (e.g. gapo.repro.prompts.unseen_target_rows)")
    completions = sampler([list(r["prompt"]) for r in rows], n, **_overrides(seed, response_prefix))
    sample_rows, per_list_rows = [], []
    for index, (row, texts) in enumerate(zip(rows, completions, strict=True)):
        items, target = list(row["items"]), list(row["target"])
        matched = [parse_item(t, items) for t in texts]
        sample_rows.extend(
            {"list": index, "sample": i, "completion": t, "item": m if m is not None else INVALID}
            for i, (t, m) in enumerate(zip(texts, matched, strict=True))
        )
        per_list_rows.append(
            {
                "list": index,
                "category": row.get("category"),
                "items": items,
                "target": target,
                "share": [sum(m == item for m in matched) / len(texts) for item in items],
                "jsd": jsd_to_target(matched, items, target),
                "invalid_rate": invalid_share(matched),
                "n": len(texts),
            }
        )
    per_list = pd.DataFrame(per_list_rows)
    summary = {"mean_jsd": float(per_list["jsd"].mean()), "mean_invalid_rate": float(per_list["invalid_rate"].mean())}
    config = {"n": n, "num_lists": len(rows), "seed": seed, "response_prefix": response_prefix}
    config["sampling"] = _params_of(sampler)
    tables = {"samples": pd.DataFrame(sample_rows), "per_list": per_list}
    return _finish(ExperimentResult("target_jsd", tables, summary, config), out)


# --------------------------------------------------------------------------------------------------------------------
# Two models on the same prompts and seeds: paired differences (`gapo eval --compare`)
# --------------------------------------------------------------------------------------------------------------------


def _open_replicates(result: ExperimentResult, resamples: int, seed: int) -> dict[str, np.ndarray]:
    """Unique@n and valid-unique@n of each question on its answers as drawn and on resamples (`bootstrap_draws`).

    A resample repeats some answers and drops others, so its distinct count is lower than the point estimate: the
    resampled values serve differences between two models (same draws), not an interval of one model's count.
    """
    samples, same = result.tables["samples"], equivalence_from_spec(result.config.get("equivalence"))
    prompts = list(result.config["prompts"])
    out = {m: np.full((len(prompts), resamples + 1), np.nan) for m in ("unique_at_n", "valid_unique_at_n")}
    for index, name in enumerate(prompts):
        rows = samples[samples["category"] == name]
        answers, check = list(rows["answer"]), _category_validity(name)
        for r, draw in enumerate(bootstrap_draws(len(answers), resamples, seed, index)):
            drawn = [answers[i] for i in draw]
            out["unique_at_n"][index, r] = unique_curve(drawn, same)[-1]
            if check.checked:
                out["valid_unique_at_n"][index, r] = unique_curve(drawn, same, check)[-1]
    return out


def _creativity_replicates(result: ExperimentResult, resamples: int, seed: int) -> dict[str, np.ndarray]:
    """Each prompt's mean per-output score (embedding distance, 1 - Self-BLEU) on its outputs and on resamples."""
    samples, tasks = result.tables["samples"], list(result.config["prompts"])
    out = {m: np.empty((len(tasks), resamples + 1)) for m in ("embedding_distance", "one_minus_self_bleu")}
    for index, task in enumerate(tasks):
        rows = samples[samples["task"] == task]
        draws = bootstrap_draws(len(rows), resamples, seed, index)
        for metric, reps in out.items():
            reps[index] = rows[metric].to_numpy(dtype=np.float64)[draws].mean(axis=1)
    return out


def replicates_of(result: ExperimentResult, resamples: int = 1000, seed: int = 0) -> dict[str, np.ndarray]:
    """metric -> (groups, 1 + resamples) of a `uniformity`, `open_set` or `creativity` result, from its samples."""
    if result.name == "uniformity":
        return list_replicates(result.tables["samples"], result.config["lists"], resamples, seed)
    if result.name == "open_set":
        return _open_replicates(result, resamples, seed)
    if result.name == "creativity":
        return _creativity_replicates(result, resamples, seed)
    raise ValueError(f"no paired comparison for experiment {result.name!r}")


def compare(
    base: ExperimentResult,
    other: ExperimentResult,
    resamples: int = 1000,
    seed: int = 0,
    subsets: Mapping[str, tuple[str, Sequence[int]]] | None = None,
) -> dict[str, float]:
    """``other`` minus ``base`` for each mean metric, with a paired 95% bootstrap interval.

    Both results come from the same experiment on the same prompts, n and seed (`gapo eval --compare`). Each group's
    samples are resampled at the same indices for both models (`bootstrap_draws`), so the interval is that of the
    paired difference. Keys: ``mean_<metric>_diff`` with ``_ci_low``/``_ci_high``, as the benchmarks stage writes
    differences. `subsets` adds metrics over some of the groups, ``name -> (metric, group indices)`` (the open suite's
    Unique@n over the paper's questions alone), read from the same resamples rather than drawn again.
    """
    if base.name != other.name:
        raise ValueError(f"cannot compare a {base.name} result with a {other.name} result")
    mismatch = [k for k in ("n", "seed", "lists", "prompts") if base.config.get(k) != other.config.get(k)]
    if mismatch:
        raise ValueError(f"the two {base.name} runs differ in {mismatch}: a paired difference needs the same prompts")
    a, b = replicates_of(base, resamples, seed), replicates_of(other, resamples, seed)
    for name, (metric, groups) in (subsets or {}).items():
        a[name], b[name] = a[metric][list(groups)], b[metric][list(groups)]
    out: dict[str, float] = {}
    for metric in a:
        diff = interval(_group_mean(b[metric]) - _group_mean(a[metric]))
        out[f"mean_{metric}_diff"] = diff.estimate
        out[f"mean_{metric}_diff_ci_low"] = diff.low
        out[f"mean_{metric}_diff_ci_high"] = diff.high
    return out
