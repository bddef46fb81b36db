"""Throughput of the shared-encoding sampler against a loop of single `model.generate` calls.

Workload: N samples (default 100) of one list prompt (the planets list of section 6.1), temperature 1.0, top-p 1,
the same completion cap for every variant. Variants:

- ``batched``: `gapo.sampling.sample_completions` (one prompt forward, KV cache expanded to the N rows, own
  decoding loop that drops rows at EOS).
- ``generate_cache``: `model.generate` on N rows with the prompt's KV cache expanded to them
  (``past_key_values=``), so the prompt is also encoded once; finished rows are padded, not dropped.
- ``loop``: N separate ``model.generate(prompt, do_sample=True)`` calls, each encoding the prompt again.

Prints one line per variant and ends with ``speedup_vs_loop=X.XX`` (batched samples/s over loop samples/s).
Raw numbers go to ``--out`` (JSON). CPU run (about 5-10 minutes on 2 cores)::

    .venv/bin/python perf/sampling_speed.py --model embedded --n 100 --out /tmp/gapo_eval/sampling_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from gapo.chat import render_prompt
from gapo.eval.metrics import jsd_from_uniform
from gapo.eval.prompts import UNIFORMITY_LISTS, list_prompt, user_message
from gapo.models import load_model_and_tokenizer
from gapo.rewards import extract_answer
from gapo.sampling import sample_completions

VARIANTS = ("batched", "generate_cache", "loop")


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
    """`generate` settings shared by the two `generate` variants: pure temperature-1 sampling, the same cap."""
    return dict(
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=cfg.max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
    )


def run_generate_cache(model, tokenizer, prompt, cfg: BenchConfig) -> list[str]:  # noqa: ANN001
    from transformers import DynamicCache

    text, _ = render_prompt(tokenizer, prompt)
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids  # (1, P)
    torch.manual_seed(cfg.seed)
    with torch.inference_mode():
        cache = model(input_ids=ids[:, :-1], past_key_values=DynamicCache(config=model.config), use_cache=True)
        cache = cache.past_key_values
        cache.batch_repeat_interleave(cfg.n)  # (n, heads, P-1, d): the prompt encoded once, shared by n rows
        out = model.generate(ids.expand(cfg.n, -1), past_key_values=cache, **_sampling_kwargs(tokenizer, cfg))
    return [tokenizer.decode(row[ids.shape[1] :], skip_special_tokens=True) for row in out]


def run_loop(model, tokenizer, prompt, cfg: BenchConfig) -> list[str]:  # noqa: ANN001
    text, _ = render_prompt(tokenizer, prompt)
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
    torch.manual_seed(cfg.seed)
    texts = []
    with torch.inference_mode():
        for _ in range(cfg.n):
            out = model.generate(ids, **_sampling_kwargs(tokenizer, cfg))
            texts.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    return texts


RUNNERS = {"batched": run_batched, "generate_cache": run_generate_cache, "loop": run_loop}


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
    for variant in variants:
        load_before = os.getloadavg()[0]
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
            **_answers_summary(texts, items),
        }
        r = results[variant]
        print(
            f"{variant:15s} {r['samples']} samples in {seconds:7.1f} s = {r['samples_per_s']:.2f} samples/s "
            f"({tokens} completion tokens; JSD {r['jsd']:.3f}, valid {r['valid_rate']:.2f}; load {load_before:.1f})",
            flush=True,
        )
    record = {"config": asdict(cfg), "torch_threads": torch.get_num_threads(), "results": results}
    if "batched" in results and "loop" in results:
        record["speedup_vs_loop"] = results["batched"]["samples_per_s"] / results["loop"]["samples_per_s"]
    if cfg.out:
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.out).write_text(json.dumps(record, indent=1))
    if "speedup_vs_loop" in record:
        print(f"speedup_vs_loop={record['speedup_vs_loop']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
