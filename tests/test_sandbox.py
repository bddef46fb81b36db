"""The HumanEval sandbox contains what model-written code can do by accident: loops, fork bombs, writes and deletes
outside its directory, network access; and a correct solution still passes.

Every containment test runs twice: with the namespace layers (what this project's machines give) and without them
(rlimits and the Python guard only, what a machine that refuses namespaces gets).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from gapo.benchmarks.sandbox import SandboxLimits, run_program

FAST = SandboxLimits(timeout_s=5, cpu_seconds=3)


@pytest.fixture(params=[True, False], ids=["namespaces", "guard-only"])
def namespaces(request) -> bool:
    return request.param


@pytest.fixture
def outside():
    """A world-writable file in a world-writable directory outside the sandbox, so that file permissions alone would
    not protect it: only the sandbox's layers do."""
    directory = Path(tempfile.mkdtemp(prefix="gapo-outside-"))
    os.chmod(directory, 0o777)
    path = directory / "precious.txt"
    path.write_text("untouched")
    os.chmod(path, 0o666)
    yield path
    shutil.rmtree(directory, ignore_errors=True)


def _sandbox_processes() -> int:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return sum("_sandbox_child.py" in line for line in out.splitlines())


def test_correct_solution_passes(namespaces):
    program = (
        "import math, re, collections.abc, random\n"
        "def add(a, b):\n    return a + b\n"
        "open('scratch.txt', 'w').write('ok')  # writing inside the work directory is allowed\n"
        "assert open('scratch.txt').read() == 'ok'\n"
        "assert add(2, 3) == 5\n"
    )
    result = run_program(program, FAST, namespaces=namespaces)
    assert result.passed, result


def test_failing_assertion_fails(namespaces):
    result = run_program("def add(a, b):\n    return a * b\nassert add(2, 3) == 5\n", FAST, namespaces=namespaces)
    assert result.status == "failed"
    assert "AssertionError" in result.detail


def test_infinite_loop_is_stopped(namespaces):
    start = time.monotonic()
    result = run_program("while True:\n    pass\n", SandboxLimits(timeout_s=3, cpu_seconds=1), namespaces=namespaces)
    assert not result.passed
    assert time.monotonic() - start < 10
    assert _sandbox_processes() == 0


def test_sleep_hits_the_wall_clock_timeout(namespaces):
    result = run_program("import time\ntime.sleep(60)\n", SandboxLimits(timeout_s=1), namespaces=namespaces)
    assert result.status == "timeout"


@pytest.mark.parametrize(
    "bomb",
    [
        "import os\nwhile True:\n    os.fork()\n",
        # around the guard: a fresh posix module; the process limit / PID namespace must hold
        "import sys\ndel sys.modules['posix']\nimport posix\nwhile True:\n    posix.fork()\n",
        "import subprocess, sys\nwhile True:\n    subprocess.Popen([sys.executable, '-c', 'pass'])\n",
    ],
    ids=["os.fork", "posix.fork", "subprocess"],
)
def test_fork_bomb_is_contained(namespaces, bomb):
    if "posix" in bomb and os.geteuid() == 0:
        layers = run_program("pass", FAST, namespaces=namespaces).isolation
        if "uid-nobody" not in layers:
            pytest.skip(f"root is exempt from RLIMIT_NPROC and only the guard stops forks here ({layers})")
    start = time.monotonic()
    result = run_program(bomb, SandboxLimits(timeout_s=5, max_processes=8), namespaces=namespaces)
    assert not result.passed
    assert time.monotonic() - start < 15
    time.sleep(0.2)
    assert _sandbox_processes() == 0  # nothing it started survives


@pytest.mark.parametrize(
    "attack",
    [
        "open({path!r}, 'w').write('overwritten')",
        "import pathlib\npathlib.Path({path!r}).write_text('overwritten')",
        "import os\nos.remove({path!r})",
        "import shutil, os\nshutil.rmtree(os.path.dirname({path!r}))",
        "import os\nos.rename({path!r}, {path!r} + '.moved')",
        "import os\nfd = os.open({path!r}, os.O_WRONLY | os.O_TRUNC)\nos.write(fd, b'x')",
        "import os\nos.system('rm -f ' + {path!r})",
    ],
    ids=["open", "pathlib", "remove", "rmtree", "rename", "os.open", "system"],
)
def test_write_or_delete_outside_is_blocked(namespaces, outside, attack):
    result = run_program(attack.format(path=str(outside)), FAST, namespaces=namespaces)
    assert not result.passed
    assert outside.read_text() == "untouched"
    assert sorted(p.name for p in outside.parent.iterdir()) == ["precious.txt"]


def test_low_level_write_outside_is_blocked_by_the_filesystem(outside):
    """Around the Python guard (a fresh _io): only the read-only mount namespace stops this one."""
    attack = f"import sys\ndel sys.modules['posix']\nimport posix\nposix.unlink({str(outside)!r})"
    result = run_program(attack, FAST, namespaces=True)
    if "read-only-fs" not in result.isolation:
        pytest.skip(f"no mount namespace on this machine: {result.isolation}")
    assert not result.passed
    assert outside.read_text() == "untouched"


def test_network_is_unreachable(namespaces):
    program = (
        "import sys\nsys.modules.pop('socket', None)\nimport _socket\n"
        "s = _socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', 9))\n"
    )
    plain = "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=2)\n"
    assert not run_program(plain, FAST, namespaces=namespaces).passed
    if namespaces:
        result = run_program(program, FAST, namespaces=True)
        assert not result.passed
        if "no-network" in result.isolation:
            assert "unreachable" in result.detail or "Errno" in result.detail


def test_early_exit_is_not_a_pass(namespaces):
    assert not run_program("import os\nos._exit(0)\n", FAST, namespaces=namespaces).passed
    assert not run_program("import sys\nsys.exit(0)\n", FAST, namespaces=namespaces).passed


def test_memory_and_output_limits(namespaces):
    assert not run_program("x = bytearray(8 << 30)\n", FAST, namespaces=namespaces).passed
    flood = "import sys\nfor _ in range(1000):\n    sys.stdout.write('x' * (1 << 20))\n"
    assert not run_program(flood, SandboxLimits(timeout_s=10, file_size_bytes=1 << 20), namespaces=namespaces).passed


def test_bad_input_is_a_failure_not_a_crash():
    assert not run_program("def broken(:\n", FAST).passed
    assert not run_program(None, FAST).passed  # type: ignore[arg-type]
    assert not run_program("\udcff = 1", FAST).passed
