"""Profiles -> each stage's parameters: what a pipeline notebook asks for first.

Each notebook in notebooks/ is one DVC stage (dvc.yaml) and stays thin. It receives only ``profile`` (and
``params_file``) from papermill, asks `stage_params` for its resolved sections, and calls `gapo`. A profile is a named
set of per-section overrides in params.yaml: the top-level sections are the ``embedded`` profile,
``profiles.<name>.<section>`` changes them (key by key; the name -> spec mappings ``models`` and ``policies`` are
replaced whole; `gapo.config.profile_sections`). So the committed params.yaml says, in one place, what every profile
runs.

    from gapo.repro import profiles
    P = profiles.stage_params("uniformity", profile="smoke")
    P["uniformity"]["n"], P["models"]["gapo"]["adapter"]

Where a profile runs (its own outputs, never the committed results) is `gapo.repro.pipeline`'s job.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gapo.config import load_params, profile_sections
from gapo.io import write_text_atomic

DEFAULT_PARAMS = "params.yaml"

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


def read_params(params_file: str | Path = DEFAULT_PARAMS) -> dict[str, Any]:
    """The whole params file (`gapo.config.load_params`), which must hold a `profiles:` mapping."""
    try:
        data = load_params(params_file)
    except FileNotFoundError as err:
        raise PipelineError(str(err)) from None
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        raise PipelineError(f"{params_file} has no `profiles:` mapping")
    return data


def set_top_level(text: str, key: str, value: str, where: str | Path) -> str:
    """`text` of a params file with its top-level `key:` line set to `value` (comments and the rest kept)."""
    new, count = re.subn(rf"(?m)^{key}:[ \t]*[^#\n]*?(?=[ \t]*(#|$))", f"{key}: {value}", text, count=1)
    if count != 1:
        raise PipelineError(f"no top-level `{key}:` line in {where}")
    return new


def profile_names(params_file: str | Path = DEFAULT_PARAMS) -> list[str]:
    return list(read_params(params_file)["profiles"])


def resolve(profile: str | None = None, params_file: str | Path = DEFAULT_PARAMS) -> dict[str, dict[str, Any]]:
    """Every section of `profile` (default: params.yaml's `profile:`) with its overrides applied and the model names
    cross-checked (`gapo.config.profile_sections`: `train` and `sft` hold the dataset settings of `data`)."""
    data = read_params(params_file)
    try:
        resolved = profile_sections(data, profile, str(params_file))
    except ValueError as err:
        raise PipelineError(str(err)) from None
    _check_models(resolved["profile"]["name"], resolved)
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
    new = set_top_level(text, "profile", profile, path)
    if new != text:
        write_text_atomic(path, new)


def enter_root(params_file: str | Path = DEFAULT_PARAMS) -> Path:
    """Change to the directory the pipeline's relative paths start from, and return it.

    papermill and DVC run notebooks from the repository root; JupyterLab starts a kernel in notebooks/. A relative
    `params_file` that is missing here but present one level up means we are in notebooks/: go up.
    """
    path = Path(params_file)
    if not path.is_absolute() and not path.is_file() and (Path("..") / path).is_file():
        os.chdir("..")
    return Path.cwd()
