"""Issue 19's diagnosis and fix: where GRPO's advantage comes from (format or distribution), and the split reward.

Known values, properties that hold for any group, and a real training run on tiny-random with the split setting.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gapo.metrics import advantage_split, first_item_share, frequency_spread, group_diversity_stats
from gapo.rewards import (
    answer_format_reward,
    frequency_aware_rewards,
    frequency_reward,
    valid_frequency_reward,
    validate_group_rewards,
)
from gapo.trainer import GAPOConfig, compute_group_rewards

ITEMS = ["a", "b", "c"]


def _completions(answers: list[str | None]) -> list[list[dict[str, str]]]:
    return [[{"role": "assistant", "content": "nothing" if a is None else f"<answer>{a}</answer>"}] for a in answers]


# -- advantage_split ---------------------------------------------------------------------------------------------------


def test_advantage_split_known_values():
    split = advantage_split([1.0, 1.0, 0.5, -1.0], [True, True, True, False])
    assert split["advantage/invalid"] == pytest.approx(0.3631, abs=1e-4)
    assert split["advantage/valid_shift"] == pytest.approx(0.3631, abs=1e-4)
    assert split["advantage/valid_spread"] == pytest.approx(0.1761, abs=1e-4)


def test_all_valid_group_has_no_format_part_and_uniform_group_no_signal():
    rewards = frequency_aware_rewards(["a", "a", "b", "c"], ITEMS)
    split = advantage_split(rewards, [True] * 4)
    assert split["advantage/invalid"] == 0.0 and split["advantage/valid_shift"] == 0.0
    assert split["advantage/valid_spread"] > 0.5
    flat = advantage_split(frequency_aware_rewards(["a", "b", "c"], ITEMS), [True] * 3)
    assert all(v == 0.0 for v in flat.values())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", None]), min_size=2, max_size=24))
def test_split_parts_rebuild_grpos_advantage(answers):  # noqa: ANN001
    """For every valid answer A_i = shift + spread_i exactly, so the parts bound |A| and sum to it on invalid rows."""
    rewards = frequency_aware_rewards(answers, ITEMS)
    valid = [a is not None for a in answers]
    r = torch.tensor(rewards, dtype=torch.float64)
    advantages = (r - r.mean()) / (r.std() + 1e-4)  # TRL's scale_rewards="group" (Bessel-corrected std)
    split = advantage_split(rewards, valid)
    n = len(answers)
    invalid_abs = sum(abs(float(a)) for a, ok in zip(advantages, valid, strict=True) if not ok) / n
    valid_abs = sum(abs(float(a)) for a, ok in zip(advantages, valid, strict=True) if ok) / n
    assert split["advantage/invalid"] == pytest.approx(invalid_abs, abs=1e-9)
    assert valid_abs <= split["advantage/valid_shift"] + split["advantage/valid_spread"] + 1e-9


def test_advantage_split_bad_input():
    with pytest.raises(ValueError, match="one per completion"):
        advantage_split([1.0, 0.0], [True])
    with pytest.raises(ValueError, match="non-empty"):
        advantage_split([], [])


def test_frequency_spread_and_first_item_share():
    assert frequency_spread(["a", "b", "c"], ITEMS) == 0.0
    assert frequency_spread(["a", "a", None], ITEMS) == pytest.approx(np.std([1.0, 0.0, 0.0]))
    assert math.isnan(frequency_spread([None, None], ITEMS))
    stats = group_diversity_stats(["a", "a", "b", None], ITEMS)
    assert stats["diversity/first_item_share"] == pytest.approx(2 / 3)
    assert stats["diversity/freq_spread"] == pytest.approx(np.std([2 / 3, 1 / 3, 0.0]))
    assert "diversity/first_item_share" not in group_diversity_stats([None, None], ITEMS)
    assert first_item_share(["a", "a", "b", None], ITEMS) == pytest.approx(2 / 3)
    assert first_item_share(["c", "b"], ITEMS) == 0.0
    assert math.isnan(first_item_share([None, "zzz"], ITEMS))


# -- the split rewards -------------------------------------------------------------------------------------------------


def test_split_rewards_are_the_paper_reward_taken_apart():
    answers = ["a", "a", "b", None, "zzz"]
    prompts = [[{"role": "user", "content": "pick"}]] * len(answers)
    completions = _completions(answers)
    items = [ITEMS] * len(answers)
    paper = frequency_reward(prompts=prompts, completions=completions, items=items)
    frequency = valid_frequency_reward(prompts=prompts, completions=completions, items=items)
    form = answer_format_reward(prompts=prompts, completions=completions, items=items)
    assert frequency[:3] == paper[:3] and frequency[3:] == [None, None]
    assert form == [1.0, 1.0, 1.0, -1.0, -1.0]


def test_group_rewards_may_leave_a_completion_unscored():
    assert math.isnan(validate_group_rewards("f", [1.0, None], 2, allow_none=True)[1])
    with pytest.raises(ValueError, match="no None"):
        validate_group_rewards("f", [1.0, None], 2)
    with pytest.raises(ValueError, match="non-finite"):
        validate_group_rewards("f", [1.0, math.inf], 2, allow_none=True)
    rows = compute_group_rewards(
        valid_frequency_reward,
        "valid_frequency",
        [[{"role": "user", "content": "p"}]] * 4,
        _completions(["a", None, "b", "b"]),
        {"items": [ITEMS] * 4},
        group_size=4,
    )
    assert math.isnan(rows[1]) and rows[0] == pytest.approx(1 - (1 / 3 - 1 / 3))


def test_split_setting_selects_trls_normalize_then_sum(tmp_path):  # noqa: ANN001
    assert GAPOConfig(output_dir=str(tmp_path), num_generations=8).multi_objective_aggregation == "sum_then_normalize"
    args = GAPOConfig(output_dir=str(tmp_path), num_generations=8, split_format_reward=True)
    assert args.multi_objective_aggregation == "normalize_then_sum"


def test_split_reward_trains_and_logs_the_diagnosis(tiny_gapo_trainer):  # noqa: ANN001
    """tiny-random never answers validly, so every frequency reward is None (NaN): the step must still be finite and
    learn from the other rewards (a length reward stands in for a signal the random model can vary)."""

    def per_completion_length(completions, **kwargs):  # noqa: ANN001, ANN202
        return [-0.01 * len(c[-1]["content"]) for c in completions]

    trainer = tiny_gapo_trainer(
        [answer_format_reward, valid_frequency_reward, per_completion_length], split_format_reward=True
    )
    before = {k: v.clone() for k, v in trainer.model.named_parameters() if "lora_" in k}
    trainer.train()
    changed = [k for k, v in trainer.model.named_parameters() if "lora_" in k and not torch.equal(before[k], v)]
    assert changed, "no LoRA weight changed under the split reward"
    assert all(math.isfinite(row["loss"]) for row in trainer.state.log_history if "loss" in row)
    logged = {k for row in trainer.state.log_history for k in row}
    for key in (
        "rewards/answer_format_reward/mean",
        "rewards/valid_frequency/mean",
        "advantage/invalid",
        "advantage/valid_shift",
        "advantage/valid_spread",
        "diversity/valid_fraction",
    ):
        assert key in logged, key
