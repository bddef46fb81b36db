"""Chat rendering: the one place a chat prompt becomes the exact text (or token ids) a model continues.

Sampling, evaluation, SFT and the speed benchmarks all go through `render`, so SFT and every evaluation see the same
text for the same prompt. It lives in the harness: the trainer needs none of it, since TRL applies the tokenizer's
template to the dataset's chat prompts itself (with `continue_final_message` for a pre-filled answer, which this
module matches on the Qwen2.5 templates, tests/test_chat.py).

A pre-filled answer start (a *prefix* such as ``<answer>``) is either a final assistant message, TRL's way, or a
`response_prefix` argument, or both (appended in that order). It is rendered as the template's generation prompt
followed by the prefix text::

    <|im_start|>user\\nName a planet.<|im_end|>\\n<|im_start|>assistant\\n<answer>
    \\_______ template(messages, add_generation_prompt=True) ______/\\_prefix_/

Why not ``continue_final_message=True``: transformers finds the final message's content in the rendered text and
cuts after it, which fails on templates that trim or rewrite assistant content; for templates that do neither (the
Qwen2.5 family used here) both give the same text (tests/test_chat.py checks it).
"""

from __future__ import annotations

from typing import Any

#: A chat prompt: ``[{"role": "user", "content": "..."}, ...]``.
ChatPrompt = list[dict[str, Any]]


def split_prefill(prompt: ChatPrompt | str, response_prefix: str | None = None) -> tuple[ChatPrompt, str]:
    """Split a chat prompt into (messages to template, assistant prefix to pre-fill).

    A plain string is one user message. A prompt that already ends with an assistant message (TRL's way of
    pre-filling) has that message's content as its prefix; `response_prefix` is appended to it.
    """
    messages: ChatPrompt = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if not messages:
        raise ValueError("empty chat prompt (no messages)")
    prefix = ""
    if messages[-1].get("role") == "assistant":
        prefix = str(messages[-1].get("content") or "")
        messages = messages[:-1]
        if not messages:
            raise ValueError("chat prompt holds only an assistant message")
    return messages, prefix + (response_prefix or "")


def render(tokenizer: Any, prompt: ChatPrompt | str, response_prefix: str | None = None, **template_kwargs: Any) -> str:
    """The exact text the model continues: chat template + generation prompt + prefix.

    `template_kwargs` go to ``tokenizer.apply_chat_template`` (e.g. ``chat_template=``, ``tools=``, TRL's
    ``chat_template_kwargs``)."""
    messages, prefix = split_prefill(prompt, response_prefix)
    if template_kwargs.get("chat_template") is None and getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the tokenizer has no chat template; a chat prompt needs a chat (instruct) model")
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **template_kwargs)
    return text + prefix


def render_prompt(
    tokenizer: Any, prompt: ChatPrompt | str, response_prefix: str | None = None, **template_kwargs: Any
) -> tuple[str, str]:
    """`render`'s text and the prefix alone (samplers prepend the prefix to each completion they return)."""
    return render(tokenizer, prompt, response_prefix, **template_kwargs), split_prefill(prompt, response_prefix)[1]


def token_ids(
    tokenizer: Any, prompt: ChatPrompt | str, response_prefix: str | None = None, **template_kwargs: Any
) -> list[int]:
    """`render`'s text as token ids, without added special tokens (the template already holds them), as
    ``apply_chat_template(..., tokenize=True)`` gives them."""
    return list(
        tokenizer(render(tokenizer, prompt, response_prefix, **template_kwargs), add_special_tokens=False)["input_ids"]
    )
