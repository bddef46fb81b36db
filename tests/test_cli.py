"""`gapo train` from the command line: one-line errors before any model loads, outputs, and resume after a kill."""

from __future__ import annotations

import json
import os
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
    ],
)
def test_bad_input_is_one_line_before_loading(flags, message, tmp_path, capsys, monkeypatch):  # noqa: ANN001
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "run"
    assert main(["train", *TINY, "--output-dir", str(out), "--max-steps", "1", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gapo: error: ") and message in err[0]
    assert not (out / "adapter").exists()


def test_unknown_params_key_and_section(tmp_path, capsys):  # noqa: ANN001
    params = tmp_path / "params.yaml"
    params.write_text("train:\n  max_stepz: 3\n")
    assert main(["train", "--params", str(params)]) == 2
    assert "unknown keys" in capsys.readouterr().err
    assert main(["train", "--params", str(params), "--section", "nope"]) == 2
    assert "section 'nope' not in" in capsys.readouterr().err


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
