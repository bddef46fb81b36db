"""Does a code change leave training unchanged? Train a few `gapo train` steps at a git revision and in the working
tree, with the same seeded LoRA init, and compare the adapters bit for bit and the logged metrics value for value.

    python tools/same_training.py REV                       # 3 steps of params.yaml's run (the embedded model)
    python tools/same_training.py REV --steps 2 -- --no-params --model tiny-random   # flags after -- go to gapo train

Why: a change to a stage's code dep invalidates dvc.lock, and the embedded pipeline takes two hours to rerun. A change
that moves code without changing what runs (a refactor) leaves every output as it was; this is the evidence for
recording the new code with `dvc commit` (docs/layout.md), as `tools/house.py --code-changed-since` is for prose-only
changes. It checks the training path only: a change to sampling or evaluation code needs its own check, or the rerun.

Each side runs in its own tree (REV in a temporary `git worktree`), so `python -c` imports that tree's gapo and reads
that tree's params.yaml. The LoRA init is seeded by calling `transformers.set_seed(--seed)` just before
`gapo.backends.load_policy` (TRL builds the PEFT model before its own `set_seed`). Exit 0: the same; 1: they differ;
2: a run failed.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Logged keys that measure time, not training: left out of the comparison.
TIMING_KEYS = ("time", "step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second")

#: Run in a tree's root (`python -c` puts the working directory first on sys.path, so that tree's gapo is imported).
RUNNER = """
import sys, transformers, gapo.backends as backends
load_policy = backends.load_policy
def seeded(*args, **kwargs):
    transformers.set_seed({seed})
    return load_policy(*args, **kwargs)
backends.load_policy = seeded
from gapo.cli import main
sys.exit(main(sys.argv[1:]))
"""


def train(tree: Path, out: Path, steps: int, seed: int, flags: list[str]) -> None:
    """`gapo train` for `steps` steps from `tree`'s code and params, seeded, into `out`; raises on failure."""
    cmd = [sys.executable, "-c", RUNNER.format(seed=seed), "train", "--max-steps", str(steps)]
    cmd += ["--save-steps", str(steps + 1), "--output-dir", str(out), *flags]
    run = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    if run.returncode != 0:
        tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"gapo train in {tree} exited {run.returncode}: {tail[0]}")


def adapter_differences(a: Path, b: Path) -> list[str]:
    """The tensors of two saved adapters that are not bit-identical (or exist on one side only)."""
    import torch
    from safetensors.torch import load_file

    left, right = load_file(a / "adapter_model.safetensors"), load_file(b / "adapter_model.safetensors")

    def same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
        return x.dtype == y.dtype and x.shape == y.shape and torch.equal(x.view(torch.uint8), y.view(torch.uint8))

    names = sorted(set(left) | set(right))
    return [n for n in names if n not in left or n not in right or not same_bits(left[n], right[n])]


def metric_differences(a: Path, b: Path) -> list[str]:
    """`step N: key` for every logged value (timings left out) that differs between two runs' metrics.jsonl."""
    from gapo.io import read_jsonl

    rows = [read_jsonl(path) for path in (a, b)]
    if len(rows[0]) != len(rows[1]):
        return [f"{len(rows[0])} logged rows against {len(rows[1])}"]
    found = []
    for left, right in zip(*rows, strict=True):
        for key in sorted((set(left) | set(right)) - set(TIMING_KEYS)):
            x, y = left.get(key), right.get(key)
            same = x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
            if not same:
                found.append(f"step {left.get('step')}: {key} {x!r} != {y!r}")
    return found


def compare(rev: str, steps: int, seed: int, flags: list[str], repo: Path = ROOT) -> list[str]:
    """Train at `rev` and in `repo`'s working tree; the differences found (empty when the same)."""
    with tempfile.TemporaryDirectory(prefix="same_training.") as tmp:
        tree = Path(tmp) / "rev"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), rev], cwd=repo, check=True)
        try:
            for side, where in (("rev", tree), ("work", repo)):
                train(where, Path(tmp) / f"out-{side}", steps, seed, flags)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=repo, check=True)
        a, b = Path(tmp) / "out-rev", Path(tmp) / "out-work"
        found = [f"adapter tensor {name}" for name in adapter_differences(a / "adapter", b / "adapter")]
        return found + metric_differences(a / "metrics.jsonl", b / "metrics.jsonl")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the git revision to compare the working tree against")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps on each side (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed set before the LoRA is built (default 0)")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        found = compare(args.rev, args.steps, args.seed, flags)
    except (RuntimeError, subprocess.CalledProcessError) as err:
        print(f"same_training: error: {err}", file=sys.stderr)
        return 2
    if found:
        print(f"training differs from {args.rev} ({len(found)}):")
        print("\n".join(f"  {line}" for line in found[:20]))
        return 1
    print(f"training unchanged since {args.rev}: {args.steps} seeded steps, the same adapter bits and logged values")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
