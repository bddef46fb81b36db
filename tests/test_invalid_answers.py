"""tools/invalid_answers.py (issue 34): each invalid list answer as a broken format, a near miss or off the list."""

from __future__ import annotations

import doctest
import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gapo.equivalence import match_item
from gapo.rewards import extract_answer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import invalid_answers  # noqa: E402


def test_the_docstring_examples_hold() -> None:
    assert doctest.testmod(invalid_answers).failed == 0


words = st.text(alphabet="abcdeKLM <>/", min_size=0, max_size=12)


@settings(max_examples=200, deadline=None)
@given(answer=words, items=st.lists(st.text(alphabet="abcdeKLM", min_size=1, max_size=8), min_size=1, max_size=5))
def test_each_completion_is_one_kind_and_valid_is_what_the_rewards_count_valid(answer: str, items: list[str]) -> None:
    completion = f"<answer>{answer}</answer>"
    kind, parsed, closest, ratio = invalid_answers.classify(completion, items)
    assert kind in invalid_answers.KINDS
    valid = match_item(extract_answer(completion), items) is not None
    assert (kind == "valid") == valid
    assert (kind == "format") == (extract_answer(completion) is None)
    if kind in ("near_miss", "off_list"):
        assert closest in items and 0.0 <= ratio <= 1.0
        assert (kind == "near_miss") == (ratio >= 0.75)
    # a stricter threshold only moves near misses to off the list
    stricter = invalid_answers.classify(completion, items, near=1.0)[0]
    assert stricter == kind or (kind, stricter) == ("near_miss", "off_list")


def test_the_kinds_of_the_answers_seen_after_an_sft_and_gapo() -> None:
    countries = ["Niger", "Namibia", "Romania"]
    assert invalid_answers.classify("<answer>Nemibia</answer>", countries)[:3] == ("near_miss", "Nemibia", "Namibia")
    assert invalid_answers.classify("I pick <answer> namibia. </answer>", countries)[0] == "valid"
    assert invalid_answers.classify("<answer>Venezuela</answer>", countries)[0] == "off_list"
    assert invalid_answers.classify("<answer>cherry</answer>", ["cherish", "obscure"])[0] == "off_list"
    assert invalid_answers.classify("<answer>a</answer><answer>b</answer>", ["a", "b"])[0] == "format"
    assert invalid_answers.classify("Namibia", countries)[0] == "format"
    with pytest.raises(ValueError, match="near must be in"):
        invalid_answers.classify("<answer>x</answer>", ["x"], near=0.0)


def _samples(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    path.write_text(
        "".join(json.dumps({"model": "m", "suite": s, "category": c, "completion": t}) + "\n" for s, c, t in rows)
    )
    return path


def test_the_tables_and_summary_from_samples(tmp_path: Path) -> None:
    lists = tmp_path / "lists.jsonl"
    lists.write_text(
        json.dumps({"name": "countries", "items": ["Niger", "Namibia"]})
        + "\n"
        + json.dumps({"name": "digits", "items": ["1", "2"]})
        + "\n"
    )
    rows = [("lists", "countries", t) for t in ["<answer>Niger</answer>", "<answer>Nemibia</answer>"] * 2]
    rows += [("lists", "countries", "<answer>Peru</answer>"), ("lists", "countries", "Niger")]
    rows += [("lists", "digits", "<answer>1</answer>"), ("lists", "digits", "<answer>2</answer>")]
    rows += [("open", "countries", "not a list sample")]  # another suite: left out
    samples = _samples(tmp_path / "samples.jsonl", rows)
    out = tmp_path / "out"
    assert invalid_answers.main(["--samples", str(samples), "--lists", str(lists), "--out", str(out)]) == 0
    per_list = pd.read_csv(out / "lists.csv")
    countries = per_list.set_index("list").loc["countries"]
    assert countries["n"] == 6
    assert countries[["invalid", "format", "near_miss", "off_list"]].tolist() == pytest.approx(
        [4 / 6, 1 / 6, 2 / 6, 1 / 6], abs=1e-4
    )
    assert per_list.set_index("list").loc["digits", "invalid"] == 0
    answers = pd.read_csv(out / "answers.csv")
    assert answers[["kind", "answer", "count"]].values.tolist()[0] == ["near_miss", "Nemibia", 2]
    assert set(answers["kind"]) == {"format", "near_miss", "off_list"} and answers["count"].sum() == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["totals"]["m"] == {"n": 8, "invalid": 0.5, "format": 0.125, "near_miss": 0.25, "off_list": 0.125}


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    lists = tmp_path / "lists.yaml"
    lists.write_text("countries: [Niger, Namibia]\n")
    out = tmp_path / "out"
    cases = [
        (
            _samples(tmp_path / "a.jsonl", [("lists", "metals", "<answer>gold</answer>")]),
            "samples of lists not given: 'metals'",
        ),
        (_samples(tmp_path / "b.jsonl", [("open", "countries", "x")]), "no samples of suite lists or heldin"),
        (tmp_path / "missing.jsonl", "No such file"),
    ]
    (tmp_path / "c.jsonl").write_text('{"model": "m", "suite": "lists"}\n')
    cases.append((tmp_path / "c.jsonl", "a samples row needs category, completion"))
    for samples, message in cases:
        assert invalid_answers.main(["--samples", str(samples), "--lists", str(lists), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err
    assert invalid_answers.main(["--samples", str(samples), "--near", "2", "--out", str(out)]) == 2
    assert "--near must be in (0, 1]" in capsys.readouterr().err
    assert not out.exists()


def test_on_real_samples_of_gapo_eval(tmp_path: Path) -> None:
    from gapo.repro import evaluate

    lists = tmp_path / "lists.yaml"
    lists.write_text("planets: [Mars, Venus, Earth]\n")
    ev = tmp_path / "ev"
    argv = ["--model", "tiny-random", "--suite", "lists", "--lists", str(lists), "-n", "4", "--no-progress"]
    assert evaluate.cli([*argv, "--out", str(ev), "--resamples", "10"]) == 0
    out = tmp_path / "out"
    assert invalid_answers.main(["--samples", str(ev / "samples.jsonl"), "--lists", str(lists), "--out", str(out)]) == 0
    row = pd.read_csv(out / "lists.csv").iloc[0]
    assert row["n"] == 4 and row["format"] + row["near_miss"] + row["off_list"] == pytest.approx(row["invalid"])
    samples = [json.loads(line) for line in (ev / "samples.jsonl").read_text().splitlines()]
    assert row["invalid"] == pytest.approx(1 - sum(s["valid"] for s in samples) / 4)


def test_without_lists_the_papers_and_the_heldin_lists_are_read(tmp_path: Path) -> None:
    from gapo.repro import prompts as ep

    heldin = next(iter(ep.HELDIN_LISTS))
    rows = [("lists", "planets", "<answer>Mars</answer>"), ("lists", "planets", "<answer>Pluto</answer>")]
    rows += [("heldin", heldin, f"<answer>{ep.HELDIN_LISTS[heldin][0]}</answer>")]
    out = tmp_path / "out"
    assert invalid_answers.main(["--samples", str(_samples(tmp_path / "s.jsonl", rows)), "--out", str(out)]) == 0
    per_list = pd.read_csv(out / "lists.csv").set_index("list")
    assert per_list.loc["planets", "invalid"] == 0.5 and per_list.loc[heldin, "invalid"] == 0.0
    assert per_list.loc[heldin, "suite"] == "heldin"
