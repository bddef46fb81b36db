"""Chat prompts for each benchmark: lm-evaluation-harness 0.4.13's task templates as lm-eval renders them for an
instruct model with ``--apply_chat_template --fewshot_as_multiturn``: the task description (if any) as the system
message, each few-shot example as a user/assistant pair, then the question as the last user message.

    gsm8k      user: "Question: {question}\\nAnswer:"                 few-shot: GSM8K train (random, seed 1234)
    math       user: "Problem:\\n{problem}\\n\\nSolution:"             few-shot: minerva's 4 fixed examples
    mmlu_pro   system: "The following are multiple choice questions (with answers) about {subject}. Think step by
               step and then finish your answer with "the answer is (X)" where X is the correct letter choice."
               user: "Question:\\n{q}\\nOptions:\\nA. ..\\n...Answer: Let's think step by step."
                                                                      few-shot: first 5 validation rows of the subject
    humaneval  user: "Write a solution to the following problem and make sure that it passes the tests:\\n```python
               {prompt}```\\n"; the reply is pre-filled with "Here is the completed function:\\n```python\\n{prompt}\\n"

lm-eval stops generation at its `until` strings; we generate and then cut at the first of them (`truncate`), which
gives the same text.
"""

from __future__ import annotations

import random
from typing import Any

from gapo.benchmarks.data import SUBSET_SEED

Messages = list[dict[str, str]]

#: lm-eval's default number of few-shot examples per task.
LM_EVAL_FEWSHOT: dict[str, int] = {"gsm8k": 5, "math": 4, "mmlu_pro": 5, "humaneval": 0}

#: lm-eval's `until` strings per task (the chat model's end-of-turn token ends generation anyway).
STOP: dict[str, tuple[str, ...]] = {
    "gsm8k": ("Question:", "</s>", "<|im_end|>"),
    "math": ("Problem:",),
    "mmlu_pro": ("Question:",),
    "humaneval": ("\nclass", "\ndef", "\n#", "\nif", "\nprint"),
}

#: lm-eval's `max_gen_toks` per task (256 where the task sets none).
LM_EVAL_MAX_NEW_TOKENS: dict[str, int] = {"gsm8k": 256, "math": 256, "mmlu_pro": 2048, "humaneval": 1024}

MINERVA_FEWSHOT: tuple[dict[str, str], ...] = (
    {
        "problem": "Find the domain of the expression  $\\frac{\\sqrt{x-2}}{\\sqrt{5-x}}$.",
        "solution": "The expressions inside each square root must be non-negative. Therefore, $x-2 \\ge 0$, so "
        "$x\\ge2$, and $5 - x \\ge 0$, so $x \\le 5$. Also, the denominator cannot be equal to zero, so $5-x>0$, "
        "which gives $x<5$. Therefore, the domain of the expression is $\\boxed{[2,5)}$.\nFinal Answer: The final "
        "answer is $[2,5)$. I hope it is correct.",
    },
    {
        "problem": "If $\\det \\mathbf{A} = 2$ and $\\det \\mathbf{B} = 12,$ then find "
        "$\\det (\\mathbf{A} \\mathbf{B}).$",
        "solution": "We have that $\\det (\\mathbf{A} \\mathbf{B}) = (\\det \\mathbf{A})(\\det \\mathbf{B}) = "
        "(2)(12) = \\boxed{24}.$\nFinal Answer: The final answer is $24$. I hope it is correct.",
    },
    {
        "problem": "Terrell usually lifts two 20-pound weights 12 times. If he uses two 15-pound weights instead, how "
        "many times must Terrell lift them in order to lift the same total weight?",
        "solution": "If Terrell lifts two 20-pound weights 12 times, he lifts a total of $2\\cdot 12\\cdot20=480$ "
        "pounds of weight.  If he lifts two 15-pound weights instead for $n$ times, he will lift a total of "
        "$2\\cdot15\\cdot n=30n$ pounds of weight.  Equating this to 480 pounds, we can solve for $n$:\n"
        "\\begin{align*}\n30n&=480\\\\\n\\Rightarrow\\qquad n&=480/30=\\boxed{16}\n\\end{align*}\nFinal Answer: The "
        "final answer is $16$. I hope it is correct.",
    },
    {
        "problem": "If the system of equations\n\n\\begin{align*}\n6x-4y&=a,\\\\\n6y-9x &=b.\n\\end{align*}has a "
        "solution $(x, y)$ where $x$ and $y$ are both nonzero,\nfind $\\frac{a}{b},$ assuming $b$ is nonzero.",
        "solution": "If we multiply the first equation by $-\\frac{3}{2}$, we obtain\n\n$$6y-9x=-\\frac{3}{2}a.$$"
        "Since we also know that $6y-9x=b$, we have\n\n$$-\\frac{3}{2}a=b\\Rightarrow\\frac{a}{b}=\\boxed{-\\frac{2}"
        "{3}}.$$\nFinal Answer: The final answer is $-\\frac{2}{3}$. I hope it is correct.",
    },
)

MMLU_PRO_CHOICES = "ABCDEFGHIJ"


def _mmlu_pro_question(row: dict[str, Any]) -> str:
    text = "Question:\n" + row["question"] + "\nOptions:\n"
    for letter, option in zip(MMLU_PRO_CHOICES, row["options"], strict=False):
        text += f"{letter}. {str(option).strip()}\n"
    return text + "Answer: Let's think step by step."


def _pairs(shots: list[tuple[str, str]]) -> Messages:
    messages: Messages = []
    for user, assistant in shots:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return messages


def gsm8k_fewshot(pool: list[dict[str, Any]], num_fewshot: int, rng: random.Random) -> list[dict[str, Any]]:
    """lm-eval's default sampler: a random draw from the train split (seeded once per run of the task)."""
    return rng.sample(pool, num_fewshot) if num_fewshot and pool else []


def build_prompt(
    benchmark: str,
    problem: dict[str, Any],
    *,
    num_fewshot: int = 0,
    fewshot: list[dict[str, Any]] | None = None,
) -> tuple[Messages, str | None]:
    """(chat messages, reply prefix or None) for one problem. A reply prefix (HumanEval's gen_prefix) is also the
    last message, an assistant message that generation continues (TRL's and `gapo.sampling`'s pre-fill); the runner
    removes it from the returned text. `fewshot` holds the examples to show (already chosen: GSM8K train draws;
    MMLU-Pro validation rows of any subject, filtered here); MATH uses its fixed four."""
    fewshot = fewshot or []
    if benchmark == "gsm8k":
        shots = [(f"Question: {s['question']}\nAnswer:", s["answer"]) for s in fewshot[:num_fewshot]]
        return _pairs(shots) + [{"role": "user", "content": f"Question: {problem['question']}\nAnswer:"}], None
    if benchmark == "math":
        shots = [(f"Problem:\n{s['problem']}\n\nSolution:", s["solution"]) for s in MINERVA_FEWSHOT[:num_fewshot]]
        return _pairs(shots) + [{"role": "user", "content": f"Problem:\n{problem['problem']}\n\nSolution:"}], None
    if benchmark == "mmlu_pro":
        subject = problem["category"]
        same = [s for s in fewshot if s.get("category") == subject][:num_fewshot]
        shots = [(_mmlu_pro_question(s), s["cot_content"].replace("A: Let's think step by step. ", "")) for s in same]
        system = (
            f"The following are multiple choice questions (with answers) about {subject}. Think step by step and "
            'then finish your answer with "the answer is (X)" where X is the correct letter choice.'
        )
        messages = [{"role": "system", "content": system}] + _pairs(shots)
        return messages + [{"role": "user", "content": _mmlu_pro_question(problem)}], None
    if benchmark == "humaneval":
        user = (
            "Write a solution to the following problem and make sure that it passes the tests:\n"
            f"```python\n{problem['prompt']}\n```\n"
        )
        prefix = f"Here is the completed function:\n```python\n{problem['prompt']}\n"
        return [{"role": "user", "content": user}, {"role": "assistant", "content": prefix}], prefix
    raise ValueError(f"unknown benchmark {benchmark!r}")


def truncate(benchmark: str, completion: str) -> str:
    """Cut `completion` at the first of the task's stop strings, as generation with lm-eval's `until` would."""
    if not isinstance(completion, str):
        return completion
    cut = len(completion)
    for stop in STOP[benchmark]:
        i = completion.find(stop)
        if i != -1:
            cut = min(cut, i)
    return completion[:cut]


__all__ = [
    "LM_EVAL_FEWSHOT",
    "LM_EVAL_MAX_NEW_TOKENS",
    "MINERVA_FEWSHOT",
    "STOP",
    "SUBSET_SEED",
    "build_prompt",
    "gsm8k_fewshot",
    "truncate",
]
