"""The training backend, chosen explicitly: `unsloth` (CUDA LoRA kernels), `peft`, or `auto`; and the GPU checks.

Why a module of its own: the choice has to be made *before* trl is imported. Unsloth patches transformers, peft and
trl when it is imported, and warns that it cannot when trl came first, so `activate` imports it before anything else
that gapo loads. Entry points (`gapo train`, the pipeline stages) call `resolve` and `activate` first thing; library
users call `gapo.backends.activate("unsloth")` (or `import unsloth`) before `import gapo.trainer`.

    auto     PEFT, for now (what GAPOConfig uses by default). On an H100 with unsloth 2026.10.7 the first GAPO step
             failed inside Unsloth's compiled GRPO loss (docs/performance.md), so Unsloth is opt-in until a test on
             a GPU passes; `auto` is the name to keep in configs, and it will pick Unsloth again then.
    unsloth  Unsloth, or a one-line error without CUDA or without the package
    peft     PEFT LoRA on transformers, on any device

Every later step (the trainer, group rewards, saving) is the same code for both; `load_policy` is the only fork.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
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
    return "peft"  # see the module docstring: Unsloth is opt-in until it passes tests/test_gpu.py


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


def check_vllm(use_vllm: bool) -> None:
    """`use_vllm` needs the vllm package (the `gpu` extra) and a GPU; say so in one line before any model loads."""
    if not use_vllm:
        return
    if not installed("vllm"):
        raise ValueError("use_vllm needs the vllm package: pip install -e '.[gpu]' (or set use_vllm: false)")
    if not torch.cuda.is_available():
        raise ValueError("use_vllm needs a CUDA GPU; set use_vllm: false on this machine")


def require_cuda(what: str) -> None:
    """One line for a GPU-only setting (a GPU profile, say) on a CPU-only machine."""
    if not torch.cuda.is_available():
        raise ValueError(f"{what} needs a CUDA GPU and none is visible; use the embedded or smoke profile on CPU")


# --------------------------------------------------------------------------------------------------------------------
# Loading the policy
# --------------------------------------------------------------------------------------------------------------------


def lora_config(args: Any) -> Any:
    """The PEFT LoRA config for a GAPOConfig or SFTConfig (their `lora_*` fields, defaults in `gapo.defaults`); the
    PEFT path: Unsloth gets the same numbers in `load_policy`."""
    from peft import LoraConfig

    return LoraConfig(
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules=args.lora_target_modules,
        task_type="CAUSAL_LM",
    )


def load_policy(model_name: str, args: Any, max_seq_length: int = 1024) -> tuple[Any, Any, Any]:
    """Load `(model, tokenizer, peft_config)` for training on `args.backend`; pass all three to GAPOTrainer.

    Unsloth: FastLanguageModel with the LoRA applied here (peft_config None). PEFT: gapo.models loads the model and
    the trainer applies `lora_config(args)`. The backend that ran is logged and kept in `args.backend`.
    """
    from gapo import models

    backend = resolve(args.backend, args.use_cpu)
    activate(backend)
    args.backend = backend
    logger.info("backend: %s", backend)
    if backend == "unsloth":  # pragma: no cover - needs CUDA (tests/test_gpu.py)
        from unsloth import FastLanguageModel

        model, tokenizer = FastLanguageModel.from_pretrained(
            model_name=models.model_dir(model_name),
            max_seq_length=max_seq_length,
            load_in_4bit=False,
            dtype=torch.bfloat16 if args.bf16 else None,
        )
        model = FastLanguageModel.get_peft_model(
            model,
            r=args.lora_r,
            lora_alpha=args.lora_alpha,
            lora_dropout=args.lora_dropout,
            target_modules=args.lora_target_modules,
            use_gradient_checkpointing="unsloth" if args.gradient_checkpointing else False,
            random_state=args.seed,
        )
        return model, tokenizer, None
    model, tokenizer = models.load_model_and_tokenizer(model_name, device="cpu" if args.use_cpu else None)
    model.train()
    return model, tokenizer, lora_config(args)
