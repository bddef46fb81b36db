"""tools/pipeline_sft.py: the pipeline's SFT at another size or schedule, a real run on tiny-random."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import pipeline_sft  # noqa: E402

from gapo.io import write_jsonl_atomic  # noqa: E402
from gapo.tasks.lists import list_selection_rows  # noqa: E402


def _rows(tmp_path: Path) -> Path:
    path = tmp_path / "train.jsonl"
    write_jsonl_atomic(path, list_selection_rows(2, seed=0, min_items=3, max_items=3))
    return path


@pytest.mark.timeout(600)
def test_a_run_trains_the_params_sft_with_its_overrides_and_records_the_schedule(tmp_path: Path) -> None:
    out = tmp_path / "sft"
    flags = ["--set", "model=tiny-random", "--set", "steps=3", "--set", "lr_scheduler_type=cosine"]
    assert pipeline_sft.main([*flags, "--seed", "1", "--rows", str(_rows(tmp_path)), "--out", str(out)]) == 0
    record = json.loads((out / "record.json").read_text())
    assert record["settings"]["seed"] == 1 and record["settings"]["steps"] == 3
    # params.yaml's sft section under the overrides: its learning rate, the cosine from it down
    rates = record["learning_rates"]
    assert rates[0] == record["settings"]["learning_rate"] and rates[0] > rates[1] > rates[2] > 0
    assert len(record["losses"]) == 3 and record["seconds"] > 0
    assert (out / "adapter" / "adapter_config.json").is_file()
    # trained in a temp folder that became OUT: the adapter's own record names where it lies now
    assert json.loads((out / "adapter" / "sft_config.json").read_text())["config"]["output_dir"] == str(out / "adapter")


@pytest.mark.timeout(600)
def test_merged_writes_the_model_gapo_trains_on_after_the_sft(tmp_path: Path) -> None:
    import torch

    from gapo.models import load_model_and_tokenizer

    out = tmp_path / "sft"
    flags = ["--set", "model=tiny-random", "--set", "steps=2", "--set", "learning_rate=0.05", "--merged"]
    assert pipeline_sft.main([*flags, "--rows", str(_rows(tmp_path)), "--out", str(out)]) == 0
    assert json.loads((out / "record.json").read_text())["merged_seconds"] >= 0
    # OUT/model is the base with the adapter in its weights: the same logits as the base under the adapter, and not
    # the base's own (a real change: a large learning rate, two steps)
    merged, tokenizer = load_model_and_tokenizer(str(out / "model"))
    adapted, _ = load_model_and_tokenizer("tiny-random", adapter=str(out / "adapter"))
    base, _ = load_model_and_tokenizer("tiny-random")
    ids = tokenizer("Pick one: red, green, blue.", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = [m(ids).logits for m in (merged, adapted, base)]
    assert torch.allclose(logits[0], logits[1], atol=1e-4)
    assert not torch.allclose(logits[0], logits[2], atol=1e-3)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--set", "steps=0"], "steps must be positive"),
        (["--set", "lr_scheduler_type=step"], "lr_scheduler_type must be one of"),
        (["--set", "seed=3"], "--set seed=... is this tool's own"),
        (["--set", "steps"], "--set takes KEY=VALUE"),
        (["--rows", "no/such.jsonl"], "--rows no/such.jsonl is not a file"),
    ],
)
def test_bad_input_is_one_line_before_anything_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    out = tmp_path / "sft"
    with pytest.raises(SystemExit) as exit_:
        pipeline_sft.main([*flags, "--out", str(out)])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()


def test_an_existing_out_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        pipeline_sft.main(["--out", str(tmp_path)])
    assert "exists: give a new folder" in capsys.readouterr().err


def test_an_empty_rows_file_is_one_line_before_anything_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(SystemExit):
        pipeline_sft.main(["--rows", str(empty), "--out", str(tmp_path / "sft")])
    assert "has no rows to train on" in capsys.readouterr().err
    assert not (tmp_path / "sft").exists()


@pytest.mark.timeout(600)
def test_a_run_killed_part_way_leaves_no_out_folder(tmp_path: Path) -> None:
    out = tmp_path / "sft"
    command = [sys.executable, str(REPO / "tools" / "pipeline_sft.py"), "--set", "model=tiny-random"]
    command += ["--set", "steps=100000", "--set", "log_every=1", "--rows", str(_rows(tmp_path)), "--out", str(out)]
    process = subprocess.Popen(command, cwd=REPO, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    trained = False
    for line in process.stderr:  # killed once it trains: its second step logged
        if line.startswith("sft step 2/"):
            trained = True
            break
    process.kill()
    process.wait()
    assert trained and process.returncode != 0
    assert not out.exists()  # so the same command starts the run again
