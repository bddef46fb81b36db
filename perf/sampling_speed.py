"""Throughput of the shared-encoding sampler against stock `model.generate`, batched and in a loop.

Workload: N samples (default 100) of one list prompt (the planets list of section 6.1), temperature 1.0, top-p 1,
the same completion cap for every variant. Variants:

- ``batched``: `gapo.repro.sampling.sample_completions` (one prompt forward, KV cache expanded to the N rows, own
  decoding loop that drops rows at EOS).
- ``trainer``: what GAPOTrainer samples its rollouts with (`gapo.prefix.trainer_rollouts` without the trainer):
  TRL 1.14.2's generation config for the same settings, resolved by `gapo.prefix.decoding_from_generation_config`,
  then `gapo.prefix.encode_prompts` and `decode_rows` on the N rows. It draws from the sampler's first-chunk
  generator (the trainer itself uses torch's global one), so both decode the same tokens and the timing compares
  code, not draws: on CPU a decoding step costs about the same for 1 row as for 30 (the weights are read either way),
  so one completion that runs to the cap in one set of draws adds whole steps (measured: 2x CPU time for 14% more
  tokens with other draws).
- ``generate``: stock `model.generate` on the prompt repeated to N rows (the prompt encoded N times in one batch).
- ``loop``: N separate stock ``model.generate(prompt, do_sample=True)`` calls, each encoding the prompt again.

Every `generate` variant uses the same sampling settings (temperature 1, no top-k/top-p) and completion cap.
Prints one line per variant and ends with ``speedup_vs_generate=X.XX`` and ``speedup_vs_loop=X.XX`` (batched
samples/s over those of stock batched `generate` and of the loop) and ``trainer_vs_batched=X.XX`` (the trainer's
samples/s over the sampler's; issue 19 asks for at least 1). An untimed 2-sample call runs first, so the first
variant does not pay one-time costs. Raw numbers go to ``--out`` (JSON). CPU run (about 5-10 minutes on 2 cores), and
the smallest run (seconds)::

    .venv/bin/python perf/sampling_speed.py --model embedded --n 100 --out /tmp/gapo_eval/sampling_speed.json
    .venv/bin/python perf/sampling_speed.py --model tiny-random --n 4 --max-new-tokens 4
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from gapo.metrics import jsd_from_uniform
from gapo.models import load_model_and_tokenizer
from gapo.prefix import decode_rows, decoding_from_generation_config, encode_prompts
from gapo.repro.chat import render_prompt
from gapo.repro.prompts import UNIFORMITY_LISTS, list_prompt, user_message
from gapo.repro.sampling import sample_completions
from gapo.repro.sampling.transformers_backend import _chunk_seed
from gapo.rewards import extract_answer

VARIANTS = ("batched", "trainer", "generate", "loop")


@dataclass
class BenchConfig:
    model: str = field(default="embedded", metadata={"help": "model to load"})
    n: int = field(default=100, metadata={"help": "samples of the prompt"})
    max_new_tokens: int = field(default=32, metadata={"help": "completion cap (same for every variant)"})
    seed: int = field(default=0, metadata={"help": "seed"})
    variants: str = field(
        default=",".join(VARIANTS), metadata={"help": "comma-separated subset of " + ", ".join(VARIANTS)}
    )
    out: str | None = field(default=None, metadata={"help": "JSON file for the raw numbers"})


def _answers_summary(texts: list[str], items: tuple[str, ...]) -> dict[str, float]:
    answers = [extract_answer(t) for t in texts]
    return {
        "jsd": jsd_from_uniform(answers, items),
        "valid_rate": sum(a in items for a in answers) / len(answers),
    }


def run_batched(model, tokenizer, prompt, cfg: BenchConfig) -> list[str]:  # noqa: ANN001
    return sample_completions(
        model, tokenizer, [prompt], cfg.n, seed=cfg.seed, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.n
    )[0]


def _sampling_kwargs(tokenizer, cfg: BenchConfig) -> dict:  # noqa: ANN001
    """`generate` settings shared by the `generate` variants: pure temperature-1 sampling, the same cap."""
    return dict(
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=cfg.max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
    )


def _prompt_rows(model, tokenizer, prompt, n: int) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    """The rendered prompt repeated to n rows: input ids and attention mask, (n, P) each, on the model's device."""
    text, _ = render_prompt(tokenizer, prompt)
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids  # (1, P)
    ids = ids.to(next(model.parameters()).device).expand(n, -1)  # (n, P)
    return ids, torch.ones_like(ids)


def run_trainer(model, tokenizer, prompt, cfg: BenchConfig) -> list[str]:  # noqa: ANN001
    from transformers import GenerationConfig

    ids, _ = _prompt_rows(model, tokenizer, prompt, 1)
    eos = model.generation_config.eos_token_id
    config = GenerationConfig(  # what GRPOTrainer 1.14.2 builds (its __init__), for these settings
        max_new_tokens=cfg.max_new_tokens,
        do_sample=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[tokenizer.eos_token_id, *([eos] if isinstance(eos, int) else eos or [])],
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        min_p=None,
        repetition_penalty=1.0,
        cache_implementation=None,
        disable_compile=True,
    )
    generator = torch.Generator(device=ids.device).manual_seed(_chunk_seed(cfg.seed, 0))  # the sampler's draws
    with torch.no_grad():
        decoding = decoding_from_generation_config(model, config)
        encoded = encode_prompts(model, [ids[0].tolist()], tokenizer.pad_token_id, ids.device)
        rows = decode_rows(model, encoded, [0] * cfg.n, decoding, generator)
    return [tokenizer.decode(row, skip_special_tokens=True) for row in rows]


def run_generate(model, tokenizer, prompt, cfg: BenchConfig) -> list[str]:  # noqa: ANN001
    ids, mask = _prompt_rows(model, tokenizer, prompt, cfg.n)
    torch.manual_seed(cfg.seed)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, **_sampling_kwargs(tokenizer, cfg))
    return [tokenizer.decode(row[ids.shape[1] :], skip_special_tokens=True) for row in out]


def run_loop(model, tokenizer, prompt, cfg: BenchConfig) -> list[str]:  # noqa: ANN001
    ids, _ = _prompt_rows(model, tokenizer, prompt, 1)  # (1, P)
    torch.manual_seed(cfg.seed)
    texts = []
    with torch.inference_mode():
        for _ in range(cfg.n):
            out = model.generate(ids, **_sampling_kwargs(tokenizer, cfg))
            texts.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    return texts


class _Collect(logging.Handler):
    """Keeps the messages of the records it is handed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _prefix_warnings() -> Iterator[list[str]]:
    """Collect what `gapo.prefix` logs meanwhile (a fallback says why there)."""
    handler = _Collect()
    prefix_logger = logging.getLogger("gapo.prefix")
    prefix_logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        prefix_logger.removeHandler(handler)


RUNNERS = {"batched": run_batched, "trainer": run_trainer, "generate": run_generate, "loop": run_loop}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, f in BenchConfig.__dataclass_fields__.items():
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=type(f.default) if f.default else str,
            default=f.default,
            help=f.metadata["help"],
        )
    cfg = BenchConfig(**vars(parser.parse_args(argv)))
    variants = [v.strip() for v in cfg.variants.split(",") if v.strip()]
    unknown = set(variants) - set(RUNNERS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    items = UNIFORMITY_LISTS["planets"]
    prompt = user_message(list_prompt(items))
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    results: dict[str, dict] = {}
    run_batched(model, tokenizer, prompt, BenchConfig(n=2, max_new_tokens=2))  # warm-up, untimed
    for variant in variants:
        load_before = os.getloadavg()[0]
        with _prefix_warnings() as warnings:
            start = time.perf_counter()
            texts = RUNNERS[variant](model, tokenizer, prompt, cfg)
            seconds = time.perf_counter() - start
        tokens = sum(len(tokenizer(t, add_special_tokens=False).input_ids) for t in texts)
        results[variant] = {
            "seconds": seconds,
            "samples": len(texts),
            "samples_per_s": len(texts) / seconds,
            "completion_tokens": tokens,
            "load_avg_1m_before": load_before,
            "fallback": "; ".join(warnings) or None,
            **_answers_summary(texts, items),
        }
        r = results[variant]
        print(
            f"{variant:15s} {r['samples']} samples in {seconds:7.1f} s = {r['samples_per_s']:.2f} samples/s "
            f"({tokens} completion tokens; JSD {r['jsd']:.3f}, valid {r['valid_rate']:.2f}; load {load_before:.1f})",
            flush=True,
        )
        if r["fallback"]:
            print(f"{'':15s} fell back: {r['fallback']}", flush=True)
    record = {"config": asdict(cfg), "torch_threads": torch.get_num_threads(), "results": results}
    for baseline in ("generate", "loop"):
        if "batched" in results and baseline in results:
            record[f"speedup_vs_{baseline}"] = results["batched"]["samples_per_s"] / results[baseline]["samples_per_s"]
    if cfg.out:
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.out).write_text(json.dumps(record, indent=1))
    if "batched" in results and "trainer" in results:
        record["trainer_vs_batched"] = results["trainer"]["samples_per_s"] / results["batched"]["samples_per_s"]
    for key in ("speedup_vs_generate", "speedup_vs_loop", "trainer_vs_batched"):
        if key in record:
            print(f"{key}={record[key]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
