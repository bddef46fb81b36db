"""`gapo train`: GAPO with LoRA on synthetic list-selection prompts, from params.yaml (section `train`) plus flags.

The reward is the paper's group reward `gapo.rewards.frequency_reward` (GAPO vs GRPO: gapo.trainer); `--task open`
trains on open prompts with `ClassFrequencyReward`, `--task targets` on target-distribution list prompts.

    # CPU, the offline default model (about 40 s a step at G=16 on 2 cores)
    gapo train --max-steps 40 --num-generations 16 --output-dir runs/gapo-embedded
    # interrupted, even by kill -9 mid-save? continue from the newest complete checkpoint (<= `save_steps` lost)
    gapo train --max-steps 40 --num-generations 16 --output-dir runs/gapo-embedded --resume
    # GPUs, the paper's setting (--backend unsloth for Unsloth's kernels; auto is PEFT, gapo.backends says why)
    gapo train --model Qwen/Qwen2.5-7B-Instruct --num-generations 32 --lora-r 64 --gradient-accumulation-steps 8

Output directory::

    adapter/            the final LoRA adapter (written atomically at the end)
    checkpoint-N/       TRL checkpoints every `save_steps` steps (for --resume; a partial one is skipped)
    metrics.jsonl       one JSON object per logged step
    metrics.json        final summary + the config
    config.json         the resolved ScriptArguments and GAPOConfig (`run_config`)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gapo import backends, defaults, models
from gapo.checkpoints import checkpoint_step, last_checkpoint, remove_incomplete
from gapo.config import add_params_flags, config_from_cli, params_values
from gapo.io import TEMP_SUFFIX, atomic_dir, read_jsonl, write_json_atomic, write_jsonl_atomic
from gapo.rewards import (
    ClassFrequencyReward,
    GroupReward,
    answer_format_reward,
    frequency_reward,
    is_group_reward,
    split_frequency_reward,
    target_distribution_reward,
)
from gapo.tasks import lists, open_ended, targets

logger = logging.getLogger(__name__)


@dataclass
class ScriptArguments:
    """`gapo train`'s settings besides GAPOConfig's: model, task and data (params.yaml's `data`), resume."""

    model: str = field(default="embedded", metadata={"help": "hub id, local directory, 'embedded' or 'tiny-random'"})
    task: str = field(
        default="lists",
        metadata={
            "help": "lists: list prompts, frequency reward (the paper); open: open prompts ('Name a country.'), "
            "class-frequency reward over `equivalence` with a lexicon per category; targets: list prompts stating a "
            "target distribution, target-distribution reward"
        },
    )
    num_prompts: int = defaults.NUM_PROMPTS.field("size of the synthetic training set (its seed is --seed)")
    min_items: int = defaults.MIN_ITEMS.field()
    max_items: int = defaults.MAX_ITEMS.field()
    categories: list[str] | None = defaults.CATEGORIES.field(
        "comma-separated subset of categories (lists/targets: tasks.lists.CATEGORIES; open: lexicons)"
    )
    equivalence: str = field(
        default="normalized",
        metadata={"help": "task open: when two answers are the same class (gapo.equivalence spec, e.g. normalized)"},
    )
    response_prefix: str | None = defaults.RESPONSE_PREFIX.field()
    dataset: str | None = field(
        default=None,
        metadata={
            "help": "a JSONL of training rows (`prompt` as chat messages, plus the reward's columns: `items` for "
            "lists, as `gapo data` writes them) used instead of the synthetic set; checked before the model loads"
        },
    )
    resume: bool = field(default=False, metadata={"help": "continue from the last checkpoint in output_dir"})

    def __post_init__(self) -> None:
        if isinstance(self.categories, str):  # `categories: a,b` in a params file
            self.categories = [c.strip() for c in self.categories.split(",") if c.strip()]
        if self.num_prompts <= 0:
            raise ValueError(f"num_prompts must be positive, got {self.num_prompts}")
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.response_prefix:
            raise ValueError(
                "response_prefix pre-fills the answer, which only evaluation does (TRL would close the pre-filled turn "
                "and drop it); leave it unset for training"
            )


#: `gapo train`'s own defaults where TRL's suit a library but not a run of the command (TRL: 3 epochs, 256-token
#: completions, a checkpoint every 500 steps, seed 42); params.yaml's `train` section, then flags, override them.
RUN_DEFAULTS: dict[str, Any] = {
    "output_dir": "runs/gapo",
    "seed": defaults.SEED.value,
    "per_device_train_batch_size": 32,
    "max_steps": 40,
    "max_completion_length": 16,
    "save_steps": 10,
    "save_total_limit": 2,
    "logging_steps": 1,
}


def configs(values: Mapping[str, Any]) -> tuple[ScriptArguments, Any]:
    """(ScriptArguments, GAPOConfig) from a `train` section (as the pipeline stages pass it) over `RUN_DEFAULTS`; an
    unknown key or a refused value is a one-line error before any model loads."""
    values = {**RUN_DEFAULTS, **values}
    backends.activate(backends.resolve(values.get("backend", "auto")))
    from gapo.trainer import GAPOConfig  # unsloth: trl (which gapo.trainer imports) must load after backends.activate

    script_keys = {f.name for f in dataclasses.fields(ScriptArguments)}
    unknown = sorted(set(values) - script_keys - {f.name for f in dataclasses.fields(GAPOConfig)})
    if unknown:
        raise ValueError(f"unknown train settings: {', '.join(unknown)} (see gapo train --help)")
    script = ScriptArguments(**{k: v for k, v in values.items() if k in script_keys})
    return script, GAPOConfig(**{k: v for k, v in values.items() if k not in script_keys})


def parse_args(argv: list[str] | None = None) -> tuple[ScriptArguments, Any]:
    """`gapo train`'s configs: `RUN_DEFAULTS` over the paper's settings (gapo.defaults), then params.yaml's `train`
    section (skipped with --no-params), then flags (`config_from_cli`). The backend is activated first, from `--backend`
    or the section: Unsloth must load before trl and transformers."""
    pre = add_params_flags(argparse.ArgumentParser(add_help=False))
    pre.add_argument("--backend", default=None)
    ns, _ = pre.parse_known_args(argv)
    backend = ns.backend or params_values(ns.params, ns.section or "train", ns.no_params).get("backend", "auto")
    backends.activate(backends.resolve(backend))
    with backends.quiet_imports():  # a bad flag stays one line
        from gapo.trainer import GAPOConfig  # unsloth: trl (gapo.trainer imports it) must load after backends.activate

    script, args = config_from_cli(
        [ScriptArguments, GAPOConfig], argv, "gapo train", "train", "Train a LoRA adapter with GAPO.", RUN_DEFAULTS
    )
    return script, args


def run_config(script: ScriptArguments, args: Any) -> dict[str, Any]:
    """Both configs of a run as one JSON-ready mapping: its config.json, which a resumed stage compares."""
    return json.loads(json.dumps({**dataclasses.asdict(script), **args.to_dict()}, default=str))


#: What `task` selects: the training prompts and the group reward (see `task_data`).
TASKS: tuple[str, ...] = ("lists", "open", "targets")


def task_data(script: ScriptArguments, args: Any, dataset: Any | None = None) -> tuple[Any, list[GroupReward]]:
    """The training dataset and reward functions of `script.task`; every check runs here, before any model loads.
    `dataset` (e.g. the pipeline's data/train.jsonl) is used as given, else read from `script.dataset`, else built
    from `script`'s settings and `args.seed`. `open` refuses a category without a lexicon: its reward could not tell
    valid answers from invalid."""
    if args.split_format_reward and script.task != "lists":
        # params.yaml's `train` section is the lists recipe (two rewards): name both flags, not one error after another
        raise ValueError(
            f"split_format_reward applies to task lists only; task {script.task} has one reward: pass "
            "--split-format-reward false --reward-weights 1.0 (or --no-params)"
        )
    if dataset is None and script.dataset is not None:
        dataset = read_dataset(script.dataset)
    if script.task == "open":
        categories = tuple(script.categories or open_ended.OPEN_TRAIN_CATEGORIES)
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
                script.num_prompts, args.seed, categories=categories, response_prefix=script.response_prefix
            )
        rewards: list[GroupReward] = [
            ClassFrequencyReward(script.equivalence, validity=open_ended.open_validity_map(categories))
        ]
        check_reward_weights(args.reward_weights, rewards)
        return dataset, rewards
    list_args = {
        "min_items": script.min_items,
        "max_items": script.max_items,
        "categories": script.categories,
        "response_prefix": script.response_prefix,
    }
    if script.task == "targets":
        rewards = [target_distribution_reward]
        build = targets.make_target_distribution_dataset
    elif args.split_format_reward:
        rewards = [answer_format_reward, split_frequency_reward(args.scale_rewards)]
        build = lists.make_list_selection_dataset
    else:
        rewards = [frequency_reward]
        build = lists.make_list_selection_dataset
    if dataset is None:
        dataset = build(script.num_prompts, args.seed, **list_args)
    check_reward_weights(args.reward_weights, rewards)
    for reward in rewards:  # its columns and rows, before any model loads
        if is_group_reward(reward):
            reward.check(dataset)
    return dataset, rewards


def read_dataset(path: str) -> Any:
    """`--dataset`'s rows as a `datasets.Dataset`: a missing or empty file, or one that is not JSONL, is one line."""
    import datasets

    if not Path(path).is_file():
        raise FileNotFoundError(f"--dataset {path}: no such file")
    rows = read_jsonl(path)
    if not rows:
        raise ValueError(f"--dataset {path}: no rows")
    return datasets.Dataset.from_list(rows)


def check_reward_weights(weights: list[float] | None, rewards: list[Any]) -> None:
    """`reward_weights` names one weight per reward of the task (TRL finds a mismatch only after the model loads)."""
    if weights is not None and len(weights) != len(rewards):
        names = ", ".join(getattr(r, "__name__", type(r).__name__) for r in rewards)
        raise ValueError(f"reward_weights has {len(weights)} values; the task has {len(rewards)} reward(s): {names}")


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
    """The rows of a metrics.jsonl ([] without one), less a torn last line (a kill mid-write; `gapo.io.read_jsonl`)."""
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


def train(
    script: ScriptArguments, args: Any, dataset: Any | None = None, callbacks: list[Any] | None = None
) -> dict[str, Any]:
    """Run GAPO on `dataset` (default: `task_data`'s); returns the summary, also written to output_dir/metrics.json.
    `callbacks` (transformers `TrainerCallback`s) run beside the metrics log: e.g. a diagnostic scoring the policy
    every few steps (tools/list_transfer.py)."""
    backend = backends.resolve(args.backend)
    backends.check_vllm(args.use_vllm, script.model)
    backends.activate(backend)
    from gapo.trainer import trainer_class  # unsloth must be imported before trl, which gapo.trainer imports

    # Everything that can be wrong is checked before the model loads (GAPOConfig's own values when it was built).
    models.check_model_name(script.model)
    dataset, reward_funcs = task_data(script, args, dataset)
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--output-dir {out} is a file, not a directory; pass a directory path")
    models.resolve_model_path(script.model)  # build or verify an offline model's cache (a bad source is refused) first
    models.check_lora_targets(script.model, args.lora_target_modules)
    resume_from = last_checkpoint(out) if script.resume else None
    if script.resume and resume_from is None:
        logger.warning("--resume: no complete checkpoint in %s, starting from scratch", out)
    elif resume_from is not None:
        logger.info("--resume: continuing from %s", resume_from)
    if not script.resume and (out / "adapter").exists():
        raise FileExistsError(f"{out} already holds a finished run; pass --resume or another --output-dir")
    out.mkdir(parents=True, exist_ok=True)
    if script.resume:
        remove_incomplete(out, resume_from)
    metrics_path = out / "metrics.jsonl"
    if resume_from is not None:
        step = checkpoint_step(resume_from)
        assert step is not None, resume_from  # last_checkpoint returns only checkpoint-N folders
        _trim_metrics(metrics_path, step)
    elif metrics_path.exists():
        metrics_path.unlink()
    write_json_atomic(out / "config.json", run_config(script, args), indent=2)

    model, tokenizer, peft_config = backends.load_policy(script.model, args)
    trainer = trainer_class(args)(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[_metrics_callback(metrics_path), *(callbacks or [])],
    )
    start = time.time()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    elapsed = time.time() - start

    summary = summarize(metrics_path)
    summary.update({"train_seconds": elapsed, "config": run_config(script, args)})
    save_adapter(trainer, tokenizer, out / "adapter")
    if trainer.accelerator.is_main_process:
        write_json_atomic(out / "metrics.json", summary, indent=2)
    return summary


def save_adapter(trainer: Any, tokenizer: Any, target: Path) -> None:
    """Write the trained adapter to `target` atomically, every process taking part: under FSDP the LoRA weights are
    sharded and `Trainer.save_model` gathers them (a main-process `save_pretrained` of a shard crashes). The staging
    folder is named like `gapo.io`'s temp folders, so a resume after a kill removes it.

    The same weights give the same bytes (`models.sort_target_modules`, `models.save_tokenizer`): the pipeline's
    adapters are DVC outputs, and a re-run that trains them again must not re-run the stages that read them."""
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
            models.sort_target_modules(tmp / "adapter_config.json")
            models.save_tokenizer(tokenizer, tmp)
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
    script, args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    summary = train(script, args)
    print(json.dumps({"output_dir": args.output_dir, "steps": summary["steps"], "last": summary["last"]}))
    return 0
