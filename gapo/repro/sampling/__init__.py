"""Many samples of the same prompt, from a local model (transformers), vLLM or an OpenAI-compatible endpoint.

| module                  | what it holds                                                               |
|-------------------------|-----------------------------------------------------------------------------|
| `params`                | `SamplingParams`, `SamplingError`, the backend names                        |
| `transformers_backend`  | one shared prompt encoding, then all N continuations decoded together (CPU) |
| `vllm_backend`          | vLLM (GPU): one engine per base model, adapters as LoRA requests            |
| `openai_backend`        | any ``/v1/chat/completions`` endpoint, with timeouts and bounded retries    |
| `sampler`               | `Sampler` (a backend + default params, what experiments take), `make_sampler` |
| `cli`                   | ``gapo sample``                                                             |

The names below are the public surface: ``from gapo.repro.sampling import Sampler, make_sampler``.
"""

from gapo.repro.sampling.openai_backend import OpenAIBackend, chat_completions_url
from gapo.repro.sampling.params import BACKENDS, SamplingError, SamplingParams
from gapo.repro.sampling.sampler import Backend, Sampler, make_sampler, sample_records
from gapo.repro.sampling.transformers_backend import (
    TransformersBackend,
    filter_logits,
    next_tokens,
    plan_chunks,
    sample_completions,
    sample_from_probs,
)
from gapo.repro.sampling.vllm_backend import VLLMBackend, VLLMEngine, vllm_engine

__all__ = [
    "BACKENDS",
    "Backend",
    "OpenAIBackend",
    "Sampler",
    "SamplingError",
    "SamplingParams",
    "TransformersBackend",
    "VLLMBackend",
    "VLLMEngine",
    "chat_completions_url",
    "filter_logits",
    "make_sampler",
    "next_tokens",
    "plan_chunks",
    "sample_completions",
    "sample_from_probs",
    "sample_records",
    "vllm_engine",
]
