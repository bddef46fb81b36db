"""`gapo train`: GAPO with LoRA on synthetic list-selection prompts, from params.yaml (section `train`) plus flags.

How this run differs from plain GRPO: the reward is `gapo.rewards.frequency_reward`, a *group* reward computed over
all G completions of a prompt (the paper's frequency-aware reward); everything else is TRL's GRPO. `--task open`
trains on open prompts with `ClassFrequencyReward`, `--task targets` on list prompts with a target distribution
(`target_distribution_reward`); see `task_data`.

    # CPU, the offline default model (about 40 s a step at G=16 on 2 cores)
    gapo train --max-steps 40 --num-generations 16 --output-dir runs/gapo-embedded
    # interrupted, even by kill -9 mid-save? continue from the newest complete checkpoint (<= `save_steps` lost)
    gapo train --max-steps 40 --num-generations 16 --output-dir runs/gapo-embedded --resume
    # GPUs, the paper's setting (--backend unsloth for Unsloth's kernels; auto is PEFT for now)
    gapo train --model Qwen/Qwen2.5-7B-Instruct --num-generations 32 --lora-r 64 --gradient-accumulation-steps 8

Output directory::

    adapter/            the final LoRA adapter (written atomically at the end)
    checkpoint-N/       TRL checkpoints every `save_steps` steps (for --resume; a partial one is skipped)
    metrics.jsonl       one JSON object per logged step
    metrics.json        final summary + the config
    config.json         the resolved TrainConfig
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gapo import backends, defaults, models
from gapo.checkpoints import last_checkpoint, remove_incomplete
from gapo.config import config_from_cli
from gapo.io import TEMP_SUFFIX, atomic_dir, read_jsonl, write_json_atomic, write_jsonl_atomic
from gapo.rewards import (
    ClassFrequencyReward,
    GroupReward,
    answer_format_reward,
    frequency_reward,
    is_group_reward,
    target_distribution_reward,
    valid_frequency_reward,
)
from gapo.tasks import lists, open_ended, targets

logger = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """Everything a GAPO training run needs; params.yaml's `train` section mirrors it (the dataset settings come from
    its `data` section). Shared defaults (the paper's, the data's) are `gapo.defaults`'."""

    model: str = field(default="embedded", metadata={"help": "hub id, local directory, 'embedded' or 'tiny-random'"})
    output_dir: str = field(default="runs/gapo", metadata={"help": "where the adapter, checkpoints and metrics go"})
    seed: int = defaults.SEED.field("seed for data, sampling and LoRA init")
    num_prompts: int = defaults.NUM_PROMPTS.field("size of the synthetic training set")
    min_items: int = defaults.MIN_ITEMS.field()
    max_items: int = defaults.MAX_ITEMS.field()
    task: str = field(
        default="lists",
        metadata={
            "help": "lists: list prompts, frequency reward (the paper); open: open prompts ('Name a country.'), "
            "class-frequency reward over `equivalence` with a lexicon per category; targets: list prompts stating a "
            "target distribution, target-distribution reward"
        },
    )
    categories: list[str] | None = defaults.CATEGORIES.field(
        "comma-separated subset of categories (lists/targets: tasks.lists.CATEGORIES; open: lexicons)"
    )
    equivalence: str = field(
        default="normalized",
        metadata={"help": "task open: when two answers are the same class (gapo.equivalence spec, e.g. normalized)"},
    )
    response_prefix: str | None = defaults.RESPONSE_PREFIX.field()
    num_generations: int = defaults.NUM_GENERATIONS.field()
    per_device_train_batch_size: int = field(default=32, metadata={"help": "completions per device micro-batch"})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "micro-batches per optimizer step"})
    max_steps: int = field(default=40, metadata={"help": "optimizer steps"})
    learning_rate: float = defaults.LEARNING_RATE.field()
    lora_r: int = defaults.LORA_R.field()
    lora_alpha: int = defaults.LORA_ALPHA.field()
    lora_dropout: float = defaults.LORA_DROPOUT.field()
    lora_target_modules: list[str] | None = defaults.LORA_TARGET_MODULES.field()
    max_completion_length: int = field(default=16, metadata={"help": "tokens generated per completion"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature during training"})
    beta: float = defaults.BETA.field()
    split_format_reward: bool = field(
        default=False,
        metadata={"help": "task lists: format and frequency as two rewards normalised apart (GAPOConfig's help)"},
    )
    save_steps: int = field(default=10, metadata={"help": "checkpoint interval in steps (what --resume can lose)"})
    save_total_limit: int = field(default=2, metadata={"help": "checkpoints kept"})
    logging_steps: int = field(default=1, metadata={"help": "log every N steps"})
    shared_prompt_forward: bool | None = field(
        default=None, metadata={"help": "encode each prompt once per group (default: on for CPU, off on CUDA)"}
    )
    backend: str = field(default="auto", metadata={"help": "auto, unsloth or peft (auto: PEFT for now; gapo.backends)"})
    use_vllm: bool = field(default=False, metadata={"help": "generate with vLLM (TRL's use_vllm; needs the gpu extra)"})
    vllm_mode: str = field(default="colocate", metadata={"help": "colocate | server (TRL's vllm_mode)"})
    resume: bool = field(default=False, metadata={"help": "continue from the last checkpoint in output_dir"})

    def __post_init__(self) -> None:
        if self.num_generations < 2:
            raise ValueError(f"num_generations must be at least 2, got {self.num_generations}")
        if self.max_steps <= 0 or self.num_prompts <= 0:
            raise ValueError("max_steps and num_prompts must be positive")
        if isinstance(self.categories, str):
            self.categories = [c.strip() for c in self.categories.split(",") if c.strip()]
        if problem := config_problem(self):
            raise ValueError(problem)


#: Fields that must be at least 1 (a zero `save_steps` or `logging_steps` is accepted by TRL and then never saves).
POSITIVE_FIELDS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "lora_r",
    "lora_alpha",
    "max_completion_length",
    "save_steps",
    "save_total_limit",
    "logging_steps",
)


def config_problem(cfg: TrainConfig) -> str | None:
    """The first value of `cfg` that cannot train, as a one-line message with its fix; None when all can.

    Why here and not in TRL: TRL reports these after the model has loaded (or not at all: `save_steps 0`), and the
    run has by then written its output directory.
    """
    for name in POSITIVE_FIELDS:
        value = getattr(cfg, name)
        if not isinstance(value, int) or value < 1:
            return f"{name} must be a positive integer, got {value!r}"
    if not cfg.temperature > 0 or cfg.temperature == float("inf"):
        return f"temperature must be a finite number > 0 (GRPO samples its groups), got {cfg.temperature}"
    if not cfg.learning_rate > 0 or cfg.learning_rate == float("inf"):
        return f"learning_rate must be a finite number > 0, got {cfg.learning_rate}"
    if not 0 <= cfg.lora_dropout < 1:
        return f"lora_dropout must be in [0, 1), got {cfg.lora_dropout}"
    if not cfg.beta >= 0:
        return f"beta (the KL coefficient) must be >= 0, got {cfg.beta}"
    if cfg.backend not in backends.BACKENDS:
        return f"backend must be one of auto, unsloth, peft, got {cfg.backend!r}"
    if cfg.vllm_mode not in ("colocate", "server"):
        return f"vllm_mode must be colocate or server, got {cfg.vllm_mode!r}"
    if cfg.task not in TASKS:
        return f"task must be one of {', '.join(TASKS)}, got {cfg.task!r}"
    if cfg.response_prefix:
        return (
            "response_prefix pre-fills the answer, which only evaluation does (TRL would close the pre-filled turn "
            "and drop it); leave it unset for training"
        )
    if cfg.split_format_reward and cfg.task != "lists":
        return f"split_format_reward applies to task lists only, got task {cfg.task!r}"
    return None


#: What `task` selects: the training prompts and the group reward (see `task_data`).
TASKS: tuple[str, ...] = ("lists", "open", "targets")


def task_data(cfg: TrainConfig, dataset: Any | None = None) -> tuple[Any, list[GroupReward]]:
    """The training dataset and reward functions of `cfg.task`; every check runs here, before any model loads.

    `dataset` (e.g. the pipeline's data/train.jsonl, built once by its `generate` stage) is trained on as given;
    without it the task builds its prompts from `cfg`'s dataset settings. Either way each reward checks it.

    Why one function: the three tasks differ only in their prompts and their group reward; the trainer, LoRA and
    checkpointing are the same. `open` refuses a category without a lexicon ("validity unchecked"), since its reward
    could not tell a valid answer from an invalid one.
    """
    if cfg.task == "open":
        categories = tuple(cfg.categories or open_ended.OPEN_TRAIN_CATEGORIES)
        unchecked = [
            c for c in categories if c in open_ended.OPEN_QUESTIONS and not open_ended.open_validity(c).checked
        ]
        if unchecked:
            raise ValueError(
                f"task open: categories {unchecked} have no lexicon ({open_ended.VALIDITY_UNCHECKED}); train on "
                f"checked ones: {', '.join(open_ended.LEXICON_SOURCES)}"
            )
        if dataset is None:
            dataset = open_ended.make_open_dataset(
                cfg.num_prompts, cfg.seed, categories=categories, response_prefix=cfg.response_prefix
            )
        rewards: list[GroupReward] = [
            ClassFrequencyReward(cfg.equivalence, validity=open_ended.open_validity_map(categories))
        ]
        return dataset, rewards
    list_args = {
        "min_items": cfg.min_items,
        "max_items": cfg.max_items,
        "categories": cfg.categories,
        "response_prefix": cfg.response_prefix,
    }
    if cfg.task == "targets":
        rewards = [target_distribution_reward]
        build = targets.make_target_distribution_dataset
    elif cfg.split_format_reward:
        rewards = [answer_format_reward, valid_frequency_reward]
        build = lists.make_list_selection_dataset
    else:
        rewards = [frequency_reward]
        build = lists.make_list_selection_dataset
    if dataset is None:
        dataset = build(cfg.num_prompts, cfg.seed, **list_args)
    for reward in rewards:  # its columns and rows, before any model loads
        if is_group_reward(reward):
            reward.check(dataset)
    return dataset, rewards


def gapo_config(cfg: TrainConfig) -> Any:
    """The GAPOConfig (TRL arguments) for a TrainConfig; raises the config errors before any model loads."""
    from gapo.trainer import GAPOConfig  # unsloth: trl (which gapo.trainer imports) must load after backends.activate

    extra = {"lora_target_modules": cfg.lora_target_modules} if cfg.lora_target_modules else {}
    return GAPOConfig(
        output_dir=cfg.output_dir,
        seed=cfg.seed,
        data_seed=cfg.seed,
        num_generations=cfg.num_generations,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        lora_r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature,
        beta=cfg.beta,
        split_format_reward=cfg.split_format_reward,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        logging_steps=cfg.logging_steps,
        shared_prompt_forward=cfg.shared_prompt_forward,
        backend=cfg.backend,
        use_vllm=cfg.use_vllm,
        vllm_mode=cfg.vllm_mode,
        **extra,
    )


# --------------------------------------------------------------------------------------------------------------------
# Logging callback: metrics.jsonl, one line per logged step
# --------------------------------------------------------------------------------------------------------------------


def _metrics_callback(path: Path) -> Any:
    from transformers import TrainerCallback  # unsloth: transformers must load after backends.activate

    class JsonlMetrics(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001, ANN201
            if not state.is_world_process_zero or not logs or "loss" not in logs and "reward" not in logs:
                return
            row = {"step": state.global_step, "time": time.time(), **logs}
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")

    return JsonlMetrics()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl (none when there is none yet); a torn last line (a kill mid-write) is dropped with a
    warning naming the file, a bad line anywhere else is an error naming the file and line (`gapo.io.read_jsonl`)."""
    return read_jsonl(path, torn_tail=True) if path.is_file() else []


def _trim_metrics(path: Path, last_step: int) -> None:
    """On resume, drop logged steps after the checkpoint we restart from (they will be redone), and any torn line."""
    if not path.is_file():
        return
    kept = [r for r in read_metrics(path) if r.get("step", 0) <= last_step]
    write_jsonl_atomic(path, kept)


# --------------------------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------------------------


def train(cfg: TrainConfig, dataset: Any | None = None) -> dict[str, Any]:
    """Run GAPO training on `dataset` (default: the one `cfg`'s task builds, `task_data`); returns the final summary
    (also written to output_dir/metrics.json)."""
    # The backend first: Unsloth must be imported before trl (gapo.trainer imports trl).
    backend = backends.resolve(cfg.backend)
    backends.check_vllm(cfg.use_vllm, cfg.model)
    backends.activate(backend)
    from gapo.trainer import GAPOTrainer  # unsloth: only now may trl load

    # Everything that can be wrong is checked before the model loads.
    args = gapo_config(cfg)
    models.check_model_name(cfg.model)
    dataset, reward_funcs = task_data(cfg, dataset)
    out = Path(cfg.output_dir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--output-dir {out} is a file, not a directory; pass a directory path")
    if cfg.model != models.TINY_RANDOM:  # build or verify the embedded cache (a bad source is refused) before writing
        models.resolve_model_path(cfg.model)
    if cfg.lora_target_modules:
        models.check_lora_targets(cfg.model, cfg.lora_target_modules)
    resume_from = last_checkpoint(out) if cfg.resume else None
    if cfg.resume and resume_from is None:
        logger.warning("--resume: no complete checkpoint in %s, starting from scratch", out)
    elif resume_from is not None:
        logger.info("--resume: continuing from %s", resume_from)
    if not cfg.resume and (out / "adapter").exists():
        raise FileExistsError(f"{out} already holds a finished run; pass --resume or another --output-dir")
    out.mkdir(parents=True, exist_ok=True)
    if cfg.resume:
        remove_incomplete(out, resume_from)
    metrics_path = out / "metrics.jsonl"
    if resume_from is not None:
        _trim_metrics(metrics_path, int(resume_from.name.split("-")[-1]))
    elif metrics_path.exists():
        metrics_path.unlink()
    write_json_atomic(out / "config.json", dataclasses.asdict(cfg), indent=2)

    model, tokenizer, peft_config = backends.load_policy(cfg.model, args)
    trainer = GAPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[_metrics_callback(metrics_path)],
    )
    start = time.time()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    elapsed = time.time() - start

    summary = summarize(metrics_path)
    summary.update({"train_seconds": elapsed, "config": dataclasses.asdict(cfg)})
    save_adapter(trainer, tokenizer, out / "adapter")
    if trainer.accelerator.is_main_process:
        write_json_atomic(out / "metrics.json", summary, indent=2)
    return summary


def save_adapter(trainer: Any, tokenizer: Any, target: Path) -> None:
    """Write the trained adapter to `target` atomically, with every process taking part.

    Why every process: under FSDP the LoRA weights are sharded, and `Trainer.save_model` gathers them (a main-process
    `save_pretrained` of a shard crashes). It writes into one staging folder all processes know, named like
    `gapo.io`'s temp folders (so a resume after a kill removes it); the main process then moves it into place.
    """
    accelerator = trainer.accelerator
    staging = target.parent / f".{target.name}.save{TEMP_SUFFIX}"
    if accelerator.is_main_process:
        shutil.rmtree(staging, ignore_errors=True)
    accelerator.wait_for_everyone()
    trainer.save_model(str(staging))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        with atomic_dir(target) as tmp:
            for path in staging.iterdir():
                if path.name != "training_args.bin":  # the Trainer's own pickle; the adapter does not need it
                    shutil.move(str(path), tmp / path.name)
            tokenizer.save_pretrained(str(tmp))
        shutil.rmtree(staging, ignore_errors=True)


KEY_METRICS = (
    "reward",
    "rewards/mean",
    "diversity/valid_fraction",
    "diversity/group_jsd",
    "train/frac_zero_std_groups",
)


def summarize(metrics_path: Path) -> dict[str, Any]:
    """First/last values and the per-step series of the key metrics in metrics.jsonl."""
    rows = read_metrics(metrics_path)
    series = {k: [r[k] for r in rows if k in r] for k in KEY_METRICS}
    return {
        "steps": rows[-1]["step"] if rows else 0,
        "first": {k: v[0] for k, v in series.items() if v},
        "last": {k: v[-1] for k, v in series.items() if v},
        "series": series,
    }


def cli(argv: list[str] | None = None) -> int:
    cfg = config_from_cli(TrainConfig, argv, "gapo train", "train", "Train a LoRA adapter with GAPO.")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    summary = train(cfg)
    print(json.dumps({"output_dir": cfg.output_dir, "steps": summary["steps"], "last": summary["last"]}))
    return 0
