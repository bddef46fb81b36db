"""Coherence benchmarks (Table 2) and the creativity-coherence sweep (Figure 7).

    from gapo.repro.benchmarks import BenchmarkSettings, benchmarks_metrics, evaluate_model, load_generate, table2_rows

    settings = BenchmarkSettings(sizes={"gsm8k": 50, "math": 50, "humaneval": 50}, runs=2)  # defaults: the paper's
    results = {"baseline": evaluate_model(load_generate("embedded"), settings),
               "gapo": evaluate_model(load_generate("embedded", adapter="models/gapo"), settings)}
    table2, metrics = table2_rows(results), benchmarks_metrics(results, settings)  # gapo.repro.stages.benchmarks

Modules: `harness` (lm-evaluation-harness over our task YAMLs in `tasks/` and our model as its LM; bootstrap
intervals), `data` (subsets, offline sources), `scoring` (the MATH and HumanEval scoring lm-eval cannot do here),
`sandbox` (HumanEval execution), `runner` (models -> tables), `build_subsets` (rebuilds data/benchmarks/ from the PyPI
packages that carry the data).
"""

from gapo.repro.benchmarks.data import (
    BENCHMARKS,
    PAPER_SIZES,
    SUBSET_SEED,
    BenchmarkData,
    BenchmarkDataError,
    load_benchmark,
)
from gapo.repro.benchmarks.harness import GapoLM, bootstrap_interval, task_config
from gapo.repro.benchmarks.runner import (
    FIG7_TEMPERATURES,
    PAPER_TABLE2,
    BenchmarkSettings,
    Generate,
    benchmarks_metrics,
    evaluate_benchmark,
    evaluate_model,
    experiments_creativity,
    figure7_data,
    load_generate,
    sampling_generate,
    table2_rows,
    write_records,
)
from gapo.repro.benchmarks.sandbox import (
    ExecutionResult,
    SandboxLimits,
    SandboxUnavailableError,
    run_humaneval,
    run_program,
)
from gapo.repro.benchmarks.scoring import METRICS

__all__ = [
    "BENCHMARKS",
    "FIG7_TEMPERATURES",
    "METRICS",
    "PAPER_SIZES",
    "PAPER_TABLE2",
    "SUBSET_SEED",
    "BenchmarkData",
    "BenchmarkDataError",
    "BenchmarkSettings",
    "ExecutionResult",
    "GapoLM",
    "Generate",
    "SandboxLimits",
    "benchmarks_metrics",
    "bootstrap_interval",
    "evaluate_benchmark",
    "evaluate_model",
    "experiments_creativity",
    "figure7_data",
    "load_benchmark",
    "load_generate",
    "run_humaneval",
    "run_program",
    "SandboxUnavailableError",
    "sampling_generate",
    "table2_rows",
    "task_config",
    "write_records",
]
