"""tools/recipe_sweep.py's learning-curve bookkeeping (which adapters a run saved, at which steps, scored in which
order) and its GPU variant's settings as the trainer resolves them."""

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


def test_scoring_order_puts_the_final_adapter_first_then_the_curve_in_step_order() -> None:
    adapters = [(19, Path("checkpoint-19")), (38, Path("checkpoint-38")), (57, Path("adapter"))]
    assert [step for step, _ in recipe_sweep.scoring_order(adapters)] == [57, 19, 38]
    assert recipe_sweep.scoring_order([]) == []


def test_gpu_variant_resolves_to_the_issue_19_h100_recipe() -> None:
    """The variant as `train_variant` builds it: the embedded section with the GPU recipe on top, through the same
    config resolution `gapo train` uses (so a bad setting fails here, not on a lent GPU)."""
    from gapo.repro import profiles
    from gapo.train import configs

    section = dict(profiles.stage_params("train_gapo", "embedded")["train"])
    section.update(recipe_sweep.VARIANTS["gpu_h100_recipe"][1], max_steps=150, output_dir="unused")
    gapo_config = next(c for c in configs(section) if type(c).__name__ == "GAPOConfig")
    assert gapo_config.num_generations == 32
    assert gapo_config.per_device_train_batch_size // gapo_config.num_generations == 8  # prompts a step
    assert (gapo_config.learning_rate, gapo_config.lora_r, gapo_config.lora_alpha) == (2e-4, 64, 32)
    assert set(gapo_config.lora_target_modules) == set(recipe_sweep.ALL_LINEAR)
    assert gapo_config.split_format_reward is False  # the paper's single reward


@pytest.mark.parametrize(
    "name", ["constant_warmup", "iterations_2", "iterations_4", "rslora", "format_weight_0.3", "embedded"]
)
def test_lever_variants_resolve_and_the_report_names_every_setting(name: str) -> None:
    """Issue 34's lever variants pass the checks `gapo train` makes, and the report lists each run's full settings,
    the learning-rate schedule included, whether the variant changed it or not."""
    from gapo.repro import profiles
    from gapo.train import configs

    section = dict(profiles.stage_params("train_gapo", "embedded")["train"])
    section.update(recipe_sweep.VARIANTS[name][1], max_steps=150, output_dir="unused")
    configs(section)  # a refused setting raises here
    (line,) = [x for x in recipe_sweep.settings_lines({name: {"settings": section}}) if x.startswith("- ")]
    for key in ("lr_scheduler_type", "warmup_steps", "num_iterations", "use_rslora", "reward_weights", "lora_alpha"):
        assert f"`{key}={section[key]}`" in line
    assert "output_dir" not in line
