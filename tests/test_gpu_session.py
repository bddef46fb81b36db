"""tools/gpu_session.py on CPU, up to the device calls: packing into loads under the limit, the manifest's hashes, the
printed calls, the device side's receive/assemble/stamp run here on a copy, collect, and the one-line refusals.

Small inputs: two small wheels (built here from a tiny project, installed by `assemble` into the stage folder) and a
stand-in for the GGUF of a few MiB, packed into loads of 1 MiB so that files are cut across loads.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_session", ROOT / "tools/gpu_session.py")
gpu_session = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_session)


def build_wheel(tmp_path: Path, name: str) -> Path:
    """A real, installable wheel of a one-module project."""
    project = tmp_path / f"src-{name}"
    (project / name).mkdir(parents=True)
    (project / name / "__init__.py").write_text(f"VALUE = {name!r}\n")
    (project / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "0.1"\n'
    )
    out = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(project)],
        check=True,
    )
    return next(out.glob(f"{name}-*.whl"))


@pytest.fixture()
def payload(tmp_path):  # noqa: ANN001, ANN201
    """A prepared payload: two wheels and a 3.5 MiB "GGUF" in two source pieces, in loads of 1 MiB."""
    for name in ("gapo_probe_a", "gapo_probe_b"):
        build_wheel(tmp_path, name)
    pieces = []
    for i, size in enumerate((2 * gpu_session.MIB, 3 * gpu_session.MIB // 2)):
        piece = tmp_path / f"part{i}.bin"
        piece.write_bytes(os.urandom(size))
        pieces.append(piece)
    budget = gpu_session.MIB
    files = {f"wheels/{w.name}": [w] for w in sorted((tmp_path / "wheels").glob("*.whl"))}
    files["cache/embedded/model.gguf"] = pieces
    manifest = gpu_session.pack(files, tmp_path / "payload", budget)
    return tmp_path / "payload", manifest, pieces


def test_pack_fills_loads_under_the_budget_with_hashes(payload):  # noqa: ANN001
    folder, manifest, pieces = payload
    loads = manifest["loads"]
    assert len(loads) >= 4  # 3.5 MiB and the wheels in loads of 1 MiB
    for load in loads:
        parts = [p for p in (folder / load).iterdir() if p.name != "manifest.json"]
        assert sum(p.stat().st_size for p in parts) <= gpu_session.MIB
        assert json.loads((folder / load / "manifest.json").read_text()) == manifest
    gguf = next(f for f in manifest["files"] if f["dest"].endswith(".gguf"))
    joined = b"".join(p.read_bytes() for p in pieces)
    assert gguf["sha256"] == hashlib.sha256(joined).hexdigest() and gguf["size"] == len(joined)
    assert len({p["path"].split("/")[0] for p in gguf["parts"]}) >= 4  # cut across loads
    for part in gguf["parts"]:
        assert hashlib.sha256((folder / part["path"]).read_bytes()).hexdigest() == part["sha256"]


def test_device_side_receives_assembles_installs_and_stamps(payload, tmp_path):  # noqa: ANN001
    folder, manifest, pieces = payload
    stage = tmp_path / "stage"
    with pytest.raises(gpu_session.LimitError, match="run the receive call"):
        gpu_session.receive(manifest["loads"][0], folder, stage)
        gpu_session.assemble(stage)
    for load in manifest["loads"][1:]:
        gpu_session.receive(load, folder, stage)
    files = gpu_session.assemble(stage)
    assert (stage / "cache/embedded/model.gguf").read_bytes() == b"".join(p.read_bytes() for p in pieces)
    assert len(files) == 3
    probe = subprocess.run(
        [sys.executable, "-c", "import gapo_probe_a, gapo_probe_b; print(gapo_probe_a.VALUE)"],
        env={**os.environ, "PYTHONPATH": str(stage / "site")},
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "gapo_probe_a"
    # a part damaged in transfer is refused with one line
    part = folder / manifest["files"][-1]["parts"][0]["path"]
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(gpu_session.LimitError, match="does not match its sha256 after the transfer"):
        gpu_session.receive(part.parent.name, folder, stage)
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.json").write_text('{"x": 1}')
    (out / "b.log").write_text("step 1\n")
    jsonl, png = b'{"step": 1}\n{"step": 2}\n', b"\x89PNG\r\n\x1a\n\xff\xfe"
    (out / "curve").mkdir()
    (out / "curve" / "metrics.jsonl").write_bytes(jsonl)
    (out / "curve" / "plot.png").write_bytes(png)
    results = tmp_path / "results"
    with pytest.raises(gpu_session.LimitError, match="does not name its device"):
        gpu_session.collect(out, results)  # not stamped yet
    gpu_session.stamp(out, device="NVIDIA H100 80GB HBM3")
    gpu_session.stamp(out, device="NVIDIA H100 80GB HBM3")  # a second stamp changes nothing
    assert json.loads((out / "a.json").read_text())["device"] == "NVIDIA H100 80GB HBM3"
    assert (out / "b.log").read_text() == "# device: NVIDIA H100 80GB HBM3\nstep 1\n"
    # JSONL and binary files stay byte for byte (a first line would break them); device.txt names their device
    assert (out / "curve" / "metrics.jsonl").read_bytes() == jsonl
    assert (out / "curve" / "plot.png").read_bytes() == png
    assert (out / "device.txt").read_text() == "# device: NVIDIA H100 80GB HBM3\n"
    copied = gpu_session.collect(out, results)
    assert sorted(p.relative_to(results).as_posix() for p in copied) == [
        "a.json",
        "b.log",
        "curve/metrics.jsonl",
        "curve/plot.png",
        "device.txt",
    ]
    assert (results / "curve" / "metrics.jsonl").read_bytes() == jsonl


def test_plan_prints_calls_within_the_device_limits(payload):  # noqa: ANN001
    _, manifest, _ = payload
    calls = gpu_session.plan(manifest, "nvidia-h100-x1")
    loads = manifest["loads"]
    assert [c["carry"] for c in calls[: len(loads)]] == [[str(gpu_session.PAYLOAD / load)] for load in loads]
    assert all(len(c["command"]) <= gpu_session.COMMAND_CHARS and c["kind"] == "nvidia-h100-x1" for c in calls)
    commands = " ".join(c["command"] for c in calls)
    for needed in (
        "tests/test_gpu.py",
        "perf.step_speed",
        "qwen2.5-7b-instruct-config.json",
        "--num-generations 32",
        "--per-device-train-batch-size 256",
        "--max-steps 150",
        "stage open_set",
        "stage uniformity",
    ):
        assert needed in commands, needed
    assert all("stamp $OUT" in c["command"] for c in calls[len(loads) :])


def test_over_the_limits_is_one_line(payload, tmp_path):  # noqa: ANN001
    _, manifest, _ = payload
    with pytest.raises(gpu_session.LimitError, match="unknown machine kind 'a100'"):
        gpu_session.plan(manifest, "a100")
    with pytest.raises(gpu_session.LimitError, match="over the device's 64 MiB per call"):
        gpu_session.load_budget(ROOT, load_mib=65)
    many = {**manifest, "loads": [f"load-{i:02d}" for i in range(1, 80)]}
    with pytest.raises(gpu_session.LimitError, match="a session has 15"):
        gpu_session.plan(many, "nvidia-h200")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/gpu_session.py"), "plan", "--kind", "tpu-v5", "--payload", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("gpu_session: error: no payload at"), proc.stderr


@pytest.mark.parametrize("name", ["open_set", "uniformity"])
def test_reproduction_stages_resolve_at_full_size(name):  # noqa: ANN001
    from gapo.repro import pipeline

    overrides, params = gpu_session.stage_params(name, "/tmp/gapo/repro/adapter")
    full = pipeline.resolve("paper")[name]
    assert params[name]["models"] == ["baseline", "gapo"]
    assert params[name]["max_new_tokens"] == full["max_new_tokens"] and params[name].get("n") == full.get("n")
    assert params["models"]["gapo"] == {"model": "embedded", "adapter": "/tmp/gapo/repro/adapter"}
    assert params["sampling"]["backend"] == "transformers"


def test_embedded_gguf_parts_are_the_model_the_offline_loader_checks() -> None:
    """The payload's GGUF: the name gapo.repro.offline looks for in its cache (read as text by the tool, which imports
    nothing of gapo) and parts that add up to the file whose size the loader checks."""
    from gapo.repro import offline

    name, parts = gpu_session.embedded_gguf()
    assert name == offline.EMBEDDED_GGUF_NAME
    assert sum(p.stat().st_size for p in parts) == offline.EMBEDDED_GGUF_SIZE
    assert set(gpu_session.TRAINING_WHEELS) < set(gpu_session.WHEELS)
    assert not any("unsloth" in spec for spec in gpu_session.TRAINING_WHEELS)


def test_no_weights_payload_brings_the_built_tiny_random_model(tmp_path):  # noqa: ANN001
    """`prepare --no-weights` packs the built tiny-random model into gapo's cache on the GPU: assembled there, it is the
    same files, and gapo resolves `tiny-random` from that cache without building it (no GGUF there)."""
    files = gpu_session.tiny_random_files()
    assert {"cache/tiny-random/model/config.json", "cache/tiny-random/model/model.safetensors"} <= set(files)
    manifest = gpu_session.pack(files, tmp_path / "payload", 4 * gpu_session.MIB)
    stage = tmp_path / "stage"
    for load in manifest["loads"]:
        gpu_session.receive(load, tmp_path / "payload", stage)
    gpu_session.assemble(stage, install=False)
    for dest, (source,) in files.items():
        assert (stage / dest).read_bytes() == source.read_bytes()
    probe = "from gapo.models import resolve_model_path; print(resolve_model_path('tiny-random'))"
    env = {**os.environ, "GAPO_CACHE": str(stage / "cache")}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(stage / "cache/tiny-random/model")
