"""Do two `gapo eval --suite lists` runs sample the same answer distribution? (issue 22: a server against local)

Two runs of one model with other random numbers differ; the question is whether by more than sampling noise. Each
run's bootstrap intervals resample its own samples, which for coverage (a count of items seen, biased low at small n)
understates how much an independent run moves. So this compares the runs' answers directly:

1. per list, a chi-square test of homogeneity of the answer counts (every item and the invalid bin) of the reference
   runs pooled against the other run, and Fisher's sum over the lists (chi-square statistics and degrees of freedom
   added);
2. the spread of one run's mean coverage and JSD among valid answers when its answers are drawn from the reference's
   pooled per-list frequencies (a parametric bootstrap, `--sims` runs of the other run's n per list), and where the
   other run's means fall in it.

    python tools/eval_agreement.py --reference runs/a/samples.jsonl,runs/b/samples.jsonl \
        --other runs/api/samples.jsonl --out agreement.json
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
from scipy.stats import chi2, chi2_contingency

from gapo.io import read_jsonl, write_json_atomic
from gapo.metrics import INVALID, coverage, jsd_valid_from_uniform
from gapo.repro.prompts import UNIFORMITY_LISTS


def answers_by_list(path: Path) -> dict[str, list[str]]:
    """list name -> the matched item of each sample (`INVALID` for an invalid one), from a samples.jsonl."""
    out: dict[str, list[str]] = {}
    for row in read_jsonl(path):
        if row.get("suite", "lists") == "lists":
            out.setdefault(row["category"], []).append(row["item"])
    return out


def homogeneity(reference: list[dict[str, list[str]]], other: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """Per list and over all lists: chi-square statistic, degrees of freedom and p of pooled reference vs `other`."""
    rows: dict[str, dict[str, float]] = {}
    total, dof_total = 0.0, 0
    for name, answers in other.items():
        pooled = Counter(a for run in reference for a in run[name])
        seen = Counter(answers)
        keys = sorted(set(pooled) | set(seen))
        stat, p, dof, _ = chi2_contingency(np.array([[pooled[k] for k in keys], [seen[k] for k in keys]]))
        rows[name] = {"chi2": float(stat), "dof": int(dof), "p": float(p)}
        total, dof_total = total + stat, dof_total + dof
    rows["all lists"] = {"chi2": float(total), "dof": dof_total, "p": float(chi2.sf(total, dof_total))}
    return rows


def _means(draws: dict[str, list[str]], lists: dict[str, list[str]]) -> tuple[float, float]:
    covered, jsd = [], []
    for name, answers in draws.items():
        parsed = [None if a == INVALID else a for a in answers]
        covered.append(coverage(parsed, lists[name]))
        jsd.append(jsd_valid_from_uniform(parsed, lists[name]))
    return float(np.mean(covered)), float(np.mean(jsd))


def sampling_spread(
    reference: list[dict[str, list[str]]],
    other: dict[str, list[str]],
    lists: dict[str, list[str]],
    sims: int,
    seed: int,
) -> dict[str, dict[str, float]]:
    """The 2.5-97.5% range of mean coverage and JSD among valid answers over `sims` runs drawn from the reference."""
    rng = np.random.default_rng(seed)
    pooled = {name: Counter(a for run in reference for a in run[name]) for name in other}
    results = []
    for _ in range(sims):
        draws = {}
        for name, counts in pooled.items():
            keys = list(counts)
            p = np.array([counts[k] for k in keys], dtype=float)
            draws[name] = [keys[i] for i in rng.choice(len(keys), size=len(other[name]), p=p / p.sum())]
        results.append(_means(draws, lists))
    observed = _means(other, lists)
    out = {}
    for index, metric in enumerate(("coverage", "jsd_valid")):
        values = np.array([r[index] for r in results])
        low, high = np.percentile(values, [2.5, 97.5])
        out[metric] = {"other": observed[index], "low": float(low), "high": float(high), "mean": float(values.mean())}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", required=True, help="comma-separated samples.jsonl files, pooled")
    parser.add_argument("--other", required=True, help="the samples.jsonl of the run to compare")
    parser.add_argument("--sims", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    reference = [answers_by_list(Path(p)) for p in args.reference.split(",")]
    other = answers_by_list(Path(args.other))
    missing = [name for name in other if any(name not in run for run in reference) or name not in UNIFORMITY_LISTS]
    if missing:
        parser.error(f"lists missing from a reference run or not the paper's unseen lists: {', '.join(missing)}")
    lists = {name: list(UNIFORMITY_LISTS[name]) for name in other}
    document = {
        "homogeneity": homogeneity(reference, other),
        "sampling_spread": sampling_spread(reference, other, lists, args.sims, args.seed),
    }
    for name, row in document["homogeneity"].items():
        print(f"{name:22s} chi2 {row['chi2']:6.1f}  dof {row['dof']:3d}  p {row['p']:.3f}")
    for metric, row in document["sampling_spread"].items():
        low, high = row["low"], row["high"]
        print(f"{metric}: other {row['other']:.3f}; 95% of runs drawn from the reference in [{low:.3f}, {high:.3f}]")
    if args.out:
        write_json_atomic(args.out, document)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
