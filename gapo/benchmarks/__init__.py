"""Coherence benchmarks (Table 2) and the creativity-coherence sweep (Figure 7).

    from gapo.benchmarks import evaluate_model, load_generate, embedded_settings, write_benchmark_outputs

    settings = embedded_settings()
    results = {"baseline": evaluate_model(load_generate("embedded"), settings),
               "gapo": evaluate_model(load_generate("embedded", adapter="models/gapo"), settings)}
    write_benchmark_outputs(results, "figures/table2_benchmarks.csv", "metrics/benchmarks.json", settings)

Modules: `data` (subsets, offline sources), `prompts` (lm-eval's task prompts as chat), `scoring` (lm-eval's answer
extraction and metrics), `sandbox` (HumanEval execution), `runner` (models -> tables), `build_subsets` (rebuilds
data/benchmarks/ from the PyPI packages that carry the data).
"""

from gapo.benchmarks.data import (
    BENCHMARKS,
    PAPER_SIZES,
    SUBSET_SEED,
    BenchmarkData,
    BenchmarkDataError,
    load_benchmark,
)
from gapo.benchmarks.runner import (
    FIG7_TEMPERATURES,
    PAPER_TABLE2,
    BenchmarkSettings,
    Generate,
    benchmarks_metrics,
    embedded_settings,
    evaluate_benchmark,
    evaluate_model,
    experiments_creativity,
    figure7_data,
    load_generate,
    sampling_generate,
    table2_rows,
    write_benchmark_outputs,
    write_figure7_data,
    write_records,
)
from gapo.benchmarks.sandbox import ExecutionResult, SandboxLimits, SandboxUnavailableError, run_humaneval, run_program
from gapo.benchmarks.scoring import METRICS, safe_score

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
    "Generate",
    "SandboxLimits",
    "benchmarks_metrics",
    "embedded_settings",
    "evaluate_benchmark",
    "evaluate_model",
    "experiments_creativity",
    "figure7_data",
    "load_benchmark",
    "load_generate",
    "run_humaneval",
    "run_program",
    "SandboxUnavailableError",
    "safe_score",
    "sampling_generate",
    "table2_rows",
    "write_benchmark_outputs",
    "write_figure7_data",
    "write_records",
]
