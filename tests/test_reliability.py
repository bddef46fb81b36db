"""Nothing lost: kill -9 at many points of `gapo train` then `--resume`, torn files, early one-line errors.

The kill test runs a real `gapo train` subprocess on tiny-random through a shim that holds each step and each
checkpoint save (between the weights and trainer_state.json, where transformers' own save is not atomic), so kills land
during saves as well as between them, on any machine speed.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gapo import checkpoints
from gapo import train as train_mod
from gapo.cli import main

TINY = [
    "--no-params",
    "--model",
    "tiny-random",
    "--num-prompts",
    "8",
    "--num-generations",
    "2",
    "--per-device-train-batch-size",
    "2",
    "--max-completion-length",
    "4",
    "--lora-r",
    "2",
    "--lora-alpha",
    "4",
    "--learning-rate",
    "1e-3",
]

SHIM = """
import sys, time
from gapo.trainer import GAPOTrainer
step, save = GAPOTrainer.training_step, GAPOTrainer._save_optimizer_and_scheduler
def held_step(self, *args, **kwargs):
    time.sleep(0.2)
    return step(self, *args, **kwargs)
def held_save(self, *args, **kwargs):  # the weights are written, trainer_state.json is not yet
    time.sleep(0.6)
    return save(self, *args, **kwargs)
GAPOTrainer.training_step, GAPOTrainer._save_optimizer_and_scheduler = held_step, held_save
from gapo.cli import main
sys.exit(main(sys.argv[1:]))
"""

MAX_STEPS = 10


def _partial_checkpoint(out: Path, since: float) -> Path | None:
    """A checkpoint being written (no trainer_state.json yet) that was started after `since`."""
    return next(
        (
            p
            for p in out.glob("checkpoint-*")
            if not (p / "trainer_state.json").exists() and p.exists() and p.stat().st_mtime > since
        ),
        None,
    )


def _wait_for_partial_checkpoint(proc: subprocess.Popen, out: Path, since: float, skip: int, timeout: float) -> bool:
    """Wait until the run is inside its (`skip`+1)-th checkpoint save since `since`."""
    deadline, seen = time.time() + timeout, set()
    while time.time() < deadline and proc.poll() is None:
        partial = _partial_checkpoint(out, since)
        if partial is not None:
            seen.add(partial.name)
            if len(seen) > skip:
                return True
        time.sleep(0.03)
    return False


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_kill_at_ten_points_and_resume_each_time(tmp_path: Path) -> None:
    """SIGKILL a run 10 times (during start-up, during checkpoint saves, at random points); each --resume continues
    from the newest complete checkpoint, and the last one finishes the run with every step logged once."""
    rng = random.Random(12)
    shim = tmp_path / "shim.py"
    shim.write_text(SHIM)
    out = tmp_path / "run"
    cmd = [sys.executable, str(shim), "train", *TINY, "--output-dir", str(out)]
    cmd += ["--max-steps", str(MAX_STEPS), "--save-steps", "2", "--save-total-limit", "2"]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    kills: list[dict] = []
    expected_start: Path | None = None  # the checkpoint the next --resume must continue from
    attempt = 0
    while len(kills) < 10:
        attempt += 1
        assert attempt < 40, f"could not place 10 kills: {kills}"
        log = tmp_path / f"stderr-{attempt}.txt"
        spawned = time.time()
        with open(log, "w") as err:
            proc = subprocess.Popen([*cmd, "--resume"], env=env, stdout=subprocess.DEVNULL, stderr=err)
        if len(kills) == 1:  # once during start-up, before the run has looked at its checkpoints
            time.sleep(rng.uniform(0.5, 2.0))
            hit = proc.poll() is None
        else:  # the others once the resume has taken effect: during the next save, or at a random later point
            assert _wait_for_log(proc, log, RESUMED, timeout=120), log.read_text()[-3000:]
            if len(kills) % 2 == 0:
                hit = _wait_for_partial_checkpoint(proc, out, spawned, skip=rng.randint(0, 2), timeout=120)
                time.sleep(rng.uniform(0.0, 0.3))
            else:
                time.sleep(rng.uniform(0.0, 4.0))
                hit = proc.poll() is None
        if proc.poll() is not None:  # finished (or failed) before the kill: it must have succeeded; start afresh
            assert proc.returncode == 0, log.read_text()[-3000:]
            assert not hit
            _check_resumed_from(log, expected_start)
            _check_finished(out)
            out.rename(tmp_path / f"finished-{attempt}")
            expected_start = None
            continue
        partial = _partial_checkpoint(out, spawned)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        resumed = _check_resumed_from(log, expected_start, required=False)
        expected_start = checkpoints.last_checkpoint(out)
        kills.append({"during_save": partial is not None, "resumed_before": resumed, "next_from": expected_start})
    print("kills:", *kills, sep="\n  ")  # shown with -s: where each kill landed and where the next run resumed
    assert sum(k["during_save"] for k in kills) >= 4, kills  # these tore a checkpoint save
    assert sum(k["resumed_before"] for k in kills) >= 9, kills  # every run but the start-up kill had resumed
    assert len({k["next_from"] for k in kills}) >= 3, kills  # killed at different stages of the run
    log = tmp_path / "stderr-final.txt"
    done = subprocess.run([*cmd, "--resume"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log.write_text(done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    _check_resumed_from(log, expected_start)
    _check_finished(out)


#: What `gapo train --resume` logs once it has chosen where to continue.
RESUMED = ("--resume: continuing from", "--resume: no complete checkpoint")


def _wait_for_log(proc: subprocess.Popen, log: Path, needles: tuple[str, ...], timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if any(n in log.read_text() for n in needles):
            return True
        time.sleep(0.05)
    return any(n in log.read_text() for n in needles)


def _check_resumed_from(log: Path, checkpoint: Path | None, required: bool = True) -> bool:
    """Whether the run got as far as choosing its checkpoint; if so, it chose `checkpoint` (the newest complete)."""
    text = log.read_text()
    assert "Traceback" not in text and "error" not in text.lower(), text[-3000:]
    if not any(n in text for n in RESUMED):
        assert not required, text[-2000:]
        return False
    expected = f"continuing from {checkpoint}\n" if checkpoint is not None else "no complete checkpoint"
    assert expected in text, text[-2000:]
    return True


def _check_finished(out: Path) -> None:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, MAX_STEPS + 1))  # each step once, none lost or repeated
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    assert json.loads((out / "metrics.json").read_text())["steps"] == MAX_STEPS
    assert not list(out.glob("*.partial*"))
    assert all(checkpoints.checkpoint_problem(p) is None for p in out.glob("checkpoint-*"))


# --------------------------------------------------------------------------------------------------------------------
# Checkpoints and metrics torn by a kill (files as a kill leaves them)
# --------------------------------------------------------------------------------------------------------------------


def _fake_checkpoint(path: Path, step: int, state: str | None = None, weights: bytes | None = None) -> Path:
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    save_file({"w": __import__("torch").zeros(4)}, str(path / "adapter_model.safetensors"))
    if weights is not None:
        (path / "adapter_model.safetensors").write_bytes(weights)
    if state is None:
        state = json.dumps({"global_step": step})
    if state:
        (path / "trainer_state.json").write_text(state)
    return path


def test_resume_takes_the_newest_complete_checkpoint_and_names_the_skipped(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    good = _fake_checkpoint(tmp_path / "checkpoint-2", 2)
    whole = (good / "adapter_model.safetensors").read_bytes()
    _fake_checkpoint(tmp_path / "checkpoint-4", 4, state="")  # killed before trainer_state.json
    _fake_checkpoint(tmp_path / "checkpoint-6", 6, state='{"global_step": 6, "log_hi')  # torn state
    _fake_checkpoint(tmp_path / "checkpoint-8", 8, weights=whole[:-3])  # truncated weights
    _fake_checkpoint(tmp_path / "checkpoint-10", 10, state=json.dumps({"global_step": 8}))  # another step's state
    with caplog.at_level(logging.WARNING, logger="gapo.train"):
        assert checkpoints.last_checkpoint(tmp_path) == good
    skipped = [r.getMessage() for r in caplog.records if "skipping incomplete checkpoint" in r.getMessage()]
    assert len(skipped) == 4 and all(str(tmp_path) in m for m in skipped)
    assert "no trainer_state.json" in " ".join(skipped) and "truncated" in " ".join(skipped)
    checkpoints.remove_incomplete(tmp_path, good)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2"]


def test_torn_last_metrics_line_is_dropped_with_a_warning_naming_the_file(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.4}\n{"step": 3, "lo')
    with caplog.at_level(logging.WARNING, logger="gapo.train"):
        assert [r["step"] for r in train_mod.read_metrics(path)] == [1, 2]
    assert any(str(path) in r.getMessage() and "torn last line" in r.getMessage() for r in caplog.records)
    train_mod._trim_metrics(path, 2)
    assert path.read_text() == '{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.4}\n'
    assert train_mod.summarize(path)["steps"] == 2
    path.write_text('{"step": 1}\n{"st\n{"step": 3}\n')  # not a kill's doing: an error naming file and line
    with pytest.raises(ValueError, match=r"metrics\.jsonl: line 2 is not JSON"):
        train_mod.read_metrics(path)


# --------------------------------------------------------------------------------------------------------------------
# One line, before any model loads, and nothing left behind
# --------------------------------------------------------------------------------------------------------------------


def _one_line_error(capsys, *fragments: str) -> str:  # noqa: ANN001
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gapo: error: "), err
    assert all(f in err[0] for f in fragments), err[0]
    return err[0]


@pytest.mark.parametrize(
    ("flags", "fragments"),
    [
        (["--temperature", "0"], ["temperature must be a finite number > 0"]),
        (["--learning-rate=-1e-4"], ["learning_rate must be a finite number > 0"]),
        (["--save-steps", "0"], ["save_steps must be a positive integer"]),
        (["--logging-steps", "0"], ["logging_steps must be a positive integer"]),
        (["--lora-target-modules", "q_proj,qkv_proj"], ["['qkv_proj'] are not modules of tiny-random", "o_proj"]),
        (["--model", "Some/Unknown-Model"], ["unknown model 'Some/Unknown-Model'", "HF_HUB_OFFLINE=0"]),
    ],
)
def test_train_rejects_bad_values_before_the_model_loads(flags, fragments, tmp_path, capsys, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # offline is gapo's default: no minute of hub retries
    out = tmp_path / "run"
    start = time.time()
    assert main(["train", *TINY, "--output-dir", str(out), "--max-steps", "1", *flags]) == 2
    assert time.time() - start < 30
    _one_line_error(capsys, *fragments)
    assert not out.exists()


def test_output_dir_naming_a_file(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    assert main(["train", *TINY, "--output-dir", str(target), "--max-steps", "1"]) == 2
    _one_line_error(capsys, "is a file, not a directory")
    assert target.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_data_out_naming_a_directory_leaves_nothing(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    target = tmp_path / "data"
    target.mkdir()
    assert main(["data", "--no-params", "--num-prompts", "4", "--out", str(target)]) == 2
    _one_line_error(capsys, "is a directory", "train.jsonl")
    assert not list(tmp_path.rglob("*partial*")) and not list(target.iterdir())


def test_unknown_model_fails_within_seconds_as_a_subprocess(tmp_path: Path) -> None:
    """A real `gapo train` with HF_HUB_OFFLINE unset: one line, exit 2, no output directory."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    out = tmp_path / "run"
    start = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "gapo.cli", "train", *TINY, "--model", "Org/NoSuchModel", "--output-dir", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and time.time() - start < 30
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown model 'Org/NoSuchModel'" in lines[0], done.stderr
    assert not out.exists()


def test_truncated_adapter_is_one_line_before_loading(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from peft import LoraConfig, get_peft_model

    from gapo.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer("tiny-random", device="cpu")
    adapter = tmp_path / "adapter"
    get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(str(adapter))
    capsys.readouterr()  # the set-up's own loading progress
    weights = adapter / "adapter_model.safetensors"
    whole = weights.read_bytes()
    out = tmp_path / "samples.jsonl"
    argv = ["sample", "--model", "tiny-random", "--adapter", str(adapter), "--prompt", "hi", "-n", "1"]
    for damaged, fragment in ((whole[: len(whole) // 2], "truncated"), (b"\xff" * 64 + whole[64:], "header")):
        weights.write_bytes(damaged)
        assert main([*argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "adapter_model.safetensors is" in err[0] and fragment in err[0], err
        assert not out.exists() and not list(tmp_path.glob(".*partial*"))
    (adapter / "adapter_config.json").write_text("{")
    assert main([*argv, "--out", str(out)]) == 2
    assert "adapter_config.json is not valid JSON" in capsys.readouterr().err


def test_resume_removes_the_adapter_temp_a_killed_save_left(tmp_path: Path) -> None:
    from gapo.checkpoints import remove_incomplete
    from gapo.io import atomic_dir

    script = "import os, sys\nfrom gapo.io import atomic_dir\nwith atomic_dir(sys.argv[1]):\n    os._exit(9)\n"
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "adapter")], check=False)
    assert len(list(tmp_path.iterdir())) == 1  # the temp directory the killed save left
    (tmp_path / "metrics.jsonl").write_text("")
    remove_incomplete(tmp_path, None)
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]
    with atomic_dir(tmp_path / "adapter"):
        pass
    remove_incomplete(tmp_path, None)  # a finished adapter is kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "metrics.jsonl"]
