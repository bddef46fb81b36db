"""The README's results table is generated from metrics/ (gapo.repro.report), and the committed one is in sync."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gapo.repro import report

ROOT = Path(__file__).resolve().parents[1]


def test_committed_readme_table_is_what_committed_metrics_render_to() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert report.SUMMARY_BEGIN in readme and report.SUMMARY_END in readme  # so --check covers the summary too
    assert report.main(["--root", str(ROOT), "--check"]) == 0


def _metrics(jsd: dict[str, float], ci: tuple[float, float], gapo_acc: float) -> dict:
    models = {m: {"mean_jsd": v, "mean_invalid": 0.1} for m, v in jsd.items()}
    bench = {
        "baseline": {"gsm8k": {"flexible": 0.5, "flexible_ci_low": ci[0], "flexible_ci_high": ci[1]}},
        "gapo": {"gsm8k": {"flexible": gapo_acc}},
    }
    return {"uniformity": {"models": models}, "benchmarks": {"models": bench}}


def _row(table: str, claim: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(f"| {claim}"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_verdicts_follow_the_goals() -> None:
    good = _metrics(
        {"baseline": 0.4, "gapo": 0.08, "sft": 0.2, "min_p_0_05": 0.41, "min_p_0_1": 0.42}, (0.4, 0.6), 0.45
    )
    table = report.results_table(good)
    assert _row(table, "lists: mean JSD")[-1] == "yes"
    assert _row(table, "lists: mean JSD")[1].startswith("0.400 -> **0.080** (SFT 0.200")
    gsm = _row(table, "coherence: GSM8K")
    assert gsm[1] == "0.500 [0.400, 0.600] -> **0.450**" and gsm[-1] == "yes"
    # GAPO at 0.12 is not below 0.10; GAPO accuracy outside the base's interval
    bad = _metrics({"baseline": 0.4, "gapo": 0.12, "sft": 0.2, "min_p_0_05": 0.41, "min_p_0_1": 0.42}, (0.4, 0.6), 0.3)
    table = report.results_table(bad)
    assert _row(table, "lists: mean JSD")[-1] == "**no**" and _row(table, "coherence: GSM8K")[-1] == "**no**"
    # accuracy above the base's interval still holds (the paper's claim is no drop)
    jsd = {"baseline": 0.4, "gapo": 0.12, "sft": 0.2, "min_p_0_05": 0.41, "min_p_0_1": 0.42}
    better = _metrics(jsd, (0.4, 0.6), 0.9)
    assert _row(report.results_table(better), "coherence: GSM8K")[-1] == "yes"
    # a stage that has not written its metric renders as "not run", never as a number
    assert _row(table, "target distributions")[-1] == "not run"
    assert "not run -> **not run**" in _row(table, "target distributions")[1]
    # a row the issue sets no goal for (the paper's Unique@n) carries no verdict either
    assert _row(table, "open set: Unique@n")[-2:] == ["-", "-"]


def test_stage_times_read_papermill_durations_and_the_total_is_checked_against_the_budget(tmp_path: Path) -> None:
    notebooks = tmp_path / "outputs" / "notebooks"
    notebooks.mkdir(parents=True)
    for name, seconds in (("00_data.ipynb", 12.34), ("01_bias.ipynb", 9000.0)):
        (notebooks / name).write_text(json.dumps({"metadata": {"papermill": {"duration": seconds}}, "cells": []}))
    (notebooks / "02_train_gapo.ipynb").write_text(json.dumps({"metadata": {}, "cells": []}))  # no duration: left out
    stage_of = {"00_data.ipynb": "generate", "01_bias.ipynb": "bias", "02_train_gapo.ipynb": "train_gapo"}
    assert report.stage_times(notebooks, stage_of) == {"generate": 12.3, "bias": 9000.0}
    (tmp_path / "metrics").mkdir()
    assert report.main(["--root", str(tmp_path)]) == 0  # no README in a workspace: the table goes to results/
    times = json.loads((tmp_path / "metrics" / "stage_times.json").read_text())
    assert times["stages"] == {"generate": 12.3, "bias": 9000.0} and times["total_minutes"] == 150.2
    table = (tmp_path / "results" / "results_table.md").read_text()
    assert "total **150.2** (budget 150: **over**)" in table


def test_readme_section_is_replaced_between_markers_and_missing_markers_are_one_line(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    text = f"intro\n{report.BEGIN}\nold\n{report.END}\noutro\n"
    assert report.replace_section(text, "new\n") == f"intro\n{report.BEGIN}\nnew\n{report.END}\noutro\n"
    (tmp_path / "metrics").mkdir()
    (tmp_path / "README.md").write_text("no markers here\n")
    assert report.main(["--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gapo report: error: README must hold the markers") and "\n" not in err
    (tmp_path / "metrics" / "uniformity.json").write_text("{torn")
    assert report.main(["--root", str(tmp_path), "--check"]) == 2
    assert "uniformity.json: not valid JSON" in capsys.readouterr().err


def test_check_fails_when_the_readme_was_edited_by_hand(tmp_path: Path) -> None:
    (tmp_path / "metrics").mkdir()
    (tmp_path / "README.md").write_text(f"{report.BEGIN}\n| hand-written | 0.01 |\n{report.END}\n")
    assert report.main(["--root", str(tmp_path), "--check"]) == 1
    assert report.main(["--root", str(tmp_path)]) == 0
    assert report.main(["--root", str(tmp_path), "--check"]) == 0


def test_summary_counts_the_rows_with_a_goal_and_names_the_missed_ones(tmp_path: Path) -> None:
    good = _metrics({"baseline": 0.4, "gapo": 0.08, "sft": 0.2, "min_p_0_05": 0.41, "min_p_0_1": 0.42}, (0.4, 0.6), 0.3)
    table = report.results_table(good)
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:] if line]
    goals = [row for row in rows if len(row) == 5 and row[-2] != "-"]  # the rows that set a goal, as the table shows
    summary = report.results_summary(good)
    assert summary.startswith(f"**2 of {len(goals)} goals reached**; not reached: coherence: GSM8K flexible-extract;")
    assert "; not run: lists: mean JSD from uniform among valid answers;" in summary  # the claim up to " ("
    assert "lists: mean JSD from uniform on unseen lists" not in summary  # reached: not named
    assert summary.endswith(".\n") and summary.count("\n") == 1
    assert summary.count(";") == len(goals) - 2  # every row with a goal but the two reached, named once
    # main() writes it between its own markers, which are optional; --check then compares it too
    (tmp_path / "metrics").mkdir()
    readme = tmp_path / "README.md"
    readme.write_text(f"{report.SUMMARY_BEGIN}\nold\n{report.SUMMARY_END}\n{report.BEGIN}\n{report.END}\n")
    assert report.main(["--root", str(tmp_path), "--check"]) == 1
    assert report.main(["--root", str(tmp_path)]) == 0
    assert readme.read_text().startswith(f"{report.SUMMARY_BEGIN}\n**0 of 13 goals reached**; not run: lists:")
    assert report.main(["--root", str(tmp_path), "--check"]) == 0
    readme.write_text(readme.read_text() + report.SUMMARY_END + "\n")  # a marker twice: one line, exit 2
    assert report.main(["--root", str(tmp_path), "--check"]) == 2


@pytest.mark.parametrize("path", ["uniformity:models/gapo/mean_jsd", "nofile:models/x", "uniformity:models/gapo/flag"])
def test_value_is_none_for_absent_or_non_numeric_entries(path: str) -> None:
    metrics = {"uniformity": {"models": {"gapo": {"flag": True}}}}
    assert report.value(metrics, path) is None


def test_coherence_rows_show_the_paired_difference_interval() -> None:
    metrics = _metrics({"baseline": 0.4, "gapo": 0.3}, (0.4, 0.6), 0.45)
    metrics["benchmarks"]["models"]["gapo"]["gsm8k"].update(
        {"flexible_diff": -0.05, "flexible_diff_ci_low": -0.12, "flexible_diff_ci_high": 0.02}
    )
    cell = _row(report.results_table(metrics), "coherence: GSM8K")[1]
    assert cell.endswith("(difference -0.050 [-0.120, 0.020])")


def test_format_and_distribution_rows_issue_19() -> None:
    metrics = _metrics({"baseline": 0.4, "gapo": 0.3}, (0.4, 0.6), 0.45)
    models = metrics["uniformity"]["models"]
    models["baseline"].update(mean_jsd_valid=0.30, mean_jsd_prefilled=0.37, mean_top_share=0.2)
    models["gapo"].update(mean_jsd_valid=0.15, mean_jsd_prefilled=0.30, mean_top_share=0.18)
    models["gapo"].update(mean_jsd_valid_ci_low=0.12, mean_jsd_valid_ci_high=0.19)
    table = report.results_table(metrics)
    valid = _row(table, "lists: mean JSD from uniform among valid answers")
    assert valid[1] == "0.300 -> **0.150 [0.120, 0.190]** (SFT not run)" and valid[-1] == "yes"  # 0.15 <= 0.5 * 0.30
    assert _row(table, "lists: mean JSD from uniform with `<answer>` pre-filled")[-1] == "**no**"  # 0.07 below, not 0.1
    assert _row(table, "lists: invalid answers")[1] == "0.100 -> **0.100**"
    assert _row(table, "lists: the top item's share")[1] == "0.200 -> **0.180**"
    models["gapo"]["mean_jsd_prefilled"] = 0.27
    assert _row(report.results_table(metrics), "lists: mean JSD from uniform with `<answer>`")[-1] == "yes"
    del models["gapo"]["mean_jsd_valid"]  # an old run without the key: "not run", as any metric not written
    assert _row(report.results_table(metrics), "lists: mean JSD from uniform among valid")[-1] == "not run"


def test_heldin_rows_issue_34() -> None:
    """The held-in lists' numbers sit nested under each model (models/<name>/heldin/...), with their intervals."""
    metrics = _metrics({"baseline": 0.4, "gapo": 0.3}, (0.4, 0.6), 0.45)
    models = metrics["uniformity"]["models"]
    row = "lists, held-in (GAPO's training categories"
    assert _row(report.results_table(metrics), row)[-1] == "not run"  # a run before issue 34: no held-in lists
    models["baseline"]["heldin"] = {"mean_jsd": 0.3, "mean_jsd_valid": 0.12}
    models["gapo"]["heldin"] = {
        "mean_jsd": 0.1,
        "mean_jsd_ci_low": 0.08,
        "mean_jsd_ci_high": 0.13,
        "mean_jsd_valid": 0.07,
    }
    models["sft"] = {"heldin": {"mean_jsd": 0.2, "mean_jsd_valid": 0.11}}
    table = report.results_table(metrics)
    assert _row(table, row)[1] == "0.300 -> **0.100 [0.080, 0.130]** (SFT 0.200)" and _row(table, row)[-1] == "yes"
    assert _row(table, "lists, held-in: mean JSD from uniform among valid")[1:] == [
        "0.120 -> **0.070** (SFT 0.110)", "-", "-", "-"
    ]  # fmt: skip
    models["gapo"]["heldin"]["mean_jsd"] = 0.101
    assert _row(report.results_table(metrics), row)[-1] == "**no**"
