"""The supervised baseline of Appendix G: LoRA SFT where each prompt's loss sums the NLL of *every* valid answer.

How it differs from GAPO: no sampling and no reward. For a list prompt with valid items V, the loss is

    L(prompt) = sum over v in V of  -log p_theta(<answer>v</answer><EOS> | prompt)

(token log-probabilities summed over the completion, and over the items). Minimising it pushes probability mass
onto every valid completion; the paper finds it improves uniformity on training-like lists (JS 0.31 -> 0.19 for
Qwen2.5 7B) but not open-set diversity (Unique@500 29 -> 3), Table 8.

Batch layout for one step (rows = all (prompt, item) pairs of `batch_size` prompts): each prompt LEFT-padded to a
common width P, each completion RIGHT-padded to a common width C, so every completion starts in column P (TRL's
layout for its log-prob pass)::

    . . . [prompt 0 ....] | <answer>Mars</answer><EOS>        row (prompt 0, "Mars")
    . . . [prompt 0 ....] | <answer>Venus</answer><EOS> .     row (prompt 0, "Venus")
    [prompt 1 .........]  | <answer>Red</answer><EOS> . .     row (prompt 1, "Red")
                            ^^^^^^^^^^^^^^^^^^^^^^^^^^ labelled

A prompt's L rows share their prompt tokens, and `gapo.prefix.shared_prompt_logps` (the forward GAPO's loss uses)
encodes each distinct prompt once and runs its L completions against that encoding: an SFT step then costs about its
completions, not L copies of the prompt (3.2x faster a step on the embedded model: docs/performance.md). Exact by
causal attention; a model that path turns away (`Unsupported`, e.g. gradient checkpointing on) takes the plain
forward over the same layout, with one log line. Only the completion columns go through the 152k-wide LM head.
LoRA dropout draws one mask per prompt on the shared path and one per row on the plain one: equal in expectation.

The step loss is the mean over the batch's prompts of L(prompt). Paper settings are not given for this baseline;
we reuse GAPO's LoRA (r 64, alpha 32, dropout 0.1, all linear layers) and learning rate (1e-5): `gapo.defaults`.
The rate stays constant unless `lr_scheduler_type` names a schedule. The adapter folder's sft_config.json holds the
settings and each step's loss, learning rate and dataset rows.

CPU smoke run::

    python -m gapo.repro.sft --no-params --model tiny-random --steps 2 --batch-size 2 --lora-r 4 --output-dir /tmp/sft
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel, get_peft_model
from peft.utils import CONFIG_NAME
from transformers import get_scheduler

from gapo import defaults
from gapo.backends import lora_config
from gapo.config import config_from_cli, warmup_problem
from gapo.io import atomic_dir
from gapo.models import load_model_and_tokenizer, save_tokenizer, sort_target_modules
from gapo.prefix import Unsupported, log_once, mask_positions, shared_prompt_logps
from gapo.repro.chat import render_prompt
from gapo.tasks.lists import make_list_selection_dataset

logger = logging.getLogger(__name__)

#: The learning-rate schedules the SFT takes (`transformers.get_scheduler`'s names that need no other argument).
#: constant is the default: Appendix G names no schedule, and every SFT before this setting ran at a constant rate.
SCHEDULES = ("constant", "constant_with_warmup", "linear", "cosine")

#: The target completion for item v (the paper's answer format).
TARGET_TEMPLATE = "<answer>{item}</answer>"


@dataclass
class SFTConfig:
    """Settings of `gapo sft` (section ``sft`` of params.yaml, which takes the dataset settings from ``data``)."""

    model: str = field(default="embedded", metadata={"help": "Base model: hub id, local dir, embedded, tiny-random."})
    output_dir: str = field(default="outputs/sft", metadata={"help": "Where the LoRA adapter is saved."})
    steps: int = field(default=200, metadata={"help": "Optimizer steps."})
    batch_size: int = field(default=8, metadata={"help": "Prompts per step (each expands to one row per item)."})
    learning_rate: float = defaults.LEARNING_RATE.field("AdamW learning rate (the paper's GAPO value, 1e-5)")
    lr_scheduler_type: str = field(
        default="constant",
        metadata={"help": f"Learning-rate schedule over `steps`, transformers' names: one of {', '.join(SCHEDULES)}."},
    )
    warmup_steps: float = field(
        default=0,
        metadata={"help": "Linear warmup from 0: whole steps, or a fraction of `steps` in [0, 1); not under constant."},
    )
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm; 0 disables it."})
    lora_r: int = defaults.LORA_R.field()
    lora_alpha: int = defaults.LORA_ALPHA.field()
    lora_dropout: float = defaults.LORA_DROPOUT.field()
    lora_target_modules: list[str] = defaults.LORA_TARGET_MODULES.field()
    num_prompts: int = defaults.NUM_PROMPTS.field("synthetic list prompts generated for training (without a dataset)")
    min_items: int = defaults.MIN_ITEMS.field()
    max_items: int = defaults.MAX_ITEMS.field()
    categories: list[str] | None = defaults.CATEGORIES.field()
    response_prefix: str | None = defaults.RESPONSE_PREFIX.field()
    seed: int = defaults.SEED.field("seed for data, order and LoRA init")
    log_every: int = field(default=10, metadata={"help": "Log the loss every this many steps."})

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "lora_r", "lora_alpha", "num_prompts", "log_every"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.lr_scheduler_type not in SCHEDULES:
            raise ValueError(f"lr_scheduler_type must be one of {', '.join(SCHEDULES)}, got {self.lr_scheduler_type!r}")
        if (problem := warmup_problem(self.warmup_steps, self.lr_scheduler_type)) is not None:
            raise ValueError(problem)

    @property
    def warmup_step_count(self) -> int:
        """`warmup_steps` in steps: a fraction in (0, 1) is that share of `steps`, rounded up, as transformers reads
        `gapo train`'s."""
        warmup = self.warmup_steps
        return math.ceil(warmup * self.steps) if 0 < warmup < 1 else int(warmup)


# --------------------------------------------------------------------------------------------------------------------
# Batch construction and the loss
# --------------------------------------------------------------------------------------------------------------------


def item_completion_ids(tokenizer: Any, item: str, prefix: str = "") -> list[int]:
    """Token ids of ``<answer>item</answer>`` + EOS, minus a pre-filled `prefix` that the prompt already holds."""
    target = TARGET_TEMPLATE.format(item=item)
    if not target.startswith(prefix):
        raise ValueError(f"the prompt's pre-filled prefix {prefix!r} is not a prefix of the target {target!r}")
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no EOS token")
    return tokenizer(target[len(prefix) :], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


@dataclass(frozen=True)
class ItemBatch:
    """One row per (prompt, item): the prompt left-padded to P columns, then the completion right-padded to C."""

    input_ids: torch.Tensor  # (R, P+C)
    attention_mask: torch.Tensor  # (R, P+C)
    completion_width: int  # C: the labelled tokens are the completion columns the mask keeps
    prompt_index: torch.Tensor  # (R,) which prompt each row belongs to
    num_prompts: int

    @property
    def completion_mask(self) -> torch.Tensor:
        """(R, C): 1 on each row's completion tokens (the NLL's terms), 0 on its right padding."""
        return self.attention_mask[:, -self.completion_width :]


def build_item_batch(tokenizer: Any, prompts: Sequence[Any], items: Sequence[Sequence[str]]) -> ItemBatch:
    """One row per (prompt, valid item) in the layout above: prompts left-padded, completions right-padded."""
    if len(prompts) != len(items) or not prompts:
        raise ValueError(f"need one item list per prompt and at least one prompt, got {len(prompts)} and {len(items)}")
    prompt_rows, completions, owner = [], [], []
    for p, (prompt, valid) in enumerate(zip(prompts, items, strict=True)):
        distinct = list(dict.fromkeys(valid))
        if not distinct:
            raise ValueError(f"prompt {p} has an empty item list")
        text, prefix = render_prompt(tokenizer, prompt)
        prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        for item in distinct:
            prompt_rows.append(prompt_ids)
            completions.append(item_completion_ids(tokenizer, item, prefix))
            owner.append(p)
    width_p = max(len(r) for r in prompt_rows)
    width_c = max(len(c) for c in completions)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids = torch.tensor(
        [
            [pad] * (width_p - len(r)) + r + c + [pad] * (width_c - len(c))
            for r, c in zip(prompt_rows, completions, strict=True)
        ]
    )
    attention_mask = torch.tensor(
        [
            [0] * (width_p - len(r)) + [1] * (len(r) + len(c)) + [0] * (width_c - len(c))
            for r, c in zip(prompt_rows, completions, strict=True)
        ]
    )
    return ItemBatch(input_ids, attention_mask, width_c, torch.tensor(owner), len(prompts))


def plain_completion_logps(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_width: int
) -> torch.Tensor:
    """Log-prob of each completion token, (R, C), from one forward over the whole rows (every prompt once per row):
    the fallback for a model `shared_prompt_logps` turns away. Only the C positions that predict completion tokens (the
    prompt's last column and the completion's first C-1) go through the LM head."""
    c = completion_width
    position_ids = mask_positions(attention_mask)  # left padding: real tokens start at position 0
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, logits_to_keep=c + 1
    ).logits[:, :-1, :]  # (R, C, V): column P-1+j predicts completion token j
    targets = input_ids[:, -c:]
    return -torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")


def per_row_nll(model: Any, batch: ItemBatch, shared: bool = True) -> torch.Tensor:
    """Summed NLL of each row's completion tokens, shape (R,). Gradients flow when called outside no_grad.

    Each distinct prompt is encoded once (`shared_prompt_logps`) unless the model is turned away or `shared` is False:
    then every row's prompt is encoded again (`plain_completion_logps`), the reference perf/sft_speed.py and the tests
    hold the shared path to."""
    device = next(model.parameters()).device
    input_ids = batch.input_ids.to(device)
    mask = batch.attention_mask.to(device)
    c = batch.completion_width
    logps = None
    if shared:
        try:
            logps, _ = shared_prompt_logps(model, input_ids, mask, c)
        except Unsupported as reason:
            log_once(f"SFT: each row's prompt is encoded again (plain forward): {reason}", logging.INFO, logger)
    if logps is None:
        logps = plain_completion_logps(model, input_ids, mask, c)
    return -(logps * mask[:, -c:]).sum(dim=-1)


def summed_item_loss(model: Any, batch: ItemBatch) -> torch.Tensor:
    """Appendix G loss: per prompt, the sum over its items of the completion NLL; averaged over the prompts."""
    return per_row_nll(model, batch).sum() / batch.num_prompts


# --------------------------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class SFTResult:
    output_dir: Path
    losses: list[float]


def lora_model(model: Any, config: SFTConfig) -> Any:
    """Wrap `model` with a fresh trainable LoRA on `config.lora_target_modules` (seeded), built as GAPO's is
    (`gapo.backends.lora_config`)."""
    torch.manual_seed(config.seed)
    return get_peft_model(model, lora_config(config))


def train_sft(
    config: SFTConfig,
    model: Any | None = None,
    tokenizer: Any | None = None,
    dataset: Any | None = None,
) -> SFTResult:
    """Train the Appendix G baseline and save the adapter (atomically) to `config.output_dir`.

    `model`/`tokenizer` default to `load_model_and_tokenizer(config.model)`; a model that is already a PeftModel is
    trained as is. `dataset` (rows with ``prompt`` and ``items``) defaults to
    `gapo.tasks.lists.make_list_selection_dataset` with `config`'s dataset settings (those of `gapo data`).
    """
    if model is None or tokenizer is None:
        model, tokenizer = load_model_and_tokenizer(config.model)
    if dataset is None:
        dataset = make_list_selection_dataset(
            config.num_prompts,
            config.seed,
            config.min_items,
            config.max_items,
            config.categories,
            config.response_prefix,
        )
    prompts, items = list(dataset["prompt"]), list(dataset["items"])
    if not prompts:
        raise ValueError("the SFT dataset is empty")
    peft_model = model if isinstance(model, PeftModel) else lora_model(model, config)
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("the model has no trainable (LoRA) parameters")
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay)
    scheduler = get_scheduler(config.lr_scheduler_type, optimizer, config.warmup_step_count, config.steps)
    rng = random.Random(config.seed)
    order: list[int] = []
    losses: list[float] = []
    rates: list[float] = []  # each step's learning rate, the schedule as it ran
    rows: list[list[int]] = []  # each step's dataset rows: a loss can be read against its lists without replaying
    peft_model.train()
    for step in range(config.steps):
        if len(order) < config.batch_size:
            fresh = list(range(len(prompts)))
            rng.shuffle(fresh)
            order.extend(fresh)
        picked, order = order[: config.batch_size], order[config.batch_size :]
        rows.append(picked)
        batch = build_item_batch(tokenizer, [prompts[i] for i in picked], [items[i] for i in picked])
        loss = summed_item_loss(peft_model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(trainable, config.max_grad_norm)
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.detach()))
        if (step + 1) % config.log_every == 0 or step == 0:
            logger.info("sft step %d/%d loss %.4f", step + 1, config.steps, losses[-1])
    peft_model.eval()
    out = _save_adapter(peft_model, tokenizer, config, {"losses": losses, "learning_rates": rates, "rows": rows})
    return SFTResult(out, losses)


def _save_adapter(model: Any, tokenizer: Any, config: SFTConfig, steps: dict[str, list[Any]]) -> Path:
    target = Path(config.output_dir)
    with atomic_dir(target) as tmp:
        model.save_pretrained(str(tmp))
        sort_target_modules(tmp / CONFIG_NAME)
        save_tokenizer(tokenizer, tmp)
        (tmp / "sft_config.json").write_text(json.dumps({"config": asdict(config), **steps}, indent=1))
    return target


def cli(argv: list[str] | None = None) -> int:
    """``gapo sft``: flags override params.yaml [sft], which overrides `SFTConfig` defaults."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    (config,) = config_from_cli([SFTConfig], argv, "gapo sft", "sft", "Appendix G SFT baseline (summed per-item NLL).")
    result = train_sft(config)
    print(f"saved the SFT adapter to {result.output_dir} (final loss {result.losses[-1]:.4f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
