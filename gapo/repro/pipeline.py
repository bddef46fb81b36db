"""The reproduction pipeline's glue: profiles -> per-stage parameters, models -> samplers, atomic result files.

Why this module exists: each notebook in notebooks/ is one DVC stage (dvc.yaml) and stays thin. It receives only
``profile`` (and ``params_file``) from papermill, asks `stage_params` for its resolved sections, and calls `gapo`.
A profile is a named set of per-section overrides in params.yaml: the top-level sections are the ``embedded``
profile, ``profiles.<name>.<section>`` changes them (key by key; the name -> spec mappings ``models`` and
``policies`` are replaced whole). So the committed params.yaml says, in one place, what every profile runs.

    from gapo.repro import pipeline
    P = pipeline.stage_params("uniformity", profile="smoke")
    P["uniformity"]["n"], P["models"]["gapo"]["adapter"]

From a shell (``gapo pipeline ...`` is the same command)::

    python -m gapo.repro.pipeline check smoke             # exit 2 with one line for an unknown profile or bad params
    python -m gapo.repro.pipeline use smoke               # prepare the profile's workspace; prints where to `dvc repro`
    python -m gapo.repro.pipeline show smoke uniformity   # the resolved parameters of one stage (or of all)

Profiles never overwrite the committed results: the default profile (`embedded`) runs in the repository itself and
writes figures/, metrics/, results/ and dvc.lock; any other profile runs in its own workspace,
``runs/profiles/<name>/`` (git-ignored), a copy of what the pipeline reads (dvc.yaml, notebooks, code, shipped data)
with its own params.yaml, dvc.lock, DVC cache and outputs. `make reproduce PROFILE=x` does `use x`, then `dvc repro`
in the directory it prints.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gapo.backends import require_cuda
from gapo.config import DEFAULT_PROFILE
from gapo.io import write_text_atomic
from gapo.repro.profiles import (
    DEFAULT_PARAMS,
    STAGES,
    PipelineError,
    resolve,
    set_profile,
    stage_params,
)

#: Where a non-default profile's workspace goes, relative to the repository root (git-ignored through runs/).
PROFILE_ROOT = Path("runs") / "profiles"

#: The workspace's DVC config: no git (the workspace lies inside the git-ignored runs/, which DVC would refuse).
WORKSPACE_DVC_CONFIG = "[core]\n    no_scm = true\n    analytics = false\n"

#: Besides the stages' source dependencies, what a workspace needs to run `dvc repro`.
WORKSPACE_FILES = ("dvc.yaml", ".dvcignore")

#: Never copied into a workspace (Python and Jupyter byproducts, which .dvcignore also skips).
SKIPPED_NAMES = frozenset({"__pycache__", ".ipynb_checkpoints"})


# --------------------------------------------------------------------------------------------------------------------
# Profile workspaces: a non-default profile never writes the committed results
# --------------------------------------------------------------------------------------------------------------------


def _dvc_paths(entries: Any) -> list[str]:
    """The paths of a dvc.yaml `deps`/`outs`/`metrics`/`plots` list (entries are strings or {path: options})."""
    return [next(iter(e)) if isinstance(e, Mapping) else str(e) for e in entries or []]


def source_paths(dvc_file: str | Path = "dvc.yaml") -> list[str]:
    """What the pipeline reads and no stage writes (notebooks, code, shipped data), plus the DVC files themselves."""
    stages = (yaml.safe_load(Path(dvc_file).read_text(encoding="utf-8")) or {}).get("stages", {})
    written = {
        p for stage in stages.values() for kind in ("outs", "metrics", "plots") for p in _dvc_paths(stage.get(kind))
    }
    read = {p for stage in stages.values() for p in _dvc_paths(stage.get("deps"))}
    return sorted(read - written) + list(WORKSPACE_FILES)


def _sync(src: Path, dst: Path) -> None:
    """Make `dst` a copy of file or directory `src`, rewriting only what differs (DVC then re-hashes only that)."""
    if src.is_dir():
        wanted = {p.relative_to(src) for p in src.rglob("*") if p.is_file() and not SKIPPED_NAMES & set(p.parts)}
        for rel in wanted:
            _sync(src / rel, dst / rel)
        for stale in [p for p in dst.rglob("*") if p.is_file() and p.relative_to(dst) not in wanted]:
            if not SKIPPED_NAMES & set(stale.parts):
                stale.unlink()
        return
    if dst.is_file() and filecmp.cmp(src, dst, shallow=False):
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def workspace_dir(profile: str, params_file: str | Path = DEFAULT_PARAMS) -> Path:
    """Where `dvc repro` runs for `profile`: the repository for the default profile, else runs/profiles/<name>."""
    repo = Path(params_file).resolve().parent
    return repo if profile == DEFAULT_PROFILE else repo / PROFILE_ROOT / profile


def needs_gpu(resolved: Mapping[str, Mapping[str, Any]]) -> bool:
    """A profile that samples with vLLM or trains with Unsloth or vLLM can only run on a CUDA GPU."""
    train = resolved.get("train", {})
    return (
        resolved.get("sampling", {}).get("backend") == "vllm"
        or train.get("backend") == "unsloth"
        or bool(train.get("use_vllm"))
    )


def check_device(profile: str, resolved: Mapping[str, Mapping[str, Any]]) -> None:
    """One line, before anything is synced or run, for a GPU profile on a machine without CUDA."""
    if needs_gpu(resolved):
        try:
            require_cuda(f"profile {profile!r} (vLLM sampling or Unsloth/vLLM training)")
        except ValueError as err:
            raise PipelineError(str(err)) from None


def use_profile(profile: str, params_file: str | Path = DEFAULT_PARAMS) -> Path:
    """Make `profile` ready for `dvc repro` and return the directory to run it in.

    The default profile runs in the repository (params.yaml's `profile:` is set back to it if it was changed). Any
    other profile gets a workspace of its own (`workspace_dir`): the pipeline's sources are synced into it and its
    params.yaml names the profile, so the repository's params.yaml, dvc.lock and committed results stay untouched.
    """
    check_device(profile, resolve(profile, params_file))
    if profile == DEFAULT_PROFILE:
        set_profile(profile, params_file)
        return workspace_dir(profile, params_file)
    repo, workspace = Path(params_file).resolve().parent, workspace_dir(profile, params_file)
    for rel in source_paths(repo / "dvc.yaml"):
        if not (repo / rel).exists():
            raise PipelineError(f"{repo / rel} is missing: the pipeline reads it (dvc.yaml); restore it from git")
        _sync(repo / rel, workspace / rel)
    text = Path(params_file).read_text(encoding="utf-8")
    new, count = re.subn(r"(?m)^profile:[ \t]*[^\s#]+", f"profile: {profile}", text, count=1)
    if count != 1:
        raise PipelineError(f"no top-level `profile:` line in {params_file}")
    if not (workspace / "params.yaml").is_file() or (workspace / "params.yaml").read_text(encoding="utf-8") != new:
        write_text_atomic(workspace / "params.yaml", new)
    if not (workspace / ".dvc" / "config").is_file():
        write_text_atomic(workspace / ".dvc" / "config", WORKSPACE_DVC_CONFIG)
    return workspace


# --------------------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gapo.repro.pipeline", description="Pipeline profiles (params.yaml)."
    )
    parser.add_argument("--params", default=DEFAULT_PARAMS, help="params file (default: params.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="validate a profile (exit 2 with one line if it is unknown or broken)").add_argument(
        "profile", nargs="?"
    )
    sub.add_parser(
        "use",
        help="prepare a profile for `dvc repro` and print the directory to run it in (the repository for "
        "embedded, runs/profiles/<name> for the others)",
    ).add_argument("profile")
    show = sub.add_parser("show", help="print the resolved parameters of a profile (all stages or one)")
    show.add_argument("profile", nargs="?")
    show.add_argument("stage", nargs="?", choices=list(STAGES))
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            resolved = resolve(args.profile, args.params)
            print(f"profile {resolved['profile']['name']}: ok ({len(STAGES)} stages)")
        elif args.command == "use":
            workspace = use_profile(args.profile, args.params)
            print(f"profile {args.profile}: run `dvc repro` in {workspace}", file=sys.stderr)
            print(workspace)  # the only stdout line: `make reproduce` changes to it
        else:
            if args.stage:
                shown: Any = stage_params(args.stage, args.profile, args.params)
            else:
                shown = resolve(args.profile, args.params)
            print(yaml.safe_dump(shown, sort_keys=False, allow_unicode=True), end="")
    except (PipelineError, yaml.YAMLError) as err:
        print(f"gapo pipeline: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0


#: What `gapo pipeline ...` (gapo.cli) dispatches to.
cli = main


if __name__ == "__main__":
    sys.exit(main())
