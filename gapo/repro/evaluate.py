"""``gapo eval``: how collapsed is my model? The paper's evaluation on any model, adapter or endpoint, in one command.

    gapo eval --model embedded --suite lists -n 50 --out runs/eval-base
    gapo eval --model embedded --adapter runs/gapo-embedded --compare embedded --out runs/eval-gapo
    gapo eval --model my-model --backend openai --endpoint http://127.0.0.1:8000/v1 --suite lists --out runs/eval-api

Suites (the same experiment functions as the pipeline's stages, `gapo.repro.experiments`; nothing is computed here):

- ``lists``: the paper's 10 unseen lists (or ``--lists FILE``): invalid share, JSD with the invalid bin, JSD among
  valid answers, coverage and the top item's share, per list and as means, each with a 95% bootstrap interval
  (`experiments.uniformity`). With the paper's lists it also scores the 10 held-in lists (issue 34; off with
  ``--no-heldin``): lists of the GAPO *training* categories that no training row contains
  (`gapo.repro.prompts.HELDIN_LISTS`), reported apart as ``heldin/...``, so that a model that learned its training
  categories can be told from one that learned nothing.
- ``open``: the paper's open questions plus lexicon-checked categories (or ``--questions FILE``): Unique@n,
  valid-unique@n and the discovery curve (`experiments.open_set`). ``unique_at_n`` is the mean over every question
  asked; ``unique_at_n_paper`` over the paper's ten alone, the number its Table 8 and the pipeline's open_set stage
  report (asked with the default questions only).
- ``creativity``: the paper's prompts: embedding distance and 1 - Self-BLEU with intervals (`experiments.creativity`).

``--compare M2[:ADAPTER]`` samples a second model on the same prompts, n and seeds and adds ``<metric>_diff`` (second
minus first) with a paired bootstrap interval (`experiments.compare`).

Output: a table on stdout (one line per metric), progress bars on stderr while sampling, and in ``--out DIR``:
``eval.json`` (the pipeline's metrics schema: ``{"models": {name: {metric: value}}, "settings", "tables"}``),
``eval.png`` (`gapo.repro.plotting.eval_figure`) and ``samples.jsonl`` (every sample). Each file is written atomically
and eval.json last, so a run killed midway leaves no eval.json. Bad input (an unknown suite, a list with one item or
with duplicates, an endpoint that does not answer, an adapter of another base model, n < 2) is one line before any
sampling.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from gapo.config import OneLineErrorParser
from gapo.equivalence import normalize_answer
from gapo.io import write_json_atomic, write_jsonl_atomic
from gapo.models import ModelLoadError, check_model_name, offline_models, resolve_model_path
from gapo.repro import experiments, plotting
from gapo.repro import prompts as ep
from gapo.repro.experiments import compare
from gapo.repro.provenance import environment
from gapo.repro.sampling import chat_completions_url, make_sampler
from gapo.repro.sampling.cli import add_decoding_args, add_model_args, sampler_settings
from gapo.repro.sampling.params import SamplingError, one_line
from gapo.repro.stages.open_set import asked_questions, paper_unique

SUITES = ("lists", "open", "creativity")
#: Scored with suite ``lists`` on the paper's lists: the held-in lists, under ``heldin`` in eval.json.
HELDIN = "heldin"
#: Completion length per suite: room for ``<answer>item</answer>`` and a little preamble; a poem for creativity.
MAX_NEW_TOKENS = {"lists": 32, HELDIN: 32, "open": 32, "creativity": 256}
#: Open categories with a lexicon asked beside the paper's questions, as the pipeline's open_set stage (params.yaml).
CHECKED_CATEGORIES = ("country", "chemical element", "color")
#: Unique@n over the paper's open questions alone (`open_set.paper_unique`): the extra checked categories are ours.
PAPER_UNIQUE = "mean_unique_at_n_paper"
#: The headline metrics printed per suite, in order (each with its interval where the experiment reports one).
HEADLINES = {
    "lists": ("mean_invalid", "mean_jsd", "mean_jsd_valid", "mean_coverage", "mean_top_share"),
    HELDIN: ("mean_invalid", "mean_jsd", "mean_jsd_valid", "mean_top_share"),
    "open": ("mean_unique_at_n", PAPER_UNIQUE, "mean_valid_unique_at_n", "mean_answer_rate"),
    "creativity": ("mean_embedding_distance", "mean_one_minus_self_bleu"),
}


# --------------------------------------------------------------------------------------------------------------------
# Arguments and the checks made before any sampling
# --------------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="gapo eval", description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds the endpoint has to answer the probe")
    parser.add_argument("--suite", default=",".join(SUITES), help=f"comma-separated, of: {', '.join(SUITES)}")
    parser.add_argument("-n", type=int, default=100, help="samples per list / question / prompt (at least 2)")
    parser.add_argument("--lists", default=None, help="YAML or JSONL of lists (name, items) instead of the paper's")
    parser.add_argument(
        "--heldin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with suite lists and the paper's lists, also score the held-in lists (training categories, unseen lists)",
    )
    parser.add_argument("--questions", default=None, help="YAML or JSONL of open questions (name, question)")
    parser.add_argument("--compare", default=None, help="a second model, M2 or M2:ADAPTER, on the same prompts")
    parser.add_argument("--out", required=True, help="output directory (eval.json, eval.png, samples.jsonl)")
    add_decoding_args(parser, max_new_tokens=None, max_new_tokens_help="default per suite: " + str(MAX_NEW_TOKENS))
    parser.add_argument("--encoder", default=None, help="sentence encoder of creativity (default: MPNet, the paper's)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of every interval")
    return parser


def parse_suites(text: str) -> list[str]:
    """``"lists,open"`` -> ``["lists", "open"]``; an unknown or empty suite is one line naming the known ones."""
    suites = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in suites if s not in SUITES]
    if unknown or not suites:
        raise ValueError(
            f"unknown suite {', '.join(map(repr, unknown)) or repr(text)}; choose from {', '.join(SUITES)}"
        )
    return list(dict.fromkeys(suites))


def _records(path: str | Path) -> list[Any] | dict[str, Any]:
    """A YAML document or the records of a JSONL file; one line when the file is missing or does not parse."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        records = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: line {number} is not JSON ({err.msg})") from err
        return records
    if path.suffix in (".yaml", ".yml"):
        try:
            return yaml.safe_load(text) or []
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML ({one_line(str(err))})") from err
    raise ValueError(f"{path}: give a .yaml, .yml or .jsonl file")


def _named(path: str | Path, field: str) -> dict[str, Any]:
    """``{name: record[field]}`` from a mapping ``{name: value}`` or records ``{"name": ..., field: ...}``."""
    document = _records(path)
    if isinstance(document, Mapping):
        return {str(k): v for k, v in document.items()}
    out: dict[str, Any] = {}
    for i, record in enumerate(document):
        if not isinstance(record, Mapping) or "name" not in record or field not in record:
            raise ValueError(f"{path}: record {i + 1} needs 'name' and '{field}'")
        if str(record["name"]) in out:
            raise ValueError(f"{path}: the name {record['name']!r} appears twice")
        out[str(record["name"])] = record[field]
    if not out:
        raise ValueError(f"{path}: no entries")
    return out


def read_lists(path: str | Path) -> dict[str, list[str]]:
    """The user's lists: every list has at least two items, none repeated (after case, spacing and punctuation are
    normalised, as answers are matched), or one line naming the list."""
    lists = _named(path, "items")
    for name, items in lists.items():
        if not isinstance(items, list) or not all(isinstance(i, (str, int, float)) for i in items):
            raise ValueError(f"{path}: list {name!r} must be a list of item names")
        if len(items) < 2:
            raise ValueError(f"{path}: list {name!r} has {len(items)} item(s); uniformity needs at least 2")
        seen: dict[str | None, str] = {}
        for item in map(str, items):
            key = normalize_answer(item)
            if key in seen:
                raise ValueError(f"{path}: list {name!r} has duplicate items {seen[key]!r} and {item!r}")
            seen[key] = item
    return {name: [str(i) for i in items] for name, items in lists.items()}


def read_questions(path: str | Path) -> dict[str, str]:
    """The user's open questions, ``{category: question}``; an empty question is one line."""
    questions = _named(path, "question")
    for name, question in questions.items():
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"{path}: question {name!r} is empty")
    return questions


def check_endpoint(endpoint: str, model: str, timeout_s: float) -> None:
    """GET ``/v1/models`` within `timeout_s`: one line when the server does not answer or does not serve `model`."""

    url = chat_completions_url(endpoint).removesuffix("/chat/completions") + "/models"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            served = [m.get("id") for m in json.loads(response.read().decode("utf-8")).get("data", [])]
    except urllib.error.HTTPError as err:
        if err.code in (401, 403, 404):  # a hosted API may hide its model list: it answered, which is what we ask
            return
        raise ValueError(f"endpoint {url} answered HTTP {err.code}") from err
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as err:
        reason = one_line(str(getattr(err, "reason", err)))
        raise ValueError(f"endpoint {url} did not answer within {timeout_s:g} s ({reason})") from err
    except (json.JSONDecodeError, AttributeError) as err:
        raise ValueError(f"endpoint {url} did not answer with a model list") from err
    if served and model not in served:
        raise ValueError(f"endpoint {url} serves {served}, not {model!r}")


def _same_model(recorded: str, model: str) -> bool:
    """Whether an adapter's recorded base model is `model`: the same name, directory or configuration."""

    if recorded == model:
        return True
    if not os.path.isdir(recorded):
        # gapo's offline models live in <cache>/<name>/model on every machine: an absolute path that is not here (an
        # adapter trained on another machine, a GPU's /tmp/gapo/cache/embedded/model) names its model by that layout
        parts = Path(recorded).parts
        by_layout = os.path.isabs(recorded) and parts[-2:] == (model, "model") and model in offline_models()
        return by_layout  # else a hub id, or a directory elsewhere, that differs from the name given
    path = resolve_model_path(model) if model in offline_models() or os.path.isdir(model) else None
    if path is None:
        return False
    if os.path.realpath(path) == os.path.realpath(recorded):
        return True
    ignored = {"_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache"}

    def config(directory: str) -> dict[str, Any]:
        file = Path(directory) / "config.json"
        data = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
        return {k: v for k, v in data.items() if k not in ignored}

    return bool(config(path)) and config(path) == config(recorded)


def check_adapter_base(model: str, adapter: str) -> None:
    """One line when `adapter`'s adapter_config.json names another base model than `model`."""
    file = Path(adapter) / "adapter_config.json"
    if not file.is_file():
        raise FileNotFoundError(f"no LoRA adapter at {adapter!r} (adapter_config.json missing)")
    try:
        recorded = json.loads(file.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except json.JSONDecodeError as err:
        raise ValueError(f"adapter {adapter!r}: adapter_config.json is not valid JSON ({err.msg})") from err
    if recorded and not _same_model(str(recorded), model):
        raise ValueError(f"adapter {adapter!r} was trained on {recorded!r}, not on {model!r}: pass --model {recorded}")


@dataclass(frozen=True)
class ModelSpec:
    """One model to evaluate: a name, an optional adapter; `key` names it in eval.json."""

    model: str
    adapter: str | None = None

    @property
    def key(self) -> str:
        return self.model if self.adapter is None else f"{self.model}:{self.adapter}"


def parse_compare(text: str, first: ModelSpec) -> ModelSpec:
    """``M2`` or ``M2:ADAPTER`` (the last colon separates them, unless `text` is an existing path)."""
    model, sep, adapter = text.rpartition(":")
    spec = ModelSpec(model, adapter) if sep and model and adapter and not Path(text).exists() else ModelSpec(text)
    if spec == first:
        raise ValueError(f"--compare {text} is the model already evaluated; name another model or adapter")
    return spec


@dataclass(frozen=True)
class Plan:
    """Everything checked before sampling: what to sample, how, and where it goes."""

    models: list[ModelSpec]
    suites: list[str]
    lists: dict[str, list[str]] | None
    questions: dict[str, str] | None
    out: Path


def plan(args: argparse.Namespace) -> Plan:
    """Every check that needs no model: suites, n, files, the compare spec, adapters' base models, the endpoint."""
    suites = parse_suites(args.suite)
    if args.n < 2:
        raise ValueError(f"-n must be at least 2 (uniformity and Unique@n compare samples), got {args.n}")
    if args.resamples < 1:
        raise ValueError(f"--resamples must be positive, got {args.resamples}")
    for flag, suite in (("lists", "lists"), ("questions", "open")):
        if getattr(args, flag) is not None and suite not in suites:
            raise ValueError(f"--{flag} is given but suite {suite!r} is not run (add it to --suite)")
    lists = read_lists(args.lists) if args.lists else None
    if "lists" in suites and lists is None and args.heldin:
        suites.insert(suites.index("lists") + 1, HELDIN)
    questions = read_questions(args.questions) if args.questions else None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a directory")
    models = [ModelSpec(args.model, args.adapter)]
    if args.compare:
        models.append(parse_compare(args.compare, models[0]))
    if args.backend == "openai":
        if not args.endpoint:
            raise ValueError("--backend openai needs --endpoint URL (e.g. http://127.0.0.1:8000/v1)")
        if any(m.adapter for m in models):
            raise ValueError("--adapter is not supported with the openai backend (load it in the server)")
        for spec in models:
            check_endpoint(args.endpoint, spec.model, args.timeout)
    else:
        for spec in models:
            check_model_name(spec.model)
            if spec.adapter:
                check_adapter_base(spec.model, spec.adapter)
    return Plan(models, suites, lists, questions, out)


# --------------------------------------------------------------------------------------------------------------------
# Sampling and scoring: the experiments of gapo.repro.experiments, as the pipeline's stages call them
# --------------------------------------------------------------------------------------------------------------------


def run_suites(sampler: Any, plan: Plan, args: argparse.Namespace) -> dict[str, Any]:
    """suite -> `ExperimentResult` of one model, with the same n, seeds and prompts for every model."""

    def tokens(suite: str) -> int:
        return args.max_new_tokens or MAX_NEW_TOKENS[suite]

    results: dict[str, Any] = {}
    for suite in plan.suites:
        print(f"gapo eval: {suite}", file=sys.stderr)
        if suite == "lists":
            results[suite] = experiments.uniformity(
                sampler.with_params(max_new_tokens=tokens(suite)),
                n=args.n,
                lists=plan.lists or ep.UNIFORMITY_LISTS,
                seed=args.seed,
                resamples=args.resamples,
            )
        elif suite == HELDIN:
            results[suite] = experiments.uniformity(
                sampler.with_params(max_new_tokens=tokens(suite)),
                n=args.n,
                lists=ep.HELDIN_LISTS,
                seed=args.seed,
                resamples=args.resamples,
            )
        elif suite == "open":
            results[suite] = experiments.open_set(
                sampler.with_params(max_new_tokens=tokens(suite)),
                n=args.n,
                prompts=plan.questions or asked_questions(None, list(CHECKED_CATEGORIES)),
                seed=args.seed,
            )
            if not plan.questions:
                results[suite].summary[PAPER_UNIQUE] = paper_unique(results[suite], None)
        else:
            results[suite] = experiments.creativity(
                sampler,
                n=args.n,
                encoder=args.encoder,
                max_new_tokens=tokens(suite),
                seed=args.seed,
                resamples=args.resamples,
            )
    return results


def evaluate(plan: Plan, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """model key -> suite -> result; one model in memory at a time."""

    out: dict[str, dict[str, Any]] = {}
    for spec in plan.models:
        print(f"gapo eval: loading {spec.key}", file=sys.stderr)
        sampler = make_sampler(spec.model, adapter=spec.adapter, **sampler_settings(args))
        out[spec.key] = run_suites(sampler, plan, args)
        del sampler
        gc.collect()
    return out


def paper_subset(result: Any) -> dict[str, tuple[str, list[int]]] | None:
    """`compare`'s subset for `PAPER_UNIQUE`'s paired difference: Unique@n over the paper's questions alone; None when
    the run asked other questions (`--questions`), which has no paper's mean."""
    if PAPER_UNIQUE not in result.summary:
        return None
    rows = [i for i, name in enumerate(result.config["prompts"]) if name in ep.OPEN_SET_PROMPTS]
    return {PAPER_UNIQUE.removeprefix("mean_"): ("unique_at_n", rows)}


def document(results: Mapping[str, Mapping[str, Any]], plan: Plan, args: argparse.Namespace) -> dict[str, Any]:
    """eval.json: ``models`` (every suite's summary merged per model; the compared model's ``_diff`` keys),
    ``settings`` and ``tables`` (per list, per question, the discovery curves, per creative prompt)."""

    keys = list(results)
    models: dict[str, dict[str, Any]] = {}
    for key in keys:
        models[key] = {k: v for suite, r in results[key].items() if suite != HELDIN for k, v in r.summary.items()}
        if HELDIN in results[key]:
            models[key][HELDIN] = dict(results[key][HELDIN].summary)
    if len(keys) == 2:
        for suite in plan.suites:
            base, other = results[keys[0]][suite], results[keys[1]][suite]
            diff = compare(base, other, args.resamples, args.seed, paper_subset(base) if suite == "open" else None)
            (models[keys[1]][HELDIN] if suite == HELDIN else models[keys[1]]).update(diff)
    tables: dict[str, Any] = {}
    for suite, name, table in (
        ("lists", "lists", "per_list"),
        (HELDIN, HELDIN, "per_list"),
        ("open", "open", "per_prompt"),
        ("open", "open_curves", "curves"),
        ("creativity", "creativity", "per_prompt"),
    ):
        if suite in plan.suites:
            frame = pd.concat([results[k][suite].tables[table].assign(model=k) for k in keys], ignore_index=True)
            tables[name] = json.loads(frame.to_json(orient="records", force_ascii=False))
    settings = {
        "suites": plan.suites,
        "n": args.n,
        "seed": args.seed,
        "backend": args.backend,
        "endpoint": args.endpoint,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "min_p": args.min_p,
        "max_new_tokens": {s: args.max_new_tokens or MAX_NEW_TOKENS[s] for s in plan.suites},
        "heldin_lists": {k: list(v) for k, v in ep.HELDIN_LISTS.items()} if HELDIN in plan.suites else None,
        "bootstrap": {"resamples": args.resamples, "level": 0.95},
        "encoder": args.encoder if "creativity" in plan.suites else None,
        "models": [{"key": m.key, "model": m.model, "adapter": m.adapter} for m in plan.models],
        "compare": plan.models[1].key if len(plan.models) == 2 else None,
    }
    # the commit, packages and machine the samples came from: the same seed samples differently elsewhere
    # (docs/uniformity_diagnosis.md, step-0 scores across sessions); behind --endpoint, this client's only
    return {"models": models, "settings": settings, "environment": environment(), "tables": tables}


def _cell(summary: Mapping[str, Any], key: str) -> str:
    value = summary.get(key)
    if not isinstance(value, (int, float)) or math.isnan(value):
        return "-"
    low, high = summary.get(f"{key}_ci_low"), summary.get(f"{key}_ci_high")
    text = f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and not math.isnan(low + high):
        text += f" [{low:.3f}, {high:.3f}]" if abs(value) < 10 else f" [{low:.1f}, {high:.1f}]"
    return text


def table(doc: Mapping[str, Any]) -> str:
    """The terminal table: one line per metric, a column per model, and the difference when two were compared."""
    keys = list(doc["models"])
    rows = [["metric", *keys, *(["difference (2nd - 1st)"] if len(keys) == 2 else [])]]
    for suite in doc["settings"]["suites"]:
        summaries = [doc["models"][k].get(HELDIN, {}) if suite == HELDIN else doc["models"][k] for k in keys]
        for metric in HEADLINES[suite]:
            row = [f"{suite}/{metric.removeprefix('mean_')}", *(_cell(summary, metric) for summary in summaries)]
            if len(keys) == 2:
                row.append(_cell(summaries[1], f"{metric}_diff"))
            rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def sample_rows(results: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every sample of every model and suite, with the model key and suite (samples.jsonl)."""
    rows: list[dict[str, Any]] = []
    for key, suites in results.items():
        for suite, result in suites.items():
            records = json.loads(result.tables["samples"].to_json(orient="records", force_ascii=False))
            rows.extend({"model": key, "suite": suite, **r} for r in records)
    return rows


def figure(results: Mapping[str, Mapping[str, Any]], suites: Sequence[str]) -> Any:
    """eval.png's figure (`gapo.repro.plotting.eval_figure`) from the experiments' tables."""

    def stacked(suite: str, name: str) -> pd.DataFrame | None:
        if suite not in suites:
            return None
        return pd.concat([r[suite].tables[name].assign(model=k) for k, r in results.items()], ignore_index=True)

    plotting.use_style()
    return plotting.eval_figure(
        list(results), stacked("lists", "distribution"), stacked("open", "curves"), stacked("creativity", "per_prompt")
    )


def write(out: Path, doc: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]]) -> Path:
    """samples.jsonl and eval.png, then eval.json, each atomically: eval.json exists only for a finished run."""

    out.mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(out / "samples.jsonl", sample_rows(results))
    plotting.save(figure(results, doc["settings"]["suites"]), out / "eval.png", close=True)
    return write_json_atomic(out / "eval.json", doc)


def cli(argv: list[str] | None = None) -> int:
    """``gapo eval``: 0 on success; 2 with one ``gapo: error:`` line on bad input (as every `gapo` command), before any
    sampling."""

    try:
        args = build_parser().parse_args(argv)
        checked = plan(args)
        results = evaluate(checked, args)
        doc = document(results, checked, args)
        path = write(checked.out, doc, results)
    except (ValueError, KeyError, ModelLoadError, SamplingError, OSError) as err:
        message = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
        print(f"gapo: error: {one_line(message) or type(err).__name__}", file=sys.stderr)
        return 2
    print(table(doc))
    print(f"wrote {path}, {path.parent / 'eval.png'}, {path.parent / 'samples.jsonl'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
