"""Every pipeline stage function (`gapo.repro.stages.<stage>.run`) end to end at smoke sizes on tiny-random: real
training steps, real sampling, real files; plus `gapo train --task` and the issue-13 evaluations on known answers.

The stages run as DVC runs them, in one directory: generate writes the data the training stages read, train_gapo
and train_sft write the adapters the evaluation stages load, open_set's metrics feed uniformity's Table 8. Every path
a stage reads or writes is moved under a temporary directory; nothing is written to the repository.
About 70 s on a 2-core machine (four tiny training runs of 2 steps, tiny sampling, a few benchmark problems).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gapo import io as gio
from gapo.metrics import jsd_to_target
from gapo.repro import plotting, profiles
from gapo.repro.experiments import target_jsd, valid_unique
from gapo.repro.paper import PAPER_TABLE1, PAPER_TABLE8
from gapo.repro.prompts import HELDIN_LISTS, unseen_target_rows
from gapo.repro.stages import (
    benchmarks,
    bias,
    coherence,
    creativity,
    generate,
    open_ended,
    open_set,
    targets,
    train_gapo,
    train_sft,
    uniformity,
)
from gapo.repro.stages.common import StageResult, split_categories
from gapo.tasks.open_ended import LEXICON_SOURCES, VALIDITY_UNCHECKED
from gapo.train import configs, parse_args, task_data

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"


def _params(stage: str, root: Path, **overrides: dict[str, Any]) -> dict[str, Any]:
    """The smoke profile's parameters of `stage`, every path it reads or writes moved under `root`, `overrides`
    ({section: {key: value}}) on top."""
    P = copy.deepcopy(profiles.stage_params(stage, "smoke", PARAMS))
    if "data" in P:
        P["data"]["out"] = str(root / P["data"]["out"])
    if "sft" in P:
        P["sft"]["output_dir"] = str(root / P["sft"]["output_dir"])
    for spec in P.get("models", {}).values():
        if spec.get("adapter"):
            spec["adapter"] = str(root / spec["adapter"])
    if stage in ("open_ended", "targets"):
        P[stage].update(output_dir=str(root / "runs" / stage), adapter=str(root / "models" / stage))
    for section, values in overrides.items():
        P[section].update(values)
    return P


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stages' working directory (the repository root, for DVC)."""
    return tmp_path_factory.mktemp("stages")


@pytest.fixture(scope="module")
def trained(root: Path) -> dict[str, StageResult]:
    """Stages generate, train_gapo and train_sft in dvc.yaml's order: the data and the adapters later stages read."""
    done = {"generate": generate.run(_params("generate", root))}
    done["train_gapo"] = train_gapo.run(
        _params("train_gapo", root), runs_dir=root / "outputs" / "runs", adapters_dir=root / "models" / "gapo"
    )
    done["train_sft"] = train_sft.run(_params("train_sft", root))
    return done


def _written(result: StageResult, out: Path) -> dict[str, Path]:
    """Write `result` under `out`; check each file reads back as the table or document it came from."""
    paths = dict(zip(result.files, result.write(out), strict=True))
    for name, path in paths.items():
        if name in result.tables:
            assert len(pd.read_csv(path)) == len(result.tables[name]), name
        else:
            document = result.metrics if name == "metrics" else result.documents[name]
            assert json.loads(path.read_text(encoding="utf-8")) == json.loads(json.dumps(gio.json_ready(document)))
    return paths


# --------------------------------------------------------------------------------------------------------------------
# StageResult
# --------------------------------------------------------------------------------------------------------------------


def test_stage_result_writes_tables_as_csv_and_documents_as_json(tmp_path: Path) -> None:
    table = pd.DataFrame({"model": ["a", "b"], "x": [0.5, float("nan")]})
    result = StageResult(
        {"t": table, "shown_only": table}, {"models": {"a": {"x": 0.5}}, "nan": float("nan")},
        files={"t": "results/t.csv", "metrics": "metrics/m.json", "d": "results/d.json"}, documents={"d": {"k": [1]}},
    )  # fmt: skip
    paths = result.write(tmp_path)
    assert paths == [tmp_path / "results/t.csv", tmp_path / "metrics/m.json", tmp_path / "results/d.json"]
    assert (tmp_path / "results/t.csv").read_text() == "model,x\na,0.5\nb,\n"
    assert json.loads((tmp_path / "metrics/m.json").read_text()) == {"models": {"a": {"x": 0.5}}, "nan": None}
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["d.json", "t.csv"]  # shown_only: not written
    with pytest.raises(KeyError, match="typo"):
        StageResult({"t": table}, files={"typo": "results/t.csv"})


def test_split_categories_keeps_the_first_figures_order_and_only_present_categories() -> None:
    table = pd.DataFrame({"category": ["food", "city", "food", "color"]})
    assert split_categories(table, ["city", "planet", "food"]) == (["city", "food"], ["color"])


# --------------------------------------------------------------------------------------------------------------------
# Data and training stages
# --------------------------------------------------------------------------------------------------------------------


def test_generate_stage_writes_the_dataset_and_summarises_it(root: Path, trained: dict, tmp_path: Path) -> None:
    P = _params("generate", root)
    result = trained["generate"]
    rows = gio.read_jsonl(P["data"]["out"])
    assert len(rows) == P["data"]["num_prompts"] == len(result.tables["rows"])
    summary = result.tables["summary"].set_index("category")
    assert summary["prompts"].sum() == len(rows)
    assert summary["min_items"].min() >= P["data"]["min_items"] and summary["max_items"].max() <= P["data"]["max_items"]
    assert list(_written(result, tmp_path)) == ["summary"]


def test_train_gapo_stage_trains_every_policy_and_logs_each_step(root: Path, trained: dict, tmp_path: Path) -> None:
    P = _params("train_gapo", root)
    result = trained["train_gapo"]
    assert result.models == list(P["policies"])
    for name in P["policies"]:
        assert (root / "models" / "gapo" / name / "adapter_config.json").is_file()
        saved = json.loads((root / "models" / "gapo" / name / "train_summary.json").read_text())
        # no seconds and no resume flag: the same weights give the same DVC output, fresh or resumed
        assert saved["steps"] == P["train"]["max_steps"] and "train_seconds" not in saved
        assert "resume" not in saved["config"] and saved["config"]["max_steps"] == P["train"]["max_steps"]
    log = result.tables["train"]
    assert len(log) == P["train"]["max_steps"] * len(P["policies"]) and list(log["step"]) == [1, 2]
    assert list(log.columns) == [c for c in train_gapo.LOG_COLUMNS if c in log] and "rewards/mean" in log
    assert "advantage/valid_spread" in log  # issue 19's diagnosis, per step
    assert (log["rollouts"] == P["train"]["per_device_train_batch_size"]).all()  # completions generated per step
    assert result.tables["summary"].loc["steps"].tolist() == [P["train"]["max_steps"]]
    _written(result, tmp_path)
    fig = plotting.training_figure(log)
    plotting.save(fig, tmp_path / "train.png", close=True)


def test_train_gapo_stage_trains_on_the_data_file_and_refuses_a_bad_row_before_training(
    root: Path, trained: dict, tmp_path: Path
) -> None:
    """The stage trains on data/train.jsonl as DVC tracks it (built once, by `generate`): a bad row in that file stops
    it before anything is written, whatever the train settings would build."""
    rows = gio.read_jsonl(_params("generate", root)["data"]["out"])
    rows[1]["items"] = [rows[1]["items"][0]] * 2
    bad = tmp_path / "train.jsonl"
    gio.write_jsonl_atomic(bad, rows)
    P = _params("train_gapo", root, data={"out": str(bad)})
    with pytest.raises(ValueError, match="dataset row 1: 'items' has the duplicate"):
        train_gapo.run(P, runs_dir=tmp_path / "runs", adapters_dir=tmp_path / "models")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "models").exists()


def test_train_sft_stage_writes_the_adapter_and_the_losses(root: Path, trained: dict, tmp_path: Path) -> None:
    P = _params("train_sft", root)
    result = trained["train_sft"]
    assert (Path(P["sft"]["output_dir"]) / "adapter_config.json").is_file()
    losses = result.tables["losses"]
    assert list(losses["step"]) == list(range(1, P["sft"]["steps"] + 1)) and losses["loss"].gt(0).all()
    _written(result, tmp_path)


# --------------------------------------------------------------------------------------------------------------------
# Evaluation stages
# --------------------------------------------------------------------------------------------------------------------


def test_bias_stage_counts_items_and_positions(root: Path, tmp_path: Path) -> None:
    P = _params("bias", root)
    result = bias.run(P, raw_dir=tmp_path / "raw")
    items = result.tables["items"]
    assert items.groupby(["part", "variant"])["share"].sum().round(9).eq(1).all()
    assert result.tables["positions"]["count"].sum() == P["bias"]["n"]
    assert (tmp_path / "raw" / "bias.json").is_file() and result.models == [P["bias"]["model"]]
    assert sorted(_written(result, tmp_path)) == ["items", "positions"]


def test_open_set_then_uniformity_stage_with_table8(root: Path, trained: dict, tmp_path: Path) -> None:
    P = _params("open_set", root)
    P["open_set"] = cfg = {**P["open_set"], "checked_categories": ["chemical element"]}
    result = open_set.run(P, raw_dir=tmp_path / "raw_open_set")
    assert result.models == cfg["models"]
    for name, r in result.results.items():  # the whole experiment summary, plus the paper's Unique@n Table 8 reads
        per_prompt = r.tables["per_prompt"].set_index("category")
        assert list(per_prompt.index)[-1] == "chemical element"  # the extra lexicon-checked question, after the paper's
        assert per_prompt.loc["chemical element", "rule"] == LEXICON_SOURCES["chemical element"]
        paper_mean = per_prompt["unique_at_n"].iloc[:-1].mean()
        assert result.metrics["models"][name] == {**r.summary, "mean_unique": pytest.approx(paper_mean)}
        assert "chemical element" in r.summary["checked_categories"]
        assert (tmp_path / "raw_open_set" / f"{name}.json").is_file()
    with pytest.raises(ValueError, match="already among the paper's questions"):
        open_set.asked_questions(None, ["city"])
    present = list(dict.fromkeys(result.tables["per_prompt"]["category"]))
    assert result.figure["fig5_categories"] == [c for c in cfg["fig5_categories"] if c in present]
    assert result.figure["other_categories"] == [c for c in present if c not in result.figure["fig5_categories"]]
    assert list(result.tables["curves"].columns)[-1] == "model"  # the committed CSVs keep their columns
    _written(result, root)  # uniformity reads metrics/open_set.json from the stages' root

    P = _params("uniformity", root)
    P["uniformity"] = cfg = {**P["uniformity"], "prefill_models": ["baseline"], "prefill": "<answer>"}
    uni = uniformity.run(P, raw_dir=tmp_path / "raw_uni", open_set_metrics=root / "metrics" / "open_set.json")
    # without pre-fill as a user prompts; the pre-filled run of `prefill_models` beside it, as <key>_prefilled
    assert {p.name for p in (tmp_path / "raw_uni" / "prefilled").iterdir()} == {"baseline.json"}
    raw = json.loads((tmp_path / "raw_uni" / "prefilled" / "baseline.json").read_text())
    prefilled = raw["summary"]
    assert raw["config"]["response_prefix"] == "<answer>"
    # the held-in lists (issue 34): the training categories' lists, for `heldin_models`, under models/<name>/heldin
    assert {p.name for p in (tmp_path / "raw_uni" / "heldin").iterdir()} == {f"{m}.json" for m in cfg["heldin_models"]}
    for name, r in uni.results.items():
        extra = {uniformity.prefilled_key(k): v for k, v in prefilled.items()} if name == "baseline" else {}
        metrics = dict(uni.metrics["models"][name])
        if name in cfg["heldin_models"]:
            held = json.loads((tmp_path / "raw_uni" / "heldin" / f"{name}.json").read_text())
            assert list(held["config"]["lists"]) == list(HELDIN_LISTS)[: cfg["heldin_num_lists"]]
            assert metrics.pop("heldin") == pytest.approx(held["summary"], nan_ok=True)
        assert "heldin" not in metrics
        assert metrics == pytest.approx({**r.summary, **extra}, nan_ok=True)  # jsd_valid: NaN
    baseline = uni.metrics["models"]["baseline"]  # format and distribution apart, each with its interval (issue 19)
    for key in ("mean_invalid", "mean_jsd", "mean_jsd_valid", "mean_top_share", "mean_jsd_prefilled"):
        assert baseline[f"{key}_ci_low"] <= baseline[f"{key}_ci_high"] or math.isnan(baseline[key])
    assert {"invalid", "jsd", "jsd_valid", "top_share", "num_items"} <= set(uni.tables["per_list"].columns)
    table8 = uni.tables["table8"]
    ours = table8[table8["source"] == "this run (smoke)"]
    assert list(ours["model"]) == [uni.labels[m] for m in cfg["table8_models"]]
    assert ours["js"].tolist() == [uni.results[m].summary["mean_jsd"] for m in cfg["table8_models"]]
    assert ours["unique"].tolist() == [result.metrics["models"][m]["mean_unique"] for m in cfg["table8_models"]]
    assert len(table8) - len(ours) == len(PAPER_TABLE8) and (ours["samples_per_list"] == cfg["n"]).all()
    assert uni.figure["fig4_categories"] == [
        c for c in cfg["fig4_categories"] if c in set(uni.tables["per_list"]["category"])
    ]
    assert uni.metrics["settings"]["heldin_lists"] == cfg["heldin_num_lists"] == 2  # the smoke profile's
    held_per_list = uni.tables["heldin_per_list"]
    assert set(held_per_list["model"]) == set(cfg["heldin_models"]) and not set(held_per_list["category"]) & set(
        uni.tables["per_list"]["category"]
    )
    assert uni.figure["heldin_categories"] == list(HELDIN_LISTS)[:2]
    assert sorted(_written(uni, tmp_path)) == [
        "distribution", "heldin_distribution", "heldin_per_list", "metrics", "per_list", "table8"
    ]  # fmt: skip
    fig = plotting.distribution_figure(
        uni.tables["distribution"], uni.tables["per_list"], uni.figure["fig4_categories"], uni.figure["models"],
        uni.labels,
    )  # fmt: skip
    plotting.save(fig, tmp_path / "fig4.png", close=True)
    fig = plotting.distribution_figure(
        uni.tables["heldin_distribution"], held_per_list, uni.figure["heldin_categories"], uni.figure["heldin_models"],
        uni.labels,
    )  # fmt: skip
    plotting.save(fig, tmp_path / "fig8_heldin.png", close=True)


def test_uniformity_stage_stops_before_sampling_on_bad_heldin_settings(root: Path, tmp_path: Path) -> None:
    P = _params("uniformity", root)
    open_set_metrics = tmp_path / "open_set.json"
    models = {m: {"mean_unique": 1} for m in P["uniformity"]["table8_models"]}
    open_set_metrics.write_text(json.dumps({"models": models, "settings": {"n": 4}}))
    for bad, message in (
        ({"heldin_models": ["baseline", "nope"]}, r"heldin_models \['nope'\] are not in uniformity.models"),
        ({"heldin_num_lists": 11}, r"heldin_num_lists must be 1..10, got 11"),
    ):
        P["uniformity"] = {**_params("uniformity", root)["uniformity"], **bad}
        with pytest.raises(ValueError, match=message):
            uniformity.run(P, raw_dir=tmp_path / "raw", open_set_metrics=open_set_metrics)
        assert not (tmp_path / "raw").exists()


def test_uniformity_stage_stops_before_sampling_when_open_set_lacks_a_table8_model(root: Path, tmp_path: Path) -> None:
    (tmp_path / "open_set.json").write_text(json.dumps({"models": {"baseline": {"mean_unique": 1}}, "settings": {}}))
    with pytest.raises(ValueError, match=r"has no \[.*'gapo'.*\]: add them to open_set.models"):
        uniformity.run(
            _params("uniformity", root), raw_dir=tmp_path / "raw", open_set_metrics=tmp_path / "open_set.json"
        )
    assert not (tmp_path / "raw").exists()


def test_table1_puts_the_average_and_the_papers_values_beside_ours() -> None:
    frame = pd.DataFrame(
        {
            "task": ["story", "limerick"],
            "prompt": ["S", "L"],
            "embedding_distance": [0.2, 0.4],
            "one_minus_self_bleu": [0.5, 0.7],
        }
    )
    table = creativity.table1({"baseline": frame, "gapo": frame.assign(embedding_distance=[0.6, 0.8])}).set_index(
        "task"
    )
    assert list(table.index) == ["story", "limerick", "average"] and table.loc["average", "prompt"] == ""
    assert table.loc["average", "gapo/embedding_distance"] == pytest.approx(0.7)
    assert table.loc["average", "baseline/one_minus_self_bleu"] == pytest.approx(0.6)
    story = PAPER_TABLE1["story"]["embedding_distance"]
    assert (
        table.loc["story", "paper_baseline/embedding_distance"],
        table.loc["story", "paper_gapo/embedding_distance"],
    ) == story
    assert table["paper_gapo/embedding_distance"].isna()["limerick"]  # the paper has no such task


def test_creativity_stage_builds_table1_and_the_haiku_map(root: Path, trained: dict, tmp_path: Path) -> None:
    pytest.importorskip("openTSNE")
    P = _params("creativity", root)
    cfg = P["creativity"]
    result = creativity.run(P, raw_dir=tmp_path / "raw")
    assert result.models == cfg["models"]
    assert len(result.tables["table1"]) == cfg["num_prompts"] + 1
    for name, r in result.results.items():  # the whole experiment summary flows into the metrics document
        assert r.summary.items() <= result.metrics["models"][name].items()
        assert result.metrics["models"][name]["haiku_distinct_texts"] <= cfg["haiku_n"]
    assert len(result.tables["points"]) == cfg["haiku_n"] * len(cfg["models"])
    assert (tmp_path / "raw" / "haiku_map.json").is_file()
    _written(result, tmp_path)
    fig = plotting.tsne_figure(result.tables["points"], result.labels, seed=result.figure["seed"])
    plotting.save(fig, tmp_path / "tsne.png", close=True)


def test_benchmarks_stage_writes_table2_details_and_metrics(root: Path, trained: dict, tmp_path: Path) -> None:
    P = _params("benchmarks", root, benchmarks={"benchmarks": ["gsm8k"]})
    result = benchmarks.run(P, raw_dir=tmp_path / "raw")
    table2 = result.tables["table2"]
    assert list(table2["model"][: len(result.models)]) == P["benchmarks"]["models"]
    assert len(table2) == len(result.models) + 2  # then the paper's two rows
    for name in result.models:
        assert isinstance(result.metrics["models"][name]["gsm8k"]["exact"], float)
    assert set(result.documents["details"]) >= {"models", "details", "settings"}
    assert len(gio.read_jsonl(tmp_path / "raw" / "benchmarks_samples.jsonl")) == len(result.models)
    assert sorted(_written(result, tmp_path)) == ["details", "metrics", "table2"]
    assert benchmarks.skipped(result).empty


def test_coherence_stage_gives_one_row_per_model_and_temperature(root: Path, trained: dict, tmp_path: Path) -> None:
    P = _params("coherence", root)
    cfg = P["coherence"]
    result = coherence.run(P)
    rows = result.tables["figure7"]
    assert len(rows) == len(cfg["models"]) * len(cfg["temperatures"])
    assert rows["temperature"].tolist() == [float(t) for t in cfg["temperatures"]] * len(cfg["models"])
    assert rows["creativity"].between(0, 2).all() and rows["math/verify"].between(0, 1).all()
    _written(result, tmp_path)
    fig = plotting.coherence_figure(rows, result.labels)
    plotting.save(fig, tmp_path / "fig7.png", close=True)


# --------------------------------------------------------------------------------------------------------------------
# Issue 13 stages
# --------------------------------------------------------------------------------------------------------------------


def test_open_ended_stage_trains_and_compares_base_list_and_open_gapo(
    root: Path, trained: dict, tmp_path: Path
) -> None:
    P = _params("open_ended", root)
    result = open_ended.run(P, raw_dir=tmp_path / "raw")
    cfg = P["open_ended"]
    assert result.models == ["baseline", "gapo", open_ended.OPEN_GAPO]
    assert (Path(cfg["adapter"]) / "adapter_config.json").is_file()
    assert result.metrics["train"]["steps"] == cfg["max_steps"] == len(result.tables["train"])
    assert result.metrics["rules"] == {c: LEXICON_SOURCES[c] for c in cfg["categories"]}
    for name in result.models:
        values = result.metrics["models"][name]
        assert set(values["valid_unique"]) == set(cfg["categories"])
        assert 0 <= values["mean_valid_unique"] <= values["mean_unique"] <= cfg["n"]
        assert (tmp_path / "raw" / f"{name}.json").is_file()
    ratio = result.metrics["ratio_open_to_list"]
    listed, opened = (result.metrics["models"][m]["mean_valid_unique"] for m in ("gapo", open_ended.OPEN_GAPO))
    assert ratio == (opened / listed if listed else None)
    per_category = result.tables["per_category"]
    assert len(per_category) == 3 * len(cfg["categories"]) and (per_category["n"] == cfg["n"]).all()
    assert result.tables["curves"]["k"].max() == cfg["n"]
    assert sorted(_written(result, tmp_path)) == ["curves", "metrics", "per_category", "train"]
    # as the notebook calls it: the bars of the last panel are each model's mean valid-unique@n
    fig = plotting.valid_unique_figure(
        result.tables["curves"], per_category.drop(columns="unique_at_n"), result.models, result.labels
    )
    heights = [bar.get_height() for bar in fig.axes[-1].patches]
    assert heights == pytest.approx([result.metrics["models"][m]["mean_valid_unique"] for m in result.models])
    plotting.save(fig, tmp_path / "open_ended.png", close=True)
    assert (tmp_path / "open_ended.png").stat().st_size > 0


def test_targets_stage_trains_and_measures_jsd_on_unseen_lists(root: Path, tmp_path: Path) -> None:
    P = _params("targets", root)
    result = targets.run(P, raw_dir=tmp_path / "raw")
    cfg = P["targets"]
    assert result.models == ["baseline", targets.TARGET_GAPO]
    assert (Path(cfg["adapter"]) / "adapter_config.json").is_file()
    assert result.metrics["train"]["steps"] == cfg["max_steps"]
    per_list = result.tables["per_list"]
    assert len(per_list) == 2 * cfg["num_lists"] and per_list["jsd"].between(0, 1).all()
    unseen = unseen_target_rows(cfg["num_lists"], cfg["seed"], cfg["min_items"], cfg["max_items"])
    assert [list(i) for i in per_list["items"][: cfg["num_lists"]]] == [r["items"] for r in unseen]
    for name in result.models:
        mean = per_list[per_list["model"] == name]["jsd"].mean()
        assert result.metrics["models"][name]["mean_jsd"] == pytest.approx(mean)
    assert sorted(_written(result, tmp_path)) == ["metrics", "per_list", "train"]
    fig = plotting.target_jsd_figure(per_list, result.models, result.labels)
    plotting.save(fig, tmp_path / "targets.png", close=True)


def test_open_ended_stage_stops_before_training_without_the_list_adapter(tmp_path: Path) -> None:
    P = _params("open_ended", tmp_path)  # no train_gapo run under tmp_path: no list adapter
    with pytest.raises(FileNotFoundError, match="run stage train_gapo first"):
        open_ended.run(P)
    P["open_ended"]["list_gapo"] = "gapo2"
    with pytest.raises(profiles.PipelineError, match="open_ended.list_gapo names model 'gapo2'"):
        open_ended.run(P)
    assert not (tmp_path / "runs").exists()


# --------------------------------------------------------------------------------------------------------------------
# gapo train --task: one-line errors before any model loads
# --------------------------------------------------------------------------------------------------------------------


def test_task_selects_prompts_and_reward() -> None:
    data, rewards = task_data(*configs({"model": "tiny-random", "task": "open", "num_prompts": 8}))
    assert set(data.column_names) == {"prompt", "category"} and rewards[0].__name__ == "class_frequency"
    data, rewards = task_data(*configs({"model": "tiny-random", "task": "targets", "num_prompts": 8, "max_items": 4}))
    assert "target" in data.column_names and rewards[0].__name__ == "target_distribution"
    data, rewards = task_data(*configs({"model": "tiny-random", "num_prompts": 8}))
    assert "target" not in data.column_names and rewards[0].__name__ == "frequency"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"task": "list"}, "task must be one of lists, open, targets, got 'list'"),
        ({"task": "open", "categories": "country,food"}, r"categories \['food'\] have no lexicon"),
        ({"task": "open", "categories": "planet"}, "unknown open categories"),
        ({"task": "open", "equivalence": "embedding:1.5"}, "threshold"),
        ({"task": "targets"}, "max_items=12 exceeds resolution=10"),
    ],
)
def test_bad_task_settings_are_one_line_errors(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        task_data(*configs({"model": "tiny-random", "num_prompts": 4, **changes}))
    assert "\n" not in str(err.value)


def test_task_reaches_the_command_line() -> None:
    script, _ = parse_args(["--task", "open", "--equivalence", "exact"])
    assert (script.task, script.equivalence) == ("open", "exact")


# --------------------------------------------------------------------------------------------------------------------
# The evaluations on known answers
# --------------------------------------------------------------------------------------------------------------------


def _replay(texts: list[str]) -> Any:
    """A sampler that answers every prompt with `texts` (n of them), to check the counting rules exactly."""

    def sampler(prompts: list, n: int, **overrides: Any) -> list[list[str]]:
        assert n == len(texts)
        return [list(texts) for _ in prompts]

    return sampler


def test_valid_unique_counts_lexicon_answers_and_never_unchecked_ones() -> None:
    texts = ["<answer>Paris</answer>", "<answer>paris.</answer>", "<answer>Qwxyzt</answer>", "Paris"]
    result = valid_unique(_replay(texts), n=4, categories=["city", "food"])
    table = result.tables["per_category"].set_index("category")
    assert table.loc["city", "valid_unique_at_n"] == 1 and table.loc["city", "unique_at_n"] == 2
    assert table.loc["city", "rule"] == LEXICON_SOURCES["city"]
    # a category without a lexicon is reported, never counted: NaN, and left out of the mean
    assert math.isnan(table.loc["food", "valid_unique_at_n"]) and table.loc["food", "rule"] == VALIDITY_UNCHECKED
    assert result.summary["mean_valid_unique_at_n"] == 1 and result.summary["checked_categories"] == ["city"]
    assert table.loc["city", "valid_rate"] == 0.5 and table.loc["city", "answer_rate"] == 0.75


def test_target_jsd_matches_the_metric_on_known_answers() -> None:
    rows = unseen_target_rows(2, seed=0)
    items = rows[0]["items"]
    texts = [f"<answer>{items[0]}</answer>"] * 3 + ["<answer>nothing</answer>"]
    result = target_jsd(_replay(texts), rows[:1], n=4)
    expected = jsd_to_target([items[0]] * 3 + [None], items, rows[0]["target"])
    assert result.summary["mean_jsd"] == pytest.approx(expected) and result.summary["mean_invalid_rate"] == 0.25
