"""perf/backend_speed.py on CPU: the harness times real `gapo train` steps in a child process per backend."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--model", "tiny-random", "--num_generations", "4", "--max_completion_length", "4", "--lora_r", "4"]


def test_backend_speed_times_peft_steps_and_refuses_unsloth_without_cuda(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    cmd = [sys.executable, "-m", "perf.backend_speed", *TINY, "--steps", "2", "--warmup", "1"]
    run = subprocess.run([*cmd, "--backends", "peft", "--json_out", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    peft = json.loads(out.read_text())["results"]["peft"]
    assert len(peft["step_times"]) == 3 and peft["median_step_s"] > 0 and peft["device"] == "cpu"
    assert peft["static_cache_generation"] is False  # GAPOConfig's CPU default, as a user gets it
    assert f"median step {peft['median_step_s']:.3f} s" in run.stdout and peft["process_wall_s"] > 0
    assert "backend: peft" in (tmp_path / "backend_speed.peft.log").read_text()  # the child's stderr, kept
    refused = subprocess.run([*cmd, "--backends", "unsloth"], cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "backend_speed: unsloth failed (1): gapo: error: backend 'unsloth' needs a CUDA GPU; "
        "use --backend peft (or auto) on this machine"
    )
