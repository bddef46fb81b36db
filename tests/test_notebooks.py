"""Every notebook executes under papermill with the `smoke` profile (tiny-random, tiny sizes) and writes what its
dvc.yaml stage declares.

The notebooks run in one temporary working directory, as DVC runs them from the repository root: a notebook's
prerequisites (the stages producing its dvc.yaml dependencies, e.g. the trained smoke adapters) run first, once per
session, and later notebooks read their outputs. params.yaml is the repository's; nothing is written to the repository.
About 3 minutes on an idle 2-core machine (each notebook starts a kernel and imports torch/transformers).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
import yaml

from gapo.repro import profiles
from gapo.repro.paper import PAPER_TABLE8

REPO = Path(__file__).resolve().parents[1]
DVC_STAGES: dict = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]


def _paths(entries: list) -> list[str]:
    return [next(iter(e)) if isinstance(e, dict) else e for e in entries or []]


def stage_outputs(stage: str) -> list[str]:
    spec = DVC_STAGES[stage]
    return [*_paths(spec.get("outs")), *_paths(spec.get("metrics")), *_paths(spec.get("plots"))]


def prerequisites(stage: str) -> list[str]:
    """Stages whose outputs are dependencies of `stage` in dvc.yaml."""
    deps = set(DVC_STAGES[stage].get("deps", []))
    return [other for other in DVC_STAGES if other != stage and deps & set(stage_outputs(other))]


class SmokeRunner:
    """Runs notebooks in `workdir` with the smoke profile, each at most once, prerequisites first."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.status: dict[str, BaseException | None] = {}

    def run(self, stage: str) -> Path:
        for before in prerequisites(stage):
            self.run(before)
            if self.status[before] is not None:
                pytest.fail(f"prerequisite stage {before!r} failed: {self.status[before]}")
        if stage not in self.status:
            self.status[stage] = self._execute(stage)
        if self.status[stage] is not None:
            raise self.status[stage]  # type: ignore[misc]
        return self.workdir / "outputs" / "notebooks" / Path(profiles.NOTEBOOKS[stage]).name

    def _execute(self, stage: str) -> BaseException | None:
        import papermill

        notebook = REPO / profiles.NOTEBOOKS[stage]
        executed = self.workdir / "outputs" / "notebooks" / notebook.name
        executed.parent.mkdir(parents=True, exist_ok=True)
        try:
            papermill.execute_notebook(
                str(notebook),
                str(executed),
                parameters={"profile": "smoke", "params_file": str(REPO / "params.yaml")},
                kernel_name="python3",
                cwd=str(self.workdir),
                progress_bar=False,
                execution_timeout=600,
            )
        except Exception as err:  # noqa: BLE001 - reported by the test of this stage and its dependents
            return err
        return None


@pytest.fixture(scope="session")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> SmokeRunner:
    os.environ.setdefault("MPLBACKEND", "Agg")
    return SmokeRunner(tmp_path_factory.mktemp("pipeline-smoke"))


@pytest.mark.parametrize("stage", list(DVC_STAGES))
def test_notebook_runs_with_smoke_profile(smoke: SmokeRunner, stage: str) -> None:
    executed = smoke.run(stage)
    nb = nbformat.read(executed, as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    missing = [p for p in stage_outputs(stage) if not (smoke.workdir / p).exists()]
    assert not missing, f"{stage} did not write its dvc.yaml outputs: {missing}"


@pytest.mark.parametrize("stage", list(DVC_STAGES))
def test_notebook_is_parameters_one_stage_call_and_its_plot(stage: str) -> None:
    """The work is in `gapo.repro.stages.<stage>.run` (tested on its own); the notebook only calls it, plots, writes."""
    nb = nbformat.read(REPO / profiles.NOTEBOOKS[stage], as_version=4)
    assert "parameters" in nb.cells[1].metadata.get("tags", [])
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert f"from gapo.repro.stages import {stage}\n" in code
    assert code.count(".run(") == 1 and code.count(f"result = {stage}.run(P)") == 1
    assert code.count("result.write()") == 1


REQUIRED_METRICS = {
    "metrics/uniformity.json": ("mean_jsd",),
    "metrics/open_set.json": ("mean_unique",),
    "metrics/creativity.json": ("mean_embedding_distance", "mean_one_minus_self_bleu"),
}


@pytest.mark.parametrize("path", [*REQUIRED_METRICS, "metrics/benchmarks.json"])
def test_metrics_are_per_model(smoke: SmokeRunner, path: str) -> None:
    stage = next(s for s in DVC_STAGES if path in stage_outputs(s))
    smoke.run(stage)
    document = json.loads((smoke.workdir / path).read_text(encoding="utf-8"))
    models = document["models"]
    assert {"baseline", "gapo"} <= set(models)
    for name, values in models.items():
        for key in REQUIRED_METRICS.get(path, ()):
            assert isinstance(values[key], (int, float)), (name, key)
    if path == "metrics/benchmarks.json":
        assert all(isinstance(models[m]["gsm8k"]["exact"], float) for m in ("baseline", "gapo"))


def test_table8_holds_every_baseline_and_the_paper_rows(smoke: SmokeRunner) -> None:
    import pandas as pd

    smoke.run("uniformity")
    table = pd.read_csv(smoke.workdir / "figures" / "table8_baselines.csv")
    ours = table[table["source"].str.startswith("this run")]
    assert len(ours) == len(profiles.stage_params("uniformity", "smoke", REPO / "params.yaml")["uniformity"]["models"])
    assert ours["js"].between(0, 1).all() and (ours["unique"] >= 0).all()
    assert len(table) - len(ours) == len(PAPER_TABLE8)


@pytest.mark.parametrize(
    ("path", "models", "headline"),
    [
        ("metrics/open_ended.json", {"baseline", "gapo", "gapo_open"}, "ratio_open_to_list"),
        ("metrics/targets.json", {"baseline", "gapo_targets"}, "goal_jsd"),
    ],
)
def test_issue13_metrics_name_every_model_and_the_headline(
    smoke: SmokeRunner, path: str, models: set[str], headline: str
) -> None:
    stage = next(s for s in DVC_STAGES if path in stage_outputs(s))
    smoke.run(stage)
    document = json.loads((smoke.workdir / path).read_text(encoding="utf-8"))
    assert set(document["models"]) == models and headline in document
    key = "mean_valid_unique" if stage == "open_ended" else "mean_jsd"
    assert all(isinstance(values[key], (int, float)) for values in document["models"].values())
    if stage == "open_ended":  # the validity rule of each held-out category is named
        settings = profiles.stage_params(stage, "smoke", REPO / "params.yaml")[stage]
        assert set(document["rules"]) == set(settings["categories"]) and all(document["rules"].values())
