"""`gapo pipeline`: check a profile, show its parameters, and say where `dvc repro` runs it.

    python -m gapo.repro.pipeline check smoke             # exit 2 with one line for an unknown profile or bad params
    python -m gapo.repro.pipeline use smoke               # prepare the profile's folder; prints where to `dvc repro`
    python -m gapo.repro.pipeline show smoke uniformity   # the resolved parameters of one stage (or of all)

Profiles never overwrite the committed results. The default profile (`embedded`) runs in the repository itself and
writes figures/, metrics/, results/ and dvc.lock. Any other profile runs in ``runs/profiles/<name>/`` (git-ignored),
which holds only what is that profile's: its params file (the repository's params.yaml naming the profile, with
``repo`` pointing back to the repository), its dvc.lock, DVC cache and outputs, and a link to the repository's
dvc.yaml. Every stage reads its notebook, code and shipped data from the repository through ``${repo}`` (dvc.yaml), so
no source is copied: a notebook run there imports the installed gapo, the only one on sys.path. `make reproduce
PROFILE=x` does `use x`, then `dvc repro` in the directory it prints.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gapo.backends import cuda_available
from gapo.config import DEFAULT_PROFILE
from gapo.io import write_text_atomic
from gapo.repro.profiles import DEFAULT_PARAMS, STAGES, PipelineError, resolve, set_profile, set_top_level, stage_params

#: Where a non-default profile runs, relative to the repository root (git-ignored through runs/).
PROFILE_ROOT = Path("runs") / "profiles"

#: The profile folder's DVC config: no git (it lies inside the git-ignored runs/, which DVC would refuse).
WORKSPACE_DVC_CONFIG = "[core]\n    no_scm = true\n    analytics = false\n"

#: What an older gapo copied into a profile's folder; removed, since a copied gapo/ would shadow the installed one.
STALE_COPIES = ("gapo", "notebooks", "data/benchmarks", ".dvcignore")


def workspace_dir(profile: str, params_file: str | Path = DEFAULT_PARAMS) -> Path:
    """Where `dvc repro` runs for `profile`: the repository for the default profile, else runs/profiles/<name>."""
    repo = Path(params_file).resolve().parent
    return repo if profile == DEFAULT_PROFILE else repo / PROFILE_ROOT / profile


def profile_params_text(profile: str, params_file: str | Path, workspace: Path) -> str:
    """The profile's own params file: the repository's params.yaml (comments kept) with `profile:` naming it and
    `repo:` the way from `workspace` back to the repository (with a final slash: dvc.yaml writes ``${repo}path``)."""
    text = Path(params_file).read_text(encoding="utf-8")
    back = os.path.relpath(Path(params_file).resolve().parent, workspace) + "/"
    return set_top_level(set_top_level(text, "profile", profile, params_file), "repo", f'"{back}"', params_file)


def needs_gpu(resolved: Mapping[str, Mapping[str, Any]]) -> bool:
    """A profile that samples with vLLM or trains with Unsloth or vLLM can only run on a CUDA GPU."""
    train = resolved.get("train", {})
    return (
        resolved.get("sampling", {}).get("backend") == "vllm"
        or train.get("backend") == "unsloth"
        or bool(train.get("use_vllm"))
    )


def require_cuda(what: str) -> None:
    """One line for a GPU-only setting (a GPU profile, say) on a CPU-only machine."""
    if not cuda_available():
        raise ValueError(f"{what} needs a CUDA GPU and none is visible; use the embedded or smoke profile on CPU")


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
    other profile gets a folder of its own (`workspace_dir`) with its params file, its DVC config and a relative link
    to dvc.yaml; the repository's params.yaml, dvc.lock and committed results stay untouched.
    """
    check_device(profile, resolve(profile, params_file))
    if profile == DEFAULT_PROFILE:
        set_profile(profile, params_file)
        return workspace_dir(profile, params_file)
    repo, workspace = Path(params_file).resolve().parent, workspace_dir(profile, params_file)
    workspace.mkdir(parents=True, exist_ok=True)
    for stale in STALE_COPIES:
        path = workspace / stale
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    link, target = workspace / "dvc.yaml", os.path.relpath(repo / "dvc.yaml", workspace)
    if not (link.is_symlink() and os.readlink(link) == target):
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(target)
    text = profile_params_text(profile, params_file, workspace)
    params = workspace / "params.yaml"
    if not params.is_file() or params.read_text(encoding="utf-8") != text:
        write_text_atomic(params, text)
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
        print(f"gapo: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0


#: What `gapo pipeline ...` (gapo.cli) dispatches to.
cli = main


if __name__ == "__main__":
    sys.exit(main())
