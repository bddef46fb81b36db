"""Defaults that several configs share, one home each: the paper's training settings and the synthetic data's.

GAPOConfig (gapo.trainer), ScriptArguments (gapo.train), SFTConfig (gapo.repro.sft) and DataConfig
(gapo.repro.stages.generate) declare them as ``lora_r: int = LORA_R.field()`` and gapo.tasks.lists takes the data's as
defaults, so a value and its `--help` text are written once. params.yaml overrides them per profile (dataset settings
only in `data`: gapo.config.with_data_settings)."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Default:
    """A default that several configs share, with the `--help` text they show for it."""

    value: Any
    help: str

    def field(self, help: str | None = None) -> Any:
        """This default as a dataclass field (a tuple: a fresh list per instance); `help` replaces the shared text."""
        metadata = {"help": help or self.help}
        if isinstance(self.value, tuple):
            return dataclasses.field(default_factory=lambda: list(self.value), metadata=metadata)
        return dataclasses.field(default=self.value, metadata=metadata)


# The paper's training settings (Anschel et al. 2025, Appendix F); the SFT baseline (Appendix G) has none of its own and
# reuses the LoRA and learning rate.
NUM_GENERATIONS = Default(32, "G, completions per prompt (paper: 32)")
LEARNING_RATE = Default(1e-5, "learning rate (paper: 1e-5)")
BETA = Default(0.0, "KL coefficient (paper: 0, no KL penalty)")
LORA_R = Default(64, "LoRA rank (paper: 64)")
LORA_ALPHA = Default(32, "LoRA alpha (paper: 32)")
LORA_DROPOUT = Default(0.1, "LoRA dropout (paper: 0.1)")
#: "All linear layers" of a Qwen2 decoder: every attention and MLP projection (what PEFT's "all-linear" selects).
LORA_TARGET_MODULES = Default(
    ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "comma-separated modules that get LoRA adapters (paper: all linear layers)",
)

# The synthetic list-selection data (gapo.tasks.lists; lists of 4 to 12 items as in the paper's Appendix E).
NUM_PROMPTS = Default(512, "number of synthetic list prompts")
SEED = Default(0, "seed: the same seed gives the same rows")
MIN_ITEMS = Default(4, "shortest list in a prompt (paper: 4)")
MAX_ITEMS = Default(12, "longest list in a prompt (paper: 12)")
CATEGORIES = Default(None, "comma-separated subset of categories")
RESPONSE_PREFIX = Default(None, "pre-filled answer start, e.g. '<answer>'")
