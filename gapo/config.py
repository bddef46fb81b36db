"""One config dataclass per entry point, filled from a params.yaml section and then from command-line flags
(`gapo data`, `gapo sft`; `gapo train`'s two dataclasses go through TRL's `TrlParser`, gapo.train.parse_args, and
read their params.yaml section with `profile_section` here).

Each field's docstring-like `help` metadata becomes its `--help` text (cleanrl style). Flags use dashes
(`--max-steps 40`); booleans take `--flag/--no-flag`; `None` defaults accept the literal `none`.

The defaults several configs share live in `gapo.defaults`. In params.yaml the dataset settings likewise live in the
`data` section only; `train` and `sft` receive them from it (`with_data_settings`), so the rows a run trains on are
the rows `gapo data` writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")

#: The dataset settings: DataConfig's fields that `gapo train` (ScriptArguments, GAPOConfig's seed) and SFTConfig share.
DATA_SETTINGS: tuple[str, ...] = ("num_prompts", "seed", "min_items", "max_items", "categories", "response_prefix")
#: The params.yaml sections that take the dataset settings from the `data` section.
DATA_USERS: tuple[str, ...] = ("train", "sft")


def with_data_settings(sections: Mapping[str, Any], where: str = "params.yaml") -> dict[str, Any]:
    """`sections` (params.yaml's, one profile's) with `train` and `sft` given the dataset settings of `data`.

    Why: the training stages train on the file the `generate` stage writes from `data`, and the train stage checks
    the two agree row for row; one copy of the settings keeps them in step for every profile. A setting that `data`
    leaves out stays out (the config's default, the same for both). A section that sets one itself is a one-line
    error: that would be a second source for it.
    """
    out = dict(sections)
    data = sections.get("data")
    if not isinstance(data, Mapping):
        return out
    for section in DATA_USERS:
        if section not in sections:
            continue
        values = sections[section] or {}  # an empty section (`sft:`) still takes them
        if not isinstance(values, Mapping):
            continue
        repeated = [k for k in DATA_SETTINGS if k in values]
        if repeated:
            raise ValueError(
                f"{where}: [{section}] sets {', '.join(repeated)}, which it takes from [data]; set them in [data] only"
            )
        out[section] = {**{k: data[k] for k in DATA_SETTINGS if k in data}, **values}
    return out


class OneLineErrorParser(argparse.ArgumentParser):
    """An ArgumentParser whose bad flags raise ValueError, which `gapo.cli` prints as one ``gapo: error:`` line.

    Why: argparse's own error prints the whole usage block (twenty lines for `gapo train`) above the message."""

    def error(self, message: str) -> typing.NoReturn:
        raise ValueError(f"{self.prog}: {message} (see {self.prog} --help)")


def load_params(path: str | Path, section: str | None = None) -> dict[str, Any]:
    """Read params.yaml (or one top-level section of it); a missing file or section is a one-line error."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"params file not found: {path}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if section is None:
        return data
    if section not in data:
        raise KeyError(f"section {section!r} not in {path} (sections: {', '.join(data) or 'none'})")
    return dict(data[section] or {})


def _base_type(annotation: Any) -> tuple[type, bool]:
    """(scalar type, optional?) for an annotation such as `int | None` or `list[str]`."""
    if isinstance(annotation, str):
        annotation = eval(annotation, vars(typing) | {"list": list, "dict": dict})  # noqa: S307 - our own annotations
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _base_type(args[0])[0], True
    if origin in (list, tuple):
        return list, False
    return annotation, False


def _parse_scalar(kind: type, optional: bool) -> Any:
    def parse(text: str) -> Any:
        if optional and text.lower() in ("none", "null", ""):
            return None
        if kind is list:
            return [part.strip() for part in text.split(",") if part.strip()]
        return kind(text)

    parse.__name__ = getattr(kind, "__name__", "value")
    return parse


def build_parser(cls: type, prog: str, description: str) -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog=prog, description=description)
    parser.add_argument("--params", default="params.yaml", help="params file to read defaults from")
    parser.add_argument("--section", default=None, help="section of the params file (default: the command's)")
    parser.add_argument("--no-params", action="store_true", help="ignore the params file; use built-in defaults")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind, optional = _base_type(hints[f.name])
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        if kind is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        else:
            parser.add_argument(flag, dest=f.name, type=_parse_scalar(kind, optional), default=None, help=help_text)
    return parser


#: params.yaml sections whose profile value replaces the default one whole (name -> spec mappings; merging would mix
#: two profiles' models).
REPLACED_SECTIONS: frozenset[str] = frozenset({"models", "policies"})
#: The profile the top-level sections of params.yaml are.
DEFAULT_PROFILE = "embedded"
#: Top-level keys of params.yaml that are not sections: the active profile, the profiles, where the repository is.
NOT_SECTIONS: tuple[str, ...] = ("profile", "profiles", "repo")


def profile_sections(data: Mapping[str, Any], profile: str | None = None, where: str = "params.yaml") -> dict[str, Any]:
    """Every section of a params file with a `profiles:` mapping, as `profile` (default: the file's `profile:`)
    changes them; `train` and `sft` get the dataset settings of the resulting `data` (`with_data_settings`).

    A profile lists every section ({} for no change); an ordinary section's keys are overridden one by one, the name
    -> spec mappings of REPLACED_SECTIONS are replaced whole. Any mismatch is a one-line ValueError. Why in the core:
    it is how the config file of every entry point (`gapo train --params`) is read; the harness's pipeline adds its
    cross-checks of model names on top (gapo.repro.profiles).
    """
    name = profile if profile is not None else data.get("profile", DEFAULT_PROFILE)
    profiles = data["profiles"]
    if name not in profiles:
        raise ValueError(f"unknown profile {name!r}; {Path(where).name} defines: {', '.join(profiles)}")
    sections = {key: value for key, value in data.items() if key not in NOT_SECTIONS}
    overrides = profiles[name] or {}
    missing = [s for s in sections if s not in overrides]
    if missing:
        raise ValueError(
            f"profile {name!r} must list every section (use {{}} for no change); missing: {', '.join(missing)}"
        )
    resolved: dict[str, Any] = {}
    for section, base in sections.items():
        change = overrides.get(section) or {}
        if section in REPLACED_SECTIONS:
            resolved[section] = dict(change or base)
            continue
        unknown = sorted(set(change) - set(base))
        if unknown:
            raise ValueError(
                f"profile {name!r} overrides unknown keys of [{section}]: {', '.join(unknown)} "
                f"(known: {', '.join(base)})"
            )
        resolved[section] = {**base, **change}
    unknown_sections = sorted(set(overrides) - set(sections))
    if unknown_sections:
        raise ValueError(f"profile {name!r} overrides unknown sections: {', '.join(unknown_sections)}")
    resolved = with_data_settings(resolved, f"{where} (profile {name!r})")
    resolved["profile"] = {"name": name}
    return resolved


def profile_section(path: str | Path, section: str) -> dict[str, Any]:
    """params.yaml's `section` as the file's active `profile:` resolves it (`profile_sections`), so that `gapo train`
    in a profile's workspace trains what that profile's pipeline stage trains; a plain section when the file has no
    `profiles:` mapping or the profiles do not cover the section. Either way `train` and `sft` get the dataset
    settings of `data` (`with_data_settings`)."""
    data = load_params(path)
    if not isinstance(data.get("profiles"), dict) or section not in data:
        load_params(path, section)  # a missing section is a one-line error naming those there
        return dict(with_data_settings(data, str(path))[section] or {})
    return dict(profile_sections(data, None, str(path))[section])


def config_from_cli(cls: type[T], argv: list[str] | None, prog: str, section: str, description: str) -> T:
    """Defaults of `cls`, overridden by params.yaml[section] (as its active profile resolves it), overridden by flags
    given on the command line."""
    parser = build_parser(cls, prog, description)
    ns = parser.parse_args(argv)
    values: dict[str, Any] = {}
    if not ns.no_params and Path(ns.params).is_file():
        values.update(profile_section(ns.params, ns.section or section))
    elif not ns.no_params and ns.params != "params.yaml":
        raise FileNotFoundError(f"params file not found: {ns.params}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"unknown keys in {ns.params} [{ns.section or section}]: {', '.join(unknown)}")
    values.update({k: v for k, v in vars(ns).items() if k in names and v is not None})
    try:
        return cls(**values)
    except TypeError as err:  # a wrongly typed value in params.yaml
        raise ValueError(f"{prog}: {err}") from err
