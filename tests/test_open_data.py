"""Issue 13's data options: list prompts with a target distribution, open prompts, and their validity lexicons."""

from __future__ import annotations

import re

import datasets
import pytest

from gapo.repro.prompts import OPEN_SET_FORMAT, UNIFORMITY_LISTS, unseen_target_rows
from gapo.rewards import ClassFrequencyReward, validate_target_column
from gapo.tasks.lists import CATEGORIES, FORMAT_INSTRUCTION
from gapo.tasks.open_ended import (
    LEXICON_SOURCES,
    OPEN_HELDOUT_CATEGORIES,
    OPEN_QUESTIONS,
    OPEN_TRAIN_CATEGORIES,
    VALIDITY_UNCHECKED,
    make_open_dataset,
    open_eval_prompts,
    open_prompt_rows,
    open_validity,
    open_validity_map,
)
from gapo.tasks.targets import make_target_distribution_dataset, target_distribution_rows

# --- target distributions -------------------------------------------------------------------------------------------


def test_target_rows_state_their_target():
    ds = make_target_distribution_dataset(100, seed=3)
    assert isinstance(ds, datasets.Dataset) and set(ds.column_names) == {"prompt", "items", "category", "target"}
    validate_target_column(ds)
    for row in ds:
        text = row["prompt"][0]["content"]
        assert text.endswith(FORMAT_INSTRUCTION) and row["category"] in CATEGORIES
        assert 2 <= len(row["items"]) <= 4 and abs(sum(row["target"]) - 1) < 1e-9 and min(row["target"]) >= 0.1
        assert len(re.findall(r"\d+% of the time", text)) == len(row["items"])  # the prompt states the column
        pairs = zip(row["items"], row["target"], strict=True)
        assert all(f"{item} {round(100 * p)}% of the time" in text for item, p in pairs)


def test_target_rows_deterministic_and_validated():
    assert target_distribution_rows(20, seed=1) == target_distribution_rows(20, seed=1)
    assert target_distribution_rows(20, seed=1) != target_distribution_rows(20, seed=2)
    with pytest.raises(ValueError, match="max_items=12 exceeds resolution=10"):
        target_distribution_rows(5, seed=0, max_items=12)
    bad = datasets.Dataset.from_list([{"items": ["a", "b"], "target": [0.5, 0.5]}, {"items": ["a"], "target": [0.7]}])
    with pytest.raises(ValueError, match="dataset row 1: target distribution sums to 0.7, not 1"):
        validate_target_column(bad)
    with pytest.raises(ValueError, match="no 'target' column"):
        validate_target_column(datasets.Dataset.from_list([{"items": ["a"]}]))


def test_unseen_target_rows_use_the_evaluation_lists():
    rows = unseen_target_rows(12, seed=0)
    assert len(rows) == 12 and {r["category"] for r in rows} == set(UNIFORMITY_LISTS)
    for row in rows:
        assert set(row["items"]) <= set(UNIFORMITY_LISTS[row["category"]]) and row["category"] not in CATEGORIES


# --- open prompts ---------------------------------------------------------------------------------------------------


def test_open_rows_keep_held_out_categories_out():
    ds = make_open_dataset(300, seed=0)
    assert set(ds.column_names) == {"prompt", "category"}
    assert set(ds["category"]) == set(OPEN_TRAIN_CATEGORIES)
    assert not set(OPEN_TRAIN_CATEGORIES) & set(OPEN_HELDOUT_CATEGORIES)
    for row in ds:
        text = row["prompt"][0]["content"]
        assert (
            text.endswith(OPEN_SET_FORMAT)
            and text.removesuffix(" " + OPEN_SET_FORMAT) in OPEN_QUESTIONS[row["category"]]
        )
    assert open_prompt_rows(10, seed=4) == open_prompt_rows(10, seed=4)
    assert open_eval_prompts() == {c: OPEN_QUESTIONS[c][0] for c in OPEN_HELDOUT_CATEGORIES}
    with pytest.raises(ValueError, match="unknown open categories \\['planet'\\]"):
        open_prompt_rows(5, seed=0, categories=["planet"])


@pytest.mark.parametrize(
    ("category", "members", "non_members"),
    [
        ("country", ["Russia", "the United States", "Viet Nam", "Japan."], ["Paris", "Atlantis", "FBI"]),
        ("US state", ["Texas", "new york"], ["Ontario", "Purple"]),
        ("language", ["Spanish", "Mandarin Chinese"], ["Python", "Marx"]),
        ("programming language", ["Python", "Rust", "C++"], ["Purple", "Spanish"]),
        ("city", ["Paris", "Paris, France", "NYC", "Sao Paulo", "São Paulo"], ["Marx", "Purple", "Gotham"]),
        ("chemical element", ["Oxygen", "aluminium", "Aluminum"], ["Water", "Steel"]),
        ("color", ["sky blue", "Crimson", "red"], ["Simba", "Paris"]),
    ],
)
def test_lexicons(category, members, non_members):  # noqa: ANN001
    check = open_validity(category)
    assert check.checked and check.source == LEXICON_SOURCES[category]
    assert [check(a) for a in members] == [True] * len(members)
    assert [check(a) for a in non_members] == [False] * len(non_members)


def test_categories_without_a_lexicon_are_unchecked_and_never_valid():
    food = open_validity("food")
    assert not food.checked and food.source == VALIDITY_UNCHECKED and not food("Pizza")
    assert all(open_validity(c).checked for c in (*OPEN_TRAIN_CATEGORIES, *OPEN_HELDOUT_CATEGORIES))
    with pytest.raises(ValueError, match="unknown open category 'planet'"):
        open_validity("planet")
    reward = ClassFrequencyReward(validity=open_validity_map(["country", "food"]))
    with pytest.raises(ValueError, match="category 'food' has no validity check \\(validity unchecked\\)"):
        reward(prompts=["q"], completions=["<answer>Pizza</answer>"], category=["food"])


def test_class_frequency_reward_on_open_rows():
    rows = open_prompt_rows(1, seed=0, categories=["country"])
    answers = ["Japan", "japan", "Atlantis", "Peru", "<answer>Peru</answer><answer>Chile</answer>"]
    completions = [a if a.startswith("<") else f"<answer>{a}</answer>" for a in answers]
    reward = ClassFrequencyReward(validity=open_validity_map())
    out = reward(prompts=[rows[0]["prompt"]] * 5, completions=completions, category=["country"] * 5)
    assert out == pytest.approx([1 - 1 / 3, 1 - 1 / 3, -1.0, 1.0, -1.0])  # N = 3 valid: japan x2, peru
