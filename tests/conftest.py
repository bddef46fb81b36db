"""Shared fixtures. Tests run offline on CPU; `tiny-random` is a ~1M-parameter Qwen2 with the real Qwen tokenizer."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

#: `make test` runs the suite on every core (pytest-xdist, one worker a core, `--dist loadscope`: a module's tests on
#: one worker, so a module- or session-scoped fixture such as a vLLM engine or server is built once): each worker
#: computes on one thread, as two torch threads per worker on 2 cores would have four threads fight over two cores.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // WORKERS)))


def _cost(item: pytest.Item) -> int:
    """A coarse rank of a test's wall time: the long ones start first, so that no worker is left with one at the end."""
    if item.get_closest_marker("slow") or item.get_closest_marker("embedded"):
        return 3
    if item.get_closest_marker("vllm"):
        return 2
    timeout = item.get_closest_marker("timeout")
    return 1 if timeout and timeout.args and timeout.args[0] >= 600 else 0


def pytest_collection_modifyitems(config, items):  # noqa: ANN001, ANN201
    module_cost: dict[str, int] = {}
    for item in items:
        module = item.module.__name__
        module_cost[module] = max(module_cost.get(module, 0), _cost(item))
    # Modules with long tests first (loadscope hands out whole modules in this order), each module's tests kept
    # together and in order: a module-scoped fixture lives only while its tests run back to back.
    items.sort(key=lambda item: module_cost[item.module.__name__], reverse=True)
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def tokenizer():  # noqa: ANN201
    from gapo.models import load_tokenizer

    return load_tokenizer("tiny-random")


@pytest.fixture()
def tiny_model_and_tokenizer():  # noqa: ANN201
    from gapo.models import load_model_and_tokenizer

    return load_model_and_tokenizer("tiny-random", device="cpu")


#: GAPOConfig values for a trainer that takes a real step on tiny-random in seconds (two groups of G=4 a step).
TINY_GAPO = {
    "num_generations": 4,
    "per_device_train_batch_size": 4,
    "max_steps": 2,
    "max_completion_length": 6,
    "learning_rate": 1e-2,
    "lora_r": 4,
    "lora_alpha": 8,
    "lora_dropout": 0.0,
    "logging_steps": 1,
    "save_strategy": "no",
    "seed": 0,
}


@pytest.fixture()
def tiny_gapo_args(tmp_path):  # noqa: ANN001, ANN201
    """`make(**overrides) -> GAPOConfig`: `TINY_GAPO` writing to tmp_path/out, with `overrides` on top."""
    from gapo.trainer import GAPOConfig

    def make(**overrides):  # noqa: ANN003, ANN202
        return GAPOConfig(**{"output_dir": str(tmp_path / "out"), **TINY_GAPO, **overrides})

    return make


@pytest.fixture()
def tiny_gapo_trainer(tiny_gapo_args):  # noqa: ANN001, ANN201
    """`make(reward_funcs=None, train_dataset=None, lora=True, **config overrides) -> GAPOTrainer` on tiny-random, of
    the class `gapo train` runs for the config (`trainer_class`: the shared-prompt one on CPU unless turned off).

    Defaults: `frequency_reward`, 8 list prompts (seed 0), a LoRA adapter built from the
    config (`gapo.backends.lora_config`); a fresh model each call.
    """
    from gapo.backends import lora_config
    from gapo.models import load_model_and_tokenizer
    from gapo.rewards import frequency_reward
    from gapo.tasks.lists import make_list_selection_dataset
    from gapo.trainer import trainer_class

    def make(reward_funcs=None, train_dataset=None, lora=True, **overrides):  # noqa: ANN001, ANN003, ANN202
        args = tiny_gapo_args(**overrides)
        # float32 unless a test names policy_dtype (as backends.load_policy loads it), whatever the CPU
        dtype = getattr(torch, args.policy_dtype) if "policy_dtype" in overrides else torch.float32
        model, tokenizer = load_model_and_tokenizer("tiny-random", dtype=dtype, device="cpu")
        return trainer_class(args)(
            model=model,
            reward_funcs=reward_funcs if reward_funcs is not None else [frequency_reward],
            args=args,
            train_dataset=(train_dataset if train_dataset is not None else make_list_selection_dataset(8, seed=0)),
            processing_class=tokenizer,
            peft_config=lora_config(args) if lora else None,
        )

    return make


@pytest.fixture()
def same_adapter_folders():  # noqa: ANN201
    """Checks that two saved adapter folders hold the same files, byte for byte, in the layout that keeps them so:
    `target_modules` sorted and no load-time key in the tokenizer's config (`gapo.models.save_tokenizer`)."""
    import json
    from pathlib import Path

    from gapo.models import LOAD_TIME_KEYS

    def check(first: Path, second: Path) -> None:
        a, b = ({p.name: p.read_bytes() for p in Path(folder).iterdir()} for folder in (first, second))
        assert sorted(a) == sorted(b) and "adapter_model.safetensors" in a
        assert a == b
        targets = json.loads(a["adapter_config.json"])["target_modules"]
        assert len(targets) > 1 and targets == sorted(targets)
        assert not set(LOAD_TIME_KEYS) & set(json.loads(a["tokenizer_config.json"]))

    return check


# The `vllm` tests' model, adapters, shared engine and `vllm serve` fixture (tests/vllm_fixtures.py).
from vllm_fixtures import (  # noqa: E402, F401
    tiny_vllm_adapters,
    tiny_vllm_model,
    vllm_engine_for_tiny,
    vllm_server_url,
)
