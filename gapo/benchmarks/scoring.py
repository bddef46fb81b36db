"""Answer extraction and scoring, as lm-evaluation-harness 0.4.13 (MIT licence) does it for the same tasks.

Every scorer takes one completion and one problem and returns ``{metric: 0.0 or 1.0}``. A completion that is not a
string, or that makes extraction or parsing fail in any way, scores 0 on every metric: a malformed answer is a wrong
answer, never an exception (`safe_score`).

- gsm8k (lm-eval task `gsm8k`): "strict-match" takes ``#### <number>``; "flexible-extract" takes the last number-like
  token; both compared by `exact_match` after stripping ``,``, ``$``, everything up to ``#### `` and a final ``.``,
  ignoring case. Table 2 calls them Exact and Flexible.
- math (lm-eval `minerva_math_*`): `exact_match` takes ``Final Answer: The final answer is X. I hope it is correct.``,
  normalises X as Lewkowycz et al. (2022, appendix D) and compares it with the gold answer: equal strings, or a
  symbolic difference that simplifies to 0. `verify` is Hugging Face's math-verify on the whole completion against
  the gold solution. One deviation: lm-eval parses LaTeX with sympy's ANTLR parser, which needs
  antlr4-python3-runtime 4.11, while dvc (hydra/omegaconf) pins 4.9; we parse with latex2sympy2_extended (the same
  grammar's maintained fork, installed by math-verify) instead. Equal strings, the common case, are unaffected.
- mmlu_pro (lm-eval `mmlu_pro`): the first ``answer is (X)`` / ``answer is X`` with X in A..J, compared with the
  gold letter ignoring case and punctuation.
- humaneval (lm-eval `humaneval_instruct`): the program is the prompt + the completion up to the first ``````` fence,
  then the tests and ``check(entry_point)``; pass@1 = it runs to the end in the sandbox.
"""

from __future__ import annotations

import logging
import re
import signal
import string
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from gapo.benchmarks.sandbox import SandboxLimits, SandboxUnavailableError, run_humaneval

logger = logging.getLogger(__name__)

INVALID = "[invalid]"

#: Metric names per benchmark, in Table 2's column order.
METRICS: dict[str, tuple[str, ...]] = {
    "gsm8k": ("exact", "flexible"),
    "math": ("verify", "exact_match"),
    "humaneval": ("pass@1",),
    "mmlu_pro": ("exact_match",),
}

# --------------------------------------------------------------------------------------------------------------------
# lm-eval's generic pieces: regex filter and exact_match
# --------------------------------------------------------------------------------------------------------------------


def regex_extract(text: str, pattern: str | re.Pattern, group_select: int = 0, fallback: str = INVALID) -> str:
    """lm-eval's RegexFilter on one response: ``findall``, pick `group_select`, first non-empty group of a tuple."""
    if not isinstance(text, str):
        text = ""
    matches = re.findall(pattern, text)
    if not matches:
        return fallback
    match = matches[group_select]
    if isinstance(match, tuple):
        match = next((m for m in match if m), fallback)
    return match.strip()


def exact_match(
    prediction: str,
    reference: str,
    *,
    regexes_to_ignore: tuple[str, ...] = (),
    ignore_case: bool = False,
    ignore_punctuation: bool = False,
) -> float:
    """lm-eval's ``exact_match_hf_evaluate`` for one pair."""
    for pattern in regexes_to_ignore:
        prediction = re.sub(pattern, "", prediction)
        reference = re.sub(pattern, "", reference)
    if ignore_case:
        prediction, reference = prediction.lower(), reference.lower()
    if ignore_punctuation:
        table = str.maketrans("", "", string.punctuation)
        prediction, reference = prediction.translate(table), reference.translate(table)
    return float(prediction == reference)


# --------------------------------------------------------------------------------------------------------------------
# GSM8K
# --------------------------------------------------------------------------------------------------------------------

GSM8K_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
GSM8K_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
GSM8K_IGNORE = (",", "\\$", "(?s).*#### ", "\\.$")


def score_gsm8k(completion: str, problem: dict[str, Any]) -> dict[str, float]:
    """Strict and flexible match against the gold ``#### N``.

    >>> score_gsm8k("5 + 13 = 18\\n#### 18", {"answer": "... \\n#### 18"})
    {'exact': 1.0, 'flexible': 1.0}
    >>> score_gsm8k("So she makes $18.", {"answer": "... \\n#### 18"})
    {'exact': 0.0, 'flexible': 1.0}
    """
    reference = problem["answer"]
    strict = regex_extract(completion, GSM8K_STRICT)
    flexible = regex_extract(completion, GSM8K_FLEXIBLE, group_select=-1)
    kw = {"regexes_to_ignore": GSM8K_IGNORE, "ignore_case": True}
    return {"exact": exact_match(strict, reference, **kw), "flexible": exact_match(flexible, reference, **kw)}


# --------------------------------------------------------------------------------------------------------------------
# MATH (minerva_math)
# --------------------------------------------------------------------------------------------------------------------


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
# MMLU-Pro
# --------------------------------------------------------------------------------------------------------------------

MMLU_PRO_ANSWER = re.compile(r"answer is \(?([ABCDEFGHIJ])\)?")


def score_mmlu_pro(completion: str, problem: dict[str, Any]) -> dict[str, float]:
    """The first ``answer is (X)`` against the gold letter.

    >>> score_mmlu_pro("... so the answer is (C).", {"answer": "C"})
    {'exact_match': 1.0}
    """
    letter = regex_extract(completion, MMLU_PRO_ANSWER)
    return {"exact_match": exact_match(letter, problem["answer"], ignore_case=True, ignore_punctuation=True)}


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
    """lm-eval's HumanEval verdict, decided by a judge process the completion never shares (gapo.benchmarks.sandbox):
    the candidate runs `humaneval_candidate`; the problem's tests run in the judge and call it across the boundary."""
    result = run_humaneval(
        humaneval_candidate(completion, problem),
        problem["test"],
        problem["entry_point"],
        limits,
        context=problem["prompt"],
    )
    return {"pass@1": float(result.passed)}


# --------------------------------------------------------------------------------------------------------------------

SCORERS: dict[str, Callable[..., dict[str, float]]] = {
    "gsm8k": score_gsm8k,
    "math": score_math,
    "mmlu_pro": score_mmlu_pro,
    "humaneval": score_humaneval,
}


def safe_score(
    benchmark: str, completion: Any, problem: dict[str, Any], **kwargs: Any
) -> tuple[dict[str, float], bool]:
    """(scores, ok). A non-string completion or any error while scoring gives 0 on every metric and ok=False."""
    zeros = dict.fromkeys(METRICS[benchmark], 0.0)
    if not isinstance(completion, str):
        return zeros, False
    try:
        scores = SCORERS[benchmark](completion, problem, **kwargs)
    except SandboxUnavailableError:
        raise  # no isolation here: a refusal to run model code, not a wrong answer
    except Exception as err:  # noqa: BLE001 - a malformed completion is a wrong answer, not a crashed run
        logger.debug("scoring %s %s failed: %r", benchmark, problem.get("id"), err)
        return zeros, False
    return {k: float(scores.get(k, 0.0)) for k in METRICS[benchmark]}, True
