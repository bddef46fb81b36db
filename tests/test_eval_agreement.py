"""tools/eval_agreement.py: the homogeneity test and the sampling spread on runs whose answer laws are known."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import eval_agreement  # noqa: E402

from gapo.metrics import INVALID  # noqa: E402
from gapo.repro.prompts import UNIFORMITY_LISTS  # noqa: E402

PLANETS = list(UNIFORMITY_LISTS["planets"])


def _write(path: Path, answers: list[str]) -> Path:
    rows = [{"suite": "lists", "category": "planets", "sample": i, "item": a} for i, a in enumerate(answers)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _draw(seed: int, n: int, probs: np.ndarray) -> list[str]:
    keys = [*PLANETS, INVALID]
    return [keys[i] for i in np.random.default_rng(seed).choice(len(keys), size=n, p=probs)]


def test_the_same_answers_agree_and_a_collapsed_run_does_not(tmp_path: Path) -> None:
    uniform = np.full(len(PLANETS) + 1, 1 / (len(PLANETS) + 1))
    ref = eval_agreement.answers_by_list(_write(tmp_path / "ref.jsonl", _draw(0, 400, uniform)))
    same = eval_agreement.homogeneity([ref], ref)
    assert same["planets"]["chi2"] == 0.0 and same["all lists"]["p"] == 1.0
    fresh = eval_agreement.answers_by_list(_write(tmp_path / "fresh.jsonl", _draw(1, 100, uniform)))
    assert eval_agreement.homogeneity([ref], fresh)["all lists"]["p"] > 0.01
    collapsed = eval_agreement.answers_by_list(_write(tmp_path / "c.jsonl", ["Mercury"] * 60 + [INVALID] * 40))
    assert eval_agreement.homogeneity([ref], collapsed)["all lists"]["p"] < 1e-6


def test_the_sampling_spread_holds_a_run_of_the_same_law_and_not_a_collapsed_one(tmp_path: Path) -> None:
    probs = np.array([0.2, 0.15, 0.1, 0.1, 0.05, 0.05, 0.05, 0.0, 0.3])  # Neptune never, 30% invalid
    ref = eval_agreement.answers_by_list(_write(tmp_path / "ref.jsonl", _draw(0, 2000, probs)))
    lists = {"planets": PLANETS}
    run = eval_agreement.answers_by_list(_write(tmp_path / "run.jsonl", _draw(5, 50, probs)))
    spread = eval_agreement.sampling_spread([ref], run, lists, sims=300, seed=0)
    for row in spread.values():
        assert row["low"] <= row["other"] <= row["high"], spread
    collapsed = eval_agreement.answers_by_list(_write(tmp_path / "c.jsonl", ["Mercury"] * 30 + [INVALID] * 20))
    spread = eval_agreement.sampling_spread([ref], collapsed, lists, sims=300, seed=0)
    assert spread["coverage"]["other"] < spread["coverage"]["low"]
    assert spread["jsd_valid"]["other"] > spread["jsd_valid"]["high"]
