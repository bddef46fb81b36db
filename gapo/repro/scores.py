"""Scores of an evaluation's samples: Unique@n and its discovery curve, creativity (Self-BLEU, embedding distance), and
bootstrap intervals over them (the paper's sections 6.2-6.3, issue 14).

Why here, in the harness, and not in `gapo.metrics`: training never computes these; they reduce the samples of the
paper's experiments and of `gapo eval`. The distribution metrics that rewards and training diagnostics share (JSD,
coverage, top share) stay in the core's `gapo.metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gapo.equivalence import Equivalence

#: Unique@n's classes when no equivalence is given: normalised text (case, spacing, edge punctuation).
_DEFAULT_EQUIVALENCE = Equivalence()


def unique_curve(
    answers: Sequence[str | None], equivalence: Equivalence | None = None, validity: Callable[[str], bool] | None = None
) -> list[int]:
    """Cumulative number of distinct answer classes after each sample (None / empty answers add nothing).

    Classes are those of `equivalence` (default: normalised text, `gapo.equivalence.Normalized`), computed once over
    all the answers, so the curve counts the classes of one fixed partition and never decreases. With `validity`,
    only answers it accepts count: valid-unique (issue 14); an unchecked category's validity accepts nothing.

    >>> unique_curve(["Paris", "paris.", None, "Rome"])
    [1, 1, 1, 2]
    """
    kept = [a if a is not None and (validity is None or validity(a)) else None for a in answers]
    labels = (equivalence or _DEFAULT_EQUIVALENCE).partition(kept).labels
    seen: set[int] = set()
    curve = []
    for label in labels:
        if label is not None:
            seen.add(label)
        curve.append(len(seen))
    return curve


def unique_at(
    answers: Sequence[str | None],
    n: int,
    equivalence: Equivalence | None = None,
    validity: Callable[[str], bool] | None = None,
) -> int:
    """Distinct answer classes among the first `n` (Unique@n; valid-unique@n with `validity`); needs n answers."""
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if len(answers) < n:
        raise ValueError(f"unique@{n} needs {n} answers, got {len(answers)}")
    return unique_curve(answers[:n], equivalence, validity)[-1]


def self_bleu(texts: Sequence[str]) -> float:
    """Mean sentence BLEU of each text against all the others, in [0, 1] (sacrebleu: 13a tokens, exp smoothing).

    High means the texts repeat each other; the paper reports ``1 - self_bleu`` as lexical diversity.
    Identical texts give 1; texts sharing no words give ~0. Empty texts are scored, never an error.
    """
    from sacrebleu.metrics import BLEU

    if len(texts) < 2:
        raise ValueError(f"self-BLEU needs at least 2 texts, got {len(texts)}")
    bleu = BLEU(effective_order=True)
    scores = []
    for i, text in enumerate(texts):
        refs = [t for j, t in enumerate(texts) if j != i]
        scores.append(bleu.sentence_score(text, refs).score / 100.0)
    return float(min(1.0, max(0.0, sum(scores) / len(scores))))


def mean_pairwise_cosine_distance(embeddings: np.ndarray | Sequence[Sequence[float]]) -> float:
    """Mean of ``1 - cos(e_i, e_j)`` over all pairs i < j; in [0, 2]. Zero vectors are treated as orthogonal."""
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"need an (n >= 2, d) array of embeddings, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    sims = unit @ unit.T  # (n, n)
    n = x.shape[0]
    upper = sims[np.triu_indices(n, k=1)]
    value = float(np.mean(1.0 - upper))
    return float(min(2.0, max(0.0, value))) if math.isfinite(value) else float("nan")


# --- per-sample scores and bootstrap intervals (issue 14: creativity with 95% intervals) ----------------------------


def sentence_self_bleu(texts: Sequence[str]) -> list[float]:
    """Each text's sentence BLEU against all the others, in [0, 1]; their mean is `self_bleu` (before its clip).

    Why per text: a bootstrap over outputs needs one score per output, computed once (`stratified_bootstrap`).
    """
    from sacrebleu.metrics import BLEU

    if len(texts) < 2:
        raise ValueError(f"self-BLEU needs at least 2 texts, got {len(texts)}")
    bleu = BLEU(effective_order=True)
    return [
        bleu.sentence_score(text, [t for j, t in enumerate(texts) if j != i]).score / 100.0
        for i, text in enumerate(texts)
    ]


def cosine_distance_to_others(embeddings: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """Each row's mean ``1 - cos`` to the other rows, shape (n,); their mean is `mean_pairwise_cosine_distance`.

    Every pair is counted once from each side, so averaging these n scores gives the mean over pairs exactly.
    Zero vectors are treated as orthogonal, as there.
    """
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"need an (n >= 2, d) array of embeddings, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    dist = 1.0 - unit @ unit.T  # (n, n)
    np.fill_diagonal(dist, 0.0)
    return np.clip(dist.sum(axis=1) / (x.shape[0] - 1), 0.0, 2.0)


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap percentile interval ``[low, high]``."""

    estimate: float
    low: float
    high: float


def stratified_bootstrap(
    groups: Sequence[Sequence[float]], resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[Interval, list[Interval]]:
    """Percentile bootstrap of the mean over groups of each group's mean score, resampling within each group.

    `groups` holds one list of per-output scores per prompt (`sentence_self_bleu`, `cosine_distance_to_others`).
    Each resample draws every group's outputs with replacement (stratified: the prompts stay fixed, as in the
    experiment), and the interval is the ``(1 - level) / 2`` and ``(1 + level) / 2`` percentiles of the
    resampled statistic. Returns the overall interval and one per group (from the same draws).

    Why resample scores rather than recompute them: the scores are computed once on all the outputs, so this is
    cheap (no re-embedding, no BLEU per resample); it measures how much the mean moves with which outputs were
    drawn, not how each output's score would change against a different set of others.

    >>> overall, per_group = stratified_bootstrap([[0.5, 0.5], [1.0, 1.0]])
    >>> overall
    Interval(estimate=0.75, low=0.75, high=0.75)
    """
    if not groups or any(len(g) == 0 for g in groups):
        raise ValueError("every group needs at least one score")
    if resamples < 1:
        raise ValueError(f"resamples must be positive, got {resamples}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    means = []  # per group: (1 + resamples,), column 0 the point estimate
    for group in groups:
        values = np.asarray(group, dtype=np.float64)
        n = len(values)
        draws = np.concatenate([np.arange(n)[None, :], rng.integers(0, n, size=(resamples, n))])  # (1 + R, n)
        means.append(values[draws].mean(axis=1))
    stacked = np.stack(means)  # (groups, 1 + R)
    tails = 100.0 * np.array([(1.0 - level) / 2.0, (1.0 + level) / 2.0])

    def interval(row: np.ndarray) -> Interval:
        low, high = np.percentile(row[1:], tails)
        return Interval(float(row[0]), float(low), float(high))

    return interval(stacked.mean(axis=0)), [interval(row) for row in stacked]
