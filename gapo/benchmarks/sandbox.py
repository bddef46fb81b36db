"""Run model-written code (HumanEval) in a separate, limited process.

Layers, from the outside in (`_sandbox_child.py` does the inner ones):

    gapo process
      └─ python -I -S _sandbox_child.py        fresh interpreter, own session, cwd = a new temporary work directory,
         │                                     minimal environment, wall-clock timeout (the whole group is killed)
         │   new network / mount / PID namespaces: no network; every mount read-only except the work directory
         └─ program process (PID 1 of its namespace: everything it starts dies with it)
               privileges dropped (root -> nobody), rlimits: CPU s, address space, file size, processes, open files
               Python guard: destructive os/shutil calls, subprocesses, sockets, writes outside the work dir refused
               exec(program); pass = exit 0 and a line with a per-run nonce printed after the program finished

Where the kernel refuses namespaces (no root and no unprivileged user namespaces) the program still runs with the
rlimits and the guard, and `ExecutionResult.isolation` says so. Every outcome other than a clean pass (exception,
timeout, signal, limit hit, guard refusal, garbled output) is a failure; nothing here raises for a bad program.

Example:

    >>> run_program("assert sum([1, 2]) == 3").passed
    True
    >>> run_program("while True: pass", SandboxLimits(timeout_s=2, cpu_seconds=1)).status
    'timeout'
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

CHILD = Path(__file__).with_name("_sandbox_child.py")

Status = Literal["passed", "failed", "timeout"]


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one program run."""

    timeout_s: float = 10.0
    """Wall-clock seconds before the whole process group is killed (an infinite loop, a sleep)."""
    cpu_seconds: int = 10
    """RLIMIT_CPU of the program process."""
    memory_bytes: int = 1 << 30
    """RLIMIT_AS (address space) of the program process."""
    file_size_bytes: int = 16 << 20
    """RLIMIT_FSIZE: the largest file the program may write (its stdout/stderr included)."""
    max_processes: int = 16
    """RLIMIT_NPROC. Counted per user, so it bites when the program runs as nobody (the root case)."""
    max_open_files: int = 64
    """RLIMIT_NOFILE."""


@dataclass(frozen=True)
class ExecutionResult:
    """Outcome of one program run. `passed` is the only thing scoring looks at."""

    status: Status
    returncode: int | None
    detail: str = ""
    isolation: tuple[str, ...] = field(default_factory=tuple)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_program(program: str, limits: SandboxLimits | None = None, *, namespaces: bool = True) -> ExecutionResult:
    """Execute `program` (Python source) in the sandbox and report whether it ran to the end without an exception.

    `namespaces=False` skips the namespace layers (what a machine without them gets); tests use it to show that the
    rlimits and the guard alone still contain the usual accidents.
    """
    limits = limits or SandboxLimits()
    if not isinstance(program, str):
        return ExecutionResult("failed", None, f"not a program: {type(program).__name__}")
    start = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="gapo-sandbox-"))
    try:
        os.chmod(root, 0o711)  # traversable (not listable) by the unprivileged program user
        work = root / "work"
        work.mkdir(mode=0o700)
        (work / "program.py").write_text(program, encoding="utf-8", errors="surrogatepass")
        (root / "python").mkdir(mode=0o755)
        os.chmod(work / "program.py", 0o644)  # the child hands `work` to nobody when it drops root
        nonce = secrets.token_hex(16)
        cfg = {
            "work": str(work),
            "program": "program.py",
            "python_mount": str(root / "python"),
            "namespaces": namespaces,
            "nonce": nonce,
            "cpu_seconds": limits.cpu_seconds,
            "memory_bytes": limits.memory_bytes,
            "file_size_bytes": limits.file_size_bytes,
            "max_processes": limits.max_processes,
            "max_open_files": limits.max_open_files,
        }
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
        out_path, err_path = root / "stdout", root / "stderr"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(CHILD)],
                cwd=work,
                env=env,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
            timed_out = False
            try:
                proc.communicate(json.dumps(cfg).encode(), timeout=limits.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc.pid)  # also whatever the program left behind in the group
                proc.wait()
        stdout, stderr = _tail(out_path), _tail(err_path)
        isolation = tuple(
            line.removeprefix("ISOLATION: ").strip() for line in stderr.splitlines() if line.startswith("ISOLATION: ")
        )
        detail = "\n".join(line for line in stderr.splitlines() if not line.startswith("ISOLATION: "))[-2000:]
        seconds = time.monotonic() - start
        if timed_out:
            return ExecutionResult("timeout", proc.returncode, detail, isolation, seconds)
        passed = proc.returncode == 0 and stdout.rstrip().endswith(f"{nonce} PASSED")
        status: Status = "passed" if passed else "failed"
        return ExecutionResult(status, proc.returncode, detail, isolation, seconds)
    except OSError as err:  # could not even start: still a failure of this sample, not of the run
        return ExecutionResult("failed", None, f"sandbox error: {err}", (), time.monotonic() - start)
    finally:
        shutil.rmtree(root, ignore_errors=True)
