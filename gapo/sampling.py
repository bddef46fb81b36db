"""N samples per chat prompt, fast: one shared prompt encoding, then all N continuations decoded together.

Why this module exists: every evaluation in the paper draws many samples of the *same* prompt (100 per list,
500 per open question, 1500 haikus). Calling ``generate`` N times re-encodes the prompt N times and decodes with
batch size 1; on two CPU cores that is ~10x slower per token than a batch of 100. So the transformers backend

1. encodes each distinct prompt once (prompts of a group are left-padded into one forward pass),
2. copies the prompt's KV cache to the rows that continue it (``cache.batch_select_indices(rows)``), and
3. runs its own decoding loop over the expanded cache (temperature, top-p, min-p, EOS), dropping rows as soon
   as they emit EOS so the batch shrinks instead of decoding padding.

Batch layout for one prompt p with n = 6 samples and batch_size = 4 (two chunks, one prompt encoding)::

    prompt forward:  [p]                 -> cache (1, P), logits of the last prompt token (1, V)
    chunk 0:         cache rows [0 0 0 0] -> decode 4 samples together
    chunk 1:         cache rows [0 0]     -> decode 2 samples together

and for 3 prompts with n = 1 and batch_size = 4 (one group, left-padded, one forward)::

    prompt forward:  [pad pad p0] [pad p1 p1] [p2 p2 p2]  -> cache (3, P)
    chunk 0:         cache rows [0 1 2]

Reproducibility: each chunk draws from its own ``torch.Generator`` seeded from ``(seed, chunk index)``, so the same
prompts, n, seed and batch_size give the same samples. Changing batch_size changes the chunking and so the draws.

Other backends share the same call shape: vLLM (GPU, LoRA through ``LoRARequest``) and any OpenAI-compatible
``/v1/chat/completions`` endpoint (API models, a local vLLM or llama.cpp server) with timeouts and bounded
retries. `Sampler` bundles a backend with `SamplingParams`; experiments take a `Sampler`.

CLI (dispatched from ``gapo sample``)::

    gapo sample --model embedded --prompt "Name one city anywhere in the world." -n 100 --out cities.jsonl
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import os
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from gapo.chat import ChatPrompt, render_prompt, split_prefill
from gapo.config import OneLineErrorParser
from gapo.io import write_jsonl_atomic
from gapo.rewards import extract_answer

logger = logging.getLogger(__name__)

BACKENDS = ("transformers", "vllm", "openai")


class SamplingError(RuntimeError):
    """Sampling could not run (unreachable endpoint, backend missing); the message is one line."""


# --------------------------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. Validated on construction, so a bad value fails before any model work."""

    temperature: float = field(default=1.0, metadata={"help": "Softmax temperature; 0 means greedy decoding."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass in (0, 1]; 1 disables it."})
    min_p: float = field(
        default=0.0, metadata={"help": "Min-p in [0, 1): drop tokens with p < min_p * p_max; 0 disables it."}
    )
    seed: int = field(default=0, metadata={"help": "Seed; the same seed and inputs give the same samples."})
    max_new_tokens: int = field(default=64, metadata={"help": "Completion length cap in tokens."})
    response_prefix: str | None = field(
        default=None,
        metadata={"help": "Text pre-filled as the start of the assistant turn (e.g. '<answer>'); kept in outputs."},
    )
    batch_size: int | None = field(
        default=None, metadata={"help": "Rows decoded together (memory cap); default 64 on CPU, 256 on GPU."}
    )

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")
        if self.max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be positive, got {self.max_new_tokens}")
        if self.batch_size is not None and self.batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")


def _check_request(prompts: Sequence[Any], n: int) -> None:
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"n (samples per prompt) must be a positive integer, got {n!r}")
    if len(prompts) == 0:
        raise ValueError("no prompts to sample from")


_greedy_warned = False


def _warn_greedy(n: int, temperature: float) -> None:
    global _greedy_warned
    if temperature == 0 and n > 1 and not _greedy_warned:
        _greedy_warned = True
        warnings.warn(
            f"temperature 0 is greedy decoding: all {n} samples of a prompt will be identical",
            stacklevel=3,
        )


# --------------------------------------------------------------------------------------------------------------------
# Token selection (pure functions on logits)
# --------------------------------------------------------------------------------------------------------------------


def filter_logits(logits: torch.Tensor, top_p: float = 1.0, min_p: float = 0.0) -> torch.Tensor:
    """Mask (to -inf) the tokens that top-p and then min-p remove; the most likely token always survives.

    Args:
        logits: (B, V) temperature-scaled logits.
        top_p: keep the smallest set of most likely tokens whose probability reaches `top_p`.
        min_p: then keep tokens with ``p >= min_p * max(p)`` (Nguyen et al. 2025).

    Example: probabilities (0.5, 0.3, 0.15, 0.05) with top_p=0.8 keep the first two; with min_p=0.2 instead
    the threshold is 0.1, keeping the first three.
    """
    out = logits
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, dim=-1, descending=True)  # (B, V)
        sorted_probs = sorted_logits.softmax(dim=-1)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # probability of strictly more likely tokens
        drop_sorted = mass_before >= top_p  # the first token has mass_before 0 < top_p: always kept
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    if min_p > 0.0:
        probs = out.softmax(dim=-1)
        threshold = min_p * probs.max(dim=-1, keepdim=True).values  # (B, 1)
        out = out.masked_fill(probs < threshold, float("-inf"))
    return out


def next_tokens(
    logits: torch.Tensor, temperature: float, top_p: float, min_p: float, generator: torch.Generator | None
) -> torch.Tensor:
    """One sampled (or greedy when temperature is 0) token per row: (B, V) logits -> (B,) token ids."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = filter_logits(logits.float() / temperature, top_p=top_p, min_p=min_p)
    return sample_from_probs(scaled.softmax(dim=-1), generator)


def sample_from_probs(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Inverse-CDF sampling, one uniform per row: (B, V) probabilities -> (B,) token ids.

    Why not `torch.multinomial`: on CPU it is ~8x slower over a 152k vocabulary (0.8 s vs 0.1 s for 100 rows), which
    is a third of a decoding step of the 0.5B model. Zero-probability tokens are never drawn: with
    ``searchsorted(right=True)`` token i needs ``cdf[i-1] <= u < cdf[i]``, an empty interval when p_i = 0.
    """
    cdf = probs.cumsum(dim=-1)  # (B, V)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=cdf.dtype) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)


def _chunk_seed(seed: int, chunk: int) -> int:
    """A well-mixed 63-bit seed per chunk, so neighbouring seeds and chunks draw unrelated streams."""
    return int(
        np.random.SeedSequence([seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF, chunk]).generate_state(2, np.uint64)[0] >> 1
    )


# --------------------------------------------------------------------------------------------------------------------
# Transformers backend: shared prompt encoding + own decoding loop
# --------------------------------------------------------------------------------------------------------------------


def _model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids: set[int] = set()
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (config_eos, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    if not ids:
        raise ValueError("neither the model's generation config nor the tokenizer defines an EOS token")
    return sorted(ids)


def _default_batch_size(device: torch.device) -> int:
    return 256 if device.type == "cuda" else 64


@dataclass(frozen=True)
class _Chunk:
    """Rows decoded together: `rows[i]` is the index (within its group) of the prompt that row i continues."""

    group: int
    rows: tuple[int, ...]


def plan_chunks(num_prompts: int, n: int, batch_size: int) -> list[tuple[list[int], list[_Chunk]]]:
    """Group prompts for one shared forward each, and split each group's n-per-prompt rows into chunks.

    Returns a list of ``(prompt indices of the group, chunks of that group)``. Every prompt appears in exactly one
    group; every chunk holds at most `batch_size` rows; rows of one prompt are contiguous and in sample order.
    """
    per_group = max(1, batch_size // n)
    plan = []
    for g, start in enumerate(range(0, num_prompts, per_group)):
        members = list(range(start, min(start + per_group, num_prompts)))
        rows = [local for local in range(len(members)) for _ in range(n)]
        chunks = [_Chunk(g, tuple(rows[i : i + batch_size])) for i in range(0, len(rows), batch_size)]
        plan.append((members, chunks))
    return plan


def _encode_group(
    model: Any, tokenizer: Any, texts: list[str], device: torch.device
) -> tuple[Any, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """One forward over the group's prompts (left-padded). Returns (cache, mask or None, last logits, lengths)."""
    from transformers import DynamicCache

    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    if any(len(x) == 0 for x in ids):
        raise ValueError("a prompt rendered to zero tokens")
    width = max(len(x) for x in ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids], device=device)  # (G, P)
    lengths = torch.tensor([len(x) for x in ids], device=device)  # (G,)
    padded = bool((lengths < width).any())
    mask = (torch.arange(width, device=device)[None, :] >= (width - lengths)[:, None]).long() if padded else None
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0) if mask is not None else None
    config = getattr(model, "config", None)
    cache = DynamicCache(config=config) if config is not None else DynamicCache()
    out = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=position_ids,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    return out.past_key_values, mask, out.logits[:, -1, :].float(), lengths


def _decode_chunk(
    model: Any,
    group_cache: Any,
    group_mask: torch.Tensor | None,
    group_logits: torch.Tensor,
    group_lengths: torch.Tensor,
    rows: Sequence[int],
    params: SamplingParams,
    eos_ids: list[int],
    generator: torch.Generator | None,
) -> list[list[int]]:
    """Decode one chunk over a copy of the group cache expanded to its rows; returns token ids (EOS excluded)."""
    device = group_logits.device
    index = torch.tensor(rows, device=device)
    cache = copy.deepcopy(group_cache)
    cache.batch_select_indices(index)  # (B, heads, P, d) per layer: the prompt expanded to its samples
    mask = group_mask[index] if group_mask is not None else None  # (B, P) or None
    positions = group_lengths[index].clone()  # next position id per row
    logits = group_logits[index]  # (B, V)
    eos = torch.tensor(eos_ids, device=device)
    active = torch.arange(len(rows), device=device)  # which original rows are still decoding
    outputs: list[list[int]] = [[] for _ in rows]
    for step in range(params.max_new_tokens):
        tokens = next_tokens(logits, params.temperature, params.top_p, params.min_p, generator)  # (B_active,)
        done = torch.isin(tokens, eos)
        for row, token, finished in zip(active.tolist(), tokens.tolist(), done.tolist(), strict=True):
            if not finished:
                outputs[row].append(token)
        keep = ~done
        if step == params.max_new_tokens - 1 or not bool(keep.any()):
            break
        if not bool(keep.all()):
            kept = keep.nonzero().squeeze(-1)
            active, tokens, positions = active[kept], tokens[kept], positions[kept]
            cache.batch_select_indices(kept)
            mask = mask[kept] if mask is not None else None
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=-1)  # (B_active, P + step + 1)
        out = model(
            input_ids=tokens[:, None],
            attention_mask=mask,
            position_ids=positions[:, None],
            past_key_values=cache,
            use_cache=True,
        )
        cache = out.past_key_values
        positions = positions + 1
        logits = out.logits[:, -1, :].float()
    return outputs


def sample_completions(
    model: Any,
    tokenizer: Any,
    prompts: list[list[dict]],
    n: int,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    seed: int = 0,
    max_new_tokens: int = 64,
    response_prefix: str | None = None,
    batch_size: int | None = None,
    progress: bool = False,
) -> list[list[str]]:
    """For each chat prompt, `n` sampled completion texts (transformers backend; works on PEFT-wrapped models).

    Args:
        model, tokenizer: a causal LM (plain or `PeftModel`) and its tokenizer with a chat template.
        prompts: chat prompts (lists of ``{"role", "content"}``); one ending with an assistant message is
            continued from that message (its content is a prefix, like `response_prefix`).
        n: samples per prompt.
        temperature, top_p, min_p: see `filter_logits`; temperature 0 is greedy (one decode, copied n times).
        seed: same seed, prompts, n and batch_size give the same samples.
        max_new_tokens: completion cap; a completion cut there simply has no EOS.
        response_prefix: pre-filled start of the assistant turn, *included* at the start of every returned
            text, so `extract_answer` sees ``<answer>...`` whole.
        batch_size: rows decoded together (default 64 on CPU, 256 on GPU).
        progress: show a tqdm bar over samples.

    Returns:
        ``out[i][j]``: the j-th completion text of prompt i (special tokens removed).
    """
    params = SamplingParams(temperature, top_p, min_p, seed, max_new_tokens, response_prefix, batch_size)
    _check_request(prompts, n)
    _warn_greedy(n, temperature)
    rendered = [render_prompt(tokenizer, p, response_prefix) for p in prompts]
    device = _model_device(model)
    eos_ids = _eos_ids(model, tokenizer)
    draws = 1 if temperature == 0 else n  # greedy samples are identical: decode once, copy
    size = params.batch_size or _default_batch_size(device)
    results: list[list[str]] = [[] for _ in prompts]
    bar = _progress_bar(len(prompts) * n, progress)
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        with torch.inference_mode():
            chunk_no = 0
            for members, chunks in plan_chunks(len(prompts), draws, size):
                cache, mask, logits, lengths = _encode_group(
                    model, tokenizer, [rendered[i][0] for i in members], device
                )
                for chunk in chunks:
                    generator = None
                    if temperature > 0:
                        generator = torch.Generator(device=device).manual_seed(_chunk_seed(seed, chunk_no))
                    chunk_no += 1
                    token_lists = _decode_chunk(
                        model, cache, mask, logits, lengths, chunk.rows, params, eos_ids, generator
                    )
                    for local, tokens in zip(chunk.rows, token_lists, strict=True):
                        prompt_index = members[local]
                        text = rendered[prompt_index][1] + tokenizer.decode(tokens, skip_special_tokens=True)
                        results[prompt_index].extend([text] * (n if temperature == 0 else 1))
                        bar.update(n if temperature == 0 else 1)
    finally:
        bar.close()
        if was_training:
            model.train()
    return results


def _progress_bar(total: int, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, unit="sample", desc="sampling")


@dataclass
class TransformersBackend:
    """In-process sampling with `sample_completions` on a loaded model (CPU or GPU, PEFT or not)."""

    model: Any
    tokenizer: Any
    name: str = "transformers"

    def generate(
        self, prompts: list[ChatPrompt], n: int, params: SamplingParams, progress: bool = False
    ) -> list[list[str]]:
        return sample_completions(self.model, self.tokenizer, prompts, n, progress=progress, **asdict(params))


# --------------------------------------------------------------------------------------------------------------------
# vLLM backend (GPU only; imported lazily)
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
    """The process's vLLM engine for `model`, started on first use with LoRA enabled."""
    if not torch.cuda.is_available():
        raise SamplingError("the vllm backend needs a CUDA GPU; use --backend transformers on CPU")
    try:
        from vllm import LLM
    except ImportError as err:
        raise SamplingError("the vllm backend needs vllm: pip install 'gapo[gpu]'") from err
    from gapo.models import TINY_RANDOM, resolve_model_path

    if model == TINY_RANDOM:
        raise SamplingError("tiny-random exists only in memory; vllm needs a model directory or hub id")
    path = resolve_model_path(model)
    if path not in _VLLM_ENGINES:
        llm = LLM(model=path, enable_lora=True, max_lora_rank=max_lora_rank, **llm_kwargs)
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
            seed=params.seed,
            max_tokens=params.max_new_tokens,
        )
        lora = self.engine.lora_request(self.adapter)
        outputs = self.llm.generate([text for text, _ in rendered], sampling, lora_request=lora, use_tqdm=progress)
        return [
            [prefix + choice.text for choice in out.outputs] for (_, prefix), out in zip(rendered, outputs, strict=True)
        ]


# --------------------------------------------------------------------------------------------------------------------
# OpenAI-compatible HTTP backend (API models, local vLLM / llama.cpp servers)
# --------------------------------------------------------------------------------------------------------------------


def chat_completions_url(endpoint: str) -> str:
    """Accept a server root, a ``/v1`` base or the full ``/v1/chat/completions`` URL."""
    url = endpoint.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return url + "/chat/completions"
    return url + "/v1/chat/completions"


@dataclass
class OpenAIBackend:
    """POSTs to an OpenAI-compatible ``/v1/chat/completions``; `n` samples per request, chunked by batch_size.

    Transient failures (connection refused, timeout, HTTP 429 and 5xx) are retried `max_retries` times with
    exponential backoff; then a one-line `SamplingError`. Other HTTP errors fail at once with the server's message.
    A server that returns fewer choices than asked (llama.cpp ignores ``n``) is asked again for the rest.
    `response_prefix` is sent as a final assistant message with vLLM's ``continue_final_message`` flag; hosted
    APIs that reject pre-filling should be sampled without a prefix. ``min_p`` is sent only when set (non-standard).
    """

    endpoint: str
    model: str
    api_key: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_n_per_request: int = 32
    name: str = "openai"

    def __post_init__(self) -> None:
        if self.api_key is None:
            self.api_key = os.environ.get("GAPO_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self.url = chat_completions_url(self.endpoint)

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        reason = "no attempt made"
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(self.backoff_s * 2 ** (attempt - 1), 30.0))
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read().decode("utf-8"))
            except urllib.error.HTTPError as err:
                detail = _one_line(err.read().decode("utf-8", "replace"))
                reason = f"HTTP {err.code}: {detail}"
                if err.code != 429 and err.code < 500:
                    raise SamplingError(f"endpoint {self.url} rejected the request ({reason})") from err
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as err:
                reason = _one_line(str(getattr(err, "reason", err)))
            except json.JSONDecodeError as err:
                reason = f"invalid JSON in response ({err.msg})"
        raise SamplingError(f"endpoint {self.url} unreachable after {self.max_retries + 1} attempts: {reason}")

    def _request(self, prompt: ChatPrompt, prefix: str, n: int, params: SamplingParams, seed: int) -> list[str]:
        messages = list(prompt) + ([{"role": "assistant", "content": prefix}] if prefix else [])
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "n": n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "seed": seed,
            "max_tokens": params.max_new_tokens,
        }
        if params.min_p > 0:
            body["min_p"] = params.min_p
        if prefix:
            body.update(continue_final_message=True, add_generation_prompt=False)
        reply = self._post(body)
        try:
            return [prefix + str(choice["message"].get("content") or "") for choice in reply["choices"]]
        except (KeyError, TypeError, AttributeError) as err:
            raise SamplingError(
                f"endpoint {self.url} returned no choices: {_one_line(json.dumps(reply))[:200]}"
            ) from err

    def generate(
        self, prompts: list[ChatPrompt], n: int, params: SamplingParams, progress: bool = False
    ) -> list[list[str]]:
        _check_request(prompts, n)
        _warn_greedy(n, params.temperature)
        per_request = min(params.batch_size or self.max_n_per_request, self.max_n_per_request)
        bar = _progress_bar(len(prompts) * n, progress)
        results: list[list[str]] = []
        request_no = 0
        try:
            for prompt in prompts:
                messages, prefix = split_prefill(prompt, params.response_prefix)
                texts: list[str] = []
                while len(texts) < n:
                    got = self._request(
                        messages, prefix, min(per_request, n - len(texts)), params, params.seed + request_no
                    )
                    request_no += 1
                    if not got:
                        raise SamplingError(f"endpoint {self.url} returned zero choices")
                    got = got[: n - len(texts)]
                    texts.extend(got)
                    bar.update(len(got))
                results.append(texts)
        finally:
            bar.close()
        return results


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


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


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="gapo sample",
        description="Draw N samples of one prompt (sent as a user chat message) and write them as JSON lines.",
    )
    parser.add_argument("--model", required=True, help="hub id, local dir, 'embedded', 'tiny-random' or API model name")
    parser.add_argument("--adapter", default=None, help="LoRA adapter directory trained on --model")
    parser.add_argument("--prompt", required=True, help="the user message")
    parser.add_argument("-n", type=int, required=True, help="number of samples")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--min-p", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--response-prefix", default=None, help="pre-filled start of the answer, e.g. '<answer>'")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=None, help="rows decoded together (memory cap)")
    parser.add_argument("--backend", choices=BACKENDS, default="transformers")
    parser.add_argument("--endpoint", default=None, help="OpenAI-compatible base URL for --backend openai")
    parser.add_argument("--out", required=True, help="output .jsonl file (written atomically)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def cli(argv: list[str] | None = None) -> int:
    """``gapo sample``: returns 0 on success, 2 with a one-line ``error:`` message on bad input or failure."""
    args = build_parser().parse_args(argv)
    from gapo.models import ModelLoadError

    try:
        if args.n <= 0:
            raise ValueError(f"-n must be a positive integer, got {args.n}")
        if not args.prompt.strip():
            raise ValueError("--prompt is empty")
        if Path(args.out).is_dir():
            raise ValueError(
                f"--out {args.out} is a directory; pass a file path such as {Path(args.out) / 'samples.jsonl'}"
            )
        sampler = make_sampler(
            args.model,
            adapter=args.adapter,
            backend=args.backend,
            endpoint=args.endpoint,
            progress=not args.no_progress,
            temperature=args.temperature,
            top_p=args.top_p,
            min_p=args.min_p,
            seed=args.seed,
            max_new_tokens=args.max_new_tokens,
            response_prefix=args.response_prefix,
            batch_size=args.batch_size,
        )
        completions = sampler([[{"role": "user", "content": args.prompt}]], args.n)[0]
        meta = {
            "model": args.model,
            "adapter": args.adapter,
            "backend": args.backend,
            "seed": args.seed,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "min_p": args.min_p,
            "response_prefix": args.response_prefix,
        }
        path = write_jsonl_atomic(args.out, sample_records(args.prompt, completions, **meta))
    except (ValueError, ModelLoadError, SamplingError, OSError) as err:
        print(f"error: {_one_line(str(err))}", file=sys.stderr)
        return 2
    print(f"wrote {len(completions)} samples to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
