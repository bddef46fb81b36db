"""Run model-written code (HumanEval) in a separate, limited process, and judge it from a process it cannot reach.

Layers, from the outside in (`_sandbox_child.py` does the inner ones):

    gapo process: reads the verdict from a pipe that only the supervisor holds
      └─ python -I -S _sandbox_child.py: the supervisor and judge. Fresh interpreter, own session, minimal
         │  environment; new network / mount / PID namespaces (no network; every mount read-only except the work
         │  directory); non-dumpable, so processes without CAP_SYS_PTRACE cannot trace or read it. It runs the
         │  trusted tests, which reach the candidate's function only through a pipe, as data
         └─ candidate process (PID 1 of its namespace: everything it starts dies with it); holds nothing but its two
               pipes; privileges dropped (root -> nobody), rlimits (CPU s, address space, file size, processes,
               open files), Python guard; executes the program, then answers calls

`run_humaneval` is what scoring uses: the pass verdict is ``check(candidate)`` returning in the judge, with results
decoded into builtin values, so nothing the candidate prints, exits with, or finds in its own memory can make it pass,
and an object whose ``__eq__`` is always True compares as an opaque value equal only to itself. The candidate never
holds the tests either (they are read after it is forked), so it cannot answer from them. `run_program` runs a whole
program and reports whether it ran to the end; that is the program's own claim, so use it for code you trust to
report honestly (examples, tests of the limits), not to score a model.

Without the three namespaces (a kernel that refuses them to this user) the program would run with this user's rights
behind rlimits and a Python guard that ctypes walks around; then both functions raise `SandboxUnavailableError`
unless the caller passes ``allow_unsandboxed_execution=True`` or sets ``GAPO_ALLOW_UNSANDBOXED_EXECUTION=1``. The
isolation in force is logged once per process (one line) and returned in `ExecutionResult.isolation`.

Example:

    >>> run_program("assert sum([1, 2]) == 3").passed
    True
    >>> run_humaneval("def inc(x):\\n    return x + 1\\n", "def check(f):\\n    assert f(1) == 2\\n", "inc").passed
    True
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

logger = logging.getLogger(__name__)

CHILD = Path(__file__).with_name("_sandbox_child.py")
#: Environment variable that opts in to running model code without namespaces (the risk is in the name).
ALLOW_UNSANDBOXED_ENV = "GAPO_ALLOW_UNSANDBOXED_EXECUTION"
#: Seconds the supervisor gets beyond the program's wall-clock limit to clean up and report before it is killed.
GRACE_S = 5.0

Status = Literal["passed", "failed", "timeout"]


class SandboxUnavailableError(RuntimeError):
    """The machine cannot isolate model code and the caller did not accept running it unsandboxed."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one program run."""

    timeout_s: float = 10.0
    """Wall-clock seconds before the supervisor kills the program (an infinite loop, a sleep)."""
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
    """Exit status of the program process when it ended by itself; None when the sandbox ended it."""
    detail: str = ""
    """The judge's reason, then the tail of the program's stderr (which the program controls: for people only)."""
    isolation: tuple[str, ...] = field(default_factory=tuple)
    """The layers the supervisor put in place, as it reports them (see `describe_isolation`)."""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def describe_isolation(isolation: tuple[str, ...]) -> str:
    """One line for people: which isolation ran the model's code."""
    if not isolation:
        return "HumanEval sandbox: not started"
    if "UNSANDBOXED" in isolation:
        return (
            "HumanEval sandbox: NO namespaces (allow_unsandboxed_execution): model code runs with this user's rights "
            f"behind rlimits and a Python guard only [{', '.join(isolation)}]"
        )
    return f"HumanEval sandbox: isolation in force: {', '.join(isolation)}"


_announced: set[tuple[str, ...]] = set()
_announce_lock = threading.Lock()


def _announce(isolation: tuple[str, ...]) -> None:
    """Log the isolation once per process (and again if it ever changes)."""
    with _announce_lock:
        if not isolation or isolation in _announced:
            return
        _announced.add(isolation)
    level = logging.WARNING if "UNSANDBOXED" in isolation else logging.INFO
    logger.log(level, describe_isolation(isolation))


def unsandboxed_allowed(allow_unsandboxed_execution: bool | None = None) -> bool:
    """The explicit argument, else the GAPO_ALLOW_UNSANDBOXED_EXECUTION environment variable (1/true/yes)."""
    if allow_unsandboxed_execution is not None:
        return bool(allow_unsandboxed_execution)
    return os.environ.get(ALLOW_UNSANDBOXED_ENV, "").strip().lower() in ("1", "true", "yes")


def _refusal(reason: str) -> SandboxUnavailableError:
    return SandboxUnavailableError(
        f"refusing to run model-written code: {reason}; run as root or enable unprivileged user namespaces "
        f"(sysctl kernel.unprivileged_userns_clone=1), or accept the risk with allow_unsandboxed_execution=True "
        f"or {ALLOW_UNSANDBOXED_ENV}=1"
    )


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


def _read_available(fd: int, limit: int = 1 << 16) -> bytes:
    """What the (now dead) supervisor left in the verdict pipe, without blocking on a writer that might remain."""
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    while sum(map(len, chunks)) < limit:
        try:
            chunk = os.read(fd, limit)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _parse_verdict(data: bytes, key: str) -> dict | None:
    """The supervisor's verdict, or None. Only the supervisor holds the verdict pipe; the key (which it reads after
    the candidate is forked) also rejects a message planted by a process that reopened the pipe through /proc, which
    only an unsandboxed run allows. A refusal needs no key: it can only stop a run, never pass one."""
    try:
        verdict = json.loads(data)
    except ValueError:
        return None
    if not isinstance(verdict, dict) or verdict.get("status") not in ("passed", "failed", "timeout", "refused"):
        return None
    if verdict["status"] != "refused" and not hmac.compare_digest(str(verdict.get("key", "")), key):
        return None
    return verdict


def _force_rmtree(path: Path) -> None:
    """Remove the run directory even when the program made parts of it read-only. Only directories are chmod-ed (with
    no symlinks followed): the program may have planted a link to a file of the user's."""

    def retry(func, failed, _exc):  # noqa: ANN001, ANN202
        try:
            for path in (os.path.dirname(failed), failed):
                if stat.S_ISDIR(os.lstat(path).st_mode):
                    os.chmod(path, stat.S_IRWXU)
            func(failed)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry)


def _execute(
    program: str,
    limits: SandboxLimits | None,
    *,
    entry_point: str | None,
    tests: dict[str, str],
    namespaces: bool,
    allow_unsandboxed_execution: bool | None,
) -> ExecutionResult:
    """Start the supervisor, hand it the program (settings first, tests after them on stdin) and read its verdict."""
    limits = limits or SandboxLimits()
    allowed = unsandboxed_allowed(allow_unsandboxed_execution)
    if not namespaces and not allowed:
        raise _refusal("namespaces were switched off")
    for name, value in (("program", program), *tests.items(), ("entry point", entry_point or "")):
        if not isinstance(value, str):
            return ExecutionResult("failed", None, f"not a {name}: {type(value).__name__}")
    start = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="gapo-sandbox-"))
    verdict_r, verdict_w = os.pipe()
    try:
        os.chmod(root, 0o711)  # traversable (not listable) by the unprivileged program user
        work = root / "work"
        work.mkdir(mode=0o700)
        (work / "program.py").write_text(program, encoding="utf-8", errors="surrogatepass")
        (root / "python").mkdir(mode=0o755)
        os.chmod(work / "program.py", 0o644)  # the child hands `work` to nobody when it drops root
        settings = {
            "work": str(work),
            "program": "program.py",
            "python_mount": str(root / "python"),
            "namespaces": namespaces,
            "allow_unsandboxed_execution": allowed,
            "entry_point": entry_point,
            "verdict_fd": verdict_w,
            "timeout_s": limits.timeout_s,
            **{k: v for k, v in asdict(limits).items() if k != "timeout_s"},
        }
        key = secrets.token_hex(16)
        head = json.dumps(settings).encode()
        payload = b"%d\n" % len(head) + head + json.dumps({**tests, "key": key}).encode()
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
                pass_fds=(verdict_w,),
            )
            os.close(verdict_w)
            verdict_w = -1
            try:
                proc.communicate(payload, timeout=limits.timeout_s + GRACE_S)
            except subprocess.TimeoutExpired:
                pass  # the supervisor did not finish: no verdict, so not a pass
            finally:
                _kill_group(proc.pid)  # also whatever was left in the group
                proc.wait()
        verdict = _parse_verdict(_read_available(verdict_r), key)
        seconds = time.monotonic() - start
        stderr = _tail(err_path)
        if verdict is None:
            reason = f"the sandbox gave no verdict (exit {proc.returncode})"
            status: Status = "timeout" if seconds >= limits.timeout_s else "failed"
            return ExecutionResult(status, None, f"{reason}\n{stderr}"[-2000:], (), seconds)
        isolation = tuple(str(layer) for layer in verdict.get("isolation", ()))
        if verdict["status"] == "refused":
            raise _refusal(str(verdict.get("detail", "no namespaces")))
        _announce(isolation)
        detail = f"{verdict.get('detail', '')}\n{stderr}".strip()[-2000:]
        return ExecutionResult(verdict["status"], verdict.get("returncode"), detail, isolation, seconds)
    except OSError as err:  # could not even start: still a failure of this sample, not of the run
        return ExecutionResult("failed", None, f"sandbox error: {err}", (), time.monotonic() - start)
    finally:
        for fd in (verdict_r, verdict_w):
            if fd >= 0:
                os.close(fd)
        _force_rmtree(root)


def run_program(
    program: str,
    limits: SandboxLimits | None = None,
    *,
    namespaces: bool = True,
    allow_unsandboxed_execution: bool | None = None,
) -> ExecutionResult:
    """Execute `program` (Python source) in the sandbox and report whether it ran to the end without an exception.

    "Ran to the end" is reported by the program's own process, so a hostile program can fake it: score untrusted
    code with `run_humaneval`. `namespaces=False` skips the namespace layers (what a machine without them gets; it
    needs `allow_unsandboxed_execution`); tests use it to show what the rlimits and the guard alone contain.
    """
    return _execute(
        program,
        limits,
        entry_point=None,
        tests={},
        namespaces=namespaces,
        allow_unsandboxed_execution=allow_unsandboxed_execution,
    )


def run_humaneval(
    program: str,
    test: str,
    entry_point: str,
    limits: SandboxLimits | None = None,
    *,
    context: str = "",
    namespaces: bool = True,
    allow_unsandboxed_execution: bool | None = None,
) -> ExecutionResult:
    """Pass when the trusted `test` (which defines ``check(candidate)``) accepts the function `entry_point` of the
    untrusted `program`.

    `program` (the prompt and the model's completion) runs in the candidate process. `context` (the problem's prompt:
    helpers such as HumanEval/32's ``poly``) and `test` run in the judge, with ``candidate`` (and the name
    `entry_point`) bound to a stand-in that calls the candidate's function in its process; arguments and results
    travel as builtin values. That is lm-eval's program (prompt + completion + test + ``check(entry_point)``) with
    two differences only hostile code notices: the tests use the prompt's helpers, not ones the completion redefines,
    and results are compared as builtin values, not through the candidate's own ``__eq__``.
    """
    return _execute(
        program,
        limits,
        entry_point=entry_point,
        tests={"test": test, "context": context},
        namespaces=namespaces,
        allow_unsandboxed_execution=allow_unsandboxed_execution,
    )
