"""Per-window means of training logs side by side: how two runs' training groups moved, step for step.

Why: an equal-budget comparison of two recipes reads best as the same steps of each run (docs/uniformity_diagnosis.md
compares the committed paper-reward run with the split-format one this way). Each log is a CSV with a `step` column
(results/train_gapo.csv) or a trainer's metrics.jsonl; a log written with several policies is filtered by `--policy`.

    python tools/train_log_windows.py old=old.csv new=results/train_gapo.csv --window 25 \
        --columns diversity/valid_fraction diversity/group_jsd
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def read_log(path: str | Path, policy: str | None = None) -> pd.DataFrame:
    """A training log as a frame indexed by step (CSV or JSON lines), one policy's rows when `policy` is given."""
    path = Path(path)
    frame = pd.read_json(path, lines=True) if path.suffix == ".jsonl" else pd.read_csv(path)
    if policy is not None and "policy" in frame:
        frame = frame[frame["policy"] == policy]
    if "step" not in frame:
        raise ValueError(f"{path}: no `step` column")
    return frame.set_index("step").sort_index()


def window_means(frame: pd.DataFrame, columns: list[str], window: int) -> pd.DataFrame:
    """Means of `columns` over steps 1..window, window+1..2*window, ... (a log that ends mid-window: its last
    window holds the steps it has)."""
    missing = [c for c in columns if c not in frame]
    if missing:
        raise ValueError(f"columns not in the log: {', '.join(missing)}")
    first = (frame.index - 1) // window
    out = frame[columns].groupby(first).mean()
    out.index = [f"{k * window + 1}-{(k + 1) * window}" for k in out.index]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", help="NAME=PATH, one per run")
    parser.add_argument("--columns", nargs="+", default=["diversity/valid_fraction", "diversity/group_jsd"])
    parser.add_argument("--window", type=int, default=25)
    parser.add_argument("--policy", default=None)
    args = parser.parse_args(argv)
    if args.window < 1:
        parser.error(f"--window must be at least 1, got {args.window}")
    tables = []
    for spec in args.logs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            parser.error(f"a log is NAME=PATH, got {spec!r}")
        means = window_means(read_log(path, args.policy), args.columns, args.window)
        tables.append(means.add_prefix(f"{name} "))
    table = pd.concat(tables, axis=1)
    print(table.round(3).to_markdown())


if __name__ == "__main__":
    main()
