"""tools/transfer_table.py: runs of a recipe grouped as seeds, before -> after, mean ± half the range."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import transfer_table  # noqa: E402


def _run(
    path: Path, seed: int | None, last: float, steps: tuple[int, ...] = (0, 150), sets: tuple[str, ...] = ()
) -> str:
    """A run's folder: curve.csv with two lists a set at `steps` (heldin/jsd_valid at the last is `last` on
    average; `sets` scored besides the three), and summary.json with its seed unless `seed` is None (a run cut short
    before writing one)."""
    path.mkdir()
    rows = ["step,set,list,jsd,jsd_valid,invalid,top_share"]
    for step in steps:
        for name in (*transfer_table.SETS, *sets):
            for offset in (-0.05, 0.05):
                jsd_valid = last + offset if (step, name) == (steps[-1], "heldin") else 0.5
                rows.append(f"{step},{name},{name}{offset},0.5,{jsd_valid},0.5,0.5")
    (path / "curve.csv").write_text("\n".join(rows) + "\n")
    if seed is not None:
        (path / "summary.json").write_text(json.dumps({"settings": {"seed": seed}, "seconds": 1.0}))
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
    with pytest.raises(SystemExit):
        transfer_table.main([f"={a}"])  # an empty recipe name
    assert transfer_table.main([f"k=64={a}"]) == 0  # a name with "=" in it: the directory is after the last one
    assert capsys.readouterr().out.splitlines()[2].split("|")[1].strip() == "k=64"


def test_a_run_cut_short_is_read_from_its_curve_and_drawn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run killed before summary.json (an older list_transfer at a device's call limit): seed "-", same means."""
    a, b = _run(tmp_path / "a", None, 0.1), _run(tmp_path / "b", 1, 0.3)
    png = tmp_path / "fig" / "curves.png"
    assert transfer_table.main(["--figure", str(png), f"x={a}", f"x={b}"]) == 0
    cells = [[cell.strip() for cell in line.split("|")] for line in capsys.readouterr().out.splitlines()[2:]]
    column = 4 + transfer_table.COLUMNS.index("heldin/jsd_valid")
    assert [row[2] for row in cells] == ["-", "1", "-"]
    assert cells[2][column] == "**0.200** ±0.100"
    assert png.stat().st_size > 10_000
    with pytest.raises(SystemExit):
        transfer_table.main([f"x={tmp_path / 'missing'}"])  # one line, no traceback


def test_by_step_reads_a_learning_curve_down_the_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--by-step`: a row per recipe and scored step, the mean over seeds ± half their range; one run, its value."""
    a, b = _run(tmp_path / "a", 0, 0.1), _run(tmp_path / "b", 1, 0.3)
    c = _run(tmp_path / "c", 0, 0.2)
    assert transfer_table.main(["--by-step", f"x={a}", f"x={b}", f"y={c}"]) == 0
    cells = [[cell.strip() for cell in line.split("|")] for line in capsys.readouterr().out.splitlines()[2:]]
    column = 4 + transfer_table.COLUMNS.index("heldin/jsd_valid")
    assert [row[1:4] for row in cells] == [["x", "2", "0"], ["x", "2", "150"], ["y", "1", "0"], ["y", "1", "150"]]
    assert [row[column] for row in cells] == ["0.500 ±0.000", "0.200 ±0.100", "0.500", "0.200"]


def test_steps_not_every_seed_scored_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Seeds stopped at different steps (a time limit): --by-step keeps the shared steps and says which it left out;
    the default table says the last steps it averages differ. Seeds that agree get no note."""
    a = _run(tmp_path / "a", 0, 0.1, steps=(0, 150, 401))
    b = _run(tmp_path / "b", 1, 0.3, steps=(0, 150, 403))
    assert transfer_table.main(["--by-step", f"x={a}", f"x={b}"]) == 0
    out, err = capsys.readouterr()
    assert [line.split("|")[3].strip() for line in out.splitlines()[2:]] == ["0", "150"]
    assert "x: step(s) 401, 403 not scored by every seed" in err
    assert "x: the seeds' last scored steps differ (401, 403)" in err
    c, d = _run(tmp_path / "c", 0, 0.1), _run(tmp_path / "d", 1, 0.3)
    assert transfer_table.main([f"y={c}", f"y={d}"]) == 0
    assert capsys.readouterr().err == ""


def _eval(path: Path, models: dict[str, tuple[float, list[float]]], heldin: bool = True) -> str:
    """A `gapo eval --suite lists --heldin` folder: per model its mean JSD and the top shares of its 8-item lists
    (every list 8 items, so the collapse line is 2/8 + 0.05 = 0.30), the same for the held-in lists."""
    path.mkdir()
    doc: dict = {"models": {}, "tables": {"lists": [], "heldin": []}}
    for model, (jsd, tops) in models.items():
        means = {"mean_jsd": jsd, "mean_jsd_ci_low": jsd - 0.01, "mean_jsd_ci_high": jsd + 0.01}
        means |= {"mean_jsd_valid": jsd / 2, "mean_invalid": 0.1}
        doc["models"][model] = dict(means, heldin=dict(means)) if heldin else means
        for table in ("lists", "heldin") if heldin else ("lists",):
            doc["tables"][table] += [{"model": model, "top_share": t, "num_items": 8} for t in tops]
    (path / "eval.json").write_text(json.dumps(doc))
    return str(path)


def test_eval_outputs_give_a_row_a_model_and_the_collapse_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--eval`: each model of each eval.json a row (interval beside the mean, lists over 2/L + 0.05 counted from the
    per-list tables, never another model's), a recipe's runs averaged; a set not scored is "-"."""
    a = _eval(tmp_path / "a", {"m": (0.1, [0.30, 0.31, 0.2])})  # 0.30 sits on the line: not over it
    b = _eval(tmp_path / "b", {"m": (0.3, [0.5, 0.5, 0.5]), "other": (0.9, [0.9])})
    c = _eval(tmp_path / "c", {"m": (0.2, [0.25])}, heldin=False)
    assert transfer_table.main(["--eval", f"x={a}", f"x={b}/eval.json", f"y={c}"]) == 0
    cells = [[cell.strip() for cell in line.split("|")[1:-1]] for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[:2] for row in cells] == [
        ["x", a],
        ["x", f"{b}/eval.json (m)"],  # a file of two models (`gapo eval --compare`): each named
        ["x", f"{b}/eval.json (other)"],
        ["x, mean of 3", "-"],
        ["y", c],
    ]
    assert [row[2] for row in cells[:3]] == ["0.100 [0.090, 0.110]", "0.300 [0.290, 0.310]", "0.900 [0.890, 0.910]"]
    assert [row[5] for row in cells[:3]] == ["1 of 3", "3 of 3", "1 of 1"]
    assert cells[3][2] == "**0.433** ±0.400" and cells[3][5] == "1, 3, 1"
    assert cells[4][2:6] == ["0.200 [0.190, 0.210]", "0.100", "0.100", "0 of 1"] and cells[4][6:] == ["-"] * 4


def test_eval_mode_refuses_what_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder without eval.json, an eval.json without lists scores, or --by-step with --eval: one line, exit 2."""
    run = _run(tmp_path / "run", 0, 0.1)  # a list_transfer run is not an eval output
    empty = tmp_path / "open"
    empty.mkdir()
    (empty / "eval.json").write_text(json.dumps({"models": {"m": {"mean_unique_at_n": 3}}, "tables": {"open": []}}))
    for argv, match in (
        (["--eval", f"x={run}"], "not a gapo eval output"),
        (["--eval", f"x={empty}"], "no lists or held-in scores for m"),
        (["--eval", "--by-step", f"x={empty}"], "no --by-step or --figure"),
    ):
        with pytest.raises(SystemExit) as exit_:
            transfer_table.main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert match in err, err


def test_a_set_only_some_runs_scored_gets_its_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """list_transfer's --as-trained adds ``train_asked``: its columns come beside train's, "-" for a run without it,
    in both tables; the figure gets a panel for it."""
    a = _run(tmp_path / "a", 0, 0.1, sets=("train_asked",))
    b = _run(tmp_path / "b", 1, 0.3, sets=("train_asked",))
    c = _run(tmp_path / "c", 0, 0.2)
    png = tmp_path / "curves.png"
    for flags in ([], ["--by-step", "--figure", str(png)]):
        assert transfer_table.main([*flags, f"x={a}", f"x={b}", f"y={c}"]) == 0
        lines = capsys.readouterr().out.splitlines()
        head = [cell.strip() for cell in lines[0].split("|")]
        assert head[4:8] == ["train/jsd", "train/jsd_valid", "train_asked/jsd", "train_asked/jsd_valid"]
        cells = [[cell.strip() for cell in line.split("|")] for line in lines[2:]]
        asked = head.index("train_asked/invalid")
        assert [row[asked] for row in cells if row[1] == "y"] == ["-"] * (2 if flags else 1)  # by step: 0 and 150
        assert all(row[asked] != "-" for row in cells if row[1].startswith("x"))
        assert cells[-1][head.index("heldin/jsd_valid")].endswith("0.200")  # y, the last row
    assert png.stat().st_size > 10_000


def test_a_mean_with_no_valid_answer_reads_as_a_dash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before training a set may have no valid answer (jsd_valid empty in curve.csv): "-" there, the value after."""
    run = tmp_path / "r"
    run.mkdir()
    rows = ["step,set,list,jsd,jsd_valid,invalid,top_share"]
    for step, valid in ((0, ""), (5, "0.25")):
        rows += [f"{step},{name},{name}0,1.0,{valid},0.5,0.5" for name in transfer_table.SETS]
    (run / "curve.csv").write_text("\n".join(rows) + "\n")
    assert transfer_table.main([f"x={run}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = [cell.strip() for cell in lines[0].split("|")]
    assert lines[2].split("|")[head.index("heldin/jsd_valid")].strip() == "- -> 0.250"


def _lists(path: Path, jsd: dict[str, list[float]]) -> str:
    """A one-model `gapo eval` folder whose per-list JSDs are `jsd[set]`, the lists named c0, c1, ... in each set."""
    path.mkdir()
    doc: dict = {"models": {"m": {}}, "tables": {"lists": [], "heldin": []}}
    for name, table in transfer_table.EVAL_SETS.items():
        values = jsd[name]
        mean = sum(values) / len(values)
        means = {"mean_jsd": mean, "mean_jsd_ci_low": mean, "mean_jsd_ci_high": mean, "mean_jsd_valid": mean}
        means["mean_invalid"] = 0.0
        doc["tables"][table] = [
            {"model": "m", "category": f"c{i}", "jsd": value, "top_share": 0.2, "num_items": 8}
            for i, value in enumerate(values)
        ]
        if name == "unseen":
            doc["models"]["m"].update(means)
        else:
            doc["models"]["m"][table] = means
    (path / "eval.json").write_text(json.dumps(doc))
    return str(path)


def test_paired_differences_are_list_by_list_and_seed_by_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--paired BASE`: each run less BASE's run in the same place, list by list (the mean difference with its
    interval over the lists, and the lists lower), a recipe's runs as mean ± half the range; against a base of one
    run every run pairs with it."""
    base0 = _lists(tmp_path / "b0", {"unseen": [0.2, 0.4, 0.1], "heldin": [0.3, 0.3]})
    base1 = _lists(tmp_path / "b1", {"unseen": [0.2, 0.2, 0.2], "heldin": [0.1, 0.5]})
    run0 = _lists(tmp_path / "r0", {"unseen": [0.1, 0.5, 0.0], "heldin": [0.3, 0.2]})
    run1 = _lists(tmp_path / "r1", {"unseen": [0.2, 0.2, 0.2], "heldin": [0.2, 0.2]})
    argv = ["--eval", "--paired", "b", f"b={base0}", f"b={base1}", f"r={run0}", f"r={run1}"]
    assert transfer_table.main(argv) == 0
    second = capsys.readouterr().out.split("\n\n")[1].splitlines()[2:]
    cells = [[cell.strip() for cell in line.split("|")[1:-1]] for line in second]
    # run0 - base0: unseen (-0.1, +0.1, -0.1) -> -0.033, 2 lower; heldin (0, -0.1) -> -0.05, 1 lower (0 is not lower)
    assert [cells[0][i] for i in (0, 1, 2, 4, 6)] == ["r", run0, base0, "2 of 3", "1 of 2"]
    # each mean with its bootstrap interval over the lists: inside the lists' own differences, around the mean
    expected = ((-0.033, -0.1, 0.1), (-0.05, -0.1, 0.0))  # (mean, least difference, largest difference)
    for cell, (mean, least, most) in zip((cells[0][3], cells[0][5]), expected, strict=True):
        shown, low, high = (float(x) for x in cell.replace("[", "").replace("]", "").replace(",", "").split())
        assert shown == mean and least <= low <= mean <= high <= most, cell
    assert cells[0][5] != "-0.050 [-0.050, -0.050]"  # lists that disagree leave doubt
    # run1 - base1: unseen 0 on every list, so no doubt at all; heldin (+0.1, -0.3) -> -0.1
    assert cells[1] == ["r", run1, base1, "+0.000 [+0.000, +0.000]", "0 of 3", "-0.100 [-0.300, +0.100]", "1 of 2"]
    assert cells[2] == ["r, mean of 2", "-", "b", "**-0.017** ±0.017", "-", "**-0.075** ±0.025", "-"]
    assert transfer_table.main(["--eval", "--paired", "b", f"b={base0}", f"r={run0}", f"r={run1}"]) == 0
    against = [line.split("|")[3].strip() for line in capsys.readouterr().out.split("\n\n")[1].splitlines()[2:4]]
    assert against == [base0, base0]


def test_paired_refuses_what_it_cannot_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No such recipe, --paired without --eval, other lists, more runs than the base's two: one line, exit 2."""
    a = _lists(tmp_path / "a", {"unseen": [0.2, 0.4], "heldin": [0.3]})
    b = _lists(tmp_path / "b", {"unseen": [0.2, 0.4, 0.1], "heldin": [0.3]})
    c = _lists(tmp_path / "c", {"unseen": [0.2, 0.4], "heldin": [0.3]})
    for argv, match in (
        (["--eval", "--paired", "z", f"x={a}"], "--paired z: no such recipe (the recipes: x)"),
        (["--paired", "x", f"x={a}"], "--paired pairs gapo eval outputs: it needs --eval"),
        (["--eval", "--paired", "x", f"x={a}", f"y={b}"], "scored different unseen lists: nothing to pair"),
        (["--eval", "--paired", "x", f"x={a}", f"x={c}", f"y={a}", f"y={c}", f"y={a}"], "y has 3 runs and x 2"),
    ):
        with pytest.raises(SystemExit) as exit_:
            transfer_table.main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert match in err, err
