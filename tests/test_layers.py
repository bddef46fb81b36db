"""The layers only point down (README "Layout"): import-linter's contracts in pyproject.toml hold, and no import
circle exists, so `make test` fails on the first import against the layers (one inside a function counts too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


@pytest.mark.skipif(not LINT_IMPORTS.is_file(), reason="import-linter is in the dev extra: pip install -e '.[dev]'")
def test_the_import_contracts_hold() -> None:
    run = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=ROOT,
        env={"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def circles(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """Every import a -> b (modules of gapo, at any depth) for which b also reaches a: each lies on a circle."""
    found = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if graph.chain_exists(importer=imported, imported=importer):
                found.append((importer, imported))
    return found


def test_no_import_circles() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        graph = grimp.build_graph("gapo", cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle(tmp_path: Path) -> None:
    """The check above can fail: a package whose a imports b (inside a function) and b imports a is reported."""
    package = tmp_path / "circ"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from circ import b\n")
    (package / "b.py").write_text("from circ import a\n")
    (package / "c.py").write_text("from circ import a\n")
    sys.path.insert(0, str(tmp_path))
    try:
        graph = grimp.build_graph("circ", cache_dir=None)
    finally:
        sys.path.remove(str(tmp_path))
    assert circles(graph) == [("circ.a", "circ.b"), ("circ.b", "circ.a")]
