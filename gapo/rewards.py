"""Group-aware rewards: the reward of each rollout is computed from the whole group of G completions of a prompt.

That is GAPO's one change to GRPO. `GAPOTrainer` calls a *group reward* once per group (the G `prompts` are the same,
each column repeated G times, as in TRL): ``fn(prompts, completions, **columns) -> list[float]``. The contract is
`GroupReward`, `@group_reward` makes one of a plain function, and TRL's per-completion rewards mix in `reward_funcs`.

The paper's frequency-aware reward (Anschel et al. 2025, eq. 2), for a valid set V of L distinct items and
f_v = (number of completions answering v) / (number of valid completions):

    r_i = 1 - (f_{o_i} - 1/L) if o_i in V, else -1

A valid answer earns more the rarer it is in the group; a perfectly uniform group gives every valid answer exactly 1.
Example, V = {a, b}, answers (a, a, a, b): f_a = 3/4, f_b = 1/4, so r = (0.75, 0.75, 0.75, 1.25). The group rewards
here use this formula or the same partition of the group into classes (`gapo.equivalence`):

| reward                         | valid answers get                                        | needs columns      |
|--------------------------------|----------------------------------------------------------|--------------------|
| `frequency_reward`             | 1 - (f_o - 1/L)                                          | items              |
| `target_distribution_reward`   | 1 - (f_o - p_o), p a target over the items               | items, target      |
| `ClassFrequencyReward(...)`    | 1 - (f_c - 1/L) over equivalence classes                 | (category)         |
| `QualityDiversityReward(...)`  | q * d or q + w * d, d = share of others in another class | what quality needs |

Each gives -1 to an invalid completion: no single ``<answer>`` (`extract_answer`), an answer not in the list, or one
the validity check rejects. List answers are matched with `gapo.equivalence.match_item`, as in evaluation."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Literal

from gapo.equivalence import Equivalence, equivalence_from_spec, match_item
from gapo.metrics import advantage_split, check_target, log_group_diversity

ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
OPEN_TAG, CLOSE_TAG = "<answer>", "</answer>"

#: The reward of an invalid completion: the minimum of every reward here.
INVALID_REWARD = -1.0

#: Per-answer validity: the extracted answer text -> is it a member of the category?
Validity = Callable[[str], bool]


def extract_answer(text: str | None) -> str | None:
    """The stripped content of the one ``<answer>...</answer>`` pair in `text`; None unless each tag occurs once.

    None is invalid: -1 in the rewards, invalid in every metric. Taking the *last* pair instead let a trained model
    write several answers and be scored on a near-random one, fooling reward and JSD; text around the pair is allowed.

    >>> extract_answer("I pick <answer> Mars </answer>")
    'Mars'
    >>> extract_answer("<answer>a</answer> no, <answer>b</answer>") is None
    True
    >>> extract_answer("<answer>unfinished") is None
    True"""
    if not text or text.count(OPEN_TAG) != 1 or text.count(CLOSE_TAG) != 1:
        return None
    match = ANSWER_RE.search(text)
    return match.group(1).strip() if match else None


def _frequency_rewards(
    keys: Sequence[Hashable | None], share: Callable[[Any], float], invalid: float | None = INVALID_REWARD
) -> list[Any]:
    """r_i = 1 - (f_{k_i} - share(k_i)) for keys that are not None, `invalid` (-1) otherwise; f over the non-None keys.

    The one formula behind the list, target and class rewards, which differ only in what a key is and its share.
    `invalid=None` leaves invalid completions unscored (`split_format_reward`)."""
    counts = Counter(k for k in keys if k is not None)
    num_valid = sum(counts.values())
    return [invalid if k is None else 1.0 - (counts[k] / num_valid - share(k)) for k in keys]


def target_distribution_rewards(
    answers: Sequence[str | None], items: Sequence[str], target: Mapping[str, float | None] | Sequence[float]
) -> list[float]:
    """r_i = 1 - (f_{o_i} - p_{o_i}) for answers in `items`, -1 otherwise: the paper's reward towards target p.

    `answers` are list items (`match_item`) or None. A group sampled exactly at p gives every valid answer 1; an item
    sampled above its target earns less. Example, p = (a: 0.75, b: 0.25), answers (a, a, b, b): f = (0.5, 0.5),
    r = (1.25, 1.25, 0.75, 0.75), pushing towards more a."""
    probs = check_target(items, target)
    return _frequency_rewards([a if a in probs else None for a in answers], probs.__getitem__)


def frequency_aware_rewards(
    answers: Sequence[str | None], valid_items: Sequence[str], invalid: float | None = INVALID_REWARD
) -> list[Any]:
    """The paper's frequency-aware reward for one group: `target_distribution_rewards` with p uniform over the items.

    Duplicates in `valid_items` collapse, so L counts *distinct* items. An invalid answer (None or not in the list) gets
    `invalid`: -1 (the paper, the minimum possible), or None to leave it unscored (`split_format_reward`)."""
    valid = list(dict.fromkeys(valid_items))
    if not valid:
        raise ValueError("frequency_aware_rewards: valid_items is empty")
    share, members = 1.0 / len(valid), set(valid)
    return _frequency_rewards([a if a in members else None for a in answers], lambda _: share, invalid)


def centred_over_valid(rewards: Sequence[float | None]) -> list[float | None]:
    """Each scored reward minus the mean of the scored ones (None stays None): a group's frequency rewards centred
    over its valid answers, so they sum to 0 there and their level (1 + 1/L - sum_v f_v^2) drops out.

    Why: summed with the format reward and centred over the whole group (TRL's sum_then_normalize), an unscored
    (invalid) completion counts as 0, so an uncentred frequency reward's level of about 1 would add itself to the
    format gap. Centred first, each valid answer's advantage is w_format (format_i - mean) + w_freq (f-part_i): the
    two parts stay apart, as under normalize_then_sum, without dividing either by its group's std.
    Example: (0.75, 0.75, 0.75, 1.25, None) -> (-0.125, -0.125, -0.125, 0.375, None)."""
    scored = [r for r in rewards if r is not None]
    if not scored:
        return list(rewards)
    mean = math.fsum(scored) / len(scored)
    return [None if r is None else r - mean for r in rewards]


def class_frequency_rewards(labels: Sequence[int | None], num_items: int | None = None) -> list[float]:
    """The paper's formula over equivalence classes: r_i = 1 - (f_{c_i} - 1/L), -1 for label None.

    By default L is the number of valid completions N (the most classes a group can have), so r_i = 1 - (n_c - 1)/N
    and a unique answer gets exactly 1; give `num_items` when the category's size is known (a uniform spread then
    earns 1, as in the paper). Example, labels (0, 0, 1, None): N = 3, r = (1 - 1/3, 1 - 1/3, 1, -1)."""
    if num_items is not None and num_items < 1:
        raise ValueError(f"num_items must be a positive number of classes, got {num_items}")
    num_valid = sum(label is not None for label in labels)
    share = 1.0 / (num_items or max(num_valid, 1))
    return _frequency_rewards(labels, lambda _: share)


def diversity_scores(labels: Sequence[int | None]) -> list[float | None]:
    """Per valid completion, the share of the *other* valid completions in a different class; None for invalid.

    d_i = (N - n_{c_i}) / (N - 1), in [0, 1]: 1 when nobody else says the same, 0 when everybody does; a group with
    one valid completion gives it 1 (nothing to collapse onto). Example, labels (0, 0, 1): d = (1/2, 1/2, 1)."""
    counts = Counter(label for label in labels if label is not None)
    num_valid = sum(counts.values())
    if num_valid <= 1:
        return [None if label is None else 1.0 for label in labels]
    return [None if label is None else (num_valid - counts[label]) / (num_valid - 1) for label in labels]


CombineMode = Literal["multiplicative", "additive"]
COMBINE_MODES: tuple[str, ...] = ("multiplicative", "additive")


def quality_diversity_rewards(
    quality: Sequence[float],
    labels: Sequence[int | None],
    mode: CombineMode = "multiplicative",
    weight: float = 1.0,
) -> list[float]:
    """Combine a per-completion quality q with the group's diversity d (`diversity_scores`); -1 for invalid.

    multiplicative (DARLING's choice): r_i = q_i * d_i, so a duplicate earns nothing however good, and a bad answer
    earns nothing however rare. additive: r_i = q_i + weight * d_i, so quality still pays when the group collapses."""
    if len(quality) != len(labels):
        raise ValueError(f"quality has {len(quality)} values for a group of {len(labels)}; give one per completion")
    if mode not in COMBINE_MODES:
        raise ValueError(f"unknown combine mode {mode!r}; use one of {', '.join(COMBINE_MODES)}")
    rewards = []
    for q, d in zip(quality, diversity_scores(labels), strict=True):
        if d is None:
            rewards.append(INVALID_REWARD)
        else:
            rewards.append(q * d if mode == "multiplicative" else q + weight * d)
    return rewards


class GroupReward:
    """The group-reward contract: what GAPOTrainer needs of a reward computed over the whole group.

    - ``__call__(prompts, completions, **columns) -> list[float]``: the group gathered from every process, each column
      sliced to it, plus the keyword arguments TRL gives a per-completion reward (``trainer_state``, ``log_metric``,
      ``log_extra``, ``completion_ids``); returns one finite float per completion (`validate_group_rewards`).
    - ``check(dataset)``: run when the trainer is built, before any generation: a one-line ValueError for a dataset it
      cannot score (a missing column of `columns`, then `check_rows`), so the trainer knows no task's columns.
    - ``name``: what TRL logs it under (``rewards/<name>/mean``), exposed as the ``__name__`` TRL reads.

    Subclasses set `name` and `columns` and implement ``__call__``; plain objects with picklable parts, they travel to
    worker processes like TRL's callable rewards."""

    name: str = "group_reward"
    #: Dataset columns the reward cannot run without.
    columns: tuple[str, ...] = ()
    #: Its check of the rows of those columns (one-line ValueError), if any.
    check_rows: Callable[[Any], None] | None = None

    def __init__(
        self,
        name: str | None = None,
        columns: Sequence[str] | None = None,
        check_rows: Callable[[Any], None] | None = None,
    ) -> None:
        if name is not None:
            self.name = name
        if columns is not None:
            self.columns = tuple(columns)
        if check_rows is not None:
            self.check_rows = check_rows

    @property
    def __name__(self) -> str:  # TRL names a callable reward by its __name__
        return self.name

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__")

    def check(self, dataset: Any) -> None:
        """Fail with one line when `dataset` lacks a column of `columns` or `check_rows` rejects a row."""
        have = getattr(dataset, "column_names", None)
        if have is None:
            return
        missing = [c for c in self.columns if c not in have]
        if missing:
            raise ValueError(
                f"reward {self.name!r} needs dataset column(s) {', '.join(map(repr, missing))}; "
                f"the training dataset has: {', '.join(have)}"
            )
        if self.check_rows is not None:
            self.check_rows(dataset)


class FunctionGroupReward(GroupReward):
    """A plain function ``fn(prompts, completions, **columns) -> list[float]`` as a `GroupReward` (`group_reward`)."""

    def __init__(
        self,
        fn: Callable[..., Sequence[float]],
        name: str | None = None,
        columns: Sequence[str] = (),
        check_rows: Callable[[Any], None] | None = None,
    ) -> None:
        super().__init__(name or getattr(fn, "__name__", type(fn).__name__), columns, check_rows)
        self.fn = fn

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        return self.fn(prompts=prompts, completions=completions, **kwargs)


def group_reward(
    fn: Callable[..., Sequence[float]] | None = None,
    *,
    name: str | None = None,
    columns: Sequence[str] = (),
    check_rows: Callable[[Any], None] | None = None,
) -> Any:
    """Make `fn` (a function or callable object) a `GroupReward`; use bare or as ``@group_reward(columns=[...])``."""

    def wrap(f: Callable[..., Sequence[float]]) -> GroupReward:
        return FunctionGroupReward(f, name, columns, check_rows)

    return wrap if fn is None else wrap(fn)


def is_group_reward(fn: Any) -> bool:
    """Whether GAPOTrainer calls `fn` once per whole group (a `GroupReward`) rather than per completion (TRL's way)."""
    return isinstance(fn, GroupReward)


def completion_text(prompt: Any, completion: Any) -> str:
    """The assistant's full answer text for one rollout, *including* any pre-filled response prefix: when the prompt
    ends with an assistant message (such as ``"<answer>"``), the model continued that message."""
    text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
    if isinstance(prompt, list) and prompt and prompt[-1].get("role") == "assistant":
        text = str(prompt[-1]["content"]) + text
    return text


def validate_group_rewards(
    name: str,
    rewards: Any,
    group_size: int,
    kind: str = "group reward",
    unit: str = "rewards",
    allow_none: bool = False,
) -> list[float]:
    """One finite float per completion of the group from what `name` returned, or a one-line error naming it.

    With `allow_none` (the trainer sets it, `QualityDiversityReward` does not) a None becomes NaN, "does not score this
    completion", as TRL reads a None from a per-completion reward: its group mean and std skip it."""
    try:
        raw = list(rewards)
        values = [math.nan if r is None and allow_none else float(r) for r in raw]
    except (TypeError, ValueError) as err:
        got = type(rewards).__name__
        rule = "floats or None" if allow_none else "floats (no None)"
        raise ValueError(f"{kind} {name!r} must return a list of G {rule}, got {got}") from err
    if len(values) != group_size:
        raise ValueError(
            f"{kind} {name!r} returned {len(values)} {unit} for a group of {group_size}; "
            "it must return one per completion"
        )
    bad = [v for v, r in zip(values, raw, strict=True) if not math.isfinite(v) and r is not None]
    if bad:
        raise ValueError(f"{kind} {name!r} returned a non-finite value ({bad[0]}) in a group of {group_size}")
    return values


def group_answers(
    prompts: Sequence[Any], completions: Sequence[Any], extract: Callable[[str], str | None] = extract_answer
) -> list[str | None]:
    """The extracted answer of each rollout of a group (pre-filled prefix included)."""
    return [extract(completion_text(p, c)) for p, c in zip(prompts, completions, strict=True)]


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


def validate_target_column(rows: Any) -> None:
    """Fail with one line naming the first row whose ``target`` does not fit its ``items`` (see `check_target`)."""
    if "target" not in (getattr(rows, "column_names", None) or []):
        raise ValueError("training dataset has no 'target' column (a probability per item, in list order)")
    for index, (items, target) in enumerate(zip(rows["items"], rows["target"], strict=True)):
        try:
            check_target(items, target)
        except (ValueError, TypeError) as err:
            raise ValueError(f"dataset row {index}: {err}") from None


def _check_items_and_target(dataset: Any) -> None:
    validate_items_column(dataset)
    validate_target_column(dataset)


class FrequencyReward(GroupReward):
    """The paper's frequency-aware reward as a group reward, reading the valid items from the dataset column `items`.

    Logs the group's `diversity/*` (`gapo.metrics.group_diversity_stats`) and `advantage/*` (`advantage_split`)."""

    name = "frequency"
    columns = ("items",)
    #: What an invalid completion gets: the paper's -1, or None (unscored) in `ValidFrequencyReward`.
    invalid: float | None = INVALID_REWARD

    def __init__(self) -> None:
        super().__init__(check_rows=validate_items_column)

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        items: list[Sequence[str]],
        log_metric: Callable[[str, float], None] | None = None,
        **kwargs: Any,
    ) -> list[Any]:
        answers = [match_item(a, items[0]) for a in group_answers(prompts, completions)]
        paper = frequency_aware_rewards(answers, items[0])
        log_group_diversity(log_metric, answers, items[0])
        log_advantage_split(log_metric, paper, answers)
        return paper if self.invalid == INVALID_REWARD else frequency_aware_rewards(answers, items[0], self.invalid)


def log_advantage_split(
    log_metric: Callable[[str, float], None] | None, rewards: Sequence[float], answers: Sequence[str | None]
) -> None:
    """Log `advantage_split` of the paper's reward for one group (a no-op outside a trainer)."""
    if log_metric is None:
        return
    for name, value in advantage_split(rewards, [a is not None for a in answers]).items():
        log_metric(name, value)


class ValidFrequencyReward(FrequencyReward):
    """The frequency part of `FrequencyReward` alone: 1 - (f_o - 1/L) for a valid answer, None (unscored) otherwise.

    Paired with `answer_format_reward` under `GAPOConfig.split_format_reward`: TRL then normalises each reward within
    its group on its own (``multi_objective_aggregation="normalize_then_sum"``), so invalid answers no longer set the
    valid ones' baseline and scale. Logs as `FrequencyReward`, with the paper's joint reward's advantage split."""

    name = "valid_frequency"
    invalid = None


def answer_format_reward(
    prompts: list[Any], completions: list[Any], items: list[Sequence[str]], **kwargs: Any
) -> list[float]:
    """Per completion (TRL's ordinary kind): 1 for exactly one answer naming an item of its row's list, -1 otherwise.

    The format half of `FrequencyReward` under `split_format_reward` (`ValidFrequencyReward` checks its `items`)."""
    answers = group_answers(prompts, completions)
    return [1.0 if match_item(a, row) is not None else INVALID_REWARD for a, row in zip(answers, items, strict=True)]


class TargetDistributionReward(GroupReward):
    """`target_distribution_rewards` as a group reward: valid items from column `items`, p from column `target`.

    Logs `diversity/*` as `FrequencyReward` does, `diversity/group_jsd` being the JSD to the target."""

    name = "target_distribution"
    columns = ("items", "target")

    def __init__(self) -> None:
        super().__init__(check_rows=_check_items_and_target)

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        items: list[Sequence[str]],
        target: list[Mapping[str, float] | Sequence[float]],
        log_metric: Callable[[str, float], None] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        answers = [match_item(a, items[0]) for a in group_answers(prompts, completions)]
        log_group_diversity(log_metric, answers, items[0], target[0])
        return target_distribution_rewards(answers, items[0], target[0])


class CentredValidFrequencyReward(ValidFrequencyReward):
    """`ValidFrequencyReward` centred over the group's valid answers (`centred_over_valid`): the frequency part under
    `split_format_reward` with `scale_rewards: none`, where TRL sums the weighted rewards and only subtracts the
    group's mean (Dr. GRPO's mean-centred advantages, the two rewards kept apart). Logs as `FrequencyReward`."""

    name = "valid_frequency_centred"

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Any]:
        return centred_over_valid(super().__call__(prompts, completions, **kwargs))


#: The instances the tasks train with (`gapo.train.task_data`).
frequency_reward = FrequencyReward()
valid_frequency_reward = ValidFrequencyReward()
centred_valid_frequency_reward = CentredValidFrequencyReward()
target_distribution_reward = TargetDistributionReward()

#: TRL's `scale_rewards` values, as lower-case strings (it takes the booleans too: True is group, False none).
SCALE_REWARDS = ("group", "batch", "none", "true", "false")


def mean_centred(scale_rewards: Any) -> bool:
    """Whether TRL's `scale_rewards` leaves advantages mean-centred, divided by no std (none or false: Dr. GRPO)."""
    return str(scale_rewards).lower() in ("none", "false")


def split_frequency_reward(scale_rewards: Any) -> ValidFrequencyReward:
    """The frequency reward that goes beside `answer_format_reward` under `split_format_reward`, for `scale_rewards`.

    One home for the pairing: `gapo.train.task_data` trains with it and `gapo.trainer.check_split_rewards` refuses
    another. Mean-centred, TRL sums the weighted rewards and subtracts only the group's mean, so an uncentred
    frequency reward (about 1 for every valid answer) would widen the format gap: it comes centred over the valid
    answers (`centred_over_valid`). Divided by each reward's group std, the centring would change nothing."""
    return centred_valid_frequency_reward if mean_centred(scale_rewards) else valid_frequency_reward


class _ClassReward(GroupReward):
    """Shared parts of the rewards over equivalence classes: extract, check validity, partition.

    `validity` is None (every non-empty answer is valid: the space of answers is implicit), one function answer ->
    bool, or a mapping from the dataset column `category` to such a function (a category missing from it, or mapped
    to None, is "validity unchecked" and stops with an error rather than counting as valid)."""

    name = "class_reward"

    def __init__(
        self,
        equivalence: Equivalence | str | None = None,
        validity: Validity | Mapping[str, Validity | None] | None = None,
        extract: Callable[[str], str | None] = extract_answer,
    ) -> None:
        self.equivalence = equivalence_from_spec(equivalence)
        if validity is not None and not callable(validity) and not isinstance(validity, Mapping):
            raise ValueError(
                f"validity must be a function answer -> bool or a mapping category -> function, got {validity!r}"
            )
        self.validity = validity
        self.extract = extract

    def _check(self, category: Sequence[str] | None) -> Validity | None:
        """This group's validity check; an unchecked category is an error, never "everything is valid"."""
        if not isinstance(self.validity, Mapping):
            if self.validity is None or getattr(self.validity, "checked", True):
                return self.validity
            what = "its validity function"
        elif not category:
            raise ValueError(f"{self.name}: validity is per category, but the dataset has no 'category' column")
        else:
            check = self.validity.get(category[0])
            if check is not None and getattr(check, "checked", True):
                return check
            what = f"category {category[0]!r}"
        raise ValueError(
            f"{self.name}: {what} has no validity check (validity unchecked); "
            "give one or leave the category out of training"
        )

    def labels(
        self, prompts: Sequence[Any], completions: Sequence[Any], category: Sequence[str] | None = None
    ) -> list[int | None]:
        """The class of each rollout's answer; None when it has no single answer or the validity check rejects it."""
        check = self._check(category)
        answers = group_answers(prompts, completions, self.extract)
        kept = [a if a and (check is None or check(a)) else None for a in answers]
        return list(self.equivalence.partition(kept).labels)


class ClassFrequencyReward(_ClassReward):
    """`class_frequency_rewards` as a group reward: the paper's reward when the valid set is not a given list.

    Example: ``ClassFrequencyReward("normalized+embedding:0.9", validity=data.open_validity_map())``."""

    def __init__(
        self,
        equivalence: Equivalence | str | None = None,
        validity: Validity | Mapping[str, Validity | None] | None = None,
        num_items: int | None = None,
        extract: Callable[[str], str | None] = extract_answer,
        name: str = "class_frequency",
    ) -> None:
        super().__init__(equivalence, validity, extract)
        if num_items is not None and num_items < 1:
            raise ValueError(f"num_items must be a positive number of classes, got {num_items}")
        self.num_items = num_items
        self.name = name

    def __call__(
        self, prompts: list[Any], completions: list[Any], category: list[str] | None = None, **kwargs: Any
    ) -> list[float]:
        return class_frequency_rewards(self.labels(prompts, completions, category), self.num_items)


class QualityDiversityReward(_ClassReward):
    """A per-completion quality reward (any TRL reward function) combined with the group's diversity.

    `quality` (e.g. a reward model's score in [0, 1]) gets the whole group and its keyword arguments; `mode`, `weight`:
    see `quality_diversity_rewards`. For free text (DARLING's stories), an `extract` keeping it whole: ``str.strip``."""

    def __init__(
        self,
        quality: Callable[..., Sequence[float]],
        mode: CombineMode = "multiplicative",
        weight: float = 1.0,
        equivalence: Equivalence | str | None = None,
        validity: Validity | Mapping[str, Validity | None] | None = None,
        extract: Callable[[str], str | None] = extract_answer,
        name: str | None = None,
    ) -> None:
        super().__init__(equivalence, validity, extract)
        if not callable(quality):
            raise ValueError(
                f"quality must be a reward function (prompts, completions, **kw) -> list[float], got {quality!r}"
            )
        if mode not in COMBINE_MODES:
            raise ValueError(f"unknown combine mode {mode!r}; use one of {', '.join(COMBINE_MODES)}")
        if not math.isfinite(weight):
            raise ValueError(f"weight must be a finite number, got {weight}")
        self.quality, self.mode, self.weight = quality, mode, weight
        self.quality_name = getattr(quality, "__name__", type(quality).__name__)
        self.name = name or f"quality_diversity_{mode}"

    def __call__(
        self, prompts: list[Any], completions: list[Any], category: list[str] | None = None, **kwargs: Any
    ) -> list[float]:
        columns = {**kwargs, **({"category": category} if category is not None else {})}
        quality = self.quality(prompts=prompts, completions=completions, **columns)
        values = validate_group_rewards(self.quality_name, quality, len(completions), "quality reward", "values")
        return quality_diversity_rewards(values, self.labels(prompts, completions, category), self.mode, self.weight)
