"""OpenAI-compatible HTTP backend: API models, a local vLLM or llama.cpp server, with timeouts and bounded retries."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from gapo.repro.chat import ChatPrompt, split_prefill
from gapo.repro.sampling.params import SamplingError, SamplingParams, _check_request, _warn_greedy, one_line
from gapo.repro.sampling.transformers_backend import _progress_bar

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


#: Seeds of one run lie in [seed * SEED_STRIDE, (seed + 1) * SEED_STRIDE): runs with other `--seed`s never share one.
SEED_STRIDE = 1 << 20


def request_seed(seed: int, request_no: int, per_request: int) -> int:
    """The seed of a run's `request_no`-th request of up to `per_request` choices.

    Why spaced by `per_request` and not consecutive: vLLM seeds the k-th choice of a request with ``seed + k``, so
    with seeds 0, 1, 2, ... request 1 drew its choice k as request 0 drew its choice k + 1, and returned copies (on the
    embedded model, `gapo eval -n 50`: each list's second request, 18 choices, repeated 18 of the first's 32). Spaced
    this way, no two choices of a run share a seed on a server that seeds choices so; on others the seeds stay distinct.
    """
    return seed * SEED_STRIDE + request_no * per_request


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
                detail = one_line(err.read().decode("utf-8", "replace"))
                reason = f"HTTP {err.code}: {detail}"
                if err.code != 429 and err.code < 500:
                    raise SamplingError(f"endpoint {self.url} rejected the request ({reason})") from err
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as err:
                reason = one_line(str(getattr(err, "reason", err)))
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
                f"endpoint {self.url} returned no choices: {one_line(json.dumps(reply))[:200]}"
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
                    seed = request_seed(params.seed, request_no, per_request)
                    got = self._request(messages, prefix, min(per_request, n - len(texts)), params, seed)
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
