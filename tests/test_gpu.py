"""GPU runs (skipped on CPU): GAPO through Unsloth and through PEFT, each in its own process on tiny-random.

Each must train (every LoRA tensor moves), call the group reward on whole groups only, and log which backend ran.
Unsloth is expected to pass: its first step used to fail in Unsloth's compiled loss, whose cause and fix are in
docs/gpu.md (checked on CPU by tests/test_unsloth_seam.py); under Unsloth, generation is Unsloth's own (no static
cache of ours).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gapo import backends

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("backend", ["peft", "unsloth"])
def test_backend_trains_with_whole_groups(backend, tmp_path):  # noqa: ANN001
    if backend == "unsloth" and not backends.installed("unsloth"):
        pytest.skip("unsloth is not installed (pip install -e '.[gpu]')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/gpu/train_backend.py"), backend, "tiny-random", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["backend"] == backend
    assert f"backend: {backend}" in proc.stderr
    assert result["group_sizes"] == [8] and result["groups_scored"] >= 6
    assert result["lora_tensors"] > 0 and result["lora_tensors_changed"] == result["lora_tensors"]
    if backend == "peft":
        assert result["cache_implementation"] == "static" and result["static_cache_generation"] is True
    else:
        assert result["static_cache_generation"] is False and result["shared_prompt_forward"] is False
