"""The layers only point down (docs/layout.md): import-linter's contracts in pyproject.toml hold, and no import
circle exists, so `make test` fails on the first import against the layers (one inside a function counts too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import house  # noqa: E402


@pytest.mark.skipif(
    not house.LINT_IMPORTS.is_file(), reason="import-linter is in the dev extra: pip install -e '.[dev]'"
)
def test_the_import_contracts_hold() -> None:
    run = house.lint_imports()
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_no_import_circles() -> None:
    assert house.circles(house.import_graph()) == []


def test_the_circle_finder_finds_a_circle(tmp_path: Path) -> None:
    """The check above can fail: a package whose a imports b (inside a function) and b imports a is reported."""
    package = tmp_path / "circ"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from circ import b\n")
    (package / "b.py").write_text("from circ import a\n")
    (package / "c.py").write_text("from circ import a\n")
    assert house.circles(house.import_graph("circ", tmp_path)) == [("circ.a", "circ.b"), ("circ.b", "circ.a")]


def test_line_counts_leave_out_docstrings_comments_and_blank_lines() -> None:
    source = (
        '"""Module."""\n\n# a comment\nX = 1  # kept: code\n#: documented\nY = 2\n"""Y\'s docstring."""\n\n\n'
        'def f():\n    """Doc\n    on two lines."""\n    return "not a docstring"\n'
    )
    assert house.line_counts(source) == (13, 4)


def test_house_measures_this_repository() -> None:
    """The closing note's numbers: every part sized, no circle, the contracts kept, each stage's deps counted."""
    found = house.measure()
    assert found["sizes"]["core"]["code"] < found["sizes"]["core"]["lines"]
    assert found["sizes"]["harness"]["modules"] > 10
    assert found["circles"] == 0
    assert found["contracts"] == {"kept": 4, "broken": 0}
    assert found["stage_deps"]["generate"] < found["stage_deps"]["train_gapo"]
    assert set(found["glue"]) == set(house.GLUE)


def test_code_changed_since_tells_prose_from_code(tmp_path: Path) -> None:
    """Prose edits keep the code tree (dvc.lock may be recommitted); a changed, added or removed module is named."""
    (tmp_path / "gapo").mkdir()
    module = tmp_path / "gapo" / "a.py"
    module.write_text('"""Doc."""\n\n\ndef f():\n    """Why."""\n    return 1  # one\n')
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    module.write_text('"""Shorter."""\n\n\ndef f():\n    return 1\n')
    assert house.code_changed_since("HEAD", tmp_path) == []
    module.write_text('"""Doc."""\n\n\ndef f():\n    return 2\n')
    (tmp_path / "gapo" / "b.py").write_text("")
    assert house.code_changed_since("HEAD", tmp_path) == ["gapo/a.py", "gapo/b.py"]
    assert house.code_changes_since("HEAD", tmp_path) == {"gapo/a.py": ["~f"], "gapo/b.py": ["+file"]}


def test_changed_definitions_name_each_top_level_statement() -> None:
    """A refactor's evidence names what moved: defs and classes by name, assignments by target, imports by line; a
    docstring edit inside an unchanged def is not a change."""
    old = 'import os\nX = 1\n\n\ndef f():\n    """Old why."""\n    return X\n\n\nclass C:\n    pass\n'
    new = 'import os, sys\nX = 2\n\n\ndef f():\n    """New why."""\n    return X\n\n\ndef g():\n    return 0\n'
    assert house.changed_definitions(old, old) == []
    assert house.changed_definitions(old, new) == ["-import os", "-C", "+import os, sys", "~X", "+g"]
