"""One vLLM engine per base model, adapters as LoRA requests (gapo.sampling.vllm_engine, samplers.Samplers).

vllm cannot be installed on the CPU machines that run these tests (it pins a CUDA build of torch), so a stand-in
module records what gapo asks of it: which engines are started, and which LoRA request each generate call carries.
The CUDA check is the other thing outside our control here; both are patched, nothing of gapo's is.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from gapo import sampling
from gapo.repro.samplers import Samplers


class FakeLLM:
    started: list[dict] = []

    def __init__(self, **kwargs) -> None:  # noqa: ANN003
        FakeLLM.started.append(kwargs)
        self.requests: list = []

    def get_tokenizer(self):  # noqa: ANN201
        from gapo.models import load_tokenizer

        return load_tokenizer("tiny-random")

    def generate(self, texts, params, lora_request=None, use_tqdm=False):  # noqa: ANN001, ANN201
        self.requests.append(lora_request)
        choice = types.SimpleNamespace(text="Mars</answer>")
        return [types.SimpleNamespace(outputs=[choice] * params.n) for _ in texts]


@pytest.fixture()
def fake_vllm(monkeypatch, tmp_path):  # noqa: ANN001, ANN201
    vllm = types.ModuleType("vllm")
    vllm.LLM = FakeLLM
    vllm.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = lambda name, lora_id, path: (name, lora_id, path)
    for name, module in [("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)]:
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sampling.vllm_backend, "_VLLM_ENGINES", {})
    FakeLLM.started = []
    base = tmp_path / "base"
    base.mkdir()
    adapters = []
    for name in ("gapo", "sft"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text("{}")
        adapters.append(str(tmp_path / name))
    return str(base), adapters


def test_one_engine_per_base_model_and_a_stable_lora_id_per_adapter(fake_vllm):  # noqa: ANN001
    base, (gapo_adapter, sft_adapter) = fake_vllm
    prompt = [{"role": "user", "content": "Pick a planet."}]
    backends = [sampling.VLLMBackend(base, adapter=a) for a in (None, gapo_adapter, sft_adapter, gapo_adapter)]
    assert len(FakeLLM.started) == 1 and FakeLLM.started[0]["enable_lora"] is True
    assert len({id(b.engine) for b in backends}) == 1
    for backend in backends:
        backend.generate([prompt], 2, sampling.SamplingParams(max_new_tokens=4))
    requests = backends[0].llm.requests
    assert requests[0] is None  # the base model: no adapter
    assert [r[1] for r in requests[1:]] == [1, 2, 1]  # the same adapter keeps its id
    assert requests[2][2] == str(Path(sft_adapter).resolve())


def test_samplers_keep_the_engine_across_adapters(fake_vllm):  # noqa: ANN001
    base, (gapo_adapter, sft_adapter) = fake_vllm
    models = {
        "baseline": {"model": base},
        "gapo": {"model": base, "adapter": gapo_adapter},
        "sft": {"model": base, "adapter": sft_adapter},
        "minp": {"model": base, "min_p": 0.1},
    }
    samplers = Samplers(list(models), models, {"backend": "vllm", "temperature": 1.0})
    for name in samplers:
        samplers[name]([[{"role": "user", "content": "Pick a planet."}]], 1)
        samplers.release()
    assert len(FakeLLM.started) == 1  # five uniformity models on one base would otherwise start five engines


def test_vllm_needs_cuda_in_one_line(monkeypatch):  # noqa: ANN001
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(sampling.SamplingError, match="needs a CUDA GPU"):
        sampling.vllm_engine("embedded")
