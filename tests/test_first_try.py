"""`make try` (gapo.repro.first_try) on tiny-random: the three real `gapo` commands, the tables, the picture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gapo.repro import first_try
from gapo.tasks.lists import FORMAT_INSTRUCTION


def test_training_rows_ask_as_the_evaluation_asks() -> None:
    rows = first_try.training_rows(("planets",), per_list=3)
    assert len(rows) == 3 and rows[0]["items"][0] == "Mercury"
    (message,) = rows[0]["prompt"]
    assert message["role"] == "user" and message["content"].startswith("Please select one of the items: [Mercury,")
    assert FORMAT_INSTRUCTION in message["content"]


@pytest.mark.timeout(600)
def test_first_try_runs_its_three_commands(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "try"
    assert first_try.main(["--out", str(out), "--model", "tiny-random", "--steps", "1", "-n", "2"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("$ gapo ") == 3 and "--compare tiny-random:" in printed
    assert (out / "try.png").stat().st_size > 0 and (out / "gapo" / "adapter" / "adapter_config.json").is_file()
    doc = json.loads((out / "compare" / "eval.json").read_text())
    assert list(doc["models"]) == ["tiny-random", f"tiny-random:{out / 'gapo' / 'adapter'}"]
    table = (out / "table.txt").read_text().splitlines()
    assert [line.split()[:2] for line in table[-3:]] == [["planets", "yes"], ["colors", "yes"], ["flowers", "no"]]
    assert all(line.count("->") == 4 for line in table[-3:])
    # A finished try is not overwritten: one line, before anything runs.
    with pytest.raises(SystemExit) as refused:
        first_try.main(["--out", str(out), "--model", "tiny-random"])
    assert refused.value.code == 2 and "holds an earlier try" in capsys.readouterr().err
