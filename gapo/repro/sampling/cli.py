"""``gapo sample``: N samples of one prompt written as JSON lines.

gapo sample --model embedded --prompt "Name one city anywhere in the world." -n 100 --out cities.jsonl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gapo.config import OneLineErrorParser
from gapo.io import write_jsonl_atomic
from gapo.models import ModelLoadError
from gapo.repro.sampling.params import BACKENDS, SamplingError, one_line
from gapo.repro.sampling.sampler import make_sampler, sample_records


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """What to sample from: the flags `gapo sample` and `gapo eval` share (one definition, one help text)."""
    parser.add_argument("--model", required=True, help="hub id, local dir, 'embedded', 'tiny-random' or API model name")
    parser.add_argument("--adapter", default=None, help="LoRA adapter directory trained on --model")
    parser.add_argument("--backend", choices=BACKENDS, default="transformers")
    parser.add_argument("--endpoint", default=None, help="OpenAI-compatible base URL for --backend openai")


def add_decoding_args(
    parser: argparse.ArgumentParser, *, max_new_tokens: int | None, max_new_tokens_help: str | None = None
) -> None:
    """How to sample: seed, temperature, top-p, min-p, completion length, batch size and progress bars.

    ``max_new_tokens`` is the command's default (``None`` where it depends on something else, e.g. `gapo eval`'s suite).
    """
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--min-p", type=float, default=0.0)
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens, help=max_new_tokens_help)
    parser.add_argument("--batch-size", type=int, default=None, help="rows decoded together (memory cap)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def sampler_settings(args: argparse.Namespace) -> dict[str, Any]:
    """`make_sampler`'s keyword arguments from the shared flags (`add_model_args`, `add_decoding_args`), less the model
    and adapter (`gapo eval` samples several) and the completion length (`gapo eval` sets it per suite)."""
    return {
        "backend": args.backend,
        "endpoint": args.endpoint,
        "progress": not args.no_progress,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "min_p": args.min_p,
        "seed": args.seed,
        "batch_size": args.batch_size,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="gapo sample",
        description="Draw N samples of one prompt (sent as a user chat message) and write them as JSON lines.",
    )
    add_model_args(parser)
    parser.add_argument("--prompt", required=True, help="the user message")
    parser.add_argument("-n", type=int, required=True, help="number of samples")
    parser.add_argument("--response-prefix", default=None, help="pre-filled start of the answer, e.g. '<answer>'")
    add_decoding_args(parser, max_new_tokens=64)
    parser.add_argument("--out", required=True, help="output .jsonl file (written atomically)")
    return parser


def cli(argv: list[str] | None = None) -> int:
    """``gapo sample``: returns 0 on success, 2 with a one-line ``error:`` message on bad input or failure."""
    args = build_parser().parse_args(argv)
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
            max_new_tokens=args.max_new_tokens,
            response_prefix=args.response_prefix,
            **sampler_settings(args),
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
        print(f"gapo: error: {one_line(str(err))}", file=sys.stderr)
        return 2
    print(f"wrote {len(completions)} samples to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
