"""tools/transfer_table.py: runs of a recipe grouped as seeds, before -> after, mean ± half the range."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import transfer_table  # noqa: E402


def _run(path: Path, seed: int, last: float) -> str:
    means = {k: 0.5 for k in transfer_table.COLUMNS}
    path.mkdir()
    summary = {"settings": {"seed": seed}, "means": {"0": means, "150": {**means, "heldin/jsd_valid": last}}}
    (path / "summary.json").write_text(json.dumps(summary))
    return str(path)


def test_seeds_of_a_recipe_are_averaged_with_their_band(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _run(tmp_path / "a", 0, 0.1), _run(tmp_path / "b", 1, 0.3)
    c = _run(tmp_path / "c", 0, 0.2)
    assert transfer_table.main([f"x={a}", f"x={b}", f"y={c}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    column = 4 + transfer_table.COLUMNS.index("heldin/jsd_valid")  # after "", recipe, seed, step
    cells = [[cell.strip() for cell in line.split("|")] for line in lines[2:]]
    assert [row[1:3] for row in cells] == [["x", "0"], ["x", "1"], ["x, mean of 2", "-"], ["y", "0"]]
    assert [row[column] for row in cells] == ["0.500 -> 0.100", "0.500 -> 0.300", "**0.200** ±0.100", "0.500 -> 0.200"]
    with pytest.raises(SystemExit):
        transfer_table.main([a])  # no RECIPE=
