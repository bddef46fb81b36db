"""Sampling parameters and errors shared by every backend."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

BACKENDS = ("transformers", "vllm", "openai")


class SamplingError(RuntimeError):
    """Sampling could not run (unreachable endpoint, backend missing); the message is one line."""


# --------------------------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. Validated on construction, so a bad value fails before any model work."""

    temperature: float = field(default=1.0, metadata={"help": "Softmax temperature; 0 means greedy decoding."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass in (0, 1]; 1 disables it."})
    min_p: float = field(
        default=0.0, metadata={"help": "Min-p in [0, 1): drop tokens with p < min_p * p_max; 0 disables it."}
    )
    seed: int = field(default=0, metadata={"help": "Seed; the same seed and inputs give the same samples."})
    max_new_tokens: int = field(default=64, metadata={"help": "Completion length cap in tokens."})
    response_prefix: str | None = field(
        default=None,
        metadata={"help": "Text pre-filled as the start of the assistant turn (e.g. '<answer>'); kept in outputs."},
    )
    batch_size: int | None = field(
        default=None, metadata={"help": "Rows decoded together (memory cap); default 64 on CPU, 256 on GPU."}
    )

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")
        if self.max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be positive, got {self.max_new_tokens}")
        if self.batch_size is not None and self.batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")


def _check_request(prompts: Sequence[Any], n: int) -> None:
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"n (samples per prompt) must be a positive integer, got {n!r}")
    if len(prompts) == 0:
        raise ValueError("no prompts to sample from")


_greedy_warned = False


def _warn_greedy(n: int, temperature: float) -> None:
    global _greedy_warned
    if temperature == 0 and n > 1 and not _greedy_warned:
        _greedy_warned = True
        warnings.warn(
            f"temperature 0 is greedy decoding: all {n} samples of a prompt will be identical",
            stacklevel=3,
        )


def one_line(text: str) -> str:
    """An error text as one short line (HTTP bodies and exceptions can span many)."""
    return " ".join(text.split())[:300]
