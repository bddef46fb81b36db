"""perf/backend_speed.py on CPU: the harness times real `gapo train` steps in a child process per backend, marks each
phase in the child's log, and reports a backend that fails or runs past its timeout without losing the others."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from perf import backend_speed

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--model", "tiny-random", "--num_generations", "4", "--max_completion_length", "4", "--lora_r", "4"]
CMD = [sys.executable, "-m", "perf.backend_speed", *TINY, "--steps", "2", "--warmup", "1"]


def test_backend_speed_times_peft_steps_after_refusing_unsloth_without_cuda(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    run = subprocess.run(
        [*CMD, "--backends", "unsloth,peft", "--timeout", "600", "--json_out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    # Unsloth is refused in gapo train's one line; PEFT is still measured, and the exit status says one failed
    assert run.returncode == 2, run.stderr[-2000:]
    refusal = "gapo: error: backend 'unsloth' needs a CUDA GPU; use --backend peft (or auto) on this machine"
    assert run.stderr.strip().splitlines()[-1] == f"backend_speed: unsloth failed (1): {refusal}"
    results = json.loads(out.read_text())["results"]
    assert results["unsloth"]["error"] == refusal and results["unsloth"]["phase"] == "process start (unsloth)"
    peft = results["peft"]
    assert len(peft["step_times"]) == 3 and peft["median_step_s"] > 0 and peft["device"] == "cpu"
    assert peft["rollouts_per_s"] == 4 / peft["median_step_s"] and peft["peak_gpu_memory_gib"] is None
    assert len(peft["rewards"]) == 3
    assert peft["static_cache_generation"] is False  # GAPOConfig's CPU default, as a user gets it
    assert f"median step {peft['median_step_s']:.3f} s" in run.stdout and peft["process_wall_s"] > 0
    log = (tmp_path / "backend_speed.peft.log").read_text()
    assert "backend: peft" in log  # the child's stderr, kept
    # the phase markers, in order, from the log and in the result
    names = [name for _, name in peft["phases"]]
    assert names[:5] == [
        "process start (peft)",
        "imports done (backend active, trl and gapo.trainer imported)",
        "model load start",
        "model loaded",
        "trainer built",
    ]
    steps = [n.split(" (")[0] for n in names[5:-2]]
    assert steps == ["step 1 start", "step 1 end", "step 2 start", "step 2 end", "step 3 start", "step 3 end"]
    assert names[-2:] == ["training done", "adapter saved"]
    seconds = [t for t, _ in peft["phases"]]
    assert seconds == sorted(seconds) and 0 <= seconds[0] and seconds[-1] <= peft["process_wall_s"]
    assert [list(p) for p in backend_speed.phases(tmp_path / "backend_speed.peft.log")] == peft["phases"]


#: A backend's process that loads, starts a worker (as torch's compile workers are) and stalls in its first step.
STALLED = """
import faulthandler, signal, subprocess, sys, time
sys.path.insert(0, {root!r})
from perf.backend_speed import phase
faulthandler.register(signal.SIGUSR1, all_threads=True)
phase("model loaded")
worker = subprocess.Popen(["sleep", "120"])
open({pid_file!r}, "w").write(str(worker.pid))
phase("step 1 start")
time.sleep(120)
"""


def test_a_backend_past_its_timeout_leaves_its_phase_and_stacks_and_its_process_group_goes(tmp_path: Path) -> None:
    log = tmp_path / "stalled.log"
    worker_pid = tmp_path / "worker"
    child = [sys.executable, "-c", STALLED.format(root=str(ROOT), pid_file=str(worker_pid))]
    code, stdout, wall = backend_speed.run_backend(child, log, timeout=8)
    assert code is None and stdout == "" and 8 <= wall < 30
    assert [name for _, name in backend_speed.phases(log)] == ["model loaded", "step 1 start"]
    assert "most recent call first" in log.read_text()  # faulthandler: where it was when stopped
    pid = int(worker_pid.read_text())
    for _ in range(50):  # killed with its group (it may stay a zombie a moment, until it is reaped)
        if _gone(pid):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the backend's worker process outlived its timeout")


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except FileNotFoundError:
        return True


def test_timeout_is_reported_with_the_phase_reached(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    run = subprocess.run(
        [*CMD, "--backends", "peft", "--timeout", "2", "--json_out", str(out)], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 2
    peft = json.loads(out.read_text())["results"]["peft"]
    assert peft["timed_out"] is True and peft["process_wall_s"] < 30
    assert peft["phase"] in ("not started", *(name for _, name in peft["phases"]))
    assert f"peft stopped at its 2 s timeout in phase '{peft['phase']}'" in run.stderr.strip().splitlines()[-1]
    refused = subprocess.run([*CMD, "--timeout", "0"], cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].endswith(
        "--timeout must be > 0 seconds, got 0.0"
    )


def test_a_stopped_driver_writes_the_phase_reached_and_leaves_no_backend_running(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    driver = subprocess.Popen(
        [*CMD, "--backends", "peft", "--json_out", str(out)], cwd=ROOT, stderr=subprocess.PIPE, text=True
    )
    log = tmp_path / "backend_speed.peft.log"
    for _ in range(300):  # until the backend's process has marked its start
        if backend_speed.phases(log):
            break
        time.sleep(0.1)
    driver.terminate()  # as an outer `timeout` does
    assert driver.wait(timeout=60) == 128 + 15
    peft = json.loads(out.read_text())["results"]["peft"]
    assert peft["stopped"] is True and peft["phase"] == peft["phases"][-1][1]
    children = [p for p in Path("/proc").glob("[0-9]*/cmdline") if _cmdline_has(p, str(out))]
    assert not children, "the backend's process outlived its driver"


def _cmdline_has(path: Path, text: str) -> bool:
    try:
        return text in path.read_bytes().decode(errors="replace")
    except OSError:
        return False
