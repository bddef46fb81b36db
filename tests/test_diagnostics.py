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

from gapo.metrics import advantage_split, first_item_share, frequency_spread, group_diversity_stats, zero_std_groups
from gapo.rewards import (
    answer_format_reward,
    centred_over_valid,
    centred_valid_frequency_reward,
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
    for none in ("none", False):  # mean-centred: TRL sums the (centred) rewards and subtracts the group's mean only
        args = GAPOConfig(output_dir=str(tmp_path), num_generations=8, split_format_reward=True, scale_rewards=none)
        assert args.multi_objective_aggregation == "sum_then_normalize" and args.scale_rewards == "none"


def test_split_and_mean_centred_selects_the_centred_frequency_reward():
    from gapo.train import configs, task_data

    _, rewards = task_data(*configs({"model": "tiny-random", "num_prompts": 4, "split_format_reward": True}))
    assert [r.__name__ for r in rewards] == ["answer_format_reward", "valid_frequency"]
    settings_ = {"model": "tiny-random", "num_prompts": 4, "split_format_reward": True, "scale_rewards": "none"}
    _, rewards = task_data(*configs(settings_))
    assert [r.__name__ for r in rewards] == ["answer_format_reward", "valid_frequency_centred"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(-5, 5)), max_size=16))
def test_centring_over_valid_keeps_differences_and_unscored_rows(rewards):  # noqa: ANN001
    centred = centred_over_valid(rewards)
    assert [c is None for c in centred] == [r is None for r in rewards]
    scored = [(c, r) for c, r in zip(centred, rewards, strict=True) if r is not None]
    if scored:
        assert abs(math.fsum(c for c, _ in scored)) <= 1e-9 * len(scored) * 5
        shift = scored[0][1] - scored[0][0]
        assert all(r - c == pytest.approx(shift, abs=1e-9) for c, r in scored)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "c", None, "zzz"]), min_size=2, max_size=24),
    st.floats(0.05, 3.0),
    st.floats(0.1, 20.0),
)
def test_split_and_mean_centred_keeps_format_and_frequency_apart(answers, w_format, w_freq):  # noqa: ANN001
    """TRL's sum_then_normalize with scale_rewards none on (format, centred frequency): each advantage is w_format x
    the format reward's deviation from the group's mean plus w_freq x the valid answer's frequency reward's deviation
    from the valid answers' mean, exactly: the frequency reward's level (about 1) never widens the format gap."""
    prompts = [[{"role": "user", "content": "pick"}]] * len(answers)
    columns = {"prompts": prompts, "completions": _completions(answers), "items": [ITEMS] * len(answers)}
    form = answer_format_reward(**columns)
    centred = centred_valid_frequency_reward(**columns)
    per_func = torch.tensor([[f, math.nan if c is None else c] for f, c in zip(form, centred, strict=True)])
    summed = (per_func * torch.tensor([w_format, w_freq])).nansum(dim=1)  # TRL's sum, NaN (unscored) as 0
    advantages = summed - summed.mean()  # TRL's scale_rewards="none"
    paper = frequency_reward(**columns)
    valid = [a for a, ok in zip(paper, form, strict=True) if ok > 0]
    mean_valid = sum(valid) / len(valid) if valid else 0.0
    mean_form = sum(form) / len(form)
    for advantage, f, r in zip(advantages.tolist(), form, paper, strict=True):
        expected = w_format * (f - mean_form) + (w_freq * (r - mean_valid) if f > 0 else 0.0)
        assert advantage == pytest.approx(expected, abs=1e-4)


def test_groups_of_equal_weighted_rewards_carry_no_signal():
    """Equal weighted sums in float32 may differ in their last bit (their std 1.2e-7 on this page's CPU, 32 times
    0.3 + 1.26875): still a group with nothing to learn, where torch.isclose's default atol 1e-8 saw a signal."""
    value = torch.tensor(0.3 + 1.0 * (1 - (5 / 32 - 1 / 8)), dtype=torch.float32)
    one_ulp = torch.nextafter(value, torch.tensor(2.0))
    equal = torch.cat([value.repeat(31), one_ulp.view(1)]).view(1, 32)
    assert equal.std(dim=1).item() > 1e-8  # what torch.isclose's default atol calls a signal
    spread = torch.tensor([[1.0, 1.0, 1.0, 1.03125]])
    assert zero_std_groups(torch.cat([equal[:, :4], spread])).tolist() == [True, False]
    assert zero_std_groups(equal).tolist() == [True]
    assert zero_std_groups(np.full((2, 8), 12.5)).tolist() == [True, True]
    with pytest.raises(ValueError, match=r"G >= 2, got shape \(8,\)"):
        zero_std_groups(np.ones(8))


@settings(max_examples=200, deadline=None)
@given(
    st.floats(-1e4, 1e4, width=32),
    st.integers(2, 64),
    st.integers(0, 63),
    st.floats(1e-4, 10.0),
)
def test_a_group_is_equal_up_to_its_last_bit_and_unequal_past_a_relative_gap(value, size, index, gap):  # noqa: ANN001
    """Any float32 reward repeated G times, one of them a bit off, carries no signal; one moved by `gap` of the
    rewards' size (at least 1) does."""
    group = np.full(size, value, dtype=np.float32)
    group[index % size] = np.nextafter(group[0], np.float32(np.inf))
    assert zero_std_groups(group[None, :]).tolist() == [True]
    moved = group.astype(np.float64)
    moved[index % size] = value + gap * max(abs(value), 1.0)
    assert zero_std_groups(np.stack([group, moved])).tolist() == [True, False]


def test_split_and_mean_centred_refuses_the_uncentred_frequency_reward(tiny_gapo_trainer):  # noqa: ANN001
    """Built by hand (not through `gapo train`), the uncentred reward would widen the format gap: one line."""
    rewards = [answer_format_reward, valid_frequency_reward]
    with pytest.raises(ValueError, match="pass gapo.rewards.centred_valid_frequency_reward instead of valid_fr") as err:
        tiny_gapo_trainer(rewards, split_format_reward=True, scale_rewards="none")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("scale_rewards", ["group", "none"])
def test_split_reward_trains_and_logs_the_diagnosis(tiny_gapo_trainer, scale_rewards):  # noqa: ANN001
    """tiny-random never answers validly, so every frequency reward is None (NaN): the step must still be finite and
    learn from the other rewards (a length reward stands in for a signal the random model can vary). Both ways of
    forming the advantages: each reward over its group's std, and mean-centred (the centred frequency reward)."""

    def per_completion_length(completions, **kwargs):  # noqa: ANN001, ANN202
        return [-0.01 * len(c[-1]["content"]) for c in completions]

    frequency = valid_frequency_reward if scale_rewards == "group" else centred_valid_frequency_reward
    trainer = tiny_gapo_trainer(
        [answer_format_reward, frequency, per_completion_length], split_format_reward=True, scale_rewards=scale_rewards
    )
    before = {k: v.clone() for k, v in trainer.model.named_parameters() if "lora_" in k}
    trainer.train()
    changed = [k for k, v in trainer.model.named_parameters() if "lora_" in k and not torch.equal(before[k], v)]
    assert changed, "no LoRA weight changed under the split reward"
    assert all(math.isfinite(row["loss"]) for row in trainer.state.log_history if "loss" in row)
    logged = {k for row in trainer.state.log_history for k in row}
    for key in (
        "rewards/answer_format_reward/mean",
        f"rewards/{frequency.__name__}/mean",
        "advantage/invalid",
        "advantage/valid_shift",
        "advantage/valid_spread",
        "diversity/valid_fraction",
    ):
        assert key in logged, key
