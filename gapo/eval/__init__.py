"""Evaluation: what the paper measures and how.

- `prompts`: the paper's evaluation prompts (unseen lists, open questions, creativity prompts).
- `metrics`: pure functions over samples: JSD, coverage, Unique@n, Self-BLEU, embedding distance.
- `embeddings`: the sentence encoder (offline MiniLM) behind the creativity and equivalence metrics.
- `experiments`: one function per paper experiment (bias, uniformity, open set, creativity), sampler in, tables out.
- `benchmarks/`: the coherence benchmarks of Table 2 (GSM8K, MATH, HumanEval) through lm-evaluation-harness, with
  HumanEval scored in our sandbox.
"""
