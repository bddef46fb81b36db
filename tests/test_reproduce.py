"""`make reproduce PROFILE=smoke` from a fresh clone: it builds its own .venv, runs every stage of the smoke profile in
runs/profiles/smoke/ and leaves every tracked file as it was (the committed embedded results, dvc.lock, params.yaml).

The clone is made from this repository's HEAD, so the test checks what is committed. Slow: the .venv build (about 4
minutes with a warm pip cache) and the smoke pipeline (about 5 minutes on 2 cores). Marked `reproduce`: `make test`
leaves it out to stay within its 20 minutes, and CI runs it next (`make test-reproduce`, .ci/run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: What the smoke run must leave in its own folder: one file of each kind the stages write.
SMOKE_OUTPUTS = (
    "data/train.jsonl",
    "models/gapo/tiny-random/adapter_config.json",
    "metrics/uniformity.json",
    "metrics/benchmarks.json",
    "figures/fig4_uniformity.png",
    "results/results_table.md",
    "metrics/stage_times.json",
    "dvc.lock",
)


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.mark.slow
@pytest.mark.reproduce
@pytest.mark.timeout(2400)
@pytest.mark.skipif(not (REPO / ".git").exists() or shutil.which("make") is None, reason="needs a git checkout, make")
def test_make_reproduce_smoke_passes_in_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "gapo"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # only the clone's .venv
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    env["MPLBACKEND"] = "Agg"
    make = subprocess.run(
        ["make", "reproduce", "PROFILE=smoke"], cwd=clone, env=env, capture_output=True, text=True, timeout=2300
    )
    assert make.returncode == 0, make.stdout[-6000:] + make.stderr[-4000:]
    assert _git("status", "--porcelain", "--untracked-files=no", cwd=clone) == ""  # no tracked file changed
    workspace = clone / "runs" / "profiles" / "smoke"
    assert [p for p in SMOKE_OUTPUTS if not (workspace / p).exists()] == []
    assert not (workspace / "gapo").exists() and (workspace / "dvc.yaml").is_symlink()  # no source copy
    assert json.loads((workspace / "metrics" / "uniformity.json").read_text(encoding="utf-8"))["profile"] == "smoke"
    # The stages ran the clone's installed gapo: the executed notebooks' dvc.lock code deps are the clone's files.
    lock = (workspace / "dvc.lock").read_text(encoding="utf-8")
    assert "../../../gapo/repro/profiles.py" in lock
    assert (
        "up to date"
        in subprocess.run(
            [str(clone / ".venv" / "bin" / "dvc"), "status"], cwd=workspace, env=env, capture_output=True, text=True
        ).stdout
    )
