"""The issue-13 stages (`gapo.stages`) end to end at smoke sizes on tiny-random: real training steps, real sampling,
real files; plus `gapo train --task` and the two evaluation functions on known answers.

About 40 s on an idle 2-core machine (three tiny training runs of 1-2 steps, tiny sampling).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gapo import pipeline, plotting
from gapo.eval.experiments import target_jsd, valid_unique
from gapo.eval.metrics import jsd_to_target
from gapo.run import TrainConfig, task_data, train
from gapo.stages import extensions as stages
from gapo.tasks.open_ended import LEXICON_SOURCES, VALIDITY_UNCHECKED
from gapo.tasks.targets import unseen_target_rows

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"


@pytest.fixture(scope="module")
def list_adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A list-trained GAPO adapter (task lists, one real step), standing in for stage train_gapo's."""
    train_section = pipeline.stage_params("open_ended", "smoke", PARAMS)["train"]
    out = tmp_path_factory.mktemp("list-gapo") / "run"
    train(TrainConfig(**{**train_section, "output_dir": str(out), "max_steps": 1, "save_steps": 1}))
    return out / "adapter"


def _params(stage: str, tmp_path: Path, list_adapter: Path) -> dict[str, Any]:
    """The smoke profile's parameters of `stage`, its paths moved under `tmp_path`."""
    P = copy.deepcopy(pipeline.stage_params(stage, "smoke", PARAMS))
    P[stage].update(output_dir=str(tmp_path / "run"), adapter=str(tmp_path / "adapter"))
    P["models"]["gapo"]["adapter"] = str(list_adapter)
    return P


def test_open_ended_stage_trains_and_compares_base_list_and_open_gapo(tmp_path: Path, list_adapter: Path) -> None:
    P = _params("open_ended", tmp_path, list_adapter)
    result = stages.open_ended(P, raw_dir=tmp_path / "raw")
    cfg = P["open_ended"]
    assert result.models == ["baseline", "gapo", stages.OPEN_GAPO]
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert result.metrics["train"]["steps"] == cfg["max_steps"] == len(result.tables["train"])
    assert result.metrics["rules"] == {c: LEXICON_SOURCES[c] for c in cfg["categories"]}
    for name in result.models:
        values = result.metrics["models"][name]
        assert set(values["valid_unique"]) == set(cfg["categories"])
        assert 0 <= values["mean_valid_unique"] <= values["mean_unique"] <= cfg["n"]
        assert (tmp_path / "raw" / f"{name}.json").is_file()
    ratio = result.metrics["ratio_open_to_list"]
    listed, opened = (result.metrics["models"][m]["mean_valid_unique"] for m in ("gapo", stages.OPEN_GAPO))
    assert ratio == (opened / listed if listed else None)
    per_category = result.tables["per_category"]
    assert len(per_category) == 3 * len(cfg["categories"]) and (per_category["n"] == cfg["n"]).all()
    assert result.tables["curves"]["k"].max() == cfg["n"]
    json.dumps(pipeline._clean(result.metrics))  # the metrics file is plain JSON
    fig = plotting.valid_unique_figure(result.tables["curves"], per_category, result.models, result.labels)
    plotting.save(fig, tmp_path / "open_ended.png", close=True)
    assert (tmp_path / "open_ended.png").stat().st_size > 0


def test_targets_stage_trains_and_measures_jsd_on_unseen_lists(tmp_path: Path, list_adapter: Path) -> None:
    P = _params("targets", tmp_path, list_adapter)
    result = stages.targets(P, raw_dir=tmp_path / "raw")
    cfg = P["targets"]
    assert result.models == ["baseline", stages.TARGET_GAPO]
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert result.metrics["train"]["steps"] == cfg["max_steps"]
    per_list = result.tables["per_list"]
    assert len(per_list) == 2 * cfg["num_lists"] and per_list["jsd"].between(0, 1).all()
    unseen = unseen_target_rows(cfg["num_lists"], cfg["seed"], cfg["min_items"], cfg["max_items"])
    assert [list(i) for i in per_list["items"][: cfg["num_lists"]]] == [r["items"] for r in unseen]
    for name in result.models:
        mean = per_list[per_list["model"] == name]["jsd"].mean()
        assert result.metrics["models"][name]["mean_jsd"] == pytest.approx(mean)
    fig = plotting.target_jsd_figure(per_list, result.models, result.labels)
    plotting.save(fig, tmp_path / "targets.png", close=True)


def test_open_ended_stage_stops_before_training_without_the_list_adapter(tmp_path: Path) -> None:
    P = _params("open_ended", tmp_path, tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="run stage train_gapo first"):
        stages.open_ended(P)
    P["open_ended"]["list_gapo"] = "gapo2"
    with pytest.raises(pipeline.PipelineError, match="open_ended.list_gapo names model 'gapo2'"):
        stages.open_ended(P)
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------------------------------------
# gapo train --task: one-line errors before any model loads
# --------------------------------------------------------------------------------------------------------------------


def test_task_selects_prompts_and_reward() -> None:
    data, rewards = task_data(TrainConfig(model="tiny-random", task="open", num_prompts=8))
    assert set(data.column_names) == {"prompt", "category"} and rewards[0].__name__ == "class_frequency"
    data, rewards = task_data(TrainConfig(model="tiny-random", task="targets", num_prompts=8, max_items=4))
    assert "target" in data.column_names and rewards[0].__name__ == "target_distribution"
    data, rewards = task_data(TrainConfig(model="tiny-random", num_prompts=8))
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
        task_data(TrainConfig(model="tiny-random", num_prompts=4, **changes))
    assert "\n" not in str(err.value)


def test_task_reaches_the_command_line() -> None:
    from gapo.config import config_from_cli

    cfg = config_from_cli(TrainConfig, ["--task", "open", "--equivalence", "exact"], "gapo train", "train", "")
    assert (cfg.task, cfg.equivalence) == ("open", "exact")


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
    assert table.loc["food", "valid_unique_at_n"] == 0 and table.loc["food", "rule"] == VALIDITY_UNCHECKED
    assert table.loc["city", "valid_rate"] == 0.5 and table.loc["city", "answer_rate"] == 0.75


def test_target_jsd_matches_the_metric_on_known_answers() -> None:
    rows = unseen_target_rows(2, seed=0)
    items = rows[0]["items"]
    texts = [f"<answer>{items[0]}</answer>"] * 3 + ["<answer>nothing</answer>"]
    result = target_jsd(_replay(texts), rows[:1], n=4)
    expected = jsd_to_target([items[0]] * 3 + [None], items, rows[0]["target"])
    assert result.summary["mean_jsd"] == pytest.approx(expected) and result.summary["mean_invalid_rate"] == 0.25
