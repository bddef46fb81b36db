"""tools/list_transfer.py (issue 34, item 2): its list sets, and a real run on tiny-random scoring every set."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import list_transfer  # noqa: E402


def test_heldin_lists_share_the_training_categories_and_never_a_training_list() -> None:
    train = list_transfer.training_lists(64, seed=0, categories=None)
    assert len(train) == 64 and len({frozenset(r["items"]) for r in train}) == 64
    assert all(len(r["items"]) == 8 for r in train)
    sets = list_transfer.scored_lists(train, 10, seed=0)
    heldin = sets["heldin"]
    assert len(heldin) == 10 and {name.split(":")[1] for name in heldin} <= {r["category"] for r in train}
    assert not {frozenset(items) for items in heldin.values()} & {frozenset(r["items"]) for r in train}
    assert list(sets["train"].values()) == [r["items"] for r in train[:10]]
    assert [list_transfer.rollout_batches(steps, 2) for steps in (1, 2, 3, 300)] == [1, 1, 2, 150]
    assert set(sets["unseen"]) <= set(list_transfer.ep.UNIFORMITY_LISTS)
    # a run on more categories (issue 34's breadth lever) is scored on the same held-in lists as one on the paper's 8
    wide = list_transfer.training_lists(64, seed=0, categories=[*list_transfer.CATEGORIES, "Elements", "US States"])
    assert {r["category"] for r in wide} > set(list_transfer.CATEGORIES)
    assert list_transfer.scored_lists(wide, 10, 0, list(list_transfer.CATEGORIES))["heldin"] == heldin
    assert any(":Elements" in name for name in list_transfer.scored_lists(wide, 10, seed=0)["heldin"])
    one = list_transfer.training_lists(1, seed=0, categories=["Animals"])
    assert one[0]["category"] == "Animals"
    # --as-trained asks each training list as its row did: the evaluation's builder rebuilds the row's prompt exactly
    asked = list_transfer.trained_instructions(train, 64)
    assert list(asked) == list(list_transfer.scored_lists(train, 64, seed=0)["train"])
    for row, template in zip(train, asked.values(), strict=True):
        assert list_transfer.ep.list_prompt(row["items"], template) == row["prompt"][0]["content"]
    assert len(set(asked.values())) > 1 and list_transfer.ep.UNIFORMITY_INSTRUCTION not in asked.values()
    foreign = {**train[0], "prompt": [{"role": "user", "content": "Name one: [a, b]."}]}
    with pytest.raises(ValueError, match="training row 0's prompt"):
        list_transfer.trained_instructions([foreign], 1)
    rows = list_transfer.run_dataset(one, 5)
    assert len(rows) == 5 and all(r["items"] == one[0]["items"] for r in rows)
    # --shuffle-items: a list's rows after its first ask it in fresh orders, in the row's phrasing, the same each run
    mixed = list_transfer.run_dataset(train[:2], 12, shuffle_seed=0)
    assert [mixed[i] for i in range(2)] == train[:2]
    orders = {tuple(mixed[i]["items"]) for i in range(0, 12, 2)}
    assert len(orders) > 3 and {frozenset(o) for o in orders} == {frozenset(train[0]["items"])}
    template = asked["train0:" + train[0]["category"]]
    assert all(
        mixed[i]["prompt"][0]["content"] == list_transfer.list_prompt(mixed[i]["items"], template)
        for i in range(0, 12, 2)
    )
    assert list(list_transfer.run_dataset(train[:2], 12, shuffle_seed=0)) == list(mixed)
    assert list(list_transfer.run_dataset(train[:2], 12, shuffle_seed=1)) != list(mixed)
    with pytest.raises(ValueError, match="cannot reorder"):
        list_transfer.shuffled(foreign, list_transfer.random.Random(0))


def _tiny(steps: int, eval_every: int, score_lists: int, batch: int) -> list[str]:
    """Flags of a tiny-random run: 2 training lists, n=4, groups of 4, `batch` rows a step."""
    flags = ["--model", "tiny-random", "--lists", "2", "--steps", str(steps), "--eval-every", str(eval_every)]
    flags += ["-n", "4", "--score-lists", str(score_lists), "--set", "num_generations=4"]
    return [*flags, "--set", f"per_device_train_batch_size={batch}"]


@pytest.mark.timeout(600)
def test_a_run_scores_train_heldin_and_unseen_lists_every_few_steps(tmp_path: Path) -> None:
    out = tmp_path / "lt"
    flags = [*_tiny(steps=2, eval_every=1, score_lists=2, batch=8), "--set", "lr_scheduler_type=constant"]
    flags += ["--set", "warmup_steps=0", "--keep-checkpoints", "--as-trained", "--out", str(out)]
    assert list_transfer.main(flags) == 0
    summary = json.loads((out / "summary.json").read_text())
    # --as-trained: the training lists once more, each in its training row's phrasing
    assert summary["scored_lists"]["train_asked"] == summary["scored_lists"]["train"]
    assert set(summary["asked_in"]["train_asked"]) == set(summary["scored_lists"]["train"])
    assert set(summary["asked_in"]["train_asked"].values()) <= set(list_transfer.TEMPLATES)
    assert "train_asked/jsd" in summary["means"]["2"]
    assert sorted(map(int, summary["means"])) == [0, 1, 2]
    # every scored step's adapter stays, to be scored again with the pipeline's settings (without the flag: the newest)
    assert sorted(p.name for p in (out / "run").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert summary["settings"]["train"]["lr_scheduler_type"] == "constant"
    # the data settings recorded are the run's own (2 lists of 8 items), not params.yaml's
    train = summary["settings"]["train"]
    items = list_transfer.ITEMS
    assert (train["num_prompts"], train["min_items"], train["max_items"]) == (2, items, items)
    assert all(len(row) == items for row in summary["scored_lists"]["train"].values())
    assert summary["visits_per_list"] == 2.0  # 2 steps x 2 prompts / 2 lists
    curve = (out / "curve.csv").read_text().splitlines()
    assert curve[0] == "step,set,list,jsd,jsd_valid,invalid,top_share"
    assert len(curve) == 1 + 3 * 4 * 2  # 3 scorings x 4 sets x 2 lists
    assert (out / "curve.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        list_transfer.main(["--lists", "0", "--out", str(out)])
    with pytest.raises(SystemExit):
        list_transfer.main(["--lists", "2", "--time-limit", "0", "--out", str(out)])


@pytest.mark.timeout(600)
def test_resume_continues_a_run_stopped_by_its_time_limit_in_a_later_leg(tmp_path: Path) -> None:
    """On a lent GPU the budget is the clock, and a run spans sessions: leg 1 stops past its --time-limit, scores the
    step that ended and saves a checkpoint; leg 2 (--resume, the same flags, another limit) continues from it, keeps
    leg 1's scorings and ends the run. With num_iterations 2 each batch of rollouts serves two steps, so 4 steps
    generate 2 batches, and leg 1 stops at step 2, not 1: a stop inside a batch would train on it once, as the
    resumed leg generates afresh."""
    out = tmp_path / "lt"
    flags = [*_tiny(steps=4, eval_every=3, score_lists=1, batch=4), "--set", "num_iterations=2", "--out", str(out)]
    assert list_transfer.main([*flags, "--time-limit", "0.001"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["finished"] and summary["stopped_by_time_limit"] and summary["steps_run"] == 2
    assert sorted(map(int, summary["means"])) == [0, 2]  # the start and the step it stopped at, a batch's end
    assert summary["visits_per_list"] == 0.5  # 1 batch x 1 prompt / 2 lists
    assert len((out / "curve.csv").read_text().splitlines()) == 1 + 2 * 3
    assert (out / "run" / "checkpoint-2").is_dir()  # saved at the limit, for --resume
    with pytest.raises(SystemExit, match="other settings \\(seed, train.seed\\)"):
        list_transfer.main([*flags, "--seed", "1", "--resume"])
    leg1 = (out / "summary.json").read_text()
    other = json.loads(leg1)
    other["training_lists"][0]["items"].reverse()
    (out / "summary.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="trained on other lists than these flags give"):
        list_transfer.main([*flags, "--resume"])
    # a summary written before de6c0d7 words the data as params.yaml's rows (512 of 4-12 items, as item 5's H200
    # runs of 2026-12-04 have it): the same run, resumed, and its words put right
    older = json.loads(leg1)
    older["settings"]["train"].update(num_prompts=512, min_items=4, max_items=12)
    (out / "summary.json").write_text(json.dumps(older))
    assert list_transfer.main([*flags, "--resume"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {k: summary["settings"]["train"][k] for k in list_transfer.DATA_WORDS} == {
        "num_prompts": 2,
        "min_items": 8,
        "max_items": 8,
    }
    assert summary["finished"] and not summary["stopped_by_time_limit"] and summary["steps_run"] == 4
    assert sorted(map(int, summary["means"])) == [0, 2, 3, 4]  # leg 1's start and stop, leg 2's scorings
    assert [(leg["from_step"], leg["to_step"], leg["time_limit"]) for leg in summary["legs"]] == [
        (0, 2, 0.001),
        (2, 4, None),
    ]
    assert summary["seconds"] == pytest.approx(sum(leg["seconds"] for leg in summary["legs"]), abs=0.2)
    # each leg names where it ran (a resumed leg may be on another machine): the checkout's commit, torch's threads
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    for leg in summary["legs"]:
        assert leg["environment"]["git"]["commit"] == head
        assert leg["environment"]["torch_threads"] == torch.get_num_threads()
    assert summary["rollouts"] == 2 * 4 and summary["visits_per_list"] == 1.0  # 2 batches x 1 prompt x G=4; 2 / 2 lists
    assert len((out / "curve.csv").read_text().splitlines()) == 1 + 4 * 3
    assert json.loads((out / "run" / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 4
    with pytest.raises(SystemExit, match="finished at step 4"):
        list_transfer.main([*flags, "--resume"])
    with pytest.raises(SystemExit, match="no list_transfer run"):
        list_transfer.main([*flags[:-1], str(tmp_path / "none"), "--resume"])


@pytest.mark.timeout(600)
def test_resume_with_more_steps_carries_a_finished_run_on_under_a_constant_schedule(tmp_path: Path) -> None:
    """Whether a recipe's curve still falls past its budget is asked after the run: `--resume` with a larger `--steps`
    trains on from the finished run's checkpoint (here scoring every 2 steps instead of every 1), keeping what it
    trained and scored. Refused in one line where the longer run would not train on at the run's rate: inside the
    longer run's warmup, under a schedule that depends on the run's length (linear), or with fewer steps."""
    out = tmp_path / "lt"
    flags = [*_tiny(steps=2, eval_every=1, score_lists=1, batch=4), "--out", str(out)]  # params.yaml's schedule
    assert list_transfer.main(flags) == 0
    assert json.loads((out / "summary.json").read_text())["finished"]
    trained = (out / "run" / "metrics.jsonl").read_text()

    def longer(steps: int, *more: str) -> list[str]:
        return [*_tiny(steps=steps, eval_every=2, score_lists=1, batch=4), *more, "--out", str(out), "--resume"]

    assert list_transfer.main(longer(4)) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] and summary["steps_run"] == 4 and sorted(map(int, summary["means"])) == [0, 1, 2, 4]
    assert [(leg["from_step"], leg["to_step"]) for leg in summary["legs"]] == [(0, 2), (2, 4)]
    assert "--steps 2 " in summary["legs"][0]["command"] and "--steps 4 " in summary["legs"][1]["command"]
    settings = summary["settings"]
    assert (settings["steps"], settings["train"]["max_steps"], settings["eval_every"]) == (4, 4, 2)
    logged = (out / "run" / "metrics.jsonl").read_text()
    steps = [json.loads(line)["step"] for line in logged.splitlines()]
    assert logged.startswith(trained) and steps[-1] == 4
    assert summary["rollouts"] == 4 * 4 and len((out / "curve.csv").read_text().splitlines()) == 1 + 4 * 3
    with pytest.raises(SystemExit, match="continues from step 4, inside the longer run's warmup \\(5 steps\\)"):
        list_transfer.main(longer(100))
    with pytest.raises(SystemExit, match="other settings \\(steps, train.max_steps\\)"):
        list_transfer.main(longer(3))
    linear = json.loads((out / "summary.json").read_text())
    linear["settings"]["train"]["lr_scheduler_type"] = "linear"  # as a run trained under it records it
    linear["settings"]["set"].append("lr_scheduler_type=linear")
    (out / "summary.json").write_text(json.dumps(linear))
    with pytest.raises(SystemExit, match="has lr_scheduler_type linear, whose rate depends on the run's length"):
        list_transfer.main(longer(8, "--set", "lr_scheduler_type=linear"))
    with pytest.raises(SystemExit, match="finished at step 4; nothing to continue"):
        list_transfer.main(longer(4, "--set", "lr_scheduler_type=linear"))


@pytest.mark.timeout(600)
def test_a_run_whose_groups_carry_no_reward_signal_stops_and_says_so(tmp_path: Path) -> None:
    """The tiny random model never writes a valid answer, so every group's rewards are equal and every advantage 0,
    as in a run whose format has broken (entropy_coef 0.2): after --stop-without-signal such steps in a row the run
    scores that step, stops, writes its results with the step, exits with 1, and is not resumed."""
    out = tmp_path / "lt"
    flags = [*_tiny(steps=4, eval_every=3, score_lists=1, batch=4), "--out", str(out)]
    assert list_transfer.main([*flags, "--stop-without-signal", "2"]) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_without_signal"] == 2 and summary["steps_run"] == 2
    assert not summary["finished"] and not summary["stopped_by_time_limit"]
    assert sorted(map(int, summary["means"])) == [0, 2]  # the start and the step it stopped at
    assert summary["legs"][0]["stop_without_signal"] == 2 and "stop_without_signal" not in summary["settings"]
    rewards = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["frac_reward_zero_std"] for r in rewards if "frac_reward_zero_std" in r] == [1.0, 1.0]
    assert (out / "curve.png").stat().st_size > 0
    with pytest.raises(SystemExit, match="stopped at step 2 without a reward signal"):
        list_transfer.main([*flags, "--resume"])
    with pytest.raises(SystemExit):
        list_transfer.main([*flags, "--stop-without-signal", "-1"])
    # a stop on a step that is also due to be scored (--eval-every 2) scores it once: on_log, then not again on_save
    due = tmp_path / "due"
    flags_due = [*_tiny(steps=4, eval_every=2, score_lists=1, batch=4), "--out", str(due)]
    assert list_transfer.main([*flags_due, "--stop-without-signal", "2"]) == 1
    assert len((due / "curve.csv").read_text().splitlines()) == 1 + 2 * 3  # steps 0 and 2, 3 sets x 1 list
    # 0 never stops: the same run goes on to its last step
    assert list_transfer.main([*flags[:-1], str(tmp_path / "on"), "--stop-without-signal", "0"]) == 0
    assert json.loads((tmp_path / "on" / "summary.json").read_text())["stopped_without_signal"] is None


def _beside_score(patch: pytest.MonkeyPatch, callback: object, first: bool) -> None:
    """Has list_transfer's training run `callback` beside its Score callback, called before it (`first`) or after:
    a kill at a chosen point of a step, as a device call's limit or a session's end kills a run."""
    real_train = list_transfer.train

    def train(*args: object, callbacks: list) -> object:
        return real_train(*args, callbacks=[callback, *callbacks] if first else [*callbacks, callback])

    patch.setattr(list_transfer, "train", train)


@pytest.mark.timeout(600)
def test_a_run_cut_short_keeps_its_curve_and_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed mid-training (a device call's limit) keeps curve.csv and summary.json as of its last scoring."""
    from transformers import TrainerCallback

    class Cut(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            if state.global_step == 1:
                raise KeyboardInterrupt  # after Score (called before it) has scored step 1

    _beside_score(monkeypatch, Cut(), first=False)
    out = tmp_path / "lt"
    with pytest.raises(KeyboardInterrupt):
        list_transfer.main([*_tiny(steps=3, eval_every=1, score_lists=1, batch=4), "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["finished"] and summary["steps_run"] == 1 and sorted(map(int, summary["means"])) == [0, 1]
    assert len((out / "curve.csv").read_text().splitlines()) == 1 + 2 * 3


@pytest.mark.timeout(600)
def test_a_run_killed_while_scoring_its_last_step_resumes_to_score_it_and_write_its_adapter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step to score is checkpointed before it is scored, so a kill during the scoring (minutes at n=200 on a CPU;
    a session's end once cost a 225-step run this way) loses no training: `--resume` starts at that checkpoint, scores
    the step there, and, at the last step, writes the adapter and finishes the run without training again."""
    from transformers import TrainerCallback

    class Kill(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            if state.global_step == 2:
                raise KeyboardInterrupt  # the checkpoint is on disk; Score (called after it) has not scored step 2

    with monkeypatch.context() as patch:
        _beside_score(patch, Kill(), first=True)
        out = tmp_path / "lt"
        flags = [*_tiny(steps=2, eval_every=1, score_lists=1, batch=4), "--out", str(out)]
        with pytest.raises(KeyboardInterrupt):
            list_transfer.main(flags)
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["finished"] and sorted(map(int, summary["means"])) == [0, 1]
    assert (out / "run" / "checkpoint-2").is_dir() and not (out / "run" / "adapter").exists()
    trained = (out / "run" / "metrics.jsonl").read_text()
    assert list_transfer.main([*flags, "--resume"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] and summary["steps_run"] == 2 and sorted(map(int, summary["means"])) == [0, 1, 2]
    assert (out / "run" / "adapter" / "adapter_config.json").is_file()
    assert [(leg["from_step"], leg["to_step"]) for leg in summary["legs"]] == [(0, 1), (2, 2)]
    assert (out / "run" / "metrics.jsonl").read_text() == trained  # no step trained again
    assert len((out / "curve.csv").read_text().splitlines()) == 1 + 3 * 3  # 3 scorings x 3 sets x 1 list


@pytest.mark.timeout(600)
def test_sft_steps_train_gapo_on_the_merged_sft_model_and_a_resumed_run_keeps_it(tmp_path: Path) -> None:
    """`--sft-steps`: the Appendix G SFT on the run's own training rows, merged into the model, then GAPO's fresh LoRA
    on that model (step 0 scores the SFT model). A resumed leg trains on the same merged model, not on a new SFT."""
    from safetensors.torch import load_file

    from gapo.models import resolve_model_path

    out = tmp_path / "lt"
    flags = [*_tiny(steps=2, eval_every=2, score_lists=1, batch=4), "--sft-steps", "3", "--out", str(out)]
    flags[-2:-2] = ["--sft-set", "lr_scheduler_type=linear"]
    assert list_transfer.main([*flags, "--time-limit", "0.001"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    sft = summary["sft"]
    assert sft["settings"]["steps"] == 3 and sft["settings"]["model"] == "tiny-random" and sft["seconds"] > 0
    assert sft["settings"]["lr_scheduler_type"] == "linear"  # --sft-set over params.yaml's constant
    rates = json.loads((out / "run" / "sft_adapter" / "sft_config.json").read_text())["learning_rates"]
    assert rates[0] == sft["settings"]["learning_rate"] and rates[0] > rates[1] > rates[2] > 0
    assert summary["settings"]["sft_steps"] == 3 and summary["steps_run"] == 1
    merged_dir = out / "run" / "sft_model"
    assert json.loads((out / "run" / "config.json").read_text())["model"] == str(merged_dir)
    # the SFT moved the weights GAPO starts from: the merged model is not the base
    base = load_file(str(next(Path(resolve_model_path("tiny-random")).glob("*.safetensors"))))
    merged = load_file(str(merged_dir / "model.safetensors"))
    moved = [k for k in base if "q_proj" in k and not torch.equal(base[k].float(), merged[k].float())]
    assert moved, "no attention weight differs after the SFT was merged"
    stamp = (merged_dir / "model.safetensors").stat().st_mtime_ns
    assert list_transfer.main([*flags, "--resume"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] and summary["sft"] == sft  # the first leg's record, not "reused"
    assert (merged_dir / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(SystemExit):
        list_transfer.main([*flags[:-1], str(tmp_path / "neg"), "--sft-steps", "-1"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--sft-steps", "4", "--sft-set", "lr_scheduler_type=step"],
            "(params.yaml's sft, --sft-set): lr_scheduler_type must be one of",
        ),
        (
            ["--sft-steps", "4", "--sft-set", "lr_scheduler_type=constant", "--sft-set", "warmup_steps=2"],
            "--sft-set): warmup_steps needs a schedule that warms up",
        ),
        (["--sft-steps", "4", "--sft-set", "lr_scheduler_type"], "--sft-set takes KEY=VALUE"),
        (["--sft-steps", "4", "--sft-set", "schedule=cosine"], "unexpected keyword argument 'schedule'"),
        (["--sft-set", "lr_scheduler_type=cosine"], "--sft-set sets the SFT of --sft-steps N"),
    ],
)
def test_a_bad_sft_setting_is_one_line_before_anything_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    out = tmp_path / "lt"
    with pytest.raises(SystemExit) as exit_:
        list_transfer.main([*_tiny(steps=2, eval_every=2, score_lists=1, batch=4), *flags, "--out", str(out)])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()
