"""Step speed: GAPOTrainer (shared-prompt forward) against TRL's stock GRPOTrainer, same everything, one process.

How it measures
- Two trainers are built on two fresh copies of the same model, with the same LoRA config, data (gapo.tasks.lists list
  prompts), reward (gapo.rewards.frequency_reward; one group per step, so TRL's per-batch call sees exactly one group),
  seed and GRPO settings. GAPOTrainer differs only by `shared_prompt_forward=True`: each group's prompt encoded once
  in the log-prob pass, and rollouts from gapo's decoding loop (`gapo.prefix.trainer_rollouts`: one prefill per
  prompt, all rows decoded together, finished rows dropped) instead of `model.generate`.
- Each runs its own `trainer.train()` in a thread, and a baton hands the machine from one to the other at every
  optimizer step, so their steps alternate (stock, GAPO, stock, ...) and only one runs at a time: drift in the
  machine's speed (other jobs, thermal) hits both alike. The torch/python RNGs are reseeded with `seed + step` before
  each step, so both sample from the same stream.
- Per step: the whole optimizer step (callback on_step_begin -> on_step_end: generation, rewards, log-prob forward,
  loss, backward, clipping, optimizer), and its parts: generation + scoring (`_prepare_inputs`), log-prob forward +
  loss (`compute_loss`), backward (the rest of `training_step`). Medians over the timed steps, after `--warmup`
  untimed ones (none with `--quick`: the median of its 3 steps already leaves out the slower first one).
- Peak memory: on CUDA `torch.cuda.max_memory_allocated`, the largest over the timed steps. On CPU the increase of
  the process RSS (sampled every 5 ms) over its value at the start of each trainer's *first* step, after
  `malloc_trim(0)` has handed the memory glibc keeps for reuse back to the OS, so the figure is what that step itself
  needed on top of the loaded models (both live in this one process, so absolute RSS says nothing per trainer). Only
  the first step is measured this way: trimming before every step would add page-fault time to the timed steps.
- `--sweep` times only the log-prob pass (forward + backward of a GRPO-like loss) of TRL's path and the shared one
  on fixed synthetic batches, `--repeats` times each, alternating, keeping the minimum: cost against G and against
  prompt length, and the LM head alone.

Commands (CPU, 2 cores)
    .venv/bin/python -m perf.step_speed --quick    # embedded 0.5B, G=16, 3 steps each
    .venv/bin/python -m perf.step_speed            # embedded 0.5B, G=16 and G=32
    .venv/bin/python -m perf.step_speed --sweep    # log-prob pass vs G and prompt length
    .venv/bin/python -m perf.step_speed --num_generations 32 --num_iterations 2    # TRL's mu 2: a batch of rollouts
        # serves 2 steps; the step that generates and the one that reuses the batch are timed apart
GPU, random weights with Qwen2.5-7B-Instruct's architecture at the paper's G=32, LoRA r=64 (see docs/performance.md):
    python -m perf.step_speed --model_config gapo/resources/qwen2.5-7b-instruct-config.json \
        --num_generations 32 --lora_r 64 --lora_target all --max_completion_length 64 --steps 5

The last line printed is `speedup_vs_trl=X.XX`: TRL's median step time over GAPOTrainer's (the smallest ratio over
the G values run); with `--num_iterations` above 1, their times for a batch of rollouts (the generating step's median
plus mu - 1 times the reusing steps'). With `--sweep` it is the log-prob pass ratio at G=16 and the dataset's prompt
length.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import statistics
import tempfile
import threading
import time
import types
from dataclasses import asdict, dataclass, field
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from gapo.repro import chat  # noqa: E402

# --------------------------------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Args:
    """Options of perf/step_speed.py."""

    quick: bool = field(
        default=False,
        metadata={"help": "G=16, 3 steps each, no separate warm-up: the median drops the slow first step."},
    )
    sweep: bool = field(default=False, metadata={"help": "Time only the log-prob pass against G and prompt length."})
    model: str = field(default="embedded", metadata={"help": "gapo.models name: embedded, tiny-random, a directory."})
    model_config: str | None = field(
        default=None,
        metadata={
            "help": "A config.json to build a randomly initialised model from (speed needs no weights); "
            "the tokenizer is the embedded Qwen one. Overrides --model."
        },
    )
    num_generations: list[int] | None = field(
        default=None, metadata={"help": "G values (one prompt per step). Default: 16 with --quick, else 16 32."}
    )
    steps: int | None = field(default=None, metadata={"help": "Timed steps per trainer (default 3 quick, 4 full)."})
    num_iterations: int = field(
        default=1,
        metadata={
            "help": "TRL's mu: optimizer steps per batch of rollouts (both trainers). Above 1, the steps that generate "
            "and those that reuse the batch are reported apart, and a batch's time (one of the first, mu - 1 of the "
            "second) is what the speed-up and rollouts per minute compare; --steps must then hold both kinds."
        },
    )
    repeats: int = field(default=2, metadata={"help": "--sweep: runs per point and path, alternating; the minimum."})
    micro_batch: int = field(
        default=16,
        metadata={
            "help": "Rows per forward/backward (per_device_train_batch_size); a group of G > micro_batch is "
            "split over G / micro_batch accumulation steps, one optimizer step per group."
        },
    )
    warmup: int | None = field(
        default=None, metadata={"help": "Untimed steps per trainer before the timed ones (default 0 quick, else 1)."}
    )
    max_completion_length: int = field(default=12, metadata={"help": "Completion tokens at most."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_target: str = field(
        default="attention", metadata={"help": "attention (q,k,v,o) or all (attention + MLP projections)."}
    )
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout (the paper: 0.1)."})
    generation_max_cache_len: int | None = field(
        default=None, metadata={"help": "GAPOConfig.generation_max_cache_len (CUDA static-cache generation floor)."}
    )
    device: str = field(
        default="auto",
        metadata={
            "help": "auto | cpu | cuda. On CUDA both trainers keep their own defaults for precision (bf16) and "
            "gradient checkpointing (on), as GAPOConfig and GRPOConfig pick them; on CPU both run without, in --dtype."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed for data, LoRA init and sampling (both trainers)."})
    dtype: str = field(
        default="auto",
        metadata={
            "help": "CPU: auto | float32 | bfloat16, the weights of both trainers' models. auto is what GAPOConfig's "
            "policy_dtype picks here: bfloat16 on a CPU with bf16 units, else float32. (CUDA: bf16, as before.)"
        },
    )
    json_out: str | None = field(default=None, metadata={"help": "Also write the results to this JSON file."})

    def __post_init__(self) -> None:
        if self.num_generations is None:
            self.num_generations = [16] if (self.quick or self.sweep) else [16, 32]
        if self.steps is None:
            self.steps = 3 if self.quick else 4
        if self.warmup is None:
            self.warmup = 0 if self.quick else 1
        if self.num_iterations < 1:
            raise ValueError(f"--num_iterations must be >= 1, got {self.num_iterations}")
        if self.num_iterations > 1 and self.steps < self.num_iterations:
            raise ValueError(
                f"--steps {self.steps} must be >= --num_iterations {self.num_iterations}: the timed steps must hold "
                "a step that generates and one that reuses the batch"
            )
        if any(g % self.micro_batch and self.micro_batch % g for g in self.num_generations):
            raise ValueError(f"--micro_batch {self.micro_batch} and G {self.num_generations} must divide one another")
        if self.lora_target not in ("attention", "all"):
            raise ValueError(f"--lora_target must be attention or all, got {self.lora_target!r}")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"--dtype must be auto, float32 or bfloat16, got {self.dtype!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"--device must be auto, cpu or cuda, got {self.device!r}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA GPU is visible here")

    @property
    def target_modules(self) -> list[str]:
        attention = ["q_proj", "k_proj", "v_proj", "o_proj"]
        return attention if self.lora_target == "attention" else [*attention, "gate_proj", "up_proj", "down_proj"]


# --------------------------------------------------------------------------------------------------------------------
# Machine helpers: device, sync, memory
# --------------------------------------------------------------------------------------------------------------------

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def malloc_trim() -> None:
    """Return the heap memory glibc keeps for reuse to the OS (no-op elsewhere)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class PeakMemory:
    """Peak memory of a step: CUDA's allocator peak, or on CPU the sampled process RSS over its value at `begin`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = False
        self._base = self._peak = 0
        self._stop = threading.Event()
        if DEVICE == "cpu":
            threading.Thread(target=self._sample, daemon=True, name="rss-sampler").start()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            if self._active:
                rss = rss_bytes()
                with self._lock:
                    self._peak = max(self._peak, rss)

    def begin(self, measure_rss: bool) -> None:
        if DEVICE == "cuda":
            torch.cuda.reset_peak_memory_stats()
        elif measure_rss:
            malloc_trim()
            with self._lock:
                self._base = self._peak = rss_bytes()
                self._active = True

    def end(self) -> dict[str, float]:
        if DEVICE == "cuda":
            return {"peak_gib": torch.cuda.max_memory_allocated() / 2**30}
        with self._lock:
            if not self._active:
                return {}
            self._active = False
            self._peak = max(self._peak, rss_bytes())
            return {"rss_increase_gib": (self._peak - self._base) / 2**30}

    def close(self) -> None:
        self._stop.set()


def reseed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds CUDA


# --------------------------------------------------------------------------------------------------------------------
# Alternation: a baton passed between the training threads at every optimizer step
# --------------------------------------------------------------------------------------------------------------------


class Baton:
    """One of several threads runs at a time; the holder passes to the next unfinished one in a fixed rotation."""

    def __init__(self, names: list[str]) -> None:
        self._cond = threading.Condition()
        self._order = names
        self._turn = 0
        self._done: set[str] = set()

    def wait(self, name: str) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._order[self._turn] == name)

    def pass_on(self, name: str, finished: bool = False) -> None:
        with self._cond:
            if finished:
                self._done.add(name)
            if self._order[self._turn] != name and self._order[self._turn] not in self._done:
                return
            for _ in range(len(self._order)):
                self._turn = (self._turn + 1) % len(self._order)
                if self._order[self._turn] not in self._done:
                    break
            self._cond.notify_all()


def make_step_timer(name: str, baton: Baton, memory: PeakMemory, seed: int) -> Any:
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """Holds the baton from the start of a step until the start of this trainer's next step."""

        def __init__(self) -> None:
            self.records: list[dict[str, float]] = []
            self.trainer: Any = None
            self._holding = False

        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            baton.wait(name)
            self._holding = True

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            if not self._holding:
                baton.pass_on(name)
                baton.wait(name)
            self._holding = False
            reseed(seed + state.global_step)
            # TRL generates at the steps that are multiples of mu (one generation batch a step here) and reuses it after
            self._generates = state.global_step % args.num_iterations == 0
            self.trainer._bench = dict.fromkeys(("generate_score", "logp_forward_loss", "train_step"), 0.0)
            self.trainer._bench.update(prompt_tokens=0, completion_tokens=0)
            memory.begin(measure_rss=not self.records)  # CPU: the first step only
            sync()
            self._t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            sync()
            total = time.perf_counter() - self._t0
            parts = dict(self.trainer._bench)
            record = {
                "step_s": total,
                "generate_score_s": parts["generate_score"],
                "logp_forward_loss_s": parts["logp_forward_loss"],
                "backward_s": parts["train_step"] - parts["generate_score"] - parts["logp_forward_loss"],
                "optimizer_other_s": total - parts["train_step"],
                "prompt_tokens": parts["prompt_tokens"],
                "completion_tokens": parts["completion_tokens"],
                "generates": float(self._generates),
                **memory.end(),
            }
            self.records.append(record)

    return StepTimer()


def timed(cls: type) -> type:
    """`cls` with the parts of its step timed into `self._bench` (behaviour unchanged)."""

    class Timed(cls):
        _bench: dict[str, float]

        def training_step(self, model, inputs, num_items_in_batch=None):  # noqa: ANN001, ANN201
            t0 = time.perf_counter()
            out = super().training_step(model, inputs, num_items_in_batch)
            sync()
            self._bench["train_step"] += time.perf_counter() - t0
            return out

        def _prepare_inputs(self, generation_batch):  # noqa: ANN001, ANN201
            t0 = time.perf_counter()
            out = super()._prepare_inputs(generation_batch)
            sync()
            self._bench["generate_score"] += time.perf_counter() - t0
            self._bench["prompt_tokens"] += int(out["prompt_mask"].sum())
            self._bench["completion_tokens"] += int(out["completion_mask"].sum())
            return out

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001, ANN201
            t0 = time.perf_counter()
            out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            sync()
            self._bench["logp_forward_loss"] += time.perf_counter() - t0
            return out

    Timed.__name__ = Timed.__qualname__ = f"Timed{cls.__name__}"
    return Timed


# --------------------------------------------------------------------------------------------------------------------
# Building the two trainers
# --------------------------------------------------------------------------------------------------------------------


def cpu_dtype(args: Args) -> torch.dtype | None:
    """The CPU weights' dtype for both trainers (`--dtype`; auto as GAPOConfig.policy_dtype resolves it); None on CUDA
    (gapo.models' bf16)."""
    from gapo.backends import cpu_has_bf16

    if DEVICE == "cuda":
        return None
    name = args.dtype if args.dtype != "auto" else ("bfloat16" if cpu_has_bf16() else "float32")
    return getattr(torch, name)


def load_model(args: Args) -> tuple[torch.nn.Module, Any]:
    from gapo.models import load_model_and_tokenizer, load_tokenizer

    if args.model_config is None:
        model, tokenizer = load_model_and_tokenizer(args.model, device=DEVICE, dtype=cpu_dtype(args))
    else:
        tokenizer = load_tokenizer("tiny-random")  # the embedded Qwen2.5 tokenizer
        dtype = torch.bfloat16 if DEVICE == "cuda" else cpu_dtype(args)
        model = random_model(args.model_config, tokenizer, dtype, args.seed, DEVICE)
    model.train()
    return model, tokenizer


def random_model(config_path: str, tokenizer: Any, dtype: torch.dtype | None, seed: int, device: str) -> Any:
    """A model of `config_path`'s architecture with weights drawn from `seed` (speed needs no trained weights), on
    `device`, stopping at `tokenizer`'s EOS (which random weights never sample). Also perf/backend_speed.py's."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config_path), dtype=dtype)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_trainer(name: str, args: Args, g: int, max_steps: int, output_dir: str, callback: Any) -> Any:
    """TRL's GRPOTrainer (`name="trl"`) or what `gapo train` runs (`"gapo"`: `trainer_class`, the shared-prompt
    GAPOTrainer on CPU), timed, on a fresh model; identical settings."""
    from transformers import PrinterCallback
    from transformers.trainer_utils import set_seed
    from trl import GRPOConfig, GRPOTrainer

    from gapo.backends import lora_config
    from gapo.rewards import frequency_reward
    from gapo.tasks.lists import make_list_selection_dataset
    from gapo.trainer import GAPOConfig, trainer_class

    dataset = make_list_selection_dataset(max_steps, seed=args.seed)
    common = dict(
        output_dir=os.path.join(output_dir, name),
        per_device_train_batch_size=min(g, args.micro_batch),
        gradient_accumulation_steps=max(1, g // args.micro_batch),  # one group (G rows) per optimizer step
        num_generations=g,
        max_completion_length=args.max_completion_length,
        max_steps=max_steps,
        num_iterations=args.num_iterations,
        learning_rate=1e-5,
        beta=0.0,
        temperature=1.0,
        seed=args.seed,
        use_cpu=DEVICE == "cpu",
        bf16=DEVICE == "cuda",
        # CPU: no checkpointing and no autocast (the weights are in --dtype). CUDA: each trainer's own
        # default (checkpointing on), which is what a user of either gets.
        **({"gradient_checkpointing": False} if DEVICE == "cpu" else {}),
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    lora = dict(
        lora_r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        lora_target_modules=args.target_modules,
    )
    # GAPOConfig's device defaults: shared-prompt forward and prefill on CPU, static-cache generation on CUDA.
    floor = args.generation_max_cache_len
    cache_floor = {} if floor is None else {"generation_max_cache_len": floor}
    gapo_args = GAPOConfig(**common, **lora, **cache_floor)
    if name == "gapo":
        cls, config = trainer_class(gapo_args), gapo_args
    else:
        cls, config = GRPOTrainer, GRPOConfig(**common)
    set_seed(args.seed)
    model, tokenizer = load_model(args)
    trainer = timed(cls)(
        model=model,
        reward_funcs=[frequency_reward],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(gapo_args),  # the same adapter for both
        callbacks=[callback],
    )
    callback.trainer = trainer
    trainer.remove_callback(PrinterCallback)  # TRL's per-step metric dicts would bury the tables
    return trainer


def run_trainers(args: Args, g: int, names: list[str], max_steps: int) -> dict[str, Any]:
    """Train the named trainers for `max_steps` steps each, alternating step by step; per-trainer step records."""
    baton = Baton(names)
    memory = PeakMemory()
    errors: dict[str, BaseException] = {}
    with tempfile.TemporaryDirectory() as output_dir:
        trainers = {
            n: build_trainer(n, args, g, max_steps, output_dir, make_step_timer(n, baton, memory, args.seed))
            for n in names
        }

        def train(name: str) -> None:
            try:
                trainers[name].train()
            except BaseException as err:  # noqa: BLE001 - re-raised in the main thread
                errors[name] = err
            finally:
                baton.pass_on(name, finished=True)

        threads = [threading.Thread(target=train, args=(n,), name=f"train-{n}") for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        memory.close()
        if errors:
            name, err = next(iter(errors.items()))
            raise RuntimeError(f"the {name} trainer failed: {err!r}") from err
        note = getattr(trainers.get("gapo"), "_shared_prompt_note", None)
        from gapo import prefix

        generation_note = "; ".join(m for m in sorted(prefix._warned) if "generation off" in m) or None
        base = trainers[names[0]].model
        params = sum(p.numel() for n, p in base.named_parameters() if "embed_tokens" not in n and "lora_" not in n)
        records = {n: trainers[n].callback_handler.callbacks[-1].records for n in names}
        trainers.clear()  # free both models before the next G
    return {
        "records": records,
        "shared_prompt_fallback": note,
        "generation_fallback": generation_note,
        "model_params": params,
    }


def run_pair(args: Args, g: int) -> dict[str, Any]:
    result = run_trainers(args, g, ["trl", "gapo"], args.warmup + args.steps)
    result["micro_batch"] = min(g, args.micro_batch)
    result["num_iterations"] = args.num_iterations
    result["warmup"] = args.warmup
    records = result["records"]
    if DEVICE == "cuda":
        result["memory"] = {
            n: {"peak GPU GiB": max(x["peak_gib"] for x in r[args.warmup :])} for n, r in records.items()
        }
    else:
        result["memory"] = {n: {"RSS +GiB step 1": r[0]["rss_increase_gib"]} for n, r in records.items()}
    result["records"] = {
        n: [{k: v for k, v in x.items() if "gib" not in k} for x in r[args.warmup :]] for n, r in records.items()
    }
    return result


# --------------------------------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------------------------------

COLUMNS = (
    ("step_s", "step s"),
    ("generate_score_s", "gen+score s"),
    ("logp_forward_loss_s", "logp fwd+loss s"),
    ("backward_s", "backward s"),
    ("optimizer_other_s", "optim+other s"),
)


#: Dense bf16 peak of one H100 SXM (NVIDIA's datasheet, without sparsity); the device tool measured 769-798 TFLOP/s.
H100_BF16_PEAK = 989e12


def step_flops(params: int, prompt_tokens: float, completion_tokens: float) -> float:
    """Model FLOPs of one GRPO step with LoRA: 2N per token for the forward of every prompt and completion token,
    2N for the backward's input gradients (the frozen base needs no weight gradients; LoRA's are negligible), and
    2N per generated token. Recomputation under gradient checkpointing is not counted (it is overhead, not work).
    N counts the non-embedding parameters."""
    tokens = prompt_tokens + completion_tokens
    return 2 * params * tokens * 2 + 2 * params * completion_tokens


def medians(records: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in records) for k in records[0]}


def kinds(records: list[dict[str, float]], mu: int) -> dict[str, tuple[float, dict[str, float]]]:
    """A trainer's step medians by kind, each with how many steps of a batch of rollouts it makes: one kind,
    ``step`` (x1), at mu 1; ``generating`` (x1) and ``reusing`` (x mu - 1) apart above, where a step that reuses
    the batch skips generation and costs another kind of time."""
    if mu == 1:
        return {"step": (1.0, medians(records))}
    out = {}
    for name, flag, weight in (("generating", 1.0, 1.0), ("reusing", 0.0, float(mu - 1))):
        chosen = [r for r in records if r["generates"] == flag]
        if not chosen:
            raise ValueError(f"no {name} step among the timed ones: give more --steps")
        out[name] = (weight, medians(chosen))
    return out


def per_batch(by_kind: dict[str, tuple[float, dict[str, float]]], key: str) -> float:
    """Seconds of `key` in one batch of rollouts (one step at mu 1): each kind's median times its steps a batch."""
    return sum(weight * med[key] for weight, med in by_kind.values())


def print_pair(g: int, result: dict[str, Any]) -> float:
    mu = result.get("num_iterations", 1)
    by_kind = {n: kinds(r, mu) for n, r in result["records"].items()}
    med = {n: medians(r) for n, r in result["records"].items()}
    n_steps = len(result["records"]["trl"])
    memory = result["memory"]
    micro = result["micro_batch"]
    print(
        f"\nG={g}: medians over {n_steps} alternating optimizer steps per trainer"
        + (f" (after {result['warmup']} warm-up)" if result["warmup"] else "")
        + "; one prompt (G rows) per step"
        + (f", in {g // micro} micro-batches of {micro} rows" if micro < g else "")
        + (
            f"; num_iterations {mu}: each batch of rollouts serves {mu} steps, 1 generating and {mu - 1} reusing"
            if mu > 1
            else ""
        )
    )
    print(
        f"  tokens per step: prompt {med['trl']['prompt_tokens']:.0f}, "
        f"completion {med['trl']['completion_tokens']:.0f} (TRL) / {med['gapo']['completion_tokens']:.0f} (GAPO)"
    )
    mem_labels = list(memory["trl"])
    width = 21 if mu == 1 else 32
    header = f"  {'trainer':<{width}}" + "".join(f"{label:>16}" for _, label in COLUMNS) + f"{'logp fwd+bwd s':>16}"
    header += f"{'tokens/s':>10}" + "".join(f"{label:>17}" for label in mem_labels)
    print(header)
    for name, label in (("trl", "TRL GRPOTrainer"), ("gapo", "GAPOTrainer")):
        for kind, (_, m) in by_kind[name].items():
            tokens_per_s = (m["prompt_tokens"] + m["completion_tokens"]) / m["step_s"]
            name_kind = label if mu == 1 else f"{label}, {kind}"
            row = f"  {name_kind:<{width}}" + "".join(f"{m[k]:>16.2f}" for k, _ in COLUMNS)
            row += f"{m['logp_forward_loss_s'] + m['backward_s']:>16.2f}{tokens_per_s:>10.1f}"
            row += "".join(f"{memory[name][k]:>17.2f}" for k in mem_labels)
            print(row)
    if DEVICE == "cuda" and mu == 1:
        params = result["model_params"]
        for name, label in (("trl", "TRL GRPOTrainer"), ("gapo", "GAPOTrainer")):
            m = med[name]
            flops = step_flops(params, m["prompt_tokens"], m["completion_tokens"])
            m["bf16_peak_share"] = flops / m["step_s"] / H100_BF16_PEAK
            print(f"  {label}: {flops / 1e12:.1f} TFLOP a step, {100 * m['bf16_peak_share']:.1f}% of bf16 peak")
    batch = {
        n: {k: per_batch(by_kind[n], k) for k in ("step_s", "generate_score_s", "logp_forward_loss_s", "backward_s")}
        for n in by_kind
    }
    step_ratio = batch["trl"]["step_s"] / batch["gapo"]["step_s"]
    logp_ratio = (batch["trl"]["logp_forward_loss_s"] + batch["trl"]["backward_s"]) / (
        batch["gapo"]["logp_forward_loss_s"] + batch["gapo"]["backward_s"]
    )
    gen_ratio = batch["trl"]["generate_score_s"] / batch["gapo"]["generate_score_s"]
    unit = "whole step" if mu == 1 else "batch of rollouts"
    if mu > 1:
        print(
            "  a batch of rollouts: "
            + ", ".join(f"{label} {batch[n]['step_s']:.2f} s" for n, label in (("trl", "TRL"), ("gapo", "GAPO")))
        )
    print(
        f"  speedup: {unit} {step_ratio:.2f}x, log-prob fwd+bwd {logp_ratio:.2f}x, generation+scoring {gen_ratio:.2f}x"
    )
    per_min = {n: 60 * g / batch[n]["step_s"] for n in batch}
    print(
        f"  rollouts per minute: TRL {per_min['trl']:.0f}, GAPO {per_min['gapo']:.0f} "
        f"({g} a {'step' if mu == 1 else 'batch'})"
    )
    if result["shared_prompt_fallback"]:
        print(f"  NOTE: GAPOTrainer fell back to TRL's log-prob path: {result['shared_prompt_fallback']}")
    if result["generation_fallback"]:
        print(f"  NOTE: GAPOTrainer fell back to TRL's generation: {result['generation_fallback']}")
    result["medians"] = med if mu == 1 else {n: {k: m for k, (_, m) in by_kind[n].items()} for n in by_kind}
    result["per_batch"] = batch
    result["speedup"] = {"step": step_ratio, "logp": logp_ratio, "generate_score": gen_ratio}
    result["rollouts_per_min"] = per_min
    return step_ratio


# --------------------------------------------------------------------------------------------------------------------
# --sweep: the log-prob pass alone
# --------------------------------------------------------------------------------------------------------------------


def sweep(args: Args) -> tuple[list[dict[str, Any]], float]:
    """Forward + backward of a GRPO-like loss, TRL's path against the shared one, on synthetic groups built from a
    real list prompt: G in (4, 8, 16, 32) at its own length, and prompt lengths x0.5, x1, x2 at G=16. Groups larger
    than `--micro_batch` run in micro-batches (each encodes its prompt once), as in training."""
    from peft import LoraConfig, get_peft_model
    from trl import GRPOTrainer

    from gapo import prefix
    from gapo.tasks.lists import make_list_selection_dataset

    model, tokenizer = load_model(args)
    lora = LoraConfig(
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=0.0,
        target_modules=args.target_modules,
        task_type="CAUSAL_LM",
    )  # as gapo.backends.lora_config
    model = get_peft_model(model, lora)
    model.train()
    row = make_list_selection_dataset(1, seed=args.seed)[0]
    base = chat.token_ids(tokenizer, row["prompt"])
    c = args.max_completion_length
    fake = types.SimpleNamespace(  # what TRL's log-prob pass reads from its trainer
        accelerator=types.SimpleNamespace(autocast=contextlib.nullcontext),
        temperature=1.0,
        model_kwarg_keys={"logits_to_keep"},
        _entropy_bonus_enabled=False,
    )
    trl_method = GRPOTrainer._full_logits_logps

    def batch(g: int, p: int) -> tuple[torch.Tensor, torch.Tensor]:
        prompt = (base * (p // len(base) + 1))[-p:]  # the real prompt, cut or repeated to p tokens
        gen = torch.Generator().manual_seed(args.seed)
        lengths = torch.randint(c // 2, c + 1, (g,), generator=gen)  # completions of c/2..c tokens, right-padded
        ids = torch.full((g, p + c), tokenizer.pad_token_id)
        mask = torch.zeros((g, p + c), dtype=torch.long)
        ids[:, :p] = torch.tensor(prompt)
        mask[:, :p] = 1
        for i, n in enumerate(lengths.tolist()):
            ids[i, p : p + n] = torch.randint(0, 150000, (n,), generator=gen)
            mask[i, p : p + n] = 1
        return ids.to(DEVICE), mask.to(DEVICE)

    def run(path: str, ids: torch.Tensor, mask: torch.Tensor) -> float:
        """Forward + backward over micro-batches of `--micro_batch` rows (gradient accumulation, as the trainer)."""
        model.zero_grad(set_to_none=True)
        n_items = mask[:, -c:].sum()
        adv = torch.linspace(-1, 1, ids.size(0), device=ids.device).unsqueeze(1)
        sync()
        t0 = time.perf_counter()
        for start in range(0, ids.size(0), args.micro_batch):
            rows = slice(start, start + args.micro_batch)
            if path == "trl":
                logps, ent, _ = trl_method(fake, model, ids[rows], mask[rows], c, None, compute_entropy=True)
            else:
                logps, ent = prefix.shared_prompt_logps(model, ids[rows], mask[rows], c, compute_entropy=True)
            ((-logps * adv[rows] * mask[rows, -c:]).sum() / n_items).backward()
        sync()
        return time.perf_counter() - t0

    p0 = len(base)
    points = [(g, p0) for g in (4, 8, 16, 32)] + [(16, p0 // 2), (16, 2 * p0)]
    run("trl", *batch(4, p0))  # warm-up
    run("shared", *batch(4, p0))
    rows = []
    print(
        f"\nlog-prob pass (forward + backward), {DEVICE}, completions {c // 2}..{c} tokens, one prompt per group, "
        f"micro-batches of {args.micro_batch} rows; minimum of {args.repeats} runs"
    )
    print(
        f"  {'G':>3} {'prompt':>7} {'tokens TRL':>11} {'tokens shared':>14} {'TRL s':>8} {'shared s':>9} {'speedup':>8}"
    )
    for g, p in points:
        ids, mask = batch(g, p)
        times: dict[str, list[float]] = {"trl": [], "shared": []}
        for _ in range(args.repeats):  # alternating; the minimum is the least disturbed by other jobs
            for path in times:
                times[path].append(run(path, ids, mask))
        t_trl, t_shared = min(times["trl"]), min(times["shared"])
        tokens_trl = g * (p + c)
        tokens_shared = -(-g // args.micro_batch) * p + g * c  # one prompt per micro-batch
        rows.append(
            {
                "G": g,
                "prompt_tokens": p,
                "completion_width": c,
                "trl_s": t_trl,
                "shared_s": t_shared,
                "speedup": t_trl / t_shared,
                "tokens_trl": tokens_trl,
                "tokens_shared": tokens_shared,
            }
        )
        print(
            f"  {g:>3} {p:>7} {tokens_trl:>11} {tokens_shared:>14} {t_trl:>8.2f} {t_shared:>9.2f}"
            f" {t_trl / t_shared:>7.2f}x"
        )
    headline = next(r["speedup"] for r in rows if r["G"] == 16 and r["prompt_tokens"] == p0)

    return rows, headline


# --------------------------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    from transformers import HfArgumentParser
    from transformers.utils import logging as hf_logging

    global DEVICE
    (args,) = HfArgumentParser(Args).parse_args_into_dataclasses(args=argv)
    if args.device != "auto":
        DEVICE = args.device
    hf_logging.set_verbosity_error()
    device_name = torch.cuda.get_device_name() if DEVICE == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    weights = "bf16" if DEVICE == "cuda" else str(cpu_dtype(args)).removeprefix("torch.")
    print(f"step_speed: {device_name}; model {args.model_config or args.model} ({weights}); torch {torch.__version__}")
    print(f"settings: {json.dumps({k: v for k, v in asdict(args).items() if k != 'json_out'})}")
    results: dict[str, Any] = {"device": device_name, "args": asdict(args)}
    started = time.perf_counter()
    if args.sweep:
        rows, speedup = sweep(args)
        results["sweep"] = rows
    else:
        ratios = []
        for g in args.num_generations:
            result = run_pair(args, g)
            ratios.append(print_pair(g, result))
            results[f"G={g}"] = result
        speedup = min(ratios)
    results["wall_s"] = time.perf_counter() - started
    print(f"\nwall time {results['wall_s']:.0f} s")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1)
    if DEVICE == "cuda":
        print("stock TRL with vLLM: not run here (vllm 0.31 pins torch 2.13; see docs/performance.md)")
    print(f"{'gpu_' if DEVICE == 'cuda' else ''}speedup_vs_trl={speedup:.2f}")


if __name__ == "__main__":
    main()
