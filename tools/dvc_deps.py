"""Generate each dvc.yaml stage's gapo code dependencies from what its notebook imports, so none is written by hand.

A module counts when the notebook imports it, or a counted module imports it anywhere (at the top or inside a
function: a lazy import is still code the stage may run), found with `ast`, not by importing anything. Package
``__init__.py`` files count too, even empty ones: importing ``gapo.a.b`` runs ``gapo/a/__init__.py``. A module that
looks up plugins (`PLUGIN_GROUPS`: the offline models and encoders) depends on the gapo modules registered under that
entry-point group (pyproject.toml), since loading ``embedded`` runs them. Other deps
(notebooks, data files, ``gapo/resources/...``) are left as they are.

A dependency on a file of the repository is written ``${repo}path`` (``repo`` is "" in params.yaml, and the path back
to the repository in a profile's own params file: gapo.repro.pipeline), so the generated lines take the prefix of the
stage's notebook line.

    python tools/dvc_deps.py           # rewrite the gapo/*.py deps of every stage in dvc.yaml (comments kept)
    python tools/dvc_deps.py --check   # exit 1 and name each stage whose deps differ (tests/test_dvc_deps.py)
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

import yaml

from gapo.embeddings import ENCODER_PLUGINS
from gapo.models import MODEL_PLUGINS, plugins

ROOT = Path(__file__).resolve().parents[1]

#: The prefix of a dependency on a repository file in dvc.yaml (the `repo` variable of the params file).
REPO_VAR = "${repo}"


def repo_path(dep: str) -> str:
    """A dvc.yaml dependency as a path relative to the repository (its ``${repo}`` prefix dropped)."""
    return dep.removeprefix(REPO_VAR)


#: Core modules that load plugins by entry-point group (gapo.models.resolve_model_path, gapo.embeddings.encoder_path).
PLUGIN_GROUPS = {"gapo.models": MODEL_PLUGINS, "gapo.embeddings": ENCODER_PLUGINS}


def plugin_modules(module: str) -> set[str]:
    """The gapo modules registered under the entry-point group that `module` looks up (none for other modules).

    Read from the installed metadata (`make venv` reinstalls when pyproject.toml changes)."""
    group = PLUGIN_GROUPS.get(module)
    if group is None:
        return set()
    modules = [ep.module.split(".") for ep in plugins(group).values() if ep.module.split(".")[0] == "gapo"]
    return {".".join(parts[:i]) for parts in modules for i in range(1, len(parts) + 1)}  # with their packages


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """``gapo.x.y`` -> gapo/x/y.py or gapo/x/y/__init__.py; None for a name that is not a module (an attribute)."""
    path = root.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def gapo_imports(tree: ast.AST, module: str = "", root: Path = ROOT) -> set[str]:
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
    return {".".join(p[:i]) for p in parts for i in range(1, len(p) + 1) if module_file(".".join(p[:i]), root)}


def notebook_code(path: Path) -> str:
    """The code cells of a notebook, IPython magics and shell lines dropped."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    lines = [line for c in cells if c["cell_type"] == "code" for line in "".join(c["source"]).splitlines()]
    return "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))


def module_closure(start: set[str], root: Path = ROOT) -> set[str]:
    """`start` and every gapo module it imports, transitively."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            file = module_file(name, root)
            if file is None:
                raise ValueError(f"{name} is imported but is not a module under {root}")
            todo.extend(gapo_imports(ast.parse(file.read_text(encoding="utf-8")), name, root))
            todo.extend(plugin_modules(name))
    return seen


def stage_notebook(stage: dict, root: Path = ROOT) -> Path:
    """The one notebook a stage both runs (in its cmd) and lists (in its deps)."""
    notebooks = [repo_path(d) for d in stage["deps"] if d.endswith(".ipynb") and d in stage["cmd"]]
    if len(notebooks) != 1:
        raise ValueError(f"expected one notebook that the stage runs and lists, got {notebooks}")
    return root / notebooks[0]


def code_deps(stage: dict, root: Path = ROOT) -> list[str]:
    """The gapo module files a stage's notebook can run, sorted (the generated part of its deps)."""
    modules = module_closure(gapo_imports(ast.parse(notebook_code(stage_notebook(stage, root))), "", root), root)
    files = {module_file(m, root) for m in modules}
    return sorted(str(f.relative_to(root)) for f in files if f is not None)


def _is_code_dep(dep: str) -> bool:
    return repo_path(dep).startswith("gapo/") and dep.endswith(".py")


def stale_stages(dvc_file: Path = ROOT / "dvc.yaml") -> dict[str, tuple[list[str], list[str]]]:
    """stage -> (missing, extra) gapo module deps, for every stage whose listed modules differ from its closure."""
    root = dvc_file.parent
    out = {}
    for name, stage in yaml.safe_load(dvc_file.read_text(encoding="utf-8"))["stages"].items():
        want = set(code_deps(stage, root))
        have = {repo_path(d) for d in stage["deps"] if _is_code_dep(d)}
        if want != have:
            out[name] = (sorted(want - have), sorted(have - want))
    return out


def rewrite(dvc_file: Path = ROOT / "dvc.yaml") -> str:
    """dvc.yaml's text with each stage's gapo/*.py deps replaced by its closure, right after the notebook line."""
    root = dvc_file.parent
    stages = yaml.safe_load(dvc_file.read_text(encoding="utf-8"))["stages"]
    lines = dvc_file.read_text(encoding="utf-8").splitlines(keepends=True)
    out: list[str] = []
    stage: str | None = None
    in_deps = False
    for line in lines:
        head = re.match(r"^  ([A-Za-z0-9_]+):\s*$", line)
        if head:
            stage = head.group(1)
        key = re.match(r"^\s+([A-Za-z_]+):", line)
        if key:
            in_deps = key.group(1) == "deps"
        dep = re.match(r"^(\s+)- (\S+)\s*(#.*)?$", line) if in_deps and stage in stages else None
        if dep and _is_code_dep(dep.group(2)):
            continue  # dropped; the generated list goes after the notebook line
        out.append(line)
        if dep and dep.group(2).endswith(".ipynb") and dep.group(2) in stages[stage]["cmd"]:
            prefix = REPO_VAR if dep.group(2).startswith(REPO_VAR) else ""
            out.extend(f"{dep.group(1)}- {prefix}{path}\n" for path in code_deps(stages[stage], root))
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale stages instead of rewriting dvc.yaml")
    parser.add_argument("--dvc-file", type=Path, default=ROOT / "dvc.yaml")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_stages(args.dvc_file)
        for name, (missing, extra) in stale.items():
            print(f"{name}: missing {missing or '-'}; not imported {extra or '-'}", file=sys.stderr)
        if stale:
            print("run: python tools/dvc_deps.py", file=sys.stderr)
        return 1 if stale else 0
    args.dvc_file.write_text(rewrite(args.dvc_file), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
