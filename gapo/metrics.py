"""Diversity and uniformity metrics of the paper (sections 6.1-6.3, Table 8), as pure functions.

One module because every experiment and notebook reduces samples with these: the numbers must mean the same everywhere.

`jsd_from_uniform` (6.1, Table 8's JS), `jsd_to_target` and `coverage` measure sampled answers against the offered
items; `jsd_valid_from_uniform`, `top_share` and `first_item_share` tell the *distribution* apart from the *format*;
`advantage_split` and `frequency_spread` are training diagnostics of one group, logged by the list rewards;
`zero_std_groups` one of a step's groups, logged by the trainer.

Answers arrive parsed by the rewards' rules: `gapo.rewards.extract_answer` (None: invalid) and, for lists,
`gapo.equivalence.match_item`; Unique@n (`gapo.repro.scores.unique_at`) counts `gapo.equivalence` classes."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gapo.equivalence import match_item as match_item  # re-exported: one matching rule for rewards and metrics
from gapo.equivalence import normalize_answer as normalize_answer  # re-exported: it used to live here

#: Label of the extra bin for answers that are not one of the valid items (the paper's "NV").
INVALID = "NV"


def _valid_set(valid_items: Sequence[str]) -> list[str]:
    """Distinct valid items in first-seen order; an empty list is a caller error."""
    items = list(dict.fromkeys(valid_items))
    if not items:
        raise ValueError("the list of valid items is empty")
    return items


@dataclass(frozen=True)
class AnswerDistribution:
    """Counts of each valid item (in list order) plus the invalid bin."""

    items: tuple[str, ...]
    counts: tuple[int, ...]
    invalid: int

    @property
    def total(self) -> int:
        return sum(self.counts) + self.invalid

    def probabilities(self) -> np.ndarray:
        """Empirical distribution over ``items + [INVALID]`` (length L + 1, sums to 1)."""
        if self.total == 0:
            raise ValueError("no answers: the distribution is undefined")
        return np.array([*self.counts, self.invalid], dtype=float) / self.total

    def as_dict(self) -> dict[str, int]:
        """``{item: count, ..., INVALID: count}`` (an item literally named like INVALID would be merged; avoid it)."""
        return {**dict(zip(self.items, self.counts, strict=True)), INVALID: self.invalid}


def answer_distribution(answers: Sequence[str | None], valid_items: Sequence[str]) -> AnswerDistribution:
    """Count answers per valid item, exactly (they arrive matched by `match_item`); the rest go to the invalid bin.

    >>> answer_distribution(["a", "a", "b", None, "z"], ["a", "b", "c"])
    AnswerDistribution(items=('a', 'b', 'c'), counts=(2, 1, 0), invalid=2)"""
    items = _valid_set(valid_items)
    counter = Counter(answers)
    counts = tuple(counter.get(item, 0) for item in items)
    return AnswerDistribution(tuple(items), counts, len(answers) - sum(counts))


def _kl2(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) in bits, with 0 log 0 = 0 (q > 0 wherever p > 0 is the caller's job)."""
    mask = p > 0
    return float(np.sum(p[mask] * np.log2(p[mask] / q[mask])))


def jensen_shannon(p: np.ndarray, q: np.ndarray) -> float:
    """Base-2 Jensen-Shannon divergence of two distributions on the same support; in [0, 1]."""
    m = 0.5 * (p + q)
    value = 0.5 * _kl2(p, m) + 0.5 * _kl2(q, m)
    return float(min(1.0, max(0.0, value)))  # clip float noise


def jsd_from_uniform(answers: Sequence[str | None], valid_items: Sequence[str]) -> float:
    """Base-2 JSD between the answers' distribution over ``valid items + invalid`` and uniform over the valid items.

    The target puts 1/L on each of the L distinct valid items and 0 on the invalid bin (the paper's 12.5% each for its
    8-item lists). 0 means uniform and always valid; 1 means every answer invalid (disjoint support). Example: L = 2,
    answers (a, a): P = (1, 0, 0), Q = (1/2, 1/2, 0), M = (3/4, 1/4, 0), so
    JSD = 1/2 * log2(4/3) + 1/2 * (1/2 log2(2/3) + 1/2 log2(2)) = 0.311."""
    items = _valid_set(valid_items)
    return jsd_to_target(answers, items, [1.0 / len(items)] * len(items))


def jsd_to_target(
    answers: Sequence[str | None], items: Sequence[str], target: Mapping[str, float | None] | Sequence[float]
) -> float:
    """Base-2 JSD between the answers' distribution over ``items + invalid`` and a target p over the items.

    `target` as in `check_target`; the invalid bin gets target 0. Example: p = (0.7, 0.3) and answers (a, a, a, b):
    P = (0.75, 0.25, 0), Q = (0.7, 0.3, 0)."""
    probs = check_target(items, target)
    dist = answer_distribution(answers, items)
    q = np.array([probs[item] for item in dist.items] + [0.0])
    return jensen_shannon(dist.probabilities(), q)


def jsd_valid_from_uniform(answers: Sequence[str | None], valid_items: Sequence[str]) -> float:
    """Base-2 JSD from uniform over the list among the *valid* answers only, renormalised; NaN when none is valid.

    `jsd_from_uniform` mixes format (the invalid bin) and distribution: a model that learns only the format lowers it
    without moving its valid answers towards uniform; this one sees only the latter. Example: answers (a, a, None) over
    [a, b] give P = (1, 0) among valid ones: JSD = 0.311, as for (a, a)."""
    items = _valid_set(valid_items)
    valid = [a for a in answers if a in set(items)]
    if not valid:
        return float("nan")
    return jsd_from_uniform(valid, items)


def top_share(answers: Sequence[str | None], valid_items: Sequence[str]) -> float:
    """Share of *all* answers (invalid ones in the denominator) taken by the most frequent valid item; in [0, 1].

    The collapse check: a uniform sampler over L items sits near 1/L, a collapsed one near 1. Example: (a, a, b, None)
    over [a, b, c] gives 2/4 = 0.5."""
    dist = answer_distribution(answers, valid_items)
    if dist.total == 0:
        raise ValueError("no answers: the top share is undefined")
    return max(dist.counts) / dist.total


def first_item_share(answers: Sequence[str | None], valid_items: Sequence[str]) -> float:
    """Share of the *valid* answers that name the list's first item; NaN when none is valid.

    Training lists are shuffled, so above 1/L this is a position habit, not a preference: a model that learned to copy
    the first item of any list scores near 1 (issue 19's embedded GAPO run answered Mercury, the planets list's first
    item, 65 times in 100). Example: (a, a, b, None) over [a, b, c] gives 2/3."""
    items = _valid_set(valid_items)
    valid = [a for a in answers if a in set(items)]
    if not valid:
        return float("nan")
    return sum(a == items[0] for a in valid) / len(valid)


def coverage(answers: Sequence[str | None], valid_items: Sequence[str]) -> float:
    """Share of the distinct valid items that were answered at least once; in [0, 1]."""
    items = _valid_set(valid_items)
    seen = set(answers)
    return sum(item in seen for item in items) / len(items)


def check_target(items: Sequence[str], target: Mapping[str, float | None] | Sequence[float]) -> dict[str, float]:
    """A target distribution over `items` as ``{item: p}`` (unnamed items get 0), or a one-line error.

    `target` is a list of probabilities in the order of `items` (the dataset column form: Arrow stores it well) or a
    mapping item -> probability (None values, as Arrow fills struct columns, count as absent)."""
    if len(set(items)) != len(items):
        dup = next(item for item in items if list(items).count(item) > 1)
        raise ValueError(f"target distribution: the list has the duplicate item {dup!r}")
    if isinstance(target, Mapping):
        unknown = [k for k, v in target.items() if v is not None and k not in set(items)]
        if unknown:
            raise ValueError(
                f"target names {unknown[0]!r}, which is not in the list {list(items)}; name only the list's items"
            )
        probs = {item: 0.0 if target.get(item) is None else target[item] for item in items}
    else:
        if len(target) != len(items):
            raise ValueError(
                f"target has {len(target)} probabilities for {len(items)} items; give one per item, in list order"
            )
        probs = dict(zip(items, target, strict=True))
    for item, p in probs.items():
        if not isinstance(p, (int, float)) or not math.isfinite(p) or p < 0:
            raise ValueError(f"target probability of {item!r} is {p!r}; probabilities must be finite and >= 0")
    total = sum(probs.values())
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"target distribution sums to {total:g}, not 1; make the probabilities sum to 1")
    return {item: float(p) for item, p in probs.items()}


# --------------------------------------------------------------------------------------------------------------------
# Training metrics of one group: logged by the list rewards through TRL's `log_metric`, once per group
# --------------------------------------------------------------------------------------------------------------------


def advantage_split(rewards: Sequence[float], valid: Sequence[bool], eps: float = 1e-4) -> dict[str, float]:
    """Where one group's GRPO advantage comes from: the answer format, or the valid answers' frequencies.

    GRPO's advantage is A_i = (r_i - m) / (s + eps), m and s the group's mean and (Bessel-corrected) std, as TRL
    computes them with ``scale_rewards="group"``. For a valid answer it splits exactly into a *shift* shared by all
    valid answers, (m_valid - m) / (s + eps), the format signal (valid beats invalid), and a *spread*, (r_i - m_valid)
    / (s + eps), the only part that can move the valid answers towards uniform. Returned as per-completion means of
    absolute values, so a step's mean over groups is comparable across group sizes:

        advantage/invalid       mean over the group of |A_i| on invalid completions (0 for valid ones)
        advantage/valid_shift   mean of |m_valid - m| / (s + eps) on valid completions
        advantage/valid_spread  mean of |r_i - m_valid| / (s + eps) on valid completions

    Why: with the paper's reward an invalid answer scores -1 against about 1, so a few invalid answers set s and m and
    push every valid answer up together (the modal ones most, being sampled most); the spread is then a small share.
    Example: rewards (1, 1, 0.5, -1), valid (T, T, T, F): m = 0.375, s = 0.946, m_valid = 0.833; invalid 1.453 / 4 =
    0.363, valid_shift 3 * 0.484 / 4 = 0.363, valid_spread (0.176 * 2 + 0.352) / 4 = 0.176."""
    if len(rewards) != len(valid):
        raise ValueError(f"{len(rewards)} rewards for {len(valid)} validity flags; give one per completion")
    if not rewards:
        raise ValueError("advantage_split needs a non-empty group")
    r = np.asarray(rewards, dtype=float)
    ok = np.asarray(valid, dtype=bool)
    scale = (float(r.std(ddof=1)) if r.size > 1 else 0.0) + eps
    mean = float(r.mean())
    mean_valid = float(r[ok].mean()) if ok.any() else mean
    size = r.size
    return {
        "advantage/invalid": float(np.abs(r[~ok] - mean).sum() / scale / size),
        "advantage/valid_shift": float(ok.sum() * abs(mean_valid - mean) / scale / size),
        "advantage/valid_spread": float(np.abs(r[ok] - mean_valid).sum() / scale / size),
    }


def zero_std_groups(grouped: Any) -> np.ndarray:
    """Per group (row) of a ``(groups, G)`` array of rewards, whether they are all equal: no advantage to learn from
    (TRL's ``frac_reward_zero_std`` for the weighted sum, which `GAPOTrainer` logs as ``train/frac_zero_std_groups``).

    Relative to the rewards' size, as a float32 std of equal weighted sums is not 0 (0.3 + 1.26875 thirty-two times:
    1.2e-7), and torch.isclose's default atol 1e-8 would count that group as carrying a signal."""
    r = np.asarray(grouped, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] < 2:
        raise ValueError(f"zero_std_groups needs (groups, G) rewards with G >= 2, got shape {r.shape}")
    scale = np.maximum(np.abs(r).max(axis=1), 1.0)
    return r.std(axis=1, ddof=1) <= 1e-6 * scale


def frequency_spread(answers: Sequence[str | None], valid_items: Sequence[str]) -> float:
    """Standard deviation over the L items of each item's share of the group's valid answers: 0 for an exactly even
    spread (only when L divides them), NaN if none is valid; the frequency reward's r_i differ by these shares only."""
    dist = answer_distribution(answers, valid_items)
    valid_total = sum(dist.counts)
    if valid_total == 0:
        return float("nan")
    return float(np.std(np.asarray(dist.counts, dtype=float) / valid_total))


def group_diversity_stats(answers: Sequence[str | None], items: Sequence[str], target: Any = None) -> dict[str, float]:
    """One group's valid fraction, JSD from uniform (or to `target`), `frequency_spread` and `first_item_share`.

    `answers` come matched by `match_item` (None: invalid), as in the rewards. TRL averages a step's values, which gives
    the step's valid fraction (the groups have the same size) and its mean group JSD."""
    jsd = jsd_from_uniform(answers, items) if target is None else jsd_to_target(answers, items, target)
    valid = [a for a in answers if a is not None]
    stats = {"diversity/valid_fraction": len(valid) / len(answers), "diversity/group_jsd": jsd}
    if valid:
        stats["diversity/freq_spread"] = frequency_spread(answers, items)
        stats["diversity/first_item_share"] = first_item_share(answers, items)
    return stats


def log_group_diversity(
    log_metric: Callable[[str, float], None] | None,
    answers: Sequence[str | None],
    items: Sequence[str],
    target: Any = None,
) -> None:
    """Log `group_diversity_stats` through a group reward's `log_metric` (a no-op outside a trainer)."""
    if log_metric is None:
        return
    for name, value in group_diversity_stats(answers, items, target).items():
        log_metric(name, value)
