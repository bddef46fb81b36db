"""The reproduction harness: everything that reproduces the paper's results on top of the `gapo` core.

It depends on the core (`gapo.rewards`, `gapo.tasks`, `gapo.metrics`, `gapo.trainer`, `gapo.train`, ...) and the
core never imports it (an import-linter contract in pyproject.toml, checked by `make test`).

- `pipeline`: profiles -> per-stage parameters, samplers, run directories and result files (the DVC stages' glue).
- `stages/`: one module per DVC stage (dvc.yaml), each `run(P) -> StageResult`; the notebooks call them.
- `prompts`: the paper's evaluation prompts (unseen lists, open questions, creativity prompts).
- `experiments`: one function per paper experiment (bias, uniformity, open set, creativity), sampler in, tables out.
- `benchmarks/`: the coherence benchmarks of Table 2 (GSM8K, MATH, HumanEval) through lm-evaluation-harness, with
  HumanEval scored in our sandbox.
- `sft`: the SFT baseline of Appendix G.
- `plotting`, `report`, `paper`: the figures, the results table, and the paper's own numbers to compare with.
"""
