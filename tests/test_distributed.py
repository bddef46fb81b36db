"""Scale-out on CPU: two gloo processes, under torchrun and under the shipped accelerate configs.

- Every group reward call gets one whole group, and the rewards equal those computed on whole groups by a single
  process, although stock TRL splits each group of 4 into halves of 2. Launched three ways: plain torchrun,
  `accelerate launch` with configs/accelerate/ddp.yaml, and with fsdp.yaml (FSDP2, LoRA weights sharded as DTensors;
  on CPU this needs tests/dist/two_process_rewards.py's --route-cpu-to-fsdp, see its docstring).
- `gapo train` through `accelerate launch -m gapo.cli` with ddp.yaml, docs/scaling.md's command, writes its adapter.
- Each YAML in configs/accelerate goes through accelerate's own loader and launcher code (no GPU needed for that).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gapo.rewards import frequency_aware_rewards

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).parent / "dist" / "two_process_rewards.py"
CONFIGS = ROOT / "configs" / "accelerate"
G = 4  # num_generations in the script


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_processes(cmd: list[str], timeout: int = 840) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1")
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def accelerate_launch(config: str, *script_and_args: str) -> list[str]:
    """`accelerate launch --config_file configs/accelerate/<config> --num_processes 2 ...` (docs/scaling.md)."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(CONFIGS / config),
        "--num_processes",
        "2",
        "--main_process_port",
        str(free_port()),
        *script_and_args,
    ]


def launch_command(launcher: str, out: Path) -> list[str]:
    if launcher == "torchrun":
        port = str(free_port())
        rendezvous = ["--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", port]
        return [sys.executable, "-m", "torch.distributed.run", *rendezvous, str(SCRIPT), str(out)]
    if launcher == "ddp.yaml":
        return accelerate_launch("ddp.yaml", str(SCRIPT), str(out))
    # FSDP: shared-prompt forward off, as GAPOConfig has it on CUDA (gapo.prefix does not detect FSDP2 modules yet).
    return accelerate_launch("fsdp.yaml", str(SCRIPT), str(out), "--no-shared-prompt", "--route-cpu-to-fsdp")


#: launcher -> (accelerate's distributed type, wrapper class prefix, placement of a LoRA weight on each rank)
LAYOUT = {
    "torchrun": ("MULTI_CPU", "DistributedDataParallel", None),
    "ddp.yaml": ("MULTI_CPU", "DistributedDataParallel", None),
    "fsdp.yaml": ("FSDP", "FSDP", ["Shard(dim=0)"]),
}


def whole_group_ranks(texts: list[str]) -> list[float]:
    """The script's rank_in_group reward recomputed per whole group of G, written independently (sorted order)."""
    out = []
    for start in range(0, len(texts), G):
        group = texts[start : start + G]
        order = sorted(group)
        out.extend(order.index(text) / (G - 1) for text in group)
    return out


@pytest.mark.timeout(900)
@pytest.mark.parametrize("launcher", list(LAYOUT))
def test_two_processes_see_whole_groups(tmp_path, launcher):  # noqa: ANN001
    proc = run_two_processes(launch_command(launcher, tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world_size"] == 2 for r in ranks)

    # The model is distributed the way the launcher's config says (FSDP: the LoRA weights really are sharded).
    distributed_type, wrapper, placements = LAYOUT[launcher]
    for r in ranks:
        assert r["distributed_type"] == distributed_type
        assert r["wrapper"].startswith(wrapper)
        assert r["lora_placements"] == placements

    # Stock TRL path (per-completion function): each process sees half a group.
    for r in ranks:
        assert r["per_completion_sizes"] == [2, 2]
        assert all(step["local_rows"] == 2 for step in r["steps"])
    # GAPO: the group reward runs on the main process, once per whole group of 4 with a single prompt.
    assert ranks[0]["group_calls"] == [{"size": 4, "distinct_prompts": 1}] * 2
    assert ranks[1]["group_calls"] == []
    # Both processes hold the same global rewards, equal to the single-process computation on whole groups.
    for step0, step1 in zip(ranks[0]["steps"], ranks[1]["steps"], strict=True):
        assert step0["rewards"] == step1["rewards"]
        assert step0["answers"] == step1["answers"]
        expected = frequency_aware_rewards(step0["answers"], step0["items"][0])
        assert step0["rewards"] == pytest.approx(expected)
        # A reward that changes with every member of the group and with row order: half groups would give 0 or 1.
        assert step0["texts"] == step1["texts"]
        assert step0["rank_rewards"] == step1["rank_rewards"]
        assert step0["rank_rewards"] == pytest.approx(whole_group_ranks(step0["texts"]))
        assert len(set(step0["rank_rewards"])) == G, "completions should differ; the check above would be weak"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("config", ["ddp.yaml", "fsdp.yaml"])
def test_gapo_train_under_accelerate_config(tmp_path, config):  # noqa: ANN001
    """docs/scaling.md's launch command, on CPU: two processes train, one adapter and one metrics row per step."""
    out = tmp_path / "run"
    train_args = "--no-params --model tiny-random --max-steps 1 --num-generations 4 --per-device-train-batch-size 2"
    train_args += f" --num-prompts 8 --lora-r 4 --lora-alpha 8 --max-completion-length 6 --output-dir {out}"
    if config == "ddp.yaml":
        entry = ["-m", "gapo.cli"]
    else:  # accelerate needs routing to FSDP on CPU; the shared-prompt path sees the FSDP2 wrapper and steps aside
        entry = [str(SCRIPT.parent / "gapo_cli_on_cpu_fsdp.py")]
    proc = run_two_processes(accelerate_launch(config, *entry, "train", *train_args.split()))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1]  # written by the main process only
    # The adapter is whole (not one rank's shard): it loads onto a fresh base model.
    from peft import PeftModel

    from gapo.models import load_model_and_tokenizer

    base, _ = load_model_and_tokenizer("tiny-random", device="cpu")
    PeftModel.from_pretrained(base, str(out / "adapter"))


# --------------------------------------------------------------------------------------------------------------------
# The YAML files, through accelerate's own loader and launcher code
# --------------------------------------------------------------------------------------------------------------------


def launch_args(config: str):  # noqa: ANN201
    """What `accelerate launch --config_file <config> --num_processes 8 -m gapo.cli train` resolves the file to.

    Returns (parser, args, file config). accelerate copies each key of `fsdp_config`/`deepspeed_config` onto the
    launch arguments without checking its name, so the tests check the names against the parser themselves.
    """
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    parser = launch_command_parser()
    cli = ["--config_file", str(CONFIGS / config), "--num_processes", "8", "--main_process_port", "0"]
    args = parser.parse_args([*cli, "-m", "gapo.cli", "train"])
    args, defaults, _ = _validate_launch_command(args)
    return parser, args, defaults


def unknown_keys(parser, section: dict, prefix: str = "") -> list[str]:  # noqa: ANN001
    dests = {action.dest for action in parser._actions}
    return [key for key in section if (key if key.startswith(prefix) else prefix + key) not in dests]


def test_every_config_loads_with_accelerate():
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.utils import DistributedType

    expected = {"ddp.yaml": "MULTI_GPU", "fsdp.yaml": "FSDP", "zero3.yaml": "DEEPSPEED"}
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == sorted(expected)
    for name, kind in expected.items():
        config = load_config_from_file(str(CONFIGS / name))
        assert isinstance(config, ClusterConfig)
        assert config.distributed_type == DistributedType(kind)
        assert config.mixed_precision == "bf16"  # GAPOConfig's CUDA default; a mismatch is an error under DeepSpeed


def test_ddp_config_launches_one_process_per_gpu(monkeypatch):  # noqa: ANN001
    from accelerate.utils.launch import prepare_multi_gpu_env

    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    _, args, _ = launch_args("ddp.yaml")
    env = prepare_multi_gpu_env(args)
    assert args.multi_gpu and not args.use_fsdp and not args.use_deepspeed
    assert args.nproc_per_node == "8" and args.module
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    assert "ACCELERATE_USE_FSDP" not in env


def test_fsdp_config_is_fsdp2_with_one_shard_group_per_qwen2_layer(monkeypatch):  # noqa: ANN001
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy
    from accelerate.utils.launch import prepare_multi_gpu_env
    from peft import get_peft_model

    from gapo.backends import lora_config
    from gapo.models import load_model_and_tokenizer
    from gapo.trainer import GAPOConfig

    gapo_args = GAPOConfig(output_dir="unused", num_generations=4, per_device_train_batch_size=4, lora_r=4)
    parser, args, defaults = launch_args("fsdp.yaml")
    assert unknown_keys(parser, defaults.fsdp_config, "fsdp_") == []
    env = prepare_multi_gpu_env(args)
    for key, value in env.items():
        if key.startswith(("FSDP_", "ACCELERATE_")):
            monkeypatch.setenv(key, value)
    assert env["ACCELERATE_USE_FSDP"] == "true"
    plugin = FullyShardedDataParallelPlugin()  # what the Accelerator builds in each launched process
    assert plugin.fsdp_version == 2
    assert plugin.reshard_after_forward is True
    assert "FULL_STATE_DICT" in str(plugin.state_dict_type)  # the Trainer saves a plain PEFT adapter
    assert plugin.cpu_ram_efficient_loading is False
    assert plugin.activation_checkpointing is False  # transformers refuses it with gradient checkpointing on
    assert plugin.transformer_cls_names_to_wrap == ["Qwen2DecoderLayer"]

    # The wrap policy, resolved as accelerate's FSDP2 preparation does, on a Qwen2 model with GAPO's LoRA.
    base, _ = load_model_and_tokenizer("tiny-random", device="cpu")
    model = get_peft_model(base, lora_config(gapo_args))
    plugin.set_auto_wrap_policy(model)
    policy = fsdp2_prepare_auto_wrap_policy(plugin, model)
    layers = [module for module in model.modules() if policy(module)]
    assert len(layers) == base.config.num_hidden_layers
    in_layers = {id(p) for layer in layers for p in layer.parameters()}
    lora = [p for name, p in model.named_parameters() if "lora_" in name]
    assert lora and all(id(p) in in_layers for p in lora)


def test_zero3_config_is_zero_stage_3_with_16bit_save():
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    parser, args, defaults = launch_args("zero3.yaml")
    assert unknown_keys(parser, defaults.deepspeed_config) == []
    assert args.use_deepspeed
    args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)  # as `launch_command` does
    _, env = prepare_deepspeed_cmd_env(args)
    assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
    assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    assert env["ACCELERATE_DEEPSPEED_ZERO3_INIT"] == "true"
    assert env["ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"] == "true"
    # Left to the Trainer ("auto"), so they always match the TrainConfig.
    assert "ACCELERATE_GRADIENT_ACCUMULATION_STEPS" not in env
    assert "ACCELERATE_GRADIENT_CLIPPING" not in env


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is not None, reason="deepspeed is installed")
def test_zero3_without_deepspeed_says_how_to_install_it(tmp_path):  # noqa: ANN001
    proc = run_two_processes(accelerate_launch("zero3.yaml", "-m", "gapo.cli", "train", "--help"), timeout=120)
    assert proc.returncode != 0
    assert "DeepSpeed is not installed => run `pip3 install deepspeed`" in proc.stderr
