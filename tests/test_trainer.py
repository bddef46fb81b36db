"""GAPOTrainer on tiny-random: real generation, real rewards, real optimizer steps (no mocks)."""

from __future__ import annotations

import math

import pytest
import torch

from gapo.backends import lora_config
from gapo.models import load_model_and_tokenizer
from gapo.rewards import frequency_reward, group_reward
from gapo.tasks.lists import make_list_selection_dataset
from gapo.trainer import GAPOConfig, GAPOTrainer, compute_group_rewards, split_groups


def tiny_args(tmp_path, **overrides):  # noqa: ANN001, ANN201
    values = dict(
        output_dir=str(tmp_path / "out"),
        num_generations=4,
        per_device_train_batch_size=4,
        max_steps=2,
        max_completion_length=6,
        learning_rate=1e-2,
        lora_r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    values.update(overrides)
    return GAPOConfig(**values)


# --- config ------------------------------------------------------------------------------------------------------


def test_paper_defaults_and_cpu_precision(tmp_path):  # noqa: ANN001
    args = GAPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=32)
    assert (args.num_generations, args.beta, args.learning_rate) == (32, 0.0, 1e-5)
    assert (args.lora_r, args.lora_alpha, args.lora_dropout) == (64, 32, 0.1)
    lora = lora_config(args)
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (64, 32, 0.1)
    if not torch.cuda.is_available():
        assert args.bf16 is False and args.gradient_checkpointing is False and args.use_cpu is True


def test_config_errors(tmp_path):  # noqa: ANN001
    with pytest.raises(ValueError, match="num_generations must be at least 2"):
        GAPOConfig(output_dir=str(tmp_path), num_generations=1)
    with pytest.raises(ValueError, match="divisible by num_generations"):
        GAPOConfig(output_dir=str(tmp_path), num_generations=3, per_device_train_batch_size=4)


# --- group bookkeeping --------------------------------------------------------------------------------------------


def test_compute_group_rewards_calls_once_per_whole_group():
    calls = []

    @group_reward
    def record(prompts, completions, items, **kwargs):  # noqa: ANN001, ANN202
        calls.append((prompts, completions, items))
        return [float(i) for i in range(len(completions))]

    prompts = ["p0"] * 3 + ["p1"] * 3
    completions = ["a", "b", "c", "d", "e", "f"]
    items = [["x"]] * 6
    rewards = compute_group_rewards(record, "record", prompts, completions, {"items": items}, group_size=3)
    assert rewards == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]
    assert [c[0] for c in calls] == [["p0"] * 3, ["p1"] * 3]
    assert [c[1] for c in calls] == [["a", "b", "c"], ["d", "e", "f"]]
    with pytest.raises(RuntimeError, match="mix prompts"):
        compute_group_rewards(record, "record", ["p0", "p1"], ["a", "b"], {}, group_size=2)
    with pytest.raises(ValueError, match="do not split into groups"):
        split_groups(5, 2)


@pytest.mark.parametrize(("bad", "message"), [([1.0], "returned 1 rewards"), ([math.nan, 0.0], "non-finite")])
def test_bad_group_reward_output_is_a_clear_error(bad, message):  # noqa: ANN001
    @group_reward
    def broken(prompts, completions, **kwargs):  # noqa: ANN001, ANN202
        return bad

    with pytest.raises(ValueError, match=message):
        compute_group_rewards(broken, "broken", ["p", "p"], ["a", "b"], {}, group_size=2)


# --- real training steps ---------------------------------------------------------------------------------------


def lora_state(model):  # noqa: ANN001, ANN201
    return {k: v.detach().clone() for k, v in model.named_parameters() if "lora_" in k}


@pytest.mark.parametrize("shared_prompt_forward", [True, False])
def test_steps_change_lora_weights_and_log_metrics(tmp_path, shared_prompt_forward):  # noqa: ANN001
    model, tokenizer = load_model_and_tokenizer("tiny-random", device="cpu")
    args = tiny_args(tmp_path, shared_prompt_forward=shared_prompt_forward)
    seen_group_sizes = []

    def per_completion_length(completions, **kwargs):  # noqa: ANN001, ANN202  (TRL-style, mixed in)
        return [-0.01 * len(c[-1]["content"]) for c in completions]

    @group_reward
    def spy(prompts, completions, items, **kwargs):  # noqa: ANN001, ANN202
        seen_group_sizes.append(len(completions))
        assert all(p == prompts[0] for p in prompts) and all(i == items[0] for i in items)
        return [0.0] * len(completions)

    trainer = GAPOTrainer(
        model=model,
        reward_funcs=[frequency_reward, per_completion_length, spy],
        args=args,
        train_dataset=make_list_selection_dataset(8, seed=0, response_prefix="<answer>"),
        processing_class=tokenizer,
        peft_config=lora_config(args),
    )
    before = lora_state(trainer.model)
    assert before, "LoRA adapters were not applied"
    trainer.train()
    after = lora_state(trainer.model)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "no LoRA weight changed after two GAPO steps"
    assert seen_group_sizes == [4, 4]
    logged = {k for row in trainer.state.log_history for k in row}
    for key in (
        "rewards/mean",
        "rewards/std",
        "diversity/valid_fraction",
        "diversity/group_jsd",
        "train/frac_zero_std_groups",
        "rewards/frequency/mean",
        "rewards/per_completion_length/mean",
    ):
        assert key in logged, key


def test_bad_dataset_rows_fail_before_training(tmp_path):  # noqa: ANN001
    import datasets

    model, tokenizer = load_model_and_tokenizer("tiny-random", device="cpu")
    bad = datasets.Dataset.from_dict({"prompt": [[{"role": "user", "content": "pick"}]], "items": [["a", "a"]]})
    with pytest.raises(ValueError, match="duplicate 'a'"):
        GAPOTrainer(
            model=model,
            reward_funcs=[frequency_reward],
            args=tiny_args(tmp_path),
            train_dataset=bad,
            processing_class=tokenizer,
        )


def test_prefilled_answer_is_continued_not_closed(tmp_path):  # noqa: ANN001
    """TRL closes a pre-filled assistant turn and opens a new one; GAPOTrainer continues it."""
    model, tokenizer = load_model_and_tokenizer("tiny-random", device="cpu")
    dataset = make_list_selection_dataset(4, seed=0, response_prefix="<answer>")
    trainer = GAPOTrainer(
        model=model,
        reward_funcs=[frequency_reward],
        args=tiny_args(tmp_path),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(tiny_args(tmp_path)),
    )
    prompts = [dataset[0]["prompt"], [dataset[1]["prompt"][0]]]  # one pre-filled, one plain
    ids, images, fields = trainer._tokenize_prompts(prompts)
    texts = [tokenizer.decode(x) for x in ids]
    assert texts[0].endswith("<|im_start|>assistant\n<answer>")
    assert texts[1].endswith("<|im_start|>assistant\n")
    assert images is None and fields == {}


def test_missing_reward_column_is_one_line_before_any_generation(tmp_path):  # noqa: ANN001
    from datasets import Dataset

    from gapo.rewards import required_columns

    assert required_columns(frequency_reward) == ["items"]
    assert required_columns(lambda prompts, completions, **kw: []) == []
    model, tokenizer = load_model_and_tokenizer("tiny-random", device="cpu")
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "Pick one: a, b."}]}] * 4)
    with pytest.raises(ValueError, match="reward 'frequency' needs dataset column\\(s\\) 'items'; .* has: prompt"):
        GAPOTrainer(
            model=model,
            reward_funcs=[frequency_reward],
            args=tiny_args(tmp_path),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=lora_config(tiny_args(tmp_path)),
        )
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
