"""tools/train_log_windows.py: window means on known logs, and its one-line refusals."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("train_log_windows", ROOT / "tools/train_log_windows.py")
windows = importlib.util.module_from_spec(spec)
sys.modules["train_log_windows"] = windows
spec.loader.exec_module(windows)


def test_window_means_known_values() -> None:
    frame = pd.DataFrame({"step": range(1, 8), "jsd": [1.0, 3.0, 5.0, 7.0, 2.0, 4.0, 9.0]}).set_index("step")
    out = windows.window_means(frame, ["jsd"], 3)
    assert list(out.index) == ["1-3", "4-6", "7-9"]
    assert out["jsd"].tolist() == [3.0, 13.0 / 3, 9.0]


def test_two_logs_side_by_side(tmp_path, capsys) -> None:  # noqa: ANN001
    csv = tmp_path / "a.csv"
    pd.DataFrame({"policy": ["p", "p", "q"], "step": [1, 2, 1], "x": [0.2, 0.4, 9.0]}).to_csv(csv, index=False)
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_text("".join(json.dumps({"step": s, "x": v}) + "\n" for s, v in [(1, 1.0), (2, 2.0), (3, 3.0)]))
    windows.main([f"a={csv}", f"b={jsonl}", "--columns", "x", "--window", "2", "--policy", "p"])
    lines = capsys.readouterr().out.splitlines()
    assert "a x" in lines[0] and "b x" in lines[0]
    row1 = [c.strip() for c in lines[2].split("|")]
    assert row1[1:4] == ["1-2", "0.3", "1.5"]
    row2 = [c.strip() for c in lines[3].split("|")]
    assert row2[1:4] == ["3-4", "nan", "3"]


def test_refusals(tmp_path) -> None:  # noqa: ANN001
    log = tmp_path / "a.csv"
    pd.DataFrame({"step": [1], "x": [0.0]}).to_csv(log, index=False)
    with pytest.raises(ValueError, match="columns not in the log: y"):
        windows.main([f"a={log}", "--columns", "y"])
    with pytest.raises(SystemExit):
        windows.main([str(log)])
    with pytest.raises(SystemExit):
        windows.main([f"a={log}", "--window", "0"])
