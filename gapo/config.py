"""One config per entry point, filled from a params.yaml section and then from command-line flags.

Flags are built from the config dataclasses by transformers' `HfArgumentParser` (what TRL's `TrlParser` is): each
field's `help` metadata becomes its `--help` text (cleanrl style), flags take dashes or underscores (`--max-steps 40`),
booleans `--flag` / `--flag false`, lists spaces or commas (`--categories a,b`). `gapo train` takes two dataclasses
(gapo.train.ScriptArguments and GAPOConfig), `gapo data` and `gapo sft` one each.

Shared defaults live in `gapo.defaults`; `train` and `sft` read dataset settings from `data` (`with_data_settings`)."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

#: The dataset settings: DataConfig's fields that `gapo train` (ScriptArguments, GAPOConfig's seed) and SFTConfig share.
DATA_SETTINGS: tuple[str, ...] = ("num_prompts", "seed", "min_items", "max_items", "categories", "response_prefix")
#: The params.yaml sections that take the dataset settings from the `data` section.
DATA_USERS: tuple[str, ...] = ("train", "sft")


def with_data_settings(sections: Mapping[str, Any], where: str = "params.yaml") -> dict[str, Any]:
    """`sections` (one profile's) with `train` and `sft` given `data`'s dataset settings: they train on the file the
    `generate` stage writes from `data` (the train stage checks they agree row for row). A setting `data` leaves out
    stays out (the config default, the same for both); one also set in `train` or `sft` is a one-line error."""
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
    """An ArgumentParser whose bad flags raise ValueError, which `gapo.cli` prints as one ``gapo: error:`` line instead
    of argparse's usage block (twenty lines for `gapo train`)."""

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


#: Sections a profile replaces whole (name -> spec mappings: merging would mix two profiles' models).
REPLACED_SECTIONS: frozenset[str] = frozenset({"models", "policies"})
#: The profile the top-level sections of params.yaml are.
DEFAULT_PROFILE = "embedded"
#: Top-level keys of params.yaml that are not sections: the active profile, the profiles, where the repository is.
NOT_SECTIONS: tuple[str, ...] = ("profile", "profiles", "repo")


def profile_sections(data: Mapping[str, Any], profile: str | None = None, where: str = "params.yaml") -> dict[str, Any]:
    """Every section of a params file with a `profiles:` mapping, as `profile` (default: the file's `profile:`) changes
    them, then `with_data_settings`. A profile lists every section ({} for no change) and overrides an ordinary section
    key by key, REPLACED_SECTIONS whole; a mismatch is a one-line ValueError. Core, not harness: every entry point reads
    its params file this way; gapo.repro.profiles adds the pipeline's model-name checks."""
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
    """params.yaml's `section` as the file's active `profile:` resolves it (`profile_sections`), so `gapo train` in a
    profile's workspace trains what its pipeline stage trains; else the plain section, with `with_data_settings`."""
    data = load_params(path)
    if not isinstance(data.get("profiles"), dict) or section not in data:
        load_params(path, section)  # a missing section is a one-line error naming those there
        return dict(with_data_settings(data, str(path))[section] or {})
    return dict(profile_sections(data, None, str(path))[section])


def config_from_cli(
    classes: Sequence[type],
    argv: list[str] | None,
    prog: str,
    section: str,
    description: str,
    defaults: Mapping[str, Any] | None = None,
) -> list[Any]:
    """One instance of each of `classes`: their defaults (a command's own `defaults` on top), overridden by
    params.yaml[section] as its active profile resolves it, then by flags; every mistake is one line."""
    from transformers import HfArgumentParser  # unsloth: transformers loads after gapo.backends.activate (gapo train)

    Parser = type("Parser", (HfArgumentParser,), {"error": OneLineErrorParser.error})  # noqa: N806
    parser = Parser(list(classes), prog=prog, description=description)
    add_params_flags(parser)
    ns, _ = add_params_flags(argparse.ArgumentParser(add_help=False)).parse_known_args(argv)
    values = {**(defaults or {}), **params_values(ns.params, ns.section or section, ns.no_params)}
    fields = {cls: {f.name for f in dataclasses.fields(cls) if f.init} for cls in classes}
    unknown = sorted(set(values) - set().union(*fields.values()))
    if unknown:
        raise ValueError(f"unknown keys in {ns.params} [{ns.section or section}]: {', '.join(unknown)}")
    parser.set_defaults(**values)
    parsed, rest = parser.parse_known_args(argv)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    parsed = {k: _split_commas(v) for k, v in vars(parsed).items()}
    try:
        return [cls(**{k: v for k, v in parsed.items() if k in fields[cls]}) for cls in classes]
    except TypeError as err:  # a wrongly typed value in params.yaml
        raise ValueError(f"{prog}: {err}") from err


def params_values(params: str, section: str, no_params: bool = False) -> dict[str, Any]:
    """The `section` of `params` as its profile resolves it; {} with `no_params` or without the default params.yaml
    (a named file that is absent is a one-line error)."""
    if no_params:
        return {}
    if Path(params).is_file():
        return profile_section(params, section)
    if params != "params.yaml":
        raise FileNotFoundError(f"params file not found: {params}")
    return {}


#: transformers' schedules that never read `warmup_steps` (its `get_scheduler` returns them before it looks).
NO_WARMUP_SCHEDULES = ("constant", "reduce_lr_on_plateau", "greedy")


def schedule_name(schedule: Any) -> str:
    """A learning-rate schedule's name, given as a string or as transformers' `SchedulerType` (a str Enum, whose
    `str()` reads ``SchedulerType.COSINE``): how GAPOConfig and SFTConfig read `lr_scheduler_type`."""
    return str(getattr(schedule, "value", schedule))


def warmup_problem(warmup: Any, schedule: Any) -> str | None:
    """The one-line message when `warmup` is not a warmup both `gapo train` and `gapo sft` read alike under the
    learning-rate schedule `schedule` (a name or transformers' `SchedulerType`); None when it is.

    Why one rule for both: transformers reads `warmup_steps` as whole steps at 1 or more and as a share of the run
    below 1, so 2.5 has no meaning (it would be truncated); and under `constant` it never reads it, so a recipe that
    names a warmup there would silently train without one. GAPOConfig and SFTConfig must refuse the same values with
    the same words."""
    if (
        isinstance(warmup, bool)
        or not isinstance(warmup, int | float)
        or warmup < 0
        or (warmup >= 1 and warmup != int(warmup))
    ):
        return f"warmup_steps must be a whole number of steps >= 0 or a fraction of the run in [0, 1), got {warmup!r}"
    name = schedule_name(schedule)
    if warmup and name in NO_WARMUP_SCHEDULES:
        return (
            f"warmup_steps needs a schedule that warms up (constant_with_warmup, linear, cosine); {name} has none: "
            f"set warmup_steps 0 or another schedule, got warmup_steps {warmup!r}"
        )
    return None


def add_params_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`--params`, `--section`, `--no-params`: where every entry point reads its params.yaml section."""
    parser.add_argument("--params", default="params.yaml", help="params file whose section sets the defaults")
    parser.add_argument("--section", default=None, help="section of the params file (default: the command's)")
    parser.add_argument("--no-params", action="store_true", help="ignore the params file; use built-in defaults")
    return parser


def _split_commas(value: Any) -> Any:
    """A list flag given as `a,b` (params.yaml's comma-separated style) -> ['a', 'b']."""
    if isinstance(value, list) and any(isinstance(v, str) and "," in v for v in value):
        return [part.strip() for v in value for part in str(v).split(",") if part.strip()]
    return value
