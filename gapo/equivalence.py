"""When do two answers "say the same thing"? One equivalence layer for the rewards and for evaluation.

Why one layer: a reward that counts "Paris" and "paris." as two answers pays the model for a trick that unique@n
(`gapo.repro.scores.unique_at`) does not count, and the reverse hides real collapse; so both take one `Equivalence`.

An `Equivalence` is a chain of steps, each merging classes of the previous one (classes only grow):

    Exact()                    same string                                  (the starting point)
    Normalized()               same `normalize_answer` key: case, spacing, edge punctuation
    EmbeddingClusters(t)       cosine similarity of sentence embeddings >= t (MiniLM offline), single linkage
    Classifier(fn)             a user's fn(texts) -> K x K "same?" matrix

A *key step* (Exact, Normalized) maps each class's representative text to a key; equal keys merge. A *link step*
(EmbeddingClusters, Classifier) maps the K distinct representatives, sorted, to a symmetric K x K boolean matrix;
linked classes merge as connected components, so (unlike greedy clustering) the group's order does not matter.

Cost per group of G answers, K <= G distinct representatives after the key steps: key steps O(G); each link step K^2/2
comparisons and a K x K matrix (K = 500: 125k similarities, 2 MB), plus K embeddings for texts not yet cached.
`max_distinct` (default 2048) bounds K: a larger group is an error, not a silent quadratic blow-up. Embeddings are
cached per text (bounded LRU), classifier answers per set of texts, partitions per tuple of answers, so a repeated
answer ("Paris" in every group) is embedded once.

    >>> Equivalence([Normalized()]).partition(["Paris", "paris.", None, "Rome"]).labels
    (0, 0, None, 1)"""

from __future__ import annotations

import re
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gapo.embeddings import DEFAULT_ENCODER, embed

_WHITESPACE = re.compile(r"\s+")

#: Default bound on distinct representatives per partition (see the module docstring for the cost).
MAX_DISTINCT = 2048


def normalize_answer(answer: str | None) -> str | None:
    """Canonical form for comparing answers, None when nothing is left: NFKC, casefold, collapsed whitespace, and no
    punctuation or symbols at either end (".", "!", quotes, ``**``), so "  The Great  Gatsby. " and '"the great
    gatsby"' are the same."""
    if answer is None:
        return None
    text = _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", answer).casefold()).strip()
    start, end = 0, len(text)
    while start < end and _is_edge_noise(text[start]):
        start += 1
    while end > start and _is_edge_noise(text[end - 1]):
        end -= 1
    text = text[start:end].strip()
    return text or None


def _is_edge_noise(char: str) -> bool:
    return char.isspace() or unicodedata.category(char)[0] in ("P", "S")


def match_item(answer: str | None, items: Sequence[str]) -> str | None:
    """The list item that `answer` names under `normalize_answer` (" mars. " -> "Mars"), or None; when two items
    normalise alike ("Moby-Dick", "moby-dick"), the first in list order.

    The one matching rule of rewards *and* metrics: a reward matching exactly while evaluation normalises would pay a
    model -1 for "mars." that the JSD metric counts as Mars."""
    key = normalize_answer(answer)
    if key is None:
        return None
    for item in items:
        if normalize_answer(item) == key:
            return item
    return None


@runtime_checkable
class KeyStep(Protocol):
    """Maps a representative text to a key (None: the answer has no content and becomes invalid)."""

    name: str

    def key(self, text: str) -> str | None: ...


@runtime_checkable
class LinkStep(Protocol):
    """Decides, for K distinct texts, which pairs are the same: a symmetric (K, K) boolean matrix."""

    name: str

    def links(self, texts: Sequence[str]) -> np.ndarray: ...


class Exact:
    """Two answers are the same only when their strings are identical (after `extract_answer`'s strip)."""

    name = "exact"

    def key(self, text: str) -> str | None:
        return text if text else None


class Normalized:
    """Two answers are the same when `normalize_answer` gives the same key (case, spacing, edge punctuation)."""

    name = "normalized"

    def key(self, text: str) -> str | None:
        return normalize_answer(text)


def check_threshold(threshold: float) -> float:
    """A similarity threshold in (0, 1], or a one-line error."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < threshold <= 1.0:
        raise ValueError(
            f"similarity threshold must be in (0, 1], got {threshold!r}: 1 merges only identical embeddings, "
            "lower values merge more (0.9 is a cautious start)"
        )
    return float(threshold)


class _LRU:
    """A small bounded mapping; plain data, so it pickles with the step that owns it."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"cache size must be at least 1, got {size}")
        self.size = size
        self.data: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable) -> Any:
        if key in self.data:
            self.data.move_to_end(key)
            return self.data[key]
        return None

    def put(self, key: Hashable, value: Any) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.size:
            self.data.popitem(last=False)


class EmbeddingClusters:
    """Link texts whose sentence embeddings have cosine similarity >= `threshold` (single linkage).

    Args:
        threshold: in (0, 1]. MiniLM cosine similarities of normalised answers: "nyc" / "new york" 0.94, "paris" /
            "paris, france" 0.93, "spaghetti" / "pasta" 0.80, "red" / "blue" 0.73, two different cities 0.43-0.62.
            So 0.9 merges spellings of one thing and keeps neighbours apart; check on your own answers first.
        encoder: a name for `gapo.embeddings.embed` (default MiniLM: bundled, offline).
        embed_fn: texts -> (n, d) unit vectors, instead of the encoder (tests, or a model you already hold).
        cache_size: texts whose embeddings are kept (MiniLM: 384 floats each, 50k texts ~ 77 MB)."""

    name = "embedding"

    def __init__(
        self,
        threshold: float = 0.9,
        encoder: str | None = None,
        embed_fn: Callable[[Sequence[str]], np.ndarray] | None = None,
        cache_size: int = 50_000,
    ) -> None:
        self.threshold = check_threshold(threshold)
        self.encoder = encoder or DEFAULT_ENCODER
        self.embed_fn = embed_fn
        self._cache = _LRU(cache_size)

    def embeddings(self, texts: Sequence[str]) -> np.ndarray:
        """Unit embeddings of `texts`, (K, d); only texts not in the cache are encoded."""
        found = {t: self._cache.get(t) for t in dict.fromkeys(texts)}
        missing = [t for t, vector in found.items() if vector is None]
        if missing:
            if self.embed_fn is not None:
                fresh = np.asarray(self.embed_fn(missing), dtype=np.float32)
            else:
                fresh = embed(missing, self.encoder)
            norms = np.linalg.norm(fresh, axis=1, keepdims=True)
            fresh = np.divide(fresh, norms, out=np.zeros_like(fresh), where=norms > 0)
            for text, vector in zip(missing, fresh, strict=True):
                found[text] = vector
                self._cache.put(text, vector)
        return np.stack([found[t] for t in texts])

    def links(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.embeddings(texts)  # (K, d)
        return (vectors @ vectors.T) >= self.threshold - 1e-6  # (K, K); float noise must not split identical texts


class Classifier:
    """Link texts that a user's `fn(texts)` calls the same: K distinct texts -> a symmetric (K, K) array-like, truthy
    for "same class"; cached per tuple of texts, so a classifier that is a model runs once per set."""

    def __init__(self, fn: Callable[[list[str]], Any], name: str | None = None, cache_size: int = 1024) -> None:
        if not callable(fn):
            raise ValueError(f"classifier must be callable (texts -> K x K matrix), got {type(fn).__name__}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", type(fn).__name__)
        self._cache = _LRU(cache_size)

    def links(self, texts: Sequence[str]) -> np.ndarray:
        key = tuple(texts)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        matrix = check_link_matrix(self.name, self.fn(list(texts)), len(texts))
        self._cache.put(key, matrix)
        return matrix


def check_link_matrix(name: str, answer: Any, size: int) -> np.ndarray:
    """A link step's answer as a symmetric (size, size) bool array, or a one-line error naming the step."""
    try:
        matrix = np.asarray(answer)
    except (TypeError, ValueError) as err:  # ragged nested lists
        raise ValueError(f"classifier {name!r} must return a {size}x{size} matrix for {size} texts") from err
    if matrix.shape != (size, size):
        shape = "x".join(map(str, matrix.shape)) or "scalar"
        raise ValueError(
            f"classifier {name!r} returned a {shape} answer for {size} texts; it must return a {size}x{size} matrix"
        )
    matrix = matrix.astype(bool)
    if not np.array_equal(matrix, matrix.T):
        i, j = np.argwhere(matrix != matrix.T)[0]
        raise ValueError(
            f"classifier {name!r} returned a non-symmetric matrix ([{i},{j}] != [{j},{i}]); "
            "'same' must not depend on the order of the two texts"
        )
    return matrix


@dataclass(frozen=True)
class Partition:
    """Equivalence classes of one group: `labels` per answer (0, 1, ... in order of first appearance; None for no
    answer), `representatives` per class (its smallest member text after the last step)."""

    labels: tuple[int | None, ...]
    representatives: tuple[str, ...]

    @property
    def num_classes(self) -> int:
        return len(self.representatives)

    def sizes(self) -> list[int]:
        """How many answers each class holds (indexed by label)."""
        counts = [0] * self.num_classes
        for label in self.labels:
            if label is not None:
                counts[label] += 1
        return counts


def _components(matrix: np.ndarray) -> list[int]:
    """Connected components of a symmetric boolean adjacency matrix (union-find), as a root index per node."""
    parent = list(range(matrix.shape[0]))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in np.argwhere(np.triu(matrix, k=1)):
        ri, rj = find(int(i)), find(int(j))
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    return [find(i) for i in range(len(parent))]


class Equivalence:
    """A chain of steps that partitions a group of answers (see the module docstring).

    Args:
        steps: KeyStep / LinkStep objects, applied in order; default ``[Normalized()]``, unique@n's original matching.
        max_distinct: the most distinct representatives a link step may see (bounds its O(K^2) cost).
        cache_size: partitions kept, keyed by the tuple of answers."""

    def __init__(
        self, steps: Sequence[KeyStep | LinkStep] | None = None, max_distinct: int = MAX_DISTINCT, cache_size: int = 256
    ) -> None:
        self.steps = list(steps) if steps is not None else [Normalized()]
        for step in self.steps:
            if not isinstance(step, (KeyStep, LinkStep)):
                raise ValueError(f"equivalence step {step!r} needs a key(text) or a links(texts) method")
        if max_distinct < 2:
            raise ValueError(f"max_distinct must be at least 2, got {max_distinct}")
        self.max_distinct = max_distinct
        self._cache = _LRU(cache_size)

    @property
    def name(self) -> str:
        return "+".join(step.name for step in self.steps) or "exact"

    def __repr__(self) -> str:
        return f"Equivalence({self.name})"

    def partition(self, answers: Sequence[str | None]) -> Partition:
        """The classes of `answers` (None and empty answers get label None)."""
        key = tuple(answers)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._partition(key)
            self._cache.put(key, cached)
        return cached

    def _partition(self, answers: tuple[str | None, ...]) -> Partition:
        current: list[str | None] = [a if a else None for a in answers]
        for step in self.steps:
            if isinstance(step, KeyStep):
                keys = {text: step.key(text) for text in set(current) if text is not None}
                current = [None if text is None else keys[text] for text in current]
            else:
                current = self._link(step, current)
        labels: dict[str, int] = {}
        for text in current:
            if text is not None and text not in labels:
                labels[text] = len(labels)
        return Partition(tuple(None if t is None else labels[t] for t in current), tuple(labels))

    def _link(self, step: LinkStep, current: list[str | None]) -> list[str | None]:
        distinct = sorted({t for t in current if t is not None})  # sorted: the result is order-free
        if len(distinct) > self.max_distinct:
            raise ValueError(
                f"equivalence step {step.name!r} got {len(distinct)} distinct answers, more than max_distinct="
                f"{self.max_distinct} (O(K^2) comparisons): raise max_distinct or put a key step before it"
            )
        if len(distinct) < 2:
            return current
        matrix = check_link_matrix(step.name, step.links(distinct), len(distinct))
        roots = _components(matrix)
        # the smallest member of each component stands for it; `distinct` is sorted, so that is the root's text
        rep = {text: distinct[root] for text, root in zip(distinct, roots, strict=True)}
        return [None if t is None else rep[t] for t in current]


def equivalence_from_spec(spec: str | Equivalence | None) -> Equivalence:
    """An `Equivalence` from a config string of steps joined by ``+`` (``"normalized+embedding:0.8"``): ``exact``,
    ``normalized``, ``embedding`` or ``embedding:0.85`` (threshold); None gives the default (normalized). A classifier
    cannot be spelled in a string: build ``Equivalence([..., Classifier(fn)])`` in code."""
    if spec is None or isinstance(spec, Equivalence):
        return spec or Equivalence()
    steps: list[KeyStep | LinkStep] = []
    for part in str(spec).split("+"):
        name, _, arg = part.strip().partition(":")
        if name == "exact" and not arg:
            steps.append(Exact())
        elif name == "normalized" and not arg:
            steps.append(Normalized())
        elif name == "embedding":
            try:
                threshold = float(arg) if arg else 0.9
            except ValueError:
                raise ValueError(f"equivalence {spec!r}: threshold {arg!r} is not a number") from None
            steps.append(EmbeddingClusters(threshold))
        else:
            raise ValueError(
                f"unknown equivalence step {part.strip()!r} in {spec!r}; use exact, normalized or embedding[:threshold]"
            )
    return Equivalence(steps)
