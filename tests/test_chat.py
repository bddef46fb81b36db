"""gapo.repro.chat: one rendering of chat prompts, pre-filled answers included, for sampling, SFT and benchmarks."""

from __future__ import annotations

import pytest

from gapo.repro import chat

USER = [{"role": "user", "content": "Name a planet."}]
PREFILLED = [*USER, {"role": "assistant", "content": "<answer>"}]


def test_split_prefill_takes_the_assistant_turn_and_appends_the_response_prefix() -> None:
    assert chat.split_prefill("hi") == ([{"role": "user", "content": "hi"}], "")
    assert chat.split_prefill(PREFILLED) == (USER, "<answer>")
    assert chat.split_prefill(PREFILLED, "Mars") == (USER, "<answer>Mars")
    assert PREFILLED[-1]["role"] == "assistant"  # the caller's list is not changed
    with pytest.raises(ValueError, match="empty chat prompt"):
        chat.split_prefill([])
    with pytest.raises(ValueError, match="only an assistant message"):
        chat.split_prefill([{"role": "assistant", "content": "x"}])


def test_render_continues_the_prefill_as_continue_final_message_does(tokenizer) -> None:  # noqa: ANN001
    text = chat.render(tokenizer, PREFILLED)
    assert text.endswith("<|im_start|>assistant\n<answer>") and "<|im_end|>\n<|im_start|>assistant" in text
    assert text == chat.render(tokenizer, USER, "<answer>") == chat.render(tokenizer, "Name a planet.", "<answer>")
    # The Qwen template does not rewrite assistant content, so transformers' own way gives the same text.
    assert text == tokenizer.apply_chat_template(PREFILLED, tokenize=False, continue_final_message=True)
    plain = chat.render(tokenizer, USER)
    assert plain == tokenizer.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
    assert chat.render_prompt(tokenizer, PREFILLED, "Ma") == (text + "Ma", "<answer>Ma")


def test_token_ids_match_apply_chat_template_tokenized(tokenizer) -> None:  # noqa: ANN001
    for prompt, cont in ((PREFILLED, True), (USER, False)):
        expected = tokenizer.apply_chat_template(
            prompt, tokenize=True, return_dict=True, continue_final_message=cont, add_generation_prompt=not cont
        )["input_ids"]
        assert chat.token_ids(tokenizer, prompt) == list(expected)


def test_template_kwargs_reach_the_template_and_a_missing_template_is_one_line(tokenizer) -> None:  # noqa: ANN001
    template = (
        "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{% if add_generation_prompt %}>{% endif %}"
    )
    assert chat.render(tokenizer, PREFILLED, chat_template=template) == "[user:Name a planet.]><answer>"

    class NoTemplate:
        chat_template = None

    with pytest.raises(ValueError, match="no chat template"):
        chat.render(NoTemplate(), USER)
