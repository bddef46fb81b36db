"""tools/uniformity_from_distribution.py: issue 19's metrics recomputed from answer counts, on known counts and on the
committed run (where they must equal what the uniformity stage wrote to metrics/uniformity.json)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "uniformity_from_distribution", ROOT / "tools/uniformity_from_distribution.py"
)
tool = importlib.util.module_from_spec(spec)
sys.modules["uniformity_from_distribution"] = tool
spec.loader.exec_module(tool)


def counts(model: str, category: str, pairs: list[tuple[str, int]]) -> pd.DataFrame:
    return pd.DataFrame([{"model": model, "category": category, "item": i, "count": c} for i, c in pairs])


def test_known_counts() -> None:
    # 4 items, 10 answers: 6 on the first item, 2 on the second, 2 invalid.
    frame = counts("m", "toys", [("ball", 6), ("doll", 2), ("kite", 0), ("yoyo", 0), ("NV", 2)])
    row = tool.per_list(frame).iloc[0]
    assert row["invalid"] == pytest.approx(0.2)
    assert row["top_share"] == pytest.approx(0.6)  # of all 10 samples
    assert row["first_item_share"] == pytest.approx(6 / 8)  # of the valid ones
    assert row["num_items"] == 4
    assert bool(row["collapsed"])  # 0.6 > 2/4 + 0.05
    # the valid answers' shares (0.75, 0.25, 0, 0) against uniform, in bits: JSD = H(M) - (H(P) + H(U)) / 2
    m = [(0.75 + 0.25) / 2, (0.25 + 0.25) / 2, 0.125, 0.125]
    h = lambda p: -sum(x * math.log2(x) for x in p if x > 0)  # noqa: E731
    assert row["jsd_valid"] == pytest.approx(h(m) - (h([0.75, 0.25]) + 2.0) / 2, abs=1e-9)


def test_uniform_counts_are_not_collapsed() -> None:
    frame = counts("m", "abc", [("a", 5), ("b", 5), ("c", 5), ("NV", 0)])
    row = tool.per_list(frame).iloc[0]
    assert row["jsd_valid"] == pytest.approx(0.0, abs=1e-12) and row["jsd"] == pytest.approx(0.0, abs=1e-12)
    assert not bool(row["collapsed"])


def test_recomputed_means_equal_the_committed_stage_metrics() -> None:
    means = tool.summary(tool.per_list(pd.read_csv(ROOT / "results/uniformity_distribution.csv")))
    metrics = json.loads((ROOT / "metrics/uniformity.json").read_text())["models"]
    for model, summary in metrics.items():
        for ours, theirs in [
            ("invalid", "mean_invalid"),
            ("jsd", "mean_jsd"),
            ("jsd_valid", "mean_jsd_valid"),
            ("top_share", "mean_top_share"),
            ("first_item_share", "mean_first_item_share"),
        ]:
            assert means.loc[model, ours] == pytest.approx(summary[theirs], abs=1e-9), (model, ours)


def test_a_bad_file_spec_is_one_line(capsys) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit):
        tool.main(["no-equals-sign"])
    assert "a file is NAME=PATH" in capsys.readouterr().err
