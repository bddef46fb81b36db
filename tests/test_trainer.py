"""GAPOTrainer on tiny-random: real generation, real rewards, real optimizer steps (no mocks)."""

from __future__ import annotations

import math

import pytest
import torch

from gapo import trainer as trainer_module
from gapo.backends import cpu_has_bf16, lora_config
from gapo.rewards import frequency_reward, group_reward
from gapo.tasks.lists import make_list_selection_dataset
from gapo.trainer import GAPOConfig, compute_group_rewards, split_groups

# --- config ------------------------------------------------------------------------------------------------------


def test_paper_defaults_and_cpu_precision(tmp_path):  # noqa: ANN001
    args = GAPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=32)
    assert (args.num_generations, args.beta, args.learning_rate) == (32, 0.0, 1e-5)
    assert (args.lora_r, args.lora_alpha, args.lora_dropout) == (64, 32, 0.1)
    lora = lora_config(args)
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (64, 32, 0.1)
    if not torch.cuda.is_available():
        assert args.bf16 is False and args.gradient_checkpointing is False and args.use_cpu is True


def test_policy_dtype_follows_the_cpus_bf16_units(tmp_path, monkeypatch):  # noqa: ANN001
    assert cpu_has_bf16("flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n")
    assert cpu_has_bf16("flags\t\t: fpu avx2 amx_bf16 amx_tile\n")
    assert not cpu_has_bf16("flags\t\t: fpu avx2 avx512f avx512bw\n")  # bf16 would run emulated: float32
    for has, dtype in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(trainer_module, "cpu_has_bf16", lambda has=has: has)
        args = GAPOConfig(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=32)
        assert args.policy_dtype == dtype and args.bf16 is False  # weights in bf16, no autocast
    pinned = GAPOConfig(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=32, policy_dtype="float32")
    assert pinned.policy_dtype == "float32"
    with pytest.raises(ValueError, match="policy_dtype must be one of auto, float32, bfloat16, got 'fp16'"):
        GAPOConfig(output_dir=str(tmp_path), policy_dtype="fp16")


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
def test_steps_change_lora_weights_and_log_metrics(tiny_gapo_trainer, shared_prompt_forward):  # noqa: ANN001
    seen_group_sizes = []

    def per_completion_length(completions, **kwargs):  # noqa: ANN001, ANN202  (TRL-style, mixed in)
        return [-0.01 * len(c[-1]["content"]) for c in completions]

    @group_reward
    def spy(prompts, completions, items, **kwargs):  # noqa: ANN001, ANN202
        seen_group_sizes.append(len(completions))
        assert all(p == prompts[0] for p in prompts) and all(i == items[0] for i in items)
        return [0.0] * len(completions)

    trainer = tiny_gapo_trainer(
        [frequency_reward, per_completion_length, spy], shared_prompt_forward=shared_prompt_forward
    )  # 8 list prompts pre-filled with "<answer>"
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
    rollouts = [row["rollouts"] for row in trainer.state.log_history if "rollouts" in row]
    assert rollouts == [4, 4]  # one group of G=4 a step, counted by the reward step whichever class runs


def test_gapo_trainer_overrides_only_the_reward_step_of_trl() -> None:
    """The issue-21 contract: GAPOTrainer replaces one TRL method, the one whole-group rewards need; the CPU speed-up
    is a mixin (two more) that `gapo train` adds only where `shared_prompt_forward` is on."""
    from trl import GRPOTrainer

    from gapo.prefix import SharedPromptMixin
    from gapo.trainer import GAPOConfig, GAPOTrainer, SharedPromptGAPOTrainer, trainer_class

    def overrides(cls: type) -> set[str]:
        return {name for name in vars(cls) if callable(getattr(GRPOTrainer, name, None))}

    assert overrides(GAPOTrainer) == {"__init__", "_calculate_rewards"}
    assert overrides(SharedPromptMixin) == {"__init__", "_generate_single_turn", "_get_per_token_logps_and_entropies"}
    assert SharedPromptGAPOTrainer.__mro__[1:3] == (SharedPromptMixin, GAPOTrainer)
    for on, cls in ((True, SharedPromptGAPOTrainer), (False, GAPOTrainer)):
        args = GAPOConfig(output_dir="-", shared_prompt_forward=on, num_generations=2, per_device_train_batch_size=2)
        assert trainer_class(args) is cls


def test_bfloat16_policy_learns_with_float32_lora(tiny_gapo_trainer):  # noqa: ANN001
    """GAPOConfig.policy_dtype="bfloat16" (`backends.load_policy` loads the policy in it): the LoRA weights stay
    float32 and move, the shared-prompt path runs, the loss is finite."""

    def shorter(completions, **kwargs):  # noqa: ANN001, ANN202  (a spread in every group)
        return [-0.1 * len(c[-1]["content"]) for c in completions]

    trainer = tiny_gapo_trainer([shorter], shared_prompt_forward=True, policy_dtype="bfloat16")
    before = lora_state(trainer.model)
    assert before and all(w.dtype == torch.float32 for w in before.values())
    assert trainer.model.get_base_model().lm_head.weight.dtype == torch.bfloat16
    trainer.train()
    after = lora_state(trainer.model)
    assert [k for k in before if not torch.equal(before[k], after[k])], "no LoRA weight changed in bfloat16"
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    assert losses and all(math.isfinite(x) for x in losses)
    assert trainer._shared_prompt_note is None  # the shared-prompt path did not fall back


def test_bad_dataset_rows_fail_before_training(tiny_gapo_trainer):  # noqa: ANN001
    import datasets

    bad = datasets.Dataset.from_dict({"prompt": [[{"role": "user", "content": "pick"}]], "items": [["a", "a"]]})
    with pytest.raises(ValueError, match="duplicate 'a'"):
        tiny_gapo_trainer([frequency_reward], bad, lora=False)


def test_prefilled_prompts_are_refused_before_training(tiny_gapo_trainer):  # noqa: ANN001
    """TRL closes a pre-filled assistant turn and opens a new one, dropping the prefix: a one-line error instead."""
    dataset = make_list_selection_dataset(4, seed=0, response_prefix="<answer>")
    with pytest.raises(ValueError, match="dataset row 0: the prompt ends in an assistant turn"):
        tiny_gapo_trainer([frequency_reward], dataset, lora=False)


def test_arguments_given_by_position_are_checked_as_by_name(tiny_gapo_args):  # noqa: ANN001
    """GRPOTrainer takes (model, reward_funcs, args, train_dataset, ...) by position too: the same one-line checks."""
    from gapo.models import load_model_and_tokenizer
    from gapo.rewards import answer_format_reward, valid_frequency_reward
    from gapo.trainer import GAPOTrainer

    model, tokenizer = load_model_and_tokenizer("tiny-random", dtype=torch.float32, device="cpu")
    prefilled = make_list_selection_dataset(4, seed=0, response_prefix="<answer>")
    args = tiny_gapo_args()
    with pytest.raises(ValueError, match="dataset row 0: the prompt ends in an assistant turn"):
        GAPOTrainer(model, [frequency_reward], args, prefilled, None, tokenizer)
    split = tiny_gapo_args(split_format_reward=True, scale_rewards="none")
    with pytest.raises(ValueError, match="pass gapo.rewards.centred_valid_frequency_reward instead of valid_freq"):
        GAPOTrainer(model, [answer_format_reward, valid_frequency_reward], split, make_list_selection_dataset(4, 0))
    with pytest.raises(TypeError):  # an argument GRPOTrainer does not take: refused before any model work too
        GAPOTrainer(model, [frequency_reward], args, no_such_argument=1)


def test_missing_reward_column_is_one_line_before_any_generation(tiny_gapo_trainer, tmp_path):  # noqa: ANN001
    from datasets import Dataset

    assert frequency_reward.columns == ("items",) and frequency_reward.name == frequency_reward.__name__ == "frequency"
    assert group_reward(lambda prompts, completions, **kw: []).columns == ()
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "Pick one: a, b."}]}] * 4)
    with pytest.raises(ValueError, match="reward 'frequency' needs dataset column\\(s\\) 'items'; .* has: prompt"):
        tiny_gapo_trainer([frequency_reward], dataset)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# --- the TRL seam: shared defaults, reward keyword arguments, log-prob batching -----------------------------------


def test_every_config_takes_the_paper_defaults_from_one_home(tmp_path):  # noqa: ANN001
    """GAPOConfig, `gapo train`'s ScriptArguments, SFTConfig and DataConfig default to `gapo.defaults` (the paper's
    Appendix F)."""
    import dataclasses

    from gapo import defaults
    from gapo.repro.sft import SFTConfig
    from gapo.repro.stages.generate import DataConfig
    from gapo.train import ScriptArguments

    assert (defaults.LEARNING_RATE.value, defaults.NUM_GENERATIONS.value) == (1e-5, 32)
    assert (defaults.LORA_R.value, defaults.LORA_ALPHA.value, defaults.LORA_DROPOUT.value) == (64, 32, 0.1)
    configs = [GAPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=32), SFTConfig()]
    shared = {name.lower(): d for name, d in vars(defaults).items() if isinstance(d, defaults.Default)}
    data = {"num_prompts", "seed", "min_items", "max_items", "categories", "response_prefix"}
    for config in [*configs, ScriptArguments(), DataConfig()]:
        fields = {f.name for f in dataclasses.fields(config)} & set(shared)
        if isinstance(config, GAPOConfig):  # a TRL config: its seed is TRL's, and it builds no data
            fields -= data
        assert fields, type(config).__name__
        for name in fields:
            want = shared[name].value
            assert getattr(config, name) == (list(want) if isinstance(want, tuple) else want), (config, name)
    for config in configs:  # the paper's LoRA on all linear layers, lr 1e-5, wherever a config trains
        assert (config.lora_r, config.lora_alpha, config.lora_dropout, config.learning_rate) == (64, 32, 0.1, 1e-5)
        lora = lora_config(config)
        assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (64, 32, 0.1)
        assert set(lora.target_modules) == set(defaults.LORA_TARGET_MODULES.value)


def test_group_rewards_get_trls_reward_kwargs_sliced_to_the_group(tiny_gapo_trainer):  # noqa: ANN001
    """A group reward gets every keyword argument TRL gives a per-completion reward, with per-row ones (columns,
    completion_ids, environments) cut to its group; the list reward's diversity metrics arrive through log_metric."""
    from gapo.metrics import jsd_from_uniform

    seen: dict[str, list] = {"per_completion": [], "group": []}

    def per_completion(prompts, completions, **kwargs):  # noqa: ANN001, ANN202
        seen["per_completion"].append({"prompts": prompts, "completions": completions, **kwargs})
        return [0.0] * len(completions)

    @group_reward
    def group(prompts, completions, **kwargs):  # noqa: ANN001, ANN202
        seen["group"].append({"prompts": prompts, "completions": completions, **kwargs})
        return [0.0] * len(completions)

    dataset = make_list_selection_dataset(2, seed=0)
    trainer = tiny_gapo_trainer([per_completion, group, frequency_reward], dataset)
    rows = [dict(dataset[g]) for g in range(2) for _ in range(4)]  # two groups of G=4, as TRL's sampler lays them
    items = [rows[0]["items"], rows[4]["items"]]
    answers = [items[0][0]] * 3 + ["nothing"] + [items[1][0], items[1][1]] * 2
    completions = [[{"role": "assistant", "content": f"<answer>{a}</answer>"}] for a in answers]
    completion_ids = [[i, i + 1] for i in range(8)]
    trainer.environments = [f"env{i}" for i in range(8)]  # what TRL holds per row with an environment_factory
    trainer._calculate_rewards(rows, [r["prompt"] for r in rows], completions, completion_ids)

    (trl_kwargs,) = seen["per_completion"]
    first, second = seen["group"]
    assert set(trl_kwargs) <= set(first) and "environments" in trl_kwargs
    assert first["prompts"] == [rows[0]["prompt"]] * 4 and first["completions"] == completions[:4]
    assert second["completion_ids"] == completion_ids[4:] and second["environments"] == ["env4", "env5", "env6", "env7"]
    assert second["items"] == [items[1]] * 4 and second["category"] == [rows[4]["category"]] * 4
    assert first["trainer_state"] is trainer.state and callable(first["log_metric"]) and callable(first["log_extra"])
    # frequency_reward logs each group's stats; TRL averages them, as the trainer averaged the batch before.
    pending = trainer._pending_metrics
    assert pending["diversity/valid_fraction"] == [0.75, 1.0]
    assert pending["diversity/group_jsd"] == pytest.approx(
        [jsd_from_uniform([items[0][0]] * 3 + [None], items[0]), jsd_from_uniform(answers[4:], items[1])]
    )


def test_shared_prompt_logps_keep_trls_batch_size(tiny_gapo_trainer, monkeypatch):  # noqa: ANN001
    """TRL chunks the old/reference log-prob passes by `batch_size`; the shared-prompt override passes it on."""
    from gapo import prefix

    trainer = tiny_gapo_trainer(shared_prompt_forward=True)
    seen = []
    original = prefix.shared_prompt_logps

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append(kwargs.get("batch_size"))
        return original(*args, **kwargs)

    monkeypatch.setattr(prefix, "shared_prompt_logps", spy)
    prompt = trainer.processing_class("Pick one: [a, b].", add_special_tokens=False)["input_ids"]
    torch.manual_seed(0)
    completion = torch.randint(0, 1000, (4, 3))  # (B, C): two groups of two rows with one prompt
    input_ids = torch.cat([torch.tensor([prompt] * 4), completion], dim=1)  # (B, P+C)
    mask = torch.ones_like(input_ids)
    with torch.no_grad():
        chunked = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, mask, 3, batch_size=2)
        whole = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, mask, 3)
    assert seen == [2, None]
    torch.testing.assert_close(chunked[0], whole[0])


def test_lora_init_is_seeded_from_args_seed(tiny_gapo_trainer):  # noqa: ANN001
    """TRL wraps the model in LoRA before Trainer seeds: GAPOTrainer seeds first, so one seed gives one adapter init
    (two runs of a recipe start alike) and another seed another; whatever the global RNG held before does not count."""

    def lora_a(seed: int, global_state: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(global_state)  # what the process's RNG held before the trainer was built
        trainer = tiny_gapo_trainer(seed=seed)
        return {k: v.detach().clone() for k, v in trainer.model.named_parameters() if "lora_A" in k}

    # the same seed after different global states: the same init; another seed after the same state: another init
    first, again, other = lora_a(0, global_state=1), lora_a(0, global_state=2), lora_a(1, global_state=1)
    assert first and first.keys() == again.keys() == other.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not any(torch.equal(first[k], other[k]) for k in first)
