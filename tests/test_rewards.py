"""The frequency-aware reward on hand-computed cases, and the group-reward properties of STYLE.md (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gapo.equivalence import Classifier, Equivalence, Exact, Normalized
from gapo.rewards import (
    ClassFrequencyReward,
    QualityDiversityReward,
    check_target,
    class_frequency_rewards,
    completion_text,
    diversity_scores,
    extract_answer,
    frequency_aware_rewards,
    frequency_reward,
    group_reward,
    is_group_reward,
    quality_diversity_rewards,
    target_distribution_reward,
    target_distribution_rewards,
    validate_group_rewards,
)

ITEMS = ["a", "b", "c", "d"]


# --- extract_answer ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>Mars</answer>", "Mars"),
        ("  <answer>  Mars \n</answer> trailing", "Mars"),
        ("<answer>a</answer> then <answer>b</answer>", None),  # one answer means one answer (issue 14)
        ("<answer>a</answer> then <answer>b", None),  # two opening tags
        ("<answer>a</answer></answer>", None),  # two closing tags
        ("</answer>a<answer>", None),  # no complete pair
        ("<answer>unfinished", None),
        ("I think <answer>Mars</answer> because it is red", "Mars"),
        ("<answer></answer>", ""),
        ("no tags", None),
        ("", None),
        (None, None),
        ("<answer>multi\nline</answer>", "multi\nline"),
        ("<answer>ünïcødé 🚀</answer>", "ünïcødé 🚀"),
    ],
)
def test_extract_answer(text, expected):  # noqa: ANN001
    assert extract_answer(text) == expected


HACK = "<answer>Topaz</answer><answer>Jade</answer><answer>Garnet</answer><answer>Sapphire"


def test_several_answers_score_minus_one():
    """Issue 14's reward hack: several answers used to be scored on the last complete pair (Garnet)."""
    items = ["Topaz", "Jade", "Garnet", "Sapphire"]
    completions = [HACK, "<answer>Jade</answer>", "<answer>Garnet</answer>", "<answer>Jade</answer>"]
    rewards = frequency_reward(prompts=["pick"] * 4, completions=completions, items=[items] * 4)
    assert rewards[0] == -1.0
    assert rewards[1:] == pytest.approx([1 - (2 / 3 - 1 / 4), 1 - (1 / 3 - 1 / 4), 1 - (2 / 3 - 1 / 4)])
    # with the pre-filled "<answer>", the prefix counts as one of the tags
    prefilled = [{"role": "user", "content": "pick"}, {"role": "assistant", "content": "<answer>"}]
    hack_tail = [{"role": "assistant", "content": HACK.removeprefix("<answer>")}]
    assert frequency_reward(prompts=[prefilled], completions=[hack_tail], items=[items]) == [-1.0]


def test_frequency_reward_matches_like_evaluation():
    """ "mars." and " MARS " name Mars in the reward as in the JSD metric (`match_item`), so one rule decides."""
    completions = [
        "<answer>mars.</answer>",
        "<answer> MARS </answer>",
        "<answer>Venus</answer>",
        "<answer>Marz</answer>",
    ]
    rewards = frequency_reward(prompts=["q"] * 4, completions=completions, items=[["Mars", "Venus"]] * 4)
    assert rewards == pytest.approx([1 - (2 / 3 - 1 / 2), 1 - (2 / 3 - 1 / 2), 1 - (1 / 3 - 1 / 2), -1.0])


def test_completion_text_prepends_prefill():
    prompt = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<answer>"}]
    assert completion_text(prompt, [{"role": "assistant", "content": "Mars</answer>"}]) == "<answer>Mars</answer>"
    assert completion_text([{"role": "user", "content": "q"}], [{"role": "assistant", "content": "x"}]) == "x"
    assert completion_text("plain prompt", " text") == " text"


# --- the formula, by hand ----------------------------------------------------------------------------------------


def test_all_invalid():
    assert frequency_aware_rewards([None, "zzz", "A"], ITEMS) == [-1.0, -1.0, -1.0]


def test_one_valid():
    # f_a = 1/1, L = 4: r = 1 - (1 - 1/4) = 0.25
    assert frequency_aware_rewards(["a", None, "x", None], ITEMS) == [0.25, -1.0, -1.0, -1.0]


def test_full_collapse():
    assert frequency_aware_rewards(["b"] * 8, ITEMS) == [0.25] * 8


def test_perfectly_uniform():
    assert frequency_aware_rewards(["a", "b", "c", "d"] * 2, ITEMS) == [1.0] * 8


def test_worked_example_from_docstring():
    assert frequency_aware_rewards(["a", "a", "a", "b"], ["a", "b"]) == [0.75, 0.75, 0.75, 1.25]


def test_duplicate_valid_items_collapse():
    assert frequency_aware_rewards(["a", "b"], ["a", "b", "a", "b"]) == frequency_aware_rewards(["a", "b"], ["a", "b"])


def test_empty_valid_items_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        frequency_aware_rewards(["a"], [])


# --- properties --------------------------------------------------------------------------------------------------

answers_st = st.lists(st.one_of(st.none(), st.sampled_from(ITEMS + ["e", "junk"])), min_size=1, max_size=40)


@given(answers_st)
def test_length_and_range(answers):  # noqa: ANN001
    rewards = frequency_aware_rewards(answers, ITEMS)
    assert len(rewards) == len(answers)
    for answer, reward in zip(answers, rewards, strict=True):
        if answer in ITEMS:
            assert 1 / len(ITEMS) - 1e-12 <= reward <= 1 + 1 - 1 / len(ITEMS) and reward > -1
        else:
            assert reward == -1.0  # invalid answers get the minimum


@given(answers_st, st.randoms(use_true_random=False))
def test_permutation_equivariant(answers, rnd):  # noqa: ANN001
    order = list(range(len(answers)))
    rnd.shuffle(order)
    rewards = frequency_aware_rewards(answers, ITEMS)
    permuted = frequency_aware_rewards([answers[i] for i in order], ITEMS)
    assert permuted == [rewards[i] for i in order]


@given(answers_st, st.permutations(ITEMS))
def test_renaming_items_changes_nothing(answers, renamed):  # noqa: ANN001
    mapping = dict(zip(ITEMS, [f"item-{x}" for x in renamed], strict=True))
    renamed_answers = [mapping.get(a, a) if a is not None else None for a in answers]
    assert frequency_aware_rewards(renamed_answers, list(mapping.values())) == frequency_aware_rewards(answers, ITEMS)


@given(st.integers(min_value=1, max_value=8), st.integers(min_value=1, max_value=6))
def test_uniform_group_gets_equal_rewards(copies, num_items):  # noqa: ANN001
    items = [f"i{k}" for k in range(num_items)]
    rewards = frequency_aware_rewards(items * copies, items)
    assert all(math.isclose(r, 1.0) for r in rewards)


@given(answers_st)
def test_rarer_valid_answers_earn_more(answers):  # noqa: ANN001
    rewards = dict(zip(answers, frequency_aware_rewards(answers, ITEMS), strict=True))
    for x in ITEMS:
        for y in ITEMS:
            if x in rewards and y in rewards and answers.count(x) < answers.count(y):
                assert rewards[x] > rewards[y]


# --- group-reward plumbing ---------------------------------------------------------------------------------------


def test_frequency_reward_is_a_group_reward_reading_items():
    assert is_group_reward(frequency_reward)
    prompt = [{"role": "user", "content": "pick"}, {"role": "assistant", "content": "<answer>"}]
    completions = [[{"role": "assistant", "content": f"{x}</answer>"}] for x in ["a", "a", "b", "zz"]]
    rewards = frequency_reward(prompts=[prompt] * 4, completions=completions, items=[ITEMS] * 4)
    # valid: a, a, b (3); f_a = 2/3, f_b = 1/3; L = 4
    assert rewards == pytest.approx([1 - (2 / 3 - 0.25), 1 - (2 / 3 - 0.25), 1 - (1 / 3 - 0.25), -1.0])


def test_group_reward_decorator_on_callable_object():
    class Coverage:
        __name__ = "coverage"

        def __call__(self, prompts, completions, **kwargs):  # noqa: ANN001, ANN204
            return [float(len(set(map(str, completions))))] * len(completions)

    reward = group_reward(Coverage())
    assert is_group_reward(reward) and not is_group_reward(lambda **kw: [])


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ([1.0], "returned 1 rewards for a group of 2"),
        ([1.0, float("nan")], "non-finite"),
        ([0.0, math.inf], "non-finite"),
        (None, "must return a list"),
    ],
)
def test_validate_group_rewards_errors(output, message):  # noqa: ANN001
    with pytest.raises(ValueError, match=message):
        validate_group_rewards("mine", output, 2)


# --- target_distribution_reward -----------------------------------------------------------------------------------


def test_target_worked_example():
    # p = (a: 0.75, b: 0.25), answers (a, a, b, b): f = (0.5, 0.5) -> a: 1 - (0.5 - 0.75), b: 1 - (0.5 - 0.25)
    assert target_distribution_rewards(["a", "a", "b", "b"], ["a", "b"], [0.75, 0.25]) == [1.25, 1.25, 0.75, 0.75]
    assert target_distribution_rewards(["a", None, "x"], ["a", "b"], {"a": 0.5, "b": 0.5}) == [0.5, -1.0, -1.0]


def test_target_uniform_is_the_paper_reward():
    answers = ["a", "a", "b", None, "c"]
    assert target_distribution_rewards(answers, ITEMS, [0.25] * 4) == frequency_aware_rewards(answers, ITEMS)


def test_target_reward_reads_columns_and_matches_items():
    completions = ["<answer>heads</answer>", "<answer>Heads.</answer>", "<answer>Tails</answer>", HACK]
    rewards = target_distribution_reward(
        prompts=["q"] * 4, completions=completions, items=[["Heads", "Tails"]] * 4, target=[[0.7, 0.3]] * 4
    )
    assert rewards == pytest.approx([1 - (2 / 3 - 0.7), 1 - (2 / 3 - 0.7), 1 - (1 / 3 - 0.3), -1.0])
    assert is_group_reward(target_distribution_reward) and target_distribution_reward.__name__ == "target_distribution"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ([0.5, 0.4], "sums to 0.9, not 1; make the probabilities sum to 1"),
        ({"a": 0.5, "z": 0.5}, "target names 'z', which is not in the list"),
        ([1.0], "target has 1 probabilities for 2 items"),
        ([1.5, -0.5], "probability of 'b' is -0.5"),
        ([float("nan"), 1.0], "must be finite"),
    ],
)
def test_bad_target_is_one_line(target, message):  # noqa: ANN001
    with pytest.raises(ValueError, match=message) as err:
        target_distribution_rewards(["a"], ["a", "b"], target)
    assert "\n" not in str(err.value)


def test_target_mapping_with_arrow_nones():
    assert check_target(["a", "b"], {"a": 1.0, "b": None, "c": None}) == {"a": 1.0, "b": 0.0}


targets_st = st.lists(st.integers(1, 5), min_size=len(ITEMS), max_size=len(ITEMS)).map(
    lambda w: [x / sum(w) for x in w]
)


@given(answers_st, targets_st, st.randoms(use_true_random=False))
def test_target_permutation_equivariant(answers, target, rnd):  # noqa: ANN001
    order = list(range(len(answers)))
    rnd.shuffle(order)
    rewards = target_distribution_rewards(answers, ITEMS, target)
    assert len(rewards) == len(answers)
    assert target_distribution_rewards([answers[i] for i in order], ITEMS, target) == [rewards[i] for i in order]


@given(answers_st, targets_st, st.permutations(range(len(ITEMS))))
def test_target_renaming_and_reordering_items_changes_nothing(answers, target, perm):  # noqa: ANN001
    mapping = {item: f"new-{item}" for item in ITEMS}
    renamed = [mapping.get(a, a) if a is not None else None for a in answers]
    items = [mapping[ITEMS[k]] for k in perm]  # renamed *and* listed in another order, target following
    moved = [target[k] for k in perm]
    assert target_distribution_rewards(renamed, items, moved) == target_distribution_rewards(answers, ITEMS, target)


@given(st.integers(1, 4), st.lists(st.integers(1, 5), min_size=len(ITEMS), max_size=len(ITEMS)))
def test_group_at_the_target_gets_equal_rewards(scale, weights):  # noqa: ANN001
    target = [w / sum(weights) for w in weights]
    answers = [item for item, w in zip(ITEMS, weights, strict=True) for _ in range(w * scale)]  # f = p exactly
    assert all(math.isclose(r, 1.0) for r in target_distribution_rewards(answers, ITEMS, target))


# --- class_frequency_reward ---------------------------------------------------------------------------------------

NAMES = ["alpha", "beta", "gamma", "delta", "epsilon"]
names_st = st.lists(st.one_of(st.none(), st.sampled_from(NAMES)), min_size=1, max_size=24)


def test_class_frequency_hand_computed():
    # N = 3 valid, L = N: r = 1 - (n_c - 1)/3
    assert class_frequency_rewards([0, 0, 1, None]) == pytest.approx([1 - 1 / 3, 1 - 1 / 3, 1.0, -1.0])
    # known category size L = 2: the paper's formula, a 50/50 split earns 1
    assert class_frequency_rewards([0, 1, 1, 0], num_items=2) == [1.0] * 4
    assert class_frequency_rewards([None, None]) == [-1.0, -1.0]
    with pytest.raises(ValueError, match="num_items must be a positive"):
        class_frequency_rewards([0], num_items=0)


def _texts(answers):  # noqa: ANN001, ANN202
    return [f"<answer>{a}</answer>" if a is not None else "no answer" for a in answers]


@given(
    st.lists(st.one_of(st.none(), st.sampled_from(NAMES)), min_size=1, max_size=24), st.randoms(use_true_random=False)
)
def test_class_frequency_reward_permutes_with_the_group(answers, rnd):  # noqa: ANN001
    reward = ClassFrequencyReward(Equivalence([Normalized()]))
    order = list(range(len(answers)))
    rnd.shuffle(order)
    texts = _texts(answers)
    rewards = reward(prompts=["q"] * len(texts), completions=texts)
    assert len(rewards) == len(answers)
    assert reward(prompts=["q"] * len(texts), completions=[texts[i] for i in order]) == [rewards[i] for i in order]


@given(names_st, st.permutations(NAMES))
def test_class_frequency_reward_renaming_classes_changes_nothing(answers, renamed):  # noqa: ANN001
    reward = ClassFrequencyReward()
    mapping = dict(zip(NAMES, [f"{x.upper()}-x" for x in renamed], strict=True))
    texts, moved = _texts(answers), _texts([mapping.get(a) if a else None for a in answers])
    assert reward(prompts=["q"] * len(texts), completions=moved) == reward(
        prompts=["q"] * len(texts), completions=texts
    )


def test_class_frequency_reward_validity_and_hack():
    is_planet = {"mars", "venus"}.__contains__
    reward = ClassFrequencyReward("normalized", validity=lambda a: is_planet(a.lower()))
    completions = ["<answer>Mars</answer>", "<answer>mars</answer>", "<answer>Pluto</answer>", HACK]
    assert reward(prompts=["q"] * 4, completions=completions) == pytest.approx([0.5, 0.5, -1.0, -1.0])
    assert is_group_reward(reward) and reward.__name__ == "class_frequency"


def test_class_frequency_reward_per_category_validity():
    reward = ClassFrequencyReward(validity={"planet": lambda a: a == "Mars", "food": None})
    out = reward(prompts=["q"] * 2, completions=_texts(["Mars", "Pizza"]), category=["planet"] * 2)
    assert out == [1.0, -1.0]
    with pytest.raises(ValueError, match="category 'food' has no validity check \\(validity unchecked\\)"):
        reward(prompts=["q"], completions=_texts(["Pizza"]), category=["food"])
    with pytest.raises(ValueError, match="no 'category' column"):
        reward(prompts=["q"], completions=_texts(["Mars"]))


def test_class_frequency_reward_with_a_classifier():
    """A user classifier merging synonyms makes them one class, so each earns less."""
    synonyms = [{"nyc", "new york"}]

    def same(texts):  # noqa: ANN001, ANN202
        return [[a == b or any({a, b} <= s for s in synonyms) for b in texts] for a in texts]

    reward = ClassFrequencyReward(Equivalence([Normalized(), Classifier(same)]))
    out = reward(prompts=["q"] * 3, completions=_texts(["NYC", "New York", "Paris"]))
    assert out == pytest.approx([1 - 1 / 3, 1 - 1 / 3, 1.0])
    assert ClassFrequencyReward(Equivalence([Exact()]))(prompts=["q"] * 2, completions=_texts(["NYC", "nyc"])) == [1, 1]


# --- quality_diversity_reward -------------------------------------------------------------------------------------


def test_diversity_scores_hand_computed():
    assert diversity_scores([0, 0, 1]) == [0.5, 0.5, 1.0]
    assert diversity_scores([0, None]) == [1.0, None]
    assert diversity_scores([2, 2, 2]) == [0.0, 0.0, 0.0]


def test_quality_diversity_modes():
    quality, labels = [1.0, 0.5, 0.2, 0.9], [0, 0, 1, None]
    # d = (1/2, 1/2, 1, -)
    assert quality_diversity_rewards(quality, labels, "multiplicative") == [0.5, 0.25, 0.2, -1.0]
    assert quality_diversity_rewards(quality, labels, "additive", weight=2.0) == [2.0, 1.5, 2.2, -1.0]
    with pytest.raises(ValueError, match="unknown combine mode 'sum'"):
        quality_diversity_rewards(quality, labels, "sum")  # type: ignore[arg-type]


def _length_quality(prompts, completions, **kwargs):  # noqa: ANN001, ANN202
    return [min(1.0, len(extract_answer(c) or "") / 10) for c in completions]


@given(
    st.lists(st.one_of(st.none(), st.sampled_from(NAMES)), min_size=1, max_size=20),
    st.sampled_from(["multiplicative", "additive"]),
    st.randoms(use_true_random=False),
)
def test_quality_diversity_reward_properties(answers, mode, rnd):  # noqa: ANN001
    reward = QualityDiversityReward(_length_quality, mode=mode)
    texts = _texts(answers)
    order = list(range(len(texts)))
    rnd.shuffle(order)
    rewards = reward(prompts=["q"] * len(texts), completions=texts)
    assert len(rewards) == len(texts)
    assert reward(prompts=["q"] * len(texts), completions=[texts[i] for i in order]) == [rewards[i] for i in order]
    assert all(r == -1.0 for r, a in zip(rewards, answers, strict=True) if a is None)
    # renaming classes one-to-one while keeping each answer's quality (same length) changes nothing
    mapping = {name: name[::-1] for name in NAMES}
    renamed = _texts([mapping[a] if a else None for a in answers])
    assert reward(prompts=["q"] * len(texts), completions=renamed) == rewards


def test_quality_reward_of_the_wrong_length_is_one_line():
    reward = QualityDiversityReward(lambda prompts, completions, **kw: [1.0], mode="additive")
    with pytest.raises(ValueError, match="quality reward '<lambda>' returned 1 values for a group of 2; it must"):
        reward(prompts=["q"] * 2, completions=_texts(["a", "b"]))
    bad = QualityDiversityReward(lambda prompts, completions, **kw: [None, 1.0])
    with pytest.raises(ValueError, match="must return a list of G floats"):
        bad(prompts=["q"] * 2, completions=_texts(["a", "b"]))
    with pytest.raises(ValueError, match="unknown combine mode"):
        QualityDiversityReward(_length_quality, mode="max")  # type: ignore[arg-type]


def test_quality_gets_the_dataset_columns():
    seen = {}

    def quality(prompts, completions, solution, **kwargs):  # noqa: ANN001, ANN202
        seen["solution"] = solution
        return [1.0] * len(completions)

    reward = QualityDiversityReward(quality, name="qd")
    assert reward(prompts=["q"] * 2, completions=_texts(["a", "b"]), solution=["x", "x"]) == [1.0, 1.0]
    assert seen["solution"] == ["x", "x"] and reward.__name__ == "qd" and is_group_reward(reward)


def test_class_rewards_pickle():
    import pickle

    reward = pickle.loads(pickle.dumps(ClassFrequencyReward("normalized+embedding:0.8", num_items=3)))
    assert reward.__name__ == "class_frequency" and reward.equivalence.name == "normalized+embedding"
    assert is_group_reward(reward)
