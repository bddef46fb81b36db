"""`Sampler`: a backend plus default `SamplingParams`, what experiments take; `make_sampler` builds one."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from gapo.repro.chat import ChatPrompt
from gapo.repro.sampling.openai_backend import OpenAIBackend
from gapo.repro.sampling.params import BACKENDS, SamplingParams
from gapo.repro.sampling.transformers_backend import TransformersBackend
from gapo.repro.sampling.vllm_backend import VLLMBackend
from gapo.rewards import extract_answer

# --------------------------------------------------------------------------------------------------------------------
# Sampler: a backend plus default parameters (what experiments take)
# --------------------------------------------------------------------------------------------------------------------


class Backend(Protocol):
    name: str

    def generate(
        self, prompts: list[ChatPrompt], n: int, params: SamplingParams, progress: bool = False
    ) -> list[list[str]]: ...


@dataclass(frozen=True)
class Sampler:
    """A backend with default `SamplingParams`; call it with overrides: ``sampler(prompts, n, min_p=0.1)``."""

    backend: Backend
    params: SamplingParams = field(default_factory=SamplingParams)
    progress: bool = False

    def __call__(self, prompts: list[ChatPrompt], n: int, **overrides: Any) -> list[list[str]]:
        params = replace(self.params, **overrides) if overrides else self.params
        return self.backend.generate(prompts, n, params, progress=self.progress)

    def with_params(self, **overrides: Any) -> Sampler:
        return replace(self, params=replace(self.params, **overrides))


def make_sampler(
    model: str,
    *,
    adapter: str | None = None,
    backend: str = "transformers",
    endpoint: str | None = None,
    progress: bool = False,
    **params: Any,
) -> Sampler:
    """Load a model (or connect to an endpoint) and return a `Sampler`; `params` are `SamplingParams` fields."""
    sampling_params = SamplingParams(**params)
    if backend == "transformers":
        from gapo.models import check_adapter, check_model_name, load_model_and_tokenizer

        check_model_name(model)
        if adapter is not None:
            check_adapter(adapter)  # a missing or truncated adapter, before the base model loads
        loaded, tokenizer = load_model_and_tokenizer(model, adapter=adapter)
        return Sampler(TransformersBackend(loaded, tokenizer), sampling_params, progress)
    if backend == "vllm":
        return Sampler(VLLMBackend(model, adapter=adapter), sampling_params, progress)
    if backend == "openai":
        if not endpoint:
            raise ValueError("the openai backend needs --endpoint URL (e.g. http://127.0.0.1:8000/v1)")
        if adapter is not None:
            raise ValueError("--adapter is not supported with the openai backend (load it in the server)")
        return Sampler(OpenAIBackend(endpoint, model), sampling_params, progress)
    raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


# --------------------------------------------------------------------------------------------------------------------
# Output and CLI
# --------------------------------------------------------------------------------------------------------------------


def sample_records(prompt: str, completions: list[str], **meta: Any) -> list[dict[str, Any]]:
    """One JSON-ready record per sample: index, prompt, completion, extracted answer and the run's settings."""
    return [
        {"index": i, "prompt": prompt, "completion": text, "answer": extract_answer(text), **meta}
        for i, text in enumerate(completions)
    ]
