"""Load the policy model and tokenizer by name: a hub id, a local directory, or a registered offline model.

Why registered names: without the model hub a model must come from elsewhere, and how (packages, a conversion, a
cache) is not the method's business. A package registers a name under the entry-point group ``gapo.models`` (name -> a
function returning a directory `from_pretrained` reads, built once); `resolve_model_path` looks it up. The harness
(`gapo.repro.offline`) registers ``embedded`` (the default policy, Qwen2.5-Coder-0.5B-Instruct, shipped in registry
packages) and ``tiny-random`` (a random ~1M-parameter Qwen2); a user registers their own in their pyproject.toml."""

from __future__ import annotations

import ctypes
import json
import os
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import torch

from gapo.checkpoints import safetensors_problem

#: The entry-point group of offline models: ``name = "package.module:function"``, the function returning a directory.
MODEL_PLUGINS = "gapo.models"


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message says what to do."""


def plugins(group: str) -> dict[str, EntryPoint]:
    """name -> entry point of an entry-point group (offline models here, encoders in gapo.embeddings), none loaded."""
    return {ep.name: ep for ep in entry_points(group=group)}


def offline_models() -> dict[str, EntryPoint]:
    """The registered offline model names (entry-point group ``gapo.models``), without loading any."""
    return plugins(MODEL_PLUGINS)


def module_names(name: str) -> list[str]:
    """Dotted names of every module of model `name`, built from its config on the meta device (no weights read)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(resolve_model_path(name))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return [module_name for module_name, _ in model.named_modules() if module_name]


def check_lora_targets(name: str, targets: list[str] | str | None) -> None:
    """Fail with one line when a LoRA target module matches no module of `name` (PEFT's suffix rule)."""
    if not targets or targets == "all-linear":
        return
    if isinstance(targets, str):
        targets = [targets]
    names = module_names(name)
    unknown = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if unknown:
        leaves = sorted({n.rsplit(".", 1)[-1] for n in names if "." in n and not n.rsplit(".", 1)[-1].isdigit()})
        raise ValueError(f"LoRA target modules {unknown} are not modules of {name}; choose from: {', '.join(leaves)}")


def check_adapter(adapter: str) -> None:
    """Fail with one line when `adapter` is not a whole PEFT adapter directory (config and weights)."""
    directory = Path(adapter)
    config = directory / "adapter_config.json"
    if not config.is_file():
        raise ModelLoadError(f"no LoRA adapter at {adapter!r} (adapter_config.json missing)")
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ModelLoadError(f"adapter {adapter!r}: adapter_config.json is not valid JSON ({err.msg})") from err
    weights = directory / "adapter_model.safetensors"
    if not weights.is_file():
        if (directory / "adapter_model.bin").is_file():
            return
        raise ModelLoadError(f"adapter {adapter!r} has no adapter_model.safetensors; train it again or copy it whole")
    problem = safetensors_problem(weights)
    if problem:
        raise ModelLoadError(f"adapter {adapter!r}: adapter_model.safetensors is {problem}; train it or copy it again")


def resolve_model_path(name: str) -> str:
    """A directory `from_pretrained` reads for a registered offline model (built on first use), else `name` itself,
    so loaders that take only a path (Unsloth's, vLLM's) get one for every name. A name that cannot work offline is a
    one-line error before anything heavy loads."""
    registered = offline_models()
    if name in registered:
        return str(registered[name].load()())
    if os.path.isdir(name):
        return name
    if _hub_offline():
        raise ModelLoadError(
            f"unknown model {name!r}: it is not a local directory and the model hub is off; "
            f"offline models: {', '.join(sorted(registered))} (or pass a local directory, or set HF_HUB_OFFLINE=0 to "
            "download it)"
        )
    return name


def _hub_offline() -> bool:
    """gapo runs offline unless HF_HUB_OFFLINE=0: without the hub, an unknown name would spend about a minute in
    retries before an OSError; this check takes no time."""
    return os.environ.get("HF_HUB_OFFLINE", "1").strip().lower() not in ("0", "false", "no", "off")


def check_model_name(name: str) -> None:
    """Cheap validation for CLIs: fails fast for a name that cannot load, without loading anything."""
    if name in offline_models() or os.path.isdir(name):
        return
    if _hub_offline():
        resolve_model_path(name)  # raises the offline error


#: glibc's `mallopt` parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def keep_freed_memory() -> bool:
    """Let this process reuse the memory it frees instead of handing it back to the kernel; whether it took (glibc).

    Why, on CPU: glibc serves an allocation above its mmap threshold (at most 32 MiB) with a fresh `mmap`, unmaps it on
    free and trims the heap's free top, so each large tensor of a step (the LM head's logits, rows x a 152k vocabulary,
    their softmax and gradients) is faulted in again page by page, zeroed by the kernel each time; kept in the heap,
    the pages are reused. One fixed G=32 step of the embedded recipe (`perf/allocator.py`, three alternating pairs of
    processes): 4.62 s against 5.07 s, page faults 260,000 -> 4,000, kernel time 0.53 -> 0.05 s (docs/performance.md).
    Called where a model loads on the CPU (`load_model_and_tokenizer`): training, SFT and the evaluation sampler."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl): its allocator is left as it is
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def load_tokenizer(name: str) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model_and_tokenizer(
    name: str,
    adapter: str | None = None,
    dtype: torch.dtype | None = None,
    device: str | None = None,
) -> tuple[torch.nn.Module, Any]:
    """Load `(model, tokenizer)`.

    Args:
        name: a hub id, a local directory or a registered offline model (`offline_models`, module docstring).
        adapter: a PEFT LoRA adapter directory trained on this base; not merged: a `PeftModel`, adapter not trainable.
        dtype: float32 on CPU (so evaluation rows do not depend on the CPU having bf16 units), bfloat16 on CUDA.
        device: ``"cpu"``/``"cuda"``; default CUDA when available."""
    from transformers import AutoModelForCausalLM

    if adapter is not None:
        check_adapter(adapter)  # before the base model loads
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    if device == "cpu":
        keep_freed_memory()
    tokenizer = load_tokenizer(name)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(name), dtype=dtype)
    model = model.to(device)
    if adapter is not None:
        model = attach_adapter(model, adapter)
    model.eval()
    return model, tokenizer


def attach_adapter(model: torch.nn.Module, adapter: str) -> torch.nn.Module:
    """Wrap `model` with a saved LoRA adapter, with a clear error when it was trained on another base."""
    from peft import PeftModel

    check_adapter(adapter)
    try:
        return PeftModel.from_pretrained(model, adapter)
    except (RuntimeError, ValueError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelLoadError(f"adapter {adapter!r} does not match the base model: {first[:200]}") from err


def save_merged(name: str, adapter: str | Path, out: str | Path) -> None:
    """Write `name` with the LoRA adapter `adapter` merged into its weights, and its tokenizer, to `out`.

    Why a full model: `gapo train --model OUT` then trains a fresh adapter on top of the adapted one (an SFT first,
    then GAPO), which a PeftModel cannot take as its base. Merged in float32 on CPU, as `load_model_and_tokenizer`
    loads it there, so the merged weights are the adapted model's own."""
    model, tokenizer = load_model_and_tokenizer(name, adapter=str(adapter))
    model.merge_and_unload().save_pretrained(str(out))
    save_tokenizer(tokenizer, out)


#: tokenizer_config.json keys that record how the tokenizer was loaded, not what it is: transformers sets
#: `local_files_only` from HF_HUB_OFFLINE at load time and writes it back on save.
LOAD_TIME_KEYS: tuple[str, ...] = ("local_files_only",)


def save_tokenizer(tokenizer: Any, out: str | Path) -> None:
    """Save `tokenizer` to `out` without `LOAD_TIME_KEYS`, in transformers' own layout.

    Why: a model or adapter directory is a DVC output; with the load-time keys in it, the same tokenizer saved with
    and without HF_HUB_OFFLINE set (the Makefile sets it, a bare `dvc repro` does not) hashes differently, and every
    stage that reads the directory re-runs for nothing."""
    tokenizer.save_pretrained(str(out))
    path = Path(out) / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if any(key in config for key in LOAD_TIME_KEYS):
        kept = {k: v for k, v in config.items() if k not in LOAD_TIME_KEYS}
        path.write_text(json.dumps(kept, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def sort_target_modules(path: Path) -> None:
    """Rewrite a saved adapter_config.json with `target_modules` sorted, in PEFT's own layout (indent 2, sorted keys).

    Why: PEFT holds the target modules as a set and writes them in that set's order, which follows the process's string
    hash seed. Unsorted, two runs that train the same weights write different files, so an adapter's DVC hash
    (models/sft, models/gapo) changes and `dvc repro` re-runs every stage that reads it for nothing."""
    config = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
        path.write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")
