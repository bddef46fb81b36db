"""The frequency-aware reward on hand-computed cases, and the group-reward properties of STYLE.md (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gapo.rewards import (
    completion_text,
    extract_answer,
    frequency_aware_rewards,
    frequency_reward,
    group_reward,
    is_group_reward,
    validate_group_rewards,
)

ITEMS = ["a", "b", "c", "d"]


# --- extract_answer ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>Mars</answer>", "Mars"),
        ("  <answer>  Mars \n</answer> trailing", "Mars"),
        ("<answer>a</answer> then <answer>b</answer>", "b"),
        ("<answer>a</answer> then <answer>b", "a"),  # last *complete* pair
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
