"""The planets-list distribution of a model (issue 2's before/after check), with and without the `<answer>` pre-fill.

    python perf/planets.py --model embedded [--adapter runs/gapo-embedded/adapter] -n 100 --out planets.json

Prompt: the paper's uniformity instruction over the 8 planets, 100 samples at temperature 1.0, seed 0.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from gapo.metrics import jsd_from_uniform
from gapo.models import load_model_and_tokenizer
from gapo.repro.prompts import UNIFORMITY_LISTS, list_prompt, user_message
from gapo.repro.sampling import sample_completions
from gapo.rewards import extract_answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--adapter", default=None)
    parser.add_argument("-n", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    planets = list(UNIFORMITY_LISTS["planets"])
    model, tokenizer = load_model_and_tokenizer(args.model, adapter=args.adapter)
    prompt = user_message(list_prompt(planets))
    report = {"model": args.model, "adapter": args.adapter, "n": args.n, "seed": args.seed}
    for name, prefix in (("prefill", "<answer>"), ("no_prefill", None)):
        (texts,) = sample_completions(
            model,
            tokenizer,
            [prompt],
            args.n,
            temperature=1.0,
            seed=args.seed,
            max_new_tokens=48,
            response_prefix=prefix,
        )
        answers = [extract_answer(t) for t in texts]
        counts = Counter(a if a in planets else "invalid" for a in answers)
        report[name] = {"counts": dict(counts.most_common()), "jsd": jsd_from_uniform(answers, planets)}
        print(f"{name:>10}: JSD {report[name]['jsd']:.3f}  {dict(counts.most_common())}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
