"""Shared-prompt forward: encode each distinct prompt once and run its G completions against that encoding.

TRL's log-prob pass runs `prompt + completion` for each of a group's G rows; here the prompt's key/value cache is
repeated to them. Exact by causal attention (Prefix Grouper, arXiv 2506.05433): a prompt position never attends to a
completion, so its hidden states and keys/values are the same in every row of its group, and the gradient reaching them
is the sum over the group's rows, which the repeat's backward (`index_select`) computes.

One micro-batch as TRL hands it over (P = padded prompt width, C = `logits_to_keep`; `.` is padding)::

    input_ids (B, P+C): prompts LEFT-padded,   pass 1, the U distinct prompts (U, P), once, with grad:
    completions RIGHT-padded                      [. . a b c] [d e f g h] -> KV cache (U, P) + hidden at column P-1
    row 0  . . a b c | x x x .                 pass 2, the completions (B, C), cache repeated to the rows:
    row 1  . . a b c | y y . .                    row 0 attends to prompt "abc"'s keys, row 2 to "defgh"'s, ...
    row 2  d e f g h | z z z z                 log p(completion token j) comes from pass 2's hidden j-1, and
    row 3  . . a b c | w . . .                 token 0's from the prompt's last hidden state (column P-1) in pass 1

Rows are matched by their prompt tokens under the attention mask, so a group need not be contiguous or whole in a
micro-batch. Position ids are the plain path's (`arange(P + C)` over the padded layout) and the log-probs/entropies come
from TRL's own functions at the same temperature, so the two paths agree to float rounding (tests/test_prefix.py).

Entry points: `SharedPromptMixin` puts `shared_prompt_logps` and `trainer_rollouts` in place of GRPOTrainer's
`_get_per_token_logps_and_entropies` and `_generate_single_turn`, falling back to TRL's on `Unsupported`;
`encode_prompts` + `decode_rows` are the decoding loop, also the evaluation sampler's
(`gapo.repro.sampling.transformers_backend`).

Mixed precision: like TRL's log-prob forward, call `shared_prompt_logps` inside `accelerator.autocast()`. LoRA dropout:
one mask per prompt, not per row's copy of it: each row's mask has the same distribution, so the expected gradient is
the same, but the results are identical only with dropout off (as in the tests)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gapo.backends import unsloth_compiled

logger = logging.getLogger(__name__)

#: Attention implementations whose handling of a 2-D padding mask together with a KV cache is plain masking.
SUPPORTED_ATTENTION = ("sdpa", "eager")

#: Completion tokens per chunk through the LM head: bounds the live logits to LOGPROB_ROWS x vocabulary floats.
LOGPROB_ROWS = 1024

#: The least share of a micro-batch's padded completion tokens a split into two length buckets must leave out.
BUCKET_SAVING = 0.15


class Unsupported(RuntimeError):
    """This model or configuration is not handled by the shared-prompt path; the message says why."""


def _unwrap(model: nn.Module) -> nn.Module:
    """The causal-LM `PreTrainedModel` under a PEFT wrapper (LoRA layers stay injected in its modules)."""
    wrapper = type(model).__name__
    try:
        from torch.distributed.fsdp import FSDPModule  # FSDP2 wraps by subclassing, so the class name says nothing
    except ImportError:  # pragma: no cover - torch built without distributed
        FSDPModule = ()  # noqa: N806
    if (
        wrapper in ("DistributedDataParallel", "FullyShardedDataParallel", "DeepSpeedEngine")
        or hasattr(model, "_fsdp_wrapped_module")
        or isinstance(model, FSDPModule)
    ):
        raise Unsupported(f"distributed wrapper {wrapper}")
    if hasattr(model, "get_base_model") and hasattr(model, "peft_config"):
        for name, cfg in model.peft_config.items():
            if getattr(cfg, "is_prompt_learning", False):
                raise Unsupported(f"PEFT prompt-learning adapter {name!r} ({cfg.peft_type})")
        model = model.get_base_model()
    return model


def _backbone_and_head(model: nn.Module, for_training: bool) -> tuple[nn.Module, nn.Module]:
    """Check what the shared-prompt path needs and return `(backbone, lm_head)`; raise `Unsupported` otherwise."""
    lm = _unwrap(model)
    config = getattr(lm, "config", None)
    if config is None or not hasattr(lm, "get_output_embeddings"):
        raise Unsupported(f"{type(lm).__name__} is not a transformers causal LM")
    if getattr(config, "is_encoder_decoder", False):
        raise Unsupported("encoder-decoder model")
    text_config = config.get_text_config()
    if text_config is not config:
        raise Unsupported(f"composite (multimodal) config {type(config).__name__}")
    checkpointing = getattr(lm, "is_activation_checkpointing", None)  # the name in transformers >= 5.23
    if checkpointing is None:
        checkpointing = getattr(lm, "is_gradient_checkpointing", False)
    if for_training and checkpointing:
        raise Unsupported("gradient checkpointing is on (it disables the KV cache)")
    attn = getattr(config, "_attn_implementation", None)
    if attn not in SUPPORTED_ATTENTION:
        raise Unsupported(f"attention implementation {attn!r} (supported: {', '.join(SUPPORTED_ATTENTION)})")
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    if any(t != "full_attention" for t in layer_types) or getattr(config, "use_sliding_window", False):
        raise Unsupported("sliding-window or hybrid attention layers")
    for attr in ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling"):
        if getattr(text_config, attr, None) is not None:
            raise Unsupported(f"logit transform {attr}={getattr(text_config, attr)}")
    backbone = getattr(lm, "base_model", None)
    if backbone is None or backbone is lm:
        raise Unsupported(f"{type(lm).__name__} exposes no separate backbone")
    # Unsloth swaps in its own model/attention forwards with their own cache handling; not verified here.
    patched = [type(backbone).forward, type(lm).forward]
    layers = getattr(backbone, "layers", None)
    if layers is not None and len(layers) and hasattr(layers[0], "self_attn"):
        patched += [type(layers[0]).forward, type(layers[0].self_attn).forward]
    if any(str(getattr(f, "__module__", "")).startswith("unsloth") for f in patched):
        raise Unsupported("Unsloth-patched model forwards (not verified with the shared path)")
    params = inspect.signature(backbone.forward).parameters
    if not {"past_key_values", "use_cache", "position_ids"} <= set(params):
        raise Unsupported(f"{type(backbone).__name__}.forward takes no past_key_values/position_ids")
    head = lm.get_output_embeddings()
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise Unsupported("no LM head weight")
    if hasattr(head, "base_layer") or hasattr(head, "lora_A"):
        raise Unsupported("the LM head carries a PEFT adapter")
    return backbone, head


def group_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Find the distinct prompts of a batch: (B, P) token ids and attention mask -> `(first, inverse)`.

    Two rows share a prompt when their token ids agree wherever the mask is 1 and their masks agree (prompts are
    left-padded to one width, so equal real tokens means equal padding). `first` (U,) is the first row holding each
    distinct prompt, in order of first appearance; `inverse` (B,) maps every row to its prompt's index in `first`.
    Example: prompts `[A, B, A, C, B]` give `first = [0, 1, 3]`, `inverse = [0, 1, 0, 2, 1]`."""
    key = prompt_ids.masked_fill(prompt_mask == 0, -1)  # (B, P); -1 is no token id
    _, sorted_inverse = torch.unique(key, dim=0, return_inverse=True)  # unique ids in sorted order
    b = key.size(0)
    rows = torch.arange(b, device=key.device)
    n_unique = int(sorted_inverse.max()) + 1 if b else 0
    first_sorted = torch.full((n_unique,), b, dtype=torch.long, device=key.device)
    first_sorted.scatter_reduce_(0, sorted_inverse, rows, reduce="amin")  # (U,) first row of each sorted id
    order = torch.argsort(first_sorted)  # renumber by first appearance
    rank = torch.empty_like(order)
    rank[order] = torch.arange(n_unique, device=key.device)
    return first_sorted[order], rank[sorted_inverse]


def mask_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids counted from each left-padded row's first real token as `generate` numbers them, 0 on the padding:
    (B, P) mask -> (B, P), e.g. `[0, 0, 1, 1, 1]` -> `[0, 0, 0, 1, 2]`."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def prefill(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    **forward_kwargs: Any,
) -> tuple[Any, Any]:
    """Run the U distinct prompts once and keep their keys/values: the shared half of every shared-prompt path.

    `module` is a causal LM's backbone (hidden states, for `shared_prompt_logps`) or the whole causal LM (logits, for
    `encode_prompts`: any model `generate` runs, including ones `Unsupported` turns away from the log-prob pass, such as
    soft-capped logits); `input_ids` (U, P) the distinct prompts, left-padded; `attention_mask` (U, P) None when no
    prompt is padded (lets SDPA take its causal kernel); `position_ids` (U, P) or (1, P), None for the model's default
    `arange(P)`. Grad mode is the caller's, so one forward serves both. Returns `(cache, output)`: a `DynamicCache` of
    the prompts' (U, P) keys/values for `expand_cache`, and the module's output."""
    from transformers import DynamicCache

    cache = DynamicCache(config=getattr(module, "config", None))
    output = module(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=cache,
        use_cache=True,
        **forward_kwargs,
    )
    return cache, output


def expand_cache(cache: Any, rows: torch.Tensor, copy: bool = False) -> Any:
    """The cache of U prompts -> the cache of len(rows) rows, row i continuing prompt `rows[i]`: every layer's
    keys/values go (U, heads, P, d) -> (len(rows), heads, P, d) by `index_select`, whose backward sums the gradients
    of a prompt's rows. In place (and returned) unless `copy`, which leaves `cache` intact."""
    if copy:
        cache = deepcopy(cache)
    cache.reorder_cache(rows)
    return cache


def _lm_head_logps(
    hidden: torch.Tensor,  # (B, C, H)
    targets: torch.Tensor,  # (B, C)
    mask: torch.Tensor,  # (B, C) bool
    head: nn.Module,
    temperature: float,
    compute_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of `targets` under `softmax(head(hidden) / temperature)`, 0 where `mask` is False.

    Only the real positions go through the head, LOGPROB_ROWS at a time (TRL's functions). Several chunks are each
    checkpointed (recomputed in backward), so one chunk's logits live at a time; a single one is not: recomputed while
    the whole graph lives, it would keep the peak and cost a second head pass (0.5 s of the embedded 9 s CPU step)."""
    from torch.utils.checkpoint import checkpoint
    from trl.trainer.utils import entropy_from_logits, selective_log_softmax

    hidden = hidden.to(head.weight.device)[mask]  # (N, H), N real completion tokens
    picked = targets[mask]  # (N,)

    def chunk_logps(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = head(h).float() / temperature  # (n, V)
        entropy = entropy_from_logits(logits) if compute_entropy else logits.new_zeros(t.shape)
        return selective_log_softmax(logits, t), entropy

    chunked = torch.is_grad_enabled() and hidden.size(0) > LOGPROB_ROWS
    parts = [
        checkpoint(chunk_logps, hidden[i : i + LOGPROB_ROWS], picked[i : i + LOGPROB_ROWS], use_reentrant=False)
        if chunked
        else chunk_logps(hidden[i : i + LOGPROB_ROWS], picked[i : i + LOGPROB_ROWS])
        for i in range(0, hidden.size(0), LOGPROB_ROWS)
    ]
    logps = torch.cat([lp for lp, _ in parts]) if parts else hidden.new_zeros(0, dtype=torch.float32)
    # masked_scatter keeps an all-padding batch connected to the graph (a differentiable zero), as TRL does
    logps = logps.new_zeros(mask.shape).masked_scatter(mask, logps)
    if not compute_entropy:
        return logps, None
    entropy = torch.cat([e for _, e in parts]) if parts else logps.new_zeros(0)
    return logps, entropy.new_zeros(mask.shape).masked_scatter(mask, entropy)


def _shared_chunk(
    backbone: nn.Module,
    head: nn.Module,
    input_ids: torch.Tensor,  # (B, P+C)
    attention_mask: torch.Tensor,  # (B, P+C)
    logits_to_keep: int,
    compute_entropy: bool,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    c = logits_to_keep
    p = input_ids.size(1) - c
    prompt_ids, prompt_mask = input_ids[:, :p], attention_mask[:, :p]  # (B, P), left-padded
    completion_ids, completion_mask = input_ids[:, p:], attention_mask[:, p:]  # (B, C), right-padded
    first, inverse = group_prompts(prompt_ids, prompt_mask)  # (U,), (B,)

    # Pass 1: each distinct prompt once, positions 0..P-1 as in the plain path.
    cache, prompt_out = prefill(
        backbone,
        prompt_ids[first],  # (U, P)
        prompt_mask[first],
        position_ids=torch.arange(p, device=input_ids.device).unsqueeze(0),
    )
    last_prompt_hidden = prompt_out.last_hidden_state[:, -1]  # (U, H): predicts completion token 0

    # Pass 2: the completions against their prompt's keys/values, positions P..P+C-1, per bucket (`length_buckets`).
    ends = (completion_mask * torch.arange(1, c + 1, device=input_ids.device)).amax(1)  # (B,) past the last token
    buckets = length_buckets(ends)
    parts = []
    for rows, width in buckets:
        # (U, .., P, ..) -> (rows, .., P, ..) by index_select, whose backward sums each group's gradients
        rows_cache = expand_cache(cache, inverse[rows]) if len(buckets) == 1 else _select_cache(cache, inverse[rows])
        out = backbone(
            input_ids=completion_ids[rows, :width],  # (n, w)
            attention_mask=attention_mask[rows, : p + width],  # prompt padding and completion padding both masked
            position_ids=torch.arange(p, p + width, device=input_ids.device).unsqueeze(0),
            past_key_values=rows_cache,
            use_cache=True,
        )
        parts.append(nn.functional.pad(out.last_hidden_state[:, :-1], (0, 0, 0, c - width)))  # (n, C-1, H)
    order = torch.cat([rows for rows, _ in buckets])
    completion_hidden = torch.cat(parts)[torch.argsort(order)] if len(parts) > 1 else parts[0]
    hidden = torch.cat(
        [last_prompt_hidden[inverse].unsqueeze(1), completion_hidden], dim=1
    )  # (B, C, H): hidden j predicts completion token j
    return _lm_head_logps(hidden, completion_ids, completion_mask.bool(), head, temperature, compute_entropy)


def length_buckets(lengths: torch.Tensor) -> list[tuple[torch.Tensor, int]]:
    """Rows of one micro-batch as one or two `(rows, width)` buckets for the completions' pass: the shortest rows apart
    when that leaves out at least BUCKET_SAVING of the padded batch's token columns, else all rows at once.

    Why: completions are right-padded to the longest (embedded run: typically 11-12 tokens, 16 at the cap, mean about
    9), a padded token costs a real one's forward and backward, and a second forward has a fixed cost. Example: lengths
    [3, 9, 4, 10] -> rows [0, 2] at width 4, rows [1, 3] at width 10 (28 token columns, not 40)."""
    b = lengths.numel()
    rows = torch.arange(b, device=lengths.device)
    width = max(int(lengths.max()), 1) if b else 1
    if b < 2:
        return [(rows, width)]
    sorted_lengths, order = torch.sort(lengths, stable=True)
    widths = sorted_lengths.clamp(min=1).tolist()
    # k rows at width widths[k-1], the other b - k at the longest width
    cost, k = min((k * widths[k - 1] + (b - k) * width, k) for k in range(1, b))
    if cost > (1 - BUCKET_SAVING) * b * width:
        return [(rows, width)]
    return [(order[:k], widths[k - 1]), (order[k:], width)]


def _select_cache(cache: Any, rows: torch.Tensor) -> Any:
    """`expand_cache` into a new cache, leaving `cache` as it was: one per bucket of `_shared_chunk`, differentiable
    back to the prompt pass (unlike `deepcopy`, which graph tensors refuse)."""
    from transformers import DynamicCache

    return DynamicCache(
        ddp_cache_data=[
            (layer.keys.index_select(0, rows), layer.values.index_select(0, rows)) for layer in cache.layers
        ]
    )


def shared_prompt_logps(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    compute_entropy: bool = False,
    temperature: float = 1.0,
    batch_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (and entropies) of the completion tokens, encoding each distinct prompt once.

    TRL's `GRPOTrainer._get_per_token_logps_and_entropies` contract for a text-only model. `model` is the policy (a
    transformers causal LM, optionally PEFT-wrapped) or the reference model; `input_ids` and `attention_mask` (B, P+C)
    are `cat(prompt_ids, completion_ids)` and `cat(prompt_mask, completion_mask)` (layout above); `logits_to_keep` is C;
    `temperature` the trainer's sampling temperature; `batch_size` is rows per forward (TRL's memory chunking for the
    old/reference pass; None: all at once), and prompts are only shared within such a chunk.

    Returns `(logps, entropies)`, each (B, C), zero at completion padding, `entropies` None unless `compute_entropy`:
    `logps[i, j] = log softmax(logits / temperature)[completion_ids[i, j]]` at the position that predicts completion
    token j (the prompt's last position for j = 0). Raises `Unsupported`, saying which model or setting it refuses."""
    backbone, head = _backbone_and_head(model, for_training=torch.is_grad_enabled())
    if not 0 < logits_to_keep < input_ids.size(1):
        raise Unsupported(f"logits_to_keep={logits_to_keep} leaves no prompt part in width {input_ids.size(1)}")
    step = batch_size or input_ids.size(0)
    logps, entropies = [], []
    for start in range(0, input_ids.size(0), step):
        lp, ent = _shared_chunk(
            backbone,
            head,
            input_ids[start : start + step],
            attention_mask[start : start + step],
            logits_to_keep,
            compute_entropy,
            temperature,
        )
        logps.append(lp)
        entropies.append(ent)
    return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None)


# Decoding: one loop for the trainer's rollouts and the evaluation sampler (U distinct prompts, B rows)::
#     encode_prompts:  [. . a b c] [d e f g h]           -> cache (U, P), last-position logits (U, V), once each
#     decode_rows:     rows [0 0 1 1 0]: cache (B, P)    -> step 1: 5 rows draw a token; row 3 emits EOS
#                      cache (4, P+1) of rows [0 1 2 4]  -> step 2: 4 rows forward one token each, ...
# Rows of a prompt need not be contiguous. Finished rows leave the batch with their cache rows, so the last steps run
# only the few long completions instead of decoding padding for every row as `generate` does.


@dataclass(frozen=True)
class Decoding:
    """How the next token is chosen: the part of transformers' `GenerationConfig` this loop implements, in `generate`'s
    order: the repetition penalty on the raw logits (over the row's prompt, padding included, and its new tokens); then,
    when sampling, temperature, top-k, top-p and min-p, and one draw per row; else the argmax (`greedy`)."""

    max_new_tokens: int
    eos_token_ids: tuple[int, ...]
    do_sample: bool = True
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature == 0


def filter_logits(logits: torch.Tensor, top_p: float = 1.0, min_p: float = 0.0, top_k: int = 0) -> torch.Tensor:
    """Mask (to -inf) the tokens that top-k, then top-p, then min-p remove; the most likely token always survives.

    `logits` (B, V) are temperature-scaled. `top_k` keeps the `top_k` largest logits (ties at the k-th value kept; 0
    keeps all); `top_p` the smallest set of most likely tokens whose probability reaches `top_p`; `min_p` tokens with
    ``p >= min_p * max(p)`` (Nguyen et al. 2025): transformers' `TopKLogitsWarper`, `TopPLogitsWarper` and
    `MinPLogitsWarper` (tests/test_sampling.py). Example: probabilities (0.5, 0.3, 0.15, 0.05) with top_p=0.8 keep the
    first two; min_p=0.2 (threshold 0.1) the first three; top_k=1 the first."""
    out = logits
    if 0 < top_k < out.size(-1):
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]  # (B, 1)
        out = out.masked_fill(out < kth, float("-inf"))
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


def penalize_repetition(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """transformers' `RepetitionPenaltyLogitsProcessor`: every token id in the row's `seen` (B, L) gets its logit
    divided by `penalty` where positive and multiplied where negative (CTRL, Keskar et al. 2019): (B, V) -> (B, V)."""
    picked = logits.gather(1, seen)  # (B, L)
    picked = torch.where(picked < 0, picked * penalty, picked / penalty)
    return logits.scatter(1, seen, picked)


def sample_from_probs(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Inverse-CDF sampling, one uniform per row: (B, V) probabilities -> (B,) token ids. Why not `torch.multinomial`
    (what `generate` draws with): ~7x slower on CPU over a 152k vocabulary (0.19 s vs 0.03 s for 32 rows, much of a
    decoding step of the 0.5B model). Zero-probability tokens are never drawn: with ``searchsorted(right=True)`` token i
    needs ``cdf[i-1] <= u < cdf[i]``, empty when p_i = 0. `generator` None: the global one (seeded by the trainer)."""
    cdf = probs.cumsum(dim=-1)  # (B, V)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=cdf.dtype) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)


def process_logits(logits: torch.Tensor, decoding: Decoding, seen: torch.Tensor | None = None) -> torch.Tensor:
    """`generate`'s logits processors for `decoding` (order: `Decoding`): (B, V) raw logits -> (B, V) float32 scores,
    -inf where filtered out, whose softmax is the sampling distribution. `seen` (B, L) feeds the repetition penalty."""
    scores = logits.float()
    if decoding.repetition_penalty != 1.0 and seen is not None:
        scores = penalize_repetition(scores, seen, decoding.repetition_penalty)
    if decoding.greedy:
        return scores
    if decoding.temperature != 1.0:
        scores = scores / decoding.temperature
    return filter_logits(scores, top_p=decoding.top_p, min_p=decoding.min_p, top_k=decoding.top_k)


def next_tokens(
    logits: torch.Tensor, decoding: Decoding, generator: torch.Generator | None, seen: torch.Tensor | None = None
) -> torch.Tensor:
    """One token per row: (B, V) raw logits -> (B,) ids, drawn from `process_logits` (argmax when greedy)."""
    scores = process_logits(logits, decoding, seen)
    if decoding.greedy:
        return scores.argmax(dim=-1)
    return sample_from_probs(scores.softmax(dim=-1), generator)


@dataclass
class EncodedPrompts:
    """U distinct prompts after one prefill: what `decode_rows` continues from."""

    cache: Any  # DynamicCache of (U, P) keys/values
    ids: torch.Tensor  # (U, P) token ids, left-padded
    mask: torch.Tensor | None  # (U, P) 1 on real tokens; None when no prompt is padded (SDPA's causal kernel)
    logits: torch.Tensor  # (U, V) float32 logits at the last prompt position: the first new token's
    lengths: torch.Tensor  # (U,) real tokens per prompt: the first new token's position id


def encode_prompts(
    model: nn.Module, prompts: Sequence[Sequence[int]], pad_token_id: int, device: torch.device
) -> EncodedPrompts:
    """Left-pad the distinct `prompts` (token ids) into one batch and `prefill` it once with `generate`'s positions."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("a prompt has zero tokens")
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_token_id] * (width - len(p)) + list(p) for p in prompts], device=device)  # (U, P)
    lengths = torch.tensor([len(p) for p in prompts], device=device)  # (U,)
    mask = None
    if bool((lengths < width).any()):
        mask = (torch.arange(width, device=device)[None, :] >= (width - lengths)[:, None]).long()  # (U, P)
    positions = mask_positions(mask) if mask is not None else None
    # On CPU (torch 2.13) a frozen (PEFT) weight times the strided slice `hidden[:, -1:]` runs, in bfloat16, as a bmm
    # copying the weight per prompt (pytorch/pytorch#151934): 1.1 s for Qwen's 152k-row head, more than the prompts'
    # forward. An index tensor gives a contiguous slice: the full forward's last-position logits bit for bit (the bmm
    # may round a few logits one bf16 step apart, as on AMX-BF16 Xeons). float32 keeps the plain slice: its logits
    # differ in the last bit, and the evaluation's samples came from them.
    keep = 1 if getattr(model, "dtype", torch.float32) == torch.float32 else torch.tensor([width - 1], device=device)
    cache, out = prefill(model, ids, mask, positions, logits_to_keep=keep)
    return EncodedPrompts(cache, ids, mask, out.logits[:, -1, :].float(), lengths)


def decode_rows(
    model: nn.Module,
    prompts: EncodedPrompts,
    rows: Sequence[int] | torch.Tensor,
    decoding: Decoding,
    generator: torch.Generator | None = None,
    copy: bool = False,
) -> list[list[int]]:
    """Row i continues prompt `rows[i]` until it emits an EOS id or has `max_new_tokens` tokens, all rows in one batch
    (layout above). Returns each row's new token ids, an EOS id last when emitted: what TRL's `_generate_single_turn`
    keeps of `generate`'s output. `copy` keeps `prompts.cache` for another call (the sampler decodes in chunks, as N
    samples of a prompt can exceed one batch), else it is consumed. Grad and train/eval mode are the caller's (TRL
    samples in the policy's train mode, LoRA dropout included)."""
    device = prompts.logits.device
    index = torch.as_tensor(rows, device=device, dtype=torch.long)  # (B,)
    cache = expand_cache(prompts.cache, index, copy=copy)  # (B, heads, P, d) per layer
    mask = prompts.mask[index] if prompts.mask is not None else None  # (B, P)
    seen = prompts.ids[index] if decoding.repetition_penalty != 1.0 else None  # (B, P): the penalty's history
    positions = prompts.lengths[index].clone()  # (B,) next position id per row
    logits = prompts.logits[index]  # (B, V)
    eos = torch.tensor(decoding.eos_token_ids, device=device)
    active = torch.arange(index.numel(), device=device)  # which rows are still decoding
    outputs: list[list[int]] = [[] for _ in range(index.numel())]
    for step in range(decoding.max_new_tokens):
        tokens = next_tokens(logits, decoding, generator, seen)  # (B_active,)
        for row, token in zip(active.tolist(), tokens.tolist(), strict=True):
            outputs[row].append(token)
        keep = ~torch.isin(tokens, eos)
        if step == decoding.max_new_tokens - 1 or not bool(keep.any()):
            break
        if not bool(keep.all()):
            kept = keep.nonzero().squeeze(-1)
            active, tokens, positions = active[kept], tokens[kept], positions[kept]
            cache.batch_select_indices(kept)
            mask = mask[kept] if mask is not None else None
            seen = seen[kept] if seen is not None else None
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=-1)  # (B_active, P + step + 1)
        if seen is not None:
            seen = torch.cat([seen, tokens[:, None]], dim=-1)
        out = model(
            input_ids=tokens[:, None],
            attention_mask=mask,
            position_ids=positions[:, None],
            past_key_values=cache,
            use_cache=True,
        )
        cache = out.past_key_values
        positions = positions + 1
        logits = out.logits[:, -1, :]
    return outputs


#: The fallback notes already logged in this process (`log_once`).
_warned: set[str] = set()


def log_once(message: str, level: int = logging.WARNING, log: logging.Logger = logger) -> None:
    """Log `message` the first time this process says it. Why: a fallback from the shared-prompt paths (in generation,
    in the log-prob pass, in the SFT's loss) holds for the whole run; said every step, it would bury the log."""
    if message not in _warned:
        _warned.add(message)
        log.log(level, message)


def _is_set(value: Any, off: Any) -> bool:
    return value is not None and value is not False and value != off


#: `GenerationConfig` settings `generate` honours and `Decoding` does not, as (name, "off" value); any on sends the
#: trainer to TRL's path (transformers 5.17's `_get_logits_processor`, `_get_stopping_criteria`, `get_generation_mode`).
UNSUPPORTED_GENERATION = (
    ("num_beams", 1),
    ("num_return_sequences", 1),
    ("penalty_alpha", 0),
    ("dola_layers", None),
    ("constraints", None),
    ("force_words_ids", None),
    ("prompt_lookup_num_tokens", None),
    ("assistant_early_exit", None),
    ("use_mtp", False),
    ("guidance_scale", 1),
    ("sequence_bias", None),
    ("no_repeat_ngram_size", 0),
    ("bad_words_ids", None),
    ("min_length", 0),
    ("min_new_tokens", 0),
    ("forced_bos_token_id", None),
    ("forced_eos_token_id", None),
    ("remove_invalid_values", False),
    ("exponential_decay_length_penalty", None),
    ("suppress_tokens", None),
    ("begin_suppress_tokens", None),
    ("top_h", None),
    ("typical_p", 1.0),
    ("epsilon_cutoff", 0.0),
    ("eta_cutoff", 0.0),
    ("watermarking_config", None),
    ("max_time", None),
    ("stop_strings", None),
)


def decoding_from_generation_config(model: nn.Module, generation_config: Any) -> Decoding:
    """The `Decoding` that `model.generate(generation_config=generation_config)` samples with, resolving the config as
    `generate` does (unset values from the model's generation config, then transformers' defaults). Raises
    `Unsupported`, naming the setting, for anything `Decoding` lacks (`UNSUPPORTED_GENERATION`, a non-dynamic cache, no
    `max_new_tokens`)."""
    resolve = getattr(model, "_prepare_generation_config", None)
    if resolve is None:
        raise Unsupported(f"{type(model).__name__} has no _prepare_generation_config to resolve the generation config")
    config, _ = resolve(generation_config)
    on = [
        f"{name}={getattr(config, name)!r}"
        for name, off in UNSUPPORTED_GENERATION
        if _is_set(getattr(config, name, None), off)
    ]
    if config.cache_implementation not in (None, "dynamic") or config.use_cache is False:
        on.append(f"cache_implementation={config.cache_implementation!r}, use_cache={config.use_cache!r}")
    if config.max_new_tokens is None:
        on.append("max_new_tokens=None (a max_length instead)")
    if on:
        raise Unsupported(f"generation settings {', '.join(on)}")
    eos = config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    return Decoding(
        max_new_tokens=int(config.max_new_tokens),
        eos_token_ids=tuple(int(e) for e in eos),
        do_sample=bool(config.do_sample),
        temperature=float(config.temperature if config.temperature is not None else 1.0),
        top_k=int(config.top_k or 0),
        top_p=float(config.top_p if config.top_p is not None else 1.0),
        min_p=float(config.min_p or 0.0),
        repetition_penalty=float(config.repetition_penalty if config.repetition_penalty is not None else 1.0),
    )


def _trainer_off_reason(trainer: Any, images: Any, multimodal_fields: Any) -> str | None:
    if not getattr(trainer.args, "shared_prompt_forward", False):
        return "shared_prompt_forward is off"
    if getattr(trainer, "use_vllm", False):
        return "vLLM generates"
    if getattr(trainer, "use_transformers_continuous_batching", False):
        return "continuous batching generates"
    if images is not None or multimodal_fields:
        return "the prompts carry images or other multimodal inputs"
    return None


def trainer_rollouts(
    trainer: Any, prompt_ids: list[list[int]], images: Any = None, multimodal_fields: Any = None
) -> tuple[list[list[int]], None] | None:
    """What a GRPOTrainer's `_generate_single_turn(prompt_ids, ...)` returns, from `encode_prompts` + `decode_rows`.

    Decodes the distinct prompts (TRL's sampler repeats each G times) with TRL's generation config, pad id, model and
    unwrap context, and torch's global generator (the trainer's seed). Returns `(completion_ids, None)` as TRL does
    (tokens up to and including the first EOS), or None, logging why once, where TRL's path must run:
    `shared_prompt_forward` off, vLLM, continuous batching, images, or an `Unsupported` model or generation setting.
    Greedy decoding gives `generate`'s tokens; sampling draws from the same distribution with other random numbers
    (`sample_from_probs`), so a seed gives other rollouts than stock TRL's (tests/test_prefix.py checks both)."""
    reason = _trainer_off_reason(trainer, images, multimodal_fields)
    if reason is None:
        from trl.extras.profiling import profiling_context
        from trl.models import unwrap_model_for_generation

        with (
            profiling_context(trainer, "gapo.decode_rows"),
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                generation_kwargs=trainer.generation_kwargs,
            ) as model,
            torch.no_grad(),
            trainer._dist.summon_full_params(trainer.model_wrapped, recurse=False),
        ):
            try:
                _backbone_and_head(model, for_training=False)
                decoding = decoding_from_generation_config(model, trainer.generation_config)
            except Unsupported as why:
                reason = str(why)
            else:
                first, inverse = _distinct(prompt_ids)
                device = trainer.accelerator.device
                encoded = encode_prompts(model, [prompt_ids[i] for i in first], trainer._tokenizer.pad_token_id, device)
                return decode_rows(model, encoded, inverse, decoding), None
    log_once(f"shared-prompt generation off: {reason}; using TRL's generate")
    return None


def _distinct(prompts: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """`group_prompts` for token lists: the first row of each distinct prompt, and each row's index among them."""
    seen: dict[tuple[int, ...], int] = {}
    first, inverse = [], []
    for row, prompt in enumerate(prompts):
        key = tuple(prompt)
        if key not in seen:
            seen[key] = len(first)
            first.append(row)
        inverse.append(seen[key])
    return first, inverse


class SharedPromptMixin:
    """The opt-in CPU speed-up, before the trainer in its bases: rollouts and log-prob pass through this module where
    `shared_prompt_forward` is on and they apply, else TRL's (and under Unsloth, Unsloth's) own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shared_prompt_note: str | None = None
        if unsloth_compiled(type(self)):
            self.args.shared_prompt_forward = False  # generation too (`trainer_rollouts` reads it)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):  # noqa: ANN001, ANN202, E501
        out = trainer_rollouts(self, prompt_ids, images, multimodal_fields)
        if out is None:
            out = super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        return out

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        """`*args` pass on as they came: Unsloth's trainer takes a 7th positional argument, `compute_efficient`, that
        a signature copied from TRL's bound to `compute_aux_loss` (the loss then failed to broadcast, docs/gpu.md)."""
        if self.args.shared_prompt_forward:
            shared = self._shared_prompt_logps(model, *args, **kwargs)
            if shared is not None:
                return shared
        return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)

    def _shared_prompt_logps(  # noqa: ANN202
        self,
        model,  # noqa: ANN001
        input_ids,  # noqa: ANN001
        attention_mask,  # noqa: ANN001
        logits_to_keep,  # noqa: ANN001
        batch_size=None,  # noqa: ANN001
        compute_entropy=False,  # noqa: ANN001
        compute_aux_loss=False,  # noqa: ANN001
        **kwargs,  # noqa: ANN003
    ):
        """`shared_prompt_logps` in TRL's signature, or None where it does not apply (TRL's path then runs)."""
        if compute_aux_loss or any(v is not None for v in kwargs.values()):  # multimodal inputs
            return None
        try:
            logps, entropies = shared_prompt_logps(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                compute_entropy=compute_entropy,
                temperature=self.temperature,
                batch_size=batch_size,  # TRL's memory chunking of the old/reference passes, kept
            )
            return logps, entropies, None
        except Unsupported as why:
            if self._shared_prompt_note != str(why):
                self._shared_prompt_note = str(why)
                logger.info("shared-prompt forward off: %s; using TRL's path", why)
        return None
