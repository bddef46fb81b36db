"""Diversity and uniformity metrics of the paper (sections 6.1-6.3, Table 8), as pure functions.

Why a module of its own: every experiment and notebook reduces samples with these, and the numbers must mean the
same thing everywhere. All functions take plain Python sequences (or an array for embeddings) and return floats
or small immutable values; none loads a model (unless handed an `Equivalence` with an embedding step).

- `jsd_from_uniform`: how far a sampled answer distribution is from uniform over the offered items (6.1, Table 8 JS).
- `jsd_to_target`: like `jsd_from_uniform`, against a target distribution over the items (issue 13).
- `coverage`: share of the offered items sampled at least once.
- `jsd_valid_from_uniform` and `top_share`: the *distribution* apart from the *format* (issue 19): JSD among the
  valid answers only, renormalised over the list, and the share of all samples taken by the most frequent item.
- `advantage_split` and `frequency_spread`: training diagnostics of one group (issue 19): how much of GRPO's
  advantage is the format (valid vs invalid) and how much the valid answers' frequencies, and how unequal those are.

Answers reach these functions already parsed: `gapo.rewards.extract_answer` (exactly one ``<answer>`` pair, else
None: invalid) and, for lists, `gapo.equivalence.match_item`, the matching rule the rewards use too. Unique@n counts
classes of `gapo.equivalence.Equivalence`, the partition the class rewards use.
"""

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
    """Count answers per valid item (exact string match); None and anything else go to the invalid bin.

    Exact, because answers arrive already matched to items (`match_item`, the rule the rewards use).

    >>> answer_distribution(["a", "a", "b", None, "z"], ["a", "b", "c"])
    AnswerDistribution(items=('a', 'b', 'c'), counts=(2, 1, 0), invalid=2)
    """
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

    The target puts 1/L on each of the L distinct valid items and 0 on the invalid bin (the paper's 12.5% each for
    its 8-item lists). 0 means perfectly uniform and always valid; 1 means every answer invalid (disjoint support).
    Example: L = 2 and answers (a, a): P = (1, 0, 0), Q = (1/2, 1/2, 0), M = (3/4, 1/4, 0), so
    JSD = 1/2 * log2(4/3) + 1/2 * (1/2 log2(2/3) + 1/2 log2(2)) = 0.311.
    """
    items = _valid_set(valid_items)
    return jsd_to_target(answers, items, [1.0 / len(items)] * len(items))


def jsd_to_target(
    answers: Sequence[str | None], items: Sequence[str], target: Mapping[str, float | None] | Sequence[float]
) -> float:
    """Base-2 JSD between the answers' distribution over ``items + invalid`` and a target p over the items.

    `target` is as for `gapo.rewards.target_distribution_reward` (a list in item order, or item -> p), checked the
    same way. The invalid bin gets target 0. Example: p = (0.7, 0.3) and answers (a, a, a, b): P = (0.75, 0.25, 0).
    """
    probs = check_target(items, target)
    dist = answer_distribution(answers, items)
    q = np.array([probs[item] for item in dist.items] + [0.0])
    return jensen_shannon(dist.probabilities(), q)


def jsd_valid_from_uniform(answers: Sequence[str | None], valid_items: Sequence[str]) -> float:
    """Base-2 JSD from uniform over the list among the *valid* answers only (invalid ones dropped, the rest
    renormalised); NaN when no answer is valid.

    Why beside `jsd_from_uniform`: that one mixes format (the invalid bin) and distribution. A model that learns only
    to answer in the format lowers it without moving its valid answers towards uniform; this one sees only the latter.
    Example: answers (a, a, None) over [a, b] give P = (1, 0) among valid ones: JSD = 0.311, as for (a, a).
    """
    items = _valid_set(valid_items)
    valid = [a for a in answers if a in set(items)]
    if not valid:
        return float("nan")
    return jsd_from_uniform(valid, items)


def top_share(answers: Sequence[str | None], valid_items: Sequence[str]) -> float:
    """Share of *all* answers (invalid ones in the denominator) taken by the most frequent valid item; in [0, 1].

    The collapse check: a uniform sampler over L items sits near 1/L; a model that says Mercury 65 times in 100 gives
    0.65. Example: (a, a, b, None) over [a, b, c] gives 2/4 = 0.5.
    """
    dist = answer_distribution(answers, valid_items)
    if dist.total == 0:
        raise ValueError("no answers: the top share is undefined")
    return max(dist.counts) / dist.total


def first_item_share(answers: Sequence[str | None], valid_items: Sequence[str]) -> float:
    """Share of the *valid* answers that name the list's first item; NaN when none is valid.

    A position habit shows here: a model that learned to copy the first item of any list scores near 1, a uniform
    sampler 1/L. (The embedded GAPO run of issue 19 answered Mercury, the planets list's first item, 65 times in 100.)
    Example: (a, a, b, None) over [a, b, c] gives 2/3.
    """
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

    `target` is a list of probabilities in the order of `items` (the dataset column form: Arrow stores it well) or
    a mapping item -> probability (None values, as Arrow fills struct columns, count as absent).
    """
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
    valid answers, (m_valid - m) / (s + eps), which is the format signal (valid beats invalid), and a *spread*,
    (r_i - m_valid) / (s + eps), which is the only part that can move the valid answers towards uniform. Returned as
    per-completion means of absolute values, so a step's mean over groups is comparable across group sizes:

        advantage/invalid       mean over the group of |A_i| on invalid completions (0 for valid ones)
        advantage/valid_shift   mean of |m_valid - m| / (s + eps) on valid completions
        advantage/valid_spread  mean of |r_i - m_valid| / (s + eps) on valid completions

    Why: with the paper's reward an invalid answer scores -1 against about 1, so a few invalid answers set s and
    m, and push every valid answer up together (the modal ones most, since they are sampled most); the spread part
    then is a small share. Example: rewards (1, 1, 0.5, -1), valid (T, T, T, F): m = 0.375, s = 0.946, m_valid =
    0.833; invalid 1.453 / 4 = 0.363, valid_shift 3 * 0.484 / 4 = 0.363, valid_spread (0.176 * 2 + 0.352) / 4 = 0.176.
    """
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


def frequency_spread(answers: Sequence[str | None], valid_items: Sequence[str]) -> float:
    """Standard deviation, over the L items of the list, of each item's share of the group's valid answers.

    0 for a group that spreads its valid answers exactly evenly over the list (only possible when L divides them);
    NaN when no answer is valid. It is what the frequency reward feeds on: r_i differ by the f differences only.
    """
    dist = answer_distribution(answers, valid_items)
    valid_total = sum(dist.counts)
    if valid_total == 0:
        return float("nan")
    return float(np.std(np.asarray(dist.counts, dtype=float) / valid_total))


def group_diversity_stats(answers: Sequence[str | None], items: Sequence[str], target: Any = None) -> dict[str, float]:
    """Valid fraction, Jensen-Shannon divergence of one group's answers from uniform over its items (from the
    row's `target` distribution instead, when the dataset carries one), the valid answers' frequency spread
    (`frequency_spread`) and the share of valid answers that name the list's *first* item.

    `answers` are the group's answers matched to `items` as the rewards match them (`gapo.equivalence.match_item`;
    None = invalid), so the metric and the reward never disagree about what is valid. TRL averages a step's values,
    which gives the step's valid fraction (the groups have the same size) and its mean group JSD. The first-item
    share is there because training lists are shuffled: above 1/L it is a position habit, not a preference.
    """
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
    """Log `group_diversity_stats` through a group reward's `log_metric` (a no-op when called outside a trainer)."""
    if log_metric is None:
        return
    for name, value in group_diversity_stats(answers, items, target).items():
        log_metric(name, value)
