"""`gapo train` from the command line: one-line errors before any model loads, outputs, and resume after a kill."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gapo.cli import main

TINY = [
    "--no-params",
    "--model",
    "tiny-random",
    "--num-prompts",
    "8",
    "--num-generations",
    "4",
    "--per-device-train-batch-size",
    "4",
    "--max-completion-length",
    "6",
    "--lora-r",
    "4",
    "--lora-alpha",
    "8",
    "--learning-rate",
    "1e-3",
]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--num-generations", "1"], "num_generations must be at least 2"),
        (["--num-generations", "3"], "divisible by num_generations"),
        (["--model", "Some/Unknown-Model"], "offline models: embedded, tiny-random"),
        (["--categories", "Planets"], "unknown categories"),
        (["--policy-dtype", "fp16"], "policy_dtype must be one of auto, float32, bfloat16, got 'fp16'"),
    ],
)
def test_bad_input_is_one_line_before_loading(flags, message, tmp_path, capsys, monkeypatch):  # noqa: ANN001
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "run"
    assert main(["train", *TINY, "--output-dir", str(out), "--max-steps", "1", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gapo: error: ") and message in err[0]
    assert not (out / "adapter").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--lr-scheduler-type", "cosine_decay"], "invalid choice: 'cosine_decay' (choose from 'linear', 'cosine',"),
        (["--warmup-steps", "-1"], "warmup_steps must be a whole number of steps >= 0"),
        (["--warmup-steps", "2.5"], "warmup_steps must be a whole number of steps >= 0"),
        # transformers' constant never reads it: refused, not silently trained without a warmup
        (["--lr-scheduler-type", "constant", "--warmup-steps", "5"], "warmup_steps needs a schedule that warms up"),
        (["--num-iterations", "0"], "num_iterations must be a positive integer, got 0"),
        (["--scale-rewards", "std"], "scale_rewards must be one of group, batch, none"),
        # TRL reads loss_type only in its loss pass, after the model loads and a batch is sampled
        (["--loss-type", "grpo_v2"], "loss_type must be one of dapo, grpo, dr_grpo, bnpo, cispo, sapo, luspo, vespo"),
        (["--reward-weights", "1.0", "nan"], "reward_weights must be a list of finite numbers"),
        (["--split-format-reward", "--reward-weights", "0.3"], "reward_weights has 1 values; the task has 2 reward(s)"),
        (["--reward-weights", "1.0", "1.0"], "has 2 values; the task has 1 reward(s): frequency"),
        (["--dataset", "no/such/rows.jsonl"], "--dataset no/such/rows.jsonl: no such file"),
        # batch under split_format_reward: neither of its aggregations reads it: refused, not silently ignored
        (["--split-format-reward", "--scale-rewards", "batch"], "scale_rewards 'batch' has no meaning under split_fo"),
        # the lists recipe's two-reward settings on a one-reward task: both flags named in the one line
        (["--task", "open", "--split-format-reward"], "task open has one reward: pass --split-format-reward false --"),
    ],
)
def test_recipe_levers_are_checked_before_loading(flags, message, tmp_path, capsys):  # noqa: ANN001
    """Issue 34's levers (schedule, warmup, iterations, reward scale and weights) and --dataset: one line each."""
    out = tmp_path / "run"
    assert main(["train", *TINY, "--output-dir", str(out), "--max-steps", "1", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gapo: error: ") and message in err[0], err
    assert not out.exists()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"lr_scheduler_type": "cosine_decay"}, "lr_scheduler_type must be one of linear, cosine, "),
        ({"max_steps": 0}, "max_steps must be a positive integer (or -1: train num_train_epochs epochs), got 0"),
        ({"num_iterations": 2.5}, "num_iterations must be a positive integer, got 2.5"),
        ({"scale_rewards": "std"}, "scale_rewards must be one of group, batch, none"),
        ({"loss_type": "GRPO"}, "loss_type must be one of dapo, grpo, dr_grpo, bnpo, cispo, sapo, luspo, vespo, got"),
        ({"split_format_reward": True, "scale_rewards": "batch"}, "scale_rewards 'batch' has no meaning under split"),
        # PyYAML reads `2e-4` (no dot) as a string: one line naming the fix, not a TypeError in a comparison
        ({"learning_rate": "2e-4"}, "learning_rate must be a number, got '2e-4' (YAML reads 2e-4 as text: write 2.0e"),
        ({"beta": None}, "beta must be a number, got None"),
        ({"entropy_coef": "1e-2"}, "entropy_coef must be a number, got '1e-2' (YAML reads"),
        ({"entropy_coef": -0.05}, "entropy_coef (the entropy bonus) must be a finite number >= 0, got -0.05"),
    ],
)
def test_a_params_section_gets_the_same_checks(values, message):  # noqa: ANN001
    """What params.yaml's `train` section sets reaches GAPOConfig without argparse's choices: the same one line."""
    from gapo.train import configs

    with pytest.raises(ValueError, match=re.escape(message)):
        configs({"model": "tiny-random", **values})


def _truncated_adapter(root: Path) -> list[str]:
    """`gapo sample` with an adapter whose weights file was cut short (its header promises more bytes)."""
    adapter = root / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": "x"}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (adapter / "adapter_model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    return ["sample", "--model", "tiny-random", "--adapter", str(adapter), "--prompt", "Hi", "-n", "2"]


#: Every bad input docs/training.md names (and `--max-steps` 0 and -3: transformers reads max_steps <= 0 as "train
#: num_train_epochs epochs"), as the `gapo` command a user types: (argv after `gapo`, the message).
SHELL_CASES = {
    "temperature 0": (["train", "--temperature", "0"], "temperature must be a finite number > 0"),
    "negative learning rate": (["train", "--learning-rate=-1e-4"], "learning_rate must be a finite number > 0"),
    "save-steps 0": (["train", "--save-steps", "0"], "save_steps must be a positive integer"),
    "max-steps 0": (["train", "--max-steps", "0"], "max_steps must be a positive integer (or -1"),
    "max-steps -3": (["train", "--max-steps", "-3"], "max_steps must be a positive integer (or -1"),
    "LoRA target the model lacks": (["train", "--lora-target-modules", "qkv_proj"], "are not modules of tiny-random"),
    "output-dir a file": (["train", "--output-dir", "{file}"], "is a file, not a directory"),
    "unknown model offline": (["train", "--model", "Some/Unknown-Model"], "offline models: embedded, tiny-random"),
    "truncated adapter": ("{truncated}", "truncated"),
}


@pytest.mark.parametrize("case", SHELL_CASES)
def test_bad_input_is_one_line_from_the_shell(case, tmp_path):  # noqa: ANN001
    """The real `gapo` command in its own process: exit 2, one line on stderr, and nothing written."""
    argv, message = SHELL_CASES[case]
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    if argv == "{truncated}":
        argv = _truncated_adapter(tmp_path) + ["--out", str(tmp_path / "out" / "samples.jsonl")]
    elif argv[0] == "train":
        given = [str(a_file) if a == "{file}" else a for a in argv[1:]]
        out = [] if "--output-dir" in given else ["--output-dir", str(tmp_path / "out")]
        argv = ["train", *TINY, *out, *given]
    gapo = Path(sys.executable).with_name("gapo")  # the console script pip installed beside this Python
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([str(gapo), *argv], capture_output=True, text=True, timeout=300, env=env)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("gapo: error: ") and message in lines[0], proc.stderr[-2000:]
    assert not (tmp_path / "out").exists() and a_file.read_text() == ""


def test_unknown_params_key_and_section(tmp_path, capsys):  # noqa: ANN001
    params = tmp_path / "params.yaml"
    params.write_text("train:\n  max_stepz: 3\n")
    assert main(["train", "--params", str(params)]) == 2
    assert "unknown keys" in capsys.readouterr().err
    assert main(["train", "--params", str(params), "--section", "nope"]) == 2
    assert "section 'nope' not in" in capsys.readouterr().err


@pytest.mark.timeout(600)
def test_train_in_bfloat16_takes_real_steps(tmp_path):  # noqa: ANN001
    """The policy's weights in bfloat16 (what `auto` picks on a CPU with bf16 units), LoRA weights in float32."""
    import torch
    from safetensors.torch import load_file

    out = tmp_path / "run"
    assert main(["train", *TINY, "--output-dir", str(out), "--max-steps", "2", "--policy-dtype", "bfloat16"]) == 0
    assert json.loads((out / "config.json").read_text())["policy_dtype"] == "bfloat16"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(torch.isfinite(torch.tensor([r["loss"], r["grad_norm"]])).all() for r in rows)
    weights = load_file(out / "adapter" / "adapter_model.safetensors")
    assert weights and all(w.dtype == torch.float32 and torch.isfinite(w).all() for w in weights.values())
    # (tiny-random answers nothing valid, so its rewards have no spread: the bf16 learning check is test_trainer's)


def read_steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.timeout(900)
def test_train_writes_outputs_and_resumes_after_a_kill(tmp_path):  # noqa: ANN001
    out = tmp_path / "run"
    # Each step is held for 0.5 s (a shim around GAPOTrainer.training_step), so on any machine the run is still going
    # when it is killed: tiny-random steps alone can all finish in the second between checkpoint-4 and the kill.
    slow = tmp_path / "slow_train.py"
    slow.write_text(
        "import sys, time\n"
        "from gapo.trainer import GAPOTrainer\n"
        "step = GAPOTrainer.training_step\n"
        "def held(self, *args, **kwargs):\n"
        "    time.sleep(0.5)\n"
        "    return step(self, *args, **kwargs)\n"
        "GAPOTrainer.training_step = held\n"
        "from gapo.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    cmd = [sys.executable, str(slow), "train", *TINY, "--output-dir", str(out), "--max-steps", "8", "--save-steps", "2"]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    while not (out / "checkpoint-4").exists():  # kill it mid-run, after two checkpoints
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.time() < deadline
        time.sleep(0.5)
    time.sleep(0.3)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "adapter").exists() and not (out / "metrics.json").exists()

    done = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "adapter" / "adapter_config.json").is_file()
    assert read_steps(out / "metrics.jsonl") == [1, 2, 3, 4, 5, 6, 7, 8]  # nothing lost beyond the last checkpoint
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["steps"] == 8 and "diversity/group_jsd" in summary["last"]
    assert not list(out.glob("*.partial*"))
    # A finished run is not silently overwritten.
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "already holds a finished run" in again.stderr


def test_a_retrained_adapter_is_the_same_bytes_whatever_hash_seed_and_offline_flag(tmp_path, same_adapter_folders):  # noqa: ANN001
    """What keeps the stages that read models/gapo current when train_gapo runs again with the same weights: every
    file of the adapter folder the same bytes, though PEFT keeps the target modules in a set (ordered by the process's
    string hash seed) and transformers writes HF_HUB_OFFLINE into the tokenizer's config as `local_files_only`."""
    folders = []
    for hash_seed, offline in (("1", "1"), ("2", "0")):
        out = tmp_path / hash_seed
        cmd = [sys.executable, "-m", "gapo.cli", "train", *TINY, "--output-dir", str(out), "--max-steps", "1"]
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, HF_HUB_OFFLINE=offline)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        folders.append(out / "adapter")
    same_adapter_folders(*folders)


@pytest.mark.parametrize("command", ["train", "sft", "data", "sample", "eval", "pipeline"])
def test_every_command_has_help_and_a_bad_flag_is_one_line(command, capsys):  # noqa: ANN001
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("usage: ")
    if command == "pipeline":  # its own parser: subcommands, argparse's usage on a bad flag (tests/test_pipeline.py)
        return
    assert main([command, "--no-such-flag", "1"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()  # `sample` names its missing required flags first
    assert captured.out == "" and line.startswith(f"gapo: error: gapo {command}: ")
    assert line.endswith(f"(see gapo {command} --help)") and ("--no-such-flag" in line or "required" in line)


def test_gapo_sft_is_a_command_from_the_shell(tmp_path):  # noqa: ANN001
    """`gapo sft` as README advertises it: a real process, a bad value is one line and nothing is written."""
    out = tmp_path / "sft"
    cmd = [sys.executable, "-m", "gapo.cli", "sft", "--no-params", "--steps", "many", "--output-dir", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "argument --steps: invalid int value: 'many'" in proc.stderr and not out.exists()
