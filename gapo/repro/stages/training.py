"""What the training stages share (train_gapo, open_ended, targets): their configs, resumable run dirs, the
adapter copy, the training log.

Why a module of its own: only those stages import it, so a change to the trainer reruns the training stages and the
ones downstream of their adapters, not `generate` (dvc.yaml's code deps follow the imports; tools/dvc_deps.py).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from gapo.checkpoints import last_checkpoint
from gapo.io import atomic_dir, read_jsonl, write_json_atomic
from gapo.train import ScriptArguments, configs, run_config, task_data, train

#: The keys every training stage's section may set over the `train` section: its run's size and its reward (a
#: stage of one reward sets split_format_reward false and reward_weights null). Each stage adds its task's own keys.
RUN_KEYS: tuple[str, ...] = ("max_steps", "num_prompts", "save_steps", "split_format_reward", "reward_weights")


def trained_spec(base: Mapping[str, Any], adapter: str, label: str) -> dict[str, Any]:
    """A `models` entry for the adapter a stage trains on `base`'s model."""
    return {"model": base["model"], "adapter": adapter, "label": label}


def train_config(
    train: Mapping[str, Any], section: Mapping[str, Any], keys: Sequence[str], model: str, task: str
) -> tuple[ScriptArguments, Any]:
    """The (ScriptArguments, GAPOConfig) of a stage's own run (`gapo.train.configs`): the `train` section, the
    stage's `keys` on top, its model, task and run dir (``section["output_dir"]``). Built, and so checked, before
    anything trains: a bad value is one line."""
    changes = {k: section[k] for k in keys if k in section}
    return configs({**train, **changes, "model": model, "task": task, "output_dir": section["output_dir"]})


def train_adapter(
    config: tuple[ScriptArguments, Any], adapter: str | Path, title: str | None = None, dataset: Any | None = None
) -> dict[str, Any]:
    """Train `config` (ScriptArguments, GAPOConfig) in its run dir on `dataset` (default: the one its task builds,
    `gapo.train.task_data`) and copy the adapter to `adapter`; the run's summary.

    The task's data and reward are checked first (`task_data`), so a bad setting leaves the run dir as it was. An
    interrupted run of the same config is resumed (`prepare_run_dir`): a killed `dvc repro` loses at most one
    save interval. The summary is also written next to the adapter (``train_summary.json``), less its seconds and its
    config's `resume`: the adapter directory is a DVC output, and a re-run that trains the same weights, fresh or
    resumed, must give the same bytes there (the seconds stay in the run dir's metrics.json and the stage's metrics).
    """
    script, args = config
    task_data(script, args, dataset)
    script.resume = prepare_run_dir(args.output_dir, run_config(script, args))
    print(
        f"{title or script.task}: {script.model}, {args.max_steps} steps, G={args.num_generations}, "
        f"resume={script.resume}"
    )
    summary = train(script, args, dataset)
    copy_dir(Path(args.output_dir) / "adapter", adapter)
    kept = {k: v for k, v in summary.items() if k != "train_seconds"} | {"config": _comparable(summary["config"])}
    write_json_atomic(Path(adapter) / "train_summary.json", kept, indent=2)
    return summary


def training_log(config: tuple[ScriptArguments, Any]) -> pd.DataFrame:
    """The run's per-step metrics (its metrics.jsonl) as a table."""
    return pd.DataFrame(read_jsonl(Path(config[1].output_dir) / "metrics.jsonl"))


def train_metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a run's summary a metrics document keeps: steps, minutes and the last step's metrics."""
    return {"steps": summary["steps"], "minutes": summary["train_seconds"] / 60, "last": summary["last"]}


def prepare_run_dir(run_dir: str | Path, config: Mapping[str, Any]) -> bool:
    """Make `run_dir` ready for `gapo.train.train`; returns whether to resume.

    An unfinished run (checkpoints, no adapter) with the same config is resumed: an interrupted `dvc repro` loses
    at most one save interval. Anything else there (a finished run, another config) is removed: DVC reruns a stage
    only when its inputs changed, so the run starts afresh.
    """
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return False
    saved = run_dir / "config.json"
    try:
        same = saved.is_file() and _comparable(json.loads(saved.read_text(encoding="utf-8"))) == _comparable(config)
    except json.JSONDecodeError:  # torn by a kill: not a run we can trust
        same = False
    # Only a complete checkpoint counts: a kill during a save leaves a partial one, which `train` skips (and says so).
    if same and not (run_dir / "adapter").exists() and last_checkpoint(run_dir) is not None:
        return True
    shutil.rmtree(run_dir)
    return False


def _comparable(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k != "resume"}


def copy_dir(src: str | Path, dst: str | Path) -> Path:
    """Replace `dst` with a copy of `src` (copied next to it first, then renamed into place)."""
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise FileNotFoundError(f"{src} is not a directory")
    with atomic_dir(dst) as tmp:
        shutil.copytree(src, tmp, dirs_exist_ok=True)
    return dst
