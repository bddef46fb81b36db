"""tools/item_probs.py (issue 34): exact answer probabilities, checked against a brute-force sum over tokenizations."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import item_probs  # noqa: E402
import list_transfer  # noqa: E402


def _brute_force(model, tokenizer, texts: list[str], prompt: list[int], path: list[int], rest: str) -> float:  # noqa: ANN001
    """P(the continuation of prompt + path begins with `rest`), every tokenization, no pruning and no cache: a full
    forward pass per node and a scan of the whole vocabulary's texts."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + path])).logits[0, -1].float()
    probs = torch.softmax(logits, dim=-1)
    total = 0.0
    for token, text in enumerate(texts):
        if not text or "\ufffd" in text or token in tokenizer.all_special_ids:
            continue
        if text.startswith(rest):
            total += float(probs[token])
        elif rest.startswith(text):
            total += float(probs[token]) * _brute_force(
                model, tokenizer, texts, prompt, path + [token], rest[len(text) :]
            )
    return total


def test_string_probs_sum_every_tokenization_as_a_brute_force_does(tiny_model_and_tokenizer) -> None:  # noqa: ANN001
    model, tokenizer = tiny_model_and_tokenizer
    vocab = item_probs.Vocabulary(tokenizer)
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    prompt = tokenizer("Pick one: [ab, cd].", add_special_tokens=False)["input_ids"]
    targets = ["<ans", "ab", "x"]
    assert len(vocab.pieces("<ans")) >= 2  # several spellings to sum
    exact = [_brute_force(model, tokenizer, texts, prompt, [], t) for t in targets]
    fast = item_probs.string_probs(model, prompt, targets, vocab, tokenizer.pad_token_id, floor=1e-300, batch=2)
    assert fast == pytest.approx(exact, rel=1e-4)
    assert 0 < min(fast) and fast[1] < item_probs.string_probs(model, prompt, ["a"], vocab, tokenizer.pad_token_id)[0]
    # a floor prunes only improbable paths: the bound can only drop, and by little at a low floor
    pruned = item_probs.string_probs(model, prompt, targets, vocab, tokenizer.pad_token_id, floor=1e-12)
    assert all(p <= f * (1 + 1e-6) for p, f in zip(pruned, fast, strict=True))
    with pytest.raises(ValueError, match="non-empty"):
        item_probs.string_probs(model, prompt, [""], vocab, tokenizer.pad_token_id)


def test_variants_and_list_rows() -> None:
    assert item_probs.variants("Snow Leopard") == ["Snow Leopard", "snow leopard"]
    assert item_probs.variants("emphasis") == ["emphasis", "Emphasis"]
    assert item_probs.variants("664") == ["664"]
    flat = item_probs.list_row({"a": 0.1, "b": 0.1, "c": 0.1, "d": 0.1}, rare=0.005)
    assert flat["mass"] == pytest.approx(0.4) and flat["jsd_exact"] == pytest.approx(0.0, abs=1e-12)
    skewed = item_probs.list_row({"a": 0.5, "b": 0.3, "c": 0.001, "d": 0.0001}, rare=0.005)
    assert skewed["min_item"] == "d" and skewed["rare"] == 2 and skewed["jsd_exact"] > 0.1
    assert math.isnan(item_probs.list_row({"a": 0.0, "b": 0.0}, rare=0.005)["jsd_exact"])


def test_run_lists_reads_a_list_transfer_summary(tmp_path: Path) -> None:
    train = list_transfer.training_lists(3, seed=0, categories=None)
    scored = list_transfer.scored_lists(train, 2, seed=0)
    (tmp_path / "summary.json").write_text(json.dumps({"training_lists": train, "scored_lists": scored}))
    sets = item_probs.run_lists(tmp_path)
    assert list(sets) == ["train", "heldin", "unseen"]
    assert list(sets["train"].values()) == [row["items"] for row in train]  # every training list, not the scored 2
    assert sets["heldin"] == scored["heldin"] and sets["unseen"] == scored["unseen"]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 9), st.integers(1, 6))
def test_position_fit_recovers_item_and_place_from_rotations(seed: int, length: int, lists: int) -> None:
    """Shares made of an item part and a place part, asked in rotations that link every place: the fit returns the
    place part exactly (centred), whatever the lists."""
    rng = np.random.default_rng(seed)
    place = rng.normal(size=length)
    place -= place.mean()
    rotations = sorted({0, 1, *rng.integers(0, length, size=2).tolist()})  # 0 and 1 link every place
    rows = []
    for lst in range(lists):
        worth = rng.normal(scale=2.0, size=length)
        names = [f"w{i}" for i in range(length)]
        for r in rotations:
            asked = item_probs.rotate(names, r)
            prob = np.exp([worth[int(name[1:])] + place[k] for k, name in enumerate(asked)])
            prob *= 0.9 / prob.sum()  # a list's mass below 1, as the model's is: shares are what is fitted
            for k, name in enumerate(asked):
                rows.append(
                    dict(model="m", set="s", list=f"l{lst}", rotation=r, position=k + 1, item=name, prob=prob[k])
                )
    table = item_probs.positions_table(pd.DataFrame(rows))
    assert list(table.position) == list(range(1, length + 1))
    assert np.log(table.factor.to_numpy()) == pytest.approx(place, abs=1e-6)


def test_place_jsd_tells_a_preference_for_places_from_one_for_items() -> None:
    """Items alike and places not: all the JSD is the places', none is left once they are removed; the reverse for a
    model with no preference among places. Each list in all 4 rotations, so `positions_table` finds the places."""
    place = np.array([3.0, 1.0, 1.0, 0.5])
    worth = np.array([0.4, 0.1, 0.3, 0.2])
    for kind, factor, items_worth in (("places", place, np.ones(4)), ("items", np.ones(4), worth)):
        rows = []
        for r in range(4):
            asked = item_probs.rotate(list(range(4)), r)
            prob = np.array([items_worth[i] * factor[k] for k, i in enumerate(asked)])
            prob /= 2 * prob.sum()
            rows += [
                dict(model=kind, set="s", list="l", rotation=r, position=k + 1, item=f"i{i}", prob=prob[k])
                for k, i in enumerate(asked)
            ]
        frame = pd.DataFrame(rows)
        row = item_probs.place_jsd(frame, item_probs.positions_table(frame)).iloc[0]
        if kind == "places":
            assert row.jsd_as_asked > 0.05 and row.jsd_place_removed == pytest.approx(0.0, abs=1e-9)
            assert row.jsd_place_only == pytest.approx(row.jsd_as_asked, rel=1e-6)
        else:
            assert row.jsd_place_only == pytest.approx(0.0, abs=1e-9)
            assert row.jsd_place_removed == pytest.approx(row.jsd_as_asked, rel=1e-6) and row.jsd_as_asked > 0.02


def test_rotations_and_suites() -> None:
    assert item_probs.rotate(["a", "b", "c", "d"], 0) == ["a", "b", "c", "d"]
    assert item_probs.rotate(["a", "b", "c", "d"], 3) == ["d", "a", "b", "c"]
    sets = {"s": {"x": ["a", "b", "c"], "y": ["a", "b", "c", "d"]}}
    assert item_probs.parse_rotations("0,1,2", sets) == [0, 1, 2]
    for bad in ("0,3", "1,1", "-1", "0;1", ""):
        with pytest.raises(ValueError, match="--rotations"):
            item_probs.parse_rotations(bad, sets)
    with pytest.raises(ValueError, match="on a list of 4 items each item meets one place in 2"):
        item_probs.parse_rotations("0,2", sets)  # on the 4-item list, odd and even places would never share an item
    assert item_probs.parse_rotations("1,2", sets) == [1, 2]
    from gapo.repro import prompts

    assert (
        item_probs.SUITES["heldin"] == prompts.HELDIN_LISTS and item_probs.SUITES["unseen"] == prompts.UNIFORMITY_LISTS
    )


def test_bad_input_is_one_line_before_any_model_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lists = tmp_path / "lists.jsonl"
    lists.write_text(json.dumps({"name": "l", "items": ["a", "b"]}) + "\n")
    cases = {
        ("--run", str(tmp_path / "none")): "no summary.json",
        ("--lists", str(lists), "--adapter", str(tmp_path)): "no LoRA adapter",
        ("--lists", str(lists), "--no-base"): "--no-base needs an adapter",
        ("--lists", str(tmp_path / "missing.jsonl")): "missing.jsonl",
        ("--suite", "heldin", "--rotations", "0,8"): "--rotations '0,8'",
    }
    for flags, message in cases.items():
        assert item_probs.main([*flags, "--model", "no-such-model", "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(300)
def test_a_run_scores_the_base_model_and_an_adapter(tmp_path: Path, tiny_model_and_tokenizer) -> None:  # noqa: ANN001
    from peft import LoraConfig, get_peft_model

    model, _ = tiny_model_and_tokenizer
    adapter = tmp_path / "adapter"
    lora = LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    torch.manual_seed(0)
    get_peft_model(model, lora).save_pretrained(str(adapter))
    lists = tmp_path / "lists.jsonl"
    lists.write_text(json.dumps({"name": "pair", "items": ["Mars", "Venus"]}) + "\n")
    out = tmp_path / "out"
    argv = [
        "--model",
        "tiny-random",
        "--lists",
        str(lists),
        "--adapter",
        str(adapter),
        "--group",
        "4",
        "--floor",
        "1e-40",
        "--rotations",
        "0,1",
    ]
    argv += ["--out", str(out)]
    assert item_probs.main(argv) == 0
    items = (out / "items.csv").read_text().splitlines()
    assert items[0] == "model,set,list,rotation,position,item,prob,p_in_group" and len(items) == 1 + 2 * 2 * 2
    rows = [line.split(",") for line in items[1:]]  # per model: rotation 0 (Mars, Venus), then 1 (Venus, Mars)
    assert [(r[3], r[4], r[5]) for r in rows[:4]] == [
        ("0", "1", "Mars"),
        ("0", "2", "Venus"),
        ("1", "1", "Venus"),
        ("1", "2", "Mars"),
    ]
    base = np.array([float(r[6]) for r in rows[:4]])
    tuned = np.array([float(r[6]) for r in rows[4:]])
    assert (base > 0).all() and (tuned > 0).all() and not np.allclose(base, tuned, rtol=1e-3, atol=0)
    assert not np.allclose(base[:2], base[[3, 2]], rtol=1e-3, atol=0)  # the order asked moves an item's probability
    # a group of 4 holds an item with probability 1 - (1 - p)^4: 4p for tiny p, where 1 - (1 - p) rounds to 0
    assert [float(r[7]) for r in rows] == pytest.approx([4 * float(r[6]) for r in rows], rel=1e-4)
    positions = pd.read_csv(out / "positions.csv")
    assert len(positions) == 2 * 2 and set(positions.model) == {"base", str(adapter)}
    assert positions.groupby("model").factor.prod().to_numpy() == pytest.approx(1.0, rel=1e-5)  # geo. mean 1
    assert positions.groupby("model").share.sum().to_numpy() == pytest.approx(1.0)
    places = pd.read_csv(out / "places.csv")
    assert list(places.model) == ["base", str(adapter)] and (places.jsd_place_removed >= 0).all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["models"] == ["base", str(adapter)] and set(summary["means"]) == {
        "base / lists",
        f"{adapter} / lists",
    }
    assert summary["environment"]["torch_threads"] == torch.get_num_threads() and summary["rotations"] == [0, 1]
