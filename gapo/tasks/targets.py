"""List prompts with a target distribution: "pick Heads 70% of the time and Tails 30% of the time"."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from gapo.tasks.lists import FORMAT_INSTRUCTION, chat_prompt, format_list, list_selection_rows

#: Phrasings of a target; `{items}` is the bracketed list, `{spec}` the percentages ("A 70% of the time and B 30%...").
TARGET_TEMPLATES: tuple[str, ...] = (
    "Pick one option from {items}, choosing {spec}.",
    "Choose one of {items} at random so that you pick {spec}.",
    "Select one item from the list {items}: pick {spec}.",
    "Sample exactly one of {items}, picking {spec}.",
)


def target_spec(items: Sequence[str], target: Sequence[float]) -> str:
    """``"A 70% of the time and B 30% of the time"``: the target as the prompt states it (whole percents)."""
    parts = [f"{item} {round(100 * p)}% of the time" for item, p in zip(items, target, strict=True)]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def draw_target(rng: random.Random, k: int, resolution: int = 10) -> list[float]:
    """A random distribution over k items in steps of 1/resolution, every item at least one step (no 0% items). Steps
    of 10% keep the stated percentages exact, so the prompt and the `target` column agree."""
    if not 1 <= k <= resolution:
        raise ValueError(f"cannot split {resolution} steps over {k} items with at least one each; need k <= resolution")
    cuts = sorted(rng.sample(range(1, resolution), k - 1))
    steps = [b - a for a, b in zip([0, *cuts], [*cuts, resolution], strict=True)]
    return [s / resolution for s in steps]


def target_row(
    rng: random.Random, items: list[str], category: str, resolution: int, response_prefix: str | None
) -> dict[str, Any]:
    target = draw_target(rng, len(items), resolution)
    text = rng.choice(TARGET_TEMPLATES).format(items=format_list(items), spec=target_spec(items, target))
    return {
        "prompt": chat_prompt(f"{text} {FORMAT_INSTRUCTION}", response_prefix),
        "items": items,
        "category": category,
        "target": target,
    }


def target_distribution_rows(
    n: int,
    seed: int,
    min_items: int = 2,
    max_items: int = 4,
    categories: Sequence[str] | None = None,
    response_prefix: str | None = None,
    resolution: int = 10,
) -> list[dict[str, Any]]:
    """List prompts that state a target distribution; columns as `list_selection_rows` plus ``target``.

    ``target``, as `gapo.rewards.target_distribution_reward` reads it: probabilities in the order of ``items``
    (multiples of 1/`resolution`, summing to 1). A list, not an item -> p mapping: Arrow would turn mappings with
    different keys per row into one struct column full of None."""
    if max_items > resolution:
        raise ValueError(f"max_items={max_items} exceeds resolution={resolution}: every item needs at least one step")
    base = list_selection_rows(n, seed, min_items, max_items, categories)  # validates the arguments
    rng = random.Random(f"target-{seed}")
    return [target_row(rng, row["items"], row["category"], resolution, response_prefix) for row in base]


def make_target_distribution_dataset(n: int, seed: int, **kwargs: Any) -> Any:
    """`target_distribution_rows` as a `datasets.Dataset` (the keyword arguments are the same)."""
    import datasets

    return datasets.Dataset.from_list(target_distribution_rows(n, seed, **kwargs))
