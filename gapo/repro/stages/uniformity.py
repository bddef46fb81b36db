"""Stage `uniformity` (Figures 4 and 8, Table 8): JSD from uniform over unseen lists, and the baselines table.

Each model of `uniformity.models` picks an item ``n`` times from each of the lists (`gapo.repro.experiments.
uniformity`); its metrics document carries each model's whole experiment summary. Table 8 (Appendix G) puts each
`table8_models` entry's mean JSD beside its Unique@n from stage `open_set` (metrics/open_set.json), with the paper's
rows (`gapo.repro.paper.PAPER_TABLE8`) after ours.

The lists are asked as a user asks them: the model writes ``<answer>...</answer>`` itself (`sampling.response_prefix`,
null in the embedded profile, as in the paper). The `prefill_models` are sampled a second time with `prefill` (e.g.
``<answer>``) written for them, and their summaries gain ``<key>_prefilled`` (``mean_jsd_prefilled``, its interval
``mean_jsd_prefilled_ci_low``, ...): the format crutch's effect, reported beside the real setting.

Format and distribution apart (issue 19): every model's summary has ``mean_invalid`` (format), ``mean_jsd`` (both:
the invalid bin is part of its distribution), ``mean_jsd_valid`` and ``mean_top_share`` (the valid answers'
distribution), each with its 95% interval; ``per_list`` (results/uniformity_per_list.csv) has them per list, with
``top_share`` and ``num_items`` for the no-collapse check (top share at most 2/L + 0.05).

Learning told apart from transfer (issue 34): the `heldin_models` are also sampled on `heldin_num_lists` of
`gapo.repro.prompts.HELDIN_LISTS`, lists of the *training* categories that no training row contains, with the same
n and seed. Their summaries go under ``heldin`` (``models/<name>/heldin/mean_jsd_valid``, with intervals), their
tables to results/uniformity_heldin_*.csv: the unseen lists' numbers alone cannot tell a model that learned nothing
from one that learned its training categories and did not carry that to new ones.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from gapo.repro import prompts as ep
from gapo.repro.experiments import uniformity
from gapo.repro.paper import PAPER_TABLE8
from gapo.repro.samplers import Samplers, evaluate_models
from gapo.repro.stages.common import StageResult, labels_of, split_categories, stack

FILES = {
    "distribution": "results/uniformity_distribution.csv",
    "per_list": "results/uniformity_per_list.csv",
    "table8": "figures/table8_baselines.csv",
    "metrics": "metrics/uniformity.json",
    "heldin_distribution": "results/uniformity_heldin_distribution.csv",
    "heldin_per_list": "results/uniformity_heldin_per_list.csv",
}

#: The sample sizes behind the paper's Table 8 rows: samples per list (JSD) and per open question (Unique@500).
PAPER_TABLE8_SAMPLES = {"samples_per_list": 100, "samples_per_question": 500}


def read_open_set(path: str | Path, names: Sequence[str]) -> dict[str, Any]:
    """Stage open_set's metrics document; one line, before any sampling, when it lacks one of `names`."""
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    missing = [m for m in names if m not in document["models"]]
    if missing:
        raise ValueError(f"{path} has no {missing}: add them to open_set.models")
    return document


def table8(
    summaries: Mapping[str, Mapping[str, Any]],
    open_set_doc: Mapping[str, Any],
    names: Sequence[str],
    labels: Mapping[str, str],
    source: str,
    samples_per_list: int,
) -> pd.DataFrame:
    """Table 8: per model of `names`, its mean JSD (`summaries[name]`, uniformity) and mean Unique@n (open set),
    then the paper's rows. ``source`` names this run's rows (e.g. "this run (embedded)")."""
    open_set_n = open_set_doc["settings"]["n"]
    rows = [
        {
            "source": source,
            "model": labels[m],
            "js": summaries[m]["mean_jsd"],
            "unique": open_set_doc["models"][m]["mean_unique"],
            "samples_per_list": samples_per_list,
            "samples_per_question": open_set_n,
        }
        for m in names
    ]
    rows += [
        {"source": "paper (Qwen2.5-7B-Instruct)", "model": row, "js": js, "unique": unique, **PAPER_TABLE8_SAMPLES}
        for row, (js, unique) in PAPER_TABLE8.items()
    ]
    return pd.DataFrame(rows)


def prefilled(P: Mapping[str, Any], raw_dir: str | Path | None) -> dict[str, dict[str, Any]]:
    """The `prefill_models`' uniformity summaries with `prefill` pre-filled ({} when none are named)."""
    cfg = P["uniformity"]
    names = list(cfg.get("prefill_models") or [])
    if not names:
        return {}
    if not cfg.get("prefill"):
        raise ValueError("uniformity.prefill_models needs uniformity.prefill (the pre-filled text, e.g. <answer>)")
    samplers = Samplers(names, P["models"], P["sampling"], seed=cfg["seed"], max_new_tokens=cfg["max_new_tokens"])
    raw = Path(raw_dir) / "prefilled" if raw_dir is not None else None
    results = evaluate_models(
        samplers,
        lambda sampler, out: uniformity(
            sampler, n=cfg["n"], num_lists=cfg["num_lists"], seed=cfg["seed"], response_prefix=cfg["prefill"], out=out
        ),
        raw,
        lambda name, r: f"{name}, {cfg['prefill']} pre-filled: mean JSD from uniform = {r.summary['mean_jsd']:.3f}",
    )
    return {name: r.summary for name, r in results.items()}


def heldin_names(cfg: Mapping[str, Any]) -> list[str]:
    """`heldin_models`, checked before any sampling: each must be one of `models`, and `heldin_num_lists` in range."""
    names = list(cfg.get("heldin_models") or [])
    unknown = [m for m in names if m not in cfg["models"]]
    if unknown:
        raise ValueError(f"uniformity.heldin_models {unknown} are not in uniformity.models {list(cfg['models'])}")
    count = cfg.get("heldin_num_lists", len(ep.HELDIN_LISTS))
    if names and not 1 <= count <= len(ep.HELDIN_LISTS):
        raise ValueError(f"uniformity.heldin_num_lists must be 1..{len(ep.HELDIN_LISTS)}, got {count}")
    return names


def heldin(P: Mapping[str, Any], raw_dir: str | Path | None) -> dict[str, Any]:
    """The `heldin_models`' uniformity results on the held-in lists ({} when none are named)."""
    cfg = P["uniformity"]
    names = heldin_names(cfg)
    if not names:
        return {}
    samplers = Samplers(names, P["models"], P["sampling"], seed=cfg["seed"], max_new_tokens=cfg["max_new_tokens"])
    count = cfg.get("heldin_num_lists", len(ep.HELDIN_LISTS))
    return evaluate_models(
        samplers,
        lambda sampler, out: uniformity(
            sampler, n=cfg["n"], lists=ep.HELDIN_LISTS, num_lists=count, seed=cfg["seed"], out=out
        ),
        Path(raw_dir) / "heldin" if raw_dir is not None else None,
        lambda name, r: f"{name}, held-in lists: mean JSD from uniform = {r.summary['mean_jsd']:.3f}",
    )


def prefilled_key(key: str) -> str:
    """``mean_jsd`` -> ``mean_jsd_prefilled``; an interval bound stays last (``mean_jsd_prefilled_ci_low``), so the
    README finds the interval of the pre-filled metric as of any other."""
    for bound in ("_ci_low", "_ci_high"):
        if key.endswith(bound):
            return f"{key.removesuffix(bound)}_prefilled{bound}"
    return f"{key}_prefilled"


def run(
    P: Mapping[str, Any],
    raw_dir: str | Path | None = "outputs/raw/uniformity",
    open_set_metrics: str | Path = "metrics/open_set.json",
) -> StageResult:
    """JSD from uniform of every model and Table 8; `P` is `stage_params("uniformity", ...)`.

    Raw samples go to ``raw_dir/<model>.json``. Tables: ``distribution`` (answer shares per list, NV included),
    ``per_list`` (one row per model and list), ``table8``. Figure: ``fig4_categories`` (Figure 4's panels),
    ``other_categories`` (Figure 8's), ``models`` (those drawn).
    """
    cfg = P["uniformity"]
    open_set_doc = read_open_set(open_set_metrics, cfg["table8_models"])
    heldin_names(cfg)  # a bad setting is one line before any sampling
    samplers = Samplers(
        cfg["models"], P["models"], P["sampling"], seed=cfg["seed"], max_new_tokens=cfg["max_new_tokens"]
    )
    results = evaluate_models(
        samplers,
        lambda sampler, out: uniformity(sampler, n=cfg["n"], num_lists=cfg["num_lists"], seed=cfg["seed"], out=out),
        raw_dir,
        lambda name, r: f"{name}: mean JSD from uniform = {r.summary['mean_jsd']:.3f}",
    )
    names = list(results)
    labels = labels_of(names, P["models"])
    distribution = stack(results, "distribution", model_first=False)
    per_list = stack(results, "per_list", model_first=False)
    summaries = {name: dict(r.summary) for name, r in results.items()}
    for name, summary in prefilled(P, raw_dir).items():
        summaries[name].update({prefilled_key(key): v for key, v in summary.items()})
    held = heldin(P, raw_dir)
    for name, result in held.items():
        summaries[name]["heldin"] = dict(result.summary)
    metrics = {
        "models": summaries,
        "profile": P["profile"],
        "settings": {"n": cfg["n"], "lists": int(per_list["category"].nunique())},
    }
    tables = {"distribution": distribution, "per_list": per_list}
    if held:
        metrics["settings"]["heldin_lists"] = len(next(iter(held.values())).config["lists"])
        tables["heldin_distribution"] = stack(held, "distribution", model_first=False)
        tables["heldin_per_list"] = stack(held, "per_list", model_first=False)
    table = table8(summaries, open_set_doc, cfg["table8_models"], labels, f"this run ({P['profile']})", cfg["n"])
    fig4, others = split_categories(per_list, cfg["fig4_categories"])
    figure = {"fig4_categories": fig4, "other_categories": others, "models": list(cfg["figure_models"])}
    if held:
        figure["heldin_categories"] = list(dict.fromkeys(tables["heldin_per_list"]["category"]))
        figure["heldin_models"] = [m for m in cfg["figure_models"] if m in held] or list(held)
    tables["table8"] = table
    files = {k: v for k, v in FILES.items() if not k.startswith("heldin_") or k in tables}
    return StageResult(tables, metrics, names, labels, results, figure, files=files)
