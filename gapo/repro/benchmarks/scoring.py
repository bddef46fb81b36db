"""Scoring that lm-evaluation-harness 0.4.13 cannot do here, called from the task YAMLs in gapo/repro/benchmarks/tasks/.

GSM8K is scored by lm-eval itself (its regex filters and exact_match). Two tasks need our code:

- math (lm-eval `minerva_math_*`): lm-eval's minerva_math/utils.py does not import without antlr4-python3-runtime
  4.11, which conflicts with dvc's hydra/omegaconf (4.9). So its prompt examples (`MINERVA_FEWSHOT`) and scoring are
  reproduced here: `exact_match` takes ``Final Answer: The final answer is X. I hope it is correct.``, normalises X as
  Lewkowycz et al. (2022, appendix D) and compares it with the gold answer (equal strings, or a symbolic difference
  that simplifies to 0, parsed with latex2sympy2_extended, the maintained fork of sympy's grammar); `math_verify` is
  Hugging Face's math-verify on the whole completion against the gold solution.
- humaneval (lm-eval `humaneval_instruct`): lm-eval's `code_eval` runs model code in-process; here the program
  (prompt + completion up to the first ``` fence, then the tests) is judged in `gapo.repro.benchmarks.sandbox`.

A malformed completion (no answer line, unparsable LaTeX, code that does not compile) scores 0, never raises.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
from contextlib import contextmanager
from typing import Any

from gapo.repro.benchmarks.sandbox import SandboxLimits, run_humaneval

logger = logging.getLogger(__name__)

#: Metric names per benchmark, in Table 2's column order.
METRICS: dict[str, tuple[str, ...]] = {
    "gsm8k": ("exact", "flexible"),
    "math": ("verify", "exact_match"),
    "humaneval": ("pass@1",),
    "mmlu_pro": ("exact_match",),
}

# --------------------------------------------------------------------------------------------------------------------
# MATH (minerva_math)
# --------------------------------------------------------------------------------------------------------------------


#: Minerva's four fixed MATH examples, as lm-eval's minerva_math shows them (`fewshot_config: first_n`).
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


def minerva_fewshot() -> list[dict[str, str]]:
    """The task's few-shot samples (`fewshot_config.samples`); ``few_shot`` makes `doc_to_target` show the solution."""
    return [{**example, "few_shot": "1"} for example in MINERVA_FEWSHOT]


def last_boxed_only_string(text: str) -> str | None:
    """The last ``\\boxed{...}`` (or ``\\fbox{...}``) of `text` with balanced braces, or None."""
    idx = text.rfind("\\boxed")
    if "\\boxed " in text:
        return "\\boxed " + text.split("\\boxed ")[-1].split("$")[0]
    if idx < 0:
        idx = text.rfind("\\fbox")
        if idx < 0:
            return None
    depth, right = 0, None
    for i in range(idx, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                right = i
                break
    return None if right is None else text[idx : right + 1]


def remove_boxed(s: str) -> str:
    if s.startswith("\\boxed "):
        return s[len("\\boxed ") :]
    left = "\\boxed{"
    if not (s.startswith(left) and s.endswith("}")):
        raise ValueError(f"not a boxed expression: {s!r}")
    return s[len(left) : -1]


def get_unnormalized_answer(text: str) -> str:
    text += "I hope it is correct."
    match = re.search(r"Final Answer: The final answer is(.*?). I hope it is correct.", text)
    return match.group(1).strip() if match else "[invalidanswer]"


SUBSTITUTIONS = [
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    (r"\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
]
REMOVED_EXPRESSIONS = [
    "square", "ways", "integers", "dollars", "mph", "inches", "ft", "hours", "km", "units", "\\ldots", "sue",
    "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals", "edges",
    "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3",
    "\\text{\n}", "\\text{}", r"\mathrm{th}", r"^\circ", r"^{\circ}", r"\;", r",\!", "{,}", '"', "\\dots",
]  # fmt: skip


def normalize_final_answer(final_answer: str) -> str:
    """Normalise a final answer (Lewkowycz et al. 2022, appendix D), as lm-eval 0.4.13's minerva_math does."""
    final_answer = final_answer.split("=")[-1]
    for expr in REMOVED_EXPRESSIONS:
        if expr.isalpha():
            final_answer = re.sub(rf"(?<!\\)\b{expr}\b", "", final_answer)
    for before, after in SUBSTITUTIONS:
        final_answer = final_answer.replace(before, after)
    for expr in REMOVED_EXPRESSIONS:
        if expr.isalpha():
            segments = re.split(r"(\\[a-zA-Z]+)", final_answer)
            for i in range(0, len(segments), 2):
                segments[i] = segments[i].replace(expr, "")
            final_answer = "".join(segments)
        else:
            final_answer = final_answer.replace(expr, "")
    final_answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", final_answer)
    final_answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)(\[[^\]]*\])(\w)", "\\1\\2{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)(?!\[)([^{])", "sqrt{\\2}", final_answer)
    final_answer = final_answer.replace("$", "")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+", final_answer):
        final_answer = final_answer.replace(",", "")
    return final_answer


@contextmanager
def _time_limit(seconds: int):
    """SIGALRM-based limit, as lm-eval's; a no-op outside the main thread (where signals cannot be used)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def is_equiv(x1: str, x2: str) -> bool:
    """Normalised answers are equal, or their symbolic difference simplifies to 0 (5 s limit)."""
    if isinstance(x1, str) and x1 and x1 == x2:
        return True
    try:
        import sympy
        from latex2sympy2_extended import latex2sympy
    except ImportError:  # without the parser only equal strings count
        return False
    try:
        with _time_limit(5):
            return bool(sympy.simplify(latex2sympy(x1) - latex2sympy(x2)) == 0)
    except Exception:  # noqa: BLE001 - unparsable, incomparable or too slow: not equivalent
        return False


def math_gold(problem: dict[str, Any]) -> tuple[str, str]:
    """(normalised gold answer, gold text for math-verify): from the solution when there is one (hub), else from the
    bare answer (the offline MATH-500 subset)."""
    solution = problem.get("solution")
    if solution:
        boxed = last_boxed_only_string(solution)
        answer = normalize_final_answer(remove_boxed(boxed)) if boxed else ""
        return answer, solution
    answer = str(problem["answer"])
    return normalize_final_answer(answer), f"$\\boxed{{{answer}}}$"


def _math_verify(gold_text: str, completion: str) -> bool:
    from math_verify import parse, verify

    return bool(verify(gold=parse(gold_text), target=parse(completion)))


def score_math(completion: str, problem: dict[str, Any]) -> dict[str, float]:
    gold_answer, gold_text = math_gold(problem)
    answer = normalize_final_answer(get_unnormalized_answer(completion))
    exact = float(is_equiv(answer, gold_answer))
    try:
        verified = float(_math_verify(gold_text, completion))
    except Exception:  # noqa: BLE001 - math-verify's own timeouts and parse failures: not verified
        verified = 0.0
    return {"verify": verified, "exact_match": exact}


# --------------------------------------------------------------------------------------------------------------------
# HumanEval
# --------------------------------------------------------------------------------------------------------------------


def humaneval_program(completion: str, problem: dict[str, Any]) -> str:
    """lm-eval's ``build_predictions_instruct`` + ``doc_to_target``: prompt + completion (up to a fence) + tests."""
    return f"{humaneval_candidate(completion, problem)}{problem['test']}\ncheck({problem['entry_point']})\n"


def humaneval_candidate(completion: str, problem: dict[str, Any]) -> str:
    """The untrusted part of `humaneval_program`: prompt + completion (up to a fence), without the tests."""
    body = completion if completion.find("```") == -1 else completion[: completion.find("```")]
    return f"{problem['prompt']}{body}\n"


def score_humaneval(completion: str, problem: dict[str, Any], limits: SandboxLimits | None = None) -> dict[str, float]:
    """lm-eval's HumanEval verdict, decided by a judge process the completion never shares (`sandbox`).

    The candidate runs `humaneval_candidate`; the problem's tests run in the judge and call it across the boundary.
    """
    result = run_humaneval(
        humaneval_candidate(completion, problem),
        problem["test"],
        problem["entry_point"],
        limits,
        context=problem["prompt"],
    )
    return {"pass@1": float(result.passed)}


def _score_math_safely(completion: Any, problem: dict[str, Any]) -> dict[str, float]:
    """`score_math`, with anything it cannot read (a non-string, a parser crash) scoring 0."""
    try:
        return score_math(completion, problem) if isinstance(completion, str) else {"verify": 0.0, "exact_match": 0.0}
    except Exception as err:  # noqa: BLE001 - a malformed completion is a wrong answer, not a crashed run
        logger.debug("scoring a MATH completion failed: %r", err)
        return {"verify": 0.0, "exact_match": 0.0}


# --------------------------------------------------------------------------------------------------------------------
# lm-eval task hooks (named by `!function` in gapo/repro/benchmarks/tasks/*.yaml)
# --------------------------------------------------------------------------------------------------------------------


def math_process_docs(dataset: Any) -> Any:
    """The shipped subset has bare answers: give each problem the fields minerva's prompt and scoring read (a boxed
    answer stands in for the solution, so math-verify compares against ``\\boxed{answer}``)."""

    def fields(doc: dict[str, Any]) -> dict[str, Any]:
        solution = doc.get("solution") or f"$\\boxed{{{doc['answer']}}}$"
        return {"problem": doc["problem"], "solution": solution, "answer": math_gold({"solution": solution})[0]}

    return dataset.map(fields)


def math_process_results(doc: dict[str, Any], results: list[str]) -> dict[str, int]:
    """lm-eval's minerva ``process_results``: exact_match and math_verify of the one completion."""
    scores = _score_math_safely(results[0], doc)
    return {"exact_match": int(scores["exact_match"]), "math_verify": int(scores["verify"])}


def humaneval_process_results(doc: dict[str, Any], results: list[str]) -> dict[str, int]:
    """pass@1 of the one completion, judged in the sandbox (`score_humaneval`); the sandbox refusing to run without
    isolation propagates (it is not a wrong answer)."""
    return {"pass@1": int(score_humaneval(results[0], doc)["pass@1"])}
