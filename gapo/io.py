"""Atomic writes: the one place gapo writes a file or directory that others (DVC, a resumed run, a reader) rely on.

Every write goes to a temp name next to the target (``.{name}.XXXXXXXX.partial``, same filesystem), renamed into place
only when complete: a reader sees the old content or the new, never half, and a failure short of a kill leaves nothing
behind. Temps are created private (mkstemp 0600, mkdtemp 0700) and get the mode `open()`/`mkdir()` would give under the
current umask before the rename, so a result written atomically is as readable as one written plainly."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

TEMP_SUFFIX = ".partial"

logger = logging.getLogger(__name__)


def default_file_mode() -> int:
    """The mode `open()` would give a new file under the current umask (0644 with the usual 022)."""
    return 0o666 & ~_umask()


def default_dir_mode() -> int:
    """The mode `mkdir()` would give a new directory under the current umask (0755 with the usual 022)."""
    return 0o777 & ~_umask()


def _umask() -> int:
    # The umask can only be read by setting it; set it straight back.
    umask = os.umask(0)
    os.umask(umask)
    return umask


def temp_glob(target: str | Path) -> str:
    """Glob pattern (relative to the target's folder) of the temp names `target`'s atomic writes use: a killed process
    cannot clean up, so whoever resumes in that folder removes these (see gapo.train)."""
    return f".{Path(target).name}.*{TEMP_SUFFIX}"


def _temp_prefix(target: Path) -> str:
    return f".{target.name}."


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp file path next to `path` for a writer that needs a name (e.g. ``fig.savefig(tmp)``); on normal
    exit it becomes `path`, with the umask's default mode; on an exception it is removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=_temp_prefix(target), suffix=TEMP_SUFFIX)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, default_file_mode())  # mkstemp makes 0600; a result file should be readable like any other
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", **open_kwargs: Any) -> Iterator[IO[Any]]:
    """``open(path, mode)`` that replaces `path` only when the block completes. Text mode defaults to UTF-8."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes a whole file: mode must be 'w' or 'wb', not {mode!r}")
    if mode == "w":
        open_kwargs.setdefault("encoding", "utf-8")
    with atomic_path(path) as tmp, open(tmp, mode, **open_kwargs) as f:
        yield f


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8, newlines as given) to `path` atomically; returns the path."""
    with atomic_open(path, "w", newline="") as f:
        f.write(text)
    return Path(path)


def update_or_check(path: str | Path, current: str, updated: str, check: bool, stale: str) -> int:
    """A generated file's `--check` / rewrite step: with `check`, 1 and the one line `stale` on stderr when `updated`
    differs from `current` (the file's text), else 0; without it, write `updated` (atomically, only when it
    changed) and return 0. One home for the generators that tests keep in step with their sources."""
    if updated == current:
        return 0
    if check:
        print(stale, file=sys.stderr)
        return 1
    write_text_atomic(path, updated)
    return 0


def json_ready(value: Any) -> Any:
    """`value` made JSON-ready: numpy scalars to Python, NaN/inf to None (DVC and JSON readers choke on NaN)."""
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value


def write_json_atomic(path: str | Path, document: Any, **dumps_kwargs: Any) -> Path:
    """The one JSON writer (results, metrics, run configs, summaries): `json_ready(document)`, UTF-8, atomically."""
    dumps_kwargs.setdefault("ensure_ascii", False)
    return write_text_atomic(path, json.dumps(json_ready(document), **dumps_kwargs) + "\n")


def write_jsonl_atomic(path: str | Path, records: Iterable[dict[str, Any]]) -> Path:
    """One JSON object per line, streamed to the temp file (records may be a generator); returns the path."""
    with atomic_open(path, "w") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return Path(path)


def read_jsonl(path: str | Path, *, torn_tail: bool = False) -> list[dict[str, Any]]:
    """The rows of a JSONL file (the one JSONL reader); a line that is not JSON is a one-line error naming file and
    line. `torn_tail=True` instead drops a bad *last* line with a warning: what a kill mid-append leaves in a log (a
    training run's metrics.jsonl); a bad line anywhere else is not a kill's doing, so it stays an error."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if torn_tail and number == len(lines):
                logger.warning("%s: dropped a torn last line (%s), left by an interrupted run", path, err.msg)
                continue
            fix = "; fix or delete that line" if torn_tail else ""
            raise ValueError(f"{path}: line {number} is not JSON ({err.msg}){fix}") from err
    return rows


@contextmanager
def atomic_dir(path: str | Path, *, overwrite: bool = True) -> Iterator[Path]:
    """Yield an empty temp directory next to `path` to fill in the block; on normal exit it becomes `path`.

    `overwrite=True` replaces an existing `path` (removed just before the rename: the one moment a reader can find no
    directory, never a partial one). `overwrite=False` keeps an existing `path` and discards the new copy, for caches
    that concurrent processes may build at once: the first complete one wins."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=_temp_prefix(target), suffix=TEMP_SUFFIX))
    try:
        yield tmp
        os.chmod(tmp, default_dir_mode())  # mkdtemp makes 0700
        if overwrite and target.exists():
            shutil.rmtree(target)
        try:
            os.replace(tmp, target)
        except OSError:
            if overwrite or not target.exists():  # without overwrite, a target that appeared meanwhile wins
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
