"""A markdown table of `tools/list_transfer.py` runs, recipe by recipe over seeds (issue 34, item 4).

Each argument is ``RECIPE=DIR`` (a run's --out, holding summary.json); runs that share a recipe name are its seeds.
Per run: its seed and, before training and at its last scored step, each set's mean JSD and JSD among valid answers;
per recipe with two runs or more, the mean over seeds ± half their range at the last step: a difference between two
recipes means something only beyond those bands.

    python tools/transfer_table.py linear=runs/item4/linear_s0 linear=runs/item4/linear_s1 \
        constant=runs/item4/constant_s0 constant=runs/item4/constant_s1
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

SETS = ("train", "heldin", "unseen")
COLUMNS = [f"{s}/{m}" for s in SETS for m in ("jsd", "jsd_valid")] + [f"{s}/invalid" for s in SETS]


def read_run(directory: str | Path) -> dict[str, Any]:
    """A run's seed, first and last scored steps' means, and the seconds it took."""
    summary = json.loads((Path(directory) / "summary.json").read_text(encoding="utf-8"))
    steps = sorted(summary["means"], key=int)
    return {
        "seed": summary["settings"]["seed"],
        "first": summary["means"][steps[0]],
        "last": summary["means"][steps[-1]],
        "step": int(steps[-1]),
        "seconds": summary.get("seconds"),
    }


def table(runs: dict[str, list[dict[str, Any]]]) -> str:
    """Rows per run (before -> after), then per recipe the mean and spread over seeds of the last step."""
    head = "| recipe | seed | step | " + " | ".join(COLUMNS) + " |"
    lines = [head, "|" + "---|" * (3 + len(COLUMNS))]
    for recipe, seeds in runs.items():
        for run in seeds:
            cells = [f"{run['first'][c]:.3f} -> {run['last'][c]:.3f}" for c in COLUMNS]
            lines.append(f"| {recipe} | {run['seed']} | {run['step']} | " + " | ".join(cells) + " |")
        if len(seeds) > 1:
            values = {c: [r["last"][c] for r in seeds] for c in COLUMNS}
            cells = [f"**{sum(v) / len(v):.3f}** ±{(max(v) - min(v)) / 2:.3f}" for v in values.values()]
            lines.append(f"| {recipe}, mean of {len(seeds)} | - | - | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="RECIPE=DIR")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in args.runs:
        recipe, sep, directory = item.partition("=")
        if not sep:
            parser.error(f"expected RECIPE=DIR, got {item!r}")
        runs[recipe].append(read_run(directory))
    print(table(runs), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
