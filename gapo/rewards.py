"""Group-aware rewards: the reward of each rollout is computed from the whole group of G completions of a prompt.

GAPO changes one thing in GRPO: a reward function may see the group. A *group reward* is a function

    fn(prompts, completions, **dataset_columns) -> list[float]

that `GAPOTrainer` calls once per group with exactly the G completions of one prompt (all G `prompts` are the same
prompt, and every dataset column is repeated G times, as in TRL). Mark it with `@group_reward`. Per-completion
functions in TRL's style can be mixed freely with group rewards in `reward_funcs`.

The paper's frequency-aware reward (Anschel et al. 2025, eq. 2), for a valid set V of L distinct items and
f_v = (number of completions answering v) / (number of valid completions):

    r_i = 1 - (f_{o_i} - 1/L)   if o_i in V
    r_i = -1                    otherwise

A valid answer is rewarded more the rarer it is in the group; a perfectly uniform group gives every valid answer
exactly 1. Example, V = {a, b}, answers (a, a, a, b): f_a = 3/4, f_b = 1/4, so r = (0.75, 0.75, 0.75, 1.25).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

#: Attribute set on functions/objects marked by `group_reward`.
GROUP_REWARD_ATTR = "_gapo_group_reward"


def extract_answer(text: str | None) -> str | None:
    """The stripped content of the last complete ``<answer>...</answer>`` pair in `text`, or None when there is none.

    >>> extract_answer("I pick <answer> Mars </answer>")
    'Mars'
    >>> extract_answer("<answer>a</answer> no, <answer>b</answer>")
    'b'
    >>> extract_answer("<answer>unfinished") is None
    True
    """
    if not text:
        return None
    matches = ANSWER_RE.findall(text)
    return matches[-1].strip() if matches else None


def frequency_aware_rewards(answers: Sequence[str | None], valid_items: Sequence[str]) -> list[float]:
    """The paper's frequency-aware reward for one group (see the module docstring for the formula).

    Args:
        answers: the G extracted answers of one group; None means no answer was found.
        valid_items: the list the prompt offered. Duplicates collapse, so L is the number of *distinct* items.

    Returns:
        G rewards; invalid answers (None or not in `valid_items`) get -1, the minimum possible.
    """
    valid = set(valid_items)
    if not valid:
        raise ValueError("frequency_aware_rewards: valid_items is empty")
    num_items = len(valid)
    counts = Counter(a for a in answers if a is not None and a in valid)
    num_valid = sum(counts.values())
    rewards = []
    for answer in answers:
        if answer is None or answer not in valid:
            rewards.append(-1.0)
        else:
            rewards.append(1.0 - (counts[answer] / num_valid - 1.0 / num_items))
    return rewards


def group_reward(fn: Callable[..., list[float]]) -> Callable[..., list[float]]:
    """Mark `fn(prompts, completions, **dataset_columns) -> list[float]` as group-aware.

    GAPOTrainer then calls it once per group, with exactly the G completions of one prompt, after gathering the
    group from every process. Works on functions and on callable objects (set on the instance).
    """
    setattr(fn, GROUP_REWARD_ATTR, True)
    return fn


def is_group_reward(fn: Any) -> bool:
    return bool(getattr(fn, GROUP_REWARD_ATTR, False))


def completion_text(prompt: Any, completion: Any) -> str:
    """The assistant's full answer text for one rollout, *including* any pre-filled response prefix.

    TRL hands conversational completions as ``[{"role": "assistant", "content": ...}]`` and plain ones as str.
    When the prompt ends with an assistant message (a pre-filled prefix such as ``"<answer>"``), the model
    continued that message, so the prefix is part of the answer and is prepended here.
    """
    text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
    if isinstance(prompt, list) and prompt and prompt[-1].get("role") == "assistant":
        text = str(prompt[-1]["content"]) + text
    return text


def validate_group_rewards(name: str, rewards: Any, group_size: int) -> list[float]:
    """Check a group reward's output: one finite float per completion, or a one-line error naming the function."""
    try:
        values = [float(r) for r in rewards]
    except (TypeError, ValueError) as err:
        raise ValueError(f"group reward {name!r} must return a list of floats, got {type(rewards).__name__}") from err
    if len(values) != group_size:
        raise ValueError(f"group reward {name!r} returned {len(values)} rewards for a group of {group_size}")
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise ValueError(f"group reward {name!r} returned a non-finite reward ({bad[0]}) in a group of {group_size}")
    return values


@group_reward
def frequency_reward(
    prompts: list[Any], completions: list[Any], items: list[Sequence[str]], **kwargs: Any
) -> list[float]:
    """The paper's frequency-aware reward as a group reward, reading the valid items from the dataset column `items`."""
    answers = [extract_answer(completion_text(p, c)) for p, c in zip(prompts, completions, strict=True)]
    return frequency_aware_rewards(answers, items[0])


frequency_reward.__name__ = "frequency"
