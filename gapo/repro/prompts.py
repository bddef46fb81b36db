"""The evaluation prompts and item lists of the paper (sections 2, 6.1, 6.2, 6.3).

What is verbatim from the paper and what is ours (the paper shows most lists only inside figures):

- Answer format: verbatim from Appendix E, ``Format your response as follows: <answer>selected_item</answer>.``
- Bias case study (section 2): the two instructions are verbatim ("Please select one of the items",
  "Sample one item out of ..."). The country list is a reconstruction: the paper gives only
  "[Canada, Mexico, ..., Spain]" and names Japan and Germany as favourites, so ours starts with Canada and Mexico,
  ends with Spain and contains Japan and Germany.
- Uniformity (6.1): the ten categories are the paper's (planets, musical instruments, books, celebrities, flowers,
  colors, languages, cities, sports, movies), eight items each. Only the planets list is forced (there are eight);
  the other items are ours. No item contains a comma, since lists are shown comma-separated.
- Open set (6.2): four prompts are from the paper ("Name one city anywhere in the world", a book title, a food,
  a celebrity); the other six categories are ours. The paper's open prompts show no answer format; we append one
  so that answers can be counted (`OPEN_SET_FORMAT`).
- Creativity (6.3, Table 1 and Tables 3-6): the eight prompts are verbatim.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from gapo.tasks.lists import CATEGORIES, list_selection_rows
from gapo.tasks.open_ended import OPEN_SET_FORMAT as OPEN_SET_FORMAT  # re-exported: the evaluation's open prompts
from gapo.tasks.open_ended import open_prompt as open_prompt  # are the training ones
from gapo.tasks.targets import target_row

ANSWER_FORMAT = "Format your response as follows: <answer>selected_item</answer>."

# --- Section 2: bias case study --------------------------------------------------------------------------------------

BIAS_ITEMS: tuple[str, ...] = ("Canada", "Mexico", "Brazil", "Germany", "Japan", "Australia", "Egypt", "Spain")

#: Instruction variants of Figure 2a; ``{items}`` becomes ``[Canada, Mexico, ...]``.
BIAS_VARIANTS: dict[str, str] = {
    "variant_1": "Please select one of the items: {items}.",
    "variant_2": "Sample one item out of {items}.",
}

# --- Section 6.1: uniformity over a fixed list ----------------------------------------------------------------------

UNIFORMITY_LISTS: dict[str, tuple[str, ...]] = {
    "planets": ("Mercury", "Venus", "Earth", "Mars", "Jupiter", "Saturn", "Uranus", "Neptune"),
    "musical instruments": ("Piano", "Guitar", "Violin", "Drums", "Flute", "Trumpet", "Saxophone", "Cello"),
    "books": (
        "Pride and Prejudice",
        "1984",
        "To Kill a Mockingbird",
        "The Great Gatsby",
        "Moby-Dick",
        "War and Peace",
        "Jane Eyre",
        "The Hobbit",
    ),
    "celebrities": (
        "Taylor Swift",
        "Tom Hanks",
        "Beyoncé",
        "Leonardo DiCaprio",
        "Oprah Winfrey",
        "Keanu Reeves",
        "Rihanna",
        "Brad Pitt",
    ),
    "flowers": ("Rose", "Tulip", "Lily", "Daisy", "Sunflower", "Orchid", "Lavender", "Peony"),
    "colors": ("Red", "Blue", "Green", "Yellow", "Purple", "Orange", "Pink", "Brown"),
    "languages": ("English", "Spanish", "Mandarin", "French", "Arabic", "Hindi", "Japanese", "German"),
    "cities": ("Paris", "Tokyo", "New York", "London", "Sydney", "Cairo", "Rio de Janeiro", "Moscow"),
    "sports": ("Soccer", "Basketball", "Tennis", "Cricket", "Baseball", "Golf", "Swimming", "Rugby"),
    "movies": ("The Godfather", "Titanic", "Inception", "Casablanca", "Jaws", "Avatar", "The Matrix", "Star Wars"),
}

#: Held-in lists (issue 34): lists of the *training* categories (`gapo.tasks.lists.CATEGORIES`), drawn as the training
#: data draws its lists but with a seed of their own, that no training row of any profile contains (tests/
#: test_experiments.py checks every profile's data). Scored beside the unseen lists, they tell a model that learned to
#: sample its training categories uniformly from one that also carries that to new categories.
HELDIN_SEED = 3400
HELDIN_ITEMS = 8
HELDIN_COUNT = 10


def heldin_lists(count: int = HELDIN_COUNT, seed: int = HELDIN_SEED) -> dict[str, tuple[str, ...]]:
    """`count` lists of `HELDIN_ITEMS` items, the training categories in turn ("Animals 1", "Countries 1", ...,
    "Animals 2"), list i drawn by `list_selection_rows` with seed `seed + i`: the same lists on every machine."""
    lists = {}
    for i in range(count):
        category = CATEGORIES[i % len(CATEGORIES)]
        row = list_selection_rows(1, seed + i, HELDIN_ITEMS, HELDIN_ITEMS, [category])[0]
        lists[f"{category} {i // len(CATEGORIES) + 1}"] = tuple(row["items"])
    return lists


HELDIN_LISTS: dict[str, tuple[str, ...]] = heldin_lists()

#: The selection instruction for 6.1 (the paper issues "identical selection prompts"; this wording is variant 1).
UNIFORMITY_INSTRUCTION = "Please select one of the items: {items}."

# --- Section 6.2: open-set questions --------------------------------------------------------------------------------

OPEN_SET_PROMPTS: dict[str, str] = {
    "city": "Name one city anywhere in the world.",
    "book": "Name a book title.",
    "food": "Suggest a food.",
    "celebrity": "Name a celebrity.",
    "movie": "Name a movie.",
    "animal": "Name an animal.",
    "fruit": "Name a fruit.",
    "profession": "Name a profession.",
    "historical figure": "Name a historical figure.",
    "hobby": "Name a hobby.",
}

# --- Section 6.3: creative writing ----------------------------------------------------------------------------------

CREATIVE_PROMPTS: dict[str, str] = {
    "story": "Write a story with no more than 100 words.",
    "poem": "Write a poem with no more than 100 words.",
    "haiku": "Write a haiku in English.",
    "mystery": "Craft a one-sentence mystery opening.",
    "dialogue": "Compose a two-line dialogue between two characters.",
    "fruit pitch": "Pitch an idea for a new fruit in one sentence.",
    "joke": "Tell a joke.",
    "chorus": "Write only the chorus for a pop song.",
}

HAIKU_PROMPT = CREATIVE_PROMPTS["haiku"]


# --- Builders -------------------------------------------------------------------------------------------------------


def format_items(items: Sequence[str]) -> str:
    """``["a", "b"]`` -> ``"[a, b]"``, the list style of the paper's prompts."""
    return "[" + ", ".join(items) + "]"


def list_prompt(items: Sequence[str], instruction: str = UNIFORMITY_INSTRUCTION, answer_format: bool = True) -> str:
    """A list-selection prompt: the instruction with ``{items}`` filled in, then the paper's answer format.

    >>> list_prompt(["a", "b"])
    'Please select one of the items: [a, b]. Format your response as follows: <answer>selected_item</answer>.'
    """
    if len(items) == 0:
        raise ValueError("cannot build a list prompt from an empty item list")
    if "{items}" not in instruction:
        raise ValueError(f"instruction must contain '{{items}}': {instruction!r}")
    text = instruction.format(items=format_items(items))
    return f"{text} {ANSWER_FORMAT}" if answer_format else text


def user_message(text: str) -> list[dict[str, str]]:
    """A one-turn chat prompt."""
    return [{"role": "user", "content": text}]


def unseen_target_rows(
    num_lists: int, seed: int, min_items: int = 2, max_items: int = 4, resolution: int = 10
) -> list[dict[str, Any]]:
    """Target prompts over the paper's *evaluation* lists (`UNIFORMITY_LISTS`), never trained on.

    For issue 13's "JSD to the target on unseen lists": one row per list, the category cycling through the ten.
    """
    if num_lists <= 0:
        raise ValueError(f"num_lists must be positive, got {num_lists}")
    if not 2 <= min_items <= max_items <= min(resolution, *(len(v) for v in UNIFORMITY_LISTS.values())):
        raise ValueError(
            f"need 2 <= min_items <= max_items <= 8 (list size) and <= resolution, got {min_items}, {max_items}"
        )
    rng = random.Random(f"unseen-target-{seed}")
    names = list(UNIFORMITY_LISTS)
    rows = []
    for i in range(num_lists):
        category = names[i % len(names)]
        items = rng.sample(list(UNIFORMITY_LISTS[category]), rng.randint(min_items, max_items))
        rows.append(target_row(rng, items, category, resolution, None))
    return rows
