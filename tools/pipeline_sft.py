"""The pipeline's SFT baseline (stage train_sft) at another size or schedule: the paper's baseline given GAPO's budget.

Trains `gapo.repro.sft.train_sft` on the pipeline's own training rows (the generate stage's data/train.jsonl, the rows
train_gapo trains on) with params.yaml's `sft` section as the embedded profile resolves it, `--set KEY=VALUE` over it
and `--seed` (the LoRA init and the row order; the rows stay the pipeline's, so the held-in lists stay out of them).
Writes the adapter to OUT/adapter and OUT/record.json (the settings, seconds, every step's loss and rate). Score it as
the uniformity stage scores its models, on the paper's 10 unseen lists and the 10 held-in lists at the stage's n:

    gapo eval --model embedded --adapter OUT/adapter --suite lists -n 100 --max-new-tokens 16 --out OUT/eval

With `--merged` it also writes OUT/model, the base model with the adapter merged in (a full model directory), for GAPO
to train a fresh LoRA on after the SFT, as tools/list_transfer.py's `--sft-steps` does on its own lists:

    gapo train --model OUT/model --dataset data/train.jsonl --max_steps N --seed S --output_dir RUN
    gapo eval --model OUT/model --adapter RUN/adapter --suite lists -n 100 --max-new-tokens 16 --out RUN/eval

Why: the pipeline's SFT ran 40 steps (113 s) against train_gapo's 300 (1,706 s), and issue 34's goal "unseen lists
below SFT's" read GAPO against that baseline. The paper says the SFT "fails to generalize to unseen lists" (its
Appendix G); this asked whether it does when it gets GAPO's rows and time. It did not fail
(docs/uniformity_diagnosis.md, "The paper's SFT baseline given GAPO's rows"), and since 2026-12-07 params.yaml's `sft`
is the first command below.

    python tools/pipeline_sft.py --set steps=300 --set lr_scheduler_type=cosine --seed 0 --out runs/pipeline_sft/s0
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from gapo.io import atomic_dir, read_jsonl, write_json_atomic
from gapo.repro import profiles


def settings(overrides: dict[str, Any], seed: int, out: Path) -> tuple[dict[str, Any], str]:
    """The SFT's settings (params.yaml's `sft`, `overrides` over it, the seed and OUT/adapter) and the rows' path."""
    params = profiles.stage_params("train_sft", "embedded")
    return {**params["sft"], **overrides, "seed": seed, "output_dir": str(out / "adapter")}, params["data"]["out"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an `sft` setting (YAML)")
    parser.add_argument("--seed", type=int, default=0, help="the LoRA init and the row order (default 0, the stage's)")
    parser.add_argument("--rows", default=None, help="training rows (JSONL: prompt, items); default the pipeline's")
    parser.add_argument(
        "--merged", action="store_true", help="also write OUT/model: the base model with the adapter merged in"
    )
    parser.add_argument("--out", required=True, help="a new folder: OUT/adapter, OUT/record.json (and OUT/model)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set takes KEY=VALUE, got {item!r}")
        overrides[key] = yaml.safe_load(value)
    for key in ("seed", "output_dir"):
        if key in overrides:
            parser.error(f"--set {key}=... is this tool's own (--seed, --out)")
    out = Path(args.out)
    if out.exists():
        parser.error(f"--out {out} exists: give a new folder")
    config, rows_path = settings(overrides, args.seed, out)
    from gapo.repro.sft import SFTConfig, train_sft  # torch and PEFT: after the flags' own checks

    try:
        checked = SFTConfig(**config)
    except (TypeError, ValueError) as error:
        parser.error(f"the SFT's settings (params.yaml's sft, --set): {error}")
    rows_path = args.rows or rows_path
    if not Path(rows_path).is_file():
        parser.error(
            f"--rows {rows_path} is not a file"
            if args.rows
            else f"{rows_path} is missing: run `dvc repro generate` first (or give --rows)"
        )
    rows = read_jsonl(rows_path)
    if not rows:
        parser.error(f"{rows_path} has no rows to train on")
    import datasets

    started = time.perf_counter()
    data = datasets.Dataset.from_list(rows)
    with atomic_dir(out) as tmp:  # a run stopped part way leaves no OUT, so the same command starts it again
        result = train_sft(replace(checked, output_dir=str(tmp / "adapter")), dataset=data)
        seconds = round(time.perf_counter() - started, 1)
        steps_file = tmp / "adapter" / "sft_config.json"
        steps = json.loads(steps_file.read_text(encoding="utf-8"))
        steps["config"]["output_dir"] = config["output_dir"]  # where it lies once OUT is in place
        write_json_atomic(steps_file, steps, indent=1)
        record = {
            "command": " ".join(["python", "tools/pipeline_sft.py", *(argv if argv is not None else sys.argv[1:])]),
            "settings": config,
            "rows": rows_path,
            "seconds": seconds,
            "loss_first": result.losses[0],
            "loss_last": result.losses[-1],
            "losses": steps["losses"],
            "learning_rates": steps["learning_rates"],
        }
        if args.merged:
            from gapo.models import save_merged

            save_merged(checked.model, tmp / "adapter", tmp / "model")
            record["merged_seconds"] = round(time.perf_counter() - started - seconds, 1)
        write_json_atomic(tmp / "record.json", record)
    merged_note = f" and {out / 'model'}" if args.merged else ""
    print(f"{checked.steps} SFT steps in {seconds} s -> {out / 'adapter'}{merged_note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
