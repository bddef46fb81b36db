"""What a model's invalid list answers are: a broken format, a near miss of an item, or a word off the list (issue 34).

Why: with the invalid answers as one more bin, a share p of them costs about 0.52 p in JSD even when the valid ones
are spread evenly (docs/uniformity_diagnosis.md), and after an SFT warm start they are most of what stands between
the 64 training lists and the goal. What to do about them depends on what they are: a format the model breaks wants
the format reward; an item misspelt ("Nemibia") says the push towards a rare word overshoots its spelling; another
word of the category ("Nicaragua" asked for a list without it) says the model answers the category, not the list.
This tool reads the samples `gapo eval` wrote and sorts every invalid one:

- ``format``: no single ``<answer>...</answer>`` pair (`gapo.rewards.extract_answer` is None);
- ``near_miss``: an answer whose closest item of its list (case-insensitive `difflib` ratio) is at least
  `--near` alike (0.75: "Misu Soup" for "Miso Soup" 0.89, "Nemibia" for "Namibia" 0.86, "cherry" for "cherish" 0.62);
- ``off_list``: any other answer.

    gapo eval --model M --adapter A --suite lists --lists L.jsonl -n 100 --out runs/eval
    python tools/invalid_answers.py --samples runs/eval/samples.jsonl --lists L.jsonl --out runs/invalid

Without `--lists`, the lists are the paper's evaluation lists and the held-in lists (`gapo eval`'s default). Writes,
in `--out`: lists.csv (model, suite, list, n, invalid and each kind's share of the samples), answers.csv (model,
suite, list, kind, answer, count, closest item, its ratio: every distinct invalid answer) and summary.json (the
command, the threshold, each model's totals). Prints the per-list table.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from gapo.equivalence import match_item
from gapo.io import read_jsonl, write_json_atomic, write_text_atomic
from gapo.repro.evaluate import read_lists
from gapo.rewards import extract_answer

#: The kinds of answer, in the order the tables list them.
KINDS = ("valid", "format", "near_miss", "off_list")


def closest_item(answer: str, items: Sequence[str]) -> tuple[str, float]:
    """The item of `items` most like `answer` and their `difflib` ratio, both lower-cased (the first item on ties).

    >>> item, ratio = closest_item("Nemibia", ["Niger", "Namibia"])
    >>> item, round(ratio, 3)
    ('Namibia', 0.857)"""
    scored = [(difflib.SequenceMatcher(None, answer.lower(), item.lower()).ratio(), -i) for i, item in enumerate(items)]
    ratio, neg_index = max(scored)
    return items[-neg_index], ratio


def classify(completion: str, items: Sequence[str], near: float = 0.75) -> tuple[str, str | None, str | None, float]:
    """(kind, answer, closest item, ratio) of one completion to a list: the kind is one of `KINDS`.

    Valid is what rewards and metrics count valid (`match_item` of the one answer tag's content); the closest item and
    its ratio are given for a near miss or an off-list answer, None and 0.0 otherwise.

    >>> classify("<answer>Misu Soup</answer>", ["Miso Soup", "Tagine"])[0]
    'near_miss'
    >>> classify("<answer>Venezuela</answer>", ["Niger", "Namibia"])[0]
    'off_list'
    >>> classify("<answer.Weary</answer>", ["Weary"])[0]
    'format'"""
    if not 0.0 < near <= 1.0:
        raise ValueError(f"near must be in (0, 1], got {near}")
    answer = extract_answer(completion)
    if answer is None:
        return "format", None, None, 0.0
    if match_item(answer, items) is not None:
        return "valid", answer, None, 0.0
    item, ratio = closest_item(answer, items)
    return ("near_miss" if ratio >= near else "off_list"), answer, item, ratio


def read_samples(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a `gapo eval` samples.jsonl of suite lists or heldin; one line naming what is missing otherwise."""
    rows: list[dict[str, Any]] = []
    for number, row in enumerate(read_jsonl(path), 1):
        missing = [k for k in ("model", "suite", "category", "completion") if k not in row]
        if missing:
            needs = ", ".join(missing)
            raise ValueError(f"{path}: row {number}: a samples row needs {needs} (gapo eval's samples.jsonl)")
        if row["suite"] in ("lists", "heldin"):
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no samples of suite lists or heldin")
    return rows


def default_lists() -> dict[str, list[str]]:
    """`gapo eval`'s lists without `--lists`: the paper's evaluation lists and the held-in lists."""
    from gapo.repro import prompts as ep

    return {**ep.UNIFORMITY_LISTS, **ep.HELDIN_LISTS}


def tables(
    rows: Sequence[Mapping[str, Any]], lists: Mapping[str, Sequence[str]], near: float = 0.75
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per list: n and each kind's share, per distinct invalid answer: its count and closest item)."""
    unknown = sorted({r["category"] for r in rows} - set(lists))
    if unknown:
        raise ValueError(f"samples of lists not given: {', '.join(map(repr, unknown[:5]))} (pass the lists to --lists)")
    keys = ["model", "suite", "list"]
    classified = []
    for r in rows:
        kind, answer, item, ratio = classify(r["completion"], lists[r["category"]], near)
        record = {"model": r["model"], "suite": r["suite"], "list": r["category"], "kind": kind, "answer": answer}
        classified.append(record | {"closest": item, "ratio": round(ratio, 3)})
    frame = pd.DataFrame(classified)
    shares = pd.crosstab([frame[k] for k in keys], frame["kind"], normalize="index").reindex(
        columns=KINDS, fill_value=0
    )
    per_list = frame.groupby(keys, sort=False).size().rename("n").to_frame().join(shares).reset_index()
    per_list.insert(4, "invalid", 1.0 - per_list["valid"])
    per_list = per_list.drop(columns="valid")
    invalid = frame[frame["kind"] != "valid"]
    answers = (
        invalid.groupby([*keys, "kind", "answer", "closest", "ratio"], dropna=False, sort=False)
        .size()
        .rename("count")
        .reset_index()
        .sort_values([*keys, "count"], ascending=[True, True, True, False], kind="stable")
    )
    return per_list, answers[[*keys, "kind", "answer", "count", "closest", "ratio"]]


def totals(per_list: pd.DataFrame) -> dict[str, dict[str, float]]:
    """model -> each kind's share of all its samples (lists weighted by their n)."""
    out: dict[str, dict[str, float]] = {}
    for model, part in per_list.groupby("model", sort=False):
        n = part["n"].sum()
        out[str(model)] = {"n": int(n)} | {
            k: round(float((part[k] * part["n"]).sum() / n), 4) for k in ("invalid", *KINDS[1:])
        }
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/invalid_answers.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", required=True, help="samples.jsonl of gapo eval (suite lists, heldin)")
    parser.add_argument("--lists", help="the lists given to gapo eval --lists (default: the paper's and held-in)")
    parser.add_argument("--near", type=float, default=0.75, help="the ratio from which an answer is a near miss")
    parser.add_argument("--out", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not 0.0 < args.near <= 1.0:
            raise ValueError(f"--near must be in (0, 1], got {args.near}")
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise ValueError(f"--out {out} is a file; give a directory")
        lists = read_lists(args.lists) if args.lists else default_lists()
        per_list, answers = tables(read_samples(args.samples), lists, args.near)
    except (OSError, ValueError) as err:
        print(f"invalid_answers: {err}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "answers.csv", answers.to_csv(index=False))
    write_text_atomic(out / "lists.csv", per_list.round(4).to_csv(index=False))
    summary = {
        "command": "python tools/invalid_answers.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "samples": str(args.samples),
        "lists": args.lists,
        "near": args.near,
        "totals": totals(per_list),
    }
    write_json_atomic(out / "summary.json", summary, indent=2)  # last: a killed run leaves no summary.json
    print(per_list.round(3).to_string(index=False))
    print(json.dumps(summary["totals"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
