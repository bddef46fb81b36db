"""`make try`: GAPO's effect on the embedded model in about five minutes on 2 CPU cores, with the real commands.

    python -m gapo.repro.first_try --out runs/try        # what `make try` runs

Three steps, each a `gapo` command printed before it runs (copy them to try your own lists or model):

1. `gapo eval` samples the base model on three of the paper's unseen lists: it collapses onto a few favourite items.
2. `gapo train` trains a LoRA adapter with GAPO (the committed recipe, params.yaml's `train` section, for a few steps)
   on two of those lists, planets and colors, asked as the evaluation asks them (`training_rows`).
3. `gapo eval --compare` scores the base model and the adapter on the same prompts, n and seeds: the table (with
   paired 95% intervals of GAPO minus base) and `try.png`, each list's answer shares before and after.

The third list, flowers, is not trained on: it shows how far two lists' training reaches a list never seen. A first
try shows that the method learns what it is trained on, fast; whether the skill transfers to unseen lists of unseen
categories is what the pipeline measures (README "Results", docs/uniformity_diagnosis.md).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gapo.io import write_jsonl_atomic, write_text_atomic
from gapo.repro import prompts as ep

#: The lists trained on, and the one only scored (all three from the paper's unseen lists, 8 items each).
TRAINED = ("planets", "colors")
UNTRAINED = ("flowers",)
#: Training rows per list (the dataset is read in a shuffled order; one row is one group of G rollouts).
ROWS_PER_LIST = 32


def training_rows(
    names: Sequence[str] = TRAINED,
    per_list: int = ROWS_PER_LIST,
    lists: Mapping[str, Sequence[str]] = ep.UNIFORMITY_LISTS,
) -> list[dict[str, Any]]:
    """`gapo train --dataset` rows for `names` of `lists`: each list's prompt worded as `gapo eval` words it,
    `per_list` times. The paper's unseen lists here; results/diagnosis/oracle/run.sh passes the held-in ones."""
    rows = []
    for name in names:
        items = list(lists[name])
        rows += [{"prompt": ep.user_message(ep.list_prompt(items)), "items": items, "category": name}] * per_list
    return rows


def commands(out: Path, steps: int, n: int, model: str = "embedded") -> dict[str, list[str]]:
    """The three `gapo` commands of a try writing under `out` (as argv lists, without the leading `gapo`)."""
    scored = ["--suite", "lists", "--lists", str(out / "lists.yaml"), "-n", str(n), "--no-progress"]
    return {
        "base": ["eval", "--model", model, *scored, "--out", str(out / "base")],
        "train": [
            "train",
            "--model",
            model,
            "--dataset",
            str(out / "train.jsonl"),
            "--max-steps",
            str(steps),
            "--save-steps",
            str(steps),
            "--lr-scheduler-type",
            "constant",
            "--warmup-steps",
            "0",
            "--output-dir",
            str(out / "gapo"),
        ],
        "after": [
            "eval",
            "--model",
            model,
            "--compare",
            f"{model}:{out / 'gapo' / 'adapter'}",
            *scored,
            "--out",
            str(out / "compare"),
        ],
    }


def per_list_table(doc: dict[str, Any]) -> str:
    """Each list's base -> GAPO JSD (with the invalid bin, and among valid answers), invalid share and top item's share,
    from `gapo eval --compare`'s eval.json: the means hide that trained and untrained lists move apart."""
    rows = {(r["model"], r["category"]): r for r in doc["tables"]["lists"]}
    base, gapo = list(doc["models"])[:2]
    lines = [f"{'list':<9} {'trained':<7} {'JSD':<15} {'JSD valid':<15} {'invalid':<15} top share"]
    for name in (*TRAINED, *UNTRAINED):
        before, after = rows[(base, name)], rows[(gapo, name)]
        cells = [f"{_num(before[k])} -> {_num(after[k])}" for k in ("jsd", "jsd_valid", "invalid", "top_share")]
        lines.append(f"{name:<9} {'yes' if name in TRAINED else 'no':<7} " + " ".join(f"{c:<15}" for c in cells))
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"  # JSD among valid answers: none when no answer was valid


def run(argv: list[str], log: Path) -> str:
    """Run `gapo ARGV` as its own process (stderr to `log`), echoing the command; its stdout, or exit with its code."""
    print(f"$ gapo {shlex.join(argv)}", flush=True)
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.run([sys.executable, "-m", "gapo.cli", *argv], stdout=subprocess.PIPE, stderr=err, text=True)
    if proc.returncode:
        tail = log.read_text(encoding="utf-8").strip().splitlines()[-1:]
        sys.exit(f"gapo try: `gapo {argv[0]}` failed ({tail[0] if tail else proc.returncode}); its log: {log}")
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gapo.repro.first_try", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/try", help="folder for the lists, data, adapter, tables and try.png")
    parser.add_argument("--steps", type=int, default=40, help="GAPO steps (one prompt x G=32 rollouts each)")
    parser.add_argument("-n", type=int, default=64, help="samples per list, before and after")
    parser.add_argument("--model", default="embedded", help="the base model (tests: tiny-random)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.n < 2:
        parser.error(f"need --steps >= 1 and -n >= 2, got --steps {args.steps} and -n {args.n}")
    out = Path(args.out)
    if (out / "gapo" / "adapter").exists():
        parser.error(f"{out} holds an earlier try; remove it (rm -r {out}) or pass another --out")
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "gapo", ignore_errors=True)  # a try cut short: start its training afresh
    write_text_atomic(
        out / "lists.yaml",
        yaml.safe_dump({name: list(ep.UNIFORMITY_LISTS[name]) for name in (*TRAINED, *UNTRAINED)}, sort_keys=False),
    )
    write_jsonl_atomic(out / "train.jsonl", training_rows())
    steps = commands(out, args.steps, args.n, args.model)
    start = time.time()
    print(f"1/3 the base model on {', '.join((*TRAINED, *UNTRAINED))} ({args.n} samples each)", flush=True)
    print(run(steps["base"], out / "base.log"), flush=True)
    print(f"2/3 GAPO on {' and '.join(TRAINED)}: {args.steps} steps of G=32 (params.yaml's recipe)", flush=True)
    run(steps["train"], out / "train.log")
    print(
        f"3/3 base and GAPO on the same prompts (GAPO-trained on {', '.join(TRAINED)}; not on {', '.join(UNTRAINED)})",
        flush=True,
    )
    table = run(steps["after"], out / "compare.log")
    shutil.copyfile(out / "compare" / "eval.png", out / "try.png")
    lists = per_list_table(json.loads((out / "compare" / "eval.json").read_text(encoding="utf-8")))
    write_text_atomic(out / "table.txt", f"{table}\n{lists}\n")
    print(table)
    print(f"per list, base -> GAPO (uniform: 0; a list of 8 has top share 0.125 when uniform):\n{lists}")
    print(
        f"per list: {out / 'compare' / 'eval.json'}; the picture: {out / 'try.png'}; "
        f"{(time.time() - start) / 60:.1f} min",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
