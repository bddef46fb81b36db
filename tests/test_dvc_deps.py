"""dvc.yaml lists, for every stage, exactly the gapo modules its notebook can run (tools/dvc_deps.py generates them),
so `dvc repro` never keeps a stale result and never reruns for code the stage does not import."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import dvc_deps  # noqa: E402

STAGES: dict = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]


@pytest.mark.parametrize("name", list(STAGES))
def test_stage_lists_exactly_the_gapo_modules_its_notebook_runs(name: str) -> None:
    want = set(dvc_deps.code_deps(STAGES[name]))
    have = {dvc_deps.repo_path(d) for d in STAGES[name]["deps"] if dvc_deps.repo_path(d).startswith("gapo/")}
    have = {d for d in have if d.endswith(".py")}
    assert (sorted(want - have), sorted(have - want)) == ([], []), "regenerate: python tools/dvc_deps.py"


@pytest.mark.parametrize("name", list(STAGES))
def test_stage_deps_exist(name: str) -> None:
    """A dependency that names no file (a module moved or renamed) is an error DVC itself only reports on repro."""
    listed = [dvc_deps.repo_path(d) for d in STAGES[name]["deps"]]
    listed = [d for d in listed if d.startswith(("gapo", "notebooks", "data/benchmarks"))]
    assert [d for d in listed if not (ROOT / d).exists()] == []


def test_the_import_finder_follows_lazy_relative_and_from_imports() -> None:
    code = "from gapo.repro import plotting\nimport gapo.repro.benchmarks.runner\n"
    code += "def f():\n    from gapo.repro.sampling import Sampler\n"
    found = dvc_deps.gapo_imports(ast.parse(code))
    expected = {"gapo", "gapo.repro", "gapo.repro.plotting", "gapo.repro.benchmarks", "gapo.repro.benchmarks.runner"}
    assert expected <= found
    assert "gapo.repro.sampling" in found
    assert dvc_deps.gapo_imports(ast.parse("from .scoring import METRICS"), "gapo.repro.benchmarks.runner") == {
        "gapo",
        "gapo.repro",
        "gapo.repro.benchmarks",
        "gapo.repro.benchmarks.scoring",
    }


def test_rewrite_adds_a_missing_module_drops_a_stale_one_and_keeps_comments(tmp_path: Path) -> None:
    """The issue-11 case: gapo.plotting reached only through the notebook's own import, and a stale listed module."""
    (tmp_path / "gapo").mkdir()
    (tmp_path / "gapo" / "__init__.py").write_text("")
    (tmp_path / "gapo" / "plotting.py").write_text("from gapo import io\n")
    (tmp_path / "gapo" / "io.py").write_text("X = 1\n")
    (tmp_path / "gapo" / "old.py").write_text("Y = 1\n")
    notebook = {"cells": [{"cell_type": "code", "source": ["%matplotlib inline\n", "from gapo import plotting\n"]}]}
    (tmp_path / "nb.ipynb").write_text(json.dumps(notebook))
    dvc = tmp_path / "dvc.yaml"
    dvc.write_text(
        "# top comment\nstages:\n  plot:\n    cmd: papermill nb.ipynb out.ipynb\n    deps:\n"
        "      - nb.ipynb\n      - gapo/old.py  # stale\n      - data.csv\n    outs:\n      - out.ipynb\n"
    )
    want = ["gapo/__init__.py", "gapo/io.py", "gapo/plotting.py"]
    assert dvc_deps.stale_stages(dvc) == {"plot": (want, ["gapo/old.py"])}
    assert dvc_deps.main(["--check", "--dvc-file", str(dvc)]) == 1
    assert dvc_deps.main(["--dvc-file", str(dvc)]) == 0
    text = dvc.read_text()
    assert text.startswith("# top comment\n") and "gapo/old.py" not in text
    assert yaml.safe_load(text)["stages"]["plot"]["deps"] == ["nb.ipynb", *want, "data.csv"]
    assert dvc_deps.stale_stages(dvc) == {}


def test_a_module_that_loads_plugins_depends_on_the_registered_modules() -> None:
    """Loading `embedded` (gapo.models) runs gapo.repro.offline through its entry point: a stage that loads a model
    reruns when the offline packaging changes, though no import names it."""
    assert dvc_deps.plugin_modules("gapo.models") == {"gapo", "gapo.repro", "gapo.repro.offline"}
    assert "gapo.repro.offline" in dvc_deps.plugin_modules("gapo.embeddings")
    assert dvc_deps.plugin_modules("gapo.metrics") == set()
    assert "gapo.repro.offline" in dvc_deps.module_closure({"gapo.models"})
