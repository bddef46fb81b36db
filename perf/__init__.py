"""Speed measurements (not the paper's Table 2 benchmarks, which are `gapo.repro.benchmarks`), run as modules from the
repository root: `python -m perf.<name>`; the results are in docs/performance.md."""
