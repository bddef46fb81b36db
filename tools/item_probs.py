"""The exact probability that a policy answers each item of a list: what sampling cannot see (issue 34).

Why: a group reward raises only the answers some rollout says. docs/uniformity_diagnosis.md traced the English lists'
plateau (JSD near 0.25 after 30 visits) to items said 0-4 times in 200 samples, so the samples bound such an item's
probability from above (under about 1/200) and say nothing more. This tool measures it. For each list, asked as the
evaluation asks it (`gapo.repro.prompts.list_prompt` in the chat template), it sums the probability of every token
path that spells ``<answer>ITEM</answer>`` at the start of the completion (a sample may join ``>`` to the item's
first letter, ``>G`` ``aur``, or not, ``>`` ``Cap`` ``y`` ``bara``: the tokenizer's own spelling alone misses many
answers), for every item in the case variants the answer matching accepts (as written, lower case, capitalised:
disjoint strings, so their probabilities add). That is a lower bound on the probability that a sample's answer is the
item: a sample may also reach it through text before the tag, and paths under `--floor` are left out. The items' sum,
`mass`, says how much of the policy the bound covers; compare it with the samples' valid share.

From a run of tools/list_transfer.py (`--run DIR`: its training lists, all of them, and its scored held-in and unseen
lists, from summary.json), the base model and the run's adapter:

    python tools/item_probs.py --run runs/visits/k8_asked120_s0 --out runs/item_probs/k8_asked120_s0
    python tools/item_probs.py --lists my_lists.jsonl --adapter DIR --out DIR   # the lists `gapo eval --lists` reads
    python tools/item_probs.py --suite heldin unseen --adapter models/gapo/qwen2.5-coder-0.5b --out DIR  # the stage's
    python tools/item_probs.py --suite heldin --rotations 0,1,4,5 --adapter DIR --out DIR   # each list in 4 orders
    python tools/item_probs.py --model tiny-random --lists lists.jsonl --no-base --adapter DIR --out /tmp/ip  # a check

`--suite` asks the uniformity stage's own lists (`gapo.repro.prompts`: `heldin`, lists of the training categories no
training row holds, and `unseen`, the paper's lists of new categories). `--rotations` asks every list once in each
rotation of its items (0: as drawn; 1: the first item moved to the end; ...): the model's preference for a place in
the list, apart from the item that fills it, then shows in positions.csv.

Writes, in `--out`: items.csv (model, set, list, rotation, position: the item's place as asked, 1 = first, item,
prob: the variants' sum, and p_in_group: the chance that a group of `--group` rollouts says the item at least once,
1 - (1 - prob)^G) and lists.csv (model, set, list, rotation, mass, jsd_exact: base-2 JSD from uniform of the items'
probabilities renormalised, the exact counterpart of the samples' JSD among valid answers; min_prob and its item;
rare: items with prob < 1/`--rare`), and summary.json (the command, the models, each set's means and the environment,
`gapo.repro.provenance`). With two rotations or more, positions.csv: per model, set and position, `factor` (how much
the place multiplies an item's share, `position_fit`) and `share` (the mean share there), and places.csv: per model and
set, the lists' JSD as asked, with the places' part removed, and of the places alone (`place_jsd`). Prints the per-list
table.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from gapo.io import write_json_atomic, write_text_atomic
from gapo.metrics import jensen_shannon
from gapo.models import ModelLoadError, attach_adapter, check_adapter, load_model_and_tokenizer
from gapo.prefix import encode_prompts, expand_cache
from gapo.repro import prompts as ep
from gapo.repro.chat import token_ids
from gapo.repro.evaluate import read_lists
from gapo.repro.provenance import environment
from gapo.rewards import CLOSE_TAG, OPEN_TAG

#: The sets of a list_transfer run scored here, in order: all training lists, then its scored held-in and unseen.
RUN_SETS = ("train", "heldin", "unseen")

#: `--suite`'s lists: the uniformity stage's held-in and unseen lists, as `gapo eval --suite lists` asks them.
SUITES: dict[str, dict[str, tuple[str, ...]]] = {"heldin": ep.HELDIN_LISTS, "unseen": ep.UNIFORMITY_LISTS}


def variants(item: str) -> list[str]:
    """The spellings of `item` scored: as written, lower case, capitalised; each once (the matching ignores case).

    >>> variants("Snow Leopard")
    ['Snow Leopard', 'snow leopard']
    >>> variants("664")
    ['664']"""
    out: list[str] = []
    for text in (item, item.lower(), item[:1].upper() + item[1:]):
        if text not in out:
            out.append(text)
    return out


class Vocabulary:
    """Every token's text (byte-level tokens that decode to a partial character are left out), for finding the
    tokens that spell a string's next characters."""

    def __init__(self, tokenizer: Any) -> None:
        special = set(tokenizer.all_special_ids)
        texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        self.by_text: dict[str, list[int]] = {}
        for token, text in enumerate(texts):
            if token not in special and text and "\ufffd" not in text:
                self.by_text.setdefault(text, []).append(token)
        self.longest = max(map(len, self.by_text))
        self.sorted = sorted(self.by_text)
        self._ending: dict[str, list[int]] = {}

    def pieces(self, rest: str) -> list[tuple[int, int]]:
        """(token, characters) for each token that spells a proper prefix of `rest`."""
        return [
            (token, size)
            for size in range(1, min(len(rest), self.longest + 1))
            for token in self.by_text.get(rest[:size], ())
        ]

    def ending(self, rest: str) -> list[int]:
        """The tokens whose text begins with all of `rest` (it, or it and more): each ends a spelling of `rest`."""
        if rest not in self._ending:
            first = bisect.bisect_left(self.sorted, rest)
            found = []
            for text in self.sorted[first:]:
                if not text.startswith(rest):
                    break
                found.extend(self.by_text[text])
            self._ending[rest] = found
        return self._ending[rest]


def string_probs(
    model: torch.nn.Module,
    prompt: list[int],
    texts: list[str],
    vocab: Vocabulary,
    pad_id: int,
    floor: float = 1e-9,
    batch: int = 64,
) -> list[float]:
    """P(the completion begins with TEXT | prompt) for each of `texts`, summed over every tokenization of TEXT (a
    sampled completion may spell "<answer>Gaur" as ``<``, ``answer``, ``>G``, ``aur`` or as ``>``, ``G``, ``aur``),
    leaving out the paths whose probability falls under `floor`: so a lower bound, short of the truth by less than
    `floor` times the paths cut. Breadth first: the prompt's keys/values are computed once (`gapo.prefix`), and each
    level of partial spellings runs in batches of `batch` rows (right-padded, positions after the prompt's)."""
    if not prompt or not texts or not all(texts):
        raise ValueError("a prompt and non-empty texts are needed")
    device = next(model.parameters()).device
    with torch.inference_mode():
        encoded = encode_prompts(model, [prompt], pad_id, device)
        totals = [0.0] * len(texts)
        floor_logp = math.log(floor)
        frontier: list[tuple[int, int, list[int], float]] = [(k, 0, [], 0.0) for k in range(len(texts))]
        while frontier:
            grown = []
            for first in range(0, len(frontier), batch):
                chunk = frontier[first : first + batch]
                logps = _next_logps(model, encoded, [path for _, _, path, _ in chunk], pad_id)
                for (k, pos, path, logp), row in zip(chunk, logps, strict=True):
                    rest = texts[k][pos:]
                    ending = vocab.ending(rest)
                    if ending:
                        totals[k] += math.exp(logp + float(torch.logsumexp(row[ending], dim=0)))
                    for token, size in vocab.pieces(rest):
                        step = logp + float(row[token])
                        if step >= floor_logp:
                            grown.append((k, pos + size, path + [token], step))
            frontier = grown
    return totals


def _next_logps(model: torch.nn.Module, encoded: Any, paths: list[list[int]], pad_id: int) -> torch.Tensor:
    """(len(paths), V) log-probabilities of the token after prompt + path, for paths continuing one encoded prompt."""
    first = torch.log_softmax(encoded.logits[0], dim=-1)
    out = first.expand(len(paths), -1).clone()
    grown = [i for i, path in enumerate(paths) if path]
    if not grown:
        return out.cpu()
    device = encoded.logits.device
    width = max(len(paths[i]) for i in grown)
    ids = torch.full((len(grown), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(grown), width), dtype=torch.long, device=device)
    for row, i in enumerate(grown):
        ids[row, : len(paths[i])] = torch.tensor(paths[i], device=device)
        mask[row, : len(paths[i])] = 1
    length = int(encoded.lengths[0])
    cache = expand_cache(encoded.cache, torch.zeros(len(grown), dtype=torch.long, device=device), copy=True)
    full_mask = torch.cat([mask.new_ones(len(grown), length), mask], dim=-1)
    positions = (length + torch.arange(width, device=device)).expand(len(grown), -1)
    logits = model(
        input_ids=ids, attention_mask=full_mask, position_ids=positions, past_key_values=cache, use_cache=True
    ).logits.float()
    last = torch.tensor([len(paths[i]) - 1 for i in grown], device=device)
    out[torch.tensor(grown)] = torch.log_softmax(logits[torch.arange(len(grown), device=device), last], dim=-1)
    return out.cpu()


def item_probs(
    model: torch.nn.Module, tokenizer: Any, vocab: Vocabulary, items: list[str], floor: float = 1e-9
) -> dict[str, float]:
    """Each item's probability as the answer to the evaluation's prompt for `items`: the sum over `variants` of
    P(the completion begins with ``<answer>VARIANT</answer>``), every tokenization counted (`string_probs`)."""
    prompt = token_ids(tokenizer, ep.user_message(ep.list_prompt(items)))
    spelled = [(item, text) for item in items for text in variants(item)]
    texts = [f"{OPEN_TAG}{text}{CLOSE_TAG}" for _, text in spelled]
    probs = dict.fromkeys(items, 0.0)
    for (item, _), prob in zip(
        spelled, string_probs(model, prompt, texts, vocab, tokenizer.pad_token_id, floor), strict=True
    ):
        probs[item] += prob
    return probs


def list_row(probs: dict[str, float], rare: float) -> dict[str, Any]:
    """One list's summary: `mass`, `jsd_exact`, the least likely item and how many items fall under `rare`."""
    p = np.array(list(probs.values()))
    mass = float(p.sum())
    jsd = jensen_shannon(p / mass, np.full(len(p), 1.0 / len(p))) if mass > 0 else float("nan")
    least = min(probs, key=probs.__getitem__)
    return {
        "mass": mass,
        "jsd_exact": jsd,
        "min_prob": probs[least],
        "min_item": least,
        "rare": int((p < rare).sum()),
    }


def rotate(items: list[str], rotation: int) -> list[str]:
    """`items` asked from its `rotation`-th item on, the ones before it moved to the end.

    >>> rotate(["a", "b", "c"], 1)
    ['b', 'c', 'a']"""
    return items[rotation:] + items[:rotation]


def position_fit(
    log_share: np.ndarray, item: np.ndarray, position: np.ndarray, iterations: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """Least squares of ``log_share = a[item] + b[position]``, by alternating means; b centred on 0.

    Why: the base model's probability for a word moves up to a hundredfold with its place in the list (the rotations in
    docs/uniformity_diagnosis.md). With each list asked in several rotations, every item sits in several places and
    every place holds several items, so the two parts come apart. `item` and `position` are integer codes (an item
    is a list's item: the same word on two lists is two items). Returns (a, b): a per item code, b per position code.
    Positions that never meet a common item cannot be compared: the caller asks rotations that link them."""
    a = np.zeros(int(item.max()) + 1)
    b = np.zeros(int(position.max()) + 1)
    item_count = np.bincount(item, minlength=len(a))
    position_count = np.bincount(position, minlength=len(b))
    for _ in range(iterations):
        a = np.bincount(item, log_share - b[position], minlength=len(a)) / np.maximum(item_count, 1)
        b = np.bincount(position, log_share - a[item], minlength=len(b)) / np.maximum(position_count, 1)
        b -= b[position_count > 0].mean()
    return a, b


def with_shares(items: pd.DataFrame) -> pd.DataFrame:
    """items.csv's rows with `share`: each item's probability over its list's `mass`, as that list was asked."""
    return items.assign(share=items.prob / items.groupby(["model", "set", "list", "rotation"]).prob.transform("sum"))


def positions_table(items: pd.DataFrame) -> pd.DataFrame:
    """Per model, set and position: `factor`, exp(b) of `position_fit` on the log of each item's share of its list
    as asked (geometric mean 1 over the places; 2 = twice the share the same item gets in an average place), and
    `share`, the mean share there (1/L for a model with no preference). Sets whose lists differ in length are left
    out (a place means a different thing in each)."""
    frame = with_shares(items)
    rows = []
    for (model, set_name), group in frame.groupby(["model", "set"], sort=False):
        if group.groupby(["list", "rotation"]).size().nunique() != 1:
            continue
        item_code = group.groupby(["list", "item"], sort=False).ngroup().to_numpy()
        log_share = np.log(np.maximum(group.share.to_numpy(), 1e-12))
        _, b = position_fit(log_share, item_code, group.position.to_numpy() - 1)
        shares = group.groupby("position").share.mean()
        for position, effect in enumerate(b, start=1):
            rows.append(
                dict(model=model, set=set_name, position=position, factor=math.exp(effect), share=shares[position])
            )
    return pd.DataFrame(rows)


def place_jsd(items: pd.DataFrame, positions: pd.DataFrame) -> pd.DataFrame:
    """Per model and set in `positions`: how much of the lists' unevenness the places make. `jsd_as_asked`, the mean
    over lists and rotations of the base-2 JSD from uniform of the items' shares (the mean `jsd_exact`);
    `jsd_place_removed`, the same after each share is divided by its place's `factor` and the list renormalised (the
    items' own preferences, as if every place were alike); `jsd_place_only`, the JSD of the factors themselves (a
    model with no preference among the items, only among the places).

    Why: a policy can flatten what it samples by learning where in a list to answer, or which items to answer; only
    the second makes every order of a list uniform. The issue-34 held-in lists ask which of the two GAPO transfers."""
    frame = with_shares(items)
    rows = []
    for (model, set_name), place in positions.groupby(["model", "set"], sort=False):
        factor = place.set_index("position").factor
        uniform = np.full(len(factor), 1.0 / len(factor))
        as_asked, removed = [], []
        for _, asked in frame[(frame.model == model) & (frame.set == set_name)].groupby(["list", "rotation"]):
            share = asked.sort_values("position").share.to_numpy()
            flat = share / factor.loc[sorted(asked.position)].to_numpy()
            as_asked.append(jensen_shannon(share, uniform))
            removed.append(jensen_shannon(flat / flat.sum(), uniform))
        rows.append(
            dict(
                model=model,
                set=set_name,
                jsd_as_asked=float(np.mean(as_asked)),
                jsd_place_removed=float(np.mean(removed)),
                jsd_place_only=jensen_shannon(factor.to_numpy() / factor.sum(), uniform),
            )
        )
    return pd.DataFrame(rows)


def parse_rotations(text: str, lists: dict[str, dict[str, list[str]]]) -> list[int]:
    """`--rotations`' comma-separated rotations, each from 0 to the shortest list's length - 1, none repeated, and
    (two or more) linking every place of every list, so that `position_fit` can compare them all."""
    try:
        rotations = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--rotations {text!r}: comma-separated integers, such as 0,1,4,5") from None
    lengths = {len(items) for named in lists.values() for items in named.values()}
    if len(set(rotations)) != len(rotations) or not all(0 <= r < min(lengths) for r in rotations):
        raise ValueError(f"--rotations {text!r}: distinct rotations from 0 to {min(lengths) - 1} (the shortest list's)")
    for length in sorted(lengths) if len(rotations) > 1 else ():
        step = math.gcd(length, *(r - rotations[0] for r in rotations))
        if step != 1:  # an item would meet only every step-th place: places a step apart share no item to compare by
            raise ValueError(
                f"--rotations {text!r}: on a list of {length} items each item meets one place in {step}; add rotations "
                "that differ by a number with no factor in common with the length (such as 0,1)"
            )
    return rotations


def run_lists(run: Path) -> dict[str, dict[str, list[str]]]:
    """A list_transfer run's lists by set: every training list (train0..), its scored held-in and unseen lists."""
    path = run / "summary.json"
    if not path.is_file():
        raise ValueError(f"--run {run}: no summary.json (a tools/list_transfer.py output folder)")
    summary = json.loads(path.read_text())
    train = {f"train{i}:{row['category']}": list(row["items"]) for i, row in enumerate(summary["training_lists"])}
    scored = summary["scored_lists"]
    return {"train": train, **{s: {k: list(v) for k, v in scored[s].items()} for s in RUN_SETS[1:] if s in scored}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/item_probs.py", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="a tools/list_transfer.py output folder: its lists, and its adapter by default")
    source.add_argument("--lists", help="a JSONL file of lists, as `gapo eval --lists` reads it (set: lists)")
    source.add_argument("--suite", nargs="+", choices=sorted(SUITES), help="the uniformity stage's lists (sets: these)")
    parser.add_argument("--rotations", default="0", help="ask each list in these rotations of its items (default 0)")
    parser.add_argument("--adapter", help="a LoRA adapter (default with --run: RUN/run/adapter)")
    parser.add_argument("--no-base", action="store_true", help="score the adapter only, not the base model too")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--group", type=int, default=32, help="G, for p_in_group (default 32: params.yaml's)")
    parser.add_argument("--rare", type=float, default=200, help="an item is rare under 1/RARE (default 200: an n)")
    parser.add_argument(
        "--floor",
        type=float,
        default=1e-9,
        help="leave out spellings whose probability falls under this (default 1e-9: 1e-5 of a rare item's 1/RARE)",
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.group < 1 or args.rare <= 1 or not 0 < args.floor < 1 / args.rare:
        parser.error("--group must be >= 1, --rare > 1 and 0 < --floor < 1/RARE")
    try:  # every input checked before the model loads
        if args.run:
            sets = run_lists(Path(args.run))
        elif args.lists:
            sets = {"lists": read_lists(args.lists)}
        else:
            sets = {name: {k: list(v) for k, v in SUITES[name].items()} for name in dict.fromkeys(args.suite)}
        rotations = parse_rotations(args.rotations, sets)
        adapter = args.adapter or (str(Path(args.run) / "run" / "adapter") if args.run else None)
        if adapter is not None:
            check_adapter(adapter)
        if args.no_base and adapter is None:
            raise ValueError("--no-base needs an adapter to score")
    except (ValueError, OSError, KeyError, ModelLoadError) as err:
        print(f"item_probs: {err}", file=sys.stderr)
        return 2
    model, tokenizer = load_model_and_tokenizer(args.model)
    vocab = Vocabulary(tokenizer)
    models = ([] if args.no_base else ["base"]) + ([adapter] if adapter else [])
    items, lists = [], []
    for name in models:
        if name == adapter:
            model = attach_adapter(model, adapter)
            model.eval()
        for set_name, named in sets.items():
            for (list_name, list_items), rotation in itertools.product(named.items(), rotations):
                key = dict(model=name, set=set_name, list=list_name, rotation=rotation)
                probs = item_probs(model, tokenizer, vocab, rotate(list_items, rotation), args.floor)
                for position, (item, prob) in enumerate(probs.items(), start=1):
                    in_group = -math.expm1(args.group * math.log1p(-prob))  # exact for tiny p too
                    items.append(dict(**key, position=position, item=item, prob=prob, p_in_group=in_group))
                lists.append(dict(**key, **list_row(probs, 1 / args.rare)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    items_frame, lists_frame = pd.DataFrame(items), pd.DataFrame(lists)
    write_text_atomic(out / "items.csv", items_frame.to_csv(index=False, float_format="%.6g"))
    write_text_atomic(out / "lists.csv", lists_frame.to_csv(index=False, float_format="%.6g"))
    positions = positions_table(items_frame) if len(rotations) > 1 else pd.DataFrame()
    if not positions.empty:
        write_text_atomic(out / "positions.csv", positions.to_csv(index=False, float_format="%.6g"))
        places = place_jsd(items_frame, positions)
        write_text_atomic(out / "places.csv", places.to_csv(index=False, float_format="%.6g"))
    numeric = ["mass", "jsd_exact", "min_prob", "rare"]
    means = lists_frame.groupby(["model", "set"], sort=False)[numeric].mean()
    summary = {
        "command": "python tools/item_probs.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "model": args.model,
        "models": models,
        "group": args.group,
        "rare_below": 1 / args.rare,
        "floor": args.floor,
        "rotations": rotations,
        "means": {f"{m} / {s}": row.to_dict() for (m, s), row in means.iterrows()},
        "environment": environment(),
    }
    write_json_atomic(out / "summary.json", summary)
    with pd.option_context("display.width", 160, "display.max_rows", 500):
        print(lists_frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(means.to_string(float_format=lambda v: f"{v:.4g}"))
        if not positions.empty:
            print(positions.pivot_table(index="position", columns=["model", "set"], values="factor").round(3))
            print(places.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
