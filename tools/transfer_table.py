"""A markdown table of `tools/list_transfer.py` runs, recipe by recipe over seeds (issue 34, item 4).

Each argument is ``RECIPE=DIR`` (a run's --out, split at its last "="); runs that share a recipe name are its seeds. The
means are read from the run's curve.csv (one row per list and scored step; what summary.json's means are made of), the
seed from its summary.json, or "-" for a run cut short before one was written (list_transfer before --time-limit). Per
run: its seed and, before training and at its last scored step, each set's mean JSD and JSD among valid answers; per
recipe with two runs or more, the mean over seeds ± half their range at the last step: a difference between two recipes
means something only beyond those bands. `--figure PATH` draws each recipe's curves (mean over its seeds): JSD among
valid answers and the invalid share of each set against the step. A set some runs scored and others did not
(``train_asked``, list_transfer's `--as-trained`) gets its columns, "-" where a run has none. `--by-step` prints
instead one row per recipe and scored step (the steps all its seeds scored), each cell the mean over seeds ± half
their range, or the one run's value: a learning curve, where the default table has only its ends. A step some seeds
of a recipe did not score (a run stopped by its time limit), or seeds whose last scored steps differ, are named on
stderr, never dropped unsaid.

`--eval` reads `gapo eval --suite lists --heldin` outputs instead (each DIR an eval.json or the folder holding one, as
results/diagnosis/depth/run.sh writes): a row per model scored, each set's mean JSD with its bootstrap interval, the
JSD among valid answers, the invalid share and how many lists have a top share over 2/L + 0.05 (issue 19's collapse
line); recipes with two runs or more get a row of their mean ± half the range. It is how a training run scored as
the uniformity stage scores GAPO is compared with the pipeline's own adapter, scored the same way. With `--paired
RECIPE` a second table sets each other recipe's runs against RECIPE's, list by list (each run against the one in the
same place on the command line, or against RECIPE's only run): the mean paired difference in JSD with its 95%
bootstrap interval over the lists (`paired_difference_interval`, the benchmarks' paired interval, resampling lists as
it resamples problems) and the lists lower, per set. Both models answer the same lists with the same sampling seed, so
a difference too small for the intervals shows when most lists share it. The interval says how far the lists agree on
the difference, not how far another seed would move it: that is the recipe row's ± over seeds.

    python tools/transfer_table.py linear=runs/item4/linear_s0 linear=runs/item4/linear_s1 \
        constant=runs/item4/constant_s0 constant=runs/item4/constant_s1
    python tools/transfer_table.py --figure results/gpu/item5/curves.png "lr 1e-4=results/gpu/item5/constant_s0" ...
    python tools/transfer_table.py --by-step k64=runs/transfer/k64_committed_s0 k64=runs/transfer/k64_committed_s1
    python tools/transfer_table.py --eval "64 lists=results/diagnosis/depth/k64_s0" "64 lists=.../k64_s1"
    python tools/transfer_table.py --eval --paired gapo gapo=results/diagnosis/pipeline_sft/gapo_pipeline \
        sft=results/diagnosis/pipeline_sft/cos300_s0 sft=results/diagnosis/pipeline_sft/cos300_s1
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

SETS = ("train", "heldin", "unseen")
#: Every set list_transfer scores, in the order the columns come: ``train_asked`` (`--as-trained`) beside ``train``.
ORDER = ("train", "train_asked", "heldin", "unseen")


def columns(sets: tuple[str, ...] = SETS) -> list[str]:
    """The table's metric columns for `sets`: each set's JSD and JSD among valid answers, then each set's invalid."""
    return [f"{s}/{m}" for s in sets for m in ("jsd", "jsd_valid")] + [f"{s}/invalid" for s in sets]


COLUMNS = columns()
#: `gapo eval`'s sets: this table's name -> eval.json's table (its means are under ``models[key]``, and
#: ``models[key]["heldin"]`` for the held-in lists).
EVAL_SETS = {"unseen": "lists", "heldin": "heldin"}
EVAL_METRICS = ("jsd", "jsd_valid", "invalid")


def step_means(directory: str | Path) -> dict[int, dict[str, float]]:
    """Each scored step's mean over lists of every set's metrics (``heldin/jsd_valid``, ...), from curve.csv."""
    sums: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with open(Path(directory) / "curve.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            for metric in ("jsd", "jsd_valid", "invalid", "top_share"):
                if row[metric] not in ("", "nan"):
                    sums[int(row["step"])][f"{row['set']}/{metric}"].append(float(row[metric]))
    return {step: {k: sum(v) / len(v) for k, v in cols.items()} for step, cols in sorted(sums.items())}


def read_run(directory: str | Path) -> dict[str, Any]:
    """A run's seed, every scored step's means (first and last apart), and the seconds it took."""
    file = Path(directory) / "summary.json"
    summary = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
    by_step = step_means(directory)
    if not by_step:
        raise ValueError(f"{directory}/curve.csv holds no scored step")
    steps = list(by_step)
    return {
        "seed": summary.get("settings", {}).get("seed", "-"),
        "first": by_step[steps[0]],
        "last": by_step[steps[-1]],
        "step": steps[-1],
        "by_step": by_step,
        "seconds": summary.get("seconds"),
    }


def sets_of(runs: dict[str, list[dict[str, Any]]]) -> tuple[str, ...]:
    """The sets any run scored, in `ORDER` (a run without one of them shows "-" there)."""
    present = {key.split("/")[0] for seeds in runs.values() for run in seeds for key in run["first"]}
    return tuple(name for name in ORDER if name in present) + tuple(sorted(present - set(ORDER)))


def _value(means: dict[str, float], column: str) -> str:
    """A mean to 3 places, or "-" where there is none (a set not scored, or no valid answer to spread)."""
    return f"{means[column]:.3f}" if column in means else "-"


def band(values: list[float]) -> tuple[float, float]:
    """The mean of a recipe's seeds and half their range: the band a difference between recipes must clear."""
    return sum(values) / len(values), (max(values) - min(values)) / 2


def shared_steps(seeds: list[dict[str, Any]]) -> list[int]:
    """The steps every seed of a recipe scored, in order."""
    return sorted(set.intersection(*(set(r["by_step"]) for r in seeds)))


def step_notes(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What the tables leave out or mix, one line per recipe: steps some of its seeds did not score (left out of
    `--by-step` and the figure), and seeds whose last scored steps differ (averaged together by the default table)."""
    notes = []
    for recipe, seeds in runs.items():
        dropped = sorted(set().union(*(set(r["by_step"]) for r in seeds)) - set(shared_steps(seeds)))
        if dropped:
            steps = ", ".join(map(str, dropped))
            notes.append(f"{recipe}: step(s) {steps} not scored by every seed, left out of --by-step and the figure")
        last = sorted({r["step"] for r in seeds})
        if len(last) > 1:
            notes.append(f"{recipe}: the seeds' last scored steps differ ({', '.join(map(str, last))})")
    return notes


def table(runs: dict[str, list[dict[str, Any]]]) -> str:
    """Rows per run (before -> after), then per recipe the mean and spread over seeds of the last step."""
    names = columns(sets_of(runs))
    head = "| recipe | seed | step | " + " | ".join(names) + " |"
    lines = [head, "|" + "---|" * (3 + len(names))]
    for recipe, seeds in runs.items():
        for run in seeds:
            ends = [(_value(run["first"], c), _value(run["last"], c)) for c in names]
            cells = ["-" if last == "-" else f"{first} -> {last}" for first, last in ends]
            lines.append(f"| {recipe} | {run['seed']} | {run['step']} | " + " | ".join(cells) + " |")
        if len(seeds) > 1:
            cells = [
                "**{:.3f}** ±{:.3f}".format(*band([r["last"][c] for r in seeds]))
                if all(c in r["last"] for r in seeds)
                else "-"
                for c in names
            ]
            lines.append(f"| {recipe}, mean of {len(seeds)} | - | - | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def by_step_table(runs: dict[str, list[dict[str, Any]]]) -> str:
    """One row per recipe and step its seeds all scored: each column's mean over seeds ± half their range (a single
    run's value alone), so a curve reads down the rows."""
    names = columns(sets_of(runs))
    lines = ["| recipe | seeds | step | " + " | ".join(names) + " |", "|" + "---|" * (3 + len(names))]
    for recipe, seeds in runs.items():
        for step in shared_steps(seeds):
            cells = []
            for column in names:
                if not all(column in r["by_step"][step] for r in seeds):
                    cells.append("-")
                    continue
                mean, half = band([r["by_step"][step][column] for r in seeds])
                cells.append(f"{mean:.3f}" + (f" ±{half:.3f}" if len(seeds) > 1 else ""))
            lines.append(f"| {recipe} | {len(seeds)} | {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def figure(runs: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """Per set, each recipe's JSD among valid answers (top) and invalid share (bottom) against the step, averaged over
    its seeds at the steps they share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = sets_of(runs)
    fig, axes = plt.subplots(2, len(sets), figsize=(4 * len(sets), 6), sharex=True, sharey="row")
    for recipe, seeds in runs.items():
        steps = shared_steps(seeds)
        for column, name in enumerate(sets):
            for row, metric in enumerate(("jsd_valid", "invalid")):
                key = f"{name}/{metric}"
                if not all(key in r["by_step"][s] for r in seeds for s in steps):
                    continue
                values = [sum(r["by_step"][s][key] for r in seeds) / len(seeds) for s in steps]
                axes[row][column].plot(steps, values, marker="o", label=f"{recipe} ({len(seeds)} seed(s))")
    for column, name in enumerate(sets):
        axes[0][column].set_title(f"{name} lists")
        axes[1][column].set_xlabel("GAPO step")
    axes[0][0].set_ylabel("JSD among valid answers")
    axes[1][0].set_ylabel("invalid share")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def collapsed(top_share: float | None, num_items: int) -> bool:
    """Issue 19's collapse line: a list whose most-said item is over 2/L + 0.05 (uniform sits at 1/L)."""
    return top_share is not None and top_share > 2 / num_items + 0.05  # None: no valid answer, nothing said most


def read_eval(path: str | Path) -> list[dict[str, Any]]:
    """Per model in a `gapo eval` eval.json (the file or its folder), per set (`EVAL_SETS`) present: the mean JSD with
    its interval, JSD among valid answers, invalid share, and lists over the collapse line out of those scored."""
    file = Path(path)
    if file.is_dir():
        file = file / "eval.json"
    document = json.loads(file.read_text(encoding="utf-8"))
    rows = []
    several = len(document["models"]) > 1  # `gapo eval --compare`: the model names the row, not the file alone
    for model, summary in document["models"].items():
        row: dict[str, Any] = {"model": model, "path": f"{path} ({model})" if several else str(path)}
        for name, table in EVAL_SETS.items():
            means = summary if name == "unseen" else summary.get(table)
            lists = [r for r in document["tables"].get(table, []) if r["model"] == model]
            if not means or "mean_jsd" not in means or not lists:
                continue
            row[name] = {m: means[f"mean_{m}"] for m in EVAL_METRICS}
            row[name]["ci"] = (means["mean_jsd_ci_low"], means["mean_jsd_ci_high"])
            row[name]["collapsed"] = sum(collapsed(r["top_share"], r["num_items"]) for r in lists)
            row[name]["lists"] = len(lists)
            row[name]["per_list"] = {r["category"]: r["jsd"] for r in lists if "category" in r}
        if not any(name in row for name in EVAL_SETS):
            raise ValueError(f"{file}: no lists or held-in scores for {model} (gapo eval --suite lists --heldin)")
        rows.append(row)
    return rows


def eval_table(runs: dict[str, list[dict[str, Any]]]) -> str:
    """A row per model scored (its eval.json beside it), "-" for a set it was not scored on; per recipe with two
    runs or more, the mean ± half the range of each mean (lists over the line: the runs' counts)."""
    names = [f"{s}/{c}" for s in EVAL_SETS for c in (*EVAL_METRICS, "over 2/L+0.05")]
    lines = ["| recipe | run | " + " | ".join(names) + " |", "|" + "---|" * (2 + len(names))]
    for recipe, rows in runs.items():
        for row in rows:
            cells = []
            for name in EVAL_SETS:
                if name not in row:
                    cells += ["-"] * (len(EVAL_METRICS) + 1)
                    continue
                low, high = row[name]["ci"]
                cells.append(f"{row[name]['jsd']:.3f} [{low:.3f}, {high:.3f}]")
                cells += ["-" if row[name][m] is None else f"{row[name][m]:.3f}" for m in EVAL_METRICS[1:]]
                cells.append(f"{row[name]['collapsed']} of {row[name]['lists']}")
            lines.append(f"| {recipe} | {row['path']} | " + " | ".join(cells) + " |")
        if len(rows) > 1:
            cells = []
            for name in EVAL_SETS:
                scored = [r[name] for r in rows if name in r]
                if len(scored) < 2:
                    cells += ["-"] * (len(EVAL_METRICS) + 1)
                    continue
                for metric in EVAL_METRICS:  # a mean over the runs that have one (no valid answer: None)
                    values = [s[metric] for s in scored if s[metric] is not None]
                    cells.append("**{:.3f}** ±{:.3f}".format(*band(values)) if values else "-")
                cells.append(", ".join(str(s["collapsed"]) for s in scored))
            lines.append(f"| {recipe}, mean of {len(rows)} | - | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def paired(row: dict[str, Any], base: dict[str, Any], name: str) -> tuple[float, float, float, int, int] | None:
    """`row`'s JSD less `base`'s on the lists both scored in set `name` (by the list's category): the mean difference,
    its 95% bootstrap interval over the lists (low, high), how many lists `row` is lower on, and how many lists. Why
    paired: both models answer the same lists with the same sampling seed, and lists differ among themselves far more
    than two models do (the committed GAPO's unseen lists run from 0.06 to 0.28), so taken list by list that spread
    drops out and a difference most lists share shows. None where either did not score the set; a list only one of
    them scored is an error (not the same suite)."""
    # the benchmarks' paired interval (lists stand where its problems do); imported here, as lm-eval comes with it
    from gapo.repro.benchmarks.harness import paired_difference_interval

    if name not in row or name not in base:
        return None
    mine, theirs = row[name]["per_list"], base[name]["per_list"]
    if set(mine) != set(theirs) or not mine:
        raise ValueError(f"{row['path']} and {base['path']} scored different {name} lists: nothing to pair")
    order = sorted(theirs)
    mean, low, high = paired_difference_interval([mine[c] for c in order], [theirs[c] for c in order])
    return mean, low, high, sum(mine[c] < theirs[c] for c in order), len(order)


def paired_table(runs: dict[str, list[dict[str, Any]]], base: str) -> str:
    """Each run of every recipe but `base` against `base`'s run in the same place on the command line (the same seed
    when both name their seeds in one order), or against its only run: per set the mean paired difference in JSD
    (negative: more even than the base) with its 95% interval over the lists, and the lists lower. Per recipe with
    two runs or more, the mean ± half the range of the paired means, as the main table gives its means."""
    reference = runs[base]
    lines = [
        "| recipe | run | against | "
        + " | ".join(f"{s}: paired JSD difference [95%] | {s}: lists lower" for s in EVAL_SETS)
        + " |",
        "|" + "---|" * (3 + 2 * len(EVAL_SETS)),
    ]
    for recipe, rows in runs.items():
        if recipe == base:
            continue
        if len(reference) > 1 and len(rows) > len(reference):
            raise ValueError(f"{recipe} has {len(rows)} runs and {base} {len(reference)}: pair them one to one")
        means: dict[str, list[float]] = defaultdict(list)
        for index, row in enumerate(rows):
            against = reference[index if len(reference) > 1 else 0]
            cells = []
            for name in EVAL_SETS:
                pair = paired(row, against, name)
                if pair is None:
                    cells += ["-", "-"]
                    continue
                mean, low, high, lower, lists = pair
                means[name].append(mean)
                cells += [f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]", f"{lower} of {lists}"]
            lines.append(f"| {recipe} | {row['path']} | {against['path']} | " + " | ".join(cells) + " |")
        if len(rows) > 1:
            cells = []
            for name in EVAL_SETS:
                values = means[name]
                cells += ["**{:+.3f}** ±{:.3f}".format(*band(values)) if len(values) > 1 else "-", "-"]
            lines.append(f"| {recipe}, mean of {len(rows)} | - | {base} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="RECIPE=DIR")
    parser.add_argument("--figure", type=Path, default=None, help="also draw each recipe's curves to this PNG")
    parser.add_argument("--by-step", action="store_true", help="a row per recipe and scored step (a learning curve)")
    parser.add_argument("--eval", action="store_true", help="each DIR is a `gapo eval` output (eval.json), not a run")
    parser.add_argument(
        "--paired",
        metavar="RECIPE",
        default=None,
        help="with --eval: also each other recipe's runs against RECIPE's, list by list (paired differences)",
    )
    args = parser.parse_args(argv)
    if args.eval and (args.by_step or args.figure is not None):
        parser.error("--eval makes one table of end scores: no --by-step or --figure")
    if args.paired is not None and not args.eval:
        parser.error("--paired pairs gapo eval outputs: it needs --eval")
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in args.runs:
        recipe, sep, directory = item.rpartition("=")  # the last "=": a recipe may be named "k=64"
        if not sep or not recipe:
            parser.error(f"expected RECIPE=DIR, got {item!r}")
        try:
            if args.eval:
                runs[recipe].extend(read_eval(directory))
            else:
                runs[recipe].append(read_run(directory))
        except (OSError, ValueError, KeyError) as exc:
            parser.error(f"{directory}: not a {'gapo eval output' if args.eval else 'list_transfer run'} ({exc})")
    if args.eval:
        if args.paired is not None and args.paired not in runs:
            parser.error(f"--paired {args.paired}: no such recipe (the recipes: {', '.join(runs)})")
        second = ""
        if args.paired is not None:  # before anything is printed: a refusal leaves no half-written output behind
            try:
                second = "\n" + paired_table(runs, args.paired)
            except ValueError as exc:
                parser.error(str(exc))
        print(eval_table(runs) + second, end="")
        return 0
    print(by_step_table(runs) if args.by_step else table(runs), end="")
    for note in step_notes(runs):
        print(f"note: {note}", file=sys.stderr)
    if args.figure is not None:
        figure(runs, args.figure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
