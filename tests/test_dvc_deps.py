"""dvc.yaml lists, for every stage, each gapo module its notebook can run, so `dvc repro` never keeps a stale result.

A module counts when the notebook imports it, or a counted module imports it anywhere (at the top or inside a
function: a lazy import is still code the stage may run), found with `ast`, not by importing anything. A stage's
dependency on a folder (``gapo/benchmarks``, or ``gapo`` itself) covers every module under it. A module file with
no statements (an empty ``__init__.py``) is not counted: it cannot change what a stage computes.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
STAGES: dict = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]


def module_file(name: str) -> Path | None:
    """``gapo.x.y`` -> gapo/x/y.py or gapo/x/y/__init__.py; None for a name that is not a module (an attribute)."""
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def gapo_imports(tree: ast.AST, module: str = "") -> set[str]:
    """Every gapo module `tree` imports, with its parent packages (importing gapo.a.b runs gapo/a/__init__.py)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                package = module.split(".")[: -node.level]
                base = ".".join([*package, base] if base else package)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # `from gapo import plotting`
    parts = [name.split(".") for name in names if name.split(".")[0] == "gapo"]
    return {".".join(p[:i]) for p in parts for i in range(1, len(p) + 1) if module_file(".".join(p[:i]))}


def notebook_code(path: Path) -> str:
    """The code cells of a notebook, IPython magics and shell lines dropped."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    lines = [line for c in cells if c["cell_type"] == "code" for line in "".join(c["source"]).splitlines()]
    return "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))


def module_closure(start: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            file = module_file(name)
            assert file is not None
            todo.extend(gapo_imports(ast.parse(file.read_text(encoding="utf-8")), name))
    return seen


def _has_code(path: Path) -> bool:
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return any(not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in body)


def stage_notebook(stage: dict) -> Path:
    notebooks = [d for d in stage["deps"] if d.endswith(".ipynb") and d in stage["cmd"]]
    assert len(notebooks) == 1, f"expected one notebook that the stage runs and lists, got {notebooks}"
    return ROOT / notebooks[0]


def missing_deps(stage: dict) -> list[str]:
    modules = module_closure(gapo_imports(ast.parse(notebook_code(stage_notebook(stage)))))
    files = sorted(str(f.relative_to(ROOT)) for f in map(module_file, modules) if f is not None and _has_code(f))
    deps = [d.rstrip("/") for d in stage["deps"]]
    return [f for f in files if not any(f == d or f.startswith(d + "/") for d in deps)]


@pytest.mark.parametrize("name", list(STAGES))
def test_stage_lists_every_gapo_module_its_notebook_runs(name: str) -> None:
    missing = missing_deps(STAGES[name])
    assert not missing, f"dvc.yaml stage {name!r}: add to its deps: {', '.join(missing)}"


@pytest.mark.parametrize("name", list(STAGES))
def test_stage_deps_exist(name: str) -> None:
    """A dependency that names no file (a module moved or renamed) is an error DVC itself only reports on repro."""
    listed = [d for d in STAGES[name]["deps"] if d.startswith(("gapo", "notebooks"))]
    assert [d for d in listed if not (ROOT / d).exists()] == []


def test_the_import_finder_follows_lazy_relative_and_from_imports(tmp_path: Path) -> None:
    code = "from gapo import plotting\nimport gapo.benchmarks.runner\ndef f():\n    from gapo.sampling import Sampler\n"
    found = gapo_imports(ast.parse(code))
    assert {"gapo", "gapo.plotting", "gapo.benchmarks", "gapo.benchmarks.runner", "gapo.sampling"} == found
    assert gapo_imports(ast.parse("from .scoring import METRICS"), "gapo.benchmarks.runner") == {
        "gapo",
        "gapo.benchmarks",
        "gapo.benchmarks.scoring",
    }
    # The benchmarks stage's case from issue 11: gapo.plotting reached only through the notebook's own import.
    stage = {"cmd": "papermill nb.ipynb", "deps": ["nb.ipynb", "gapo/benchmarks"]}
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["%matplotlib inline\n", code]}]}))
    stage["deps"][0] = str(notebook)
    stage["cmd"] = f"papermill {notebook}"
    assert "gapo/plotting.py" in missing_deps(stage) and not any(
        m.startswith("gapo/benchmarks/") for m in missing_deps(stage)
    )
