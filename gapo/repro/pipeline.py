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
import gc
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gapo.checkpoints import last_checkpoint
from gapo.config import with_data_settings
from gapo.io import atomic_dir, write_text_atomic

DEFAULT_PARAMS = "params.yaml"
DEFAULT_PROFILE = "embedded"

#: Where a non-default profile's workspace goes, relative to the repository root (git-ignored through runs/).
PROFILE_ROOT = Path("runs") / "profiles"

#: The workspace's DVC config: no git (the workspace lies inside the git-ignored runs/, which DVC would refuse).
WORKSPACE_DVC_CONFIG = "[core]\n    no_scm = true\n    analytics = false\n"

#: Besides the stages' source dependencies, what a workspace needs to run `dvc repro`.
WORKSPACE_FILES = ("dvc.yaml", ".dvcignore")

#: Never copied into a workspace (Python and Jupyter byproducts, which .dvcignore also skips).
SKIPPED_NAMES = frozenset({"__pycache__", ".ipynb_checkpoints"})

#: Sections whose profile value replaces the embedded one whole (they map names to specs; merging would mix models).
REPLACED_SECTIONS: frozenset[str] = frozenset({"models", "policies"})

#: Stage -> the params.yaml sections its notebook reads (dvc.yaml lists the same ones as params deps).
STAGES: dict[str, tuple[str, ...]] = {
    "generate": ("data",),
    "bias": ("models", "sampling", "bias"),
    "train_gapo": ("data", "train", "policies"),
    "train_sft": ("data", "sft"),
    "open_set": ("models", "sampling", "open_set"),
    "uniformity": ("models", "sampling", "uniformity"),
    "creativity": ("models", "sampling", "creativity"),
    "benchmarks": ("models", "sampling", "benchmarks"),
    "coherence": ("models", "sampling", "coherence"),
    "open_ended": ("data", "train", "models", "sampling", "open_ended"),
    "targets": ("data", "train", "models", "sampling", "targets"),
}

#: Stage -> its notebook (run by papermill from the repository root).
NOTEBOOKS: dict[str, str] = {
    "generate": "notebooks/00_data.ipynb",
    "bias": "notebooks/01_bias.ipynb",
    "train_gapo": "notebooks/02_train_gapo.ipynb",
    "train_sft": "notebooks/03_train_sft.ipynb",
    "open_set": "notebooks/04_open_set.ipynb",
    "uniformity": "notebooks/05_uniformity.ipynb",
    "creativity": "notebooks/06_creativity.ipynb",
    "benchmarks": "notebooks/07_benchmarks.ipynb",
    "coherence": "notebooks/08_coherence.ipynb",
    "open_ended": "notebooks/09_open_ended.ipynb",
    "targets": "notebooks/10_targets.ipynb",
}

#: Keys of a `models` entry.
MODEL_SPEC_KEYS = frozenset({"model", "adapter", "min_p", "label"})


class PipelineError(ValueError):
    """A profile or params.yaml problem; the message is one line and says what to change."""


# --------------------------------------------------------------------------------------------------------------------
# Profiles -> parameters
# --------------------------------------------------------------------------------------------------------------------


def read_params(params_file: str | Path = DEFAULT_PARAMS) -> dict[str, Any]:
    path = Path(params_file)
    if not path.is_file():
        raise PipelineError(f"params file not found: {path}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        raise PipelineError(f"{path} has no `profiles:` mapping")
    return data


def profile_names(params_file: str | Path = DEFAULT_PARAMS) -> list[str]:
    return list(read_params(params_file)["profiles"])


def resolve(profile: str | None = None, params_file: str | Path = DEFAULT_PARAMS) -> dict[str, dict[str, Any]]:
    """Every section of `profile` (default: params.yaml's `profile:`), overrides applied and cross-checked; `train`
    and `sft` hold the dataset settings of the resolved `data` section (`gapo.config.with_data_settings`)."""
    data = read_params(params_file)
    name = profile if profile is not None else data.get("profile", DEFAULT_PROFILE)
    profiles = data["profiles"]
    if name not in profiles:
        raise PipelineError(f"unknown profile {name!r}; params.yaml defines: {', '.join(profiles)}")
    sections = {key: value for key, value in data.items() if key not in ("profile", "profiles")}
    overrides = profiles[name] or {}
    missing = [s for s in sections if s not in overrides]
    if missing:
        raise PipelineError(
            f"profile {name!r} must list every section (use {{}} for no change); missing: {', '.join(missing)}"
        )
    resolved: dict[str, dict[str, Any]] = {}
    for section, base in sections.items():
        change = overrides.get(section) or {}
        if section in REPLACED_SECTIONS:
            resolved[section] = dict(change or base)
            continue
        unknown = sorted(set(change) - set(base))
        if unknown:
            raise PipelineError(
                f"profile {name!r} overrides unknown keys of [{section}]: {', '.join(unknown)} "
                f"(known: {', '.join(base)})"
            )
        resolved[section] = {**base, **change}
    unknown_sections = sorted(set(overrides) - set(sections))
    if unknown_sections:
        raise PipelineError(f"profile {name!r} overrides unknown sections: {', '.join(unknown_sections)}")
    try:  # `train` and `sft` take the dataset settings from `data`, as this profile resolves it
        resolved = with_data_settings(resolved, f"{params_file} (profile {name!r})")
    except ValueError as err:
        raise PipelineError(str(err)) from None
    _check_models(name, resolved)
    resolved["profile"] = {"name": name}
    return resolved


def _check_models(profile: str, resolved: Mapping[str, Mapping[str, Any]]) -> None:
    models = resolved.get("models", {})
    for model_name, spec in models.items():
        if not isinstance(spec, Mapping) or "model" not in spec:
            raise PipelineError(f"profile {profile!r}: models.{model_name} needs at least `model:`")
        extra = sorted(set(spec) - MODEL_SPEC_KEYS)
        if extra:
            raise PipelineError(f"profile {profile!r}: models.{model_name} has unknown keys {', '.join(extra)}")
    for section, values in resolved.items():
        for key in ("models", "figure_models", "table8_models"):
            names = values.get(key) if section != "models" else None
            if isinstance(names, list):
                unknown = [n for n in names if n not in models]
                if unknown:
                    raise PipelineError(
                        f"profile {profile!r}: {section}.{key} names unknown models {unknown}; "
                        f"defined: {', '.join(models)}"
                    )
        single = values.get("model") if section == "bias" else None
        if single is not None and single not in models:
            raise PipelineError(f"profile {profile!r}: bias.model {single!r} is not one of: {', '.join(models)}")
        for key in ("base", "list_gapo") if section in ("open_ended", "targets") else ():  # issue 13's stages
            if key in values and values[key] not in models:
                raise PipelineError(
                    f"profile {profile!r}: {section}.{key} {values[key]!r} is not one of: {', '.join(models)}"
                )


def stage_params(
    stage: str,
    profile: str | None = None,
    params_file: str | Path = DEFAULT_PARAMS,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The sections `stage` reads, resolved for `profile`, with `overrides` ({section: {key: value}}) on top."""
    if stage not in STAGES:
        raise PipelineError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    resolved = resolve(profile, params_file)
    out: dict[str, Any] = {"profile": resolved["profile"]["name"]}
    for section in STAGES[stage]:
        out[section] = dict(resolved[section])
    for section, values in (overrides or {}).items():
        if section not in STAGES[stage]:
            raise PipelineError(f"stage {stage!r} has no section {section!r} to override ({', '.join(STAGES[stage])})")
        out[section] = {**out[section], **dict(values)}
    return out


def set_profile(profile: str, params_file: str | Path = DEFAULT_PARAMS) -> None:
    """Validate `profile`, then rewrite the `profile:` line of params.yaml in place (comments are kept)."""
    resolve(profile, params_file)
    path = Path(params_file)
    text = path.read_text(encoding="utf-8")
    new, count = re.subn(r"(?m)^profile:[ \t]*[^\s#]+", f"profile: {profile}", text, count=1)
    if count != 1:
        raise PipelineError(f"no top-level `profile:` line in {path}")
    if new != text:
        write_text_atomic(path, new)


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
        from gapo.backends import require_cuda

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


def enter_root(params_file: str | Path = DEFAULT_PARAMS) -> Path:
    """Change to the directory the pipeline's relative paths start from, and return it.

    papermill and DVC run notebooks from the repository root; JupyterLab starts a kernel in notebooks/. A relative
    `params_file` that is missing here but present one level up means we are in notebooks/: go up.
    """
    path = Path(params_file)
    if not path.is_absolute() and not path.is_file() and (Path("..") / path).is_file():
        os.chdir("..")
    return Path.cwd()


# --------------------------------------------------------------------------------------------------------------------
# Models -> samplers, at most one model in memory
# --------------------------------------------------------------------------------------------------------------------


class Samplers(Mapping):
    """`name -> gapo.sampling.Sampler` for the named `models` entries, loading lazily and keeping one model loaded.

    Entries that share a base model and adapter (the min-p rows) reuse the loaded model. Experiments that take a
    mapping of samplers (`haiku_map`, `figure7_data`) walk it model by model, so only one model is ever resident.
    With the vllm backend the engine outlives `release`: one engine per base model serves every adapter on it as a
    LoRA request (`gapo.sampling.vllm_engine`), since vLLM does not give an engine's GPU memory back.
    """

    def __init__(
        self,
        names: Sequence[str],
        models: Mapping[str, Mapping[str, Any]],
        sampling: Mapping[str, Any],
        **defaults: Any,
    ) -> None:
        self.names = list(names)
        self.models = models
        self.sampling = dict(sampling)
        self.defaults = defaults
        self._key: tuple[Any, ...] | None = None
        self._sampler: Any = None

    def __getitem__(self, name: str) -> Any:
        if name not in self.names:
            raise KeyError(name)
        spec = self.models[name]
        key = (spec["model"], spec.get("adapter"), self.sampling.get("backend", "transformers"))
        if key != self._key:
            self.release()
            self._sampler = load_sampler(spec, self.sampling, **self.defaults)
            self._key = key
        return self._sampler.with_params(min_p=float(spec.get("min_p") or 0.0))

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def label(self, name: str) -> str:
        return str(self.models[name].get("label") or name)

    def release(self) -> None:
        """Drop the loaded model (and free accelerator memory)."""
        self._sampler, self._key = None, None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover - torch is a core dependency
            pass


def load_sampler(spec: Mapping[str, Any], sampling: Mapping[str, Any], **defaults: Any) -> Any:
    """A `gapo.sampling.Sampler` for one `models` entry; `defaults` are SamplingParams fields (seed, max_new_tokens)."""
    from gapo.sampling import make_sampler

    adapter = spec.get("adapter")
    if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
        raise FileNotFoundError(f"no LoRA adapter at {adapter} (adapter_config.json missing): run its training stage")
    params = {k: sampling[k] for k in ("temperature", "top_p", "batch_size", "response_prefix") if k in sampling}
    params.update(defaults)
    params["min_p"] = float(spec.get("min_p") or 0.0)
    return make_sampler(spec["model"], adapter=adapter, backend=sampling.get("backend", "transformers"), **params)


# --------------------------------------------------------------------------------------------------------------------
# Training runs
# --------------------------------------------------------------------------------------------------------------------


def prepare_run_dir(run_dir: str | Path, config: Mapping[str, Any]) -> bool:
    """Make `run_dir` ready for `gapo.train.train`; returns whether to resume.

    An unfinished run (checkpoints, no adapter) with the same config is resumed: an interrupted `dvc repro` loses
    at most one save interval. Anything else there (a finished run, another config) is removed: DVC reruns a stage
    only when its inputs changed, so the run starts afresh.
    """
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return False
    saved = run_dir / "config.json"
    try:
        same = saved.is_file() and _comparable(json.loads(saved.read_text(encoding="utf-8"))) == _comparable(config)
    except json.JSONDecodeError:  # torn by a kill: not a run we can trust
        same = False
    # Only a complete checkpoint counts: a kill during a save leaves a partial one, which `train` skips (and says so).
    if same and not (run_dir / "adapter").exists() and last_checkpoint(run_dir) is not None:
        return True
    shutil.rmtree(run_dir)
    return False


def _comparable(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k != "resume"}


def copy_dir(src: str | Path, dst: str | Path) -> Path:
    """Replace `dst` with a copy of `src` (copied next to it first, then renamed into place)."""
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise FileNotFoundError(f"{src} is not a directory")
    with atomic_dir(dst) as tmp:
        shutil.copytree(src, tmp, dirs_exist_ok=True)
    return dst


# --------------------------------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------------------------------


def _clean(value: Any) -> Any:
    """JSON-ready: numpy scalars to Python, NaN/inf to None (DVC and json readers choke on NaN)."""
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value


def write_json(path: str | Path, document: Mapping[str, Any]) -> Path:
    return write_text_atomic(path, json.dumps(_clean(document), indent=2, ensure_ascii=False) + "\n")


def write_metrics(path: str | Path, models: Mapping[str, Mapping[str, Any]], **extra: Any) -> Path:
    """A DVC metrics file: ``{"models": {name: {metric: value}}, **extra}``."""
    return write_json(path, {"models": {name: dict(values) for name, values in models.items()}, **extra})


def write_csv(path: str | Path, table: Any) -> Path:
    """A DataFrame (or a list of dicts) as CSV, written atomically; floats keep full precision."""
    import pandas as pd

    frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame(list(table))
    return write_text_atomic(path, frame.to_csv(index=False, lineterminator="\n"))


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file; a line that is not JSON is a one-line error naming the file and line."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}: line {number} is not JSON ({err.msg})") from err
    return rows


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
