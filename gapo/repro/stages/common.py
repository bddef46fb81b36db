"""What every stage function shares: the `StageResult` it returns (and writes), model specs, samplers, training runs.

Why one home: each stage module (`gapo.repro.stages.<stage>`, named as in dvc.yaml) is `run(P) -> StageResult`, where
`P` is `gapo.repro.profiles.stage_params(<stage>, ...)`. `run` writes what DVC caches as it goes (data, adapters, raw
samples under outputs/), and returns the committed results (results/, metrics/, figures/ CSV and JSON) without writing
them; the notebook plots from the result and calls `StageResult.write`, and tests call `run` on tiny-random and inspect
the result. So the numbers a figure shows and the files a stage commits come from the same tested function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gapo.io import write_json_atomic, write_text_atomic
from gapo.repro.profiles import PipelineError

#: The name under `StageResult.files` that stands for the metrics document.
METRICS = "metrics"


@dataclass
class StageResult:
    """What a stage produced: tidy tables, its metrics document, and what its figure needs.

    ``files`` maps a table name, a document name or ``"metrics"`` to the path (relative to the repository root) that
    `write` gives it: tables as CSV, documents and metrics as JSON. Tables not named there (e.g. a stage's sample
    rows) are for the notebook to show. ``figure`` holds the figure's arguments that are not tables (e.g. which
    categories go in which panel); ``results`` the `ExperimentResult` of each model, by name.
    """

    tables: dict[str, pd.DataFrame]
    metrics: dict[str, Any] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    figure: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [name for name in self.files if name != METRICS and name not in {**self.tables, **self.documents}]
        if unknown:
            raise KeyError(f"StageResult.files names {unknown}, which are neither tables, documents nor 'metrics'")

    def write(self, root: str | Path = ".") -> list[Path]:
        """Write every file of `files` under `root` (atomically, so a kill never leaves half a file); the paths."""
        written = []
        for name, relative in self.files.items():
            path = Path(root) / relative
            if name in self.tables:
                written.append(write_csv(path, self.tables[name]))
            else:
                document = self.metrics if name == METRICS else self.documents[name]
                written.append(write_json_atomic(path, document, indent=2))
        return written


# --------------------------------------------------------------------------------------------------------------------
# Models and samplers
# --------------------------------------------------------------------------------------------------------------------


def model_spec(models: Mapping[str, Mapping[str, Any]], name: str, key: str) -> dict[str, Any]:
    """The `models` entry `name` that setting `key` names; one line naming the defined ones when it is not there."""
    if name not in models:
        raise PipelineError(f"{key} names model {name!r}, not one of the `models` section: {', '.join(models)}")
    return dict(models[name])


def labels_of(names: Sequence[str], models: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Each model's display label (its `label`, else its name), as `gapo.repro.samplers.Samplers.label` gives it."""
    return {name: str(models[name].get("label") or name) for name in names}


def stack(results: Mapping[str, Any], table: str, model_first: bool = True) -> pd.DataFrame:
    """One table of every model's `table` (``results[name].tables[table]``) with a ``model`` column, first or last
    (the paper-figure stages have always written it last; their CSV columns stay as they were)."""
    frames = [r.tables[table].assign(model=name) for name, r in results.items()]
    stacked = pd.concat(frames, ignore_index=True)
    return stacked[["model", *[c for c in stacked.columns if c != "model"]]] if model_first else stacked


def split_categories(table: pd.DataFrame, first: Sequence[str]) -> tuple[list[str], list[str]]:
    """The categories of `table` (in order of appearance) split into the `first` figure's (in `first`'s order, only
    those present) and the rest (the appendix figure's)."""
    present = list(dict.fromkeys(table["category"]))
    chosen = [c for c in first if c in present]
    return chosen, [c for c in present if c not in chosen]


# --------------------------------------------------------------------------------------------------------------------
# Writers of the committed results
# --------------------------------------------------------------------------------------------------------------------


def write_metrics(path: str | Path, models: Mapping[str, Mapping[str, Any]], **extra: Any) -> Path:
    """A DVC metrics file: ``{"models": {name: {metric: value}}, **extra}``."""
    document = {"models": {name: dict(values) for name, values in models.items()}, **extra}
    return write_json_atomic(path, document, indent=2)


def write_csv(path: str | Path, table: Any) -> Path:
    """A DataFrame (or a list of dicts) as CSV, written atomically; floats keep full precision."""
    frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame(list(table))
    return write_text_atomic(path, frame.to_csv(index=False, lineterminator="\n"))
