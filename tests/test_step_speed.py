"""perf/step_speed.py on CPU with a tiny model: real steps of TRL's GRPOTrainer and GAPOTrainer, alternating; with
`--num_iterations` above 1 the steps that generate and those that reuse the batch are timed apart and a batch's time
is what the speed-up compares."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from perf import step_speed

TINY = ["--model", "tiny-random", "--num_generations", "8", "--micro_batch", "8", "--max_completion_length", "6"]
TINY += ["--lora_r", "4", "--warmup", "0"]


def record(step_s: float, generates: bool) -> dict[str, float]:
    return {"step_s": step_s, "generate_score_s": step_s / 2 if generates else 0.0, "generates": float(generates)}


def test_a_batch_is_one_generating_step_and_mu_minus_one_reusing_ones() -> None:
    records = [record(4.0, True), record(1.0, False), record(1.5, False), record(6.0, True), record(2.0, False)]
    by_kind = step_speed.kinds(records, 3)
    assert by_kind["generating"] == (1.0, step_speed.medians([records[0], records[3]]))
    assert by_kind["reusing"][0] == 2.0 and by_kind["reusing"][1]["step_s"] == 1.5
    assert step_speed.per_batch(by_kind, "step_s") == 5.0 + 2 * 1.5
    assert step_speed.per_batch(by_kind, "generate_score_s") == 2.5
    # mu 1: every step generates, one kind, the plain median
    single = step_speed.kinds([record(3.0, True), record(5.0, True)], 1)
    assert single == {"step": (1.0, step_speed.medians([record(3.0, True), record(5.0, True)]))}
    with pytest.raises(ValueError, match="no reusing step among the timed ones"):
        step_speed.kinds([record(3.0, True)], 2)


def test_num_iterations_times_generating_and_reusing_steps_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "speed.json"
    step_speed.main([*TINY, "--steps", "4", "--num_iterations", "2", "--json_out", str(out)])
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())["G=8"]
    for name in ("trl", "gapo"):
        records = result["records"][name]
        assert [r["generates"] for r in records] == [1.0, 0.0, 1.0, 0.0]  # TRL generates at steps 0 and 2
        # a reusing step runs no generation: its time is the log-prob pass, backward and optimizer alone
        assert all(r["generate_score_s"] < 0.05 for r in records if not r["generates"])
        medians = result["medians"][name]
        batch = result["per_batch"][name]["step_s"]
        assert math.isclose(batch, medians["generating"]["step_s"] + medians["reusing"]["step_s"])
        assert math.isclose(result["rollouts_per_min"][name], 60 * 8 / batch)
    speedup = result["per_batch"]["trl"]["step_s"] / result["per_batch"]["gapo"]["step_s"]
    assert math.isclose(result["speedup"]["step"], speedup)
    assert "GAPOTrainer, reusing" in printed and "speedup: batch of rollouts" in printed
    assert printed.strip().splitlines()[-1] == f"speedup_vs_trl={speedup:.2f}"


def test_num_iterations_needs_steps_of_both_kinds() -> None:
    with pytest.raises(ValueError, match="--steps 2 must be >= --num_iterations 4"):
        step_speed.Args(steps=2, num_iterations=4)
    with pytest.raises(ValueError, match="--num_iterations must be >= 1, got 0"):
        step_speed.Args(num_iterations=0)
