"""tools/same_training.py on tiny-random: real `gapo train` runs at a revision and in a working tree, compared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import same_training  # noqa: E402

#: tests/test_cli.py's tiny run, without params.yaml (so only the code's defaults count).
TINY = ["--no-params", "--model", "tiny-random", "--num-prompts", "4", "--num-generations", "4"]
TINY += ["--per-device-train-batch-size", "4", "--max-completion-length", "4", "--lora-r", "4", "--lora-alpha", "8"]


@pytest.mark.slow  # about a minute: two short trainings, one in a git worktree
@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_same_training_tells_an_unchanged_run_from_a_changed_one(tmp_path: Path) -> None:
    """HEAD against its own clean tree: the same. A default changed in the working tree (LoRA on other modules): the
    adapters differ, tensor by tensor. The revision's worktree is removed either way."""
    clone = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    assert same_training.compare("HEAD", 1, 0, TINY, repo=clone) == []

    defaults = clone / "gapo" / "defaults.py"
    every_linear = '("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),'
    assert every_linear in defaults.read_text()
    defaults.write_text(defaults.read_text().replace(every_linear, '("q_proj",),'))
    found = same_training.compare("HEAD", 1, 0, TINY, repo=clone)
    assert any(line.startswith("adapter tensor ") and "v_proj.lora_A" in line for line in found), found
    listed = subprocess.run(["git", "worktree", "list"], cwd=clone, capture_output=True, text=True, check=True)
    assert len(listed.stdout.splitlines()) == 1  # only the clone itself


def test_metric_differences_ignore_timings_and_name_the_rest(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"step": 1, "loss": 0.5, "step_time": 3.0, "x": NaN}\n')
    b.write_text('{"step": 1, "loss": 0.5, "step_time": 9.0, "x": NaN}\n')
    assert same_training.metric_differences(a, b) == []
    b.write_text('{"step": 1, "loss": 0.25, "step_time": 9.0, "x": NaN}\n')
    assert same_training.metric_differences(a, b) == ["step 1: loss 0.5 != 0.25"]
    b.write_text("")
    assert same_training.metric_differences(a, b) == ["1 logged rows against 0"]
