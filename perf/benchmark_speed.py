"""Benchmark sampling cost: seconds per generated answer for each Table 2 benchmark, the figure that sizes the run.

Why: issue 14 asks for benchmark sizes that fit the embedded run's 150 minutes and still tell a 10-point drop. The
time per problem depends on the prompt (GSM8K's 5-shot prompt is long), the answer length and how many problems
one batched call decodes together, so it is measured, not guessed. Each benchmark runs `--problems` problems once
through the same path as the pipeline (`gapo.repro.benchmarks.evaluate_model`: lm-eval, one batched call per run);
the wall time per problem is reported with the accuracy it got.

    .venv/bin/python -m perf.benchmark_speed --problems 16                    # embedded, CPU
    .venv/bin/python -m perf.benchmark_speed --benchmarks humaneval --problems 32

Then: problems x runs x models x seconds-per-problem = the stage's minutes.
"""

from __future__ import annotations

import argparse
import json
import time

from gapo.repro import profiles
from gapo.repro.benchmarks import BenchmarkSettings, evaluate_model, load_generate
from gapo.repro.stages.benchmarks import settings_of


def measure(model: str, benchmarks: list[str], problems: int, seed: int) -> dict[str, dict[str, float]]:
    """{benchmark: {problems, seconds, seconds_per_problem, accuracy}} for one run of `problems` problems each."""
    generate = load_generate(model, temperature=0.7)
    defaults = settings_of(profiles.stage_params("benchmarks", "embedded")["benchmarks"])  # params.yaml's
    out = {}
    for name in benchmarks:
        settings = BenchmarkSettings(
            benchmarks=(name,), sizes={name: problems}, runs=1, seed=seed, max_new_tokens=defaults.max_new_tokens
        )
        started = time.perf_counter()
        summary = evaluate_model(generate, settings)[name]
        seconds = time.perf_counter() - started
        metric, stats = next(iter(summary["metrics"].items()))
        out[name] = {
            "problems": summary["n"],
            "max_new_tokens": defaults.max_new_tokens[name],
            "seconds": round(seconds, 1),
            "seconds_per_problem": round(seconds / summary["n"], 2),
            metric: round(stats["mean"], 3),
        }
        print(json.dumps({name: out[name]}), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--benchmarks", default="gsm8k,math,humaneval")
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    measure(args.model, args.benchmarks.split(","), args.problems, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
