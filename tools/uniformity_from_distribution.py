"""Format and distribution metrics per list, recomputed from a uniformity stage's answer counts.

Why: the uniformity stage writes every model's answer counts (results/uniformity_distribution.csv, the invalid bin as
``NV``), and older runs' files stay in git. Recomputing issue 19's metrics (JSD among valid answers, the top item's
share, the first item's share) from them compares a committed run of older code with today's, with today's
`gapo.metrics`, without sampling again (docs/uniformity_diagnosis.md compares the paper-reward run this way):

    git show 0bc8aa3:results/uniformity_distribution.csv > /tmp/old.csv
    python tools/uniformity_from_distribution.py old=/tmp/old.csv new=results/uniformity_distribution.csv --model gapo

Prints the means over lists per run and model, and how many lists have a top share above 2/L + 0.05 (issue 19's
collapse line).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from gapo.metrics import first_item_share, jsd_from_uniform, jsd_valid_from_uniform, top_share

#: The distribution file's name for the invalid bin (gapo.repro.experiments.uniformity).
INVALID = "NV"


def per_list(distribution: pd.DataFrame) -> pd.DataFrame:
    """One row per model and list: invalid share, jsd, jsd_valid, top_share, first_item_share, L and whether the top
    share is above 2/L + 0.05. The list's items are its rows in file order (the stage writes them in list order)."""
    rows = []
    for (model, category), group in distribution.groupby(["model", "category"], sort=False):
        items = [str(item) for item in group["item"] if item != INVALID]
        answers: list[str | None] = [
            None if item == INVALID else str(item)
            for item, count in zip(group["item"], group["count"], strict=True)
            for _ in range(int(count))
        ]
        if not answers:
            raise ValueError(f"{model}/{category}: no answers counted")
        top = top_share(answers, items)
        rows.append(
            {
                "model": model,
                "category": category,
                "invalid": answers.count(None) / len(answers),
                "jsd": jsd_from_uniform(answers, items),
                "jsd_valid": jsd_valid_from_uniform(answers, items),
                "top_share": top,
                "first_item_share": first_item_share(answers, items),
                "num_items": len(items),
                "collapsed": top > 2 / len(items) + 0.05,
            }
        )
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Means over lists per model, and the number of lists over the collapse line."""
    metrics = ["invalid", "jsd", "jsd_valid", "top_share", "first_item_share"]
    means = table.groupby("model", sort=False)[metrics].mean()
    means["lists_collapsed"] = table.groupby("model", sort=False)["collapsed"].sum().astype(int)
    return means


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="NAME=PATH of a uniformity_distribution.csv, one per run")
    parser.add_argument("--model", action="append", help="only these models (repeatable)")
    args = parser.parse_args(argv)
    frames = []
    for spec in args.files:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            parser.error(f"a file is NAME=PATH, got {spec!r}")
        if not Path(path).is_file():
            parser.error(f"{path}: no such file")
        means = summary(per_list(pd.read_csv(path)))
        if args.model:
            means = means[means.index.isin(args.model)]
        frames.append(means.rename(index=lambda model, name=name: f"{name}: {model}"))
    print(pd.concat(frames).round(3).to_markdown())


if __name__ == "__main__":
    main()
