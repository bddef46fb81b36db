"""Measure the package's house (docs/layout.md): core and harness size, import circles, the layer contracts, each
stage's gapo code deps and the glue's size, so that the numbers in a closing note come from one command.

Why lines and code lines both: `wc -l` is what the size goal counts; code lines (no docstring, comment or blank line)
show whether a change moved code or only prose.

    python tools/house.py            # a table on stdout
    python tools/house.py --json     # the same as one JSON object
    python tools/house.py --code-changed-since REV   # gapo modules whose code (not prose) differs from git REV,
                                                     # each with its top-level definitions added (+), removed (-)
                                                     # and changed (~)

Why `--code-changed-since`: a change to a stage's code dep invalidates dvc.lock. When only docstrings and comments
changed (the same syntax tree without them), `dvc commit` records the new files without a two-hour rerun, and this
check is the evidence (it exits 1 when any module's code changed). When code moved, it names what did, and
tools/same_training.py checks that training still gives the same adapter bits.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import grimp
import yaml
from dvc_deps import repo_path  # tools/, first on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
#: The glue the issue counted (config, pipeline, the run, the stages' shared code).
GLUE = ("gapo/config.py", "gapo/repro/pipeline.py", "gapo/train.py", "gapo/repro/stages/common.py")


def is_prose(stmt: object) -> bool:
    """A statement that is only a string: a docstring, or a bare string documenting an attribute."""
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def line_counts(source: str) -> tuple[int, int]:
    """(lines, code lines) of a Python source: code lines leave out docstrings, comment-only lines and blank lines."""
    lines = source.splitlines()
    prose: set[int] = {i for i, line in enumerate(lines, 1) if not line.strip()}
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)  # a lambda's body is one expression, not a list
        for stmt in body if isinstance(body, list) else []:
            if is_prose(stmt):
                prose.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and lines[tok.start[0] - 1].strip().startswith("#"):
            prose.add(tok.start[0])
    return len(lines), len(lines) - len(prose)


def part_of(path: Path) -> str:
    """'harness' for gapo/repro, 'cli' for gapo/cli.py, else 'core' (docs/layout.md)."""
    rel = path.relative_to(ROOT).as_posix()
    return "harness" if rel.startswith("gapo/repro/") else "cli" if rel == "gapo/cli.py" else "core"


def sizes() -> dict[str, dict[str, int]]:
    """Lines and code lines of the core, the harness and the CLI."""
    out = {part: {"lines": 0, "code": 0, "modules": 0} for part in ("core", "harness", "cli")}
    for path in sorted((ROOT / "gapo").rglob("*.py")):
        lines, code = line_counts(path.read_text(encoding="utf-8"))
        part = out[part_of(path)]
        part["lines"] += lines
        part["code"] += code
        part["modules"] += 1
    return out


def circles(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """Every import a -> b (modules of gapo, at any depth) for which b also reaches a: each lies on a circle."""
    found = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if graph.chain_exists(importer=imported, imported=importer):
                found.append((importer, imported))
    return found


def import_graph(package: str = "gapo", root: Path = ROOT) -> grimp.ImportGraph:
    """grimp's graph of `package` found under `root` (imports inside functions included)."""
    sys.path.insert(0, str(root))
    try:
        return grimp.build_graph(package, cache_dir=None)
    finally:
        sys.path.remove(str(root))


#: import-linter's command, beside this Python (the dev extra installs it).
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports() -> subprocess.CompletedProcess[str]:
    """`lint-imports` on this repository's contracts (pyproject.toml), uncached, its output captured."""
    env = {"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def contracts() -> dict[str, int]:
    """import-linter's kept and broken contracts, from `lint_imports`."""
    run = lint_imports()
    found = re.search(r"(\d+) kept, (\d+) broken", run.stdout)
    if found is None:
        raise RuntimeError(f"lint-imports printed no summary: {(run.stdout + run.stderr)[-500:]}")
    return {"kept": int(found[1]), "broken": int(found[2])}


def stage_deps() -> dict[str, int]:
    """How many gapo modules each dvc.yaml stage depends on (tools/dvc_deps.py writes them from the imports)."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    return {
        name: sum(1 for dep in stage.get("deps", []) if repo_path(dep).startswith("gapo/") and dep.endswith(".py"))
        for name, stage in stages.items()
    }


def code_tree(source: str) -> str:
    """The syntax tree of `source` without docstrings and bare documenting strings: equal trees run the same code."""
    return ast.dump(_without_prose(ast.parse(source)), include_attributes=False)


def _without_prose(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            node.body = [stmt for stmt in body if not is_prose(stmt)] or [ast.Pass()]  # type: ignore[attr-defined]
    return tree


def changed_definitions(old: str, new: str) -> list[str]:
    """What differs, in code, between two versions of a module, by top-level statement: `+name` added, `-name` removed,
    `~name` changed (a def or class by its name, an assignment by its targets, anything else by its first line)."""

    def by_name(source: str) -> dict[str, str]:
        found = {}
        for stmt in _without_prose(ast.parse(source)).body:  # type: ignore[attr-defined]
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                key = stmt.name
            elif isinstance(stmt, ast.Assign | ast.AnnAssign):
                key = ", ".join(ast.unparse(t) for t in getattr(stmt, "targets", [getattr(stmt, "target", None)]))
            else:
                key = ast.unparse(stmt).splitlines()[0]
            found[key] = ast.dump(stmt, include_attributes=False)
        return found

    before, after = by_name(old), by_name(new)
    return [f"-{k}" for k in before if k not in after] + [
        f"+{k}" if k not in before else f"~{k}" for k in after if before.get(k) != after[k]
    ]


def code_changed_since(rev: str, root: Path = ROOT) -> list[str]:
    """The gapo/*.py files (now or at git `rev`) whose code differs from `rev`'s: added, removed, or another tree."""
    return sorted(code_changes_since(rev, root))


def code_changes_since(rev: str, root: Path = ROOT) -> dict[str, list[str]]:
    """`code_changed_since`, each file with what changed in it (`changed_definitions`; a whole file added or removed:
    `+file` or `-file`)."""
    listed = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "gapo"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    before = {path for path in listed if path.endswith(".py")}
    now = {path.relative_to(root).as_posix() for path in (root / "gapo").rglob("*.py")}
    changed = {path: ["-file"] for path in before - now} | {path: ["+file"] for path in now - before}
    for path in sorted(before & now):
        old = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=root, capture_output=True, text=True, check=True)
        new = (root / path).read_text(encoding="utf-8")
        if code_tree(old.stdout) != code_tree(new):
            changed[path] = changed_definitions(old.stdout, new)
    return dict(sorted(changed.items()))


def measure() -> dict[str, object]:
    """Every measure of the house, as one JSON-ready mapping."""
    return {
        "sizes": sizes(),
        "circles": len(circles(import_graph())),
        "contracts": contracts(),
        "stage_deps": stage_deps(),
        "glue": {path: line_counts((ROOT / path).read_text(encoding="utf-8"))[0] for path in GLUE},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--code-changed-since", metavar="REV", help="list gapo modules whose code differs from REV")
    args = parser.parse_args(argv)
    if args.code_changed_since:
        changed = code_changes_since(args.code_changed_since)
        for path, what in changed.items():
            print(f"{path}: {', '.join(what)}")
        if not changed:
            print(f"code unchanged since {args.code_changed_since} (prose may differ)")
        return 1 if changed else 0
    found = measure()
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for part, size in found["sizes"].items():  # type: ignore[union-attr]
        print(f"{part:8s} {size['lines']:6,d} lines, {size['code']:6,d} code lines, {size['modules']:3d} modules")
    print(f"import circles: {found['circles']}")
    print(f"contracts: {found['contracts']['kept']} kept, {found['contracts']['broken']} broken")  # type: ignore[index]
    print("gapo modules per stage: " + ", ".join(f"{k} {v}" for k, v in found["stage_deps"].items()))  # type: ignore[union-attr]
    glue = found["glue"]
    print(f"glue {sum(glue.values()):,d} lines: " + ", ".join(f"{k} {v}" for k, v in glue.items()))  # type: ignore[union-attr]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
