"""gapo.repro.provenance: the environment written beside a result, read from the real machine and checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch

from gapo.repro.provenance import PACKAGES, cpu_description, environment, git_state

REPO = Path(__file__).resolve().parents[1]

EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9999 (another block: not read)
flags\t\t: fpu
"""


def test_the_cpu_is_named_with_its_family_model_and_bfloat16_units() -> None:
    assert cpu_description(EPYC) == "AMD EPYC (family 25, model 17; avx512_bf16)"
    no_bf16 = EPYC.replace(" avx512_bf16", "")
    assert cpu_description(no_bf16) == "AMD EPYC (family 25, model 17; no bf16 units)"
    amx = "model name\t: Intel Xeon\nflags\t: avx512f amx_bf16 amx_tile avx512_bf16\n"
    assert cpu_description(amx) == "Intel Xeon (avx512_bf16, amx_bf16, amx_tile)"
    assert cpu_description("processor\t: 0\nBogoMIPS\t: 50.00\n") is None  # some ARM kernels name no model
    assert cpu_description("") is None


def test_the_environment_is_this_process_and_this_checkout(tmp_path: Path) -> None:
    env = environment()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert env["git"]["commit"] == head and isinstance(env["git"]["changed"], bool)
    assert set(env["packages"]) == set(PACKAGES) and env["packages"]["torch"] == torch.__version__
    assert env["torch_threads"] == torch.get_num_threads()
    assert env["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert (env["gpu"] is None) == (not torch.cuda.is_available())
    if Path("/proc/cpuinfo").is_file():
        assert env["cpu"] == cpu_description(Path("/proc/cpuinfo").read_text())
    assert git_state(tmp_path) is None  # not a checkout: no commit to name


def test_a_changed_tracked_file_is_reported(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    (tmp_path / "untracked.txt").write_text("not counted\n")
    assert git_state(tmp_path)["changed"] is False  # an untracked file is not a change to the code
    (tmp_path / "a.txt").write_text("two\n")
    state = git_state(tmp_path)
    assert state["changed"] is True and len(state["commit"]) == 40
