"""The backend switch and the GPU settings, on CPU: explicit choices, one-line refusals, device-aware defaults."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gapo import backends, models
from gapo.io import temp_glob
from gapo.repro.pipeline import require_cuda
from gapo.trainer import GAPOConfig

ROOT = Path(__file__).resolve().parents[1]
CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusals")
#: Why `use_vllm` refuses tiny-random on CPU: vLLM's CPU attention has no kernel for its head size 4 (or no vLLM).
NO_VLLM_FOR_TINY = r"vLLM's CPU attention cannot serve tiny-random: head size 4|vLLM is not installed"


def test_auto_and_peft_resolve_to_peft_on_cpu():
    assert backends.resolve("peft") == "peft"
    assert backends.resolve("auto", use_cpu=True) == "peft"
    with pytest.raises(ValueError, match="backend must be one of auto, unsloth, peft, got 'vllm'"):
        backends.resolve("vllm")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_load_policy_loads_the_weights_in_policy_dtype(tmp_path, dtype: str):  # noqa: ANN001
    """The PEFT path loads the base weights in GAPOConfig.policy_dtype (`gapo train` does no cast of its own); the
    LoRA config comes back for the trainer to apply."""
    args = GAPOConfig(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=32, policy_dtype=dtype)
    model, _, peft_config = backends.load_policy("tiny-random", args)
    assert args.backend == "peft" and peft_config is not None and model.training
    assert {p.dtype for p in model.parameters()} == {getattr(torch, dtype)}


@CPU_ONLY
def test_gpu_only_settings_refuse_in_one_line():
    with pytest.raises(ValueError, match="backend 'unsloth' needs a CUDA GPU; use --backend peft"):
        backends.resolve("unsloth")
    # tiny-random's head size (4) is one vLLM's CPU attention does not serve; without vLLM, that is the line
    with pytest.raises(ValueError, match=f"use_vllm: ({NO_VLLM_FOR_TINY})"):
        backends.check_vllm(True, "tiny-random")
    backends.check_vllm(False, "tiny-random")
    with pytest.raises(ValueError, match="profile 'paper' needs a CUDA GPU"):
        require_cuda("profile 'paper'")


def test_gapo_config_device_defaults(tmp_path):  # noqa: ANN001
    args = GAPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=32)
    cuda = torch.cuda.is_available()
    assert args.backend == "auto"
    assert args.shared_prompt_forward is (not cuda)  # measured faster on CPU, slower on an H100
    assert args.static_cache_generation is cuda
    if not cuda:
        assert args.cache_implementation is None and not args.generation_kwargs


def test_static_cache_generation_sets_trl_generation_settings(tmp_path):  # noqa: ANN001
    args = GAPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=32,
        static_cache_generation=True,
        generation_max_cache_len=256,
        max_completion_length=16,
    )
    assert args.cache_implementation == "static"
    assert args.generation_kwargs == {"max_cache_len": 256}
    with pytest.raises(ValueError, match="backend must be one of"):
        GAPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=32, backend="fast")
    with pytest.raises(ValueError, match="turn it off with use_vllm"):
        GAPOConfig(
            output_dir=str(tmp_path), per_device_train_batch_size=32, static_cache_generation=True, use_vllm=True
        )


def test_static_cache_generation_trains_on_cpu(tiny_gapo_trainer):  # noqa: ANN001
    """The GPU generation path (static cache; compiled only on accelerators) runs a real step on tiny-random."""
    from gapo.rewards import frequency_reward
    from gapo.tasks.lists import make_list_selection_dataset

    trainer = tiny_gapo_trainer(
        [frequency_reward],
        make_list_selection_dataset(4, seed=0),
        max_steps=1,
        static_cache_generation=True,
        generation_max_cache_len=128,
        shared_prompt_forward=False,  # as on CUDA, where static-cache generation is the default
    )
    assert trainer.generation_config.cache_implementation == "static"
    assert trainer.generation_config.disable_compile is False
    trainer.train()
    assert trainer.state.global_step == 1


def test_model_dir_materialises_tiny_random_once():
    path = Path(models.resolve_model_path("tiny-random"))
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.pad_token != tokenizer.eos_token  # what Unsloth requires of a tokenizer
    assert AutoModelForCausalLM.from_pretrained(path).config.model_type == "qwen2"
    assert models.resolve_model_path("tiny-random") == str(path)
    assert not list(path.parent.glob(temp_glob(path)))


@CPU_ONLY
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--backend", "unsloth"], "gapo: error: backend 'unsloth' needs a CUDA GPU"),
        (["--use-vllm"], f"gapo: error: use_vllm: ({NO_VLLM_FOR_TINY})"),
        (["--backend", "jax"], "gapo: error: backend must be one of auto, unsloth, peft"),
        (["--vllm-mode", "remote"], "gapo: error: vllm_mode must be colocate or server"),
    ],
)
def test_train_cli_refuses_gpu_settings_before_loading(tmp_path, flags, message):  # noqa: ANN001
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "gapo.cli", "train", "--no-params", "--model", "tiny-random", "--output-dir", str(out)]
        + flags,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip().splitlines()[0]]
    assert re.match(message, proc.stderr), proc.stderr
    assert not out.exists()


@CPU_ONLY
def test_gpu_profile_refuses_on_cpu_before_writing_anything():
    from gapo.repro import pipeline, profiles

    params = ROOT / "params.yaml"
    before = params.read_text(encoding="utf-8")
    assert pipeline.needs_gpu(profiles.resolve("paper", params))
    assert not pipeline.needs_gpu(profiles.resolve("embedded", params))
    with pytest.raises(profiles.PipelineError, match="profile 'paper' .* needs a CUDA GPU"):
        pipeline.use_profile("paper", params)
    assert not (ROOT / "runs" / "profiles" / "paper").exists()
    assert params.read_text(encoding="utf-8") == before
