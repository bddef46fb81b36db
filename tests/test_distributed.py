"""Two CPU processes (torchrun, gloo): every group reward call gets one whole group, and the rewards equal those
computed on whole groups by a single process, although stock TRL splits each group of 4 into halves of 2."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gapo.rewards import frequency_aware_rewards

SCRIPT = Path(__file__).parent / "dist" / "two_process_rewards.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(900)
def test_two_processes_see_whole_groups(tmp_path):  # noqa: ANN001
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(SCRIPT),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world_size"] == 2 for r in ranks)

    # Stock TRL path (per-completion function): each process sees half a group.
    for r in ranks:
        assert r["per_completion_sizes"] == [2, 2]
        assert all(step["local_rows"] == 2 for step in r["steps"])
    # GAPO: the group reward runs on the main process, once per whole group of 4 with a single prompt.
    assert ranks[0]["group_calls"] == [{"size": 4, "distinct_prompts": 1}] * 2
    assert ranks[1]["group_calls"] == []
    # Both processes hold the same global rewards, equal to the single-process computation on whole groups.
    for step0, step1 in zip(ranks[0]["steps"], ranks[1]["steps"], strict=True):
        assert step0["rewards"] == step1["rewards"]
        assert step0["answers"] == step1["answers"]
        expected = frequency_aware_rewards(step0["answers"], step0["items"][0])
        assert step0["rewards"] == pytest.approx(expected)
