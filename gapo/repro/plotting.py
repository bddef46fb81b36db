"""Plot styling and the paper's figures, drawn from the tidy tables of `gapo.repro.experiments` (notebooks stay thin).

Every function takes tables (pandas DataFrames with the columns named in its docstring) and returns a matplotlib
Figure; `save` writes it. Producing numbers and drawing them stay separate: a figure can be redrawn from the CSV
files in results/ without sampling again.

| function                | paper figure                      |
|-------------------------|-----------------------------------|
| `bias_figure`           | Figure 2 (item and position bias) |
| `distribution_figure`   | Figures 4 and 8 (uniformity)      |
| `unique_curves_figure`  | Figures 5 and 9 (open set)        |
| `tsne_figure`           | Figure 6 (haiku t-SNE)            |
| `coherence_figure`      | Figure 7 (creativity vs MATH)     |
| `valid_unique_figure`   | issue 13: open-ended GAPO         |
| `eval_figure`           | `gapo eval` (lists, open, creativity) |
| `target_jsd_figure`     | issue 13: target distributions    |
| `training_figure`, `loss_figure`, `data_figure` | training curves and the data (no paper figure) |
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from gapo.io import atomic_path

#: Colour families by model-name prefix; variants of a family (e.g. gapo, gapo_7b) get lighter shades.
FAMILIES: tuple[tuple[str, str], ...] = (
    ("gapo", "#c0392b"),
    ("sft", "#e69f00"),
    ("min_p", "#2c7fb8"),
    ("baseline", "#6b6b6b"),
)
NV_LABEL = "NV"
DPI = 150


def use_style() -> None:
    """The house style: seaborn's whitegrid at paper font sizes, no top/right spines."""
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper", font_scale=1.1)
    plt.rcParams.update(
        {
            "figure.dpi": 100,
            "savefig.dpi": DPI,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.titleweight": "bold",
            "legend.frameon": False,
            "svg.hashsalt": "gapo",
        }
    )


def model_colors(names: Sequence[str]) -> dict[str, str]:
    """A stable colour per model name: a family colour by prefix, lighter for each further member of the family."""
    from matplotlib.colors import to_hex, to_rgb

    colors: dict[str, str] = {}
    seen: dict[str, int] = {}
    fallback = iter(plt.get_cmap("tab10").colors[4:])
    for name in names:
        family = next((base for prefix, base in FAMILIES if name.startswith(prefix)), None)
        if family is None:
            colors[name] = to_hex(next(fallback, (0.3, 0.3, 0.3)))
            continue
        k = seen.get(family, 0)
        seen[family] = k + 1
        rgb = np.array(to_rgb(family))
        colors[name] = to_hex(rgb + (1 - rgb) * min(0.6, 0.3 * k))
    return colors


def save(fig: Any, path: str | Path, close: bool = False) -> Path:
    """Write `fig` as PNG atomically, without the (version-dependent) Software tag.

    The figure stays open so that a notebook still shows it; pass ``close=True`` in scripts."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    if close:
        plt.close(fig)
    return Path(path)


def _grid(panels: int, ncols: int, size: tuple[float, float] = (4.2, 3.2)) -> tuple[Any, list[Any]]:
    ncols = max(1, min(ncols, panels))
    nrows = math.ceil(panels / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[panels:]:
        ax.set_visible(False)
    return fig, flat[:panels]


def _letter(ax: Any, i: int, title: str) -> None:
    ax.set_title(f"({chr(ord('a') + i)}) {title}", loc="left", fontsize=10)


def _labels(names: Sequence[str], labels: Mapping[str, str] | None) -> dict[str, str]:
    return {n: (labels or {}).get(n, n) for n in names}


def _grouped_bars(
    ax: Any,
    table: pd.DataFrame,
    x: str,
    hue: str,
    y: str,
    order: Sequence[Any],
    hues: Sequence[str],
    colors: Mapping[str, str],
    labels: Mapping[str, str],
) -> None:
    width = 0.8 / max(1, len(hues))
    xs = np.arange(len(order))
    for j, h in enumerate(hues):
        sub = table[table[hue] == h].set_index(x)[y]
        values = [float(sub.get(level, 0.0)) for level in order]
        ax.bar(xs + (j - (len(hues) - 1) / 2) * width, values, width, color=colors[h], label=labels.get(h, h))
    ax.set_xticks(xs, [str(o) for o in order], rotation=45, ha="right")


# --------------------------------------------------------------------------------------------------------------------
# Data and training
# --------------------------------------------------------------------------------------------------------------------


def data_figure(rows: pd.DataFrame) -> Any:
    """The training set: prompts per category and list lengths. Columns: ``category``, ``num_items``."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    counts = rows["category"].value_counts().sort_index()
    a.bar(counts.index, counts.values, color="#6b6b6b")
    a.tick_params(axis="x", rotation=45)
    _letter(a, 0, "prompts per category")
    lengths = rows["num_items"].value_counts().sort_index()
    b.bar(lengths.index, lengths.values, color="#c0392b")
    b.set_xlabel("items in the list")
    _letter(b, 1, "list lengths")
    fig.tight_layout()
    return fig


def training_figure(metrics: pd.DataFrame) -> Any:
    """GAPO training curves per policy. Columns: ``policy``, ``step`` and any of ``rewards/mean``,
    ``diversity/group_jsd``, ``diversity/valid_fraction``."""
    keys = [k for k in ("rewards/mean", "diversity/group_jsd", "diversity/valid_fraction") if k in metrics]
    fig, axes = _grid(max(1, len(keys)), 3, (4.2, 3.0))
    policies = list(dict.fromkeys(metrics["policy"]))
    colors = dict(zip(policies, plt.get_cmap("tab10").colors, strict=False))
    for i, key in enumerate(keys):
        for policy in policies:
            sub = metrics[metrics["policy"] == policy].dropna(subset=[key])
            axes[i].plot(sub["step"], sub[key], marker=".", color=colors[policy], label=policy)
        axes[i].set_xlabel("step")
        _letter(axes[i], i, key)
    if keys:
        axes[0].legend()
    fig.tight_layout()
    return fig


def loss_figure(losses: pd.DataFrame) -> Any:
    """SFT loss per step. Columns: ``step``, ``loss``."""
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(losses["step"], losses["loss"], color="#e69f00")
    ax.set_xlabel("step")
    ax.set_ylabel("summed item NLL per prompt")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------------------------------
# Figure 2
# --------------------------------------------------------------------------------------------------------------------


def bias_figure(items: pd.DataFrame, positions: pd.DataFrame, item_order: Sequence[str]) -> Any:
    """Figure 2: (a) item shares for each instruction variant on the fixed list, (b) item shares and (c) position
    shares when the list is shuffled for every prompt. Tables of `gapo.repro.experiments.bias_case_study`:
    ``items`` (part, variant, item, share) and ``positions`` (part, variant, position, share; 0 = invalid)."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6), gridspec_kw={"width_ratios": [1.4, 1, 1]})
    order = [*item_order, NV_LABEL]
    fixed = items[items["part"] == "fixed"]
    variants = list(dict.fromkeys(fixed["variant"]))
    palette = dict(zip(variants, ["#2c7fb8", "#c0392b", "#e69f00", "#6b6b6b"], strict=False))
    _grouped_bars(axes[0], fixed, "item", "variant", "share", order, variants, palette, {})
    axes[0].legend(title="instruction")
    _letter(axes[0], 0, "same list, two instructions")
    shuffled = items[items["part"] == "shuffled"]
    axes[1].bar(
        range(len(order)), [float(shuffled.set_index("item")["share"].get(i, 0.0)) for i in order], color="#2c7fb8"
    )
    axes[1].set_xticks(range(len(order)), order, rotation=45, ha="right")
    _letter(axes[1], 1, "shuffled list: items")
    pos = positions.sort_values("position")
    axes[2].bar([NV_LABEL if p == 0 else str(p) for p in pos["position"]], pos["share"], color="#6b6b6b")
    axes[2].set_xlabel("position in the shown list")
    _letter(axes[2], 2, "shuffled list: positions")
    for ax in axes:
        ax.set_ylabel("share of samples")
        ax.set_ylim(0, 1)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------------------------------
# Figures 4 and 8
# --------------------------------------------------------------------------------------------------------------------


def distribution_figure(
    distribution: pd.DataFrame,
    per_list: pd.DataFrame,
    categories: Sequence[str],
    models: Sequence[str],
    labels: Mapping[str, str] | None = None,
    ncols: int = 3,
) -> Any:
    """Figures 4/8: answer shares per item (NV last) for each category, the uniform share dashed, and a last panel
    with the mean JSD from uniform over all lists per model, beside the JSD among valid answers where reported.

    ``distribution``: model, category, item, share (as `uniformity` returns, plus a model column);
    ``per_list``: model, category, jsd, and optionally jsd_valid (format and distribution apart, issue 19).
    """
    labels = _labels(models, labels)
    colors = model_colors(models)
    fig, axes = _grid(len(categories) + 1, ncols, (4.6, 3.4))
    for i, category in enumerate(categories):
        _distribution_panel(axes[i], distribution, category, models, colors, labels)
        _letter(axes[i], i, category)
    _jsd_panel(axes[-1], per_list, models, colors, labels)
    _letter(axes[-1], len(categories), f"all {per_list['category'].nunique()} lists")
    if categories:
        axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def _distribution_panel(
    ax: Any,
    distribution: pd.DataFrame,
    category: str,
    models: Sequence[str],
    colors: Mapping[str, str],
    labels: Mapping[str, str],
) -> None:
    """One list's answer shares per item and model (NV last), the uniform share dashed."""
    sub = distribution[(distribution["category"] == category) & distribution["model"].isin(models)]
    order = list(dict.fromkeys(sub["item"]))
    order = [o for o in order if o != NV_LABEL] + [NV_LABEL]
    _grouped_bars(ax, sub, "item", "model", "share", order, list(models), colors, labels)
    ax.axhline(1 / max(1, len(order) - 1), color="black", linestyle="--", linewidth=0.8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of samples")


def _jsd_panel(
    ax: Any, per_list: pd.DataFrame, models: Sequence[str], colors: Mapping[str, str], labels: Mapping[str, str]
) -> None:
    """Mean JSD over the lists per model; hatched beside it, the JSD among valid answers when `per_list` has it."""
    sub = per_list[per_list["model"].isin(models)]
    metrics = [m for m in ("jsd", "jsd_valid") if m in sub.columns]
    width = 0.8 / len(metrics)
    xs = np.arange(len(models))
    for j, metric in enumerate(metrics):
        means = sub.groupby("model")[metric].mean()
        ax.bar(
            xs + (j - (len(metrics) - 1) / 2) * width,
            [float(means.get(m, np.nan)) for m in models],
            width,
            color=[colors[m] for m in models],
            hatch="//" if metric == "jsd_valid" else None,
            edgecolor="white",
            label="valid answers only" if metric == "jsd_valid" else "with the invalid bin",
        )
    ax.set_xticks(xs, [labels[m] for m in models], rotation=30, ha="right")
    ax.set_ylabel("mean JSD from uniform (lower: better)")
    if len(metrics) > 1:
        ax.legend(fontsize=7)


# --------------------------------------------------------------------------------------------------------------------
# Figures 5 and 9
# --------------------------------------------------------------------------------------------------------------------


def unique_curves_figure(
    curves: pd.DataFrame,
    per_prompt: pd.DataFrame,
    categories: Sequence[str],
    models: Sequence[str],
    labels: Mapping[str, str] | None = None,
    ncols: int = 3,
) -> Any:
    """Figures 5/9: cumulative distinct answers over the samples of each open question, and a last panel with the
    mean number of distinct answers per model over all questions.

    ``curves``: model, category, k, unique; ``per_prompt``: model, category, unique_at_n, n.
    """
    labels = _labels(models, labels)
    colors = model_colors(models)
    fig, axes = _grid(len(categories) + 1, ncols, (4.2, 3.2))
    for i, category in enumerate(categories):
        _curve_panel(axes[i], curves, category, models, colors, labels)
        _letter(axes[i], i, category)
    ax = axes[-1]
    means = per_prompt[per_prompt["model"].isin(models)].groupby("model")["unique_at_n"].mean()
    ax.bar(
        [labels[m] for m in models], [float(means.get(m, np.nan)) for m in models], color=[colors[m] for m in models]
    )
    ax.tick_params(axis="x", rotation=30)
    n = int(per_prompt["n"].max()) if len(per_prompt) else 0
    ax.set_ylabel(f"mean distinct answers in {n} samples")
    for a in axes:
        a.set_ylim(bottom=0)
    _letter(ax, len(categories), f"all {per_prompt['category'].nunique()} questions")
    if categories:
        axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def _curve_panel(
    ax: Any,
    curves: pd.DataFrame,
    category: str,
    models: Sequence[str],
    colors: Mapping[str, str],
    labels: Mapping[str, str],
    valid: bool = False,
) -> None:
    """One open question's discovery curve (distinct answers after k samples) per model; with `valid`, the curve of
    valid answers dashed (where the category has a lexicon)."""
    for model in models:
        sub = curves[(curves["category"] == category) & (curves["model"] == model)]
        ax.plot(sub["k"], sub["unique"], color=colors[model], label=labels[model])
        if valid and sub["valid_unique"].notna().any():
            ax.plot(sub["k"], sub["valid_unique"], color=colors[model], linestyle="--", linewidth=0.9)
    ax.set_xlabel("samples")
    ax.set_ylabel("distinct answers")
    ax.set_ylim(bottom=0)


# --------------------------------------------------------------------------------------------------------------------
# gapo eval: one figure of whatever suites ran
# --------------------------------------------------------------------------------------------------------------------


def eval_figure(
    models: Sequence[str],
    distribution: pd.DataFrame | None = None,
    curves: pd.DataFrame | None = None,
    per_prompt: pd.DataFrame | None = None,
    ncols: int = 4,
) -> Any:
    """`gapo eval`'s figure: each list's answer shares (NV last), then each open question's discovery curve (valid
    answers dashed), then the creativity scores per prompt; a suite that did not run adds no panel.

    ``distribution``: model, category, item, share; ``curves``: model, category, k, unique, valid_unique;
    ``per_prompt``: model, task, embedding_distance, one_minus_self_bleu (creativity).
    """
    labels = _labels(models, None)
    colors = model_colors(models)
    lists = list(dict.fromkeys(distribution["category"])) if distribution is not None else []
    questions = list(dict.fromkeys(curves["category"])) if curves is not None else []
    panels = len(lists) + len(questions) + (2 if per_prompt is not None else 0)
    if panels == 0:
        raise ValueError("eval_figure needs at least one suite's table")
    fig, axes = _grid(panels, ncols, (4.2, 3.2))
    i = 0
    for category in lists:
        _distribution_panel(axes[i], distribution, category, models, colors, labels)  # type: ignore[arg-type]
        _letter(axes[i], i, f"list: {category}")
        i += 1
    for category in questions:
        _curve_panel(axes[i], curves, category, models, colors, labels, valid=True)  # type: ignore[arg-type]
        _letter(axes[i], i, f"open: {category}")
        i += 1
    if per_prompt is not None:
        order = list(dict.fromkeys(per_prompt["task"]))
        for metric in ("embedding_distance", "one_minus_self_bleu"):
            _grouped_bars(axes[i], per_prompt, "task", "model", metric, order, list(models), colors, labels)
            axes[i].set_ylabel(metric.replace("_", " ").replace("one minus", "1 -"))
            _letter(axes[i], i, "creativity")
            i += 1
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------------------------------
# Figure 6
# --------------------------------------------------------------------------------------------------------------------


def tsne_figure(
    points: pd.DataFrame, labels: Mapping[str, str] | None = None, jitter: float = 0.01, seed: int = 0
) -> Any:
    """Figure 6: the haikus of every model in one t-SNE map; (a) coloured by model, (b) identical texts share a colour
    (a little noise spreads duplicates into visible clusters). ``points``: model, x, y, text_id."""
    models = list(dict.fromkeys(points["model"]))
    labels = _labels(models, labels)
    colors = model_colors(models)
    rng = np.random.default_rng(seed)
    span = float(np.ptp(points[["x", "y"]].to_numpy())) if len(points) else 1.0
    noise = rng.normal(0.0, jitter * (span or 1.0), size=(len(points), 2))
    xy = points[["x", "y"]].to_numpy() + noise
    fig, axes = plt.subplots(len(models), 2, figsize=(10, 4.2 * len(models)), squeeze=False)
    for row, model in enumerate(models):
        mask = (points["model"] == model).to_numpy()
        a, b = axes[row]
        a.scatter(xy[~mask, 0], xy[~mask, 1], s=6, color="#d9d9d9", label="other models")
        a.scatter(xy[mask, 0], xy[mask, 1], s=6, color=colors[model], label=labels[model])
        a.legend(fontsize=8, markerscale=2)
        _letter(a, 2 * row, f"{labels[model]}: {mask.sum()} haikus")
        ids = points.loc[mask, "text_id"].to_numpy()
        counts = pd.Series(ids).value_counts()
        repeated = counts[counts > 1].index
        cmap = plt.get_cmap("tab20")
        shade = {t: cmap(i % 20) for i, t in enumerate(repeated)}
        c = [shade.get(t, (0.75, 0.75, 0.75, 1.0)) for t in ids]
        b.scatter(xy[mask, 0], xy[mask, 1], s=6, c=c)
        _letter(b, 2 * row + 1, f"{len(counts)} distinct texts; repeated ones in colour")
        for ax in (a, b):
            ax.set_xticks([])
            ax.set_yticks([])
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------------------------------
# Figure 7
# --------------------------------------------------------------------------------------------------------------------


def coherence_figure(rows: pd.DataFrame, labels: Mapping[str, str] | None = None, accuracy: str = "math/verify") -> Any:
    """Figure 7: MATH accuracy (coherence) against creativity (mean pairwise embedding distance) per model, one point
    per sampling temperature. ``rows``: model, temperature, creativity, `accuracy` and its 95% bootstrap interval
    ``<accuracy>_ci_low`` / ``_ci_high`` (drawn as error bars; ``<accuracy>_std`` is the fallback for older data)."""
    models = list(dict.fromkeys(rows["model"]))
    labels = _labels(models, labels)
    colors = model_colors(models)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for model in models:
        sub = rows[rows["model"] == model].sort_values("temperature")
        if f"{accuracy}_ci_low" in sub and f"{accuracy}_ci_high" in sub:
            low = (sub[accuracy] - sub[f"{accuracy}_ci_low"]).clip(lower=0)
            high = (sub[f"{accuracy}_ci_high"] - sub[accuracy]).clip(lower=0)
            yerr: Any = [low.to_numpy(), high.to_numpy()]
        else:
            yerr = sub.get(f"{accuracy}_std")
        ax.errorbar(
            sub["creativity"], sub[accuracy], yerr=yerr, color=colors[model], marker="o", capsize=2, label=labels[model]
        )
        for _, r in sub.iterrows():
            ax.annotate(
                f"t={r['temperature']:g}",
                (r["creativity"], r[accuracy]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
                color=colors[model],
            )
    ax.set_xlabel("creativity: mean pairwise embedding distance")
    ax.set_ylabel(f"coherence: MATH accuracy ({accuracy.split('/')[-1]}), 95% interval")
    ax.legend()
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------------------------------
# Issue 13: open-ended training and target distributions
# --------------------------------------------------------------------------------------------------------------------


def valid_unique_figure(
    curves: pd.DataFrame, per_category: pd.DataFrame, models: Sequence[str], labels: Mapping[str, str] | None = None
) -> Any:
    """Valid-unique@n on the held-out open categories: the curve per category, and the mean over them per model.

    ``curves``: model, category, k, valid_unique; ``per_category``: model, category, rule, valid_unique_at_n, n.
    Panel titles name each category's validity rule (its lexicon), since the count depends on it.
    """
    categories = list(dict.fromkeys(per_category["category"]))
    fig = unique_curves_figure(
        curves.rename(columns={"valid_unique": "unique"}),
        per_category.rename(columns={"valid_unique_at_n": "unique_at_n"}),
        categories,
        models,
        labels,
        ncols=len(categories) + 1,
    )
    rules = per_category.drop_duplicates("category").set_index("category")["rule"]
    for i, ax in enumerate(fig.axes[: len(categories)]):
        _letter(ax, i, f"{categories[i]} ({str(rules[categories[i]]).split(' (')[0]})")
        ax.set_ylabel("distinct valid answers")
    n = int(per_category["n"].max()) if len(per_category) else 0
    fig.axes[len(categories)].set_ylabel(f"mean valid-unique@{n}")
    _letter(fig.axes[len(categories)], len(categories), f"mean over {len(categories)} held-out categories")
    fig.tight_layout()
    return fig


def target_jsd_figure(
    per_list: pd.DataFrame, models: Sequence[str], labels: Mapping[str, str] | None = None, goal: float | None = 0.1
) -> Any:
    """JSD to the stated target on each unseen list per model, and the first list's shares against its target.

    ``per_list``: model, list, category, items, target, share, jsd (one row per model and list).
    """
    labels = _labels(models, labels)
    colors = model_colors(models)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [2, 1]})
    order = list(dict.fromkeys(per_list["list"]))
    names = per_list.drop_duplicates("list").set_index("list")["category"]
    table = per_list.assign(list=per_list["list"].astype(int))
    _grouped_bars(a, table, "list", "model", "jsd", order, models, colors, labels)
    a.set_xticks(np.arange(len(order)), [f"{i}: {names[i]}" for i in order], rotation=45, ha="right")
    if goal is not None:
        a.axhline(goal, color="black", linestyle="--", linewidth=1, label=f"goal {goal}")
    a.set_ylabel("JSD to the target")
    a.legend(fontsize=8)
    _letter(a, 0, "unseen lists")
    first = per_list[per_list["list"] == order[0]]
    items = list(first["items"].iloc[0])
    xs = np.arange(len(items))
    width = 0.8 / (len(models) + 1)
    b.bar(xs - len(models) * width / 2, list(first["target"].iloc[0]), width, color="black", label="target")
    for j, model in enumerate(models):
        row = first[first["model"] == model]
        if len(row):
            b.bar(
                xs + (j + 1 - len(models) / 2) * width,
                list(row["share"].iloc[0]),
                width,
                color=colors[model],
                label=labels[model],
            )
    b.set_xticks(xs, items, rotation=45, ha="right")
    b.set_ylabel("share of samples")
    b.legend(fontsize=8)
    _letter(b, 1, f"list {order[0]}: {names[order[0]]}")
    fig.tight_layout()
    return fig
