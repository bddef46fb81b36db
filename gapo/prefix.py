"""Shared-prompt forward: encode each distinct prompt once and run its G completions against that encoding.

In GRPO/GAPO every prompt in a batch is repeated G times (once per completion), and TRL's log-prob pass runs the full
`prompt + completion` sequence for every row, so the prompt is encoded G times. Here each distinct prompt is encoded
once, its key/value cache is repeated to the rows that share it, and only the completion tokens are run as queries
against it. Causal attention makes this exact (Prefix Grouper, arXiv 2506.05433): a prompt position never attends to a
completion, so its hidden states and keys/values are the same in every row of its group, and the gradient that reaches
them is the sum over the group's rows, which is what the repeat's backward (`index_select`) computes.

Layout of one micro-batch as TRL hands it over (P = padded prompt width, C = `logits_to_keep`; `.` is padding)::

    input_ids (B, P+C)                         shared-prompt forward
    row 0  . . a b c | x x x .                 pass 1, the U distinct prompts (U, P), once, with grad:
    row 1  . . a b c | y y . .                    [. . a b c]  -> KV cache (U, P) + hidden at column P-1
    row 2  d e f g h | z z z z                    [d e f g h]
    row 3  . . a b c | w . . .                 pass 2, the completions (B, C), cache repeated to the rows:
           prompts LEFT-padded | completions      row 0 attends to prompt "abc"'s keys, row 2 to "defgh"'s, ...
           RIGHT-padded                        log p(completion token j) comes from hidden j-1 of pass 2, and
                                               token 0's from the prompt's last hidden state (column P-1) in pass 1

Rows that share a prompt need not be contiguous and a group may be split over micro-batches: rows are matched by the
prompt tokens under the attention mask. Position ids are those of the plain path (`arange(P + C)` over the padded
layout), and the log-probs/entropies come from TRL's own chunked LM-head kernel with the same temperature, so the two
paths agree to float rounding (tests/test_prefix.py).

Public API:

- `shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep, ...)`: the drop-in for TRL's
  `GRPOTrainer._get_per_token_logps_and_entropies` (returns `(logps, entropies)`).
- `generate_with_shared_prompt(generate, model, input_ids, attention_mask, ...)`: the same for `model.generate` on
  left-padded prompts: each distinct prompt is prefilled once and generation continues from the repeated cache.
- `shared_prompt_generation(model)`: a context manager that routes `model.generate` through the above, and
  `trainer_generation(trainer, images, multimodal_fields)` the one for a GRPOTrainer's `_generate_single_turn`.
- `group_prompts(prompt_ids, prompt_mask)`: which rows share a prompt.
- `prefill(module, input_ids, attention_mask, position_ids)` and `expand_cache(cache, rows)`: the prompt forward and
  the cache expansion under all of the above and under the evaluation sampler (`gapo.sampling.transformers_backend`),
  the one implementation of both; `mask_positions(attention_mask)`: position ids of left-padded prompts.
- `Unsupported`: raised for configurations this does not handle; callers fall back to the plain path.

Mixed precision: TRL runs its log-prob forward inside `accelerator.autocast()`; call `shared_prompt_logps` inside it too
(a no-op in float32). LoRA dropout: the plain path draws an independent dropout mask for every row's copy of the
prompt, the shared path one mask per distinct prompt; each row's mask has the same distribution, so the expected
gradient is the same, but the two are only identical with dropout off (as in the tests).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Iterator
from copy import deepcopy
from typing import Any

import torch
from torch import nn

logger = logging.getLogger(__name__)

#: Attention implementations whose handling of a 2-D padding mask together with a KV cache is plain masking.
SUPPORTED_ATTENTION = ("sdpa", "eager")


#: Completion tokens per chunk through the LM head: bounds the live logits to LOGPROB_ROWS x vocabulary floats.
LOGPROB_ROWS = 1024


class Unsupported(RuntimeError):
    """This model or configuration is not handled by the shared-prompt path; the message says why."""


# --------------------------------------------------------------------------------------------------------------------
# Model inspection
# --------------------------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------------------------
# Grouping rows by prompt
# --------------------------------------------------------------------------------------------------------------------


def group_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Find the distinct prompts of a batch.

    Two rows share a prompt when their token ids agree wherever the mask is 1 and their masks agree (prompts are
    left-padded to one width, so equal real tokens means equal padding). Rows need not be contiguous.

    Args:
        prompt_ids: (B, P) token ids.
        prompt_mask: (B, P) attention mask, 1 for real tokens.

    Returns:
        `(first, inverse)`: `first` (U,) is the first row holding each distinct prompt, in order of first appearance,
        and `inverse` (B,) maps every row to its prompt's index in `first`, so `prompt_ids[first][inverse]` equals
        `prompt_ids` under the mask.

    Example: rows with prompts [A, B, A, C, B] give first = [0, 1, 3], inverse = [0, 1, 0, 2, 1].
    """
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


# --------------------------------------------------------------------------------------------------------------------
# The prefill: one forward over the distinct prompts, then their KV cache expanded to the rows that continue them
# --------------------------------------------------------------------------------------------------------------------


def mask_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids of left-padded rows counted from each row's first real token, 0 on the padding: (B, P) -> (B, P).

    What `generate` gives a left-padded prompt (its padding positions differ, but padding is masked, so they never
    reach a real token). Example: mask [0, 0, 1, 1, 1] gives [0, 0, 0, 1, 2].
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def prefill(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    **forward_kwargs: Any,
) -> tuple[Any, Any]:
    """Run the U distinct prompts once and keep their keys/values: the shared half of every shared-prompt path.

    Args:
        module: what to run: a causal LM's backbone (returns hidden states) or the whole causal LM (logits).
        input_ids: (U, P) the distinct prompts, left-padded.
        attention_mask: (U, P) 1 on real tokens, or None when no prompt is padded (lets SDPA take its causal kernel).
        position_ids: (U, P) or (1, P); None for the model's default `arange(P)`.
        forward_kwargs: passed on to `module`, e.g. `logits_to_keep=1`.

    Returns:
        `(cache, output)`: a `DynamicCache` holding the prompts' keys/values (U rows, P columns), to be given to
        `expand_cache`, and the module's output for the U prompts.

    Grad mode is the caller's, so the same forward serves all three callers, whose needs really differ:

    - training log-probs (`shared_prompt_logps`): the backbone, with grad, on the whole prompt, positions `arange(P)`
      over the padded layout (TRL's plain forward passes none), the last column's hidden state kept for the LM-head
      kernel; expanded to every row of the micro-batch at once, differentiably.
    - the trainer's generation (`generate_with_shared_prompt`): the backbone, no grad, on all but the last prompt column
      (`generate` runs that column itself, so its logits processors and draws are stock), positions from the mask.
    - the evaluation sampler (`gapo.sampling.transformers_backend`): the whole causal LM (any model `generate` runs,
      including ones `Unsupported` turns away here, such as soft-capped logits) on the whole prompt with
      `logits_to_keep=1`, positions from the mask, mask None when nothing is padded; the group's cache is kept and a
      copy expanded per chunk of samples, since N samples of a prompt can exceed one batch.

    Decoding is not shared, on purpose: the trainer's must be `generate`'s (TRL's generation config and random draws,
    tested against stock GRPOTrainer), while the sampler's own loop drops rows at EOS instead of decoding padding and
    draws from a generator seeded per chunk, which `generate` offers neither of.
    """
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
    """The cache of U prompts -> the cache of len(rows) rows, row i continuing prompt `rows[i]`.

    Every layer's keys/values go from (U, heads, P, d) to (len(rows), heads, P, d) by `index_select`, whose backward
    sums the gradients of a prompt's rows. In place (and returned) unless `copy`, which leaves `cache` as it was for
    the next expansion (the sampler expands one group cache per chunk).
    """
    if copy:
        cache = deepcopy(cache)
    cache.reorder_cache(rows)
    return cache


# --------------------------------------------------------------------------------------------------------------------
# Log-probs for training: the drop-in for GRPOTrainer._get_per_token_logps_and_entropies
# --------------------------------------------------------------------------------------------------------------------


def _lm_head_logps(
    hidden: torch.Tensor,  # (B, C, H)
    targets: torch.Tensor,  # (B, C)
    mask: torch.Tensor,  # (B, C) bool
    head: nn.Module,
    temperature: float,
    compute_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of `targets` under `softmax(head(hidden) / temperature)`, 0 where `mask` is False.

    Only the real (unmasked) positions go through the head, in chunks of rows, each recomputed in backward
    (activation checkpointing), so the (B, C, V) logits are never held whole; the numbers are TRL's plain path's
    (`selective_log_softmax` and `entropy_from_logits`, public TRL utilities).
    """
    from torch.utils.checkpoint import checkpoint
    from trl.trainer.utils import entropy_from_logits, selective_log_softmax

    hidden = hidden.to(head.weight.device)[mask]  # (N, H), N real completion tokens
    picked = targets[mask]  # (N,)

    def chunk_logps(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = head(h).float() / temperature  # (n, V)
        entropy = entropy_from_logits(logits) if compute_entropy else logits.new_zeros(t.shape)
        return selective_log_softmax(logits, t), entropy

    parts = [
        checkpoint(chunk_logps, hidden[i : i + LOGPROB_ROWS], picked[i : i + LOGPROB_ROWS], use_reentrant=False)
        if torch.is_grad_enabled()
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
    expand_cache(cache, inverse)  # (U, .., P, ..) -> (B, .., P, ..); its backward sums each group's gradients

    # Pass 2: the completions against their prompt's keys/values, positions P..P+C-1.
    completion_out = backbone(
        input_ids=completion_ids,  # (B, C)
        attention_mask=attention_mask,  # (B, P+C): prompt padding and completion padding both masked
        position_ids=torch.arange(p, p + c, device=input_ids.device).unsqueeze(0),
        past_key_values=cache,
        use_cache=True,
    )
    hidden = torch.cat(
        [last_prompt_hidden[inverse].unsqueeze(1), completion_out.last_hidden_state[:, :-1]], dim=1
    )  # (B, C, H): hidden j predicts completion token j
    return _lm_head_logps(hidden, completion_ids, completion_mask.bool(), head, temperature, compute_entropy)


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

    Same contract as TRL's `GRPOTrainer._get_per_token_logps_and_entropies` for a text-only model:

    Args:
        model: the policy (a transformers causal LM, optionally PEFT-wrapped) or the reference model.
        input_ids: (B, P+C) `cat(prompt_ids, completion_ids)`, prompts left-padded, completions right-padded.
        attention_mask: (B, P+C) `cat(prompt_mask, completion_mask)`.
        logits_to_keep: C, the completion width.
        compute_entropy: also return the entropy of each completion position's distribution.
        temperature: logits are divided by it before the softmax (the trainer's sampling temperature).
        batch_size: rows per forward (TRL's memory chunking for the old/reference pass); None runs all rows at once.
            Prompts are only shared within a chunk.

    Returns:
        `(logps, entropies)`, each (B, C), zero at completion padding; `entropies` is None unless asked for.
        `logps[i, j] = log softmax(logits / temperature)[completion_ids[i, j]]` at the position that predicts
        completion token j (the prompt's last position for j = 0), so `exp(logps)` are the sampling probabilities.

    Raises:
        Unsupported: for models or settings this path does not handle (the message says which); fall back to TRL's.
    """
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


# --------------------------------------------------------------------------------------------------------------------
# Generation: prefill each distinct prompt once, then let `generate` continue from the repeated cache
# --------------------------------------------------------------------------------------------------------------------

_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


def generate_with_shared_prompt(
    generate: Callable[..., Any],
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    generation_config: Any = None,
    **kwargs: Any,
) -> Any:
    """`generate(input_ids=..., attention_mask=..., generation_config=..., **kwargs)`, with each distinct prompt
    prefilled once.

    The batch is GRPO's: left-padded prompts (B, P), each repeated G times. All but the last prompt column of the U
    distinct prompts run through the backbone once (no LM head; position ids from the attention mask, as `generate`
    makes them), the cache is repeated to the B rows, and `generate` continues from it: it runs only the last prompt
    column for every row, then decodes as usual with the same logits processors and sampling, so the output is what
    `generate` alone returns, (B, P + new tokens), at the cost of U instead of B prompt encodings.

    Falls back to plain `generate` (logging why, once) when nothing is shared or the setup is unsupported: beam search,
    several return sequences, a static/other cache implementation, a caller-supplied cache, or an `Unsupported` model.
    """
    reason = None
    if kwargs.get("past_key_values") is not None or kwargs.get("inputs_embeds") is not None:
        reason = "the caller passed past_key_values/inputs_embeds"
    elif input_ids.size(1) < 2:
        reason = "prompts shorter than two tokens"
    elif generation_config is not None and (
        (getattr(generation_config, "num_beams", None) or 1) > 1
        or (getattr(generation_config, "num_return_sequences", None) or 1) > 1
        or getattr(generation_config, "cache_implementation", None) not in (None, "dynamic")
        or getattr(generation_config, "use_cache", True) is False
    ):
        reason = "beam search, several return sequences or a non-dynamic cache in the generation config"
    else:
        try:
            backbone, _ = _backbone_and_head(model, for_training=False)
        except Unsupported as why:
            reason = str(why)
    if reason is not None:
        _warn_once(f"shared-prompt generation off: {reason}; using plain generate")
        return generate(
            input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config, **kwargs
        )

    first, inverse = group_prompts(input_ids, attention_mask)
    if first.numel() == input_ids.size(0):  # every prompt distinct: nothing to share
        return generate(
            input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config, **kwargs
        )

    prefix_ids, prefix_mask = input_ids[first, :-1], attention_mask[first, :-1]  # (U, P-1)
    with torch.no_grad():
        cache, _ = prefill(backbone, prefix_ids, prefix_mask, position_ids=mask_positions(prefix_mask))
    expand_cache(cache, inverse)  # (B, .., P-1, ..)
    return generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        generation_config=generation_config,
        past_key_values=cache,
        **kwargs,
    )


@contextlib.contextmanager
def shared_prompt_generation(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block, `model.generate(input_ids=..., attention_mask=..., ...)` prefills each distinct prompt once.

    Sets an instance attribute that shadows the class's `generate` and removes it on exit, so code that calls
    `model.generate` (e.g. TRL's `_generate_single_turn`) uses `generate_with_shared_prompt` unchanged.
    """
    original = model.generate
    had_instance_attr = "generate" in vars(model)

    def generate(*args: Any, **kwargs: Any) -> Any:
        if args or "input_ids" not in kwargs or kwargs.get("attention_mask") is None:
            return original(*args, **kwargs)
        input_ids, attention_mask = kwargs.pop("input_ids"), kwargs.pop("attention_mask")
        generation_config = kwargs.pop("generation_config", None)
        return generate_with_shared_prompt(original, model, input_ids, attention_mask, generation_config, **kwargs)

    model.generate = generate  # type: ignore[method-assign]
    try:
        yield model
    finally:
        if had_instance_attr:
            model.generate = original  # type: ignore[method-assign]
        else:
            del model.generate


def trainer_generation(
    trainer: Any, images: Any = None, multimodal_fields: Any = None
) -> contextlib.AbstractContextManager:
    """The context for a GRPOTrainer's `_generate_single_turn`: shared-prompt generation on TRL's regular
    `model.generate` path, or a no-op where TRL generates otherwise (vLLM, continuous batching, images) or the
    trainer's `args.shared_prompt_forward` is off. Use as::

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            with prefix.trainer_generation(self, images, multimodal_fields):
                return super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, has_tool_images
                )

    TRL's code inside is unchanged: it pads, unwraps the model (the same object patched here), samples with its own
    generation config and cuts completions at EOS; only the prompt prefill is shared.
    """
    if (
        not getattr(trainer.args, "shared_prompt_forward", False)
        or getattr(trainer, "use_vllm", False)
        or getattr(trainer, "use_transformers_continuous_batching", False)
        or images is not None
        or multimodal_fields
    ):
        return contextlib.nullcontext()
    return shared_prompt_generation(trainer.accelerator.unwrap_model(trainer.model_wrapped))
