"""GAPOConfig and GAPOTrainer: TRL's GRPO with group-aware rewards.

How GAPO differs from GRPO (Anschel et al. 2025, section 4), and nothing else:
1. A reward function may be a *group reward* (`gapo.rewards.GroupReward`): called once per group with the G completions
   of one prompt, it returns G rewards, r = R(o_1..o_G), so it can see frequency, coverage, etc.
2. Those rewards go through GRPO's usual advantage (r_i - mean) / std and clipped surrogate, unchanged.

The one TRL method overridden (trl==1.14.2; re-read it on a TRL bump), `_calculate_rewards`: TRL scores each process's
slice, which can split a group (huggingface/trl#3896); group rewards run on whole gathered groups on the main process,
with TRL's reward keyword arguments, and are broadcast. `__init__` refuses a pre-filled assistant turn and wraps TRL's
colocated vLLM weight sync on vLLM's CPU build. The CPU speed-up (each group's prompt encoded once) is opt-in:
`SharedPromptGAPOTrainer` adds `gapo.prefix.SharedPromptMixin`. The trainer knows no task: group rewards check their
dataset (`GroupReward.check`) and log their own metrics.

Batch layout (TRL's RepeatSampler; global order = process 0's rows, then process 1's, ...)::

    global rows:  [p0 p0 p0 p0 | p1 p1 p1 p1 | ...]     G = 4 rows per group, groups contiguous
    process 0:    [p0 p0 | ...]  process 1: [p0 p0 | ...]   <- a group split in halves on 2 processes

Running it: `gapo train` (gapo.train; several GPUs: docs/scaling.md). From Python, `gapo.backends.load_policy` gives
(model, tokenizer, peft_config) for `GAPOTrainer(...)`, or `SharedPromptGAPOTrainer(...)` on CPU."""

from __future__ import annotations

import inspect
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate.utils import broadcast_object_list, gather_object
from transformers import set_seed
from transformers.trainer_utils import SchedulerType
from trl import GRPOConfig, GRPOTrainer

from gapo import defaults, prefix
from gapo.backends import BACKENDS, cpu_has_bf16, reload_colocated_weights
from gapo.config import schedule_name, warmup_problem
from gapo.metrics import zero_std_groups
from gapo.rewards import (
    SCALE_REWARDS,
    ValidFrequencyReward,
    is_group_reward,
    mean_centred,
    split_frequency_reward,
    validate_group_rewards,
)

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class GAPOConfig(GRPOConfig):
    """GRPOConfig with the paper's settings (Appendix F, `gapo.defaults`) where TRL's differ, plus LoRA and speed
    switches. Precision follows the device: on CUDA bf16 with gradient checkpointing (TRL's defaults); on CPU no
    checkpointing, and the policy's weights in bfloat16 where the CPU has bf16 units (AVX512-BF16 or AMX: a GAPO step
    1.4-1.7x faster than float32 on this repository's CPU, docs/performance.md), else float32 (oneDNN emulates bf16)."""

    num_generations: int | None = defaults.NUM_GENERATIONS.field()
    max_steps: int = field(
        default=-1,
        metadata={
            "help": "optimizer steps to train, a positive integer; -1 (TRL's default): train num_train_epochs epochs "
            "of the dataset instead. 0 and other negative values are refused (transformers would read them as -1)."
        },
    )
    beta: float = defaults.BETA.field()
    learning_rate: float = defaults.LEARNING_RATE.field()
    bf16: bool | None = field(default=None, metadata={"help": "None: True on CUDA with bf16 support, else False."})
    gradient_checkpointing: bool | None = field(default=None, metadata={"help": "None: True on CUDA, else False."})
    report_to: None | str | list[str] = field(
        default="none", metadata={"help": "Where to send logs (TRL/transformers integrations)."}
    )
    lora_r: int = defaults.LORA_R.field()
    lora_alpha: int = defaults.LORA_ALPHA.field()
    lora_dropout: float = defaults.LORA_DROPOUT.field()
    use_rslora: bool = field(
        default=False,
        metadata={
            "help": "rank-stabilised LoRA: scale the adapter by lora_alpha/sqrt(lora_r) instead of lora_alpha/lora_r, "
            "so a larger rank does not shrink each step (PEFT's and Unsloth's `use_rslora`). The paper: false."
        },
    )
    lora_target_modules: list[str] | str = defaults.LORA_TARGET_MODULES.field()
    backend: str = field(
        default="auto",
        metadata={"help": "auto, unsloth or peft: the LoRA backend (gapo.backends); auto is PEFT for now."},
    )
    policy_dtype: str = field(
        default="auto",
        metadata={
            "help": "auto, float32 or bfloat16: the dtype `gapo train` loads the policy's weights in (LoRA weights "
            "stay float32). auto: bfloat16 on CUDA and on a CPU with bf16 units (AVX512-BF16 or AMX), float32 on "
            "other CPUs. The paper: bf16 (on GPUs)."
        },
    )
    shared_prompt_forward: bool | None = field(
        default=None,
        metadata={
            "help": "Encode each group's prompt once in the log-prob pass and generation prefill (gapo.prefix): "
            "same loss, less work. None: on for CPU (5-8x faster there), off on CUDA (slower there: docs/performance). "
            "SharedPromptGAPOTrainer reads it (`trainer_class`); GAPOTrainer runs TRL's paths."
        },
    )
    static_cache_generation: bool | None = field(
        default=None,
        metadata={
            "help": "Generate with a static KV cache and a compiled decode step (transformers' auto-compile): "
            "removes the kernel-launch bound of short completions. None: on for CUDA without vLLM, off on CPU."
        },
    )
    split_format_reward: bool = field(
        default=False,
        metadata={
            "help": "Score the answer format (valid or not) and the group's frequencies as two rewards, each "
            "normalised within its group (TRL's multi_objective_aggregation='normalize_then_sum'), so invalid "
            "answers no longer set the valid answers' baseline and scale (docs/uniformity_diagnosis.md). With "
            "scale_rewards none, each is centred in its group and neither divided by a std: TRL's sum_then_normalize "
            "over gapo.rewards.CentredValidFrequencyReward (what gapo train then scores with). The paper: False "
            "(one reward, -1 for an invalid answer)."
        },
    )
    generation_max_cache_len: int = field(
        default=512,
        metadata={
            "help": "Static cache length floor (prompt + completion tokens); the cache only grows past it, so a "
            "longer prompt costs one recompile instead of one per new length."
        },
    )

    def __post_init__(self) -> None:
        if problem := config_problem(self):
            raise ValueError(problem)
        cuda = torch.cuda.is_available() and not self.use_cpu
        if self.bf16 is None:
            self.bf16 = bool(cuda and torch.cuda.is_bf16_supported()) and not self.fp16
        if self.gradient_checkpointing is None:
            self.gradient_checkpointing = cuda
        if not cuda:
            self.use_cpu = True  # lets `torchrun --nproc_per_node 2` train with gloo on CPU
        if self.policy_dtype == "auto":
            self.policy_dtype = "bfloat16" if cuda or cpu_has_bf16() else "float32"
        if self.split_format_reward:
            # none: over a frequency reward centred beforehand (gapo.rewards.centred_over_valid says why)
            self.multi_objective_aggregation = (
                "sum_then_normalize" if mean_centred(self.scale_rewards) else "normalize_then_sum"
            )
        unsloth = self.backend == "unsloth"  # Unsloth generates and scores with its own kernels (docs/gpu.md)
        if self.shared_prompt_forward is None:
            self.shared_prompt_forward = not cuda and not unsloth
        if self.static_cache_generation is None:
            self.static_cache_generation = cuda and not self.use_vllm and not unsloth
        if unsloth and (self.shared_prompt_forward or self.static_cache_generation):
            raise ValueError(
                "backend unsloth runs Unsloth's own generation and log-prob paths; "
                "set shared_prompt_forward and static_cache_generation to false (or leave them unset)"
            )
        if self.static_cache_generation:
            if self.use_vllm:
                raise ValueError("static_cache_generation applies to transformers' generate; turn it off with use_vllm")
            self.cache_implementation = "static"
            floor = max(self.generation_max_cache_len, self.max_completion_length + 1)
            self.generation_kwargs = {"max_cache_len": floor, **(self.generation_kwargs or {})}
        super().__post_init__()


#: Fields that must be whole numbers >= 1 (TRL accepts a zero `save_total_limit`, and then keeps no checkpoint).
POSITIVE_FIELDS = (
    "per_device_train_batch_size",
    "num_iterations",
    "gradient_accumulation_steps",
    "lora_r",
    "lora_alpha",
    "max_completion_length",
    "save_total_limit",
)
#: Step intervals: TRL reads a value in (0, 1) as a fraction of the run; 0 it accepts, and then never saves or logs.
INTERVAL_FIELDS = ("save_steps", "logging_steps")


def config_problem(args: GAPOConfig) -> str | None:
    """The first GAPO setting of `args` that cannot train, as a one-line message with its fix; None when all can.
    Checked before TRL's own (`super().__post_init__`): TRL reports these after the model loads and `gapo train` has
    written its output directory, or never (`save_steps 0`)."""
    if args.num_generations is not None and args.num_generations < 2:
        return f"num_generations must be at least 2 (a group needs a baseline), got {args.num_generations}"
    for name in POSITIVE_FIELDS:
        value = getattr(args, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            return f"{name} must be a positive integer, got {value!r}"
    for name in INTERVAL_FIELDS:
        value = getattr(args, name)
        if not isinstance(value, int | float) or not value > 0 or (value > 1 and value != int(value)):
            return f"{name} must be a positive integer (or a fraction of the run in (0, 1)), got {value!r}"
    steps = args.max_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < -1 or not steps:
        # transformers reads any max_steps <= 0 as "train num_train_epochs epochs": -3 would silently start 3 epochs
        return f"max_steps must be a positive integer (or -1: train num_train_epochs epochs), got {steps!r}"
    if schedule_name(args.lr_scheduler_type) not in SCHEDULERS:
        return f"lr_scheduler_type must be one of {', '.join(SCHEDULERS)}, got {args.lr_scheduler_type!r}"
    if (problem := warmup_problem(args.warmup_steps, args.lr_scheduler_type)) is not None:
        return problem
    scale = str(args.scale_rewards).lower()
    if scale not in SCALE_REWARDS:
        return f"scale_rewards must be one of group, batch, none (true: group, false: none), got {args.scale_rewards!r}"
    if args.split_format_reward and scale == "batch":
        # TRL's normalize_then_sum never reads scale_rewards: batch would be silently ignored
        return (
            "scale_rewards 'batch' has no meaning under split_format_reward (group: each reward over its group's "
            "std, the sum over the batch's; none: each centred, no std): set group or none, or split_format_reward off"
        )
    if args.loss_type not in LOSS_TYPES:
        # TRL reads loss_type only in its loss pass: an unknown one fails after the model loads and a batch is sampled
        return f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {args.loss_type!r}"
    weights = args.reward_weights
    if weights is not None and (
        not isinstance(weights, list | tuple)
        or not weights
        or not all(isinstance(w, int | float) and not isinstance(w, bool) and math.isfinite(w) for w in weights)
    ):
        return f"reward_weights must be a list of finite numbers, one per reward function, got {weights!r}"
    for name in ("temperature", "learning_rate", "lora_dropout", "beta", "entropy_coef"):
        value = getattr(args, name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            hint = " (YAML reads 2e-4 as text: write 2.0e-4)" if isinstance(value, str) else ""
            return f"{name} must be a number, got {value!r}{hint}"
    if not args.temperature > 0 or args.temperature == float("inf"):
        return f"temperature must be a finite number > 0 (GRPO samples its groups), got {args.temperature}"
    if not args.learning_rate > 0 or args.learning_rate == float("inf"):
        return f"learning_rate must be a finite number > 0, got {args.learning_rate}"
    if not 0 <= args.lora_dropout < 1:
        return f"lora_dropout must be in [0, 1), got {args.lora_dropout}"
    if not args.beta >= 0:
        return f"beta (the KL coefficient) must be >= 0, got {args.beta}"
    if not 0 <= args.entropy_coef < float("inf"):
        # TRL subtracts coef x entropy from the loss: a negative coefficient would push the policy to collapse
        return f"entropy_coef (the entropy bonus) must be a finite number >= 0, got {args.entropy_coef}"
    if args.backend not in BACKENDS:
        return f"backend must be one of {', '.join(BACKENDS)}, got {args.backend!r}"
    if args.vllm_mode not in ("colocate", "server"):
        return f"vllm_mode must be colocate or server, got {args.vllm_mode!r}"
    if args.policy_dtype not in POLICY_DTYPES:
        return f"policy_dtype must be one of {', '.join(POLICY_DTYPES)}, got {args.policy_dtype!r}"
    return None


POLICY_DTYPES = ("auto", "float32", "bfloat16")
#: TRL 1.14.2's token-loss aggregations (GRPOConfig.loss_type; its default, dapo, divides by the batch's token count,
#: the paper's grpo each completion's by its own length: docs/training.md).
LOSS_TYPES = ("dapo", "grpo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo", "vespo")
#: transformers' learning-rate schedules (`SchedulerType`); its default, linear, decays to 0 over max_steps.
SCHEDULERS = tuple(s.value for s in SchedulerType)


# --------------------------------------------------------------------------------------------------------------------
# Group bookkeeping (pure functions, tested directly)
# --------------------------------------------------------------------------------------------------------------------


def split_groups(num_rows: int, group_size: int) -> list[range]:
    """Row ranges of the contiguous groups of a gathered generation batch."""
    if num_rows % group_size:
        raise ValueError(f"{num_rows} gathered completions do not split into groups of {group_size}")
    return [range(start, start + group_size) for start in range(0, num_rows, group_size)]


def compute_group_rewards(
    reward_func: Any,
    name: str,
    prompts: list[Any],
    completions: list[Any],
    columns: dict[str, list[Any]],
    group_size: int,
    **extra: Any,
) -> list[float]:
    """Call a group reward once per whole group of a gathered batch; returns one reward per row, in row order. A None
    (completion not scored) becomes NaN, which TRL's nan-aware group mean and std skip, as for per-completion ones."""
    rewards: list[float] = []
    for rows in split_groups(len(prompts), group_size):
        group_prompts = [prompts[i] for i in rows]
        if any(p != group_prompts[0] for p in group_prompts):
            raise RuntimeError(f"rows {rows.start}..{rows.stop - 1} mix prompts: generation batch is not grouped")
        out = reward_func(
            prompts=group_prompts,
            completions=[completions[i] for i in rows],
            **{key: [values[i] for i in rows] for key, values in columns.items()},
            **extra,
        )
        rewards.extend(validate_group_rewards(name, out, group_size, allow_none=True))
    return rewards


def check_reward_inputs(reward_funcs: Any, dataset: Any) -> None:
    """One line, before any model work, for a dataset a group reward cannot score (`GroupReward.check`: a missing
    column, or a bad row such as the list rewards' `items`), or for a prompt that pre-fills the assistant's turn."""
    if reward_funcs is None or getattr(dataset, "column_names", None) is None:
        return
    for func in reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]:
        if is_group_reward(func):
            func.check(dataset)
    if "prompt" in dataset.column_names:
        for index, prompt in enumerate(dataset["prompt"]):
            if isinstance(prompt, list) and prompt and prompt[-1].get("role") == "assistant":
                raise ValueError(
                    f"dataset row {index}: the prompt ends in an assistant turn (a response prefix); TRL would close "
                    "it and drop the prefix: train without response_prefix (it is for evaluation only)"
                )


def check_split_rewards(args: Any, reward_funcs: Any) -> None:
    """One line, before any model work, for a frequency reward under `split_format_reward` that is not the one its
    `scale_rewards` needs (`gapo.rewards.split_frequency_reward` says which and why). `gapo train` picks it itself."""
    if reward_funcs is None or not getattr(args, "split_format_reward", False):
        return
    needed = split_frequency_reward(args.scale_rewards)
    for func in reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]:
        if isinstance(func, ValidFrequencyReward) and not isinstance(func, type(needed)):
            raise ValueError(
                f"split_format_reward with scale_rewards {args.scale_rewards} needs the frequency reward centred over "
                f"the valid answers: pass gapo.rewards.centred_valid_frequency_reward instead of {func.__name__}"
            )


# --------------------------------------------------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------------------------------------------------


class GAPOTrainer(GRPOTrainer):
    """GRPOTrainer whose `reward_funcs` may include group rewards. Logged per step besides TRL's metrics:
    `rewards/mean`, `rewards/std` and `train/frac_zero_std_groups` of the weighted reward sum, `rollouts` (completions
    generated in the step, all processes), and what rewards log (`diversity/valid_fraction`, `diversity/group_jsd`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # GRPOTrainer's own signature reads the arguments, given by position or by name, once
        given = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **kwargs).arguments
        reward_funcs, config = given.get("reward_funcs"), given.get("args")
        check_reward_inputs(reward_funcs, given.get("train_dataset"))
        check_split_rewards(config, reward_funcs)
        if config is not None:
            # TRL wraps the model in its LoRA adapter before Trainer seeds anything, so the LoRA A matrices were drawn
            # from whatever the global RNG held: two runs of one recipe started from different adapters.
            set_seed(config.seed)
        super().__init__(*args, **kwargs)
        if self.use_vllm:
            reload_colocated_weights(self.vllm_generation)  # TRL's colocated sync on vLLM's CPU build
        if self.args.static_cache_generation and not self.use_vllm:
            # TRL builds its GenerationConfig with disable_compile=True; the static cache is there to be compiled.
            self.generation_config.disable_compile = False

    # -- rewards -------------------------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: ANN001, ANN202
        mode = "train" if self.model.training else "eval"
        counter = self._metrics[mode]["rollouts"]  # completions generated since the last log (TRL clears it then)
        counter[:] = [(counter[0] if counter else 0) + len(prompts) * self.accelerator.num_processes]
        group_idx = [i for i, f in enumerate(self.reward_funcs) if is_group_reward(f)]
        if not group_idx:
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        local_idx = [i for i in range(len(self.reward_funcs)) if i not in group_idx]
        device = self.accelerator.device

        # Gather everything a group reward may read, in global row order.
        keys = [k for k in inputs[0] if k not in ("prompt", "completion", "completion_ids")]
        all_prompts = gather_object(list(prompts))
        all_completions = gather_object(list(completions))
        all_columns = {k: gather_object([x[k] for x in inputs]) for k in keys}
        all_columns["completion_ids"] = gather_object([list(ids) for ids in completion_ids_list])
        if self.environments is not None:  # TRL's live per-row environment objects: only this process holds them
            if self.accelerator.num_processes == 1:
                all_columns["environments"] = list(self.environments)
            elif not getattr(self, "_warned_environments", False):
                self._warned_environments = True
                logger.warning("group rewards get no `environments` with several processes (they are per process)")
        group_size = self.num_generations if mode == "train" else self.num_generations_eval

        rewards = torch.full((len(all_prompts), len(self.reward_funcs)), torch.nan, device=device)
        if local_idx:
            rewards[:, local_idx] = self._per_completion_rewards(
                local_idx, inputs, prompts, completions, completion_ids_list
            )
        payload: list[Any] = [None]
        if self.accelerator.is_main_process:
            payload = [
                [
                    compute_group_rewards(
                        self.reward_funcs[i],
                        self.reward_func_names[i],
                        all_prompts,
                        all_completions,
                        all_columns,
                        group_size,
                        trainer_state=self.state,
                        log_metric=self._log_metric,
                        log_extra=self._group_log_extra,
                    )
                    for i in group_idx
                ]
            ]
        payload = broadcast_object_list(payload, from_process=0)
        for column, values in zip(group_idx, payload[0], strict=True):
            rewards[:, column] = torch.tensor(values, dtype=torch.float32, device=device)
        self._log_group_metrics(mode, rewards, group_size)
        return rewards

    def _group_log_extra(self, column: str, values: list) -> None:
        """TRL's `log_extra` for group rewards, one value per row of the group. Group rewards see the gathered batch but
        TRL's completions table holds each process's rows, so with several processes it is dropped (one warning)."""
        if self.accelerator.num_processes == 1:
            self._log_completion_extra(column, values)
        elif not getattr(self, "_warned_log_extra", False):
            self._warned_log_extra = True
            logger.warning("log_extra from a group reward is not logged with several processes (column %r)", column)

    def _per_completion_rewards(self, local_idx, inputs, prompts, completions, completion_ids_list):  # noqa: ANN001, ANN202
        """TRL's own path for the per-completion functions only (local slice, then gathered by TRL)."""
        saved = (self.reward_funcs, self.reward_processing_classes, self.reward_func_names)
        try:
            self.reward_funcs = [saved[0][i] for i in local_idx]
            self.reward_processing_classes = [saved[1][i] for i in local_idx]
            self.reward_func_names = [saved[2][i] for i in local_idx]
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        finally:
            self.reward_funcs, self.reward_processing_classes, self.reward_func_names = saved

    def _log_group_metrics(self, mode: str, rewards: torch.Tensor, group_size: int) -> None:
        """`rewards/mean`, `rewards/std` and `train/frac_zero_std_groups` of the weighted reward sum (B_global, F)."""
        weights = self.reward_weights.to(rewards.device)
        total = (rewards * weights).nansum(dim=1)  # (B_global,)
        grouped = total.view(-1, group_size)  # (num_groups, G)
        metrics = self._metrics[mode]
        metrics["rewards/mean"].append(total.mean().item())
        metrics["rewards/std"].append(total.std().item() if total.numel() > 1 else 0.0)
        metrics["train/frac_zero_std_groups"].append(float(zero_std_groups(grouped.detach().cpu().numpy()).mean()))


class SharedPromptGAPOTrainer(prefix.SharedPromptMixin, GAPOTrainer):
    """GAPOTrainer with the opt-in CPU speed-up (`gapo.prefix.SharedPromptMixin`): what `gapo train` runs when
    `shared_prompt_forward` is on. Same loss; rollouts sampled with other random numbers (`trainer_rollouts`)."""


def trainer_class(args: GAPOConfig) -> type[GAPOTrainer]:
    """What `gapo train` runs for `args`: the CPU speed-up where `shared_prompt_forward` is on, else GAPOTrainer."""
    return SharedPromptGAPOTrainer if args.shared_prompt_forward else GAPOTrainer
