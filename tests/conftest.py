"""Shared fixtures. Tests run offline on CPU; `tiny-random` is a ~1M-parameter Qwen2 with the real Qwen tokenizer."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def pytest_collection_modifyitems(config, items):  # noqa: ANN001, ANN201
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
