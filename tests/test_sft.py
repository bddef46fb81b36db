"""The Appendix G SFT baseline: its loss is the summed per-item NLL, and training moves the LoRA weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gapo import prefix
from gapo.repro.chat import render_prompt
from gapo.repro.sft import (
    SFTConfig,
    build_item_batch,
    item_completion_ids,
    lora_model,
    per_row_nll,
    summed_item_loss,
    train_sft,
)

PROMPTS = [
    [
        {
            "role": "user",
            "content": "Pick one: [Mars, Venus, Earth]. Format your response as follows: <answer>x</answer>.",
        }
    ],
    [{"role": "user", "content": "Choose: [Red, Blue]"}],
]
ITEMS = [["Mars", "Venus", "Earth"], ["Red", "Blue"]]


def _tiny_config(tmp_path: Path, **settings: object) -> SFTConfig:
    """An SFT on tiny-random with a rank-4 LoRA, saving to tmp_path/sft; `settings` set the rest."""
    return SFTConfig(model="tiny-random", output_dir=str(tmp_path / "sft"), lora_r=4, lora_alpha=8, **settings)


def _direct_nll(model, tokenizer, prompt, item) -> float:  # noqa: ANN001
    """-sum log p(<answer>item</answer><EOS> | prompt), one unpadded sequence, no batching tricks."""
    text, prefix = render_prompt(tokenizer, prompt)
    prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    completion = item_completion_ids(tokenizer, item, prefix)
    ids = torch.tensor([prompt_ids + completion])
    with torch.no_grad():
        logp = model(input_ids=ids).logits[0].float().log_softmax(-1)
    start = len(prompt_ids)
    return -sum(float(logp[start + k - 1, tok]) for k, tok in enumerate(completion))


def test_loss_is_the_summed_per_item_nll(tiny_model_and_tokenizer):  # noqa: ANN001
    model, tok = tiny_model_and_tokenizer
    batch = build_item_batch(tok, PROMPTS, ITEMS)
    assert batch.input_ids.shape[0] == 5 and batch.num_prompts == 2
    with torch.no_grad():
        rows = per_row_nll(model, batch)
        loss = summed_item_loss(model, batch)
    direct = [_direct_nll(model, tok, p, item) for p, items in zip(PROMPTS, ITEMS, strict=True) for item in items]
    torch.testing.assert_close(rows, torch.tensor(direct), rtol=1e-4, atol=1e-3)
    assert float(loss) == pytest.approx(sum(direct) / 2, rel=1e-4)  # per prompt: sum over items; mean over prompts


def test_the_shared_prompt_forward_gives_the_plain_forwards_loss_and_gradients(tiny_model_and_tokenizer, caplog):  # noqa: ANN001
    """Rows of two prompts of different lengths (left padding) and items of different lengths (right padding): the
    shared-prompt forward (each prompt encoded once) gives each row's NLL and the LoRA gradients of the plain forward,
    which encodes every row's prompt; with gradient checkpointing on, training takes the plain forward and says why."""
    import logging

    from gapo.repro.sft import SFTConfig, lora_model

    model, tok = tiny_model_and_tokenizer
    peft_model = lora_model(model, SFTConfig(lora_r=4, lora_alpha=8, lora_dropout=0.0))
    with torch.no_grad():  # LoRA B starts at 0: give the adapter a say in the outputs
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.05)
    items = [["Mars", "Venus", "Earth", "Jupiter and its moons"], ["Red", "Blue"]]
    batch = build_item_batch(tok, PROMPTS, items)
    mask = batch.completion_mask
    assert (batch.attention_mask[:, 0] == 0).any() and (mask[:, -1] == 0).any()  # both paddings are exercised
    lora = [p for n, p in peft_model.named_parameters() if "lora_" in n]

    def nll_and_grads(forward):  # noqa: ANN001, ANN202
        peft_model.zero_grad(set_to_none=True)
        rows = forward()
        (rows.sum() / batch.num_prompts).backward()
        return rows.detach(), [p.grad.detach().clone() for p in lora]

    shared, shared_grads = nll_and_grads(lambda: per_row_nll(peft_model, batch))
    plain, plain_grads = nll_and_grads(lambda: per_row_nll(peft_model, batch, shared=False))
    torch.testing.assert_close(shared, plain, rtol=1e-4, atol=1e-4)
    for got, want in zip(shared_grads, plain_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5)
    direct = [_direct_nll(peft_model, tok, p, item) for p, its in zip(PROMPTS, items, strict=True) for item in its]
    torch.testing.assert_close(shared, torch.tensor(direct), rtol=1e-4, atol=1e-3)

    peft_model.base_model.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    prefix._warned.clear()  # said once a process: another test may have said it already
    with caplog.at_level(logging.INFO, logger="gapo.repro.sft"):
        checkpointed, _ = nll_and_grads(lambda: per_row_nll(peft_model, batch))
    torch.testing.assert_close(checkpointed, plain, rtol=1e-4, atol=1e-4)
    assert "gradient checkpointing" in caplog.text and "plain forward" in caplog.text


def test_completion_is_answer_tag_plus_eos_and_respects_a_prefilled_prefix(tokenizer):  # noqa: ANN001
    ids = item_completion_ids(tokenizer, "Mars")
    assert ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids[:-1]) == "<answer>Mars</answer>"
    assert tokenizer.decode(item_completion_ids(tokenizer, "Mars", "<answer>")[:-1]) == "Mars</answer>"
    prefilled = [PROMPTS[0] + [{"role": "assistant", "content": "<answer>"}]]
    batch = build_item_batch(tokenizer, prefilled, [["Mars"]])
    assert tokenizer.decode(batch.input_ids[0]).endswith("<answer>Mars</answer><|im_end|>")
    with pytest.raises(ValueError, match="not a prefix"):
        item_completion_ids(tokenizer, "Mars", "<reply>")
    with pytest.raises(ValueError, match="empty item list"):
        build_item_batch(tokenizer, PROMPTS[:1], [[]])


def test_a_few_steps_change_the_lora_weights_and_save_an_adapter(tiny_model_and_tokenizer, tmp_path: Path):  # noqa: ANN001
    from gapo.tasks.lists import make_list_selection_dataset

    model, tok = tiny_model_and_tokenizer
    config = _tiny_config(
        tmp_path, steps=3, batch_size=2, learning_rate=1e-2, lora_dropout=0.0, num_prompts=4, max_items=6
    )
    dataset = make_list_selection_dataset(config.num_prompts, config.seed, config.min_items, config.max_items)
    peft_model = lora_model(model, config)
    before = {k: v.detach().clone() for k, v in peft_model.named_parameters() if "lora_" in k}
    result = train_sft(config, peft_model, tok, dataset)
    after = dict(peft_model.named_parameters())
    changed = [k for k, v in before.items() if not torch.equal(v, after[k].detach())]
    assert any("lora_A" in k for k in changed) and any("lora_B" in k for k in changed)
    assert len(result.losses) == 3 and all(loss > 0 for loss in result.losses)
    assert (result.output_dir / "adapter_config.json").is_file()
    assert json.loads((result.output_dir / "sft_config.json").read_text())["config"]["steps"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["sft"]  # no partial directories left

    from gapo.models import load_model_and_tokenizer

    reloaded, _ = load_model_and_tokenizer("tiny-random", adapter=str(result.output_dir))  # a valid adapter
    assert type(reloaded).__name__.startswith("Peft")


def test_two_processes_write_the_same_adapter_folder_whatever_their_hash_seed(tmp_path: Path, same_adapter_folders):
    """What keeps the stages that read models/sft current when train_sft runs again with the same result: every file
    of the adapter folder the same bytes, though PEFT keeps the target modules in a set, whose order follows the
    process's string hash seed, and the tokenizer's config would record HF_HUB_OFFLINE (set by the Makefile, not by a
    bare `dvc repro`)."""
    import os
    import subprocess
    import sys

    flags = ["--no-params", "--model", "tiny-random", "--steps", "1", "--batch-size", "2", "--num-prompts", "2"]
    folders = []
    for hash_seed, offline in (("1", "1"), ("2", "0")):
        cwd = tmp_path / hash_seed
        cwd.mkdir()
        subprocess.run(
            [sys.executable, "-m", "gapo.repro.sft", *flags, "--lora-r", "4", "--output-dir", "sft"],
            cwd=cwd,
            env={**os.environ, "PYTHONHASHSEED": hash_seed, "HF_HUB_OFFLINE": offline},
            capture_output=True,
            check=True,
        )
        folders.append(cwd / "sft")
    same_adapter_folders(*folders)


def test_config_validation():
    with pytest.raises(ValueError, match="steps"):
        SFTConfig(steps=0)
    with pytest.raises(ValueError, match="lora_dropout"):
        SFTConfig(lora_dropout=1.0)
    with pytest.raises(ValueError, match="lr_scheduler_type must be one of constant, constant_with_warmup"):
        SFTConfig(lr_scheduler_type="inverse_sqrt")
    with pytest.raises(ValueError, match="warmup_steps must be a whole number"):
        SFTConfig(lr_scheduler_type="cosine", warmup_steps=2.5)
    with pytest.raises(ValueError, match="warmup_steps needs a schedule that warms up"):
        SFTConfig(warmup_steps=3)
    assert SFTConfig(steps=40, lr_scheduler_type="linear", warmup_steps=0.05).warmup_step_count == 2


@pytest.mark.parametrize(
    ("schedule", "warmup", "message"),
    [
        *(("cosine", w, "warmup_steps must be a whole number of steps >= 0") for w in (-1, 2.5, True, "5")),
        # transformers' constant never reads warmup_steps: named there, it would silently train without a warmup
        ("constant", 3, "warmup_steps needs a schedule that warms up (constant_with_warmup, linear, cosine); constant"),
        ("constant", 0.05, "set warmup_steps 0 or another schedule, got warmup_steps 0.05"),
    ],
)
def test_gapo_and_the_sft_refuse_a_warmup_with_the_same_line(schedule, warmup, message, tmp_path):  # noqa: ANN001
    from gapo.trainer import GAPOConfig

    with pytest.raises(ValueError) as sft_error:
        SFTConfig(lr_scheduler_type=schedule, warmup_steps=warmup)
    with pytest.raises(ValueError) as gapo_error:
        GAPOConfig(output_dir=str(tmp_path), lr_scheduler_type=schedule, warmup_steps=warmup)
    assert str(sft_error.value) == str(gapo_error.value)
    assert message in str(sft_error.value)


@pytest.mark.parametrize(
    ("schedule", "warmup", "expected"),
    [
        ("constant", 0, [1.0, 1.0, 1.0, 1.0]),
        ("cosine", 1, [0.0, 1.0, 0.75, 0.25]),  # warm up over step 0, then half a cosine over the 3 steps left
        ("linear", 0, [1.0, 0.75, 0.5, 0.25]),
    ],
)
def test_each_step_runs_at_its_schedules_rate_and_the_record_says_so(
    tiny_model_and_tokenizer, tmp_path: Path, schedule: str, warmup: int, expected: list[float]
):  # noqa: ANN001
    model, tok = tiny_model_and_tokenizer
    config = _tiny_config(
        tmp_path, steps=4, batch_size=1, learning_rate=1e-3, lr_scheduler_type=schedule, warmup_steps=warmup
    )
    dataset = {"prompt": PROMPTS, "items": ITEMS}
    train_sft(config, lora_model(model, config), tok, dataset)
    record = json.loads((tmp_path / "sft" / "sft_config.json").read_text())
    assert record["learning_rates"] == pytest.approx([1e-3 * f for f in expected], abs=1e-12)
    assert len(record["losses"]) == 4 and record["config"]["lr_scheduler_type"] == schedule
    assert sorted(record["rows"][:2]) == [[0], [1]] and sorted(record["rows"][2:]) == [[0], [1]]  # shuffled passes


def test_lora_covers_every_linear_layer_as_before(tiny_model_and_tokenizer):  # noqa: ANN001
    """SFT's LoRA now comes from `gapo.backends.lora_config` with the shared target list; on a Qwen2 model that is
    exactly what PEFT's "all-linear" (SFT's old setting) wraps."""
    from peft import LoraConfig, get_peft_model

    from gapo.models import load_model_and_tokenizer

    model, _ = tiny_model_and_tokenizer
    ours = lora_model(model, SFTConfig(lora_r=4, lora_alpha=8))
    reference, _ = load_model_and_tokenizer("tiny-random", device="cpu")
    old = get_peft_model(reference, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))

    def wrapped(peft_model):  # noqa: ANN001, ANN202
        return sorted(name for name, module in peft_model.named_modules() if hasattr(module, "lora_A"))

    assert wrapped(ours) and wrapped(ours) == wrapped(old)


def test_gapo_sft_reads_the_dataset_settings_of_the_data_section(tmp_path: Path):
    """`gapo sft` takes num_prompts, seed, list sizes and the prefix from params.yaml's `data`, as `gapo train` does,
    so its default dataset is the rows `gapo data` writes."""
    from gapo.config import config_from_cli

    params = tmp_path / "params.yaml"
    params.write_text(
        "data:\n  num_prompts: 6\n  seed: 3\n  max_items: 5\n  response_prefix: <answer>\nsft:\n  steps: 2\n",
        encoding="utf-8",
    )
    (config,) = config_from_cli([SFTConfig], ["--params", str(params)], "gapo sft", "sft", "")
    assert (config.num_prompts, config.seed, config.min_items, config.max_items) == (6, 3, 4, 5)
    assert config.response_prefix == "<answer>" and config.steps == 2
    (flagged,) = config_from_cli([SFTConfig], ["--params", str(params), "--num-prompts", "2"], "gapo sft", "sft", "")
    assert flagged.num_prompts == 2  # flags still override


def test_the_sft_speed_probe_times_both_paths_on_the_same_batches(tmp_path: Path):
    """perf/sft_speed.py end to end on tiny-random: a median for each path, the ratio line, and the JSON it names."""
    import subprocess
    import sys

    out = tmp_path / "sft_speed.json"
    root = Path(__file__).resolve().parents[1]
    flags = ["--model", "tiny-random", "--steps", "2", "--warmup", "1", "--batch-size", "2", "--out", str(out)]
    run = subprocess.run(
        [sys.executable, "perf/sft_speed.py", *flags], cwd=root, capture_output=True, text=True, check=True
    )
    report = json.loads(out.read_text())
    assert report["batch_size"] == 2 and len(report["rows"]) == 3
    assert [len(report["times"][path]) for path in ("shared", "plain")] == [2, 2]
    assert report["nll_max_abs_diff"] < 1e-3
    assert run.stdout.strip().splitlines()[-1] == f"shared_vs_plain={report['shared_vs_plain']:.2f}"
