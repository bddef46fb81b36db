"""perf/roofline.py: the FLOP count of a step by hand, the shapes read from a TRL log, and a real (tiny) timing run."""

from __future__ import annotations

import json

import pytest

from perf import roofline

# A model small enough to count by hand: hidden 4, MLP 8, 2 query heads sharing 1 key/value head (kv width 2).
TINY = {
    "hidden_size": 4,
    "intermediate_size": 8,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 3,
    "vocab_size": 10,
}


def test_layer_shapes_follow_grouped_query_attention_and_swiglu():
    assert roofline.layer_shapes(TINY) == [(4, 4), (2, 4), (2, 4), (4, 4), (8, 4), (8, 4), (4, 8)]


def test_step_flops_by_hand():
    # one decoder layer: 16 + 8 + 8 + 16 + 32 + 32 + 32 = 144 multiply-adds a row; 3 layers: 432; the head: 40.
    shape = roofline.StepShape(prompts=2, prompt_tokens=10, rows=4, completion_tokens=12, max_length=5)
    # generation: 10 prompt rows through the layers, 2 head rows, then 4 calls of (12 - 4) / 4 = 2 rows each;
    # log-prob forward and backward: 22 rows through the layers and 12 head rows each.
    macs = (10 * 432 + 2 * 40 + 4 * 2 * (432 + 40)) + 2 * (22 * 432 + 12 * 40)
    assert roofline.step_flops(shape, TINY) == 2 * macs


def test_one_token_completions_need_no_decoding_call():
    shape = roofline.StepShape(prompts=1, prompt_tokens=5, rows=3, completion_tokens=3, max_length=1)
    generation = roofline.passes(shape)["generation"]
    assert [calls for _, _, calls in generation] == [1, 1, 0, 0]


def test_shapes_from_log_undo_trl_cumulative_token_count(tmp_path):
    # G=4, 2 prompts of 10 and 12 tokens: 4 * 22 = 88 prompt tokens counted per row, plus 8 rows x 3 tokens
    log = tmp_path / "metrics.jsonl"
    steps = [
        {"step": 1, "rollouts": 8.0, "num_tokens": 88 + 24.0, "completions/mean_length": 3.0,
         "completions/max_length": 5.0, "step_time": 2.5},
        {"step": 2, "rollouts": 8.0, "num_tokens": 2 * (88 + 24.0), "completions/mean_length": 3.0,
         "completions/max_length": 4.0, "step_time": 1.5},
        {"step": 2, "train_runtime": 4.0},  # TRL's closing line: no step
    ]  # fmt: skip
    log.write_text("\n".join(json.dumps(s) for s in steps) + "\n")
    shapes, times = roofline.shapes_from_log(log, num_generations=4)
    assert shapes == [
        roofline.StepShape(prompts=2, prompt_tokens=22, rows=8, completion_tokens=24, max_length=5),
        roofline.StepShape(prompts=2, prompt_tokens=22, rows=8, completion_tokens=24, max_length=4),
    ]
    assert times == [2.5, 1.5]


def test_timings_interpolate_between_measured_row_counts():
    class Fake:
        def seconds(self, what, rows, backward=False, repeats=3):
            return rows * (2.0 if backward else 1.0) + (10.0 if what == "head" else 0.0)

    t = roofline.Timings(Fake(), grid=(1, 4, 8))
    assert t("layers", 6, False) == pytest.approx(6.0)
    assert t("head", 2, True) == pytest.approx(14.0)
    assert t("layers", 0, False) == 0.0
    with pytest.raises(SystemExit, match="more than the 8 timed"):
        t("layers", 9, False)


def test_main_times_a_tiny_model_and_prints_the_ceiling(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    argv = ["--config", str(config), "--prompt-tokens", "20", "--rows", "8", "--completion-tokens", "40"]
    assert roofline.main([*argv, "--max-length", "6", "--trl-step", "1.0", "--dtype", "bfloat16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    floor = float(lines[-3].removeprefix("floor_s="))
    assert floor > 0
    assert float(lines[-2].removeprefix("ceiling_rollouts_per_min=")) == pytest.approx(60 * 8 / floor, rel=0.01)
    assert lines[-1].startswith("max_speedup_vs_trl=")


def test_bad_arguments_are_one_line_before_anything_is_timed(tmp_path, capsys):
    with pytest.raises(SystemExit):
        roofline.main(["--prompt-tokens", "20"])
    assert "give --log, or all of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        roofline.main(["--log", str(tmp_path / "missing.jsonl")])
    assert "no such file" in capsys.readouterr().err


def test_a_floor_in_another_dtype_than_the_run_says_so(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    (run / "config.json").write_text(json.dumps({"policy_dtype": "bfloat16"}))  # what `gapo train` writes
    step = {"step": 1, "rollouts": 8.0, "num_tokens": 112.0, "completions/mean_length": 3.0,
            "completions/max_length": 5.0, "step_time": 2.5}  # fmt: skip
    (run / "metrics.jsonl").write_text(json.dumps(step) + "\n")
    argv = ["--config", str(config), "--log", str(run / "metrics.jsonl"), "--num-generations", "4"]
    assert roofline.main([*argv, "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert "x that floor" in out and "float32 floor sum" in out
    assert "note: the run trained in bfloat16, so this is not its own floor (--dtype bfloat16 is)" in out
    assert roofline.main([*argv, "--dtype", "bfloat16"]) == 0
    assert "note:" not in capsys.readouterr().out
