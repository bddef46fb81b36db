"""The `gpu` extra resolves together with the core pins (metadata only: pip's resolver, no wheels installed).

Why a test: the GPU stack (Unsloth, vLLM) pins torch, transformers, trl and datasets tightly, and our own pins once
made `pip install -e '.[gpu]'` impossible. This asks pip to resolve `.[gpu]` on this machine (torch 2.13.0 as the
Makefile installs it; CUDA's own libraries are torch's requirements, not ours) and fails on any conflict. It needs
the package index (PyPI), like `make test`'s install.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    """name -> exact version of every `==` requirement in pyproject.toml (core and the gpu extra)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    out = {}
    for req in [*project["dependencies"], *project["optional-dependencies"]["gpu"]]:
        if "==" in req:
            name, version = req.split("==")
            out[name.split("[")[0].strip().lower().replace("_", "-")] = version.strip()
    return out


@pytest.mark.timeout(900)
def test_gpu_extra_resolves_with_the_pins(tmp_path):  # noqa: ANN001
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--quiet",
            "--ignore-installed",
            "--report",
            str(report),
            "torch==2.13.0",
            f"{ROOT}[gpu]",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=880,
    )
    assert proc.returncode == 0, f"`.[gpu]` does not resolve with the pins:\n{proc.stderr[-4000:]}"
    resolved = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    for name, version in pins().items():
        assert resolved.get(name) == version, f"{name}: pinned {version}, resolved {resolved.get(name)}"
    for name in ("unsloth", "unsloth-zoo", "vllm", "torch", "transformers", "trl", "datasets"):
        assert name in resolved, f"{name} missing from the resolution"
