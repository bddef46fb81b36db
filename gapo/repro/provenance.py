"""What produced a result: the code's commit, the packages and the machine, written beside the numbers.

Why: the same model, lists and seed can sample differently in another environment. Seed 0's step-0 scores in
tools/list_transfer.py were 0.449 in one session and 0.468 in later ones, with no change to the scoring code between
them (docs/uniformity_diagnosis.md). Nothing recorded which venv or machine made which number, so the difference
could be dated but not traced. A run that writes `environment()` beside its results can be.

It reads what the run sees: torch's thread count and the vector kernels it dispatches to, the pinned training
packages, the CPU's model and the bfloat16 units that pick its matmul kernels (`/proc/cpuinfo`), the GPU's name, and
the git commit of the checkout (with whether tracked files were changed). Nothing here loads a model.
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

#: The packages whose versions decide what a training or a scoring computes: the training stack (pinned in
#: pyproject.toml, torch in the Makefile) and numpy (not pinned).
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "numpy")

#: CPU flags that change which bfloat16 kernels torch runs on a CPU.
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile")


def cpu_description(cpuinfo: str) -> str | None:
    """The first processor's model name, family and model numbers, and its bfloat16 flags, from `/proc/cpuinfo`'s
    text (None when it names no processor): "AMD EPYC (family 25, model 17; avx512_bf16)". A model name alone
    can hide the generation (this machine's says only "AMD EPYC"); family and model do not."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough: the others repeat it
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name")
    if not name:
        return None
    flags = set(fields.get("flags", "").split())
    numbers = ", ".join(
        f"{label} {fields[key]}" for key, label in (("cpu family", "family"), ("model", "model")) if key in fields
    )
    bf16 = ", ".join(flag for flag in BF16_FLAGS if flag in flags) or "no bf16 units"
    return f"{name} ({'; '.join(part for part in (numbers, bf16) if part)})"


def _git(where: Path, *args: str) -> str:
    """`git ARGS` run in `where`, its stripped output; raises OSError or SubprocessError where git cannot answer."""
    return subprocess.run(
        ["git", *args], cwd=where, capture_output=True, text=True, check=True, timeout=10
    ).stdout.strip()


def git_state(where: Path) -> dict[str, Any] | None:
    """The commit checked out at `where` and whether tracked files differ from it; None outside a git checkout or
    without git (an installed package)."""
    try:
        commit = _git(where, "rev-parse", "HEAD")
        changed = _git(where, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "changed": bool(changed)}


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def environment(where: Path | None = None) -> dict[str, Any]:
    """The environment this process runs in, as JSON-ready values; `where` is the checkout (default: gapo's own)."""
    import torch  # here, not at the top: importing this module stays cheap for what only reads `cpu_description`

    cpuinfo = Path("/proc/cpuinfo")
    return {
        "git": git_state(where or Path(__file__).resolve().parent),
        "python": platform.python_version(),
        "packages": {package: _version(package) for package in PACKAGES},
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),  # the vector kernels torch dispatches to
        "torch_threads": torch.get_num_threads(),
        "cpu": cpu_description(cpuinfo.read_text()) if cpuinfo.is_file() else platform.processor() or None,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }
