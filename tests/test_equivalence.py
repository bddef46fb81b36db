"""The equivalence layer: steps, the partition's properties (hypothesis), caching, the cost bound and bad input."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gapo.equivalence import (
    Classifier,
    EmbeddingClusters,
    Equivalence,
    Exact,
    Normalized,
    equivalence_from_spec,
    match_item,
)

WORDS = ["Paris", "paris.", "PARIS", "New York", "new york", "NYC", "Rome", "rome!", "Oslo", ""]


class CountingEmbedder:
    """Deterministic stand-in for the encoder: texts sharing a first letter point the same way; counts its calls."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, texts):  # noqa: ANN001, ANN204
        self.seen += list(texts)
        return np.array([[math.cos(ord(t[0])), math.sin(ord(t[0]))] if t else [0.0, 0.0] for t in texts])


def _same_class(labels):  # noqa: ANN001, ANN202
    n = len(labels)
    return {(i, j) for i in range(n) for j in range(n) if labels[i] is not None and labels[i] == labels[j]}


# --- steps and partition, by hand ------------------------------------------------------------------------------------


def test_exact_and_normalized_by_hand():
    answers = ["Paris", "paris.", None, "Rome", "", "Paris"]
    exact = Equivalence([Exact()]).partition(answers)
    assert exact.labels == (0, 1, None, 2, None, 0) and exact.representatives == ("Paris", "paris.", "Rome")
    normalized = Equivalence().partition(answers)
    assert normalized.labels == (0, 0, None, 1, None, 0) and normalized.sizes() == [3, 1]


def test_chain_only_merges():
    """Each step merges classes of the one before: adding a step never splits two answers that were together."""
    answers = WORDS * 2
    exact = Equivalence([Exact()]).partition(answers)
    normalized = Equivalence([Exact(), Normalized()]).partition(answers)
    embedded = Equivalence([Exact(), Normalized(), EmbeddingClusters(0.99, embed_fn=CountingEmbedder())])
    merged = embedded.partition(answers)
    assert _same_class(exact.labels) <= _same_class(normalized.labels) <= _same_class(merged.labels)
    # p(aris), n(ew york / nyc), r(ome), o(slo); "new york" < "nyc" stands for its class
    assert merged.representatives == ("paris", "new york", "rome", "oslo")


def test_single_linkage_and_smallest_representative():
    # a~b and b~c (but not a~c) still make one class; the class is represented by its smallest member
    links = {("a", "b"), ("b", "c")}

    def same(texts):  # noqa: ANN001, ANN202
        return [[x == y or (x, y) in links or (y, x) in links for y in texts] for x in texts]

    part = Equivalence([Classifier(same)]).partition(["c", "b", "a", "d"])
    assert part.labels == (0, 0, 0, 1) and part.representatives == ("a", "d")


def test_match_item_is_the_list_rule():
    assert match_item(" mars. ", ["Venus", "Mars"]) == "Mars"
    assert match_item("MOBY-DICK", ["Moby-Dick", "moby-dick"]) == "Moby-Dick"  # first in list order wins
    assert match_item("Mars", []) is None and match_item(None, ["Mars"]) is None and match_item("...", ["..."]) is None


# --- properties -------------------------------------------------------------------------------------------------------

answers_st = st.lists(st.one_of(st.none(), st.sampled_from(WORDS)), min_size=1, max_size=30)


def _chain() -> Equivalence:
    return Equivalence([Normalized(), EmbeddingClusters(0.99, embed_fn=CountingEmbedder())])


@given(answers_st, st.randoms(use_true_random=False))
def test_partition_permutes_with_the_group(answers, rnd):  # noqa: ANN001
    order = list(range(len(answers)))
    rnd.shuffle(order)
    eq = _chain()
    labels = eq.partition(answers).labels
    moved = eq.partition([answers[i] for i in order]).labels
    assert len(moved) == len(answers)
    assert _same_class(moved) == {
        (a, b) for a in range(len(order)) for b in range(len(order)) if (order[a], order[b]) in _same_class(labels)
    }


@given(answers_st)
def test_labels_are_numbered_by_first_appearance(answers):  # noqa: ANN001
    part = Equivalence().partition(answers)
    firsts = [label for k, label in enumerate(part.labels) if label is not None and label not in part.labels[:k]]
    assert firsts == list(range(part.num_classes)) and sum(part.sizes()) == sum(x is not None for x in part.labels)


# --- caching and the cost bound ------------------------------------------------------------------------------------


def test_embeddings_and_classifier_answers_are_cached():
    embedder = CountingEmbedder()
    eq = Equivalence([Normalized(), EmbeddingClusters(0.9, embed_fn=embedder)])
    eq.partition(["Paris", "Rome"])
    eq.partition(["rome", "Oslo", "paris"])  # only "oslo" is new
    assert sorted(embedder.seen) == ["oslo", "paris", "rome"]
    calls = []

    def same(texts):  # noqa: ANN001, ANN202
        calls.append(tuple(texts))
        return np.eye(len(texts), dtype=bool)

    step = Classifier(same)
    Equivalence([step]).partition(["a", "b"])
    Equivalence([step]).partition(["b", "a", "a"])  # the same set of texts: answered from the cache
    assert calls == [("a", "b")]


def test_a_cache_smaller_than_the_group_still_works():
    eq = Equivalence([EmbeddingClusters(0.99, embed_fn=CountingEmbedder(), cache_size=1)])
    assert eq.partition(["pa", "pb", "q", "r"]).num_classes == 3


def test_max_distinct_bounds_the_quadratic_step():
    eq = Equivalence([Normalized(), EmbeddingClusters(0.9, embed_fn=CountingEmbedder())], max_distinct=3)
    assert eq.partition(["a", "b", "c", "a"]).num_classes == 3
    with pytest.raises(ValueError, match="got 4 distinct answers, more than max_distinct=3"):
        eq.partition(["a", "b", "c", "d"])


def test_pickles_for_worker_processes():
    eq = pickle.loads(pickle.dumps(equivalence_from_spec("normalized+embedding:0.8")))
    assert eq.name == "normalized+embedding" and eq.steps[1].threshold == 0.8


# --- bad input: one line each --------------------------------------------------------------------------------------


@pytest.mark.parametrize("threshold", [0, 0.0, -0.1, 1.01, float("nan"), "0.9", True])
def test_threshold_outside_unit_interval(threshold):  # noqa: ANN001
    with pytest.raises(ValueError, match=r"similarity threshold must be in \(0, 1\]") as err:
        EmbeddingClusters(threshold, embed_fn=CountingEmbedder())
    assert "\n" not in str(err.value)


def test_threshold_one_is_allowed():
    eq = Equivalence([EmbeddingClusters(1.0, embed_fn=CountingEmbedder())])
    assert eq.partition(["pa", "pb", "q"]).num_classes == 2  # identical embeddings (same first letter) merge


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda texts: np.eye(len(texts) + 1), "returned a 4x4 answer for 3 texts; it must return a 3x3 matrix"),
        (lambda texts: [True, False, True], "returned a 3 answer for 3 texts"),
        (lambda texts: np.triu(np.ones((len(texts), len(texts)))), r"non-symmetric matrix \(\[0,1\] != \[1,0\]\)"),
        (lambda texts: [[1, 0], [0]], "must return a 3x3 matrix"),
    ],
)
def test_bad_classifier_answers(answer, message):  # noqa: ANN001
    with pytest.raises(ValueError, match=message) as err:
        Equivalence([Classifier(answer, name="mine")]).partition(["a", "b", "c"])
    assert "'mine'" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("normalised", "unknown equivalence step 'normalised'"),
        ("normalized+embedding:high", "threshold 'high' is not a number"),
        ("embedding:1.5", r"must be in \(0, 1\]"),
        ("exact:1", "unknown equivalence step 'exact:1'"),
    ],
)
def test_bad_specs(spec, message):  # noqa: ANN001
    with pytest.raises(ValueError, match=message):
        equivalence_from_spec(spec)


def test_bad_steps_and_classifier():
    with pytest.raises(ValueError, match="needs a key\\(text\\) or a links\\(texts\\) method"):
        Equivalence(["normalized"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="classifier must be callable"):
        Classifier("same")  # type: ignore[arg-type]


# --- the real encoder (MiniLM, offline): one test ------------------------------------------------------------------


def test_minilm_clusters_spellings_and_keeps_neighbours_apart():
    """Measured similarities (see EmbeddingClusters): spellings of one place >= 0.92, different things <= 0.80."""
    eq = equivalence_from_spec("normalized+embedding:0.9")
    answers = ["Paris", "Paris, France", "New York", "NYC", "new york city", "Tokyo", "spaghetti", "pasta", "red"]
    part = eq.partition(answers)
    assert part.labels == (0, 0, 1, 1, 1, 2, 3, 4, 5)
    assert part.representatives[:2] == ("paris", "new york")
