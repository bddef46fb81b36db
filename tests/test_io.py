"""gapo.io: atomic writes leave the old content or the new one, never a temp file, and honour the umask."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gapo import io


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def test_writers_round_trip(tmp_path: Path) -> None:
    assert io.write_text_atomic(tmp_path / "a" / "t.txt", "x\r\ny\n").read_bytes() == b"x\r\ny\n"  # newlines as given
    assert json.loads(io.write_json_atomic(tmp_path / "c.json", {"k": "é"}).read_text(encoding="utf-8")) == {"k": "é"}
    records = ({"i": i} for i in range(3))  # a generator is streamed
    lines = io.write_jsonl_atomic(tmp_path / "d.jsonl", records).read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "c.json", "d.jsonl", "t.txt"]


def test_failed_write_keeps_old_content_and_leaves_no_temp(tmp_path: Path) -> None:
    target = io.write_text_atomic(tmp_path / "out.jsonl", "old\n")

    def records():
        yield {"ok": 1}
        raise RuntimeError("generator died mid-write")

    with pytest.raises(RuntimeError, match="mid-write"):
        io.write_jsonl_atomic(target, records())
    with pytest.raises(TypeError):
        io.write_json_atomic(target, {"not json": object()})
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_file_mode_follows_umask_not_mkstemp(tmp_path: Path, umask_027: None) -> None:
    assert io.default_file_mode() == 0o640 and io.default_dir_mode() == 0o750
    assert _mode(io.write_text_atomic(tmp_path / "f.txt", "x")) == 0o640  # mkstemp alone gives 0600
    with io.atomic_path(tmp_path / "g.png") as tmp:
        tmp.write_bytes(b"png")
    assert _mode(tmp_path / "g.png") == 0o640
    with io.atomic_dir(tmp_path / "d") as tmp:
        (tmp / "x").write_text("1")
    assert _mode(tmp_path / "d") == 0o750  # mkdtemp alone gives 0700
    assert os.umask(0o027) == 0o027  # reading the umask did not change it


def test_atomic_dir_replaces_or_keeps(tmp_path: Path) -> None:
    target = tmp_path / "adapter"
    with io.atomic_dir(target) as tmp:
        (tmp / "v").write_text("1")
    with io.atomic_dir(target) as tmp:
        (tmp / "v").write_text("2")
    assert (target / "v").read_text() == "2"
    with io.atomic_dir(target, overwrite=False) as tmp:  # an existing build wins
        (tmp / "v").write_text("3")
    assert (target / "v").read_text() == "2"
    with pytest.raises(OSError), io.atomic_dir(target) as tmp:
        (tmp / "v").write_text("4")
        raise OSError("disk full")
    assert (target / "v").read_text() == "2" and [p.name for p in tmp_path.iterdir()] == ["adapter"]


def test_temp_glob_finds_what_a_killed_writer_left(tmp_path: Path) -> None:
    """A process killed inside the block cannot clean up; `temp_glob` names what it left, for the next run."""
    script = (
        "import os, sys\n"
        "from gapo import io\n"
        "with io.atomic_dir(sys.argv[1]) as tmp:\n"
        "    (tmp / 'half').write_text('x')\n"
        "    os._exit(9)\n"
    )
    target = tmp_path / "adapter"
    assert subprocess.run([sys.executable, "-c", script, str(target)]).returncode == 9
    left = list(tmp_path.glob(io.temp_glob(target)))
    assert len(left) == 1 and (left[0] / "half").exists() and not target.exists()


def test_atomic_open_refuses_append(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode must be 'w' or 'wb'"), io.atomic_open(tmp_path / "x", "a"):
        pass
    assert not list(tmp_path.iterdir())
