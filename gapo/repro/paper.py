"""The paper's reported numbers (Anschel et al. 2025), the one place they are written down.

Why a module: figures, tables and the README's results table set our measurements beside the paper's, and a number
copied into several places drifts. Each constant names the table it comes from and the model behind it.
"""

from __future__ import annotations

#: Table 1 (Qwen2.5-32B-Instruct, MPNet embeddings): task -> metric -> (baseline, GAPO), with the table's own
#: "average" row (the text quotes slightly different averages: 0.15 -> 0.39 and 0.52 -> 0.91).
PAPER_TABLE1: dict[str, dict[str, tuple[float, float]]] = {
    "story": {"embedding_distance": (0.31, 0.44), "one_minus_self_bleu": (0.83, 0.95)},
    "poem": {"embedding_distance": (0.17, 0.20), "one_minus_self_bleu": (0.73, 0.93)},
    "haiku": {"embedding_distance": (0.10, 0.21), "one_minus_self_bleu": (0.54, 0.80)},
    "mystery": {"embedding_distance": (0.40, 0.59), "one_minus_self_bleu": (0.67, 0.93)},
    "dialogue": {"embedding_distance": (0.21, 0.57), "one_minus_self_bleu": (0.58, 0.85)},
    "fruit pitch": {"embedding_distance": (0.01, 0.44), "one_minus_self_bleu": (0.16, 0.78)},
    "joke": {"embedding_distance": (0.15, 0.37), "one_minus_self_bleu": (0.19, 0.37)},
    "chorus": {"embedding_distance": (0.25, 0.43), "one_minus_self_bleu": (0.65, 0.94)},
    "average": {"embedding_distance": (0.20, 0.41), "one_minus_self_bleu": (0.54, 0.82)},
}

#: Table 2 (Qwen2.5-32B-Instruct, temperature 0.7, mean of 5 runs).
PAPER_TABLE2: dict[str, dict[str, float]] = {
    "paper_qwen2.5-32b_baseline": {
        "gsm8k/exact": 0.835, "gsm8k/flexible": 0.865, "math/verify": 0.484, "math/exact_match": 0.524,
        "humaneval/pass@1": 0.555, "mmlu_pro/exact_match": 0.675,
    },
    "paper_qwen2.5-32b_gapo": {
        "gsm8k/exact": 0.772, "gsm8k/flexible": 0.905, "math/verify": 0.499, "math/exact_match": 0.502,
        "humaneval/pass@1": 0.579, "mmlu_pro/exact_match": 0.656,
    },
}  # fmt: skip

#: Table 8 (Qwen2.5-7B-Instruct): row -> (mean JSD from uniform over unseen lists, Unique@500).
PAPER_TABLE8: dict[str, tuple[float, float]] = {
    "Qwen2.5 7B": (0.31, 29),
    "+ Min-p (0.05)": (0.33, 10),
    "+ Min-p (0.1)": (0.36, 6),
    "+ SFT": (0.19, 3),
    "+ GAPO": (0.09, 112),
}
