"""The supervised baseline of Appendix G: LoRA SFT where each prompt's loss sums the NLL of *every* valid answer.

How it differs from GAPO: no sampling and no reward. For a list prompt with valid items V, the loss is

    L(prompt) = sum over v in V of  -log p_theta(<answer>v</answer><EOS> | prompt)

(token log-probabilities summed over the completion, and over the items). Minimising it pushes probability mass
onto every valid completion; the paper finds it improves uniformity on training-like lists (JS 0.31 -> 0.19 for
Qwen2.5 7B) but not open-set diversity (Unique@500 29 -> 3), Table 8.

Batch layout for one step (rows = all (prompt, item) pairs of `batch_size` prompts). Every row is LEFT-padded so
that all rows end in the same column; the completion of row i fills its last c_i columns, so only the last
``max(c_i) + 1`` positions need logits (``logits_to_keep``), which keeps the 152k-wide LM head affordable::

    . . . [prompt 0 ....] <answer>Mars</answer><EOS>        row (prompt 0, "Mars")
    . . . [prompt 0 ....] <answer>Venus</answer><EOS>       row (prompt 0, "Venus")
    [prompt 1 .........] <answer>Red</answer><EOS>          row (prompt 1, "Red")
                          ^^^^^^^^^^^^^^^^^^^^^^^^ labelled

The step loss is the mean over the batch's prompts of L(prompt). Paper settings are not given for this baseline;
we reuse GAPO's LoRA (r 64, alpha 32, dropout 0.1, all linear layers) and learning rate (1e-5): `gapo.defaults`.

CPU smoke run::

    python -m gapo.repro.sft --no-params --model tiny-random --steps 2 --batch-size 2 --lora-r 4 --output-dir /tmp/sft
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel, get_peft_model

from gapo import defaults
from gapo.backends import lora_config
from gapo.config import config_from_cli
from gapo.io import atomic_dir
from gapo.models import load_model_and_tokenizer
from gapo.repro.chat import render_prompt
from gapo.tasks.lists import make_list_selection_dataset

logger = logging.getLogger(__name__)

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
    """Left-padded (prompt + completion) rows; `completion_lengths[i]` trailing tokens of row i are labelled."""

    input_ids: torch.Tensor  # (R, T)
    attention_mask: torch.Tensor  # (R, T)
    completion_lengths: torch.Tensor  # (R,)
    prompt_index: torch.Tensor  # (R,) which prompt each row belongs to
    num_prompts: int


def build_item_batch(tokenizer: Any, prompts: Sequence[Any], items: Sequence[Sequence[str]]) -> ItemBatch:
    """One row per (prompt, valid item), left-padded to a common end column."""
    if len(prompts) != len(items) or not prompts:
        raise ValueError(f"need one item list per prompt and at least one prompt, got {len(prompts)} and {len(items)}")
    rows, comp_lengths, owner = [], [], []
    for p, (prompt, valid) in enumerate(zip(prompts, items, strict=True)):
        distinct = list(dict.fromkeys(valid))
        if not distinct:
            raise ValueError(f"prompt {p} has an empty item list")
        text, prefix = render_prompt(tokenizer, prompt)
        prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        for item in distinct:
            completion = item_completion_ids(tokenizer, item, prefix)
            rows.append(prompt_ids + completion)
            comp_lengths.append(len(completion))
            owner.append(p)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ItemBatch(input_ids, attention_mask, torch.tensor(comp_lengths), torch.tensor(owner), len(prompts))


def per_row_nll(model: Any, batch: ItemBatch) -> torch.Tensor:
    """Summed NLL of each row's completion tokens, shape (R,). Gradients flow when called outside no_grad."""
    device = next(model.parameters()).device
    input_ids = batch.input_ids.to(device)
    mask = batch.attention_mask.to(device)
    lengths = batch.completion_lengths.to(device)
    keep = int(lengths.max()) + 1  # logits at column t predict token t + 1
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding: real tokens start at position 0
    logits = model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, logits_to_keep=keep).logits
    logits = logits[:, :-1, :].float()  # (R, K-1, V): predictions of the last K-1 tokens
    targets = input_ids[:, -(keep - 1) :]  # (R, K-1)
    token_nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (R, K-1)
    cols = torch.arange(keep - 1, device=device)[None, :]
    labelled = cols >= (keep - 1 - lengths)[:, None]  # the last c_i columns of row i
    return (token_nll * labelled).sum(dim=-1)


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
    rng = random.Random(config.seed)
    order: list[int] = []
    losses: list[float] = []
    peft_model.train()
    for step in range(config.steps):
        if len(order) < config.batch_size:
            fresh = list(range(len(prompts)))
            rng.shuffle(fresh)
            order.extend(fresh)
        picked, order = order[: config.batch_size], order[config.batch_size :]
        batch = build_item_batch(tokenizer, [prompts[i] for i in picked], [items[i] for i in picked])
        loss = summed_item_loss(peft_model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(trainable, config.max_grad_norm)
        optimizer.step()
        losses.append(float(loss.detach()))
        if (step + 1) % config.log_every == 0 or step == 0:
            logger.info("sft step %d/%d loss %.4f", step + 1, config.steps, losses[-1])
    peft_model.eval()
    out = _save_adapter(peft_model, tokenizer, config, losses)
    return SFTResult(out, losses)


def _save_adapter(model: Any, tokenizer: Any, config: SFTConfig, losses: list[float]) -> Path:
    target = Path(config.output_dir)
    with atomic_dir(target) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / "sft_config.json").write_text(json.dumps({"config": asdict(config), "losses": losses}, indent=1))
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
