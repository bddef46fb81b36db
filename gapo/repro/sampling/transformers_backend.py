"""N samples per chat prompt, fast: one shared prompt encoding, then all N continuations decoded together.

Why this module exists: every evaluation in the paper draws many samples of the *same* prompt (100 per list,
500 per open question, 1500 haikus). Calling ``generate`` N times re-encodes the prompt N times and decodes with
batch size 1; on two CPU cores that is ~10x slower per token than a batch of 100. So the transformers backend

1. encodes each distinct prompt once (prompts of a group are left-padded into one forward pass),
2. copies the prompt's KV cache to the rows that continue it, and
3. decodes all rows together over the expanded cache (temperature, top-p, min-p, EOS), dropping rows as soon
   as they emit EOS so the batch shrinks instead of decoding padding.

The three steps are `gapo.prefix.encode_prompts` and `gapo.prefix.decode_rows`, the same loop GAPOTrainer samples
its rollouts with (`gapo.prefix.trainer_rollouts`); this module adds chat rendering, chunking and seeding.

Batch layout for one prompt p with n = 6 samples and batch_size = 4 (two chunks, one prompt encoding)::

    prompt forward:  [p]                 -> cache (1, P), logits of the last prompt token (1, V)
    chunk 0:         cache rows [0 0 0 0] -> decode 4 samples together
    chunk 1:         cache rows [0 0]     -> decode 2 samples together

and for 3 prompts with n = 1 and batch_size = 4 (one group, left-padded, one forward)::

    prompt forward:  [pad pad p0] [pad p1 p1] [p2 p2 p2]  -> cache (3, P)
    chunk 0:         cache rows [0 1 2]

Reproducibility: each chunk draws from its own ``torch.Generator`` seeded from ``(seed, chunk index)``, so the same
prompts, n, seed and batch_size give the same samples. Changing batch_size changes the chunking and so the draws.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from gapo.prefix import Decoding, decode_rows, encode_prompts, filter_logits, next_tokens, sample_from_probs
from gapo.repro.chat import ChatPrompt, render_prompt
from gapo.repro.sampling.params import SamplingParams, _check_request, _warn_greedy

__all__ = [
    "TransformersBackend",
    "filter_logits",
    "next_tokens",
    "plan_chunks",
    "sample_completions",
    "sample_from_probs",
]


# --------------------------------------------------------------------------------------------------------------------
# Seeds and chunks
# --------------------------------------------------------------------------------------------------------------------


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
    prompt_ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text, _ in rendered]
    if any(len(ids) == 0 for ids in prompt_ids):
        raise ValueError("a prompt rendered to zero tokens")
    device = _model_device(model)
    eos_ids = _eos_ids(model, tokenizer)
    decoding = Decoding(max_new_tokens, tuple(eos_ids), temperature=temperature, top_p=top_p, min_p=min_p)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
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
                encoded = encode_prompts(model, [prompt_ids[i] for i in members], pad, device)  # once per group
                for chunk in chunks:
                    generator = None
                    if temperature > 0:
                        generator = torch.Generator(device=device).manual_seed(_chunk_seed(seed, chunk_no))
                    chunk_no += 1
                    token_lists = decode_rows(model, encoded, chunk.rows, decoding, generator, copy=True)
                    for local, tokens in zip(chunk.rows, token_lists, strict=True):
                        if tokens and tokens[-1] in eos_ids:
                            tokens = tokens[:-1]  # the EOS id ends the sample; it is not text
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
