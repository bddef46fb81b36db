"""Fixtures for the `vllm` tests (imported by conftest.py): the smallest model directory vLLM's CPU build serves, two
LoRA adapters for it, one engine shared by the whole session, and a `vllm serve` on a free local port.

Why a model of its own: `tiny-random` has head_dim 4, and vLLM's CPU attention serves head sizes 32..512 only
("Unsupported CPU attention configuration: head_dim=4"). `tiny-vllm` is the same tiny Qwen2 with two heads of 32
(hidden size 64; 19M parameters, almost all the 151k-token embedding and output head), its head untied and scaled so
that the next-token distribution is peaked (a few dozen likely tokens instead of 151k near-equal ones): two samplers
can then be compared by a chi-square test on a few hundred samples.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

#: vLLM's CPU KV cache in GiB (its default is 4): the tests' sequences are a few dozen tokens.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

#: The engine settings every vllm test uses, so that the session's one engine serves them all.
ENGINE_KWARGS = {"max_model_len": 256, "enforce_eager": True, "dtype": "float32", "seed": 0, "max_num_seqs": 64}
#: vLLM's LoRA ranks are 8, 16, 32, 64...; the adapters here use 8.
LORA_RANK = 8
#: The output head's scale that makes tiny-vllm's next-token distribution peaked (logit std ~4 instead of ~0.16).
HEAD_SCALE = 25.0


def build_tiny_vllm_model(path: Path) -> Path:
    """Write `tiny-vllm` (see the module docstring) with the embedded tokenizer to `path`."""
    from transformers import AutoModelForCausalLM

    from gapo.models import load_tokenizer
    from gapo.repro.offline import TinyRandomSpec, tiny_random_config

    tokenizer = load_tokenizer("tiny-random")
    spec = TinyRandomSpec(hidden_size=64, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1)
    config = tiny_random_config(tokenizer, spec)
    config.tie_word_embeddings = False  # a tied head puts most mass on repeating the last prompt token
    with torch.random.fork_rng():
        torch.manual_seed(spec.seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        with torch.no_grad():
            model.lm_head.weight.normal_(0.0, 0.02 * HEAD_SCALE)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_random_adapter(model_dir: Path, path: Path, seed: int) -> Path:
    """A PEFT LoRA adapter (rank 8, q/k/v/o) with random A *and* B, so it moves the model's distribution."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(
        r=LORA_RANK,
        lora_alpha=2 * LORA_RANK,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        init_lora_weights=False,  # B is random too: an adapter that changes the samples
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, config)
        with torch.no_grad():
            for name, param in peft_model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0.0, 0.5)
    peft_model.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_vllm_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The `tiny-vllm` model directory (written once per session)."""
    return str(build_tiny_vllm_model(tmp_path_factory.mktemp("tiny-vllm") / "model"))


@pytest.fixture(scope="session")
def tiny_vllm_adapters(tiny_vllm_model: str, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Two random LoRA adapters on `tiny-vllm`."""
    root = tmp_path_factory.mktemp("tiny-vllm-adapters")
    return [str(build_random_adapter(Path(tiny_vllm_model), root / f"adapter{seed}", seed)) for seed in (1, 2)]


@pytest.fixture(scope="session")
def vllm_engine_for_tiny(tiny_vllm_model: str) -> Iterator[Any]:
    """The session's one vLLM engine on `tiny-vllm` (vllm_engine's process-wide cache): every test that
    samples `tiny_vllm_model` with ENGINE_KWARGS reuses it instead of starting another (~30 s each on 2 cores)."""
    pytest.importorskip("vllm")
    from gapo.repro.sampling import vllm_backend

    engine = vllm_backend.vllm_engine(tiny_vllm_model, max_lora_rank=LORA_RANK, **ENGINE_KWARGS)
    yield engine
    # Stopped here, while pytest's output is open: vLLM's exit hook would otherwise log into closed streams.
    vllm_backend._VLLM_ENGINES.pop(engine.model_path, None)
    engine.llm.llm_engine.engine_core.shutdown()


# --------------------------------------------------------------------------------------------------------------------
# `vllm serve` on a free local port (for tests of the openai backend against a real server)
# --------------------------------------------------------------------------------------------------------------------


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def vllm_server(model: str, *extra: str, timeout: float = 600.0, env: dict[str, str] | None = None) -> Iterator[str]:
    """Start vLLM's OpenAI-compatible server for MODEL on 127.0.0.1 and a free port (`extra`: more server flags, `env`:
    variables added to this process's); yield its base URL (".../v1"); stop it on exit.

    The server's log goes to a temporary file, quoted in the error when it does not come up within `timeout`.
    """
    port = free_port()
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"vllm-serve-{port}.log"
    # The API server's module, not `vllm serve`: the CLI reads the version of the distribution "vllm", and the CPU
    # build's is "vllm-cpu" (PackageNotFoundError).
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--max-model-len", "256", "--enforce-eager", "--dtype", "float32", *extra]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})}
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vllm serve did not answer within {timeout:.0f} s: {log.read_text()[-2000:]}")
            time.sleep(1.0)
        yield f"{base}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def vllm_server_url(tiny_vllm_model: str) -> Iterator[str]:
    """A `vllm serve` of `tiny-vllm` for the session (served model name: the directory path)."""
    pytest.importorskip("vllm")
    with vllm_server(tiny_vllm_model) as url:
        yield url
