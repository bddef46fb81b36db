"""Checkpoints of a training run: which one `--resume` continues from, and what a killed run left behind.

transformers writes checkpoint-N/ in place, trainer_state.json last: a kill during that save leaves that file missing or
torn, and one during the rotation leaves the checkpoint it was deleting partial. So a checkpoint counts only when its
trainer_state.json parses, names its own step, and its weights file is whole. Not in `gapo.train` because the harness
(`gapo.repro.pipeline`) asks the same of a run directory, and a run must not call the pipeline nor the pipeline the run.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from gapo.io import temp_glob

logger = logging.getLogger(__name__)


def checkpoint_step(path: Path) -> int | None:
    """The step N of a ``checkpoint-N`` folder, None for any other name: one parser for the run, the harness and the
    tools, so a stray ``checkpoint-final`` or ``checkpoint-3.tmp`` is never read as a step."""
    suffix = path.name.rsplit("-", 1)[-1]
    return int(suffix) if path.name.startswith("checkpoint-") and suffix.isdigit() else None


def checkpoint_problem(path: Path) -> str | None:
    """None when `path` is a complete checkpoint; else what is missing or damaged."""
    try:
        state = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no trainer_state.json"
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "torn trainer_state.json"
    if not isinstance(state, dict) or state.get("global_step") != checkpoint_step(path):
        return "trainer_state.json names another step"
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        return "no weights (*.safetensors)"
    for file in weights:
        if problem := safetensors_problem(file):
            return f"{file.name} {problem}"
    return None


def last_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete checkpoint in `output_dir` (None if there is none), warning about each one skipped."""
    ckpts = sorted(
        (p for p in Path(output_dir).glob("checkpoint-*") if p.is_dir() and checkpoint_step(p) is not None),
        key=checkpoint_step,
        reverse=True,
    )
    for path in ckpts:
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        logger.warning("skipping incomplete checkpoint %s (%s): a kill during its save", path, problem)
    return None


def remove_incomplete(output_dir: Path, keep: Path | None) -> None:
    """Delete partial checkpoints and temporary adapter directories of a killed run; else the trainer saves into a
    half-written checkpoint-N again and its rotation (by mtime) may keep a partial one and delete a whole one."""
    for path in output_dir.glob("checkpoint-*"):
        if path != keep and path.is_dir() and checkpoint_problem(path) is not None:
            logger.warning("removing incomplete checkpoint %s", path)
            shutil.rmtree(path, ignore_errors=True)
    for path in output_dir.glob(temp_glob(output_dir / "adapter")):
        shutil.rmtree(path, ignore_errors=True)


def safetensors_problem(path: Path) -> str | None:
    """None when `path` is a whole safetensors file (its header parses and covers exactly the file); else why not.
    Reads the header only, so a truncated or overwritten adapter is reported before any model is loaded."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            header_len = int.from_bytes(f.read(8), "little")
            if size < 8 or not 0 < header_len <= size - 8:
                return f"truncated or not safetensors ({size} bytes, header length {header_len})"
            header = json.loads(f.read(header_len))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as err:
        return f"damaged header ({type(err).__name__})"
    expected = 8 + header_len + max(ends, default=0)
    if expected != size:
        return f"holds {size} bytes where its header describes {expected} (truncated or appended to)"
    return None
