"""Metrics against hand-computed values, and their properties (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gapo.equivalence import EmbeddingClusters, Equivalence, Normalized
from gapo.metrics import (
    INVALID,
    answer_distribution,
    coverage,
    jensen_shannon,
    jsd_from_uniform,
    jsd_to_target,
    jsd_valid_from_uniform,
    match_item,
    normalize_answer,
    top_share,
)
from gapo.repro.experiments import parse_item
from gapo.repro.scores import (
    Interval,
    cosine_distance_to_others,
    mean_pairwise_cosine_distance,
    self_bleu,
    sentence_self_bleu,
    stratified_bootstrap,
    unique_at,
    unique_curve,
)
from gapo.rewards import extract_answer

ITEMS = ["a", "b", "c", "d"]
answers_strategy = st.lists(st.one_of(st.none(), st.sampled_from(ITEMS + ["zz", ""])), min_size=1, max_size=40)


# --- answer_distribution / jsd_from_uniform ------------------------------------------------------------------------


def test_answer_distribution_counts_invalid_bin():
    dist = answer_distribution(["a", "a", "b", None, "z", "A"], ["a", "b", "c"])
    assert dist.counts == (2, 1, 0)
    assert dist.invalid == 3  # None, "z" and "A" (exact match: case differs)
    assert dist.as_dict() == {"a": 2, "b": 1, "c": 0, INVALID: 3}
    np.testing.assert_allclose(dist.probabilities(), [2 / 6, 1 / 6, 0, 3 / 6])


def test_jsd_hand_computed():
    # P = (1, 0, 0), Q = (1/2, 1/2, 0), M = (3/4, 1/4, 0)
    expected = 0.5 * math.log2(4 / 3) + 0.5 * (0.5 * math.log2(2 / 3) + 0.5 * 1.0)
    assert jsd_from_uniform(["a", "a"], ["a", "b"]) == pytest.approx(expected)
    assert expected == pytest.approx(0.3113, abs=1e-4)


def test_jsd_hand_computed_with_invalid():
    # answers (a, None) over {a, b}: P = (1/2, 0, 1/2), Q = (1/2, 1/2, 0), M = (1/2, 1/4, 1/4)
    # KL(P||M) = 1/2 log2(2) = 0.5 ; KL(Q||M) = 1/2 log2(2) = 0.5 -> JSD 0.5
    assert jsd_from_uniform(["a", None], ["a", "b"]) == pytest.approx(0.5)


def test_jsd_extremes():
    assert jsd_from_uniform(["a", "b", "c", "d"] * 5, ITEMS) == pytest.approx(0.0, abs=1e-12)
    assert jsd_from_uniform([None, "x", ""], ITEMS) == pytest.approx(1.0)
    # a point mass on one of 8 valid items: the paper's "collapsed" case
    assert 0.5 < jsd_from_uniform(["a"] * 10, list("abcdefgh")) < 1.0


def test_jsd_bad_input():
    with pytest.raises(ValueError, match="empty"):
        jsd_from_uniform(["a"], [])
    with pytest.raises(ValueError, match="no answers"):
        jsd_from_uniform([], ITEMS)


@given(answers_strategy)
def test_jsd_in_unit_interval(answers):  # noqa: ANN001
    assert 0.0 <= jsd_from_uniform(answers, ITEMS) <= 1.0


# --- jsd_valid_from_uniform / top_share: distribution apart from format ------------------------------------------


def test_jsd_valid_known_values():
    expected = 0.5 * math.log2(4 / 3) + 0.5 * (0.5 * math.log2(2 / 3) + 0.5 * math.log2(2))  # P=(1,0), Q=(1/2,1/2)
    assert jsd_valid_from_uniform(["a", "a", None, "zz"], ["a", "b"]) == pytest.approx(expected)
    # uniform among the valid answers: 0, however many are invalid (jsd_from_uniform is not 0 then)
    answers = ["a", "b", "c", "d"] * 3 + [None] * 30
    assert jsd_valid_from_uniform(answers, ITEMS) == pytest.approx(0.0, abs=1e-12)
    assert jsd_from_uniform(answers, ITEMS) > 0.3
    assert math.isnan(jsd_valid_from_uniform([None, "zz"], ITEMS))


@given(answers_strategy)
def test_jsd_valid_ignores_invalid_answers(answers):  # noqa: ANN001
    valid = [a for a in answers if a in ITEMS]
    value = jsd_valid_from_uniform(answers, ITEMS)
    if not valid:
        assert math.isnan(value)
    else:
        assert value == pytest.approx(jsd_from_uniform(valid, ITEMS))


def test_top_share_known_values():
    assert top_share(["a", "a", "b", None], ["a", "b", "c"]) == pytest.approx(0.5)
    assert top_share(["Mercury"] * 65 + ["Venus"] * 35, ["Mercury", "Venus", "Earth"]) == pytest.approx(0.65)
    assert top_share([None, "zz"], ITEMS) == 0.0
    assert top_share(list("abcd") * 5, ITEMS) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="no answers"):
        top_share([], ITEMS)


@given(answers_strategy)
def test_top_share_bounds(answers):  # noqa: ANN001
    share = top_share(answers, ITEMS)
    valid = sum(a in ITEMS for a in answers)
    assert valid / len(ITEMS) / len(answers) - 1e-12 <= share <= valid / len(answers) + 1e-12


@given(answers_strategy, st.permutations(ITEMS))
def test_jsd_invariant_to_renaming_items(answers, renamed):  # noqa: ANN001
    mapping = dict(zip(ITEMS, [f"item-{x}" for x in renamed], strict=True))
    renamed_answers = [mapping.get(a, a) if a is not None else None for a in answers]
    assert jsd_from_uniform(renamed_answers, list(mapping.values())) == pytest.approx(jsd_from_uniform(answers, ITEMS))


@given(answers_strategy, st.randoms())
def test_jsd_invariant_to_order(answers, rnd):  # noqa: ANN001
    shuffled = list(answers)
    rnd.shuffle(shuffled)
    assert jsd_from_uniform(shuffled, ITEMS) == pytest.approx(jsd_from_uniform(answers, ITEMS))


@given(st.integers(1, 8), st.integers(1, 20))
def test_jsd_zero_for_every_perfectly_uniform_sample(num_items, reps):  # noqa: ANN001
    items = [f"i{k}" for k in range(num_items)]
    assert jsd_from_uniform(items * reps, items) == pytest.approx(0.0, abs=1e-9)


@given(st.lists(st.floats(0, 1), min_size=3, max_size=3), st.lists(st.floats(0, 1), min_size=3, max_size=3))
def test_jensen_shannon_symmetric(p, q):  # noqa: ANN001
    p, q = np.array(p) + 1e-3, np.array(q) + 1e-3
    p, q = p / p.sum(), q / q.sum()
    assert jensen_shannon(p, q) == pytest.approx(jensen_shannon(q, p), abs=1e-12)


# --- coverage -------------------------------------------------------------------------------------------------------


def test_coverage():
    assert coverage(["a", "a", "b", None, "zz"], ITEMS) == 0.5
    assert coverage([], ITEMS) == 0.0
    assert coverage(ITEMS, ITEMS + ["a"]) == 1.0  # duplicates in the list collapse


@given(answers_strategy)
def test_coverage_in_unit_interval(answers):  # noqa: ANN001
    assert 0.0 <= coverage(answers, ITEMS) <= 1.0


# --- normalize_answer / unique_curve --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Paris", "paris"),
        ("  The   Great\nGatsby. ", "the great gatsby"),
        ('"The Great Gatsby"', "the great gatsby"),
        ("**Tokyo**!", "tokyo"),
        ("São Paulo", "são paulo"),
        ("ＴＯＫＹＯ", "tokyo"),  # NFKC folds full-width letters
        ("Moby-Dick", "moby-dick"),  # inner punctuation stays
        ("...", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_answer(raw, expected):  # noqa: ANN001
    assert normalize_answer(raw) == expected


def test_unique_curve_hand_computed():
    assert unique_curve(["Paris", "paris.", None, "Rome", "", " ROME ", "Oslo"]) == [1, 1, 1, 2, 2, 2, 3]
    assert unique_curve([]) == []
    assert unique_at(["a", "b", "a", "c"], 3) == 2
    with pytest.raises(ValueError, match="needs 5 answers"):
        unique_at(["a"], 5)


@given(st.lists(st.one_of(st.none(), st.text(max_size=8)), max_size=30))
def test_unique_curve_properties(answers):  # noqa: ANN001
    curve = unique_curve(answers)
    assert len(curve) == len(answers)
    assert all(b - a in (0, 1) for a, b in zip([0, *curve], curve, strict=False))  # +0 or +1 per sample
    assert (curve[-1] if curve else 0) == len({normalize_answer(a) for a in answers} - {None})


# --- one answer means one answer (issue 14) ------------------------------------------------------------------------

HACK = "<answer>Topaz</answer><answer>Jade</answer><answer>Garnet</answer><answer>Sapphire"
GEMS = ["Topaz", "Jade", "Garnet", "Sapphire"]


def test_several_answers_are_invalid_in_every_metric():
    texts = [HACK, "<answer>Jade</answer>", "<answer>jade.</answer> and <answer>Topaz</answer>"]
    answers = [extract_answer(t) for t in texts]
    assert answers == [None, "Jade", None]
    assert answer_distribution([match_item(a, GEMS) for a in answers], GEMS).invalid == 2
    # the evaluation's parser, strict and lenient (a bare item name), both say invalid
    assert [parse_item(t, GEMS) for t in texts] == [None, "Jade", None]
    assert [parse_item(t, GEMS, lenient=True) for t in texts] == [None, "Jade", None]
    assert unique_curve(answers) == [0, 1, 1]  # unique@n counts no class for them


# --- jsd_to_target --------------------------------------------------------------------------------------------------


def test_jsd_to_target_hand_computed():
    # answers (a, a, a, b), p = (0.75, 0.25): P = Q -> 0
    assert jsd_to_target(["a", "a", "a", "b"], ["a", "b"], [0.75, 0.25]) == pytest.approx(0.0, abs=1e-12)
    # answers (a, b), p = (1, 0): P = (1/2, 1/2, 0), Q = (1, 0, 0), M = (3/4, 1/4, 0)
    expected = 0.5 * (0.5 * math.log2(2 / 3) + 0.5 * math.log2(2)) + 0.5 * math.log2(4 / 3)
    assert jsd_to_target(["a", "b"], ["a", "b"], {"a": 1.0}) == pytest.approx(expected)
    assert jsd_to_target(["a", "b", "a"], ITEMS, [0.25] * 4) == pytest.approx(jsd_from_uniform(["a", "b", "a"], ITEMS))
    with pytest.raises(ValueError, match="sums to 0.5, not 1"):
        jsd_to_target(["a"], ["a", "b"], [0.25, 0.25])
    with pytest.raises(ValueError, match="target names 'z'"):
        jsd_to_target(["a"], ["a", "b"], {"a": 0.5, "z": 0.5})


# --- unique@n on the shared partition -------------------------------------------------------------------------------


def _two_direction_embedder(texts):  # noqa: ANN001, ANN202
    """Texts starting with "new" point one way, everything else another: a stand-in for the encoder."""
    return np.array([[1.0, 0.0] if t.startswith("new") else [0.0, 1.0] for t in texts])


def test_unique_curve_uses_the_equivalence_and_validity():
    answers = ["New York", "new york city", "Paris", None, "Pariss", "Newark"]
    assert unique_curve(answers) == [1, 2, 3, 3, 4, 5]  # normalised text only
    merged = Equivalence([Normalized(), EmbeddingClusters(0.9, embed_fn=_two_direction_embedder)])
    assert unique_curve(answers, merged) == [1, 1, 2, 2, 2, 2]
    is_city = {"new york", "paris", "newark"}.__contains__
    assert unique_curve(answers, validity=lambda a: is_city(a.lower())) == [1, 1, 2, 2, 2, 3]
    assert unique_at(answers, 6, validity=lambda a: False) == 0  # "validity unchecked": nothing counts
    assert unique_at(answers, 3, merged) == 2


# --- self_bleu ------------------------------------------------------------------------------------------------------


def test_self_bleu_extremes():
    same = ["the cat sat on the mat today"] * 4
    assert self_bleu(same) == pytest.approx(1.0)
    disjoint = ["alpha beta gamma delta", "one two three four", "red green blue yellow"]
    assert self_bleu(disjoint) < 0.05
    partly = ["the cat sat on the mat", "the cat sat on the rug", "a dog ran in the park"]
    assert 0.05 < self_bleu(partly) < 1.0


def test_self_bleu_odd_inputs_do_not_crash():
    assert 0.0 <= self_bleu(["", "", "x"]) <= 1.0
    assert 0.0 <= self_bleu(["🚀 ünïcødé \x00", "long " * 2000, "\n\t"]) <= 1.0
    with pytest.raises(ValueError, match="at least 2"):
        self_bleu(["only one"])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(alphabet="abc ", max_size=12), min_size=2, max_size=5))
def test_self_bleu_in_unit_interval(texts):  # noqa: ANN001
    assert 0.0 <= self_bleu(texts) <= 1.0


# --- mean_pairwise_cosine_distance ----------------------------------------------------------------------------------


def test_cosine_distance_hand_computed():
    e = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    # pairs: (0,1) 1, (0,2) 2, (1,2) 1 -> mean 4/3
    assert mean_pairwise_cosine_distance(e) == pytest.approx(4 / 3)
    assert mean_pairwise_cosine_distance([[1, 1], [2, 2]]) == pytest.approx(0.0)
    assert mean_pairwise_cosine_distance([[0, 0], [1, 0]]) == pytest.approx(1.0)  # zero vector: orthogonal
    with pytest.raises(ValueError, match="n >= 2"):
        mean_pairwise_cosine_distance([[1.0, 0.0]])


@given(st.integers(2, 6), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_cosine_distance_properties(n, d, seed):  # noqa: ANN001
    x = np.random.default_rng(seed).normal(size=(n, d))
    value = mean_pairwise_cosine_distance(x)
    assert 0.0 <= value <= 2.0
    assert value == pytest.approx(mean_pairwise_cosine_distance(x[::-1] * 3.0))  # order and scale invariant


# --- per-sample scores and the stratified bootstrap ------------------------------------------------------------------


def test_per_sample_scores_average_to_the_set_metrics():
    texts = ["the cat sat on the mat", "the cat sat on the rug", "a dog ran in the park", ""]
    per_text = sentence_self_bleu(texts)
    assert len(per_text) == 4 and all(0.0 <= b <= 1.0 for b in per_text)
    assert np.mean(per_text) == pytest.approx(self_bleu(texts))
    assert per_text[0] > per_text[2]  # the near-duplicate pair repeats each other more than the odd one out
    e = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    # row 0: (1 + 2) / 2; row 1: (1 + 1) / 2; row 2: (2 + 1) / 2
    np.testing.assert_allclose(cosine_distance_to_others(e), [1.5, 1.0, 1.5])
    with pytest.raises(ValueError, match="at least 2"):
        sentence_self_bleu(["only one"])
    with pytest.raises(ValueError, match="n >= 2"):
        cosine_distance_to_others([[1.0, 0.0]])


@given(st.integers(2, 7), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_cosine_distance_to_others_mean_is_the_pairwise_mean(n, d, seed):  # noqa: ANN001
    x = np.random.default_rng(seed).normal(size=(n, d))
    x[0] *= seed % 2  # sometimes a zero vector
    assert cosine_distance_to_others(x).mean() == pytest.approx(mean_pairwise_cosine_distance(x))


def test_bootstrap_hand_computed():
    # one group (0, 1): resampled means are 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4
    overall, (group,) = stratified_bootstrap([[0.0, 1.0]], resamples=4000, seed=3)
    assert overall == group
    assert (group.estimate, group.low, group.high) == (0.5, 0.0, 1.0)
    # two groups: the statistic is the mean over groups; identical scores give a point interval
    overall, groups = stratified_bootstrap([[0.5, 0.5], [1.0, 1.0, 1.0]])
    assert overall == Interval(0.75, 0.75, 0.75) and groups == [Interval(0.5, 0.5, 0.5), Interval(1.0, 1.0, 1.0)]
    # a wider spread in a group gives a wider interval
    narrow, _ = stratified_bootstrap([[0.4, 0.6] * 10], seed=1)
    wide, _ = stratified_bootstrap([[0.0, 1.0] * 10], seed=1)
    assert wide.high - wide.low > 3 * (narrow.high - narrow.low)


def test_bootstrap_bad_input():
    for groups, kwargs, message in [
        ([], {}, "at least one score"),
        ([[1.0], []], {}, "at least one score"),
        ([[1.0]], {"resamples": 0}, "resamples"),
        ([[1.0]], {"level": 1.0}, "level"),
    ]:
        with pytest.raises(ValueError, match=message):
            stratified_bootstrap(groups, **kwargs)


score_groups = st.lists(st.lists(st.floats(0.0, 2.0, allow_nan=False), min_size=1, max_size=12), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(score_groups, st.integers(0, 2**31 - 1))
def test_bootstrap_properties(groups, seed):  # noqa: ANN001
    overall, per_group = stratified_bootstrap(groups, resamples=400, seed=seed)
    assert len(per_group) == len(groups)
    for interval, group in [(overall, [x for g in groups for x in g]), *zip(per_group, groups, strict=True)]:
        assert interval.low - 1e-12 <= interval.estimate <= interval.high + 1e-12  # contains the point estimate
        assert min(group) - 1e-12 <= interval.low and interval.high <= max(group) + 1e-12
    assert overall.estimate == pytest.approx(np.mean([np.mean(g) for g in groups]))
    assert stratified_bootstrap(groups, resamples=400, seed=seed) == (overall, per_group)  # deterministic


@given(st.floats(0.0, 2.0, allow_nan=False), st.lists(st.integers(1, 20), min_size=1, max_size=4))
def test_bootstrap_identical_scores_give_a_zero_width_interval(value, sizes):  # noqa: ANN001
    overall, per_group = stratified_bootstrap([[value] * size for size in sizes], resamples=200)
    for interval in [overall, *per_group]:
        assert interval.low == interval.estimate == interval.high == pytest.approx(value)
