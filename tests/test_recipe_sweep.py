"""tools/recipe_sweep.py's learning-curve bookkeeping: which adapters a run saved, at which steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import recipe_sweep  # noqa: E402


def test_checkpoint_steps_spread_the_evaluations_over_the_run() -> None:
    assert recipe_sweep.checkpoint_steps(150, 1) == 150
    assert recipe_sweep.checkpoint_steps(150, 4) == 38  # saves at 38, 76, 114; the final adapter at 150
    assert recipe_sweep.checkpoint_steps(3, 10) == 1
    with pytest.raises(ValueError, match="--evals must be at least 1"):
        recipe_sweep.checkpoint_steps(150, 0)


def test_saved_adapters_lists_checkpoints_in_step_order_then_the_final_adapter(tmp_path: Path) -> None:
    for folder in ("checkpoint-76", "checkpoint-38", "checkpoint-150", "adapter", "checkpoint-9"):
        (tmp_path / folder).mkdir()
        if folder != "checkpoint-9":  # a partial checkpoint (no adapter config) is not an adapter
            (tmp_path / folder / "adapter_config.json").write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()
    got = [(step, path.name) for step, path in recipe_sweep.saved_adapters(tmp_path)]
    assert got == [(38, "checkpoint-38"), (76, "checkpoint-76"), (150, "adapter")]
