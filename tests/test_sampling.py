"""The shared-encoding sampler on tiny-random, the token filters (hypothesis), the HTTP backend against a local stub
server, and the `gapo sample` CLI."""

from __future__ import annotations

import json
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gapo.repro.sampling as sampling
from gapo.repro.chat import render_prompt
from gapo.repro.sampling import (
    OpenAIBackend,
    Sampler,
    SamplingError,
    SamplingParams,
    TransformersBackend,
    chat_completions_url,
    filter_logits,
    plan_chunks,
    sample_completions,
    sample_from_probs,
)
from gapo.repro.sampling.cli import cli
from gapo.rewards import extract_answer

PROMPTS = [
    [
        {
            "role": "user",
            "content": "Pick one: [Mercury, Venus, Earth]. Format your response as follows: <answer>x</answer>.",
        }
    ],
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Name one city anywhere in the world, and say why you like it in some detail."}],
]


def _hf_greedy(model, tokenizer, prompt, max_new_tokens):  # noqa: ANN001, ANN202
    """`generate`'s greedy text for one prompt, cut before the first EOS (our sampler never returns the EOS)."""
    text, prefix = render_prompt(tokenizer, prompt)
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
    out = model.generate(ids, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    tokens = out[0, ids.shape[1] :].tolist()
    tokens = tokens[: next((i for i, t in enumerate(tokens) if t in eos), len(tokens))]
    return prefix + tokenizer.decode(tokens, skip_special_tokens=True)


def varied_random_model(tokenizer, tied: bool = False, scale: float = 0.5):  # noqa: ANN001, ANN201
    """A random 2-layer Qwen2 with large-scale weights (initializer range `scale`). Untied at 0.5 its greedy outputs
    differ per prompt and have no near-ties, which exactness tests need (tiny-random repeats one token); tied at 0.3
    its top tokens are about one logit apart and it tends to repeat (tests/test_prefix.py's distribution test)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=tied,
        initializer_range=scale,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


@pytest.fixture()
def varied_model(tokenizer):  # noqa: ANN001, ANN201
    """`varied_random_model` (untied, scale 0.5) and its tokenizer."""
    return varied_random_model(tokenizer), tokenizer


# --- the transformers backend ---------------------------------------------------------------------------------------


def test_same_seed_same_samples_and_seed_matters(tiny_model_and_tokenizer):  # noqa: ANN001
    model, tok = tiny_model_and_tokenizer
    a = sample_completions(model, tok, PROMPTS, 4, seed=3, max_new_tokens=6, batch_size=5)
    b = sample_completions(model, tok, PROMPTS, 4, seed=3, max_new_tokens=6, batch_size=5)
    c = sample_completions(model, tok, PROMPTS, 4, seed=4, max_new_tokens=6, batch_size=5)
    assert a == b
    assert a != c
    assert [len(x) for x in a] == [4, 4, 4]
    assert len(set(a[0])) > 1  # a random model at temperature 1 does not repeat itself


def test_greedy_matches_hf_generate_across_groups_and_chunks(varied_model):  # noqa: ANN001
    """Left-padded groups, cache expansion and chunking give exactly what `generate` gives one prompt at a time."""
    model, tok = varied_model
    expected = [_hf_greedy(model, tok, p, 7) for p in PROMPTS]
    assert len(set(expected)) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for batch_size in (1, 2, 64):
            got = sample_completions(model, tok, PROMPTS, 1, temperature=0, max_new_tokens=7, batch_size=batch_size)
            assert [g[0] for g in got] == expected


def test_rows_that_finish_early_do_not_disturb_the_others(varied_model):  # noqa: ANN001
    model, tok = varied_model
    first = sample_completions(model, tok, PROMPTS[:1], 1, temperature=0, max_new_tokens=6)[0][0]
    ids = tok(first, add_special_tokens=False).input_ids
    stop = ids[2]  # make the third greedy token of prompt 0 an EOS: its row stops, the others go on
    model.generation_config.eos_token_id = [tok.eos_token_id, stop]
    expected = [_hf_greedy(model, tok, p, 6) for p in PROMPTS]
    got = sample_completions(model, tok, PROMPTS, 1, temperature=0, max_new_tokens=6)
    assert [g[0] for g in got] == expected
    assert got[0][0] == tok.decode(ids[:2])  # prompt 0 stopped after two tokens
    assert len(got[1][0]) > len(got[0][0]) or len(got[2][0]) > len(got[0][0])  # another row went on


def test_response_prefix_is_included_and_prefill_prompts_work(tiny_model_and_tokenizer):  # noqa: ANN001
    model, tok = tiny_model_and_tokenizer
    out = sample_completions(model, tok, PROMPTS[:1], 3, response_prefix="<answer>", max_new_tokens=4)[0]
    assert all(t.startswith("<answer>") for t in out)
    prefilled = [PROMPTS[0] + [{"role": "assistant", "content": "<answer>"}]]
    again = sample_completions(model, tok, prefilled, 3, max_new_tokens=4)[0]
    assert again == out  # the same text is continued either way
    text, prefix = render_prompt(tok, PROMPTS[0], "<answer>")
    assert prefix == "<answer>" and text.endswith("<|im_start|>assistant\n<answer>")


def test_extract_answer_on_prefixed_samples(tiny_model_and_tokenizer):  # noqa: ANN001
    model, tok = tiny_model_and_tokenizer
    out = sample_completions(model, tok, PROMPTS[:1], 2, response_prefix="<answer>Venus</answer>", max_new_tokens=2)
    assert [extract_answer(t) for t in out[0]] == ["Venus", "Venus"]


def test_greedy_with_many_samples_warns_once_and_repeats(tiny_model_and_tokenizer, monkeypatch):  # noqa: ANN001
    model, tok = tiny_model_and_tokenizer
    monkeypatch.setattr(sampling.params, "_greedy_warned", False)
    with pytest.warns(UserWarning, match="greedy"):
        out = sample_completions(model, tok, PROMPTS[:2], 3, temperature=0, max_new_tokens=4)
    assert all(len(set(texts)) == 1 and len(texts) == 3 for texts in out)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call must not warn again
        sample_completions(model, tok, PROMPTS[:1], 2, temperature=0, max_new_tokens=2)


def test_prompts_are_encoded_once_per_group_by_the_shared_prefill(tiny_model_and_tokenizer, monkeypatch):  # noqa: ANN001
    """The sampler's prompt forward is `gapo.prefix.prefill` (through `encode_prompts`, the trainer's too), run once
    per group of prompts, never once per sample; each chunk expands the group cache with `gapo.prefix.expand_cache`."""
    from gapo import prefix

    model, tok = tiny_model_and_tokenizer
    prefilled: list[int] = []
    expanded: list[int] = []

    real_prefill, real_expand = prefix.prefill, prefix.expand_cache

    def counting_prefill(module, input_ids, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        prefilled.append(input_ids.shape[0])
        return real_prefill(module, input_ids, *args, **kwargs)

    def counting_expand(cache, rows, copy=False):  # noqa: ANN001, ANN202
        expanded.append(len(rows))
        return real_expand(cache, rows, copy=copy)

    monkeypatch.setattr(prefix, "prefill", counting_prefill)
    monkeypatch.setattr(prefix, "expand_cache", counting_expand)
    sample_completions(model, tok, PROMPTS, 4, max_new_tokens=2, batch_size=64)
    assert prefilled == [3] and expanded == [12]  # one forward over the 3 prompts, one chunk of 12 samples
    prefilled.clear()
    expanded.clear()
    sample_completions(model, tok, PROMPTS, 4, max_new_tokens=2, batch_size=3)
    assert prefilled == [1, 1, 1] and expanded == [3, 1] * 3  # a group per prompt, its 4 samples in 2 chunks


def test_works_on_a_peft_model(tiny_model_and_tokenizer):  # noqa: ANN001
    from peft import LoraConfig, get_peft_model

    model, tok = tiny_model_and_tokenizer
    base = sample_completions(model, tok, PROMPTS[:2], 3, seed=1, max_new_tokens=5)
    peft_model = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules="all-linear"))
    peft_model.eval()
    # a fresh LoRA has B = 0, so it computes the base model exactly: same seed, same samples
    assert sample_completions(peft_model, tok, PROMPTS[:2], 3, seed=1, max_new_tokens=5) == base


def test_bad_input_is_a_clear_error(tiny_model_and_tokenizer):  # noqa: ANN001
    model, tok = tiny_model_and_tokenizer
    with pytest.raises(ValueError, match="positive integer"):
        sample_completions(model, tok, PROMPTS, 0)
    with pytest.raises(ValueError, match="no prompts"):
        sample_completions(model, tok, [], 2)
    with pytest.raises(ValueError, match="top_p"):
        sample_completions(model, tok, PROMPTS, 2, top_p=0.0)
    with pytest.raises(ValueError, match="min_p"):
        sample_completions(model, tok, PROMPTS, 2, min_p=1.0)
    with pytest.raises(ValueError, match="empty chat prompt"):
        sample_completions(model, tok, [[]], 2)


def test_odd_prompts_and_long_completions_do_not_crash(tiny_model_and_tokenizer):  # noqa: ANN001
    model, tok = tiny_model_and_tokenizer
    odd = [[{"role": "user", "content": ""}], [{"role": "user", "content": "🚀\x00\u202e ünï " * 30}]]
    out = sample_completions(model, tok, odd, 2, max_new_tokens=24, top_p=0.9, min_p=0.05)
    assert all(isinstance(t, str) for texts in out for t in texts)


def test_sampler_overrides_and_backend(tiny_model_and_tokenizer):  # noqa: ANN001
    model, tok = tiny_model_and_tokenizer
    sampler = Sampler(TransformersBackend(model, tok), SamplingParams(max_new_tokens=3, seed=5))
    direct = sample_completions(model, tok, PROMPTS[:1], 2, max_new_tokens=3, seed=5)
    assert sampler(PROMPTS[:1], 2) == direct
    assert sampler.with_params(seed=6)(PROMPTS[:1], 2) == sampler(PROMPTS[:1], 2, seed=6)


# --- pure pieces ----------------------------------------------------------------------------------------------------


def test_filter_logits_hand_computed():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = lambda out: torch.isfinite(out)[0].tolist()  # noqa: E731
    assert kept(filter_logits(logits, top_p=0.8)) == [True, True, False, False]
    assert kept(filter_logits(logits, top_p=0.81)) == [True, True, True, False]
    assert kept(filter_logits(logits, min_p=0.2)) == [True, True, True, False]  # threshold 0.1
    assert kept(filter_logits(logits, min_p=0.7)) == [True, False, False, False]  # threshold 0.35
    assert kept(filter_logits(logits)) == [True] * 4


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-20, 20), min_size=2, max_size=12),
    st.floats(0.01, 1.0),
    st.floats(0.0, 0.99),
)
def test_filter_logits_properties(values, top_p, min_p):  # noqa: ANN001
    logits = torch.tensor([values], dtype=torch.float32)
    out = filter_logits(logits, top_p=top_p, min_p=min_p)
    finite = torch.isfinite(out)[0]
    assert finite[int(logits.argmax())]  # the most likely token always survives
    assert torch.equal(out[finite[None]], logits[finite[None]])  # survivors keep their logits
    probs = logits.softmax(-1)[0]
    top_only = torch.isfinite(filter_logits(logits, top_p=top_p))[0]
    assert probs[top_only].sum() >= min(top_p, 1.0) - 1e-5 or top_only.all()  # enough mass kept
    min_only = torch.isfinite(filter_logits(logits, min_p=min_p))[0]
    assert torch.equal(min_only, probs >= min_p * probs.max())


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p", "min_p", "penalty"),
    [(1.0, 0, 1.0, 0.0, 1.0), (0.7, 10, 0.9, 0.05, 1.3), (1.3, 3, 1.0, 0.0, 0.8), (0.5, 0, 0.5, 0.2, 1.0)],
)
def test_process_logits_is_generates_processors(temperature, top_k, top_p, min_p, penalty):  # noqa: ANN001
    """The decoding loop's token filter against transformers' own processors, in `generate`'s order (repetition
    penalty, temperature, top-k, top-p, min-p): the same tokens kept and the same sampling probabilities; greedy
    is the argmax of the penalised logits."""
    import dataclasses

    from transformers import (
        LogitsProcessorList,
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    from gapo.prefix import Decoding, process_logits

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 50, generator=g) * 3  # (B, V), no ties
    seen = torch.randint(0, 50, (6, 12), generator=g)  # prompt + generated ids per row
    processors = [RepetitionPenaltyLogitsProcessor(penalty)] if penalty != 1.0 else []
    warpers = [TemperatureLogitsWarper(temperature)] if temperature != 1.0 else []
    warpers += [TopKLogitsWarper(top_k)] if top_k else []
    warpers += [TopPLogitsWarper(top_p)] if top_p < 1.0 else []
    warpers += [MinPLogitsWarper(min_p)] if min_p else []
    decoding = Decoding(
        4, (0,), temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, repetition_penalty=penalty
    )
    ref = LogitsProcessorList(processors + warpers)(seen, logits.clone())
    ours = process_logits(logits, decoding, seen)
    assert torch.equal(torch.isfinite(ours), torch.isfinite(ref))
    torch.testing.assert_close(ours.softmax(-1), ref.softmax(-1), rtol=1e-5, atol=1e-6)
    greedy = process_logits(logits, dataclasses.replace(decoding, do_sample=False), seen)
    assert torch.equal(greedy.argmax(-1), LogitsProcessorList(processors)(seen, logits.clone()).argmax(-1))


def test_sample_from_probs_matches_the_distribution():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0]]).expand(20000, 5)
    draws = sample_from_probs(probs, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5).float() / len(draws)
    assert freq[1] == 0 and freq[4] == 0  # zero-probability tokens are never drawn
    torch.testing.assert_close(freq, probs[0], atol=0.015, rtol=0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=10).filter(lambda p: sum(p) > 1e-3), st.integers(0, 1000))
def test_sample_from_probs_draws_only_supported_tokens(weights, seed):  # noqa: ANN001
    probs = torch.tensor([weights]) / sum(weights)
    draws = sample_from_probs(probs.expand(50, -1), torch.Generator().manual_seed(seed))
    assert bool((probs[0][draws] > 0).all())


@given(st.integers(1, 9), st.integers(1, 20), st.integers(1, 16))
def test_plan_chunks_covers_every_sample_once(num_prompts, n, batch_size):  # noqa: ANN001
    plan = plan_chunks(num_prompts, n, batch_size)
    assert [i for members, _ in plan for i in members] == list(range(num_prompts))
    for members, chunks in plan:
        rows = [r for chunk in chunks for r in chunk.rows]
        assert all(len(chunk.rows) <= batch_size for chunk in chunks)
        assert sorted(rows) == [local for local in range(len(members)) for _ in range(n)]
        if n >= batch_size:
            assert len(members) == 1  # one prompt encoding feeds all of its chunks


def test_sampling_params_validation():
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0)
    with pytest.raises(ValueError, match="batch_size"):
        SamplingParams(batch_size=0)


# --- OpenAI-compatible HTTP backend ---------------------------------------------------------------------------------


class _Stub(BaseHTTPRequestHandler):
    """A tiny /v1/chat/completions: answers `n` choices "<answer>item-k</answer>"; can fail the first requests."""

    requests: list[dict] = []
    fail_first: int = 0
    max_choices: int = 1000

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        cls.requests.append(body)
        if self.path != "/v1/chat/completions":
            return self._send(404, {"error": "not found"})
        if cls.fail_first > 0:
            cls.fail_first -= 1
            return self._send(503, {"error": "overloaded"})
        if body.get("model") == "bad":
            return self._send(400, {"error": {"message": "unknown model bad"}})
        count = min(body["n"], cls.max_choices)
        choices = [
            {"index": k, "message": {"role": "assistant", "content": f"Sure <answer>item-{body['seed']}-{k}</answer>"}}
            for k in range(count)
        ]
        self._send(200, {"choices": choices})

    def _send(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:  # noqa: ANN002
        pass


@pytest.fixture()
def stub_server():  # noqa: ANN201
    _Stub.requests, _Stub.fail_first, _Stub.max_choices = [], 0, 1000
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_openai_backend_chunks_n_and_keeps_prefix(stub_server):  # noqa: ANN001
    backend = OpenAIBackend(stub_server + "/v1", "served-model", max_n_per_request=4, backoff_s=0.01)
    params = SamplingParams(seed=10, temperature=0.7, top_p=0.9, min_p=0.05, response_prefix="<pre>")
    out = backend.generate([PROMPTS[0], PROMPTS[1]], 6, params)
    assert [len(x) for x in out] == [6, 6]
    assert all(t.startswith("<pre>Sure <answer>") for texts in out for t in texts)
    ns = [r["n"] for r in _Stub.requests]
    assert ns == [4, 2, 4, 2]
    first = _Stub.requests[0]
    assert first["model"] == "served-model" and first["temperature"] == 0.7 and first["top_p"] == 0.9
    assert first["min_p"] == 0.05 and first["max_tokens"] == 64
    assert first["messages"][-1] == {"role": "assistant", "content": "<pre>"} and first["continue_final_message"]
    # one seed per request, spaced by the request size (vLLM seeds choice k with seed + k), in this run's own range
    assert [r["seed"] for r in _Stub.requests] == [10 * 2**20 + i for i in (0, 4, 8, 12)]
    assert extract_answer(out[0][0]) == f"item-{10 * 2**20}-0"


def test_openai_backend_asks_again_when_the_server_ignores_n(stub_server):  # noqa: ANN001
    _Stub.max_choices = 1  # like llama.cpp: one choice per request
    out = OpenAIBackend(stub_server, "m").generate([PROMPTS[0]], 3, SamplingParams())
    assert len(out[0]) == 3 and len(_Stub.requests) == 3
    assert "min_p" not in _Stub.requests[0] and "continue_final_message" not in _Stub.requests[0]


def test_openai_backend_retries_transient_errors(stub_server):  # noqa: ANN001
    _Stub.fail_first = 2
    out = OpenAIBackend(stub_server, "m", max_retries=3, backoff_s=0.01).generate([PROMPTS[0]], 2, SamplingParams())
    assert len(out[0]) == 2 and len(_Stub.requests) == 3


def test_openai_backend_gives_up_after_bounded_retries(stub_server):  # noqa: ANN001
    _Stub.fail_first = 10
    backend = OpenAIBackend(stub_server, "m", max_retries=2, backoff_s=0.01)
    with pytest.raises(SamplingError, match=r"unreachable after 3 attempts: HTTP 503"):
        backend.generate([PROMPTS[0]], 1, SamplingParams())
    assert len(_Stub.requests) == 3


def test_openai_backend_client_error_fails_at_once(stub_server):  # noqa: ANN001
    with pytest.raises(SamplingError, match="rejected the request.*unknown model bad"):
        OpenAIBackend(stub_server, "bad", backoff_s=0.01).generate([PROMPTS[0]], 1, SamplingParams())
    assert len(_Stub.requests) == 1


def test_unreachable_endpoint_is_one_line_error():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = OpenAIBackend(f"http://127.0.0.1:{port}", "m", max_retries=1, backoff_s=0.01, timeout_s=2)
    with pytest.raises(SamplingError, match="unreachable after 2 attempts") as info:
        backend.generate([PROMPTS[0]], 1, SamplingParams())
    assert "\n" not in str(info.value)


def test_chat_completions_url():
    assert chat_completions_url("http://h:1") == "http://h:1/v1/chat/completions"
    assert chat_completions_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    assert chat_completions_url("http://h:1/v1/chat/completions") == "http://h:1/v1/chat/completions"


# --- vLLM (GPU only) ------------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_vllm_backend_samples(tmp_path):  # noqa: ANN001
    from gapo.repro.sampling import VLLMBackend

    backend = VLLMBackend("embedded", gpu_memory_utilization=0.5)
    out = backend.generate(PROMPTS[:1], 4, SamplingParams(seed=0, response_prefix="<answer>", max_new_tokens=16))
    assert len(out[0]) == 4 and all(t.startswith("<answer>") for t in out[0])


# --- CLI ------------------------------------------------------------------------------------------------------------


def test_cli_writes_one_record_per_sample(tmp_path: Path):
    out = tmp_path / "samples.jsonl"
    args = [
        "--model",
        "tiny-random",
        "--prompt",
        "Pick one: [a, b]",
        "-n",
        "3",
        "--seed",
        "1",
        "--max-new-tokens",
        "4",
        "--response-prefix",
        "<answer>",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert cli(args) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 3
    assert all({"completion", "answer", "seed", "model"} <= set(r) for r in records)
    assert all(r["completion"].startswith("<answer>") for r in records)
    assert [p.name for p in tmp_path.iterdir()] == ["samples.jsonl"]  # no temp files left behind
    out2 = tmp_path / "again.jsonl"
    assert cli([*args[:-3], "--out", str(out2), "--no-progress"]) == 0
    assert out2.read_text() == out.read_text()  # same seed, same samples


def test_cli_bad_input_one_line_and_nothing_written(tmp_path: Path, capsys):  # noqa: ANN001
    out = tmp_path / "x.jsonl"
    assert cli(["--model", "tiny-random", "--prompt", "hi", "-n", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gapo: error: ") and "positive" in err and err.count("\n") == 1
    assert not out.exists()
    assert cli(["--model", "tiny-random", "--prompt", "hi", "-n", "1", "--backend", "openai", "--out", str(out)]) == 2
    assert "--endpoint" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_cli_adapter_for_another_base_is_rejected(tmp_path: Path, capsys, tokenizer):  # noqa: ANN001
    from peft import LoraConfig, get_peft_model

    from gapo.repro.offline import TinyRandomSpec, tiny_random_model

    other = tiny_random_model(tokenizer, TinyRandomSpec(hidden_size=16, intermediate_size=16))
    adapter = tmp_path / "adapter"
    get_peft_model(other, LoraConfig(r=2, lora_alpha=4, target_modules="all-linear")).save_pretrained(adapter)
    out = tmp_path / "x.jsonl"
    rc = cli(["--model", "tiny-random", "--adapter", str(adapter), "--prompt", "hi", "-n", "1", "--out", str(out)])
    assert rc == 2
    # the base model loads first (transformers' progress bar), then one line says why the adapter cannot go on it
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "Loading weights" not in line]
    assert len(err) == 1 and "does not match the base model" in err[0], err
    assert not out.exists()


def test_cli_unreachable_endpoint(tmp_path: Path, capsys, monkeypatch):  # noqa: ANN001
    import socket

    # the default backoff, without the wait
    monkeypatch.setattr(sampling.openai_backend.time, "sleep", lambda seconds: None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "x.jsonl"
    rc = cli(
        [
            "--model",
            "m",
            "--backend",
            "openai",
            "--endpoint",
            f"http://127.0.0.1:{port}",
            "--prompt",
            "hi",
            "-n",
            "1",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 2
    assert "unreachable after 4 attempts" in capsys.readouterr().err
    assert not out.exists()
