"""Where GAPO's uniformity breaks between one list and many (issue 34, item 2): learning told apart from transfer.

Trains GAPO with the embedded recipe (params.yaml's `train` section as the pipeline resolves it, plus `--set`) on
`--lists` k distinct training lists of 8 items, for a fixed budget of `--steps`, and every `--eval-every` steps
(and before the first) scores the live policy, `-n` samples a list, asked as the evaluation asks
(`gapo.repro.experiments.uniformity`), on three sets of lists:

- ``train``: up to `--score-lists` of the training lists themselves (learning);
- ``heldin``: as many lists drawn from the same categories, with another seed, that no training row contains
  (transfer within the training categories);
- ``unseen``: as many of the paper's unseen lists (`gapo.repro.prompts.UNIFORMITY_LISTS`), of other categories
  (transfer to new categories: what the pipeline's uniformity stage measures);
- ``train_asked``, with `--as-trained`: the ``train`` lists asked as their training rows ask them (each row's own
  phrasing of `gapo.tasks.lists.TEMPLATES`; the evaluation's phrasing is none of them). ``train`` then tells how far
  a list is learned in another phrasing, ``train_asked`` how far it is learned as trained.

The training rows are the pipeline's (`gapo.tasks.lists.list_selection_rows`: its templates, one per row) with 8
items, repeated in turn to fill the run, so each list is seen about steps x prompts a step / k times. Writes, in
`--out`: curve.csv (step, set, list, jsd, jsd_valid, invalid, top_share), summary.json (the settings, the training
lists, each set's mean at every scored step, and each leg's environment: commit, packages, threads, CPU or GPU,
`gapo.repro.provenance`) and curve.png; prints each scoring's means. curve.csv and
summary.json are rewritten after every scoring (`finished` false until the last of `--steps`), so a run killed at a
device's call limit keeps its curve so far.

`--steps` counts optimizer steps. With `--set num_iterations=MU` (TRL's mu) a batch of rollouts is generated every MU
steps and used MU times, so the run generates steps / MU batches (summary.json's `rollouts`): at equal rollouts, pass
MU times the steps.

`--time-limit SECONDS` ends training at the first step that ends past that many seconds of training (scoring included),
saves a checkpoint, scores that step, and writes everything: on a lent GPU with minutes of device time, the budget is
the clock, not the steps (`--steps` then only sizes the dataset and the schedule; `summary.json` says where it stopped).
`--resume` continues such a run in a later session from its newest checkpoint (run/checkpoint-N, saved at every scoring
and at the time limit, before that step is scored), with the same flags: curve.csv keeps the scorings up to that step,
a step whose scoring was cut short is scored first (a run killed while scoring its last step resumes to score it and
write its adapter), and summary.json's `legs` lists each leg's command, steps and seconds. `--keep-checkpoints` keeps
every scored step's checkpoint instead of the newest only (to score one again with other settings). `--resume` with
a larger `--steps` carries a run, finished or not, past the steps it was started with, from its newest checkpoint:
allowed under a constant schedule only (`constant`, or `constant_with_warmup` with the checkpoint past the longer
run's warmup), where the learning rate from the checkpoint on does not depend on `--steps`, so the steps added train
at the rate the run was training at. Their rows come from the longer run's dataset, which the trainer shuffles afresh
(its order depends on its length), so in the steps added each list is visited as often as the others on average, not
within one. A resumed leg may also score at another `--eval-every` (when to look, not how to train); every other flag
must be the same.

`--stop-without-signal N` (10 by default, 0 never) ends a run after N steps in a row in which no group's rewards
differed (TRL's `frac_reward_zero_std` at 1: every answer of every group invalid, or a group all alike): GRPO's
advantages are then 0, and only an entropy bonus or a KL term still moves the policy, which has not brought a run
back (`entropy_coef` 0.2 in docs/uniformity_diagnosis.md). It scores that step, writes everything with the step in
summary.json's `stopped_without_signal`, and exits with 1.

`--sft-steps N` first trains the Appendix G SFT (`gapo.repro.sft`: each prompt's loss sums the NLL of every one of its
items; params.yaml's `sft` section for the rest) on the run's training rows for N steps, merges that adapter into the
model (run/sft_model/, a full model directory, kept for `--resume`) and trains GAPO's fresh LoRA on the merged model:
step 0's scores are then the SFT model's. Why: a group reward moves only answers that some rollout says. With advantages
centred on the group's mean, the first-order pull of a step on the logit of an answer no rollout says is -p_u x sum(A)
= 0, and an entropy bonus pulls it in proportion to p_u; the summed NLL pulls every item by 1 - L p_u, whatever its
probability. The words a list's groups of 32 never hold (tools/item_probs.py: 3e-4 to 2e-3) are where 64 lists stop.
`--sft-set KEY=VALUE` changes one of those `sft` settings for this run (`lr_scheduler_type=cosine`, ...).

    python tools/list_transfer.py --lists 1 --steps 60 --out runs/transfer/k1           # one list, many visits
    python tools/list_transfer.py --lists 8 --steps 120 --as-trained --out runs/visits/k8   # learned as trained?
    python tools/list_transfer.py --lists 64 --steps 225 --sft-steps 128 --out runs/transfer/k64_sft   # SFT, then GAPO
    python tools/list_transfer.py --lists 64 --steps 1 --sft-steps 448 --sft-set lr_scheduler_type=cosine --out DIR
    python tools/list_transfer.py --lists 8 --steps 120 --shuffle-items --out runs/visits/k8_shuffled  # any order
    python tools/list_transfer.py --lists 64 --steps 60 --set lr_scheduler_type=constant --set warmup_steps=0 \
        --out runs/transfer/k64
    python tools/list_transfer.py --lists 512 --steps 1000 --time-limit 420 --set warmup_steps=10 --out DIR  # a GPU
    python tools/list_transfer.py --lists 512 --steps 1000 --time-limit 420 --set warmup_steps=10 --out DIR --resume
    python tools/list_transfer.py --lists 64 --steps 450 --sft-steps 128 --out runs/transfer/k64_sft --resume  # to 450
    python tools/list_transfer.py --model tiny-random --lists 2 --steps 2 --eval-every 1 -n 4 --out /tmp/lt  # a check
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from transformers import TrainerCallback

from gapo.checkpoints import checkpoint_step, last_checkpoint
from gapo.io import write_json_atomic, write_text_atomic
from gapo.repro import profiles
from gapo.repro import prompts as ep
from gapo.repro.experiments import uniformity
from gapo.repro.provenance import environment
from gapo.repro.sampling import Sampler, SamplingParams
from gapo.repro.sampling.transformers_backend import TransformersBackend
from gapo.tasks.lists import CATEGORIES, EXTRA_CATEGORIES, TEMPLATES, chat_prompt, list_prompt, list_selection_rows
from gapo.train import configs, train

#: The three sets of lists scored, in the order they are reported.
SETS = ("train", "heldin", "unseen")
#: `--as-trained`'s fourth set: the training lists in their training rows' phrasing.
ASKED = "train_asked"
ITEMS = 8
#: Held-in lists come from another seed than the training rows (and are checked against them).
HELDIN_SEED_OFFSET = 10_000


def training_lists(k: int, seed: int, categories: list[str] | None) -> list[dict[str, Any]]:
    """k training rows with distinct item sets (8 items each), drawn as the pipeline draws its data."""
    rows, seen = [], set()
    for row in list_selection_rows(4 * k + 16, seed, ITEMS, ITEMS, categories):
        key = frozenset(row["items"])
        if key not in seen:
            seen.add(key)
            rows.append(row)
        if len(rows) == k:
            return rows
    raise ValueError(f"could not draw {k} distinct lists of {ITEMS} items from {categories or 'all categories'}")


def heldin_lists(
    train_rows: list[dict[str, Any]], m: int, seed: int, categories: list[str] | None = None
) -> dict[str, list[str]]:
    """m lists of `categories` (default: the training rows') that no training row contains (not the same item set).
    The same categories and seed give the same lists whatever else was trained on (barring a clash with a training
    row), so runs of one seed that train on different categories are scored on the same held-in lists."""
    categories = sorted(categories or {r["category"] for r in train_rows})
    taken = {frozenset(r["items"]) for r in train_rows}
    chosen: dict[str, list[str]] = {}
    for row in list_selection_rows(8 * m + 16, seed + HELDIN_SEED_OFFSET, ITEMS, ITEMS, categories):
        if frozenset(row["items"]) not in taken and len(chosen) < m:
            taken.add(frozenset(row["items"]))
            chosen[f"heldin{len(chosen)}:{row['category']}"] = row["items"]
    return chosen


def scored_lists(
    train_rows: list[dict[str, Any]], m: int, seed: int, heldin_categories: list[str] | None = None
) -> dict[str, dict[str, list[str]]]:
    """The three sets of lists (`SETS`), at most m lists each."""
    train_sets = {f"train{i}:{r['category']}": r["items"] for i, r in enumerate(train_rows[:m])}
    unseen = {name: list(items) for name, items in list(ep.UNIFORMITY_LISTS.items())[:m]}
    return {"train": train_sets, "heldin": heldin_lists(train_rows, m, seed, heldin_categories), "unseen": unseen}


def trained_instructions(train_rows: list[dict[str, Any]], m: int) -> dict[str, str]:
    """The phrasing each of the first m training rows was asked in, by the names `scored_lists` gives them: the
    `TEMPLATES` entry from which the evaluation's prompt builder rebuilds the row's prompt exactly, so that
    `uniformity(..., instruction=...)` samples what training sampled. One line for a row none rebuilds."""
    asked = {}
    for i, row in enumerate(train_rows[:m]):
        template = row_template(row)
        if template is None:
            raise ValueError(f"training row {i}'s prompt is not one of the templates' as the evaluation builds it")
        asked[f"train{i}:{row['category']}"] = template
    return asked


def row_template(row: dict[str, Any]) -> str | None:
    """The `TEMPLATES` entry a training row's prompt was built from (the evaluation's builder rebuilds the prompt from
    it exactly), or None."""
    content = row["prompt"][0]["content"]
    return next((t for t in TEMPLATES if ep.list_prompt(row["items"], t) == content), None)


def rollout_batches(steps: int, num_iterations: int) -> int:
    """How many batches of rollouts `steps` optimizer steps generate: TRL generates every `num_iterations` steps."""
    return -(-steps // num_iterations)


def run_dataset(train_rows: list[dict[str, Any]], size: int, shuffle_seed: int | None = None) -> Any:
    """`size` rows cycling through the training lists: each list as often as the others (within one). With
    `shuffle_seed`, every row of a list but its first asks it with the items in a fresh order (`shuffled`); the
    trainer shuffles the rows, so one visit of each list, at a random step, keeps the order `train` is scored in."""
    import datasets

    rows = []
    for i in range(max(size, len(train_rows))):
        row = train_rows[i % len(train_rows)]
        later = shuffle_seed is not None and i >= len(train_rows)
        rows.append(shuffled(row, random.Random(f"list-transfer-visit-{shuffle_seed}-{i}")) if later else row)
    return datasets.Dataset.from_list(rows)


def shuffled(row: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """`row` asking its list with the items in an order drawn by `rng`, in the row's own phrasing (`TEMPLATES`).

    Why (`--shuffle-items`): uniformity over a list is a skill that no item order should change, and the base model's
    probability of an item moves 100-fold with its place in the list (docs/uniformity_diagnosis.md, measured with
    tools/item_probs.py): "profound" is the answer 4.6e-2 of the time first in its list, 4.1e-4 fourth (drawn there)."""
    template = row_template(row)
    if template is None or len(row["prompt"]) != 1:
        content = row["prompt"][0]["content"]
        raise ValueError(f"cannot reorder a row whose prompt is not one of the templates: {content[:80]!r}")
    items = list(row["items"])
    rng.shuffle(items)
    return {**row, "items": items, "prompt": chat_prompt(list_prompt(items, template))}


def sft_settings(model: str, steps: int, seed: int, overrides: dict[str, Any], target: Path) -> dict[str, Any]:
    """The SFT's settings: params.yaml's `sft` section, `overrides` (`--sft-set`) over it, then the run's own model,
    steps, seed and adapter folder. `SFTConfig(**settings)` checks them; main does so before anything loads."""
    settings = {**profiles.stage_params("train_sft", "embedded")["sft"], **overrides}
    return {**settings, "model": model, "steps": steps, "seed": seed, "output_dir": str(target.parent / "sft_adapter")}


def sft_warm_start(settings: dict[str, Any], rows: list[dict[str, Any]], target: Path) -> dict[str, Any] | None:
    """The model of `settings` after the Appendix G SFT on `rows` (`sft_settings`), its adapter merged in and saved as
    a full model directory at `target` (atomically), for GAPO to train a fresh LoRA on. Returns what summary.json
    records of it, or None where `target` is already there (a resumed run), kept as it is."""
    if (target / "config.json").is_file():
        return None
    import datasets

    from gapo.io import atomic_dir
    from gapo.models import load_model_and_tokenizer, save_merged
    from gapo.repro.sft import SFTConfig, train_sft

    started = time.perf_counter()
    settings = dict(settings)
    model = settings["model"]
    config = SFTConfig(**settings)
    data = datasets.Dataset.from_list([{"prompt": r["prompt"], "items": r["items"]} for r in rows])
    result = train_sft(config, *load_model_and_tokenizer(model), data)
    with atomic_dir(target) as tmp:
        save_merged(model, result.output_dir, tmp)
    settings.pop("output_dir")  # the data words (num_prompts, ...) are SFTConfig's; it trained on `rows`
    seconds = round(time.perf_counter() - started, 1)
    return {"settings": settings, "loss_first": result.losses[0], "loss_last": result.losses[-1], "seconds": seconds}


def means(per_list: pd.DataFrame) -> dict[str, float]:
    """Each set's mean JSD, JSD among valid answers, invalid share and top share at one step."""
    numeric = per_list.groupby("set")[["jsd", "jsd_valid", "invalid", "top_share"]].mean()
    return {f"{s}/{k}": round(float(v), 4) for s, row in numeric.iterrows() for k, v in row.items()}


class Score(TrainerCallback):
    """Scores the live policy on every set of `lists` before the first step and every `eval_every` steps, `n` samples
    a list, keeps one row per list and step in `rows`, and calls `on_score(step)` after each scoring (main writes
    curve.csv and summary.json there). A step to score is checkpointed first and scored after the save (`on_save`):
    a run killed while scoring (minutes at n=200 on a CPU) keeps the step it trained, and `--resume` scores it on
    starting there (a resumed run starts with the `rows` it had scored and scores its first step only where they
    lack it). With `time_limit` (seconds from the start of this leg of training), stops training at the first step
    that ends past it and ends a batch of rollouts (a multiple of `num_iterations`), checkpointed and scored as above
    (a later `--resume` continues from it); `stopped_at` is then that step. After `no_signal_limit` logged steps in a
    row with no reward spread in any group (0: never), it scores that step and stops training there;
    `stopped_without_signal` is then that step. `lists` maps each set to its lists; `instructions` maps a set's lists
    to the phrasing each is asked in (``train_asked``), one sampling call a list, the others in the evaluation's
    phrasing."""

    def __init__(
        self,
        lists: dict,
        n: int,
        seed: int,
        max_new_tokens: int,
        eval_every: int,
        tokenizer: Any,
        time_limit: float | None = None,
        rows: list[dict[str, Any]] | None = None,
        instructions: dict[str, dict[str, str]] | None = None,
        no_signal_limit: int = 0,
    ) -> None:
        self.lists, self.n, self.seed, self.eval_every = lists, n, seed, eval_every
        self.instructions = instructions or {}
        self.params = SamplingParams(max_new_tokens=max_new_tokens)
        self.tokenizer = tokenizer
        self.time_limit = time_limit
        self.on_score: Any = None  #: called with the step after each scoring
        self.rows: list[dict[str, Any]] = list(rows or [])
        self.started = time.perf_counter()
        self.stopped_at: int | None = None
        self.no_signal_limit = no_signal_limit
        self.no_signal_steps = 0  #: logged steps in a row whose every group had equal rewards
        self.stopped_without_signal: int | None = None
        self.due: int | None = None  #: the step to score once its checkpoint is saved

    def scored(self, step: int) -> bool:
        return any(r["step"] == step for r in self.rows)

    def curve(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows).rename(columns={"category": "list"})

    def score(self, model: Any, step: int) -> None:
        was_training = model.training
        model.eval()
        sampler = Sampler(TransformersBackend(model, self.tokenizer), self.params)
        started = time.perf_counter()
        for name, chosen in self.lists.items():
            asked = self.instructions.get(name)
            calls = [({k: v}, asked[k]) for k, v in chosen.items()] if asked else [(chosen, ep.UNIFORMITY_INSTRUCTION)]
            for group, instruction in calls:
                result = uniformity(
                    sampler, n=self.n, lists=group, instruction=instruction, seed=self.seed, resamples=200
                )
                table = result.tables["per_list"][["category", "jsd", "jsd_valid", "invalid", "top_share"]]
                self.rows.extend({"step": step, "set": name, **r} for r in table.to_dict("records"))
        model.train(was_training)
        if self.on_score is not None:
            self.on_score(step)
        curve = self.curve()
        print(f"step {step}: {means(curve[curve.step == step])} ({time.perf_counter() - started:.0f} s)", flush=True)

    def on_train_begin(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
        self.started = time.perf_counter()
        # step 0, or a resumed run's checkpoint whose scoring was cut short (every checkpoint is a step to score)
        if not self.scored(state.global_step):
            self.score(model, state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
        step = state.global_step
        # a stop lands on a batch boundary: with num_iterations mu, a batch of rollouts serves mu steps, and a
        # resumed leg generates afresh, so stopping inside a batch would train on it fewer than mu times
        boundary = step % args.num_iterations == 0
        out_of_time = self.time_limit is not None and boundary and time.perf_counter() - self.started > self.time_limit
        if step % self.eval_every == 0 or step == state.max_steps or out_of_time:
            self.due = step
            control.should_save = True  # saved first, scored in on_save: the checkpoint a later --resume starts from
        if out_of_time and step < state.max_steps:
            self.stopped_at = step
            control.should_training_stop = True

    def on_save(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
        if self.due == state.global_step:
            self.due = None
            if not self.scored(state.global_step):  # on_log may have scored it (no reward signal)
                self.score(model, state.global_step)

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):  # noqa: ANN001, ANN201
        # TRL logs the share of groups whose rewards are all equal; at 1 every advantage is 0 (after on_step_end)
        if not self.no_signal_limit or not logs or logs.get("frac_reward_zero_std") is None:
            return
        self.no_signal_steps = self.no_signal_steps + 1 if logs["frac_reward_zero_std"] >= 1.0 else 0
        step = state.global_step
        if self.no_signal_steps >= self.no_signal_limit and step < state.max_steps and self.stopped_at is None:
            if not self.scored(step):
                self.score(model, step)
            self.stopped_without_signal = step
            control.should_training_stop = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/list_transfer.py", description=__doc__.splitlines()[0])
    parser.add_argument("--lists", type=int, required=True, help="k, the number of distinct training lists")
    parser.add_argument("--steps", type=int, default=60, help="the budget: GAPO steps")
    parser.add_argument("--eval-every", type=int, default=20, help="score the policy every this many steps")
    parser.add_argument("-n", type=int, default=200, help="samples per scored list")
    parser.add_argument("--score-lists", type=int, default=4, help="lists scored per set (train, heldin, unseen)")
    parser.add_argument(
        "--categories",
        default=None,
        help=f"comma-separated training categories, of {CATEGORIES + EXTRA_CATEGORIES} (default: the paper's 8)",
    )
    parser.add_argument(
        "--heldin-categories",
        default=None,
        help="comma-separated categories of the held-in lists (default: the training lists'); the paper's 8 compare "
        "a run on more categories with one on those 8",
    )
    parser.add_argument(
        "--as-trained",
        action="store_true",
        help=f"also score the scored training lists in their training rows' own phrasing (the set {ASKED})",
    )
    parser.add_argument(
        "--shuffle-items",
        action="store_true",
        help="every row of a list but one asks it with the items in a fresh (seeded) order; the scored training "
        "lists keep the drawn order, which that one row asks",
    )
    parser.add_argument(
        "--sft-steps",
        type=int,
        default=0,
        metavar="N",
        help="first N steps of the Appendix G SFT (every item's NLL summed) on the training rows, merged into the "
        "model GAPO then trains on (0: none)",
    )
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--seed", type=int, default=0, help="the training lists' seed and the run's")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="end training at the first step that ends past this many seconds (scoring it first)",
    )
    parser.add_argument(
        "--keep-checkpoints",
        action="store_true",
        help="keep every scored step's checkpoint (run/checkpoint-N), not only the newest: to score one again later "
        "with the pipeline's settings (gapo eval --adapter DIR/run/checkpoint-N)",
    )
    parser.add_argument(
        "--stop-without-signal",
        type=int,
        default=10,
        metavar="N",
        help="stop after N steps in a row in which no group's rewards differed (zero advantages); 0: never",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a `train` setting (YAML)")
    parser.add_argument(
        "--sft-set", action="append", default=[], metavar="KEY=VALUE", help="an `sft` setting (YAML), with --sft-steps"
    )
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its newest checkpoint (the same flags; a later GPU session), or carry it "
        "past its steps with a larger --steps under a constant schedule",
    )
    args = parser.parse_args(argv)
    if min(args.lists, args.steps, args.eval_every, args.score_lists) < 1 or args.n < 2:
        parser.error("--lists, --steps, --eval-every and --score-lists must be >= 1 and -n >= 2")
    if args.time_limit is not None and args.time_limit <= 0:
        parser.error(f"--time-limit must be > 0 seconds, got {args.time_limit}")
    if args.sft_steps < 0:
        parser.error(f"--sft-steps must be >= 0 (0: no SFT first), got {args.sft_steps}")
    if args.stop_without_signal < 0:
        parser.error(f"--stop-without-signal must be >= 0 steps (0: never), got {args.stop_without_signal}")
    overrides: dict[str, Any] = {}
    sft_overrides: dict[str, Any] = {}
    for flag, items, into in (("--set", args.set, overrides), ("--sft-set", args.sft_set, sft_overrides)):
        for item in items:
            key, sep, value = item.partition("=")
            if not sep:
                parser.error(f"{flag} takes KEY=VALUE, got {item!r}")
            into[key] = yaml.safe_load(value)
    if sft_overrides and not args.sft_steps:
        parser.error("--sft-set sets the SFT of --sft-steps N: give --sft-steps too")
    categories = args.categories.split(",") if args.categories else None
    out = Path(args.out)
    section = dict(profiles.stage_params("train_gapo", "embedded")["train"])
    section.update(overrides, model=args.model, seed=args.seed, max_steps=args.steps, output_dir=str(out / "run"))
    # the data this run trains on (its own rows, not the pipeline's), so that summary.json says so
    section.update(num_prompts=args.lists, min_items=ITEMS, max_items=ITEMS)
    # a checkpoint at every scoring (and at a time limit): a run killed at a device call's limit resumes from there
    keep = None if args.keep_checkpoints else 1
    section.update(save_steps=args.eval_every, save_total_limit=keep, resume=args.resume)
    script, config = configs(section)  # every setting checked before anything loads
    sft = sft_settings(args.model, args.sft_steps, args.seed, sft_overrides, out / "run" / "sft_model")
    if args.sft_steps:
        from gapo.repro.sft import SFTConfig

        try:
            SFTConfig(**sft)
        except (TypeError, ValueError) as error:
            parser.error(f"the SFT's settings (params.yaml's sft, --sft-set): {error}")
    train_rows = training_lists(args.lists, args.seed, categories)
    heldin_categories = args.heldin_categories.split(",") if args.heldin_categories else None
    lists = scored_lists(train_rows, args.score_lists, args.seed, heldin_categories)
    instructions = {}
    if args.as_trained:
        instructions[ASKED] = trained_instructions(train_rows, args.score_lists)
        lists[ASKED] = lists["train"]
    prompts_a_step = config.per_device_train_batch_size * config.gradient_accumulation_steps // config.num_generations
    mu = config.num_iterations
    shuffle_seed = args.seed if args.shuffle_items else None
    dataset = run_dataset(train_rows, rollout_batches(args.steps, mu) * prompts_a_step, shuffle_seed)
    command = "python tools/list_transfer.py " + " ".join(sys.argv[1:] if argv is None else argv)
    leg_keys = ("output_dir", "resume", "save_total_limit")
    settings = {**vars(args), "train": {k: v for k, v in section.items() if k not in leg_keys}}
    for key in ("resume", "time_limit", "keep_checkpoints", "stop_without_signal"):
        del settings[key]  # a leg's (summary.json's legs)
    settings = json.loads(json.dumps(settings))  # as summary.json holds them, to compare on --resume
    trained = json.loads(json.dumps([{"category": r["category"], "items": r["items"]} for r in train_rows]))
    warmup = config.get_warmup_steps(config.max_steps)  # the schedule's, as the trainer will resolve it
    summary, rows, first_step = resumed(out, settings, trained, warmup) if args.resume else ({}, [], 0)

    from gapo.models import load_tokenizer

    max_new_tokens = profiles.stage_params("uniformity", "embedded")["uniformity"]["max_new_tokens"]  # the stage's
    tokenizer = load_tokenizer(args.model)
    callback = Score(
        lists,
        args.n,
        args.seed,
        max_new_tokens,
        args.eval_every,
        tokenizer,
        args.time_limit,
        rows,
        instructions,
        args.stop_without_signal,
    )
    environment_now = environment()
    started = time.perf_counter()
    summary = summary or {
        "command": command,
        "settings": settings,
        "finished": False,
        "steps_run": 0,
        "stopped_by_time_limit": False,
        "stopped_without_signal": None,
        "rollouts": 0,
        "visits_per_list": 0.0,
        "training_lists": trained,
        "scored_lists": lists,
        "asked_in": instructions,
        "means": {},
        "seconds": 0.0,
        "legs": [],
    }
    if args.sft_steps:  # its seconds count in this leg's
        record = sft_warm_start(sft, train_rows, out / "run" / "sft_model")
        if record is not None:
            summary["sft"] = record  # a resumed run keeps the record its first leg wrote
        script.model = str(out / "run" / "sft_model")
    legs = [leg for leg in summary["legs"] if leg["to_step"] <= first_step]  # a leg past the checkpoint is redone
    seconds_before = sum(leg["seconds"] for leg in legs)

    def write_results(step: int, finished: bool = False) -> None:
        """curve.csv and summary.json as of `step`: rewritten after every scoring, so a run killed at a call's limit
        keeps them."""
        curve = callback.curve()
        write_text_atomic(out / "curve.csv", curve.to_csv(index=False))
        leg = {"command": command, "from_step": first_step, "to_step": step, "time_limit": args.time_limit}
        leg["stop_without_signal"] = args.stop_without_signal
        leg["environment"] = environment_now  # a resumed leg may run on another machine: each leg says where it ran
        leg["seconds"] = round(time.perf_counter() - started, 1)
        summary.update(
            finished=finished,
            steps_run=step,
            stopped_by_time_limit=callback.stopped_at is not None,
            stopped_without_signal=callback.stopped_without_signal,
            rollouts=rollout_batches(step, mu) * prompts_a_step * config.num_generations,
            visits_per_list=rollout_batches(step, mu) * prompts_a_step / args.lists,
            means={int(s): means(group) for s, group in curve.groupby("step")},
            seconds=round(seconds_before + leg["seconds"], 1),
            legs=[*legs, leg],
        )
        write_json_atomic(out / "summary.json", summary, indent=2)

    callback.on_score = write_results
    train(script, config, dataset, callbacks=[callback])
    last = callback.stopped_at or callback.stopped_without_signal or args.steps
    write_results(last, finished=last == args.steps)
    figure(callback.curve(), out / "curve.png", f"k={args.lists} lists, {last} steps")
    if callback.stopped_without_signal is not None:
        print(
            f"list_transfer: stopped at step {last}: no group's rewards differed for {args.stop_without_signal} steps "
            f"in a row (every advantage 0); results in {out}",
            file=sys.stderr,
        )
        return 1
    return 0


#: Settings that say where a run is, not how it runs: a run carried to another folder (the next GPU session's machine
#: unpacks it wherever its script says) continues there.
WHERE = ("out",)
#: The `train` section's words for the data, recorded for the reader: what --lists and the tool's 8 items imply. A
#: resumed run's data are checked as its training lists instead, and these are rewritten as they are now: summaries
#: written before de6c0d7 hold params.yaml's 512 rows of 4-12 items there (item 5's H200 runs of 2026-12-04).
DATA_WORDS = ("num_prompts", "min_items", "max_items")
#: When a run scores (and so checkpoints), not how it trains: a resumed leg may look more or less often.
LOOK = ("eval_every", "train.save_steps")
#: The run's length, which a resumed leg may grow under a constant schedule (`resumed`).
STEPS = ("steps", "train.max_steps")
#: The schedules whose rate after the warmup does not depend on the run's length (transformers' names).
CONSTANT_SCHEDULES = ("constant", "constant_with_warmup")


def resumed(
    out: Path, settings: dict[str, Any], training_lists: list[dict[str, Any]], warmup: int
) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """The summary of the run in `out` (its settings now `settings`), its curve rows up to its newest checkpoint and
    that checkpoint's step, the one training continues from (0 and no rows without a checkpoint: training starts again
    from step 0; the checkpoint's own step lacks its rows where the run was killed while scoring it). Refused in one
    line, before anything loads, when there is no run to continue, it has finished and `settings` ask no more steps,
    or it ran with other `settings` (but `WHERE`, `DATA_WORDS`, `LOOK` and, growing, `STEPS`) or on other
    `training_lists`. More steps are refused unless the schedule is one of `CONSTANT_SCHEDULES` and the checkpoint is
    past the longer run's `warmup` steps: any other schedule's rate at a step depends on the run's length (linear decays
    to 0 at its last step), so the run carried on would not be the run it was nor a longer one."""
    if not (out / "summary.json").is_file():
        raise SystemExit(f"--resume: {out} holds no list_transfer run (no summary.json)")
    summary = json.loads((out / "summary.json").read_text())
    if summary.get("stopped_without_signal") is not None:
        step = summary["stopped_without_signal"]
        raise SystemExit(f"--resume: the run in {out} stopped at step {step} without a reward signal; nothing to learn")
    before = summary["settings"]
    longer = settings["steps"] > before["steps"]
    ignored = {*WHERE, *(f"train.{word}" for word in DATA_WORDS), *LOOK, *(STEPS if longer else ())}
    changed = [key for key in _changed(before, settings) if key not in ignored]
    if changed:
        raise SystemExit(f"--resume: {out} was run with other settings ({', '.join(changed)}); pass the same flags")
    if summary.get("training_lists") != training_lists:
        raise SystemExit(f"--resume: {out} was trained on other lists than these flags give; pass the same flags")
    if summary.get("finished") and not longer:
        raise SystemExit(
            f"--resume: the run in {out} finished at step {summary['steps_run']}; nothing to continue (a larger "
            "--steps carries it on under a constant schedule)"
        )
    checkpoint = last_checkpoint(out / "run")
    step = checkpoint_step(checkpoint) if checkpoint else -1
    if longer:
        schedule = settings["train"].get("lr_scheduler_type")
        if schedule not in CONSTANT_SCHEDULES:
            raise SystemExit(
                f"--resume --steps {settings['steps']}: the run in {out} has lr_scheduler_type {schedule}, whose rate "
                f"depends on the run's length; only {' or '.join(CONSTANT_SCHEDULES)} carries a run past its "
                f"--steps ({before['steps']})"
            )
        if step < warmup:
            raise SystemExit(
                f"--resume --steps {settings['steps']}: the run in {out} continues from step {max(step, 0)}, inside "
                f"the longer run's warmup ({warmup} steps); start it again with --steps {settings['steps']}"
            )
    summary["settings"] = settings  # as this leg runs it: the legs' commands say what each leg was given
    summary.setdefault("legs", [])
    curve = pd.read_csv(out / "curve.csv") if (out / "curve.csv").is_file() else pd.DataFrame(columns=["step"])
    rows = curve[curve.step <= step].rename(columns={"list": "category"}).to_dict("records")
    return summary, rows, max(step, 0)


def _changed(before: dict[str, Any], now: dict[str, Any], prefix: str = "") -> list[str]:
    """The keys whose values differ, nested ones (the `train` section's) as `train.key`."""
    changed = []
    for key in sorted({*before, *now}):
        old, new = before.get(key), now.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += _changed(old, new, f"{prefix}{key}.")
        elif old != new:
            changed.append(prefix + key)
    return changed


def figure(curve: pd.DataFrame, path: Path, title: str) -> None:
    """Mean JSD (solid) and JSD among valid answers (dashed) of each set against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    by_step = curve.groupby(["set", "step"])[["jsd", "jsd_valid"]].mean().reset_index()
    for i, name in enumerate(dict.fromkeys([*SETS, *by_step["set"]])):
        part = by_step[by_step["set"] == name]
        ax.plot(part["step"], part["jsd"], color=f"C{i}", marker="o", label=f"{name}: JSD")
        ax.plot(part["step"], part["jsd_valid"], color=f"C{i}", linestyle="--", label=f"{name}: JSD among valid")
    ax.set_xlabel("GAPO step")
    ax.set_ylabel("mean JSD from uniform")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
